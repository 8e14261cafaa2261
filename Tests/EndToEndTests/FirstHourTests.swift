import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// What a newcomer meets in the first hour (issue 25), through the real recd and recctl: the
/// user socket without XDG_RUNTIME_DIR, configuration mistakes found by --check-config,
/// directories and sockets recd cannot write, a misspelt device, commands with nothing
/// recording, and retention switched on over old recordings.
@Suite("the first hour")
struct FirstHourTests {
    let inputs = TemporaryDirectory()

    /// An empty configuration file (recd's default one may exist on this machine).
    func emptyConfig() throws -> String {
        let path = inputs.file("empty.toml")
        try "".write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// `setpriv` arguments that run a command as `uid` (no passwd entry needed).
    func asUser(_ uid: uid_t) -> [String] { ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups"] }

    // MARK: Where the socket is

    @Test func withoutXDGRuntimeDirRecctlAndTheShellExampleFindTheUserInstance() throws {
        // A uid of the test's own, so that /tmp/recd-<uid> is no one else's.
        let uid = uid_t.random(in: 40_000..<60_000)
        let runtime = "/tmp/recd-\(uid)"
        defer { try? FileManager.default.removeItem(atPath: runtime) }
        let home = inputs.file("home")
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        chown(home, uid, uid)
        let config = try emptyConfig()
        // What `su` leaves: no XDG_RUNTIME_DIR, no RECD_SOCKET.
        let environment = ["HOME": home, "XDG_RUNTIME_DIR": "", "RECD_SOCKET": "", "NO_COLOR": "1"]
        let daemon = try Daemon(device: "null", environment: environment,
                                launcher: ["/usr/bin/setpriv"] + asUser(uid),
                                arguments: ["--user", "--config", config, "--device", "null"],
                                recordings: home + "/.local/share/recd/recordings", waitForSocket: false)
        let socket = runtime + "/recd/recd.sock"
        try #require(waitUntil(timeout: 60) { (try? RecdConnection(path: socket)) != nil || !daemon.process.isRunning },
                     "recd listens at \(socket): \(daemon.log)")

        let status = try run("/usr/bin/setpriv", asUser(uid) + [Binaries.recctl, "status"], environment: environment)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("idle"), "\(status.stdout)")
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("doc/examples/recd.sh").path
        let shell = try run("/usr/bin/setpriv", asUser(uid) + ["/bin/sh", script, "status"], environment: environment)
        #expect(shell.status == 0, "\(shell.stderr)")
        #expect(shell.stdout == "idle\n", "\(shell.stderr)")
        #expect(daemon.terminate() == 0)
    }

    // MARK: Configuration

    @Test(arguments: [
        ("[server]\ncontrol_users = [\"root\", \"nosuchuser\"]\n", "recd.toml:2: server.control_users: no user named 'nosuchuser'"),
        ("[server]\n\ncontrol_groups = [\"nosuchgroup\"]\n", "recd.toml:3: server.control_groups: no group named 'nosuchgroup'"),
        ("[server]\nsocket_group = \"nosuchgroup\"\n", "recd.toml:2: server.socket_group: no group named 'nosuchgroup'"),
    ])
    func checkConfigRefusesUnknownUsersAndGroupsAtTheirLine(text: String, message: String) throws {
        let path = inputs.file("recd.toml")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let result = try run(Binaries.recd, ["--check-config", "--config", path])
        #expect(result.status == 78)
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }

    @Test func aReloadWithAnUnknownUserKeepsTheCurrentConfiguration() throws {
        let daemon = try Daemon(device: "null", config: "[server]\ncontrol_users = [\"root\"]\n")
        try "[server]\ncontrol_users = [\"nosuchuser\"]\n".write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        #expect(waitUntil { daemon.log.contains("configuration not reloaded") }, "\(daemon.log)")
        #expect(daemon.log.contains("recd.toml:2: server.control_users: no user named 'nosuchuser'"), "\(daemon.log)")
        #expect(daemon.process.isRunning)
        #expect(try recctl(daemon, "status").status == 0)
    }

