import FoundationEssentials

/// One recording: what it is, where it goes, and (once ended) how long it is.
public struct Recording: Sendable, Equatable, Codable, Identifiable {
    public var id: String
    /// The file name without extension; unique within the recordings directory.
    public var name: String
    /// The current (or, once ended, the last) file's final path: `<dir>/<name>.<ext>` for an
    /// unsegmented recording. While recording, data goes to `path + ".part"`.
    public var path: String
    public var format: AudioFileFormat
    public var sampleRate: Int
    public var channels: Int
    /// nil for compressed formats.
    public var bitDepth: Int?
    public var quality: RecordingQuality
    public var device: String
    /// What the device delivers before conversion.
    public var deviceFormat: DeviceFormat
    /// When capture started (wall clock); nil while prepared or scheduled.
    public var startedAt: Date?
    /// For `record(at:)`: when capture is due to start.
    public var scheduledAt: Date?
    /// For `record(forDuration:)`: the exact number of frames the file will hold.
    public var frameLimit: Int64?
    /// Frames in the file (in all of its segments). Filled in when the recording ends.
    public var frames: Int64
    public var endedAt: Date?
    /// The segment being written (the last one once ended); nil while waiting for a device
    /// before the first one.
    public var segment: Segment?
    /// How the recording is cut into files.
    public var segmentSettings: SegmentSettings?
    /// What the file begins with from before the start (listening's pre-roll); nil when it
    /// was not listening.
    public var preRoll: PreRoll?
    /// A sound-activated recording: its trigger (each event is a segment; no file between them).
    public var trigger: TriggerSettings?

    public init(id: String, name: String, path: String, format: AudioFileFormat, sampleRate: Int, channels: Int,
                bitDepth: Int?, quality: RecordingQuality, device: String, deviceFormat: DeviceFormat,
                startedAt: Date? = nil, scheduledAt: Date? = nil, frameLimit: Int64? = nil, frames: Int64 = 0,
                endedAt: Date? = nil, segment: Segment? = nil, segmentSettings: SegmentSettings? = nil) {
        self.id = id
        self.name = name
        self.path = path
        self.format = format
        self.sampleRate = sampleRate
        self.channels = channels
        self.bitDepth = bitDepth
        self.quality = quality
        self.device = device
        self.deviceFormat = deviceFormat
        self.startedAt = startedAt
        self.scheduledAt = scheduledAt
        self.frameLimit = frameLimit
        self.frames = frames
        self.endedAt = endedAt
        self.segment = segment
        self.segmentSettings = segmentSettings
    }

    /// Seconds of audio in the file (frames / rate).
    public var duration: Double { Double(frames) / Double(sampleRate) }
    /// A start at a later time that has not begun: when it will (nil for any other recording).
    public var startsLater: Date? { startedAt == nil ? scheduledAt : nil }
    /// Where the data is written while the recording runs.
    public var partialPath: String { path + ".part" }
}

/// The audio a recording started while listening begins with: the input from before `start`.
public struct PreRoll: Sendable, Equatable, Codable {
    /// Seconds asked for (the start's `preRoll`, or the configured length).
    public var requested: Double
    /// Seconds the file got: less than asked when listening began more recently.
    public var seconds: Double
    /// Device frames the file got.
    public var frames: Int64
    /// The listening engine's count of the first of them (`ListeningStatus.framesCaptured`
    /// counts the same way): the file's first frame is this one.
    public var firstFrame: Int64

    public init(requested: Double, seconds: Double, frames: Int64, firstFrame: Int64) {
        self.requested = requested
        self.seconds = seconds
        self.frames = frames
        self.firstFrame = firstFrame
    }
}

/// While recording: the write buffer between the capture thread and the file's writer.
public struct WriteBufferStatus: Sendable, Equatable, Codable {
    /// Its length in seconds of the device's audio (`[capture] write_buffer`; a recording
    /// started from listening also has room for its pre-roll), and its memory, allocated once.
    public var capacity: Double
    public var bytes: Int
    /// Seconds of audio waiting to be written now, and the most that ever waited in this
    /// capture session: how close the disk came to losing audio.
    public var held: Double
    public var peak: Double
    /// Times it was full and audio was lost (each a gap in the statistics).
    public var overflows: Int

    public init(capacity: Double, bytes: Int, held: Double, peak: Double, overflows: Int) {
        self.capacity = capacity
        self.bytes = bytes
        self.held = held
        self.peak = peak
        self.overflows = overflows
    }
}

/// While listening: the device open without a file, what it delivers, and the pre-roll held.
public struct ListeningStatus: Sendable, Equatable, Codable {
    public var device: String
    /// nil while waiting for the device.
    public var deviceFormat: DeviceFormat?
    /// When listening began.
    public var since: Date
    /// The pre-roll ring's length in seconds (0: none), and its memory, allocated once.
    public var preRollCapacity: Double
    public var preRollBytes: Int
    /// Seconds of input held now (at most the capacity): what a `start` would get.
    public var preRollHeld: Double
    /// Frames delivered by the device since it opened (the position of the next one).
    public var framesCaptured: Int64
    /// When the device's frame 0 was captured (recd's estimate; frame n: this + n / rate).
    public var firstFrameAt: Date?
    /// Overruns while listening.
    public var xruns: Int
    /// Set while the device is missing: listening resumes when it is back.
    public var wait: DeviceWait?

