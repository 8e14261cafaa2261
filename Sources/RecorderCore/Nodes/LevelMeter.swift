import ALSA
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import RecorderModel

/// Sums what the capture thread measures between two metering ticks.
struct LevelAccumulator {
    var sumOfSquares: [Double]
    var peaks: [Float]
    var frames = 0
    var clips = 0

    init(channels: Int) {
        sumOfSquares = Array(repeating: 0, count: channels)
        peaks = Array(repeating: 0, count: channels)
    }

    /// Measures interleaved samples; `scale` maps the sample type to -1...1 and `clipLimit`
    /// is the magnitude that counts as full scale.
    mutating func add<S: SignedInteger & FixedWidthInteger>(_ samples: UnsafeBufferPointer<S>, channels: Int, scale: Float, clipLimit: S) {
        let frameCount = samples.count / channels
        for channel in 0..<channels {
            var sum: Double = 0
            var peak: Float = peaks[channel]
            var index = channel
            for _ in 0..<frameCount {
                let sample = samples[index]
                if sample >= clipLimit || sample <= -clipLimit { clips += 1 }
                let value = Float(sample) * scale
                sum += Double(value * value)
                peak = Swift.max(peak, Swift.abs(value))
                index += channels
            }
            sumOfSquares[channel] += sum
            peaks[channel] = peak
        }
        frames += frameCount
    }

    /// The common case, 16-bit: integer arithmetic only (exact sums, no per-sample conversion),
    /// scaled to -1...1 once per chunk. A sample at either extreme counts as clipped.
    ///
    /// One pass over the interleaved frames, 8 samples per step, lane `l` holding channel
    /// `l % channels` (so for 1, 2 or 4 channels; others take the per-channel loop).
    /// The sums are exact, so the result is bit-identical to the per-channel loop's.
    ///
    /// Returns whether every sample was zero (digital silence): the peaks tell it for free,
    /// so the capture thread needs no second pass over the chunk.
    @discardableResult
    mutating func add(_ samples: UnsafeBufferPointer<Int16>, channels: Int) -> Bool {
        let frameCount = samples.count / channels
        guard let base = samples.baseAddress, frameCount > 0 else { return true }
        guard channels <= 4, 4 % channels == 0 else {
            return addPerChannel(base, frames: frameCount, channels: channels)
        }
        var channelSums = SIMD8<Int64>()
        var channelPeaks = SIMD8<Int32>()
        var clipped = 0
        let sampleCount = frameCount * channels
        let vectors = sampleCount / 8
        var vector = 0
        var pointer = UnsafeRawPointer(base)
        while vector < vectors {
            // Blocks short enough that no 32-bit lane can overflow: 32 768 steps add at most 2^16.
            let blockStart = pointer
            let blockEnd = Swift.min(vectors, vector + 32_768)
            var highSums = SIMD4<UInt32>(), lowSums = SIMD4<UInt32>()
            var maxima = SIMD8<Int16>(repeating: .min), minima = SIMD8<Int16>(repeating: .max)
            while vector < blockEnd {
                let lanes = pointer.loadUnaligned(as: SIMD8<Int16>.self)
                maxima = pointwiseMax(maxima, lanes)
                minima = pointwiseMin(minima, lanes)
                let wide = SIMD8<Int32>(truncatingIfNeeded: lanes)
                let squares = SIMD8<UInt32>(truncatingIfNeeded: wide &* wide)  // at most 2^30
                // Lanes l and l + 4 hold the same channel; two squares fit in 32 bits, split in
                // 15-bit halves summed apart so that a block cannot overflow.
                let pairs = squares.lowHalf &+ squares.highHalf
                highSums &+= pairs &>> 15
                lowSums &+= pairs & 0x7FFF
                vector += 1
                pointer += 16
            }
            let magnitudes = pointwiseMax(SIMD8<Int32>(truncatingIfNeeded: maxima), 0 &- SIMD8<Int32>(truncatingIfNeeded: minima))
            for lane in 0..<8 {
                let channel = lane % channels
                if lane < 4 { channelSums[channel] &+= Int64(highSums[lane]) << 15 &+ Int64(lowSums[lane]) }
                channelPeaks[channel] = Swift.max(channelPeaks[channel], magnitudes[lane])
            }
            // Clipped samples are rare: counted in a second pass, only over a block that has one.
            if magnitudes.max() >= 32767 {
                clipped &+= Self.clipCount(blockStart, vectors: (pointer - blockStart) / 16)
            }
        }
        // The samples after the last whole vector: a whole number of frames, as 4 % channels == 0.
        var index = vectors * 8
        while index < sampleCount {
            let sample = Int32(base[index])
            let magnitude = sample < 0 ? -sample : sample
            let channel = index % channels
            channelSums[channel] &+= Int64(sample &* sample)
            channelPeaks[channel] = Swift.max(channelPeaks[channel], magnitude)
            clipped &+= magnitude >= 32767 ? 1 : 0
            index += 1
        }
        for channel in 0..<channels {
            sumOfSquares[channel] += Double(channelSums[channel]) * (1.0 / (32768.0 * 32768.0))
            peaks[channel] = Swift.max(peaks[channel], Float(channelPeaks[channel]) * (1 / 32768))
        }
        clips += clipped
        frames += frameCount
        // A magnitude of 0 in every lane: no sample differed from 0 (-32768's is 32768, not 0).
        return channelPeaks.max() == 0
    }

