import Foundation
import Glibc
// Not there when the release build (static runtime) compiles this module along with the rest.
#if canImport(Testing)
import Testing
#endif

/// Capture devices for tests, all through the real libasound (see ../shared/TESTING.md):
///
/// - `testfile:FILE=…` — ALSA's `file` plugin over `null`: reads a raw file we generate, as fast
///   as we ask (bit-exact, unpaced).
/// - `pacedfile:FILE=…,SERVER=…` — the same file plugin over a PulseAudio null-sink monitor:
///   bit-exact data from our file, paced by a real clock.
/// - `paced:SERVER=…` — the PulseAudio null-sink monitor itself.
///
/// One ALSA configuration defines them with arguments, so parallel tests share it safely.
public enum TestDevices {
    public static let configuration: String = {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("recd-tests-\(getpid())").path
        try! FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/alsa-test.conf"
        let text = """
        pcm.testfile {
            @args [ FILE ]
            @args.FILE { type string }
            type file
            slave.pcm "null"
            file "/dev/null"
            infile $FILE
            format "raw"
        }
        pcm.pacedfile {
            @args [ FILE SERVER ]
            @args.FILE { type string }
            @args.SERVER { type string }
            type file
            slave.pcm { type pulse server $SERVER device "testsink.monitor" }
            file "/dev/null"
            infile $FILE
            format "raw"
        }
        pcm.hardpaced_raw {
            type jack
            capture_ports { 0 "system:capture_1" 1 "system:capture_2" }
        }
        pcm.hardpaced {
            type plug
            slave.pcm "hardpaced_raw"
        }
        pcm.hardpacedclock_raw {
            type jack
            capture_ports { 0 "frameclock:hi" 1 "frameclock:lo" }
        }
        pcm.hardpacedclock {
            type plug
            slave.pcm "hardpacedclock_raw"
        }
        # SoundCardFixture's cards: plughw:N is the PulseAudio server linked as
        # $RECD_TEST_CARDS/cardN (no machine here has a sound card to be overridden).
        pcm.!plughw {
            @args [ CARD DEV SUBDEV ]
            @args.CARD { type string }
            @args.DEV { type integer default 0 }
            @args.SUBDEV { type integer default -1 }
            type pulse
            device "testsink.monitor"
            server { @func concat strings [ "unix:" { @func getenv vars [ RECD_TEST_CARDS ] default "/nonexistent" } "/card" $CARD "/native" ] }
        }
        pcm.paced {
            @args [ SERVER ]
            @args.SERVER { type string }
            type pulse
            server $SERVER
            device "testsink.monitor"
        }

        """
        try! text.write(toFile: path, atomically: true, encoding: .utf8)
        // The system file must come first; set before any ALSA call in this process.
        setenv("ALSA_CONFIG_PATH", "/usr/share/alsa/alsa.conf:" + path, 1)
        return path
    }()

    public static func file(_ path: String) -> String {
        _ = configuration
        return "testfile:FILE=\(path)"
    }

    public static func pacedFile(_ path: String, server: PulseServer) -> String {
        _ = configuration
        return "pacedfile:FILE=\(path),SERVER=\(server.address)"
    }

    public static func paced(_ server: PulseServer) -> String {
        _ = configuration
        return "paced:SERVER=\(server.address)"
    }
}

/// A JACK server on the dummy backend (../shared/TESTING.md, 2b): a device paced like a sound
/// card that overruns like one. A reader late past its ring loses audio (EPIPE), where the
/// PulseAudio device buffers seconds on the server and never overruns. Its capture ports carry
/// silence. recd reads it as the ALSA device `hardpaced` with `environment` set.
public final class JackServer {
    public let name = "recd-test-\(getpid())-\(UUID().uuidString.prefix(6))"
    public let process: ChildProcess
    private let directory = TemporaryDirectory()

