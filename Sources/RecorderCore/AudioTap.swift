import ALSA
import Dispatch
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
}

/// A client's place on a tap: its sink and what it was sent. Its stream moves from one tap
/// to the next when the device comes back, hence its own lock.
final class TapSubscriber: @unchecked Sendable {
    // @unchecked: `stream` is behind `lock`; the counters are atomic.
    let id: Int
    let pid: Int32?
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
    }
    private let lock = NIOLock()
    private var stream = Stream()
    let framesSent = Atomic<Int64>(0)
    let chunksDropped = Atomic<Int>(0)
    let framesDropped = Atomic<Int64>(0)

    init(id: Int, pid: Int32?, sink: any AudioTapSink) {
        self.id = id
        self.pid = pid
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
            let header = TapChunkHeader(position: stream.position, captureTime: captureTime, frames: UInt32(frames),
                                        lostFrames: UInt32(clamping: stream.pendingLost),
                                        flags: stream.pendingFlags | (flags & TapChunkHeader.preRollFlag),
                                        payloadBytes: UInt32(payload.count))
            stream.position += UInt64(frames)
            stream.nextCaptureTime = captureTime + Double(frames) / Double(rate)
            if sink.deliver(header: header, payload: payload) {
                stream.pendingLost = 0
                stream.pendingFlags = 0
                framesSent.add(Int64(frames), ordering: .relaxed)
            } else {
                stream.pendingLost += UInt64(frames)
                stream.pendingFlags |= TapChunkHeader.gapFlag
                chunksDropped.add(1, ordering: .relaxed)
                framesDropped.add(Int64(frames), ordering: .relaxed)
            }
        }
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

/// A consumer of the capture engine that feeds clients in one format: on the capture thread it
/// only copies each chunk into a bounded ring (dropping, and counting, what does not fit); a
/// thread of its own (`recd-tap`) converts (soxr for the rate, as recordings do) and hands the
/// result to every subscriber, which may drop it too. Nothing here ever waits on a client.
///
/// One tap serves every client that asks for the same format; a client that asks for pre-roll
/// gets a tap of its own, which begins with the pre-roll ring's frames.
final class AudioTap: CaptureConsumer, @unchecked Sendable {
    // @unchecked: the ring's indices and `entries` are behind `lock` (held only to copy
    // indices); `converter`, `output`, `expected*` are the tap thread's; `subscribers` is
    // behind its own lock.

    let format: TapFormat
    let device: PCMConfiguration
    /// Whether this tap was made for one client that asked for pre-roll (not shared).
    let exclusive: Bool
    private let converter: FormatConverter?
    private let maxChunkFrames: Int

    // The hand-over ring: device bytes, and one entry per chunk.
    private struct Entry {
        var offset: Int
        var frames: Int
        var position: Int64
        var captureTime: Double
        var gap: Bool
        var lostBefore: Int64
        var preRoll: Bool
        /// Ring bytes the entry holds (with the tail it skipped to stay contiguous).
        var bytes: Int
    }
    private let ring: UnsafeMutableRawPointer
    private let ringBytes: Int
    private let lock = NIOLock()
    private var writeOffset = 0
    private var usedBytes = 0
    private var entries: [Entry] = []
    private var entryHead = 0
    private var entryCount = 0
    /// Capture thread: the position the next chunk should have; frames dropped at the hand-over.
    private var nextPosition: Int64 = -1
    /// The first chunk follows a device that went away (a tap made for the engine that reopened it).
    private var startsWithGap: Bool
    private var droppedAtHandOver: Int64 = 0
    /// Capture thread: every frame dropped at the hand-over so far (what a pre-roll replay lost).
    private(set) var framesDroppedAtHandOver: Int64 = 0
    /// While the ring's pre-roll is replayed (capture thread), chunks are marked pre-roll.
    var replaying = false

