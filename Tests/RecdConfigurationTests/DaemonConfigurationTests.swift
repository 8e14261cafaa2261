import FoundationEssentials
@testable import RecdConfiguration
import RecorderModel
import Testing

/// A user instance's defaults with `text` read over them as recd.toml, or the error it gives.
protocol ReadsConfiguration {}

extension ReadsConfiguration {
    func read(_ text: String) throws(ConfigurationError) -> DaemonConfiguration {
        var configuration = DaemonConfiguration.defaults(for: .user, environment: ["HOME": "/home/test"])
        try configuration.apply(toml: text, file: "recd.toml")
        return configuration
    }

    func error(_ text: String) -> String? {
        do { _ = try read(text) } catch { return error.description }
        return nil
    }
}

/// recd.toml read into a DaemonConfiguration: every key typed and range-checked, durations in
/// the one spelling, unknown keys and tables refused, each error at its file and line.
@Suite("configuration reader")
struct DaemonConfigurationTests: ReadsConfiguration {
    @Test func anEmptyFileKeepsTheDefaults() throws {
        let configuration = try read("")
        #expect(configuration.device == "default")
        #expect(configuration.recordingsDirectory == "/home/test/.local/share/recd/recordings")
        #expect(configuration.segments.length == nil)
        #expect(configuration.recording.format == .wav)
    }

