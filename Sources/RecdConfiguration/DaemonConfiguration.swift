import FoundationEssentials
import Glibc
import Logging
import RecdProtocol
import RecorderCore
import RecorderModel
import SoundCards
import TOML

/// Everything recd can be configured with: defaults for the mode, then the TOML file, then
/// command-line options. etc/recd.toml documents every key.
public struct DaemonConfiguration: Equatable, Sendable {
    public enum Mode: String, Sendable { case system, user }

    public var device = "default"
    /// Where `device` was written (for a message about it), when it came from the file.
    public var deviceFile: String?
    public var deviceLine: Int?
    /// Where sysfs, /dev and udev's database are: the machine's, or under RECD_SYSTEM_ROOT (tests).
    public var systemRoots = SystemRoots.live
    public var recordingsDirectory: String
    public var socketPath: String
    public var logLevel: Logger.Level = .info
    public var recording = RecordingSettings()

    public var periodTime = 0.01
    public var bufferTime = 0.5
    public var writeBuffer = 10.0
    public var syncInterval = 1.0
    public var captureSampleRate: Int?
    public var captureChannels: Int?
    public var stopTimeout = 5.0
    public var waitForDevice = true
    public var retryIntervalMax = 1.5
    public var silenceWarningAfter: Double? = 60
    public var segments = SegmentSettings()
    public var storage = StorageSettings()
    public var retention = RetentionSettings()

    /// Start recording, with the configured settings, as soon as the daemon is ready.
    public var autostart = false
    /// The name of autostarted recordings (the directory of their segments); nil: "recd" when
    /// segmented, else a fresh timestamped name each time (one file per recording).
    public var autostartName: String?

    /// What `start` at startup is called.
    public var autostartRecordingName: String? { autostartName ?? (segments.length != nil ? "recd" : nil) }

    /// Listen from daemon start (levels and pre-roll before any `start`).
    public var listenAtStart = false
    /// Seconds of input kept while listening, for the next recording's beginning.
    public var preRoll = 5.0
    /// `[trigger]`: what a triggered start detects with; `enabled` makes autostart (and
    /// schedules) arm it instead of recording every frame.
    public var trigger = TriggerSettings()
    public var triggerEnabled = false
    /// `[schedule]`: recording windows; nil without `windows`.
    public var schedule: ScheduledRecording?
    /// `[schedule]`'s place, with or without windows: the web page's sunrise and sunset.
    public var latitude: Double?
    public var longitude: Double?

    public var meteringEnabled = true
    public var levelsInterval = 0.05
    public var timeInterval = 0.1

    public var maxClients = 64
    public var clientQueueBytes = 1 << 20
    public var socketMode: mode_t = 0o660
    public var socketGroup = ""
    public var controlUsers: [String] = []
    public var controlGroups: [String] = []
    /// The names above as the system knows them (resolved when the file is read).
    public var socketGID: gid_t?
    public var controlUIDs: Set<uid_t> = []
    public var controlGIDs: Set<gid_t> = []
    /// Who may hear the input (`tap`) besides root, recd's user and recd's group.
    public var tapUsers: [String] = []
    public var tapGroups: [String] = []
    public var tapUIDs: Set<uid_t> = []
    public var tapGIDs: Set<gid_t> = []

    public var mqtt = MQTTSettings()
    public var hooks = HookSettings()
    public var web = WebSettings()
    public var rtsp = RTSPSettings()
    /// `[[source]]` tables, in the file's order (empty: the implicit source; `sources`).
    public var declaredSources: [SourceConfiguration] = []

