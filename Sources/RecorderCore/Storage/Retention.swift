import FoundationEssentials
import Glibc
import Logging
import RecorderModel

/// Free space on a filesystem, as statvfs(3) gives it.
public struct FileSystemSpace: Sendable, Equatable {
    /// What an unprivileged writer can still use: f_bavail × f_frsize (root's reserve excluded).
    public var freeBytes: Int64
    /// f_blocks × f_frsize.
    public var totalBytes: Int64

    public init(freeBytes: Int64, totalBytes: Int64) {
        self.freeBytes = freeBytes
        self.totalBytes = totalBytes
    }

    /// The filesystem holding `path`, or, while `path` does not exist yet, its nearest
    /// existing parent. Nil if statvfs fails.
    public static func measure(_ path: String) -> FileSystemSpace? {
        var candidate = path.isEmpty ? "." : path
        while true {
            var info = statvfs()
            if statvfs(candidate, &info) == 0 {
                let fragment = Int64(info.f_frsize)
                return FileSystemSpace(freeBytes: Int64(info.f_bavail) * fragment, totalBytes: Int64(info.f_blocks) * fragment)
            }
            guard errno == ENOENT, candidate != "/", candidate != "." else { return nil }
            guard let slash = candidate.lastIndex(of: "/") else { candidate = "."; continue }
            candidate = slash == candidate.startIndex ? "/" : String(candidate[..<slash])
        }
    }
}

extension RecordingLibrary.Entry {
    /// When the recording (segment) started: what retention's "oldest first" and `max_age` go
    /// by. The start the file records (or recd's session log), so that copying or touching a
    /// file does not change it; for a file that says nothing, its last modification less its
    /// duration.
    public var retentionStart: Date {
        startedAt ?? modified.addingTimeInterval(-info.duration)
    }
}

/// What retention deletes: pure planning over a listing, so that `status` can show it and a
/// pass can do it.
public enum RetentionPlan {
    /// The finished recordings due for deletion, oldest first, each with the first limit it
    /// breaks, given the free space now. `needFree`: also delete the oldest until this many
    /// bytes are free (the space guard reaching its minimum while recording).
    public static func due(_ entries: [RecordingLibrary.Entry], settings: RetentionSettings, space: FileSystemSpace,
                           now: Date = Date(), needFree: Int64? = nil) -> [(entry: RecordingLibrary.Entry, reason: RetentionReason)] {
        let ordered = oldestFirst(entries)
        var total = ordered.reduce(Int64(0)) { $0 + $1.size }
        var free = space.freeBytes
        let keepFree = settings.keepFree?.bytes(ofTotal: space.totalBytes)
        var due: [(entry: RecordingLibrary.Entry, reason: RetentionReason)] = []
        for entry in ordered {
            let reason: RetentionReason
            // A start the clock did not vouch for (a file of a boot that never synchronized) is
            // no age: a step of the clock must never make a file look old enough to delete.
            if let maximumAge = settings.maximumAge, entry.startClock != .unsynchronized,
               entry.retentionStart < now.addingTimeInterval(-maximumAge) {
                reason = .maximumAge
            } else if let maximum = settings.maximumTotalBytes, total > maximum {
                reason = .maximumTotalSize
            } else if let keepFree, free < keepFree {
                reason = .keepFree
            } else if let needFree, free < needFree {
                reason = .minimumFree
            } else if entry.startClock == .unsynchronized {
                // Its start says nothing of its age: the files after it may still be too old.
                continue
            } else {
                // Oldest first: no later file breaks a limit this one does not.
                break
            }
            due.append((entry, reason))
            total -= entry.size
            free += entry.size
        }
        return due
    }

