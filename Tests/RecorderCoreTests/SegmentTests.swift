import Foundation
import Glibc
import RecdTestSupport
@testable import RecorderCore
import RecorderModel
import Sndfile
import Testing

/// Sessions cut into segments: lengths, boundaries, names, split, announcements, through the
/// real libasound `file` device (bit-exact) and a paced PulseAudio device.
@Suite("Recorder: segments")
struct SegmentTests {
    let directory = TemporaryDirectory()

    func recorder(device: String, captureRate: Int? = nil, segments: SegmentSettings = SegmentSettings(),
                  silenceWarningAfter: Double? = 60) -> Recorder {
        Recorder(configuration: RecorderConfiguration(device: device, recordingsDirectory: directory.file("recordings"),
                                                      captureSampleRate: captureRate, segments: segments,
                                                      silenceWarningAfter: silenceWarningAfter))
    }

    func counterInput(seconds: Int, rate: Int = 48000, channels: Int = 2) -> (path: String, samples: [Int16]) {
        let samples = Signal.counter16(frames: seconds * rate, channels: channels)
        let path = directory.file("counter-\(rate)-\(channels).raw")
        Signal.write(samples, to: path)
        return (path, samples)
    }

    /// Every segment the recorder announces, in order.
    func collectSegments(_ recorder: Recorder) -> (Collected<Segment>, ObservationToken) {
        let segments = Collected<Segment>()
        let token = recorder.closedSegment.subscribe(delivery: .every) { if let segment = $0 { segments.append(segment) } }
        return (segments, token)
    }

    func waitForEnd(_ recorder: Recorder) -> RecorderState {
        _ = waitUntil(timeout: 60) { !recorder.state.value.isActive }
        return recorder.state.value
    }

    func concatenated(_ segments: [Segment]) throws -> [Int16] {
        var samples: [Int16] = []
        for segment in segments { samples += try SoundFileReader(path: segment.path).readAllInt16() }
        return samples
    }

    let wav16 = RecordingSettings(format: .wav, sampleRate: 48000, channels: 2, bitDepth: 16)

    @Test func segmentsByLengthHoldExactCountsAndConcatenateToTheInputBitForBit() throws {
        let input = counterInput(seconds: 10)
        let recorder = recorder(device: TestDevices.file(input.path), segments: SegmentSettings(length: 2))
        let (segments, token) = collectSegments(recorder)
        defer { token.cancel() }
        _ = try recorder.start(name: "station", settings: wav16, duration: 9)
        guard case .finished(let recording) = waitForEnd(recorder) else { Issue.record("\(recorder.state.value)"); return }
        #expect(waitUntil { segments.count == 5 })
        let closed = segments.values
        #expect(closed.map(\.frames) == [96000, 96000, 96000, 96000, 48000])
        #expect(closed.map(\.index) == [1, 2, 3, 4, 5])
        #expect(closed.map(\.endReason) == [.length, .length, .length, .length, .end])
        #expect(Set(closed.map(\.path)).count == 5, "unpaced: all start in one second, and none overwrites another")
        for segment in closed {
            #expect(segment.path.hasPrefix(directory.file("recordings") + "/station/"))
            #expect(!FileManager.default.fileExists(atPath: segment.partialPath))
            #expect(try SoundFileReader(path: segment.path).info.frames == segment.frames)
            #expect(segment.recordingId == recording.id)
        }
        #expect(recording.frames == 9 * 48000)
        #expect(recording.path == closed.last?.path)
        #expect(recorder.statistics.value.segmentsClosed == 5)
        expectSamples(try concatenated(closed), input.samples[0..<(9 * 48000 * 2)])
    }

    @Test func segmentsThroughTheResamplerHoldTheRequestedCountsAndMatchOneUnsegmentedFile() throws {
        // The device runs at 44.1 kHz, the files at 48 kHz: soxr converts across boundaries.
        let input = counterInput(seconds: 11, rate: 44100)
        let device = TestDevices.file(input.path)
        let whole = recorder(device: device, captureRate: 44100)
        _ = try whole.start(name: "whole", settings: wav16, duration: 9)
        guard case .finished(let single) = waitForEnd(whole) else { Issue.record("\(whole.state.value)"); return }

        let cut = recorder(device: device, captureRate: 44100, segments: SegmentSettings(length: 2))
        let (segments, token) = collectSegments(cut)
        defer { token.cancel() }
        _ = try cut.start(name: "cut", settings: wav16, duration: 9)
        guard case .finished = waitForEnd(cut) else { Issue.record("\(cut.state.value)"); return }
        #expect(waitUntil { segments.count == 5 })
        #expect(segments.values.map(\.frames) == [96000, 96000, 96000, 96000, 48000])
        #expect(segments.values.allSatisfy { $0.sampleRate == 48000 })
        let reference = try SoundFileReader(path: single.path).readAllInt16()
        #expect(reference.count == 9 * 48000 * 2)
        expectSamples(try concatenated(segments.values), reference[...])
    }

