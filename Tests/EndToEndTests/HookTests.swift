import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// `[hooks] on_file_closed`: real commands (rclone, sh) run by recd for every finalized file.
@Suite("file hooks")
struct HookTests {
    let inputs = TemporaryDirectory()

    /// Records `name` for exactly `seconds` and waits until it is finished.
    func record(_ daemon: Daemon, _ name: String, seconds: Double = 1) throws -> Recording {
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: name, sampleRate: 48000, channels: 2, duration: seconds))
        var status: StatusResult = try client.call(.status)
        _ = waitUntil(timeout: 20) {
            status = (try? client.call(.status, as: StatusResult.self)) ?? status
            return status.state.name == .finished && status.recording?.name == name
        }
        guard status.state.name == .finished, let recording = status.recording else {
            throw TestFailure("\(name) did not finish: \(status.state)")
        }
        return recording
    }

    static func toml(_ argv: [String], extra: String = "") -> String {
        let quoted = argv.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
        return "[hooks]\non_file_closed = [\(quoted.joined(separator: ", "))]\n\(extra)\n"
    }

    @Test func rcloneCopiesEachFinalizedFileToItsRelativePath() throws {
        let input = writeCounterInput(inputs, seconds: 4)
        let remote = TemporaryDirectory()
        // rclone's local backend: a plain path as the destination needs no configuration.
        let daemon = try Daemon(device: TestDevices.file(input.path),
                                config: Self.toml(["rclone", "copyto", "{path}", remote.path + "/recordings/{relpath}"]))
        let recording = try record(daemon, "upload-me")
        let copy = remote.file("recordings/upload-me.wav")
        #expect(waitUntil(timeout: 30) { daemon.log.contains("hook succeeded") }, "\(daemon.log)")
        let original = try #require(FileManager.default.contents(atPath: recording.path))
        #expect(FileManager.default.contents(atPath: copy) == original)
        let reader = try SoundFileReader(path: copy)
        #expect(reader.info.frames == 48000)
        #expect(daemon.terminate() == 0)
    }

    @Test func hookGetsTheFileInItsArgumentsAndEnvironmentWithoutAShell() throws {
        let input = writeCounterInput(inputs, seconds: 4)
        let out = TemporaryDirectory()
        // sh is the program here only to write the environment down; the template itself is
        // not run through a shell: "{name}" with a space and a quote arrives as one argument.
        let script = "env | grep '^RECD_' | sort > \"$1\"; printf '%s\\n' \"$2\" > \"$1.args\""
        let daemon = try Daemon(device: TestDevices.file(input.path),
                                config: Self.toml(["/bin/sh", "-c", script, "sh", out.path + "/{id}.env", "{name} | {format} | {frames}"]))
        let recording = try record(daemon, "it's a take", seconds: 0.5)
        let envPath = out.file("\(recording.id).env")
        // The hook has ended (its files exist from the shell's `>` on, still empty until written).
        #expect(waitUntil(timeout: 20) { daemon.log.contains("hook succeeded") }, "\(daemon.log)")
        let arguments = try String(contentsOfFile: envPath + ".args", encoding: .utf8)
        #expect(arguments == "it's a take | wav | 24000\n")
        let lines = try String(contentsOfFile: envPath, encoding: .utf8).split(separator: "\n")
        var environment: [String: String] = [:]
        for line in lines {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            environment[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        #expect(environment["RECD_PATH"] == recording.path)
        #expect(environment["RECD_RELPATH"] == "it's a take.wav")
        #expect(environment["RECD_NAME"] == "it's a take")
        #expect(environment["RECD_FORMAT"] == "wav")
        #expect(environment["RECD_FRAMES"] == "24000")
        #expect(environment["RECD_DURATION"] == "0.500")
        #expect(environment["RECD_SAMPLE_RATE"] == "48000")
        #expect(environment["RECD_CHANNELS"] == "2")
        #expect(environment["RECD_ID"] == recording.id)
        #expect(environment["RECD_HOOK"] == "on_file_closed")
        #expect(environment["RECD_SOURCE"] == "default", "the station's implicit source")
        let startedAt = try #require(environment["RECD_STARTED_AT"].flatMap(WireCoding.parseDate))
        // The file's first frame, as the recorder estimates it from the device (the unpaced
        // test device reads ahead of the clock): close to when capture began.
        let captureBegan = try #require(recording.startedAt)
        #expect(abs(startedAt.timeIntervalSince(captureBegan)) < 1, "\(startedAt) vs \(captureBegan)")
        #expect(environment["RECD_ENDED_AT"].flatMap(WireCoding.parseDate) != nil)
        #expect(daemon.terminate() == 0)
    }

    @Test func failingAndHangingHooksLeaveRecordingsUntouched() throws {
        let input = writeCounterInput(inputs, seconds: 8)
        let out = TemporaryDirectory()
        let broker = try MosquittoBroker()
        // "hang…" hangs (past the 5 s timeout: room for a slow start of the others under load),
        // "fail…" exits 3; both note their pid first.
        let script = "echo $$ > \"$1/$RECD_NAME.pid\"; case \"$RECD_NAME\" in hang*) exec sleep 1000;; fail*) exit 3;; esac"
        let config = Self.toml(["/bin/sh", "-c", script, "sh", out.path], extra: "timeout = 5\nmax_concurrent = 1\n")
            + MQTTTests.config(port: broker.port)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: config)
        // Subscribed before any hook runs: the hook topic is retained, but only its last value.
        let watcher = try MQTTTests().watch(broker)

        let hanging = try record(daemon, "hang-1")
        #expect(waitUntil(timeout: 20) { FileManager.default.fileExists(atPath: out.file("hang-1.pid")) })
        // While that hook hangs, the next recording starts, runs and finishes normally.
        let failing = try record(daemon, "fail-1")
        let second = try record(daemon, "ok-1")

        let timedOut = try #require(watcher.first("\(MQTTTests.prefix)/hook", where: { $0.json?["outcome"] as? String == "timedOut" }))
        #expect(timedOut.json?["path"] as? String == hanging.path)
        let failed = try #require(watcher.first("\(MQTTTests.prefix)/hook", where: { $0.json?["outcome"] as? String == "failed" }))
        #expect(failed.json?["path"] as? String == failing.path)
        #expect(failed.json?["exitStatus"] as? Int == 3)
        #expect(watcher.first("\(MQTTTests.prefix)/problem", where: { ($0.json?["warnings"] as? [String])?.isEmpty == false }) != nil)
        #expect(watcher.first("\(MQTTTests.prefix)/hook", where: {
            $0.json?["outcome"] as? String == "succeeded" && $0.json?["path"] as? String == second.path
        }) != nil)
        #expect(daemon.log.contains("hook.outcome=timedOut"))
        #expect(daemon.log.contains("exited with status 3"))

        // The hung hook was killed, not left behind.
        let pid = try #require(Int32(try String(contentsOfFile: out.file("hang-1.pid"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(waitUntil(timeout: 10) { kill(pid, 0) != 0 && errno == ESRCH })

        // Every file is complete, with the frames asked for.
        for recording in [hanging, failing, second] {
            let reader = try SoundFileReader(path: recording.path)
            #expect(reader.info.frames == 48000)
            #expect(recording.frames == 48000)
        }
        let status: StatusResult = try daemon.connect().call(.status)
        #expect(status.error == nil)
        #expect(daemon.terminate() == 0)
    }

    @Test func aHookTemplateWithAnUnknownFieldIsAConfigurationError() throws {
        let input = writeCounterInput(inputs, seconds: 1)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: Self.toml(["/bin/true", "{colour}"]),
                                waitForSocket: false)
        #expect(daemon.process.wait(timeout: 20) == 78)
        #expect(daemon.log.contains("hooks.on_file_closed: unknown field {colour}"), "\(daemon.log)")
    }
}
