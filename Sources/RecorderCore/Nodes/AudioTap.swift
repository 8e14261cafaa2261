import ALSA
import AudioGraph
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import RecorderModel
import Soxr
import Synchronization

/// Where a tap's chunks go (a socket connection). Called on the tap's thread, never the capture
/// thread. `deliver` must not wait: false means the client is behind and the chunk is dropped
/// (counted, and the next chunk says how many frames were lost).
public protocol AudioTapSink: AnyObject, Sendable {
    func deliver(header: TapChunkHeader, payload: UnsafeRawBufferPointer) -> Bool
    /// No more chunks will come: recd stops listening for good (shut down, device gone).
    func tapEnded(_ error: RecorderError?)
    /// The largest payload a joined chunk (`TapParams.chunk`) may grow to: one the client's
    /// queue could never take would be dropped every time.
    var largestJoinedPayload: Int { get }
}

extension AudioTapSink {
    public var largestJoinedPayload: Int { .max }
}

/// A client's place on a tap: its sink and what it was sent. Its stream moves from one tap
/// to the next when the device comes back, hence its own lock.
final class TapSubscriber: @unchecked Sendable {
    // @unchecked: `stream` is behind `lock`; the counters are atomic.
    let id: Int
    let pid: Int32?
    let client: String?
    let since = Date()
    let sink: any AudioTapSink
    struct Stream {
        /// The next frame's position in this client's stream.
        var position: UInt64 = 0
        /// Frames lost since the last chunk this client took (dropped, or never captured).
        var pendingLost: UInt64 = 0
        var pendingFlags: UInt32 = 0
        /// When the frame after the last one sent was captured (NaN before the first): a gap's
        /// length, when nothing else says it (the device was away).
        var nextCaptureTime = Double.nan
        /// Chunks being joined into one of `minimumFrames` (the first one's header with the
        /// frames so far); sent when it has them, or before a chunk that follows a loss.
        var joined: TapChunkHeader?
        /// Their audio: one buffer for the subscriber's life, emptied and refilled.
        var joinedPayload: [UInt8] = []
        /// What was lost before the joined chunk (its header says it, clamped to 32 bits).
        var joinedLost: UInt64 = 0
    }
    private let lock = NIOLock()
    private var stream = Stream()
    let framesSent = Atomic<Int64>(0)
    let chunksDropped = Atomic<Int>(0)
    let framesDropped = Atomic<Int64>(0)
    /// What the client last said it serves the audio on to (`tap.update`); -1: not said.
    let listeners = Atomic<Int>(-1)
    /// The least frames a chunk to this client carries (`TapParams.chunk`); 0: each as it comes.
    /// Fewer, larger chunks are fewer wake-ups for recd and the client alike.
    let minimumFrames: Int

    /// As `status` lists it, in its group's format.
    func status(format: TapFormat) -> TapStatus {
        let listeners = listeners.load(ordering: .relaxed)
        return TapStatus(id: id, format: format, pid: pid, client: client, listeners: listeners < 0 ? nil : listeners, since: since,
                         framesSent: framesSent.load(ordering: .relaxed), chunksDropped: chunksDropped.load(ordering: .relaxed),
                         framesDropped: framesDropped.load(ordering: .relaxed))
    }

    /// Tap ids are numbered for the whole process (a station of several sources): `tap.update`
    /// names a tap by its id alone, whichever source it taps.
    private static let lastID = Atomic<Int>(0)
    static func nextID() -> Int { lastID.add(1, ordering: .relaxed).newValue }

    init(id: Int, pid: Int32?, client: String? = nil, minimumFrames: Int = 0, sink: any AudioTapSink) {
        self.id = id
        self.pid = pid
        self.client = client
        self.minimumFrames = minimumFrames
        self.sink = sink
    }

