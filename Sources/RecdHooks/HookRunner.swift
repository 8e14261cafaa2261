import Dispatch
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import RecorderCore
import RecorderModel
import SystemPackage

/// A command run for every finalized file: an argv template whose `{field}`s are filled in from
/// the file. No shell is involved: each element becomes exactly one argument.
public struct HookCommand: Sendable, Equatable {
    /// The fields a template may use, also passed as `RECD_<FIELD>` environment variables.
    public static let fields = ["path", "relpath", "dir", "name", "ext", "format", "frames", "duration",
                                "sample_rate", "channels", "started_at", "ended_at", "id",
                                "previous_path", "previous_relpath", "previous_started_at", "source"]

    /// The configuration keys (`[hooks]`) and what each runs for.
    public static let onFileClosed = "on_file_closed"
    /// A finished file re-dated once the clock was synchronized: its `previous_*` fields say
    /// what it was (an uploader moves or replaces the copy it made under the old name).
    public static let onFileRedated = "on_file_redated"

    /// The configuration key it came from (`on_file_closed`), for logs and reports.
    public var name: String
    public var template: [String]

    /// Checks the template: a program, and only known `{field}`s.
    public init(name: String, template: [String]) throws(HookTemplateError) {
        guard let program = template.first, !program.isEmpty else {
            throw HookTemplateError("must name a program as its first element")
        }
        if program.contains("{") { throw HookTemplateError("the program (first element) cannot be a template") }
        for argument in template {
            for field in Self.placeholders(in: argument) where !Self.fields.contains(field) {
                throw HookTemplateError("unknown field {\(field)}; known: " + Self.fields.map { "{\($0)}" }.joined(separator: " "))
            }
        }
        self.name = name
        self.template = template
    }

    /// The argv for one file.
    public func arguments(for file: FinalizedFile, recordingsDirectory: String) -> [String] {
        let values = Self.values(for: file, recordingsDirectory: recordingsDirectory)
        return template.map { argument in
            var result = argument
            for field in Self.placeholders(in: argument) { result = result.replacing("{\(field)}", with: values[field] ?? "") }
            return result
        }
    }

    /// The `RECD_*` environment variables for one file.
    public static func environment(for file: FinalizedFile, recordingsDirectory: String) -> [String: String] {
        var environment: [String: String] = [:]
        for (field, value) in values(for: file, recordingsDirectory: recordingsDirectory) {
            environment["RECD_" + field.uppercased()] = value
        }
        return environment
    }

    static func values(for file: FinalizedFile, recordingsDirectory: String) -> [String: String] {
        let directory = recordingsDirectory.hasSuffix("/") ? recordingsDirectory : recordingsDirectory + "/"
        func relative(_ path: String) -> String {
            path.hasPrefix(directory) ? String(path.dropFirst(directory.count)) : (FilePath(path).lastComponent?.string ?? "")
        }
        let relativePath = relative(file.path)
        return [
            "path": file.path,
            "relpath": relativePath,
            "dir": FilePath(file.path).removingLastComponent().string,
            "name": file.name,
            "ext": FilePath(file.path).extension ?? "",
            "format": file.format.rawValue,
            "frames": String(file.frames),
            "duration": String(printf: "%.3f", file.duration),
            "sample_rate": String(file.sampleRate),
            "channels": String(file.channels),
            // As the protocol and the files' own tags write them (milliseconds, rounded).
            "started_at": file.startedAt.map(UTCTimestamp.text) ?? "",
            "ended_at": file.endedAt.map(UTCTimestamp.text) ?? "",
            "id": file.id,
            // Empty but for `on_file_redated`.
            "previous_path": file.previousPath ?? "",
            "previous_relpath": file.previousPath.map(relative) ?? "",
            "previous_started_at": file.previousStartedAt.map(UTCTimestamp.text) ?? "",
            "source": file.source ?? "",
        ]
    }

    static func placeholders(in argument: String) -> [String] {
        var result: [String] = []
        var rest = Substring(argument)
        while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
            result.append(String(rest[rest.index(after: open)..<close]))
            rest = rest[rest.index(after: close)...]
        }
        return result
    }
}

public struct HookTemplateError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// How one hook run ended.
public struct HookRun: Sendable, Equatable, Codable {
    public enum Outcome: String, Sendable, Codable {
        /// Exited with status 0.
        case succeeded
        /// Exited with another status, or was killed by a signal.
        case failed
        /// Ran past the timeout and was killed.
        case timedOut
        /// Could not be started at all (no such program, not executable).
        case failedToStart
    }

    public var hook: String
    /// The finalized file it ran for.
    public var path: String
    public var outcome: Outcome
    public var exitStatus: Int32?
    public var signal: Int32?
    public var seconds: Double
    public var finishedAt: Date
    /// A sentence for logs and the MQTT `hook` topic.
    public var message: String
}

/// Runs hook commands for finalized files, off the capture and control paths.
///
/// - At most `maxConcurrent` run at a time; further files wait in a queue of at most
///   `queueLimit` (beyond that, a file's hooks are skipped with an error in the log).
/// - Each run has `timeout` seconds; then its process group gets SIGTERM, and SIGKILL 5 s later.
/// - The outcome is logged and published through `lastRun`. Nothing a hook does (fail, hang,
///   write to the file's directory) reaches the recorder.
public final class HookRunner: Sendable {
    public let commands: [HookCommand]
    public let recordingsDirectory: String
    public let timeout: Double
    public let maxConcurrent: Int
    public let queueLimit: Int
    /// The last run that ended.
    public let lastRun = Observed<HookRun?>(nil)

