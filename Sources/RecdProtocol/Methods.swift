import FoundationEssentials
@_exported import RecorderModel

/// Every method recd answers.
public enum Method: String, Sendable, CaseIterable, Codable {
    case status
    case start, pause, resume, stop, cancel, split
    /// Open the device without a file: levels and pre-roll (`unlisten` or `stop` ends it).
    case listen, unlisten
    case subscribe, unsubscribe
    case recordingsList = "recordings.list"
    case recordingsInfo = "recordings.info"
    case recordingsDelete = "recordings.delete"
    case recordingsRename = "recordings.rename"
    case devicesList = "devices.list"
    case version
    /// recd's metrics in Prometheus's text format (doc/metrics.md).
    case metrics
    /// Turn the connection into a stream of the input's audio (see protocol.md, "Taps").
    case tap
    /// A tap's client says how many it serves the audio on to (recd-rtsp: its RTSP clients).
    case tapUpdate = "tap.update"

    /// What the caller must be allowed to do. Everyone who can connect may observe.
    public var permission: Permission {
        switch self {
        case .start, .pause, .resume, .stop, .cancel, .split, .listen, .unlisten, .recordingsDelete, .recordingsRename: .control
        case .status, .subscribe, .unsubscribe, .recordingsList, .recordingsInfo, .devicesList, .version, .metrics: .observe
        case .tap, .tapUpdate: .tap
        }
    }

    /// Whether the method acts on one of the station's sources, which its optional `source`
    /// member names (doc/architecture.md, "A station and its sources"). The others are the
    /// station's: `version`, `metrics`, `devices.list`, and what acts on a connection or a tap
    /// by id (`unsubscribe`, `tap.update`).
    public var takesSource: Bool {
        switch self {
        case .version, .metrics, .devicesList, .unsubscribe, .tapUpdate: false
        case .status, .start, .pause, .resume, .stop, .cancel, .split, .listen, .unlisten, .subscribe, .recordingsList,
             .recordingsInfo, .recordingsDelete, .recordingsRename, .tap: true
        }
    }

    /// Without a `source` on a station of several, the method covers every source (`status`:
    /// the station's answer; `subscribe`: every source's topics) rather than being ambiguous.
    public var coversEverySource: Bool { self == .status || self == .subscribe }

    /// The params members the method accepts; anything else is `invalidParams`.
    public var parameterNames: Set<String> { takesSource ? ownParameterNames.union(["source"]) : ownParameterNames }

    private var ownParameterNames: Set<String> {
        switch self {
        case .start: StartParams.names
        case .listen: memberNames(of: ListenParams(preRoll: 0))
        case .tap: memberNames(of: TapParams(rate: 0, channels: 0, encoding: .s16le, preRoll: 0))
        case .tapUpdate: memberNames(of: TapUpdateParams(tap: 0, listeners: 0))
        case .subscribe: SubscribeParams.names
        case .unsubscribe: memberNames(of: UnsubscribeParams(subscription: ""))
        case .recordingsInfo, .recordingsDelete: memberNames(of: RecordingNameParams(name: ""))
        case .recordingsRename: memberNames(of: RenameParams(from: "", to: ""))
        case .status, .pause, .resume, .stop, .cancel, .split, .unlisten, .recordingsList, .devicesList, .version, .metrics: []
        }
    }
}

/// The stored properties of a params value: its members on the wire (params types use the
/// synthesized coding keys, which are the property names).
func memberNames(of params: some Codable) -> Set<String> {
    Set(Mirror(reflecting: params).children.compactMap(\.label))
}

public enum Permission: String, Sendable, Codable {
    /// status, subscribe, list, info, devices, version.
    case observe
    /// start, pause, resume, stop, cancel, split, listen, unlisten, delete, rename.
    case control
    /// tap, tap.update: hear the input (audio is more sensitive than state).
    case tap
}

/// No params / an empty result.
public struct Empty: Codable, Sendable, Equatable {
    public init() {}
}

// MARK: Params

/// `start`: every member optional; unset settings come from the daemon's configuration.
public struct StartParams: Codable, Sendable, Equatable {
    public var name: String?
    public var format: AudioFileFormat?
    public var sampleRate: Int?
    public var channels: Int?
    public var bitDepth: Int?
    public var quality: RecordingQuality?
    public var bitRate: Int?
    /// Seconds; the file will hold exactly `round(duration × rate)` frames.
    public var duration: Double?
    /// RFC 3339 wall-clock time to start at.
    public var at: Date?
    /// Seconds per file (segment); the daemon's `[segments] length` when unset; 0: one file.
    public var segmentLength: Double?
    /// Cut segments at whole multiples of their length from midnight.
    public var alignToClock: Bool?
    /// The files' path template below the recordings directory (strftime fields, `{name}`, `{n}`).
    public var fileTemplate: String?
    /// While listening: seconds of the input from before the start that the file begins
    /// with (default: `[listen] pre_roll`, at most what listening holds).
    public var preRoll: Double?
    /// Sound-activated: a file per event. `{}` takes the daemon's `[trigger]`; members
    /// given replace its values.
    public var trigger: TriggerParams?

