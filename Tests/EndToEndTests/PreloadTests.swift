import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// A library the user preloads (libfaketime, aoss, another malloc) changes nothing recd does
/// (issue 50). libfaketime's constructor sets FAKETIME_SHARED, which moves `environ` off the
/// stack before recd's own code runs; the Swift runtime found argv from `environ`, so a
/// release recd (the runtime inside) started with no arguments at all: the system socket and
/// device `default` instead of the ones it was given (Sources/CCommandLine/command_line.c).
@Suite("a preloaded library")
struct PreloadTests {
    /// Debian's libfaketime (the `faketime` package), for this machine's architecture.
    static let libfaketime: String? = {
        var name = utsname()
        uname(&name)
        let machine = withUnsafeBytes(of: &name.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let triplet = machine == "x86_64" ? "x86_64-linux-gnu" : machine == "aarch64" ? "aarch64-linux-gnu" : machine + "-linux-gnu"
        let path = "/usr/lib/\(triplet)/faketime/libfaketime.so.1"
        return FileManager.default.fileExists(atPath: path) ? path : nil
    }()

    /// recd started directly (no wrapper: a preloaded parent such as strace or sh would set
    /// FAKETIME_SHARED first, and libfaketime then leaves `environ` where it is) under
    /// libfaketime with a timestamp file, as the README's testing notes and issue 50 do: it
    /// answers on the --socket it was given, reports the --device and --recordings-dir it was
    /// given, records there, and the file's start is the faked time (so libfaketime was in
    /// effect, not just named).
    @Test(.enabled(if: !Binaries.threadSanitized,
                   "a ThreadSanitizer-built recd never starts under libfaketime: ThreadSanitizer's start calls clock_gettime, libfaketime initializes from it and its dlsym deadlocks in ThreadSanitizer's allocator"))
    func recdUnderLibfaketimeTakesItsCommandLineArguments() throws {
        let library = try #require(Self.libfaketime, "libfaketime is not installed (Debian: faketime)")
        try #require(ProcessInfo.processInfo.environment["FAKETIME_SHARED"] == nil,
                     "the tests run under libfaketime themselves: recd would inherit FAKETIME_SHARED and not show the problem")
        let work = TemporaryDirectory()
        let clock = work.file("faketime")
        try "@2023-05-01 12:00:00\n".write(toFile: clock, atomically: true, encoding: .utf8)
        let input = writeCounterInput(work, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path),
                                environment: ["LD_PRELOAD": library, "FAKETIME_TIMESTAMP_FILE": clock, "FAKETIME_NO_CACHE": "1"],
                                waitForSocket: false)
        defer { daemon.terminate() }
        // Ready (its log says so, naming the device it took), answering, or gone: a recd that
        // lost its arguments is ready on another socket, and waiting for ours would only time out.
        #expect(waitUntil(timeout: 60) {
            daemon.log.contains("recd ready") || (try? daemon.connect()) != nil || !daemon.process.isRunning
        }, "recd neither started nor exited: \(daemon.log.suffix(3000))")
        // (grep: Foundation reads a /proc file, whose size is 0, only in part.)
        let loaded = try run("/bin/grep", ["-c", "/libfaketime", "/proc/\(daemon.process.pid)/maps"])
        #expect(loaded.status == 0, "libfaketime is not loaded in recd: \(loaded.stderr)")

        let answered = waitUntil(timeout: 10) { (try? daemon.connect()) != nil || !daemon.process.isRunning }
        try #require(answered && daemon.process.isRunning,
                     "recd does not answer on its --socket \(daemon.socket) (exit \(daemon.process.exitStatus.map(String.init) ?? "none")): \(daemon.log.suffix(3000))")
        let status = try #require(daemon.waitForStatus { _ in true })
        #expect(status.device == daemon.device)
        #expect(status.recordingsDirectory == daemon.recordings)

        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "faked", format: .flac, sampleRate: 48000, channels: 2, duration: 0.5))
        #expect(daemon.waitForStatus { $0.state.name == .finished && $0.recording?.id == started.id } != nil, "\(daemon.log.suffix(3000))")
        #expect(try daemon.recordingFiles() == ["faked.flac"])
        // The faked clock: 2023-05-01 12:00:00 when recd started (local time, whatever the
        // zone), running from there.
        let start = try #require(started.startedAt).timeIntervalSince1970
        #expect(abs(start - 1_682_942_400) < 86_400, "the start \(started.startedAt.map(UTCTimestamp.text) ?? "none") is not the faked time")
    }
}