    /// Every key that holds a time: its lowest and highest values in its range are taken (as
    /// numbers and as durations with units), one beyond either end is refused with the range.
    @Test(arguments: [
        ("capture", "period_time", 0.001, 1.0), ("capture", "buffer_time", 0.01, 10), ("capture", "write_buffer", 0.5, 120),
        ("capture", "sync_interval", 0.01, 3600),
        ("capture", "stop_timeout", 0.1, 20), ("capture", "retry_interval_max", 0.1, 60), ("capture", "silence_warning", 0, 86400),
        ("segments", "length", 1, 86400), ("metering", "levels_interval", 0.005, 60), ("metering", "time_interval", 0.005, 60),
        ("storage", "check_interval", 0.05, 60), ("retention", "interval", 1, 86400), ("retention", "grace", 0, 604_800),
        ("mqtt", "telemetry_interval", 0, 3600), ("hooks", "timeout", 0.1, 86400),
    ] as [(String, String, Double, Double)])
    func everyDurationKeyTakesItsRangeAndRefusesBeyondIt(table: String, key: String, lowest: Double, highest: Double) throws {
        for value in [lowest, highest] {
            #expect(throws: Never.self) { try read("[\(table)]\n\(key) = \(value)\n") }
        }
        #expect(throws: Never.self) { try read("[\(table)]\n\(key) = \"\(Int(highest * 1000))ms\"\n") }
        let message = error("[\(table)]\n\(key) = \(highest * 2 + 1)\n")
        #expect(message?.hasPrefix("recd.toml:2: \(table).\(key): must be between \(Limits.number(lowest)) and \(Limits.number(highest)) seconds")
                == true, "\(message ?? "accepted")")
        #expect(error("[\(table)]\n\(key) = \"soon\"\n")?.contains("\(table).\(key): must be a duration: seconds (90, 1.5)") == true)
        #expect(error("[\(table)]\n\(key) = true\n") != nil)
    }

    @Test func durationsAreReadInTheOneSpelling() throws {
        #expect(try read("[segments]\nlength = \"1h\"\n").segments.length == 3600)
        #expect(try read("[segments]\nlength = \"00:15:00\"\n").segments.length == 900)
        #expect(try read("[retention]\nmax_age = \"2w\"\n").retention.maximumAge == 1_209_600)
        #expect(try read("[capture]\nsync_interval = \"500ms\"\n").syncInterval == 0.5)
        // Zero, where it means "off", may be written as a duration too.
        #expect(try read("[retention]\ngrace = \"0s\"\n").retention.grace == 0)
        #expect(error("[segments]\nlength = \"0s\"\n")?.contains("segments.length: must be a duration") == true)
    }

    @Test(arguments: [
        ("[server]\nmax_clients = 0\n", "recd.toml:2: server.max_clients: must be between 1 and 100000"),
        ("[server]\nclient_queue_bytes = 10\n", "recd.toml:2: server.client_queue_bytes: must be between 4096 and 1073741824 bytes"),
        ("[capture]\nsample_rate = 999\n", "recd.toml:2: capture.sample_rate: must be between 1000 and 768000 Hz"),
        ("[capture]\nchannels = 33\n", "recd.toml:2: capture.channels: must be between 1 and 32"),
        ("[mqtt]\nport = 70000\n", "recd.toml:2: mqtt.port: must be between 1 and 65535"),
        ("[mqtt]\nqos = 3\n", "recd.toml:2: mqtt.qos: must be between 0 and 2"),
        ("[mqtt]\nkeepalive = 1\n", "recd.toml:2: mqtt.keepalive: must be between 5 and 3600 seconds"),
        ("[hooks]\nmax_concurrent = 65\n", "recd.toml:2: hooks.max_concurrent: must be between 1 and 64"),
        ("[server]\nsocket_mode = \"999\"\n", "recd.toml:2: server.socket_mode: must be an octal mode"),
        ("[server]\nmax_clients = 1.5\n", "recd.toml:2: server.max_clients: must be an integer"),
    ])
    func integerKeysRefuseValuesOutsideTheirRange(text: String, expected: String) {
        let message = error(text)
        #expect(message?.hasPrefix(expected) == true, "\(message ?? "accepted")")
    }

    @Test func unknownKeysTablesAndMisplacedKeysAreRefusedAtTheirLine() {
        #expect(error("# a comment\ndevise = \"hw:1\"\n") == "recd.toml:2: devise: unknown key")
        #expect(error("[segment]\nlength = 60\n") == "recd.toml:1: segment: unknown table")
        #expect(error("[segments]\n\nlenght = 60\n") == "recd.toml:3: segments.lenght: unknown key")
        #expect(error("segments = 60\n") == "recd.toml:1: segments: must be a table ([segments])")
        #expect(error("device = 5\n") == "recd.toml:1: device: must be a string")
        #expect(error("[recording]\nformat = \"wma\"\n")?.hasPrefix("recd.toml:2: recording.format: must be one of wav, flac") == true)
        #expect(error("recordings_dir = \"relative\"\n") == "recd.toml:1: recordings_dir: must be an absolute path")
    }

    @Test func theRecordingSectionIsCheckedAsAWhole() throws {
        #expect(try read("[recording]\nformat = \"m4a\"\n").recording.format == .aac)
        #expect(error("[recording]\nformat = \"opus\"\nsample_rate = 44100\n")?.hasPrefix("recd.toml:1: recording: opus records at") == true)
    }

    @Test func usersAndGroupsMustExistAtTheirLine() throws {
        #expect(error("[server]\ncontrol_users = [\"nosuchuser-recd\"]\n") == "recd.toml:2: server.control_users: no user named 'nosuchuser-recd'")
        #expect(error("[server]\ncontrol_groups = [\"nosuchgroup-recd\"]\n") == "recd.toml:2: server.control_groups: no group named 'nosuchgroup-recd'")
        #expect(try read("[server]\ncontrol_users = [\"root\"]\n").controlUIDs == [0])
    }

    @Test func aTOMLErrorNamesItsLine() {
        #expect(error("device = \"a\"\n[capture\n")?.hasPrefix("recd.toml:2:") == true)
    }

    /// `[web]`: recd-web's keys, each range- and value-checked at its line; recd reads them too,
    /// so that a bad one is refused by `recd --check-config` as any other.
    @Test func theWebTableIsCheckedKeyByKey() throws {
        let web = try read("[web]\naddress = \"::\"\nport = 8443\nobserve = \"token\"\nlisten = \"off\"\ncontrol = \"open\"\ntokens_file = \"/etc/recd/t\"\nmax_viewers = 2\n").web
        #expect(web == WebSettings(address: "::", port: 8443, observe: .token, listen: .off, control: .open, tokensFile: "/etc/recd/t", maxViewers: 2))
        #expect(try read("").web == WebSettings())
        #expect(error("[web]\nport = 0\n")?.hasPrefix("recd.toml:2: web.port: must be between 1 and 65535") == true)
        #expect(error("[web]\nobserve = \"public\"\n")?.hasPrefix("recd.toml:2: web.observe:") == true)
        #expect(error("[web]\ntokens_file = \"web-tokens\"\n") == "recd.toml:2: web.tokens_file: must be an absolute path")
        #expect(error("[web]\nmax_viewers = 1000\n")?.hasPrefix("recd.toml:2: web.max_viewers: must be between 1 and 256") == true)
        #expect(error("[web]\ntls = true\n") == "recd.toml:2: web.tls: unknown key")
        let tls = try read("[web]\ntls_certificate = \"/etc/recd/web.pem\"\ntls_key = \"/etc/recd/web.key\"\n").web
        #expect(tls.usesTLS && tls.tlsCertificate == "/etc/recd/web.pem" && tls.tlsKey == "/etc/recd/web.key")
        #expect(error("[web]\ntls_certificate = \"web.pem\"\ntls_key = \"/k\"\n") == "recd.toml:2: web.tls_certificate: must be an absolute path")
        #expect(error("[web]\ntls_certificate = \"/etc/recd/web.pem\"\n")?.hasPrefix("recd.toml:2: web.tls_certificate: needs web.tls_key too") == true)
        #expect(error("[web]\nport = 8443\ntls_key = \"/etc/recd/web.key\"\n")?.hasPrefix("recd.toml:3: web.tls_key: needs web.tls_certificate too") == true)
        #expect(DaemonConfiguration.defaultTokensPath(for: .user, environment: ["HOME": "/home/test"]) == "/home/test/.config/recd/web-tokens")
        #expect(DaemonConfiguration.defaultTokensPath(for: .system, environment: [:]) == "/etc/recd/web-tokens")
    }

    @Test func webTokensGrantTheirRolesAndRefuseWeakOnes() throws {
        let tokens = try WebTokens.parse("# owner\ncontrol 0123456789abcdef\n\nlisten 0123456789abcdef\nobserve fedcba9876543210\n", file: "t")
        #expect(tokens.roles == ["0123456789abcdef": [.control, .listen], "fedcba9876543210": [.observe]])
        for (text, line) in [("control short\n", 1), ("# a\nadmin 0123456789abcdef\n", 2), ("control 0123456789abcdef extra\n", 1),
                             ("listen 0123456789abc;ef\n", 1)] {
            do {
                _ = try WebTokens.parse(text, file: "t")
                Issue.record("accepted \(text)")
            } catch {
                #expect(error.line == line, "\(text): \(error)")
            }
        }
    }
}

