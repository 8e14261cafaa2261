import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// A tap read on a thread of its own until `stop()` or the stream's end, keeping every chunk.
final class TapCollector: @unchecked Sendable {
    // @unchecked: `chunks` and `ended` are touched only under `lock` (NSLock, which
    // ThreadSanitizer sees).
    let reader: TapReader
    private let lock = NSLock()
    private var chunks: [(header: TapChunkHeader, payload: [UInt8])] = []
    private var ended = false
    private var paused = false

    init(socket: String, params: TapParams) throws {
        reader = try TapReader(path: socket, params: params)
        Thread.detachNewThread { [self] in
            while true {
                while lock.withLock({ paused }) { usleep(10_000) }
                guard let chunk = try? reader.next() else { break }
                lock.withLock { chunks.append(chunk) }
            }
            lock.withLock { ended = true }
        }
    }

    var received: [(header: TapChunkHeader, payload: [UInt8])] { lock.withLock { chunks } }
    var hasEnded: Bool { lock.withLock { ended } }
    var frames: Int { lock.withLock { chunks.reduce(0) { $0 + Int($1.header.frames) } } }

    /// Stops reading (the socket fills, recd must drop) until `resume()`.
    func pause() { lock.withLock { paused = true } }
    func resume() { lock.withLock { paused = false } }

    /// Leaves: the connection closes, recd ends this tap.
    func stop() {
        reader.connection.interrupt()
        _ = waitUntil(timeout: 10) { self.hasEnded }
    }

    var int16Samples: [Int16] {
        received.flatMap { chunk in chunk.payload.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) } }
    }

    var floatSamples: [Float] {
        received.flatMap { chunk in chunk.payload.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) } }
    }
}

/// Positions follow on from chunk to chunk with nothing lost.
func expectContiguous(_ chunks: [(header: TapChunkHeader, payload: [UInt8])], _ what: String,
                      sourceLocation: SourceLocation = #_sourceLocation) {
    var next: UInt64 = 0
    for (index, chunk) in chunks.enumerated() {
        guard chunk.header.position == next, chunk.header.lostFrames == 0, chunk.header.flags & TapChunkHeader.gapFlag == 0 else {
            Issue.record("\(what): chunk \(index) at \(chunk.header.position), expected \(next); lost \(chunk.header.lostFrames), flags \(chunk.header.flags)",
                         sourceLocation: sourceLocation)
            return
        }
        next += UInt64(chunk.header.frames)
    }
}

/// Taps through the real recd: other programs hear the input in a format of their own, bit for
/// bit (in the device's format) or converted by soxr, each chunk placed on the capture clock,
/// never slowing the recording; the device opens for them and closes after them.
@Suite("audio taps")
struct TapTests {
    let inputs = TemporaryDirectory()

    /// Where `needle`'s first frames are in `haystack` (interleaved stereo), as a sample index.
    func offset(of needle: [Int16], in haystack: [Int16]) -> Int? {
        let probe = Array(needle.prefix(64))
        guard probe.count == 64 else { return nil }
        var index = 0
        while index + probe.count <= haystack.count {
            if haystack[index] == probe[0], haystack[index..<(index + 64)].elementsEqual(probe) { return index }
            index += 2
        }
        return nil
    }

