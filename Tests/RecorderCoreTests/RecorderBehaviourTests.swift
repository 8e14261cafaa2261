import Foundation
import RecdTestSupport
@testable import RecorderCore
import ALSA
import Glibc
import RecorderModel
import Sndfile
import Testing

/// The recorder's operations, time and failures, on real-time devices (PulseAudio null sink
/// through ALSA's pulse plugin) and the `file` device.
@Suite("Recorder: behaviour")
struct RecorderBehaviourTests {
    let directory = TemporaryDirectory()

    func recorder(device: String, directory path: String? = nil, waitForDevice: Bool = true) -> Recorder {
        Recorder(configuration: RecorderConfiguration(device: device, recordingsDirectory: path ?? directory.file("recordings"),
                                                      waitForDevice: waitForDevice))
    }

    func counterFile(seconds: Int) -> (path: String, samples: [Int16]) {
        let samples = Signal.counter16(frames: seconds * 48000, channels: 2)
        let path = directory.file("counter.raw")
        Signal.write(samples, to: path)
        return (path, samples)
    }

    @Test func pauseAndResumeKeepExactlyTheFramesCapturedWhileRecording() throws {
        let server = try PulseServer()
        let input = counterFile(seconds: 10)
        let recorder = recorder(device: TestDevices.pacedFile(input.path, server: server))
        let wav = RecordingSettings(format: .wav, sampleRate: 48000, channels: 2, bitDepth: 16)
        _ = try recorder.start(name: "paused", settings: wav)
        #expect(waitUntil { recorder.currentTime.value >= 0.4 })
        try recorder.pause()
        #expect(recorder.state.value.name == .paused)
        let atPause = recorder.currentTime.value
        Thread.sleep(forTimeInterval: 0.5)
        #expect(recorder.currentTime.value == atPause, "time holds during a pause")
        try recorder.resume()
        #expect(recorder.state.value.name == .recording)
        #expect(waitUntil { recorder.currentTime.value >= atPause + 0.4 })
        let finished = try recorder.stop()
        #expect(recorder.currentTime.value == finished.duration)
        let reader = try SoundFileReader(path: finished.path)
        #expect(reader.info.frames == finished.frames)
        // The file device reads our pattern only while capture runs, so the file must be the
        // pattern's unbroken prefix: no gap, no repeat, across the pause.
        let samples = reader.readAllInt16()
        expectSamples(samples, input.samples[0..<samples.count])
        // And nothing of the paused half second is in it.
        #expect(finished.duration < Date().timeIntervalSince(finished.startedAt!) - 0.3)
    }

    @Test func currentTimeAdvancesWhileRecordingAndEqualsTheFileDurationAtStop() throws {
        let server = try PulseServer()
        // A live signal keeps the sink rendering in small blocks (idle, it renders 2 s at once).
        try server.tone()
        let recorder = recorder(device: TestDevices.paced(server))
        let times = Collected<Double>()
        let token = recorder.currentTime.subscribe(delivery: .every) { times.append($0) }
        let started = Date()
        _ = try recorder.start(name: "timed", settings: RecordingSettings(format: .flac, sampleRate: 48000, channels: 2))
        #expect(waitUntil { recorder.currentTime.value >= 1.0 })
        let wall = Date().timeIntervalSince(started)
        let finished = try recorder.stop()
        // Real time: one second of audio took about one second.
        #expect(wall > 0.8)
        let ticks = times.values.filter { $0 > 0 }
        #expect(ticks.count >= 5, "published \(ticks.count) times")
        #expect(ticks == ticks.sorted(), "never goes backwards")
        #expect(recorder.currentTime.value == finished.duration)
        let reader = try SoundFileReader(path: finished.path)
        #expect(Double(reader.info.frames) / Double(reader.info.sampleRate) == finished.duration)
        withExtendedLifetime(token) {}
    }

