import ALSA
import AudioGraph
import Dispatch
import FoundationEssentials
import NIOConcurrencyHelpers
import RecorderModel

/// Listening: the device open without a file. The capture engine delivers to a level meter
/// and a pre-roll ring; a recording started meanwhile takes the same engine and begins its
/// file with the ring's frames (`startCapture`). On the recorder's control queue.
extension RecorderController {
    /// Opens the device and keeps hearing it without a file: levels are published, and the
    /// last `preRoll` seconds (the configured length when nil) are kept for the next `start`.
    /// While recording, listening joins the recording's device; the recording ended, recd goes
    /// back to listening. A device that is missing (or goes away) is waited for, as a
    /// recording waits, when `waitForDevice` is on.
    ///
    /// Listeners share one ring, as long as the longest pre-roll any of them asked for: listening
    /// again without a pre-roll, or with a shorter one, leaves it as it is (one client's
    /// `recctl listen` must not cut another's `--pre-roll 20`); a longer one replaces it with a
    /// longer ring, which fills afresh.
    @discardableResult
    func listen(preRoll: Double? = nil) throws(RecorderError) -> ListeningStatus {
        try onControl { () throws(RecorderError) in try beginListening(preRoll: preRoll, requested: true) }
    }

    /// `listen` on the control queue; `requested` false: for taps only (see `openTap`).
    func beginListening(preRoll: Double?, requested: Bool) throws(RecorderError) -> ListeningStatus {
        do {
            if state.refusingRecordings { throw RecorderError(.invalidState, "cannot listen: recd is shutting down") }
            let configuration = self.configuration
            if let preRoll, let refusal = Limits.refusal("preRoll", preRoll, Limits.preRoll, "seconds") {
                throw RecorderError(.invalidSettings, refusal)
            }
            if var listenPlan = state.listenPlan {
                if requested && !listenPlan.requested {
                    listenPlan.requested = true
                    self.state.listenPlan = listenPlan
                }
                // Already listening: only a longer pre-roll replaces the ring.
                if requested, let preRoll, preRoll > listenPlan.preRoll {
                    listenPlan.preRoll = preRoll
                    self.state.listenPlan = listenPlan
                    if let engine = state.engine { attachListening(to: engine) }
                    publishListening()
                }
                return currentListeningStatus() ?? published.listening.value!
            }
            let preRoll = preRoll ?? configuration.preRoll
            state.listenPlan = ListenPlan(preRoll: preRoll, since: Date(), configuration: configuration, requested: requested)
            if let engine = state.engine {
                attachListening(to: engine)
            } else if case .waiting(_, let wait) = state.phase {
                // The recording's attempts open the device for both; if it ends first,
                // listening goes on waiting with attempts of its own.
                state.listenPlan?.wait = wait
            } else {
                do throws(ALSAError) {
                    _ = try openEngine(configuration, configuration.defaultSettings)
                } catch {
                    let unknown = error.isUnknownDevice && !state.openedDevices.contains(configuration.device)
                    guard configuration.waitForDevice, Self.mayBeWaitedFor(error, configuration), !unknown else {
                        state.listenPlan = nil
                        throw fail(.opening(error), endsRecording: false)
                    }
                    logger.warning("capture device missing; listening waits for it", metadata: ["error.message": "\(error)"])
                    scheduleListeningRetry(error: .opening(error), since: Date(), attempts: 1)
                }
            }
            startListeningTimer(configuration)
            if !state.isActive {
                published.levels.send(levelsAreWanted ? Levels(channels: Array(repeating: .silence, count: state.engine?.configuration.channels ?? 0), clipCount: 0)
                                            : .none)
                listeningChanged()
            }
            publishListening()
            logger.info("listening", metadata: ["device.name": "\(configuration.device)", "preRoll.seconds": "\(preRoll)"])
            return currentListeningStatus() ?? published.listening.value!
        }
    }

