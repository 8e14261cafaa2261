import ALSA
import AudioGraph
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import RecorderModel
import Sndfile
import Synchronization
import SystemPackage

/// What the recorder publishes while it records or listens: the elapsed-time and levels
/// timers, levels on demand, the totals and the digital-silence warning.
extension RecorderController {
    // MARK: Timers

    func startTimers(for session: RecordingConsumer, rate: Int) {
        let meter = levelsAreWanted ? session.writer.meter : nil
        recordingPublishes.store(meter != nil, ordering: .releasing)
        let levels = published.levels
        let levelsPeriod = self.levelsPeriod
        let timePeriod = self.timePeriod
        periods.withLock { $0 = (timePeriod, levelsPeriod) }
        tickingSession.withLock { $0 = (session, rate) }
        // At once, not a period later: a subscriber who just asked for the time gets a fresh one.
        timerQueue.async { [weak self] in self?.publishTime(of: session, rate: rate) }
        if let meter, levelsPeriod == timePeriod {
            // One timer for both, sent together: they reach a subscriber of both in one turn of
            // its queue, and a client of the socket in one write.
            state.timers = [makeTimer(interval: timePeriod) { [weak self] in
                Observations.together {
                    self?.publishTime(of: session, rate: rate)
                    levels.send(meter.takeLevels())
                }
            }]
            return
        }
        state.timers = [makeTimer(interval: timePeriod) { [weak self] in
            self?.publishTime(of: session, rate: rate)
        }]
        if let meter {
            state.timers.append(makeTimer(interval: levelsPeriod) { levels.send(meter.takeLevels()) })
        }
    }

    /// Whether anyone wants `levels` now (`setLevelsWanted`).
    var levelsAreWanted: Bool { !configuration.publishesOnDemand || levelsWanted.withLock { !$0.isEmpty } }

    /// Seconds between two publications of the recording's time (and statistics, and the
    /// digital-silence check): `time_interval` while someone follows `currentTime`, once a
    /// second otherwise. A recording nobody watches woke a pool thread ten times a second.
    var timePeriod: Double {
        guard configuration.publishesOnDemand, timeWanted.withLock({ $0.isEmpty }) else { return configuration.timeInterval }
        return Swift.max(configuration.timeInterval, Self.unwatchedTimePeriod)
    }

    static let unwatchedTimePeriod = 1.0

    /// `source` (the socket server) follows `currentTime`, or no longer does. Any thread.
    func setTimeWanted(_ wanted: Bool, by source: String) {
        guard configuration.publishesOnDemand else { return }
        let changed = timeWanted.withLock { sources -> Bool in
            let before = sources.isEmpty
            if wanted { sources.insert(source) } else { sources.remove(source) }
            return before != sources.isEmpty
        }
        guard changed else { return }
        control.async { [self] in publishingDemandChanged() }
    }

    /// The recording's time (seconds) and statistics now, for `status`: the ledger's totals,
    /// then (read after them) the running session's counters. The session is cleared only after
    /// its last figures were published (`stopTimers`) and before its frames join the ledger
    /// (`finalize`), so nothing is counted twice; between the two, the published values. Any thread.
    func currentFigures() -> (time: Double, statistics: CaptureStatistics) {
        while true {
            let before = tickingSession.withLock { $0 }
            let totals = ledger.withLock { $0 }
            let after = tickingSession.withLock { $0 }
            // A session ended (or the next began) while the ledger was read: read again.
            guard before?.session === after?.session else { continue }
            guard let ticking = after else { return (published.currentTime.value, published.statistics.value) }
            return Self.figures(totals: totals, session: ticking.session, rate: ticking.rate)
        }
    }

    /// Seconds between two publications of `levels`: as often as the most demanding of those
    /// who want them asks, never more often than `levelsInterval` ([metering] levels_interval).
    /// A page that draws meters ten times a second costs the capture thread and every hop
    /// after it half of what twenty would.
    var levelsPeriod: Double { Self.levelsPeriod(configuration, wanted: levelsWanted.withLock { $0.values.min() }) }

    static func levelsPeriod(_ configuration: RecorderConfiguration, wanted fastest: Double?) -> Double {
        guard configuration.publishesOnDemand, let fastest else { return configuration.levelsInterval }
        // At least once a second whatever a subscriber's interval (one may ask for an hour):
        // `status` and a new subscriber's snapshot show levels a second old at most.
        return Swift.max(configuration.levelsInterval, Swift.min(fastest, Self.slowestLevelsPeriod))
    }

    static let slowestLevelsPeriod = 1.0

    /// `source` (the socket server, the MQTT bridge) wants levels every `interval` seconds
    /// (0: as often as configured), or no longer wants them. Any thread.
    func setLevelsWanted(_ wanted: Bool, by source: String, every interval: Double = 0) {
        let configuration = self.configuration
        guard configuration.publishesOnDemand else { return }
        let changed = levelsWanted.withLock { sources -> Bool in
            let before = sources.isEmpty ? nil : Self.levelsPeriod(configuration, wanted: sources.values.min())
            sources[source] = wanted ? interval : nil
            return before != (sources.isEmpty ? nil : Self.levelsPeriod(configuration, wanted: sources.values.min()))
        }
        guard changed else { return }
        control.async { [self] in publishingDemandChanged() }
    }