    @Test func aTapInTheDevicesFormatIsTheRecordedFileBitForBitOnTheSameClock() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60, seed: 0x2345_6789)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server),
                                config: "[recording]\nformat = \"wav\"\nsample_rate = 48000\nchannels = 2\n")
        let client = try daemon.connect()
        #expect(daemon.threads(named: "recd-capture") == 0, "idle: the device is closed")

        // A tap on an idle daemon opens the device (listening) for it.
        let tap = try TapCollector(socket: daemon.socket, params: TapParams())
        #expect(tap.reader.result.format == TapFormat(sampleRate: 48000, channels: 2, encoding: .s16le))
        #expect(tap.reader.result.headerBytes == 40)
        let listening = try #require(daemon.waitForStatus { $0.state == .listening && $0.taps?.count == 1 })
        #expect(listening.taps?.first?.format == tap.reader.result.format)
        #expect(waitUntil { tap.frames >= 48000 }, "a second of audio: \(tap.frames) frames")

        // A recording starts and stops under it: the tap goes on, losing nothing.
        let started: Recording = try client.call(.start, StartParams(name: "take", preRoll: 0))
        #expect(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime >= 2 } != nil)
        let stopped: Recording = try client.call(.stop)
        let atStop = tap.frames
        #expect(waitUntil { tap.frames >= atStop + 48000 }, "the tap goes on after the recording")
        let sent = try #require(daemon.waitForStatus { ($0.taps?.first?.framesSent ?? 0) >= Int64(atStop) }?.taps?.first)
        #expect(sent.chunksDropped == 0)
        tap.stop()

        let chunks = tap.received
        expectContiguous(chunks, "the tap across a start and a stop")
        let samples = tap.int16Samples
        let tapStart = try #require(offset(of: samples, in: input.samples), "the tap's audio is the input's")
        #expect(samples.elementsEqual(input.samples[tapStart..<(tapStart + samples.count)]), "bit for bit, contiguous")

        let file = try SoundFileReader(path: daemon.recordings + "/take.wav").readAllInt16()
        #expect(Int64(file.count / 2) == stopped.frames)
        let fileStart = try #require(offset(of: file, in: input.samples))
        let inTap = (fileStart - tapStart) / 2
        try #require(inTap >= 0 && (inTap + Int(stopped.frames)) * 2 <= samples.count, "the tap spans the recording")
        #expect(samples[(inTap * 2)..<((inTap + Int(stopped.frames)) * 2)].elementsEqual(file), "the tap is the file over its frames")

        // The file's first frame, on the tap's clock: where the file says it began (its bext
        // chunk, read back by recordings.info; the wire gives milliseconds, hence 1.5 ms).
        let chunk = try #require(chunks.last { $0.header.position <= UInt64(inTap) })
        let tapTime = chunk.header.captureTime + Double(UInt64(inTap) - chunk.header.position) / 48000
        let info: RecordingFile = try client.call(.recordingsInfo, RecordingNameParams(name: "take"))
        let startedAt = try #require(info.startedAt).timeIntervalSince1970
        #expect(abs(tapTime - startedAt) < 0.0015, "tap \(tapTime), file \(startedAt)")
        _ = started
        // And every chunk's time is the engine's estimate as it went out: less its position, it
        // only moves earlier, as the engine finds a less delayed read (within a minute, which
        // this test is; a step of 1.4 ms came after the first chunk once, under TSan).
        var origin = Double.infinity
        for chunk in chunks {
            let implied = chunk.header.captureTime - Double(chunk.header.position) / 48000
            if implied > origin + 0.000_01 {
                Issue.record("chunk at \(chunk.header.position): its time moved later by \(implied - origin) s")
                break
            }
            origin = implied
        }

        // The tap left: listening that only it needed ends, and the device closes.
        #expect(daemon.waitForStatus { $0.state == .idle && $0.taps == nil && $0.listening == nil } != nil)
        #expect(waitUntil(timeout: 10) { daemon.threads(named: "recd-capture") == 0 }, "the device closed after the tap")
    }

    @Test func aTapMayBeginWithThePreRollListeningHolds() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60, seed: 0x3456_789A)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server))
        let client = try daemon.connect()
        let _: ListenResult = try client.call(.listen, ListenParams(preRoll: 3))
        try #require(daemon.waitForStatus { ($0.listening?.preRollHeld ?? 0) >= 3 } != nil, "the ring fills")
        let tap = try TapCollector(socket: daemon.socket, params: TapParams(rate: 48000, channels: 2, preRoll: 1.5))
        #expect(tap.reader.result.preRoll == 1.5, "the stream begins 1.5 s back")
        #expect(waitUntil { tap.frames >= 72000 + 48000 })
        tap.stop()
        let chunks = tap.received
        expectContiguous(chunks, "pre-roll, then live input")
        let preRolled = chunks.prefix { $0.header.flags & TapChunkHeader.preRollFlag != 0 }.reduce(0) { $0 + Int($1.header.frames) }
        #expect(preRolled == 72000, "the pre-roll's chunks say so")
        let samples = tap.int16Samples
        let start = try #require(offset(of: samples, in: input.samples))
        #expect(samples.elementsEqual(input.samples[start..<(start + samples.count)]), "the ring's frames and the live ones, contiguous")
        // Its first frame was captured 1.5 s before the tap's first live frame.
        let live = try #require(chunks.first { $0.header.flags & TapChunkHeader.preRollFlag == 0 })
        #expect(abs(live.header.captureTime - chunks[0].header.captureTime - 1.5) < 0.001)
        // The tap leaves; listening, asked for by a client, goes on.
        #expect(daemon.waitForStatus { $0.taps == nil && $0.state == .listening } != nil)
    }

    @Test func aLongPreRollArrivesWhole() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60, seed: 0x4567_89AB)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server))
        let client = try daemon.connect()
        let _: ListenResult = try client.call(.listen, ListenParams(preRoll: 10))
        try #require(daemon.waitForStatus(timeout: 60) { ($0.listening?.preRollHeld ?? 0) >= 10 } != nil, "the ring fills")
        let tap = try TapCollector(socket: daemon.socket, params: TapParams(rate: 16000, channels: 1, preRoll: 10))
        #expect(abs(tap.reader.result.preRoll - 10) < 0.01, "\(tap.reader.result.preRoll)")
        #expect(waitUntil { tap.frames >= 16000 * 11 })
        tap.stop()
        let chunks = tap.received
        expectContiguous(chunks, "10 s of pre-roll at once, then live input")
        let preRolled = chunks.prefix { $0.header.flags & TapChunkHeader.preRollFlag != 0 }.reduce(0) { $0 + Int($1.header.frames) }
        // Converted, the chunk at the boundary may hold a little of both sides (soxr holds
        // back part of the last replayed chunk, up to 8192 device frames): within 1 %.
        #expect(abs(preRolled - 160_000) < 1600, "all 10 s: \(preRolled) frames")
        #expect(try #require(daemon.waitForStatus { $0.taps == nil }).state == .listening)
    }

    @Test func tapsAtOtherRatesAreTheInputConvertedBySoxrAtOnce() throws {
        let server = try PulseServer()
        try server.tone()
        let input = noiseInput(inputs, seconds: 60, seed: 0x2345_6789)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server),
                                config: "[recording]\nformat = \"wav\"\nsample_rate = 48000\nchannels = 2\n[listen]\npre_roll = 5\n")
        // On an idle daemon, with pre-roll: the tap begins with the device's first frame, which
        // on the paced file device is the input's first frame.
        let small = try TapCollector(socket: daemon.socket, params: TapParams(rate: 16000, channels: 1, encoding: .f32le, preRoll: 5))
        #expect(small.reader.result.format == TapFormat(sampleRate: 16000, channels: 1, encoding: .f32le))
        let phone = try TapCollector(socket: daemon.socket, params: TapParams(rate: 8000, channels: 1, encoding: .s16le))
        let shared = try TapCollector(socket: daemon.socket, params: TapParams(rate: 22050, channels: 1, encoding: .f32le))
        #expect(waitUntil { shared.frames >= 22050 })
        let joining = try TapCollector(socket: daemon.socket, params: TapParams(rate: 22050, channels: 1, encoding: .f32le))
        #expect(waitUntil { small.frames >= 16000 * 4 && phone.frames >= 8000 * 3 && joining.frames >= 22050 })
        let status = try #require(daemon.waitForStatus { $0.taps?.count == 4 })
        #expect(Set(status.taps?.map(\.format.sampleRate) ?? []) == [16000, 8000, 22050])
        let origin = try #require(status.listening?.firstFrameAt).timeIntervalSince1970
        for tap in [small, phone, shared, joining] { tap.stop() }
        for (tap, name) in [(small, "16 kHz"), (phone, "8 kHz"), (shared, "22.05 kHz"), (joining, "22.05 kHz, joined")] {
            expectContiguous(tap.received, name)
        }

        // The 16 kHz tap against libsoxr converting the input from its first frame in one call
        // (Tests/reference/soxr_mono.c: the same mix, the same quality): the same samples.
        // Its position 0 is the device's first frame, on the engine's clock: the last chunk's
        // time less its position (the estimate then, as the status's; the first chunk went out
        // with the first, less settled, estimate).
        let last = try #require(small.received.last)
        let implied = last.header.captureTime - Double(last.header.position) / 16000
        #expect(abs(implied - origin) < 0.001, "the tap's first frame is the device's first: \(implied), \(origin)")
        let binary = inputs.file("soxr_mono")
        let cc = try run("/usr/bin/cc", ["-O2", "-o", binary, Self.reference + "/soxr_mono.c", "-lsoxr"])
        #expect(cc.status == 0, "\(cc.stderr)")
        let slicePath = inputs.file("slice.raw")
        Signal.write(Array(input.samples[0..<(48000 * 8 * 2)]), to: slicePath)
        let referencePath = inputs.file("reference.f32")
        let converted = try run("/bin/sh", ["-c", "\"$0\" \"$1\" 48000 16000 > \"$2\"", binary, slicePath, referencePath])
        #expect(converted.status == 0, "\(converted.stderr)")
        let reference = try Data(contentsOf: URL(fileURLWithPath: referencePath)).withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        let samples = small.floatSamples
        let count = min(samples.count, reference.count - 1600)
        try #require(count > 16000 * 3)
        let worst = (0..<count).map { abs(samples[$0] - reference[$0]) }.max() ?? .infinity
        #expect(worst < 1e-6, "the tap is the input converted by soxr, sample for sample: largest difference \(worst)")

        // Two clients of one format share its conversion: the one that joined gets, chunk for
        // chunk, what the first got from there on.
        let firstChunks = shared.received.map(\.payload)
        let joined = joining.received.map(\.payload)
        let at = try #require(firstChunks.firstIndex(of: joined[0]), "the joining tap's first chunk is one the first tap got")
        let overlap = min(firstChunks.count - at, joined.count)
        #expect(overlap > 10 && Array(firstChunks[at..<(at + overlap)]) == Array(joined[0..<overlap]))
    }

    @Test func aTapThatStopsReadingLosesChunksAndSlowsNothingElse() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server),
                                config: "[recording]\nformat = \"wav\"\nsample_rate = 48000\nchannels = 2\n[server]\nclient_queue_bytes = 262144\n")
        let client = try daemon.connect()
        let stuck = try TapCollector(socket: daemon.socket, params: TapParams())
        let steady = try TapCollector(socket: daemon.socket, params: TapParams(rate: 16000, channels: 1))
        #expect(waitUntil { stuck.frames >= 4800 && steady.frames >= 1600 })
        stuck.pause()
        let recording: Recording = try client.call(.start, StartParams(name: "exact", duration: 12, preRoll: 0))
        #expect(recording.frameLimit == Int64(12 * 48000))
        let dropped = daemon.waitForStatus(timeout: 30) { ($0.taps?.first { $0.format.sampleRate == 48000 }?.chunksDropped ?? 0) > 0 }
        #expect(dropped != nil, "recd drops what the stuck tap leaves unread")
        // The stuck tap reads nothing until the recording has finished, and recd is back to
        // listening for the taps.
        let finished = try #require(daemon.waitForStatus(timeout: 60) { $0.state == .listening && $0.recording != nil })
        stuck.resume()
        #expect(finished.recording?.frames == Int64(12 * 48000), "the recording is exact")
        #expect(finished.statistics.xruns == 0)
        #expect(waitUntil { stuck.received.contains { $0.header.lostFrames > 0 } }, "the stuck tap is told what it lost")
        let told = try #require(stuck.received.first { $0.header.lostFrames > 0 })
        #expect(told.header.flags & TapChunkHeader.gapFlag != 0)
        stuck.stop()
        steady.stop()
        expectContiguous(steady.received, "the tap that kept reading")
        let file = try SoundFileReader(path: daemon.recordings + "/exact.wav")
        #expect(try file.readAllInt16().count == 12 * 48000 * 2)
    }

    @Test func aTapSurvivesADeviceLossWithTheGapMarked() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let tap = try TapCollector(socket: daemon.socket, params: TapParams(rate: 16000, channels: 1))
        #expect(waitUntil { tap.frames >= 16000 })
        server.kill()
        #expect(daemon.waitForStatus { $0.listening?.wait != nil } != nil, "the device is waited for")
        let before = tap.frames
        try server.restart()
        try server.tone()
        #expect(waitUntil(timeout: 30) { tap.frames >= before + 16000 }, "the tap goes on once the device is back")
        #expect(!tap.hasEnded)
        tap.stop()
        let chunks = tap.received
        let gaps = chunks.filter { $0.header.flags & TapChunkHeader.gapFlag != 0 }
        #expect(gaps.count == 1, "one gap: \(gaps.map(\.header))")
        if let gap = gaps.first, let index = chunks.firstIndex(where: { $0.header.position == gap.header.position }), index > 0 {
            let before = chunks[index - 1]
            let away = gap.header.captureTime - (before.header.captureTime + Double(before.header.frames) / 16000)
            #expect(away > 0.2, "time jumped over the loss: \(away) s")
            #expect(abs(Double(gap.header.lostFrames) - away * 16000) < 16000 * 0.05 + 2,
                    "lost frames \(gap.header.lostFrames) for \(away) s")
            #expect(gap.header.position == before.header.position + UInt64(before.header.frames) + UInt64(gap.header.lostFrames),
                    "the position jumps over what was lost")
        }
    }

    /// `chunk`: the same audio on the same clock in fewer, larger chunks (recd-rtsp's 40 ms),
    /// each of whole chunks a plain tap of the same format gets; a chunk being joined goes out
    /// when the device is lost, and the gap is said as a plain tap says it.
    @Test func aTapInLargerChunksIsThePlainTapsAudioAndTimesJoined() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let format = TapParams(rate: 48000, channels: 2, encoding: .s16le)
        let plain = try TapCollector(socket: daemon.socket, params: format)
        #expect(waitUntil { plain.frames >= 4800 })
        var joinedFormat = format
        joinedFormat.chunk = 0.05
        let joined = try TapCollector(socket: daemon.socket, params: joinedFormat)
        #expect(waitUntil { joined.frames >= 48000 })
        server.kill()
        #expect(daemon.waitForStatus { $0.listening?.wait != nil } != nil, "the device is waited for")
        let before = joined.frames
        try server.restart()
        try server.tone()
        #expect(waitUntil(timeout: 30) { joined.frames >= before + 48000 && plain.frames > joined.frames }, "both go on once the device is back")
        joined.stop()
        plain.stop()

        let plainChunks = plain.received
        let joinedChunks = joined.received
        // One hand-over gives both the same chunk at the same time: that places the joined tap's
        // stream in the plain one's.
        let first = try #require(joinedChunks.first)
        let start = try #require(plainChunks.first { $0.header.captureTime == first.header.captureTime }, "the plain tap's chunk of that time")
        let shift = start.header.position - first.header.position
        let gapIndex = try #require(joinedChunks.firstIndex { $0.header.flags & TapChunkHeader.gapFlag != 0 }, "the joined tap's gap")
        #expect(joinedChunks.filter { $0.header.flags & TapChunkHeader.gapFlag != 0 }.count == 1)
        var plainIndex = try #require(plainChunks.firstIndex { $0.header.position == start.header.position })
        for (index, chunk) in joinedChunks.enumerated() {
            // Each is at least 50 ms but the one the loss sent early, and the last (when the tap ended).
            if index != gapIndex - 1 && index != joinedChunks.count - 1 {
                #expect(chunk.header.frames >= 2400, "chunk \(index): \(chunk.header.frames) frames")
            }
            // Made of the plain tap's chunks: the same position (less the shift), time, loss and bytes.
            guard plainIndex < plainChunks.count else { break }
            let from = plainChunks[plainIndex]
            #expect(from.header.position == chunk.header.position + shift && from.header.captureTime == chunk.header.captureTime
                    && from.header.lostFrames == chunk.header.lostFrames && from.header.flags == chunk.header.flags,
                    "chunk \(index): \(chunk.header) against the plain tap's \(from.header)")
            var bytes: [UInt8] = []
            var frames: UInt32 = 0
            while frames < chunk.header.frames, plainIndex < plainChunks.count {
                bytes += plainChunks[plainIndex].payload
                frames += plainChunks[plainIndex].header.frames
                plainIndex += 1
            }
            if frames < chunk.header.frames { break }  // the plain tap ended first
            #expect(frames == chunk.header.frames && bytes == chunk.payload, "chunk \(index): the plain tap's audio, joined")
            if frames != chunk.header.frames || bytes != chunk.payload { break }
        }
        #expect(plainIndex > plainChunks.firstIndex { $0.header.flags & TapChunkHeader.gapFlag != 0 } ?? plainChunks.count,
                "compared across the gap")
        print("joined tap: \(joinedChunks.count) chunks, \(joined.frames) frames; plain tap: \(plainChunks.count) chunks, \(plain.frames) frames")
        #expect(joinedChunks.count * 4 < plainChunks.count, "\(joinedChunks.count) chunks joined from \(plainChunks.count)")
    }

    /// A chunk of more than a second, or less than a millisecond, is refused by name.
    @Test func aChunkOutOfRangeIsRefused() throws {
        let input = noiseInput(inputs, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        for chunk in [0, 0.0009, 1.01, -1, 1e300] {
            var params = TapParams()
            params.chunk = chunk
            do throws(ClientError) {
                _ = try TapReader(path: daemon.socket, params: params)
                Issue.record("a chunk of \(chunk) s was taken")
            } catch {
                guard case .rpc(let refusal) = error else { Issue.record("\(chunk): \(error)"); continue }
                #expect(refusal.code == RPCErrorCode.invalidParams && refusal.message.contains("chunk"), "\(chunk): \(refusal.message)")
            }
        }
        let status: StatusResult = try daemon.connect().call(.status)
        #expect(status.taps == nil)
    }

    @Test func tappingTakesItsOwnPermission() throws {
        let daemon = try Daemon(device: "null", config: "[server]\nsocket_mode = \"0666\"\ncontrol_users = [\"nobody\"]\n")
        chmod(daemon.directory.path, 0o755)
        let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", Binaries.recctl]
        let refused = try run("/usr/bin/setpriv", asNobody + ["tap", "--duration", "1", "--socket", daemon.socket])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("tap"), "\(refused.stderr)")
        #expect(refused.stdout.isEmpty)
        // Control does not grant it; the configuration can.
        let allowed = try Daemon(device: "null", config: "[server]\nsocket_mode = \"0666\"\ntap_users = [\"nobody\"]\n")
        chmod(allowed.directory.path, 0o755)
        let tapped = try run("/bin/sh", ["-c", "/usr/bin/setpriv \"$@\" | wc -c", "sh"] + asNobody
                             + ["tap", "--duration", "0.5", "--rate", "8000", "--channels", "1", "--socket", allowed.socket])
        #expect(tapped.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "8000", "\(tapped.stderr)")
    }

    @Test func recctlTapWritesExactlyTheDurationAsRawOrWAV() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let environment = ["RECD_SOCKET": daemon.socket]
        let output = inputs.file("tap.wav")
        let wav = try run("/bin/sh", ["-c", "\"$0\" tap --duration 2 --wav --rate 16000 --channels 1 > \"$1\"", Binaries.recctl, output],
                          environment: environment)
        #expect(wav.status == 0, "\(wav.stderr)")
        let probe = try run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "stream=sample_rate,channels,duration_ts,codec_name",
                                                  "-of", "default=noprint_wrappers=1", output])
        #expect(probe.stdout.contains("sample_rate=16000") && probe.stdout.contains("channels=1")
                && probe.stdout.contains("duration_ts=32000") && probe.stdout.contains("codec_name=pcm_s16le"), "\(probe.stdout)")
        let raw = try run("/bin/sh", ["-c", "\"$0\" tap --duration 1.5 --float | wc -c", Binaries.recctl], environment: environment)
        #expect(raw.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == String(72000 * 2 * 4), "\(raw.stderr)")
        // A reader that leaves early ends recctl quietly.
        let head = try run("/bin/sh", ["-c", "\"$0\" tap | head -c 1000 | wc -c", Binaries.recctl], environment: environment)
        #expect(head.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1000")
        #expect(daemon.waitForStatus { $0.taps == nil && $0.state == .idle } != nil, "every tap left; the device closed")
        // Numbers are checked before anything is asked.
        let refused = try run(Binaries.recctl, ["tap", "--rate", "100"], environment: environment)
        #expect(refused.status != 0 && refused.stderr.contains("--rate must be between"), "\(refused.stderr)")
        let client = try daemon.connect()
        let answer = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"tap","params":{"channels":9}}"#)
        #expect(answer.errorDataCode == "invalidParams" && answer.errorMessage?.contains("'channels' must be between 1 and 8") == true, "\(answer)")
    }
}