    /// Every member, read off the declaration above: what the parser accepts (for the socket
    /// and MQTT alike). recctl's options and the docs are tested against it.
    public static let names = memberNames(of: StartParams())

    public init(name: String? = nil, format: AudioFileFormat? = nil, sampleRate: Int? = nil, channels: Int? = nil,
                bitDepth: Int? = nil, quality: RecordingQuality? = nil, bitRate: Int? = nil, duration: Double? = nil,
                at: Date? = nil, segmentLength: Double? = nil, alignToClock: Bool? = nil, fileTemplate: String? = nil,
                preRoll: Double? = nil, trigger: TriggerParams? = nil) {
        self.preRoll = preRoll
        self.trigger = trigger
        self.segmentLength = segmentLength
        self.alignToClock = alignToClock
        self.fileTemplate = fileTemplate
        self.name = name
        self.format = format
        self.sampleRate = sampleRate
        self.channels = channels
        self.bitDepth = bitDepth
        self.quality = quality
        self.bitRate = bitRate
        self.duration = duration
        self.at = at
    }

    /// Every number against its range (`Limits`), before anything acts on it: nil, or the
    /// sentence refusing the first one out of range. The socket, MQTT and recctl all ask this.
    public func rangeRefusal() -> String? {
        if let duration, let refusal = Limits.refusal("duration", duration, Limits.duration, "seconds") { return refusal }
        if let sampleRate, let refusal = Limits.refusal("sampleRate", sampleRate, Limits.sampleRate, "Hz") { return refusal }
        if let channels, let refusal = Limits.refusal("channels", channels, Limits.channels) { return refusal }
        if let bitDepth, ![16, 24, 32].contains(bitDepth) { return "'bitDepth' must be 16, 24 or 32, not \(bitDepth)" }
        if let bitRate, let refusal = Limits.refusal("bitRate", bitRate, Limits.bitRate, "bits per second") { return refusal }
        if let segmentLength, segmentLength != 0,
           Limits.refusal("segmentLength", segmentLength, Limits.segmentLength) != nil {
            return "'segmentLength' must be 0 (one file) or " + Limits.describe(Limits.segmentLength, "seconds")
                + ", not \(Limits.number(segmentLength))"
        }
        if let at, let refusal = Limits.refusal(at: at) { return refusal }
        if let preRoll, let refusal = Limits.refusal("preRoll", preRoll, Limits.preRoll, "seconds") { return refusal }
        if let trigger, let refusal = trigger.settings(over: TriggerSettings()).refusal { return "trigger: " + refusal }
        return nil
    }

    /// The range of a numeric member, as an error names it ("between 1 and 8"); nil for others.
    public static func range(of member: String) -> String? {
        switch member {
        case "duration": Limits.describe(Limits.duration, "seconds")
        case "sampleRate": Limits.describe(Limits.sampleRate, "Hz")
        case "channels": Limits.describe(Limits.channels)
        case "bitDepth": "16, 24 or 32"
        case "bitRate": Limits.describe(Limits.bitRate, "bits per second")
        case "segmentLength": "0 (one file) or " + Limits.describe(Limits.segmentLength, "seconds")
        case "at": Limits.scheduleTimeDescription
        case "preRoll": Limits.describe(Limits.preRoll, "seconds")
        default: nil
        }
    }

    /// How to cut the recording into files: these params over the daemon's defaults.
    public func segments(over defaults: SegmentSettings) -> SegmentSettings {
        var segments = defaults
        if let segmentLength {
            segments.length = segmentLength == 0 ? nil : segmentLength
            if segmentLength == 0 { segments.alignToClock = false }
        }
        if let alignToClock { segments.alignToClock = alignToClock }
        if let fileTemplate { segments.template = fileTemplate }
        return segments
    }

    /// The settings to record with: these params over the daemon's defaults.
    public func settings(over defaults: RecordingSettings) -> RecordingSettings {
        var settings = defaults
        if let format, format != defaults.format {
            // Another format: the default bit depth may not apply to it, and the default bitrate
            // was set for the configured codec (Opus and AAC take different ranges).
            settings = RecordingSettings(format: format, sampleRate: defaults.sampleRate, channels: defaults.channels,
                                         bitDepth: format.bitDepths.contains(defaults.bitDepth ?? 16) ? defaults.bitDepth : nil,
                                         quality: defaults.quality, bitRate: nil)
        }
        if let sampleRate { settings.sampleRate = sampleRate }
        if let channels { settings.channels = channels }
        if let bitDepth { settings.bitDepth = bitDepth }
        if let quality { settings.quality = quality }
        if let bitRate { settings.bitRate = bitRate }
        return settings
    }
}

