import Foundation
import Glibc
import RecdTestSupport
import Testing

/// recd restarts itself once, before main, with glibc's thread caches and fastbins off
/// (Sources/CMallocTuning): its memory at rest stays flat under client churn (BENCHMARKS.md).
/// These check what can be seen from outside: the environment the kernel started the running
/// image with, the PID, and the environment recd's children (hooks) get.
@Suite("malloc tuning")
struct ProcessMemoryTests {
    let inputs = TemporaryDirectory()
    let out = TemporaryDirectory()

    /// The environment the running image of `pid` was started with (its execve's).
    func startEnvironment(_ pid: pid_t) throws -> [String: String] {
        let data = try #require(FileManager.default.contents(atPath: "/proc/\(pid)/environ"))
        var environment: [String: String] = [:]
        for entry in data.split(separator: 0) {
            let text = String(decoding: entry, as: UTF8.self)
            let parts = text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            environment[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return environment
    }

    /// A daemon whose file hook writes its environment to `out/{name}.env`, and the hook's
    /// environment after one recording.
    func daemonAndHookEnvironment(_ environment: [String: String]) throws -> (Daemon, [String: String]) {
        let input = writeCounterInput(inputs, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: HookTests.toml(["/bin/sh", "-c", "env > \"$1\"", "sh", out.path + "/{name}.env"]),
                                environment: environment)
        _ = try HookTests().record(daemon, "take", seconds: 0.2)
        #expect(waitUntil(timeout: 20) { daemon.log.contains("hook succeeded") }, "\(daemon.log)")
        var hook: [String: String] = [:]
        for line in try String(contentsOfFile: out.file("take.env"), encoding: .utf8).split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            hook[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return (daemon, hook)
    }

    @Test func recdRestartsItselfWithTheThreadCachesOffAndItsChildrenGetTheEnvironmentAsItWas() throws {
        let (daemon, hook) = try daemonAndHookEnvironment(["RECD_TEST_MARK": "kept"])
        let started = try startEnvironment(daemon.process.pid)
        // The same process (the PID the harness started), running recd's own binary.
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(daemon.process.pid)/exe")
        #expect(URL(fileURLWithPath: executable).lastPathComponent == "recd")
        if Binaries.threadSanitized {
            // ThreadSanitizer's allocator replaces malloc: nothing to tune, no second start.
            #expect(started["GLIBC_TUNABLES"] == nil)
            #expect(started["RECD_GLIBC_TUNABLES_BEFORE"] == nil)
        } else {
            // The second start's environment: the tunables (glibc rewrites the variable as it
            // reads it, so only its first setting shows) and what was there before.
            #expect(started["GLIBC_TUNABLES"]?.hasPrefix("glibc.malloc.tcache_count=0") == true, "\(started)")
            #expect(started["RECD_GLIBC_TUNABLES_BEFORE"] == "")
        }
        #expect(started["RECD_TEST_MARK"] == "kept")
        // The hook: the environment recd was given, nothing of the restart.
        #expect(hook["GLIBC_TUNABLES"] == nil, "\(hook)")
        #expect(hook["RECD_GLIBC_TUNABLES_BEFORE"] == nil, "\(hook)")
        #expect(hook["RECD_TEST_MARK"] == "kept")
        #expect(hook["RECD_NAME"] == "take")
        #expect(daemon.terminate() == 0)
    }

    @Test func aUsersOwnTunablesAreKeptAndAddedTo() throws {
        // Other tunables: recd adds its two and hands the user's back to its children.
        let (daemon, hook) = try daemonAndHookEnvironment(["GLIBC_TUNABLES": "glibc.malloc.perturb=0"])
        let started = try startEnvironment(daemon.process.pid)
        if !Binaries.threadSanitized {
            #expect(started["RECD_GLIBC_TUNABLES_BEFORE"] == "=glibc.malloc.perturb=0", "\(started)")
        }
        #expect(hook["GLIBC_TUNABLES"] == "glibc.malloc.perturb=0", "\(hook)")
        #expect(hook["RECD_GLIBC_TUNABLES_BEFORE"] == nil, "\(hook)")
        #expect(daemon.terminate() == 0)

        // The user's own thread cache setting: recd does not start again, and it stands.
        let out = TemporaryDirectory()
        let input = writeCounterInput(inputs, seconds: 2)
        let user = try Daemon(device: TestDevices.file(input.path), config: HookTests.toml(["/bin/sh", "-c", "env > \"$1\"", "sh", out.path + "/{name}.env"]),
                              environment: ["GLIBC_TUNABLES": "glibc.malloc.tcache_count=3"])
        let userStarted = try startEnvironment(user.process.pid)
        #expect(userStarted["RECD_GLIBC_TUNABLES_BEFORE"] == nil, "\(userStarted)")
        _ = try HookTests().record(user, "own", seconds: 0.2)
        #expect(waitUntil(timeout: 20) { user.log.contains("hook succeeded") }, "\(user.log)")
        let userHook = try String(contentsOfFile: out.file("own.env"), encoding: .utf8)
        #expect(userHook.split(separator: "\n").contains("GLIBC_TUNABLES=glibc.malloc.tcache_count=3"), "\(userHook)")
        #expect(user.terminate() == 0)
    }
}
