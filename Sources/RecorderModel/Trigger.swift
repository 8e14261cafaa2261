import FoundationEssentials

/// Sound-activated recording: when an event opens and closes. A triggered recording listens
/// all the time and writes a file per event (a segment of the recording), beginning `preRoll`
/// before the sound did and ending `hang` after it.
public struct TriggerSettings: Sendable, Equatable, Codable {
    /// What a detection block's level is: its RMS or its largest sample.
    public enum Measure: String, Sendable, Codable, CaseIterable { case rms, peak }
    /// Which channels decide: `any` (the loudest), `each` (the quietest: all of them must be
    /// above), `mix` (their average, as one channel).
    public enum Channels: String, Sendable, Codable, CaseIterable { case any, each, mix }

    public var measure: Measure
    public var channels: Channels
    /// Band filter for detection only (the file stays unfiltered), Hz: 4th-order Butterworth
    /// high- and low-pass. nil: no filter on that side.
    public var highPass: Double?
    public var lowPass: Double?
    /// Opens at this level (dBFS); nil: relative to the noise floor (`aboveFloor`).
    public var threshold: Double?
    /// Opens this many dB above the noise floor when `threshold` is nil.
    public var aboveFloor: Double
    /// The level that closes an event is this many dB below the one that opens it.
    public var hysteresis: Double
    /// The noise floor: this percentile of the block levels over the last `floorWindow` seconds.
    public var floorWindow: Double
    public var floorPercentile: Double
    /// Seconds above the threshold before an event opens (a shorter click opens nothing).
    public var attack: Double
    /// Seconds below the closing level before an event closes (pauses shorter stay one event).
    public var hang: Double
    /// Events whose sound (onset to the last block above) is shorter are discarded, unless
    /// `keepShort`. 0: none is.
    public var minimumLength: Double
    public var keepShort: Bool
    /// An event longer than this continues in a new file (no frame lost); nil: never.
    public var maximumLength: Double?
    /// Seconds before the onset each file begins with; nil: the configured pre-roll.
    public var preRoll: Double?

    public init(measure: Measure = .rms, channels: Channels = .mix, highPass: Double? = nil, lowPass: Double? = nil,
                threshold: Double? = nil, aboveFloor: Double = 12, hysteresis: Double = 6, floorWindow: Double = 60,
                floorPercentile: Double = 10, attack: Double = 0.05, hang: Double = 2, minimumLength: Double = 0,
                keepShort: Bool = false, maximumLength: Double? = 3600, preRoll: Double? = nil) {
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

    /// Seconds per detection block: levels, the floor and every decision move in these steps.
    public static let blockSeconds = 0.01

    /// The levels (dBFS) that open an event and keep it open, over a noise floor `floor`
    /// (nil: not measured yet); nil while a relative threshold has no floor.
    ///
    /// An event closes below the opening level less `hysteresis`, but never below halfway
    /// from the floor to the opening level: it closes when the sound has gone, whatever the
    /// background. An absolute `threshold = -40` over a steady background at -43.7 dBFS
    /// would otherwise close only below -46, which the background never reaches. With the
    /// defaults of a relative threshold (12 dB above the floor, 6 of hysteresis) the two are
    /// the same level. `closingByFloor` false leaves the closing level at the opening level
    /// less `hysteresis` (an event that opened before a floor was known: the floor measured
    /// since is mostly the event's own sound).
    public func levels(floor: Double?, closingByFloor: Bool = true) -> (open: Double, close: Double)? {
        let open: Double
        if let threshold {
            open = threshold
        } else {
            guard let floor else { return nil }
            open = floor + aboveFloor
        }
        var close = open - hysteresis
        if closingByFloor, let floor, floor < open { close = Swift.max(close, (floor + open) / 2) }
        return (open, close)
    }

    /// The ranges (`Limits` style), by the names the protocol and the configuration use.
    public static let ranges: [(name: String, unit: String, range: ClosedRange<Double>, value: @Sendable (TriggerSettings) -> Double?)] = [
        ("highPass", "Hz", 10...100_000, { $0.highPass }),
        ("lowPass", "Hz", 10...100_000, { $0.lowPass }),
        ("threshold", "dBFS", -150...0, { $0.threshold }),
        ("aboveFloor", "dB", 0.5...100, { $0.aboveFloor }),
        ("hysteresis", "dB", 0...60, { $0.hysteresis }),
        ("floorWindow", "seconds", 1...3600, { $0.floorWindow }),
        ("floorPercentile", "percent", 0...100, { $0.floorPercentile }),
        ("attack", "seconds", 0...60, { $0.attack }),
        ("hang", "seconds", 0...3600, { $0.hang }),
        ("minimumLength", "seconds", 0...3600, { $0.minimumLength }),
        ("maximumLength", "seconds", 1...86400, { $0.maximumLength }),
        ("preRoll", "seconds", Limits.preRoll, { $0.preRoll }),
    ]

    /// The first value outside its range, as a sentence; nil when all are in range.
    public var refusal: String? {
        for entry in Self.ranges {
            if let value = entry.value(self), let refusal = Limits.refusal(entry.name, value, entry.range, entry.unit) {
                return refusal
            }
        }
        if let highPass, let lowPass, highPass >= lowPass {
            return "'highPass' (\(Limits.number(highPass)) Hz) must be below 'lowPass' (\(Limits.number(lowPass)) Hz)"
        }
        if let maximumLength, minimumLength > maximumLength {
            return "'minimumLength' (\(Limits.number(minimumLength)) s) must not exceed 'maximumLength' (\(Limits.number(maximumLength)) s)"
        }
        return nil
    }

    /// Checks the settings against a device rate: a filter edge must lie below half of it.
    public func validate(deviceRate: Int? = nil) throws(RecorderError) {
        if let refusal { throw RecorderError(.invalidSettings, "trigger: " + refusal) }
        if let deviceRate {
            for (name, edge) in [("highPass", highPass), ("lowPass", lowPass)] {
                if let edge, edge >= Double(deviceRate) / 2 {
                    throw RecorderError(.invalidSettings,
                        "trigger: '\(name)' (\(Limits.number(edge)) Hz) must be below half the device rate (\(deviceRate) Hz)")
                }
            }
        }
    }
}

/// An event's life, as the `trigger` topic and MQTT tell it.
public struct TriggerEvent: Sendable, Equatable, Codable {
    public enum Kind: String, Sendable, Codable, CaseIterable {
        /// The sound passed the attack: a file is being written.
        case opened
        /// The sound ended (hang elapsed), the recording stopped or the maximum length cut
        /// it (`opened` then follows for the next file, with the same event number): the
        /// file is finalized.
        case closed
        /// Shorter than `minimumLength`: its file was deleted.
        case discarded
    }