/// The topics a subscription can follow.
public enum Topic: String, Sendable, Codable, CaseIterable, Comparable {
    case state, currentTime, error, levels, recording, segment, warning
    /// Each file retention deleted (`RetentionDeletion`), in order.
    case retention
    /// Listening (`ListeningStatus`, or null): when it begins, ends, waits or resumes.
    case listening
    /// A triggered recording's events (`TriggerEvent`): opened, closed, discarded, in order.
    case trigger
    /// Each finished file re-dated once the system clock was synchronized (`RedatedFile`: its
    /// new path and start, and the ones it had), in order.
    case redated
    /// The input's spectrum (`Spectrum`, or null), one column per 50 ms while the device is
    /// open; computed only while someone subscribes.
    case spectrum

    /// What a subscription without `topics` follows: every topic but `spectrum`, which is
    /// large (513 numbers every 50 ms) and computed only for clients that name it.
    public static let byDefault: [Topic] = allCases.filter { $0 != .spectrum }

    /// Discrete topics deliver every change in order; continuous ones at most once per interval.
    public var isContinuous: Bool { self == .currentTime || self == .levels || self == .spectrum }

    public static func < (lhs: Topic, rhs: Topic) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// `listen`: how much of the input to keep for the next recording's beginning.
public struct ListenParams: Codable, Sendable, Equatable {
    /// Seconds (default: `[listen] pre_roll`); 0 keeps none.
    public var preRoll: Double?

    public init(preRoll: Double? = nil) { self.preRoll = preRoll }

    public func rangeRefusal() -> String? {
        if let preRoll, let refusal = Limits.refusal("preRoll", preRoll, Limits.preRoll, "seconds") { return refusal }
        return nil
    }
}

/// `tap`: the audio a client wants. Unset members take the recording settings' rate and
/// channels, and 16-bit samples.
public struct TapParams: Codable, Sendable, Equatable {
    public var rate: Int?
    public var channels: Int?
    public var encoding: TapEncoding?
    /// Seconds of input from before the tap to begin with (at most what listening holds).
    public var preRoll: Double?
    /// What the client is, for `status` and `recctl status` (at most 64 bytes, no control characters).
    public var client: String?
    /// Seconds of audio each chunk carries at least (nil: every chunk as the device gives it):
    /// fewer, larger chunks for a client that needs no period's audio at once (recd-rtsp).
    public var chunk: Double?

    public init(rate: Int? = nil, channels: Int? = nil, encoding: TapEncoding? = nil, preRoll: Double? = nil, client: String? = nil,
                chunk: Double? = nil) {
        self.rate = rate
        self.channels = channels
        self.encoding = encoding
        self.preRoll = preRoll
        self.client = client
        self.chunk = chunk
    }

    public func rangeRefusal() -> String? {
        if let rate, let refusal = Limits.refusal("rate", rate, Limits.sampleRate, "Hz") { return refusal }
        if let channels, let refusal = Limits.refusal("channels", channels, Limits.channels) { return refusal }
        if let preRoll, let refusal = Limits.refusal("preRoll", preRoll, Limits.preRoll, "seconds") { return refusal }
        if let chunk, let refusal = Limits.refusal("chunk", chunk, Limits.tapChunk, "seconds") { return refusal }
        if let client, client.utf8.count > 64 || client.unicodeScalars.contains(where: { $0.value < 32 || $0.value == 127 }) {
            return "'client' must be at most 64 bytes without control characters"
        }
        return nil
    }
}

/// `tap.update`: what a tap's client says about the tap, from a connection of the same
/// process (the tap's own carries only audio).
public struct TapUpdateParams: Codable, Sendable, Equatable {
    /// The tap's id (`tap`'s answer).
    public var tap: Int
    /// How many the client serves the tap's audio on to (recd-rtsp: its RTSP clients of it).
    public var listeners: Int?

    public init(tap: Int, listeners: Int? = nil) {
        self.tap = tap
        self.listeners = listeners
    }

    public func rangeRefusal() -> String? {
        if let refusal = Limits.refusal("tap", tap, Limits.tapID) { return refusal }
        if let listeners, let refusal = Limits.refusal("listeners", listeners, Limits.tapListeners) { return refusal }
        return nil
    }
}

/// `tap`'s answer, the last line of JSON on the connection: chunks follow (`TapChunkHeader`).
public struct TapResult: Codable, Sendable, Equatable {
    /// The tap's id in `status`.
    public var tap: Int
    public var format: TapFormat
    /// Bytes of the header before each chunk.
    public var headerBytes: Int
    /// Seconds of pre-roll the stream begins with.
    public var preRoll: Double
    public init(tap: Int, format: TapFormat, headerBytes: Int = TapChunkHeader.size, preRoll: Double) {
        self.tap = tap
        self.format = format
        self.headerBytes = headerBytes
        self.preRoll = preRoll
    }
}

/// `listen`, `unlisten` and `stop` while only listening: the state, and listening as it is
/// (or was, for `unlisten`).
public struct ListenResult: Codable, Sendable, Equatable {
    public var state: RecorderState
    public var listening: ListeningStatus?
    public init(state: RecorderState, listening: ListeningStatus?) {
        self.state = state
        self.listening = listening
    }
}

public struct SubscribeParams: Codable, Sendable, Equatable {
    /// Default: every topic but `spectrum` (`Topic.byDefault`).
    public var topics: [Topic]?
    /// Seconds between currentTime/levels notifications at most (default 0.1, minimum 0.01).
    public var interval: Double?

