import FoundationEssentials

/// An amount of disk space: bytes, or a percentage of the filesystem's size.
public enum SpaceAmount: Sendable, Equatable, Codable, CustomStringConvertible {
    case bytes(Int64)
    case percent(Double)

    /// The amount in bytes on a filesystem of `totalBytes`.
    public func bytes(ofTotal totalBytes: Int64) -> Int64 {
        switch self {
        case .bytes(let bytes): bytes
        case .percent(let percent): Int64((Double(totalBytes) * percent / 100).rounded(.up))
        }
    }

    public var isZero: Bool {
        switch self {
        case .bytes(let bytes): bytes == 0
        case .percent(let percent): percent == 0
        }
    }

    public var description: String {
        switch self {
        case .bytes(let bytes): SpaceAmount.describe(bytes: bytes)
        case .percent(let percent): "\(percent)%"
        }
    }

    /// Reads `64 MiB`, `2GB`, `1048576`, `5%`: binary (KiB, MiB, GiB, TiB) or decimal (kB, MB,
    /// GB, TB) units, or a percentage of the filesystem (0 to 100). Nil for anything else.
    public init?(parsing text: String) {
        let trimmed = text.trimmingWhitespace()
        if trimmed.hasSuffix("%") {
            guard let percent = Double(trimmed.dropLast().trimmingWhitespace()), percent >= 0, percent <= 100 else { return nil }
            self = .percent(percent)
            return
        }
        let digits = trimmed.prefix { $0.isNumber || $0 == "." }
        let unit = trimmed.dropFirst(digits.count).trimmingWhitespace()
        let multipliers: [String: Double] = [
            "": 1, "B": 1, "KiB": 1024, "MiB": 1_048_576, "GiB": 1_073_741_824, "TiB": 1_099_511_627_776,
            "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
        ]
        guard let number = Double(digits), let multiplier = multipliers[unit] else { return nil }
        let bytes = number * multiplier
        guard bytes.isFinite, bytes < 9e18 else { return nil }
        self = .bytes(Int64(bytes.rounded()))
    }

    /// `1.5 GiB`, `640 KiB`, `12 B`.
    public static func describe(bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while abs(value) >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(bytes) B" }
        let tenths = (value * 10).rounded() / 10
        let text = tenths == tenths.rounded() ? String(Int(tenths)) : String(tenths)
        return text + " " + units[unit]
    }
}

/// The space guard: what must stay free on the recordings' filesystem.
public struct StorageSettings: Sendable, Equatable {
    /// Below this, `start` is refused (`insufficientSpace`), and a recording under way ends,
    /// its file finalized, unless retention can free space. Zero turns the guard off.
    public var minimumFree: SpaceAmount
    /// Below this, `warning` says so (`lowDiskSpace`). Zero: never.
    public var warningFree: SpaceAmount
    /// Seconds between two free-space checks (statvfs) while the daemon runs.
    public var checkInterval: Double

    public static let defaultMinimumFree = SpaceAmount.bytes(64 << 20)
    public static let defaultWarningFree = SpaceAmount.bytes(1 << 30)

    public init(minimumFree: SpaceAmount = StorageSettings.defaultMinimumFree,
                warningFree: SpaceAmount = StorageSettings.defaultWarningFree, checkInterval: Double = 1) {
        self.minimumFree = minimumFree
        self.warningFree = warningFree
        self.checkInterval = checkInterval
    }
}

/// Which finished recordings recd deletes by itself, oldest first. Off when no limit is set.
public struct RetentionSettings: Sendable, Equatable {
    /// Recordings that started longer ago than this many seconds are deleted.
    public var maximumAge: Double?
    /// The finished recordings together take at most this many bytes.
    public var maximumTotalBytes: Int64?
    /// Recordings are deleted while less than this is free on the filesystem.
    public var keepFree: SpaceAmount?
    /// Seconds between two retention passes besides those when a file closes.
    public var interval: Double
    /// Seconds during which retention deletes nothing after the recorder starts or these
    /// settings change: what is due meanwhile is announced (logged at warning level, and in
    /// the storage status as due at the end of the grace) so that a mistaken limit can be
    /// undone before a backlog of recordings goes at once. Deleting to keep
    /// `[storage] minimum_free` never waits. 0: no grace.
    public var grace: Double