    public init(device: String, deviceFormat: DeviceFormat?, since: Date, preRollCapacity: Double, preRollBytes: Int,
                preRollHeld: Double, framesCaptured: Int64, firstFrameAt: Date?, xruns: Int, wait: DeviceWait?) {
        self.device = device
        self.deviceFormat = deviceFormat
        self.since = since
        self.preRollCapacity = preRollCapacity
        self.preRollBytes = preRollBytes
        self.preRollHeld = preRollHeld
        self.framesCaptured = framesCaptured
        self.firstFrameAt = firstFrameAt
        self.xruns = xruns
        self.wait = wait
    }
}

/// What the capture device delivers, after negotiation.
public struct DeviceFormat: Sendable, Equatable, Codable {
    /// `int16`, `int32` or `float32`.
    public var sampleFormat: String
    public var sampleRate: Int
    public var channels: Int

    public init(sampleFormat: String, sampleRate: Int, channels: Int) {
        self.sampleFormat = sampleFormat
        self.sampleRate = sampleRate
        self.channels = channels
    }
}

/// The recorder's state, with the recording it concerns.
public enum RecorderState: Sendable, Equatable {
    /// Nothing prepared, the device closed.
    case idle
    /// The device open and heard (levels, pre-roll), no file: `listen`, or `[listen]` at start.
    case listening
    /// Device open and file created; waiting for `record()` or for the time `record(at:)` named.
    case preparing(Recording)
    case recording(Recording)
    case paused(Recording)
    /// The device went away (or is not there yet): the last segment is finalized, and the
    /// recorder tries to open the device again, continuing in a new segment when it can.
    case waitingForDevice(Recording, DeviceWait)
    /// Finalizing the file.
    case stopping(Recording)
    /// The file is complete at `recording.path`.
    case finished(Recording)
    /// The recording (if one had begun) ended with an error; whatever was captured is kept.
    case failed(Recording?, RecorderError)

    public enum Name: String, Sendable, Codable, CaseIterable {
        case idle, listening, preparing, recording, paused, waitingForDevice, stopping, finished, failed
    }

    public var name: Name {
        switch self {
        case .idle: .idle
        case .listening: .listening
        case .preparing: .preparing
        case .recording: .recording
        case .paused: .paused
        case .waitingForDevice: .waitingForDevice
        case .stopping: .stopping
        case .finished: .finished
        case .failed: .failed
        }
    }

    public var recording: Recording? {
        switch self {
        case .idle, .listening: nil
        case .preparing(let r), .recording(let r), .paused(let r), .stopping(let r), .finished(let r): r
        case .waitingForDevice(let r, _): r
        case .failed(let r, _): r
        }
    }

    public var error: RecorderError? {
        if case .failed(_, let error) = self { return error }
        if case .waitingForDevice(_, let wait) = self { return wait.error }
        return nil
    }

    /// While waiting for the device: since when, the last error, the next attempt.
    public var deviceWait: DeviceWait? {
        if case .waitingForDevice(_, let wait) = self { return wait }
        return nil
    }

    /// Whether a recording is under way (a capture thread exists or is about to).
    public var isActive: Bool {
        switch name {
        case .preparing, .recording, .paused, .waitingForDevice, .stopping: true
        case .idle, .listening, .finished, .failed: false
        }
    }
}

extension RecorderState: Codable {
    private enum CodingKeys: String, CodingKey { case name, recording, error, wait }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(name, forKey: .name)
        try container.encodeIfPresent(recording, forKey: .recording)
        try container.encodeIfPresent(error, forKey: .error)
        try container.encodeIfPresent(deviceWait, forKey: .wait)
    }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let name = try container.decode(Name.self, forKey: .name)
        let recording = try container.decodeIfPresent(Recording.self, forKey: .recording)
        let error = try container.decodeIfPresent(RecorderError.self, forKey: .error)
        func required() throws -> Recording {
            guard let recording else {
                throw DecodingError.keyNotFound(CodingKeys.recording, .init(codingPath: decoder.codingPath,
                    debugDescription: "state \(name.rawValue) needs a recording"))
            }
            return recording
        }
        switch name {
        case .idle: self = .idle
        case .listening: self = .listening
        case .preparing: self = .preparing(try required())
        case .recording: self = .recording(try required())
        case .paused: self = .paused(try required())
        case .waitingForDevice:
            guard let wait = try container.decodeIfPresent(DeviceWait.self, forKey: .wait) else {
                throw DecodingError.keyNotFound(CodingKeys.wait, .init(codingPath: decoder.codingPath,
                    debugDescription: "state waitingForDevice needs wait"))
            }
            self = .waitingForDevice(try required(), wait)
        case .stopping: self = .stopping(try required())
        case .finished: self = .finished(try required())
        case .failed: self = .failed(recording, error ?? RecorderError(.unknown, "unknown failure"))
        }
    }
}

