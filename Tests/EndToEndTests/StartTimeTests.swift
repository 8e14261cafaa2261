import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// The start time inside every file and the device clock's drift, through the real recd:
/// a WAV's `bext` chunk read byte by byte, Vorbis comments and CAF's `info` read back with
/// libsndfile, an .m4a's tags with ffprobe, each segment's own start, and the drift figure on
/// a device paced by the system clock.
/// How far a start read back through the wire (RFC 3339 to the millisecond, rounded) may be
/// from the exact one: half a millisecond, and a microsecond for Double's resolution at
/// today's seconds since 1970 (0.50002 ms was seen).
private let wireRounding = 0.000_501

@Suite("start time and clock drift")
struct StartTimeTests {
    let inputs = TemporaryDirectory()

    func info(_ daemon: Daemon, _ name: String) throws -> RecordingFile {
        try daemon.connect().call(.recordingsInfo, RecordingNameParams(name: name))
    }

    /// Records `seconds` of the counter input from the unpaced file device and waits for the end.
    func record(_ daemon: Daemon, _ params: StartParams) throws -> Recording {
        let started: Recording = try daemon.connect().call(.start, params)
        guard daemon.waitForStatus({ $0.state.name == .finished && $0.recording?.id == started.id }) != nil else {
            throw TestFailure("the recording did not finish: \(daemon.log)")
        }
        return started
    }

    @Test func aWAVCarriesItsFirstFramesTimeInABextChunk() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        // A fresh sound server starts the first capture stream of a client about a second
        // late (the file says so: its frames begin then). Warm up, as a live device would be.
        let _: Recording = try client.call(.start, StartParams(name: "warm-up", format: .wav))
        #expect(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime > 0 } != nil)
        let _: StateResult = try client.call(.cancel)
        let started: Recording = try client.call(.start, StartParams(name: "take", format: .wav, sampleRate: 48000, channels: 2))
        #expect(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime >= 0.5 } != nil)
        let stopped: Recording = try client.call(.stop)
        let stopAnswered = Date()
        let path = daemon.recordings + "/take.wav"

