import ALSA
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import Logging
import RecorderModel
import Sndfile
import Synchronization

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
    /// Seconds between header refresh + fsync: what a killed process can lose at most.
    public var syncInterval: Double
    /// The device period, seconds: the latency of the first frame and of level updates.
    public var periodTime: Double
    /// The device buffer, seconds: how long capture can stall before an overrun.
    public var bufferTime: Double
    /// Capture at this rate whatever the file's rate, converting with soxr (nil: ask the
    /// device for the file's rate, converting only if it cannot deliver it).
    public var captureSampleRate: Int?
    /// Capture this many channels whatever the file's count, mixing in software.
    public var captureChannels: Int?
    /// Seconds `stop`, `cancel` and shutdown wait for the capture thread; one stuck in the
    /// driver longer is abandoned and the file finalized with what it wrote.
    public var stopTimeout: Double

    public init(device: String = "default", recordingsDirectory: String,
                defaultSettings: RecordingSettings = RecordingSettings(),
                timeInterval: Double = 0.1, levelsInterval: Double = 0.05, meteringEnabled: Bool = true,
                syncInterval: Double = 1.0, periodTime: Double = 0.01, bufferTime: Double = 0.5,
                captureSampleRate: Int? = nil, captureChannels: Int? = nil, stopTimeout: Double = 5) {
        self.device = device
        self.recordingsDirectory = recordingsDirectory
        self.defaultSettings = defaultSettings
        self.timeInterval = timeInterval
        self.levelsInterval = levelsInterval
        self.meteringEnabled = meteringEnabled
        self.syncInterval = syncInterval
        self.periodTime = periodTime
        self.bufferTime = bufferTime
        self.captureSampleRate = captureSampleRate
        self.captureChannels = captureChannels
        self.stopTimeout = stopTimeout
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
    // @unchecked: `session`, `current` and the timers are touched only on `control`, a serial
    // queue; `activeSession` (read by the watchdog) and `configurationState` are behind locks;
    // everything else is immutable or Sendable.

    /// idle → preparing → recording ⇄ paused → stopping → finished (or failed).
    public let state = Observed<RecorderState>(.idle)
    /// Seconds in the file so far (frames written / file rate): pauses excluded, sample-accurate.
    public let currentTime = Observed<Double>(0)
    /// The last failure, cleared when a new recording is prepared.
    public let error = Observed<RecorderError?>(nil)
    /// Per-channel levels, published every `levelsInterval` while recording with metering on.
    public let levels = Observed<Levels>(.none)
    /// The current (or last) recording.
    public let recording = Observed<Recording?>(nil)
    /// Overruns and frames lost in the current recording.
    public let statistics = Observed<CaptureStatistics>(CaptureStatistics())

    private let logger: Logger
    private let control = DispatchQueue(label: "recd.recorder.control")
    private let timerQueue = DispatchQueue(label: "recd.recorder.timer")
    private let configurationState: NIOLockedValueBox<RecorderConfiguration>
    private let activeSession = NIOLockedValueBox<CaptureSession?>(nil)

    private var session: CaptureSession?
    /// Set once the daemon is shutting down: no recording may start after the last `stop`.
    private var refusingRecordings = false
    private var current: Recording?
    private var timers: [DispatchSourceTimer] = []
    private var startTimer: DispatchSourceTimer?

    public init(configuration: RecorderConfiguration, logger: Logger = Logger(label: "recd.recorder")) {
        self.configurationState = NIOLockedValueBox(configuration)
        self.logger = logger
    }

    /// The configuration the next recording will use.
    public var configuration: RecorderConfiguration { configurationState.withLock { $0 } }

    /// Replaces the configuration. A recording under way keeps what it started with.
    public func reconfigure(_ configuration: RecorderConfiguration) {
        configurationState.withLock { $0 = configuration }
    }

    // MARK: Operations

    /// Opens the device and creates the file, ready for `record()`.
    @discardableResult
    public func prepare(name: String? = nil, settings: RecordingSettings? = nil) throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in try prepareOnQueue(name: name, settings: settings) }
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
            if case .preparing = state.value {} else { try prepareOnQueue(name: nil, settings: nil) }
            return try recordOnQueue(duration: duration, at: date)
        }
    }

    /// Prepares and starts in one step: what a daemon's `start` request does.
    @discardableResult
    public func start(name: String?, settings: RecordingSettings?, duration: Double? = nil,
                      at date: Date? = nil) throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in
            if let duration { try Self.validate(duration: duration) }
            try prepareOnQueue(name: name, settings: settings, operation: "start")
            do throws(RecorderError) {
                return try recordOnQueue(duration: duration, at: date)
            } catch {
                discardPrepared()
                throw error
            }
        }
    }

    /// Stops capture; the file keeps what was recorded and `resume()` continues it.
    public func pause() throws(RecorderError) {
        try onControl { () throws(RecorderError) in
            guard case .recording(let recording) = state.value, let session else {
                throw .invalidState("pause", state.value)
            }
            try session.pause()
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
                // The capture thread has ended; finalize now so the state says why.
                _ = finalize(session, outcome: session.stop(timeout: configuration.stopTimeout))
                throw error
            }
            state.send(.recording(recording))
            logger.info("recording resumed", metadata: ["recording.id": "\(recording.id)"])
        }
    }

    /// Ends the recording: flushes, finalizes and renames the file. Returns the finished recording.
    @discardableResult
    public func stop() throws(RecorderError) -> Recording {
        try onControl { () throws(RecorderError) in
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
            let (finished, failure) = finalize(session, outcome: outcome)
            if let failure, failure.code == .failedToSave { throw failure }
            return finished
        }
    }

    /// Ends the recording and deletes its file.
    public func cancel() throws(RecorderError) {
        try onControl { () throws(RecorderError) in
            guard let session, let recording = current, state.value.isActive else {
                throw .invalidState("cancel", state.value)
            }
            if session.started { _ = session.stop(timeout: configuration.stopTimeout) } else { cancelStartTimer() }
            stopTimers()
            try? session.closeFile()
            unlink(recording.partialPath)
            clearSession()
            currentTime.send(0)
            self.recording.send(nil)
            state.send(.idle)
            logger.info("recording cancelled", metadata: ["recording.id": "\(recording.id)"])
        }
    }

    /// Whether capture is making progress: true unless a recording is running and its capture
    /// thread has not read from the device for `maximumSilence`. The watchdog asks this.
    public func captureIsHealthy(maximumSilence: Duration) -> Bool {
        activeSession.withLock { session in
            guard let session, session.started, !session.isPaused.load(ordering: .relaxed),
                  !session.hasEnded else { return true }
            let silence = CaptureSession.uptime() &- session.lastProgress.load(ordering: .relaxed)
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
            let active = current.map { ($0.path as NSString).lastPathComponent }
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

    private func onControl<T>(_ body: () throws(RecorderError) -> T) throws(RecorderError) -> T {
        let result: Result<T, RecorderError> = control.sync { Result { () throws(RecorderError) in try body() } }
        return try result.get()
    }

    @discardableResult
    private func prepareOnQueue(name: String?, settings: RecordingSettings?,
                                operation: String = "prepare a recording") throws(RecorderError) -> Recording {
        switch state.value {
        case .idle, .finished, .failed: break
        default: throw .invalidState(operation, state.value)
        }
        if refusingRecordings { throw RecorderError(.invalidState, "cannot \(operation): recd is shutting down") }
        let configuration = self.configuration
        let settings = settings ?? configuration.defaultSettings
        try settings.validate()
        if let name { try RecordingName.validate(name) }
        let directory = configuration.recordingsDirectory
        if let errnoValue = Self.makeDirectory(directory) {
            throw fail(RecorderError(.failedToBegin, "cannot create recordings directory \(directory): \(Self.reason(errnoValue))"))
        }
        let name = if let name { name } else { uniqueDefaultName(in: directory, fileExtension: settings.format.fileExtension) }
        let path = "\(directory)/\(name).\(settings.format.fileExtension)"
        if FileManager.default.fileExists(atPath: path) || FileManager.default.fileExists(atPath: path + ".part") {
            throw RecorderError(.invalidSettings, "a recording named '\(name)' already exists at \(path)")
        }

        let pcm: CapturePCM
        let pcmConfiguration: PCMConfiguration
        do throws(ALSAError) {
            pcm = try CapturePCM(name: configuration.device)
            pcmConfiguration = try pcm.configure(
                sampleFormat: settings.preferredCaptureFormat,
                sampleRate: configuration.captureSampleRate ?? settings.sampleRate,
                channels: configuration.captureChannels ?? settings.channels,
                periodMicroseconds: Int(configuration.periodTime * 1_000_000),
                bufferMicroseconds: Int(configuration.bufferTime * 1_000_000))
        } catch {
            throw fail(.opening(error))
        }
        var fileRate = settings.sampleRate ?? pcmConfiguration.sampleRate
        if settings.format == .opus, !RecordingSettings.opusRates.contains(fileRate) { fileRate = 48000 }
        let fileChannels = settings.channels ?? Swift.min(pcmConfiguration.channels, 8)
        guard SoundFileFormat.isWritable(settings.fileFormat, sampleRate: fileRate, channels: fileChannels) else {
            throw RecorderError(.invalidSettings,
                "\(settings.format.rawValue) cannot hold \(fileChannels) channel(s) at \(fileRate) Hz")
        }

        let partialPath = path + ".part"
        let writer: SoundFileWriter
        do throws(SndfileError) {
            writer = try SoundFileWriter(path: partialPath, format: settings.fileFormat, sampleRate: fileRate,
                                         channels: fileChannels,
                                         compressionLevel: settings.compressionLevel(channels: fileChannels))
        } catch {
            throw fail(RecorderError(.failedToBegin, "cannot create \(error.description)"))
        }
        let session: CaptureSession
        do throws(RecorderError) {
            session = try CaptureSession(
                pcm: pcm, configuration: pcmConfiguration, writer: writer, fileRate: fileRate,
                fileChannels: fileChannels, converterQuality: settings.quality, frameLimit: nil,
                metering: configuration.meteringEnabled, syncInterval: configuration.syncInterval)
        } catch {
            unlink(partialPath)
            throw error
        }

        let recording = Recording(
            id: UUID().uuidString.lowercased(), name: name, path: path, format: settings.format,
            sampleRate: fileRate, channels: fileChannels, bitDepth: settings.effectiveBitDepth,
            quality: settings.quality, device: configuration.device,
            deviceFormat: DeviceFormat(sampleFormat: pcmConfiguration.sampleFormat.rawValue,
                                       sampleRate: pcmConfiguration.sampleRate, channels: pcmConfiguration.channels))
        self.session = session
        activeSession.withLock { $0 = session }
        current = recording
        error.send(nil)
        currentTime.send(0)
        statistics.send(CaptureStatistics())
        levels.send(Levels(channels: Array(repeating: .silence, count: fileChannels), clipCount: 0))
        self.recording.send(recording)
        state.send(.preparing(recording))
        logger.info("recording prepared", metadata: [
            "recording.id": "\(recording.id)", "recording.path": "\(path)", "device.name": "\(configuration.device)",
            "device.format": "\(pcmConfiguration.sampleFormat.rawValue)/\(pcmConfiguration.sampleRate)/\(pcmConfiguration.channels)",
        ])
        return recording
    }

    private func recordOnQueue(duration: Double?, at date: Date?) throws(RecorderError) -> Recording {
        guard case .preparing = state.value, let session, var recording = current else {
            throw .invalidState("record", state.value)
        }
        if let duration {
            try Self.validate(duration: duration)
            let frames = Int64((duration * Double(recording.sampleRate)).rounded())
            session.frameLimit = frames
            recording.frameLimit = frames
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
    private func beginCapture(_ session: CaptureSession) -> Recording? {
        guard session === self.session, !session.started, var recording = current else { return nil }
        cancelStartTimer()
        recording.startedAt = Date()
        current = recording
        session.start { [weak self] outcome in
            guard let self else { return }
            control.async {
                guard session === self.session else { return }  // stop() or cancel() got there first
                _ = self.finalize(session, outcome: outcome)
            }
        }
        startTimers(for: session, rate: recording.sampleRate)
        self.recording.send(recording)
        state.send(.recording(recording))
        logger.info("recording started", metadata: ["recording.id": "\(recording.id)"])
        return recording
    }

    /// Closes and renames the file after capture ended, and publishes the end state.
    private func finalize(_ session: CaptureSession, outcome: CaptureOutcome) -> (Recording, RecorderError?) {
        var recording = current!
        stopTimers()
        var failure: RecorderError?
        if case .failed(let error) = outcome { failure = error }
        do throws(RecorderError) {
            try session.closeFile()
        } catch {
            failure = failure ?? error
        }
        recording.frames = session.framesWritten.load(ordering: .acquiring)
        recording.endedAt = Date()
        // Even after a failure the file holds everything captured: keep it under its name, or
        // under a numbered one if something took that name meanwhile (never replace a file).
        do throws(RecorderError) {
            let path = try RecordingLibrary.moveIntoPlace(recording.partialPath, preferred: recording.path)
            if path != recording.path {
                logger.warning("recording's name was taken; saved under another", metadata: [
                    "recording.id": "\(recording.id)", "recording.path": "\(path)", "recording.wanted": "\(recording.path)"])
                recording.path = path
                recording.name = ((path as NSString).lastPathComponent as NSString).deletingPathExtension
            }
            Self.syncDirectory(of: recording.path)
        } catch {
            failure = failure ?? error
        }
        publishTime(of: session, rate: recording.sampleRate)
        clearSession()
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
        return (recording, failure)
    }

    /// A prepared recording that will not start after all: close and delete its file.
    private func discardPrepared() {
        guard let session, let recording = current else { return }
        try? session.closeFile()
        unlink(recording.partialPath)
        clearSession()
        self.recording.send(nil)
        state.send(.idle)
    }

    private func clearSession() {
        session = nil
        current = nil
        activeSession.withLock { $0 = nil }
    }

    /// Records a failure before anything was captured.
    private func fail(_ failure: RecorderError) -> RecorderError {
        logger.error("recording could not begin", metadata: ["error.code": "\(failure.code.rawValue)", "error.message": "\(failure.message)"])
        error.send(failure)
        state.send(.failed(nil, failure))
        return failure
    }

    // MARK: Timers

    private func startTimers(for session: CaptureSession, rate: Int) {
        let configuration = self.configuration
        timers = [makeTimer(interval: configuration.timeInterval) { [weak self] in
            self?.publishTime(of: session, rate: rate)
        }]
        if let meter = session.meter {
            let levels = self.levels
            timers.append(makeTimer(interval: configuration.levelsInterval) { levels.send(meter.takeLevels()) })
        }
    }

    private func makeTimer(interval: Double, _ handler: @escaping @Sendable () -> Void) -> DispatchSourceTimer {
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
        // A tick already queued must not publish after the final value.
        timerQueue.sync {}
    }

    private func cancelStartTimer() {
        startTimer?.cancel()
        startTimer = nil
    }

    private func publishTime(of session: CaptureSession, rate: Int) {
        currentTime.send(Double(session.framesWritten.load(ordering: .relaxed)) / Double(rate))
        statistics.send(CaptureStatistics(xruns: session.xruns.load(ordering: .relaxed),
                                          framesLost: session.framesLost.load(ordering: .relaxed),
                                          framesCaptured: session.framesCaptured.load(ordering: .relaxed)))
    }

    // MARK: Helpers

    private static func validate(duration: Double) throws(RecorderError) {
        guard duration > 0, duration.isFinite else {
            throw RecorderError(.invalidSettings, "duration must be a positive number of seconds, not \(duration)")
        }
    }

    private func uniqueDefaultName(in directory: String, fileExtension: String) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd'T'HH-mm-ss"
        let base = "recording-" + formatter.string(from: Date())
        var candidate = base
        var counter = 1
        while FileManager.default.fileExists(atPath: "\(directory)/\(candidate).\(fileExtension)")
                || FileManager.default.fileExists(atPath: "\(directory)/\(candidate).\(fileExtension).part") {
            counter += 1
            candidate = "\(base)-\(counter)"
        }
        return candidate
    }

    /// Makes a rename durable: fsync the directory that holds the entry.
    private static func syncDirectory(of path: String) {
        let directory = (path as NSString).deletingLastPathComponent
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    static func reason(_ errnoValue: Int32) -> String { String(cString: strerror(errnoValue)) }

    /// `mkdir -p`; returns the errno of the step that failed, nil on success.
    static func makeDirectory(_ path: String) -> Int32? {
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
