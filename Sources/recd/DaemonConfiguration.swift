import FoundationEssentials
import Glibc
import Logging
import RecdProtocol
import RecorderCore
import RecorderModel
import TOML

/// Everything recd can be configured with: defaults for the mode, then the TOML file, then
/// command-line options. etc/recd.toml documents every key.
struct DaemonConfiguration: Equatable, Sendable {
    enum Mode: String, Sendable { case system, user }

    var device = "default"
    var recordingsDirectory: String
    var socketPath: String
    var logLevel: Logger.Level = .info
    var recording = RecordingSettings()

    var periodTime = 0.01
    var bufferTime = 0.5
    var syncInterval = 1.0
    var captureSampleRate: Int?
    var captureChannels: Int?
    var stopTimeout = 5.0
    var waitForDevice = true
    var retryIntervalMax = 1.5
    var silenceWarningAfter: Double? = 60
    var segments = SegmentSettings()
    var storage = StorageSettings()
    var retention = RetentionSettings()

    /// Start recording, with the configured settings, as soon as the daemon is ready.
    var autostart = false
    /// The name of autostarted recordings (the directory of their segments); nil: "recd" when
    /// segmented, else a fresh timestamped name each time (one file per recording).
    var autostartName: String?

    /// What `start` at startup is called.
    var autostartRecordingName: String? { autostartName ?? (segments.length != nil ? "recd" : nil) }

    var meteringEnabled = true
    var levelsInterval = 0.05
    var timeInterval = 0.1

    var maxClients = 64
    var clientQueueBytes = 1 << 20
    var socketMode: mode_t = 0o660
    var socketGroup = ""
    var controlUsers: [String] = []
    var controlGroups: [String] = []
    /// The names above as the system knows them (resolved when the file is read).
    var socketGID: gid_t?
    var controlUIDs: Set<uid_t> = []
    var controlGIDs: Set<gid_t> = []

    var mqtt = MQTTSettings()
    var hooks = HookSettings()

    /// The defaults for a mode: FHS paths for the system instance, XDG paths for a user's.
    static func defaults(for mode: Mode, environment: [String: String]) -> DaemonConfiguration {
        switch mode {
        case .system:
            return DaemonConfiguration(recordingsDirectory: "/var/lib/recd/recordings", socketPath: SocketLocation.system)
        case .user:
            let home = environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
            let data = environment["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/share"
            return DaemonConfiguration(recordingsDirectory: data + "/recd/recordings",
                                       socketPath: SocketLocation.user(environment: environment))
        }
    }

    static func defaultConfigPath(for mode: Mode, environment: [String: String]) -> String {
        switch mode {
        case .system: return "/etc/recd/recd.toml"
        case .user:
            let home = environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
            let config = environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.config"
            return config + "/recd/recd.toml"
        }
    }

    var recorderConfiguration: RecorderConfiguration {
        RecorderConfiguration(device: device, recordingsDirectory: recordingsDirectory, defaultSettings: recording,
                              timeInterval: timeInterval, levelsInterval: levelsInterval, meteringEnabled: meteringEnabled,
                              syncInterval: syncInterval, periodTime: periodTime, bufferTime: bufferTime,
                              captureSampleRate: captureSampleRate, captureChannels: captureChannels,
                              stopTimeout: stopTimeout,
                              segments: segments, waitForDevice: waitForDevice, maximumRetryInterval: retryIntervalMax,
                              silenceWarningAfter: silenceWarningAfter, storage: storage, retention: retention)
    }

    // MARK: The TOML file

    /// Applies the keys in `text` (read from `file`) over the current values.
    mutating func apply(toml text: String, file: String) throws(ConfigurationError) {
        let document: TOMLDocument
        do {
            document = try TOMLDocument(parsing: text)
        } catch {
            throw ConfigurationError(file: file, line: error.line, key: nil, message: error.message)
        }
        let reader = KeyReader(document: document, file: file)
        try reader.read("device") { (value: String) in device = value }
        try reader.read("recordings_dir") { (value: String) throws(ConfigurationError) in
            guard value.hasPrefix("/") else { throw reader.invalid("recordings_dir", "must be an absolute path") }
            recordingsDirectory = value
        }
        try reader.read("socket") { (value: String) throws(ConfigurationError) in
            guard value.hasPrefix("/") else { throw reader.invalid("socket", "must be an absolute path") }
            socketPath = value
        }
        try reader.read("log_level") { (value: Logger.Level) in logLevel = value }

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
            throw ConfigurationError(file: file, line: reader.line(of: "recording"), key: "recording", message: error.message)
        }
        recording = settings

        try reader.readDuration("capture.period_time", in: 0.001...1) { (value: Double) in periodTime = value }
        try reader.readDuration("capture.buffer_time", in: 0.01...10) { (value: Double) in bufferTime = value }
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
            throw ConfigurationError(file: file, line: reader.line(of: "segments"), key: "segments", message: error.message)
        }
        segments = segmentSettings
        try reader.read("autostart.enabled") { (value: Bool) in autostart = value }
        try reader.read("autostart.name") { (value: String) throws(ConfigurationError) in
            do throws(RecorderError) { try RecordingName.validate(value) } catch { throw reader.invalid("autostart.name", error.message) }
            autostartName = value
        }
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
        try applyStorageAndRetention(reader)
        try applyMQTTAndHooks(reader)
        try reader.rejectUnknownKeys()
    }
}