    @Test func splitClosesTheSegmentAndTheNextContinuesWithoutAGap() throws {
        let server = try PulseServer()
        let input = counterInput(seconds: 20)
        let recorder = recorder(device: TestDevices.pacedFile(input.path, server: server))
        let (segments, token) = collectSegments(recorder)
        defer { token.cancel() }
        let started = try recorder.start(name: "talk", settings: wav16)
        #expect(started.segment?.index == 1)
        #expect(waitUntil { recorder.currentTime.value >= 0.3 })
        let first = try recorder.split()
        #expect(first.index == 1)
        #expect(first.endReason == .split)
        #expect(recorder.recording.value?.segment?.index == 2)
        #expect(waitUntil { recorder.currentTime.value >= first.duration + 0.3 })
        let second = try recorder.split()
        #expect(second.index == 2)
        #expect(waitUntil { recorder.currentTime.value >= first.duration + second.duration + 0.2 })
        let finished = try recorder.stop()
        #expect(waitUntil { segments.count == 3 })
        let closed = segments.values
        #expect(closed.map(\.index) == [1, 2, 3])
        #expect(closed.map(\.endReason) == [.split, .split, .end])
        #expect(closed.reduce(0) { $0 + $1.frames } == finished.frames)
        // One file per recording by default: the later segments take numbered names.
        #expect(closed.map { ($0.path as NSString).lastPathComponent } == ["talk.wav", "talk-2.wav", "talk-3.wav"])
        let samples = try concatenated(closed)
        expectSamples(samples, input.samples[0..<samples.count])
    }

    @Test func splitWhileNotRecordingIsInvalidState() throws {
        let recorder = recorder(device: TestDevices.file(counterInput(seconds: 1).path))
        let error = #expect(throws: RecorderError.self) { try recorder.split() }
        #expect(error?.code == .invalidState)
    }

    @Test func templatesExpandTimeNameAndCounterInUTC() {
        let factory = SegmentFileFactory(directory: "/r", template: SegmentSettings.utcSegments, localTime: false,
                                         name: "birds", recordingId: "x", fileExtension: "flac",
                                         settings: RecordingSettings(format: .flac), sampleRate: 48000, channels: 1)
        // 2026-11-22 13:59:59.996 UTC: a name shows the second a time falls in, as a clock does.
        let date = Date(timeIntervalSince1970: 1_795_355_999.996)
        #expect(factory.render(index: 3, date: date) == "birds/2026-11-22/20261122T135959Z")
        let counted = SegmentFileFactory(directory: "/r", template: "{name}-{n}-%H%M", localTime: false, name: "a%b",
                                         recordingId: "x", fileExtension: "wav",
                                         settings: RecordingSettings(format: .wav), sampleRate: 48000, channels: 1)
        #expect(counted.render(index: 7, date: date) == "a%b-7-1359")
    }

