import FoundationEssentials
import Logging
import RecorderModel

/// Records from an ALSA device to files, one recording at a time, listens, serves taps and
/// publishes what it is doing through `Observed` values: the whole of the recorder that the
/// daemon's ways in (the socket, MQTT, autostart, schedules, SIGHUP) see.
///
/// A façade: each operation is handed to the part that does it. Operations are synchronous
/// and may be called from any thread (but not from inside a subscriber handler running on
/// the recorder's own queues, which none are by default): the controller runs them one at a
/// time on its one executor, capture runs on threads of its own (doc/architecture.md). The
/// `current…()` reads answer at once from what the parts keep behind locks.
public final class Recorder: Sendable {
    private let controller: RecorderController

    // MARK: What it publishes

    /// idle → preparing → recording ⇄ paused → stopping → finished (or failed); recording ⇄
    /// waitingForDevice while a lost device is away; listening while the device is open
    /// without a recording.
    public let state: Observed<RecorderState>
    /// Seconds in the file so far (frames written / file rate): pauses excluded, sample-accurate.
    public let currentTime: Observed<Double>
    /// The last failure, cleared when a new recording is prepared.
    public let error: Observed<RecorderError?>
    /// Per-channel levels while recording or listening with metering on, as often as the most
    /// demanding of those who want them asks (`setLevelsWanted`).
    public let levels: Observed<Levels>
    /// The current (or last) recording.
    public let recording: Observed<Recording?>
    /// Overruns, frames lost, segments and device gaps in the current recording.
    public let statistics: Observed<CaptureStatistics>
    /// The last segment closed and finalized (its `.part` renamed), with its frames, overruns
    /// and the gap before it. Each closed segment is sent once, in order: subscribe with
    /// `delivery: .every` to see them all (uploaders, the socket's `segment` topic).
    public let closedSegment: Observed<Segment?>
    /// The last finished file re-dated once the system clock was synchronized (a file begun
    /// before, `Segment.unsynchronizedStart`). Each is sent once, in order, after the file has
    /// its true start and name: subscribe with `delivery: .every` (uploaders, the socket's
    /// `redated` topic, MQTT, the `on_file_redated` hook).
    public let redatedFile: Observed<RedatedFile?>
    /// A condition worth attention that does not stop the recording (digital silence, low disk
    /// space, a refused reload); nil when there is none.
    public let warning: Observed<RecorderWarning?>
    /// Free and used space on the recordings' filesystem, the guard's levels and what retention
    /// deletes next; measured every `storage.checkInterval`.
    public let storage: Observed<StorageStatus?>
    /// While listening (the device open for levels and pre-roll, with or without a
    /// recording): the device, its format and the pre-roll; nil otherwise. Published when
    /// listening begins, ends, waits for its device or resumes; `currentListeningStatus()` has
    /// the figures of the moment.
    public let listening: Observed<ListeningStatus?>
    /// The last file retention deleted. Each deletion is sent once, in order: subscribe with
    /// `delivery: .every` to see them all (the socket's `retention` topic).
    public let retentionDeletion: Observed<RetentionDeletion?>
    /// A triggered recording's last event opened, closed or discarded. Each is sent once, in
    /// order: subscribe with `delivery: .every` to see them all (the socket's `trigger` topic).
    public let triggerEvent: Observed<TriggerEvent?>
    /// The input's spectrum, one column per 50 ms, while the device is open and someone wants
    /// it (`setSpectrumWanted`); nil otherwise.
    public let spectrum: Observed<Spectrum?>
    /// The system clock: whether it is synchronized (since when), and its steps since the
    /// recorder began (how many, the last and its size). Sent when one of them changes.
    public let clock: Observed<ClockStatus>

    /// How often `currentTime` and `levels` are published while recording, in seconds: the
    /// periods of the timers running, or that ran last (the configuration's until the first
    /// recording starts them). A reload during a recording does not change its timers.
    public var publishingPeriods: (currentTime: Double, levels: Double) { controller.periods.withLock { $0 } }