    static let names = memberNames(of: SubscribeParams())
    public static let defaultInterval = 0.1
    public static let minimumInterval = Limits.subscriptionInterval.lowerBound

    public init(topics: [Topic]? = nil, interval: Double? = nil) {
        self.topics = topics
        self.interval = interval
    }
}

public struct UnsubscribeParams: Codable, Sendable, Equatable {
    public var subscription: String
    public init(subscription: String) { self.subscription = subscription }
}

/// `recordings.info` and `recordings.delete`: a file name (`meeting.flac`) or, when only one
/// file has it, a name without extension (`meeting`).
public struct RecordingNameParams: Codable, Sendable, Equatable {
    public var name: String
    public init(name: String) { self.name = name }
}

public struct RenameParams: Codable, Sendable, Equatable {
    public var from: String
    /// The new name, without extension: the file keeps its format.
    public var to: String
    public init(from: String, to: String) {
        self.from = from
        self.to = to
    }
}

/// `start`'s `trigger`: every member optional, over the daemon's `[trigger]`
/// (`TriggerSettings` says what each means). Unknown members are refused, as at the top level.
public struct TriggerParams: Codable, Sendable, Equatable {
    public var measure: TriggerSettings.Measure?
    public var channels: TriggerSettings.Channels?
    public var highPass: Double?
    public var lowPass: Double?
    public var threshold: Double?
    public var aboveFloor: Double?
    public var hysteresis: Double?
    public var floorWindow: Double?
    public var floorPercentile: Double?
    public var attack: Double?
    public var hang: Double?
    public var minimumLength: Double?
    public var keepShort: Bool?
    public var maximumLength: Double?
    public var preRoll: Double?

    public static let names = memberNames(of: TriggerParams())

    public init(measure: TriggerSettings.Measure? = nil, channels: TriggerSettings.Channels? = nil, highPass: Double? = nil,
                lowPass: Double? = nil, threshold: Double? = nil, aboveFloor: Double? = nil, hysteresis: Double? = nil,
                floorWindow: Double? = nil, floorPercentile: Double? = nil, attack: Double? = nil, hang: Double? = nil,
                minimumLength: Double? = nil, keepShort: Bool? = nil, maximumLength: Double? = nil, preRoll: Double? = nil) {
        self.measure = measure
        self.channels = channels
        self.highPass = highPass
        self.lowPass = lowPass
        self.threshold = threshold
        self.aboveFloor = aboveFloor
        self.hysteresis = hysteresis
        self.floorWindow = floorWindow
        self.floorPercentile = floorPercentile
        self.attack = attack
        self.hang = hang
        self.minimumLength = minimumLength
        self.keepShort = keepShort
        self.maximumLength = maximumLength
        self.preRoll = preRoll
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: Decoder) throws {
        let members = try decoder.container(keyedBy: AnyKey.self)
        if let unknown = members.allKeys.map(\.stringValue).sorted().first(where: { !Self.names.contains($0) }) {
            throw DecodingError.dataCorruptedError(forKey: AnyKey(stringValue: unknown), in: members,
                debugDescription: "unknown member '\(unknown)' in 'trigger' (it takes \(Self.names.sorted().joined(separator: ", ")))")
        }
        func value<T: Decodable>(_ name: String) throws -> T? { try members.decodeIfPresent(T.self, forKey: AnyKey(stringValue: name)) }
        self.init(measure: try value("measure"), channels: try value("channels"), highPass: try value("highPass"),
                  lowPass: try value("lowPass"), threshold: try value("threshold"), aboveFloor: try value("aboveFloor"),
                  hysteresis: try value("hysteresis"), floorWindow: try value("floorWindow"),
                  floorPercentile: try value("floorPercentile"), attack: try value("attack"), hang: try value("hang"),
                  minimumLength: try value("minimumLength"), keepShort: try value("keepShort"),
                  maximumLength: try value("maximumLength"), preRoll: try value("preRoll"))
    }

