import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// The built binaries, next to the test bundle (`swift build --build-tests` builds them), or
/// those in RECD_TEST_BINARIES (`make test-release`: the release build, linked as it ships).
enum Binaries {
    static let directory: String = {
        if let directory = ProcessInfo.processInfo.environment["RECD_TEST_BINARIES"] { return directory }
        let candidates = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path,
                          FileManager.default.currentDirectoryPath + "/.build/debug"]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0 + "/recd") } ?? candidates[1]
    }()
    static var recd: String { directory + "/recd" }
    static var recctl: String { directory + "/recctl" }
    /// The recd under test is built with ThreadSanitizer (make test's `tsan` pass).
    static var threadSanitized: Bool { directory.contains("/.build-tsan/") }
    /// The recd under test is the optimized build (make test's `release` pass): what is
    /// promised of the shipping binary's code (no allocation on the capture thread) is
    /// checked there, not in -Onone code, which boxes what the optimizer keeps on the stack.
    static var optimized: Bool { directory.contains("release") }
}

/// A real recd process on a private socket, recordings directory and test device.
final class Daemon {
    let directory = TemporaryDirectory()
    let process: ChildProcess
    let device: String
    let recordings: String
    var socket: String { directory.file("recd.sock") }
    var configPath: String { directory.file("recd.toml") }
    var logPath: String { directory.file("recd.log") }

    /// Starts recd and waits until its socket answers.
    ///
    /// - Parameters:
    ///   - config: the TOML file's text.
    ///   - environment: extra variables (NOTIFY_SOCKET, WATCHDOG_USEC, JOURNAL_STREAM…).
    ///   - launcher: a command to run recd through (e.g. setpriv to change user, sh for LISTEN_PID).
    ///   - descriptors: (parent fd, child fd) pairs to pass on.
    /// A nil `device`: the configuration names it (`[[source]]`), and no `--device` is passed.
    init(device: String?, config: String = "", environment: [String: String] = [:], launcher: [String] = [],
         arguments extra: [String]? = nil, descriptors: [(Int32, Int32)] = [], recordings: String? = nil,
         waitForSocket: Bool = true) throws {
        self.device = device ?? ""
        self.recordings = recordings ?? directory.file("recordings")
        try config.write(toFile: directory.file("recd.toml"), atomically: true, encoding: .utf8)
        let arguments = extra ?? ["--user", "--config", directory.file("recd.toml"), "--socket", directory.file("recd.sock"),
                                  "--recordings-dir", self.recordings] + (device.map { ["--device", $0] } ?? [])
        var env = ProcessInfo.processInfo.environment
        env["ALSA_CONFIG_PATH"] = "/usr/share/alsa/alsa.conf:" + TestDevices.configuration
        env["NOTIFY_SOCKET"] = nil
        env["JOURNAL_STREAM"] = nil
        env["WATCHDOG_USEC"] = nil
        env["LISTEN_FDS"] = nil
        // recd's malloc tuning (Sources/CMallocTuning) depends on these: only a test sets them.
        env["GLIBC_TUNABLES"] = nil
        env["LD_PRELOAD"] = nil
        for (key, value) in environment { env[key] = value }
        let executable = launcher.first ?? Binaries.recd
        let launchArguments = launcher.isEmpty ? arguments : Array(launcher.dropFirst()) + [Binaries.recd] + arguments
        process = try ChildProcess(executable, launchArguments, environment: env, output: directory.file("recd.log"),
                                   descriptors: descriptors)
        if waitForSocket {
            let socket = directory.file("recd.sock")
            guard waitUntil(timeout: 60, { (try? RecdConnection(path: socket)) != nil || !process.isRunning }), process.isRunning else {
                throw TestFailure("recd did not start: \(self.log)")
            }
        }
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// A sanitizer report or a crash in recd's log fails the test that owned it, with the report:
    /// a TSan-built recd stops at its first report (halt_on_error), and a test that does not
    /// look at the exit status would otherwise pass, or fail far from the cause, with the log
    /// deleted along with the directory.
    deinit {
        let log = self.log
        let markers = ["WARNING: ThreadSanitizer", "Fatal error:", "Program crashed"]
        guard let start = markers.compactMap({ log.range(of: $0)?.lowerBound }).min() else { return }
        Issue.record("recd (pid \(process.pid), exit \(process.exitStatus.map(String.init) ?? "running")) reported:\n\(log[start...].prefix(12_000))")
    }

    /// Polls `status` until `condition` holds (that status) or `timeout` seconds pass (nil).
    func waitForStatus(timeout: Double = 30, _ condition: (StatusResult) -> Bool) -> StatusResult? {
        var last: StatusResult?
        _ = waitUntil(timeout: timeout) {
            guard let client = try? connect(), let status = try? client.call(.status) as StatusResult else { return false }
            last = status
            return condition(status)
        }
        return last.flatMap { condition($0) ? $0 : nil }
    }

    func connect() throws -> RecdConnection { try RecdConnection(path: socket) }

    /// The files in the recordings directory but recd's own (its lock file).
    func recordingFiles() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: recordings).filter { !$0.hasPrefix(".") }.sorted()
    }

    /// Sends a signal and waits for the exit; returns the exit status.
    @discardableResult
    func terminate(_ signal: Int32 = SIGTERM, timeout: Double = 30) -> Int32? {
        process.signal(signal)
        return process.wait(timeout: timeout)
    }
}

