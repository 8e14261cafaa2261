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
    /// file exists (a user instance is running), else the system instance's.
    public static func forClient(environment: [String: String], uid: uid_t = getuid(),
                                 exists: (String) -> Bool = { FileManager.default.fileExists(atPath: $0) }) -> String {
        if let path = environment["RECD_SOCKET"], !path.isEmpty { return path }
        let user = user(environment: environment, uid: uid)
        return exists(user) ? user : system
    }
}
