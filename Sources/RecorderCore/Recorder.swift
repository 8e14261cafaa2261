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

/// How the recorder captures, where it writes, and how often it publishes.
public struct RecorderConfiguration: Sendable, Equatable {
    /// The ALSA PCM to capture from.
    public var device: String
    /// Where recordings are written; created if missing.
    public var recordingsDirectory: String
    /// What `record()` uses when no settings are given.
    public var defaultSettings: RecordingSettings
    /// Seconds between `currentTime` publications while recording.
    public var timeInterval: Double
    /// Seconds between `levels` publications while recording.
    public var levelsInterval: Double
    /// Whether levels are measured at all.
    public var meteringEnabled: Bool
    /// Levels only while someone says it wants them (`Recorder.setLevelsWanted`): the daemon,
    /// whose clients subscribe through its socket and MQTT. false: always (a program that
    /// observes `levels` itself).
    public var levelsOnDemand: Bool
    /// Seconds between header refresh + fsync: what a killed process can lose at most.
    public var syncInterval: Double
    /// The device period, seconds: the latency of the first frame and of level updates.
    public var periodTime: Double
    /// The device buffer, seconds: how long capture can stall before an overrun.
    public var bufferTime: Double
    /// The write buffer between the capture thread and the file's writer, seconds of the
    /// device's audio: how long the disk may stall with nothing lost (`Limits.writeBuffer`).
    public var writeBuffer: Double
    /// Capture at this rate whatever the file's rate, converting with soxr (nil: ask the
    /// device for the file's rate, converting only if it cannot deliver it).
    public var captureSampleRate: Int?
    /// Capture this many channels whatever the file's count, mixing in software.
    public var captureChannels: Int?
    /// Seconds `stop`, `cancel` and shutdown wait for the capture thread; one stuck in the
    /// driver longer is abandoned and the file finalized with what it wrote.
    public var stopTimeout: Double
    /// How recordings are cut into files when `start` does not say.
    public var segments: SegmentSettings
    /// When the device goes away (or is missing at `start`), wait for it and continue in a new
    /// segment instead of ending the recording with `deviceLost`.
    public var waitForDevice: Bool
    /// The longest pause between two attempts to open a lost device, seconds (the first
    /// attempts come sooner: 0.1 s, doubling).
    public var maximumRetryInterval: Double
    /// Seconds of exact digital silence after which `warning` says so; nil: never.
    public var silenceWarningAfter: Double?
    /// The space guard: what stays free on the recordings' filesystem.
    public var storage: StorageSettings
    /// Which finished recordings are deleted by themselves, oldest first.
    public var retention: RetentionSettings
    /// Seconds of input kept while listening, put at the beginning of a recording started
    /// then (`Limits.preRoll`).
    public var preRoll: Double
    /// What a triggered `start` detects with, unless it says otherwise (`[trigger]`).
    public var trigger: TriggerSettings

