import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// Every format × every feature that cuts, pauses, loses, recovers or deletes files, through the
/// real recd on a real ALSA device; every file is read back by FFmpeg, an independent reader.
///
/// Each feature is one parameterized test over `AudioFileFormat.allCases` (a new format joins by
/// itself), so a failure names its cell: "segments by length" with argument `.aac`. Each cell
/// starts a fresh daemon: some bugs show only in a daemon's first recording of a format.
/// Cells that need no real time record from the unpaced file device (seconds of audio in
/// milliseconds); clock alignment, split, pre-roll, pause, device loss, kill -9 and retention
/// record from the paced PulseAudio device. Inputs are the counter pattern, so a lossless file can be
/// compared with the input sample for sample.
@Suite("combination matrix: format × feature")
struct CombinationMatrixTests {
    static let formats = AudioFileFormat.allCases
    let inputs = TemporaryDirectory()
    static let rate = 48000

    // MARK: Cells on the unpaced file device

    @Test("segments by length", arguments: formats)
    func segmentsByLength(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × segments by length"
        let input = writeCounterInput(inputs, seconds: 5)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "seg", format: format, sampleRate: Self.rate, channels: 2,
                                                                     duration: 2.5, segmentLength: 1))
        let ended = try #require(daemon.waitForStatus { $0.recording?.id == started.id && !$0.state.isActive }, "\(cell): never ended")
        #expect(ended.state.name == .finished, "\(cell): \(String(describing: ended.error))\n\(daemon.log.suffix(3000))")
        let files = try sessionFiles(daemon, started)
        // Unaligned segments hold exactly round(length × rate) frames; the duration ends the last.
        #expect(files.map(\.frames) == [48000, 48000, 24000], "\(cell): \(files.map(\.file))")
        #expect(files.map(\.segment) == [1, 2, 3], "\(cell)")
        let samples = try readBack(files, format: format, cell: cell)
        expectInput(samples, input.samples, format: format, frames: 120_000, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    /// A station of two sources (issue 53), from a fresh daemon: both begin at once in the
    /// format, with 1 s segments; each source's files, in its folder, are its own device's
    /// audio exactly (lossless) and read back by FFmpeg, and nothing else is on disk.
    @Test("two sources at once, with segments", arguments: formats)
    func twoSourcesAtOnce(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × two sources"
        let (east, west) = writeTwoSourceInputs(inputs, seconds: 5)
        let daemon = try Daemon(device: nil, config: sourceTables(["east": TestDevices.file(east.path), "west": TestDevices.file(west.path)]))
        // Both sent before either is answered: the two first recordings of the format race.
        let connections = try ["east", "west"].map { _ in try daemon.connect() }
        for (connection, source) in zip(connections, ["east", "west"]) {
            try connection.send(#"{"jsonrpc":"2.0","id":1,"method":"start","params":{"source":"\#(source)","name":"two","format":"\#(format.rawValue)","sampleRate":48000,"channels":2,"duration":2.5,"segmentLength":1}}"# + "\n")
        }
        for (connection, source) in zip(connections, ["east", "west"]) {
            let answer = try connection.nextObject(timeout: 30)
            #expect(answer["result"] != nil, "\(cell): \(source): \(answer)")
        }
        for (source, input) in [("east", east.samples), ("west", west.samples)] {
            let client = try daemon.connect()
            client.source = source
            guard waitUntil(timeout: 60, { (try? client.call(.status, as: StatusResult.self)).map { !$0.state.isActive && $0.recording != nil } ?? false }) else {
                Issue.record("\(cell): \(source) never ended\n\(daemon.log.suffix(3000))")
                continue
            }
            let ended: StatusResult = try client.call(.status)
            #expect(ended.state.name == .finished, "\(cell): \(source): \(String(describing: ended.error))")
            let list: RecordingsListResult = try client.call(.recordingsList)
            let files = list.recordings.sorted { ($0.segment ?? 0) < ($1.segment ?? 0) }
            #expect(files.map(\.frames) == [48000, 48000, 24000], "\(cell): \(source): \(files.map(\.file))")
            #expect(files.allSatisfy { $0.path.hasPrefix(daemon.recordings + "/" + source + "/") }, "\(cell): \(source): \(files.map(\.path))")
            let samples = try readBack(files, format: format, cell: cell + " (" + source + ")")
            expectInput(samples, input, format: format, frames: 120_000, cell: cell + " (" + source + ")")
            var onDisk: [String] = []
            let enumerator = FileManager.default.enumerator(atPath: daemon.recordings + "/" + source)
            while let path = enumerator?.nextObject() as? String {
                if (path as NSString).lastPathComponent.hasPrefix(".") {
                    if enumerator?.fileAttributes?[.type] as? FileAttributeType == .typeDirectory { enumerator?.skipDescendants() }
                    continue
                }
                if enumerator?.fileAttributes?[.type] as? FileAttributeType == .typeRegular { onDisk.append(path) }
            }
            #expect(onDisk.sorted() == files.map(\.file).sorted(), "\(cell): \(source): on disk \(onDisk)")
        }
    }

    @Test("a start at a later time", arguments: formats)
    func startAtALaterTime(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × start at a later time"
        let input = writeCounterInput(inputs, seconds: 4)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        let client = try daemon.connect()
        let at = Date().addingTimeInterval(1)
        let scheduled: Recording = try client.call(.start, StartParams(name: "later", format: format, sampleRate: Self.rate, channels: 2,
                                                                       duration: 2, at: at))
        // Until then, nothing: no device opened, no file.
        #expect(scheduled.path.isEmpty && scheduled.scheduledAt != nil, "\(cell): \(scheduled)")
        let early = try daemon.recordingFiles()
        #expect(early.isEmpty, "\(cell): \(early)")
        let ended = try #require(daemon.waitForStatus { $0.recording?.id == scheduled.id && $0.state.name == .finished },
                                 "\(cell): never ended\n\(daemon.log.suffix(3000))")
        // (When it began on the clock is StationTests' business, on the paced device: this one is unpaced.)
        let files = try sessionFiles(daemon, try #require(ended.recording, "\(cell)"))
        #expect(files.map(\.frames) == [96000], "\(cell): \(files.map(\.file))")
        #expect(files.first?.file == "later.\(format.fileExtension)", "\(cell)")
        let samples = try readBack(files, format: format, cell: cell)
        expectInput(samples, input.samples, format: format, frames: 96000, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    @Test("time-carrying file template", arguments: formats)
    func timeCarryingTemplate(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × time-carrying template"
        let input = writeCounterInput(inputs, seconds: 4)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "tmpl", format: format, sampleRate: Self.rate, channels: 2,
                                                                     duration: 2, fileTemplate: "{name}/%H%M%S"))
        let ended = try #require(daemon.waitForStatus { $0.recording?.id == started.id && !$0.state.isActive }, "\(cell): never ended")
        #expect(ended.state.name == .finished, "\(cell): \(String(describing: ended.error))\n\(daemon.log.suffix(3000))")
        let list: RecordingsListResult = try client.call(.recordingsList)
        #expect(list.recordings.count == 1, "\(cell): \(list.recordings.map(\.file))")
        let file = try #require(list.recordings.first, "\(cell): no file")
        #expect(file.frames == 96000, "\(cell)")
        // The name is the first frame's time of day (UTC), to the second.
        let stamp = try #require(file.file.firstMatch(of: /^tmpl\/(\d\d)(\d\d)(\d\d)\.[a-z0-9]+$/), "\(cell): \(file.file)")
        let secondOfDay = Int(stamp.1)! * 3600 + Int(stamp.2)! * 60 + Int(stamp.3)!
        let startedAt = try #require(file.startedAt ?? ended.recording?.startedAt, "\(cell)")
        let actual = startedAt.timeIntervalSince1970.truncatingRemainder(dividingBy: 86400)
        let offset = abs(Double(secondOfDay) - actual)
        #expect(min(offset, 86400 - offset) <= 1, "\(cell): \(file.file) named for \(startedAt)")
        // What status says the recording became is the file that is there.
        #expect(ended.recording?.path == file.path, "\(cell): status says \(ended.recording?.path ?? "nothing"), the file is \(file.path)")
        let samples = try readBack([file], format: format, cell: cell)
        expectInput(samples, input.samples, format: format, frames: 96000, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    /// Re-dating (issue 50): 2.5 s in 1 s segments named by strftime, recorded three days
    /// behind (libfaketime) by a kernel that says the clock is not synchronized; then the clock
    /// steps to the true time and is synchronized. Every file is re-dated in place and renamed:
    /// its start three days later (to 2 ms), listed as re-dated, its audio as it was recorded.
    @Test("re-dated once the clock is synchronized", .enabled(if: !Binaries.threadSanitized, ClockTests.noLibfaketimeUnderThreadSanitizer),
          arguments: formats)
    func redatedOnceTheClockIsSynchronized(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × re-dating"
        let input = writeCounterInput(inputs, seconds: 4)
        // The clock's test bed: the kernel's word through its interposer, libfaketime's offset.
        let station = ClockTests()
        let daemon = try station.daemon(discipline: "unsynchronized", fakeOffset: "-3d", device: TestDevices.file(input.path))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "redate", format: format, sampleRate: Self.rate, channels: 2,
                                                                     duration: 2.5, segmentLength: 1))
        let ended = try #require(daemon.waitForStatus { $0.recording?.id == started.id && !$0.state.isActive }, "\(cell): never ended")
        #expect(ended.state.name == .finished, "\(cell): \(String(describing: ended.error))\n\(daemon.log.suffix(3000))")
        let before = try sessionFiles(daemon, started)
        #expect(before.count == 3 && before.allSatisfy { $0.startClock == .unsynchronized },
                "\(cell): \(before.map { "\($0.file) \(String(describing: $0.startClock))" })")

        try station.setFakeOffset("+0")
        try station.setDiscipline("synchronized")
        _ = try station.clock(daemon)
        var after: [RecordingFile] = []
        let redated = waitUntil(timeout: 30) {
            after = (try? sessionFiles(daemon, started)) ?? []
            // Re-dated, then renamed: done once no file has its old name.
            return after.count == before.count && after.allSatisfy { $0.startClock == .redated }
                && Set(after.map(\.file)).isDisjoint(with: before.map(\.file))
        }
        #expect(redated, "\(cell): \(after.map { "\($0.file) \(String(describing: $0.startClock))" })\n\(daemon.log.suffix(3000))")
        for (file, was) in zip(after, before) {
            let moved = (file.startedAt ?? .distantPast).timeIntervalSince(was.startedAt ?? .distantFuture)
            #expect(abs(moved - 259_200) < 0.002, "\(cell): \(was.file) moved by \(moved) s")
            #expect(file.file != was.file && file.file.hasPrefix("redate/"), "\(cell): \(was.file) -> \(file.file)")
            #expect(file.frames == was.frames, "\(cell)")
        }
        let samples = try readBack(after, format: format, cell: cell)
        expectInput(samples, input.samples, format: format, frames: 120_000, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
        #expect(daemon.terminate() == 0)
    }

    // MARK: Cells on the paced PulseAudio device

    @Test("segments on the clock", arguments: formats)
    func segmentsOnTheClock(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × segments on the clock"
        let server = try PulseServer()
        try server.tone()
        let input = writeCounterInput(inputs, seconds: 30)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "clock", format: format, sampleRate: Self.rate, channels: 2,
                                                                     duration: 2.5, segmentLength: 1, alignToClock: true))
        let ended = try #require(daemon.waitForStatus { $0.recording?.id == started.id && !$0.state.isActive }, "\(cell): never ended")
        #expect(ended.state.name == .finished, "\(cell): \(String(describing: ended.error))\n\(daemon.log.suffix(3000))")
        let files = try sessionFiles(daemon, started)
        // The duration is exact across the cuts; where they fall follows the clock.
        #expect(files.reduce(0) { $0 + $1.frames } == 120_000, "\(cell): \(files.map(\.frames))")
        #expect((2...3).contains(files.count), "\(cell): \(files.map(\.file))")
        // The first segment ends at the next boundary at least min(1 s, half the length) away
        // (SegmentClock; protocol.md says "at least a second", true from a length of 2 s).
        if let first = files.first {
            #expect(first.frames >= 24000 && first.frames < 72000 + 2400,
                    "\(cell): the first segment holds \(first.frames) frames; all: \(files.map { "\($0.file) \($0.frames) from \($0.startedAt.map { "\($0.timeIntervalSince1970)" } ?? "?")" })")
        }
        for file in files.dropFirst() {
            let time = try #require(file.startedAt, "\(cell): \(file.file) has no start").timeIntervalSince1970
            #expect(abs(time - time.rounded()) < 0.05, "\(cell): \(file.file) starts \(time - time.rounded()) s off its boundary")
        }
        for file in files.dropFirst().dropLast() {
            #expect(abs(Int(file.frames) - 48000) < 2400, "\(cell): \(file.file) holds \(file.frames) frames")
        }
        let samples = try readBack(files, format: format, cell: cell)
        expectInput(samples, input.samples, format: format, frames: 120_000, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    @Test("split", arguments: formats)
    func split(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × split"
        let server = try PulseServer()
        let input = writeCounterInput(inputs, seconds: 30)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server))
        let client = try daemon.connect()
        // No duration: the recording ends when the test stops it, so no split can meet its end.
        // (With one, a loaded machine made a split at 1.6 s of a 6 s recording come after the
        // end: currentTime counts frames written, and the writer can trail capture by seconds.)
        let started: Recording = try client.call(.start, StartParams(name: "cut", format: format, sampleRate: Self.rate, channels: 2))
        var closed: [Segment] = []
        for at in [0.7, 1.6] {
            #expect(daemon.waitForStatus { $0.currentTime >= at } != nil, "\(cell): never reached \(at) s")
            let result: SplitResult = try client.call(.split)
            #expect(result.recording?.segment != nil, "\(cell): no next segment after the split")
            closed.append(result.closed)
        }
        // The third file holds audio too before the stop.
        #expect(daemon.waitForStatus { $0.currentTime >= 2.2 } != nil, "\(cell): never reached 2.2 s")
        let stopped: Recording = try client.call(.stop)
        let files = try sessionFiles(daemon, started)
        #expect(files.map(\.file) == ["cut", "cut-2", "cut-3"].map { "\($0).\(format.fileExtension)" }, "\(cell)")
        try #require(files.count == 3, "\(cell)")
        // Each split closed its file where it said, after what status had shown written; the
        // three files hold every frame the recording counts, the input without a frame lost or
        // repeated at a cut.
        #expect(files.prefix(2).map(\.frames) == closed.map(\.frames), "\(cell): files \(files.map(\.frames)), splits said \(closed.map(\.frames))")
        #expect(files[0].frames >= 33600 && files[0].frames + files[1].frames >= 76800 && files[2].frames > 0,
                "\(cell): \(files.map(\.frames))")
        let total = Int(files.reduce(0) { $0 + $1.frames })
        #expect(Int64(total) == stopped.frames, "\(cell): \(files.map(\.frames)), the recording counts \(stopped.frames)")
        let samples = try readBack(files, format: format, cell: cell)
        expectInput(samples, input.samples, format: format, frames: total, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    @Test("pre-roll while listening, with segments and a duration", arguments: formats)
    func preRollWhileListening(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × pre-roll"
        let server = try PulseServer()
        let input = writeCounterInput(inputs, seconds: 30)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server),
                                config: "[recording]\nsample_rate = 48000\nchannels = 2\n")
        let client = try daemon.connect()
        let _: ListenResult = try client.call(.listen, ListenParams(preRoll: 1))
        try #require(daemon.waitForStatus { ($0.listening?.preRollHeld ?? 0) >= 1 } != nil, "\(cell): the ring never filled")
        let started: Recording = try client.call(.start, StartParams(name: "pre", format: format, sampleRate: Self.rate, channels: 2,
                                                                     duration: 1.5, segmentLength: 1, preRoll: 1))
        let preRoll = try #require(started.preRoll, "\(cell): no pre-roll")
        #expect(preRoll.frames == 48000, "\(cell): \(preRoll)")
        let ended = try #require(daemon.waitForStatus { $0.lastSegment?.recordingId == started.id && $0.state == .listening },
                                 "\(cell): never ended")
        #expect(ended.error == nil, "\(cell): \(String(describing: ended.error))\n\(daemon.log.suffix(3000))")
        let files = try sessionFiles(daemon, started)
        // The duration counts from the start: 1 s of pre-roll + 1.5 s, in 1 s segments.
        #expect(files.map(\.frames) == [48000, 48000, 24000], "\(cell): \(files.map(\.file)) \(files.map(\.frames))")
        let samples = try readBack(files, format: format, cell: cell)
        expectInput(samples, Array(input.samples[Int(preRoll.firstFrame * 2)...]), format: format, frames: 120_000, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    @Test("a tap beside the recording, with pre-roll and segments", arguments: formats)
    func tapBesideTheRecording(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × tap"
        let server = try PulseServer()
        let input = writeCounterInput(inputs, seconds: 30)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server),
                                config: "[recording]\nsample_rate = 48000\nchannels = 2\n[listen]\npre_roll = 1\n")
        let client = try daemon.connect()
        // The tap opens the device (listening for it, with the configured pre-roll).
        let tap = try TapCollector(socket: daemon.socket, params: TapParams(rate: Self.rate, channels: 2))
        try #require(daemon.waitForStatus { ($0.listening?.preRollHeld ?? 0) >= 1 } != nil, "\(cell): the ring never filled")
        let started: Recording = try client.call(.start, StartParams(name: "tapped", format: format, sampleRate: Self.rate, channels: 2,
                                                                     duration: 1.5, segmentLength: 1, preRoll: 1))
        let preRoll = try #require(started.preRoll, "\(cell): no pre-roll")
        let ended = try #require(daemon.waitForStatus { $0.lastSegment?.recordingId == started.id && $0.state == .listening },
                                 "\(cell): never ended")
        #expect(ended.error == nil, "\(cell): \(String(describing: ended.error))\n\(daemon.log.suffix(3000))")
        let files = try sessionFiles(daemon, started)
        #expect(files.map(\.frames) == [48000, 48000, 24000], "\(cell): \(files.map(\.file)) \(files.map(\.frames))")
        let samples = try readBack(files, format: format, cell: cell)
        expectInput(samples, Array(input.samples[Int(preRoll.firstFrame * 2)...]), format: format, frames: 120_000, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
        // The tap heard it all meanwhile: every frame once, in order (the counter steps by 7).
        #expect(waitUntil { tap.frames >= 4 * 48000 }, "\(cell): the tap stalled at \(tap.frames) frames")
        tap.stop()
        expectContiguous(tap.received, cell)
        let heard = tap.int16Samples
        let left = stride(from: 0, to: heard.count, by: 2).map { heard[$0] }
        if let index = left.indices.dropFirst().first(where: { (Int(left[$0]) - Int(left[$0 - 1]) + 65536) % 65536 != 7 }) {
            Issue.record("\(cell): the tap's frame \(index) does not follow the one before")
        }
        #expect(daemon.waitForStatus { $0.state == .idle && $0.taps == nil } != nil, "\(cell): the device stays open after the tap")
    }

    @Test("sound-activated events, cut at a maximum length", arguments: formats)
    func soundActivatedEvents(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × trigger"
        let server = try PulseServer()
        // 2.0–4.5 s: an event of 3.5 s with its pre-roll and hang, cut at 2 s; 6.0–6.6: one of 1.6 s.
        let scene = Signal.triggerScene(seconds: 30, bursts: [(2.0, 4.5), (6.0, 6.6)])
        let path = inputs.file("scene-\(format.rawValue).raw")
        Signal.write(scene, to: path)
        let daemon = try Daemon(device: TestDevices.pacedFile(path, server: server),
                                config: "[recording]\nsample_rate = 48000\nchannels = 2\n")
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.trigger]))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(
            name: "events", format: format, sampleRate: Self.rate, channels: 2,
            trigger: TriggerParams(highPass: 100, threshold: -35, hang: 0.5, maximumLength: 2, preRoll: 0.5)))
        let events = TriggerTests.collectEvents(watcher, timeout: 60) { $0.filter { $0.kind == .closed }.count == 3 }
        let closed = events.filter { $0.kind == .closed }
        try #require(closed.count == 3, "\(cell): \(events.map { "\($0.kind) \($0.index) \($0.reason ?? "")" })\n\(daemon.log.suffix(3000))")
        let _: Recording = try client.call(.stop)
        #expect(closed.map { $0.reason ?? "" } == ["maximumLength", "hang", "hang"], "\(cell)")
        let files = try sessionFiles(daemon, started)
        #expect(files.map(\.segment) == [1, 2, 3], "\(cell): \(files.map(\.file))")
        try #require(files.count == 3)
        #expect(files[0].frames == 96000, "\(cell): cut at the maximum length: \(files.map(\.frames))")
        // The first event: 0.5 s of pre-roll before 2.0 s, to the hang after 4.5 s (a block either way).
        let firstEvent = Int(files[0].frames + files[1].frames)
        #expect(abs(firstEvent - 168_000) <= 960, "\(cell): \(files.map(\.frames))")
        #expect(closed[0].firstFrame == 72000 && closed[1].firstFrame == 72000 + 96000, "\(cell): \(closed.map(\.firstFrame))")
        let samples = try readBack(files, format: format, cell: cell)
        expectInput(Array(samples.prefix(firstEvent * 2)), Array(scene[(72000 * 2)...]), format: format, frames: firstEvent, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    @Test("pause and resume", arguments: formats)
    func pauseAndResume(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × pause/resume"
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        // The pause must come before the recording's end: it is sent once 0.6 s are captured
        // (not written: the writer can trail capture by seconds on a loaded machine, and capture
        // never runs ahead of the device's clock), 3.4 s before the duration.
        let started: Recording = try client.call(.start, StartParams(name: "held", format: format, sampleRate: Self.rate, channels: 2,
                                                                     duration: 4))
        #expect(daemon.waitForStatus { $0.statistics.framesCaptured >= 28800 } != nil, "\(cell): never recorded")
        let paused: StateResult = try client.call(.pause)
        #expect(paused.state.name == .paused, "\(cell): \(paused.state)")
        let heldAt = (try client.call(.status) as StatusResult).currentTime
        Thread.sleep(forTimeInterval: 0.5)  // the pause lasts half a second: the scenario, not a wait
        #expect((try client.call(.status) as StatusResult).currentTime == heldAt, "\(cell): time went on while paused")
        let resumed: StateResult = try client.call(.resume)
        #expect(resumed.state.name == .recording, "\(cell): \(resumed.state)")
        let ended = try #require(daemon.waitForStatus { $0.recording?.id == started.id && !$0.state.isActive }, "\(cell): never ended")
        #expect(ended.state.name == .finished, "\(cell): \(String(describing: ended.error))\n\(daemon.log.suffix(3000))")
        let list: RecordingsListResult = try client.call(.recordingsList)
        #expect(list.recordings.map(\.file) == ["held.\(format.fileExtension)"], "\(cell)")
        #expect(list.recordings.first?.frames == 192_000, "\(cell): pauses excluded, the file holds the duration")
        _ = try readBack(list.recordings, format: format, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    @Test("device loss and return", arguments: formats)
    func deviceLossAndReturn(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × device loss and return"
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        // The device must go before the recording's end: once 0.7 s are captured (not written:
        // the writer can trail capture by seconds on a loaded machine, and capture never runs
        // ahead of the device's clock), 4.3 s before the duration.
        let started: Recording = try client.call(.start, StartParams(name: "outlive", format: format, sampleRate: Self.rate, channels: 2,
                                                                     duration: 5))
        #expect(daemon.waitForStatus { $0.statistics.framesCaptured >= 33600 } != nil, "\(cell): never recorded")
        server.kill()
        let waiting = try #require(daemon.waitForStatus { $0.state.name == .waitingForDevice || !$0.state.isActive },
                                   "\(cell): the loss was not noticed\n\(daemon.log.suffix(3000))")
        #expect(waiting.state.name == .waitingForDevice, "\(cell): \(waiting.state.name) \(String(describing: waiting.error))")
        try server.restart()
        try server.tone()
        let ended = try #require(daemon.waitForStatus { $0.recording?.id == started.id && !$0.state.isActive }, "\(cell): never ended")
        #expect(ended.state.name == .finished, "\(cell): \(String(describing: ended.error))\n\(daemon.log.suffix(3000))")
        let files = try sessionFiles(daemon, started)
        #expect(files.map(\.file) == ["outlive", "outlive-2"].map { "\($0).\(format.fileExtension)" }, "\(cell)")
        // The duration counts the frames of both files, not the gap.
        #expect(files.reduce(0) { $0 + $1.frames } == 240_000, "\(cell): \(files.map(\.frames))")
        _ = try readBack(files, format: format, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    @Test("kill -9 and recovery on the next start", arguments: formats)
    func killAndRecovery(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × kill -9 and recovery"
        let server = try PulseServer()
        let input = writeCounterInput(inputs, seconds: 30)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server))
        let client = try daemon.connect()
        let began = Date()
        let _: Recording = try client.call(.start, StartParams(name: "crash", format: format, sampleRate: Self.rate, channels: 2))
        #expect(daemon.waitForStatus { $0.currentTime >= 2.2 } != nil, "\(cell): never recorded")
        // What status says was written is a lower bound of what was at the kill (it is published
        // every tenth of a second, later on a busy machine); the paced device's clock since the
        // start is an upper bound.
        let recorded = (try client.call(.status) as StatusResult).currentTime
        daemon.process.signal(SIGKILL)
        let elapsed = Date().timeIntervalSince(began)
        _ = daemon.process.wait(timeout: 10)

        let next = try Daemon(device: "null", recordings: daemon.recordings)
        let list: RecordingsListResult = try next.connect().call(.recordingsList)
        #expect(list.recordings.map(\.file) == ["crash.\(format.fileExtension)"], "\(cell)\n\(next.log.suffix(3000))")
        let file = try #require(list.recordings.first, "\(cell): nothing recovered")
        // Everything the writer handed to the kernel: for libsndfile's formats all but what an
        // encoder still holds (a FLAC block, a few MP3 frames, an Ogg page: a quarter of a
        // second of Opus, SoundFileWriter.opusPageLatency) and the capture period in flight,
        // the audio after the last header refresh included (recovery sizes the file from its
        // data); an .m4a loses the fragment after the last checkpoint (the sync interval, a second).
        let kept = Double(file.frames) / Double(Self.rate)
        let loss = format == .aac || format == .alac ? 1.15 : 0.5
        #expect(kept > recorded - loss && kept <= elapsed + 0.5, "\(cell): kept \(kept) s of \(recorded) s (\(elapsed) s after the start)")
        if format == .aac || format == .alac {
            let boxes = FFmpegTools.topLevelBoxes(file.path)
            #expect(!boxes.contains("moof") && (boxes.firstIndex(of: "moov") ?? .max) < (boxes.firstIndex(of: "mdat") ?? -1),
                    "\(cell): rewritten with moov first: \(boxes)")
        }
        let samples = try readBack([file], format: format, cell: cell)
        expectInput(samples, input.samples, format: format, frames: Int(file.frames), cell: cell)
        try expectOnlyListedFiles(next, cell: cell)
    }

    @Test("retention deleting while recording", arguments: formats)
    func retentionWhileRecording(format: AudioFileFormat) throws {
        let cell = "\(format.rawValue) × retention while recording"
        let input = writeCounterInput(inputs, seconds: 30)
        let recordings = inputs.file("recordings")
        // Two older recordings of this format, made quickly on the file device: 3 s, then 1 s.
        let maker = try Daemon(device: TestDevices.file(input.path), recordings: recordings)
        let makerClient = try maker.connect()
        for (name, seconds) in [("old-1", 3.0), ("old-2", 1.0)] {
            let made: Recording = try makerClient.call(.start, StartParams(name: name, format: format, sampleRate: Self.rate, channels: 2,
                                                                           duration: seconds))
            #expect(maker.waitForStatus { $0.recording?.id == made.id && $0.state.name == .finished } != nil, "\(cell): \(name)")
        }
        let made: RecordingsListResult = try makerClient.call(.recordingsList)
        #expect(maker.terminate() == 0)
        let sizes = Dictionary(made.recordings.map { ($0.name, $0.size) }, uniquingKeysWith: { $1 })
        let old1 = try #require(sizes["old-1"], "\(cell): \(made.recordings.map(\.file))")
        let old2 = try #require(sizes["old-2"], "\(cell)")

        // "live" records the same input, paced: its size per second is the old recordings'.
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server), recordings: recordings)
        let client = try daemon.connect()
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.retention]))
        let live: Recording = try client.call(.start, StartParams(name: "live", format: format, sampleRate: Self.rate, channels: 2,
                                                                  duration: 2))
        #expect(daemon.waitForStatus { $0.currentTime >= 0.3 } != nil, "\(cell): never recorded")
        // Room for everything but the oldest: it goes now, while "live" is recorded; the 2 s of
        // "live" fit where the 3 s of old-1 were, so nothing more goes when it ends.
        // No grace: the deletion while recording is the cell (the grace has its own test).
        try "[retention]\nmax_total_size = \(old1 + old2 - 1)\ngrace = 0\n".write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        var deleted: [RetentionDeletion] = []
        while deleted.isEmpty, let notification = try? watcher.nextNotification(timeout: 20) {
            if case .retention(let deletion?) = notification.value { deleted.append(deletion) }
        }
        let ended = try #require(daemon.waitForStatus { $0.recording?.id == live.id && !$0.state.isActive }, "\(cell): never ended")
        #expect(ended.state.name == .finished, "\(cell): \(String(describing: ended.error))\n\(daemon.log.suffix(3000))")
        #expect(deleted.map(\.file) == ["old-1.\(format.fileExtension)"], "\(cell): \(daemon.log.suffix(3000))")
        if let deletion = deleted.first, let endedAt = ended.recording?.endedAt {
            #expect(deletion.deletedAt < endedAt, "\(cell): deleted at \(deletion.deletedAt), the recording ended at \(endedAt)")
        }
        let list: RecordingsListResult = try client.call(.recordingsList)
        #expect(list.recordings.map(\.name).sorted() == ["live", "old-2"], "\(cell): \(list.recordings.map(\.file))")
        let kept = list.recordings.filter { $0.name == "live" }
        #expect(kept.first?.frames == 96000, "\(cell)")
        _ = try readBack(list.recordings, format: format, cell: cell)
        try expectOnlyListedFiles(daemon, cell: cell)
    }

    // MARK: Reading back

    /// The recording's files as recd lists them, in segment order.
    func sessionFiles(_ daemon: Daemon, _ recording: Recording) throws -> [RecordingFile] {
        let list: RecordingsListResult = try daemon.connect().call(.recordingsList)
        return list.recordings.filter { $0.session == recording.id || $0.path == recording.path }
            .sorted { ($0.segment ?? 0, $0.file) < ($1.segment ?? 0, $1.file) }
    }

    /// Reads every file with FFmpeg: the codec and format it should have, the frame count recd
    /// lists declared in the file (the edit list, the Ogg granule, the header) and decoded.
    /// Returns the decoded samples of all the files, concatenated.
    @discardableResult
    func readBack(_ files: [RecordingFile], format: AudioFileFormat, cell: String) throws -> [Int16] {
        var all: [Int16] = []
        for file in files {
            let stream: FFmpegTools.Stream
            do {
                stream = try FFmpegTools.probe(file.path)
            } catch {
                Issue.record("\(cell): ffprobe cannot read \(file.file): \(error)")
                continue
            }
            #expect(Self.codecs[format]?.contains(stream.codecName) == true, "\(cell): \(file.file) holds \(stream.codecName)")
            #expect(stream.sampleRate == Self.rate && stream.channels == 2, "\(cell): \(file.file) \(stream.sampleRate) Hz \(stream.channels) ch")
            let samples = try FFmpegTools.decodeInt16(file.path)
            let decoded = Int64(samples.count / 2)
            all += samples
            // Hours of audio, not more: a file that says Int64.max frames has lost its length.
            guard (0...Int64(Self.rate) * 3600).contains(file.frames) else {
                Issue.record("\(cell): recd lists \(file.frames) frames for \(file.file) (ffprobe: \(stream.frames.map(String.init) ?? "no length"), decoded \(decoded))")
                continue
            }
            if let declared = stream.frames {
                #expect(Self.declaredExtra(format).contains(declared - file.frames),
                        "\(cell): \(file.file) declares \(declared) frames, recd lists \(file.frames)")
            } else {
                Issue.record("\(cell): \(file.file) declares no length")
            }
            if format == .mp3 && file.frames < 1152 {
                // Shorter than one MPEG frame (a last segment of a few ms: the duration ends it
                // just after a boundary, about one run in 40): the file declares its length
                // (checked above), but FFmpeg's decoder gives the whole first frame less its
                // start delay, 1199 frames, whatever the length. Files of a frame or more decode exact.
                #expect(decoded <= 1199, "\(cell): \(file.file) decodes to \(decoded) frames, recd lists \(file.frames)")
            } else {
                #expect(Self.decodedExtra(format).contains(decoded - file.frames),
                        "\(cell): \(file.file) decodes to \(decoded) frames, recd lists \(file.frames)")
            }
            if format == .vorbis {
                // libvorbisfile, the reference decoder, through sox: exact.
                let scratch = TemporaryDirectory()
                let output = scratch.file("decoded.raw")
                let reference = try run("/usr/bin/sox", [file.path, "-t", "raw", "-e", "signed-integer", "-b", "16", output])
                #expect(reference.status == 0, "\(cell): sox: \(reference.stderr)")
                let size = (try? FileManager.default.attributesOfItem(atPath: output)[.size] as? Int) ?? 0
                let frames = Int64(size / 4)
                withExtendedLifetime(scratch) {}
                #expect(frames == file.frames, "\(cell): libvorbisfile decodes \(file.file) to \(frames) frames, recd lists \(file.frames)")
            }
        }
        return all
    }

    /// What ffprobe calls each format's codec.
    static let codecs: [AudioFileFormat: Set<String>] = [
        .wav: ["pcm_s16le"], .flac: ["flac"], .opus: ["opus"], .vorbis: ["vorbis"], .caf: ["pcm_s16le", "pcm_s16be"],
        .aac: ["aac"], .alac: ["alac"], .mp3: ["mp3"],
    ]

    /// How much more than the frames recd wrote a file may declare: nothing where the format
    /// says its length exactly (a PCM header, FLAC's STREAMINFO, Vorbis's last granule, the
    /// MPEG-4 edit list). ffprobe counts an Opus stream's pre-skip (312 frames from libopus) in
    /// its length, and an MP3's in whole 1152-frame blocks with the encoder's delay and padding.
    static func declaredExtra(_ format: AudioFileFormat) -> ClosedRange<Int64> {
        switch format {
        case .opus: 0...312
        case .mp3: 0...2 * 1152
        default: 0...0
        }
    }

    /// How much more than the frames recd wrote FFmpeg may decode: nothing but for AAC, which it
    /// decodes in whole 1024-frame blocks past the edit list's end (a player that honours the
    /// edit list, GStreamer's, stops at the end), and Vorbis, which FFmpeg trims by its own
    /// reading of the pages: short files by up to a block more than libvorbisfile (0.3 s: 128
    /// frames fewer), and, once in a fresh-clone run, a 0.72 s file cut by a device loss not at
    /// all at its end (929 frames more: the last packet's whole output, at most 1024 with
    /// libvorbis's 2048-frame blocks), while its granule and libvorbisfile were exact. The
    /// length is checked exactly by the granule (`declaredExtra`) and by libvorbisfile.
    static func decodedExtra(_ format: AudioFileFormat) -> ClosedRange<Int64> {
        switch format {
        case .aac: 0...1024
        case .vorbis: -256...1024
        default: 0...0
        }
    }

    /// For a lossless format, the decoded samples are the input's first `frames` frames exactly.
    func expectInput(_ samples: [Int16], _ input: [Int16], format: AudioFileFormat, frames: Int, cell: String) {
        guard !format.isLossy else { return }
        guard frames >= 0 && frames <= input.count / 2 else {
            Issue.record("\(cell): \(frames) frames expected, more than the input holds")
            return
        }
        #expect(samples.count == frames * 2, "\(cell): decoded \(samples.count / 2) frames of \(frames)")
        let count = min(samples.count, frames * 2, input.count)
        if let index = (0..<count).first(where: { samples[$0] != input[$0] }) {
            Issue.record("\(cell): the files, concatenated, differ from the input at frame \(index / 2) of \(count / 2)")
        }
    }

    /// No `.part` or any other file but the ones recd lists is left in the recordings directory.
    func expectOnlyListedFiles(_ daemon: Daemon, cell: String) throws {
        let list: RecordingsListResult = try daemon.connect().call(.recordingsList)
        let listed = Set(list.recordings.map(\.file))
        var onDisk: Set<String> = []
        let enumerator = FileManager.default.enumerator(atPath: daemon.recordings)
        while let path = enumerator?.nextObject() as? String {
            let name = (path as NSString).lastPathComponent
            if name.hasPrefix(".") {
                if enumerator?.fileAttributes?[.type] as? FileAttributeType == .typeDirectory { enumerator?.skipDescendants() }
                continue
            }
            if enumerator?.fileAttributes?[.type] as? FileAttributeType == .typeRegular { onDisk.insert(path) }
        }
        #expect(onDisk == listed, "\(cell): on disk \(onDisk.sorted()), listed \(listed.sorted())")
    }
}