/// `[[source]]` tables (issue 53): a station's sources, each the station's source keys with its
/// own over them; bad keys named by source, file and line; the station's tables refused in one.
@Suite("configuration: sources")
struct SourceConfigurationTests: ReadsConfiguration {
    @Test func withoutSourceTablesTheStationIsTheImplicitSource() throws {
        let configuration = try read("device = \"hw:1\"\n[recording]\nformat = \"flac\"\n")
        #expect(configuration.declaredSources.isEmpty)
        #expect(configuration.sources.map(\.name) == ["default"])
        #expect(configuration.sources.first?.configuration.device == "hw:1")
        #expect(configuration.recorderConfiguration(for: configuration.sources[0]) == configuration.recorderConfiguration)
    }

    @Test func eachSourceTakesTheStationsTablesAndOverridesItsOwn() throws {
        let configuration = try read("""
            [recording]
            format = "flac"
            [capture]
            write_buffer = "20s"
            [storage]
            minimum_free = "5%"
            [[source]]
            name = "east"
            device = "usb:0d8c:0014:p=0000:00:14.0-1.2"
            [[source]]
            name = "west"
            device = "/dev/snd/by-id/usb-C-Media_USB_Audio_Device-00"
            [source.recording]
            format = "wav"
            sample_rate = 48000
            [source.trigger]
            enabled = true
            threshold = -30
            [source.segments]
            length = "1h"
            """)
        #expect(configuration.sources.map(\.name) == ["east", "west"])
        #expect(configuration.sources.map(\.line) == [7, 10])
        let east = configuration.sources[0].configuration, west = configuration.sources[1].configuration
        #expect(east.device == "usb:0d8c:0014:p=0000:00:14.0-1.2" && east.deviceLine == 9)
        #expect(east.recording.format == .flac && west.recording.format == .wav && west.recording.sampleRate == 48000)
        #expect(east.writeBuffer == 20 && west.writeBuffer == 20)
        #expect(!east.triggerEnabled && west.triggerEnabled && west.trigger.threshold == -30)
        #expect(east.segments.length == nil && west.segments.length == 3600)
        // What is the station's comes from the station, whatever the copy holds (its folder in the station's directory).
        var station = configuration
        station.recordingsDirectory = "/srv/recordings"
        let recorder = station.recorderConfiguration(for: configuration.sources[1])
        #expect(recorder.recordingsDirectory == "/srv/recordings/west" && recorder.device == west.device)
        #expect(recorder.defaultSettings.format == .wav && recorder.segments.length == 3600 && recorder.writeBuffer == 20)
        // The station's own device stays the implicit default: no source is "default".
        #expect(configuration.device == "default")
    }