    private let logger: Logger
    private let dispatcher = DispatchQueue(label: "recd.hooks.dispatcher")
    private let slots: DispatchSemaphore
    private let queued = NIOLockedValueBox(0)

    public init(commands: [HookCommand], recordingsDirectory: String, timeout: Double = 600, maxConcurrent: Int = 2,
                queueLimit: Int = 100, logger: Logger) {
        self.commands = commands
        self.recordingsDirectory = recordingsDirectory
        self.timeout = timeout
        self.maxConcurrent = maxConcurrent
        self.queueLimit = queueLimit
        self.logger = logger
        slots = DispatchSemaphore(value: maxConcurrent)
    }

    /// Queues every `on_file_closed` command for `file`; returns at once.
    public func fileFinalized(_ file: FinalizedFile) { run(HookCommand.onFileClosed, for: file) }

    /// Queues every `on_file_redated` command for `file` (re-dated: its `previous_*` set).
    public func fileRedated(_ file: FinalizedFile) { run(HookCommand.onFileRedated, for: file) }

    private func run(_ hook: String, for file: FinalizedFile) {
        for command in commands where command.name == hook {
            let accepted = queued.withLockedValue { count in
                guard count < queueLimit else { return false }
                count += 1
                return true
            }
            guard accepted else {
                logger.error("hook queue full; hook skipped", metadata: ["hook.name": "\(command.name)", "file.path": "\(file.path)"])
                continue
            }
            dispatcher.async { [self] in
                slots.wait()
                queued.withLockedValue { $0 -= 1 }
                DispatchQueue(label: "recd.hook").async { [self] in
                    let run = execute(command, for: file)
                    slots.signal()
                    if run.outcome == .succeeded {
                        logger.info("hook succeeded", metadata: metadata(run))
                    } else {
                        logger.warning("hook failed", metadata: metadata(run))
                    }
                    lastRun.send(run)
                }
            }
        }
    }

    private func metadata(_ run: HookRun) -> Logger.Metadata {
        ["hook.name": "\(run.hook)", "file.path": "\(run.path)", "hook.outcome": "\(run.outcome.rawValue)",
         "hook.message": "\(run.message)", "hook.seconds": "\(String(printf: "%.3f", run.seconds))"]
    }

    /// Spawns the command and waits for it (this thread only), killing it at the timeout.
    private func execute(_ command: HookCommand, for file: FinalizedFile) -> HookRun {
        let arguments = command.arguments(for: file, recordingsDirectory: recordingsDirectory)
        var environment = ProcessInfo.processInfo.environment
        environment.merge(HookCommand.environment(for: file, recordingsDirectory: recordingsDirectory)) { $1 }
        environment["RECD_HOOK"] = command.name
        let started = DispatchTime.now()
        func finish(_ outcome: HookRun.Outcome, status: Int32? = nil, signal: Int32? = nil, _ message: String) -> HookRun {
            HookRun(hook: command.name, path: file.path, outcome: outcome, exitStatus: status, signal: signal,
                    seconds: Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9,
                    finishedAt: Date(), message: message)
        }

        let pid: pid_t
        switch Self.spawn(arguments, environment: environment) {
        case .success(let spawned): pid = spawned
        case .failure(let error):
            return finish(.failedToStart, "\(arguments[0]) could not be started: \(Errno(rawValue: error.code))")
        }

        // The group is signalled only while the leader is unreaped (waitid with WNOWAIT below), so
        // the pid cannot have been reused.
        let exited = NIOLockedValueBox(false)
        let timedOut = NIOLockedValueBox(false)
        let killer = DispatchSource.makeTimerSource(queue: .global())
        killer.schedule(deadline: .now() + timeout, repeating: 5)
        killer.setEventHandler {
            exited.withLockedValue { exited in
                guard !exited else { return }
                let first = timedOut.withLockedValue { flag in
                    defer { flag = true }
                    return !flag
                }
                kill(-pid, first ? SIGTERM : SIGKILL)
            }
        }
        killer.resume()
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
        exited.withLockedValue { $0 = true }
        killer.cancel()
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}

        let signalNumber = raw & 0x7f
        let status = (raw >> 8) & 0xff
        if timedOut.withLockedValue({ $0 }) {
            return finish(.timedOut, signal: signalNumber == 0 ? nil : signalNumber,
                          "\(arguments[0]) ran longer than \(timeout) s and was killed")
        }
        if signalNumber != 0 {
            return finish(.failed, signal: signalNumber, "\(arguments[0]) was killed by signal \(signalNumber)")
        }
        if status != 0 { return finish(.failed, status: status, "\(arguments[0]) exited with status \(status)") }
        return finish(.succeeded, status: 0, "\(arguments[0]) exited with status 0")
    }

    struct SpawnError: Error { let code: Int32 }

    /// posix_spawnp in a process group of its own, stdin from /dev/null, stdout and stderr
    /// recd's own (the journal), no other descriptor inherited, default signal handling.
    private static func spawn(_ arguments: [String], environment: [String: String]) -> Result<pid_t, SpawnError> {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        // Descriptors not marked close-on-exec (a library's, the device's) stay out of the hook.
        if let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            for fd in entries.compactMap(Int32.init) where fd > 2 {
                let flags = fcntl(fd, F_GETFD)
                if flags >= 0 && flags & FD_CLOEXEC == 0 { posix_spawn_file_actions_addclose(&actions, fd) }
            }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigfillset(&defaults)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawnp(&pid, arguments[0], &actions, &attributes, argv, envp)
        return result == 0 ? .success(pid) : .failure(SpawnError(code: result))
    }
}
