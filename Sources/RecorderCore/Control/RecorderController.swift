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

/// The recorder's control plane, behind the `Recorder` façade: every operation runs on one
/// executor, the serial `control` queue, which alone changes the state below (the recording's
/// session and plan, the engine, listening, taps, the scheduled start, the retry timer). The
/// parts are files of their own: +Recording (a recording's life), +Listening (the engine's
/// opening and closing, the meter, the pre-roll ring), +Tap, +DeviceWait, +StartAt, +Schedule,
/// +Spectrum, +Publishing (the timers and levels on demand); the storage guard and the system
/// clock's monitor are types of their own (`StorageGuard`, `SystemClockMonitor`), and what is
/// published is `RecorderOutputs`.
final class RecorderController: @unchecked Sendable {
    // @unchecked: `state` is touched only on `control`; the boxes (read by the watchdog, the
    // storage guard, the sync and timer queues and `status` without waiting for the executor)
    // are behind locks; everything else is immutable or Sendable.

    let published: RecorderOutputs
    let storageGuard: StorageGuard
    let clockMonitor: SystemClockMonitor
    /// Re-dates the files begun before the clock was synchronized, once it is.
    let redater: FileRedater
    /// When the controller was made (uptime ns): `[schedule] wait_for_clock` counts from here.
    let startedUptime = DispatchTime.now().uptimeNanoseconds
    /// The schedule is evaluated again whenever the clock steps or its synchronization changes.
    private let clockObservation = NIOLockedValueBox<ObservationToken?>(nil)
    let logger: Logger
    /// The one executor: every operation, one at a time.
    let control = DispatchQueue(label: "recd.recorder.control")
    /// The time and levels ticks. Never blocks, so it runs on the global pool (a worker per
    /// core), not on the overcommit pool: that one starts a worker whenever work arrives
    /// while its workers are busy or not yet awake, and keeps them all while ticks arrive
    /// (issue 49: one more, now and then, at a segment's end; doc/architecture.md, "Why the
    /// overcommit pool grows").
    let timerQueue = DispatchQueue(label: "recd.recorder.timer", target: .global())
    let configurationState: NIOLockedValueBox<RecorderConfiguration>
    let periods: NIOLockedValueBox<(currentTime: Double, levels: Double)>
    let activeSession = NIOLockedValueBox<RecordingConsumer?>(nil)
    /// The engine that owns the device, for the watchdog and `currentListeningStatus()`.
    let activeEngine = NIOLockedValueBox<CaptureEngine?>(nil)
    /// What listening attached to the engine, for `currentListeningStatus()` and the levels timer.
    let listeningParts = NIOLockedValueBox<(ring: PreRollRing?, meter: InputMeter?)>((nil, nil))
    /// A recording's timers publish levels (its file's): the listening meter stays quiet.
    let recordingPublishes = Atomic<Bool>(false)
    /// Who wants `levels` now (a socket subscriber, MQTT's telemetry), and how often, in
    /// seconds: the input is metered and levels are published only while someone does, as
    /// often as the most demanding asks (`levelsPeriod`). Nobody: no meter on the capture
    /// thread while listening, no levels timer, nothing encoded.
    let levelsWanted = NIOLockedValueBox<[String: Double]>([:])
    /// Who wants `spectrum` now.
    let spectrumWanted = NIOLockedValueBox<Set<String>>([])
    /// Who wants `currentTime` as it changes (a socket subscriber): nobody, and the recording's
    /// timer ticks once a second (`timePeriod`); `status` computes the time afresh anyway.
    let timeWanted = NIOLockedValueBox<Set<String>>([])
    /// The capture session the recording's timers publish, and its rate: set by
    /// `startTimers`, cleared by `stopTimers` before the session's frames join the ledger.
    let tickingSession = NIOLockedValueBox<(session: RecordingConsumer, rate: Int)?>(nil)

    /// A triggered recording's counts, for `status` across its capture sessions.
    let activeTrigger = NIOLockedValueBox<TriggerCounters?>(nil)
    /// Recording windows (changed on the control queue; read by `status`).
    let scheduling = NIOLockedValueBox(ScheduleRun())
    /// The taps and their clients (changed on the control queue; read by `status`).
    let tapGroups = NIOLockedValueBox<[TapGroup]>([])
    /// What the recording's ended capture sessions add up to; shared with the sync queue that
    /// announces segments and the timer queue that publishes.
    let ledger = NIOLockedValueBox(SessionLedger())

