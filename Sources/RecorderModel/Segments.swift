import FoundationEssentials

/// How one recording (a session) is cut into consecutive files. The files, concatenated, hold
/// exactly the captured frames.
public struct SegmentSettings: Sendable, Equatable, Codable {
    /// Seconds per file; nil: one file until `split`, a lost device or the end.
    public var length: Double?
    /// Cut at whole multiples of `length` counted from midnight (3600: files start at hh:00:00).
    public var alignToClock: Bool
    /// The file's path below the recordings directory, without extension: strftime fields
    /// (%Y, %m, %d, %H, %M, %S, %z ...), `{name}` (the recording's name) and `{n}` (the segment's
    /// number in the session, from 1). nil: `defaultTemplate(for:)`.
    public var template: String?
    /// Expand the template's time fields (and count clock alignment from midnight) in local
    /// time instead of UTC.
    public var localTime: Bool

    public init(length: Double? = nil, alignToClock: Bool = false, template: String? = nil, localTime: Bool = false) {
        self.length = length
        self.alignToClock = alignToClock
        self.template = template
        self.localTime = localTime
    }

    /// One file per recording, named after it.
    public static let single = "{name}"
    /// Segments in UTC: `NAME/2026-11-22/20261122T140000Z`, safe across DST changes.
    public static let utcSegments = "{name}/%Y-%m-%d/%Y%m%dT%H%M%SZ"
    /// Segments in local time, with the UTC offset so that names stay unique across DST changes.
    public static let localSegments = "{name}/%Y-%m-%d/%Y%m%dT%H%M%S%z"

    /// The template in effect: the given one, or one file per recording when unsegmented, or
    /// one dated directory per day when segmented.
    public var effectiveTemplate: String {
        if let template { return template }
        if length == nil { return Self.single }
        return localTime ? Self.localSegments : Self.utcSegments
    }

    /// Checks what can be checked before recording.
    public func validate() throws(RecorderError) {
        func invalid(_ reason: String) -> RecorderError { RecorderError(.invalidSettings, reason) }
        if let length, !(length >= 1 && length <= 86400 && length.isFinite) {
            throw invalid("segment length \(length) is outside 1...86400 seconds")
        }
        if alignToClock, length == nil {
            throw invalid("aligning segments to the clock needs a segment length")
        }
        if let template {
            if template.isEmpty { throw invalid("the file name template is empty") }
            if template.hasPrefix("/") { throw invalid("the file name template must be relative to the recordings directory") }
            for component in template.split(separator: "/", omittingEmptySubsequences: false) {
                if component.isEmpty || component == "." || component == ".." || component.hasPrefix(".") {
                    throw invalid("the file name template \(String(reflecting: template)) has an empty, hidden, '.' or '..' component")
                }
            }
        }
    }
}

/// A stretch of wall-clock time in which nothing was recorded: the device was gone, or audio
/// was lost (the device overran, or the disk fell behind by more than the write buffer).
public struct Gap: Sendable, Equatable, Codable {
    /// When capture stopped.
    public var start: Date
    /// When capture continued: the next segment's first frame (at first, until that arrives,
    /// when the device opened again); nil while the device is still away.
    public var end: Date?
    /// Where in the recording it falls: the frames (file rate) recorded before it.
    public var position: Int64
    /// Why capture stopped.
    public var error: RecorderError

    public init(start: Date, end: Date? = nil, position: Int64, error: RecorderError) {
        self.start = start
        self.end = end
        self.position = position
        self.error = error
    }

    /// Seconds without capture (until now while open).
    public var duration: Double { (end ?? Date()).timeIntervalSince(start) }
}

/// Why a segment ended.
public enum SegmentEnd: String, Sendable, Codable, CaseIterable {
    /// It reached the segment length (or the clock boundary).
    case length
    /// A client asked (`split`).
    case split
    /// The device went away; the next segment follows when it is back.
    case deviceLost
    /// Audio was lost (the device overran, or the disk fell behind by more than the write
    /// buffer): the file ends at the last frame before the gap, and the next begins with the
    /// first frame after it, at its true time.
    case gap
    /// The recording ended (stop, duration reached, failure).
    case end
    /// A triggered recording's event ended by itself (its sound, then the hang); one the
    /// recording's stop ended says `end`.
    case event
}

/// One file of a session.
public struct Segment: Sendable, Equatable, Codable {
    /// The session (recording) it belongs to.
    public var recordingId: String
    /// The recording's name.
    public var name: String
    /// Its number in the session, from 1.
    public var index: Int
    /// The final path (`.part` appended while it is written).
    public var path: String
    /// Wall-clock time of its first frame.
    public var startedAt: Date
    /// Frames in the file (file rate). Final once the segment is closed.
    public var frames: Int64
    public var sampleRate: Int
    /// Overruns recovered from inside it, and the frames they cost.
    public var xruns: Int
    public var framesLost: Int64
    /// The device gap just before it, if it follows one.
    public var gapBefore: Gap?
    /// Set when closed.
    public var endedAt: Date?
    public var endReason: SegmentEnd?
    /// Set when the file started while the system clock was not synchronized: `startedAt` is
    /// that clock's, and this says where the start falls on the boot clock, to correct it.
    public var unsynchronizedStart: UnsynchronizedStart?
    /// Set once recd re-dated the file: the start it had (the unsynchronized clock's).
    public var redatedFrom: Date?

