import Glibc

/// Where the kernel's and udev's views of the sound cards are: `/sys`, `/dev` and udev's
/// database. A parameter so that tests can build a machine's worth of cards in a directory
/// (`RECD_SYSTEM_ROOT`): the same code reads both.
public struct SystemRoots: Sendable, Equatable {
    public var sys: String
    public var dev: String
    /// udev's database of devices (`/run/udev/data`): `+sound:cardN` says when udev is done
    /// with a card (`SOUND_INITIALIZED`).
    public var udevData: String

    public init(sys: String = "/sys", dev: String = "/dev", udevData: String = "/run/udev/data") {
        self.sys = sys
        self.dev = dev
        self.udevData = udevData
    }

    public static let live = SystemRoots()

    /// The live roots, or under `RECD_SYSTEM_ROOT=DIR` (tests): DIR/sys, DIR/dev, DIR/run/udev/data.
    public static func from(environment: [String: String]) -> SystemRoots {
        guard let root = environment["RECD_SYSTEM_ROOT"], root.hasPrefix("/") else { return .live }
        return SystemRoots(sys: root + "/sys", dev: root + "/dev", udevData: root + "/run/udev/data")
    }

    /// `path` as written by a user (`/dev/snd/by-id/…`) under these roots.
    func devicePath(_ path: String) -> String {
        path.hasPrefix("/dev/") ? dev + path.dropFirst(4) : path
    }
}

/// The few file-system reads the card scan needs, without Foundation.
enum FileSystem {
    /// A sysfs attribute's text without its trailing newline; nil when it does not exist.
    static func attribute(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += buffer[0..<count]
            if bytes.count > 65536 { break }
        }
        var text = String(decoding: bytes, as: UTF8.self)
        while text.last == "\n" || text.last == " " { text.removeLast() }
        return text
    }

    /// The names in a directory (not `.` and `..`); empty when it cannot be read.
    static func entries(_ path: String) -> [String] {
        guard let directory = opendir(path) else { return [] }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// The path with every symbolic link followed; nil when it does not exist.
    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// A symbolic link's target as written; nil when `path` is not a link.
    static func linkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4097)
        let count = readlink(path, &buffer, 4096)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }
}

extension String {
    /// The last path component.
    var lastComponent: String { split(separator: "/").last.map(String.init) ?? self }
    /// The path without its last component.
    var parentPath: String {
        guard let slash = lastIndex(of: "/"), slash != startIndex else { return "/" }
        return String(self[..<slash])
    }
}