    /// The defaults for a mode: FHS paths for the system instance, XDG paths for a user's.
    public static func defaults(for mode: Mode, environment: [String: String]) -> DaemonConfiguration {
        switch mode {
        case .system:
            var configuration = DaemonConfiguration(recordingsDirectory: "/var/lib/recd/recordings", socketPath: SocketLocation.system)
            configuration.systemRoots = SystemRoots.from(environment: environment)
            return configuration
        case .user:
            let home = environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
            let data = environment["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/share"
            var configuration = DaemonConfiguration(recordingsDirectory: data + "/recd/recordings",
                                                    socketPath: SocketLocation.user(environment: environment))
            configuration.systemRoots = SystemRoots.from(environment: environment)
            return configuration
        }
    }

    public static func defaultConfigPath(for mode: Mode, environment: [String: String]) -> String {
        switch mode {
        case .system: return "/etc/recd/recd.toml"
        case .user:
            let home = environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
            let config = environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.config"
            return config + "/recd/recd.toml"
        }
    }

    public var recorderConfiguration: RecorderConfiguration {
        RecorderConfiguration(device: device, recordingsDirectory: recordingsDirectory, defaultSettings: recording,
                              timeInterval: timeInterval, levelsInterval: levelsInterval, meteringEnabled: meteringEnabled,
                              publishesOnDemand: true,
                              syncInterval: syncInterval, periodTime: periodTime, bufferTime: bufferTime, writeBuffer: writeBuffer,
                              captureSampleRate: captureSampleRate, captureChannels: captureChannels,
                              stopTimeout: stopTimeout,
                              segments: segments, waitForDevice: waitForDevice, maximumRetryInterval: retryIntervalMax,
                              silenceWarningAfter: silenceWarningAfter, storage: storage, retention: retention,
                              preRoll: preRoll, trigger: trigger, systemRoots: systemRoots)
            .named(declaredSources.first?.name ?? Self.defaultSourceName)
    }

    /// The device against the cards present: a name that matches several (two identical
    /// microphones named by vendor and product) is refused, naming each card's port id. A
    /// device that is not present passes: it may be plugged in later. For `--check-config`,
    /// start and reload, after the command line's `--device`.
    /// Every source's device is checked, and named by its source.
    public func checkDevice() throws(ConfigurationError) {
        let scan = SoundCardScan(roots: systemRoots)
        for source in sources {
            let configuration = source.configuration
            do throws(SoundCardError) {
                _ = try scan.resolve(configuration.device, roots: systemRoots)
            } catch {
                switch error {
                case .notPresent, .changed: continue
                case .invalidName, .ambiguous:
                    throw ConfigurationError(file: configuration.deviceFile ?? "--device",
                                             line: configuration.deviceFile == nil ? nil : configuration.deviceLine,
                                             key: declaredSources.isEmpty ? "device" : "source \"\(source.name)\": device",
                                             message: "\(error)")
                }
            }
        }
    }

    // MARK: The TOML file

    /// Applies the keys in `text` (read from `file`) over the current values.
    public mutating func apply(toml text: String, file: String) throws(ConfigurationError) {
        let document: TOMLDocument
        do {
            document = try TOMLDocument(parsing: text)
        } catch {
            throw ConfigurationError(file: file, line: error.line, key: nil, message: error.message)
        }
        let reader = KeyReader(document: document, file: file)
        // The top level's source keys are every source's defaults (the implicit source's own).
        try applySourceKeys(reader)
        try applyStationKeys(reader)
        try reader.rejectUnknownKeys(arrays: ["source"])
        try applySources(document.arrays["source"] ?? [], file: file, topLevelDevice: reader.line(of: "device"))
    }

    /// What each source has of its own (doc/architecture.md, "A station and its sources"):
    /// device, `[recording]`, `[capture]`, `[segments]`, `[autostart]`, `[listen]`, `[trigger]`,
    /// `[schedule]`. Read from the top level, and again from each `[[source]]` over a copy.
    mutating func applySourceKeys(_ reader: KeyReader) throws(ConfigurationError) {
        try reader.read("device") { (value: String) throws(ConfigurationError) in
            do throws(SoundCardError) {
                _ = try DeviceName(parsing: value)
            } catch {
                throw reader.invalid("device", "\(error)")
            }
            device = value
            deviceFile = reader.file
            deviceLine = reader.line(of: "device")
        }
        var settings = recording
        try reader.read("recording.format") { (value: String) throws(ConfigurationError) in
            guard let format = AudioFileFormat(name: value) else {
                throw reader.invalid("recording.format", "must be one of " + AudioFileFormat.names)
            }
            settings.format = format
        }
        try reader.read("recording.sample_rate") { (value: Int) in settings.sampleRate = value }
        try reader.read("recording.channels") { (value: Int) in settings.channels = value }
        try reader.read("recording.bit_depth") { (value: Int) in settings.bitDepth = value }
        try reader.read("recording.quality") { (value: RecordingQuality) in settings.quality = value }
        try reader.read("recording.bit_rate") { (value: Int) in settings.bitRate = value }
        do {
            try settings.validate()
        } catch {
            throw ConfigurationError(file: reader.file, line: reader.line(of: "recording"), key: "recording", message: error.message)
        }
        recording = settings

        try reader.readDuration("capture.period_time", in: 0.001...1) { (value: Double) in periodTime = value }
        try reader.readDuration("capture.buffer_time", in: 0.01...10) { (value: Double) in bufferTime = value }
        try reader.readDuration("capture.write_buffer", in: Limits.writeBuffer) { (value: Double) in writeBuffer = value }
        try reader.readDuration("capture.sync_interval", in: 0.01...3600) { (value: Double) in syncInterval = value }
        try reader.read("capture.sample_rate", in: 1000...768_000, "Hz") { (value: Int) in captureSampleRate = value }
        try reader.read("capture.channels", in: 1...32) { (value: Int) in captureChannels = value }
        try reader.readDuration("capture.stop_timeout", in: 0.1...20) { (value: Double) in stopTimeout = value }
        try reader.read("capture.wait_for_device") { (value: Bool) in waitForDevice = value }
        try reader.readDuration("capture.retry_interval_max", in: 0.1...60) { (value: Double) in retryIntervalMax = value }
        try reader.readDuration("capture.silence_warning", in: 0...86400) { (value: Double) in
            silenceWarningAfter = value > 0 ? value : nil
        }
        var segmentSettings = segments
        try reader.readDuration("segments.length", in: 1...86400) { (value: Double) in segmentSettings.length = value }
        try reader.read("segments.align_to_clock") { (value: Bool) in segmentSettings.alignToClock = value }
        try reader.read("segments.template") { (value: String) in segmentSettings.template = value }
        try reader.read("segments.local_time") { (value: Bool) in segmentSettings.localTime = value }
        do {
            try segmentSettings.validate()
        } catch {
            throw ConfigurationError(file: reader.file, line: reader.line(of: "segments"), key: "segments", message: error.message)
        }
        segments = segmentSettings
        try reader.read("autostart.enabled") { (value: Bool) in autostart = value }
        try reader.read("autostart.name") { (value: String) throws(ConfigurationError) in
            do throws(RecorderError) { try RecordingName.validate(value) } catch { throw reader.invalid("autostart.name", error.message) }
            autostartName = value
        }
        try reader.read("listen.enabled") { (value: Bool) in listenAtStart = value }
        try reader.readDuration("listen.pre_roll", in: Limits.preRoll) { (value: Double) in preRoll = value }
        try applyTrigger(reader)
        try applySchedule(reader)
    }

    /// What the station has once, whatever its sources: paths, the log, metering, the server,
    /// storage and retention, MQTT and hooks, the web page, RTSP.
    mutating func applyStationKeys(_ reader: KeyReader) throws(ConfigurationError) {
        try reader.read("recordings_dir") { (value: String) throws(ConfigurationError) in
            guard value.hasPrefix("/") else { throw reader.invalid("recordings_dir", "must be an absolute path") }
            recordingsDirectory = value
        }
        try reader.read("socket") { (value: String) throws(ConfigurationError) in
            guard value.hasPrefix("/") else { throw reader.invalid("socket", "must be an absolute path") }
            socketPath = value
        }
        try reader.read("log_level") { (value: Logger.Level) in logLevel = value }
        try reader.read("metering.enabled") { (value: Bool) in meteringEnabled = value }
        try reader.readDuration("metering.levels_interval", in: 0.005...60) { (value: Double) in levelsInterval = value }
        try reader.readDuration("metering.time_interval", in: 0.005...60) { (value: Double) in timeInterval = value }
        try reader.read("server.max_clients", in: 1...100_000) { (value: Int) in maxClients = value }
        try reader.read("server.client_queue_bytes", in: 4096...(1 << 30), "bytes") { (value: Int) in clientQueueBytes = value }
        try reader.read("server.socket_mode") { (value: String) throws(ConfigurationError) in
            guard let mode = mode_t(value, radix: 8), mode <= 0o777 else {
                throw reader.invalid("server.socket_mode", "must be an octal mode like \"0660\"")
            }
            socketMode = mode
        }
        // Names are resolved as they are read, so that --check-config and a reload refuse an
        // unknown user or group at its line, as any other bad value, not the next start.
        try reader.read("server.socket_group") { (value: String) throws(ConfigurationError) in
            socketGID = value.isEmpty ? nil : try reader.groupIDs("server.socket_group", [value]).first
            socketGroup = value
        }
        try reader.read("server.control_users") { (value: [String]) throws(ConfigurationError) in
            controlUIDs = try reader.userIDs("server.control_users", value)
            controlUsers = value
        }
        try reader.read("server.control_groups") { (value: [String]) throws(ConfigurationError) in
            controlGIDs = try reader.groupIDs("server.control_groups", value)
            controlGroups = value
        }
        try reader.read("server.tap_users") { (value: [String]) throws(ConfigurationError) in
            tapUIDs = try reader.userIDs("server.tap_users", value)
            tapUsers = value
        }
        try reader.read("server.tap_groups") { (value: [String]) throws(ConfigurationError) in
            tapGIDs = try reader.groupIDs("server.tap_groups", value)
            tapGroups = value
        }
        try applyStorageAndRetention(reader)
        try applyMQTTAndHooks(reader)
        try applyWeb(reader)
        try applyRTSP(reader)
    }
}

extension DaemonConfiguration {
    /// `[trigger]`: sound-activated recording. Each number's range is `TriggerSettings.ranges`'.
    mutating func applyTrigger(_ reader: KeyReader) throws(ConfigurationError) {
        var settings = trigger
        try reader.read("trigger.enabled") { (value: Bool) in triggerEnabled = value }
        try reader.read("trigger.measure") { (value: TriggerSettings.Measure) in settings.measure = value }
        try reader.read("trigger.channels") { (value: TriggerSettings.Channels) in settings.channels = value }
        func range(_ name: String) -> ClosedRange<Double> { TriggerSettings.ranges.first { $0.name == name }!.range }
        try reader.read("trigger.high_pass", in: range("highPass"), "Hz") { (value: Double) in settings.highPass = value }
        try reader.read("trigger.low_pass", in: range("lowPass"), "Hz") { (value: Double) in settings.lowPass = value }
        try reader.read("trigger.threshold", in: range("threshold"), "dBFS") { (value: Double) in settings.threshold = value }
        try reader.read("trigger.above_floor", in: range("aboveFloor"), "dB") { (value: Double) in settings.aboveFloor = value }
        try reader.read("trigger.hysteresis", in: range("hysteresis"), "dB") { (value: Double) in settings.hysteresis = value }
        try reader.read("trigger.floor_percentile", in: range("floorPercentile"), "percent") { (value: Double) in
            settings.floorPercentile = value
        }
        try reader.readDuration("trigger.floor_window", in: range("floorWindow")) { settings.floorWindow = $0 }
        try reader.readDuration("trigger.attack", in: range("attack")) { settings.attack = $0 }
        try reader.readDuration("trigger.hang", in: range("hang")) { settings.hang = $0 }
        try reader.readDuration("trigger.minimum_length", in: range("minimumLength")) { settings.minimumLength = $0 }
        try reader.read("trigger.keep_short") { (value: Bool) in settings.keepShort = value }
        // 0: no maximum.
        try reader.readDuration("trigger.maximum_length", in: 0...range("maximumLength").upperBound) {
            settings.maximumLength = $0 > 0 ? $0 : nil
        }
        try reader.readDuration("trigger.pre_roll", in: range("preRoll")) { settings.preRoll = $0 }
        if settings.threshold != nil, reader.line(of: "trigger.above_floor") != nil {
            throw reader.invalid("trigger.threshold", "give either 'threshold' (absolute, dBFS) or 'above_floor' (relative to the noise floor), not both")
        }
        // Each key's range was checked at its line; what is left is how two keys go together.
        if let highPass = settings.highPass, let lowPass = settings.lowPass, highPass >= lowPass {
            throw reader.invalid("trigger.high_pass", "must be below low_pass (\(Limits.number(lowPass)) Hz), not \(Limits.number(highPass))")
        }
        if let maximum = settings.maximumLength, settings.minimumLength > maximum {
            throw reader.invalid("trigger.minimum_length", "must not exceed maximum_length (\(Limits.number(maximum)) s)")
        }
        if let refusal = settings.refusal {
            throw ConfigurationError(file: reader.file, line: reader.line(of: "trigger"), key: "trigger", message: refusal)
        }
        trigger = settings
    }

