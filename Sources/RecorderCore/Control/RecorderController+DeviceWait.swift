import ALSA
import AudioGraph
import Dispatch
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import RecorderModel
import SoundCards

/// A wait that follows the sound cards: the watch, what it waits for, and the attempt it makes.
struct CardWait {
    var watch: SoundCardWatch
    var device: String
    var roots: SystemRoots
    var attempt: (@Sendable (RecorderController) -> Void)?
}

/// Waiting for a device: a recording whose device is missing at `start`, or went away, keeps
/// trying to open it (0.1 s, doubling, at most `maximumRetryInterval`) and continues in a new
/// segment when it opens. On the recorder's control queue.
extension RecorderController {
    /// `start` found no device: the recording exists, waiting for it, with no file yet.
    func startWaiting(id: String, name: String, plan: SessionPlan, error: RecorderError) -> Recording {
        var recording = Self.unopenedRecording(id: id, name: name, settings: plan.settings, configuration: plan.configuration,
                                               segments: plan.segments)
        recording.startedAt = Date()
        var plan = plan
        let since = Date()
        plan.gapStart = since
        ledger.withLock { $0 = SessionLedger(gaps: [Gap(start: since, position: 0, error: error)]) }
        published.error.send(nil)
        published.clearSilenceWarning()
        published.currentTime.send(0)
        published.statistics.send(CaptureStatistics(gaps: ledger.withLock { $0.gaps }))
        published.recording.send(recording)
        logger.warning("capture device missing; waiting for it", metadata: [
            "recording.id": "\(id)", "error.message": "\(error.message)"])
        scheduleRetry(RecordingRun(recording: recording, plan: plan), error: error, since: since, attempts: 1)
        return recording
    }

    /// A recording whose device is not open yet (waited for, or a start scheduled for later):
    /// no file, and the format asked for (the device may change it).
    static func unopenedRecording(id: String, name: String, settings: RecordingSettings, configuration: RecorderConfiguration,
                                  segments: SegmentSettings?) -> Recording {
        let rate = settings.sampleRate ?? configuration.captureSampleRate ?? 48000
        let channels = settings.channels ?? configuration.captureChannels ?? 2
        return Recording(
            id: id, name: name, path: "", format: settings.format, sampleRate: rate, channels: channels,
            bitDepth: settings.effectiveBitDepth, quality: settings.quality, device: configuration.device,
            deviceFormat: DeviceFormat(sampleFormat: settings.preferredCaptureFormat.rawValue, sampleRate: rate, channels: channels),
            segmentSettings: segments)
    }

    /// Publishes the wait and arms the next attempt.
    func scheduleRetry(_ run: RecordingRun, error: RecorderError, since: Date, attempts: Int) {
        let wait = armRetry(error: error, since: since, attempts: attempts, configuration: run.plan.configuration) { $0.retryDevice() }
        enterWaiting(run, wait)
    }

    /// Arms the next attempt (replacing any), which runs `attempt` on the control queue.
    /// Returns the wait to publish.
    ///
    /// A device on a card that is missing, lost or not yet usable is tried again when the
    /// sound cards change (`SoundCardWatch`: inotify on /dev/snd and udev's database): nothing
    /// wakes recd while it waits, and a card plugged in is tried as soon as its node appears.
    /// Anything else (a sound server's PCM, a busy card) is tried again on a timer: after 0.1 s,
    /// doubling with `attempts`, at most `maximumRetryInterval`.
    func armRetry(error: RecorderError, since: Date, attempts: Int, configuration: RecorderConfiguration?,
                  _ attempt: @escaping @Sendable (RecorderController) -> Void) -> DeviceWait {
        state.retryTimer?.cancel()
        state.retryTimer = nil
        if let configuration, Self.waitsForCards(error, device: configuration.device), armCardWait(configuration, attempt) {
            return DeviceWait(error: error, since: since, retryAt: nil, attempts: attempts, watchingDevices: true)
        }
        state.cardWait?.attempt = nil
        let delay = Swift.min(configuration?.maximumRetryInterval ?? 1.5, 0.1 * Double(1 << Swift.min(attempts, 20)))
        let timer = DispatchSource.makeTimerSource(queue: control)
        timer.schedule(deadline: .now() + .nanoseconds(Int(delay * 1_000_000_000)), leeway: .milliseconds(10))
        timer.setEventHandler { [weak self] in if let self { attempt(self) } }
        timer.resume()
        state.retryTimer = timer
        return DeviceWait(error: error, since: since, retryAt: Date().addingTimeInterval(delay), attempts: attempts)
    }