    /// Everything the executor changes, and only it: the recording's phase, the device, listening
    /// (+Phases, where every change of phase is).
    var state = ControlState()

    /// Listening, as asked: how much pre-roll, since when, and the device's wait.
    struct ListenPlan {
        var preRoll: Double
        var since: Date
        var configuration: RecorderConfiguration
        var wait: DeviceWait?
        /// A client (or `[listen] enabled`) asked to listen; false while the device is open
        /// only for taps: listening ends with the last tap.
        var requested = true
    }

    /// A recording's settings as they were when it started, for the segments after a gap.
    struct SessionPlan {
        var settings: RecordingSettings
        var segments: SegmentSettings
        var configuration: RecorderConfiguration
        /// nil while waiting for a device that was missing at the start.
        var files: SegmentFileFactory?
        var duration: Double?
        var frameLimit: Int64?
        var nextIndex = 1
        var gapStart: Date?
        /// Seconds of pre-roll the start asked for (nil: the configured length).
        var preRoll: Double?
        /// Sound-activated: a file per event (nil: every frame is written).
        var trigger: TriggerSettings?
        var triggerCounters = TriggerCounters()
    }

    /// Totals over the capture sessions a recording has had (one per device opening).
    struct SessionLedger {
        var frames: Int64 = 0
        var xruns = 0
        var framesLost: Int64 = 0
        var framesCaptured: Int64 = 0
        var segmentsClosed = 0
        var gaps: [Gap] = []
        var lastClosed: Segment?
        /// The last capture session's drift figure, kept once it ended.
        var deviceClockDriftPPM: Double?
    }

    init(configuration: RecorderConfiguration, clock: SystemClockSources, station: StationRecordings?, logger: Logger) {
        let configurationState = NIOLockedValueBox(configuration)
        let published = RecorderOutputs()
        self.configurationState = configurationState
        self.published = published
        self.periods = NIOLockedValueBox((configuration.timeInterval, configuration.levelsInterval))
        self.logger = logger
        self.storageGuard = StorageGuard(configuration: configurationState, activeSession: activeSession,
                                         published: published, station: station, logger: logger)
        let clockMonitor = SystemClockMonitor(sources: clock, publishing: published.clock, logger: logger)
        self.clockMonitor = clockMonitor
        self.redater = FileRedater(published: published, isSynchronized: { clockMonitor.isSynchronized }, logger: logger)
        // A step or a synchronization moves the windows (and may end a hold): now, not within the hour.
        let observation = published.clock.subscribe(on: control, delivery: .every, sendingCurrent: false) { [weak self] _ in
            self?.evaluateSchedule()
        }
        clockObservation.withLock { $0 = observation }
        // Files of this boot an earlier run of recd left waiting for the clock.
        redater.resume(directory: configuration.recordingsDirectory)
    }

    /// The configuration the next recording will use.
    var configuration: RecorderConfiguration { configurationState.withLock { $0 } }

    /// Replaces the configuration. A recording under way keeps what it started with.
    func reconfigure(_ configuration: RecorderConfiguration) {
        let previous = configurationState.withLock { state in defer { state = configuration }; return state }
        storageGuard.reconfigured(from: previous, to: configuration)
    }

    // MARK: Operations