    /// A station of several sources' files due (each source's listing a group), fairly: files
    /// past `maximumAge` from every source, as one source's would be; then, while a size limit
    /// holds (`maximumTotalBytes` over all of them, `keepFree`, `needFree`), the oldest of the
    /// source that holds the most bytes, so that a busy source never deletes a quiet one's
    /// recordings before its own. One group is `due(_:…)` exactly.
    public static func due(groups: [[RecordingLibrary.Entry]], settings: RetentionSettings, space: FileSystemSpace,
                           now: Date = Date(), needFree: Int64? = nil) -> [(entry: RecordingLibrary.Entry, reason: RetentionReason)] {
        if groups.count == 1 { return due(groups[0], settings: settings, space: space, now: now, needFree: needFree) }
        var queues = groups.map { oldestFirst($0) }
        var totals = groups.map { $0.reduce(Int64(0)) { $0 + $1.size } }
        var free = space.freeBytes
        var due: [(entry: RecordingLibrary.Entry, reason: RetentionReason)] = []
        if let maximumAge = settings.maximumAge {
            let oldest = now.addingTimeInterval(-maximumAge)
            for index in queues.indices {
                // Oldest first, up to the first file the clock vouches is younger; a start the
                // clock did not vouch for is no age (see `due(_:…)`).
                var kept: [RecordingLibrary.Entry] = []
                var younger = false
                for entry in queues[index] {
                    if !younger, entry.startClock != .unsynchronized, entry.retentionStart < oldest {
                        due.append((entry, .maximumAge))
                        totals[index] -= entry.size
                        free += entry.size
                    } else {
                        if entry.startClock != .unsynchronized { younger = true }
                        kept.append(entry)
                    }
                }
                queues[index] = kept
            }
        }
        let keepFree = settings.keepFree?.bytes(ofTotal: space.totalBytes)
        while true {
            let reason: RetentionReason
            if let maximum = settings.maximumTotalBytes, totals.reduce(0, +) > maximum {
                reason = .maximumTotalSize
            } else if let keepFree, free < keepFree {
                reason = .keepFree
            } else if let needFree, free < needFree {
                reason = .minimumFree
            } else {
                break
            }
            guard let index = queues.indices.filter({ !queues[$0].isEmpty }).max(by: { totals[$0] < totals[$1] }) else { break }
            let entry = queues[index].removeFirst()
            due.append((entry, reason))
            totals[index] -= entry.size
            free += entry.size
        }
        return due
    }

    /// What `status` shows: every file due now, or else the oldest (the next to go).
    public static func outlook(_ entries: [RecordingLibrary.Entry], settings: RetentionSettings,
                               space: FileSystemSpace, now: Date = Date()) -> [RetentionCandidate] {
        guard settings.isEnabled else { return [] }
        let due = due(entries, settings: settings, space: space, now: now)
        if !due.isEmpty {
            return due.map { candidate($0.entry, reason: $0.reason, settings: settings) }
        }
        return oldestFirst(entries).first.map { [candidate($0, reason: nil, settings: settings)] } ?? []
    }

    static func oldestFirst(_ entries: [RecordingLibrary.Entry]) -> [RecordingLibrary.Entry] {
        entries.sorted { ($0.retentionStart, $0.file) < ($1.retentionStart, $1.file) }
    }

    static func candidate(_ entry: RecordingLibrary.Entry, reason: RetentionReason?,
                                  settings: RetentionSettings) -> RetentionCandidate {
        RetentionCandidate(file: entry.file, size: entry.size, startedAt: entry.retentionStart, reason: reason,
                           dueAt: settings.maximumAge.map { entry.retentionStart.addingTimeInterval($0) })
    }
}

extension RecordingLibrary {
    /// The finished recordings retention may delete: recd's formats, read as audio, below the
    /// directory (segment folders included), never a `.part`, a link or a hidden file, and
    /// never `activeFile` (the recording being written, by its final path).
    func retainable(excluding activeFile: String?) -> [Entry] {
        list().filter { $0.path != activeFile }
    }

    /// Deletes one file retention chose, after checking it is still a regular file (not
    /// replaced by a link since it was listed). Returns the errno on failure.
    static func deleteForRetention(_ path: String) -> Int32? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return errno }
        guard info.st_mode & S_IFMT == S_IFREG, !path.hasSuffix(".part") else { return EPERM }
        return unlink(path) == 0 ? nil : errno
    }
}
