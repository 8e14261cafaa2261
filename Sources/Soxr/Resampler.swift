import CSoxr

/// A soxr failure, with soxr's own message.
public struct SoxrError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public var description: String { "soxr: \(message)" }
}

/// A streaming sample-rate converter over interleaved 32-bit floats.
///
/// Not thread-safe: the capture thread owns it.
public final class Resampler {
    /// soxr's quality recipes, from quick cubic interpolation to 32-bit precision.
    public enum Quality: Int, Sendable {
        case quick = 0      // SOXR_QQ
        case low = 1        // SOXR_LQ
        case medium = 2     // SOXR_MQ
        case high = 4       // SOXR_HQ (20-bit)
        case veryHigh = 6   // SOXR_VHQ (28-bit)
    }

    public let inputRate: Int
    public let outputRate: Int
    public let channels: Int
    private let handle: OpaquePointer

    public init(inputRate: Int, outputRate: Int, channels: Int, quality: Quality) throws(SoxrError) {
        var error: soxr_error_t?
        var qualitySpec = soxr_quality_spec(UInt(quality.rawValue), 0)
        guard let handle = soxr_create(Double(inputRate), Double(outputRate), UInt32(channels), &error, nil, &qualitySpec, nil),
              error == nil else {
            throw SoxrError(message: error.map { String(cString: $0) } ?? "soxr_create failed")
        }
        self.inputRate = inputRate
        self.outputRate = outputRate
        self.channels = channels
        self.handle = handle
    }

    deinit { soxr_delete(handle) }

    /// The most output frames `process` can produce from `inputFrames`, to size the output buffer.
    public func maximumOutputFrames(forInput inputFrames: Int) -> Int {
        (inputFrames * outputRate + inputRate - 1) / inputRate + 64
    }

    /// Converts `inputFrames` frames; returns how many frames were written to `output`.
    /// soxr may hold some back (its delay); `flush` returns them at the end.
    public func process(_ input: UnsafePointer<Float>, frames inputFrames: Int,
                        into output: UnsafeMutablePointer<Float>, capacity: Int) throws(SoxrError) -> Int {
        var used = 0
        var produced = 0
        while used < inputFrames {
            var inputDone = 0
            var outputDone = 0
            let error = soxr_process(handle, input + used * channels, inputFrames - used, &inputDone,
                                     output + produced * channels, capacity - produced, &outputDone)
            if let error { throw SoxrError(message: String(cString: error)) }
            used += inputDone
            produced += outputDone
            if inputDone == 0 && outputDone == 0 { break }
            if produced == capacity { break }
        }
        return produced
    }

    /// Signals the end of input and returns the frames soxr still held (at most `capacity`;
    /// call again until it returns 0).
    public func flush(into output: UnsafeMutablePointer<Float>, capacity: Int) throws(SoxrError) -> Int {
        var outputDone = 0
        let error = soxr_process(handle, nil, 0, nil, output, capacity, &outputDone)
        if let error { throw SoxrError(message: String(cString: error)) }
        return outputDone
    }
}