    public init(recordingId: String, name: String, index: Int, path: String, startedAt: Date, frames: Int64 = 0,
                sampleRate: Int, xruns: Int = 0, framesLost: Int64 = 0, gapBefore: Gap? = nil,
                endedAt: Date? = nil, endReason: SegmentEnd? = nil) {
        self.recordingId = recordingId
        self.name = name
        self.index = index
        self.path = path
        self.startedAt = startedAt
        self.frames = frames
        self.sampleRate = sampleRate
        self.xruns = xruns
        self.framesLost = framesLost
        self.gapBefore = gapBefore
        self.endedAt = endedAt
        self.endReason = endReason
    }

    /// Seconds of audio in it.
    public var duration: Double { sampleRate > 0 ? Double(frames) / Double(sampleRate) : 0 }
    public var partialPath: String { path + ".part" }
}

/// A file that began while the system clock was not synchronized (a station without a
/// real-time clock, before NTP): its start is the boot clock's reading of its first frame,
/// which no step of the wall clock moves, and the name's template, so that once the clock is
/// synchronized its true start (this plus the wall clock's offset then) and its true name
/// can be given to it (`Segment.redatedFrom`).
public struct UnsynchronizedStart: Sendable, Equatable, Codable {
    /// CLOCK_BOOTTIME of the first frame, seconds: the wall clock's start less its offset from
    /// the boot clock at the time.
    public var bootTime: Double
    /// The file name's template and whether it is in local time (`SegmentSettings`); empty
    /// once the file was renamed through recd (its name then stays when it is re-dated).
    public var template: String
    public var localTime: Bool
    /// The boot `bootTime` counts from (nil: not known; only the run of recd that recorded the
    /// file may then re-date it).
    public var bootId: String?

    public init(bootTime: Double, template: String, localTime: Bool, bootId: String? = nil) {
        self.bootTime = bootTime
        self.template = template
        self.localTime = localTime
        self.bootId = bootId
    }
}

/// A finished file recd re-dated once the system clock was synchronized: its true start
/// written into it, and its true name when the name came from the clock (`redated` topic,
/// MQTT's `redated`, the `on_file_redated` hook).
public struct RedatedFile: Sendable, Equatable, Codable {
    /// The file as it is now: its path, its start, and `redatedFrom`.
    public var segment: Segment
    /// Its path before (the same when the name has no time in it).
    public var previousPath: String
    /// The start it had: the unsynchronized clock's.
    public var previousStart: Date

    public init(segment: Segment, previousPath: String, previousStart: Date) {
        self.segment = segment
        self.previousPath = previousPath
        self.previousStart = previousStart
    }

    /// Seconds the start moved: positive when the clock was behind.
    public var correction: Double { segment.startedAt.timeIntervalSince(previousStart) }
}

/// Waiting for a lost or missing device to come (back).
public struct DeviceWait: Sendable, Equatable, Codable {
    /// Why the device cannot be used (the last attempt's error).
    public var error: RecorderError
    /// When the wait began.
    public var since: Date
    /// When the next attempt to open the device is due; nil when the next attempt comes with
    /// the next change of the sound cards (`watchingDevices`).
    public var retryAt: Date?
    /// Attempts to open the device so far in this wait.
    public var attempts: Int
    /// The device is on a card, and recd watches /dev/snd and udev for it instead of trying
    /// on a timer: a card plugged in is opened as soon as udev has made it usable.
    public var watchingDevices: Bool

    public init(error: RecorderError, since: Date, retryAt: Date?, attempts: Int, watchingDevices: Bool = false) {
        self.error = error
        self.since = since
        self.retryAt = retryAt
        self.attempts = attempts
        self.watchingDevices = watchingDevices
    }

    private enum CodingKeys: String, CodingKey { case error, since, retryAt, attempts, watchingDevices }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        error = try container.decode(RecorderError.self, forKey: .error)
        since = try container.decode(Date.self, forKey: .since)
        retryAt = try container.decodeIfPresent(Date.self, forKey: .retryAt)
        attempts = try container.decode(Int.self, forKey: .attempts)
        watchingDevices = try container.decodeIfPresent(Bool.self, forKey: .watchingDevices) ?? false
    }
}

/// Something worth a person's attention that does not stop the recording.
public struct RecorderWarning: Sendable, Equatable, Codable {
    public enum Code: String, Sendable, Codable, CaseIterable {
        /// Every sample has been exactly zero for the configured time: the input is muted,
        /// unplugged from the card, or the wrong device.
        case digitalSilence
        /// Free space on the recordings' filesystem is below `[storage] warning_free`.
        case lowDiskSpace
        /// A reload (SIGHUP, `systemctl reload`) was refused: recd runs on the configuration it
        /// had. Cleared by the next reload that succeeds.
        case configurationNotReloaded
    }

    public var code: Code
    public var message: String
    /// Since when the condition holds.
    public var since: Date

    public init(code: Code, message: String, since: Date) {
        self.code = code
        self.message = message
        self.since = since
    }
}