    /// These members over `defaults`. A `threshold` given makes the trigger absolute; an
    /// `aboveFloor` given, relative.
    public func settings(over defaults: TriggerSettings) -> TriggerSettings {
        var settings = defaults
        if let measure { settings.measure = measure }
        if let channels { settings.channels = channels }
        if let highPass { settings.highPass = highPass }
        if let lowPass { settings.lowPass = lowPass }
        if let threshold { settings.threshold = threshold }
        if let aboveFloor {
            settings.aboveFloor = aboveFloor
            if threshold == nil { settings.threshold = nil }
        }
        if let hysteresis { settings.hysteresis = hysteresis }
        if let floorWindow { settings.floorWindow = floorWindow }
        if let floorPercentile { settings.floorPercentile = floorPercentile }
        if let attack { settings.attack = attack }
        if let hang { settings.hang = hang }
        if let minimumLength { settings.minimumLength = minimumLength }
        if let keepShort { settings.keepShort = keepShort }
        if let maximumLength { settings.maximumLength = maximumLength }
        if let preRoll { settings.preRoll = preRoll }
        return settings
    }
}

// MARK: Results

/// `status`: everything a status bar or `recctl status` shows.
public struct StatusResult: Codable, Sendable, Equatable {
    /// The source's name, on a station of several; absent on a station of one.
    public var source: String?
    public var state: RecorderState
    public var currentTime: Double
    public var error: RecorderError?
    public var levels: Levels
    public var recording: Recording?
    /// The capture device recordings use.
    public var device: String
    public var statistics: CaptureStatistics
    /// The settings a `start` without params records with.
    public var settings: RecordingSettings
    public var recordingsDirectory: String
    /// A condition worth attention (digital silence), or nil.
    public var warning: RecorderWarning?
    /// The last segment closed (in this or an earlier recording).
    public var lastSegment: Segment?
    /// Free and used space on the recordings' filesystem and what retention deletes next (as
    /// of the last check, at most `[storage] check_interval` old).
    public var storage: StorageStatus?
    /// While listening: the device's format, the pre-roll held and its memory; nil otherwise.
    public var listening: ListeningStatus?
    /// The taps open, and what each client was sent; nil when there are none.
    public var taps: [TapStatus]?
    /// A triggered recording's detector: state, level, floor, thresholds, counts.
    public var trigger: TriggerStatus?
    /// With `[schedule]`: whether a window is open, until when, and the next one.
    public var schedule: ScheduleStatus?
    /// While recording: how much audio waits to be written, and the most that did.
    public var writeBuffer: WriteBufferStatus?
    /// The system clock: synchronized or not since when, its steps since recd started, the
    /// kernel's error figures. Always there from a recd that knows it.
    public var clock: ClockStatus?

    public init(state: RecorderState, currentTime: Double, error: RecorderError?, levels: Levels, recording: Recording?,
                device: String, statistics: CaptureStatistics, settings: RecordingSettings, recordingsDirectory: String,
                warning: RecorderWarning? = nil, lastSegment: Segment? = nil, storage: StorageStatus? = nil,
                listening: ListeningStatus? = nil, taps: [TapStatus]? = nil, trigger: TriggerStatus? = nil,
                schedule: ScheduleStatus? = nil, writeBuffer: WriteBufferStatus? = nil, clock: ClockStatus? = nil) {
        self.clock = clock
        self.writeBuffer = writeBuffer
        self.trigger = trigger
        self.schedule = schedule
        self.listening = listening
        self.taps = taps
        self.storage = storage
        self.warning = warning
        self.lastSegment = lastSegment
        self.state = state
        self.currentTime = currentTime
        self.error = error
        self.levels = levels
        self.recording = recording
        self.device = device
        self.statistics = statistics
        self.settings = settings
        self.recordingsDirectory = recordingsDirectory
    }
}

/// `status` without `source` on a station of several: each source's status (with its
/// `source`), in the configuration's order, and the station's disk and clock.
public struct StationStatusResult: Codable, Sendable, Equatable {
    public var sources: [StatusResult]
    /// The recordings' filesystem (every source's folder is on it): the first source's figures.
    public var storage: StorageStatus?
    public var clock: ClockStatus?

    public init(sources: [StatusResult]) {
        self.sources = sources
        storage = sources.first?.storage
        clock = sources.first?.clock
    }
}

/// What `status` answers: a source's status, or a station of several's (`sources`).
public enum StatusAnswer: Codable, Sendable, Equatable {
    case source(StatusResult)
    case station(StationStatusResult)

    private enum CodingKeys: String, CodingKey { case sources }

    public init(from decoder: Decoder) throws {
        if try decoder.container(keyedBy: CodingKeys.self).contains(.sources) {
            self = .station(try StationStatusResult(from: decoder))
        } else {
            self = .source(try StatusResult(from: decoder))
        }
    }

    public func encode(to encoder: Encoder) throws {
        switch self {
        case .source(let status): try status.encode(to: encoder)
        case .station(let station): try station.encode(to: encoder)
        }
    }

