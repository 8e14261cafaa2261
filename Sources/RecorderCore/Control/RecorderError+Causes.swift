import ALSA
import Glibc
import RecorderModel
import Sndfile

extension RecorderError {
    /// An error opening or configuring a capture device.
    static func opening(_ error: ALSAError) -> RecorderError {
        if error.function == "resolve" {
            // A device id that names no card present, several, or none at all: its own words.
            let message = error.detail ?? "\(error)"
            switch error.errno {
            case ENOTUNIQ: return RecorderError(.ambiguousDevice, message)
            case EINVAL: return RecorderError(.invalidSettings, message)
            default: return RecorderError(.deviceNotFound, message)
            }
        }
        let cause = "\(error.reason) (\(error.function)" + (error.detail.map { ": " + $0 } ?? "") + ")"
        if error.isUnknownDevice {
            return RecorderError(.deviceNotFound, "capture device '\(error.device)' does not exist: " + cause)
        }
        let message = "cannot open capture device '\(error.device)': " + cause
        switch error.errno {
        case EACCES, EPERM: return RecorderError(.noPermission, message)
        // ECONNREFUSED: the sound server (PulseAudio, PipeWire) behind the PCM is not running.
        case ENOENT, ENODEV, ENXIO, ECONNREFUSED: return RecorderError(.deviceNotFound, message)
        case EBUSY, EAGAIN: return RecorderError(.deviceBusy, message)
        default: return RecorderError(.failedToBegin, message)
        }
    }

    /// A write, sync or close of the recording's file failed (SndfileError, MPEG4Error).
    static func saving(_ error: any Error) -> RecorderError {
        RecorderError(.failedToSave, "cannot write \(error)")
    }

    /// An operation the state does not allow. With no recording under way, stop, pause,
    /// resume, cancel and split say so plainly ("nothing is recording"): the state's name
    /// ("cannot stop while finished") would send people looking for a recording that ended.
    static func invalidState(_ operation: String, _ state: RecorderState) -> RecorderError {
        if !state.isActive, Self.operationsOnARecording.contains(operation) { return RecorderError(.invalidState, nothingRecording) }
        // Name what is under way ("cannot start while recording 'birds'"): the one to stop.
        guard let recording = state.recording, state.isActive else {
            return RecorderError(.invalidState, "cannot \(operation) while \(state.name)")
        }
        return RecorderError(.invalidState, "cannot \(operation) while \(state.name) '\(recording.name)' (stop it first)")
    }
    private static let operationsOnARecording: Set<String> = ["stop", "pause", "resume", "cancel", "split"]

    static func errnoText(_ value: Int32) -> String { String(cString: strerror(value)) }
}

extension ALSAError {
    /// libasound cannot find the PCM at all: no such name in its configuration (`Unknown PCM`),
    /// no such card (`hw:9,9`: `Cannot get card index`), as libasound itself says. The errno
    /// alone is not enough: a sound server whose socket is not there yet (PipeWire before the
    /// session starts) also fails with ENOENT, and that one is waited for.
    var isUnknownDevice: Bool {
        guard function == "snd_pcm_open", errno == ENOENT || errno == ENODEV, let detail else { return false }
        return ["Unknown PCM", "Cannot get card index", "Invalid card", "Unable to find definition"].contains { detail.contains($0) }
    }
}