    /// Stops listening: the pre-roll is dropped, and the device closes unless a recording
    /// uses it (it then closes when the recording ends). Returns what listening was.
    @discardableResult
    func unlisten() throws(RecorderError) -> ListeningStatus {
        try onControl { () throws(RecorderError) in
            guard state.listenPlan?.requested == true, let last = currentListeningStatus() else {
                throw RecorderError(.invalidState, "cannot stop listening: recd is not listening (state \(published.state.value.name.rawValue))")
            }
            if !tapGroups.withLockedValue({ $0.isEmpty }) {
                // Taps still hear the device: it stays open for them, and closes with the last.
                state.listenPlan?.requested = false
                logger.info("listening stopped; the device stays open for the taps", metadata: ["device.name": "\(last.device)"])
                return last
            }
            endListening()
            logger.info("listening stopped", metadata: ["device.name": "\(last.device)"])
            return last
        }
    }

    /// `status`'s levels. While someone meters the input (a subscriber, MQTT), the levels
    /// published; otherwise measured at the call, as AVAudioRecorder's `updateMeters()` does,
    /// from what is already there: a recording's meter (its file's levels since the last
    /// call), or listening's newest 0.1 s in the pre-roll ring. Nobody pays when nobody asks.
    /// Any thread.
    func currentLevels() -> Levels {
        guard configuration.meteringEnabled, !levelsAreWanted else { return published.levels.value }
        if let session = activeSession.withLock({ $0 }), session.started, !session.hasEnded, let meter = session.writer.meter {
            return meter.takeLevels()
        }
        if published.listening.value?.wait == nil, let ring = listeningParts.withLock({ $0.ring }),
           let levels = ring.levels(ofNewest: 0.1) {
            return levels
        }
        return published.levels.value
    }

    /// Listening's figures now (pre-roll held, frames captured); nil when not listening. Any
    /// thread, without waiting for the recorder's queue.
    func currentListeningStatus() -> ListeningStatus? {
        guard var status = published.listening.value else { return nil }
        guard status.wait == nil, let engine = activeEngine.withLock({ $0 }) else { return status }
        let ring = listeningParts.withLock { $0.ring }
        let rate = Double(engine.configuration.sampleRate)
        status.preRollHeld = Double(ring?.heldFrames.load(ordering: .relaxed) ?? 0) / rate
        status.framesCaptured = engine.frameCount
        status.firstFrameAt = engine.captureTime(ofPosition: 0).map { Date(timeIntervalSince1970: $0) }
        status.xruns = engine.overrunCount
        return status
    }

    func endListening() {
        state.listenPlan = nil
        state.listenTimer?.cancel()
        state.listenTimer = nil
        if let engine = state.engine, let parts = Optional(listeningParts.withLock { $0 }) {
            if let ring = parts.ring { engine.detach(ring, timeout: configuration.stopTimeout) }
            if let meter = parts.meter { engine.detach(meter, timeout: configuration.stopTimeout) }
        }
        listeningParts.withLock { $0 = (nil, nil) }
        endTaps(error: nil)
        if !state.isActive { cancelRetry() }
        published.listening.send(nil)
        if case .idle = state.phase {
            published.levels.send(.none)
            listeningChanged()
        }
        closeEngineIfUnused()
    }

    /// Attaches listening's meter and a new pre-roll ring to `engine` (replacing any before).
    func attachListening(to engine: CaptureEngine) {
        guard let listenPlan = state.listenPlan else { return }
        let old = listeningParts.withLock { $0 }
        let ring = listenPlan.preRoll > 0 ? PreRollRing(seconds: listenPlan.preRoll, configuration: engine.configuration) : nil
        let meter = listenPlan.configuration.meteringEnabled && levelsAreWanted ? InputMeter(configuration: engine.configuration, levelsInterval: levelsPeriod) : nil
        for consumer in [old.ring as (any CaptureConsumer)?, old.meter].compactMap({ $0 }) {
            engine.detach(consumer, timeout: listenPlan.configuration.stopTimeout)
        }
        listeningParts.withLock { $0 = (ring, meter) }
        do throws(RecorderError) {
            if let ring { try engine.attach(ring, timeout: listenPlan.configuration.stopTimeout) }
            if let meter { try engine.attach(meter, timeout: listenPlan.configuration.stopTimeout) }
            self.state.listenPlan?.wait = nil
        } catch {
            // The device would not start (or the engine ended meanwhile: its end is on its way).
            logger.error("listening could not start capture", metadata: ["error.message": "\(error.message)"])
            let now = Date()
            self.state.listenPlan?.wait = DeviceWait(error: error, since: now, retryAt: now, attempts: 0)
        }
        publishListening()
    }

