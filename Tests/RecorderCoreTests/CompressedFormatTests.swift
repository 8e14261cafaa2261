import Foundation
import RecdTestSupport
import RecorderCore
import RecorderModel
import Testing

/// AAC and Apple Lossless in .m4a, and MP3, through the real libasound `file` device, read
/// back by FFmpeg's command-line tools (an independent decoder).
@Suite("Recorder: m4a and mp3")
struct CompressedFormatTests {
    let directory = TemporaryDirectory()

    func recorder(device: String) -> Recorder {
        Recorder(configuration: RecorderConfiguration(device: device, recordingsDirectory: directory.file("recordings")))
    }

    /// Records `duration` seconds and returns the finished recording.
    func record(_ settings: RecordingSettings, from input: String, duration: Double, name: String = "take") throws -> Recording {
        let recorder = recorder(device: TestDevices.file(input))
        _ = try recorder.start(name: name, settings: settings, duration: duration)
        _ = waitUntil(timeout: 60) { !recorder.state.value.isActive }
        guard case .finished(let recording) = recorder.state.value else {
            throw TestFailure("ended as \(recorder.state.value)")
        }
        return recording
    }

    func input(_ samples: [Int16], _ name: String) -> String {
        let path = directory.file(name)
        Signal.write(samples, to: path)
        return path
    }

    @Test(arguments: [
        (AudioFileFormat.aac, 48000, 2), (.aac, 44100, 1), (.aac, 12000, 1), (.aac, 96000, 6), (.aac, 8000, 8),
        (.alac, 48000, 2), (.alac, 22050, 1), (.alac, 96000, 4),
        (.mp3, 44100, 2), (.mp3, 16000, 1), (.mp3, 48000, 1),
    ])
    func everyNewFormatReadsBackWithTheRightRateChannelsAndLength(format: AudioFileFormat, rate: Int, channels: Int) throws {
        let frames = rate * 3 / 2
        let samples = Signal.toInt16(Signal.chirp(from: 100, to: Double(rate) / 4, rate: rate, frames: rate * 2,
                                                  channels: channels, amplitude: 0.5))
        let recording = try record(RecordingSettings(format: format, sampleRate: rate, channels: channels),
                                   from: input(samples, "chirp-\(rate)-\(channels).raw"), duration: 1.5)
        #expect(recording.frames == Int64(frames))
        #expect(recording.path.hasSuffix("/take." + format.fileExtension))
        let stream = try FFmpegTools.probe(recording.path)
        #expect(stream.codecName == ["aac": "aac", "alac": "alac", "mp3": "mp3"][format.rawValue])
        #expect(stream.sampleRate == rate)
        #expect(stream.channels == channels)
        let decodedFrames = try FFmpegTools.decodeInt16(recording.path).count / channels
        print("\(format.rawValue) \(rate) Hz \(channels) ch: \(frames) frames recorded, declared \(stream.frames.map(String.init) ?? "?"), ffmpeg decodes \(decodedFrames) (\(decodedFrames - frames))")
        switch format {
        case .alac:
            #expect(stream.frames == Int64(frames))
            #expect(decodedFrames == frames)
        case .aac:
            // Declared exactly (edit list); ffmpeg 5.1 skips the encoder delay but still
            // decodes the last block's padding: at most one block too many.
            #expect(stream.frames == Int64(frames), "declared \(String(describing: stream.frames))")
            #expect((frames...(frames + 1023)).contains(decodedFrames), "decoded \(decodedFrames) of \(frames)")
        default:
            // MP3: LAME's gapless header, within one 1152-frame granule pair.
            #expect(abs(decodedFrames - frames) <= 1152, "decoded \(decodedFrames) of \(frames)")
        }
        if format == .aac || format == .alac {
            let boxes = FFmpegTools.topLevelBoxes(recording.path)
            #expect(!boxes.contains("moof"), "\(boxes)")
            #expect(boxes.firstIndex(of: "moov")! < boxes.firstIndex(of: "mdat")!, "\(boxes)")
        }
    }