    /// Gives one chunk to the client: its header says where it lies in this client's stream,
    /// what was lost just before it, and whether time jumped.
    func hand(payload: UnsafeRawBufferPointer, frames: Int, rate: Int, captureTime: Double, lost: UInt64, flags: UInt32) {
        lock.withLock {
            var lost = lost
            if flags & TapChunkHeader.gapFlag != 0, !stream.nextCaptureTime.isNaN, !captureTime.isNaN {
                // The device was away, or overran: as many frames as the clock says went by.
                let missing = ((captureTime - stream.nextCaptureTime) * Double(rate)).rounded()
                if missing > Double(lost) { lost = UInt64(Swift.min(missing, Double(UInt32.max))) }
            }
            stream.pendingLost += lost
            stream.position += lost
            stream.pendingFlags |= flags & TapChunkHeader.gapFlag
            // A joined chunk holds contiguous audio of one kind: what follows a loss, or is not
            // pre-roll when it was, begins a chunk of its own.
            if let joined = stream.joined,
               stream.pendingLost > 0 || stream.pendingFlags != 0 || joined.flags & TapChunkHeader.preRollFlag != flags & TapChunkHeader.preRollFlag {
                sendJoined()
            }
            // What was lost before this chunk goes into its header (or the joined chunk's),
            // and from the pending count: a send that fails puts it back, with the chunk.
            let lostBefore = stream.pendingLost
            let header = TapChunkHeader(position: stream.position, captureTime: captureTime, frames: UInt32(frames),
                                        lostFrames: UInt32(clamping: lostBefore),
                                        flags: stream.pendingFlags | (flags & TapChunkHeader.preRollFlag),
                                        payloadBytes: UInt32(payload.count))
            stream.pendingLost = 0
            stream.pendingFlags = 0
            stream.position += UInt64(frames)
            stream.nextCaptureTime = captureTime + Double(frames) / Double(rate)
            if var joined = stream.joined {
                // Nothing was lost since it began (that would have sent it above).
                joined.frames += UInt32(frames)
                stream.joined = joined
            } else if frames < minimumFrames {
                stream.joined = header
                stream.joinedLost = lostBefore
            } else {
                send(header, lostBefore: lostBefore, payload)
                return
            }
            stream.joinedPayload.append(contentsOf: payload)
            if Int(stream.joined!.frames) >= minimumFrames { sendJoined() }
        }
    }

    /// Sends one chunk (under `lock`). What the client could not take is lost before the next,
    /// with what was lost before this one (`lostBefore`, which its header carried).
    private func send(_ header: TapChunkHeader, lostBefore: UInt64, _ payload: UnsafeRawBufferPointer) {
        var header = header
        header.payloadBytes = UInt32(payload.count)
        if sink.deliver(header: header, payload: payload) {
            framesSent.add(Int64(header.frames), ordering: .relaxed)
        } else {
            stream.pendingLost += lostBefore + UInt64(header.frames)
            stream.pendingFlags |= TapChunkHeader.gapFlag
            chunksDropped.add(1, ordering: .relaxed)
            framesDropped.add(Int64(header.frames), ordering: .relaxed)
        }
    }

    /// Sends the chunk being joined (under `lock`), and empties the buffer for the next.
    private func sendJoined() {
        guard let header = stream.joined else { return }
        stream.joined = nil
        // Taken out while it is sent (`send` changes `stream`), and put back emptied.
        var payload: [UInt8] = []
        swap(&payload, &stream.joinedPayload)
        payload.withUnsafeBytes { send(header, lostBefore: stream.joinedLost, $0) }
        payload.removeAll(keepingCapacity: true)
        stream.joinedPayload = payload
    }

    /// The tap ends: a chunk still being joined goes out as it is.
    func flush() {
        lock.withLock { sendJoined() }
    }

    /// Frames the client lost (soxr failed on a chunk).
    func lose(_ frames: Int) {
        lock.withLock {
            stream.pendingLost += UInt64(frames)
            stream.position += UInt64(frames)
            stream.pendingFlags |= TapChunkHeader.gapFlag
        }
    }
}