    // MARK: Directories and sockets recd cannot write

    @Test func anUnwritableRecordingsDirectoryIsAPermissionProblemNotADirectoryInUse() throws {
        // Root's directory, mode 0755; recd runs as nobody.
        let recordings = inputs.file("rootonly")
        try FileManager.default.createDirectory(atPath: recordings, withIntermediateDirectories: true)
        chmod(inputs.path, 0o755)
        let result = try run("/usr/bin/setpriv", asUser(65534) + [Binaries.recd, "--user", "--config", try emptyConfig(),
                                                                  "--socket", inputs.file("recd.sock"),
                                                                  "--recordings-dir", recordings, "--device", "null"],
                             environment: ["HOME": inputs.path])
        #expect(result.status == 77, "EX_NOPERM, not 75 (another recd): \(result.stderr)")
        #expect(result.stderr.contains("recd: the recordings directory \(recordings) is not writable by user "), "\(result.stderr)")
        #expect(result.stderr.contains("Permission denied"))
        #expect(!result.stderr.contains("in use"), "\(result.stderr)")
    }

    @Test func aSocketPathRecdCannotCreateIsNamedWithItsCause() throws {
        // recd (as nobody) may write its recordings directory, but not the socket's.
        let recordings = inputs.file("recordings")
        try FileManager.default.createDirectory(atPath: recordings, withIntermediateDirectories: true)
        chmod(recordings, 0o777)
        chmod(inputs.path, 0o755)
        let socket = inputs.file("private/recd.sock")
        let result = try run("/usr/bin/setpriv", asUser(65534) + [Binaries.recd, "--user", "--config", try emptyConfig(),
                                                                  "--socket", socket, "--recordings-dir", recordings,
                                                                  "--device", "null"],
                             environment: ["HOME": inputs.path])
        #expect(result.status == 73, "EX_CANTCREAT: \(result.stderr)")
        #expect(result.stderr.contains("cannot listen at \(socket): cannot create the directory \(inputs.file("private")): Permission denied"),
                "\(result.stderr)")
        #expect(!result.stderr.contains("stat(pathname"), "\(result.stderr)")