extension DaemonConfiguration {
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

extension KeyReader {
    /// A size: an integer of bytes, or a string such as "64 MiB", "2 GB" or (unless
    /// `percentAllowed` is false) "5%" of the filesystem.
    func readSpace(_ key: String, percentAllowed: Bool = true,
                   _ apply: (SpaceAmount) throws(ConfigurationError) -> Void) throws(ConfigurationError) {
        used.insert(key)
        guard let entry = document.entry(key) else { return }
        let example = percentAllowed ? #"a size such as "64 MiB", "2 GB", "5%" or a number of bytes"#
            : #"a size such as "10 GiB", "500 MB" or a number of bytes"#
        let amount: SpaceAmount?
        switch entry.value {
        case .integer(let bytes): amount = bytes >= 0 ? .bytes(Int64(bytes)) : nil
        case .string(let text): amount = SpaceAmount(parsing: text)
        default: amount = nil
        }
        guard let amount else { throw invalid(key, "must be " + example) }
        if case .percent = amount, !percentAllowed { throw invalid(key, "must be " + example + " (not a percentage)") }
        try apply(amount)
    }

    /// A duration within `range` (seconds): a number of seconds, or a string in recd's one
    /// spelling of durations (`DurationText`: "90s", "30m", "1h30m", "30d", "2w", "01:30:00").
    func readDuration(_ key: String, in range: ClosedRange<Double>, _ apply: (Double) -> Void) throws(ConfigurationError) {
        used.insert(key)
        guard let entry = document.entry(key) else { return }
        let seconds: Double? = switch entry.value {
        case .integer(let value): Double(value)
        case .float(let value): value
        case .string(let text): DurationText.seconds(text)
        default: nil
        }
        guard let seconds else {
            throw invalid(key, "must be a duration: " + DurationText.spellings)
        }
        if let requirement = Limits.requirement(seconds, range, "seconds") { throw invalid(key, requirement) }
        apply(seconds)
    }
}

/// A bad configuration: which file, line and key, and what is wrong.
struct ConfigurationError: Error, CustomStringConvertible, Equatable {
    var file: String
    var line: Int?
    var key: String?
    var message: String

    var description: String {
        var location = file
        if let line { location += ":\(line)" }
        if let key { return "\(location): \(key): \(message)" }
        return "\(location): \(message)"
    }
}

/// Reads typed values by dotted key, remembering which keys were used so that unknown ones
/// (typos) are errors rather than silently ignored.
final class KeyReader {
    let document: TOMLDocument
    let file: String
    var used: Set<String> = []

    init(document: TOMLDocument, file: String) {
        self.document = document
        self.file = file
    }