/// recctl against `daemon`'s socket, as a script runs it (no terminal: no colour).
@discardableResult
func recctl(_ daemon: Daemon, _ arguments: String..., environment: [String: String] = [:]) throws -> CommandResult {
    try run(Binaries.recctl, arguments, environment: environment.merging(["RECD_SOCKET": daemon.socket]) { $1 }, timeout: 30)
}

/// The recordings as `recctl ls --json` lists them, in its order.
func listed(_ daemon: Daemon) throws -> [RecordingFile] {
    try WireCoding.decoder().decode(RecordingsListResult.self, from: Data(try recctl(daemon, "ls", "--json").stdout.utf8)).recordings
}

/// Runs `arguments` on a pseudo-terminal (script(1)), as someone at a terminal would.
func onTerminal(_ arguments: [String], environment: [String: String] = [:]) throws -> BackgroundCommand {
    let command = arguments.map { "'" + $0.replacingOccurrences(of: "'", with: #"'\''"#) + "'" }.joined(separator: " ")
    return try BackgroundCommand("/usr/bin/script", ["-qfec", command, "/dev/null"], environment: environment)
}

/// Runs a command to completion, capturing its output.
struct CommandResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

@discardableResult
func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:], input: String? = nil,
         timeout: Double = 60) throws -> CommandResult {
    var env = ProcessInfo.processInfo.environment
    for (key, value) in environment { env[key] = value }
    let directory = TemporaryDirectory()
    // stdout and stderr apart: run through sh to split them into two files.
    let script = "exec \"$0\" \"$@\" >\(directory.file("out")) 2>\(directory.file("err"))"
    let process = try ChildProcess("/bin/sh", ["-c", script, executable] + arguments, environment: env, input: input)
    guard let status = process.wait(timeout: timeout) else {
        process.signal(SIGKILL)
        throw TestFailure("\(executable) \(arguments) did not finish in \(timeout) s")
    }
    return CommandResult(status: status,
                         stdout: (try? String(contentsOfFile: directory.file("out"), encoding: .utf8)) ?? "",
                         stderr: (try? String(contentsOfFile: directory.file("err"), encoding: .utf8)) ?? "")
}

/// A raw line-level client, for malformed input and for reading exactly what the server sends.
extension RecdConnection {
    func send(_ text: String) throws { try send(raw: Array(text.utf8)) }

    /// The next line as a JSON object.
    func nextObject(timeout: Double = 10) throws -> [String: Any] {
        let line = try readLine(timeout: timeout)
        guard let object = try JSONSerialization.jsonObject(with: line) as? [String: Any] else {
            throw TestFailure("not an object: \(String(decoding: line, as: UTF8.self))")
        }
        return object
    }

    /// Whether the server closes the connection (end of file) within `timeout` seconds without
    /// sending another line. False on a line, and on a timeout: silence is not a close.
    func closesWithoutAnotherLine(within timeout: Double) -> Bool {
        do {
            _ = try readLine(timeout: timeout)
            return false
        } catch {
            return error == .closed
        }
    }

