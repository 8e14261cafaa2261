import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Synchronization
import Testing

/// Changes a follower task has received.
final class Collected: @unchecked Sendable {
    // @unchecked: `changes` is touched only under `lock` (NSLock, a pthread mutex that
    // ThreadSanitizer sees, unlike Synchronization.Mutex).
    private let lock = NSLock()
    private var changes: [RecorderChange] = []
    func withLock<T>(_ body: (inout [RecorderChange]) -> T) -> T { lock.withLock { body(&changes) } }
}

/// Runs a task's jobs on a serial Dispatch queue instead of the cooperative pool. Swift Testing
/// runs the synchronous tests on that pool too, and they block its threads (one per core: two
/// here) while they wait for daemons; an async task then waited minutes to run (a full
/// ThreadSanitizer run: the follower had received nothing after 120 s).
final class DispatchTaskExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: the queue is the only state, and it is itself thread-safe.
    private let queue: DispatchQueue
    init(label: String) { queue = DispatchQueue(label: label) }
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// What other programs use: the async RecorderClient, the Python and shell examples in
/// doc/examples, and RecorderCore in-process (Examples/simple-recorder).
@Suite("client libraries and examples")
struct ClientLibraryTests {
    let inputs = TemporaryDirectory()
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("doc/examples").path

    /// recd on a socket path chosen by the test, so that a second recd can take it over.
    func daemon(socket: String, recordings: String, device: String) throws -> Daemon {
        let config = inputs.file("empty.toml")
        #expect(FileManager.default.createFile(atPath: config, contents: Data()))
        let daemon = try Daemon(device: device, arguments: ["--user", "--config", config, "--socket", socket,
                                                            "--recordings-dir", recordings, "--device", device],
                                recordings: recordings, waitForSocket: false)
        guard waitUntil(timeout: 60, { (try? RecdConnection(path: socket)) != nil || !daemon.process.isRunning }),
              daemon.process.isRunning else {
            throw TestFailure("recd did not start: \(daemon.log)")
        }
        return daemon
    }

    static let bound = 120.0

    @Test func asyncChangesFollowARecordingAndSurviveARestartOfRecd() async throws {
        // The test and its follower on executors of their own (see DispatchTaskExecutor).
        try await withTaskExecutorPreference(DispatchTaskExecutor(label: "recd.test.async-changes")) {
            try await asyncChangesFollowARecordingAndSurviveARestartOfRecd(follower: DispatchTaskExecutor(label: "recd.test.follower"))
        }
    }

