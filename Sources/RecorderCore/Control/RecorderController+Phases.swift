import AudioGraph
import Dispatch
import FoundationEssentials
import RecorderModel

/// The controller's state and every change of its phase, in one file: what the recorder can
/// be doing, what each of those holds, and how it gets from one to the next.
///
/// A recording is one `Phase` at a time, each with its own data; listening (the device open
/// without a file, `listenPlan`) runs beside any of them. The published `state` (a
/// `RecorderState`) is derived from the two (`derivedState`) and sent by the transitions
/// below, which are the only code that sets the phase: the rest of the controller reads the
/// phase, and changes a recording's data (`current`, `plan`) within its phase.
extension RecorderController {
    enum Phase {
        /// No recording: `idle`, or `listening` while listening.
        case idle
        /// The last recording ended (`finished`, or `failed`; a start that failed before a
        /// recording existed has none), shown until the next one, or listening.
        case finished(Recording)
        case failed(Recording?, RecorderError)
        /// A `start` at a later time (`preparing`, with `scheduledAt`): nothing opened or created.
        case scheduled(ScheduledStart, Recording)
        /// The file created and the capture session made, capture not begun (`preparing`);
        /// `startTimer` begins it at a `record(at:)`'s time.
        case prepared(RecordingRun, RecordingConsumer, startTimer: DispatchSourceTimer?)
        case recording(RecordingRun, RecordingConsumer)
        case paused(RecordingRun, RecordingConsumer)
        /// `stop` waits for the capture thread's end.
        case stopping(RecordingRun, RecordingConsumer)
        /// The device is missing (at the start) or was lost: no capture session; an attempt is armed.
        case waiting(RecordingRun, DeviceWait)
    }

    /// A recording under way: as published (its segment, path, pre-roll), and what every one
    /// of its segments is made with, across device losses.
    struct RecordingRun {
        var recording: Recording
        var plan: SessionPlan
    }

    /// Everything the executor changes, and only it: read and written on `control` alone.
    struct ControlState {
        /// The recording's phase: set by the transitions in this file alone.
        fileprivate(set) var phase: Phase = .idle
        // The device
        /// The capture engine: open while listening, recording or serving taps.
        var engine: CaptureEngine?
        /// The devices opened at least once: known to exist, so waited for when missing.
        var openedDevices: Set<String> = []
        /// The next attempt to open a missing or lost device (a recording's or listening's).
        var retryTimer: DispatchSourceTimer?
        /// Or, for a device on a card, the watch on /dev/snd and udev that makes the next attempt.
        var cardWait: CardWait?
        // A recording
        /// Its elapsed-time and levels timers (on the timer queue).
        var timers: [DispatchSourceTimer] = []
        // Listening, taps, the spectrum
        /// Listening's settings while it is on.
        var listenPlan: ListenPlan?
        /// Listening's levels timer.
        var listenTimer: DispatchSourceTimer?
        /// The spectrum's node and the engine it is on.
        var spectrumNode: (node: SpectrumNode, engine: UInt64)?
        // The daemon
        /// Set once the daemon is shutting down: no recording may start after the last `stop`.
        var refusingRecordings = false

        /// The recording's capture session on the engine: prepared, recording, paused or stopping.
        var session: RecordingConsumer? {
            switch phase {
            case .prepared(_, let session, _), .recording(_, let session), .paused(_, let session), .stopping(_, let session): session
            case .idle, .finished, .failed, .scheduled, .waiting: nil
            }
        }

        /// The recording under way, from its preparation (or its wait for the device) to its end.
        var run: RecordingRun? {
            switch phase {
            case .prepared(let run, _, _), .recording(let run, _), .paused(let run, _), .stopping(let run, _), .waiting(let run, _): run
            case .idle, .finished, .failed, .scheduled: nil
            }
        }

        /// The recording as published, while one is under way. Setting it changes the
        /// recording's data, never its phase.
        var current: Recording? {
            get { run?.recording }
            set { if let newValue { updateRun { $0.recording = newValue } } }
        }

        /// What the recording's segments are made with, while one is under way.
        var plan: SessionPlan? {
            get { run?.plan }
            set { if let newValue { updateRun { $0.plan = newValue } } }
        }

        /// A recording exists (prepared, scheduled, recording, paused, stopping or waiting).
        var isActive: Bool {
            switch phase {
            case .idle, .finished, .failed: false
            case .scheduled, .prepared, .recording, .paused, .stopping, .waiting: true
            }
        }

