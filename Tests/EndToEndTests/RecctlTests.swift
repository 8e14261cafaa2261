import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// recctl, the real binary, against a real recd: every subcommand's text and JSON, its exit
/// codes and hints, color rules, and the live meter on a pseudo-terminal.
@Suite("recctl")
struct RecctlTests {
    let inputs = TemporaryDirectory()

    // MARK: Text for people

    @Test func startWaitReturnsWhenTheRecordingFinishesAndPrintsItsFile() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        let result = try recctl(daemon, "start", "take", "--format", "wav", "--duration", "1", "--wait")
        #expect(result.status == 0, "\(result.stderr)")
        let path = daemon.recordings + "/take.wav"
        #expect(lines(result.stdout) == ["recording take -> \(path)", "finished \(path) (00:00:01.0)"])
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(!result.stdout.utf8.contains(0x1B), "progress and color are for terminals only")
    }

    @Test func listInfoAndStatusShowDurationsSizesAndFormats() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        try #require(try recctl(daemon, "start", "take", "--format", "wav", "--rate", "48000", "--channels", "2",
                                "--duration", "1", "--wait").status == 0)
        let size = try #require(FileManager.default.attributesOfItem(atPath: daemon.recordings + "/take.wav")[.size] as? Int)
        let kibibytes = String(format: "%.1f KiB", Double(size) / 1024)

        let list = try recctl(daemon, "ls")
        #expect(list.status == 0)
        // The table, then (after an empty line) free space and retention.
        let table = lines(list.stdout.components(separatedBy: "\n\n")[0])
        try #require(table.count == 2, "\(list.stdout)")
        #expect(list.stdout.contains("\n\nstorage  "), "\(list.stdout)")
        #expect(list.stdout.contains("retention off"), "\(list.stdout)")
        #expect(table[0].split(separator: " ", omittingEmptySubsequences: true) == ["NAME", "DURATION", "SIZE", "FORMAT", "DATE"])
        #expect(table[1].hasPrefix("take.wav  00:00:01.0  \(kibibytes)  wav 48 kHz 2 ch  "), "\(table[1])")
        #expect(table[1].range(of: #"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$"#, options: .regularExpression) != nil)
        // Columns line up under their headers.
        #expect(table[0].range(of: "SIZE")?.lowerBound.utf16Offset(in: table[0])
                == table[1].range(of: kibibytes)?.lowerBound.utf16Offset(in: table[1]))

        let info = try recctl(daemon, "info", "take")
        #expect(info.status == 0)
        #expect(lines(info.stdout).contains("duration 00:00:01.0 (48000 frames)"), "\(info.stdout)")
        #expect(lines(info.stdout).contains("size     \(kibibytes)"))
        #expect(lines(info.stdout).contains("file     \(daemon.recordings)/take.wav"))

        let status = try recctl(daemon, "status")
        #expect(status.status == 0)
        #expect(lines(status.stdout).contains("state    ✓ finished"), "\(status.stdout)")
        #expect(lines(status.stdout).contains("elapsed  00:00:01.0"))
        #expect(lines(status.stdout).contains("format   wav 48000 Hz 2 ch 16-bit"))
        #expect(lines(status.stdout).contains("device   \(daemon.device)"))
        #expect(lines(status.stdout).contains("error    none"))
        for output in [list.stdout, info.stdout, status.stdout] { #expect(!output.utf8.contains(0x1B)) }
    }

    @Test func devicesMarksTheDeviceInUseAndVersionShowsBothEnds() throws {
        let daemon = try Daemon(device: "null")
        let devices = try recctl(daemon, "devices")
        #expect(devices.status == 0)
        #expect(lines(devices.stdout).contains { $0.hasPrefix("* null — ") }, "\(devices.stdout)")
        #expect(lines(devices.stdout).filter { $0.hasPrefix("*") }.count == 1)

        let version = try recctl(daemon, "version")
        #expect(version.status == 0)
        #expect(lines(version.stdout) == ["recctl \(RecdVersion.current)",
                                          "recd \(RecdVersion.current) (protocol \(JSONRPC.protocolRevision))"])
    }

    // MARK: JSON

    @Test func jsonOutputDecodesIntoTheProtocolTypes() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        let start = try recctl(daemon, "start", "settings", "--format", "flac", "--rate", "44100", "--channels", "1",
                               "--bit-depth", "24", "--quality", "max", "--duration", "00:00:01.5", "--json")
        #expect(start.status == 0, "\(start.stderr)")
        let recording = try decode(Recording.self, start.stdout)
        #expect(recording.name == "settings")
        #expect(recording.path == daemon.recordings + "/settings.flac")
        #expect(recording.format == .flac)
        #expect(recording.sampleRate == 44100)
        #expect(recording.channels == 1)
        #expect(recording.bitDepth == 24)
        #expect(recording.quality == .max)
        #expect(recording.frameLimit == 66150)
        #expect(recording.device == daemon.device)

        var status = try decode(StatusResult.self, try recctl(daemon, "status", "--json").stdout)
        #expect(waitUntil(timeout: 20) {
            status = (try? decode(StatusResult.self, recctl(daemon, "status", "--json").stdout)) ?? status
            return status.state.name == .finished
        })
        // Global options may also come before the subcommand. The same status but storage and
        // its warning (the free space changes with other tests' files, and the directory scan
        // that counts the new file runs after `finished` is published) and the clock (a
        // synchronized kernel's maximum error grows every second).
        var optionFirst = try decode(StatusResult.self, try recctl(daemon, "--json", "status").stdout)
        #expect(optionFirst.storage?.totalBytes ?? 0 > 0)
        (optionFirst.storage, optionFirst.warning, optionFirst.clock) = (status.storage, status.warning, status.clock)
        #expect(optionFirst == status)
        #expect(status.recording?.id == recording.id)
        #expect(status.recording?.frames == 66150)
        #expect(status.currentTime == 1.5)
        #expect(status.device == daemon.device)
        #expect(status.recordingsDirectory == daemon.recordings)

        let list = try decode(RecordingsListResult.self, try recctl(daemon, "ls", "--json").stdout)
        #expect(list.recordings.map(\.file) == ["settings.flac"])
        let file = try decode(RecordingFile.self, try recctl(daemon, "info", "settings", "--json").stdout)
        #expect(file.frames == 66150)
        #expect(file.duration == 1.5)
        #expect(file.sampleRate == 44100)
        #expect(file.channels == 1)
        #expect(file.format == .flac)

        let devices = try decode(DevicesResult.self, try recctl(daemon, "devices", "--json").stdout)
        #expect(devices.current == daemon.device)
        #expect(devices.devices.contains { $0.name == "null" })

        struct Versions: Decodable { var recctl: String; var recd: VersionResult }
        let versions = try decode(Versions.self, try recctl(daemon, "version", "--json").stdout)
        #expect(versions.recctl == RecdVersion.current)
        #expect(versions.recd == VersionResult(version: RecdVersion.current, protocolRevision: JSONRPC.protocolRevision))
    }

    @Test func durationTakesSecondsOrHoursMinutesSeconds() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        for (index, (text, frames)) in [("0.25", 12000), ("2", 96000), ("00:00:00.5", 24000), ("0:01", 48000)].enumerated() {
            let result = try recctl(daemon, "start", "take\(index)", "--duration", text, "--wait", "--json")
            #expect(result.status == 0, "\(text): \(result.stderr)")
            let recording = try decode(Recording.self, try #require(lines(result.stdout).first))
            #expect(recording.frameLimit == Int64(frames), "--duration \(text)")
            #expect(lastState(result.stdout)?.recording?.frames == Int64(frames), "--duration \(text)")
        }
    }

    @Test func bitrateReachesTheOpusEncoder() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        for (name, bitRate) in [("low", "16000"), ("high", "128000")] {
            let result = try recctl(daemon, "start", name, "--format", "opus", "--bitrate", bitRate, "--duration", "3", "--wait")
            #expect(result.status == 0, "\(result.stderr)")
        }
        let list = try decode(RecordingsListResult.self, try recctl(daemon, "ls", "--json").stdout)
        let sizes = Dictionary(uniqueKeysWithValues: list.recordings.map { ($0.name, $0.size) })
        let low = try #require(sizes["low"])
        let high = try #require(sizes["high"])
        // The counter pattern is noise to Opus: it spends all the bits it may.
        #expect(high > low * 4, "16 kb/s: \(low) bytes, 128 kb/s: \(high) bytes")
    }

    @Test func startAtSchedulesTheRecording() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        // +DURATION: starts by itself at that time.
        let before = Date()
        let relative = try recctl(daemon, "start", "soon", "--at", "+1.5", "--duration", "0.5", "--json")
        #expect(relative.status == 0, "\(relative.stderr)")
        let soon = try decode(Recording.self, relative.stdout)
        let scheduled = try #require(soon.scheduledAt)
        #expect(scheduled.timeIntervalSince(before) >= 1.4 && scheduled.timeIntervalSinceNow <= 1.6, "\(scheduled)")
        #expect(try waitForState(daemon, .preparing).recording?.id == soon.id)
        let finished = try waitForState(daemon, .finished)
        #expect(finished.recording?.id == soon.id)
        let started = try #require(finished.recording?.startedAt)
        #expect(started.timeIntervalSince(scheduled) > -0.05, "started \(started), due \(scheduled)")

        // HH:MM:SS: the next time the clock shows it (local time), printed back for people.
        let inAnHour = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 3600).rounded(.down))
        let clock = DateFormatter()
        clock.dateFormat = "HH:mm:ss"
        let absolute = try recctl(daemon, "start", "later", "--at", clock.string(from: inAnHour))
        #expect(absolute.status == 0, "\(absolute.stderr)")
        let shown = DateFormatter()
        shown.dateFormat = "yyyy-MM-dd HH:mm:ss"
        // Nothing is opened or created until then (issue 34).
        #expect(lines(absolute.stdout) == ["recording later: starts at \(shown.string(from: inAnHour)); nothing is opened or created until then (`recctl stop` cancels it)"])
        #expect(!FileManager.default.fileExists(atPath: daemon.recordings + "/later.wav.part"))
        #expect(try waitForState(daemon, .preparing).recording?.scheduledAt == inAnHour)
        let cancelled = try recctl(daemon, "cancel", "--json")
        #expect(try decode(StateResult.self, cancelled.stdout).state == .idle)

        // RFC 3339.
        let rfc = try recctl(daemon, "start", "--at", "2099-01-02T03:04:05Z", "--json")
        #expect(try decode(Recording.self, rfc.stdout).scheduledAt == Date(timeIntervalSince1970: 4_071_006_245))
        let cancelRFC = try recctl(daemon, "cancel").stdout
        #expect(cancelRFC.hasPrefix("cancelled recording-2099-01-02T") && cancelRFC.hasSuffix(": nothing was recorded\n"), "\(cancelRFC)")
    }

    // MARK: Controlling a live recording

    @Test func pauseResumeStopAndCancelALiveRecording() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let start = try recctl(daemon, "start", "live", "--format", "wav")
        #expect(start.status == 0, "\(start.stderr)")
        #expect(start.stdout == "recording live -> \(daemon.recordings)/live.wav\n")
        #expect(try waitForTime(daemon, atLeast: 0.3))

        let pause = try recctl(daemon, "pause")
        #expect(pause.status == 0, "\(pause.stderr)")
        #expect(pause.stdout == "paused live\n")
        #expect(lines(try recctl(daemon, "status").stdout).contains("state    ‖ paused"))
        #expect(try recctl(daemon, "resume").stdout == "recording live\n")
        #expect(lines(try recctl(daemon, "status").stdout).contains("state    ● recording"))
        #expect(try decode(StateResult.self, try recctl(daemon, "pause", "--json").stdout).state.name == .paused)
        #expect(try decode(StateResult.self, try recctl(daemon, "resume", "--json").stdout).state.name == .recording)

        let stop = try recctl(daemon, "stop")
        #expect(stop.status == 0, "\(stop.stderr)")
        let path = daemon.recordings + "/live.wav"
        #expect(stop.stdout.range(of: #"^stopped live -> \#(path) \(00:00:0\d\.\d\)\n$"#, options: .regularExpression) != nil, "\(stop.stdout)")
        #expect(FileManager.default.fileExists(atPath: path))

        #expect(try recctl(daemon, "start", "again", "--json").status == 0)
        #expect(try waitForTime(daemon, atLeast: 0.2))
        let stopped = try decode(Recording.self, try recctl(daemon, "stop", "--json").stdout)
        #expect(stopped.name == "again")
        #expect(stopped.frames >= 9600)
    }

    @Test func cancelEndsAWaitingStartWithExitOne() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let waiting = try BackgroundCommand(Binaries.recctl, ["start", "discard", "--wait"], environment: ["RECD_SOCKET": daemon.socket])
        #expect(try waitForState(daemon, .recording).recording?.name == "discard")
        let cancel = try recctl(daemon, "cancel")
        #expect(cancel.status == 0)
        #expect(cancel.stdout == "cancelled discard: deleted \(daemon.recordings)/discard.wav\n", "\(cancel.stdout)")
        #expect(waiting.wait() == 1)
        #expect(waiting.stderr.contains("recctl: the recording was cancelled"), "\(waiting.stderr)")
        #expect(!FileManager.default.fileExists(atPath: daemon.recordings + "/discard.wav"))
        #expect(!FileManager.default.fileExists(atPath: daemon.recordings + "/discard.wav.part"))
    }

    @Test func startWaitExitsOneWhenTheRecordingFails() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[capture]\nwait_for_device = false\n")
        let waiting = try BackgroundCommand(Binaries.recctl, ["start", "doomed", "--wait"], environment: ["RECD_SOCKET": daemon.socket])
        #expect(try waitForTime(daemon, atLeast: 0.3))
        server.kill()
        #expect(waiting.wait(timeout: 30) == 1, "\(waiting.stderr)")
        let status = try decode(StatusResult.self, try recctl(daemon, "status", "--json").stdout)
        #expect(status.state.name == .failed)
        let error = try #require(status.error)
        #expect(error.code == .deviceLost)
        #expect(waiting.stderr.contains("recctl: " + error.message), "\(waiting.stderr)")
        #expect(!waiting.stdout.contains("finished"))
    }

    @Test func startWaitWithJSONPrintsOneEventPerLine() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        try #require(try recctl(daemon, "start", "before", "--duration", "0.1").status == 0)
        _ = try waitForState(daemon, .finished)
        let result = try recctl(daemon, "start", "events", "--duration", "0.5", "--wait", "--json")
        #expect(result.status == 0, "\(result.stderr)")
        let output = lines(result.stdout)
        let recording = try decode(Recording.self, try #require(output.first))
        let updates = try output.dropFirst().map { try decode(TopicUpdate.self, $0) }
        #expect(Set(updates.map(\.topic)) == [.state, .currentTime, .levels])
        let stateUpdates = updates.filter { $0.topic == .state }
        // First the snapshot (the previous recording, with its own seq), then every change in order.
        guard case .state(let snapshot) = stateUpdates.first?.value else {
            Issue.record("no state in \(result.stdout)")
            return
        }
        #expect(snapshot.name == .finished)
        #expect(snapshot.recording?.name == "before")
        #expect((stateUpdates.first?.seq ?? 0) > 0)
        #expect(zip(stateUpdates, stateUpdates.dropFirst()).allSatisfy { $1.seq == $0.seq + 1 }, "\(stateUpdates.map(\.seq))")
        let states = stateUpdates.compactMap { if case .state(let state) = $0.value { state } else { nil } }
        #expect(states.last?.name == .finished)
        #expect(states.last?.recording?.id == recording.id)
        #expect(states.last?.recording?.frames == 24000)
        #expect(states.contains { $0.name == .recording && $0.recording?.id == recording.id })
    }

    // MARK: Watching

    @Test func watchUntilFinishedPrintsJSONEventsAndEnds() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        let environment = ["RECD_SOCKET": daemon.socket]
        let json = try BackgroundCommand(Binaries.recctl, ["watch", "--until", "finished", "--json"], environment: environment)
        // On a pipe, watch prints JSON even without --json.
        let piped = try BackgroundCommand(Binaries.recctl, ["watch", "--until", "finished", "--topics", "state"], environment: environment)
        // Each prints the snapshot once it has subscribed.
        #expect(waitUntil { json.stdout.contains("\n") && piped.stdout.contains("\n") })
        #expect(try recctl(daemon, "start", "watched", "--duration", "1").status == 0)
        #expect(json.wait() == 0, "\(json.stderr)")
        #expect(piped.wait() == 0, "\(piped.stderr)")

        let updates = try lines(json.stdout).map { try decode(TopicUpdate.self, $0) }
        #expect(Set(updates.map(\.topic)) == Set(Topic.byDefault), "every topic but the spectrum, which is asked for by name")
        let states = updates.filter { $0.topic == .state }
        #expect(states.first?.value == .state(.idle))
        guard case .state(let last) = states.last?.value else {
            Issue.record("no state in \(json.stdout)")
            return
        }
        #expect(last.name == .finished)
        #expect(last.recording?.name == "watched")
        // A discrete topic's events on one subscription are consecutive.
        #expect(zip(states, states.dropFirst()).allSatisfy { $1.seq == $0.seq + 1 }, "\(states.map(\.seq))")

        let pipedUpdates = try lines(piped.stdout).map { try decode(TopicUpdate.self, $0) }
        #expect(pipedUpdates.map(\.topic).allSatisfy { $0 == .state })
        #expect(pipedUpdates.map(\.value) == states.map(\.value))
    }

    @Test func watchOnATerminalRedrawsTheMeterInPlace() throws {
        let server = try PulseServer()
        let tone = Signal.toInt16(Signal.sine(frequency: 1000, rate: 48000, frames: 30 * 48000, channels: 2, amplitude: 0.5))
        let input = inputs.file("tone.raw")
        Signal.write(tone, to: input)
        let daemon = try Daemon(device: TestDevices.pacedFile(input, server: server))
        // Global options before the subcommand, as people type them.
        let watch = try onTerminal([Binaries.recctl, "--socket", daemon.socket, "watch", "--until", "finished"],
                                   environment: ["NO_COLOR": ""])
        #expect(waitUntil { watch.stdout.contains("idle") }, "\(watch.stdout)")
        // Recording until the meter has been redrawn a few times at the tone's level, then
        // stopped (a deadline: a duration would be a window a loaded machine could miss).
        let redrawCount = { (screen: String) in screen.components(separatedBy: "\r\u{1B}[2K").count - 1 }
        #expect(try recctl(daemon, "start", "tone").status == 0)
        #expect(waitUntil { redrawCount(watch.stdout) >= 5 && watch.stdout.contains("-6.0/") }, "\(watch.stdout.debugDescription)")
        #expect(try recctl(daemon, "stop").status == 0)
        #expect(watch.wait(timeout: 30) == 0, "\(watch.stderr)")

        let screen = watch.stdout
        let redraws = redrawCount(screen)
        #expect(redraws >= 5, "\(redraws) redraws: \(screen.debugDescription)")
        #expect(screen.contains("▕"))
        #expect(screen.contains("█"))
        #expect(screen.contains("dB"))
        // A half-scale sine peaks at -6 dBFS, on both channels.
        #expect(screen.contains("L ▕") && screen.contains("R ▕"))
        #expect(screen.contains("-6.0/"), "\(screen.debugDescription)")
        #expect(screen.contains("✓ finished"))
        #expect(screen.contains("\u{1B}[31m● recording"), "colors on a terminal")
        // The last line stays, followed by a newline.
        #expect(screen.hasSuffix("\r\n"))
    }

    // MARK: Color

    @Test func colorOnlyOnATerminalAndNeverWithNoColor() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        try #require(try recctl(daemon, "start", "take", "--duration", "0.5", "--wait").status == 0)
        let list = [Binaries.recctl, "--socket", daemon.socket, "ls"]
        let terminal = try onTerminal(list, environment: ["NO_COLOR": ""])
        #expect(terminal.wait() == 0)
        #expect(terminal.stdout.contains("\u{1B}[1mNAME"), "\(terminal.stdout.debugDescription)")
        let noColor = try onTerminal(list, environment: ["NO_COLOR": "1"])
        #expect(noColor.wait() == 0)
        #expect(noColor.stdout.contains("take.wav"))
        #expect(!noColor.stdout.utf8.contains(0x1B), "\(noColor.stdout.debugDescription)")
        let piped = try recctl(daemon, "ls", environment: ["NO_COLOR": ""])
        #expect(piped.stdout.contains("take.wav"))
        #expect(!piped.stdout.utf8.contains(0x1B))
    }

    // MARK: Library

    @Test func rmDeletesEveryNameAndReportsTheMissingOnes() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        for name in ["a", "b", "c"] {
            try #require(try recctl(daemon, "start", name, "--format", "wav", "--duration", "0.1", "--wait").status == 0)
        }
        let removed = try recctl(daemon, "rm", "a", "b.wav")
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(lines(removed.stdout) == ["deleted a.wav", "deleted b.wav"])
        #expect(try daemon.recordingFiles() == ["c.wav"])

        // A missing name fails the command; the others are still deleted.
        let partly = try recctl(daemon, "rm", "missing", "c", "--json")
        #expect(partly.status == 1)
        let output = lines(partly.stdout)
        try #require(output.count == 2, "\(partly.stdout)")
        #expect(try decode(ErrorResponse.self, output[0]).error.code == RPCErrorCode.notFound)
        #expect(try decode(DeleteResult.self, output[1]).deleted == "c.wav")
        #expect(partly.stderr.contains("recctl: no recording named 'missing'"), "\(partly.stderr)")
        #expect(try daemon.recordingFiles().isEmpty)
    }

    @Test func mvRenamesARecordingKeepingItsFormat() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 4).path))
        try #require(try recctl(daemon, "start", "draft", "--format", "flac", "--duration", "0.2", "--wait").status == 0)
        let moved = try recctl(daemon, "mv", "draft", "final")
        #expect(moved.status == 0, "\(moved.stderr)")
        #expect(moved.stdout == "renamed draft -> final.flac\n")
        let json = try recctl(daemon, "mv", "final.flac", "kept", "--json")
        let file = try decode(RecordingFile.self, json.stdout)
        #expect(file.file == "kept.flac")
        #expect(file.path == daemon.recordings + "/kept.flac")
        #expect(file.frames == 9600)
        #expect(try daemon.recordingFiles() == ["kept.flac"])
        #expect(try recctl(daemon, "mv", "draft", "other").status == 1)
    }

    // MARK: Exit codes and hints

    @Test func refusalsExitOneWithAHint() throws {
        let daemon = try Daemon(device: "null")
        // Nothing recording has its own words and status (3); see FirstHourTests.
        for command in ["pause", "resume", "stop", "cancel"] {
            let result = try recctl(daemon, command)
            #expect(result.status == 3, "\(command)")
            #expect(result.stderr.contains("recctl: nothing is recording"), "\(command): \(result.stderr)")
            #expect(result.stderr.contains("hint: `recctl start NAME` starts a recording."), "\(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
        // With --json the refusal is also on stdout, as the daemon's error.
        let json = try recctl(daemon, "pause", "--json")
        #expect(json.status == 3)
        let refusal = try decode(ErrorResponse.self, json.stdout).error
        #expect(refusal.code == RPCErrorCode.recorderError)
        #expect(refusal.data?.code == "invalidState")

        let missing = try recctl(daemon, "info", "missing")
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("no recording named 'missing'"), "\(missing.stderr)")
        let bad = try recctl(daemon, "start", "--format", "opus", "--rate", "44100")
        #expect(bad.status == 1)
        #expect(bad.stderr.contains("recctl: "), "\(bad.stderr)")
    }

    @Test func wrongUsageExits64BeforeConnecting() throws {
        // No daemon at this socket: usage errors must not get as far as connecting (which would be 69).
        let nowhere = inputs.file("nowhere.sock")
        let cases: [([String], String)] = [
            (["start", "--duration", "soon"], "--duration"),
            (["start", "--duration", "0"], "--duration"),
            (["start", "--duration", "1:xx"], "--duration"),
            (["start", "--at", "25:00"], "--at"),
            (["start", "--at", "tomorrow"], "--at"),
            (["start", "--format", "wma"], "wma"),
            (["watch", "--interval", "0"], "--interval"),
            (["watch", "--until", "done"], "done"),
            (["rm"], "name"),
            (["mv", "only-one"], "new"),
            (["record"], "record"),
        ]
        for (arguments, mention) in cases {
            let result = try run(Binaries.recctl, arguments + ["--socket", nowhere])
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(mention), "\(arguments): \(result.stderr)")
        }
    }

    @Test func noDaemonExits69WithAHintToStartIt() throws {
        let nowhere = inputs.file("nowhere.sock")
        for (arguments, environment) in [(["status", "--socket", nowhere], [:]), (["ls"], ["RECD_SOCKET": nowhere])] {
            let result = try run(Binaries.recctl, arguments, environment: environment)
            #expect(result.status == 69, "\(arguments)")
            #expect(result.stderr.contains("recctl: cannot connect to recd at \(nowhere)"), "\(result.stderr)")
            #expect(result.stderr.contains("systemctl --user start recd"), "\(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
        // version still tells its own.
        let version = try run(Binaries.recctl, ["version", "--socket", nowhere])
        #expect(version.status == 69)
        #expect(version.stdout == "recctl \(RecdVersion.current)\n")
    }

    @Test func aDaemonThatGoesAwayEndsWatchWithExit69() throws {
        let daemon = try Daemon(device: "null")
        let watch = try BackgroundCommand(Binaries.recctl, ["watch", "--json"], environment: ["RECD_SOCKET": daemon.socket])
        #expect(waitUntil { watch.stdout.contains("\n") })
        #expect(daemon.terminate() == 0)
        #expect(watch.wait() == 69, "\(watch.stderr)")
        #expect(watch.stderr.contains("recd closed the connection"), "\(watch.stderr)")
    }

    // MARK: Help, completions, man pages

    @Test func helpDocumentsTheExitCodes() throws {
        let help = try run(Binaries.recctl, ["--help"])
        #expect(help.status == 0)
        // Help wraps lines to the terminal: compare with whitespace collapsed.
        let text = help.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(text.contains("Exit status: 0 success; 1 the daemon refused the request or the recording failed; "
                              + "3 nothing is recording (stop, pause, resume, cancel, split); 64 wrong usage; "
                              + "69 cannot connect to recd."), "\(help.stdout)")
        for subcommand in ["status", "start", "stop", "pause", "resume", "cancel", "watch", "ls", "info", "rm", "mv", "devices", "version"] {
            #expect(help.stdout.contains("\n  \(subcommand) "), "\(subcommand) missing from help")
        }
        // The man page generator reads this dump: the exit codes reach recctl(1) from here.
        let dump = try run(Binaries.recctl, ["--experimental-dump-help"])
        #expect(dump.stdout.contains("64 wrong usage; 69 cannot connect to recd."))
    }

    @Test(arguments: ["bash", "zsh", "fish"])
    func completionScriptsKnowTheSubcommandsAndOptions(shell: String) throws {
        let recctl = try run(Binaries.recctl, ["--generate-completion-script", shell])
        #expect(recctl.status == 0)
        // fish names options as `-l 'duration'`, the others as `--duration`.
        func option(_ name: String) -> String { shell == "fish" ? "-l '\(name)'" : "--\(name)" }
        for word in ["watch", "start", "devices", option("duration"), option("until")] {
            #expect(recctl.stdout.contains(word), "\(shell): \(word)")
        }
        let recd = try run(Binaries.recd, ["--generate-completion-script", shell])
        #expect(recd.status == 0)
        #expect(recd.stdout.contains(option("device")), "\(shell)")
    }

    @Test(arguments: [60, 100])
    func helpParagraphsAreWrappedToTheTerminalOnce(columns: Int) throws {
        let help = try run(Binaries.recctl, ["--help"], environment: ["COLUMNS": String(columns)], timeout: 30)
        #expect(help.status == 0)
        // The discussion: from after the overview line to USAGE, in paragraphs.
        let text = help.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let usage = try #require(text.firstIndex { $0.hasPrefix("USAGE:") })
        let discussion = Array(text[1..<usage])
        #expect(discussion.contains { $0.contains("NO_COLOR") }, "\(help.stdout)")
        for (line, next) in zip(discussion, discussion.dropFirst()) where !line.isEmpty && !next.isEmpty {
            // Wrapped once, a line ends only where the next word would not have fit (ArgumentParser
            // keeps the last column free).
            let nextWord = next.split(separator: " ").first.map(String.init) ?? ""
            #expect(line.count < columns && line.count + 1 + nextWord.count >= columns,
                    "ragged at \(columns) columns: '\(line)' then '\(next)'")
        }
    }

    // MARK: Helpers

    /// Runs recctl against `daemon`, finding the socket through RECD_SOCKET as a user would.

    /// Runs `arguments` on a pseudo-terminal (util-linux `script`), so that recctl sees a terminal.
    func waitForState(_ daemon: Daemon, _ name: RecorderState.Name, timeout: Double = 20) throws -> StatusResult {
        let client = try daemon.connect()
        var status: StatusResult = try client.call(.status)
        _ = waitUntil(timeout: timeout) {
            status = (try? client.call(.status) as StatusResult) ?? status
            return status.state.name == name
        }
        return status
    }

    /// Waits until the recorder is recording and has `seconds` of audio.
    func waitForTime(_ daemon: Daemon, atLeast seconds: Double) throws -> Bool {
        let client = try daemon.connect()
        return waitUntil(timeout: 20) {
            guard let status = try? client.call(.status) as StatusResult else { return false }
            return status.state.name == .recording && status.currentTime >= seconds
        }
    }
}

