import ALSA
import RecdTestSupport
@testable import RecorderCore
import Sndfile
import Soxr
import Testing

/// 16-bit input resampled for a 16-bit file goes through soxr as integers; the file must hold
/// what the float path (soxr on floats, then libsndfile's rounding and clipping) wrote.
@Suite("Format converter: 16-bit resampling")
struct FormatConverterTests {
    let directory = TemporaryDirectory()

    /// Noise with every extreme in it, then full-scale square waves (whose ringing after
    /// resampling overshoots full scale, so that clipping is exercised), then silence.
    static func input(frames: Int, channels: Int) -> [Int16] {
        var samples = LevelAccumulatorTests.noise16(count: frames / 2 * channels, seed: 11)
        let square = (frames / 2..<frames - 100).flatMap { frame in
            [Int16](repeating: (frame / 37) % 2 == 0 ? .max : .min, count: channels)
        }
        samples += square
        samples += [Int16](repeating: 0, count: 100 * channels)
        return samples
    }

    /// Runs `samples` through a converter in chunks of varied length, writing what comes out
    /// to a 16-bit file with libsndfile; returns the file's samples.
    func convert(_ samples: [Int16], channels: Int, rates: (Int, Int), quality: Resampler.Quality,
                 sixteenBit: Bool, container: SoundFileFormat.Container) throws -> [Int16] {
        let converter = try FormatConverter(inputChannels: channels, outputChannels: channels,
                                            inputRate: rates.0, outputRate: rates.1, quality: quality,
                                            maxInputFrames: 8192, inputFormat: .int16, sixteenBitFile: sixteenBit)
        #expect(converter.resamplesSixteenBit == sixteenBit)
        let path = directory.file("\(sixteenBit)-\(channels)-\(rates.0)-\(rates.1)-\(quality)-\(container).out")
        let writer = try SoundFileWriter(path: path, format: SoundFileFormat(container: container, encoding: .pcm16),
                                         sampleRate: rates.1, channels: channels)
        let output: (ConvertedSamples, Int) throws -> Void = { converted, frames in
            switch converted {
            case .float(let floats): try writer.write(floats, frames: frames)
            case .int16(let integers): try writer.write(integers, frames: frames)
            }
        }
        let chunks = [8192, 1001, 480, 1, 4096, 7]
        var frame = 0, chunk = 0
        let frames = samples.count / channels
        try samples.withUnsafeBufferPointer { buffer in
            while frame < frames {
                let count = Swift.min(chunks[chunk % chunks.count], frames - frame)
                let start = buffer.baseAddress! + frame * channels
                if sixteenBit {
                    try converter.resample(start, frames: count, output: output)
                } else {
                    try converter.convert(UnsafeRawPointer(start), format: .int16, frames: count, meter: { _ in }, output: output)
                }
                frame += count
                chunk += 1
            }
        }
        try converter.flush(output: output)
        try writer.close()
        return try SoundFileReader(path: path).readAllInt16()
    }

    /// The float path's FLAC: libsndfile's FLAC encoder scales floats by 32 768, rounds to
    /// nearest and clips, which is what soxr does to its integer output. (Its WAV and CAF
    /// writers scale by 32 767: there the float path had a gain of 32 767/32 768, which the
    /// integer path does not have; it writes the same samples whatever the container.)
    @Test(arguments: [1, 2])
    func theFileHoldsTheSameSamplesAsThroughFloats(channels: Int) throws {
        let samples = Self.input(frames: 48_000, channels: channels)
        for (rates, quality) in [((48_000, 16_000), Resampler.Quality.high), ((48_000, 22_050), .quick),
                                 ((32_000, 48_000), .medium), ((44_100, 48_000), .veryHigh)] {
            let integers = try convert(samples, channels: channels, rates: rates, quality: quality, sixteenBit: true, container: .flac)
            let floats = try convert(samples, channels: channels, rates: rates, quality: quality, sixteenBit: false, container: .flac)
            let integersInWAV = try convert(samples, channels: channels, rates: rates, quality: quality, sixteenBit: true, container: .rf64)
            #expect(integersInWAV == integers, "\(rates) \(quality)")
            #expect(integers.count == floats.count, "\(rates) \(quality)")
            let expected = 48_000 * rates.1 / rates.0
            #expect(Swift.abs(integers.count / channels - expected) <= 1, "every frame came out, flush included")
            let differences = zip(integers, floats).map { Swift.abs(Int($0) - Int($1)) }
            #if arch(x86_64) || arch(i386)
            let exact = quality != .veryHigh
            #else
            // Off x86, soxr rounds an exact tie away from zero, libsndfile to even.
            let exact = false
            #endif
            if !exact {
                // With .veryHigh soxr works in double precision: the integer path rounds its
                // result once, the float path to a float first, then to an integer.
                #expect(differences.allSatisfy { $0 <= 1 }, "\(rates) \(quality)")
                #expect(differences.filter { $0 != 0 }.count * 1000 < differences.count, "\(rates) \(quality)")
            } else {
                let differing = differences.filter { $0 != 0 }.count
                #expect(differing == 0, "\(rates) \(quality): \(differing) samples differ")
            }
            // The square waves' ringing reached full scale: the clipping was compared too.
            #expect(integers.contains(.max) && integers.contains(.min), "\(rates) \(quality)")
        }
    }

    @Test func otherFormatsAndChannelChangesKeepTheFloatPath() throws {
        func converter(_ format: SampleFormat, channels: (Int, Int), sixteenBitFile: Bool) throws -> FormatConverter {
            try FormatConverter(inputChannels: channels.0, outputChannels: channels.1, inputRate: 48_000, outputRate: 16_000,
                                quality: .high, maxInputFrames: 1024, inputFormat: format, sixteenBitFile: sixteenBitFile)
        }
        #expect(try converter(.int16, channels: (2, 2), sixteenBitFile: true).resamplesSixteenBit)
        #expect(try !converter(.int16, channels: (2, 1), sixteenBitFile: true).resamplesSixteenBit)
        #expect(try !converter(.int16, channels: (2, 2), sixteenBitFile: false).resamplesSixteenBit)
        #expect(try !converter(.int32, channels: (2, 2), sixteenBitFile: true).resamplesSixteenBit)
        #expect(try !converter(.float32, channels: (2, 2), sixteenBitFile: true).resamplesSixteenBit)
    }
}
