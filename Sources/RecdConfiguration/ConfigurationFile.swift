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

}
