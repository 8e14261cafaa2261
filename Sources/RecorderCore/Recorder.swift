import ALSA
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import RecorderModel
import Sndfile
import Synchronization
import SystemPackage



/// Records from an ALSA device to files, one recording at a time, and publishes what it is
/// doing through `Observed` values.
///
/// Operations are synchronous and may be called from any thread (but not from inside a
/// subscriber handler running on the recorder's own queues, which none are by default).
/// They run one at a time on a private serial queue; capture runs on a thread of its own;
/// `currentTime` and `levels` are published by timers on a third queue.
public final class Recorder: @unchecked Sendable {
    // @unchecked: `session`, `current`, `plan`, the timers, `retryTimer` and `openedDevices` are touched only on
    // `control`, a serial queue; `activeSession` (read by the watchdog), `configurationState`
    // and `ledger` (also used by the sync and timer queues) are behind locks; `storageTimer` is
    // set in init only; `storageMonitor` is behind its lock and retention passes behind
    // `retentionLock`; everything else is immutable or Sendable.

    /// idle → preparing → recording ⇄ paused → stopping → finished (or failed); recording ⇄
    /// waitingForDevice while a lost device is away.
    public let state = Observed<RecorderState>(.idle)
    /// Seconds in the file so far (frames written / file rate): pauses excluded, sample-accurate.
    public let currentTime = Observed<Double>(0)
    /// The last failure, cleared when a new recording is prepared.
    public let error = Observed<RecorderError?>(nil)
    /// Per-channel levels, published every `levelsInterval` while recording with metering on.
    public let levels = Observed<Levels>(.none)
    /// The current (or last) recording.
    public let recording = Observed<Recording?>(nil)
    /// How often `currentTime` and `levels` are published while recording, in seconds: the
    /// periods of the timers running, or that ran last (the configuration's until the first
    /// recording starts them). A reload during a recording does not change its timers.
    public var publishingPeriods: (currentTime: Double, levels: Double) { periods.withLock { $0 } }
    /// Overruns, frames lost, segments and device gaps in the current recording.
    public let statistics = Observed<CaptureStatistics>(CaptureStatistics())
    /// The last segment closed and finalized (its `.part` renamed), with its frames, overruns
    /// and the gap before it. Each closed segment is sent once, in order: subscribe with
    /// `delivery: .every` to see them all (uploaders, the socket's `segment` topic).
    public let closedSegment = Observed<Segment?>(nil)
    /// A condition worth attention that does not stop the recording (digital silence, low disk
    /// space); nil when there is none.
    public let warning = Observed<RecorderWarning?>(nil)
    /// Free and used space on the recordings' filesystem, the guard's levels and what retention
    /// deletes next; measured every `storage.checkInterval`.
    public let storage = Observed<StorageStatus?>(nil)
    /// While listening (the device open for levels and pre-roll, with or without a
    /// recording): the device, its format and the pre-roll; nil otherwise. Published when
    /// listening begins, ends, waits for its device or resumes; `listeningStatus()` has the
    /// figures of the moment.
    public let listening = Observed<ListeningStatus?>(nil)
    /// The last file retention deleted. Each deletion is sent once, in order: subscribe with
    /// `delivery: .every` to see them all (the socket's `retention` topic).
    public let retentionDeletion = Observed<RetentionDeletion?>(nil)
    /// A triggered recording's last event opened, closed or discarded. Each is sent once, in
    /// order: subscribe with `delivery: .every` to see them all (the socket's `trigger` topic).
    public let triggerEvent = Observed<TriggerEvent?>(nil)
    /// The input's spectrum, one column per 50 ms, while the device is open and someone wants
    /// it (`setSpectrumWanted`); nil otherwise.
    public let spectrum = Observed<Spectrum?>(nil)