extension TapTests {
    static let reference = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("reference").path
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Examples/tap").path

    @Test func thePythonAndCExamplesReadATapWhileRecdRecords() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"flac\"\n")
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "beside"))
        let environment = ["RECD_SOCKET": daemon.socket]
        let pythonOut = inputs.file("python.raw")
        let python = try run("/usr/bin/python3", [Self.examples + "/recd_tap.py", "--rate", "8000", "--channels", "1",
                                                  "--seconds", "1.5", "--out", pythonOut], environment: environment)
        #expect(python.status == 0, "\(python.stderr)")
        #expect((try? FileManager.default.attributesOfItem(atPath: pythonOut)[.size] as? Int) == 12000 * 2)
        #expect(python.stderr.contains("tap ") && python.stderr.contains("chunk 0 "), "\(python.stderr)")

        let binary = inputs.file("recd_tap")
        let cc = try run("/usr/bin/cc", ["-Wall", "-Werror", "-O2", "-o", binary, Self.examples + "/recd_tap.c"])
        #expect(cc.status == 0, "\(cc.stderr)")
        let c = try run("/bin/sh", ["-c", "\"$0\" \"$1\" 16000 2 1 | wc -c", binary, daemon.socket])
        #expect(c.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == String(16000 * 2 * 2), "\(c.stderr)")

        // recctl tap feeding sox while the recording goes on: both outputs whole.
        let stat = try run("/bin/sh", ["-c", "\"$0\" tap --duration 3 --rate 16000 --channels 1 | "
                                           + "sox -t raw -r 16000 -e signed-integer -b 16 -c 1 - -n stat 2>&1", Binaries.recctl],
                           environment: environment)
        #expect(stat.stdout.contains("Samples read:             48000"), "\(stat.stdout)")
        #expect(stat.stdout.contains("Length (seconds):      3.000000"), "\(stat.stdout)")
        let stopped: Recording = try client.call(.stop)
        let probe = try run("/usr/bin/ffprobe", ["-v", "error", "-count_packets", "-show_entries", "stream=duration_ts",
                                                  "-of", "csv=p=0", stopped.path])
        #expect(probe.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == String(stopped.frames), "\(probe)")
        #expect(daemon.waitForStatus { $0.taps == nil && $0.state.name == .finished } != nil)
    }
}
