import CALSA
import Glibc

/// A failed `snd_*` call: the negative errno-style code it returned, the function and the PCM.
///
/// ALSA returns `-errno` from almost every function; `code` keeps that value (negative), so
/// `code == -EPIPE` reads as it does in C.
public struct ALSAError: Error, CustomStringConvertible, Sendable {
    /// The negative value the C function returned (`-EPIPE`, `-ENOENT`, ...).
    public let code: Int32
    /// The C function that failed, e.g. `snd_pcm_open`.
    public let function: String
    /// The PCM name the call concerned.
    public let device: String
    /// What libasound itself said about the failure, if anything ("Cannot get card index for 9").
    public let detail: String?

    public init(code: Int32, function: String, device: String, detail: String? = nil) {
        self.code = code
        self.function = function
        self.device = device
        self.detail = detail
    }

    /// The errno value (positive), for switching on `EACCES`, `EBUSY`, ...
    public var errno: Int32 { -code }

    /// `snd_strerror`'s text, which for errno values is `strerror`'s.
    public var reason: String { String(cString: snd_strerror(code)) }

    public var description: String { "\(function) on '\(device)': \(reason)" + (detail.map { " (\($0))" } ?? "") }
}

/// Checks a return value; negative values become an `ALSAError`.
@inline(__always)
func check(_ result: Int32, _ function: String, _ device: String) throws(ALSAError) {
    if result < 0 { throw ALSAError(code: result, function: function, device: device) }
}