    let logger: Logger
    let control = DispatchQueue(label: "recd.recorder.control")
    let timerQueue = DispatchQueue(label: "recd.recorder.timer")
    let configurationState: NIOLockedValueBox<RecorderConfiguration>
    let periods: NIOLockedValueBox<(currentTime: Double, levels: Double)>
    let activeSession = NIOLockedValueBox<RecordingConsumer?>(nil)
    /// The engine that owns the device, for the watchdog and `listeningStatus()`.
    let activeEngine = NIOLockedValueBox<CaptureEngine?>(nil)
    /// What listening attached to the engine, for `listeningStatus()` and the levels timer.
    let listeningParts = NIOLockedValueBox<(ring: PreRollRing?, meter: InputMeter?)>((nil, nil))
    /// A recording's timers publish levels (its file's): the listening meter stays quiet.
    let recordingPublishes = Atomic<Bool>(false)
    /// Who wants `levels` now (a socket subscriber, MQTT's telemetry), and how often, in
    /// seconds: the input is metered and levels are published only while someone does, as
    /// often as the most demanding asks (`levelsPeriod`). Nobody: no meter on the capture
    /// thread while listening, no levels timer, nothing encoded.
    let levelsWanted = NIOLockedValueBox<[String: Double]>([:])
    /// Who wants `spectrum` now, and the node computing it (control queue).
    let spectrumWanted = NIOLockedValueBox<Set<String>>([])
    var spectrumNode: (node: SpectrumNode, engine: UInt64)?
    /// Where free space is measured and retention runs, off the control and capture paths.
    let storageQueue = DispatchQueue(label: "recd.recorder.storage")
    let storageMonitor = NIOLockedValueBox(StorageMonitorState())
    let retentionLock = NIOLock()
    var storageTimer: DispatchSourceTimer?

    var session: RecordingConsumer?
    /// The capture engine: open while listening or recording (control queue).
    var engine: CaptureEngine?
    /// Listening's settings while it is on (control queue).
    var listenPlan: ListenPlan?
    /// A triggered recording's counts, for `status` across its capture sessions.
    let activeTrigger = NIOLockedValueBox<TriggerCounters?>(nil)
    /// Recording windows (changed on the control queue; read by `status`).
    let scheduling = NIOLockedValueBox(ScheduleRun())
    /// The taps and their clients (changed on the control queue; read by `status`).
    let tapGroups = NIOLockedValueBox<[TapGroup]>([])
    var nextTapID = 1
    var listenTimer: DispatchSourceTimer?
    /// Set once the daemon is shutting down: no recording may start after the last `stop`.
    var refusingRecordings = false
    var current: Recording?
    var timers: [DispatchSourceTimer] = []
    var startTimer: DispatchSourceTimer?
    /// A `start` at a later time (`at`): nothing is opened or created until then.
    var scheduledStart: ScheduledStart?
    /// The recording (session) under way: what every one of its segments is made with.
    var plan: SessionPlan?
    var retryTimer: DispatchSourceTimer?
    /// The devices this recorder has opened at least once: known to exist, so waited for when
    /// they are missing (see `start`).
    var openedDevices: Set<String> = []
    /// What the recording's ended capture sessions add up to; shared with the sync queue that
    /// announces segments and the timer queue that publishes.
    let ledger = NIOLockedValueBox(SessionLedger())

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

    public init(configuration: RecorderConfiguration, logger: Logger = Logger(label: "recd.recorder")) {
        self.configurationState = NIOLockedValueBox(configuration)
        self.periods = NIOLockedValueBox((configuration.timeInterval, configuration.levelsInterval))
        self.logger = logger
        storageMonitor.withLock { $0.beginGrace(configuration.retention) }
        storageTimer = startStorageMonitor()
    }

    deinit { storageTimer?.cancel() }

    /// The configuration the next recording will use.
    public var configuration: RecorderConfiguration { configurationState.withLock { $0 } }