/// A consumer of the capture engine that feeds clients in one format: a worker node. On the
/// capture thread it only pushes each chunk into its `ChunkWorker`'s ring (dropping, and
/// counting, what does not fit); the worker's thread (`recd-tap`) converts (soxr for the rate,
/// as recordings do) and hands the result to every subscriber, which may drop it too. Nothing
/// here ever waits on a client.
///
/// One tap serves every client that asks for the same format; a client that asks for pre-roll
/// gets a tap of its own, which begins with the pre-roll ring's frames.
final class AudioTap: CaptureConsumer, @unchecked Sendable {
    // @unchecked: `framesDroppedAtHandOver` is the capture thread's; `converter`, `output`,
    // `expectedPosition`, `startsWithGap` and the anchor are the worker's; `subscribers` is
    // behind its own lock.

    let format: TapFormat
    let device: PCMConfiguration
    /// Whether this tap was made for one client that asked for pre-roll (not shared).
    let exclusive: Bool
    private let converter: FormatConverter?
    private var worker: ChunkWorker!
    /// Worker: the position the next chunk should have (a jump is frames lost: dropped at the
    /// hand-over, or another engine's stream).
    private var expectedPosition: Int64?
    /// The first chunk follows a device that went away (a tap made for the engine that reopened it).
    private var startsWithGap: Bool
    /// Capture thread: every frame dropped at the hand-over so far (what a pre-roll replay lost).
    private(set) var framesDroppedAtHandOver: Int64 = 0

    private let closed = Atomic<Bool>(false)
    private let subscribers = NIOLockedValueBox<[TapSubscriber]>([])
    /// How long the capture thread may sleep for this tap (ns): the shortest chunk a
    /// subscriber takes (`TapParams.chunk`); 0 while one takes every chunk as it comes.
    private let patience = Atomic<Int>(0)
    /// Worker: the output buffer (header room + payload), sized for the largest chunk.
    private let output: UnsafeMutableRawPointer
    private let outputCapacity: Int

    /// The engine's estimate of when a position was captured (its anchor, steadier than one read's).
    private let captureTimeOfPosition: @Sendable (Int64) -> Double?

    init(format: TapFormat, device: PCMConfiguration, maxChunkFrames: Int, quality: Resampler.Quality,
         exclusive: Bool, startsWithGap: Bool = false, seconds: Double = 2,
         captureTime: @escaping @Sendable (Int64) -> Double?) throws(RecorderError) {
        self.startsWithGap = startsWithGap
        self.format = format
        self.captureTimeOfPosition = captureTime
        self.device = device
        self.exclusive = exclusive
        if format.sampleRate != device.sampleRate || format.channels != device.channels
            || !Self.passesThrough(device.sampleFormat, format.encoding) {
            do {
                converter = try FormatConverter(
                    inputChannels: device.channels, outputChannels: format.channels,
                    inputRate: device.sampleRate, outputRate: format.sampleRate, quality: quality,
                    maxInputFrames: maxChunkFrames, inputFormat: device.sampleFormat,
                    sixteenBitFile: format.encoding == .s16le)
            } catch {
                throw RecorderError(.invalidSettings, "cannot convert \(device.sampleRate) Hz to \(format.sampleRate) Hz: \(error)")
            }
        } else {
            converter = nil
        }
        let upsampling = (format.sampleRate + device.sampleRate - 1) / device.sampleRate
        outputCapacity = TapChunkHeader.size + (maxChunkFrames * Swift.max(1, upsampling) + 1024) * format.bytesPerFrame
        output = .allocate(byteCount: outputCapacity, alignment: 16)
        let ring = ChunkRing(frames: Swift.max(Int(seconds * Double(device.sampleRate)), 4 * maxChunkFrames),
                             bytesPerFrame: device.bytesPerFrame, typicalChunkFrames: Swift.max(1, device.periodFrames))
        // Weak: a tap let go while its worker is between two chunks is not touched again.
        worker = ChunkWorker(ring: ring) { [weak self] chunk in self?.take(chunk) }
        worker.start(name: "recd-tap")
    }