    /// Each source's status, in the station's order.
    public var sources: [StatusResult] {
        switch self {
        case .source(let status): [status]
        case .station(let station): station.sources
        }
    }
}

/// `split`: the segment just closed (being finalized; announced on the `segment` topic once its
/// file has its final name) and the recording, now writing the next segment.
public struct SplitResult: Codable, Sendable, Equatable {
    public var closed: Segment
    public var recording: Recording?
    public init(closed: Segment, recording: Recording?) {
        self.closed = closed
        self.recording = recording
    }
}

/// `pause`, `resume`, `cancel`: the state afterwards.
public struct StateResult: Codable, Sendable, Equatable {
    public var state: RecorderState
    public init(state: RecorderState) { self.state = state }
}

public struct SubscribeResult: Codable, Sendable {
    public var subscription: String
    public var topics: [Topic]
    public var interval: Double
    /// Every subscribed topic's current value, with the `seq` it had.
    public var snapshot: [TopicUpdate]

    public init(subscription: String, topics: [Topic], interval: Double, snapshot: [TopicUpdate]) {
        self.subscription = subscription
        self.topics = topics
        self.interval = interval
        self.snapshot = snapshot
    }
}

public struct UnsubscribeResult: Codable, Sendable, Equatable {
    public var subscription: String
    public init(subscription: String) { self.subscription = subscription }
}

/// A finished file in the recordings directory.
public struct RecordingFile: Codable, Sendable, Equatable {
    /// Without extension (nor directory).
    public var name: String
    /// The path below the recordings directory, with extension: what `recordings.*` methods
    /// accept unambiguously (`meeting.flac`, `birds/2026-11-22/20261122T140000Z.flac`).
    public var file: String
    public var path: String
    public var format: AudioFileFormat
    public var duration: Double
    public var frames: Int64
    public var sampleRate: Int
    public var channels: Int
    /// Bytes.
    public var size: Int64
    public var modified: Date
    /// The recording (session) the file is a segment of, its name, and the segment's number and
    /// start: nil for files recd's session log does not know (older recd, copied in).
    public var session: String?
    public var sessionName: String?
    public var segment: Int?
    public var startedAt: Date?
    /// How the segment ended, as recd's session log has it (`event`: a sound-activated
    /// recording's event); absent for files the log does not know.
    public var end: SegmentEnd?
    /// What the file says of its start's clock: `unsynchronized` (begun before the system clock
    /// was synchronized, not re-dated), `redated`, `synchronized`; absent when it does not say.
    public var startClock: StartClock?

    public init(name: String, file: String, path: String, format: AudioFileFormat, duration: Double, frames: Int64,
                sampleRate: Int, channels: Int, size: Int64, modified: Date, session: String? = nil,
                sessionName: String? = nil, segment: Int? = nil, startedAt: Date? = nil, startClock: StartClock? = nil,
                end: SegmentEnd? = nil) {
        self.startClock = startClock
        self.end = end
        self.session = session
        self.sessionName = sessionName
        self.segment = segment
        self.startedAt = startedAt
        self.name = name
        self.file = file
        self.path = path
        self.format = format
        self.duration = duration
        self.frames = frames
        self.sampleRate = sampleRate
        self.channels = channels
        self.size = size
        self.modified = modified
    }
}

public struct RecordingsListResult: Codable, Sendable, Equatable {
    public var recordings: [RecordingFile]
    /// Free and used space, measured with the listing, and what retention deletes next.
    public var storage: StorageStatus?
    public init(recordings: [RecordingFile], storage: StorageStatus? = nil) {
        self.recordings = recordings
        self.storage = storage
    }
}

public struct DeleteResult: Codable, Sendable, Equatable {
    public var deleted: String
    public init(deleted: String) { self.deleted = deleted }
}

public struct DeviceInfo: Codable, Sendable, Equatable {
    public var name: String
    public var description: String?
    /// "Input", or nil for PCMs that do both.
    public var direction: String?
    /// The id of the sound card the PCM is on (`CARD=` in its name), e.g. `PCH` or `Device`:
    /// stable across reboots and replugging, unlike the card's number.
    public var card: String?

