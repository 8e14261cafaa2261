import Dispatch
import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import RecdCommands
import RecdConfiguration
import RecdServer
import RecorderCore
import RecorderModel
import ServiceLifecycle
import SystemPackage
import Systemd
import UnixSignals

/// The daemon as a lifecycle service: serves the socket, tells systemd how it is doing, reloads
/// on SIGHUP, and on SIGTERM/SIGINT finalizes the recording before it lets clients go.
struct RecdService: Service {
    let station: Station
    let server: ControlServer
    /// Where the recorders' blocking operations and the configuration's re-reading run.
    let blocking: BlockingCalls
    let listenTarget: ListenTarget
    /// Re-reads the configuration (SIGHUP); throws what makes it unusable.
    let reload: @Sendable () throws -> DaemonConfiguration
    let logger: Logger

    /// What a source does as soon as clients can connect: `[autostart]`, `[listen]`, `[schedule]`.
    struct Startup: Sendable {
        /// Start recording (under this name, or a fresh one); nil: wait for a client.
        var autostart: Autostart?
        /// `[listen] enabled`: levels and pre-roll from boot.
        var listen = false
        /// `[schedule]`: recording windows.
        var schedule: ScheduledRecording?

        init(_ configuration: DaemonConfiguration) {
            autostart = configuration.autostart
                ? Autostart(name: configuration.autostartRecordingName,
                            trigger: configuration.triggerEnabled ? configuration.trigger : nil) : nil
            listen = configuration.listenAtStart
            schedule = configuration.schedule
        }
    }

    struct Autostart: Sendable {
        var name: String?
        /// `[trigger] enabled`: arm the trigger rather than record every frame.
        var trigger: TriggerSettings?
    }
    /// Each source's, by name.
    let startup: [String: Startup]

    private var recorders: [Recorder] { station.sources.map(\.recorder) }