    deinit {
        worker.stop()
        output.deallocate()
    }

    /// Device samples already in the tap's encoding, at its rate and channels: no conversion.
    static func passesThrough(_ sample: SampleFormat, _ encoding: TapEncoding) -> Bool {
        (sample == .int16 && encoding == .s16le) || (sample == .float32 && encoding == .f32le)
    }

    // MARK: Subscribers (any thread)

    func add(_ subscriber: TapSubscriber) {
        subscribers.withLockedValue { list in
            list.append(subscriber)
            updatePatience(list)
        }
    }

    /// Removes the subscriber; true if none is left.
    func remove(id: Int) -> Bool {
        subscribers.withLockedValue { list in
            list.removeAll { $0.id == id }
            updatePatience(list)
            return list.isEmpty
        }
    }

    /// A period short of the chunk: a read that brings a little less than it (a period that
    /// does not divide it, soxr's output a frame short) would otherwise wait for the next one.
    private func updatePatience(_ list: [TapSubscriber]) {
        let frames = list.map(\.minimumFrames).min() ?? 0
        let seconds = Double(frames) / Double(Swift.max(1, format.sampleRate)) - Double(device.periodFrames) / Double(Swift.max(1, device.sampleRate))
        patience.store(frames > 0 && seconds > 0 ? Int(seconds * 1e9) : 0, ordering: .relaxed)
    }

    var currentSubscribers: [TapSubscriber] { subscribers.withLockedValue { $0 } }

    /// Ends the worker; the subscribers are told (with `error`) unless `quietly`.
    func close(error: RecorderError? = nil, quietly: Bool = false) {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let list = subscribers.withLockedValue { list in defer { list = [] }; return list }
        // A chunk being joined goes out now, not after the device comes back: on the worker,
        // after the chunks it was given (a `hand` under way cannot begin another after it).
        worker.perform { for subscriber in list { subscriber.flush() } }
        if !quietly { for subscriber in list { subscriber.sink.tapEnded(error) } }
        worker.stop()
    }

    // MARK: Capture thread

    /// Subscribers that take larger chunks let the capture thread read that much at a time:
    /// one wake-up (and one chunk through the tap) where there were several.
    var wakeInterval: Double { Double(patience.load(ordering: .relaxed)) / 1e9 }

    func receive(_ chunk: CaptureChunk) -> Bool {
        if closed.load(ordering: .relaxed) { return false }
        // A full ring drops the chunk: the worker sees the jump in the next one's position.
        if !worker.push(chunk, patience: 0) { framesDroppedAtHandOver += Int64(chunk.frames) }
        return true
    }

    func engineFailed(_ error: RecorderError) {}

    // MARK: The worker

    private func take(_ chunk: CaptureChunk) {
        // A chunk that does not follow the one before: frames dropped at the hand-over, or
        // lost to an overrun, or another engine's (the device came back).
        let jump = expectedPosition.map { chunk.position - $0 } ?? 0
        let gap = jump != 0 || chunk.overruns > 0 || startsWithGap
        startsWithGap = false
        expectedPosition = chunk.position + Int64(chunk.frames)
        deliver(chunk, gap: gap, lostBefore: Swift.max(0, jump) + chunk.framesLost)
    }

    /// Worker: the converter's next output frame was captured `framesSinceAnchor` output
    /// frames after the input frame at `anchor.position` (soxr's output begins with the input's
    /// first frame; set again after a gap). `anchor.time`: that frame's time if the engine has none.
    private var anchor: (position: Int64, time: Double)?
    private var framesSinceAnchor = 0
    private var carriedLost: UInt64 = 0
    private var carriedFlags: UInt32 = 0

