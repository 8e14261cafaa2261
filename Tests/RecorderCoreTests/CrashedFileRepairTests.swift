import Foundation
import Logging
import RecdTestSupport
@testable import RecorderCore
import RecorderModel
import Testing

/// A recording cut by a crash (kill -9, a power loss) is recovered with the length it really
/// holds: what recd lists is what an independent decoder (FFmpeg) decodes, and nothing the
/// writer had handed to the kernel is lost.
///
/// The crash is simulated exactly: the file is copied while recd's writer still has it open,
/// after the writer's periodic checkpoints (header refresh) — the bytes the kernel holds,
/// which is what a killed process leaves.
@Suite("crash-left files get their real length")
struct CrashedFileRepairTests {
    static let rate = 48000
    static let written = 110_400  // 2.3 s, past two once-a-second checkpoints

    /// How many frames at the end the writer may still hold in its encoder when killed:
    /// none for PCM, less than a block (4096) for libFLAC, a quarter of a second for LAME (the
    /// frames its bit reservoir still holds, and its delay: 7825 frames seen in mono).
    static func heldByEncoder(_ format: AudioFileFormat) -> Int {
        switch format {
        case .flac: 4096
        case .mp3: 12000
        default: 0
        }
    }

    /// The frames a torn last frame takes with it: one for PCM, a block for FLAC, an MPEG frame.
    static func tornFrame(_ format: AudioFileFormat) -> Int {
        switch format {
        case .flac: 4096
        case .mp3: 1152
        default: 1
        }
    }

    @Test("recovered with the frames FFmpeg decodes, nothing written lost",
          arguments: [AudioFileFormat.wav, .caf, .flac, .mp3])
    func recoveredLength(format: AudioFileFormat) throws {
        try expectRecovered(format: format, channels: 2)
    }

    /// 24-bit mono: WAV frames of 3 bytes (an odd data size, so a pad byte), CAF packets of 3,
    /// FLAC frames with another header; LAME's mono side information is shorter.
    @Test("24-bit mono recovered with the frames FFmpeg decodes", arguments: [AudioFileFormat.wav, .caf, .flac, .mp3])
    func recoveredLengthMono24(format: AudioFileFormat) throws {
        try expectRecovered(format: format, channels: 1, bitDepth: format.isLossy ? nil : 24)
    }

    /// A power loss can keep part of the last write: the torn frame is cut, the rest kept (for
    /// 24-bit mono WAV an odd data size, given its pad byte).
    @Test("a torn last frame is cut, the frames before it kept", arguments: [AudioFileFormat.wav, .caf, .flac, .mp3])
    func tornLastFrame(format: AudioFileFormat) throws {
        try expectRecovered(format: format, channels: 1, bitDepth: format.isLossy ? nil : 24, tornBytes: 1)
    }