    /// `[schedule]`: windows in which recd records (or, with `mode = "trigger"`, is armed).
    /// A `[[source]]` starts from what the station's tables said: its own keys replace theirs
    /// one by one (a source without `[source.schedule]` follows the station's windows).
    mutating func applySchedule(_ reader: KeyReader) throws(ConfigurationError) {
        let inherited = self.schedule
        var windows: [RecordingWindow] = inherited?.schedule.windows ?? []
        var schedule = Schedule(windows: [], latitude: latitude, longitude: longitude)
        var mode = inherited?.trigger != nil ? "trigger" : "record", outside = inherited?.outside ?? .close
        var name = inherited?.name
        var waitForClock = inherited?.waitForClock ?? 0
        try reader.read("schedule.windows") { (value: [String]) throws(ConfigurationError) in
            windows = []
            for (index, text) in value.enumerated() {
                do throws(RecorderError) { windows.append(try RecordingWindow(parsing: text)) } catch {
                    throw reader.invalid("schedule.windows", "window \(index + 1): " + error.message)
                }
            }
        }
        try reader.read("schedule.latitude", in: -90.0...90.0, "degrees") { (value: Double) in schedule.latitude = value }
        try reader.read("schedule.longitude", in: -180.0...180.0, "degrees") { (value: Double) in schedule.longitude = value }
        try reader.read("schedule.mode") { (value: String) throws(ConfigurationError) in
            guard ["record", "trigger"].contains(value) else {
                throw reader.invalid("schedule.mode", "must be \"record\" (every frame) or \"trigger\" (armed, [trigger])")
            }
            mode = value
        }
        try reader.read("schedule.outside") { (value: ScheduledRecording.Outside) in outside = value }
        try reader.read("schedule.name") { (value: String) throws(ConfigurationError) in
            do throws(RecorderError) { try RecordingName.validate(value) } catch { throw reader.invalid("schedule.name", error.message) }
            name = value
        }
        try reader.readDuration("schedule.wait_for_clock", in: 0...86400) { (value: Double) in waitForClock = value }
        latitude = schedule.latitude
        longitude = schedule.longitude
        guard !windows.isEmpty else { schedule = Schedule(windows: []); self.schedule = nil; return }
        schedule.windows = windows
        do throws(RecorderError) { try schedule.validate() } catch {
            throw ConfigurationError(file: reader.file, line: reader.line(of: "schedule"), key: "schedule", message: error.message)
        }
        self.schedule = ScheduledRecording(schedule: schedule, trigger: mode == "trigger" ? trigger : nil, name: name, outside: outside,
                                           waitForClock: waitForClock)
    }