    private let wake = DispatchSemaphore(value: 0)
    private let closed = Atomic<Bool>(false)
    private let subscribers = NIOLockedValueBox<[TapSubscriber]>([])
    /// Tap thread: the output buffer (header room + payload), sized for the largest chunk.
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
        self.maxChunkFrames = maxChunkFrames
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
        ringBytes = Swift.max(Int(seconds * Double(device.sampleRate)), 4 * maxChunkFrames) * device.bytesPerFrame
        ring = .allocate(byteCount: ringBytes, alignment: 16)
        // An entry per chunk: room for the ring's worth of period-sized chunks.
        let entryCount = Swift.max(256, ringBytes / Swift.max(1, device.periodFrames * device.bytesPerFrame) + 16)
        entries = Array(repeating: Entry(offset: 0, frames: 0, position: 0, captureTime: 0, gap: false, lostBefore: 0, preRoll: false, bytes: 0),
                        count: entryCount)
        let upsampling = (format.sampleRate + device.sampleRate - 1) / device.sampleRate
        outputCapacity = TapChunkHeader.size + (maxChunkFrames * Swift.max(1, upsampling) + 1024) * format.bytesPerFrame
        output = .allocate(byteCount: outputCapacity, alignment: 16)
        DedicatedThread.spawn(name: "recd-tap") { [self] in run() }
    }

    deinit {
        ring.deallocate()
        output.deallocate()
    }

    /// Device samples already in the tap's encoding, at its rate and channels: no conversion.
    static func passesThrough(_ sample: SampleFormat, _ encoding: TapEncoding) -> Bool {
        (sample == .int16 && encoding == .s16le) || (sample == .float32 && encoding == .f32le)
    }

    // MARK: Subscribers (any thread)

    func add(_ subscriber: TapSubscriber) { subscribers.withLockedValue { $0.append(subscriber) } }

    /// Removes the subscriber; true if none is left.
    func remove(id: Int) -> Bool {
        subscribers.withLockedValue { list in
            list.removeAll { $0.id == id }
            return list.isEmpty
        }
    }

    var currentSubscribers: [TapSubscriber] { subscribers.withLockedValue { $0 } }

    /// Ends the thread; the subscribers are told (with `error`) unless `quietly`.
    func close(error: RecorderError? = nil, quietly: Bool = false) {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let list = subscribers.withLockedValue { list in defer { list = [] }; return list }
        if !quietly { for subscriber in list { subscriber.sink.tapEnded(error) } }
        wake.signal()
    }

    // MARK: Capture thread

    func receive(_ chunk: CaptureChunk) -> Bool {
        if closed.load(ordering: .relaxed) { return false }
        let bytes = chunk.frames * device.bytesPerFrame
        // A chunk that does not follow the one before: another engine (the device came back),
        // or frames the device lost to an overrun.
        let gap = (nextPosition >= 0 && chunk.position != nextPosition) || chunk.overruns > 0 || startsWithGap
        startsWithGap = false
        nextPosition = chunk.position + Int64(chunk.frames)
        // Copied under the lock (a memcpy of one chunk): the tap thread takes an entry only
        // whole, and holds the lock only to move indices.
        let queued: Bool = lock.withLock {
            guard entryCount < entries.count, usedBytes + bytes <= ringBytes else { return false }
            // The chunk stays contiguous: skip the ring's tail if it does not fit there.
            var offset = writeOffset
            var skipped = 0
            if offset + bytes > ringBytes {
                skipped = ringBytes - offset
                guard usedBytes + skipped + bytes <= ringBytes else { return false }
                offset = 0
            }
            (ring + offset).copyMemory(from: chunk.samples, byteCount: bytes)
            entries[(entryHead + entryCount) % entries.count] = Entry(
                offset: offset, frames: chunk.frames, position: chunk.position, captureTime: chunk.captureTime,
                gap: gap || droppedAtHandOver > 0, lostBefore: droppedAtHandOver + chunk.framesLost, preRoll: replaying,
                bytes: skipped + bytes)
            entryCount += 1
            usedBytes += skipped + bytes
            writeOffset = offset + bytes
            return true
        }
        if queued {
            droppedAtHandOver = 0
            wake.signal()
        } else {
            droppedAtHandOver += Int64(chunk.frames)
            framesDroppedAtHandOver += Int64(chunk.frames)
        }
        return true
    }

    func engineFailed(_ error: RecorderError) {}

    // MARK: Tap thread

    private func run() {
        while true {
            wake.wait()
            if closed.load(ordering: .acquiring) { return }
            drain()
        }
    }

    private func drain() {
        while true {
            let taken: Entry? = lock.withLock { entryCount > 0 ? entries[entryHead] : nil }
            guard let entry = taken else { return }
            deliver(entry)
            let more = lock.withLock {
                entryHead = (entryHead + 1) % entries.count
                entryCount -= 1
                usedBytes -= entry.bytes
                return entryCount > 0
            }
            // One signal per entry: take the one of the entry just done.
            if more { _ = wake.wait(timeout: .now()) }
        }
    }

    /// Tap thread: the converter's next output frame was captured `framesSinceAnchor` output
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

    private func deliver(_ entry: Entry) {
        let samples = UnsafeRawPointer(ring + entry.offset)
        let deviceRate = Double(device.sampleRate)
        let lost = UInt64((Double(entry.lostBefore) * Double(format.sampleRate) / deviceRate).rounded())
        let flags = (entry.gap ? TapChunkHeader.gapFlag : 0) | (entry.preRoll ? TapChunkHeader.preRollFlag : 0)
        if entry.gap || anchor == nil {
            anchor = (entry.position, entry.captureTime)
            framesSinceAnchor = 0
        }
        let anchor = anchor ?? (entry.position, entry.captureTime)
        // What this entry says (a gap, frames lost) goes with the next output: a converter
        // starting again may give nothing for its first input.
        carriedLost += lost
        carriedFlags |= flags
        let send = { (payload: UnsafeRawPointer, frames: Int) in
            guard frames > 0 else { return }
            let time = self.converter == nil ? self.captureTime(ofPosition: entry.position, orElse: entry.captureTime)
                : self.captureTime(ofPosition: anchor.position, orElse: anchor.time)
                    + Double(self.framesSinceAnchor) / Double(self.format.sampleRate)
            self.framesSinceAnchor += frames
            self.hand(payload: payload, frames: frames, captureTime: time, lost: self.carriedLost, flags: self.carriedFlags)
            self.carriedLost = 0
            self.carriedFlags = 0
        }
        guard let converter else { return send(samples, entry.frames) }
        do {
            if converter.resamplesSixteenBit {
                try converter.resample(samples.assumingMemoryBound(to: Int16.self), frames: entry.frames) { converted, frames in
                    if case .int16(let pointer) = converted { send(UnsafeRawPointer(pointer), frames) }
                }
            } else {
                try converter.convert(samples, format: device.sampleFormat, frames: entry.frames, meter: { _ in }) { converted, frames in
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
            let frames = Int((Double(entry.frames) * Double(format.sampleRate) / Double(device.sampleRate)).rounded())
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
