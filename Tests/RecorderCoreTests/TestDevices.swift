import Foundation
import Glibc
import Testing

/// Capture devices for tests, all through the real libasound (see ../shared/TESTING.md):
///
/// - `testfile:FILE=…` — ALSA's `file` plugin over `null`: reads a raw file we generate, as fast
///   as we ask (bit-exact, unpaced).
/// - `pacedfile:FILE=…,SERVER=…` — the same file plugin over a PulseAudio null-sink monitor:
///   bit-exact data from our file, paced by a real clock.
/// - `paced:SERVER=…` — the PulseAudio null-sink monitor itself.
///
/// One ALSA configuration defines them with arguments, so parallel tests share it safely.
enum TestDevices {
    static let configuration: String = {
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

    static func file(_ path: String) -> String {
        _ = configuration
        return "testfile:FILE=\(path)"
    }

    static func pacedFile(_ path: String, server: PulseServer) -> String {
        _ = configuration
        return "pacedfile:FILE=\(path),SERVER=\(server.address)"
    }

    static func paced(_ server: PulseServer) -> String {
        _ = configuration
        return "paced:SERVER=\(server.address)"
    }
}

/// A temporary directory removed when released.
final class TemporaryDirectory {
    let path: String

    init() {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("recd-\(UUID().uuidString.prefix(8))").path
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    func file(_ name: String) -> String { path + "/" + name }
}

/// Known signals, as raw interleaved samples for the `file` devices.
enum Signal {
    /// A counter pattern: sample i of channel c is a distinct value, so any gap, repeat or
    /// channel swap shows. Fits 16 bits.
    static func counter16(frames: Int, channels: Int) -> [Int16] {
        var samples = [Int16](repeating: 0, count: frames * channels)
        for frame in 0..<frames {
            for channel in 0..<channels {
                samples[frame * channels + channel] = Int16(truncatingIfNeeded: (frame &* 7 &+ channel &* 10007) % 65536 - 32768)
            }
        }
        return samples
    }

    /// A sine at `frequency` Hz, amplitude `amplitude` of full scale, same on every channel.
    static func sine(frequency: Double, rate: Int, frames: Int, channels: Int, amplitude: Double) -> [Float] {
        var samples = [Float](repeating: 0, count: frames * channels)
        for frame in 0..<frames {
            let value = Float(amplitude * sin(2 * .pi * frequency * Double(frame) / Double(rate)))
            for channel in 0..<channels { samples[frame * channels + channel] = value }
        }
        return samples
    }

    static func toInt16(_ samples: [Float]) -> [Int16] {
        samples.map { Int16(max(-32768, min(32767, ($0 * 32768).rounded()))) }
    }

    static func write<T>(_ samples: [T], to path: String) {
        let data = samples.withUnsafeBytes { Data($0) }
        _ = FileManager.default.createFile(atPath: path, contents: data)
    }
}

/// A headless PulseAudio server with a null sink, the test's own child process.
final class PulseServer {
    let directory = TemporaryDirectory()
    let process = Process()
    var address: String { "unix:" + directory.file("native") }

    init() throws {
        let script = """
        load-module module-native-protocol-unix auth-anonymous=1 socket=\(directory.file("native"))
        load-module module-null-sink sink_name=testsink rate=48000 channels=2
        set-default-source testsink.monitor
        """
        try script.write(toFile: directory.file("pa.conf"), atomically: true, encoding: .utf8)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/pulseaudio")
        process.arguments = ["-n", "-F", directory.file("pa.conf"), "--daemonize=no", "--exit-idle-time=-1",
                             "--system=false", "--log-target=file:" + directory.file("log")]
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.path
        environment["XDG_RUNTIME_DIR"] = directory.path
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(15)
        while !FileManager.default.fileExists(atPath: directory.file("native")) {
            guard Date() < deadline, process.isRunning else {
                throw TestFailure("PulseAudio did not start; log: \((try? String(contentsOfFile: directory.file("log"), encoding: .utf8)) ?? "none")")
            }
            usleep(20_000)
        }
    }

    /// Kills the server: clients capturing from it see the device vanish.
    func kill() {
        guard process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit { kill() }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Polls `condition` until it holds or `timeout` passes (generous: tests run on loaded machines).
func waitUntil(timeout: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        usleep(5_000)
    }
    return condition()
}

/// `waitUntil` for async tests: sleeps without holding a thread of the cooperative pool.
func eventually(timeout: Double = 10, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return condition()
}

/// Compares sample arrays, reporting the first difference instead of both arrays.
func expectSamples<T: Equatable>(_ actual: [T], _ expected: ArraySlice<T>, sourceLocation: SourceLocation = #_sourceLocation) {
    guard actual.count == expected.count else {
        Issue.record("\(actual.count) samples, expected \(expected.count)", sourceLocation: sourceLocation)
        return
    }
    if let index = actual.indices.first(where: { actual[$0] != expected[expected.startIndex + $0] }) {
        let offset = expected.startIndex + index
        Issue.record("sample \(index) is \(actual[index]), expected \(expected[offset])", sourceLocation: sourceLocation)
    }
}
