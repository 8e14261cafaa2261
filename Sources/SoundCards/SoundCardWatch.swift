import Dispatch
import Glibc

/// Tells when the sound devices may have changed, without a timer: inotify on `/dev/snd`
/// (a node created or removed, or its attributes changed: udev sets the group after creating
/// it, and an open before that fails with EACCES), on `/dev` until `snd/` exists, on udev's
/// links, and on udev's database (`+sound:cardN` written when udev is done with a card).
/// Netlink would be the usual way, but recd.service has `PrivateNetwork=yes`.
///
/// `changed` runs on `queue` once per batch of events that concern sound cards. Nothing wakes
/// the process while nothing changes.
public final class SoundCardWatch: @unchecked Sendable {
    private let roots: SystemRoots
    private let descriptor: Int32
    private let source: DispatchSourceRead
    /// Watch descriptor → the directory it watches. Only touched on `queue`.
    private var watched: [Int32: String] = [:]

    /// nil when inotify is not available (then the caller tries again on a timer).
    public init?(roots: SystemRoots, queue: DispatchQueue, changed: @escaping @Sendable () -> Void) {
        let descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { return nil }
        let devWatch = inotify_add_watch(descriptor, roots.dev, Self.directoryEvents)
        guard devWatch >= 0 else {
            close(descriptor)
            return nil
        }
        self.roots = roots
        self.descriptor = descriptor
        watched[devWatch] = roots.dev
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        source.setCancelHandler { close(descriptor) }
        addSoundDirectories()
        add(roots.udevData, UInt32(IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE))
        source.setEventHandler { [weak self] in
            guard let self else { return }
            if self.drain() { changed() }
        }
        source.resume()
    }

    deinit { source.cancel() }

    public func cancel() { source.cancel() }

    /// Node creation and removal, renames (udev's links) and attribute changes (the group).
    static let nodeEvents = UInt32(IN_CREATE | IN_DELETE | IN_ATTRIB | IN_MOVED_TO | IN_MOVED_FROM)
    static let directoryEvents = UInt32(IN_CREATE | IN_MOVED_TO)

    @discardableResult
    private func add(_ path: String, _ mask: UInt32) -> Bool {
        let watch = inotify_add_watch(descriptor, path, mask)
        guard watch >= 0 else { return false }
        watched[watch] = path
        return true
    }

    /// /dev/snd and udev's link directories, those that exist (again: after a removal the
    /// kernel drops the watch).
    private func addSoundDirectories() {
        let snd = roots.dev + "/snd"
        let present = Set(watched.values)
        if !present.contains(snd) { add(snd, Self.nodeEvents) }
        for links in [snd + "/by-id", snd + "/by-path"] where !present.contains(links) {
            add(links, Self.nodeEvents)
        }
    }

    /// Reads every pending event; whether any concerns sound cards.
    private func drain() -> Bool {
        var relevant = false
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            var offset = 0
            // struct inotify_event: wd, mask, cookie, len, then len bytes of name.
            while offset + 16 <= count {
                let (watch, mask, length) = buffer.withUnsafeBytes { bytes in
                    (bytes.loadUnaligned(fromByteOffset: offset, as: Int32.self),
                     bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self),
                     Int(bytes.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)))
                }
                let nameBytes = buffer[(offset + 16)..<min(count, offset + 16 + length)].prefix { $0 != 0 }
                let name = String(decoding: nameBytes, as: UTF8.self)
                offset += 16 + length
                if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                    // Events were lost: what changed is not known, so it counts as a change.
                    relevant = true
                    continue
                }
                if mask & UInt32(IN_IGNORED) != 0 {
                    watched[watch] = nil
                    continue
                }
                guard let directory = watched[watch] else { continue }
                if concerns(directory: directory, name: name, mask: mask) { relevant = true }
            }
        }
        // A directory that appeared (/dev/snd, by-id) is watched from now on: what was created
        // in it before the watch counts as a change (`relevant` is set by its creation).
        addSoundDirectories()
        return relevant
    }

    private func concerns(directory: String, name: String, mask: UInt32) -> Bool {
        if directory == roots.dev { return name == "snd" }
        if directory == roots.udevData { return name.hasPrefix("+sound:card") }
        return true
    }
}
