import FoundationEssentials
import Glibc
import SystemPackage

/// Reading recd's files: the configuration, and the secrets it names (MQTT's password, the
/// web's tokens).
public enum ConfigurationFile {
    /// A file's UTF-8 text, or a configuration error that says why it cannot be read.
    /// Read to its end whatever it is: a regular file, /dev/null (empty: all defaults), a pipe.
    public static func readText(_ path: String, key: String?) throws(ConfigurationError) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw ConfigurationError(file: path, line: nil, key: key, message: "cannot be read: \(Errno(rawValue: errno))")
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else {
                throw ConfigurationError(file: path, line: nil, key: key, message: "cannot be read: \(Errno(rawValue: errno))")
            }
            if count == 0 { break }
            bytes += chunk[..<count]
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigurationError(file: path, line: nil, key: key, message: "cannot be read: not UTF-8 text")
        }
        return text
    }

    /// Checks a file that holds secrets (the web's tokens, its TLS key), as ssh checks a
    /// private key: refused when any of the `forbidden` mode bits is set (`advice` says what
    /// to do), or when `ownedByReader` and it belongs to someone else than the reader or root.
    public static func checkSecret(_ path: String, key: String, forbidden: mode_t, who: String, advice: String,
                                   ownedByReader: Bool) throws(ConfigurationError) {
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw ConfigurationError(file: path, line: nil, key: key, message: "cannot be read: \(Errno(rawValue: errno))")
        }
        if status.st_mode & forbidden != 0 {
            throw ConfigurationError(file: path, line: nil, key: key,
                                     message: "may be read by \(who) (mode \(String(status.st_mode & 0o777, radix: 8))): \(advice)")
        }
        if ownedByReader, status.st_uid != 0, status.st_uid != geteuid() {
            throw ConfigurationError(file: path, line: nil, key: key, message: "belongs to uid \(status.st_uid), not to this user or root")
        }
    }
}

extension DaemonConfiguration {
    /// `--system`, `--user` or neither: the system instance for root, a user's otherwise.
    public static func mode(system: Bool, user: Bool) -> Mode {
        system ? .system : user ? .user : (getuid() == 0 ? .system : .user)
    }

    /// The mode's defaults, then the file: `path`, which must exist, or the mode's own
    /// recd.toml, whose absence means all defaults. recd and recd-web read it alike.
    public static func load(mode: Mode, path: String?, environment: [String: String]) throws(ConfigurationError) -> DaemonConfiguration {
        var configuration = defaults(for: mode, environment: environment)
        let file = path ?? defaultConfigPath(for: mode, environment: environment)
        if access(file, F_OK) == 0 {
            try configuration.apply(toml: try ConfigurationFile.readText(file, key: nil), file: file)
        } else if path != nil {
            throw ConfigurationError(file: file, line: nil, key: nil, message: "no such file")
        }
        // What recd runs, recd-web shows and recd-rtsp announces: the one source's settings.
        configuration.adoptTheOnlySource()
        return configuration
    }
}