    /// Every format keeps a tone: a 440 Hz sine at -12 dBFS read back by ffmpeg, on each
    /// channel, at its level (within 0.5 dB) with what is not the tone at least 30 dB below it.
    /// (libsndfile 1.2.0's MP3 encoder halved 16-bit stereo and buried it in a residue 10-16 dB
    /// down; the lengths and headers the test above checks were right all along.)
    @Test(arguments: AudioFileFormat.allCases.flatMap { format in [(format, 48000, 2), (format, 44100, 2), (format, 48000, 1)] }
        .filter { $0.0 != .opus || $0.1 == 48000 })
    func everyFormatKeepsATone(format: AudioFileFormat, rate: Int, channels: Int) throws {
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: rate, frames: rate * 2, channels: channels, amplitude: 0.25))
        let recording = try record(RecordingSettings(format: format, sampleRate: rate, channels: channels),
                                   from: input(samples, "sine-\(format.rawValue)-\(rate)-\(channels).raw"), duration: 1.5)
        let decoded = try FFmpegTools.decodeFloat(recording.path)
        let frames = decoded.count / channels
        try #require(frames > rate, "\(frames) frames decoded")
        for channel in 0..<channels {
            // Least squares over the middle second: a sin + b cos at 440 Hz (the phase the
            // codec's delay gave it), and what is left.
            let range = (frames / 2 - rate / 2)..<(frames / 2 + rate / 2)
            var ss = 0.0, cc = 0.0, sc = 0.0, ys = 0.0, yc = 0.0
            for frame in range {
                let phase = 2 * Double.pi * 440 * Double(frame) / Double(rate)
                let (s, c, y) = (sin(phase), cos(phase), Double(decoded[frame * channels + channel]))
                ss += s * s; cc += c * c; sc += s * c; ys += y * s; yc += y * c
            }
            let determinant = ss * cc - sc * sc
            let a = (ys * cc - yc * sc) / determinant, b = (yc * ss - ys * sc) / determinant
            var residue = 0.0
            for frame in range {
                let phase = 2 * Double.pi * 440 * Double(frame) / Double(rate)
                let left = Double(decoded[frame * channels + channel]) - a * sin(phase) - b * cos(phase)
                residue += left * left
            }
            let amplitude = (a * a + b * b).squareRoot()
            let level = 20 * log10(amplitude / 0.25)
            let below = 20 * log10(amplitude / 2.squareRoot() / (residue / Double(range.count)).squareRoot())
            #expect(abs(level) < 0.5, "\(format) \(rate) Hz \(channels) ch, channel \(channel): the tone at \(level) dB of what went in")
            #expect(below > 30, "\(format) \(rate) Hz \(channels) ch, channel \(channel): the residue only \(below) dB below the tone")
        }
    }

    @Test func appleLosslessIsBitExactAt16Bits() throws {
        let samples = Signal.counter16(frames: 48000 * 3, channels: 2)
        let recording = try record(RecordingSettings(format: .alac, sampleRate: 48000, channels: 2, bitDepth: 16),
                                   from: input(samples, "counter.raw"), duration: 2.5)
        #expect(recording.bitDepth == 16)
        let decoded = try FFmpegTools.decodeInt16(recording.path)
        expectSamples(decoded, samples[0..<240_000])
        // The library tells ALAC from AAC by the codec inside the .m4a.
        let listed = RecordingLibrary(directory: directory.file("recordings")).list()
        #expect(listed.map(\.file) == ["take.m4a"])
        #expect(listed.first?.format == .alac)
        #expect(listed.first?.info.frames == 120_000)
    }

    @Test func appleLosslessIsBitExactAt24Bits() throws {
        // 24-bit samples carried in S32 with the low byte zero, as ALSA delivers them.
        let samples = (0..<48000 * 2 * 2).map { Int32(truncatingIfNeeded: (($0 &* 40_503) % 16_777_216) - 8_388_608) << 8 }
        let path = directory.file("s24.raw")
        Signal.write(samples, to: path)
        let recording = try record(RecordingSettings(format: .alac, sampleRate: 48000, channels: 2, bitDepth: 24),
                                   from: path, duration: 1.5)
        #expect(recording.deviceFormat.sampleFormat == "int32")
        let decoded = try FFmpegTools.decodeInt32(recording.path)
        expectSamples(decoded, samples[0..<144_000])
    }

    @Test func convertedSamplesReachAppleLosslessThroughTheFloatPath() throws {
        // The device pinned at 48 kHz: soxr converts to 16 kHz and hands the writer floats.
        // 24-bit ALAC: the device is asked for S32 (24-bit data in the top bits).
        let samples = Signal.sine(frequency: 1000, rate: 48000, frames: 48000 * 2, channels: 2, amplitude: 0.5)
            .map { Int32(($0 * 8_388_607).rounded()) << 8 }
        let path = directory.file("sine48.raw")
        Signal.write(samples, to: path)
        let recorder = Recorder(configuration: RecorderConfiguration(device: TestDevices.file(path),
                                                                     recordingsDirectory: directory.file("recordings"),
                                                                     captureSampleRate: 48000))
        _ = try recorder.start(name: "down", settings: RecordingSettings(format: .alac, sampleRate: 16000, channels: 2, bitDepth: 24),
                               duration: 1)
        _ = waitUntil(timeout: 30) { !recorder.state.value.isActive }
        guard case .finished(let recording) = recorder.state.value else { Issue.record("\(recorder.state.value)"); return }
        #expect(recording.deviceFormat.sampleRate == 48000)
        let decoded = try FFmpegTools.decodeFloat(recording.path)
        #expect(decoded.count == 32000)
        let reference = Signal.sine(frequency: 1000, rate: 16000, frames: 16000, channels: 2, amplitude: 0.5)
        var worst: Float = 0
        for index in 320..<(decoded.count - 320) { worst = max(worst, abs(decoded[index] - reference[index])) }
        #expect(worst < 0.001, "largest difference from the reference: \(worst)")
    }

    @Test func aacAt192kbpsDecodesToTheInputChirpAbove20dBSNR() throws {
        let rate = 48000
        let chirp = Signal.chirp(from: 50, to: 15000, rate: rate, frames: rate * 5, channels: 2, amplitude: 0.5)
        let reference = Signal.toInt16(chirp)
        let recording = try record(RecordingSettings(format: .aac, sampleRate: rate, channels: 2, bitRate: 192_000),
                                   from: input(reference, "chirp.raw"), duration: 4)
        let stream = try FFmpegTools.probe(recording.path)
        #expect(stream.profile == "LC")
        let decoded = try FFmpegTools.decodeInt16(recording.path)
        // Align: the lag (in frames) with the least error over the first second.
        func error(lag: Int, range: Range<Int>) -> (signal: Double, noise: Double) {
            Signal.difference(decoded, from: reference, shiftedBy: lag * 2, over: range)
        }
        let noise = (0...2048).map { error(lag: $0, range: 0..<96_000).noise }
        let lag = noise.indices.min { noise[$0] < noise[$1] }!
        let measured = error(lag: lag, range: 0..<(rate * 2 * 4 - 2 * 2048 - 2 * lag))
        let snr = 10 * log10(measured.signal / measured.noise)
        print("AAC 48 kHz stereo 192 kbit/s on a 50 Hz–15 kHz chirp: lag \(lag) frames, SNR \(String(format: "%.1f", snr)) dB")
        #expect(lag == 0, "ffmpeg honours the edit list: no encoder delay left")
        #expect(snr > 20, "SNR \(snr) dB")
    }

    @Test func avAudioRecorderHighQualityVoiceSettingsGiveAACLC12kHzMono() throws {
        // AVAudioRecorder: kAudioFormatMPEG4AAC, 12000 Hz, 1 channel, AVAudioQuality.high.
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 12000, frames: 12000 * 4, channels: 1, amplitude: 0.5))
        let recording = try record(RecordingSettings(format: .aac, sampleRate: 12000, channels: 1, quality: .high),
                                   from: input(samples, "voice.raw"), duration: 3, name: "whistle")
        #expect(recording.path.hasSuffix("/whistle.m4a"))
        let stream = try FFmpegTools.probe(recording.path)
        #expect(stream.codecName == "aac")
        #expect(stream.profile == "LC")
        #expect(stream.sampleRate == 12000)
        #expect(stream.channels == 1)
        #expect(stream.frames == 36000)
        // The quality table's `high`: 2 bits per sample, 24 kbit/s (an average: AAC is VBR-ish).
        #expect(stream.bitRate.map { (12_000...36_000).contains($0) } == true, "\(String(describing: stream.bitRate)) bit/s")
    }

    @Test func pausedAACRecordingsHoldExactlyWhatWasWrittenWithoutAGap() throws {
        let server = try PulseServer()
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 48000, frames: 48000 * 20, channels: 2, amplitude: 0.5))
        let recorder = recorder(device: TestDevices.pacedFile(input(samples, "paced.raw"), server: server))
        _ = try recorder.start(name: "paused", settings: RecordingSettings(format: .aac, sampleRate: 48000, channels: 2))
        #expect(waitUntil(timeout: 20) { recorder.currentTime.value > 0.5 })
        try recorder.pause()
        let atPause = recorder.currentTime.value
        try recorder.resume()
        #expect(waitUntil(timeout: 20) { recorder.currentTime.value > atPause + 0.5 })
        let recording = try recorder.stop()
        let stream = try FFmpegTools.probe(recording.path)
        #expect(stream.frames == recording.frames)
        #expect(FFmpegTools.topLevelBoxes(recording.path).contains("moof") == false)
    }

    @Test(arguments: [AudioFileFormat.aac, .alac])
    func aRecordingStoppedBeforeItStartedIsAnEmptyFileTheLibraryLists(format: AudioFileFormat) throws {
        let recorder = recorder(device: TestDevices.file(input(Signal.counter16(frames: 4800, channels: 2), "short.raw")))
        // Prepared (device open, file created, as AVAudioRecorder's prepareToRecord), never recorded.
        let prepared = try recorder.prepare(name: "never", settings: RecordingSettings(format: format, sampleRate: 48000, channels: 2))
        let stopped = try recorder.stop()
        #expect(stopped.frames == 0)
        #expect(FileManager.default.fileExists(atPath: prepared.path))
        let listed = RecordingLibrary(directory: directory.file("recordings")).list()
        #expect(listed.map(\.file) == ["never.m4a"])
        #expect(listed.first?.format == format)
        #expect(listed.first?.info.frames == 0)
    }

    @Test func aCancelledAACRecordingLeavesNothing() throws {
        let server = try PulseServer()
        let recorder = recorder(device: TestDevices.paced(server))
        _ = try recorder.start(name: "gone", settings: RecordingSettings(format: .aac, sampleRate: 48000, channels: 2))
        #expect(waitUntil(timeout: 20) { recorder.currentTime.value >= 1.2 })
        try recorder.cancel()
        #expect(recorder.state.value.name == .idle)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("recordings")).filter { !$0.hasPrefix(".recd") } == [])
    }

    @Test func withoutWaitingADeviceThatDisappearsMidAACEndsWithDeviceLostAndARegularM4A() throws {
        let server = try PulseServer()
        let recorder = Recorder(configuration: RecorderConfiguration(device: TestDevices.paced(server),
                                                                     recordingsDirectory: directory.file("recordings"),
                                                                     waitForDevice: false))
        let recording = try recorder.start(name: "lost", settings: RecordingSettings(format: .aac, sampleRate: 48000, channels: 2))
        #expect(waitUntil(timeout: 20) { recorder.currentTime.value >= 1.5 })
        server.kill()
        #expect(waitUntil(timeout: 20) { recorder.state.value.name == .failed })
        guard case .failed(let ended?, let error) = recorder.state.value else {
            Issue.record("state \(recorder.state.value)")
            return
        }
        #expect(error.code == .deviceLost)
        #expect(!FileManager.default.fileExists(atPath: recording.partialPath))
        let stream = try FFmpegTools.probe(ended.path)
        #expect(stream.codecName == "aac")
        #expect(stream.frames == ended.frames)
        let boxes = FFmpegTools.topLevelBoxes(ended.path)
        #expect(!boxes.contains("moof") && boxes.firstIndex(of: "moov")! < boxes.firstIndex(of: "mdat")!, "\(boxes)")
    }

    @Test(arguments: [
        (RecordingSettings(format: .aac, sampleRate: 7350), "aac records at 8000, 11025"),
        (RecordingSettings(format: .aac, sampleRate: 12000, channels: 1, bitRate: 96_000), "within 8000...72000"),
        (RecordingSettings(format: .alac, bitDepth: 32), "alac takes a bitDepth of 16, 24"),
        (RecordingSettings(format: .mp3, channels: 6), "mp3 holds 1 or 2 channels"),
        (RecordingSettings(format: .mp3, bitRate: 128_000), "bitRate applies to opus and aac only"),
    ])
    func settingsTheCodecsCannotTakeAreInvalid(settings: RecordingSettings, message: String) {
        #expect {
            try settings.validate()
        } throws: { error in
            guard let error = error as? RecorderError else { return false }
            return error.code == .invalidSettings && error.message.contains(message)
        }
    }
}
