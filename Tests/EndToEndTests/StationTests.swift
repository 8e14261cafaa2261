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
        #expect(abs((detector.closeLevel ?? 0) - (floor + -40) / 2) < 0.1, "\(detector)")
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

    /// A refused reload is said where an operator looks — `status`, `recctl status`, systemd's
    /// STATUS= with its file and line — not only in the journal; the next good reload clears it.
    @Test func aRefusedReloadShowsInStatusAndSystemdUntilAGoodOne() throws {
        let notify = try NotifyListener()
        let daemon = try Daemon(device: "null", config: "[recording]\nformat = \"wav\"\n", environment: ["NOTIFY_SOCKET": notify.path])
        #expect(notify.waitFor("READY=1") != nil)
        try "[recording]\nformat = \"wav\"\n\n[storage]\nminimum_free = \"lots\"\n".write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        let refused = try #require(daemon.waitForStatus { $0.warning?.code == .configurationNotReloaded }, "\(daemon.log.suffix(1500))")
        #expect(refused.warning?.message.contains("recd.toml:5: storage.minimum_free") == true, "\(String(describing: refused.warning))")
        let text = try recctl(daemon, "status").stdout
        #expect(text.contains("warning  configurationNotReloaded: the configuration was not reloaded"), "\(text)")
        // The reason itself, file and line, where `systemctl status` shows it.
        let status = try #require(notify.waitFor("configuration was not reloaded"), "systemd's STATUS=")
        #expect(status.contains("STATUS=idle; the configuration was not reloaded"), "\(status)")
        #expect(status.contains("recd.toml:5: storage.minimum_free"), "\(status)")
        try "[recording]\nformat = \"flac\"\n".write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        #expect(daemon.waitForStatus { $0.warning == nil } != nil, "cleared by a good reload")
        #expect(daemon.process.isRunning)
    }

    /// Between events, `recctl status` says no file is open (the last event's is finalized),
    /// with no segment row, and counts "1 event"; `recctl stop` names the last event's file,
    /// and a triggered recording stopped before any event says no sound opened one (not that
    /// the device never appeared).
    @Test func aTriggeredRecordingBetweenEventsAndStoppedSaysWhatIsSo() throws {
        let server = try PulseServer()
        try server.tone()
        let path = inputs.file("scene.raw")
        Signal.write(Signal.triggerScene(seconds: 30, bursts: [(1.5, 2.0)]), to: path)
        let daemon = try Daemon(device: TestDevices.pacedFile(path, server: server))
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.trigger]))
        #expect(try recctl(daemon, "start", "birds", "--format", "flac", "--threshold=-35", "--high-pass", "100", "--hang", "0.3").status == 0)
        let events = TriggerTests.collectEvents(watcher, timeout: 30) { $0.contains { $0.kind == .closed } }
        let closed = try #require(events.first { $0.kind == .closed }, "\(events)")
        let text = try recctl(daemon, "status").stdout
        #expect(text.contains("file     none open (the last event's: \(closed.path))"), "\(text)")
        #expect(!text.contains(".part") && !text.contains("segment "), "\(text)")
        #expect(text.contains("1 event\n") || text.contains("1 event,"), "\(text)")
        let stopped = try recctl(daemon, "stop")
        #expect(stopped.stdout == "stopped birds; the last event's file: \(closed.path)\n", "\(stopped.stdout)")

        // Armed, nothing heard: the device was there all along.
        let quiet = inputs.file("quiet.raw")
        Signal.write(Signal.triggerScene(seconds: 30, bursts: []), to: quiet)
        let second = try Daemon(device: TestDevices.pacedFile(quiet, server: server))
        #expect(try recctl(second, "start", "birds", "--threshold=-35", "--high-pass", "100").status == 0)
        #expect(second.waitForStatus { $0.trigger?.floor != nil } != nil)
        let nothing = try recctl(second, "stop")
        #expect(nothing.stdout == "stopped birds: no sound opened an event, nothing was recorded\n", "\(nothing.stdout)")
        #expect(try second.recordingFiles() == ["birds"] || (try second.recordingFiles()).isEmpty)
    }

    /// `start --at` is `preparing` with its time and nothing else until then: no device, no
    /// file; `stop` before then cancels it without leaving an empty file; at the time it records.
    @Test func aStartAtALaterTimeCreatesNothingUntilThenAndStopCancelsIt() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let later = try recctl(daemon, "start", "at2", "--format", "wav", "--at", "+2h")
        #expect(later.status == 0 && later.stdout.contains("at2: starts at "), "\(later.stdout)\(later.stderr)")
        let status: StatusResult = try daemon.connect().call(.status)
        #expect(status.state.name == .preparing)
        let scheduled = try #require(status.recording?.scheduledAt)
        #expect(abs(scheduled.timeIntervalSinceNow - 7200) < 60)
        #expect(try recctl(daemon, "status").stdout.contains("nothing is opened or created until then"))
        #expect(try daemon.recordingFiles().isEmpty, "nothing created two hours early")
        let stop = try recctl(daemon, "stop")
        #expect(stop.stdout.hasPrefix("cancelled at2, scheduled for "), "\(stop.stdout)")
        #expect(try daemon.recordingFiles().isEmpty, "no empty at2.wav")
        #expect(daemon.waitForStatus { $0.state.name == .idle } != nil)

        // A start in 1.5 s: nothing until then, then the recording, from that time.
        let soon = Date().addingTimeInterval(1.5)
        #expect(try recctl(daemon, "start", "at3", "--format", "wav", "--at", "+1.5").status == 0)
        #expect(try daemon.recordingFiles().isEmpty)
        let recording = try #require(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime >= 0.5 })
        #expect((recording.recording?.startedAt ?? .distantPast) >= soon.addingTimeInterval(-0.2), "\(String(describing: recording.recording))")
        let stopped = try recctl(daemon, "stop")
        #expect(stopped.stdout.contains("-> \(daemon.recordings)/at3.wav"), "\(stopped.stdout)")
    }

    /// Ctrl-C in `recctl start --wait` leaves the wait, not the recording, and says so.
    @Test func ctrlCInStartWaitSaysTheRecordingGoesOn() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let start = try BackgroundCommand(Binaries.recctl, ["start", "take", "--wait"], environment: ["RECD_SOCKET": daemon.socket])
        #expect(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime >= 0.3 } != nil)
        start.process.signal(SIGINT)
        #expect(start.wait() == 130)
        #expect(start.stderr.contains("recording 'take' goes on in recd (`recctl stop` ends it)"), "\(start.stderr)")
        #expect(try daemon.connect().call(.status, as: StatusResult.self).state.name == .recording)
    }

    /// The group names `recctl ls` shows (`station/ (3 segments)`) work in `info` and `rm`:
    /// info sums the group up; rm says how many files and takes them only with --all (or a yes
    /// on a terminal).
    @Test func theGroupNamesLsShowsWorkInInfoAndRm() throws {
        let input = writeCounterInput(inputs, seconds: 10)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: "[segments]\nlength = 1\n")
        #expect(try recctl(daemon, "start", "station", "--format", "wav", "--duration", "2.5", "--wait").status == 0)
        let files = try listed(daemon).map(\.file)
        #expect(files.count == 3 && files.allSatisfy { $0.hasPrefix("station/") }, "\(files)")
        let info = try recctl(daemon, "info", "station")
        #expect(info.status == 0, "\(info.stderr)")
        #expect(info.stdout.contains("station/ (3 segments)") && files.allSatisfy { info.stdout.contains($0) }, "\(info.stdout)")
        let refused = try recctl(daemon, "rm", "station")
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("station/ is 3 files (00:00:02.5, "), "\(refused.stderr)")
        #expect(refused.stderr.contains("add --all to delete them all"), "\(refused.stderr)")
        #expect(try listed(daemon).count == 3, "nothing deleted without --all")
        // On a terminal: asked, and "n" keeps them.
        let asked = try onTerminal([Binaries.recctl, "--socket", daemon.socket, "rm", "station/"])
        #expect(waitUntil { asked.stdout.contains("delete them all? [y/N]") }, "\(asked.stdout)")
        _ = asked.wait(timeout: 1)
        asked.process.signal(SIGTERM)
        #expect(try listed(daemon).count == 3)
        let removed = try recctl(daemon, "rm", "station", "--all")
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(removed.stdout.components(separatedBy: "deleted ").count - 1 == 3, "\(removed.stdout)")
        #expect(try listed(daemon).isEmpty)
    }

    /// The id of `process`'s thread named `name` (its `comm`).
    static func thread(named name: String, of process: pid_t) -> String? {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process)/task")) ?? []
        return tasks.first { task in
            (try? String(contentsOfFile: "/proc/\(process)/task/\(task)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) == name
        }
    }

    /// The small ones of the first hour, each as the operator met it.
    @Test func theFirstHoursSmallThingsSayWhatIsSo() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        // `recctl tap` on a terminal: refused, as gzip refuses, instead of spraying audio.
        let tap = try onTerminal([Binaries.recctl, "--socket", daemon.socket, "tap"])
        #expect(tap.wait() == 64)
        #expect(tap.stdout.contains("standard output is a terminal"), "\(tap.stdout)")
        // A typo: the command meant.
        let typo = try recctl(daemon, "strat", "x")
        #expect(typo.status == 64 && typo.stderr.contains("no command 'strat'; did you mean 'start'?"), "\(typo.stderr)")
        // A range error names the option typed, not the wire's member.
        let range = try recctl(daemon, "start", "x", "--pre-roll", "999")
        #expect(range.status == 64 && range.stderr.contains("--pre-roll must be") && !range.stderr.contains("'preRoll'"), "\(range.stderr)")
        // A second start names what records.
        #expect(try recctl(daemon, "start", "birds", "--format", "wav").status == 0)
        let busy = try recctl(daemon, "start", "other")
        #expect(busy.stderr.contains("cannot start while recording 'birds'"), "\(busy.stderr)")
        // cancel says what it cancelled and that the file went.
        let path = try #require(daemon.waitForStatus { $0.recording?.path.isEmpty == false }?.recording?.path)
        let cancel = try recctl(daemon, "cancel")
        #expect(cancel.stdout == "cancelled birds: deleted \(path)\n", "\(cancel.stdout)")
        #expect(!FileManager.default.fileExists(atPath: path))
        // devices: no rate converters or playback mixers among the capture devices.
        let devices = try recctl(daemon, "devices").stdout
        for plugin in ["lavrate", "samplerate", "speexrate", "upmix", "vdownmix"] {
            #expect(!devices.contains("  \(plugin) —"), "\(plugin) listed: \(devices)")
        }
        // waybar: a sound-activated recording's tooltip names no file that will never exist.
        #expect(try recctl(daemon, "start", "birds", "--format", "flac", "--threshold=-3").status == 0)
        let bar = try BackgroundCommand(Binaries.recctl, ["watch", "--format", "waybar"], environment: ["RECD_SOCKET": daemon.socket])
        defer { bar.process.signal(SIGTERM) }
        #expect(waitUntil { bar.stdout.contains("tooltip") }, "\(bar.stderr)")
        #expect(bar.stdout.contains("birds/ (a file per sound event)") && !bar.stdout.contains("birds.flac"), "\(bar.stdout)")
        #expect(try recctl(daemon, "stop").status == 0)
        // An empty configuration (/dev/null) is all defaults.
        let empty = try run(Binaries.recd, ["--check-config", "--config", "/dev/null"], timeout: 20)
        #expect(empty.status == 0, "\(empty.stderr)")
    }

    /// A sound server that stops answering (frozen, or a driver that deadlocks in the read, as
    /// libpulse does when its server dies while a fragment is half read) is a lost device once
    /// nothing came for CaptureEngine.stallLimit (6 s): the file so far is closed, recd waits,
    /// and the recording goes on in the next file when the device answers again. Before, the
    /// recording sat in `recording` with a frozen time until systemd's watchdog killed recd.
    @Test func aSoundServerThatStopsAnsweringIsALostDeviceAndTheRecordingGoesOn() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "frozen", format: .wav, sampleRate: 48000, channels: 2))
        #expect(daemon.waitForStatus { $0.currentTime >= 0.5 } != nil, "never recorded")
        server.suspend()
        let frozenAt = Date()
        let waiting = try #require(daemon.waitForStatus(timeout: 60) { $0.state.name == .waitingForDevice || !$0.state.isActive },
                                   "the stall was not noticed\n\(daemon.log.suffix(3000))")
        server.resume()
        #expect(waiting.state.name == .waitingForDevice, "\(waiting.state.name)")
        // Not before the limit: the last frame came at most a device buffer (0.5 s) before the freeze.
        #expect(Date().timeIntervalSince(frozenAt) >= 5.4, "noticed \(Date().timeIntervalSince(frozenAt)) s after the freeze")
        #expect(waiting.state.deviceWait?.error.message.contains("delivered nothing for") == true, "\(String(describing: waiting.state.deviceWait))")
        // The gap begins at the last frame, before the loss was noticed.
        let gap = try #require(waiting.statistics.gaps.last, "no gap in \(waiting.statistics)")
        #expect(gap.start <= frozenAt.addingTimeInterval(0.5), "the gap begins at \(gap.start), the freeze was at \(frozenAt)")
        let resumed = try #require(daemon.waitForStatus { $0.state.name == .recording && $0.recording?.segment?.index == 2 },
                                   "did not go on\n\(daemon.log.suffix(3000))")
        #expect(resumed.recording?.id == started.id)
        let before = resumed.currentTime
        #expect(daemon.waitForStatus { $0.currentTime >= before + 0.5 } != nil, "the second file does not grow")
        let stopped: Recording = try client.call(.stop)
        #expect(stopped.id == started.id)
        let files = try listed(daemon).map(\.file).sorted()
        #expect(files == ["frozen-2.wav", "frozen.wav"], "\(files)")
    }
}