        private mutating func updateRun(_ change: (inout RecordingRun) -> Void) {
            switch phase {
            case .prepared(var run, let session, let timer): change(&run); phase = .prepared(run, session, startTimer: timer)
            case .recording(var run, let session): change(&run); phase = .recording(run, session)
            case .paused(var run, let session): change(&run); phase = .paused(run, session)
            case .stopping(var run, let session): change(&run); phase = .stopping(run, session)
            case .waiting(var run, let wait): change(&run); phase = .waiting(run, wait)
            case .idle, .finished, .failed, .scheduled: assertionFailure("no recording under way to change")
            }
        }
    }

    /// What `state` says: the phase, and listening beside no recording.
    func derivedState() -> RecorderState {
        switch state.phase {
        case .idle: state.listenPlan == nil ? .idle : .listening
        case .finished(let recording): .finished(recording)
        case .failed(let recording, let failure): .failed(recording, failure)
        case .scheduled(_, let recording): .preparing(recording)
        case .prepared(let run, _, _): .preparing(run.recording)
        case .recording(let run, _): .recording(run.recording)
        case .paused(let run, _): .paused(run.recording)
        case .stopping(let run, _): .stopping(run.recording)
        case .waiting(let run, let wait): .waitingForDevice(run.recording, wait)
        }
    }

    /// Publishes the derived state, when it changed.
    func publishState() {
        let derived = derivedState()
        if published.state.value != derived { published.state.send(derived) }
    }

    // MARK: Transitions

    private func enter(_ phase: Phase, publishing: Bool = true) {
        state.phase = phase
        // For the readers off the queue (the storage guard, the write buffer's and the
        // trigger's status, a poll's levels).
        let session = state.session
        activeSession.withLock { $0 = session }
        if publishing { publishState() }
    }

    /// A recording is prepared: its file and capture session exist (`prepare`, `start`).
    func enterPrepared(_ run: RecordingRun, session: RecordingConsumer) {
        enter(.prepared(run, session, startTimer: nil))
    }

    /// A prepared recording's `record(at:)`: published with its `scheduledAt`.
    func enterPrepared(startingAt recording: Recording, timer: DispatchSourceTimer) {
        guard case .prepared(var run, let session, let old) = state.phase else { return assertionFailure("not prepared") }
        old?.cancel()
        run.recording = recording
        enter(.prepared(run, session, startTimer: timer))
    }

    /// A prepared recording starts now (or will not): its `record(at:)` timer ends.
    func cancelStartTimer() {
        guard case .prepared(let run, let session, let timer?) = state.phase else { return }
        timer.cancel()
        enter(.prepared(run, session, startTimer: nil))
    }

    /// A `start` at a later time is taken.
    func enterScheduled(_ start: ScheduledStart, _ recording: Recording) {
        enter(.scheduled(start, recording))
    }

    /// Capture begins (a prepared recording's, or a waiting one's after its device came
    /// back). Published once the first file has its name: `startCapture` calls
    /// `publishState()` when it has.
    func enterCapturing(_ run: RecordingRun, session: RecordingConsumer) {
        enter(.recording(run, session), publishing: false)
    }

    func enterPaused() {
        guard case .recording(let run, let session) = state.phase else { return assertionFailure("not recording") }
        enter(.paused(run, session))
    }

    func enterResumed() {
        guard case .paused(let run, let session) = state.phase else { return assertionFailure("not paused") }
        enter(.recording(run, session))
    }

    func enterStopping() {
        guard let run = state.run, let session = state.session else { return assertionFailure("no recording to stop") }
        enter(.stopping(run, session))
    }

    /// The recording waits for its device (again, after a failed attempt, with the new `wait`).
    func enterWaiting(_ run: RecordingRun, _ wait: DeviceWait) {
        enter(.waiting(run, wait))
    }

    /// The recording ended (`recording` nil: a start failed before one existed). While
    /// listening, listening follows (`listeningChanged`, once listening's own wait is armed).
    func enterEnded(_ recording: Recording?, failure: RecorderError?) {
        if let failure {
            enter(.failed(recording, failure))
        } else if let recording {
            enter(.finished(recording))
        }
    }

    /// No recording any more, nothing to show of one (cancelled, discarded, a scheduled start
    /// called off): idle, or listening.
    func enterIdle() {
        enter(.idle)
    }

    /// Listening began or ended: beside no recording, that is the state.
    func listeningChanged() {
        switch state.phase {
        case .idle: publishState()
        case .finished, .failed: if state.listenPlan != nil { enter(.idle) }
        default: break
        }
    }
}