    /// Opens the device and creates the file, ready for `record()`.
    @discardableResult
    func prepare(name: String? = nil, settings: RecordingSettings? = nil,
                 segments: SegmentSettings? = nil) throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in try prepareOnQueue(name: name, settings: settings, segments: segments) }
    }

    /// `Recorder.record`: prepares one with the default settings when none is prepared.
    @discardableResult
    func record(forDuration duration: Double? = nil, at date: Date? = nil) throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in
            if case .prepared = state.phase {} else if !state.isActive { try prepareOnQueue(name: nil, settings: nil, segments: nil) }
            return try recordOnQueue(duration: duration, at: date)
        }
    }

    /// `Recorder.start`: prepares and starts in one step.
    @discardableResult
    func start(name: String?, settings: RecordingSettings?, duration: Double? = nil,
               at date: Date? = nil, segments: SegmentSettings? = nil, preRoll: Double? = nil,
               trigger: TriggerSettings? = nil,
               unattended: Bool = false) throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in
            try startOnQueue(name: name, settings: settings, duration: duration, at: date, segments: segments,
                             preRoll: preRoll, trigger: trigger, unattended: unattended)
        }
    }

    /// `start` on the control queue (a schedule's window opening calls it there too).
    func startOnQueue(name: String?, settings: RecordingSettings?, duration: Double? = nil, at date: Date? = nil,
                      segments: SegmentSettings? = nil, preRoll: Double? = nil, trigger: TriggerSettings? = nil,
                      unattended: Bool = false, id: String? = nil) throws(RecorderError) -> Recording {
        do throws(RecorderError) {
            if let duration { try Self.validate(duration: duration) }
            if let trigger {
                try trigger.validate()
                if duration != nil {
                    throw RecorderError(.invalidSettings, "a triggered recording runs until stopped: it takes no 'duration' (a schedule's window ends it)")
                }
            }
            if let preRoll, let refusal = Limits.refusal("preRoll", preRoll, Limits.preRoll, "seconds") {
                throw RecorderError(.invalidSettings, refusal)
            }
            if let date, let refusal = Limits.refusal(at: date) { throw RecorderError(.invalidSettings, refusal) }
            if let date, date > Date() {
                return try scheduleStart(ScheduledStart(id: UUID().uuidString.lowercased(), name: name, settings: settings,
                                                   duration: duration, segments: segments, preRoll: preRoll, trigger: trigger,
                                                   date: date))
            }
            let prepared = try prepareOnQueue(name: name, settings: settings, segments: segments, operation: "start",
                                              id: id, waitingAllowed: date == nil, unattended: unattended,
                                              duration: duration, trigger: trigger.map { trigger in
                                                  var trigger = trigger
                                                  // The start's own pre-roll first, then the trigger's, then listening's.
                                                  trigger.preRoll = preRoll ?? trigger.preRoll ?? configuration.preRoll
                                                  return trigger
                                              })
            state.plan?.preRoll = preRoll
            if case .waiting = state.phase { return prepared }
            do throws(RecorderError) {
                return try recordOnQueue(duration: duration, at: date)
            } catch {
                discardPrepared()
                throw error
            }
        } catch {
            // Nobody waits for an unattended start's answer: its failure is the recorder's
            // state and error (status, MQTT, systemd's STATUS=), not only a line in the journal.
            // One refused because something else records is not a failure of the recorder.
            if unattended, error.code != .invalidState, published.error.value?.message != error.message { _ = fail(error) }
            throw error
        }
    }

    /// Stops capture; the file keeps what was recorded and `resume()` continues it.
    func pause() throws(RecorderError) {
        try onControl { () throws(RecorderError) in
            guard case .recording(let run, let session) = state.phase else { throw .invalidState("pause", published.state.value) }
            try session.pause()
            // A tick under way first: its time, sent together with its levels, is held back
            // until it ends, and would reach subscribers after `paused`.
            timerQueue.sync {}
            publishTime(of: session, rate: run.recording.sampleRate)
            if session.isPaused.load(ordering: .acquiring) {
                enterPaused()
                logger.info("recording paused", metadata: ["recording.id": "\(run.recording.id)"])
            }
        }
    }

    /// Continues a paused recording in the same file, without a gap.
    func resume() throws(RecorderError) {
        try onControl { () throws(RecorderError) in
            guard case .paused(let run, let session) = state.phase else { throw .invalidState("resume", published.state.value) }
            do throws(RecorderError) {
                try session.resume()
            } catch {
                // The capture thread has ended (or is stuck in the driver and is abandoned): finalize
                // now. The state says why the resume failed, whatever stopping the thread met.
                let ended = session.stop(timeout: configuration.stopTimeout)
                if case .failed(let other) = ended, other != error {
                    logger.warning("capture after the failed resume", metadata: ["error.message": "\(other.message)"])
                }
                _ = finalize(session, outcome: .failed(error), mayWait: false)
                throw error
            }
            enterResumed()
            logger.info("recording resumed", metadata: ["recording.id": "\(run.recording.id)"])
        }
    }

    /// Closes the current segment at the last frame captured and continues in the next file,
    /// without losing or repeating a frame. Returns the closed segment; it is announced on
    /// `closedSegment` once finalized.
    @discardableResult
    func split() throws(RecorderError) -> Segment {
        try onControl { () throws(RecorderError) in
            guard case .recording(_, let session) = state.phase else { throw .invalidState("split", published.state.value) }
            guard let closed = session.split() else {
                if session.hasEnded {
                    throw RecorderError(.invalidState, "cannot split: the recording has just ended (its duration was reached, or capture failed)")
                }
                throw RecorderError(.invalidState, "cannot split: the current segment holds no audio yet")
            }
            updateCurrentSegment(of: session)
            logger.info("recording split", metadata: ["recording.id": "\(closed.recordingId)", "segment.path": "\(closed.path)"])
            return closed
        }
    }

    /// Ends the recording: flushes, finalizes and renames the file. Returns the finished recording.
    @discardableResult
    func stop() throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in try stopOnQueue() }
    }

    /// `stop` on the control queue.
    func stopOnQueue() throws(RecorderError) -> Recording {
        do {
            if case .waiting = state.phase { return endWaiting() }
            if let scheduled = endScheduledStart() { return scheduled }
            guard let session = state.session else { throw .invalidState("stop", published.state.value) }
            let outcome: CaptureOutcome
            if session.started {
                enterStopping()
                outcome = session.stop(timeout: configuration.stopTimeout)
            } else {
                cancelStartTimer()
                outcome = .stopped
            }
            let (finished, failure) = finalize(session, outcome: outcome, mayWait: false)
            if let failure, failure.code == .failedToSave { throw failure }
            return finished
        }
    }

    /// Ends the recording and deletes its file.
    func cancel() throws(RecorderError) {
        try onControl { () throws(RecorderError) in
            if case .waiting(let run, _) = state.phase {
                cancelRetry()
                published.currentTime.send(0)
                published.recording.send(nil)
                enterIdle()
                returnToListeningOrClose()
                let recording = run.recording
                logger.info("recording cancelled", metadata: ["recording.id": "\(recording.id)"])
                return
            }
            if endScheduledStart() != nil { return }
            guard let session = state.session, let recording = state.current else { throw .invalidState("cancel", published.state.value) }
            if session.started { _ = session.stop(timeout: configuration.stopTimeout) } else { cancelStartTimer() }
            stopTimers()
            session.writer.discardFile()
            // The segment being written goes; segments already closed were announced and stay.
            unlink(session.writer.currentSegment.withLock { $0.partialPath })
            published.clearSilenceWarning()
            published.currentTime.send(0)
            published.recording.send(nil)
            enterIdle()
            returnToListeningOrClose()
            logger.info("recording cancelled", metadata: ["recording.id": "\(recording.id)"])
        }
    }

    /// Whether capture is making progress: true unless the device is running (listening or
    /// recording) and the capture thread has not read from it for `maximumSilence`. The watchdog asks this.
    func captureIsHealthy(maximumSilence: Duration) -> Bool {
        activeEngine.withLock { engine in
            guard let engine, engine.isDeviceRunning, !engine.hasEnded else { return true }
            let silence = CaptureEngine.uptime() &- engine.lastProgressUptime
            let (seconds, attoseconds) = maximumSilence.components
            return silence <= UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
        }
    }

    /// Runs `body` on the recorder's queue, where no recording starts, splits or finishes
    /// meanwhile, with the file name (`take.wav`) the recording in progress will have: what
    /// renaming or deleting recordings must leave alone.
    func withRecordingsDirectory<T, E: Error>(
        _ body: (RecordingLibrary, _ activeFile: String?) throws(E) -> T
    ) throws(E) -> T {
        let result: Result<T, E> = control.sync {
            let library = RecordingLibrary(directory: configuration.recordingsDirectory)
            // The segment being written, as `recordings.*` name it: its path below the directory.
            let prefix = configuration.recordingsDirectory + "/"
            let active = state.session == nil ? nil
                : state.current.flatMap { $0.path.hasPrefix(prefix) ? String($0.path.dropFirst(prefix.count)) : nil }
            return Result { () throws(E) in try body(library, active) }
        }
        return try result.get()
    }

    /// From now on `prepare` and `start` are refused (`invalidState`): what a daemon calls
    /// before its final `stop`, so that no request still in flight starts a recording after it.
    func refuseNewRecordings() {
        control.sync { state.refusingRecordings = true }
    }
}
