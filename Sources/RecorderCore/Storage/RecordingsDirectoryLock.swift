import Glibc
import SystemPackage

/// One recd per recordings directory: an exclusive `flock` on `<directory>/.recd.lock`, held
/// for the daemon's lifetime and released by the kernel however the process ends. The file
/// holds the holder's pid, so a second daemon can say who is in the way.
///
/// Take it before touching any file in the directory: another daemon's `.part` files are
/// recordings in progress, not crash leftovers.
public final class RecordingsDirectoryLock: Sendable {
    public static let fileName = ".recd.lock"

    public enum Failure: Error, CustomStringConvertible {
        /// Another process holds the lock; its pid, if it wrote one.
        case held(directory: String, pid: Int32?)
        case cannotLock(directory: String, Errno)

        public var description: String {
            switch self {
            case .held(let directory, let pid):
                "another recd" + (pid.map { " (pid \($0))" } ?? "") + " records into \(directory); "
                    + "stop it or give this one another recordings directory"
            case .cannotLock(let directory, let error) where error == .permissionDenied || error == .notPermitted:
                "the recordings directory \(directory) is not writable by user \(RecordingsDirectoryLock.userName()) (uid \(getuid())): "
                    + "\(error). Give that user write access to it, or set recordings_dir (--recordings-dir) "
                    + "to a directory it may write"
            case .cannotLock(let directory, let error):
                "cannot use the recordings directory \(directory): \(error)"
            }
        }
    }

    private let descriptor: Int32

    /// The name of the user recd runs as, or its uid when it has none.
    static func userName() -> String {
        guard let entry = getpwuid(getuid()), let name = entry.pointee.pw_name else { return "\(getuid())" }
        return String(cString: name)
    }

    public init(directory: String) throws(Failure) {
        if let error = Directories.make(directory) { throw .cannotLock(directory: directory, Errno(rawValue: error)) }
        let path = directory + "/" + Self.fileName
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard descriptor >= 0 else { throw .cannotLock(directory: directory, Errno(rawValue: errno)) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let error = Errno(rawValue: errno)
            defer { close(descriptor) }
            guard error == .wouldBlock else { throw .cannotLock(directory: directory, error) }
            var bytes = [UInt8](repeating: 0, count: 32)
            let count = pread(descriptor, &bytes, bytes.count, 0)
            let text = String(decoding: bytes.prefix(max(0, count)), as: UTF8.self)
            throw .held(directory: directory, pid: Int32(text.filter(\.isNumber)))
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(descriptor, 0)
        _ = pwrite(descriptor, pid, pid.count, 0)
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }
}
