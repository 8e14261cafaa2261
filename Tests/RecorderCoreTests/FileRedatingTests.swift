import Foundation
import RecdTestSupport
@testable import RecorderCore
import RecorderModel
import Testing

/// Re-dating a finished file in place (issue 50), format by format: the file recd writes with
/// a start the clock did not vouch for, rewritten to its true start, read back by recd and by
/// ffprobe (an independent reader), its audio untouched (decoded by ffmpeg before and after).
@Suite("re-dating files in place")
struct FileRedatingTests {
    let directory = TemporaryDirectory()

    /// Three days and a bit behind, across a year's end: every field that holds a date moves
    /// (an ID3 year, an MP4 time in seconds, a `bext` date).
    static let stamped = Date(timeIntervalSince1970: 1_767_002_400.125)  // 2025-12-29T10:00:00.125Z
    static let trueStart = stamped.addingTimeInterval(3 * 86400 + 12.3456)  // 2026-01-01T10:00:12.471Z

    func write(_ format: AudioFileFormat, clock: StartClock) throws -> String {
        let path = directory.file("take-\(clock.rawValue)." + format.fileExtension)
        let settings = RecordingSettings(format: format, sampleRate: 48000, channels: 2)
        let writer = try settings.makeFileWriter(path: path, sampleRate: 48000, channels: 2)
        writer.stampOrigin(FileOrigin(startedAt: Self.stamped, recordingName: "take", recordingId: UUID().uuidString.lowercased(),
                                      device: "pacedmic", clock: clock))
        let samples = Signal.toInt16(Signal.chirp(from: 200, to: 8000, rate: 48000, frames: 48000, channels: 2, amplitude: 0.5))
        try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: 48000) }
        try writer.close()
        return path
    }

    /// Every tag ffprobe reads at the file's level and in its stream, values only.
    func tags(_ path: String) throws -> [String: String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/ffprobe")
        process.arguments = ["-v", "error", "-show_entries", "format_tags:stream_tags", "-of", "json", path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let json = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
        var tags: [String: String] = [:]
        for (key, value) in json["format"].flatMap({ $0 as? [String: Any] })?["tags"] as? [String: String] ?? [:] { tags[key.lowercased()] = value }
        for stream in json["streams"] as? [[String: Any]] ?? [] {
            for (key, value) in stream["tags"] as? [String: String] ?? [:] { tags[key.lowercased()] = tags[key.lowercased()] ?? value }
        }
        return tags
    }

    @Test(arguments: AudioFileFormat.allCases)
    func aFileBegunUnsynchronizedTakesItsTrueStartInPlace(format: AudioFileFormat) throws {
        let path = try write(format, clock: .unsynchronized)
        #expect(RecordingLibrary.startClock(ofFile: path) == .unsynchronized)
        #expect(abs(try #require(RecordingLibrary.startTime(ofFile: path)).timeIntervalSince(Self.stamped)) < 0.001)
        let audio = try FFmpegTools.decodeInt16(path)
        let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int

        let origin = FileOrigin(startedAt: Self.stamped, recordingName: "take", recordingId: "", device: "", clock: .unsynchronized)
        try FileRedating.redate(path: path, from: origin, to: Self.trueStart, sampleRate: 48000)

        // recd reads it back.
        let start = try #require(RecordingLibrary.startTime(ofFile: path))
        #expect(abs(start.timeIntervalSince(Self.trueStart)) < 0.001, "\(UTCTimestamp.text(start))")
        #expect(RecordingLibrary.startClock(ofFile: path) == .redated)
        // So does ffprobe, and nothing says the old start any more.
        let tags = try tags(path)
        let texts = tags.values.joined(separator: " | ")
        let newText = UTCTimestamp.text(Self.trueStart), oldText = UTCTimestamp.text(Self.stamped)
        #expect(!texts.contains(oldText), "\(tags)")
        #expect(!texts.contains("clock not synchronized"), "\(tags)")
        switch format {
        case .wav:
            // ffprobe's names for bext's OriginationDate and OriginationTime.
            #expect(tags["date"] == "2026-01-01" && tags["creation_time"] == "10:00:12", "\(tags)")
            #expect(tags["time_reference"] == String(Int(((36000 + 12.4706) * 48000).rounded())), "\(tags)")
            #expect(tags["comment"]?.contains("re-dated at clock sync; first frame at " + newText) == true, "\(tags)")
        case .aac, .alac:
            #expect(tags["creation_time"]?.hasPrefix("2026-01-01T10:00:12") == true, "\(tags)")
            #expect(tags["date"] == newText, "\(tags)")
        case .mp3:
            // libsndfile writes the whole start into ID3v2's TYER.
            #expect(tags["tyer"] == newText, "\(tags)")
            #expect(texts.contains("re-dated at clock sync; first frame at " + newText), "\(tags)")
        default:
            #expect(tags["date"] == newText, "\(tags)")
            #expect(texts.contains("re-dated at clock sync; first frame at " + newText), "\(tags)")
        }
        // The audio and the size are what they were: a few bytes of metadata changed.
        #expect(try FFmpegTools.decodeInt16(path) == audio)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int == size)
    }

    @Test func aFileWithoutTheStampedStartIsRefusedAndLeftAlone() throws {
        let path = try write(.flac, clock: .synchronized)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let origin = FileOrigin(startedAt: Self.stamped.addingTimeInterval(1), recordingName: "take", recordingId: "", device: "",
                                clock: .unsynchronized)
        #expect(throws: RecorderError.self) {
            try FileRedating.redate(path: path, from: origin, to: Self.trueStart, sampleRate: 48000)
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        #expect(RecordingLibrary.startClock(ofFile: path) == .synchronized)
    }

    @Test func theMarksHaveOneLengthAndReadBack() {
        #expect(StartClock.unsynchronized.commentMark?.utf8.count == StartClock.redated.commentMark?.utf8.count)
        for clock in StartClock.allCases {
            let origin = FileOrigin(startedAt: Self.stamped, recordingName: "n", recordingId: "i", device: "d; clock", clock: clock)
            #expect(FileOrigin.startClock(inComment: origin.comment) == clock, "\(origin.comment)")
        }
    }
}