    /// How many of `vectors` × 8 samples are at full scale (magnitude 32767 or 32768).
    private static func clipCount(_ start: UnsafeRawPointer, vectors: Int) -> Int {
        var counts = SIMD8<UInt16>()
        var pointer = start
        for _ in 0..<vectors {  // at most 32 768: the 16-bit counts, read as unsigned, hold it
            let lanes = pointer.loadUnaligned(as: SIMD8<Int16>.self)
            // Arithmetic instead of comparison masks (which do not vectorize): |x| wraps to
            // -32768 for -32768, so |x| + 1 has its top bit set exactly when |x| >= 32767.
            counts &+= SIMD8<UInt16>(truncatingIfNeeded: pointwiseMax(lanes, 0 &- lanes) &+ 1) &>> 15
            pointer += 16
        }
        return (0..<8).reduce(0) { $0 + Int(counts[$1]) }
    }

    /// 16-bit samples of a channel count that does not divide 4: one channel at a time.
    /// Returns whether every sample was zero.
    private mutating func addPerChannel(_ base: UnsafePointer<Int16>, frames frameCount: Int, channels: Int) -> Bool {
        var loudest: Int32 = 0
        for channel in 0..<channels {
            var sum: Int64 = 0
            var peak: Int32 = 0
            var clipped = 0
            var pointer = base + channel
            for _ in 0..<frameCount {
                let sample = Int32(pointer.pointee)
                let magnitude = sample < 0 ? -sample : sample
                sum &+= Int64(sample &* sample)
                peak = Swift.max(peak, magnitude)
                clipped &+= magnitude >= 32767 ? 1 : 0
                pointer += channels
            }
            sumOfSquares[channel] += Double(sum) * (1.0 / (32768.0 * 32768.0))
            peaks[channel] = Swift.max(peaks[channel], Float(peak) * (1 / 32768))
            clips += clipped
            loudest = Swift.max(loudest, peak)
        }
        frames += frameCount
        return loudest == 0
    }

    /// Float samples (converted input, or a float device), one pass over interleaved frames,
    /// 8 samples per step for 1, 2, 4 or 8 channels. Each square is the same Float product as
    /// in a per-sample loop, summed in Double per lane: only the order of the additions differs
    /// (a relative difference of the order of 1e-15 per chunk).
    mutating func add(_ samples: UnsafeBufferPointer<Float>, channels: Int) {
        let frameCount = samples.count / channels
        guard let base = samples.baseAddress, frameCount > 0 else { return }
        var channelSums = SIMD8<Double>()
        var channelPeaks = SIMD8<Float>()
        var clipped = 0
        let sampleCount = frameCount * channels
        var index = 0
        if channels <= 8, 8 % channels == 0 {
            let vectors = sampleCount / 8
            let raw = UnsafeRawPointer(base)
            var sums = SIMD8<Double>(), maxima = SIMD8<Int32>()
            var clipCounts = SIMD8<Int32>()
            for vector in 0..<vectors {
                let lanes = raw.loadUnaligned(fromByteOffset: vector * 32, as: SIMD8<Float>.self)
                // Bit arithmetic instead of comparison masks (which do not vectorize): without
                // its sign bit a float's pattern orders as its magnitude; 1.0 is 0x3F80_0000.
                let magnitudeBits = unsafeBitCast(lanes, to: SIMD8<Int32>.self) & 0x7FFF_FFFF
                maxima = pointwiseMax(maxima, magnitudeBits)
                clipCounts &+= (magnitudeBits &+ 0x4080_0000) &>> 31 & 1
                sums += SIMD8<Double>(lanes * lanes)
            }
            for lane in 0..<8 {
                let channel = lane % channels
                channelSums[channel] += sums[lane]
                channelPeaks[channel] = Swift.max(channelPeaks[channel], Float(bitPattern: UInt32(maxima[lane])))
                clipped += Int(clipCounts[lane])
            }
            index = vectors * 8
            while index < sampleCount {
                let value = base[index]
                let magnitude = Swift.abs(value)
                let channel = index % channels
                if magnitude >= 1 { clipped += 1 }
                channelSums[channel] += Double(value * value)
                channelPeaks[channel] = Swift.max(channelPeaks[channel], magnitude)
                index += 1
            }
            for channel in 0..<channels {
                sumOfSquares[channel] += channelSums[channel]
                peaks[channel] = Swift.max(peaks[channel], channelPeaks[channel])
            }
            clips += clipped
            frames += frameCount
            return
        }
        for channel in 0..<channels {
            var sum: Double = 0
            var peak: Float = peaks[channel]
            var pointer = base + channel
            for _ in 0..<frameCount {
                let value = pointer.pointee
                let magnitude = Swift.abs(value)
                if magnitude >= 1 { clips += 1 }
                sum += Double(value * value)
                peak = Swift.max(peak, magnitude)
                pointer += channels
            }
            sumOfSquares[channel] += sum
            peaks[channel] = peak
        }
        frames += frameCount
    }
}