    /// `[storage]` (the space guard) and `[retention]`.
    mutating func applyStorageAndRetention(_ reader: KeyReader) throws(ConfigurationError) {
        try reader.readSpace("storage.minimum_free") { storage.minimumFree = $0 }
        try reader.readSpace("storage.warning_free") { storage.warningFree = $0 }
        try reader.readDuration("storage.check_interval", in: 0.05...60) { (value: Double) in storage.checkInterval = value }
        try reader.readDuration("retention.max_age", in: 1...(100 * 366 * 86400)) { retention.maximumAge = $0 }
        try reader.readSpace("retention.max_total_size", percentAllowed: false) { (value: SpaceAmount) throws(ConfigurationError) in
            guard case .bytes(let bytes) = value, bytes > 0 else {
                throw reader.invalid("retention.max_total_size", "must be more than 0 bytes")
            }
            retention.maximumTotalBytes = bytes
        }
        try reader.readSpace("retention.keep_free") { (value: SpaceAmount) throws(ConfigurationError) in
            guard !value.isZero else { throw reader.invalid("retention.keep_free", "must be more than 0 (leave it out to turn it off)") }
            retention.keepFree = value
        }
        try reader.readDuration("retention.interval", in: 1...86400) { (value: Double) in retention.interval = value }
        // 0: no grace.
        try reader.readDuration("retention.grace", in: 0...604_800) { (value: Double) in retention.grace = value }
    }
}

