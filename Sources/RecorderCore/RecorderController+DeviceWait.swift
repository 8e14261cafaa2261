import ALSA
import AudioGraph
import Dispatch
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import RecorderModel

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
        self.state.plan = plan
        state.current = recording
        ledger.withLock { $0 = SessionLedger(gaps: [Gap(start: since, position: 0, error: error)]) }
        published.error.send(nil)
        published.clearSilenceWarning()
        published.currentTime.send(0)
        published.statistics.send(CaptureStatistics(gaps: ledger.withLock { $0.gaps }))
        published.recording.send(recording)
        logger.warning("capture device missing; waiting for it", metadata: [
            "recording.id": "\(id)", "error.message": "\(error.message)"])
        scheduleRetry(recording, error: error, since: since, attempts: 1)
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

    /// Publishes the wait and arms the next attempt: 0.1 s, doubling, at most `maximumRetryInterval`.
    func scheduleRetry(_ recording: Recording, error: RecorderError, since: Date, attempts: Int) {
        let wait = armRetry(error: error, since: since, attempts: attempts,
                            maximum: state.plan?.configuration.maximumRetryInterval) { $0.retryDevice() }
        published.state.send(.waitingForDevice(recording, wait))
    }

    /// Arms the one retry timer (replacing any): `attempt` runs on the control queue after
    /// 0.1 s, doubling with `attempts`, at most `maximum` (1.5 s when nil). Returns the wait to publish.
    func armRetry(error: RecorderError, since: Date, attempts: Int, maximum: Double?,
                          _ attempt: @escaping @Sendable (RecorderController) -> Void) -> DeviceWait {
        let delay = Swift.min(maximum ?? 1.5, 0.1 * Double(1 << Swift.min(attempts, 20)))
        cancelRetry()
        let timer = DispatchSource.makeTimerSource(queue: control)
        timer.schedule(deadline: .now() + .nanoseconds(Int(delay * 1_000_000_000)), leeway: .milliseconds(10))
        timer.setEventHandler { [weak self] in if let self { attempt(self) } }
        timer.resume()
        state.retryTimer = timer
        return DeviceWait(error: error, since: since, retryAt: Date().addingTimeInterval(delay), attempts: attempts)
    }

    func cancelRetry() {
        state.retryTimer?.cancel()
        state.retryTimer = nil
    }

    /// One attempt to open the device again; on success, capture continues in a new segment.
    func retryDevice() {
        cancelRetry()
        guard case .waitingForDevice(var recording, let wait) = published.state.value, var plan = state.plan else { return }
        let engine: CaptureEngine
        do throws(ALSAError) {
            engine = try openEngine(plan.configuration, state.listenPlan == nil ? plan.settings : plan.configuration.defaultSettings)
        } catch {
            let failure = RecorderError.opening(error)
            guard Self.mayComeBack(error) else {
                _ = end(recording, failure: failure)
                return
            }
            scheduleRetry(recording, error: failure, since: wait.since, attempts: wait.attempts + 1)
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
            self.state.plan = plan
            if recording.startedAt == nil { recording.startedAt = now }
            self.state.session = session
            activeSession.withLock { $0 = session }
            state.current = recording
            published.levels.send(Levels(channels: Array(repeating: .silence, count: files.channels), clipCount: 0))
            logger.notice("capture device is back; recording continues", metadata: [
                "recording.id": "\(recording.id)", "segment.path": "\(segment.path)",
                "gap.seconds": "\(gap.map { String(printf: "%.3f", $0.duration) } ?? "")"])
            _ = startCapture(session, recording: recording, preRoll: false)
        } catch {
            _ = end(recording, failure: error)
        }
    }

    /// `stop` while waiting: the recording ends with what its segments hold.
    func endWaiting() -> Recording {
        cancelRetry()
        guard var recording = state.current else { return published.state.value.recording! }
        let now = Date()
        ledger.withLock { ledger in
            if !ledger.gaps.isEmpty, ledger.gaps[ledger.gaps.count - 1].end == nil { ledger.gaps[ledger.gaps.count - 1].end = now }
        }
        recording.frames = ledger.withLock { $0.frames }
        publishTotals(rate: recording.sampleRate)
        return end(recording, failure: nil).0
    }
}