    func run() async throws {
        // SIGHUP trapped before clients (and `systemctl reload`) can reach recd: its default
        // action would end the daemon.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        try await server.listen(listenTarget)
        // Ready only once clients can connect (MPD does the same).
        Systemd.notify("READY=1\nSTATUS=\(Self.statusLine(station))")
        for source in station.sources {
            let logger = logger(for: source)
            logger.notice("recd ready", metadata: ["recorder.device": "\(source.recorder.configuration.device)"])
            if let warning = SoundDevices.unstableNameWarning(source.recorder.configuration.device, roots: source.recorder.configuration.systemRoots) {
                logger.warning("\(warning)")
            }
            // Each source on its own: one that fails to begin never holds up or stops another.
            guard let startup = startup[source.name] else { continue }
            if startup.listen { startListening(source) }
            if let autostart = startup.autostart { startRecording(source, name: autostart.name, trigger: autostart.trigger) }
            followSchedule(startup.schedule, source)
        }

        await withDiscardingTaskGroup { serving in
            serving.addTask { await server.serve() }
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await reportStatus() }
                group.addTask { await feedWatchdog() }
                group.addTask { await reloadOnHangup(hangups) }
                try? await gracefulShutdown()
                group.cancelAll()
            }
            await shutDown()
        }
    }

    /// The daemon's logger, naming the source on a station of several.
    private func logger(for source: Station.Source) -> Logger {
        var logger = logger
        if station.sources.count > 1 { logger[metadataKey: "source"] = "\(source.name)" }
        return logger
    }

    /// The always-recording service: start with the configured settings, no client needed. A
    /// missing device is waited for (the recorder's `waitForDevice`), not a failure.
    private func startRecording(_ source: Station.Source, name: String?, trigger: TriggerSettings?) {
        let recorder = source.recorder
        Task { [logger = logger(for: source), blocking] in _ = try? await blocking.run {
            do throws(RecorderError) {
                let recording = try recorder.start(name: name, settings: nil, trigger: trigger,
                                                   unattended: true)
                logger.notice("recording started at startup", metadata: ["recording.name": "\(recording.name)",
                                                                         "recording.state": "\(recorder.state.value.name.rawValue)"])
            } catch {
                logger.error("recording could not start at startup", metadata: ["error.code": "\(error.code.rawValue)",
                                                                                "error.message": "\(error.message)"])
            }
        } }
    }

    /// `[schedule]`: the recorder follows the windows (a blocking call: it may start a recording).
    private func followSchedule(_ schedule: ScheduledRecording?, _ source: Station.Source) {
        let recorder = source.recorder
        Task { [logger = logger(for: source), blocking] in _ = try? await blocking.run {
            do throws(RecorderError) {
                try recorder.follow(schedule)
            } catch {
                logger.error("the schedule cannot be followed", metadata: ["error.message": "\(error.message)"])
            }
        } }
    }

    /// `[listen] enabled`: the device opens at startup (a missing one is waited for).
    private func startListening(_ source: Station.Source) {
        let recorder = source.recorder
        Task { [logger = logger(for: source), blocking] in _ = try? await blocking.run {
            do throws(RecorderError) {
                try recorder.listen()
            } catch {
                logger.error("listening could not start at startup", metadata: ["error.code": "\(error.code.rawValue)",
                                                                                "error.message": "\(error.message)"])
            }
        } }
    }

    /// Stop taking requests, stop every source's recording (finalizing its file), let
    /// subscribers see the final states, then close every connection once what is due to it
    /// is written.
    private func shutDown() async {
        Systemd.notify("STOPPING=1\nSTATUS=stopping")
        logger.notice("shutting down")
        // In this order: a `start` still in flight either runs before the final stop (and is
        // stopped by it) or is refused.
        await server.quiesce()
        recorders.forEach { $0.refuseNewRecordings() }
        let active = station.sources.filter { $0.recorder.state.value.isActive }
        if !active.isEmpty {
            // Finalizing a long file can take a while: ask systemd for more time, but only while
            // every capture still recording is making progress. A capture thread stuck in the
            // driver gets no extension: stop gives up on it after capture.stop_timeout anyway.
            // The first request goes before the stops begin, not whenever the task first runs.
            let extend: @Sendable () -> Void = {
                let stuck = active.contains { $0.recorder.state.value.isActive && !$0.recorder.captureIsHealthy(maximumSilence: .seconds(2)) }
                if !stuck { Systemd.notify("EXTEND_TIMEOUT_USEC=5000000") }
            }
            extend()
            let extender = Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(2))
                    if !Task.isCancelled { extend() }
                }
            }
            // The sources' files are finalized side by side: one long file does not hold up another's.
            await withDiscardingTaskGroup { stops in
                for source in active {
                    stops.addTask { [logger = logger(for: source), blocking] in
                        _ = try? await blocking.run {
                            do {
                                let recording = try source.recorder.stop()
                                logger.notice("recording finalized at shutdown", metadata: ["recording.path": "\(recording.path)"])
                            } catch {
                                logger.error("recording could not be finalized", metadata: ["error": "\(error)"])
                            }
                        }
                    }
                }
            }
            extender.cancel()
        }
        for recorder in recorders {
            _ = try? await blocking.run { recorder.closeTaps() }
            if recorder.listening.value != nil {
                // The device closes before recd exits; the pre-roll held goes with it.
                _ = try? await blocking.run { _ = try? recorder.unlisten() }
            }
        }
        await server.shutdown()
    }

    /// STATUS= for `systemctl status`: whenever its text changes (a state change, another
    /// second recorded), driven by the recorder's own publications, not a timer.
    private func reportStatus() async {
        // Called from two subscriber queues. A pthread lock (NIO's), not Synchronization.Mutex:
        // ThreadSanitizer cannot see the latter's futex on Linux.
        let last = NIOLockedValueBox("")
        let report: @Sendable () -> Void = { [station] in
            let status = Self.statusLine(station)
            let changed = last.withLockedValue { previous in
                defer { previous = status }
                return previous != status
            }
            if changed { Systemd.notify("STATUS=" + status) }
        }
        let tokens = recorders.flatMap { recorder in
            [recorder.state.subscribe { _ in report() }, recorder.currentTime.subscribe { _ in report() },
             recorder.warning.subscribe { _ in report() }]
        }
        let (cancelled, end) = AsyncStream<Never>.makeStream()
        await withTaskCancellationHandler {
            for await _ in cancelled {}
        } onCancel: {
            end.finish()
        }
        tokens.forEach { $0.cancel() }
    }

    static func status(_ recorder: Recorder) -> String {
        let state = recorder.state.value
        let file = state.recording.map { FilePath($0.path).lastComponent?.string ?? "" } ?? ""
        switch state {
        case .idle: return "idle"
        case .listening: return "listening"
        case .preparing: return "preparing -> \(file)"
        case .recording: return "recording \(formatElapsed(recorder.currentTimeNow())) -> \(file)"
        case .paused: return "paused \(formatElapsed(recorder.currentTimeNow())) -> \(file)"
        case .waitingForDevice(_, let wait): return "waiting for device (\(wait.error.code.rawValue)), attempt \(wait.attempts)"
        case .stopping: return "stopping -> \(file)"
        case .finished: return "idle (last: \(file))"
        case .failed(_, let error): return "failed: \(error.code.rawValue)"
        }
    }

    /// systemd's STATUS=: the state, and a refused reload after it with its reason (the file
    /// and line), where `systemctl status` shows it beside the journal's lines. A station of
    /// several sources shows each, by name: `east: recording 00:01:02 -> …; west: waiting …`.
    static func statusLine(_ station: Station) -> String {
        let states = station.sources.count == 1 ? status(station.sources[0].recorder)
            : station.sources.map { "\($0.name): \(status($0.recorder))" }.joined(separator: "; ")
        // A reload is the station's: every source carries its refusal alike.
        guard let warning = station.sources[0].recorder.warning.value, warning.code == .configurationNotReloaded else { return states }
        // One line: systemd shows STATUS= as it is, and a newline would end the datagram's field.
        let reason = warning.message.split(whereSeparator: \.isNewline).joined(separator: " ")
        return states + "; " + reason
    }

    static func formatElapsed(_ seconds: Double) -> String {
        let total = Int(seconds)
        return String(printf: "%02d:%02d:%02d", total / 3600, total / 60 % 60, total % 60)
    }

    /// WATCHDOG=1 every half WATCHDOG_USEC, but only while capture (if running) makes progress:
    /// a capture thread stuck in the driver gets the daemon restarted.
    private func feedWatchdog() async {
        guard let timeout = Systemd.watchdogTimeout() else { return }
        let interval = timeout / 2
        logger.info("watchdog enabled", metadata: ["watchdog.interval": "\(interval)"])
        var stalled = false
        while !Task.isCancelled {
            // One source stuck in its driver gets the daemon restarted: the others' files are
            // finalized by the restart's stop, and they resume in new segments.
            if recorders.allSatisfy({ $0.captureIsHealthy(maximumSilence: interval) }) {
                Systemd.notify("WATCHDOG=1")
                if stalled { logger.notice("capture progressing again; watchdog pings resumed") }
                stalled = false
            } else if !stalled {
                stalled = true
                logger.error("capture is not making progress; withholding watchdog pings")
            }
            try? await Task.sleep(for: interval)
        }
    }

    private func reloadOnHangup(_ hangups: UnixSignalsSequence) async {
        for await _ in hangups {
            Systemd.notify("RELOADING=1\nMONOTONIC_USEC=\(DispatchTime.now().uptimeNanoseconds / 1000)")
            // Reading the file is blocking I/O: off the cooperative pool.
            guard let reloaded = try? await blocking.run({ Result { try reload() } }) else { continue }
            switch reloaded {
            case .failure(let error):
                // Said where an operator looks (status, MQTT, systemd's STATUS=), not only in the journal.
                recorders.forEach { $0.configurationReload(refused: "\(error)") }
            case .success(let configuration):
                let reloaded = Dictionary(configuration.sources.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
                for source in station.sources {
                    let recorder = source.recorder
                    recorder.configurationReload(refused: nil)
                    // A source no longer in the file keeps what it has until the restart.
                    guard let sourceConfiguration = reloaded[source.name] else { continue }
                    recorder.reconfigure(configuration.recorderConfiguration(for: sourceConfiguration))
                    let schedule = sourceConfiguration.configuration.schedule
                    if schedule != recorder.scheduledRecording { followSchedule(schedule, source) }
                }
                StandardErrorLogHandler.level.store(
                    UInt8(Logger.Level.allCases.firstIndex(of: configuration.logLevel)!), ordering: .relaxed)
                logger.notice("configuration reloaded; it applies from the next recording")
            }
            Systemd.notify("READY=1\nSTATUS=\(Self.statusLine(station))")
        }
    }
}
