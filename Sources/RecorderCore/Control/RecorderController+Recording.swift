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

/// A recording's life on the control queue: preparing its files and capture session, starting
/// capture (with the pre-roll), finalizing each segment and the end, and the names its files take.
extension RecorderController {
    // MARK: On the control queue

    func onControl<T>(_ body: () throws(RecorderError) -> T) throws(RecorderError) -> T {
        let result: Result<T, RecorderError> = control.sync { Result { () throws(RecorderError) in try body() } }
        return try result.get()
    }

    @discardableResult
    func prepareOnQueue(name: String?, settings: RecordingSettings?, segments: SegmentSettings?,
                                operation: String = "prepare a recording", id: String? = nil, waitingAllowed: Bool = false,
                                unattended: Bool = false, duration: Double? = nil,
                                trigger: TriggerSettings? = nil) throws(RecorderError) -> Recording {
        switch state.phase {
        case .idle, .finished, .failed: break
        case .scheduled(let start, _) where start.id == id && id != nil: break  // its time has come
        default: throw .invalidState(operation, published.state.value)
        }
        if state.refusingRecordings { throw RecorderError(.invalidState, "cannot \(operation): recd is shutting down") }
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
        if let errnoValue = Directories.make(directory) {
            throw fail(RecorderError(.failedToBegin, "cannot create recordings directory \(directory): \(Directories.reason(errnoValue))"))
        }
        try storageGuard.checkSpaceBeforeStart(configuration)
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
        if let listening = self.state.engine {
            // Listening: the device is open and stays as it is.
            engine = listening
        } else {
            do throws(ALSAError) {
                engine = try openEngine(configuration, settings)
            } catch {
                let unknown = error.isUnknownDevice && !state.openedDevices.contains(configuration.device)
                guard waitingAllowed, configuration.waitForDevice, Self.mayBeWaitedFor(error, configuration), !unknown || unattended else {
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
        ledger.withLock { $0 = SessionLedger() }
        published.error.send(nil)
        published.clearSilenceWarning()
        published.currentTime.send(0)
        published.statistics.send(CaptureStatistics())
        published.levels.send(Levels(channels: Array(repeating: .silence, count: files.channels), clipCount: 0))
        published.recording.send(recording)
        enterPrepared(RecordingRun(recording: recording, plan: plan), session: session)
        logger.info("recording prepared", metadata: [
            "recording.id": "\(recording.id)", "recording.path": "\(segment.path)", "device.name": "\(configuration.device)",
            "device.format": "\(pcmConfiguration.sampleFormat.rawValue)/\(pcmConfiguration.sampleRate)/\(pcmConfiguration.channels)",
        ])
        return recording
    }

    /// Opens and configures the capture device for `settings` (listening: the default settings).
    static func openDevice(_ configuration: RecorderConfiguration,
                                   _ settings: RecordingSettings) throws(ALSAError) -> (CapturePCM, PCMConfiguration) {
        let (pcm, _) = try SoundDevices.open(configuration.device, roots: configuration.systemRoots)
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
        // ENOTUNIQ: the name matches several cards; recd does not guess, then or later.
        ![EACCES, EPERM, EINVAL, ENOMEM, ENOSYS, ENOTUNIQ].contains(error.errno)
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
            channels: fileChannels, source: plan.configuration.sourceName)
    }

    func makeSession(engine: CaptureEngine, writer: (any AudioFileWriter)?,
                             segment: Segment, files: SegmentFileFactory, plan: SessionPlan,
                             frameLimit: Int64?) throws(RecorderError) -> RecordingConsumer {
        let gate = plan.trigger.map { trigger in
            EventGate(settings: trigger, preRoll: trigger.preRoll ?? plan.configuration.preRoll,
                      configuration: engine.configuration, counters: plan.triggerCounters, firstIndex: plan.nextIndex,
                      announce: { [weak self] event in self?.published.triggerEvent.send(event) })
        }
        let disk = try SegmentWriter(
            configuration: engine.configuration, deviceName: engine.pcm.name, maximumChunkFrames: engine.maximumChunkFrames,
            file: writer, segment: segment, files: files,
            clock: SegmentClock(settings: plan.segments, rate: files.sampleRate), gate: gate,
            segmentClosed: { [weak self, directory = files.directory] segment, failure in
                self?.segmentClosed(segment, failure: failure, directory: directory)
            },
            segmentStarted: { [weak self] in
                guard let self else { return }
                control.async {
                    guard let session = self.state.session else { return }
                    // A gap ends when audio flows again: the first frame's time, known now.
                    if let gap = session.writer.currentSegment.withLock({ $0.gapBefore }) {
                        self.ledger.withLock { ledger in
                            if let last = ledger.gaps.indices.last, ledger.gaps[last].start == gap.start { ledger.gaps[last].end = gap.end }
                        }
                    }
                    self.updateCurrentSegment(of: session)
                }
            },
            clockSynchronized: { [clockMonitor] in clockMonitor.isSynchronized },
            fileRate: files.sampleRate, fileChannels: files.channels, converterQuality: plan.settings.quality,
            frameLimit: frameLimit, metering: plan.configuration.meteringEnabled,
            syncInterval: plan.configuration.syncInterval,
            spaceGuard: storageGuard.makeSpaceGuard(plan.configuration, settings: plan.settings, fileRate: files.sampleRate,
                                       fileChannels: files.channels),
            sixteenBitFile: plan.settings.effectiveBitDepth == 16,
            gapFound: { [weak self] gap, frames in self?.gapFound(gap, frames: frames) ?? gap })
        return RecordingConsumer(
            engine: engine, writer: disk, writeBuffer: plan.configuration.writeBuffer,
            preRollRoom: plan.trigger == nil && state.listenPlan != nil ? Swift.max(plan.preRoll ?? 0, state.listenPlan?.preRoll ?? 0) : 0)
    }

    /// The recording's write buffer now; nil when nothing records. Any thread.
    func currentWriteBuffer() -> WriteBufferStatus? {
        guard published.state.value.isActive, let session = activeSession.withLock({ $0 }), session.started else { return nil }
        let (held, peak) = session.writeBufferFill
        return WriteBufferStatus(capacity: Double(session.worker.ring.capacityBytes) / Double(session.configuration.bytesPerFrame)
                                     / Double(session.configuration.sampleRate),
                                 bytes: session.worker.ring.bytes, held: held, peak: peak,
                                 overflows: session.writeBufferOverflows.load(ordering: .relaxed))
    }

    /// The worker found audio lost between two chunks (the device overran, or the disk fell
    /// behind by more than the write buffer): the file before it is closed and the next has
    /// begun. Logged with its length and counted in the statistics' gaps (status, MQTT's problem);
    /// returns it as counted (its position in the whole recording).
    func gapFound(_ gap: Gap, frames: Int64) -> Gap {
        logger.warning("audio lost: the recording goes on in a new file", metadata: [
            "lost.seconds": "\(String(printf: "%.3f", gap.duration))", "lost.frames": "\(frames)",
            "gap.start": "\(gap.start)", "error.message": "\(gap.error.message)"])
        return ledger.withLock { ledger in
            var gap = gap
            gap.position += ledger.frames
            ledger.gaps.append(gap)
            return gap
        }
    }

    /// A segment the capture thread closed is finalized (on its sync queue): count it,
    /// announce it, and show the next one in `recording`.
    func segmentClosed(_ segment: Segment, failure: RecorderError?, directory: String) {
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
            guard let session = state.session else { return }
            updateCurrentSegment(of: session)
        }
    }

    /// Logs the closed segment in its session's log (what `recordings.list` groups by) and
    /// publishes it.
    func announce(_ segment: Segment, directory: String) {
        // A file begun before the clock was synchronized, closing after: its true start and name first.
        let segment = redater.correctedAtClose(segment, directory: directory)
        // A recording that is one file needs no log to be listed as one.
        if segment.index > 1 || segment.endReason != .end { RecordingLibrary(directory: directory).log(segment) }
        logger.info("segment closed", metadata: [
            "recording.id": "\(segment.recordingId)", "segment.index": "\(segment.index)", "segment.path": "\(segment.path)",
            "segment.frames": "\(segment.frames)", "segment.end": "\(segment.endReason?.rawValue ?? "")",
        ])
        published.closedSegment.send(segment)
        storageGuard.requestRetentionPass()
    }

    /// Publishes the segment the capture thread is writing now (after a boundary or split).
    func updateCurrentSegment(of session: RecordingConsumer) {
        guard session === self.state.session, var recording = state.current else { return }
        let segment = session.writer.currentSegment.withLock { $0 }
        guard recording.segment != segment else { return }
        recording.segment = segment
        recording.path = segment.path
        state.current = recording
        // Only `recording` follows the segments: `state` changes (and is published) on
        // transitions, and its recording is as of the last one.
        published.recording.send(recording)
    }

    func recordOnQueue(duration: Double?, at date: Date?) throws(RecorderError) -> Recording {
        guard case .prepared(let run, let session, _) = state.phase else { throw .invalidState("record", published.state.value) }
        var recording = run.recording
        if let date, let refusal = Limits.refusal(at: date) { throw RecorderError(.invalidSettings, refusal) }
        if let duration {
            try Self.validate(duration: duration)
            let frames = Int64((duration * Double(recording.sampleRate)).rounded())
            session.writer.frameLimit = frames
            recording.frameLimit = frames
            state.plan?.frameLimit = frames
        }
        if let date, date > Date() {
            recording.scheduledAt = date
            published.recording.send(recording)
            let timer = DispatchSource.makeTimerSource(queue: control)
            let seconds = date.timeIntervalSince1970
            let wallTime = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1_000_000_000))
            timer.schedule(wallDeadline: DispatchWallTime(timespec: wallTime), leeway: .milliseconds(1))
            timer.setEventHandler { [weak self, session] in self?.beginCapture(session) }
            enterPrepared(startingAt: recording, timer: timer)
            timer.resume()
            logger.info("recording scheduled", metadata: ["recording.id": "\(recording.id)", "recording.at": "\(date)"])
            return recording
        }
        state.current = recording
        return beginCapture(session) ?? recording
    }

    @discardableResult
    func beginCapture(_ session: RecordingConsumer) -> Recording? {
        guard case .prepared(var run, let prepared, _) = state.phase, prepared === session, !session.started else { return nil }
        cancelStartTimer()
        run.recording.startedAt = Date()
        let recording = startCapture(session, run: run, preRoll: true)
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
    func startCapture(_ session: RecordingConsumer, run: RecordingRun, preRoll: Bool) -> Recording {
        var recording = run.recording
        enterCapturing(run, session: session)
        let taken = NIOLockedValueBox<PreRoll?>(nil)
        var replay: (RecordingConsumer) -> Void = { _ in }
        if preRoll, session.writer.gate == nil, let listenPlan = state.listenPlan, let ring = listeningParts.withLock({ $0.ring }) {
            let wanted = state.plan?.preRoll ?? listenPlan.preRoll
            replay = { session in
                let engine = session.engine
                let deviceRate = Double(engine.configuration.sampleRate)
                let frames = Swift.min(Int((wanted * deviceRate).rounded()), ring.heldFrames.load(ordering: .relaxed))
                // The duration counts from the start: the pre-roll comes on top.
                if let limit = session.writer.frameLimit {
                    session.writer.frameLimit = limit + Int64((Double(frames) * Double(session.writer.fileRate) / deviceRate).rounded())
                }
                let (got, first) = ring.replay(frames: frames, into: session, chunkFrames: engine.maximumChunkFrames,
                                               captureTime: engine.captureTime(ofPosition:),
                                               clockOffset: engine.wallClockOffset ?? .nan)
                taken.withLock { $0 = PreRoll(requested: wanted, seconds: Double(got) / deviceRate,
                                              frames: Int64(got), firstFrame: first) }
            }
        }
        do throws(RecorderError) {
            try session.start(preRoll: replay) { [weak self] outcome in
                guard let self else { return }
                control.async {
                    guard session === self.state.session else { return }  // stop() or cancel() got there first
                    _ = self.finalize(session, outcome: outcome)
                }
            }
        } catch {
            // The device would not start: nothing was captured.
            logger.error("capture could not start", metadata: ["error.message": "\(error.message)"])
            return finalize(session, outcome: .failed(error)).0
        }
        recording.preRoll = taken.withLock { $0 }
        if let limit = session.writer.frameLimit, recording.frameLimit != nil {
            recording.frameLimit = limit
            state.plan?.frameLimit = limit
        }
        if session.awaitFirstFrame(timeout: Self.firstFrameWait), session.writer.gate == nil {
            let segment = session.writer.currentSegment.withLock { $0 }
            recording.segment = segment
            recording.path = segment.path
            // With a pre-roll the recording began before the start: with the first pre-rolled frame.
            if segment.index == 1, recording.preRoll.map({ $0.frames > 0 }) == true { recording.startedAt = segment.startedAt }
        }
        state.current = recording
        attachSpectrum(to: session.engine)
        startTimers(for: session, rate: recording.sampleRate)
        published.recording.send(recording)
        publishState()
        return recording
    }

    /// Closes and renames the file after capture ended, and publishes the end state, or, when
    /// the device went away and `mayWait`, starts waiting for it.
    func finalize(_ session: RecordingConsumer, outcome: CaptureOutcome,
                          mayWait: Bool = true) -> (Recording, RecorderError?) {
        var recording = state.current!
        stopTimers()
        var failure: RecorderError?
        if case .failed(let error) = outcome { failure = error }
        let deviceLost = failure?.code == .deviceLost
        // A lost device stopped delivering at its last read, which for a stalled one was
        // seconds before the loss was noticed (CaptureEngine.stallLimit): the gap begins there.
        let endedAt = deviceLost ? session.engine.lastProgressDate : Date()
        let waiting = mayWait && deviceLost && (state.plan?.configuration.waitForDevice ?? false)
        var last = session.writer.finalSegment(endedAt: endedAt, reason: waiting ? .deviceLost : .end)
        var saveFailure: RecorderError?
        do throws(RecorderError) {
            try session.writer.closeFile()
        } catch {
            saveFailure = error
        }
        let earlier = ledger.withLock { $0.lastClosed }
        if session.writer.gate != nil, !session.writer.hasOpenFile {
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
                if last.index == 1, state.plan?.segments.effectiveTemplate == SegmentSettings.single {
                    // A recording in one file is known by its file's name.
                    recording.name = FilePath(last.path).stem ?? ""
                }
            }
            ledger.withLock {
                $0.segmentsClosed += 1
                $0.lastClosed = last
            }
            announce(last, directory: state.plan?.configuration.recordingsDirectory ?? configuration.recordingsDirectory)
            if let event = session.writer.eventEnded(in: last, reason: deviceLost ? "deviceLost" : "failed") { published.triggerEvent.send(event) }
        }
        // The next capture session (after a gap) numbers its segments on from here.
        state.plan?.nextIndex = session.writer.gate?.nextIndex ?? session.writer.currentSegment.withLock { $0.index } + 1
        let totals = ledger.withLock { ledger in
            ledger.frames += session.writer.framesWritten.load(ordering: .acquiring)
            ledger.xruns += session.writer.xruns.load(ordering: .relaxed)
            ledger.framesLost += session.writer.framesLost.load(ordering: .relaxed)
            ledger.framesCaptured += session.writer.framesCaptured.load(ordering: .relaxed)
            ledger.deviceClockDriftPPM = session.deviceClockDriftPPM ?? ledger.deviceClockDriftPPM
            return ledger
        }
        recording.frames = totals.frames
        if session.writer.gate == nil || earlier != nil || last.frames > 0 {
            recording.segment = last
            recording.path = last.path
        }
        publishTotals(rate: recording.sampleRate)
        if waiting, saveFailure == nil, let lost = failure, var run = state.run {
            run.recording = recording
            run.plan.gapStart = endedAt
            published.recording.send(recording)
            ledger.withLock { $0.gaps.append(Gap(start: endedAt, position: $0.frames, error: lost)) }
            publishTotals(rate: recording.sampleRate)
            logger.warning("capture device lost; waiting for it", metadata: [
                "recording.id": "\(recording.id)", "error.message": "\(lost.message)"])
            scheduleRetry(run, error: lost, since: endedAt, attempts: 0)
            return (recording, nil)
        }
        failure = saveFailure ?? failure
        return end(recording, failure: failure)
    }

    /// Publishes the end of a recording: finished, or failed with `failure`.
    func end(_ recording: Recording, failure: RecorderError?) -> (Recording, RecorderError?) {
        var recording = recording
        recording.endedAt = Date()
        published.clearSilenceWarning()
        published.recording.send(recording)
        if let failure {
            logger.error("recording failed", metadata: ["recording.id": "\(recording.id)", "error.code": "\(failure.code.rawValue)",
                                                        "error.message": "\(failure.message)"])
            published.error.send(failure)
        } else {
            logger.info("recording finished", metadata: ["recording.id": "\(recording.id)", "recording.frames": "\(recording.frames)"])
        }
        enterEnded(recording, failure: failure)
        returnToListeningOrClose()
        return (recording, failure)
    }

    /// A prepared recording that will not start after all: close and delete its file.
    func discardPrepared() {
        guard let session = state.session, let recording = state.current else { return }
        session.writer.discardFile()
        unlink(recording.partialPath)
        published.recording.send(nil)
        enterIdle()
        returnToListeningOrClose()
    }

    /// Records a failure before anything was captured.
    func fail(_ failure: RecorderError, endsRecording: Bool = true) -> RecorderError {
        logger.error(endsRecording ? "recording could not begin" : "listening could not begin",
                     metadata: ["error.code": "\(failure.code.rawValue)", "error.message": "\(failure.message)"])
        published.error.send(failure)
        // A recording under way (a start refused beside it) goes on; a start scheduled for
        // later is what failed. Listening goes on: the device it holds stays open.
        guard endsRecording else { return failure }
        if case .scheduled = state.phase {} else if state.isActive { return failure }
        enterEnded(nil, failure: failure)
        listeningChanged()
        return failure
    }

    // MARK: Helpers

    static func validate(duration: Double) throws(RecorderError) {
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

    static func isTaken(_ name: String, in directory: String, fileExtension: String) -> Bool {
        let path = "\(directory)/\(name).\(fileExtension)"
        return FileManager.default.fileExists(atPath: path) || FileManager.default.fileExists(atPath: path + ".part")
    }
}
extension RecorderController {
    /// The triggered recording's detector now (level, floor, thresholds, counts); nil when
    /// the recording (if any) is not triggered. Any thread, without waiting for the
    /// recorder's queue.
    func currentTriggerStatus() -> TriggerStatus? {
        guard let recording = published.recording.value, let settings = recording.trigger, published.state.value.isActive else { return nil }
        let session = activeSession.withLock { $0 }
        let trigger = session?.writer.gate?.trigger
        let counters = activeTrigger.withLock { $0 }
        let floor = trigger?.currentFloor
        let levels = trigger?.currentThresholds ?? settings.levels(floor: floor)
        return TriggerStatus(
            settings: settings, state: counters?.onset == nil ? "armed" : "open",
            events: counters?.events.load(ordering: .relaxed) ?? 0, discarded: counters?.discarded.load(ordering: .relaxed) ?? 0,
            level: trigger?.currentLevel ?? -160, floor: floor, openLevel: levels?.open, closeLevel: levels?.close,
            eventOnset: counters?.onset.map { Date(timeIntervalSince1970: $0) })
    }
}