    public init(device: String = "default", recordingsDirectory: String,
                defaultSettings: RecordingSettings = RecordingSettings(),
                timeInterval: Double = 0.1, levelsInterval: Double = 0.05, meteringEnabled: Bool = true,
                levelsOnDemand: Bool = false,
                syncInterval: Double = 1.0, periodTime: Double = 0.01, bufferTime: Double = 0.5, writeBuffer: Double = 10,
                captureSampleRate: Int? = nil, captureChannels: Int? = nil, stopTimeout: Double = 5,
                segments: SegmentSettings = SegmentSettings(), waitForDevice: Bool = true,
                maximumRetryInterval: Double = 1.5, silenceWarningAfter: Double? = 60,
                storage: StorageSettings = StorageSettings(), retention: RetentionSettings = RetentionSettings(),
                preRoll: Double = 5, trigger: TriggerSettings = TriggerSettings()) {
        self.trigger = trigger
        self.device = device
        self.recordingsDirectory = recordingsDirectory
        self.defaultSettings = defaultSettings
        self.timeInterval = timeInterval
        self.levelsInterval = levelsInterval
        self.meteringEnabled = meteringEnabled
        self.levelsOnDemand = levelsOnDemand
        self.syncInterval = syncInterval
        self.periodTime = periodTime
        self.bufferTime = bufferTime
        self.writeBuffer = writeBuffer
        self.captureSampleRate = captureSampleRate
        self.captureChannels = captureChannels
        self.stopTimeout = stopTimeout
        self.segments = segments
        self.waitForDevice = waitForDevice
        self.maximumRetryInterval = maximumRetryInterval
        self.silenceWarningAfter = silenceWarningAfter
        self.storage = storage
        self.retention = retention
        self.preRoll = preRoll
    }
}

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
    private let timerQueue = DispatchQueue(label: "recd.recorder.timer")
    private let configurationState: NIOLockedValueBox<RecorderConfiguration>
    private let periods: NIOLockedValueBox<(currentTime: Double, levels: Double)>
    let activeSession = NIOLockedValueBox<RecordingConsumer?>(nil)
    /// The engine that owns the device, for the watchdog and `listeningStatus()`.
    let activeEngine = NIOLockedValueBox<CaptureEngine?>(nil)
    /// What listening attached to the engine, for `listeningStatus()` and the levels timer.
    let listeningParts = NIOLockedValueBox<(ring: PreRollRing?, meter: InputMeter?)>((nil, nil))
    /// A recording's timers publish levels (its file's): the listening meter stays quiet.
    let recordingPublishes = Atomic<Bool>(false)
    /// Who wants `levels` now (a socket subscriber, MQTT's telemetry): the input is metered
    /// and levels are published only while someone does. Nobody: no meter on the capture
    /// thread while listening, no levels timer, nothing encoded.
    private let levelsWanted = NIOLockedValueBox<Set<String>>([])
    /// Who wants `spectrum` now, and the node computing it (control queue).
    let spectrumWanted = NIOLockedValueBox<Set<String>>([])
    var spectrumNode: (node: SpectrumNode, engine: UInt64)?
    /// Where free space is measured and retention runs, off the control and capture paths.
    let storageQueue = DispatchQueue(label: "recd.recorder.storage")
    let storageMonitor = NIOLockedValueBox(StorageMonitorState())
    let retentionLock = NIOLock()
    private var storageTimer: DispatchSourceTimer?

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
    private var timers: [DispatchSourceTimer] = []
    private var startTimer: DispatchSourceTimer?
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
                if session.hasEnded { throw .invalidState("split", state.value) }
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

    // MARK: On the control queue

    func onControl<T>(_ body: () throws(RecorderError) -> T) throws(RecorderError) -> T {
        let result: Result<T, RecorderError> = control.sync { Result { () throws(RecorderError) in try body() } }
        return try result.get()
    }

    @discardableResult
    private func prepareOnQueue(name: String?, settings: RecordingSettings?, segments: SegmentSettings?,
                                operation: String = "prepare a recording", id: String? = nil, waitingAllowed: Bool = false,
                                unattended: Bool = false, duration: Double? = nil,
                                trigger: TriggerSettings? = nil) throws(RecorderError) -> Recording {
        switch state.value {
        case .idle, .listening, .finished, .failed: break
        case .preparing where scheduledStart?.id == id && id != nil: break  // its time has come
        default: throw .invalidState(operation, state.value)
        }
        if refusingRecordings { throw RecorderError(.invalidState, "cannot \(operation): recd is shutting down") }
        let configuration = self.configuration
        let settings = settings ?? configuration.defaultSettings
        try settings.validate()
        var segments = segments ?? configuration.segments
        if let trigger {
            // A file per event, cut at the maximum length, named after its first frame.
            segments.length = trigger.maximumLength
            segments.alignToClock = false
            segments.template = segments.template ?? (segments.localTime ? SegmentSettings.localSegments : SegmentSettings.utcSegments)
        }
        try segments.validate()
        if let name { try RecordingName.validate(name) }
        let directory = configuration.recordingsDirectory
        if let errnoValue = Self.makeDirectory(directory) {
            throw fail(RecorderError(.failedToBegin, "cannot create recordings directory \(directory): \(Self.reason(errnoValue))"))
        }
        try checkSpaceBeforeStart(configuration)
        let fileExtension = settings.format.fileExtension
        var name = name ?? Self.firstFreeName("recording-" + CalendarTime.format(Date(), "%Y-%m-%dT%H-%M-%S"),
                                              in: directory, fileExtension: fileExtension)
        let template = segments.effectiveTemplate
        if template == SegmentSettings.single, Self.isTaken(name, in: directory, fileExtension: fileExtension) {
            // One file named after the recording: a name in use is a client's mistake, not a
            // new segment; an unattended start numbers it instead.
            guard unattended else {
                throw RecorderError(.invalidSettings, "a recording named '\(name)' already exists at \(directory)/\(name).\(fileExtension)")
            }
            name = Self.firstFreeName(name, in: directory, fileExtension: fileExtension)
        }
        var plan = SessionPlan(settings: settings, segments: segments, configuration: configuration, duration: duration)
        plan.trigger = trigger
        activeTrigger.withLock { $0 = trigger == nil ? nil : plan.triggerCounters }
        let id = id ?? UUID().uuidString.lowercased()

        let engine: CaptureEngine
        if let listening = self.engine {
            // Listening: the device is open and stays as it is.
            engine = listening
        } else {
            do throws(ALSAError) {
                engine = try openEngine(configuration, settings)
            } catch {
                let unknown = error.isUnknownDevice && !openedDevices.contains(configuration.device)
                guard waitingAllowed, configuration.waitForDevice, Self.mayComeBack(error), !unknown || unattended else {
                    throw fail(.opening(error))
                }
                return startWaiting(id: id, name: name, plan: plan, error: .opening(error))
            }
        }
        let pcmConfiguration = engine.configuration
        let files: SegmentFileFactory
        do throws(RecorderError) {
            files = try makeFiles(id: id, name: name, plan: plan, device: pcmConfiguration)
        } catch {
            closeEngineIfUnused()
            throw error
        }
        plan.files = files
        let writer: (any AudioFileWriter)?
        let segment: Segment
        do throws(RecorderError) {
            try trigger?.validate(deviceRate: pcmConfiguration.sampleRate)
            // A triggered recording creates its files as events open.
            (writer, segment) = trigger == nil ? try files.create(index: 1, startedAt: Date()) : (nil, files.placeholder(index: 1))
        } catch {
            closeEngineIfUnused()
            throw error.code == .invalidSettings ? error : fail(RecorderError(.failedToBegin, error.message))
        }
        plan.nextIndex = writer == nil ? 1 : 2
        let session: RecordingConsumer
        do throws(RecorderError) {
            session = try makeSession(engine: engine, writer: writer, segment: segment,
                                      files: files, plan: plan, frameLimit: nil)
        } catch {
            if writer != nil { unlink(segment.partialPath) }
            closeEngineIfUnused()
            throw error
        }

        var recording = Recording(
            id: id, name: name, path: segment.path, format: settings.format,
            sampleRate: files.sampleRate, channels: files.channels, bitDepth: settings.effectiveBitDepth,
            quality: settings.quality, device: configuration.device,
            deviceFormat: DeviceFormat(pcmConfiguration), segment: writer == nil ? nil : segment, segmentSettings: segments)
        recording.trigger = trigger
        self.plan = plan
        self.session = session
        activeSession.withLock { $0 = session }
        current = recording
        ledger.withLock { $0 = SessionLedger() }
        error.send(nil)
        clearSilenceWarning()
        currentTime.send(0)
        statistics.send(CaptureStatistics())
        levels.send(Levels(channels: Array(repeating: .silence, count: files.channels), clipCount: 0))
        self.recording.send(recording)
        state.send(.preparing(recording))
        logger.info("recording prepared", metadata: [
            "recording.id": "\(recording.id)", "recording.path": "\(segment.path)", "device.name": "\(configuration.device)",
            "device.format": "\(pcmConfiguration.sampleFormat.rawValue)/\(pcmConfiguration.sampleRate)/\(pcmConfiguration.channels)",
        ])
        return recording
    }

    /// Opens and configures the capture device for `settings` (listening: the default settings).
    static func openDevice(_ configuration: RecorderConfiguration,
                                   _ settings: RecordingSettings) throws(ALSAError) -> (CapturePCM, PCMConfiguration) {
        let pcm = try CapturePCM(name: configuration.device)
        let pcmConfiguration = try pcm.configure(
            sampleFormat: settings.preferredCaptureFormat,
            sampleRate: configuration.captureSampleRate ?? settings.sampleRate,
            channels: configuration.captureChannels ?? settings.channels,
            periodMicroseconds: Int(configuration.periodTime * 1_000_000),
            bufferMicroseconds: Int(configuration.bufferTime * 1_000_000))
        return (pcm, pcmConfiguration)
    }

    /// Whether waiting may heal a device error: the device is missing, gone or busy. Not a
    /// refusal (no permission) or a format it cannot deliver.
    static func mayComeBack(_ error: ALSAError) -> Bool {
        ![EACCES, EPERM, EINVAL, ENOMEM, ENOSYS].contains(error.errno)
    }

    /// The file format, rate and channels for a recording, from its settings and what the
    /// device delivers (the first time it opens).
    func makeFiles(id: String, name: String, plan: SessionPlan,
                           device: PCMConfiguration) throws(RecorderError) -> SegmentFileFactory {
        let settings = plan.settings
        let fileRate = settings.sampleRate ?? settings.format.fileRate(forDeviceRate: device.sampleRate)
        let fileChannels = settings.channels ?? Swift.min(device.channels, settings.format.maximumChannels)
        if let format = settings.soundFileFormat,
           !SoundFileFormat.isWritable(format, sampleRate: fileRate, channels: fileChannels) {
            throw RecorderError(.invalidSettings,
                "\(settings.format.rawValue) cannot hold \(fileChannels) channel(s) at \(fileRate) Hz")
        }
        return SegmentFileFactory(
            directory: plan.configuration.recordingsDirectory, template: plan.segments.effectiveTemplate,
            localTime: plan.segments.localTime, name: name, recordingId: id,
            fileExtension: settings.format.fileExtension, settings: settings, sampleRate: fileRate,
            channels: fileChannels)
    }

    func makeSession(engine: CaptureEngine, writer: (any AudioFileWriter)?,
                             segment: Segment, files: SegmentFileFactory, plan: SessionPlan,
                             frameLimit: Int64?) throws(RecorderError) -> RecordingConsumer {
        let gate = plan.trigger.map { trigger in
            EventGate(settings: trigger, preRoll: trigger.preRoll ?? plan.configuration.preRoll,
                      configuration: engine.configuration, counters: plan.triggerCounters, firstIndex: plan.nextIndex,
                      announce: { [weak self] event in self?.triggerEvent.send(event) })
        }
        return try RecordingConsumer(
            engine: engine, writer: writer, segment: segment, files: files,
            clock: SegmentClock(settings: plan.segments, rate: files.sampleRate), gate: gate,
            segmentClosed: { [weak self, directory = files.directory] segment, failure in
                self?.segmentClosed(segment, failure: failure, directory: directory)
            },
            segmentStarted: { [weak self] in
                guard let self else { return }
                control.async {
                    guard let session = self.session else { return }
                    if let gap = session.currentSegment.withLock({ $0.gapBefore }) {
                        self.ledger.withLock { ledger in
                            if let last = ledger.gaps.indices.last, ledger.gaps[last].start == gap.start { ledger.gaps[last] = gap }
                        }
                    }
                    self.updateCurrentSegment(of: session)
                }
            },
            fileRate: files.sampleRate, fileChannels: files.channels, converterQuality: plan.settings.quality,
            frameLimit: frameLimit, metering: plan.configuration.meteringEnabled,
            syncInterval: plan.configuration.syncInterval,
            spaceGuard: makeSpaceGuard(plan.configuration, settings: plan.settings, fileRate: files.sampleRate,
                                       fileChannels: files.channels),
            sixteenBitFile: plan.settings.effectiveBitDepth == 16,
            writeBuffer: plan.configuration.writeBuffer,
            preRollRoom: plan.trigger == nil && listenPlan != nil ? Swift.max(plan.preRoll ?? 0, listenPlan?.preRoll ?? 0) : 0,
            gapFound: { [weak self] gap, frames in self?.gapFound(gap, frames: frames) })
    }

    /// The recording's write buffer now; nil when nothing records. Any thread.
    public func currentWriteBuffer() -> WriteBufferStatus? {
        guard state.value.isActive, let session = activeSession.withLock({ $0 }), session.started else { return nil }
        let (held, peak) = session.writeBufferFill
        return WriteBufferStatus(capacity: Double(session.worker.ring.capacityBytes) / Double(session.configuration.bytesPerFrame)
                                     / Double(session.configuration.sampleRate),
                                 bytes: session.worker.ring.bytes, held: held, peak: peak,
                                 overflows: session.writeBufferOverflows.load(ordering: .relaxed))
    }

    /// The worker found audio lost between two chunks (the device overran, or the disk fell
    /// behind by more than the write buffer): the file before it is closed and the next has
    /// begun. Logged with its length and counted in the statistics' gaps (status, MQTT's problem).
    private func gapFound(_ gap: Gap, frames: Int64) {
        logger.warning("audio lost: the recording goes on in a new file", metadata: [
            "lost.seconds": "\(String(printf: "%.3f", gap.duration))", "lost.frames": "\(frames)",
            "gap.start": "\(gap.start)", "error.message": "\(gap.error.message)"])
        ledger.withLock { ledger in
            var gap = gap
            gap.position += ledger.frames
            ledger.gaps.append(gap)
        }
    }

    /// A segment the capture thread closed is finalized (on its sync queue): count it,
    /// announce it, and show the next one in `recording`.
    private func segmentClosed(_ segment: Segment, failure: RecorderError?, directory: String) {
        ledger.withLock {
            $0.segmentsClosed += 1
            $0.lastClosed = segment
        }
        announce(segment, directory: directory)
        if let failure {
            logger.error("segment could not be finalized", metadata: ["segment.path": "\(segment.path)",
                                                                       "error.message": "\(failure.message)"])
        }
        control.async { [self] in
            guard let session else { return }
            updateCurrentSegment(of: session)
        }
    }

    /// Logs the closed segment in its session's log (what `recordings.list` groups by) and
    /// publishes it.
    private func announce(_ segment: Segment, directory: String) {
        // A recording that is one file needs no log to be listed as one.
        if segment.index > 1 || segment.endReason != .end { RecordingLibrary(directory: directory).log(segment) }
        logger.info("segment closed", metadata: [
            "recording.id": "\(segment.recordingId)", "segment.index": "\(segment.index)", "segment.path": "\(segment.path)",
            "segment.frames": "\(segment.frames)", "segment.end": "\(segment.endReason?.rawValue ?? "")",
        ])
        closedSegment.send(segment)
        requestRetentionPass()
    }

    /// Publishes the segment the capture thread is writing now (after a boundary or split).
    func updateCurrentSegment(of session: RecordingConsumer) {
        guard session === self.session, var recording = current else { return }
        let segment = session.currentSegment.withLock { $0 }
        guard recording.segment != segment else { return }
        recording.segment = segment
        recording.path = segment.path
        current = recording
        // Only `recording` follows the segments: `state` changes (and is published) on
        // transitions, and its recording is as of the last one.
        self.recording.send(recording)
    }

    private func recordOnQueue(duration: Double?, at date: Date?) throws(RecorderError) -> Recording {
        guard case .preparing = state.value, let session, var recording = current else {
            throw .invalidState("record", state.value)
        }
        if let date, let refusal = Limits.refusal(at: date) { throw RecorderError(.invalidSettings, refusal) }
        if let duration {
            try Self.validate(duration: duration)
            let frames = Int64((duration * Double(recording.sampleRate)).rounded())
            session.frameLimit = frames
            recording.frameLimit = frames
            plan?.frameLimit = frames
        }
        if let date, date > Date() {
            recording.scheduledAt = date
            current = recording
            self.recording.send(recording)
            state.send(.preparing(recording))
            let timer = DispatchSource.makeTimerSource(queue: control)
            let seconds = date.timeIntervalSince1970
            let wallTime = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1_000_000_000))
            timer.schedule(wallDeadline: DispatchWallTime(timespec: wallTime), leeway: .milliseconds(1))
            timer.setEventHandler { [weak self, session] in self?.beginCapture(session) }
            timer.resume()
            startTimer = timer
            logger.info("recording scheduled", metadata: ["recording.id": "\(recording.id)", "recording.at": "\(date)"])
            return recording
        }
        current = recording
        return beginCapture(session) ?? recording
    }

    @discardableResult
    private func beginCapture(_ session: RecordingConsumer) -> Recording? {
        guard session === self.session, !session.started, var recording = current else { return nil }
        cancelStartTimer()
        recording.startedAt = Date()
        current = recording
        recording = startCapture(session, recording: recording, preRoll: true)
        logger.info("recording started", metadata: ["recording.id": "\(recording.id)", "recording.path": "\(recording.path)"])
        return recording
    }

    /// How long `start` waits for the device's first frame before it answers with the path the
    /// file has so far (an idle sound server takes about 2 s; a rename is then announced on
    /// the `recording` topic).
    static let firstFrameWait = 5.0

    /// Starts the capture thread and the publication timers, and publishes `recording` once the
    /// first file has its final name (a template with a time in it names the file after its
    /// first frame), so that `start` answers with the path the file will keep.
    func startCapture(_ session: RecordingConsumer, recording: Recording, preRoll: Bool) -> Recording {
        var recording = recording
        let taken = NIOLockedValueBox<PreRoll?>(nil)
        var replay: (RecordingConsumer) -> Void = { _ in }
        if preRoll, session.gate == nil, let listenPlan, let ring = listeningParts.withLock({ $0.ring }) {
            let wanted = plan?.preRoll ?? listenPlan.preRoll
            replay = { session in
                let engine = session.engine
                let deviceRate = Double(engine.configuration.sampleRate)
                let frames = Swift.min(Int((wanted * deviceRate).rounded()), ring.heldFrames.load(ordering: .relaxed))
                // The duration counts from the start: the pre-roll comes on top.
                if let limit = session.frameLimit {
                    session.frameLimit = limit + Int64((Double(frames) * Double(session.fileRate) / deviceRate).rounded())
                }
                let (got, first) = ring.replay(frames: frames, into: session, chunkFrames: engine.maximumChunkFrames,
                                               captureTime: engine.captureTime(ofPosition:))
                taken.withLock { $0 = PreRoll(requested: wanted, seconds: Double(got) / deviceRate,
                                              frames: Int64(got), firstFrame: first) }
            }
        }
        do throws(RecorderError) {
            try session.start(preRoll: replay) { [weak self] outcome in
                guard let self else { return }
                control.async {
                    guard session === self.session else { return }  // stop() or cancel() got there first
                    _ = self.finalize(session, outcome: outcome)
                }
            }
        } catch {
            // The device would not start: nothing was captured.
            logger.error("capture could not start", metadata: ["error.message": "\(error.message)"])
            return finalize(session, outcome: .failed(error)).0
        }
        recording.preRoll = taken.withLock { $0 }
        if let limit = session.frameLimit, recording.frameLimit != nil {
            recording.frameLimit = limit
            plan?.frameLimit = limit
        }
        if session.awaitFirstFrame(timeout: Self.firstFrameWait), session.gate == nil {
            let segment = session.currentSegment.withLock { $0 }
            recording.segment = segment
            recording.path = segment.path
            // With a pre-roll the recording began before the start: with the first pre-rolled frame.
            if segment.index == 1, recording.preRoll.map({ $0.frames > 0 }) == true { recording.startedAt = segment.startedAt }
        }
        current = recording
        attachSpectrum(to: session.engine)
        startTimers(for: session, rate: recording.sampleRate)
        self.recording.send(recording)
        state.send(.recording(recording))
        return recording
    }

    /// Closes and renames the file after capture ended, and publishes the end state, or, when
    /// the device went away and `mayWait`, starts waiting for it.
    private func finalize(_ session: RecordingConsumer, outcome: CaptureOutcome,
                          mayWait: Bool = true) -> (Recording, RecorderError?) {
        var recording = current!
        stopTimers()
        var failure: RecorderError?
        if case .failed(let error) = outcome { failure = error }
        let deviceLost = failure?.code == .deviceLost
        // A lost device stopped delivering at its last read, which for a stalled one was
        // seconds before the loss was noticed (CaptureEngine.stallLimit): the gap begins there.
        let endedAt = deviceLost ? session.engine.lastProgressDate : Date()
        let waiting = mayWait && deviceLost && (plan?.configuration.waitForDevice ?? false)
        var last = session.finalSegment(endedAt: endedAt, reason: waiting ? .deviceLost : .end)
        var saveFailure: RecorderError?
        do throws(RecorderError) {
            try session.closeFile()
        } catch {
            saveFailure = error
        }
        let earlier = ledger.withLock { $0.lastClosed }
        if session.gate != nil, !session.hasOpenFile {
            // A triggered recording between events: its files are closed and announced.
            if let earlier { last = earlier }
        } else if last.frames == 0, earlier != nil {
            // Nothing after the last boundary: no empty file.
            unlink(last.partialPath)
            last = earlier!
        } else {
            // Even after a failure the file holds everything captured: keep it under its name.
            let wanted = last.path
            (last, saveFailure) = SegmentFinalizer.moveIntoPlace(last, failure: saveFailure)
            if last.path != wanted {
                logger.warning("recording's name was taken; saved under another", metadata: [
                    "recording.id": "\(last.recordingId)", "recording.path": "\(last.path)", "recording.wanted": "\(wanted)"])
                if last.index == 1, plan?.segments.effectiveTemplate == SegmentSettings.single {
                    // A recording in one file is known by its file's name.
                    recording.name = FilePath(last.path).stem ?? ""
                }
            }
            ledger.withLock {
                $0.segmentsClosed += 1
                $0.lastClosed = last
            }
            announce(last, directory: plan?.configuration.recordingsDirectory ?? configuration.recordingsDirectory)
            if let event = session.eventEnded(in: last, reason: deviceLost ? "deviceLost" : "failed") { triggerEvent.send(event) }
        }
        // The next capture session (after a gap) numbers its segments on from here.
        plan?.nextIndex = session.gate?.nextIndex ?? session.currentSegment.withLock { $0.index } + 1
        let totals = ledger.withLock { ledger in
            ledger.frames += session.framesWritten.load(ordering: .acquiring)
            ledger.xruns += session.xruns.load(ordering: .relaxed)
            ledger.framesLost += session.framesLost.load(ordering: .relaxed)
            ledger.framesCaptured += session.framesCaptured.load(ordering: .relaxed)
            ledger.deviceClockDriftPPM = session.deviceClockDriftPPM ?? ledger.deviceClockDriftPPM
            return ledger
        }
        recording.frames = totals.frames
        if session.gate == nil || earlier != nil || last.frames > 0 {
            recording.segment = last
            recording.path = last.path
        }
        publishTotals(rate: recording.sampleRate)
        clearSession()
        if waiting, saveFailure == nil, let lost = failure {
            current = recording
            self.recording.send(recording)
            plan?.gapStart = endedAt
            ledger.withLock { $0.gaps.append(Gap(start: endedAt, position: $0.frames, error: lost)) }
            publishTotals(rate: recording.sampleRate)
            logger.warning("capture device lost; waiting for it", metadata: [
                "recording.id": "\(recording.id)", "error.message": "\(lost.message)"])
            scheduleRetry(recording, error: lost, since: endedAt, attempts: 0)
            return (recording, nil)
        }
        failure = saveFailure ?? failure
        return end(recording, failure: failure)
    }

    /// Publishes the end of a recording: finished, or failed with `failure`.
    func end(_ recording: Recording, failure: RecorderError?) -> (Recording, RecorderError?) {
        var recording = recording
        recording.endedAt = Date()
        plan = nil
        current = nil
        clearSilenceWarning()
        self.recording.send(recording)
        if let failure {
            logger.error("recording failed", metadata: ["recording.id": "\(recording.id)", "error.code": "\(failure.code.rawValue)",
                                                        "error.message": "\(failure.message)"])
            error.send(failure)
            state.send(.failed(recording, failure))
        } else {
            logger.info("recording finished", metadata: ["recording.id": "\(recording.id)", "recording.frames": "\(recording.frames)"])
            state.send(.finished(recording))
        }
        returnToListeningOrClose()
        return (recording, failure)
    }

    /// A prepared recording that will not start after all: close and delete its file.
    private func discardPrepared() {
        guard let session, let recording = current else { return }
        session.discardFile()
        unlink(recording.partialPath)
        clearSession()
        plan = nil
        self.recording.send(nil)
        state.send(listenPlan == nil ? .idle : .listening)
        returnToListeningOrClose()
    }

    func clearSession() {
        session = nil
        current = nil
        activeSession.withLock { $0 = nil }
    }

    /// Records a failure before anything was captured.
    func fail(_ failure: RecorderError, endsRecording: Bool = true) -> RecorderError {
        logger.error(endsRecording ? "recording could not begin" : "listening could not begin",
                     metadata: ["error.code": "\(failure.code.rawValue)", "error.message": "\(failure.message)"])
        error.send(failure)
        if endsRecording {
            state.send(.failed(nil, failure))
            // Listening goes on: the device it holds stays open.
            if listenPlan != nil { state.send(.listening) }
        }
        return failure
    }

    // MARK: Timers

    private func startTimers(for session: RecordingConsumer, rate: Int) {
        let configuration = self.configuration
        let meter = levelsAreWanted ? session.meter : nil
        recordingPublishes.store(meter != nil, ordering: .releasing)
        let levels = self.levels
        periods.withLock { $0 = (configuration.timeInterval, configuration.levelsInterval) }
        if let meter, configuration.levelsInterval == configuration.timeInterval {
            // One timer for both, sent together: they reach a subscriber of both in one turn of
            // its queue, and a client of the socket in one write.
            timers = [makeTimer(interval: configuration.timeInterval) { [weak self] in
                Observations.together {
                    self?.publishTime(of: session, rate: rate)
                    levels.send(meter.takeLevels())
                }
            }]
            return
        }
        timers = [makeTimer(interval: configuration.timeInterval) { [weak self] in
            self?.publishTime(of: session, rate: rate)
        }]
        if let meter {
            timers.append(makeTimer(interval: configuration.levelsInterval) { levels.send(meter.takeLevels()) })
        }
    }

    /// Whether anyone wants `levels` now (`setLevelsWanted`).
    var levelsAreWanted: Bool { !configuration.levelsOnDemand || levelsWanted.withLock { !$0.isEmpty } }

    /// `source` (the socket server, the MQTT bridge) wants levels, or no longer does. Any thread.
    public func setLevelsWanted(_ wanted: Bool, by source: String) {
        guard configuration.levelsOnDemand else { return }
        let changed = levelsWanted.withLock { sources -> Bool in
            let before = !sources.isEmpty
            if wanted { sources.insert(source) } else { sources.remove(source) }
            return before != !sources.isEmpty
        }
        guard changed else { return }
        control.async { [self] in levelsDemandChanged() }
    }

    /// On the control queue: meters and timers follow the demand for levels.
    private func levelsDemandChanged() {
        if listenPlan != nil {
            if let engine { attachListeningMeter(to: engine) }
            startListeningTimer(configuration)
        }
        if case .recording(let recording) = state.value, let session {
            stopTimers()
            startTimers(for: session, rate: recording.sampleRate)
        }
        if !levelsAreWanted { levels.send(.none) }
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

    private func stopTimers() {
        for timer in timers { timer.cancel() }
        timers = []
        recordingPublishes.store(false, ordering: .releasing)
        // A tick already queued must not publish after the final value.
        timerQueue.sync {}
    }

    private func cancelStartTimer() {
        startTimer?.cancel()
        startTimer = nil
    }

    /// Publishes the recording's time and statistics: the ended capture sessions' totals plus
    /// this one's counters. Also raises and clears the digital-silence warning.
    private func publishTime(of session: RecordingConsumer, rate: Int) {
        let totals = ledger.withLock { $0 }
        currentTime.send(Double(totals.frames + session.framesWritten.load(ordering: .relaxed)) / Double(rate))
        let xruns = totals.xruns + session.xruns.load(ordering: .relaxed)
        let framesLost = totals.framesLost + session.framesLost.load(ordering: .relaxed)
        statistics.send(CaptureStatistics(xruns: xruns, framesLost: framesLost,
                                          framesCaptured: totals.framesCaptured + session.framesCaptured.load(ordering: .relaxed),
                                          segmentsClosed: totals.segmentsClosed, gaps: totals.gaps,
                                          deviceClockDriftPPM: session.deviceClockDriftPPM ?? totals.deviceClockDriftPPM))
        checkSilence(of: session)
    }

    /// Publishes the totals when no capture session runs (between sessions, at the end).
    func publishTotals(rate: Int) {
        let totals = ledger.withLock { $0 }
        currentTime.send(Double(totals.frames) / Double(rate))
        statistics.send(CaptureStatistics(xruns: totals.xruns, framesLost: totals.framesLost,
                                          framesCaptured: totals.framesCaptured, segmentsClosed: totals.segmentsClosed,
                                          gaps: totals.gaps, deviceClockDriftPPM: totals.deviceClockDriftPPM))
    }

    /// "Running but recording nothing": every sample exactly zero for `silenceWarningAfter`.
    private func checkSilence(of session: RecordingConsumer) {
        guard let limit = configuration.silenceWarningAfter, limit > 0, session.started,
              !session.isPaused.load(ordering: .relaxed) else { return }
        let silentFor = Double(CaptureEngine.uptime() &- session.lastSignal.load(ordering: .relaxed)) / 1_000_000_000
        let current = warning.value
        if silentFor >= limit, current == nil {
            let since = Date().addingTimeInterval(-silentFor)
            let message = String(printf: "the input has been digital silence (every sample zero) for %.0f s: "
                                 + "muted, disconnected, or the wrong device?", silentFor)
            warning.send(RecorderWarning(code: .digitalSilence, message: message, since: since))
            logger.warning("input is digital silence", metadata: ["device.name": "\(session.deviceName)",
                                                                   "silence.seconds": "\(Int(silentFor))"])
        } else if silentFor < limit, current?.code == .digitalSilence {
            clearSilenceWarning()
            logger.notice("input signal is back", metadata: ["device.name": "\(session.deviceName)"])
        }
    }

    // MARK: Helpers

    private static func validate(duration: Double) throws(RecorderError) {
        if let refusal = Limits.refusal("duration", duration, Limits.duration, "seconds") {
            throw RecorderError(.invalidSettings, refusal)
        }
    }

    /// `base`, or `base-2`, `base-3`… : the first that names neither a file nor a `.part`.
    static func firstFreeName(_ base: String, in directory: String, fileExtension: String) -> String {
        var candidate = base
        var counter = 1
        while isTaken(candidate, in: directory, fileExtension: fileExtension) {
            counter += 1
            candidate = "\(base)-\(counter)"
        }
        return candidate
    }

    private static func isTaken(_ name: String, in directory: String, fileExtension: String) -> Bool {
        let path = "\(directory)/\(name).\(fileExtension)"
        return FileManager.default.fileExists(atPath: path) || FileManager.default.fileExists(atPath: path + ".part")
    }

    /// Makes a rename durable: fsync the directory that holds the entry.
    static func syncDirectory(of path: String) {
        let directory = FilePath(path).removingLastComponent().string
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    static func reason(_ errnoValue: Int32) -> String { String(cString: strerror(errnoValue)) }

    /// `mkdir -p`; returns the errno of the step that failed, nil on success.
    public static func makeDirectory(_ path: String) -> Int32? {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o755) != 0 {
                let error = errno
                var info = stat()
                guard error == EEXIST, stat(prefix, &info) == 0 else { return error }
                guard info.st_mode & S_IFMT == S_IFDIR else { return ENOTDIR }
            }
        }
        return nil
    }
}