/// Shared between the capture thread (which adds measurements) and the levels timer (which
/// turns them into dBFS and starts a new interval).
final class LevelMeter: Sendable {
    private struct State {
        var accumulator: LevelAccumulator
        var totalClips = 0
        var last: Levels?
    }
    let channels: Int
    /// An interval without a frame repeats the levels before it rather than reading silence:
    /// listening's meter gets chunks only every half levels interval (the capture thread
    /// sleeps between), and a tick between two of them has measured nothing.
    private let keepsLastWhenIdle: Bool
    private let state: NIOLockedValueBox<State>

    init(channels: Int, keepsLastWhenIdle: Bool = false) {
        self.channels = channels
        self.keepsLastWhenIdle = keepsLastWhenIdle
        state = NIOLockedValueBox(State(accumulator: LevelAccumulator(channels: channels)))
    }

    @discardableResult
    func measure<Result>(_ body: (inout LevelAccumulator) -> Result) -> Result {
        state.withLock { body(&$0.accumulator) }
    }

    /// Measures interleaved frames in a device sample format (`channels` of them each).
    /// Returns whether every sample was zero for 16-bit input (its pass tells it for free),
    /// nil for the other formats (a float -0.0 counts as signal, which magnitudes cannot tell).
    @discardableResult
    func measure(_ samples: UnsafeRawPointer, frames: Int, format: SampleFormat) -> Bool? {
        let count = frames * channels
        switch format {
        case .int16:
            let typed = samples.assumingMemoryBound(to: Int16.self)
            return measure { $0.add(UnsafeBufferPointer(start: typed, count: count), channels: channels) }
        case .int32:
            let typed = samples.assumingMemoryBound(to: Int32.self)
            measure { $0.add(UnsafeBufferPointer(start: typed, count: count), channels: channels,
                             scale: 1 / 2_147_483_648, clipLimit: Int32.max - 255) }
        case .float32:
            let typed = samples.assumingMemoryBound(to: Float.self)
            measure { $0.add(UnsafeBufferPointer(start: typed, count: count), channels: channels) }
        }
        return nil
    }

    /// The levels since the last call, in dBFS; then starts a new interval.
    func takeLevels() -> Levels {
        state.withLock { state in
            let accumulator = state.accumulator
            if keepsLastWhenIdle, accumulator.frames == 0, let last = state.last { return last }
            state.totalClips += accumulator.clips
            state.accumulator = LevelAccumulator(channels: channels)
            let levels = (0..<channels).map { channel -> ChannelLevel in
                guard accumulator.frames > 0 else { return .silence }
                let rms = (accumulator.sumOfSquares[channel] / Double(accumulator.frames)).squareRoot()
                return ChannelLevel(average: decibels(Float(rms)), peak: decibels(accumulator.peaks[channel]))
            }
            let measured = Levels(channels: levels, clipCount: state.totalClips)
            state.last = measured
            return measured
        }
    }
}

/// Amplitude (0...1) to dBFS, clamped to AVAudioRecorder's -160...0.
func decibels(_ amplitude: Float) -> Float {
    guard amplitude > 0 else { return -160 }
    return Swift.min(0, Swift.max(-160, 20 * log10f(amplitude)))
}
