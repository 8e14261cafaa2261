import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// recd as a service: sd_notify, watchdog, socket activation, signals, logging, configuration,
/// access control by peer credentials — with the real binary.
@Suite("recd service")
struct SystemdTests {
    let inputs = TemporaryDirectory()

    @Test func tellsSystemdWhenReadyWhatItDoesAndWhenStopping() throws {
        let server = try PulseServer()
        let notify = try NotifyListener()
        let daemon = try Daemon(device: TestDevices.paced(server), environment: ["NOTIFY_SOCKET": notify.path])
        let ready = try #require(notify.waitFor("READY=1"))
        #expect(ready.contains("STATUS=idle"))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "meeting", format: .flac))
        let status = try #require(notify.waitFor("STATUS=recording"))
        #expect(status.contains("-> meeting.flac"), "\(status)")
        #expect(status.range(of: #"recording \d\d:\d\d:\d\d"#, options: .regularExpression) != nil, "\(status)")
        daemon.process.signal(SIGTERM)
        #expect(notify.waitFor("STOPPING=1") != nil)
        // Finalizing the recording in progress: recd asks for more time.
        #expect(notify.waitFor("EXTEND_TIMEOUT_USEC=") != nil)
        #expect(daemon.process.wait(timeout: 30) == 0)
    }

