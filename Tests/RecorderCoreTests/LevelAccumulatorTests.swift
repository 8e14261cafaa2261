@testable import RecorderCore
import Testing

/// The level meter's one-pass (SIMD) sums against the per-channel loop it replaced, kept here as
/// the specification: 16-bit results bit-identical, float results identical but for the order
/// of the additions in the sum of squares.
@Suite("Level meter: sums")
struct LevelAccumulatorTests {
    /// The per-channel loop the meter used before its one-pass form (16-bit).
    static func reference(_ samples: [Int16], channels: Int, into accumulator: inout LevelAccumulator) {
        let frameCount = samples.count / channels
        for channel in 0..<channels {
            var sum: Int64 = 0
            var peak: Int32 = 0
            var clipped = 0
            for frame in 0..<frameCount {
                let sample = Int32(samples[frame * channels + channel])
                let magnitude = sample < 0 ? -sample : sample
                sum &+= Int64(sample &* sample)
                peak = Swift.max(peak, magnitude)
                clipped &+= magnitude >= 32767 ? 1 : 0
            }
            accumulator.sumOfSquares[channel] += Double(sum) * (1.0 / (32768.0 * 32768.0))
            accumulator.peaks[channel] = Swift.max(accumulator.peaks[channel], Float(peak) * (1 / 32768))
            accumulator.clips += clipped
        }
        accumulator.frames += frameCount
    }

    /// The per-channel loop the meter used before its one-pass form (float).
    static func reference(_ samples: [Float], channels: Int, into accumulator: inout LevelAccumulator) {
        let frameCount = samples.count / channels
        for channel in 0..<channels {
            var sum: Double = 0
            var peak = accumulator.peaks[channel]
            for frame in 0..<frameCount {
                let value = samples[frame * channels + channel]
                if Swift.abs(value) >= 1 { accumulator.clips += 1 }
                sum += Double(value * value)
                peak = Swift.max(peak, Swift.abs(value))
            }
            accumulator.sumOfSquares[channel] += sum
            accumulator.peaks[channel] = peak
        }
        accumulator.frames += frameCount
    }

    /// Deterministic noise with every extreme in it (the values clipping and overflow hinge on).
    static func noise16(count: Int, seed: UInt64) -> [Int16] {
        var state = seed
        let extremes: [Int16] = [.min, .max, -32767, 32766, -32766, 0, 1, -1]
        return (0..<count).map { index in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            if index % 37 == 5 { return extremes[Int(state >> 61)] }
            return Int16(truncatingIfNeeded: state >> 33)
        }
    }

    static func add(_ samples: [Int16], channels: Int, into accumulator: inout LevelAccumulator) {
        _ = samples.withUnsafeBufferPointer { accumulator.add($0, channels: channels) }
    }

    static func add(_ samples: [Float], channels: Int, into accumulator: inout LevelAccumulator) {
        samples.withUnsafeBufferPointer { accumulator.add($0, channels: channels) }
    }

    static func expectIdentical(_ measured: LevelAccumulator, _ expected: LevelAccumulator) {
        #expect(measured.sumOfSquares == expected.sumOfSquares)
        #expect(measured.peaks == expected.peaks)
        #expect(measured.clips == expected.clips)
        #expect(measured.frames == expected.frames)
    }

    @Test(arguments: [1, 2, 3, 4, 6, 8])
    func sixteenBitSumsAreBitIdenticalToThePerChannelLoop(channels: Int) {
        // Chunk lengths with and without a partial vector at the end, added one after another.
        for frames in [0, 1, 3, 7, 480, 1001, 4096] {
            let samples = Self.noise16(count: frames * channels, seed: UInt64(frames * 31 + channels))
            var measured = LevelAccumulator(channels: channels)
            var expected = LevelAccumulator(channels: channels)
            for _ in 0..<2 {
                Self.add(samples, channels: channels, into: &measured)
                Self.reference(samples, channels: channels, into: &expected)
            }
            Self.expectIdentical(measured, expected)
        }
    }

    @Test func aChunkLongerThanOneBlockOfFullScaleSamplesDoesNotOverflow() {
        // 32 768 vectors of 8 samples is one block; -32768 squared is the largest square.
        let samples = [Int16](repeating: .min, count: 2 * 140_000)
        var measured = LevelAccumulator(channels: 2)
        var expected = LevelAccumulator(channels: 2)
        Self.add(samples, channels: 2, into: &measured)
        Self.reference(samples, channels: 2, into: &expected)
        Self.expectIdentical(measured, expected)
        #expect(measured.clips == samples.count)
        #expect(measured.peaks == [1, 1])
        #expect(measured.sumOfSquares == [140_000, 140_000])
    }