    @Test func stopFlushesTheConverterSoNoTailIsLost() throws {
        let server = try PulseServer()
        let configuration = RecorderConfiguration(device: TestDevices.paced(server), recordingsDirectory: directory.file("r"),
                                                  captureSampleRate: 48000)
        let recorder = Recorder(configuration: configuration)
        _ = try recorder.start(name: "tail", settings: RecordingSettings(format: .wav, sampleRate: 16000, channels: 1))
        #expect(waitUntil { recorder.currentTime.value >= 0.5 })
        let finished = try recorder.stop()
        let captured = recorder.statistics.value.framesCaptured
        #expect(captured > 0)
        // Every captured frame made it through the resampler: 48 kHz in, a third as many out.
        #expect(abs(finished.frames - (captured + 1) / 3) <= 1, "\(captured) captured, \(finished.frames) written")
    }

    @Test func statesArePublishedInOrderWithTheirRecording() throws {
        let input = counterFile(seconds: 3)
        let recorder = recorder(device: TestDevices.file(input.path))
        let states = Collected<RecorderState>()
        let token = recorder.state.subscribe(delivery: .every) { states.append($0) }
        let recording = try recorder.start(name: "states", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2),
                                           duration: 0.5)
        #expect(waitUntil { states.values.last?.name == .finished })
        #expect(states.values.map(\.name) == [.idle, .preparing, .recording, .finished])
        #expect(states.values.dropFirst().allSatisfy { $0.recording?.id == recording.id })
        #expect(recorder.recording.value?.frames == 24000)
        withExtendedLifetime(token) {}
    }

    @Test func recordAtStartsAtTheRequestedWallClockTime() throws {
        let input = counterFile(seconds: 3)
        let recorder = recorder(device: TestDevices.file(input.path))
        let due = Date().addingTimeInterval(0.6)
        _ = try recorder.prepare(name: "later", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2))
        let scheduled = try recorder.record(forDuration: 0.25, at: due)
        #expect(scheduled.scheduledAt == due)
        #expect(recorder.state.value.name == .preparing)
        #expect(waitUntil { recorder.state.value.name == .finished })
        let started = try #require(recorder.recording.value?.startedAt)
        #expect(started >= due)
        #expect(started.timeIntervalSince(due) < 0.5)
        #expect(recorder.recording.value?.frames == 12000)
    }

    @Test func cancelDeletesTheFile() throws {
        let server = try PulseServer()
        let recorder = recorder(device: TestDevices.paced(server))
        let recording = try recorder.start(name: "gone", settings: RecordingSettings(format: .wav))
        #expect(FileManager.default.fileExists(atPath: recording.partialPath))
        #expect(waitUntil { recorder.currentTime.value > 0.1 })
        try recorder.cancel()
        #expect(recorder.state.value == .idle)
        #expect(!FileManager.default.fileExists(atPath: recording.partialPath))
        #expect(!FileManager.default.fileExists(atPath: recording.path))
    }

    @Test func whileRecordingTheFileIsPartAndStopRenamesIt() throws {
        let server = try PulseServer()
        let recorder = recorder(device: TestDevices.paced(server))
        let recording = try recorder.start(name: "meeting", settings: RecordingSettings(format: .wav))
        #expect(recording.partialPath.hasSuffix("/meeting.wav.part"))
        // Synced every second: the partial file is already a playable WAV, with a second of audio
        // as soon as a sync came after the first second (a deadline, not a fixed wait: on a
        // loaded machine the sync at 1.0 s found 47040 frames written, the one after more).
        var frames: Int64 = 0
        #expect(waitUntil(timeout: 30) {
            frames = (try? SoundFileReader(path: recording.partialPath))?.info.frames ?? 0
            return frames >= 48000
        }, "the partial file holds \(frames) frames")
        #expect(!FileManager.default.fileExists(atPath: recording.path))
        let finished = try recorder.stop()
        #expect(FileManager.default.fileExists(atPath: finished.path))
        #expect(!FileManager.default.fileExists(atPath: recording.partialPath))
    }

    @Test func operationsThatMakeNoSenseAreInvalidStateErrors() throws {
        let input = counterFile(seconds: 1)
        let recorder = recorder(device: TestDevices.file(input.path))
        for (name, operation) in [("pause", { try recorder.pause() }), ("resume", { try recorder.resume() }),
                                  ("stop", { _ = try recorder.stop() }), ("cancel", { try recorder.cancel() })] as [(String, () throws -> Void)] {
            let error = #expect(throws: RecorderError.self) { try operation() }
            #expect(error?.code == .invalidState, "\(name)")
            #expect(error?.message == "nothing is recording")
        }
        _ = try recorder.prepare(name: "p", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2))
        let twice = #expect(throws: RecorderError.self) { try recorder.prepare(name: "q") }
        #expect(twice?.code == .invalidState)
        #expect(throws: RecorderError.self) { try recorder.resume() }
        try recorder.cancel()
        #expect(recorder.state.value == .idle)
    }

    @Test(arguments: [
        (RecordingSettings(format: .opus, sampleRate: 44100), "opus records at"),
        (RecordingSettings(format: .flac, bitDepth: 32), "flac takes a bitDepth of 16, 24"),
        (RecordingSettings(format: .wav, bitRate: 128_000), "bitRate applies to opus and aac only"),
        (RecordingSettings(format: .vorbis, bitDepth: 16), "has no bit depth"),
        (RecordingSettings(format: .wav, channels: 0), "channels 0"),
        (RecordingSettings(format: .opus, channels: 1, bitRate: 500_000), "must be within 6000...256000"),
    ])
    func invalidSettingsAreRefusedWithTheReason(settings: RecordingSettings, reason: String) throws {
        let recorder = recorder(device: "null")
        let error = #expect(throws: RecorderError.self) { try recorder.start(name: "x", settings: settings) }
        #expect(error?.code == .invalidSettings)
        #expect(error?.message.contains(reason) == true, "\(error?.message ?? "")")
        #expect(recorder.state.value == .idle)
    }

    @Test(arguments: ["../escape", "a/b", ".hidden", "", "nul\u{0}byte", "line\nbreak", "x.wav.part"])
    func namesThatWouldLeaveTheDirectoryAreRefused(name: String) throws {
        let recorder = recorder(device: "null")
        let error = #expect(throws: RecorderError.self) { try recorder.start(name: name, settings: nil) }
        #expect(error?.code == .invalidSettings)
    }

    @Test func aNameAlreadyTakenIsRefused() throws {
        let input = counterFile(seconds: 2)
        let recorder = recorder(device: TestDevices.file(input.path))
        _ = try recorder.start(name: "same", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2), duration: 0.1)
        #expect(waitUntil { recorder.state.value.name == .finished })
        let error = #expect(throws: RecorderError.self) { try recorder.start(name: "same", settings: RecordingSettings(format: .wav)) }
        #expect(error?.code == .invalidSettings)
        #expect(error?.message.contains("already exists") == true)
    }

    // MARK: Failures

    @Test func withoutWaitingAMissingDeviceIsDeviceNotFoundNamingIt() throws {
        let recorder = recorder(device: "no_such_pcm_anywhere", waitForDevice: false)
        let error = #expect(throws: RecorderError.self) { try recorder.start(name: "x", settings: nil) }
        #expect(error?.code == .deviceNotFound)
        #expect(error?.message.contains("'no_such_pcm_anywhere'") == true)
        #expect(error?.message.contains("No such file or directory") == true, "\(error?.message ?? "")")
        #expect(recorder.state.value.name == .failed)
        #expect(recorder.error.value?.code == .deviceNotFound)
        #expect((try? FileManager.default.contentsOfDirectory(atPath: directory.file("recordings")))?.isEmpty ?? true)
    }

    @Test func withoutWaitingADeviceWhoseSourceIsMissingIsDeviceNotFound() throws {
        let recorder = recorder(device: TestDevices.file(directory.file("absent.raw")), waitForDevice: false)
        let error = #expect(throws: RecorderError.self) { try recorder.start(name: "x", settings: nil) }
        #expect(error?.code == .deviceNotFound)
    }

    @Test func anUnwritableDirectoryIsFailedToBeginNamingIt() throws {
        let input = counterFile(seconds: 1)
        // A regular file where the directory should be: no user, root included, can write there.
        let blocker = directory.file("blocker")
        _ = FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8))
        let recorder = recorder(device: TestDevices.file(input.path), directory: blocker + "/recordings")
        let error = #expect(throws: RecorderError.self) { try recorder.start(name: "x", settings: nil) }
        #expect(error?.code == .failedToBegin)
        #expect(error?.message.contains(blocker) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("Not a directory") == true, "\(error?.message ?? "")")
        #expect(recorder.state.value.name == .failed)
    }

    @Test func resumingWhenTheDeviceIsGoneIsFailedToResumeAndKeepsTheFile() throws {
        let server = try PulseServer()
        let recorder = recorder(device: TestDevices.paced(server))
        let recording = try recorder.start(name: "gap", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2))
        #expect(waitUntil { recorder.currentTime.value >= 0.3 })
        try recorder.pause()
        server.kill()
        let error = #expect(throws: RecorderError.self) { try recorder.resume() }
        #expect(error?.code == .failedToResume, "\(String(describing: error))")
        #expect(error?.message.contains(recording.device) == true)
        #expect(recorder.state.value.name == .failed)
        #expect(recorder.error.value?.code == .failedToResume)
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.frames == recorder.recording.value?.frames)
        #expect(reader.info.frames >= 14400)
    }

    @Test func openErrorsMapToTheirCodes() {
        // Through the same mapping snd_pcm_open's results take (EBUSY cannot be produced
        // without a hardware device another process holds).
        let cases: [(Int32, RecorderError.Code)] = [(EACCES, .noPermission), (EPERM, .noPermission), (ENOENT, .deviceNotFound),
                                                    (ENODEV, .deviceNotFound), (EBUSY, .deviceBusy), (EINVAL, .failedToBegin)]
        for (errnoValue, code) in cases {
            let error = RecorderError.opening(ALSAError(code: -errnoValue, function: "snd_pcm_open", device: "hw:7,0"))
            #expect(error.code == code)
            #expect(error.message.contains("'hw:7,0'"))
            #expect(error.message.contains(String(cString: strerror(errnoValue))))
        }
    }

    @Test func withoutWaitingADeviceThatDisappearsEndsWithDeviceLostAndAPlayableFile() throws {
        let server = try PulseServer()
        let recorder = recorder(device: TestDevices.paced(server), waitForDevice: false)
        let recording = try recorder.start(name: "lost", settings: RecordingSettings(format: .wav, sampleRate: 48000, channels: 2))
        #expect(waitUntil { recorder.currentTime.value >= 0.5 })
        server.kill()
        #expect(waitUntil(timeout: 20) { recorder.state.value.name == .failed })
        guard case .failed(let ended?, let error) = recorder.state.value else {
            Issue.record("state \(recorder.state.value)")
            return
        }
        #expect(error.code == .deviceLost)
        #expect(error.message.contains(recording.device))
        #expect(recorder.error.value == error)
        // The file is finalized under its own name and holds everything captured.
        #expect(!FileManager.default.fileExists(atPath: recording.partialPath))
        let reader = try SoundFileReader(path: ended.path)
        #expect(reader.info.frames == ended.frames)
        #expect(ended.frames >= 24000)
        #expect(recorder.currentTime.value == ended.duration)
        // The recorder is usable again.
        #expect(recorder.state.value.isActive == false)
    }
}
