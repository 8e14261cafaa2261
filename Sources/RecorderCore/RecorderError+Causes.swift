import ALSA
import Glibc
import RecorderModel
import Sndfile

extension RecorderError {
    /// An error opening or configuring a capture device.
    static func opening(_ error: ALSAError) -> RecorderError {
        let message = "cannot open capture device '\(error.device)': \(error.reason) (\(error.function))"
        switch error.errno {
        case EACCES, EPERM: return RecorderError(.noPermission, message)
        // ECONNREFUSED: the sound server (PulseAudio, PipeWire) behind the PCM is not running.
        case ENOENT, ENODEV, ENXIO, ECONNREFUSED: return RecorderError(.deviceNotFound, message)
        case EBUSY, EAGAIN: return RecorderError(.deviceBusy, message)
        default: return RecorderError(.failedToBegin, message)
        }
    }

    static func deviceLost(_ error: ALSAError) -> RecorderError {
        RecorderError(.deviceLost, "capture device '\(error.device)' failed: \(error.reason) (\(error.function))")
    }

    /// A write, sync or close of the recording's file failed (SndfileError, MPEG4Error).
    static func saving(_ error: any Error) -> RecorderError {
        RecorderError(.failedToSave, "cannot write \(error)")
    }

    static func invalidState(_ operation: String, _ state: RecorderState) -> RecorderError {
        RecorderError(.invalidState, "cannot \(operation) while \(state.name)")
    }

    static func errnoText(_ value: Int32) -> String { String(cString: strerror(value)) }
}