    /// Whether the wait for `device` can follow the sound cards: it is on a card, and what
    /// keeps it is the card's absence or udev not being done with it (EACCES until udev sets
    /// the node's group), not a program holding it.
    static func waitsForCards(_ error: RecorderError, device: String) -> Bool {
        guard let name = try? DeviceName(parsing: device), name.isOnACard else { return false }
        return [.deviceNotFound, .deviceLost, .noPermission].contains(error.code)
    }

    /// The watch for a wait on a card, kept across attempts (a watch made anew after each
    /// attempt could miss what happened in between). false when inotify cannot be had.
    private func armCardWait(_ configuration: RecorderConfiguration, _ attempt: @escaping @Sendable (RecorderController) -> Void) -> Bool {
        if var wait = state.cardWait, wait.roots == configuration.systemRoots {
            wait.device = configuration.device
            wait.attempt = attempt
            state.cardWait = wait
            return true
        }
        state.cardWait?.watch.cancel()
        guard let watch = SoundCardWatch(roots: configuration.systemRoots, queue: control, changed: { [weak self] in self?.soundCardsChanged() })
        else {
            state.cardWait = nil
            return false
        }
        state.cardWait = CardWait(watch: watch, device: configuration.device, roots: configuration.systemRoots, attempt: attempt)
        // What changed between the failed attempt and the watch: one attempt now.
        control.async { [weak self] in self?.soundCardsChanged() }
        return true
    }

    /// The sound cards changed while a wait watches them: the next attempt, unless udev is
    /// still setting up the card the device resolves to (its database entry says when it is done).
    func soundCardsChanged() {
        guard let wait = state.cardWait, let attempt = wait.attempt else { return }
        if let card = (try? SoundCardScan(roots: wait.roots).resolve(wait.device, roots: wait.roots))?.card,
           !SoundCardScan.isInitialized(card: card.index, roots: wait.roots) {
            return
        }
        attempt(self)
    }

    /// Ends the armed attempt. A card watch stays until this turn of the control queue is
    /// over: the attempt that called this arms the next on the same watch if it fails.
    func cancelRetry() {
        state.retryTimer?.cancel()
        state.retryTimer = nil
        guard state.cardWait != nil else { return }
        state.cardWait?.attempt = nil
        control.async { [weak self] in
            guard let self, let wait = self.state.cardWait, wait.attempt == nil else { return }
            wait.watch.cancel()
            self.state.cardWait = nil
        }
    }

    /// Whether a first attempt's error may be waited out: what `mayComeBack` says, and a refusal
    /// (EACCES) from a card udev has not finished setting up (its group comes with it).
    static func mayBeWaitedFor(_ error: ALSAError, _ configuration: RecorderConfiguration) -> Bool {
        if mayComeBack(error) { return true }
        guard [EACCES, EPERM].contains(error.errno), let card = (try? SoundCardScan(roots: configuration.systemRoots)
                .resolve(configuration.device, roots: configuration.systemRoots))?.card else { return false }
        return !SoundCardScan.isInitialized(card: card.index, roots: configuration.systemRoots)
    }

