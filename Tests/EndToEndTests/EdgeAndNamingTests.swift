import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// What a new user met in the first hour, through the real binaries: numbers out of range at
/// every way in (the socket, recctl, the configuration), one spelling of durations, `m4a` as a
/// format name, and .m4a files named after their first frame (segments, time templates) on a
/// fresh daemon.
@Suite("numbers at the edge, durations, and files named after their first frame")
struct EdgeAndNamingTests {
    let inputs = TemporaryDirectory()

    func counterInput(seconds: Int) -> String {
        let path = inputs.file("counter.raw")
        Signal.write(Signal.counter16(frames: 48000 * seconds, channels: 2), to: path)
        return path
    }

    @Test(arguments: [
        #"{"duration":2e14}"#, #"{"duration":1e30}"#, #"{"duration":1e308}"#, #"{"duration":-1}"#, #"{"duration":0}"#,
        #"{"duration":31622401}"#, #"{"at":1e308}"#, #"{"at":-1e308}"#, #"{"at":9e15}"#, #"{"sampleRate":9223372036854775807}"#,
        #"{"channels":-9223372036854775807}"#, #"{"bitRate":1e19}"#, #"{"segmentLength":1e308}"#, #"{"segmentLength":-0.5}"#,
        #"{"bitDepth":0}"#,
    ])
    func anOutOfRangeNumberInStartIsRefusedByNameAndRecdGoesOn(params: String) throws {
        let daemon = try Daemon(device: TestDevices.file(counterInput(seconds: 5)))
        let client = try daemon.connect()
        let reply = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"start","params":\#(params)}"#)
        let error = try #require(reply["error"] as? [String: Any], "accepted: \(reply)")
        #expect(error["code"] as? Int == -32602, "\(error)")
        let member = String(params.dropFirst(2).prefix { $0 != "\"" })
        #expect((error["message"] as? String)?.contains("'\(member)'") == true, "\(error)")
        // Still there, idle, answering.
        let status: StatusResult = try client.call(.status)
        #expect(status.state.name == .idle)
        #expect(daemon.process.isRunning)
    }