    public init(name: String, description: String?, direction: String?, card: String? = nil) {
        self.name = name
        self.description = description
        self.direction = direction
        self.card = card
    }
}

/// A sound card as the kernel lists it, with the names that keep naming it.
public struct SoundCardInfo: Codable, Sendable, Equatable {
    /// Its number now (`hw:1`): may change with the order in which cards appear.
    public var index: Int
    /// Its ALSA id (`hw:CARD=<id>`): stable for one card of a kind; the second of two
    /// identical cards gets `<id>_1`, in probe order.
    public var id: String
    public var name: String
    /// The id to write in recd.toml: `usb:VID:PID:s=SERIAL` when the card has a serial no
    /// other card shares, else `usb:VID:PID:p=PORT`; for a card not on USB, its ALSA name by id.
    public var stableDevice: String
    /// A USB card's `VID:PID`, serial (as the device reports it) and port (controller-devpath).
    public var usb: String?
    public var serial: String?
    public var port: String?
    /// Its ids by serial (when unique among the cards present) and by port.
    public var serialDevice: String?
    public var portDevice: String?
    /// udev's links to it (/dev/snd/by-id/…, /dev/snd/by-path/…).
    public var links: [String]
    /// ALSA names for its first capture PCM: by id, then by number (not stable).
    public var alsaNames: [String]
    /// The configured device resolves to this card now.
    public var configured: Bool
    /// recd has it open (recording or listening).
    public var inUse: Bool

    public init(index: Int, id: String, name: String, stableDevice: String? = nil, usb: String? = nil, serial: String? = nil,
                port: String? = nil, serialDevice: String? = nil, portDevice: String? = nil, links: [String] = [],
                alsaNames: [String]? = nil, configured: Bool = false, inUse: Bool = false) {
        self.index = index
        self.id = id
        self.name = name
        self.stableDevice = stableDevice ?? "plughw:CARD=\(id),DEV=0"
        self.usb = usb
        self.serial = serial
        self.port = port
        self.serialDevice = serialDevice
        self.portDevice = portDevice
        self.links = links
        self.alsaNames = alsaNames ?? ["plughw:CARD=\(id),DEV=0", "hw:\(index),0"]
        self.configured = configured
        self.inUse = inUse
    }

    private enum CodingKeys: String, CodingKey {
        case index, id, name, stableDevice, usb, serial, port, serialDevice, portDevice, links, alsaNames, configured, inUse
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        index = try container.decode(Int.self, forKey: .index)
        id = try container.decode(String.self, forKey: .id)
        name = try container.decode(String.self, forKey: .name)
        stableDevice = try container.decode(String.self, forKey: .stableDevice)
        usb = try container.decodeIfPresent(String.self, forKey: .usb)
        serial = try container.decodeIfPresent(String.self, forKey: .serial)
        port = try container.decodeIfPresent(String.self, forKey: .port)
        serialDevice = try container.decodeIfPresent(String.self, forKey: .serialDevice)
        portDevice = try container.decodeIfPresent(String.self, forKey: .portDevice)
        links = try container.decodeIfPresent([String].self, forKey: .links) ?? []
        alsaNames = try container.decodeIfPresent([String].self, forKey: .alsaNames) ?? []
        configured = try container.decodeIfPresent(Bool.self, forKey: .configured) ?? false
        inUse = try container.decodeIfPresent(Bool.self, forKey: .inUse) ?? false
    }
}

public struct DevicesResult: Codable, Sendable, Equatable {
    /// The device recordings use now.
    public var current: String
    public var devices: [DeviceInfo]
    /// The sound cards present now.
    public var cards: [SoundCardInfo]
    /// Why the configured device is not named well: a card named by its place in the probe
    /// order (`hw:1`, a `_1` id), with the stable id to write instead; or what resolving it
    /// says now (several cards match). nil when all is well.
    public var warning: String?
    public init(current: String, devices: [DeviceInfo], cards: [SoundCardInfo] = [], warning: String? = nil) {
        self.current = current
        self.devices = devices
        self.cards = cards
        self.warning = warning
    }

    private enum CodingKeys: String, CodingKey { case current, devices, cards, warning }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        current = try container.decode(String.self, forKey: .current)
        devices = try container.decode([DeviceInfo].self, forKey: .devices)
        cards = try container.decodeIfPresent([SoundCardInfo].self, forKey: .cards) ?? []
        warning = try container.decodeIfPresent(String.self, forKey: .warning)
    }
}

/// `metrics`: the text a Prometheus scrape (or node_exporter's textfile collector) reads.
public struct MetricsResult: Codable, Sendable, Equatable {
    /// Prometheus's text exposition format, version 0.0.4.
    public var text: String
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"
    public init(text: String) { self.text = text }
}

public struct VersionResult: Codable, Sendable, Equatable {
    public var version: String
    public var protocolRevision: Int
    public init(version: String, protocolRevision: Int) {
        self.version = version
        self.protocolRevision = protocolRevision
    }
}

// MARK: Notifications

/// One topic's value, as in a snapshot or a `changed` notification.
public enum TopicValue: Sendable, Equatable {
    case state(RecorderState)
    case currentTime(Double)
    case error(RecorderError?)
    case levels(Levels)
    case recording(Recording?)
    case segment(Segment?)
    case warning(RecorderWarning?)
    case retention(RetentionDeletion?)
    case listening(ListeningStatus?)
    case trigger(TriggerEvent?)
    case redated(RedatedFile?)
    case spectrum(Spectrum?)

