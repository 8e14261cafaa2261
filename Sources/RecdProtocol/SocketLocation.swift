import FoundationEssentials
import Glibc

/// Where recd listens by default and where clients look for it: one rule, used by recd and by
/// every client in this package (doc/protocol.md, "How clients find the socket"), so that a
/// client finds the daemon it would have started.
public enum SocketLocation {
    /// The system instance's socket (`recd --system`, recd.socket).
    public static let system = "/run/recd/recd.sock"

    /// The user instance's socket: `$XDG_RUNTIME_DIR/recd/recd.sock`, or
    /// `/tmp/recd-<uid>/recd/recd.sock` when `XDG_RUNTIME_DIR` is unset or empty (after `su`,
    /// in a cron job, over some ssh set-ups).
    public static func user(environment: [String: String], uid: uid_t = getuid()) -> String {
        userRuntimeDirectory(environment: environment, uid: uid) + "/recd/recd.sock"
    }

    /// `$XDG_RUNTIME_DIR`, or `/tmp/recd-<uid>` in its absence.
    public static func userRuntimeDirectory(environment: [String: String], uid: uid_t = getuid()) -> String {
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty { return runtime }
        return "/tmp/recd-\(uid)"
    }

    /// Where a client connects: `RECD_SOCKET` if set, else the user instance's socket when that
    /// file exists (a user instance is running), else the system instance's. The `/tmp`
    /// fallback counts only when its directory is the user's own and private: anyone can create
    /// `/tmp/recd-0`, and root's `recctl stop` must not talk to whoever did.
    public static func forClient(environment: [String: String], uid: uid_t = getuid(),
                                 exists: (String) -> Bool = { FileManager.default.fileExists(atPath: $0) }) -> String {
        if let path = environment["RECD_SOCKET"], !path.isEmpty { return path }
        let user = user(environment: environment, uid: uid)
        let runtime = userRuntimeDirectory(environment: environment, uid: uid)
        let trusted = runtime != fallbackDirectory(uid: uid) || isPrivateDirectory(runtime, uid: uid)
        return trusted && exists(user) ? user : system
    }

    static func fallbackDirectory(uid: uid_t) -> String { "/tmp/recd-\(uid)" }

    /// Whether `path` is a directory itself (not a link), owned by `uid`, that no one else may
    /// write to: what the `/tmp` fallback must be before a daemon listens there or a client trusts it.
    public static func isPrivateDirectory(_ path: String, uid: uid_t = getuid()) -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0 else { return false }
        return info.st_mode & S_IFMT == S_IFDIR && info.st_uid == uid && info.st_mode & 0o022 == 0
    }

    /// Creates the `/tmp` fallback (mode 0700) if the user socket is under it, and refuses one
    /// another user made or anyone may write to. nil when fine, else why not.
    public static func prepareFallback(for socketPath: String, uid: uid_t = getuid()) -> String? {
        let directory = fallbackDirectory(uid: uid)
        guard socketPath.hasPrefix(directory + "/") else { return nil }
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            return "cannot create \(directory): \(String(cString: strerror(errno)))"
        }
        guard isPrivateDirectory(directory, uid: uid) else {
            return "\(directory) is not a private directory of uid \(uid) (another user's, a link, or writable by others); remove it or set XDG_RUNTIME_DIR"
        }
        return nil
    }
}