    /// - Parameters:
    ///   - clock: where the system clock's synchronization is read besides the kernel.
    ///   - station: on a station of several sources, what every source's recorder shares for
    ///     retention over the whole disk; nil for a station of one.
    public init(configuration: RecorderConfiguration, clock: SystemClockSources = SystemClockSources(),
                station: StationRecordings? = nil, logger: Logger = Logger(label: "recd.recorder")) {
        controller = RecorderController(configuration: configuration, clock: clock, station: station, logger: logger)
        let published = controller.published
        state = published.state
        currentTime = published.currentTime
        error = published.error
        levels = published.levels
        recording = published.recording
        statistics = published.statistics
        closedSegment = published.closedSegment
        redatedFile = published.redatedFile
        warning = published.warning
        storage = published.storage
        listening = published.listening
        retentionDeletion = published.retentionDeletion
        triggerEvent = published.triggerEvent
        spectrum = published.spectrum
        self.clock = published.clock
    }

    // MARK: Configuration

    /// The configuration the next recording will use.
    public var configuration: RecorderConfiguration { controller.configuration }

    /// Replaces the configuration. A recording under way keeps what it started with.
    public func reconfigure(_ configuration: RecorderConfiguration) { controller.reconfigure(configuration) }

    /// A reload refused (`reason`) or done (nil): raises or clears the `configurationNotReloaded` warning.
    public func configurationReload(refused reason: String?) { controller.published.configurationReload(refused: reason) }

    // MARK: A recording

    /// Opens the device and creates the file, ready for `record()`.
    @discardableResult
    public func prepare(name: String? = nil, settings: RecordingSettings? = nil,
                        segments: SegmentSettings? = nil) throws(RecorderError) -> Recording {
        try controller.prepare(name: name, settings: settings, segments: segments)
    }

    /// Starts (or, with `at`, schedules) a recording. Prepares one with the default settings
    /// when none is prepared.
    ///
    /// - Parameters:
    ///   - duration: record exactly this long: the file will hold `round(duration × rate)` frames.
    ///   - date: start at this wall-clock time; the recorder stays `preparing` until then.
    @discardableResult
    public func record(forDuration duration: Double? = nil, at date: Date? = nil) throws(RecorderError) -> Recording {
        try controller.record(forDuration: duration, at: date)
    }

    /// Prepares and starts in one step: what a daemon's `start` request does. When the device
    /// is missing and `waitForDevice` is on, the recording waits for it (`waitingForDevice`)
    /// instead of failing, unless it is scheduled (`at`: nothing is opened or created until
    /// then, and `stop` or `cancel` before then leaves no file).
    ///
    /// A device ALSA cannot find at all (`hw:9,9`, a misspelt name) that this recorder has
    /// never opened is refused (`deviceNotFound`) rather than waited for, unless the start is
    /// `unattended` (autostart, a schedule's window: a USB device may appear after boot).
    /// A single file's name that is taken is refused, unless `unattended`: then the recording
    /// takes the first free numbered name (`fg-2`, `fg-3`…), so a station whose autostart has
    /// a fixed name records again after every restart instead of sitting idle.
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
    @discardableResult
    public func start(name: String?, settings: RecordingSettings?, duration: Double? = nil,
                      at date: Date? = nil, segments: SegmentSettings? = nil, preRoll: Double? = nil,
                      trigger: TriggerSettings? = nil, unattended: Bool = false) throws(RecorderError) -> Recording {
        try controller.start(name: name, settings: settings, duration: duration, at: date, segments: segments,
                             preRoll: preRoll, trigger: trigger, unattended: unattended)
    }

    /// Stops capture; the file keeps what was recorded and `resume()` continues it.
    public func pause() throws(RecorderError) { try controller.pause() }

    /// Continues a paused recording in the same file, without a gap.
    public func resume() throws(RecorderError) { try controller.resume() }

    /// Closes the current segment at the last frame captured and continues in the next file,
    /// without losing or repeating a frame. Returns the closed segment; it is announced on
    /// `closedSegment` once finalized.
    @discardableResult
    public func split() throws(RecorderError) -> Segment { try controller.split() }

    /// Ends the recording: flushes, finalizes and renames the file. Returns the finished recording.
    @discardableResult
    public func stop() throws(RecorderError) -> Recording { try controller.stop() }

