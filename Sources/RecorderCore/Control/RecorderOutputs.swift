import FoundationEssentials
import RecorderModel

/// What the recorder publishes: one `Observed` value per topic, read by `Recorder`'s users
/// (the socket's topic hub, MQTT, hooks, metrics) and sent only by the recorder's parts (the
/// controller, its timers, the storage guard, the capture side's announcements).
final class RecorderOutputs: Sendable {
    let state = Observed<RecorderState>(.idle)
    let currentTime = Observed<Double>(0)
    let error = Observed<RecorderError?>(nil)
    let levels = Observed<Levels>(.none)
    let recording = Observed<Recording?>(nil)
    let statistics = Observed<CaptureStatistics>(CaptureStatistics())
    let closedSegment = Observed<Segment?>(nil)
    let redatedFile = Observed<RedatedFile?>(nil)
    let warning = Observed<RecorderWarning?>(nil)
    let storage = Observed<StorageStatus?>(nil)
    let listening = Observed<ListeningStatus?>(nil)
    let retentionDeletion = Observed<RetentionDeletion?>(nil)
    let triggerEvent = Observed<TriggerEvent?>(nil)
    let spectrum = Observed<Spectrum?>(nil)
    /// The system clock's synchronization and steps: the clock monitor sends its first reading
    /// over this placeholder before the recorder is handed to anyone.
    let clock = Observed<ClockStatus>(ClockStatus(synchronized: false, since: Date(timeIntervalSince1970: 0), source: .kernel))

    // MARK: The warning (one at a time)

    /// A reload refused (`reason`) or done (nil): raises or clears `configurationNotReloaded`.
    func configurationReload(refused reason: String?) {
        warning.update { warning in
            if let reason {
                warning = RecorderWarning(code: .configurationNotReloaded,
                                          message: "the configuration was not reloaded, recd runs on the one it had: \(reason)", since: Date())
            } else if warning?.code == .configurationNotReloaded {
                warning = nil
            }
        }
    }

    /// Clears the digital-silence warning (a recording begins or ends); a space warning stays.
    func clearSilenceWarning() {
        warning.update { if $0?.code == .digitalSilence { $0 = nil } }
    }
}
