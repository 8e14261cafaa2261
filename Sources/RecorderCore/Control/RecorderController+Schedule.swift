import Dispatch
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import RecorderModel

/// The schedule's part of the recorder (control queue, but for `status`'s copy).
struct ScheduleRun {
    var plan: ScheduledRecording?
    var timer: DispatchSourceTimer?
    /// The recording the schedule started, which a window's end stops.
    var recordingId: String?
    /// The schedule asked to listen between windows.
    var listens = false
    var status: ScheduleStatus?
    /// The hold for the clock was logged (once).
    var heldLogged = false
}

extension RecorderController {
    /// Follows `plan` from now on (nil: no schedule). The window of the moment takes effect at
    /// once: inside one, recording starts (unless one is under way).
    func follow(_ plan: ScheduledRecording?) throws(RecorderError) {
        if let plan { try plan.schedule.validate() }
        try onControl { () throws(RecorderError) in
            let previous = scheduling.withLock { run in
                defer { run.plan = plan }
                run.timer?.cancel()
                run.timer = nil
                if plan == nil { run.status = nil }
                return run
            }
            if plan == nil, previous.listens, state.listenPlan?.requested == true, !state.isActive {
                scheduling.withLock { $0.listens = false }
                endListening()
            }
            evaluateSchedule()
        }
    }

    /// Seconds a window open by the clock is still held for the clock's synchronization
    /// (`waitForClock`, counted on the boot clock from recd's start); nil: not held.
    func heldForClock(_ plan: ScheduledRecording) -> Double? {
        guard plan.waitForClock > 0, !clockMonitor.isSynchronized else { return nil }
        let left = plan.waitForClock - Double(DispatchTime.now().uptimeNanoseconds - startedUptime) / 1e9
        return left > 0 ? left : nil
    }

    /// The schedule followed now, if any.
    var scheduledRecording: ScheduledRecording? { scheduling.withLock { $0.plan } }

    /// The schedule's windows now (active, current, next); nil without a schedule. Any thread.
    func currentScheduleStatus() -> ScheduleStatus? {
        scheduling.withLock { $0.status }
    }

    /// On the control queue: acts on the window of the moment and arms a timer for the next change.
    func evaluateSchedule() {
        guard let plan = scheduling.withLock({ $0.plan }) else { return }
        let now = Date()
        var status = plan.schedule.status(at: now, zone: .system)
        let held = status.active ? heldForClock(plan) : nil
        status.heldForClock = held
        // Logged before the status shows it: whoever sees the window held finds why in the journal.
        if let held, !scheduling.withLock({ $0.heldLogged }) {
            scheduling.withLock { $0.heldLogged = true }
            logger.notice("recording window held until the system clock is synchronized",
                          metadata: ["schedule.wait_for_clock": "\(String(printf: "%.0f", held))"])
        }
        scheduling.withLock { $0.status = status }
        let ours = scheduling.withLock { $0.recordingId }
        if held != nil {
            // Held: nothing starts before the clock is synchronized or the wait is over.
        } else if status.active {
            if !state.isActive {
                do throws(RecorderError) {
                    let recording = try startOnQueue(name: plan.name, settings: nil, trigger: plan.trigger, unattended: true)
                    scheduling.withLock { $0.recordingId = recording.id }
                    logger.notice("recording window opened", metadata: [
                        "recording.id": "\(recording.id)", "window.end": "\(status.currentEnd.map(UTCTimestamp.text) ?? "")"])
                } catch {
                    logger.error("recording window opened, but recording could not start",
                                 metadata: ["error.code": "\(error.code.rawValue)", "error.message": "\(error.message)"])
                }
            }
        } else {
            if let ours, state.current?.id == ours {
                do throws(RecorderError) {
                    _ = try stopOnQueue()
                    logger.notice("recording window closed", metadata: ["recording.id": "\(ours)"])
                } catch {
                    logger.error("recording window closed, but the recording did not stop cleanly",
                                 metadata: ["error.message": "\(error.message)"])
                }
            }
            scheduling.withLock { $0.recordingId = nil }
            if plan.outside == .listen, state.listenPlan?.requested != true, !state.refusingRecordings {
                if (try? beginListening(preRoll: nil, requested: true)) != nil { scheduling.withLock { $0.listens = true } }
            }
        }
        // The next change, or an hour from now at most: a clock set or a time zone changed
        // in between is then noticed within the hour.
        // A hold ends with its time (a synchronization or a step re-evaluates at once: `init`).
        let next = min(plan.schedule.nextChange(after: now, zone: .system) ?? now.addingTimeInterval(3600),
                       now.addingTimeInterval(min(3600, held ?? 3600)))
        let timer = DispatchSource.makeTimerSource(queue: control)
        let seconds = max(next.timeIntervalSince1970, now.timeIntervalSince1970 + 0.001)
        let wallTime = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1_000_000_000))
        timer.schedule(wallDeadline: DispatchWallTime(timespec: wallTime), leeway: .milliseconds(1))
        timer.setEventHandler { [weak self] in self?.evaluateSchedule() }
        timer.resume()
        scheduling.withLock { run in
            run.timer?.cancel()
            run.timer = timer
        }
    }
}