    public var kind: Kind
    public var recordingId: String
    /// The event's number in the recording, from 1 (continuations keep it).
    public var event: Int
    /// The file's segment index and final path.
    public var index: Int
    public var path: String
    /// When the file's first (pre-rolled) frame and the sound's onset were captured.
    public var start: Date
    public var onset: Date
    /// The same two as the device's frame counts since it opened (`ListeningStatus.framesCaptured`
    /// counts the same way): the file begins with frame `firstFrame`.
    public var firstFrame: Int64
    public var onsetFrame: Int64
    /// Seconds of audio in the file (closed; 0 when opened).
    public var duration: Double
    /// Seconds of sound: onset to the last block above the closing level (closed).
    public var soundDuration: Double
    /// The loudest detection block (dBFS) so far.
    public var peak: Double
    /// Why it closed: `hang`, `maximumLength` (continued in the next file), `stopped`.
    public var reason: String?

    public init(kind: Kind, recordingId: String, event: Int, index: Int, path: String, start: Date, onset: Date,
                firstFrame: Int64, onsetFrame: Int64, duration: Double, soundDuration: Double, peak: Double, reason: String? = nil) {
        self.firstFrame = firstFrame
        self.onsetFrame = onsetFrame
        self.kind = kind
        self.recordingId = recordingId
        self.event = event
        self.index = index
        self.path = path
        self.start = start
        self.onset = onset
        self.duration = duration
        self.soundDuration = soundDuration
        self.peak = peak
        self.reason = reason
    }
}

/// A triggered recording's detector now: its settings, whether an event is open, the level
/// against the threshold and the floor, and its counts.
public struct TriggerStatus: Sendable, Equatable, Codable {
    public var settings: TriggerSettings
    /// `armed` (listening, nothing written) or `open` (an event's file is being written).
    public var state: String
    /// Events opened so far, and of them discarded as too short.
    public var events: Int
    public var discarded: Int
    /// The last detection block's level, dBFS (after the band filter, over the chosen channels).
    public var level: Double
    /// The noise floor (dBFS); nil until a second of input was measured.
    public var floor: Double?
    /// The levels that open and close an event now (dBFS); nil while the floor is unknown.
    public var openLevel: Double?
    public var closeLevel: Double?
    /// The open event's onset.
    public var eventOnset: Date?

    public init(settings: TriggerSettings, state: String, events: Int, discarded: Int, level: Double, floor: Double?,
                openLevel: Double?, closeLevel: Double?, eventOnset: Date?) {
        self.settings = settings
        self.state = state
        self.events = events
        self.discarded = discarded
        self.level = level
        self.floor = floor
        self.openLevel = openLevel
        self.closeLevel = closeLevel
        self.eventOnset = eventOnset
    }
}
