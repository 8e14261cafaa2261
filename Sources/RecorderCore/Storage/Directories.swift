import FoundationEssentials
import Glibc
import SystemPackage

/// Directories as the recorder makes and syncs them.
public enum Directories {
    /// Makes a rename durable: fsync the directory that holds the entry.
    static func sync(containing path: String) {
        let directory = FilePath(path).removingLastComponent().string
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    static func reason(_ errnoValue: Int32) -> String { String(cString: strerror(errnoValue)) }

    /// `mkdir -p`; returns the errno of the step that failed, nil on success.
    public static func make(_ path: String) -> Int32? {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o755) != 0 {
                let error = errno
                var info = stat()
                guard error == EEXIST, stat(prefix, &info) == 0 else { return error }
                guard info.st_mode & S_IFMT == S_IFDIR else { return ENOTDIR }
            }
        }
        return nil
    }
}