    /// Ends the recording and deletes its file (the segments closed before it stay).
    public func cancel() throws(RecorderError) { try controller.cancel() }

    /// The recording's write buffer now; nil when nothing records. Any thread.
    public func currentWriteBuffer() -> WriteBufferStatus? { controller.currentWriteBuffer() }

    /// The triggered recording's detector now (level, floor, thresholds, counts); nil when
    /// the recording (if any) is not triggered. Any thread.
    public func currentTriggerStatus() -> TriggerStatus? { controller.currentTriggerStatus() }

    // MARK: Listening, and who wants what

    /// Opens the device and keeps hearing it without a file: levels are published, and the
    /// last `preRoll` seconds (the configured length when nil) are kept for the next `start`.
    /// While recording, listening joins the recording's device; the recording ended, recd goes
    /// back to listening. A device that is missing (or goes away) is waited for, as a
    /// recording waits, when `waitForDevice` is on.
    ///
    /// Listeners share one ring, as long as the longest pre-roll any of them asked for:
    /// listening again without a pre-roll, or with a shorter one, leaves it as it is (one
    /// client's `recctl listen` must not cut another's `--pre-roll 20`); a longer one replaces
    /// it with a longer ring, which fills afresh.
    @discardableResult
    public func listen(preRoll: Double? = nil) throws(RecorderError) -> ListeningStatus { try controller.listen(preRoll: preRoll) }

    /// Stops listening: the pre-roll is dropped, and the device closes unless a recording or a
    /// tap uses it (it then closes when they end). Returns what listening was.
    @discardableResult
    public func unlisten() throws(RecorderError) -> ListeningStatus { try controller.unlisten() }

    /// Listening's figures now (pre-roll held, frames captured); nil when not listening. Any thread.
    public func currentListeningStatus() -> ListeningStatus? { controller.currentListeningStatus() }

    /// Whether the capture device is open now (recording, listening or a tap).
    public var holdsDevice: Bool { controller.activeEngine.withLock { $0 != nil } }

    /// `source` (the socket server, the MQTT bridge) wants levels every `interval` seconds
    /// (0: as often as configured), or no longer wants them. Nobody: no meter on the capture
    /// thread while listening, no levels timer, nothing encoded. Any thread.
    public func setLevelsWanted(_ wanted: Bool, by source: String, every interval: Double = 0) {
        controller.setLevelsWanted(wanted, by: source, every: interval)
    }

    /// `source` (the socket server) follows `currentTime`, or no longer does: while nobody
    /// does, a recording publishes its time once a second, not every `time_interval`. Any thread.
    public func setTimeWanted(_ wanted: Bool, by source: String) { controller.setTimeWanted(wanted, by: source) }

    /// The recording's time (seconds) and statistics now, fresher than `currentTime` and
    /// `statistics` between their publications: for `status` and the like. Any thread.
    public func currentFigures() -> (time: Double, statistics: CaptureStatistics) { controller.currentFigures() }
    public func currentTimeNow() -> Double { controller.currentFigures().time }

    /// The input's levels for a poll (`status`): the published ones while someone meters;
    /// otherwise measured now from the audio already held (the recording's meter since the
    /// last poll, or listening's newest 0.1 s). Any thread.
    public func currentLevels() -> Levels { controller.currentLevels() }

    /// `source` wants the spectrum, or no longer does. Any thread. Wanting it does not open
    /// the device: columns come while recd listens or records.
    public func setSpectrumWanted(_ wanted: Bool, by source: String) { controller.setSpectrumWanted(wanted, by: source) }

    // MARK: Taps

    /// What `openTap` gives: the client's id (for `closeTap`) and the pre-roll frames it begins with.
    public struct OpenedTap: Sendable {
        public let id: Int
        public let format: TapFormat
        /// Seconds of input before the tap began that its stream starts with.
        public let preRollSeconds: Double
    }