    func read<T>(_ key: String, _ apply: (T) throws(ConfigurationError) -> Void) throws(ConfigurationError) {
        used.insert(key)
        guard let entry = document.entry(key) else { return }
        let value: Any? = switch (T.self, entry.value) {
        case (is String.Type, .string(let string)): string
        case (is Int.Type, .integer(let integer)): integer
        case (is Double.Type, .float(let float)): float
        case (is Double.Type, .integer(let integer)): Double(integer)
        case (is Bool.Type, .bool(let bool)): bool
        case (is [String].Type, .array(let array)):
            array.allSatisfy { if case .string = $0 { true } else { false } }
                ? array.compactMap { if case .string(let string) = $0 { string } else { nil } } : nil
        default: nil
        }
        guard let typed = value as? T else { throw invalid(key, "must be \(Self.describe(T.self))") }
        try apply(typed)
    }

    /// A number that must lie in `range` (`unit` names it in the error).
    func read<T: Comparable & CustomStringConvertible>(_ key: String, in range: ClosedRange<T>, _ unit: String = "",
                                                       _ apply: (T) -> Void) throws(ConfigurationError) {
        try read(key) { (value: T) throws(ConfigurationError) in
            guard range.contains(value) else {
                throw invalid(key, "must be between \(range.lowerBound) and \(range.upperBound)" + (unit.isEmpty ? "" : " " + unit))
            }
            apply(value)
        }
    }

    /// One of an enumeration's string values.
    func read<T: RawRepresentable & CaseIterable>(_ key: String, _ apply: (T) -> Void) throws(ConfigurationError) where T.RawValue == String {
        try read(key) { (value: String) throws(ConfigurationError) in
            guard let typed = T(rawValue: value) else {
                throw invalid(key, "must be one of " + T.allCases.map(\.rawValue).joined(separator: ", "))
            }
            apply(typed)
        }
    }

    func rejectUnknownKeys() throws(ConfigurationError) {
        let sections = Set(used.compactMap { $0.contains(".") ? String($0.split(separator: ".")[0]) : nil })
        for key in document.root.keys.sorted() where !used.contains(key) {
            throw ConfigurationError(file: file, line: line(of: key), key: key,
                                     message: sections.contains(key) ? "must be a table ([\(key)])" : "unknown key")
        }
        for name in document.tables.keys.sorted() {
            guard sections.contains(name) else {
                throw ConfigurationError(file: file, line: line(of: name), key: name, message: "unknown table")
            }
            for inner in document.tables[name]!.entries.keys.sorted() where !used.contains(name + "." + inner) {
                throw ConfigurationError(file: file, line: line(of: name + "." + inner), key: name + "." + inner, message: "unknown key")
            }
        }
    }

    /// The uids of user names (or numeric uids written as strings); an unknown name is an error
    /// at the key's line.
    func userIDs(_ key: String, _ names: [String]) throws(ConfigurationError) -> Set<uid_t> {
        var result: Set<uid_t> = []
        for name in names {
            if let uid = uid_t(name) { result.insert(uid); continue }
            guard let entry = getpwnam(name) else { throw invalid(key, "no user named '\(name)'") }
            result.insert(entry.pointee.pw_uid)
        }
        return result
    }

    /// The gids of group names (or numeric gids written as strings).
    func groupIDs(_ key: String, _ names: [String]) throws(ConfigurationError) -> Set<gid_t> {
        var result: Set<gid_t> = []
        for name in names {
            if let gid = gid_t(name) { result.insert(gid); continue }
            guard let entry = getgrnam(name) else { throw invalid(key, "no group named '\(name)'") }
            result.insert(entry.pointee.gr_gid)
        }
        return result
    }

    func invalid(_ key: String, _ message: String) -> ConfigurationError {
        ConfigurationError(file: file, line: line(of: key), key: key, message: message)
    }

    /// The line a dotted key, or a table's header, is written on.
    func line(of key: String) -> Int? {
        document.entry(key)?.line ?? document.tables[key]?.line
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int.Type: "an integer"
        case is Double.Type: "a number"
        case is Bool.Type: "true or false"
        case is [String].Type: "a list of strings"
        default: "\(type)"
        }
    }
}

extension Logger.Level {
    /// The syslog priority journald reads from a `<N>` line prefix.
    var syslogPriority: Int {
        switch self {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }
}