        let bext = try #require(try BextChunk(wavPath: path), "the WAV has a bext chunk")
        #expect(bext.description.hasPrefix("take; recorded by recd \(RecdVersion.current) from \(daemon.device)"), "\(bext.description)")
        #expect(bext.originator == "recd \(RecdVersion.current)")
        #expect(bext.originatorReference == started.id.filter { $0 != "-" })
        #expect(bext.version == 2)
        // The date and time fields are the start to the second; TimeReference places the first
        // frame exactly, counted from midnight UTC at the file's rate.
        let midnight = try #require(UTCTimestamp.date(bext.originationDate))
        let firstFrame = midnight.addingTimeInterval(Double(bext.timeReference) / 48000)
        let fields = UTCTimestamp.fields(secondsSince1970: Int64(firstFrame.timeIntervalSince1970.rounded(.down)))
        #expect(bext.originationDate == fields.date && bext.originationTime == fields.time, "\(bext)")
        // The first frame follows the start (bench/'s start latency, target 5 ms; by what the
        // capture thread waited on a loaded machine, which is not bounded here), and comes early
        // enough for the file's audio to end before the stop answered: its frames were captured
        // in real time between the two. 0.1 s either way for the estimate: the paced device's
        // null sink hands its monitor's frames over in blocks, so a read right after a block can
        // place them early (25 ms was seen once under TSan on a loaded machine); a wrong rate,
        // frame count or date is off by far more.
        let answer = try #require(started.startedAt)
        let latency = firstFrame.timeIntervalSince(answer)
        let audioEnd = firstFrame.addingTimeInterval(Double(stopped.frames) / 48000)
        #expect(latency > -0.1 && audioEnd.timeIntervalSince(stopAnswered) < 0.1,
                "first frame at \(UTCTimestamp.text(firstFrame)), start answered \(UTCTimestamp.text(answer)), \(stopped.frames) frames, stop answered \(UTCTimestamp.text(stopAnswered))")

        // recordings.info reads it back from the file (not its modification time), even renamed.
        let renamed = daemon.recordings + "/renamed.wav"
        #expect(Glibc.rename(path, renamed) == 0)
        let file = try info(daemon, "renamed")
        let readBack = try #require(file.startedAt)
        #expect(abs(readBack.timeIntervalSince(firstFrame)) < wireRounding)
        #expect(file.modified.timeIntervalSince(readBack) > 0.4, "the file was modified at its end, not at its start")
    }

    @Test func aKilledDaemonsWAVKeepsItsBextChunkThroughRecovery() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "crash", format: .wav, sampleRate: 48000, channels: 2))
        // Past the first header refresh (sync_interval 1 s).
        #expect(daemon.waitForStatus { $0.currentTime > 1.5 } != nil)
        daemon.process.signal(SIGKILL)
        _ = daemon.process.wait(timeout: 10)
        let left = try #require(try BextChunk(wavPath: started.partialPath), "the .part a crash left has its bext chunk")

        let next = try Daemon(device: "null", recordings: daemon.recordings)
        let list: RecordingsListResult = try next.connect().call(.recordingsList)
        #expect(list.recordings.map(\.file) == ["crash.wav"])
        let recovered = try #require(try BextChunk(wavPath: daemon.recordings + "/crash.wav"))
        #expect(recovered.timeReference == left.timeReference && recovered.originationDate == left.originationDate
                && recovered.description == left.description, "\(recovered)")
        let midnight = try #require(UTCTimestamp.date(recovered.originationDate)).timeIntervalSince1970
        let start = try #require(list.recordings.first?.startedAt).timeIntervalSince1970
        #expect(abs(start - (midnight + Double(recovered.timeReference) / 48000)) < wireRounding)
    }

    @Test func flacOpusVorbisAndCAFCarryTheStartAsVorbisCommentsOrInfo() throws {
        let input = writeCounterInput(inputs, seconds: 4)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        for format in [AudioFileFormat.flac, .opus, .vorbis, .caf] {
            let name = "note-\(format.rawValue)"
            _ = try record(daemon, StartParams(name: name, format: format, sampleRate: 48000, channels: 2, duration: 0.5))
            let file = try info(daemon, name)
            let reader = try SoundFileReader(path: file.path)
            let date = try #require(reader.string(.date), "\(format.rawValue) has a date")
            let start = try #require(UTCTimestamp.date(date), "\(date)")
            #expect(date.count == "2026-11-22T14:00:00.123Z".count && date.hasSuffix("Z"), "RFC 3339 to the millisecond: \(date)")
            #expect(reader.string(.title) == name)
            #expect(reader.string(.comment)?.contains("from \(daemon.device) (source default); ") == true, "\(reader.string(.comment) ?? "none")")
            #expect(reader.string(.software)?.hasPrefix("recd \(RecdVersion.current)") == true)
            // The wire carries milliseconds, as the comment does.
            #expect(abs((file.startedAt ?? .distantPast).timeIntervalSince(start)) < wireRounding,
                    "\(format.rawValue): recordings.info reads the file's own start")
            #expect(abs(start.timeIntervalSinceNow) < 60, "a time near now: \(date)")
        }
    }

    /// Every format names the station's source beside the start (issue 53), as ffprobe reads it:
    /// a `[[source]]` named "east" here.
    @Test func everyFormatNamesItsSourceBesideItsStart() throws {
        let input = writeCounterInput(inputs, seconds: 6)
        let device = TestDevices.file(input.path)
        let daemon = try Daemon(device: nil, config: "[[source]]\nname = \"east\"\ndevice = \"\(device)\"\n")
        for format in AudioFileFormat.allCases {
            let name = "source-\(format.rawValue)"
            _ = try record(daemon, StartParams(name: name, format: format, sampleRate: 48000, channels: 2, duration: 0.3))
            let file = try info(daemon, name)
            let probe = try run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "format_tags:stream_tags", "-of", "json", file.path])
            let object = try JSONSerialization.jsonObject(with: Data(probe.stdout.utf8)) as? [String: Any]
            let tags = [(object?["format"] as? [String: Any])?["tags"]] + ((object?["streams"] as? [[String: Any]]) ?? []).map { $0["tags"] }
            let values = tags.compactMap { $0 as? [String: String] }.flatMap(\.values)
            let named = values.first { $0.contains("recorded by recd \(RecdVersion.current) from \(device) (source east); ") }
            #expect(named?.contains("first frame at ") == true, "\(format.rawValue): \(probe.stdout)")
        }
    }

    @Test func anMP3NamesItsStartInItsID3Comment() throws {
        let input = writeCounterInput(inputs, seconds: 4)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        _ = try record(daemon, StartParams(name: "clip", format: .mp3, sampleRate: 48000, channels: 2, duration: 0.5))
        let file = try info(daemon, "clip")
        let reader = try SoundFileReader(path: file.path)
        #expect(reader.string(.title) == "clip")
        let comment = try #require(reader.string(.comment), "the MP3 has an ID3 comment")
        let text = try #require(comment.split(separator: " ").last.map(String.init), "\(comment)")
        let start = try #require(UTCTimestamp.date(text), "\(comment)")
        #expect(abs(start.timeIntervalSinceNow) < 60, "a time near now: \(comment)")
        #expect(abs((file.startedAt ?? .distantPast).timeIntervalSince(start)) < wireRounding, "recordings.info reads it back")
    }

    @Test func anM4AHasItsCreationTimeAndPreciseDateForFFprobe() throws {
        let input = writeCounterInput(inputs, seconds: 4)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        _ = try record(daemon, StartParams(name: "memo", format: .aac, sampleRate: 48000, channels: 2, duration: 1))
        let file = try info(daemon, "memo")
        let start = try #require(file.startedAt)
        let probe = try run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "format_tags", "-of", "json", file.path])
        let object = try JSONSerialization.jsonObject(with: Data(probe.stdout.utf8)) as? [String: Any]
        let tags = try #require((object?["format"] as? [String: Any])?["tags"] as? [String: String], "\(probe.stdout)")
        // mvhd counts whole seconds; the date tag keeps the milliseconds.
        let creation = try #require(tags["creation_time"].flatMap { UTCTimestamp.date($0) }, "\(tags)")
        #expect(creation.timeIntervalSince1970 == start.timeIntervalSince1970.rounded(.down), "\(tags)")
        #expect(tags["date"] == UTCTimestamp.text(start), "\(tags)")
        #expect(tags["title"] == "memo")
    }

    @Test func eachSegmentCarriesItsOwnFirstFramesTime() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[segments]\nlength = 1\n")
        let client = try daemon.connect()
        let recording: Recording = try client.call(.start, StartParams(name: "station", format: .wav, sampleRate: 48000, channels: 2))
        #expect(daemon.waitForStatus { ($0.recording?.segment?.index ?? 0) >= 3 } != nil)
        let _: Recording = try client.call(.stop)
        let files: [RecordingFile] = try client.call(.recordingsList, as: RecordingsListResult.self).recordings
        #expect(files.count >= 3)
        // What recd logged for each segment when it closed it (seconds since 1970 by path).
        let log = try String(contentsOfFile: daemon.recordings + "/.sessions/\(recording.id).jsonl", encoding: .utf8)
        var logged: [String: Double] = [:]
        for line in log.split(separator: "\n") {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            if let path = object?["path"] as? String, let start = object?["startedAt"] as? Double { logged[path] = start }
        }
        var starts: [Double] = []
        for file in files {
            let bext = try #require(try BextChunk(wavPath: file.path), "\(file.file) has a bext chunk")
            #expect(bext.originatorReference == recording.id.filter { $0 != "-" }, "one session")
            let midnight = try #require(UTCTimestamp.date(bext.originationDate)).timeIntervalSince1970
            let start = midnight + Double(bext.timeReference) / 48000
            let expected = try #require(logged[file.path], "\(file.path) in \(logged)")
            #expect(abs(start - expected) < 0.000_5, "\(file.file): bext \(start), logged \(expected)")
            starts.append(start)
        }
        // One second of audio apart, as measured against the wall clock on each boundary.
        #expect(zip(starts, starts.dropFirst()).allSatisfy { abs($1 - $0 - 1) < 0.020 }, "\(starts)")
    }

    @Test func theDeviceClockDriftIsPublishedNearZeroOnADevicePacedByTheSystemClock() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let _: Recording = try daemon.connect().call(.start, StartParams(name: "drift", format: .wav, sampleRate: 48000, channels: 2))
        // The figure needs minima spanning 4 s; on a loaded machine allow far more.
        let status = try #require(daemon.waitForStatus(timeout: 30) { $0.statistics.deviceClockDriftPPM != nil },
                                  "a drift figure is published: \(daemon.log)")
        let drift = try #require(status.statistics.deviceClockDriftPPM)
        // The null sink is timed by the same monotonic clock recd measures with: its true drift
        // is 0. What is left is the estimator's error: minima spread by a few ms over a 4 s
        // baseline; 1000 ppm (4 ms over 4 s) bounds it, while a device at 44.1 kHz that claims
        // 48 kHz would show -81 000 ppm.
        #expect(abs(drift) < 1000, "drift \(drift) ppm")
        let text = try run(Binaries.recctl, ["status"], environment: ["RECD_SOCKET": daemon.socket])
        #expect(text.stdout.contains("device clock ") && text.stdout.contains(" ppm against the system clock"), "\(text.stdout)")
        let _: Recording = try daemon.connect().call(.stop)
    }
}