    /// Opens a tap for one client: chunks in `format` go to `sink` from now (after up to
    /// `preRoll` seconds of what listening held) until `closeTap`. Opens the device (listening)
    /// if it is not open. A rate or channels left nil take the recording settings', else the device's.
    public func openTap(rate: Int?, channels: Int?, encoding: TapEncoding, preRoll: Double, chunk: Double? = nil, pid: Int32?, client: String? = nil,
                        sink: any AudioTapSink) throws(RecorderError) -> OpenedTap {
        try controller.openTap(rate: rate, channels: channels, encoding: encoding, preRoll: preRoll, chunk: chunk, pid: pid, client: client,
                               sink: sink)
    }

    /// The client leaves: its tap ends when it was the last of its format, and listening
    /// that only taps needed ends with the last tap.
    public func closeTap(id: Int) { controller.closeTap(id: id) }

    /// The taps and what each client was sent. Any thread.
    public func currentTaps() -> [TapStatus] { controller.currentTaps() }

    /// `tap.update`: the client of tap `id` (the process `pid`) says how many it serves the
    /// audio on to.
    public func updateTap(id: Int, pid: Int32?, listeners: Int?) throws(RecorderError) -> TapStatus {
        try controller.updateTap(id: id, pid: pid, listeners: listeners)
    }

    /// At shutdown, before the server closes its connections: every tap's client is told the
    /// stream ends, and listening that only taps needed ends.
    public func closeTaps() { controller.closeTaps() }

    // MARK: Recording windows

    /// Follows `plan` from now on (nil: no schedule). The window of the moment takes effect at
    /// once: inside one, recording starts (unless one is under way).
    public func follow(_ plan: ScheduledRecording?) throws(RecorderError) { try controller.follow(plan) }

    /// The schedule followed now, if any.
    public var scheduledRecording: ScheduledRecording? { controller.scheduledRecording }

    /// The schedule's windows now (active, current, next); nil without a schedule. Any thread.
    public func currentScheduleStatus() -> ScheduleStatus? { controller.currentScheduleStatus() }

    // MARK: The recordings directory

    /// The recordings directory changed (a file deleted or renamed): scan it and apply
    /// retention soon, off the caller's queue.
    public func requestRetentionPass() { controller.storageGuard.requestRetentionPass() }

    /// The storage status for a listing made just now (`recordings.list`): fresh free space,
    /// and retention's outlook over exactly those files.
    public func storageStatus(listing entries: [RecordingLibrary.Entry]) -> StorageStatus? {
        controller.storageGuard.storageStatus(listing: entries)
    }

    /// Runs `body` on the recorder's executor, where no recording starts, splits or finishes
    /// meanwhile, with the file name (`take.wav`) the recording in progress will have: what
    /// renaming or deleting recordings must leave alone.
    public func withRecordingsDirectory<T, E: Error>(
        _ body: (RecordingLibrary, _ activeFile: String?) throws(E) -> T
    ) throws(E) -> T {
        try controller.withRecordingsDirectory(body)
    }

    /// recd renamed one of its recordings or deleted it (`recordings.rename`, `.delete`; nil):
    /// a file waiting for the clock to be re-dated follows it, or waits no more. Any thread.
    public func recordingFileMoved(from path: String, to newPath: String?) {
        controller.redater.fileMoved(from: path, to: newPath)
    }

    // MARK: The system clock

    /// The system clock now: its synchronization read afresh, with the kernel's error figures
    /// of the moment, and a step the kernel did not announce found (and published) here. Any
    /// thread: a few system calls.
    public func currentClockStatus() -> ClockStatus {
        var clock = controller.clockMonitor.refresh(.asked)
        clock.filesToRedate = controller.redater.pendingCount
        return clock
    }

    // MARK: The daemon

    /// Whether capture is making progress: true unless the device is running (listening or
    /// recording) and the capture thread has not read from it for `maximumSilence`. The watchdog asks this.
    public func captureIsHealthy(maximumSilence: Duration) -> Bool { controller.captureIsHealthy(maximumSilence: maximumSilence) }

    /// From now on `prepare`, `start`, `listen` and `openTap` are refused (`invalidState`):
    /// what a daemon calls before its final `stop`, so that no request still in flight starts
    /// a recording after it.
    public func refuseNewRecordings() { controller.refuseNewRecordings() }
}