    /// Replaces the configuration. A recording under way keeps what it started with.
    public func reconfigure(_ configuration: RecorderConfiguration) {
        let previous = configurationState.withLock { state in defer { state = configuration }; return state }
        if previous.storage.checkInterval != configuration.storage.checkInterval, let storageTimer {
            scheduleStorageTimer(storageTimer, interval: configuration.storage.checkInterval)
        }
        if previous.retention != configuration.retention {
            storageMonitor.withLock { $0.beginGrace(configuration.retention) }
            requestRetentionPass()
        }
    }

    // MARK: Operations

    /// Opens the device and creates the file, ready for `record()`.
    @discardableResult
    public func prepare(name: String? = nil, settings: RecordingSettings? = nil,
                        segments: SegmentSettings? = nil) throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in try prepareOnQueue(name: name, settings: settings, segments: segments) }
    }

    /// Starts (or, with `at`, schedules) a recording. Prepares one with the default settings
    /// when none is prepared.
    ///
    /// - Parameters:
    ///   - duration: record exactly this long: the file will hold `round(duration × rate)` frames.
    ///   - date: start at this wall-clock time; the recorder stays `preparing` until then.
    @discardableResult
    public func record(forDuration duration: Double? = nil, at date: Date? = nil) throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in
            if case .preparing = state.value {} else { try prepareOnQueue(name: nil, settings: nil, segments: nil) }
            return try recordOnQueue(duration: duration, at: date)
        }
    }

    /// Prepares and starts in one step: what a daemon's `start` request does. When the device
    /// is missing and `waitForDevice` is on, the recording waits for it (`waitingForDevice`)
    /// instead of failing, unless it is scheduled (`at`).
    ///
    /// A device ALSA cannot find at all (`hw:9,9`, a misspelt name) that this recorder has
    /// never opened is refused (`deviceNotFound`) rather than waited for, unless the start is
    /// `unattended`: someone who just typed the name is better told at once than left waiting
    /// for a device that will never come. A device that has been opened before (unplugged
    /// since) is waited for, and so is any device for an unattended start (autostart, a
    /// schedule's window: a USB device may appear after boot).
    ///
    /// A single file's name that is taken is refused, unless `unattended`: then the recording
    /// takes the first free numbered name (`fg-2`, `fg-3`…), so a station whose autostart has
    /// a fixed name records again after every restart instead of sitting idle.
    @discardableResult
    ///
    /// While listening, the recording takes the device as listening opened it (converting
    /// to the file's rate and channels) and begins with `preRoll` seconds of the input from
    /// before (the configured length when nil; less when listening began more recently).
    /// `duration` counts from now, not from the pre-roll.
    ///
    /// With a `trigger` the recording is sound-activated: it listens, and writes a file per
    /// event (a segment each, named from the segment template) that begins `trigger.preRoll`
    /// (else `preRoll`, else the configured length) before the sound and ends `hang` after
    /// it; `maximumLength` replaces the segment length. It runs until stopped: no duration.
    public func start(name: String?, settings: RecordingSettings?, duration: Double? = nil,
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
            plan?.preRoll = preRoll
            if case .waitingForDevice = state.value { return prepared }
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
            if unattended, error.code != .invalidState, self.error.value?.message != error.message { _ = fail(error) }
            throw error
        }
    }

    /// Stops capture; the file keeps what was recorded and `resume()` continues it.
    public func pause() throws(RecorderError) {
        try onControl { () throws(RecorderError) in
            guard case .recording(let recording) = state.value, let session else {
                throw .invalidState("pause", state.value)
            }
            try session.pause()
            // A tick under way first: its time, sent together with its levels, is held back
            // until it ends, and would reach subscribers after `paused`.
            timerQueue.sync {}
            publishTime(of: session, rate: recording.sampleRate)
            if session.isPaused.load(ordering: .acquiring) {
                state.send(.paused(recording))
                logger.info("recording paused", metadata: ["recording.id": "\(recording.id)"])
            }
        }
    }

    /// Continues a paused recording in the same file, without a gap.
    public func resume() throws(RecorderError) {
        try onControl { () throws(RecorderError) in
            guard case .paused(let recording) = state.value, let session else {
                throw .invalidState("resume", state.value)
            }
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
            state.send(.recording(recording))
            logger.info("recording resumed", metadata: ["recording.id": "\(recording.id)"])
        }
    }

    /// Closes the current segment at the last frame captured and continues in the next file,
    /// without losing or repeating a frame. Returns the closed segment; it is announced on
    /// `closedSegment` once finalized.
    @discardableResult
    public func split() throws(RecorderError) -> Segment {
        try onControl { () throws(RecorderError) in
            guard case .recording = state.value, let session else { throw .invalidState("split", state.value) }
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
    public func stop() throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in try stopOnQueue() }
    }

    /// `stop` on the control queue.
    func stopOnQueue() throws(RecorderError) -> Recording {
        do {
            if case .waitingForDevice = state.value { return endWaiting() }
            if let scheduled = endScheduledStart() { return scheduled }
            guard let session, let recording = current, state.value.isActive else {
                throw .invalidState("stop", state.value)
            }
            let outcome: CaptureOutcome
            if session.started {
                state.send(.stopping(recording))
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
    public func cancel() throws(RecorderError) {
        try onControl { () throws(RecorderError) in
            if case .waitingForDevice(let recording, _) = state.value {
                cancelRetry()
                clearSession()
                plan = nil
                currentTime.send(0)
                self.recording.send(nil)
                state.send(listenPlan == nil ? .idle : .listening)
                returnToListeningOrClose()
                logger.info("recording cancelled", metadata: ["recording.id": "\(recording.id)"])
                return
            }
            if endScheduledStart() != nil { return }
            guard let session, let recording = current, state.value.isActive else {
                throw .invalidState("cancel", state.value)
            }
            if session.started { _ = session.stop(timeout: configuration.stopTimeout) } else { cancelStartTimer() }
            stopTimers()
            session.discardFile()
            // The segment being written goes; segments already closed were announced and stay.
            unlink(session.currentSegment.withLock { $0.partialPath })
            clearSession()
            plan = nil
            clearSilenceWarning()
            currentTime.send(0)
            self.recording.send(nil)
            state.send(listenPlan == nil ? .idle : .listening)
            returnToListeningOrClose()
            logger.info("recording cancelled", metadata: ["recording.id": "\(recording.id)"])
        }
    }

    /// Whether capture is making progress: true unless the device is running (listening or
    /// recording) and the capture thread has not read from it for `maximumSilence`. The watchdog asks this.
    public func captureIsHealthy(maximumSilence: Duration) -> Bool {
        activeEngine.withLock { engine in
            guard let engine, engine.isRunning.load(ordering: .acquiring), !engine.hasEnded else { return true }
            let silence = CaptureEngine.uptime() &- engine.lastProgress.load(ordering: .relaxed)
            let (seconds, attoseconds) = maximumSilence.components
            return silence <= UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
        }
    }

    /// Runs `body` on the recorder's queue, where no recording starts, splits or finishes
    /// meanwhile, with the file name (`take.wav`) the recording in progress will have: what
    /// renaming or deleting recordings must leave alone.
    public func withRecordingsDirectory<T, E: Error>(
        _ body: (RecordingLibrary, _ activeFile: String?) throws(E) -> T
    ) throws(E) -> T {
        let result: Result<T, E> = control.sync {
            let library = RecordingLibrary(directory: configuration.recordingsDirectory)
            // The segment being written, as `recordings.*` name it: its path below the directory.
            let prefix = configuration.recordingsDirectory + "/"
            let active = session == nil ? nil
                : current.flatMap { $0.path.hasPrefix(prefix) ? String($0.path.dropFirst(prefix.count)) : nil }
            return Result { () throws(E) in try body(library, active) }
        }
        return try result.get()
    }

    /// From now on `prepare` and `start` are refused (`invalidState`): what a daemon calls
    /// before its final `stop`, so that no request still in flight starts a recording after it.
    public func refuseNewRecordings() {
        control.sync { refusingRecordings = true }
    }
}