/// A command left running (watch, start --wait, script), its stdout and stderr kept in files.
final class BackgroundCommand {
    private let directory = TemporaryDirectory()
    let process: ChildProcess

    init(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        let env = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let script = "exec \"$0\" \"$@\" >\(directory.file("out")) 2>\(directory.file("err"))"
        process = try ChildProcess("/bin/sh", ["-c", script, executable] + arguments, environment: env)
    }

    var stdout: String { (try? String(contentsOfFile: directory.file("out"), encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: directory.file("err"), encoding: .utf8)) ?? "" }
    /// What it has printed so far, up to its last whole line.
    var stdoutLines: [Substring] { completeLines(stdout) }

    /// The exit status, or nil if it did not exit in time.
    func wait(timeout: Double = 20) -> Int32? { process.wait(timeout: timeout) }
}

private func lines(_ text: String) -> [String] { text.split(separator: "\n").map(String.init) }

private func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T {
    try WireCoding.decoder().decode(T.self, from: Data(text.utf8))
}

/// The last state event in `start --wait --json` or `watch --json` output.
private func lastState(_ output: String) -> RecorderState? {
    for line in lines(output).reversed() {
        guard let update = try? decode(TopicUpdate.self, line) else { continue }
        if case .state(let state) = update.value { return state }
    }
    return nil
}