    public init() throws {
        _ = TestDevices.configuration
        var environment = ProcessInfo.processInfo.environment
        environment["JACK_NO_AUDIO_RESERVATION"] = "1"
        // -S: synchronous mode; without it port data slips by a period now and then under load.
        let arguments = ["-n", name, "--no-realtime", "-S", "-d", "dummy", "-r", "48000", "-p", "480", "-C", "2", "-P", "2"]
        let log = directory.file("jackd.log")
        let deadline = Date().addingTimeInterval(90)
        while true {
            if let started = try Self.start(arguments, environment: environment, log: log, name: name) {
                process = started
                return
            }
            // No room in libjack's registry (8 servers): wait for other tests' servers to end.
            guard Date() < deadline else {
                throw TestFailure("jackd did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
            }
            sleep(1)
        }
    }

    /// Starts jackd and waits until it answers; nil when libjack's registry had no room.
    ///
    /// libjack registers each server in /dev/shm/jack-shm-registry, which has room for 8, and
    /// a server killed without its cleanup (a test process killed) keeps its entry for good:
    /// entries are reused only by a server of the same name, and every test's is new. So
    /// whoever starts a server when no jackd runs at all removes the registry and what the
    /// dead servers left in /dev/shm; under a lock, so that no other test's server starts
    /// meanwhile.
    private static func start(_ arguments: [String], environment: [String: String], log: String,
                              name: String) throws -> ChildProcess? {
        let lock = open("/tmp/recd-test-jackd.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0o666)
        if lock >= 0 { flock(lock, LOCK_EX) }
        defer {
            if lock >= 0 {
                flock(lock, LOCK_UN)
                close(lock)
            }
        }
        if !jackdRunning() {
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/dev/shm")) ?? [] where entry.hasPrefix("jack") {
                try? FileManager.default.removeItem(atPath: "/dev/shm/" + entry)
            }
        }
        let process = try ChildProcess("/usr/bin/jackd", arguments, environment: environment, output: log)
        let deadline = Date().addingTimeInterval(15)
        while !answers(name) {
            guard process.isRunning else {
                let said = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                if said.contains("Too many servers") { return nil }
                throw TestFailure("jackd did not start: \(said)")
            }
            guard Date() < deadline else {
                throw TestFailure("jackd did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
            }
            usleep(50_000)
        }
        return process
    }

    /// Whether any jackd runs on the machine (/proc/*/comm).
    private static func jackdRunning() -> Bool {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).contains { entry in
            entry.first?.isNumber == true
                && (try? String(contentsOfFile: "/proc/\(entry)/comm", encoding: .utf8))?.hasPrefix("jackd") == true
        }
    }

    /// Starts a client that plays the server's frame clock (Tests/reference/jack_frameclock.c):
    /// the device `hardpacedclock` then delivers, in every frame, its own number (upper 16
    /// bits on channel 1, lower on channel 2), so that a recording says which frames it holds.
    public func startFrameClock() throws {
        let binary = try Self.frameClockBinary()
        let output = directory.file("frameclock.log")
        let clientEnvironment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        // libjack's clients share one metadata database (/dev/shm/jack_db-UID), which a JACK
        // server of another test removes when it exits: made again, and the client retried.
        for _ in 1...5 {
            Self.makeMetadataDirectory()
            let client = try ChildProcess(binary, ["frameclock"], environment: clientEnvironment, output: output)
            let deadline = Date().addingTimeInterval(15)
            while (try? String(contentsOfFile: output, encoding: .utf8))?.contains("ready") != true, client.isRunning, Date() < deadline {
                usleep(20_000)
            }
            if (try? String(contentsOfFile: output, encoding: .utf8))?.contains("ready") == true {
                frameClock = client
                return
            }
            client.signal(SIGKILL)
            _ = client.wait(timeout: 5)
        }
        throw TestFailure("jack_frameclock did not start: \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
    }

    /// The directory of libjack's metadata database, which every client opens.
    static func makeMetadataDirectory() {
        mkdir("/dev/shm/jack_db-\(getuid())", 0o700)
    }

    private var frameClock: ChildProcess?

    /// Compiled once per test process.
    private static func frameClockBinary() throws -> String {
        frameClockBuild.lock()
        defer { frameClockBuild.unlock() }
        if let frameClockBuilt { return frameClockBuilt }
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("reference/jack_frameclock.c").path
        let binary = frameClockDirectory.file("jack_frameclock")
        let log = frameClockDirectory.file("cc.log")
        let cc = try ChildProcess("/usr/bin/cc", ["-O2", "-Wall", "-o", binary, source, "-ljack"],
                                  environment: ProcessInfo.processInfo.environment, output: log)
        guard cc.wait(timeout: 60) == 0 else {
            throw TestFailure("cannot build jack_frameclock (libjack-jackd2-dev): \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
        frameClockBuilt = binary
        return binary
    }

    private static let frameClockBuild = NSLock()
    nonisolated(unsafe) private static var frameClockBuilt: String?
    nonisolated(unsafe) private static let frameClockDirectory = TemporaryDirectory()

    /// The frame numbers a recording of `hardpacedclock` holds (16-bit, two channels).
    public static func frameNumbers(_ samples: [Int16]) -> [UInt32] {
        stride(from: 0, to: samples.count - 1, by: 2).map { index in
            UInt32(UInt16(bitPattern: samples[index] &+ Int16.min)) << 16 | UInt32(UInt16(bitPattern: samples[index + 1] &+ Int16.min))
        }
    }

    /// What a client of this server needs in its environment.
    public var environment: [String: String] {
        Self.makeMetadataDirectory()  // for the client about to start
        return ["JACK_DEFAULT_SERVER": name, "JACK_NO_START_SERVER": "1"]
    }

    private static func answers(_ name: String) -> Bool {
        var environment = ProcessInfo.processInfo.environment
        environment["JACK_DEFAULT_SERVER"] = name
        environment["JACK_NO_START_SERVER"] = "1"
        guard let probe = try? ChildProcess("/usr/bin/jack_lsp", [], environment: environment, output: "/dev/null") else { return false }
        return probe.wait(timeout: 5) == 0
    }

    deinit {
        if let frameClock {
            frameClock.signal(SIGTERM)
            if frameClock.wait(timeout: 5) == nil { frameClock.signal(SIGKILL) }
        }
        process.signal(SIGTERM)
        if process.wait(timeout: 5) == nil { process.signal(SIGKILL) }
    }
}

/// A temporary directory removed when released.
public final class TemporaryDirectory {
    public let path: String

    public init() {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("recd-\(UUID().uuidString.prefix(8))").path
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    public func file(_ name: String) -> String { path + "/" + name }
}

/// Known signals, as raw interleaved samples for the `file` devices.
public enum Signal {
    /// A counter pattern: sample i of channel c is a distinct value, so any gap, repeat or
    /// channel swap shows. Fits 16 bits.
    public static func counter16(frames: Int, channels: Int) -> [Int16] {
        var samples = [Int16](repeating: 0, count: frames * channels)
        for frame in 0..<frames {
            for channel in 0..<channels {
                samples[frame * channels + channel] = Int16(truncatingIfNeeded: (frame &* 7 &+ channel &* 10007) % 65536 - 32768)
            }
        }
        return samples
    }

    /// A sine at `frequency` Hz, amplitude `amplitude` of full scale, same on every channel.
    public static func sine(frequency: Double, rate: Int, frames: Int, channels: Int, amplitude: Double) -> [Float] {
        var samples = [Float](repeating: 0, count: frames * channels)
        for frame in 0..<frames {
            let value = Float(amplitude * sin(2 * .pi * frequency * Double(frame) / Double(rate)))
            for channel in 0..<channels { samples[frame * channels + channel] = value }
        }
        return samples
    }

    public static func toInt16(_ samples: [Float]) -> [Int16] {
        samples.map { Int16(max(-32768, min(32767, ($0 * 32768).rounded()))) }
    }

    public static func write<T>(_ samples: [T], to path: String) {
        let data = samples.withUnsafeBytes { Data($0) }
        _ = FileManager.default.createFile(atPath: path, contents: data)
    }
}

/// A headless PulseAudio server with a null sink, the test's own child process.
public final class PulseServer {
    public let directory = TemporaryDirectory()
    public private(set) var process: ChildProcess
    public var address: String { "unix:" + directory.file("native") }
    /// `tone()`'s module-sine, while it plays.
    private var toneModule: String?
    /// Records the sink's monitor while the tone plays (`checkMonitor()`).
    private var monitorRecorder: ChildProcess?

    public init() throws {
        // The sink first: once the socket takes connections, the device is there.
        let script = """
        load-module module-null-sink sink_name=testsink rate=48000 channels=2
        set-default-source testsink.monitor
        load-module module-native-protocol-unix auth-anonymous=1 socket=\(directory.file("native"))
        """
        try script.write(toFile: directory.file("pa.conf"), atomically: true, encoding: .utf8)
        process = try Self.launch(directory)
    }

    /// Starts the server again on the same socket (after `kill()`): the device comes back.
    public func restart() throws {
        unlink(directory.file("native"))
        process = try Self.launch(directory)
    }

    /// Plays a 440 Hz sine at -12 dBFS peak (-15 dBFS RMS) into the sink until `stopTone()`,
    /// `kill()` or the server's end. The tone is made inside the server (module-sine), so it
    /// cannot underrun however loaded the machine is: a player client (`pacat`) was starved
    /// under load and left runs of exact zeros in the input, clicks at their edges. A live
    /// signal also keeps the idle null sink from rendering in 2 s blocks. module-sine plays at
    /// half of full scale; its stream's volume, set before this returns, halves that.
    public func tone() throws {
        stopTone()
        let script = """
        set -e
        module=$(pactl load-module module-sine sink=testsink frequency=440)
        input=$(pactl list short sink-inputs | awk '$4 == "module-sine.c" { print $1 }')
        pactl set-sink-input-volume "$input" \(Self.halfAmplitudeVolume)
        echo "$module"
        """
        toneModule = try pactl(script).trimmingCharacters(in: .whitespacesAndNewlines)
        // The monitor, recorded alongside for `checkMonitor()`.
        monitorRecorder = try ChildProcess("/bin/sh", ["-c", "exec parec --device=testsink.monitor --rate=48000 --channels=1 "
                                                        + "--format=s16le --latency-msec=200 2>/dev/null"],
                                           environment: clientEnvironment, output: directory.file("monitor.raw"))
    }

    /// Reads a moment of the sink's monitor: after this, a new capture stream gets its first
    /// frames at once (a fresh server's first capture through ALSA comes about 2 s late).
    public func warmUp() throws {
        // Through ALSA's pulse plugin, as recd reads it: a parec stream first did not do.
        _ = try pactl("ALSA_CONFIG_PATH=/usr/share/alsa/alsa.conf:\(TestDevices.configuration) "
                      + "timeout 20 arecord -q -D 'paced:SERVER=\(address)' -f S16_LE -r 48000 -c 2 -s 4800 -t raw > /dev/null")
    }

    /// Adds a sine at `frequency` (at module-sine's half of full scale, -6 dBFS peak) to the
    /// sink, beside the tone, until `unload` with the module this returns.
    public func sine(frequency: Int) throws -> String {
        try pactl("pactl load-module module-sine sink=testsink frequency=\(frequency)").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    public func unload(_ module: String) throws {
        _ = try pactl("pactl unload-module \(module)")
    }

    /// PulseAudio's volume for a gain of 0.5 (its software volume is cubic: (v / 65536)³).
    static let halfAmplitudeVolume = 52016

    public func stopTone() {
        if let toneModule, process.isRunning { _ = try? pactl("pactl unload-module \(toneModule)") }
        toneModule = nil
        checkMonitor()
    }

    /// Whether the input had runs of exact zeros while the tone played: a 440 Hz sine at this
    /// level has at most one zero sample in a row, so a longer run is an underrun of the input,
    /// not recd. Reported as a warning beside whatever the test reports, so that a failure
    /// caused by the signal names its cause.
    private func checkMonitor() {
        guard let recorder = monitorRecorder else { return }
        monitorRecorder = nil
        recorder.signal(SIGKILL)
        _ = recorder.wait(timeout: 10)
        let path = directory.file("monitor.raw")
        defer { unlink(path) }
        guard let data = FileManager.default.contents(atPath: path) else { return }
        let runs = data.withUnsafeBytes { Self.zeroRuns(in: $0.bindMemory(to: Int16.self)) }
        guard !runs.isEmpty else { return }
        let warning = """
            the paced device's input (the tone, read back from the sink's monitor) had \(runs.count) runs of exact zeros, \
            the longest \(runs.max()!) frames: an underrun of the test signal, not recd's doing
            """
        #if canImport(Testing)
        Issue.record(Comment(rawValue: warning), severity: .warning)
        #else
        FileHandle.standardError.write(Data((warning + "\n").utf8))
        #endif
    }

    /// Lengths of the runs of two or more zero samples, between the first and the last
    /// non-zero sample (silence before the tone starts and after it stops is not a gap).
    public static func zeroRuns(in samples: UnsafeBufferPointer<Int16>) -> [Int] {
        guard let first = samples.firstIndex(where: { $0 != 0 }), let last = samples.lastIndex(where: { $0 != 0 }) else { return [] }
        var runs: [Int] = []
        var run = 0
        for index in first...last {
            if samples[index] == 0 {
                run += 1
            } else {
                if run >= 2 { runs.append(run) }
                run = 0
            }
        }
        return runs
    }

    /// The environment of a client of this server.
    private var clientEnvironment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["PULSE_SERVER"] = address
        environment["HOME"] = directory.path
        return environment
    }

    /// Runs a shell script with pactl (or other clients) against this server; its output.
    private func pactl(_ script: String) throws -> String {
        let output = directory.file("pactl.out")
        unlink(output)
        let child = try ChildProcess("/bin/sh", ["-c", script], environment: clientEnvironment, output: output)
        guard let status = child.wait(timeout: 30) else {
            child.signal(SIGKILL)
            throw TestFailure("pactl did not finish: \(script)")
        }
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0 else { throw TestFailure("pactl failed (\(status)): \(text)") }
        return text
    }

    deinit { checkMonitor() }

    private static func launch(_ directory: TemporaryDirectory) throws -> ChildProcess {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.path
        environment["XDG_RUNTIME_DIR"] = directory.path
        let process = try ChildProcess("/usr/bin/pulseaudio",
                                   ["-n", "-F", directory.file("pa.conf"), "--daemonize=no", "--exit-idle-time=-1",
                                    "--system=false", "--log-target=file:" + directory.file("log")],
                                   environment: environment)
        // The socket file appears at bind(2), before listen(2): wait until a connection is taken
        // (a client in between would get "Connection refused").
        let deadline = Date().addingTimeInterval(15)
        while !acceptsConnections(directory.file("native")) {
            guard Date() < deadline, process.isRunning else {
                throw TestFailure("PulseAudio did not start; log: \((try? String(contentsOfFile: directory.file("log"), encoding: .utf8)) ?? "none")")
            }
            usleep(20_000)
        }
        return process
    }

    private static func acceptsConnections(_ path: String) -> Bool {
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard probe >= 0 else { return false }
        defer { close(probe) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        } == 0
    }

    /// Kills the server (and the tone): clients capturing from it see the device vanish.
    public func kill() {
        toneModule = nil
        process.signal(SIGKILL)
        _ = process.wait(timeout: 10)
        checkMonitor()
    }

    /// Freezes the server (SIGSTOP): capture from it stalls without failing.
    public func suspend() { process.signal(SIGSTOP) }
    public func resume() { process.signal(SIGCONT) }
}

public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The whole lines of a file another process is still writing: it can end in the middle of one
/// (a long line goes out in several writes).
public func completeLines(_ text: String) -> [Substring] {
    text[..<(text.lastIndex(of: "\n") ?? text.startIndex)].split(separator: "\n")
}

/// Polls `condition` until it holds or `timeout` passes. A bound, not a window: it costs
/// nothing when the condition comes, and the suites run in parallel, also under TSan, where a
/// daemon's start alone has taken more than 10 s.
public func waitUntil(timeout: Double = 30, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        usleep(5_000)
    }
    return condition()
}

/// `waitUntil` for async tests: sleeps without holding a thread of the cooperative pool.
public func eventually(timeout: Double = 30, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return condition()
}


/// A child process started with posix_spawn and reaped with waitpid(WNOHANG).
///
/// Foundation's Process on Linux reaps children with a blocking wait4 on one pid at a time, so
/// with several long-lived children (PulseAudio, recd) waiting for one can hang on another.
public final class ChildProcess {
    public let pid: pid_t
    private var status: Int32?

    /// - Parameters:
    ///   - output: a file for stdout and stderr (nil: /dev/null).
    ///   - descriptors: (parent fd, child fd) pairs to pass on, for socket activation.
    public init(_ executable: String, _ arguments: [String], environment: [String: String],
                output: String? = nil, input: String? = nil, descriptors: [(Int32, Int32)] = []) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, input ?? "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output ?? "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        for (from, to) in descriptors { posix_spawn_file_actions_adddup2(&actions, from, to) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // A fresh signal mask and default dispositions: the test runner blocks some signals.
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigfillset(&defaults)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else { throw TestFailure("cannot start \(executable): \(String(cString: strerror(result)))") }
        self.pid = pid
    }

    /// Exit code, or 128 + signal number; nil while running.
    public var exitStatus: Int32? {
        if status == nil {
            var raw: Int32 = 0
            if waitpid(pid, &raw, WNOHANG) == pid {
                let signal = raw & 0x7f
                status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
            }
        }
        return status
    }

    public var isRunning: Bool { exitStatus == nil }

    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits for the exit; nil if it did not happen in time.
    public func wait(timeout: Double) -> Int32? {
        _ = waitUntil(timeout: timeout) { !isRunning }
        return exitStatus
    }

    deinit {
        if isRunning {
            kill(pid, SIGCONT)
            kill(pid, SIGKILL)
            _ = wait(timeout: 10)
        }
    }
}

/// FFmpeg's command-line tools as independent readers of what recd wrote.
public enum FFmpegTools {
    /// One audio stream as ffprobe describes it.
    public struct Stream: Sendable {
        public var codecName: String
        public var profile: String?
        public var sampleRate: Int
        public var channels: Int
        /// The declared duration in the stream's time base (the edit list's, for MP4).
        public var durationTimestamps: Int64?
        public var timeBase: String
        public var startTime: Double?
        public var bitRate: Int?

        /// The declared duration in frames.
        public var frames: Int64? {
            guard let durationTimestamps else { return nil }
            let parts = timeBase.split(separator: "/").compactMap { Int64($0) }
            guard parts.count == 2, parts[1] > 0 else { return nil }
            return (durationTimestamps * parts[0] * Int64(sampleRate) + parts[1] / 2) / parts[1]
        }
    }

    /// `ffprobe -show_streams` on the first audio stream.
    public static func probe(_ path: String) throws -> Stream {
        let output = try capture("/usr/bin/ffprobe", ["-v", "error", "-select_streams", "a:0", "-show_streams", "-of", "json", path])
        guard let object = try JSONSerialization.jsonObject(with: output) as? [String: Any],
              let stream = (object["streams"] as? [[String: Any]])?.first else {
            throw TestFailure("ffprobe found no audio stream in \(path)")
        }
        return Stream(codecName: stream["codec_name"] as? String ?? "",
                      profile: stream["profile"] as? String,
                      sampleRate: Int(stream["sample_rate"] as? String ?? "") ?? 0,
                      channels: stream["channels"] as? Int ?? 0,
                      durationTimestamps: (stream["duration_ts"] as? NSNumber)?.int64Value,
                      timeBase: stream["time_base"] as? String ?? "",
                      startTime: Double(stream["start_time"] as? String ?? ""),
                      bitRate: Int(stream["bit_rate"] as? String ?? ""))
    }

    /// Decodes with GStreamer (qtdemux, decodebin) to interleaved 16-bit samples: another
    /// MP4 demuxer than FFmpeg's.
    public static func decodeWithGStreamer(_ path: String) throws -> [Int16] {
        let directory = TemporaryDirectory()
        let output = directory.file("decoded.raw")
        let pipeline = ["-q", "filesrc", "location=\(path)", "!", "qtdemux", "!", "decodebin", "!", "audioconvert", "!",
                        "audio/x-raw,format=S16LE", "!", "filesink", "location=\(output)"]
        _ = try capture("/usr/bin/gst-launch-1.0", pipeline)
        let data = FileManager.default.contents(atPath: output) ?? Data()
        return data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
    }

    /// Decodes with ffmpeg to interleaved 16-bit samples.
    public static func decodeInt16(_ path: String) throws -> [Int16] {
        try decode(path, format: "s16le", as: Int16.self)
    }

    /// Decodes with ffmpeg to interleaved 32-bit samples (24-bit data in the top bits).
    public static func decodeInt32(_ path: String) throws -> [Int32] {
        try decode(path, format: "s32le", as: Int32.self)
    }

    /// Decodes with ffmpeg to interleaved floats.
    public static func decodeFloat(_ path: String) throws -> [Float] {
        try decode(path, format: "f32le", as: Float.self)
    }

    private static func decode<T>(_ path: String, format: String, as: T.Type) throws -> [T] {
        let data = try capture("/usr/bin/ffmpeg", ["-v", "error", "-i", path, "-f", format, "-"])
        return data.withUnsafeBytes { Array($0.bindMemory(to: T.self)) }
    }

    /// Runs a tool to completion and returns its standard output; throws on a non-zero exit.
    private static func capture(_ executable: String, _ arguments: [String]) throws -> Data {
        let directory = TemporaryDirectory()
        let script = "exec \"$0\" \"$@\" >\(directory.file("out")) 2>\(directory.file("err"))"
        let process = try ChildProcess("/bin/sh", ["-c", script, executable] + arguments,
                                       environment: ProcessInfo.processInfo.environment)
        guard let status = process.wait(timeout: 120) else {
            process.signal(SIGKILL)
            throw TestFailure("\(executable) did not finish")
        }
        guard status == 0 else {
            let errors = (try? String(contentsOfFile: directory.file("err"), encoding: .utf8)) ?? ""
            throw TestFailure("\(executable) \(arguments) exited \(status): \(errors)")
        }
        return FileManager.default.contents(atPath: directory.file("out")) ?? Data()
    }

    /// An MP4 file's top-level box types in order (`ftyp`, `moov`, `mdat`, `moof`...), from
    /// the box headers: a regular file has `moov` before `mdat` and no `moof`.
    public static func topLevelBoxes(_ path: String) -> [String] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        var boxes: [String] = []
        var offset = 0
        while offset + 8 <= data.count {
            var size = data[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            if size == 1, offset + 16 <= data.count { size = data[offset + 8..<offset + 16].reduce(0) { $0 << 8 | Int($1) } }
            if size == 0 { size = data.count - offset }
            guard size >= 8 else { break }
            boxes.append(String(decoding: data[offset + 4..<offset + 8], as: UTF8.self))
            offset += size
        }
        return boxes
    }
}

extension Signal {
    /// A linear chirp from `from` to `to` Hz over `frames`, amplitude `amplitude`, same on every channel.
    public static func chirp(from: Double, to: Double, rate: Int, frames: Int, channels: Int, amplitude: Double) -> [Float] {
        var samples = [Float](repeating: 0, count: frames * channels)
        let seconds = Double(frames) / Double(rate)
        for frame in 0..<frames {
            let time = Double(frame) / Double(rate)
            let phase = 2 * .pi * (from * time + (to - from) / (2 * seconds) * time * time)
            let value = Float(amplitude * sin(phase))
            for channel in 0..<channels { samples[frame * channels + channel] = value }
        }
        return samples
    }
}

// The larger signals (a minute of noise, half a minute of trigger scene) are made here, in the
// one test module compiled optimized (Package.swift, optimizedTestCode): unoptimized and under
// ThreadSanitizer, a 30 s scene took 9 s of CPU to make, 0.05 s optimized.
extension Signal {
    /// Interleaved 16-bit noise from a fixed LCG, about -12 dBFS: no two stretches alike, so a
    /// stretch found in it is found at one offset only.
    public static func noise16(frames: Int, channels: Int, seed: UInt32) -> [Int16] {
        var state = seed
        return [Int16](unsafeUninitializedCapacity: frames * channels) { buffer, count in
            for index in 0..<frames * channels {
                state = state &* 1_664_525 &+ 1_013_904_223
                buffer[index] = Int16(truncatingIfNeeded: Int32(bitPattern: state) >> 18)
            }
            count = frames * channels
        }
    }

    /// A trigger test scene, 48 kHz stereo 16-bit: noise at -60 dBFS and 50 Hz hum at -20 dBFS all
    /// along, and 1 kHz tone bursts at -20 dBFS over `bursts` (seconds, [start, end)).
    public static func triggerScene(seconds: Double, bursts: [(Double, Double)], seed: UInt32 = 0x5EED) -> [Int16] {
        let rate = 48000.0
        let frames = Int(seconds * rate)
        var samples = [Int16](repeating: 0, count: frames * 2)
        var state = seed
        let noiseAmplitude = 0.001 * 3.0.squareRoot()  // uniform: RMS a/√3 = 0.001, -60 dBFS
        let sineAmplitude = 0.1 * 2.0.squareRoot()     // RMS 0.1, -20 dBFS
        let burstFrames = bursts.map { (Int(($0.0 * rate).rounded()), Int(($0.1 * rate).rounded())) }
        for frame in 0..<frames {
            let time = Double(frame) / rate
            var common = sineAmplitude * sin(2 * Double.pi * 50 * time)
            if burstFrames.contains(where: { frame >= $0.0 && frame < $0.1 }) {
                common += sineAmplitude * sin(2 * Double.pi * 1000 * time)
            }
            for channel in 0..<2 {
                state = state &* 1_664_525 &+ 1_013_904_223
                let noise = (Double(state >> 8) / Double(1 << 24) * 2 - 1) * noiseAmplitude
                samples[frame * 2 + channel] = Int16((max(-1, min(1, common + noise)) * 32767).rounded())
            }
        }
        return samples
    }

    /// The energy of `reference[range]` and of its difference from `copy` read `shift` samples
    /// later: the signal and the noise of a copy that lags by `shift`.
    public static func difference(_ copy: [Int16], from reference: [Int16], shiftedBy shift: Int,
                                  over range: Range<Int>) -> (signal: Double, noise: Double) {
        var signal = 0.0, noise = 0.0
        for index in range {
            let source = Double(reference[index]), sample = Double(copy[index + shift])
            signal += source * source
            noise += (sample - source) * (sample - source)
        }
        return (signal, noise)
    }

    /// Signal to noise (dB) of `converted` against `reference` shifted by `lag`, away from both
    /// ends (`margin` samples), where resampling filters start and stop.
    public static func signalToNoise(_ converted: [Double], _ reference: [Double], lag: Int, margin: Int = 1600, upTo end: Int? = nil) -> Double {
        var signal = 0.0, noise = 0.0
        for index in margin..<min(end ?? Int.max, converted.count - margin) where index + lag >= 0 && index + lag < reference.count {
            let a = converted[index], b = reference[index + lag]
            signal += b * b
            noise += (a - b) * (a - b)
        }
        return 10 * log10(signal / max(noise, 1e-20))
    }
}
