import ALSA
import Soxr

/// Samples the converter hands on, in the file's channels and rate.
enum ConvertedSamples {
    case float(UnsafePointer<Float>)
    case int16(UnsafePointer<Int16>)
}

/// Turns what the device delivers into what the file wants when the two differ: samples to
/// float, channels up- or down-mixed, rate converted by soxr. Owned by the capture thread.
///
/// 16-bit samples going to a 16-bit file in the same channels only change rate: soxr takes
/// and gives them as integers (`resamplesSixteenBit`), which gives the same samples as the
/// float path followed by libsndfile's conversion, without either conversion loop.
///
/// Buffers are allocated once, for the largest chunk the capture thread reads, so the capture
/// path allocates nothing.
final class FormatConverter {
    let inputChannels: Int
    let outputChannels: Int
    /// 16-bit frames in, 16-bit frames out, rate converted only: `resample` instead of `convert`.
    let resamplesSixteenBit: Bool
    private let resampler: Resampler?
    private let maxInputFrames: Int
    private let floatInput: UnsafeMutablePointer<Float>
    private let mixed: UnsafeMutablePointer<Float>
    /// Floats, or 16-bit samples when `resamplesSixteenBit` (sized for floats either way).
    private let resampled: UnsafeMutableRawPointer
    private let resampledCapacity: Int
    /// For each output channel, the input channels averaged into it.
    private let contributors: [[Int]]

    /// `sixteenBitFile`: the file stores 16-bit integer samples, so that resampled 16-bit
    /// input can stay 16-bit.
    init(inputChannels: Int, outputChannels: Int, inputRate: Int, outputRate: Int,
         quality: Resampler.Quality, maxInputFrames: Int,
         inputFormat: SampleFormat = .float32, sixteenBitFile: Bool = false) throws(SoxrError) {
        self.inputChannels = inputChannels
        self.outputChannels = outputChannels
        self.maxInputFrames = maxInputFrames
        resamplesSixteenBit = inputFormat == .int16 && sixteenBitFile && inputChannels == outputChannels
            && inputRate != outputRate
        resampler = inputRate == outputRate ? nil
            : try Resampler(inputRate: inputRate, outputRate: outputRate, channels: outputChannels, quality: quality,
                            sampleType: resamplesSixteenBit ? .int16 : .float32)
        floatInput = .allocate(capacity: resamplesSixteenBit ? 1 : maxInputFrames * inputChannels)
        mixed = .allocate(capacity: resamplesSixteenBit ? 1 : maxInputFrames * outputChannels)
        resampledCapacity = resampler?.maximumOutputFrames(forInput: maxInputFrames) ?? 0
        resampled = .allocate(byteCount: Swift.max(1, resampledCapacity * outputChannels) * MemoryLayout<Float>.size,
                              alignment: MemoryLayout<Float>.alignment)
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

    /// Resamples `frames` 16-bit device frames (`resamplesSixteenBit` only). `output`
    /// receives the converted frames before the next call.
    func resample(_ samples: UnsafePointer<Int16>, frames: Int, output: (ConvertedSamples, Int) throws -> Void) throws {
        precondition(resamplesSixteenBit && frames <= maxInputFrames)
        let target = resampled.assumingMemoryBound(to: Int16.self)
        let produced = try resampler!.process(samples, frames: frames, into: target, capacity: resampledCapacity)
        if produced > 0 { try output(.int16(target), produced) }
    }

    /// Converts `frames` device frames. `output` receives the converted frames (at the file's
    /// rate and channels) before the next call; metering sees them before resampling.
    func convert(_ raw: UnsafeRawPointer, format: SampleFormat, frames: Int,
                 meter: (UnsafeBufferPointer<Float>) -> Void,
                 output: (ConvertedSamples, Int) throws -> Void) throws {
        precondition(!resamplesSixteenBit && frames <= maxInputFrames)
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
            let target = resampled.assumingMemoryBound(to: Float.self)
            let produced = try resampler.process(channelMatched, frames: frames, into: target, capacity: resampledCapacity)
            if produced > 0 { try output(.float(target), produced) }
        } else {
            try output(.float(channelMatched), frames)
        }
    }

    /// At the end of a recording: what the resampler still holds.
    func flush(output: (ConvertedSamples, Int) throws -> Void) throws {
        guard let resampler else { return }
        while true {
            let produced: Int
            let samples: ConvertedSamples
            if resamplesSixteenBit {
                let target = resampled.assumingMemoryBound(to: Int16.self)
                produced = try resampler.flush(into: target, capacity: resampledCapacity)
                samples = .int16(target)
            } else {
                let target = resampled.assumingMemoryBound(to: Float.self)
                produced = try resampler.flush(into: target, capacity: resampledCapacity)
                samples = .float(target)
            }
            if produced == 0 { return }
            try output(samples, produced)
        }
    }

    /// After `flush`: the next input is a new signal (a triggered recording's next event).
    func reset() throws {
        try resampler?.reset()
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
