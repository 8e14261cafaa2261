import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// Recording unattended, through the real recd and recctl binaries: segments, split, sessions
/// in `ls`, a device that goes away and comes back, autostart before the device exists, and
/// the digital-silence warning; text and JSON.
@Suite("unattended recording")
struct UnattendedTests {
    let inputs = TemporaryDirectory()

    func status(_ daemon: Daemon) throws -> StatusResult {
        try WireCoding.decoder().decode(StatusResult.self, from: Data(try recctl(daemon, "status", "--json").stdout.utf8))
    }

    func waitForStatus(_ daemon: Daemon, timeout: Double = 20, _ condition: (StatusResult) -> Bool) -> StatusResult? {
        daemon.waitForStatus(timeout: timeout, condition)
    }

    @Test func segmentsByLengthAreListedAsOneSessionAndConcatenateToTheInput() throws {
        let input = writeCounterInput(inputs, seconds: 10)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: "[segments]\nlength = 2\n")
        let started = try recctl(daemon, "start", "station", "--format", "wav", "--rate", "48000", "--channels", "2",
                                 "--duration", "5", "--wait")
        #expect(started.status == 0, "\(started.stderr)")
        let files = try listed(daemon)
        #expect(files.count == 3)
        #expect(Set(files.compactMap(\.session)).count == 1, "one session")
        #expect(files.map(\.segment) == [1, 2, 3])
        #expect(files.map(\.frames) == [96000, 96000, 48000])
        #expect(files.allSatisfy { $0.file.hasPrefix("station/") && $0.sessionName == "station" })
        var samples: [Int16] = []
        for file in files { samples += try SoundFileReader(path: file.path).readAllInt16() }
        #expect(samples.count == 5 * 48000 * 2)
        #expect(samples.elementsEqual(input.samples[0..<samples.count]), "the segments, concatenated, are the input")