    /// Whether an attempt's error leaves the wait going. Waiting on a card, a refusal
    /// (EACCES) is udev not yet done with the node: the next change of its attributes ends it.
    func mayComeBack(_ error: ALSAError) -> Bool {
        if state.cardWait != nil, [EACCES, EPERM].contains(error.errno) { return true }
        return Self.mayComeBack(error)
    }

    /// One attempt to open the device again; on success, capture continues in a new segment.
    func retryDevice() {
        cancelRetry()
        guard case .waiting(let run, let wait) = state.phase else { return }
        var recording = run.recording
        var plan = run.plan
        let engine: CaptureEngine
        do throws(ALSAError) {
            engine = try openEngine(plan.configuration, state.listenPlan == nil ? plan.settings : plan.configuration.defaultSettings)
        } catch {
            let failure = RecorderError.opening(error)
            guard mayComeBack(error) else {
                _ = end(recording, failure: failure)
                return
            }
            scheduleRetry(run, error: failure, since: wait.since, attempts: wait.attempts + 1)
            return
        }
        let now = Date()
        do throws(RecorderError) {
            let files: SegmentFileFactory
            if let existing = plan.files {
                files = existing
            } else {
                // The first opening of a device that was missing at the start decides the format.
                files = try makeFiles(id: recording.id, name: recording.name, plan: plan, device: engine.configuration)
                plan.files = files
                recording.sampleRate = files.sampleRate
                recording.channels = files.channels
                if let duration = plan.duration {
                    plan.frameLimit = Int64((duration * Double(files.sampleRate)).rounded())
                    recording.frameLimit = plan.frameLimit
                }
            }
            recording.deviceFormat = DeviceFormat(engine.configuration)
            let gap = ledger.withLock { ledger -> Gap? in
                guard !ledger.gaps.isEmpty else { return nil }
                ledger.gaps[ledger.gaps.count - 1].end = now
                return ledger.gaps.last
            }
            // A triggered recording creates its files as events open.
            let (writer, segment): ((any AudioFileWriter)?, Segment) = plan.trigger == nil
                ? try files.create(index: plan.nextIndex, startedAt: now, gapBefore: gap) : (nil, files.placeholder(index: plan.nextIndex))
            let written = ledger.withLock { $0.frames }
            let remaining = plan.frameLimit.map { $0 - written }
            let session: RecordingConsumer
            do throws(RecorderError) {
                session = try makeSession(engine: engine, writer: writer, segment: segment,
                                          files: files, plan: plan, frameLimit: remaining)
            } catch {
                if let writer {
                    try? writer.close()
                    unlink(segment.partialPath)
                }
                throw error
            }
            plan.gapStart = nil
            if writer != nil {
                plan.nextIndex += 1
                recording.segment = segment
                recording.path = segment.path
            }
            if recording.startedAt == nil { recording.startedAt = now }
            published.levels.send(Levels(channels: Array(repeating: .silence, count: files.channels), clipCount: 0))
            logger.notice("capture device is back; recording continues", metadata: [
                "recording.id": "\(recording.id)", "segment.path": "\(segment.path)",
                "gap.seconds": "\(gap.map { String(printf: "%.3f", $0.duration) } ?? "")"])
            _ = startCapture(session, run: RecordingRun(recording: recording, plan: plan), preRoll: false)
        } catch {
            _ = end(recording, failure: error)
        }
    }

    /// `stop` while waiting: the recording ends with what its segments hold.
    func endWaiting() -> Recording {
        cancelRetry()
        guard var recording = state.current else { return published.state.value.recording! }  // a run waits: never
        let now = Date()
        ledger.withLock { ledger in
            if !ledger.gaps.isEmpty, ledger.gaps[ledger.gaps.count - 1].end == nil { ledger.gaps[ledger.gaps.count - 1].end = now }
        }
        recording.frames = ledger.withLock { $0.frames }
        publishTotals(rate: recording.sampleRate)
        return end(recording, failure: nil).0
    }
}
