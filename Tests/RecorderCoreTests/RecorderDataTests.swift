import Foundation
import RecdTestSupport
import RecorderCore
import RecorderModel
import Sndfile
import Testing

/// What ends up in the file, through the real libasound `file` device (unpaced, bit-exact).
@Suite("Recorder: data")
struct RecorderDataTests {
    let directory = TemporaryDirectory()

    func recorder(device: String, metering: Bool = true, captureRate: Int? = nil, captureChannels: Int? = nil) -> Recorder {
        Recorder(configuration: RecorderConfiguration(device: device, recordingsDirectory: directory.file("recordings"),
                                                      meteringEnabled: metering, captureSampleRate: captureRate,
                                                      captureChannels: captureChannels))
    }

    func counterInput(seconds: Int, rate: Int = 48000, channels: Int = 2) -> (path: String, samples: [Int16]) {
        let samples = Signal.counter16(frames: seconds * rate, channels: channels)
        let path = directory.file("counter-\(rate)-\(channels).raw")
        Signal.write(samples, to: path)
        return (path, samples)
    }

    func waitForEnd(_ recorder: Recorder) -> RecorderState {
        _ = waitUntil(timeout: 30) { !recorder.state.value.isActive }
        return recorder.state.value
    }

    @Test func recordingForADurationHoldsExactlyThatManyFramesBitExact() throws {
        let input = counterInput(seconds: 3)
        let recorder = recorder(device: TestDevices.file(input.path))
        let started = try recorder.start(name: "exact", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2, bitDepth: 16),
                                         duration: 2)
        #expect(started.frameLimit == 96000)
        guard case .finished(let recording) = waitForEnd(recorder) else {
            Issue.record("ended as \(recorder.state.value)")
            return
        }
        #expect(recording.frames == 96000)
        #expect(recorder.currentTime.value == 2.0)
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.frames == 96000)
        #expect(reader.info.sampleRate == 48000)
        #expect(reader.info.channels == 2)
        let samples = reader.readAllInt16()
        expectSamples(samples, input.samples[0..<192_000])
        #expect(!FileManager.default.fileExists(atPath: recording.partialPath))
    }

    @Test func fractionalDurationsRoundToTheNearestFrame() throws {
        let input = counterInput(seconds: 2, rate: 44100, channels: 1)
        let recorder = recorder(device: TestDevices.file(input.path))
        _ = try recorder.start(name: "fraction", settings: RecordingSettings(format: .wav, sampleRate: 44100, channels: 1),
                               duration: 0.123456)
        guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
        #expect(recording.frames == 5444)  // 0.123456 × 44100 = 5444.41
        let reader = try SoundFileReader(path: recording.path)
        expectSamples(reader.readAllInt16(), input.samples[0..<5444])
    }

    @Test func twentyFourBitRecordingsAreBitExact() throws {
        // 24-bit samples carried in S32 with the low byte zero, as ALSA delivers them.
        let frames = 48000
        let samples = (0..<frames * 2).map { Int32(truncatingIfNeeded: (($0 &* 40_503) % 16_777_216) - 8_388_608) << 8 }
        let path = directory.file("s24.raw")
        Signal.write(samples, to: path)
        let recorder = recorder(device: TestDevices.file(path))
        _ = try recorder.start(name: "deep", settings: RecordingSettings(format: .flac, sampleRate: 48000, channels: 2, bitDepth: 24),
                               duration: 0.5)
        guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
        #expect(recording.deviceFormat.sampleFormat == "int32")
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.frames == 24000)
        expectSamples(reader.readAllInt32(), samples[0..<48000])
    }

    @Test func floatRecordingsAreBitExact() throws {
        let samples = Signal.sine(frequency: 997, rate: 48000, frames: 48000, channels: 2, amplitude: 0.7)
        let path = directory.file("float.raw")
        Signal.write(samples, to: path)
        let recorder = recorder(device: TestDevices.file(path))
        _ = try recorder.start(name: "float", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2, bitDepth: 32),
                               duration: 0.25)
        guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.frames == 12000)
        expectSamples(reader.readAllFloat(), samples[0..<24000])
    }

    @Test(arguments: [
        (AudioFileFormat.wav, 16), (.wav, 24), (.wav, 32), (.flac, 16), (.flac, 24), (.caf, 16), (.caf, 24), (.caf, 32),
    ])
    func everyPCMFormatDecodesWithTheRightLengthRateAndChannels(format: AudioFileFormat, bitDepth: Int) throws {
        // The recorder asks the device for the file's own sample format (S16, S32, FLOAT), and
        // the file device reads our raw file in that format: write the pattern accordingly.
        let pattern = Signal.counter16(frames: 64000, channels: 1)
        let path = directory.file("pattern-\(bitDepth).raw")
        switch bitDepth {
        case 16: Signal.write(pattern, to: path)
        case 24: Signal.write(pattern.map { Int32($0) << 16 }, to: path)
        default: Signal.write(pattern.map { Float($0) / 32768 }, to: path)
        }
        let recorder = recorder(device: TestDevices.file(path))
        _ = try recorder.start(name: "f", settings: RecordingSettings(format: format, sampleRate: 32000, channels: 1, bitDepth: bitDepth),
                               duration: 1.5)
        guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
        #expect(recording.path.hasSuffix("/f." + format.fileExtension))
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.frames == 48000)
        #expect(reader.info.sampleRate == 32000)
        #expect(reader.info.channels == 1)
        if bitDepth == 32 {
            expectSamples(reader.readAllFloat(), pattern[0..<48000].map { Float($0) / 32768 }[...])
        } else {
            expectSamples(reader.readAllInt16(), pattern[0..<48000])
        }
    }

    @Test(arguments: [AudioFileFormat.opus, .vorbis])
    func compressedFormatsDecodeWithTheRightLengthRateAndChannels(format: AudioFileFormat) throws {
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 48000, frames: 48000 * 3, channels: 2, amplitude: 0.5))
        let path = directory.file("sine.raw")
        Signal.write(samples, to: path)
        let recorder = recorder(device: TestDevices.file(path))
        _ = try recorder.start(name: "lossy", settings: RecordingSettings(format: format, sampleRate: 48000, channels: 2), duration: 2)
        guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
        #expect(recording.frames == 96000)
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.sampleRate == 48000)
        #expect(reader.info.channels == 2)
        #expect(abs(Int(reader.info.frames) - 96000) <= 960, "decoded \(reader.info.frames) frames")
        // The decoded signal is the sine: its RMS is amplitude/√2 (-9 dBFS) within codec error.
        let decoded = reader.readAllFloat()
        let middle = decoded[decoded.count / 4..<decoded.count * 3 / 4]
        let rms = (middle.reduce(0) { $0 + Double($1 * $1) } / Double(middle.count)).squareRoot()
        #expect(abs(rms - 0.5 / 2.0.squareRoot()) < 0.02, "rms \(rms)")
    }

    @Test func opusBitRateSetsTheFileSize() throws {
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 48000, frames: 48000 * 6, channels: 1, amplitude: 0.5)
            .enumerated().map { index, value in value + Float((index * 7919) % 200 - 100) / 1000 })
        let path = directory.file("noisy.raw")
        Signal.write(samples, to: path)
        var sizes: [Int: Int] = [:]
        for bitRate in [16000, 64000] {
            let recorder = recorder(device: TestDevices.file(path))
            _ = try recorder.start(name: "rate-\(bitRate)", settings: RecordingSettings(format: .opus, sampleRate: 48000, channels: 1, bitRate: bitRate),
                                   duration: 5)
            guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
            let size = try FileManager.default.attributesOfItem(atPath: recording.path)[.size] as! Int
            sizes[bitRate] = size
            // Within 40% of the target (Opus is VBR) over 5 seconds.
            let expected = Double(bitRate) / 8 * 5
            #expect(abs(Double(size) - expected) / expected < 0.4, "\(bitRate) bit/s gave \(size) bytes")
        }
        #expect(sizes[64000]! > sizes[16000]! * 2)
    }

    @Test func convertedRatesMatchAReferenceWithinTolerance() throws {
        let frequency = 1000.0
        let samples = Signal.sine(frequency: frequency, rate: 48000, frames: 48000 * 2, channels: 2, amplitude: 0.5)
        let path = directory.file("sine48.raw")
        Signal.write(samples, to: path)
        // The file device takes any rate: pin capture at 48 kHz so soxr does the conversion.
        let recorder = recorder(device: TestDevices.file(path), captureRate: 48000)
        _ = try recorder.start(name: "down", settings: RecordingSettings(format: .wav, sampleRate: 16000, channels: 2, bitDepth: 32),
                               duration: 1)
        guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
        #expect(recording.deviceFormat.sampleRate == 48000)
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.frames == 16000)
        #expect(reader.info.sampleRate == 16000)
        let decoded = reader.readAllFloat()
        let reference = Signal.sine(frequency: frequency, rate: 16000, frames: 16000, channels: 2, amplitude: 0.5)
        // soxr compensates its delay: compare sample by sample away from the start-up edge.
        var worst: Float = 0
        for index in 320..<(decoded.count - 320) { worst = max(worst, abs(decoded[index] - reference[index])) }
        #expect(worst < 0.001, "largest difference from the reference: \(worst)")
    }

    @Test func upsamplingAndMonoDownmixMatchTheReference() throws {
        // Left and right carry the same sine at opposite amplitudes plus an offset pattern:
        // the mono mix is their average.
        let left = Signal.sine(frequency: 500, rate: 16000, frames: 32000, channels: 1, amplitude: 0.6)
        let right = Signal.sine(frequency: 500, rate: 16000, frames: 32000, channels: 1, amplitude: 0.2)
        var interleaved = [Float]()
        for index in 0..<32000 { interleaved += [left[index], right[index]] }
        let path = directory.file("sine16.raw")
        Signal.write(interleaved, to: path)
        let recorder = recorder(device: TestDevices.file(path), captureRate: 16000, captureChannels: 2)
        _ = try recorder.start(name: "up", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 1, bitDepth: 32),
                               duration: 1)
        guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.frames == 48000)
        #expect(reader.info.channels == 1)
        let decoded = reader.readAllFloat()
        let reference = Signal.sine(frequency: 500, rate: 48000, frames: 48000, channels: 1, amplitude: 0.4)
        var worst: Float = 0
        for index in 960..<(decoded.count - 960) { worst = max(worst, abs(decoded[index] - reference[index])) }
        #expect(worst < 0.001, "largest difference from the reference: \(worst)")
    }

    @Test func monoCaptureUpmixedToStereoCopiesTheChannel() throws {
        let samples = Signal.sine(frequency: 440, rate: 48000, frames: 48000, channels: 1, amplitude: 0.3)
        let path = directory.file("mono.raw")
        Signal.write(samples, to: path)
        let recorder = recorder(device: TestDevices.file(path), captureChannels: 1)
        _ = try recorder.start(name: "wide", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2, bitDepth: 32),
                               duration: 0.5)
        guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
        #expect(recording.deviceFormat.channels == 1)
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.channels == 2)
        expectSamples(reader.readAllFloat(), samples[0..<24000].flatMap { [$0, $0] }[...])
    }

    @Test func levelsAreMeasuredInDecibelsFullScale() throws {
        // Unpaced capture ends before a 50 ms tick: read the meter through a paced device.
        // Half a second at amplitude 0.5 (peak -6.02 dBFS, RMS -9.03), then 0.25 (-12.04, -15.05)
        // for 2.5 s: on a loaded machine frames arrive in bursts, and the soft part must still
        // span several 50 ms windows of its own before the recording ends.
        // A tone keeps the sink rendering in small blocks: an idle one delivers 2 s at once,
        // and a meter window would then hold both levels.
        let server = try PulseServer()
        try server.tone()
        let loud = Signal.sine(frequency: 1000, rate: 48000, frames: 24000, channels: 2, amplitude: 0.5)
        let soft = Signal.sine(frequency: 1000, rate: 48000, frames: 48000 * 3, channels: 2, amplitude: 0.25)
        let path = directory.file("levels.raw")
        Signal.write(Signal.toInt16(loud + soft), to: path)
        let recorder = recorder(device: TestDevices.pacedFile(path, server: server))
        let seen = Collected<Levels>()
        let token = recorder.levels.subscribe(delivery: .every) { seen.append($0) }
        _ = try recorder.start(name: "levels", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2), duration: 3)
        _ = waitForEnd(recorder)
        func seenLevel(peak: Float, average: Float) -> Bool {
            seen.values.contains { levels in
                levels.channels.count == 2 && levels.channels.allSatisfy { abs($0.peak - peak) < 0.05 && abs($0.average - average) < 0.05 }
            }
        }
        #expect(seenLevel(peak: -6.02, average: -9.03), "\(seen.values)")
        #expect(seenLevel(peak: -12.04, average: -15.05), "\(seen.values)")
        #expect(seen.values.allSatisfy { $0.clipCount == 0 })
        withExtendedLifetime(token) {}
    }

    @Test func fullScaleSamplesAreCountedAsClips() throws {
        let server = try PulseServer()
        let samples = (0..<48000 * 2 * 3).map { $0 % 96 < 48 ? Int16.max : Int16.min }
        let path = directory.file("square.raw")
        Signal.write(samples, to: path)
        let recorder = recorder(device: TestDevices.pacedFile(path, server: server))
        _ = try recorder.start(name: "clip", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2), duration: 0.5)
        _ = waitForEnd(recorder)
        #expect(waitUntil { recorder.levels.value.clipCount > 0 } || recorder.levels.value.clipCount > 0)
        #expect(recorder.levels.value.channels.allSatisfy { $0.peak == 0 || $0.peak == -160 })
    }

    @Test func meteringCanBeSwitchedOff() throws {
        let server = try PulseServer()
        let samples = Signal.toInt16(Signal.sine(frequency: 1000, rate: 48000, frames: 48000 * 2, channels: 2, amplitude: 0.5))
        let path = directory.file("quiet.raw")
        Signal.write(samples, to: path)
        let recorder = recorder(device: TestDevices.pacedFile(path, server: server), metering: false)
        let seen = Collected<Levels>()
        let token = recorder.levels.subscribe(delivery: .every) { seen.append($0) }
        _ = try recorder.start(name: "nometer", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2), duration: 0.5)
        _ = waitForEnd(recorder)
        #expect(seen.values.allSatisfy { $0.channels.allSatisfy { $0 == .silence } })
        withExtendedLifetime(token) {}
    }
}
