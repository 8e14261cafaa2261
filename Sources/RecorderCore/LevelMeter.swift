import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import RecorderModel
import Synchronization

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
    mutating func add(_ samples: UnsafeBufferPointer<Int16>, channels: Int) {
        let frameCount = samples.count / channels
        guard let base = samples.baseAddress else { return }
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
        }
        frames += frameCount
    }

    mutating func add(_ samples: UnsafeBufferPointer<Float>, channels: Int) {
        let frameCount = samples.count / channels
        for channel in 0..<channels {
            var sum: Double = 0
            var peak: Float = peaks[channel]
            var index = channel
            for _ in 0..<frameCount {
                let value = samples[index]
                let magnitude = Swift.abs(value)
                if magnitude >= 1 { clips += 1 }
                sum += Double(value * value)
                peak = Swift.max(peak, magnitude)
                index += channels
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
    }
    let channels: Int
    private let state: NIOLockedValueBox<State>

    init(channels: Int) {
        self.channels = channels
        state = NIOLockedValueBox(State(accumulator: LevelAccumulator(channels: channels)))
    }

    func measure(_ body: (inout LevelAccumulator) -> Void) {
        state.withLock { body(&$0.accumulator) }
    }

    /// The levels since the last call, in dBFS; then starts a new interval.
    func takeLevels() -> Levels {
        state.withLock { state in
            let accumulator = state.accumulator
            state.totalClips += accumulator.clips
            state.accumulator = LevelAccumulator(channels: channels)
            let levels = (0..<channels).map { channel -> ChannelLevel in
                guard accumulator.frames > 0 else { return .silence }
                let rms = (accumulator.sumOfSquares[channel] / Double(accumulator.frames)).squareRoot()
                return ChannelLevel(average: decibels(Float(rms)), peak: decibels(accumulator.peaks[channel]))
            }
            return Levels(channels: levels, clipCount: state.totalClips)
        }
    }
}

/// Amplitude (0...1) to dBFS, clamped to AVAudioRecorder's -160...0.
func decibels(_ amplitude: Float) -> Float {
    guard amplitude > 0 else { return -160 }
    return Swift.min(0, Swift.max(-160, 20 * log10f(amplitude)))
}
