import CSoxr

/// A soxr failure, with soxr's own message.
public struct SoxrError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public var description: String { "soxr: \(message)" }
}

/// A streaming sample-rate converter over interleaved samples: 32-bit floats, or 16-bit
/// integers in and out.
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

    /// The samples going in and coming out.
    public enum SampleType: Sendable {
        /// Floats, full scale ±1.
        case float32
        /// 16-bit integers. soxr works on them as floats of the integer values: with the same
        /// recipe, each result is the float path's times 32 768 exactly (a power of two), and
        /// it is rounded to the nearest integer and clipped, as libsndfile rounds and clips
        /// floats written to a 16-bit FLAC file (an exact tie goes to even on x86, away from
        /// zero elsewhere; libsndfile's goes to even). Without dither, so the same input always
        /// gives the same file.
        case int16
    }

    public let inputRate: Int
    public let outputRate: Int
    public let channels: Int
    public let sampleType: SampleType
    private let bytesPerFrame: Int
    private let handle: OpaquePointer

    public init(inputRate: Int, outputRate: Int, channels: Int, quality: Quality,
                sampleType: SampleType = .float32) throws(SoxrError) {
        var error: soxr_error_t?
        var qualitySpec = soxr_quality_spec(UInt(quality.rawValue), 0)
        let type = sampleType == .int16 ? SOXR_INT16_I : SOXR_FLOAT32_I
        var ioSpec = soxr_io_spec(type, type)
        ioSpec.flags |= UInt(SOXR_NO_DITHER)
        guard let handle = soxr_create(Double(inputRate), Double(outputRate), UInt32(channels), &error, &ioSpec, &qualitySpec, nil),
              error == nil else {
            throw SoxrError(message: error.map { String(cString: $0) } ?? "soxr_create failed")
        }
        self.inputRate = inputRate
        self.outputRate = outputRate
        self.channels = channels
        self.sampleType = sampleType
        self.bytesPerFrame = channels * (sampleType == .int16 ? 2 : 4)
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
        precondition(sampleType == .float32)
        return try process(UnsafeRawPointer(input), frames: inputFrames, into: UnsafeMutableRawPointer(output), capacity: capacity)
    }

    /// `process` for a resampler of `.int16` samples.
    public func process(_ input: UnsafePointer<Int16>, frames inputFrames: Int,
                        into output: UnsafeMutablePointer<Int16>, capacity: Int) throws(SoxrError) -> Int {
        precondition(sampleType == .int16)
        return try process(UnsafeRawPointer(input), frames: inputFrames, into: UnsafeMutableRawPointer(output), capacity: capacity)
    }

    private func process(_ input: UnsafeRawPointer, frames inputFrames: Int,
                         into output: UnsafeMutableRawPointer, capacity: Int) throws(SoxrError) -> Int {
        var used = 0
        var produced = 0
        while used < inputFrames {
            var inputDone = 0
            var outputDone = 0
            let error = soxr_process(handle, input + used * bytesPerFrame, inputFrames - used, &inputDone,
                                     output + produced * bytesPerFrame, capacity - produced, &outputDone)
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
        precondition(sampleType == .float32)
        return try flush(into: UnsafeMutableRawPointer(output), capacity: capacity)
    }

    /// `flush` for a resampler of `.int16` samples.
    public func flush(into output: UnsafeMutablePointer<Int16>, capacity: Int) throws(SoxrError) -> Int {
        precondition(sampleType == .int16)
        return try flush(into: UnsafeMutableRawPointer(output), capacity: capacity)
    }

    /// Forgets the input so far (after `flush`): the next `process` begins a new signal, as
    /// a new resampler would, without allocating one.
    public func reset() throws(SoxrError) {
        if let error = soxr_clear(handle) { throw SoxrError(message: String(cString: error)) }
    }

    private func flush(into output: UnsafeMutableRawPointer, capacity: Int) throws(SoxrError) -> Int {
        var outputDone = 0
        let error = soxr_process(handle, nil, 0, nil, output, capacity, &outputDone)
        if let error { throw SoxrError(message: String(cString: error)) }
        return outputDone
    }
}