        // The directory exists but is not recd's to write in.
        try FileManager.default.createDirectory(atPath: inputs.file("private"), withIntermediateDirectories: true)
        let again = try run("/usr/bin/setpriv", asUser(65534) + [Binaries.recd, "--user", "--config", try emptyConfig(),
                                                                 "--socket", socket, "--recordings-dir", recordings,
                                                                 "--device", "null"],
                            environment: ["HOME": inputs.path])
        #expect(again.status == 73)
        #expect(again.stderr.contains("cannot listen at \(socket): user nobody cannot create a socket in \(inputs.file("private")): Permission denied"),
                "\(again.stderr)")
    }

    // MARK: A misspelt device

    @Test func aDeviceALSACannotFindIsRefusedAtOnceWithTheHintThoughRecdWaitsForDevices() throws {
        let daemon = try Daemon(device: "hw:9,9")  // wait_for_device is on by default
        let start = try recctl(daemon, "start", "typo")
        #expect(start.status == 1, "\(start.stdout)")
        #expect(start.stderr.contains("recctl: capture device 'hw:9,9' does not exist"), "\(start.stderr)")
        #expect(start.stderr.contains("Cannot get card index for 9"), "libasound's own reason, in the error: \(start.stderr)")
        #expect(start.stderr.contains("hint: `recctl devices` lists the capture devices ALSA knows"), "\(start.stderr)")
        let status = try #require(daemon.waitForStatus { !$0.state.isActive })
        #expect(status.error?.code == .deviceNotFound)
        #expect(!daemon.log.contains("ALSA lib"), "libasound does not write to recd's log: \(daemon.log)")
    }

    @Test func anUnattendedStartWaitsForTheDeviceWithoutLibasoundInTheLogAndStopNamesTheRecording() throws {
        // hw:9 is on a card: the wait follows the sound cards (a machine of the test's own),
        // and every change of them is an attempt.
        let fixture = SoundCardFixture()
        let daemon = try Daemon(device: "hw:9,9", config: "[autostart]\nenabled = true\nname = \"station\"\n",
                                environment: fixture.environment)
        var attempts = try #require(daemon.waitForStatus { $0.state.deviceWait?.watchingDevices == true }?.state.deviceWait?.attempts)
        for card in 0..<4 {
            fixture.createNodes(card: card)
            attempts = try #require(daemon.waitForStatus { ($0.state.deviceWait?.attempts ?? 0) > attempts }?.state.deviceWait?.attempts,
                                    "\(daemon.log)")
        }
        #expect(!daemon.log.contains("ALSA lib"), "no libasound line per retry: \(daemon.log)")
        let stop = try recctl(daemon, "stop")
        #expect(stop.status == 0, "\(stop.stderr)")
        #expect(stop.stdout == "stopped station: nothing was recorded (the device never appeared)\n", "\(stop.stdout)")
    }

    @Test func stopPrintsTheRecordingsNameAndPath() throws {
        // A paced device: the unpaced file device records a minute in a fraction of a second, and
        // a release build finished the recording before `stop` could ask.
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        try #require(try recctl(daemon, "start", "memo", "--format", "wav").status == 0)
        #expect(daemon.waitForStatus { $0.currentTime > 0 } != nil)
        let stop = try recctl(daemon, "stop")
        #expect(stop.status == 0, "\(stop.stderr)")
        #expect(stop.stdout.hasPrefix("stopped memo -> \(daemon.recordings)/memo.wav ("), "\(stop.stdout)")
    }

    // MARK: Nothing recording

    @Test func commandsOnARecordingWithNothingRecordingSaySoAndExitThree() throws {
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 2).path))
        for command in ["stop", "pause", "resume", "cancel", "split"] {
            let result = try recctl(daemon, command)
            #expect(result.status == 3, "\(command): \(result.stderr)")
            #expect(result.stderr.hasPrefix("recctl: nothing is recording\n"), "\(command): \(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
        // After a recording: the message names it.
        try #require(try recctl(daemon, "start", "done", "--format", "wav", "--duration", "0.2", "--wait").status == 0)
        let after = try recctl(daemon, "stop")
        #expect(after.status == 3)
        #expect(after.stderr.hasPrefix("recctl: nothing is recording (the last recording, done, has ended)"), "\(after.stderr)")
        // The daemon's error code is still invalidState (doc/protocol.md), its message plain.
        let json = try recctl(daemon, "pause", "--json")
        #expect(json.status == 3)
        #expect(json.stdout.contains(#""code":"invalidState""#), "\(json.stdout)")
        #expect(json.stdout.contains(#""message":"nothing is recording""#), "\(json.stdout)")
    }

    // MARK: Retention switched on over old recordings

    @Test func retentionTurnedOnAnnouncesWhatIsDueAndDeletesNothingBeforeItsGrace() throws {
        // Three recordings of 96 KB; then recd starts with a limit of 150 KB: a and b are due.
        let recordings = inputs.file("recordings")
        let maker = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 2).path), recordings: recordings)
        for name in ["a", "b", "c"] {
            let made = try recctl(maker, "start", name, "--format", "wav", "--rate", "48000", "--channels", "2",
                                  "--duration", "0.5", "--wait")
            try #require(made.status == 0, "\(made.stderr)")
        }
        #expect(maker.terminate() == 0)
        let limit = "[storage]\ncheck_interval = 0.1\n[retention]\nmax_total_size = \"150 kB\"\n"
        let daemon = try Daemon(device: "null", config: limit, recordings: recordings)
        // Announced first, each file at warning level ...
        #expect(waitUntil { daemon.log.contains("recording.file=b.wav") }, "\(daemon.log)")
        let announced = daemon.log.split(separator: "\n").filter { $0.contains("retention will delete recording ") }
        #expect(announced.count == 2, "\(announced)")
        #expect(announced.allSatisfy { $0.contains(" warning ") }, "\(announced)")
        // ... shown as due at the grace's end (10 minutes by default) ...
        let status = try #require(daemon.waitForStatus { $0.storage?.retentionNext.count == 2 })
        let due = try #require(status.storage?.retentionNext.first?.dueAt)
        #expect(due.timeIntervalSinceNow > 500, "\(due)")
        // ... and nothing deleted meanwhile: the monitor has made several passes by now.
        #expect(waitUntil(timeout: 2) { daemon.log.contains("retention deleted recording") } == false)
        #expect(try daemon.recordingFiles() == ["a.wav", "b.wav", "c.wav"])

        // Accepting it (grace = 0, reload) deletes them now, oldest first.
        try (limit + "grace = 0\n").write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        #expect(waitUntil { (try? daemon.recordingFiles()) == ["c.wav"] }, "\(daemon.log)")
        // Each deletion is logged once its file is gone.
        var deleted: [Substring] = []
        #expect(waitUntil {
            deleted = completeLines(daemon.log).filter { $0.contains("retention deleted recording") }
            return deleted.count == 2
        }, "\(deleted)")
        #expect(deleted.first?.contains("recording.file=a.wav") == true, "oldest first: \(deleted)")
    }

    @Test func theRetentionGraceIsADuration() throws {
        for (value, valid) in [("0", true), ("\"10m\"", true), ("90", true), ("-1", false), ("\"soon\"", false)] {
            let path = inputs.file("grace.toml")
            try "[retention]\nmax_age = \"30d\"\ngrace = \(value)\n".write(toFile: path, atomically: true, encoding: .utf8)
            let result = try run(Binaries.recd, ["--check-config", "--config", path])
            #expect((result.status == 0) == valid, "grace = \(value): \(result.stderr)")
            if !valid { #expect(result.stderr.contains("grace.toml:3: retention.grace:"), "\(result.stderr)") }
        }
    }

    // MARK: Documentation

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    @Test func recdHelpExplainsItselfInWholeParagraphsWithoutARepositoryPath() throws {
        // Wide enough for any paragraph: a line break inside one is in the source, not a wrap.
        let help = try run(Binaries.recd, ["--help"], environment: ["COLUMNS": "400"])
        #expect(help.status == 0)
        #expect(!help.stdout.contains("etc/recd.toml"), "a path in the repository means nothing once installed: \(help.stdout)")
        #expect(help.stdout.contains("recd.toml(5)"))
        let overview = help.stdout.split(separator: "\n").first { $0.contains("Settings come from") } ?? ""
        #expect(overview.hasSuffix("Control recd with recctl(1)."), "one paragraph, one line: \(help.stdout)")
        #expect(help.stdout.contains("77 the recordings directory is not writable by recd's user"), "\(help.stdout)")
    }

    @Test func theConfigurationManPageIsMadeFromTheShippedFileAndNamesEveryKey() throws {
        let page = inputs.file("recd.toml.5")
        let made = try run("/bin/sh", ["-c", "awk -v date=2026-01-01 -v version=test -f \"$0\" \"$1\" >\"$2\"",
                                       Self.repository + "/doc/recd.toml.5.awk", Self.repository + "/etc/recd.toml", page])
        try #require(made.status == 0, "\(made.stderr)")
        let rendered = try run("/usr/bin/man", ["-l", page], environment: ["MANWIDTH": "200"])
        #expect(rendered.status == 0, "\(rendered.stderr)")
        #expect(rendered.stderr.isEmpty, "groff/man warnings: \(rendered.stderr)")
        let text = rendered.stdout
        #expect(text.contains("recd.toml - configuration file of recd"), "\(text.prefix(400))")
        // Every key etc/recd.toml shows, by the dotted name recd's errors use.
        var section = ""
        var keys: [String] = []
        for line in try String(contentsOfFile: Self.repository + "/etc/recd.toml", encoding: .utf8).split(separator: "\n") {
            if line.hasPrefix("["), line.hasSuffix("]") { section = String(line.dropFirst().dropLast()) }
            if let match = line.firstMatch(of: #/^#([a-z_]+) = /#) {
                keys.append(section.isEmpty ? String(match.1) : section + "." + match.1)
            }
        }
        #expect(keys.count > 50, "\(keys)")
        for key in keys { #expect(text.contains("\n       \(key) = "), "\(key) missing from recd.toml(5)") }
        #expect(text.contains("retention.grace = \"10m\""))
    }

    @Test func theMQTTDocumentShowsTheProblemPayloadAsPublished() throws {
        let broker = try MosquittoBroker()
        let daemon = try Daemon(device: "null", config: """
            [mqtt]
            enabled = true
            host = "127.0.0.1"
            port = \(broker.port)
            topic_prefix = "recd/first-hour"
            """)
        let watcher = try MQTTWatcher(port: broker.port, topics: ["recd/first-hour/#"])
        let published = try #require(watcher.first("recd/first-hour/problem", timeout: 30)?.payload, "\(daemon.log)")
        let document = try String(contentsOfFile: Self.repository + "/doc/mqtt.md", encoding: .utf8)
        let row = try #require(document.split(separator: "\n").first { $0.hasPrefix("| `<prefix>/problem` |") })
        let example = try #require(row.firstMatch(of: /`(\{[^`]*\})`/)?.1, "\(row)")
        let documented = try JSONSerialization.jsonObject(with: Data(example.utf8)) as? NSDictionary
        let actual = try JSONSerialization.jsonObject(with: Data(published.utf8)) as? NSDictionary
        #expect(documented == actual, "mqtt.md shows \(example), recd publishes \(published)")
    }

    @Test func theDemoLeavesAShellPointedAtItsRecdAndPrintsTheFileOnce() throws {
        let commands = inputs.file("commands")
        // The shell's own suggestions work as printed: the recording it suggests, and a sound
        // played into the demo's sink (PULSE_SERVER is set).
        try """
            recctl status
            recctl start mine --format flac --duration 0.5 --wait && echo "suggested start: ok"
            paplay --device=demosink /usr/share/sounds/alsa/Front_Center.wav && echo "played into the sink: ok"
            exit

            """.write(toFile: commands, atomically: true, encoding: .utf8)
        let result = try run("/bin/bash", [Self.repository + "/doc/demo.sh", Binaries.directory, "--shell"],
                             environment: ["DEMO_SECONDS": "1", "SHELL": "/bin/bash", "HOME": inputs.path],
                             input: commands, timeout: 120)
        #expect(result.status == 0, "\(result.stderr)")
        let out = result.stdout
        #expect(out.components(separatedBy: "Channels").count == 2, "libsndfile's Channels once: \(out)")
        #expect(out.components(separatedBy: "Frames").count == 2, "and Frames once: \(out)")
        let socket = try #require(out.firstMatch(of: /export RECD_SOCKET=(\S+)/)?.1, "\(out)")
        #expect(out.contains("export ALSA_CONFIG_PATH="))
        // The shell's recctl reached the demo's recd and device.
        #expect(out.contains("device   demo"), "\(out)")
        #expect(out.contains("suggested start: ok"), "\(out)\n\(result.stderr)")
        #expect(out.contains("played into the sink: ok"), "\(out)\n\(result.stderr)")
        // The heading says 5 s of pre-roll; the recording has them.
        #expect(out.contains("(from 5.0 s before)"), "\(out)")
        #expect(out.contains("recd exited with status 0"), "leaving the shell stops recd")
        #expect(!FileManager.default.fileExists(atPath: String(socket)), "its socket is gone")
        // The demo keeps its folder (the recording is the point); the test's goes.
        let work = URL(fileURLWithPath: String(socket)).deletingLastPathComponent().path
        if work.hasPrefix("/tmp/recd-demo.") { try? FileManager.default.removeItem(atPath: work) }
    }
}