    @Test func aDurationBeyondAYearIsRefusedWithItsRangeWhileAnotherRecordingGoesOn() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "going", format: .flac))
        let reply = try client.exchange(#"{"jsonrpc":"2.0","id":2,"method":"start","params":{"duration":2e14}}"#)
        let message = try #require((reply["error"] as? [String: Any])?["message"] as? String, "\(reply)")
        #expect(message == "'duration' must be between 0.001 and 31622400 seconds, not 200000000000000", "\(message)")
        let status: StatusResult = try client.call(.status)
        #expect(status.state.name == .recording, "the recording under way is untouched")
        let stopped: Recording = try client.call(.stop)
        #expect(FileManager.default.fileExists(atPath: stopped.path))
    }

    @Test func recctlRefusesOutOfRangeAndMisspeltDurationsBeforeSendingThem() throws {
        let daemon = try Daemon(device: TestDevices.file(counterInput(seconds: 5)))
        for (value, expected) in [("2e14", "--duration must be"), ("-5", "--duration must be"), ("99:99:99", "--duration must be"),
                                  ("1e30", "--duration must be"), ("400d", "--duration must be between")] {
            let result = try recctl(daemon, "start", "x", "--duration", value)
            #expect(result.status != 0, "\(value): \(result.stdout)")
            #expect(result.stderr.contains(expected), "\(value): \(result.stderr)")
        }
        let rate = try recctl(daemon, "start", "x", "--rate", "9223372036854775807")
        #expect(rate.status != 0 && rate.stderr.contains("--rate must be between 1000 and 768000 Hz"), "\(rate.stderr)")
        #expect(daemon.process.isRunning)
        #expect(try recctl(daemon, "status").status == 0)
    }

    @Test func durationsWithUnitsAndM4AAsAFormatNameWorkFromRecctl() throws {
        let daemon = try Daemon(device: TestDevices.file(counterInput(seconds: 5)))
        let started = try recctl(daemon, "start", "unit", "--format", "m4a", "--rate", "48000", "--channels", "2",
                                 "--duration", "1500ms", "--wait")
        #expect(started.status == 0, "\(started.stderr)")
        let info: RecordingFile = try daemon.connect().call(.recordingsInfo, RecordingNameParams(name: "unit"))
        #expect(info.file == "unit.m4a")
        #expect(info.format == .aac)
        #expect(info.frames == 72000)
        #expect(try FFmpegTools.probe(info.path).codecName == "aac")
        let clock = try recctl(daemon, "start", "clock", "--format", "wav", "--rate", "48000", "--channels", "2",
                               "--duration", "00:00:01.25", "--wait")
        #expect(clock.status == 0, "\(clock.stderr)")
        let wav: RecordingFile = try daemon.connect().call(.recordingsInfo, RecordingNameParams(name: "clock"))
        #expect(wav.frames == 60000)
    }

    @Test func theConfigurationTakesDurationsWithUnitsAndRefusesThemOutOfRange() throws {
        let directory = TemporaryDirectory()
        func check(_ text: String) throws -> CommandResult {
            let path = directory.file("recd.toml")
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            return try run(Binaries.recd, ["--user", "--config", path, "--check-config"], timeout: 20)
        }
        let good = try check("[segments]\nlength = \"1h\"\n[capture]\nsync_interval = \"500ms\"\n[recording]\nformat = \"m4a\"\n")
        #expect(good.status == 0, "\(good.stderr)")
        let long = try check("[segments]\nlength = \"2d\"\n")
        #expect(long.status == 78)
        #expect(long.stderr.contains(":2: segments.length: must be between 1 and 86400 seconds, not 172800"), "\(long.stderr)")
        let garbled = try check("[segments]\nlength = \"1 fortnight\"\n")
        #expect(garbled.status == 78)
        #expect(garbled.stderr.contains("segments.length: must be a duration"), "\(garbled.stderr)")
    }

    /// On a fresh daemon the idle sound server delivers its first frame about 2 s after the
    /// device opens, so the first file is renamed after that frame's time: the MPEG-4 writer
    /// must finish the file under its new name.
    @Test(arguments: [AudioFileFormat.aac, .alac])
    func m4aWithOneSecondSegmentsOnAFreshDaemonFinishesWithEveryFrame(format: AudioFileFormat) throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let reply = try client.exchange(
            #"{"jsonrpc":"2.0","id":1,"method":"start","params":{"name":"seg","format":"\#(format.rawValue)","sampleRate":48000,"channels":2,"segmentLength":1,"duration":3}}"#)
        #expect(reply["error"] == nil, "\(reply)")
        let ended = daemon.waitForStatus(timeout: 60) { $0.state.name == .finished || $0.state.name == .failed }
        #expect(ended?.state.name == .finished, "\(String(describing: ended?.error))")
        let list: RecordingsListResult = try client.call(.recordingsList)
        let files = list.recordings.filter { $0.sessionName == "seg" || $0.name.hasPrefix("seg") }
        #expect(files.count >= 3, "\(files.map(\.file))")
        var total = 0
        for file in files {
            #expect(file.file.hasSuffix(".m4a") && !file.file.hasSuffix(".part"))
            let boxes = FFmpegTools.topLevelBoxes(file.path)
            #expect(!boxes.contains("moof"), "\(file.file) stays fragmented: \(boxes)")
            let stream = try FFmpegTools.probe(file.path)
            #expect(stream.codecName == (format == .aac ? "aac" : "alac"))
            total += Int(stream.frames ?? -1)
        }
        #expect(total == 3 * 48000, "\(files.map { "\($0.file): \($0.frames)" })")
    }

    /// The answer to `start` names the file the recording keeps, and a name with a time in it
    /// shows the second its first frame fell in (not the nearest second).
    @Test func startAnswersWithTheFinalNameWhichShowsTheSecondOfTheFirstFrame() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "named", format: .flac, duration: 1.5,
                                                                     fileTemplate: "{name}-%H%M%S"))
        #expect(daemon.waitForStatus(timeout: 60) { $0.state.name == .finished } != nil)
        let list: RecordingsListResult = try client.call(.recordingsList)
        let file = try #require(list.recordings.first { $0.file.hasPrefix("named-") }, "\(list.recordings.map(\.file))")
        #expect(file.path == started.path, "start said \(started.path); the file is \(file.path)")
        let startedAt = try #require(file.startedAt)
        var seconds = time_t(startedAt.timeIntervalSince1970.rounded(.down))
        var fields = tm()
        gmtime_r(&seconds, &fields)
        let expected = String(format: "named-%02d%02d%02d.flac", fields.tm_hour, fields.tm_min, fields.tm_sec)
        #expect(file.file == expected, "first frame at \(WireCoding.formatDate(startedAt))")
    }
}