    /// Attaches listening's meter when someone wants levels, detaches it when nobody does.
    func attachListeningMeter(to engine: CaptureEngine) {
        guard let listenPlan = state.listenPlan else { return }
        let wanted = listenPlan.configuration.meteringEnabled && levelsAreWanted
        let current = listeningParts.withLock { $0.meter }
        if wanted, let current {
            // The capture thread wakes as often as the levels' period needs, which follows
            // who wants them; the meter (and its clip count) stays.
            current.levelsInterval = levelsPeriod
        } else if wanted {
            let meter = InputMeter(configuration: engine.configuration, levelsInterval: levelsPeriod)
            listeningParts.withLock { $0.meter = meter }
            try? engine.attach(meter, timeout: listenPlan.configuration.stopTimeout)
        } else if !wanted, let current {
            listeningParts.withLock { $0.meter = nil }
            engine.detach(current, timeout: listenPlan.configuration.stopTimeout)
        }
    }

    /// Publishes listening as it stands (after it began, waits, resumes or changes).
    func publishListening() {
        guard let listenPlan = state.listenPlan else { return published.listening.send(nil) }
        let engine = self.state.engine
        let ring = listeningParts.withLock { $0.ring }
        published.listening.send(ListeningStatus(
            device: listenPlan.configuration.device, deviceFormat: engine.map { DeviceFormat($0.configuration) },
            since: listenPlan.since, preRollCapacity: listenPlan.preRoll, preRollBytes: ring?.bytes ?? 0,
            preRollHeld: 0, framesCaptured: engine?.frameCount ?? 0,
            firstFrameAt: nil, xruns: 0, wait: listenPlan.wait))
    }

    /// Levels while listening, from the input meter, at the configured interval; quiet while
    /// a recording publishes its own.
    func startListeningTimer(_ configuration: RecorderConfiguration) {
        state.listenTimer?.cancel()
        state.listenTimer = nil
        guard configuration.meteringEnabled, levelsAreWanted, state.listenPlan != nil else { return }
        let period = levelsPeriod
        if !recordingPublishes.load(ordering: .acquiring) { periods.withLock { $0.levels = period } }
        state.listenTimer = makeTimer(interval: period) { [weak self] in
            guard let self, let meter = listeningParts.withLock({ $0.meter }) else { return }
            let measured = meter.meter.takeLevels()
            if !recordingPublishes.load(ordering: .acquiring) { published.levels.send(measured) }
        }
    }

    /// Opens the device and starts an engine on it (the device itself starts with its first consumer).
    /// While listening, listening's meter and ring are attached to it at once: whoever opens
    /// the device (listening, a recording, an attempt after a loss) opens it for both.
    /// `opened` runs once the device is open, before listening (published) attaches to it.
    func openEngine(_ configuration: RecorderConfiguration, _ settings: RecordingSettings,
                    opened: (CaptureEngine) -> Void = { _ in }) throws(ALSAError) -> CaptureEngine {
        let (pcm, pcmConfiguration) = try Self.openDevice(configuration, settings)
        state.openedDevices.insert(configuration.device)
        let engine = CaptureEngine(pcm: pcm, configuration: pcmConfiguration)
        let failed = engine.serial
        engine.start { [weak self] error in
            guard let self else { return }
            control.async { self.engineFailed(failed, error: error) }
        }
        self.state.engine = engine
        activeEngine.withLock { $0 = engine }
        opened(engine)
        if state.listenPlan != nil {
            attachListening(to: engine)
            attachTaps(to: engine)
            attachSpectrum(to: engine)
        }
        return engine
    }