    func expectRecovered(format: AudioFileFormat, channels: Int, bitDepth: Int? = nil, tornBytes: Int = 0) throws {
        let directory = TemporaryDirectory()
        let input = Signal.counter16(frames: Self.written, channels: channels)
        let part = try crashLeftFile(format: format, input: input, channels: channels, bitDepth: bitDepth, in: directory)
        if tornBytes > 0 {
            let size = try #require(try FileManager.default.attributesOfItem(atPath: part)[.size] as? Int)
            #expect(truncate(part, off_t(size - tornBytes)) == 0)
        }
        let recovered = RecordingLibrary(directory: directory.path).recoverPartialFiles(logger: Logger(label: "test"))
        #expect(recovered == [String(part.dropLast(5))])
        let entry = try #require(RecordingLibrary(directory: directory.path).list().first)
        let decoded = try FFmpegTools.decodeInt16(entry.path)
        #expect(Int64(decoded.count / channels) == entry.info.frames, "\(format): recd lists \(entry.info.frames), FFmpeg decodes \(decoded.count / channels)")
        let kept = Int64(Self.written - Self.heldByEncoder(format) - (tornBytes > 0 ? Self.tornFrame(format) : 0))
        #expect(entry.info.frames <= Int64(Self.written) && entry.info.frames >= kept,
                "\(format): kept \(entry.info.frames) of \(Self.written) frames")
        let probed = try FFmpegTools.probe(entry.path)
        #expect(probed.durationTimestamps != nil, "\(format): the file declares no length")
        if !format.isLossy {
            #expect(Array(decoded) == Array(input.prefix(decoded.count)), "\(format): the decoded audio is not the input's start")
        }
    }

    @Test("a file the repair does not understand is left byte for byte as it was",
          arguments: [AudioFileFormat.flac, .mp3])
    func damagedLeftAlone(format: AudioFileFormat) throws {
        let directory = TemporaryDirectory()
        let input = Signal.counter16(frames: Self.written, channels: 2)
        let part = try crashLeftFile(format: format, input: input, channels: 2, in: directory)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: part))
        switch format {
        case .flac:
            // A frame in the middle damaged: not what a crash leaves (it tears only the last).
            bytes[bytes.count / 3] ^= 0x55
        default:
            // The blank tag frame holds something: another encoder's file, or audio.
            let first = bytes.firstIndex(of: 0xFF)!
            bytes[first + 40] = 0x01
        }
        try bytes.write(to: URL(fileURLWithPath: part))
        #expect(throws: CrashedFileRepairError.self) {
            try CrashedFileRepair.patch(forFileAt: part, fileExtension: format.fileExtension)
        }
        RecordingLibrary.repairLength(part, fileExtension: format.fileExtension, logger: Logger(label: "test"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: part)) == bytes)
    }

    /// A chunk before `data` whose size runs past the end (bytes 2^63 − 1): refused as a layout
    /// the repair does not know, not a trap at start-up.
    @Test func aCAFWithAChunkSizeBeyondTheFileIsLeftAloneWithoutATrap() throws {
        let directory = TemporaryDirectory()
        let part = try crashLeftFile(format: .caf, input: Signal.counter16(frames: Self.written, channels: 2), channels: 2, in: directory)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: part))
        // The chunk after `desc` (at 8 + 12 + 32): its 64-bit size.
        let size = 8 + 12 + 32 + 4
        bytes.replaceSubrange(size..<(size + 8), with: [0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF])
        try bytes.write(to: URL(fileURLWithPath: part))
        #expect(throws: CrashedFileRepairError.self) { try CrashedFileRepair.patch(forFileAt: part, fileExtension: "caf") }
        RecordingLibrary.repairLength(part, fileExtension: "caf", logger: Logger(label: "test"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: part)) == bytes)
    }

    @Test("a finished file needs no repair", arguments: [AudioFileFormat.wav, .caf, .flac, .mp3])
    func finishedFileUntouched(format: AudioFileFormat) throws {
        let directory = TemporaryDirectory()
        let path = directory.file("done.\(format.fileExtension)")
        let writer = try RecordingSettings(format: format).makeFileWriter(path: path, sampleRate: Self.rate, channels: 2)
        let input = Signal.counter16(frames: 48000, channels: 2)
        try input.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: 48000) }
        try writer.close()
        #expect(try CrashedFileRepair.patch(forFileAt: path, fileExtension: format.fileExtension) == nil)
    }

    /// Writes `input` through recd's writer for `format` with a checkpoint each second, as the
    /// capture session does, and copies the file while it is open: what a kill -9 leaves.
    /// Returns the copy's path, `crash.<ext>.part`.
    func crashLeftFile(format: AudioFileFormat, input: [Int16], channels: Int, bitDepth: Int? = nil,
                       in directory: TemporaryDirectory) throws -> String {
        let live = directory.file(".live.\(format.fileExtension)")
        let writer = try RecordingSettings(format: format, bitDepth: bitDepth)
            .makeFileWriter(path: live, sampleRate: Self.rate, channels: channels)
        writer.stampOrigin(FileOrigin(startedAt: Date(), recordingName: "crash", recordingId: UUID().uuidString, device: "test"))
        let chunk = 480
        try input.withUnsafeBufferPointer { samples in
            for start in stride(from: 0, to: Self.written, by: chunk) {
                try writer.write(samples.baseAddress! + start * channels, frames: chunk)
                if (start + chunk) % Self.rate == 0 { writer.checkpoint() }
            }
        }
        let part = directory.file("crash.\(format.fileExtension).part")
        try FileManager.default.copyItem(atPath: live, toPath: part)
        writer.discard()
        unlink(live)
        return part
    }
}
