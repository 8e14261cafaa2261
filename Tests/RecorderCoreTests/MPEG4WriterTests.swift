import Foundation
import MPEG4
import RecdTestSupport
import Testing

/// The .m4a writer on its own: what a crash would find in the file while it is being written.
@Suite("MPEG4 writer")
struct MPEG4WriterTests {
    let directory = TemporaryDirectory()

    @Test func whileWritingTheFileIsFragmentedWithAFragmentPerSecondOfAudio() throws {
        let path = directory.file("open.m4a.part")
        let writer = try MPEG4AudioWriter(path: path, codec: .aac(bitRate: 96_000), sampleRate: 48000, channels: 2)
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 48000, frames: 48000 * 11 / 2, channels: 2, amplitude: 0.5))
        // 5.5 s in small writes and no checkpoint: only frag_duration cuts fragments.
        try samples.withUnsafeBufferPointer { buffer in
            for start in stride(from: 0, to: 48000 * 11 / 2, by: 480) {
                try writer.write(buffer.baseAddress! + start * 2, frames: 480)
            }
        }
        // What a kill -9 now would leave: every whole second is readable.
        let boxes = FFmpegTools.topLevelBoxes(path)
        #expect(boxes.prefix(2) == ["ftyp", "moov"], "\(boxes)")
        #expect(boxes.filter { $0 == "moof" }.count >= 5, "\(boxes)")
        let readable = try FFmpegTools.decodeInt16(path).count / 2
        #expect(readable >= 48000 * 9 / 2, "\(readable) frames readable of 264000 written")
        try writer.close()
        // Closed: regular, moov first, every frame declared.
        let closed = FFmpegTools.topLevelBoxes(path)
        #expect(!closed.contains("moof") && closed.firstIndex(of: "moov")! < closed.firstIndex(of: "mdat")!, "\(closed)")
        #expect(try FFmpegTools.probe(path).frames == 264_000)
        #expect(!FileManager.default.fileExists(atPath: directory.file(".open.m4a.part.rewrite")))
    }

    @Test func aFileKilledInItsFirstSecondIsAlreadyReadable() throws {
        let path = directory.file("early.m4a.part")
        let writer = try MPEG4AudioWriter(path: path, codec: .aac(bitRate: 64_000), sampleRate: 16000, channels: 1)
        let samples = Signal.counter16(frames: 4800, channels: 1)
        try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: 4800) }
        // 0.3 s in: the moov is out (its edit list knows the encoder delay), the samples wait
        // for the first fragment.
        #expect(FFmpegTools.topLevelBoxes(path) == ["ftyp", "moov"])
        let stream = try FFmpegTools.probe(path)
        #expect(stream.codecName == "aac" && stream.sampleRate == 16000 && stream.channels == 1)
        try writer.close()
    }

    @Test func aFileCutInTheMiddleOfAFragmentIsRewrittenWithEveryWholeFragmentBefore() throws {
        let path = directory.file("torn.m4a.part")
        let writer = try MPEG4AudioWriter(path: path, codec: .aac(bitRate: 128_000), sampleRate: 48000, channels: 2)
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 48000, frames: 48000 * 7 / 2, channels: 2, amplitude: 0.5))
        try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: 48000 * 7 / 2) }
        // A torn write (power loss): the copy ends 100 bytes into the last fragment's data.
        let whole = try #require(FileManager.default.contents(atPath: path))
        try writer.close()
        let torn = directory.file("copy.m4a.part")
        var offset = 0, lastData = 0
        while offset + 8 <= whole.count {
            let size = whole[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            if String(decoding: whole[offset + 4..<offset + 8], as: UTF8.self) == "mdat" { lastData = offset + 8 }
            guard size >= 8 else { break }
            offset += size
        }
        _ = FileManager.default.createFile(atPath: torn, contents: whole.prefix(lastData + 100))
        try MPEG4FileRewriter.makeRegular(path: torn)
        let boxes = FFmpegTools.topLevelBoxes(torn)
        #expect(!boxes.contains("moof") && boxes.firstIndex(of: "moov")! < boxes.firstIndex(of: "mdat")!, "\(boxes)")
        let frames = try #require(try FFmpegTools.probe(torn).frames)
        // Two whole fragments of 47 AAC packets each, the first starting with the encoder delay.
        #expect(frames == 2 * 47 * 1024 - 1024, "\(frames) frames kept")
        #expect(try FFmpegTools.decodeInt16(torn).count / 2 >= Int(frames))
    }

    @Test func aCheckpointPutsEverythingEncodedSoFarInTheFile() throws {
        let path = directory.file("checkpoint.m4a.part")
        let writer = try MPEG4AudioWriter(path: path, codec: .alac(bitDepth: 16), sampleRate: 44100, channels: 1)
        let samples = Signal.counter16(frames: 44100 / 2, channels: 1)
        try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: 44100 / 2) }
        writer.checkpoint()
        // ALAC blocks are 4096 frames: all whole blocks of the half second are in the file.
        let readable = try FFmpegTools.decodeInt16(path)
        #expect(readable.count == 22050 / 4096 * 4096)
        #expect(readable == Array(samples[0..<readable.count]))
        try writer.close()
    }

    @Test func anExistingFileIsNeverReplaced() throws {
        let path = directory.file("taken.m4a.part")
        _ = FileManager.default.createFile(atPath: path, contents: Data("keep".utf8))
        #expect(throws: MPEG4Error.self) {
            _ = try MPEG4AudioWriter(path: path, codec: .aac(bitRate: 64_000), sampleRate: 48000, channels: 1)
        }
        #expect(FileManager.default.contents(atPath: path) == Data("keep".utf8))
    }
}