/// A WAV file's `bext` chunk, found by walking the RIFF chunks and read field by field as EBU
/// Tech 3285 lays it out (little-endian, fixed-width text padded with NULs).
struct BextChunk: CustomStringConvertible {
    var description: String
    var originator: String
    var originatorReference: String
    var originationDate: String
    var originationTime: String
    var timeReference: UInt64
    var version: UInt16
    var codingHistory: String

    /// Nil if the file has no `bext` chunk; throws if it is not a RIFF WAVE file.
    init?(wavPath: String) throws {
        guard let data = FileManager.default.contents(atPath: wavPath) else { throw TestFailure("cannot read \(wavPath)") }
        let bytes = [UInt8](data)
        func text(_ offset: Int, _ count: Int) -> String {
            String(decoding: bytes[offset..<(offset + count)].prefix { $0 != 0 }, as: UTF8.self)
        }
        func little(_ offset: Int, _ count: Int) -> UInt64 {
            (0..<count).reduce(UInt64(0)) { $0 | UInt64(bytes[offset + $1]) << (8 * UInt64($1)) }
        }
        // RF64 (a file over 4 GiB) walks the same way up to its data chunk.
        guard bytes.count >= 12, ["RIFF", "RF64"].contains(text(0, 4)), text(8, 4) == "WAVE" else {
            throw TestFailure("\(wavPath) is not a RIFF or RF64 WAVE file")
        }
        var offset = 12
        while offset + 8 <= bytes.count {
            let identifier = text(offset, 4)
            let size = Int(little(offset + 4, 4))
            let body = offset + 8
            if identifier == "bext" {
                guard size >= 602, body + size <= bytes.count else { throw TestFailure("bext chunk of \(size) bytes") }
                description = text(body, 256)
                originator = text(body + 256, 32)
                originatorReference = text(body + 288, 32)
                originationDate = text(body + 320, 10)
                originationTime = text(body + 330, 8)
                timeReference = little(body + 338, 8)
                version = UInt16(little(body + 346, 2))
                // UMID (64), five loudness values (10), reserved (180), then the coding history.
                codingHistory = text(body + 602, size - 602)
                return
            }
            if identifier == "data" { break }
            offset = body + size + (size & 1)
        }
        return nil
    }
}
