import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// Listening and pre-roll through the real recd and recctl: the device open without a file,
/// levels before recording, and a start that begins its file with the input from before it —
/// bit for bit on the paced file device (a known signal at a real clock's pace), through
/// conversion and segments, with the file's start time at the first pre-rolled frame.
@Suite("listening and pre-roll")
struct ListeningTests {
    let inputs = TemporaryDirectory()

    /// A daemon listening on the paced file device with `preRoll` seconds, once it holds them all.
    func listeningDaemon(_ input: String, server: PulseServer, preRoll: Double, config: String = "") throws -> (Daemon, RecdConnection) {
        let daemon = try Daemon(device: TestDevices.pacedFile(input, server: server),
                                config: "[recording]\nformat = \"wav\"\nsample_rate = 48000\nchannels = 2\n" + config)
        let client = try daemon.connect()
        let result: ListenResult = try client.call(.listen, ListenParams(preRoll: preRoll))
        #expect(result.state == .listening)
        #expect(result.listening?.preRollCapacity == preRoll)
        #expect(result.listening?.preRollBytes == Int(preRoll * 48000) * 4, "allocated once, at its size")
        try #require(daemon.waitForStatus { ($0.listening?.preRollHeld ?? 0) >= preRoll } != nil, "the ring fills")
        return (daemon, client)
    }

    func samples(of files: [String]) throws -> [Int16] {
        var all: [Int16] = []
        for file in files { all += try SoundFileReader(path: file).readAllInt16() }
        return all
    }

