import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// A bird station's first hour and first reboot, through the real recd and recctl binaries:
/// what an operator met that lost recordings or said what was not so (issue 34).
@Suite("a station's first hour")
struct StationTests {
    let inputs = TemporaryDirectory()

    func recctl(_ daemon: Daemon, _ arguments: String...) throws -> CommandResult {
        try run(Binaries.recctl, arguments, environment: ["RECD_SOCKET": daemon.socket], timeout: 30)
    }

    func listed(_ daemon: Daemon) throws -> [RecordingFile] {
        try WireCoding.decoder().decode(RecordingsListResult.self, from: Data(try recctl(daemon, "ls", "--json").stdout.utf8)).recordings
    }

    /// An autostart with a fixed name and no segments records again after every restart, under
    /// the next free numbered name, instead of sitting idle because the name is taken.
    @Test func autostartWithAFixedNameRecordsAgainAfterARestart() throws {
        let server = try PulseServer()
        try server.tone()
        let config = "[recording]\nformat = \"wav\"\n[autostart]\nenabled = true\nname = \"fg\"\n"
        let recordings = inputs.file("recordings")
        for (boot, expected) in ["fg", "fg-2", "fg-3"].enumerated() {
            let daemon = try Daemon(device: TestDevices.paced(server), config: config, recordings: recordings)
            let recording = try #require(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime >= 0.3 },
                                         "boot \(boot + 1): not recording\n\(daemon.log.suffix(2000))")
            #expect(recording.recording?.name == expected, "boot \(boot + 1)")
            #expect(recording.error == nil, "boot \(boot + 1): \(String(describing: recording.error))")
            // A reboot: systemd stops recd with SIGTERM, the file is finalized.
            #expect(daemon.terminate() == 0, "boot \(boot + 1)\n\(daemon.log.suffix(2000))")
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: recordings).filter { !$0.hasPrefix(".") }.sorted()
        #expect(files == ["fg-2.wav", "fg-3.wav", "fg.wav"])
    }

    /// An absolute threshold over a steady background between it and the threshold less the
    /// hysteresis (a 440 Hz hum at -12 dBFS below a 1 kHz high-pass: -43.5 dBFS; opening at
    /// -40, so -46 by hysteresis alone): the event a bird opens closes when the bird stops.
    @Test func aTriggerEventClosesOverABackgroundAboveTheHysteresis() throws {
        let server = try PulseServer()
        try server.tone()
        let rate = 48000.0
        let samples = (0..<Int(14 * rate)).flatMap { frame -> [Int16] in
            let time = Double(frame) / rate
            var value = 0.25 * sin(2 * Double.pi * 440 * time)
            if time >= 3, time < 4 { value += 0.1 * 2.0.squareRoot() * sin(2 * Double.pi * 3000 * time) }  // -20 dBFS RMS
            let sample = Int16((value * 32767).rounded())
            return [sample, sample]
        }
        let path = inputs.file("hum.raw")
        Signal.write(samples, to: path)
        let daemon = try Daemon(device: TestDevices.pacedFile(path, server: server),
                                config: "[recording]\nformat = \"flac\"\nsample_rate = 48000\nchannels = 2\n")
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.trigger]))
        let client = try daemon.connect()
        let trigger = TriggerParams(highPass: 1000, threshold: -40, hang: 0.5, maximumLength: 60, preRoll: 1)
        let _: Recording = try client.call(.start, StartParams(name: "birds", trigger: trigger))
        let events = TriggerTests.collectEvents(watcher, timeout: 40) { $0.contains { $0.kind == .closed } }
        let status: StatusResult = try client.call(.status)
        let _: Recording = try client.call(.stop)
        let closed = try #require(events.first { $0.kind == .closed }, "the event never closed: \(events), \(String(describing: status.trigger))")
        #expect(closed.reason == "hang", "\(closed)")
        // The sound lasted 1 s: the file holds the pre-roll, the sound and the hang (to the 10 ms block).
        #expect(abs(closed.duration - 2.5) <= 0.03, "\(closed)")
        #expect(FileManager.default.fileExists(atPath: closed.path), "\(closed.path)")
        let detector = try #require(status.trigger)
        let floor = try #require(detector.floor)
        #expect(abs(floor - -43.5) < 1, "the filtered hum: \(floor) dBFS")
        // The rule, as status says it: halfway from the floor to the opening level.
        #expect(detector.openLevel == -40)
        #expect(abs((detector.closeLevel ?? 0) - (floor + -40) / 2) < 0.001, "\(detector)")
    }

    /// `recctl listen` and `recctl watch` while listening show the input's meter and how long
    /// it has listened, not the last recording's length, frozen, and no meter.
    @Test func listenAndWatchShowTheMeterAndTheListeningTime() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        #expect(try recctl(daemon, "start", "before", "--duration", "1.5", "--wait").status == 0)
        let listen = try onTerminal([Binaries.recctl, "--socket", daemon.socket, "listen"], environment: ["NO_COLOR": "1"])
        defer { listen.process.signal(SIGINT) }
        let watch = try onTerminal([Binaries.recctl, "--socket", daemon.socket, "watch"], environment: ["NO_COLOR": "1"])
        defer { watch.process.signal(SIGTERM) }
        // The tone peaks at -12 dBFS on both channels; the time passes the last recording's 1.5 s.
        for (command, view) in [("listen", listen), ("watch", watch)] {
            #expect(waitUntil(timeout: 20) { view.stdout.contains("listening  00:00:02") }, "\(command): \(view.stdout.suffix(600).debugDescription)")
            let line = view.stdout.components(separatedBy: "\r\u{1B}[2K").last(where: { $0.contains("listening  ") }) ?? ""
            #expect(line.contains("L ▕") && line.contains("R ▕") && line.contains("-12.0/"), "\(command): \(line.debugDescription)")
        }
    }

    /// Listeners share one pre-roll as long as the longest asked for: a second `recctl listen`
    /// without `--pre-roll` (or a shorter one) leaves another client's 20 s as it is.
    @Test func aSecondListenerDoesNotCutAnothersPreRoll() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[listen]\npre_roll = 5\n")
        let first = try BackgroundCommand(Binaries.recctl, ["listen", "--json", "--pre-roll", "20"], environment: ["RECD_SOCKET": daemon.socket])
        defer { first.process.signal(SIGINT) }
        #expect(daemon.waitForStatus { $0.listening?.preRollCapacity == 20 } != nil, "\(first.stderr)")
        let second = try BackgroundCommand(Binaries.recctl, ["listen", "--json"], environment: ["RECD_SOCKET": daemon.socket])
        defer { second.process.signal(SIGINT) }
        #expect(waitUntil { second.stdout.contains("\"listening\"") }, "the second listener is in: \(second.stderr)")
        // A shorter one, over the socket: answered with listening as it is.
        let shorter: ListenResult = try daemon.connect().call(.listen, ListenParams(preRoll: 2))
        #expect(shorter.listening?.preRollCapacity == 20)
        let status = try #require(daemon.waitForStatus { $0.state.name == .listening && $0.listening?.preRollHeld ?? 0 >= 1 })
        #expect(status.listening?.preRollCapacity == 20, "\(String(describing: status.listening))")
    }
}