    /// Every chunk is timed by the engine's estimate as it goes out, the converted ones too:
    /// the estimate gets better in the first seconds (the least delayed read so far), and every
    /// tap, format and recording then says the same time for the same frame.
    private func captureTime(ofPosition position: Int64, orElse fallback: Double) -> Double {
        captureTimeOfPosition(position) ?? fallback
    }

    private func deliver(_ chunk: CaptureChunk, gap: Bool, lostBefore: Int64) {
        let samples = chunk.samples
        let deviceRate = Double(device.sampleRate)
        let lost = UInt64((Double(lostBefore) * Double(format.sampleRate) / deviceRate).rounded())
        let flags = (gap ? TapChunkHeader.gapFlag : 0) | (chunk.isPreRoll ? TapChunkHeader.preRollFlag : 0)
        if gap || anchor == nil {
            anchor = (chunk.position, chunk.captureTime)
            framesSinceAnchor = 0
        }
        let anchor = anchor ?? (chunk.position, chunk.captureTime)
        // What this chunk says (a gap, frames lost) goes with the next output: a converter
        // starting again may give nothing for its first input.
        carriedLost += lost
        carriedFlags |= flags
        let send = { (payload: UnsafeRawPointer, frames: Int) in
            guard frames > 0 else { return }
            let time = self.converter == nil ? self.captureTime(ofPosition: chunk.position, orElse: chunk.captureTime)
                : self.captureTime(ofPosition: anchor.position, orElse: anchor.time)
                    + Double(self.framesSinceAnchor) / Double(self.format.sampleRate)
            self.framesSinceAnchor += frames
            self.hand(payload: payload, frames: frames, captureTime: time, lost: self.carriedLost, flags: self.carriedFlags)
            self.carriedLost = 0
            self.carriedFlags = 0
        }
        guard let converter else { return send(samples, chunk.frames) }
        do {
            if converter.resamplesSixteenBit {
                try converter.resample(samples.assumingMemoryBound(to: Int16.self), frames: chunk.frames) { converted, frames in
                    if case .int16(let pointer) = converted { send(UnsafeRawPointer(pointer), frames) }
                }
            } else {
                try converter.convert(samples, format: device.sampleFormat, frames: chunk.frames, meter: { _ in }) { converted, frames in
                    guard case .float(let pointer) = converted else { return }
                    switch format.encoding {
                    case .f32le:
                        send(UnsafeRawPointer(pointer), frames)
                    case .s16le:
                        let target = (output + TapChunkHeader.size).assumingMemoryBound(to: Int16.self)
                        Self.encodeSixteenBit(pointer, count: frames * format.channels, into: target)
                        send(UnsafeRawPointer(target), frames)
                    }
                }
            }
        } catch {
            // soxr failed on this chunk (it does not, short of memory): its frames are lost.
            let frames = Int((Double(chunk.frames) * Double(format.sampleRate) / Double(device.sampleRate)).rounded())
            for subscriber in currentSubscribers { subscriber.lose(frames) }
        }
    }

    /// Floats to 16-bit as libsndfile writes them into a 16-bit file (scale by 32768, clip,
    /// round to nearest): a tap in a recording's format gives the file's samples.
    static func encodeSixteenBit(_ source: UnsafePointer<Float>, count: Int, into target: UnsafeMutablePointer<Int16>) {
        for index in 0..<count {
            let scaled = source[index] * 32768
            target[index] = scaled >= 32767 ? .max : scaled <= -32768 ? .min : Int16(lrintf(scaled))
        }
    }

    /// Gives one converted chunk to every subscriber.
    private func hand(payload: UnsafeRawPointer, frames: Int, captureTime: Double, lost: UInt64, flags: UInt32) {
        guard frames > 0 else { return }
        let bytes = UnsafeRawBufferPointer(start: payload, count: frames * format.bytesPerFrame)
        for subscriber in currentSubscribers {
            subscriber.hand(payload: bytes, frames: frames, rate: format.sampleRate, captureTime: captureTime, lost: lost, flags: flags)
        }
    }
}