    @Test func watchdogPingsStopWhenCaptureStallsAndResumeAfter() throws {
        let server = try PulseServer()
        let notify = try NotifyListener()
        let daemon = try Daemon(device: TestDevices.paced(server),
                                environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"])
        #expect(notify.waitFor("READY=1") != nil)
        // Idle: pinged every half period (0.2 s).
        let idlePings = notify.receive(for: 2.0).filter { $0.1.contains("WATCHDOG=1") }
        #expect(idlePings.count >= 3, "\(idlePings.count) pings while idle (10 due)")
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "watched"))
        #expect(waitUntil { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 0.2 })
        #expect(notify.receive(for: 1.0).contains { $0.1.contains("WATCHDOG=1") }, "pings while capture runs")
        // Freeze the sound server: capture makes no progress, so the pings must stop.
        server.suspend()
        // Frames already buffered still arrive for a while; from recd's notice on, no pings.
        try #require(waitUntil { daemon.log.contains("capture is not making progress") }, "\(daemon.log)")
        _ = notify.receive(for: 0.3)  // a ping already on its way
        let stalled = notify.receive(for: 1.5).filter { $0.1.contains("WATCHDOG=1") }
        #expect(stalled.isEmpty, "\(stalled.count) pings while capture was stalled")
        server.resume()
        #expect(notify.waitFor("WATCHDOG=1", timeout: 30) != nil, "pings resume with capture")
    }

    @Test func socketActivationUsesThePassedSocket() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("activated.sock")
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)
        #expect(listen(listener, 16) == 0)
        // As systemd does it: fd 3, LISTEN_FDS/LISTEN_FDNAMES, and LISTEN_PID set to recd's own pid.
        let daemon = try Daemon(device: "null", environment: ["LISTEN_FDS": "1", "LISTEN_FDNAMES": "control"],
                                launcher: ["/bin/sh", "-c", #"LISTEN_PID=$$ exec "$0" "$@""#],
                                descriptors: [(listener, 3)], waitForSocket: false)
        let connected = waitUntil(timeout: 60) { (try? RecdConnection(path: path)) != nil }
        #expect(connected, "\(daemon.log)")
        let client = try RecdConnection(path: path)
        let status: StatusResult = try client.call(.status)
        #expect(status.state == .idle)
        // It did not bind its own socket path.
        #expect(!FileManager.default.fileExists(atPath: daemon.socket))
        #expect(daemon.log.contains("listening on the socket systemd passed"))
    }

    @Test func sigtermMidRecordingFinalizesTheFileAndTellsSubscribers() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.state]))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "interrupted", format: .wav))
        #expect(waitUntil { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 0.5 })
        daemon.process.signal(SIGTERM)
        var final: RecorderState?
        while let notification = try? watcher.nextNotification(timeout: 20) {
            if case .state(let state) = notification.value { final = state }
            if final?.name == .finished { break }
        }
        guard case .finished(let recording)? = final else {
            Issue.record("last state \(String(describing: final)); log: \(daemon.log)")
            return
        }
        #expect(daemon.process.wait(timeout: 30) == 0)
        #expect(recording.path == started.path)
        #expect(!FileManager.default.fileExists(atPath: started.partialPath))
        let reader = try SoundFileReader(path: started.path)
        #expect(reader.info.frames == recording.frames)
        #expect(recording.frames >= 24000)
    }

    @Test func aKilledDaemonLeavesAPlayableFileThatTheNextStartRecovers() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[capture]\nsync_interval = 0.25\n")
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "crash", format: .wav))
        #expect(waitUntil { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 1.0 })
        daemon.process.signal(SIGKILL)
        _ = daemon.process.wait(timeout: 10)
        // Playable as it is, up to the last sync (at most 0.25 s lost).
        let partial = try SoundFileReader(path: started.partialPath)
        #expect(partial.info.frames >= 36000, "\(partial.info.frames) frames survived")
        // The next recd gives it its name back.
        let next = try Daemon(device: "null", recordings: daemon.recordings)
        let list: RecordingsListResult = try next.connect().call(.recordingsList)
        #expect(list.recordings.map(\.file) == ["crash.wav"])
        #expect(list.recordings.first.map { $0.frames >= 36000 } == true)
        #expect(next.log.contains("recovered unfinished recording"))
    }

    @Test func aFullDiskEndsWithFailedToSaveAndAPlayableFile() throws {
        // A real ENOSPC: recordings go to a 1 MiB tmpfs; 10 s of 48 kHz stereo is 1.9 MB.
        let mountPoint = TemporaryDirectory()
        let mounted = try run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mountPoint.path])
        try #require(mounted.status == 0, "mount: \(mounted.stderr)")
        defer { _ = try? run("/bin/umount", ["-l", mountPoint.path]) }
        let input = writeCounterInput(inputs, seconds: 12)
        // The space guard off: this is ENOSPC itself (StorageTests has the guard).
        let daemon = try Daemon(device: TestDevices.file(input.path),
                                config: "[storage]\nminimum_free = 0\nwarning_free = 0\n" + unpacedInputInTheWriteBuffer,
                                recordings: mountPoint.file("recordings"))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "full", format: .wav, sampleRate: 48000, channels: 2, duration: 10))
        #expect(waitUntil(timeout: 20) { (try? client.call(.status) as StatusResult)?.state.name == .failed })
        let status: StatusResult = try client.call(.status)
        #expect(status.error?.code == .failedToSave)
        #expect(status.error?.message.contains("full.wav") == true, "\(status.error?.message ?? "")")
        #expect(status.error?.message.contains("No space left on device") == true, "\(status.error?.message ?? "")")
        // Everything that fit is in a finalized file under its name.
        let recording = try #require(status.recording)
        #expect(!FileManager.default.fileExists(atPath: recording.partialPath))
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.frames >= recording.frames)
        #expect(recording.frames > 100_000)
        let samples = reader.readAllInt16()
        #expect(samples == Array(input.samples[0..<samples.count]), "what was saved is the input, unbroken")
        // And recd goes on: the next request is answered.
        let version: VersionResult = try client.call(.version)
        #expect(version.version == RecdVersion.current)
    }

    @Test func underJournaldLinesCarryTheirSyslogPriority() throws {
        let daemon = try Daemon(device: "no_such_pcm", config: "[capture]\nwait_for_device = false\n", environment: ["JOURNAL_STREAM": "8:12345"])
        let client = try daemon.connect()
        let refused = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"start","params":{"name":"x"}}"#)
        #expect(refused.errorDataCode != nil)
        daemon.terminate()
        // libasound writes its own lines ("ALSA lib …") to stderr; every line of recd's has a priority.
        let lines = daemon.log.split(separator: "\n").filter { !$0.hasPrefix("ALSA lib ") }
        #expect(!lines.isEmpty)
        #expect(lines.allSatisfy { $0.range(of: #"^<[0-7]>"#, options: .regularExpression) != nil }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("<6>") })   // info: listening
        #expect(lines.contains { $0.hasPrefix("<5>") })   // notice: ready
        #expect(lines.contains { $0.hasPrefix("<3>") })   // error: the device could not be opened
    }

    // MARK: Configuration

    @Test(arguments: [
        ("device = \"x\"\n[recording]\nformat = 7\n", "recd.toml:3: recording.format: must be a string"),
        ("[recording]\nfromat = \"flac\"\n", "recd.toml:2: recording.fromat: unknown key"),
        ("[recording]\nformat = \"wma\"\n", "recd.toml:2: recording.format: must be one of wav, flac, opus, vorbis, caf, aac, alac, mp3"),
        ("log_level = \"loud\"\n", "recd.toml:1: log_level: must be one of"),
        ("[server]\nsocket_mode = \"rw\"\n", "recd.toml:2: server.socket_mode: must be an octal mode"),
        ("[recording\nformat = \"wav\"\n", "recd.toml:1"),
        ("[capture]\nbuffer_time = -1\n", "recd.toml:2: capture.buffer_time: must be between"),
        ("[recording]\nformat = \"flac\"\nbit_depth = 32\n", "recd.toml:1: recording: flac takes a bitDepth of 16, 24"),
        ("[trigger]\nlow_pass = 300\nhigh_pass = 3000\n", "recd.toml:3: trigger.high_pass: must be below low_pass (300 Hz), not 3000"),
        ("[trigger]\nhang = \"2 weeks\"\n", "recd.toml:2: trigger.hang: must be a duration"),
        ("[trigger]\nthreshold = -20\nabove_floor = 12\n", "recd.toml:2: trigger.threshold: give either 'threshold'"),
        ("[schedule]\nwindows = [\"05:00..09:00\", \"mon-fry 05:00..09:00\"]\n", "recd.toml:2: schedule.windows: window 2: 'mon-fry'"),
        ("[schedule]\nwindows = [\"sunrise..sunrise+3h\"]\n", "recd.toml:1: schedule:"),
        // Found by fuzzing: toml++ (the TOML library recd used before) aborted on these, and
        // the key reader trapped on the empty key.
        ("[recording]\n[{\"format\": 1}]\n", "recd.toml:2: a table header must be a name in brackets"),
        ("[[ =]]\n", "recd.toml:1: an array of tables' header must be a name in double brackets, like [[source]]"),
        // Sources (issue 53): a bad key named by its source; a device is one source's.
        ("[[source]]\nname = \"east\"\ndevice = \"hw:1\"\n[source.recording]\nformat = \"wma\"\n",
         "recd.toml:5: source \"east\": recording.format: must be one of"),
        ("[[source]]\nname = \"east\"\ndevice = \"hw:1\"\n[[source]]\nname = \"west\"\ndevice = \"hw:1\"\n",
         "recd.toml:6: source \"west\": device: source \"east\" records 'hw:1' already; a device is one source"),
        ("'' = ''\n", "recd.toml:1: an empty key ('' = …) is not a setting"),
        ("a =8000-11-22T[tt10:YY\n", "recd.toml:1: dates and times are not used"),
        ("sample_rate = [[[[[[}\n", "recd.toml:1: a value is missing"),
    ])
    func aBadConfigurationIsAClearErrorNamingFileLineAndKey(text: String, expected: String) throws {
        let directory = TemporaryDirectory()
        let path = directory.file("recd.toml")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let result = try run(Binaries.recd, ["--user", "--config", path, "--socket", directory.file("s.sock")], timeout: 20)
        #expect(result.status == 78)
        #expect(result.stderr.contains(expected), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("s.sock")))
    }

    /// One `[[source]]` is the station's only source: its device and its own tables are what
    /// recd records with, over the station's; `--device` does not go with it.
    @Test func aStationOfOneSourceTableRecordsItsDeviceWithItsOwnSettings() throws {
        let input = writeCounterInput(inputs, seconds: 3)
        let directory = TemporaryDirectory()
        let config = directory.file("recd.toml")
        try """
            [recording]
            format = "wav"
            [[source]]
            name = "east"
            device = "\(TestDevices.file(input.path))"
            [source.recording]
            format = "flac"
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let check = try run(Binaries.recd, ["--user", "--config", config, "--check-config"], timeout: 20)
        #expect(check.status == 0, "\(check.stderr)")
        let refused = try run(Binaries.recd, ["--user", "--config", config, "--check-config", "--device", "hw:9"], timeout: 20)
        #expect(refused.status == 78 && refused.stderr.contains("--device: device: the configuration's [[source]] tables name their devices"),
                "\(refused.stderr)")
        let daemon = try Daemon(device: nil, config: try String(contentsOfFile: config, encoding: .utf8))
        // Over the socket, the source is "east": named or not, never "default".
        let client = try daemon.connect()
        #expect(try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"status","params":{"source":"east"}}"#)["result"] != nil)
        let unknown = try client.exchange(#"{"jsonrpc":"2.0","id":2,"method":"start","params":{"source":"default"}}"#)
        #expect(unknown.errorCode == -32004 && unknown.errorDataCode == "unknownSource", "\(unknown)")
        #expect(((unknown["error"] as? [String: Any])?["data"] as? [String: Any])?["sources"] as? [String] == ["east"])
        let station = try client.exchange(#"{"jsonrpc":"2.0","id":3,"method":"version","params":{"source":"east"}}"#)
        #expect(station.errorCode == -32602, "version is the station's: \(station)")
        // recctl names it with --source (every command that acts on a source sends it).
        let environment = ["RECD_SOCKET": daemon.socket, "NO_COLOR": "1"]
        let named = try run(Binaries.recctl, ["status", "--source", "east"], environment: environment, timeout: 30)
        #expect(named.status == 0, "\(named.stderr)")
        let wrong = try run(Binaries.recctl, ["stop", "--source", "west"], environment: environment, timeout: 30)
        #expect(wrong.status == 1 && wrong.stderr.contains("no source named 'west' (this station has: east)"), "\(wrong.stderr)")
        let recording: Recording = try daemon.connect().call(.start, StartParams(name: "east-take", duration: 0.5))
        #expect(recording.format == .flac)
        #expect(daemon.waitForStatus { $0.state.name == .finished } != nil, "\(daemon.log)")
        let frames = try SoundFileReader(path: daemon.recordings + "/east-take.flac").readAllInt16().count / 2
        #expect(frames == 24000, "half a second of the source's device")
    }

    @Test func sighupReloadsTheConfigurationAndIgnoresABadOne() throws {
        let input = writeCounterInput(inputs, seconds: 3)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: "[recording]\nformat = \"wav\"\n")
        let client = try daemon.connect()
        let first: Recording = try client.call(.start, StartParams(name: "one", duration: 0.1))
        #expect(first.format == .wav)
        #expect(waitUntil { (try? client.call(.status) as StatusResult)?.state.name == .finished })

        try "[recording]\nformat = \"flac\"\n".write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        #expect(waitUntil { daemon.log.contains("configuration reloaded") })
        let second: Recording = try client.call(.start, StartParams(name: "two", duration: 0.1))
        #expect(second.format == .flac)
        #expect(waitUntil { (try? client.call(.status) as StatusResult)?.state.name == .finished })

        try "[recording]\nformat = \"wma\"\n".write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        #expect(waitUntil { daemon.log.contains("configuration not reloaded") })
        let third: Recording = try client.call(.start, StartParams(name: "three", duration: 0.1))
        #expect(third.format == .flac)
        #expect(daemon.process.isRunning)
        #expect(waitUntil { (try? client.call(.status) as StatusResult)?.state.name == .finished })

        // A file that made the TOML library recd used before abort (found by fuzzing) is an
        // error now: the daemon, and the recording it is making, carry on.
        try "[recording]\nformat = \"wav\"\n".write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        let live: Recording = try client.call(.start, StartParams(name: "live", format: .wav, sampleRate: 48000, channels: 2))
        try "a =8000-11-22T[tt10:YY\n".write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        #expect(waitUntil { daemon.log.contains("dates and times are not used") }, "\(daemon.log)")
        #expect(daemon.process.isRunning)
        let status: StatusResult = try client.call(.status)
        #expect(status.state.name == .recording)
        let stopped: Recording = try client.call(.stop)
        #expect(stopped.path == live.path)
        #expect(try SoundFileReader(path: live.path).info.frames == stopped.frames)
    }

    // MARK: Access

    @Test func aClientRunningAsAnotherUserMayObserveButNotControl() throws {
        let daemon = try Daemon(device: "null", config: "[server]\nsocket_mode = \"0666\"\n")
        chmod(daemon.directory.path, 0o755)
        let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", Binaries.recctl]
        let socket = ["--socket", daemon.socket]
        let status = try run("/usr/bin/setpriv", asNobody + ["status"] + socket)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("idle"))
        let stop = try run("/usr/bin/setpriv", asNobody + ["stop"] + socket)
        #expect(stop.status == 1)
        #expect(stop.stderr.contains("'stop' needs the 'control' permission"), "\(stop.stderr)")
        #expect(stop.stderr.contains("control_users"), "the hint says how to get the permission")
        let json = try run("/usr/bin/setpriv", asNobody + ["start", "--json"] + socket)
        #expect(json.stdout.contains("\"notPermitted\""))
        #expect(json.stdout.contains("\"permission\":\"control\""))
        // Root (this test) may control.
        let client = try daemon.connect()
        let answer = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"stop"}"#)
        #expect(answer.errorDataCode == "invalidState")
    }

    @Test func listedUsersMayControl() throws {
        let daemon = try Daemon(device: "null", config: "[server]\nsocket_mode = \"0666\"\ncontrol_users = [\"nobody\"]\n")
        chmod(daemon.directory.path, 0o755)
        let stop = try run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", Binaries.recctl,
                                                "stop", "--socket", daemon.socket])
        // Allowed to ask; refused only because nothing is recording.
        #expect(stop.stderr.contains("nothing is recording"), "\(stop.stderr)")
    }

    @Test func anUnreadableDeviceIsNoPermission() throws {
        // recd runs as nobody; the device's source file belongs to root, mode 0600.
        let input = writeCounterInput(inputs, seconds: 1)
        chmod(input.path, 0o600)
        let directory = TemporaryDirectory()
        chmod(directory.path, 0o777)
        let socketPath = directory.file("recd.sock")
        let unprivileged = try Daemon(device: TestDevices.file(input.path),
                                      environment: ["HOME": directory.path, "XDG_CONFIG_HOME": directory.file("config")],
                                      launcher: ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
                                      arguments: ["--user", "--socket", socketPath, "--recordings-dir", directory.file("recordings"),
                                                  "--device", TestDevices.file(input.path)],
                                      waitForSocket: false)
        #expect(waitUntil(timeout: 60) { (try? RecdConnection(path: socketPath)) != nil }, "\(unprivileged.log)")
        let client = try RecdConnection(path: socketPath)
        let answer = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"start"}"#)
        #expect(answer.errorCode == -32000)
        #expect(answer.errorDataCode == "noPermission", "\(answer)")
        #expect(answer.errorMessage?.contains("Permission denied") == true)
        #expect(answer.errorMessage?.contains(input.path) == true)
        // No recording was created (the directory's lock file is recd's own).
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.file("recordings"))) ?? []
        #expect(files.filter { $0 != ".recd.lock" }.isEmpty, "\(files)")
    }
}