    public var topic: Topic {
        switch self {
        case .state: .state
        case .currentTime: .currentTime
        case .error: .error
        case .levels: .levels
        case .recording: .recording
        case .segment: .segment
        case .warning: .warning
        case .retention: .retention
        case .listening: .listening
        case .trigger: .trigger
        case .redated: .redated
        case .spectrum: .spectrum
        }
    }
}

/// A topic's value with its sequence number and the time it was published.
public struct TopicUpdate: Codable, Sendable, Equatable {
    public var topic: Topic
    public var value: TopicValue
    /// Counts the topic's publications since the daemon started: a discrete topic's
    /// notifications on one subscription are consecutive.
    public var seq: UInt64
    /// Seconds since 1970 when the recorder published the value.
    public var timestamp: Double
    /// The source whose value it is, on a station of several; nil (absent) on a station of one.
    /// `seq` counts each source's publications of the topic apart.
    public var source: String?

    public init(value: TopicValue, seq: UInt64, timestamp: Double, source: String? = nil) {
        self.topic = value.topic
        self.value = value
        self.seq = seq
        self.timestamp = timestamp
        self.source = source
    }

    private enum CodingKeys: String, CodingKey { case topic, value, seq, timestamp, source }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        source = try container.decodeIfPresent(String.self, forKey: .source)
        topic = try container.decode(Topic.self, forKey: .topic)
        seq = try container.decode(UInt64.self, forKey: .seq)
        timestamp = try container.decode(Double.self, forKey: .timestamp)
        switch topic {
        case .state: value = .state(try container.decode(RecorderState.self, forKey: .value))
        case .currentTime: value = .currentTime(try container.decode(Double.self, forKey: .value))
        case .error: value = .error(try container.decodeIfPresent(RecorderError.self, forKey: .value))
        case .levels: value = .levels(try container.decode(Levels.self, forKey: .value))
        case .recording: value = .recording(try container.decodeIfPresent(Recording.self, forKey: .value))
        case .segment: value = .segment(try container.decodeIfPresent(Segment.self, forKey: .value))
        case .warning: value = .warning(try container.decodeIfPresent(RecorderWarning.self, forKey: .value))
        case .retention: value = .retention(try container.decodeIfPresent(RetentionDeletion.self, forKey: .value))
        case .listening: value = .listening(try container.decodeIfPresent(ListeningStatus.self, forKey: .value))
        case .trigger: value = .trigger(try container.decodeIfPresent(TriggerEvent.self, forKey: .value))
        case .redated: value = .redated(try container.decodeIfPresent(RedatedFile.self, forKey: .value))
        case .spectrum: value = .spectrum(try container.decodeIfPresent(Spectrum.self, forKey: .value))
        }
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(topic, forKey: .topic)
        try container.encode(seq, forKey: .seq)
        try container.encode(timestamp, forKey: .timestamp)
        try container.encodeIfPresent(source, forKey: .source)
        switch value {
        case .state(let state): try container.encode(state, forKey: .value)
        case .currentTime(let time): try container.encode(time, forKey: .value)
        case .error(let error): try container.encode(error, forKey: .value)
        case .levels(let levels): try container.encode(levels, forKey: .value)
        case .recording(let recording): try container.encode(recording, forKey: .value)
        case .segment(let segment): try container.encode(segment, forKey: .value)
        case .warning(let warning): try container.encode(warning, forKey: .value)
        case .retention(let deletion): try container.encode(deletion, forKey: .value)
        case .listening(let listening): try container.encode(listening, forKey: .value)
        case .trigger(let event): try container.encode(event, forKey: .value)
        case .redated(let file): try container.encode(file, forKey: .value)
        case .spectrum(let spectrum): try container.encode(spectrum, forKey: .value)
        }
    }
}

/// `{"jsonrpc":"2.0","method":"changed","params":{"subscription":…,"topic":…,"value":…,"seq":…,"timestamp":…}}`
public struct ChangedNotification: Codable, Sendable {
    public static let method = "changed"
    public var jsonrpc = JSONRPC.version
    public var method = ChangedNotification.method
    public var params: Params

    public struct Params: Codable, Sendable {
        public var subscription: String
        public var topic: Topic
        public var value: TopicValue
        public var seq: UInt64
        public var timestamp: Double
        /// On a station of several sources: whose value it is.
        public var source: String?

        private enum CodingKeys: String, CodingKey { case subscription }

        public init(from decoder: Decoder) throws {
            let update = try TopicUpdate(from: decoder)
            subscription = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .subscription)
            topic = update.topic
            value = update.value
            seq = update.seq
            timestamp = update.timestamp
            source = update.source
        }

        public func encode(to encoder: Encoder) throws {
            try TopicUpdate(value: value, seq: seq, timestamp: timestamp, source: source).encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(subscription, forKey: .subscription)
        }
    }
}