    func asyncChangesFollowARecordingAndSurviveARestartOfRecd(follower executor: DispatchTaskExecutor) async throws {
        let input = writeCounterInput(inputs, seconds: 4)
        let socket = inputs.file("recd.sock")
        let recordings = inputs.file("recordings")
        var first: Daemon? = try daemon(socket: socket, recordings: recordings, device: TestDevices.file(input.path))

        let client = RecorderClient(socketPath: socket)
        let received = Collected()
        let stream = client.changes(topics: [.state], retryDelay: 0.1)
        let follower = Task(executorPreference: executor) {
            for await change in stream { received.withLock { $0.append(change) } }
        }
        defer { follower.cancel() }
        func states() -> [RecorderState.Name] {
            received.withLock { changes in
                changes.compactMap { change -> RecorderState.Name? in
                    if case .changed(let update) = change, case .state(let state) = update.value { return state.name }
                    return nil
                }
            }
        }
        func connections() -> Int {
            received.withLock { $0.filter { if case .connected = $0 { true } else { false } }.count }
        }
        // Bounds, not windows: the follower is a task of the same pool as every other test, and
        // under ThreadSanitizer with all suites at once it once waited more than 20 s to run.
        // Every check says what the follower had and what recd logged: a failure here once
        // came only from a full ThreadSanitizer run, and its output named no line.
        func context(_ daemon: Daemon?) -> String {
            "received: \(received.withLock { $0 })\nrecd log:\n\(daemon?.log ?? "")"
        }
        #expect(await eventually(timeout: Self.bound) { connections() == 1 }, "\(context(first))")
        let snapshot = received.withLock { $0.first }
        if case .connected(let updates) = snapshot {
            #expect(updates.map(\.value) == [.state(.idle)], "\(context(first))")
        } else {
            Issue.record("first change: \(String(describing: snapshot))")
        }

        let started: Recording
        do { started = try await client.start(StartParams(name: "async", duration: 0.5)) } catch {
            Issue.record("start: \(error)\n\(context(first))"); return
        }
        #expect(started.name == "async")
        #expect(await eventually(timeout: Self.bound) { states().contains(.finished) }, "\(context(first))")
        #expect(states().starts(with: [.preparing, .recording]), "\(context(first))")
        let status = try await client.status()
        #expect(status.recording?.frames == 24000, "\(status)\n\(context(first))")

        // recd goes away and comes back on the same socket: the sequence says so and goes on.
        let exit = first?.terminate()
        #expect(exit == 0, "exit \(exit.map(String.init) ?? "none in 30 s")\n\(context(first))")
        first = nil
        #expect(await eventually(timeout: Self.bound) {
            received.withLock { $0.contains { if case .disconnected = $0 { true } else { false } } }
        }, "\(context(nil))")
        let second = try daemon(socket: socket, recordings: recordings, device: TestDevices.file(input.path))
        #expect(await eventually(timeout: Self.bound) { connections() == 2 }, "\(context(second))")
        let again: Recording
        do { again = try await client.start(StartParams(name: "async-2", duration: 0.5)) } catch {
            Issue.record("second start: \(error)\n\(context(second))"); return
        }
        #expect(again.name == "async-2")
        #expect(await eventually(timeout: Self.bound) { states().filter { $0 == .finished }.count == 2 }, "\(context(second))")

        // A refused call throws the daemon's error.
        await #expect(throws: ClientError.self, "\(context(second))") { try await client.stop() }
        let secondExit = second.terminate()
        #expect(secondExit == 0, "exit \(secondExit.map(String.init) ?? "none in 30 s")\n\(context(second))")
    }

    @Test func pythonExampleStartsWatchesAndStops() throws {
        let input = writeCounterInput(inputs, seconds: 4)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        let script = Self.examples + "/recd_client.py"
        let environment = ["RECD_SOCKET": daemon.socket]
        let status = try run("/usr/bin/python3", [script, "status"], environment: environment)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout == "{\"name\": \"idle\"}\n")

        let watch = try BackgroundCommand("/usr/bin/python3", [script, "watch", "--until", "finished"], environment: environment)
        #expect(waitUntil { watch.stdout.contains("state idle") })
        let start = try run("/usr/bin/python3", [script, "start", "py-take", "1"], environment: environment)
        #expect(start.stdout == "recording \(daemon.recordings)/py-take.wav\n", "\(start.stderr)")
        #expect(watch.wait(timeout: 30) == 0, "\(watch.stderr)")
        let lines = watch.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "state idle")
        #expect(lines.contains("state recording"))
        #expect(lines.last == "state finished")
        #expect(lines.contains { $0.hasPrefix("time ") })

        let refused = try run("/usr/bin/python3", [script, "stop"], environment: environment)
        #expect(refused.status == 1)
        #expect(refused.stderr.hasPrefix("recd: invalidState:"), "\(refused.stderr)")
        #expect(try SoundFileReader(path: daemon.recordings + "/py-take.wav").info.frames == 48000)
        #expect(daemon.terminate() == 0)
    }

    @Test func shellExampleWithSocatAndJq() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let script = Self.examples + "/recd.sh"
        let environment = ["RECD_SOCKET": daemon.socket]
        #expect(try run("/bin/sh", [script, "status"], environment: environment).stdout == "idle\n")

        let watch = try BackgroundCommand("/bin/sh", [script, "watch"], environment: environment)
        #expect(waitUntil { watch.stdout.contains("idle") }, "\(watch.stderr)")
        let start = try run("/bin/sh", [script, "start", "sh-take"], environment: environment)
        #expect(start.status == 0, "\(start.stderr)")
        #expect(start.stdout == "\(daemon.recordings)/sh-take.wav\n", "\(start.stderr)")
        #expect(waitUntil(timeout: 20) { watch.stdout.contains("recording sh-take\n") }, "\(watch.stdout)")
        let stop = try run("/bin/sh", [script, "stop"], environment: environment)
        #expect(stop.status == 0, "\(stop.stderr)")
        let parts = stop.stdout.split(separator: " ")
        #expect(parts.first.map(String.init) == "\(daemon.recordings)/sh-take.wav", "\(stop.stderr)")
        let frames = try #require(parts.last.flatMap { Int64($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        #expect(try SoundFileReader(path: daemon.recordings + "/sh-take.wav").info.frames == frames)
        #expect(waitUntil(timeout: 20) { watch.stdout.contains("finished sh-take\n") }, "\(watch.stdout)")

        let refused = try run("/bin/sh", [script, "stop"], environment: environment)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("nothing is recording"), "\(refused.stderr)")
        // watch ends when recd does.
        #expect(daemon.terminate() == 0)
        #expect(watch.wait(timeout: 20) != nil)
    }

    @Test func recorderCoreRecordsInProcessInTheExample() throws {
        let input = writeCounterInput(inputs, seconds: 4)
        let directory = TemporaryDirectory()
        let result = try run(Binaries.directory + "/simple-recorder", [TestDevices.file(input.path), directory.path, "1.5", "memo"],
                             environment: ["ALSA_CONFIG_PATH": "/usr/share/alsa/alsa.conf:" + TestDevices.configuration])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.filter { $0.hasPrefix("state: ") } == ["state: idle", "state: preparing", "state: recording", "state: finished"])
        #expect(lines.last == "finished: \(directory.path)/memo.flac (72000 frames, 1.5 s)")
        let reader = try SoundFileReader(path: directory.file("memo.flac"))
        #expect(reader.info.frames == 72000)
        #expect(reader.info.channels == 2)

        let missing = try run(Binaries.directory + "/simple-recorder", ["nosuchdevice", directory.path, "1"])
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("deviceNotFound"), "\(missing.stderr)")
    }
}
