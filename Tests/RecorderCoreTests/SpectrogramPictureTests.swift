import Foundation
import Glibc
import RecorderModel
import SignalProcessing
import RecdTestSupport
import Testing

/// A recording's picture (SpectrogramPicture, issue 54): a file's tones where its plot's scale
/// puts them, in every range, its peak the file's, and its PNG as ffmpeg reads it.
@Suite("spectrogram picture")
struct SpectrogramPictureTests {
    /// ffmpeg's reading of a PNG: its width, height and RGB pixels.
    static func decode(_ png: [UInt8], in directory: TemporaryDirectory) throws -> (Int, Int, [UInt8]) {
        let path = directory.file("picture.png")
        try Data(png).write(to: URL(fileURLWithPath: path))
        let probe = try ChildProcess("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "stream=width,height", "-of", "csv=p=0", path],
                                     environment: ProcessInfo.processInfo.environment, output: directory.file("probe.txt"))
        guard probe.wait(timeout: 30) == 0 else { throw TestFailure("ffprobe failed") }
        let size = try String(contentsOfFile: directory.file("probe.txt"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",").compactMap { Int($0) }
        let raw = directory.file("picture.rgb")
        let decoded = try ChildProcess("/usr/bin/ffmpeg", ["-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb24", raw],
                                       environment: ProcessInfo.processInfo.environment)
        guard decoded.wait(timeout: 30) == 0, size.count == 2 else { throw TestFailure("ffmpeg failed") }
        return (size[0], size[1], Array(try Data(contentsOf: URL(fileURLWithPath: raw))))
    }

    @Test(arguments: ["12000", "full", "log"])
    func theTonesAreWhereThePlotsScalePutsThem(range name: String) throws {
        let directory = TemporaryDirectory()
        // 1 kHz, then 5 kHz (FileSpectrogramTests' file), at -6 dBFS.
        let path = try FileSpectrogramTests.twoTones(directory, "two.flac")
        let spectrogram = try FileSpectrogram.compute(path: path, columns: 200)
        #expect(abs(spectrogram.peak - (-6.02)) < 0.05, "peak \(spectrogram.peak)")
        let range = try #require(SpectrogramPicture.Range(name))
        let picture = SpectrogramPicture(spectrogram, range: range)
        let plot = picture.plot
        #expect(plot.width == 400 && plot.height == 256, "\(plot)")
        #expect(plot.highFrequency == (name == "12000" ? 12000 : 24000) && plot.logarithmic == (name == "log"))
        let (width, height, pixels) = try Self.decode(try picture.png(), in: directory)
        #expect(width == picture.width && height == picture.height)
        #expect(pixels == picture.rgb, "ffmpeg reads other pixels than were drawn")
        let scale = FrequencyScale(range: range, sampleRate: 48000, height: plot.height)
        for (column, frequency) in [(plot.width / 4, 1000.0), (plot.width * 3 / 4, 5000.0)] {
            let rows = (0..<plot.height).map { row in
                let index = ((plot.y + row) * width + plot.x + column) * 3
                return Int(pixels[index]) + Int(pixels[index + 1]) + Int(pixels[index + 2])
            }
            let loudest = rows.max()!
            let bright = rows.indices.filter { rows[$0] >= loudest - 10 }
            let middle = Double(bright.first! + bright.last! + 1) / 2
            // Row r spans r to r + 1 from the plot's top: the tone is where its scale says.
            let expected = Double(plot.height) - scale.y(frequency)
            #expect(abs(middle - expected) <= 1.5, "\(name), \(frequency) Hz: rows \(bright), expected about \(expected)")
            #expect(loudest > 600, "\(name), \(frequency) Hz: brightness \(loudest)")
        }
    }

    @Test func theColourScaleRunsFromBlackToWhite() {
        let black = SpectrogramPicture.shade(0), white = SpectrogramPicture.shade(1)
        #expect(black == (0, 0, 0) && white == (255, 255, 255))
        // Brighter with the level, all the way.
        let sums = stride(from: 0.0, through: 1.0, by: 0.05).map { value in
            let (r, g, b) = SpectrogramPicture.shade(value)
            return Int(r) + Int(g) + Int(b)
        }
        #expect(zip(sums, sums.dropFirst()).allSatisfy { $0 <= $1 }, "\(sums)")
    }

    @Test func badRangesAreRefused() {
        for text in ["", "0", "999", "96001", "linear", "-12000"] { #expect(SpectrogramPicture.Range(text) == nil, "\(text)") }
        #expect(SpectrogramPicture.Range("8000") == .upTo(8000))
    }
}