    /// The device failed under the engine. A recording was told first (its consumer) and
    /// waits, if it may, with its own attempts, which reopen the device for listening too;
    /// listening alone waits with attempts of its own.
    func engineFailed(_ failed: UInt64, error failure: RecorderError) {
        guard let engine = state.engine, engine.serial == failed else { return }
        self.state.engine = nil
        activeEngine.withLock { $0 = nil }
        listeningParts.withLock { $0 = (nil, nil) }
        detachTaps()
        endSpectrum()
        guard let listenPlan = state.listenPlan else { return }
        let since = Date()
        if case .waiting = state.phase {
            self.state.listenPlan?.wait = DeviceWait(error: failure, since: since, retryAt: since, attempts: 0)
            publishListening()
            return
        }
        guard listenPlan.configuration.waitForDevice else {
            logger.error("capture device lost; listening ends", metadata: ["error.message": "\(failure.message)"])
            published.error.send(failure)
            endTaps(error: failure)
            endListening()
            return
        }
        logger.warning("capture device lost; listening waits for it", metadata: ["error.message": "\(failure.message)"])
        scheduleListeningRetry(error: failure, since: since, attempts: 0)
    }

    func scheduleListeningRetry(error failure: RecorderError, since: Date, attempts: Int) {
        let wait = armRetry(error: failure, since: since, attempts: attempts,
                            configuration: state.listenPlan?.configuration) { $0.retryListening() }
        state.listenPlan?.wait = wait
        publishListening()
    }

    /// One attempt to open the device again for listening alone.
    func retryListening() {
        cancelRetry()
        guard let listenPlan = state.listenPlan, let wait = listenPlan.wait else { return }
        if let engine = state.engine {
            // Opened meanwhile (a recording's start): listening is on it already, or joins now.
            if listeningParts.withLock({ $0.ring == nil && $0.meter == nil }) { attachListening(to: engine) }
            return
        }
        do throws(ALSAError) {
            // Logged before listening is published again: whoever sees it back finds it in the journal.
            _ = try openEngine(listenPlan.configuration, listenPlan.configuration.defaultSettings) { engine in
                logger.notice("capture device is back; listening again", metadata: ["device.name": "\(engine.pcm.name)"])
            }
        } catch {
            guard mayComeBack(error) else {
                logger.error("capture device cannot be opened; listening ends", metadata: ["error.message": "\(error)"])
                published.error.send(.opening(error))
                endListening()
                return
            }
            scheduleListeningRetry(error: .opening(error), since: wait.since, attempts: wait.attempts + 1)
        }
    }

    /// A recording has ended (or never began): back to listening if recd listens, else the
    /// device closes.
    func returnToListeningOrClose() {
        guard let listenPlan = state.listenPlan else { return closeEngineIfUnused() }
        if state.engine == nil, state.retryTimer == nil, state.cardWait?.attempt == nil {
            // No device and nobody trying to open it (the recording's attempts ended with it):
            // listening waits with attempts of its own.
            let wait = listenPlan.wait
            scheduleListeningRetry(error: wait?.error ?? RecorderError(.deviceLost, "the capture device is not open"),
                                   since: wait?.since ?? Date(), attempts: wait?.attempts ?? 0)
        }
        // After the recording's end: listening again.
        listeningChanged()
    }

    /// Closes the device when neither a recording nor listening needs it.
    func closeEngineIfUnused() {
        guard state.listenPlan == nil, state.session == nil, let engine = state.engine else { return }
        if case .waiting = state.phase { return }
        endSpectrum(detachingFrom: engine)
        engine.close(timeout: configuration.stopTimeout)
        self.state.engine = nil
        activeEngine.withLock { $0 = nil }
    }
}

extension DeviceFormat {
    /// The format the device was opened in, as status and the recording topic say it.
    init(_ configuration: PCMConfiguration) {
        self.init(sampleFormat: configuration.sampleFormat.rawValue, sampleRate: configuration.sampleRate,
                  channels: configuration.channels)
    }
}
