import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// .m4a (and .mp3) through the real daemon: AVAudioRecorder's settings over the socket, a
/// kill -9 in the middle of a recording, a full disk. Files are read back by ffprobe and ffmpeg.
@Suite("recd: m4a and mp3")
struct MPEG4EndToEndTests {
    let inputs = TemporaryDirectory()

    @Test func avAudioRecorderSettingsOverTheSocketGiveAnAACLC12kHzMonoFile() throws {
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 12000, frames: 12000 * 4, channels: 1, amplitude: 0.5))
        let input = inputs.file("voice.raw")
        Signal.write(samples, to: input)
        let daemon = try Daemon(device: TestDevices.file(input))
        let client = try daemon.connect()
        // What an app passes AVAudioRecorder: kAudioFormatMPEG4AAC, 12 kHz, mono, .high.
        let reply = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"start","params":{"name":"whistle","format":"aac","sampleRate":12000,"channels":1,"quality":"high","duration":2}}"#)
        #expect(reply["error"] == nil, "\(reply)")
        #expect(waitUntil(timeout: 30) { (try? client.call(.status) as StatusResult)?.state.name == .finished })
        let list: RecordingsListResult = try client.call(.recordingsList)
        let file = try #require(list.recordings.first)
        #expect(file.file == "whistle.m4a")
        #expect(file.format == .aac)
        #expect(file.frames == 24000)
        #expect(file.sampleRate == 12000 && file.channels == 1)
        let stream = try FFmpegTools.probe(file.path)
        #expect(stream.codecName == "aac")
        #expect(stream.profile == "LC")
        #expect(stream.sampleRate == 12000)
        #expect(stream.channels == 1)
        #expect(stream.frames == 24000)
        let boxes = FFmpegTools.topLevelBoxes(file.path)
        #expect(!boxes.contains("moof") && boxes.firstIndex(of: "moov")! < boxes.firstIndex(of: "mdat")!, "\(boxes)")
        // GStreamer's own MP4 demuxer plays it too, to within one AAC block.
        let played = try FFmpegTools.decodeWithGStreamer(file.path).count
        print("GStreamer decodes \(played) of 24000 frames")
        #expect(abs(played - 24000) < 1024, "GStreamer decoded \(played) frames")
    }

    @Test func aKilledDaemonLeavesAnM4AThatTheNextStartRewritesWithMoovFirst() throws {
        let server = try PulseServer()
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 48000, frames: 48000 * 60, channels: 2, amplitude: 0.5))
        let input = inputs.file("tone.raw")
        Signal.write(samples, to: input)
        let daemon = try Daemon(device: TestDevices.pacedFile(input, server: server))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "crash", format: .aac, sampleRate: 48000, channels: 2,
                                                                     bitRate: 128_000))
        #expect(waitUntil(timeout: 30) { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 3.5 })
        let recorded = (try client.call(.status) as StatusResult).currentTime
        daemon.process.signal(SIGKILL)
        _ = daemon.process.wait(timeout: 10)
        // As the crash left it: a fragmented MP4 that ffprobe reads.
        let partialBoxes = FFmpegTools.topLevelBoxes(started.partialPath)
        #expect(partialBoxes.contains("moof"), "\(partialBoxes)")
        _ = try FFmpegTools.probe(started.partialPath)

        let next = try Daemon(device: "null", recordings: daemon.recordings)
        let list: RecordingsListResult = try next.connect().call(.recordingsList)
        #expect(list.recordings.map(\.file) == ["crash.m4a"])
        #expect(next.log.contains("recovered unfinished recording"))
        let path = daemon.recordings + "/crash.m4a"
        let boxes = FFmpegTools.topLevelBoxes(path)
        #expect(!boxes.contains("moof"), "\(boxes)")
        #expect(boxes.firstIndex(of: "moov")! < boxes.firstIndex(of: "mdat")!, "\(boxes)")
        let stream = try FFmpegTools.probe(path)
        #expect(stream.sampleRate == 48000 && stream.channels == 2)
        // The rewrite keeps the tags, the first frame's time among them.
        #expect(list.recordings.first?.startedAt != nil, "the recovered file still says when it started")
        let kept = Double(try #require(stream.frames)) / 48000
        let decoded = Double(try FFmpegTools.decodeInt16(path).count / 2) / 48000
        print("kill -9 after \(recorded) s of AAC: the recovered file holds \(kept) s (decoded \(decoded) s), lost \(recorded - kept) s")
        // What was written is in the file but for the fragment under way (at most 1 s of audio
        // and one packet) and what the encoder holds (its delay and the block being filled,
        // 3 × 1024 frames): at most 1.09 s, whatever the load.
        #expect(kept > recorded - 1.15, "kept \(kept) s of \(recorded) s")
        #expect(kept <= recorded + 0.5)
        #expect(abs(decoded - kept) < 0.03)
    }

    @Test func aKilledDaemonLeavesAPlayableMP3() throws {
        let server = try PulseServer()
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 48000, frames: 48000 * 60, channels: 2, amplitude: 0.5))
        let input = inputs.file("tone.raw")
        Signal.write(samples, to: input)
        let daemon = try Daemon(device: TestDevices.pacedFile(input, server: server))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "crash", format: .mp3, sampleRate: 48000, channels: 2))
        #expect(waitUntil(timeout: 30) { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 2.5 })
        let recorded = (try client.call(.status) as StatusResult).currentTime
        daemon.process.signal(SIGKILL)
        _ = daemon.process.wait(timeout: 10)
        let next = try Daemon(device: "null", recordings: daemon.recordings)
        let list: RecordingsListResult = try next.connect().call(.recordingsList)
        #expect(list.recordings.map(\.file) == ["crash.mp3"])
        let path = daemon.recordings + "/crash.mp3"
        let stream = try FFmpegTools.probe(path)
        #expect(stream.codecName == "mp3" && stream.sampleRate == 48000 && stream.channels == 2)
        let decoded = Double(try FFmpegTools.decodeInt16(path).count / 2) / 48000
        print("kill -9 after \(recorded) s of MP3: ffmpeg decodes \(decoded) s")
        #expect(decoded > recorded - 1.1, "decoded \(decoded) s of \(recorded) s")
    }

    @Test func aFullDiskEndsWithFailedToSaveAndAPlayableM4A() throws {
        // A real ENOSPC: recordings go to a 256 KiB tmpfs; AAC at 512 kbit/s fills it in about 4 s.
        let mountPoint = TemporaryDirectory()
        let mounted = try run("/bin/mount", ["-t", "tmpfs", "-o", "size=256k", "tmpfs", mountPoint.path])
        try #require(mounted.status == 0, "mount: \(mounted.stderr)")
        defer { _ = try? run("/bin/umount", ["-l", mountPoint.path]) }
        // Noise: the encoder spends the whole bit rate on it.
        var state: UInt32 = 12345
        let noise = (0..<48000 * 2 * 20).map { _ -> Int16 in
            state = state &* 1_664_525 &+ 1_013_904_223
            return Int16(truncatingIfNeeded: state >> 16) / 2
        }
        let input = inputs.file("noise.raw")
        Signal.write(noise, to: input)
        // The space guard off: this is ENOSPC itself (StorageTests has the guard).
        let daemon = try Daemon(device: TestDevices.file(input), config: "[storage]\nminimum_free = 0\nwarning_free = 0\n",
                                recordings: mountPoint.file("recordings"))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "full", format: .aac, sampleRate: 48000, channels: 2,
                                                               bitRate: 512_000, duration: 18))
        #expect(waitUntil(timeout: 30) { (try? client.call(.status) as StatusResult)?.state.name == .failed })
        let status: StatusResult = try client.call(.status)
        #expect(status.error?.code == .failedToSave)
        #expect(status.error?.message.contains("No space left on device") == true, "\(status.error?.message ?? "")")
        let recording = try #require(status.recording)
        #expect(!FileManager.default.fileExists(atPath: recording.partialPath))
        // What fit is playable: ffmpeg decodes all of it but the fragment under way.
        let stream = try FFmpegTools.probe(recording.path)
        #expect(stream.codecName == "aac" && stream.sampleRate == 48000 && stream.channels == 2)
        let decoded = try FFmpegTools.decodeInt16(recording.path).count / 2
        print("ENOSPC after \(recording.frames) frames: ffmpeg decodes \(decoded) frames; boxes \(FFmpegTools.topLevelBoxes(recording.path))")
        #expect(recording.frames > 96000)
        #expect(decoded > Int(recording.frames) - 48000 * 11 / 10, "decoded \(decoded) of \(recording.frames)")
        // And recd goes on.
        let version: VersionResult = try client.call(.version)
        #expect(version.version == RecdVersion.current)
    }
}
