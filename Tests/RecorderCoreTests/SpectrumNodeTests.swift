@testable import ALSA
import Foundation
import Glibc
@testable import AudioGraph
@testable import RecorderCore
import RecorderModel
import Testing

/// The spectrum node's columns against numpy's rfft and scipy's Hann window
/// (Tests/reference/spectrum_reference.py), fed through the node as the capture thread feeds
/// it: chunks of one device period, in each sample format, at a rate whose column period is
/// shorter than the windows' stride (8 kHz) and at 48 kHz.
@Suite("Spectrum node")
struct SpectrumNodeTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("reference/spectrum_reference.py").path

    final class Columns: @unchecked Sendable {
        private let lock = NSLock()
        private var columns: [Spectrum] = []
        private var handOvers: [Int] = []
        func add(_ group: [Spectrum]) { lock.withLock { columns += group; handOvers.append(group.count) } }
        var all: [Spectrum] { lock.withLock { columns } }
        /// How many columns each hand-over carried.
        var groups: [Int] { lock.withLock { handOvers } }
    }

    /// A 3 kHz sine (exactly bin 64 at 48 kHz) at half scale on the first channel, noise at
    /// about -26 dBFS RMS on the others: mixed, the sine reads -12.0 dBFS (its amplitude 0.25).
    static func signal(rate: Int, channels: Int, seconds: Double, frequency: Double) -> [[Double]] {
        var random = SoundTriggerTests.Random(state: 0x5EC7)
        return (0..<Int(Double(rate) * seconds)).map { frame in
            (0..<channels).map { channel in
                channel == 0 ? 0.5 * sin(2 * Double.pi * frequency * Double(frame) / Double(rate))
                             : 0.05 * (random.uniform() * 2 - 1) * 3.0.squareRoot()
            }
        }
    }

    /// The node's columns for `frames` delivered in chunks of `chunkFrames` in `format`, and
    /// the reference's for the same samples.
    static func columns(_ frames: [[Double]], rate: Int, format: SampleFormat,
                        chunkFrames: Int) throws -> (node: [Spectrum], reference: [[Double]]) {
        let channels = frames[0].count
        let configuration = PCMConfiguration(sampleFormat: format, sampleRate: rate, channels: channels,
                                             periodFrames: chunkFrames, bufferFrames: chunkFrames * 10)
        // The samples as the device delivers them, and as 16-bit units for the reference.
        var bytes = [UInt8]()
        var units = [Double]()
        for frame in frames {
            for value in frame {
                switch format {
                case .int16:
                    let sample = Int16((value * 32767).rounded())
                    withUnsafeBytes(of: sample.littleEndian) { bytes += $0 }
                    units.append(Double(sample))
                case .int32:
                    let sample = Int32((value * 2_147_483_647).rounded())
                    withUnsafeBytes(of: sample.littleEndian) { bytes += $0 }
                    units.append(Double(sample) / 65536)
                case .float32:
                    let sample = Float(value)
                    withUnsafeBytes(of: sample.bitPattern.littleEndian) { bytes += $0 }
                    units.append(Double(sample) * 32768)
                }
            }
        }
        let collected = Columns()
        let node = try SpectrumNode(configuration: configuration, columnsPerPublication: 1) { collected.add($0) }
        defer { node.stop() }
        let bytesPerFrame = configuration.bytesPerFrame
        var position = 0
        bytes.withUnsafeBytes { raw in
            while position < frames.count {
                let count = min(chunkFrames, frames.count - position)
                let time = 1000 + Double(position) / Double(rate)
                _ = node.receive(CaptureChunk(samples: raw.baseAddress! + position * bytesPerFrame, frames: count,
                                              position: Int64(position), captureTime: time, readUptime: 0,
                                              overruns: 0, framesLost: 0, anchoredTime: time))
                position += count
                // A device's pace, roughly: the node's ring holds a second.
                if position % (rate / 2) < chunkFrames { usleep(20_000) }
            }
        }
        let flat = try SoundTriggerTests.python("columns", input: units, [String(rate), String(channels)], script: script)
        let bins = Spectrum.windowSize / 2 + 1
        let reference = stride(from: 0, to: flat.count, by: bins).map { Array(flat[$0..<($0 + bins)]) }
        let deadline = Date().addingTimeInterval(10)
        while collected.all.count < reference.count, Date() < deadline { usleep(10_000) }
        return (collected.all, reference)
    }

    @Test(arguments: [(48000, 2, SampleFormat.int16), (48000, 1, .int32), (44100, 2, .float32), (8000, 1, .int16)])
    func columnsEqualNumpysRfft(rate: Int, channels: Int, format: SampleFormat) throws {
        let frequency = rate == 48000 ? 3000.0 : 1000.0
        let frames = Self.signal(rate: rate, channels: channels, seconds: 1, frequency: frequency)
        let (node, reference) = try Self.columns(frames, rate: rate, format: format, chunkFrames: rate / 100)
        #expect(reference.count >= 18, "the reference cut \(reference.count) columns")
        try #require(node.count == reference.count, "\(node.count) columns, the reference \(reference.count)")
        let period = (Double(rate) * Spectrum.columnPeriod).rounded()
        for (index, (column, expected)) in zip(node, reference).enumerated() {
            #expect(column.dBFS.count == expected.count)
            #expect(column.sampleRate == rate && column.size == 1024 && abs(column.period - period / Double(rate)) < 1e-9)
            // The column's time: its last frame's, from the chunk's (at these rates the first
            // window ends before the first column, so column n ends at frame n × period).
            if rate >= 44100 {
                #expect(abs(column.time - (1000 + Double(index + 1) * period / Double(rate))) < 1e-6, "column \(index): \(column.time)")
            }
            // 0.1 dB rounding on both sides, float against double: 0.15 dB where there is signal.
            let worst = zip(column.dBFS, expected).filter { $0.1 > -110 }.map { abs(Double($0.0) - $0.1) }.max() ?? 0
            #expect(worst <= 0.15, "column \(index): \(worst) dB from numpy")
        }
        // The sine where it is: its bin, at its level (0.25 of full scale after mixing, or 0.5 alone).
        let bin = Int((frequency * 1024 / Double(rate)).rounded())
        let expectedLevel = 20 * log10(channels == 1 ? 0.5 : 0.25)
        let last = try #require(node.last)
        let peak = last.dBFS.indices.max { last.dBFS[$0] < last.dBFS[$1] }!
        #expect(abs(peak - bin) <= 1, "the sine's bin \(bin), the peak's \(peak)")
        if rate == 48000 { #expect(abs(Double(last.dBFS[bin]) - expectedLevel) < 0.2, "\(last.dBFS[bin]) dBFS") }
    }

    /// Columns go two at a time (every 0.1 s), and the capture thread need wake for the node
    /// only as often; a jump hands over what came before it at once, alone.
    @Test func columnsGoTwoAtATime() throws {
        let configuration = PCMConfiguration(sampleFormat: .int16, sampleRate: 48000, channels: 1, periodFrames: 480, bufferFrames: 4800)
        let collected = Columns()
        let node = try SpectrumNode(configuration: configuration) { collected.add($0) }
        defer { node.stop() }
        #expect(abs(node.wakeInterval - 0.1) < 1e-9)
        let chunk = [Int16](repeating: 1000, count: 480)
        // 5 × 2400 frames: five columns, four handed over in two pairs; then a jump, which
        // hands over the fifth on its own.
        let positions = (0..<25).map { $0 * 480 } + [1_000_000]
        chunk.withUnsafeBytes { raw in
            for position in positions {
                _ = node.receive(CaptureChunk(samples: raw.baseAddress!, frames: 480, position: Int64(position),
                                              captureTime: Double(position) / 48000, readUptime: 0, overruns: 0, framesLost: 0))
            }
        }
        let deadline = Date().addingTimeInterval(10)
        while collected.all.count < 5, Date() < deadline { usleep(10_000) }
        #expect(collected.groups == [2, 2, 1], "\(collected.groups)")
        let times = collected.all.map(\.time)
        #expect(zip(times, (1...5).map { Double($0 * 2400) / 48000 }).allSatisfy { abs($0 - $1) < 1e-9 }, "\(times)")
    }

    /// Frames lost before a chunk (a jump in positions) start the next column afresh: its
    /// period counts from the jump, and no window spans it.
    @Test func aJumpStartsAfresh() throws {
        let configuration = PCMConfiguration(sampleFormat: .int16, sampleRate: 48000, channels: 1, periodFrames: 480, bufferFrames: 4800)
        let collected = Columns()
        let node = try SpectrumNode(configuration: configuration, columnsPerPublication: 1) { collected.add($0) }
        defer { node.stop() }
        let chunk = [Int16](repeating: 1000, count: 480)
        // 1920 frames (two windows, no column yet), a jump, then 2400 frames: one column, at
        // the 2400th frame after the jump (without the fresh start it would come 480 frames in).
        let positions = [0, 480, 960, 1440, 100_000, 100_480, 100_960, 101_440, 101_920]
        chunk.withUnsafeBytes { raw in
            for position in positions {
                _ = node.receive(CaptureChunk(samples: raw.baseAddress!, frames: 480, position: Int64(position),
                                              captureTime: Double(position) / 48000, readUptime: 0, overruns: 0, framesLost: 0))
            }
        }
        let deadline = Date().addingTimeInterval(10)
        while collected.all.isEmpty, Date() < deadline { usleep(10_000) }
        node.stop()
        let columns = collected.all
        #expect(columns.count == 1, "\(columns.count) columns")
        let column = try #require(columns.first)
        #expect(abs(column.time - 102_400.0 / 48000) < 1e-9, "\(column.time)")
    }
}