/// One channel's level over the last metering interval, as AVAudioRecorder's
/// `averagePower(forChannel:)` and `peakPower(forChannel:)` report it.
public struct ChannelLevel: Sendable, Equatable, Codable {
    /// RMS power in dBFS, -160 (silence) ... 0 (full scale).
    public var average: Float
    /// Peak power in dBFS, -160 ... 0.
    public var peak: Float

    public init(average: Float, peak: Float) {
        self.average = average
        self.peak = peak
    }

    public static let silence = ChannelLevel(average: -160, peak: -160)
}

/// Levels per channel, plus how many samples reached full scale since the recording began.
public struct Levels: Sendable, Equatable, Codable {
    public var channels: [ChannelLevel]
    public var clipCount: Int

    public init(channels: [ChannelLevel], clipCount: Int) {
        self.channels = channels
        self.clipCount = clipCount
    }

    public static let none = Levels(channels: [], clipCount: 0)
}

/// One column of the input's spectrum (the `spectrum` topic): the power in each FFT bin,
/// averaged over the windows of one period, the channels mixed to one.
public struct Spectrum: Sendable, Equatable, Codable {
    /// When the column's last frame was captured (seconds since 1970).
    public var time: Double
    /// The device's rate: bin `i` is centred on `i × sampleRate / size` Hz.
    public var sampleRate: Int
    /// The FFT's length (Hann window); `dBFS` has `size / 2 + 1` bins.
    public var size: Int
    /// Seconds between columns.
    public var period: Double
    /// Each bin's power in dB against a full-scale sine centred on a bin (which reads 0),
    /// to 0.1 dB; digital silence reads `Spectrum.floor`.
    public var dBFS: [Float]

    public static let floor: Float = -160
    /// What recd computes: 1024-point windows, a column every 50 ms.
    public static let windowSize = 1024
    public static let columnPeriod = 0.05

    public init(time: Double, sampleRate: Int, size: Int, period: Double, dBFS: [Float]) {
        self.time = time
        self.sampleRate = sampleRate
        self.size = size
        self.period = period
        self.dBFS = dBFS
    }

    /// The frequency bin `index` is centred on, Hz.
    public func frequency(ofBin index: Int) -> Double { Double(index) * Double(sampleRate) / Double(size) }
}

/// How capture is going in the current recording (all its segments): overruns and what
/// they cost, segments, and the gaps a lost device left.
public struct CaptureStatistics: Sendable, Equatable, Codable {
    /// Overruns and suspends recovered from.
    public var xruns: Int
    /// Frames the device dropped during those xruns (at least; measured as arecord does).
    public var framesLost: Int64
    /// Frames read from the device (at the device's rate) in this recording.
    public var framesCaptured: Int64
    /// Segments closed so far.
    public var segmentsClosed: Int
    /// Times the device went away, in order; the last one is open while waiting.
    public var gaps: [Gap]
    /// How fast the device's sample clock runs against the system's monotonic clock, in parts
    /// per million: +50 means it delivers 50 frames per million more than its nominal rate
    /// (48 000 Hz that is really 48 002.4 Hz). A line fitted through the least delayed read of
    /// each second; nil until the current capture has run long enough for a stable figure.
    public var deviceClockDriftPPM: Double?

    public init(xruns: Int = 0, framesLost: Int64 = 0, framesCaptured: Int64 = 0, segmentsClosed: Int = 0, gaps: [Gap] = [],
                deviceClockDriftPPM: Double? = nil) {
        self.xruns = xruns
        self.framesLost = framesLost
        self.framesCaptured = framesCaptured
        self.segmentsClosed = segmentsClosed
        self.gaps = gaps
        self.deviceClockDriftPPM = deviceClockDriftPPM
    }

    /// Seconds without capture, over every gap.
    public var gapSeconds: Double { gaps.reduce(0) { $0 + $1.duration } }

    private enum CodingKeys: String, CodingKey { case xruns, framesLost, framesCaptured, segmentsClosed, gaps, deviceClockDriftPPM }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        xruns = try container.decode(Int.self, forKey: .xruns)
        framesLost = try container.decode(Int64.self, forKey: .framesLost)
        framesCaptured = try container.decode(Int64.self, forKey: .framesCaptured)
        segmentsClosed = try container.decodeIfPresent(Int.self, forKey: .segmentsClosed) ?? 0
        gaps = try container.decodeIfPresent([Gap].self, forKey: .gaps) ?? []
        deviceClockDriftPPM = try container.decodeIfPresent(Double.self, forKey: .deviceClockDriftPPM)
    }
}