    @Test(arguments: [1, 2, 3, 4, 8])
    func floatSumsMatchThePerChannelLoop(channels: Int) {
        for frames in [0, 1, 5, 480, 1001] {
            // Beyond full scale too: ±1 and louder count as clipped.
            var samples = Self.noise16(count: frames * channels, seed: UInt64(frames + 7 * channels)).map { Float($0) * (1.25 / 32768) }
            if samples.count > 3 { samples[1] = 1; samples[2] = -1; samples[3] = 0.999_999_94 }
            var measured = LevelAccumulator(channels: channels)
            var expected = LevelAccumulator(channels: channels)
            for _ in 0..<2 {
                Self.add(samples, channels: channels, into: &measured)
                Self.reference(samples, channels: channels, into: &expected)
            }
            #expect(measured.peaks == expected.peaks)
            #expect(measured.clips == expected.clips)
            #expect(measured.frames == expected.frames)
            // Only the order of the additions differs: a relative difference near 1e-16.
            for channel in 0..<channels {
                let difference = Swift.abs(measured.sumOfSquares[channel] - expected.sumOfSquares[channel])
                #expect(difference <= 1e-12 * Swift.max(expected.sumOfSquares[channel], 1e-300))
            }
        }
    }
}

/// The meter's answer to "was this chunk digital silence?" against the byte scan the capture
/// thread made as a second pass before (`SegmentWriter.isDigitalSilence`, still used without
/// a meter and for other sample formats).
@Suite("Level meter: digital silence")
struct LevelMeterSilenceTests {
    static func meterSaysSilent(_ samples: [Int16], channels: Int) -> Bool {
        var accumulator = LevelAccumulator(channels: channels)
        return samples.withUnsafeBufferPointer { accumulator.add($0, channels: channels) }
    }

    static func scanSaysSilent(_ samples: [Int16]) -> Bool {
        samples.withUnsafeBytes { SegmentWriter.isDigitalSilence($0.baseAddress!, bytes: $0.count) }
    }

    @Test(arguments: [1, 2, 3, 4, 6, 8])
    func allZeroIsSilence(channels: Int) {
        for frames in [1, 3, 4, 7, 480, 1001, 8192] {
            let samples = [Int16](repeating: 0, count: frames * channels)
            #expect(Self.meterSaysSilent(samples, channels: channels))
            #expect(Self.scanSaysSilent(samples))
        }
    }

    /// One sample off zero anywhere — first, last, the last of the whole vectors, the first of
    /// the partial one after them, the extremes — is signal, as the scan says.
    @Test(arguments: [1, 2, 3, 4, 6, 8])
    func oneNonzeroSampleIsSignal(channels: Int) {
        for frames in [1, 3, 4, 7, 480, 1001, 8192] {
            let count = frames * channels
            let wholeVectors = count / 8 * 8
            let positions = Set([0, count - 1, wholeVectors - 1, wholeVectors, count / 2].filter { (0..<count).contains($0) })
            for position in positions {
                for value: Int16 in [1, -1, .min, .max] {
                    var samples = [Int16](repeating: 0, count: count)
                    samples[position] = value
                    #expect(!Self.meterSaysSilent(samples, channels: channels), "frames \(frames), sample \(position) = \(value)")
                    #expect(!Self.scanSaysSilent(samples))
                }
            }
        }
    }

    @Test func theAnswerIsPerChunkWhateverCameBefore() throws {
        let meter = LevelMeter(channels: 2)
        let loud = LevelAccumulatorTests.noise16(count: 2 * 480, seed: 3)
        let quiet = [Int16](repeating: 0, count: 2 * 480)
        #expect(!loud.withUnsafeBufferPointer { samples in meter.measure { $0.add(samples, channels: 2) } })
        #expect(quiet.withUnsafeBufferPointer { samples in meter.measure { $0.add(samples, channels: 2) } })
        // The quiet chunk still counts for the levels: 960 frames, the loud chunk's peak.
        let levels = meter.takeLevels()
        #expect(levels.channels.allSatisfy { $0.peak > -160 })
    }
}