    @Test func aSegmentOnTheClockIsNamedAfterItsBoundaryAndAnyOtherAfterItsStart() {
        let aligned = SegmentClock(settings: SegmentSettings(length: 3600, alignToClock: true), rate: 48000)
        // A measured start a few ms before 14:00:00 is the 14:00 file.
        let early = Date(timeIntervalSince1970: 1_795_356_000 - 0.004)
        #expect(aligned.nameTime(forStart: early, follows: true) == Date(timeIntervalSince1970: 1_795_356_000))
        #expect(aligned.nameTime(forStart: Date(timeIntervalSince1970: 1_795_356_000.03), follows: true)
                == Date(timeIntervalSince1970: 1_795_356_000))
        // The first file starts whenever the recording did; a split or a gap is no boundary.
        #expect(aligned.nameTime(forStart: early, follows: false) == early)
        let free = SegmentClock(settings: SegmentSettings(length: 3600), rate: 48000)
        #expect(free.nameTime(forStart: early, follows: true) == early)
        // Far from a boundary (a clock step): its own time.
        let off = Date(timeIntervalSince1970: 1_795_356_000.4)
        #expect(aligned.nameTime(forStart: off, follows: true) == off)
    }

    @Test func templatesThatLeaveTheDirectoryAreRefused() {
        for template in ["/etc/x", "../x", "a/../b", "a//b", ".hidden/x", ""] {
            #expect(throws: RecorderError.self, "\(template)") { try SegmentSettings(length: 60, template: template).validate() }
        }
        #expect(throws: RecorderError.self) { try SegmentSettings(length: 0.5).validate() }
        #expect(throws: RecorderError.self) { try SegmentSettings(alignToClock: true).validate() }
    }

    @Test func clockAlignedBoundariesAreMultiplesOfTheLengthFromMidnight() {
        let clock = SegmentClock(settings: SegmentSettings(length: 3600, alignToClock: true), rate: 48000)
        let midnight = 1_795_305_600.0  // 2026-11-22T00:00:00Z
        func frames(_ clock: SegmentClock, _ offset: Double, follows: Bool) -> Int64 {
            clock.frames(startingAt: Date(timeIntervalSince1970: midnight + offset), follows: follows) ?? -1
        }
        // A first segment started at 13:20 ends at 14:00.
        #expect(frames(clock, 13 * 3600 + 1200, follows: false) == Int64(2400 * 48000))
        // One started a few ms before 14:00 at a boundary ends at 15:00, not at 14:00.
        #expect(frames(clock, 14 * 3600 - 0.004, follows: true) == Int64(3600.004 * 48000))
        // 7 minutes do not divide a day: the last segment of the day (from 23:55) ends at midnight.
        let sevenMinutes = SegmentClock(settings: SegmentSettings(length: 420, alignToClock: true), rate: 1000)
        #expect(frames(sevenMinutes, 86400 - 300, follows: true) == 300_000)
        // A recording started at 23:59 ends its first segment at midnight, then 00:07.
        #expect(frames(sevenMinutes, 86400 - 60, follows: false) == 60_000)
        #expect(frames(sevenMinutes, 86400, follows: true) == 420_000)
        // Unaligned segments are exactly the length.
        let plain = SegmentClock(settings: SegmentSettings(length: 2), rate: 44100)
        #expect(plain.frames(startingAt: Date(), follows: true) == 88200)
    }

    @Test func clockAlignedSegmentsStartOnTheirBoundaries() throws {
        let server = try PulseServer()
        try server.tone()
        let recorder = recorder(device: TestDevices.paced(server), segments: SegmentSettings(length: 2, alignToClock: true))
        let (segments, token) = collectSegments(recorder)
        defer { token.cancel() }
        // When each announcement arrives, by the test's own clock: an independent check that
        // the boundaries recd computes are real wall-clock times (not in the future, not long
        // past: "long" leaves room for a loaded machine, where one came 2 s after its end).
        let arrivals = Collected<(Segment, Date)>()
        let arrivalToken = recorder.closedSegment.subscribe(delivery: .every) { if let segment = $0 { arrivals.append((segment, Date())) } }
        defer { arrivalToken.cancel() }
        _ = try recorder.start(name: "clock", settings: wav16)
        #expect(waitUntil(timeout: 30) { segments.count >= 3 })
        _ = try recorder.stop()
        let closed = segments.values
        // Every segment after the first starts on an even second, within 50 ms.
        var offsets: [String] = []
        defer { print("clock-aligned segments: start - boundary =", offsets) }
        for segment in closed.dropFirst() {
            let time = segment.startedAt.timeIntervalSince1970
            let offset = time - (time / 2).rounded() * 2
            offsets.append(String(format: "%+.4f s", offset))
            #expect(abs(offset) < 0.05, "segment \(segment.index) starts \(offset) s off its boundary")
            #expect(segment.path.hasSuffix(String(format: "%02dZ.wav", Int((time / 2).rounded() * 2) % 60)), "\(segment.path)")
        }
        for segment in closed.dropFirst().dropLast() {
            #expect(abs(segment.duration - 2) < 0.05, "segment \(segment.index) lasts \(segment.duration) s")
        }
        for (segment, arrived) in arrivals.values.dropLast() {
            let end = segment.startedAt.addingTimeInterval(segment.duration)
            #expect(arrived >= end && arrived < end.addingTimeInterval(10), "segment \(segment.index) ends \(end), announced \(arrived)")
        }
    }

    // MARK: A recording that outlives its device

    @Test func aLostDeviceIsWaitedForAndTheRecordingContinuesInANewSegmentTwice() throws {
        let server = try PulseServer()
        try server.tone()
        let recorder = recorder(device: TestDevices.paced(server))
        let (segments, token) = collectSegments(recorder)
        defer { token.cancel() }
        let states = Collected<RecorderState>()
        let stateToken = recorder.state.subscribe(delivery: .every) { states.append($0) }
        defer { stateToken.cancel() }
        let started = try recorder.start(name: "outlive", settings: wav16, segments: SegmentSettings(length: 3600))
        var recovery: [Double] = []
        // A split before the first loss: numbering goes on across the gaps.
        #expect(waitUntil(timeout: 20) { recorder.currentTime.value >= 0.3 })
        let split = try recorder.split()
        #expect(split.index == 1)
        #expect(waitUntil { segments.count == 1 })
        for round in 1...2 {
            let before = recorder.currentTime.value
            #expect(waitUntil(timeout: 20) { recorder.currentTime.value >= before + 0.5 })
            server.kill()
            #expect(waitUntil(timeout: 20) { recorder.state.value.name == .waitingForDevice })
            guard case .waitingForDevice(let waiting, let wait) = recorder.state.value else {
                Issue.record("state \(recorder.state.value)")
                return
            }
            #expect(waiting.id == started.id)
            #expect(wait.error.code == .deviceLost || wait.error.code == .deviceNotFound, "\(wait.error)")
            #expect((wait.retryAt ?? .distantPast) > wait.since)
            // The segment that was being written is finalized, playable, and announced.
            #expect(waitUntil { segments.count == round + 1 })
            let lost = segments.values[round]
            #expect(lost.endReason == .deviceLost)
            #expect(try SoundFileReader(path: lost.path).info.frames == lost.frames)
            #expect(!FileManager.default.fileExists(atPath: lost.partialPath))
            #expect(recorder.statistics.value.gaps.count == round)
            // The server comes back on the same socket after 3 s (the scenario, not a wait).
            Thread.sleep(forTimeInterval: 3)
            let back = Date()
            try server.restart()
            try server.tone()
            #expect(waitUntil(timeout: 20) { recorder.state.value.name == .recording })
            recovery.append(Date().timeIntervalSince(back))
            #expect(recorder.recording.value?.segment?.index == round + 2)
        }
        let before = recorder.currentTime.value
        #expect(waitUntil(timeout: 20) { recorder.currentTime.value >= before + 0.5 })
        let finished = try recorder.stop()
        #expect(waitUntil { segments.count == 4 })
        let closed = segments.values
        #expect(closed.map(\.index) == [1, 2, 3, 4])
        #expect(closed.map(\.endReason) == [.split, .deviceLost, .deviceLost, .end])
        #expect(closed.reduce(0) { $0 + $1.frames } == finished.frames)
        #expect(closed[0].gapBefore == nil)
        #expect(closed[1].gapBefore == nil)
        for (index, segment) in closed.enumerated().dropFirst(2) {
            // Each later segment carries the gap before it: where it fell and how long it was.
            guard let gap = segment.gapBefore else { Issue.record("segment \(segment.index) has no gap"); continue }
            #expect(gap.duration >= 3, "gap of \(gap.duration) s")
            #expect(gap.position == closed[..<index].reduce(0) { $0 + $1.frames })
            #expect(try SoundFileReader(path: segment.path).info.frames == segment.frames)
        }
        let statistics = recorder.statistics.value
        #expect(statistics.gaps.count == 2)
        #expect(statistics.gaps.allSatisfy { $0.end != nil })
        #expect(statistics.segmentsClosed == 4)
        var path: [RecorderState.Name] = []
        for state in states.values where state.name == .waitingForDevice || state.name == .recording {
            if path.last != state.name { path.append(state.name) }
        }
        #expect(path == [.recording, .waitingForDevice, .recording, .waitingForDevice, .recording])
        print("device back -> recording again after", recovery.map { String(format: "%.2f s", $0) })
    }

    @Test func aDeviceMissingAtStartIsWaitedForAndRecordedWhenItAppears() throws {
        let server = try PulseServer()
        server.kill()
        let recorder = recorder(device: TestDevices.paced(server))
        let (segments, token) = collectSegments(recorder)
        defer { token.cancel() }
        let started = try recorder.start(name: "early", settings: wav16)
        guard case .waitingForDevice(_, let wait) = recorder.state.value else {
            Issue.record("state \(recorder.state.value)")
            return
        }
        #expect(started.segment == nil, "no file before the device exists")
        #expect(wait.error.message.contains(TestDevices.paced(server)))
        #expect(waitUntil { (recorder.state.value.deviceWait?.attempts ?? 0) >= 3 }, "retries keep coming")
        Thread.sleep(forTimeInterval: 3)
        try server.restart()
        try server.tone()
        #expect(waitUntil(timeout: 20) { recorder.state.value.name == .recording })
        #expect(waitUntil(timeout: 20) { recorder.currentTime.value >= 0.5 })
        let finished = try recorder.stop()
        #expect(waitUntil { segments.count == 1 })
        let segment = segments.values[0]
        #expect(segment.index == 1)
        #expect(segment.path.hasSuffix("/early.wav"))
        #expect((segment.gapBefore?.duration ?? 0) >= 3)
        #expect(segment.gapBefore?.position == 0)
        #expect(try SoundFileReader(path: segment.path).info.frames == finished.frames)
    }

    @Test func stopWhileWaitingEndsTheRecordingCleanly() throws {
        let server = try PulseServer()
        server.kill()
        let recorder = recorder(device: TestDevices.paced(server))
        _ = try recorder.start(name: "never", settings: wav16)
        #expect(recorder.state.value.name == .waitingForDevice)
        let finished = try recorder.stop()
        #expect(finished.frames == 0)
        guard case .finished = recorder.state.value else { Issue.record("state \(recorder.state.value)"); return }
        #expect(recorder.statistics.value.gaps.count == 1)
        #expect(recorder.statistics.value.gaps.first?.end != nil)
        #expect(!FileManager.default.fileExists(atPath: directory.file("recordings/never.wav")))
        // And the recorder takes the next recording.
        #expect(recorder.state.value.isActive == false)
    }

    /// A start at a later time opens nothing until then; a device missing then is waited for
    /// (nobody is there to be told), and recorded from when it appears.
    @Test func aScheduledStartOpensNothingUntilItsTimeThenWaitsForAMissingDevice() throws {
        let server = try PulseServer()
        server.kill()
        let recorder = recorder(device: TestDevices.paced(server))
        let scheduled = try recorder.start(name: "later", settings: wav16, at: Date().addingTimeInterval(1))
        #expect(scheduled.path.isEmpty && scheduled.scheduledAt != nil)
        #expect(recorder.state.value.name == .preparing)
        #expect(waitUntil(timeout: 20) { recorder.state.value.name == .waitingForDevice }, "\(recorder.state.value)")
        #expect(recorder.recording.value?.id == scheduled.id, "the same recording, at its time")
        try server.restart()
        try server.tone()
        #expect(waitUntil(timeout: 20) { recorder.state.value.name == .recording && recorder.currentTime.value >= 0.3 })
        let finished = try recorder.stop()
        #expect(finished.path.hasSuffix("/later.wav") && FileManager.default.fileExists(atPath: finished.path))
    }

    // MARK: Running but recording nothing

    @Test func digitalSilenceRaisesAWarningThatClearsWhenSignalReturns() throws {
        let server = try PulseServer()
        // 1.5 s of zeros, then the counter pattern.
        let zeros = [Int16](repeating: 0, count: 72000 * 2)
        let path = directory.file("silence-then-signal.raw")
        Signal.write(zeros + Signal.counter16(frames: 480_000, channels: 2), to: path)
        let recorder = recorder(device: TestDevices.pacedFile(path, server: server), silenceWarningAfter: 0.5)
        let warnings = Collected<RecorderWarning?>()
        let token = recorder.warning.subscribe(delivery: .every) { warnings.append($0) }
        defer { token.cancel() }
        _ = try recorder.start(name: "quiet", settings: wav16)
        #expect(waitUntil(timeout: 20) { warnings.values.contains { $0?.code == .digitalSilence } })
        #expect(waitUntil(timeout: 20) { recorder.currentTime.value > 2 && recorder.warning.value == nil })
        _ = try recorder.stop()
        let seen = warnings.values
        guard let raised = seen.firstIndex(where: { $0 != nil }) else { return }
        #expect(seen[raised]?.message.contains("digital silence") == true)
        #expect(seen[(raised + 1)...].contains { $0 == nil }, "cleared after it was raised: \(seen)")
    }
}