    @Test func aBadSourceKeyIsNamedBySourceFileAndLine() {
        let two = "[[source]]\nname = \"east\"\ndevice = \"hw:1\"\n[[source]]\nname = \"west\"\ndevice = \"hw:2\"\n"
        #expect(error(two + "[source.recording]\nformat = \"wma\"\n")?
            .hasPrefix("recd.toml:8: source \"west\": recording.format: must be one of wav, flac") == true)
        #expect(error(two + "[source.capture]\nwrite_buffer = 0.1\n")?.hasPrefix("recd.toml:8: source \"west\": capture.write_buffer: must be") == true)
        #expect(error(two + "colour = \"red\"\n") == "recd.toml:7: source \"west\": colour: unknown key")
        #expect(error(two + "[source.mqtt]\nenabled = true\n")
                == "recd.toml:7: source \"west\": mqtt: is the station's, not a source's: set it at the top level")
        #expect(error(two + "[source.recordings]\n") == "recd.toml:7: source \"west\": recordings: unknown table")
        #expect(error("[[source]]\ndevice = \"hw:1\"\n") == "recd.toml:1: source: each [[source]] needs a name (name = \"east\")")
        #expect(error("[[source]]\nname = \"east\"\n") == "recd.toml:1: source \"east\": needs a device (device = \"usb:…\", a /dev/snd/by-id name or an ALSA name)")
        #expect(error(two + "[[source]]\nname = \"east\"\ndevice = \"hw:3\"\n") == "recd.toml:8: source \"east\": another [[source]] (line 1) has this name")
        #expect(error("[[source]]\nname = \"east\"\ndevice = \"hw:1\"\n[[source]]\nname = \"west\"\ndevice = \"hw:1\"\n")
                == "recd.toml:6: source \"west\": device: source \"east\" records 'hw:1' already; a device is one source")
        #expect(error("device = \"hw:0\"\n" + two) == "recd.toml:1: device: with [[source]] tables each source names its own device; a top-level device is for a station of one")
        #expect(error("[[sources]]\nname = \"a\"\n") == "recd.toml:1: sources: unknown array of tables")
        #expect(error("[[source]]\nname = \"usb:0d8c:0014:p=0000:00:14.0-1.2\"\ndevice = \"hw:1\"\n")?
            .hasPrefix("recd.toml:2: name: 'usb:0d8c") == true)
    }

    @Test(arguments: ["east", "a", "west-2", "mic_1", "0", String(repeating: "x", count: 32)])
    func aSourceNameIsAFolderATopicAndALabel(name: String) {
        #expect(DaemonConfiguration.sourceNameRefusal(name) == nil)
    }

    @Test(arguments: ["", "East", "-east", "_a", "a b", "a/b", "a.b", "é", String(repeating: "x", count: 33), "+", "#"])
    func otherNamesAreRefused(name: String) {
        #expect(DaemonConfiguration.sourceNameRefusal(name) != nil)
    }

    /// Every key a source may set, set in a source, is what the same keys at the top level
    /// make: nothing `applySourceKeys` reads is lost when the only source is adopted.
    @Test func aSourcesOwnKeysAreTheTopLevelsKeysWhenAdopted() throws {
        let tables = """
            [recording]
            format = "flac"
            sample_rate = 44100
            channels = 1
            bit_depth = 24
            quality = "low"
            [capture]
            period_time = 0.02
            buffer_time = 0.4
            write_buffer = "30s"
            sync_interval = 5
            sample_rate = 44100
            channels = 1
            stop_timeout = 2
            wait_for_device = false
            retry_interval_max = 3
            silence_warning = "5m"
            [segments]
            length = "10m"
            align_to_clock = true
            template = "{name}/%Y%m%d"
            local_time = true
            [autostart]
            enabled = true
            name = "birds"
            [listen]
            enabled = true
            pre_roll = 9
            [trigger]
            enabled = true
            above_floor = 9
            hang = 3
            [schedule]
            windows = ["05:00..09:00"]
            latitude = 52.5
            longitude = 13.4
            mode = "trigger"
            outside = "listen"
            name = "dawn"
            wait_for_clock = 60

            """
        var top = try read("device = \"hw:5\"\n" + tables)
        var source = try read("[[source]]\nname = \"east\"\ndevice = \"hw:5\"\n"
                              + ("\n" + tables).replacing("\n[", with: "\n[source."))
        top.adoptTheOnlySource()
        source.adoptTheOnlySource()
        top.deviceLine = nil
        top.deviceFile = nil
        source.deviceLine = nil
        source.deviceFile = nil
        source.declaredSources = []
        #expect(source == top)
        #expect(top.schedule?.trigger?.aboveFloor == 9 && top.autostartName == "birds" && top.writeBuffer == 30)
    }

    /// A source without `[source.schedule]` follows the station's schedule; with one, its keys
    /// replace the station's one by one.
    @Test func aSourceInheritsTheStationsScheduleKeyByKey() throws {
        let station = "[schedule]\nwindows = [\"05:00..09:00\"]\nname = \"dawn\"\n"
        var plain = try read(station + "[[source]]\nname = \"east\"\ndevice = \"hw:1\"\n")
        plain.adoptTheOnlySource()
        #expect(plain.schedule?.schedule.windows.count == 1 && plain.schedule?.name == "dawn")
        var own = try read(station + "[[source]]\nname = \"east\"\ndevice = \"hw:1\"\n[source.schedule]\nwindows = [\"18:00..20:00\", \"21:00..22:00\"]\n")
        own.adoptTheOnlySource()
        #expect(own.schedule?.schedule.windows.count == 2 && own.schedule?.name == "dawn")
    }

    @Test func oneSourceTableIsRunAsTheStationsOnlySourceAndSeveralEachInAFolder() throws {
        var one = try read("[recording]\nformat = \"flac\"\n[[source]]\nname = \"east\"\ndevice = \"hw:7\"\n[source.listen]\nenabled = true\n")
        one.adoptTheOnlySource()
        #expect(one.device == "hw:7" && one.listenAtStart && one.recording.format == .flac)
        #expect(one.recorderConfiguration(for: one.sources[0]).recordingsDirectory == one.recordingsDirectory)
        var two = try read("recordings_dir = \"/srv/rec\"\n[recording]\nformat = \"flac\"\n[[source]]\nname = \"east\"\ndevice = \"hw:1\"\n"
                           + "[[source]]\nname = \"west\"\ndevice = \"hw:2\"\n[source.recording]\nformat = \"wav\"\n")
        two.adoptTheOnlySource()
        let recorders = two.sources.map { two.recorderConfiguration(for: $0) }
        #expect(recorders.map(\.recordingsDirectory) == ["/srv/rec/east", "/srv/rec/west"])
        #expect(recorders.map(\.device) == ["hw:1", "hw:2"] && recorders.map(\.sourceName) == ["east", "west"])
        #expect(recorders.map(\.defaultSettings.format) == [.flac, .wav])
    }
}