        let table = try recctl(daemon, "ls").stdout.components(separatedBy: "\n\n")[0].split(separator: "\n").map(String.init)
        #expect(table.count == 5, "\(table)")
        let summary = table[1].split(separator: "  ", omittingEmptySubsequences: true).map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(Array(summary.prefix(4)) == ["station/ (3 segments)", "00:00:05.0", summary[2], "wav 48 kHz 2 ch"], "\(table)")
        for (row, file) in zip(table[2...], files) {
            #expect(row.hasPrefix("  " + file.file), "\(row)")
        }
        // A segment is addressed by its path below the recordings directory.
        let info = try recctl(daemon, "info", files[1].file)
        #expect(info.status == 0, "\(info.stderr)")
        #expect(info.stdout.contains("(96000 frames)"))
    }

    @Test func splitThroughRecctlClosesTheFileAndStatusShowsTheSegment() throws {
        let server = try PulseServer()
        let input = writeCounterInput(inputs, seconds: 30)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server))
        #expect(try recctl(daemon, "start", "talk", "--format", "wav", "--rate", "48000", "--channels", "2").status == 0)
        #expect(waitForStatus(daemon) { $0.state.name == .recording && $0.currentTime >= 0.3 } != nil)
        let split = try recctl(daemon, "split")
        #expect(split.status == 0, "\(split.stderr)")
        #expect(split.stdout.split(separator: "\n").map(String.init)
                    == ["closed \(daemon.recordings)/talk.wav (\(split.stdout.split(separator: "(")[1].prefix(10)))",
                        "now writing \(daemon.recordings)/talk-2.wav"], "\(split.stdout)")
        #expect(waitForStatus(daemon) { $0.currentTime >= 0.6 } != nil)
        let json = try recctl(daemon, "split", "--json")
        let result = try WireCoding.decoder().decode(SplitResult.self, from: Data(json.stdout.utf8))
        #expect(result.closed.index == 2)
        #expect(result.closed.path == daemon.recordings + "/talk-2.wav")
        #expect(result.recording?.segment?.index == 3)
        // The split answers at once; the closed file is finalized (and counted) just after.
        #expect(waitForStatus(daemon) { $0.statistics.segmentsClosed == 2 } != nil)
        let text = try recctl(daemon, "status").stdout
        #expect(text.contains("segment  #3, from "), "\(text)")
        #expect(text.contains("session  2 segment(s) closed"), "\(text)")
        #expect(try recctl(daemon, "stop").status == 0)
        let files = try listed(daemon)
        #expect(files.map(\.segment) == [1, 2, 3])
        var samples: [Int16] = []
        for file in files { samples += try SoundFileReader(path: file.path).readAllInt16() }
        #expect(samples.elementsEqual(input.samples[0..<samples.count]), "no frame lost or repeated at a split")
        let idle = try recctl(daemon, "split")
        #expect(idle.status == 3)
        #expect(idle.stderr.contains("nothing is recording"), "\(idle.stderr)")
    }

    @Test func aLostDeviceIsWaitedForAndRecctlShowsTheWaitTheRetryAndTheGap() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let watch = try BackgroundCommand(Binaries.recctl, ["watch", "--json", "--topics", "state", "segment"],
                                          environment: ["RECD_SOCKET": daemon.socket])
        defer { watch.process.signal(SIGTERM) }
        try #require(waitUntil { watch.stdout.contains("\n") }, "watch has its snapshot: \(watch.stderr)")
        #expect(try recctl(daemon, "start", "outlive", "--format", "flac", "--segment", "3600").status == 0)
        #expect(waitForStatus(daemon) { $0.state.name == .recording && $0.currentTime >= 0.5 } != nil)
        server.kill()
        let waiting = try #require(waitForStatus(daemon) { $0.state.name == .waitingForDevice })
        let wait = try #require(waiting.state.deviceWait)
        #expect((wait.retryAt ?? .distantPast) > wait.since)
        #expect(waiting.statistics.gaps.count == 1)
        #expect(waiting.lastSegment?.endReason == .deviceLost)
        let first = try #require(waiting.lastSegment)
        #expect(try SoundFileReader(path: first.path).info.frames == first.frames, "finalized and playable")
        let text = try recctl(daemon, "status").stdout
        #expect(text.contains("state    … waiting for device"), "\(text)")
        // The error is the loss, then (from the first retry on) why the device will not open.
        #expect(text.range(of: #"waiting  (deviceLost|deviceNotFound): "#, options: .regularExpression) != nil, "\(text)")
        #expect(text.range(of: #"retry in \d+\.\d s \(attempt \d+\)"#, options: .regularExpression) != nil, "\(text)")
        // From the first retry on, libasound's own reason ("Connection refused"), trimmed: the
        // pulse plugin ends it with a newline, which once broke recctl's line in two.
        let refused = try #require(waitForStatus(daemon) { $0.state.deviceWait?.error.code == .deviceNotFound })
        let reason = try #require(refused.state.deviceWait?.error.message)
        #expect(reason.contains("Connection refused") && !reason.contains("\n"), "\(reason)")
        let refusedText = try recctl(daemon, "status").stdout
        #expect(!refusedText.contains("\n)"), "\(refusedText)")

        Thread.sleep(forTimeInterval: 3)  // the server stays away 3 s: the scenario, not a wait
        try server.restart()
        try server.tone()
        let back = try #require(waitForStatus(daemon) { $0.state.name == .recording && $0.recording?.segment?.index == 2 })
        #expect((back.recording?.segment?.gapBefore?.duration ?? 0) >= 3)
        let resumed = try recctl(daemon, "status").stdout
        #expect(resumed.range(of: #"session  1 segment\(s\) closed, 1 device gap\(s\), \d+\.\d s without capture"#,
                              options: .regularExpression) != nil, "\(resumed)")
        #expect(waitForStatus(daemon) { $0.currentTime >= first.duration + 0.5 } != nil)
        #expect(try recctl(daemon, "stop").status == 0)

        let files = try listed(daemon)
        #expect(files.count == 2)
        #expect(files.map(\.segment) == [1, 2])
        #expect(Set(files.compactMap(\.session)).count == 1)
        // watch saw the wait and both segments close, as JSON lines.
        #expect(waitUntil { watch.stdoutLines.contains { $0.contains("\"endReason\":\"end\"") } }, "\(watch.stdout)")
        let events = watch.stdoutLines.compactMap {
            try? WireCoding.decoder().decode(TopicUpdate.self, from: Data($0.utf8))
        }
        let closed = events.compactMap { event -> Segment? in
            if case .segment(let segment?) = event.value { return segment }
            return nil
        }
        #expect(closed.map(\.endReason) == [.deviceLost, .end])
        #expect(events.contains { if case .state(let state) = $0.value { state.name == .waitingForDevice } else { false } })
    }

    @Test func autostartWaitsForADeviceThatAppearsLater() throws {
        let server = try PulseServer()
        server.kill()
        let daemon = try Daemon(device: TestDevices.paced(server),
                                config: "[recording]\nformat = \"flac\"\n[segments]\nlength = 60\n[autostart]\nenabled = true\nname = \"station\"\n")
        let waiting = try #require(waitForStatus(daemon) { $0.state.name == .waitingForDevice })
        #expect(waiting.recording?.name == "station")
        let watch = try recctl(daemon, "watch", "--until", "waitingForDevice")
        #expect(watch.status == 0)
        #expect(watch.stdout.contains("\"name\":\"waitingForDevice\""), "on a pipe, watch prints JSON: \(watch.stdout)")
        // On a terminal, the live line says it waits, why, and when it tries again.
        let live = try BackgroundCommand("/usr/bin/script", ["-qfec", "'\(Binaries.recctl)' watch", "/dev/null"],
                                         environment: ["RECD_SOCKET": daemon.socket, "NO_COLOR": "1"])
        defer { live.process.signal(SIGTERM) }
        #expect(waitUntil { live.stdout.contains("retry in") }, "\(live.stdout)")
        #expect(live.stdout.contains("… waiting for device"), "\(live.stdout)")
        #expect(live.stdout.contains("station  deviceNotFound retry in "), "\(live.stdout)")
        let devices = try WireCoding.decoder().decode(DevicesResult.self, from: Data(try recctl(daemon, "devices", "--json").stdout.utf8))
        #expect(devices.current == TestDevices.paced(server))
        Thread.sleep(forTimeInterval: 3)  // the device appears 3 s later: the scenario, not a wait
        try server.restart()
        try server.tone()
        let recording = try #require(waitForStatus(daemon) { $0.state.name == .recording && $0.currentTime >= 0.5 })
        let path = try #require(recording.recording?.segment?.path)
        #expect(path.hasPrefix(daemon.recordings + "/station/"))
        #expect(path.range(of: #"/station/\d{4}-\d\d-\d\d/\d{8}T\d{6}Z\.flac$"#, options: .regularExpression) != nil, "\(path)")
        #expect(try recctl(daemon, "stop").status == 0)
        let files = try listed(daemon)
        #expect(files.count == 1)
        #expect(files.first?.path == path)
        #expect(waitUntil { daemon.log.contains("recording started at startup") }, "\(daemon.log)")
    }

    @Test func digitalSilenceIsWarnedAboutAndClearedWhenSignalReturns() throws {
        let server = try PulseServer()
        let path = inputs.file("silence.raw")
        Signal.write([Int16](repeating: 0, count: 96000 * 2) + Signal.counter16(frames: 480_000, channels: 2), to: path)
        let daemon = try Daemon(device: TestDevices.pacedFile(path, server: server), config: "[capture]\nsilence_warning = 0.5\n")
        let watch = try BackgroundCommand(Binaries.recctl, ["watch", "--json", "--topics", "warning"],
                                          environment: ["RECD_SOCKET": daemon.socket])
        defer { watch.process.signal(SIGTERM) }
        try #require(waitUntil { watch.stdout.contains("\n") }, "watch has its snapshot: \(watch.stderr)")
        #expect(try recctl(daemon, "start", "quiet", "--format", "wav").status == 0)
        let warned = try #require(waitForStatus(daemon) { $0.warning != nil })
        #expect(warned.warning?.code == .digitalSilence)
        let text = try recctl(daemon, "status").stdout
        #expect(text.contains("warning  digitalSilence: the input has been digital silence"), "\(text)")
        #expect(waitForStatus(daemon) { $0.warning == nil && $0.currentTime > 2.5 } != nil, "cleared when signal returns")
        #expect(try recctl(daemon, "stop").status == 0)
        #expect(waitUntil { watch.stdoutLines.count >= 3 }, "\(watch.stdout)")
        let values = watch.stdoutLines.compactMap {
            try? WireCoding.decoder().decode(TopicUpdate.self, from: Data($0.utf8))
        }.map { update -> RecorderWarning? in
            if case .warning(let warning) = update.value { return warning }
            return nil
        }
        #expect(values.first == .some(nil), "the snapshot: no warning")
        #expect(values.dropFirst().first??.code == .digitalSilence)
        #expect(values.dropFirst(2).first == .some(nil))
        #expect(daemon.log.contains("input is digital silence"))
        #expect(daemon.log.contains("input signal is back"))
    }
}