    /// On the control queue: meters and timers follow the demand for levels and the time.
    func publishingDemandChanged() {
        if state.listenPlan != nil {
            if let engine = state.engine { attachListeningMeter(to: engine) }
            startListeningTimer(configuration)
        }
        // Paused too: its timers run on (the time stands still), and resume keeps them.
        switch state.phase {
        case .recording(let run, let session), .paused(let run, let session):
            stopTimers()
            startTimers(for: session, rate: run.recording.sampleRate)
        default: break
        }
        if !levelsAreWanted { published.levels.send(.none) }
    }

    func makeTimer(interval: Double, _ handler: @escaping @Sendable () -> Void) -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: timerQueue)
        let nanoseconds = Int(Swift.max(0.001, interval) * 1_000_000_000)
        timer.schedule(deadline: .now() + .nanoseconds(nanoseconds), repeating: .nanoseconds(nanoseconds),
                       leeway: .nanoseconds(nanoseconds / 10))
        timer.setEventHandler(handler: handler)
        timer.resume()
        return timer
    }

    func stopTimers() {
        for timer in state.timers { timer.cancel() }
        state.timers = []
        recordingPublishes.store(false, ordering: .releasing)
        // A tick already queued must not publish after the final value. The session's time as
        // it is now goes out last: a recording nobody watches ticks once a second, and what
        // `currentFigures()` reads until the session's frames join the ledger must not be older.
        timerQueue.sync {
            if let ticking = tickingSession.withLock({ $0 }) { publishTime(of: ticking.session, rate: ticking.rate) }
        }
        tickingSession.withLock { $0 = nil }
    }

    /// Publishes the recording's time and statistics: the ended capture sessions' totals plus
    /// this one's counters. Also raises and clears the digital-silence warning.
    func publishTime(of session: RecordingConsumer, rate: Int) {
        let figures = Self.figures(totals: ledger.withLock { $0 }, session: session, rate: rate)
        published.currentTime.send(figures.time)
        published.statistics.send(figures.statistics)
        checkSilence(of: session)
    }

    /// The recording's time and statistics: the ended capture sessions' totals plus this one's counters.
    static func figures(totals: SessionLedger, session: RecordingConsumer, rate: Int) -> (time: Double, statistics: CaptureStatistics) {
        (Double(totals.frames + session.writer.framesWritten.load(ordering: .acquiring)) / Double(rate),
         CaptureStatistics(xruns: totals.xruns + session.writer.xruns.load(ordering: .relaxed),
                           framesLost: totals.framesLost + session.writer.framesLost.load(ordering: .relaxed),
                           framesCaptured: totals.framesCaptured + session.writer.framesCaptured.load(ordering: .relaxed),
                           segmentsClosed: totals.segmentsClosed, gaps: totals.gaps,
                           deviceClockDriftPPM: session.deviceClockDriftPPM ?? totals.deviceClockDriftPPM))
    }

    /// Publishes the totals when no capture session runs (between sessions, at the end).
    func publishTotals(rate: Int) {
        let totals = ledger.withLock { $0 }
        published.currentTime.send(Double(totals.frames) / Double(rate))
        published.statistics.send(CaptureStatistics(xruns: totals.xruns, framesLost: totals.framesLost,
                                          framesCaptured: totals.framesCaptured, segmentsClosed: totals.segmentsClosed,
                                          gaps: totals.gaps, deviceClockDriftPPM: totals.deviceClockDriftPPM))
    }

    /// "Running but recording nothing": every sample exactly zero for `silenceWarningAfter`.
    func checkSilence(of session: RecordingConsumer) {
        guard let limit = configuration.silenceWarningAfter, limit > 0, session.started,
              !session.isPaused.load(ordering: .relaxed) else { return }
        let silentFor = Double(CaptureEngine.uptime() &- session.writer.lastSignal.load(ordering: .relaxed)) / 1_000_000_000
        let current = published.warning.value
        if silentFor >= limit, current == nil {
            let since = Date().addingTimeInterval(-silentFor)
            let message = String(printf: "the input has been digital silence (every sample zero) for %.0f s: "
                                 + "muted, disconnected, or the wrong device?", silentFor)
            // Logged first: whoever sees the warning finds it in the journal.
            logger.warning("input is digital silence", metadata: ["device.name": "\(session.deviceName)",
                                                                   "silence.seconds": "\(Int(silentFor))"])
            published.warning.send(RecorderWarning(code: .digitalSilence, message: message, since: since))
        } else if silentFor < limit, current?.code == .digitalSilence {
            logger.notice("input signal is back", metadata: ["device.name": "\(session.deviceName)"])
            published.clearSilenceWarning()
        }
    }
}