    /// Sends a raw line and returns the next answer that is not a notification.
    func exchange(_ line: String, timeout: Double = 10) throws -> [String: Any] {
        try send(line + "\n")
        while true {
            let object = try nextObject(timeout: timeout)
            if object["method"] as? String != "changed" { return object }
        }
    }
}

extension [String: Any] {
    var errorCode: Int? { (self["error"] as? [String: Any])?["code"] as? Int }
    var errorMessage: String? { (self["error"] as? [String: Any])?["message"] as? String }
    var errorDataCode: String? { ((self["error"] as? [String: Any])?["data"] as? [String: Any])?["code"] as? String }
}

/// A NOTIFY_SOCKET listener: what the daemon tells systemd.
final class NotifyListener {
    let path: String
    let fd: Int32
    private let directory = TemporaryDirectory()

    init() throws {
        path = directory.file("notify")
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else { throw TestFailure("cannot bind \(path)") }
    }

    deinit { close(fd) }

    /// Messages read but not yet looked at by `waitFor`.
    private var backlog: [String] = []

    /// Messages received within `timeout` seconds, each with its arrival time (any backlog
    /// `waitFor` left is dropped: this measures what arrives from now on).
    func receive(for timeout: Double) -> [(Date, String)] {
        backlog.removeAll()
        var messages: [(Date, String)] = []
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, Int32(max(1, deadline.timeIntervalSinceNow * 1000))) > 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 { messages.append((Date(), String(decoding: buffer[..<count], as: UTF8.self))) }
        }
        return messages
    }

    /// Waits for a message containing `text`; messages after it stay for the next call.
    func waitFor(_ text: String, timeout: Double = 15) -> String? {
        waitFor(timeout: timeout) { $0.contains(text) }
    }

    /// Waits for a message that `matches`; messages after it stay for the next call.
    func waitFor(timeout: Double = 15, where matches: (String) -> Bool) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let index = backlog.firstIndex(where: matches) {
                let message = backlog[index]
                backlog.removeFirst(index + 1)
                return message
            }
            backlog.removeAll()
            guard Date() < deadline else { return nil }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 { backlog.append(String(decoding: buffer[..<count], as: UTF8.self)) }
        }
    }
}

/// A `[capture]` table whose write buffer holds a whole unpaced test input (up to 30 s): the
/// file device (`TestDevices.file`) hands its input over at once, faster than any sound card,
/// and a writer thread that a loaded machine holds back for longer than the default 10 s of
/// audio would make that a gap, which is not what such a test is about (WriteBufferTests test
/// gaps on devices paced like sound cards).
let unpacedInputInTheWriteBuffer = "[capture]\nwrite_buffer = \"30 s\"\n"

/// `[[source]]` tables naming each device (ALSA name) by its source's name, in order: a station
/// of several sources (issue 53). Text after them is the last source's (`[source.recording]`).
func sourceTables(_ devices: KeyValuePairs<String, String>) -> String {
    devices.map { "[[source]]\nname = \"\($0.key)\"\ndevice = \"\($0.value)\"\n" }.joined()
}

/// Inputs for two sources on the file devices: east's the counter pattern, west's its
/// complement (no frame of west's is east's).
func writeTwoSourceInputs(_ directory: TemporaryDirectory, seconds: Int) -> (east: (path: String, samples: [Int16]), west: (path: String, samples: [Int16])) {
    let east = writeCounterInput(directory, seconds: seconds)
    let west = (path: directory.file("west-\(seconds).raw"), samples: east.samples.map { ~$0 })
    Signal.write(west.samples, to: west.path)
    return (east, west)
}

/// Raw interleaved 16-bit stereo counter pattern for the file devices.
func writeCounterInput(_ directory: TemporaryDirectory, seconds: Int) -> (path: String, samples: [Int16]) {
    let samples = Signal.counter16(frames: seconds * 48000, channels: 2)
    let path = directory.file("input-\(seconds).raw")
    Signal.write(samples, to: path)
    return (path, samples)
}