    @Test func aStartWhileListeningBeginsTheFileWithThePreRollBitForBit() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60)
        let (daemon, client) = try listeningDaemon(input.path, server: server, preRoll: 2)
        let listening = try #require(daemon.waitForStatus { $0.listening != nil }?.listening)
        #expect(listening.deviceFormat == DeviceFormat(sampleFormat: "int16", sampleRate: 48000, channels: 2))

        let started: Recording = try client.call(.start, StartParams(name: "take", preRoll: 2))
        let preRoll = try #require(started.preRoll, "the answer says what the file got")
        #expect(preRoll.frames == 96000 && preRoll.seconds == 2 && preRoll.requested == 2)
        #expect(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime >= 3 } != nil, "currentTime counts the pre-roll")
        let stopped: Recording = try client.call(.stop)
        let recorded = try samples(of: [daemon.recordings + "/take.wav"])
        #expect(Int64(recorded.count / 2) == stopped.frames)
        // The file is the input from exactly 2 s × rate frames before the start, to the end.
        let first = Int(preRoll.firstFrame) * 2
        try #require(first + recorded.count <= input.samples.count)
        #expect(recorded.elementsEqual(input.samples[first..<(first + recorded.count)]), "pre-roll and live input, contiguous")

        // The recording ended: still listening, on the same device opening.
        let after = try #require(daemon.waitForStatus { $0.state == .listening })
        #expect(after.listening?.since == listening.since)
        #expect((after.listening?.framesCaptured ?? 0) > preRoll.firstFrame + preRoll.frames)
    }

    @Test func theFileStartsAtTheFirstPreRolledFramesCaptureTime() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60)
        let (daemon, client) = try listeningDaemon(input.path, server: server, preRoll: 1.5)
        let started: Recording = try client.call(.start, StartParams(name: "timed", preRoll: 1.5))
        // recd's estimate of when the device's frame 0 was captured, as it stood at the start.
        let status = try #require(daemon.waitForStatus { $0.state.name == .recording })
        let preRoll = try #require(started.preRoll)
        let origin = try #require(status.listening?.firstFrameAt)
        let expected = origin.addingTimeInterval(Double(preRoll.firstFrame) / 48000)
        let startedAt = try #require(started.startedAt)
        #expect(abs(startedAt.timeIntervalSince(expected)) < 0.001, "startedAt \(startedAt), first pre-rolled frame \(expected)")
        #expect(status.recording?.startedAt == startedAt, "status agrees with start's answer")
        #expect(startedAt < Date().addingTimeInterval(-1.4), "the file began before the start")
        #expect(daemon.waitForStatus { $0.currentTime >= 2 } != nil)
        let _: Recording = try client.call(.stop)
        // The file says so itself: recctl info reads the start from the WAV's bext chunk.
        let info = try recctl(daemon, "info", "timed", "--json")
        #expect(info.status == 0, "\(info.stderr)")
        let file = try WireCoding.decoder().decode(RecordingFile.self, from: Data(info.stdout.utf8))
        let readBack = try #require(file.startedAt)
        // The file keeps the start to the frame (bext's TimeReference), the wire to the
        // millisecond, rounded: a start within a frame of half a millisecond rounds to
        // neighbouring milliseconds (1.0002 ms apart was seen).
        #expect(abs(readBack.timeIntervalSince(startedAt)) < 0.001 + 1.0 / 48000, "file \(readBack), wire \(startedAt)")
    }

    @Test func preRollThroughResamplingAndSegmentsLosesAndRepeatsNoFrame() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60)
        let (daemon, client) = try listeningDaemon(input.path, server: server, preRoll: 2)

        // 1 s segments: joined, they are the input slice from the first pre-rolled frame.
        let segmented: Recording = try client.call(.start, StartParams(name: "cut", segmentLength: 1, fileTemplate: "cut/{n}", preRoll: 2))
        #expect(daemon.waitForStatus { $0.currentTime >= 3.5 } != nil)
        let _: Recording = try client.call(.stop)
        let files = try FileManager.default.contentsOfDirectory(atPath: daemon.recordings + "/cut")
            .filter { $0.hasSuffix(".wav") }.sorted { Int($0.dropLast(4))! < Int($1.dropLast(4))! }
        #expect(files.count >= 4, "\(files)")
        let joined = try samples(of: files.map { daemon.recordings + "/cut/" + $0 })
        let first = Int(try #require(segmented.preRoll).firstFrame) * 2
        #expect(Array(joined.prefix(96000 * 2)).count == 96000 * 2)
        #expect(joined.elementsEqual(input.samples[first..<(first + joined.count)]), "segments of pre-roll and live input")
        #expect(try SoundFileReader(path: daemon.recordings + "/cut/1.wav").readAllInt16().count == 48000 * 2,
                "the first second of pre-roll fills the first segment")

        // Resampled to 16 kHz mono: the file against soxr's conversion of the same input slice
        // (sox, an independent program): a frame lost or repeated anywhere would shift what follows.
        #expect(daemon.waitForStatus { $0.state == .listening } != nil)
        let resampled: Recording = try client.call(.start, StartParams(name: "small", sampleRate: 16000, channels: 1, preRoll: 2))
        #expect(daemon.waitForStatus { $0.currentTime >= 4 } != nil)
        let _: Recording = try client.call(.stop)
        let file = try SoundFileReader(path: daemon.recordings + "/small.wav").readAllInt16()
        let start = Int(try #require(resampled.preRoll).firstFrame)
        let slice = Array(input.samples[(start * 2)..<((start + 48000 * 6) * 2)])
        let slicePath = inputs.file("slice.raw")
        Signal.write(slice, to: slicePath)
        let referencePath = inputs.file("reference.raw")
        let sox = try run("/usr/bin/sox", ["-q", "-t", "raw", "-r", "48000", "-e", "signed-integer", "-b", "16", "-c", "2", slicePath,
                                           "-t", "raw", "-e", "signed-integer", "-b", "16", "-c", "1", referencePath, "rate", "-v", "16000"])
        #expect(sox.status == 0, "\(sox.stderr)")
        let reference = try Data(contentsOf: URL(fileURLWithPath: referencePath)).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        let converted = file.map(Double.init), expected = reference.map(Double.init)
        func snr(lag: Int) -> Double { Signal.signalToNoise(converted, expected, lag: lag) }
        let aligned = snr(lag: 0)
        #expect(aligned > 30, "the file matches the converted input: \(aligned) dB")
        #expect(aligned > snr(lag: 1) + 10 && aligned > snr(lag: -1) + 10, "and only where it should")
    }

    @Test func aPreRollLongerThanListeningGivesWhatThereIsFromTheFirstFrame() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server),
                                config: "[recording]\nformat = \"wav\"\nsample_rate = 48000\nchannels = 2\n[listen]\npre_roll = \"20 s\"\n")
        let client = try daemon.connect()
        let _: ListenResult = try client.call(.listen)
        try #require(daemon.waitForStatus { ($0.listening?.preRollHeld ?? 0) > 0.5 } != nil)
        let started: Recording = try client.call(.start, StartParams(name: "early"))
        let preRoll = try #require(started.preRoll)
        #expect(preRoll.requested == 20, "the configured length")
        #expect(preRoll.seconds > 0.4 && preRoll.seconds < 20, "what there was: \(preRoll.seconds) s")
        #expect(preRoll.firstFrame == 0, "everything since the device opened")
        #expect(daemon.waitForStatus { $0.currentTime >= preRoll.seconds + 0.5 } != nil)
        let _: Recording = try client.call(.stop)
        let recorded = try samples(of: [daemon.recordings + "/early.wav"])
        #expect(recorded.elementsEqual(input.samples[0..<recorded.count]), "from the device's first frame")

        // Not listening: a start is as before, without pre-roll; the device closes after it.
        let ended: ListenResult = try client.call(.unlisten)
        #expect(ended.state == .idle && ended.listening != nil)
        let plain: Recording = try client.call(.start, StartParams(name: "plain", duration: 1))
        #expect(plain.preRoll == nil)
        let finished = try #require(daemon.waitForStatus { $0.state.name == .finished })
        #expect(finished.recording?.frames == 48000, "duration counts as before")
        #expect(finished.listening == nil)
    }

    @Test func durationCountsFromTheStartNotFromThePreRoll() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60)
        let (daemon, client) = try listeningDaemon(input.path, server: server, preRoll: 1)
        let started: Recording = try client.call(.start, StartParams(name: "timed", duration: 1.5, preRoll: 1))
        let limit = try #require(started.frameLimit)
        #expect(limit == Int64(120_000), "pre-roll + duration: \(limit)")
        let finished = try #require(daemon.waitForStatus(timeout: 30) { $0.state == .listening && $0.lastSegment?.recordingId == started.id })
        #expect(finished.lastSegment?.frames == 120_000)
        let recorded = try samples(of: [daemon.recordings + "/timed.wav"])
        let first = Int(try #require(started.preRoll).firstFrame) * 2
        #expect(recorded.elementsEqual(input.samples[first..<(first + recorded.count)]))
    }

    /// Levels cost nothing while nobody wants them: listening with no subscriber measures
    /// nothing as it goes (no meter on the capture thread, no timer, nothing published); a
    /// poll measures at the call instead (issue 53, AVAudioRecorder's `updateMeters()`):
    /// `status` has the input's levels from the pre-roll ring while listening and from the
    /// recording's meter while recording. A subscriber gets them published within a tick, and
    /// once it leaves the publishing stops again.
    @Test func levelsArePublishedOnlyWhileSomeoneSubscribesAndAPollMeasuresThem() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"wav\"\n")
        let _: ListenResult = try daemon.connect().call(.listen, ListenParams(preRoll: 1))
        _ = try #require(daemon.waitForStatus { ($0.listening?.preRollHeld ?? 0) >= 0.5 })
        usleep(300_000)  // six levels ticks, had there been a timer
        // Nothing published for nobody: the topic's value is still listening's first (silence).
        let peek = try daemon.connect()
        let first: SubscribeResult = try peek.call(.subscribe, SubscribeParams(topics: [.levels]))
        #expect(first.snapshot.first?.value == .levels(.none) && (first.snapshot.first?.seq ?? 99) <= 3, "levels published for nobody: \(first.snapshot)")
        let _: UnsubscribeResult = try peek.call(.unsubscribe, UnsubscribeParams(subscription: first.subscription))
        // A poll measures: the tone peaks at -12 dBFS.
        let tone = { (status: StatusResult) in status.levels.channels.count == 2 && status.levels.channels.allSatisfy { abs($0.peak + 12) < 1 } }
        #expect(daemon.waitForStatus(tone) != nil, "a poll while listening: \(String(describing: daemon.waitForStatus { _ in true }?.levels))")
        for recording in [false, true] {
            if recording {
                let _: Recording = try daemon.connect().call(.start, StartParams(name: "quiet"))
                #expect(daemon.waitForStatus { $0.state.name == .recording && tone($0) } != nil, "a poll while recording")
            }
            let client = try daemon.connect()
            let subscription: SubscribeResult = try client.call(.subscribe, SubscribeParams(topics: [.levels]))
            let published = waitUntil(timeout: 10) {
                guard let line = try? client.nextObject(timeout: 1), let params = line["params"] as? [String: Any] else { return false }
                return ((params["value"] as? [String: Any])?["channels"] as? [Any])?.count == 2
            }
            #expect(published, "no levels published for a subscriber (recording: \(recording))")
            let _: UnsubscribeResult = try client.call(.unsubscribe, UnsubscribeParams(subscription: subscription.subscription))
            // Once it leaves, the publishing stops: the topic's last value says so (silence).
            let stopped = waitUntil(timeout: 10) {
                guard let peek = try? daemon.connect(), let seen: SubscribeResult = try? peek.call(.subscribe, SubscribeParams(topics: [.levels]))
                else { return false }
                return seen.snapshot.first?.value == .levels(.none)
            }
            #expect(stopped, "levels go on for nobody (recording: \(recording))")
        }
        let _: Recording = try daemon.connect().call(.stop)
    }

    /// The capture thread wakes as often as its most demanding consumer needs: listening with
    /// nobody watching (a pre-roll ring alone) it reads about eight times a second, not once per
    /// 10 ms period; with the spectrum (two columns every 0.1 s) about ten; with a level meter
    /// (levels every 0.1 s, the subscription's default) about twenty.
    /// Counted with strace as `poll` calls on the thread per second of audio captured (a loaded
    /// machine only makes the thread later, and so rarer: the bounds cannot pass by load).
    @Test func theCaptureThreadWakesAsOftenAsItsMostDemandingConsumerNeeds() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"wav\"\n")
        let _: ListenResult = try daemon.connect().call(.listen, ListenParams(preRoll: 1))
        // The first 500 reads come every period, whatever the consumers (the clock's anchor
        // needs them close together): measure after them, 5 s of 10 ms periods.
        _ = try #require(daemon.waitForStatus(timeout: 30) { ($0.listening?.framesCaptured ?? 0) >= 6 * 48000 })
        let capture = try #require(StationTests.thread(named: "recd-capture", of: daemon.process.pid))
        let work = TemporaryDirectory()
        /// `poll` calls of the capture thread per second of audio over the next two seconds captured.
        func wakesPerSecond(_ label: String) throws -> Double {
            let trace = work.file("\(label).strace")
            let strace = try BackgroundCommand("/usr/bin/strace", ["-qq", "-e", "trace=poll,ppoll", "-p", capture, "-o", trace])
            defer { strace.process.signal(SIGINT) }
            #expect(waitUntil { FileManager.default.fileExists(atPath: trace) }, "strace did not attach")
            usleep(300_000)  // strace has stopped and let go of the thread once: count after
            let lines = { ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").split(separator: "\n").count }
            let first = try #require(daemon.waitForStatus { $0.listening != nil }?.listening?.framesCaptured)
            let polledBefore = lines()
            let last = try #require(daemon.waitForStatus { ($0.listening?.framesCaptured ?? 0) >= first + 96000 }?.listening?.framesCaptured)
            let polls = lines() - polledBefore
            return Double(polls) / (Double(last - first) / 48000)
        }
        let alone = try wakesPerSecond("ring")
        #expect(alone > 0 && alone <= 20, "listening with nobody watching: \(alone) wake-ups per second (a period is 10 ms)")

        let client = try daemon.connect()
        let spectral: SubscribeResult = try client.call(.subscribe, SubscribeParams(topics: [.spectrum]))
        #expect(waitUntil(timeout: 20) { daemon.threads(named: "recd-spectrum") == 1 })
        let spectrum = try wakesPerSecond("spectrum")
        #expect(spectrum > 0 && spectrum <= 15, "with the spectrum (columns two at a time, every 0.1 s): \(spectrum) wake-ups per second")
        let _: UnsubscribeResult = try client.call(.unsubscribe, UnsubscribeParams(subscription: spectral.subscription))
        #expect(waitUntil(timeout: 20) { daemon.threads(named: "recd-spectrum") == 0 })

        let levels: SubscribeResult = try client.call(.subscribe, SubscribeParams(topics: [.levels]))
        _ = try #require(daemon.waitForStatus { $0.levels.channels.count == 2 })
        let metered = try wakesPerSecond("meter")
        #expect(metered > alone, "a meter wants every period: \(metered) against \(alone) alone")

        // Armed (sound-activated, the tone below the threshold: no event), nobody watching:
        // the detector takes chunks every 40 ms, not every period (100 a second).
        // Per second of wall time: a loaded machine only makes the thread later, and so rarer.
        let _: UnsubscribeResult = try client.call(.unsubscribe, UnsubscribeParams(subscription: levels.subscription))
        let _: Recording = try client.call(.start, StartParams(name: "armed", trigger: TriggerParams(threshold: -1, preRoll: 0.5)))
        _ = try #require(daemon.waitForStatus { $0.state.name == .recording })
        let trace = work.file("armed.strace")
        let strace = try BackgroundCommand("/usr/bin/strace", ["-qq", "-e", "trace=poll,ppoll", "-p", capture, "-o", trace])
        #expect(waitUntil { FileManager.default.fileExists(atPath: trace) }, "strace did not attach")
        usleep(300_000)
        let polls = { ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").split(separator: "\n").count }
        let (before, since) = (polls(), Date())
        usleep(2_000_000)
        let armed = Double(polls() - before) / Date().timeIntervalSince(since)
        strace.process.signal(SIGINT)
        #expect(daemon.waitForStatus { $0.trigger?.state == "armed" && $0.trigger?.events == 0 } != nil, "still armed, no event")
        print("capture thread's wake-ups per second: pre-roll alone \(alone), with the spectrum \(spectrum), with a meter \(metered), armed \(armed)")
        #expect(armed > 0 && armed <= 40, "armed, nobody watching: \(armed) wake-ups per second (a period is 10 ms)")
    }

    @Test func levelsWhileListeningAndPauseResumeWithoutPreRoll() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"flac\"\n")
        let client = try daemon.connect()
        let subscription: SubscribeResult = try client.call(.subscribe, SubscribeParams(topics: [.levels, .state, .listening]))
        #expect(subscription.snapshot.contains { $0.value == .state(.idle) })
        let _: ListenResult = try client.call(.listen, ListenParams(preRoll: 1))
        // The tone, metered while nothing records.
        var heard = false
        let deadline = Date().addingTimeInterval(20)
        while !heard && Date() < deadline {
            let notification = try client.nextNotification(timeout: 20)
            if case .levels(let levels) = notification.value, levels.channels.count == 2,
               levels.channels.allSatisfy({ $0.peak > -30 }) { heard = true }
        }
        #expect(heard, "levels while listening")
        try #require(daemon.waitForStatus { ($0.listening?.preRollHeld ?? 0) >= 1 } != nil, "the ring fills")
        let text = try recctl(daemon, "status")
        #expect(text.stdout.contains("listening"), "\(text.stdout)")
        #expect(text.stdout.contains("pre-roll"), "\(text.stdout)")

        let started: Recording = try daemon.connect().call(.start, StartParams(name: "paused"))
        #expect(started.preRoll?.frames == 48000)
        #expect(daemon.waitForStatus { $0.currentTime >= 1.5 } != nil)
        let _: StateResult = try daemon.connect().call(.pause)
        let paused = try #require(daemon.waitForStatus { $0.state.name == .paused })
        Thread.sleep(forTimeInterval: 0.5)
        let _: StateResult = try daemon.connect().call(.resume)
        #expect(daemon.waitForStatus { $0.currentTime >= paused.currentTime + 1 } != nil)
        let stopped: Recording = try daemon.connect().call(.stop)
        let frames = try FFmpegTools.decodeInt16(stopped.path).count / 2
        #expect(Int64(frames) == stopped.frames, "paused without losing the file's count")
        #expect(daemon.waitForStatus { $0.state == .listening && $0.listening != nil } != nil, "back to listening")
        // stop with nothing recording ends listening.
        let stop = try recctl(daemon, "stop")
        #expect(stop.status == 0 && stop.stdout.contains("stopped listening"), "\(stop.stdout) \(stop.stderr)")
        #expect(daemon.waitForStatus { $0.state == .idle && $0.listening == nil } != nil)
    }

    @Test func aLostDeviceWhileListeningIsWaitedForAndListeningResumes() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let _: ListenResult = try client.call(.listen, ListenParams(preRoll: 1))
        try #require(daemon.waitForStatus { ($0.listening?.framesCaptured ?? 0) > 24000 } != nil)
        server.kill()
        let waiting = try #require(daemon.waitForStatus { $0.listening?.wait != nil })
        #expect(waiting.state == .listening)
        try server.restart()
        try server.tone()
        let back = try #require(daemon.waitForStatus(timeout: 30) { $0.listening?.wait == nil && ($0.listening?.framesCaptured ?? 0) > 24000 })
        #expect(back.state == .listening)
        #expect(waitUntil { daemon.log.contains("listening again") }, "\(daemon.log.suffix(2000))")
        // And a recording started now gets its pre-roll from the device as it came back.
        let started: Recording = try client.call(.start, StartParams(name: "after", format: .wav))
        #expect((started.preRoll?.frames ?? 0) > 0)
        let _: Recording = try client.call(.stop)
    }

    @Test func listeningComesBackAfterADeviceLossDuringAPausedRecording() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"wav\"\n")
        let client = try daemon.connect()
        let _: ListenResult = try client.call(.listen, ListenParams(preRoll: 1))
        let _: Recording = try client.call(.start, StartParams(name: "held"))
        #expect(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime >= 0.3 } != nil)
        let _: StateResult = try client.call(.pause)
        server.kill()
        #expect(daemon.waitForStatus { $0.listening?.wait != nil } != nil, "listening waits for the device")
        try server.restart()
        try server.tone()
        let back = try #require(daemon.waitForStatus(timeout: 30) {
            $0.listening?.wait == nil && ($0.listening?.framesCaptured ?? 0) > 24000 && $0.state.name == .paused
        }, "listening is back while the recording stays paused")
        #expect(back.listening?.deviceFormat != nil)
        let stopped: Recording = try client.call(.stop)
        #expect(stopped.frames > 0, "the paused recording keeps what it had")
        #expect(daemon.waitForStatus { $0.state == .listening && $0.listening?.wait == nil } != nil)
    }

    @Test func aRecordingThatWaitsForTheDeviceOpensItForListeningToo() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"wav\"\n")
        let client = try daemon.connect()
        // Opened once (so known), then gone: listening and the recording both wait for it.
        let _: ListenResult = try client.call(.listen, ListenParams(preRoll: 1))
        try #require(daemon.waitForStatus { ($0.listening?.framesCaptured ?? 0) > 4800 } != nil)
        server.kill()
        #expect(daemon.waitForStatus { $0.listening?.wait != nil } != nil)
        let waiting: Recording = try client.call(.start, StartParams(name: "late"))
        #expect(waiting.segment == nil, "the recording waits for the device")
        try server.restart()
        try server.tone()
        let both = try #require(daemon.waitForStatus(timeout: 30) {
            $0.state.name == .recording && $0.currentTime >= 0.3 && $0.listening?.wait == nil
                && ($0.listening?.preRollHeld ?? 0) > 0.2
        }, "one opening for the recording and for listening")
        #expect(both.listening?.deviceFormat != nil)
        let _: Recording = try client.call(.stop)
        let after = try #require(daemon.waitForStatus { $0.state == .listening })
        let captured = after.listening?.framesCaptured ?? 0
        #expect(daemon.waitForStatus { ($0.listening?.framesCaptured ?? 0) > captured + 4800 } != nil,
                "still hearing after the recording")
    }

    @Test func sigtermWhileListeningAndWhileRecordingWithPreRollExitsCleanly() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60)
        let (listener, _) = try listeningDaemon(input.path, server: server, preRoll: 1)
        #expect(listener.terminate() == 0, "\(listener.log.suffix(2000))")

        let (daemon, client) = try listeningDaemon(input.path, server: server, preRoll: 2)
        let started: Recording = try client.call(.start, StartParams(name: "kept", preRoll: 2))
        #expect(daemon.waitForStatus { $0.currentTime >= 2.5 } != nil)
        #expect(daemon.terminate() == 0, "\(daemon.log.suffix(2000))")
        let recorded = try samples(of: [daemon.recordings + "/kept.wav"])
        #expect(recorded.count / 2 >= 2 * 48000 + 24000, "finalized with its pre-roll and what followed")
        let first = Int(try #require(started.preRoll).firstFrame) * 2
        #expect(recorded.elementsEqual(input.samples[first..<(first + recorded.count)]))
    }

    @Test func recctlListenShowsTheMeterAndCtrlCEndsTheListeningItBegan() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let listen = try BackgroundCommand(Binaries.recctl, ["listen", "--json", "--pre-roll", "3"],
                                           environment: ["RECD_SOCKET": daemon.socket])
        let listening = try #require(daemon.waitForStatus { $0.listening != nil }?.listening)
        #expect(listening.preRollCapacity == 3)
        #expect(waitUntil { listen.stdoutLines.contains { $0.contains(#""topic":"levels""#) && $0.contains("peak") } },
                "levels as JSON lines: \(listen.stdout)")
        // A recording started and stopped meanwhile leaves it listening, and recctl with it.
        let _: Recording = try daemon.connect().call(.start, StartParams(name: "between", format: .wav))
        #expect(daemon.waitForStatus { $0.currentTime >= 0.3 } != nil)
        let _: Recording = try daemon.connect().call(.stop)
        #expect(daemon.waitForStatus { $0.state == .listening } != nil)
        // It printed the recording's end and then listening again, and is still there.
        let states = { listen.stdoutLines.filter { $0.contains(#""topic":"state""#) } }
        #expect(waitUntil { states().contains { $0.contains(#""finished""#) } && (states().last?.contains(#""listening""#) ?? false) },
                "\(listen.stdout.suffix(800))")
        #expect(listen.process.isRunning, "recctl listen goes on after the recording: \(listen.stdout.suffix(500))")
        listen.process.signal(SIGINT)
        #expect(listen.wait() == 0, "\(listen.stderr)")
        #expect(daemon.waitForStatus { $0.state == .idle && $0.listening == nil } != nil, "Ctrl-C ended the listening it began")

        // Listening it did not begin ([listen] or another client) goes on after Ctrl-C.
        let _: ListenResult = try daemon.connect().call(.listen)
        let watcher = try BackgroundCommand(Binaries.recctl, ["listen", "--json"], environment: ["RECD_SOCKET": daemon.socket])
        #expect(waitUntil { watcher.stdoutLines.count >= 2 }, "\(watcher.stdout)")
        watcher.process.signal(SIGINT)
        #expect(watcher.wait() == 0)
        #expect(daemon.waitForStatus { $0.listening != nil } != nil)
        let range = try recctl(daemon, "listen", "--pre-roll", "61")
        #expect(range.status != 0 && range.stderr.contains("--pre-roll must be between 0 and 60 seconds"), "\(range.stderr)")
    }

    /// Threads of the daemon with this name (`/proc/PID/task/*/comm`): libpulse's client
    /// thread (`threaded-ml`) exists exactly while a `pulse` PCM is open.
    func descriptors(of daemon: Daemon) -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(daemon.process.pid)/fd")) ?? []).count
    }

    @Test func theDeviceClosesAfterEveryRecordingAndWhenListeningEnds() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"wav\"\n")
        let client = try daemon.connect()
        #expect(daemon.threads(named: "threaded-ml") == 0)
        let baseline = descriptors(of: daemon)
        // Recordings one after another, each through its own opening: closed after each.
        for index in 0..<6 {
            let _: Recording = try client.call(.start, StartParams(name: "take\(index)"))
            #expect(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime >= 0.2 } != nil)
            #expect(daemon.threads(named: "threaded-ml") == 1, "one device opening while recording")
            let _: Recording = try client.call(.stop)
            #expect(waitUntil(timeout: 10) { daemon.threads(named: "threaded-ml") == 0 },
                    "the device closed after recording \(index): \(daemon.threads(named: "threaded-ml")) open")
        }
        #expect(waitUntil(timeout: 10) { descriptors(of: daemon) <= baseline + 1 }, "descriptors back to \(baseline): \(descriptors(of: daemon))")
        // Listening holds one opening, which recordings share; unlisten closes it.
        let _: ListenResult = try client.call(.listen, ListenParams(preRoll: 1))
        for index in 0..<3 {
            let _: Recording = try client.call(.start, StartParams(name: "shared\(index)"))
            #expect(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime >= 0.2 } != nil)
            let _: Recording = try client.call(.stop)
            #expect(daemon.waitForStatus { $0.state == .listening } != nil)
            #expect(daemon.threads(named: "threaded-ml") == 1, "recordings while listening share its opening")
            #expect(daemon.threads(named: "recd-capture") == 1)
        }
        let _: ListenResult = try client.call(.unlisten)
        #expect(waitUntil(timeout: 10) { daemon.threads(named: "threaded-ml") == 0 && daemon.threads(named: "recd-capture") == 0 },
                "unlisten closed the device")
    }

    @Test func listenAtStartFromTheConfigurationAndOverMQTT() throws {
        let broker = try MosquittoBroker()
        let server = try PulseServer()
        try server.tone()
        let prefix = "recd/listen"
        let config = """
            [listen]
            enabled = true
            pre_roll = "3 s"
            [mqtt]
            enabled = true
            host = "127.0.0.1"
            port = \(broker.port)
            client_id = "recd-listen"
            topic_prefix = "\(prefix)"
            control = true

            """
        let watcher = try MQTTWatcher(port: broker.port, topics: ["\(prefix)/#", "homeassistant/#"])
        let daemon = try Daemon(device: TestDevices.paced(server), config: config)
        let status = try #require(daemon.waitForStatus { $0.listening != nil }, "listening from daemon start")
        #expect(status.listening?.preRollCapacity == 3)
        #expect(watcher.first("\(prefix)/listening", where: { $0.payload == "ON" }) != nil)
        #expect(watcher.first("\(prefix)/state", where: { $0.payload == "listening" }) != nil)
        // Home Assistant's listening switch, then the command, through the socket's table.
        let seen = watcher.messages.count
        try mqttPublish(port: broker.port, topic: "\(prefix)/command/listen_switch", payload: "OFF")
        #expect(watcher.first("\(prefix)/listening", after: seen, where: { $0.payload == "OFF" }) != nil)
        #expect(daemon.waitForStatus { $0.state == .idle } != nil)
        let again = watcher.messages.count
        try mqttPublish(port: broker.port, topic: "\(prefix)/command/listen", payload: #"{"id":"l1","preRoll":2}"#)
        let reply = try #require(watcher.first("\(prefix)/reply", after: again) { $0.json?["id"] as? String == "l1" })
        #expect(reply.json?["ok"] as? Bool == true, "\(reply.payload)")
        #expect(daemon.waitForStatus { $0.listening?.preRollCapacity == 2 } != nil)
        let discovery = watcher.first { $0.topic.hasPrefix("homeassistant/") && $0.payload.contains("_listening") }
        #expect(discovery != nil, "a Home Assistant entity for listening")
    }
}