    public init(maximumAge: Double? = nil, maximumTotalBytes: Int64? = nil, keepFree: SpaceAmount? = nil, interval: Double = 60,
                grace: Double = 600) {
        self.maximumAge = maximumAge
        self.maximumTotalBytes = maximumTotalBytes
        self.keepFree = keepFree
        self.interval = interval
        self.grace = grace
    }

    /// Whether retention deletes anything at all.
    public var isEnabled: Bool { maximumAge != nil || maximumTotalBytes != nil || keepFree != nil }
}

/// Why retention deleted (or would delete) a recording.
public enum RetentionReason: String, Sendable, Codable, CaseIterable {
    /// Older than `[retention] max_age`.
    case maximumAge
    /// The recordings together exceeded `[retention] max_total_size`.
    case maximumTotalSize
    /// Less than `[retention] keep_free` was free.
    case keepFree
    /// Free space reached `[storage] minimum_free` while recording.
    case minimumFree
}

/// One file retention deleted: published on the `retention` topic and logged.
public struct RetentionDeletion: Sendable, Equatable, Codable {
    /// The path below the recordings directory.
    public var file: String
    public var path: String
    /// Bytes the file held.
    public var size: Int64
    /// When the recording (segment) started: what "oldest" is measured by.
    public var startedAt: Date
    public var reason: RetentionReason
    /// Free bytes on the filesystem after the deletion.
    public var freeBytes: Int64
    /// When it was deleted.
    public var deletedAt: Date

    public init(file: String, path: String, size: Int64, startedAt: Date, reason: RetentionReason, freeBytes: Int64,
                deletedAt: Date) {
        self.file = file
        self.path = path
        self.size = size
        self.startedAt = startedAt
        self.reason = reason
        self.freeBytes = freeBytes
        self.deletedAt = deletedAt
    }
}

/// A finished recording retention would delete: now (`reason` set) or, being the oldest, next.
public struct RetentionCandidate: Sendable, Equatable, Codable {
    public var file: String
    public var size: Int64
    public var startedAt: Date
    /// Why it is due now; nil when no limit is reached yet and it is only the next in line.
    public var reason: RetentionReason?
    /// With `max_age`: when it becomes due by age.
    public var dueAt: Date?

    public init(file: String, size: Int64, startedAt: Date, reason: RetentionReason?, dueAt: Date?) {
        self.file = file
        self.size = size
        self.startedAt = startedAt
        self.reason = reason
        self.dueAt = dueAt
    }
}

/// The recordings' filesystem: free and used space, the guard's levels, and what retention
/// deletes next. In `status` and `recordings.list`.
public struct StorageStatus: Sendable, Equatable, Codable {
    /// Bytes an unprivileged writer can still use (statvfs f_bavail × f_frsize).
    public var freeBytes: Int64
    /// The filesystem's size (f_blocks × f_frsize).
    public var totalBytes: Int64
    /// Bytes the finished recordings take, and how many there are (as of the last scan).
    public var recordingsBytes: Int64
    public var recordingsCount: Int
    /// The guard's levels in bytes (0: off).
    public var minimumFreeBytes: Int64
    public var warningFreeBytes: Int64
    /// Whether retention is configured.
    public var retention: Bool
    /// What retention would delete next, oldest first: every file due now, or else the
    /// oldest one (without a reason). Empty with retention off or nothing to delete.
    public var retentionNext: [RetentionCandidate]

    public init(freeBytes: Int64, totalBytes: Int64, recordingsBytes: Int64, recordingsCount: Int, minimumFreeBytes: Int64,
                warningFreeBytes: Int64, retention: Bool, retentionNext: [RetentionCandidate]) {
        self.freeBytes = freeBytes
        self.totalBytes = totalBytes
        self.recordingsBytes = recordingsBytes
        self.recordingsCount = recordingsCount
        self.minimumFreeBytes = minimumFreeBytes
        self.warningFreeBytes = warningFreeBytes
        self.retention = retention
        self.retentionNext = retentionNext
    }
}
