import ALSA
import Soxr

/// Turns what the device delivers into what the file wants when the two differ: samples to
/// float, channels up- or down-mixed, rate converted by soxr. Owned by the capture thread.
///
/// Buffers are allocated once, for the largest chunk the capture thread reads, so the capture
/// path allocates nothing.
final class FormatConverter {
    let inputChannels: Int
    let outputChannels: Int
    private let resampler: Resampler?
    private let maxInputFrames: Int
    private let floatInput: UnsafeMutablePointer<Float>
    private let mixed: UnsafeMutablePointer<Float>
    private let resampled: UnsafeMutablePointer<Float>
    private let resampledCapacity: Int
    /// For each output channel, the input channels averaged into it.
    private let contributors: [[Int]]

    init(inputChannels: Int, outputChannels: Int, inputRate: Int, outputRate: Int,
         quality: Resampler.Quality, maxInputFrames: Int) throws(SoxrError) {
        self.inputChannels = inputChannels
        self.outputChannels = outputChannels
        self.maxInputFrames = maxInputFrames
        resampler = inputRate == outputRate ? nil
            : try Resampler(inputRate: inputRate, outputRate: outputRate, channels: outputChannels, quality: quality)
        floatInput = .allocate(capacity: maxInputFrames * inputChannels)
        mixed = .allocate(capacity: maxInputFrames * outputChannels)
        resampledCapacity = resampler?.maximumOutputFrames(forInput: maxInputFrames) ?? 0
        resampled = .allocate(capacity: Swift.max(1, resampledCapacity * outputChannels))
        // Mono is the average of all inputs; otherwise output channel c takes input channel c
        // (wrapping when upmixing) and averages the inputs that fold onto it when downmixing.
        contributors = (0..<outputChannels).map { out in
            outputChannels == 1 ? Array(0..<inputChannels)
                : inputChannels < outputChannels ? [out % inputChannels]
                : Array(stride(from: out, to: inputChannels, by: outputChannels))
        }
    }

    deinit {
        floatInput.deallocate()
        mixed.deallocate()
        resampled.deallocate()
    }

    /// Converts `frames` device frames. `output` receives the converted frames (at the file's
    /// rate and channels) before the next call; metering sees them before resampling.
    func convert(_ raw: UnsafeRawPointer, format: SampleFormat, frames: Int,
                 meter: (UnsafeBufferPointer<Float>) -> Void,
                 output: (UnsafePointer<Float>, Int) throws -> Void) throws {
        precondition(frames <= maxInputFrames)
        let samples = frames * inputChannels
        switch format {
        case .int16:
            let source = raw.assumingMemoryBound(to: Int16.self)
            for index in 0..<samples { floatInput[index] = Float(source[index]) * (1 / 32768) }
        case .int32:
            let source = raw.assumingMemoryBound(to: Int32.self)
            for index in 0..<samples { floatInput[index] = Float(source[index]) * (1 / 2_147_483_648) }
        case .float32:
            floatInput.update(from: raw.assumingMemoryBound(to: Float.self), count: samples)
        }
        let channelMatched = mixChannels(frames: frames)
        meter(UnsafeBufferPointer(start: channelMatched, count: frames * outputChannels))
        if let resampler {
            let produced = try resampler.process(channelMatched, frames: frames, into: resampled, capacity: resampledCapacity)
            if produced > 0 { try output(resampled, produced) }
        } else {
            try output(channelMatched, frames)
        }
    }

    /// At the end of a recording: what the resampler still holds.
    func flush(output: (UnsafePointer<Float>, Int) throws -> Void) throws {
        guard let resampler else { return }
        while true {
            let produced = try resampler.flush(into: resampled, capacity: resampledCapacity)
            if produced == 0 { return }
            try output(resampled, produced)
        }
    }

    /// Up- or down-mixes `floatInput` into `mixed`; returns the buffer holding the result.
    private func mixChannels(frames: Int) -> UnsafeMutablePointer<Float> {
        if inputChannels == outputChannels { return floatInput }
        for frame in 0..<frames {
            let input = floatInput + frame * inputChannels
            let output = mixed + frame * outputChannels
            for out in 0..<outputChannels {
                var sum: Float = 0
                for channel in contributors[out] { sum += input[channel] }
                output[out] = sum / Float(contributors[out].count)
            }
        }
        return mixed
    }
}
