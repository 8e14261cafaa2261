import Dispatch
import FoundationEssentials
import Glibc
import RecorderModel

/// A `start` at a later time (`at`): the state is `preparing` with the recording's
/// `scheduledAt`, and nothing is opened or created until then, so a start two hours away
/// holds no device and leaves no empty file; `stop` or `cancel` before then ends it without one.
struct ScheduledStart {
    let id: String
    let name: String?
    let settings: RecordingSettings?
    let duration: Double?
    let segments: SegmentSettings?
    let preRoll: Double?
    let trigger: TriggerSettings?
    let date: Date
    var timer: DispatchSourceTimer?
}

extension RecorderController {
    /// Takes `start` for later: checks what can be checked now (the settings, the name), publishes
    /// `preparing` with the time, and arms a wall-clock timer (a clock step moves it too).
    func scheduleStart(_ start: ScheduledStart) throws(RecorderError) -> Recording {
        if state.isActive { throw .invalidState("start", published.state.value) }
        if state.refusingRecordings { throw RecorderError(.invalidState, "cannot start: recd is shutting down") }
        let configuration = self.configuration
        let settings = start.settings ?? configuration.defaultSettings
        try settings.validate()
        try (start.segments ?? configuration.segments).validate()
        let fileExtension = settings.format.fileExtension
        let name = start.name ?? Self.firstFreeName("recording-" + CalendarTime.format(start.date, "%Y-%m-%dT%H-%M-%S"),
                                                    in: configuration.recordingsDirectory, fileExtension: fileExtension)
        try RecordingName.validate(name)
        var recording = Self.unopenedRecording(id: start.id, name: name, settings: settings, configuration: configuration,
                                               segments: start.segments ?? configuration.segments)
        recording.scheduledAt = start.date
        recording.trigger = start.trigger
        var start = start
        let timer = DispatchSource.makeTimerSource(queue: control)
        let seconds = start.date.timeIntervalSince1970
        timer.schedule(wallDeadline: DispatchWallTime(timespec: timespec(tv_sec: Int(seconds.rounded(.down)),
                                                                         tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))),
                       leeway: .milliseconds(1))
        timer.setEventHandler { [weak self] in self?.beginScheduledStart() }
        start.timer = timer
        published.error.send(nil)
        published.currentTime.send(0)
        published.recording.send(recording)
        enterScheduled(start, recording)
        timer.resume()
        logger.info("recording scheduled", metadata: ["recording.id": "\(start.id)", "recording.at": "\(start.date)"])
        return recording
    }

    /// The time has come: the start runs as if it had been asked for now, under the same id.
    /// A device missing then is waited for, and a name taken meanwhile is numbered (nobody is
    /// there to be asked); any other failure is the recorder's state and error.
    private func beginScheduledStart() {
        guard case .scheduled(let start, let recording) = state.phase else { return }
        do throws(RecorderError) {
            _ = try startOnQueue(name: recording.name, settings: start.settings, duration: start.duration,
                                 segments: start.segments, preRoll: start.preRoll, trigger: start.trigger,
                                 unattended: true, id: start.id)
        } catch {
            if published.error.value?.message != error.message { _ = fail(error) }
            if case .scheduled = state.phase {
                enterEnded(nil, failure: error)
                listeningChanged()
            }
        }
    }

    /// `stop` or `cancel` before the time: nothing was opened or created. Returns the recording
    /// that will not be (nil: no start was scheduled).
    func endScheduledStart() -> Recording? {
        guard case .scheduled(let start, let recording) = state.phase else { return nil }
        start.timer?.cancel()
        published.recording.send(nil)
        enterIdle()
        logger.info("scheduled recording cancelled", metadata: ["recording.id": "\(start.id)", "recording.at": "\(start.date)"])
        return recording
    }
}
