import ALSA
import AudioGraph
import CLinux
import Dispatch
import FoundationEssentials
import Glibc
import MPEG4
import NIOConcurrencyHelpers
import RecorderModel
import Sndfile
import Synchronization

/// How a recording's capture ended.
enum CaptureOutcome: Sendable, Equatable {
    /// `stop()` or `cancel()` asked it to.
    case stopped
    /// `record(forDuration:)`'s frame count was reached.
    case limitReached
    /// The device or the file failed; everything before the failure is in the file.
    case failed(RecorderError)
}

/// The recording, as a consumer of the capture engine: on the capture thread it only copies
/// each chunk into its write buffer (`ChunkRing`); its worker thread (`recd-writer`) takes
/// them from there and converts, meters, cuts segments and writes the file. A disk that
/// stalls for less than the buffer holds loses nothing; a longer stall, or an overrun of the
/// device, is a gap: the file ends at the last frame before it and the next begins with
/// its true capture time (`handleGap`), never spliced across it.
///
/// Publishing happens on the recorder's timer, which reads the counters here (atomics) and
/// the level meter (a mutex taken once per chunk). Control (pause, resume, split, stop) runs
/// on the worker between two chunks (`ChunkWorker.perform`), after every chunk captured
/// before, so that `pause()` returns only once no more frames will be written, and a split
/// falls between two frames.
final class RecordingConsumer: CaptureConsumer, @unchecked Sendable {
    // @unchecked: `writer`, `converter` and the segment bookkeeping (`segment`,
    // `segmentTarget`, the anchors) are used on the worker thread only, after `start()` and
    // until `finished` is signalled; the control thread touches the writer and the segment
    // again only after that (in `finalize`). A writer replaced at a boundary is handed to the
    // serial sync queue and never touched again here. Everything shared is atomic or behind a
    // lock. "The capture thread" in the comments below is the worker's side of it, where the
    // comment is about order (a chunk at a time): only `receive` and `engineFailed` run on the
    // capture thread itself.

    let engine: CaptureEngine
    /// The file being written. Replaced at each segment boundary; nil between the events of a
    /// triggered recording.
    var writer: (any AudioFileWriter)?
    /// Creates the next segment's file.
    let files: SegmentFileFactory
    let clock: SegmentClock
    /// Runs on the sync queue after each segment closed at a boundary is finalized.
    let segmentClosed: @Sendable (Segment, RecorderError?) -> Void
    /// Runs on the capture thread when the first segment's start is known (and its file may
    /// have been renamed to match).
    let segmentStarted: @Sendable () -> Void
    /// Whether the system clock is synchronized now: asked as each file begins (its mark).
    let clockSynchronized: @Sendable () -> Bool
    /// The wall clock's offset from the boot clock the chunks' times were on, last chunk
    /// (worker; NaN before the first): a change is a step, which the anchors follow.
    private var clockOffset = Double.nan
    // The current segment, its length and what it had counted when it began (capture thread).
    var segment: Segment
    var segmentTarget: Int64?
    var segmentStartXruns = 0
    var segmentStartLost: Int64 = 0
    /// Sound-activated recording: the detector and the events it opens (nil: every frame is written).
    let gate: EventGate?
    private var firstRead = true
    /// When the recording's frame 0 was captured (seconds since 1970), as the earliest of the
    /// estimates "chunk's capture time less the device frames received before it" over the
    /// last segment: a read that came late (a busy machine) only makes an estimate later, so
    /// the minimum is the least delayed one; taking it afresh every segment follows the
    /// device clock's drift against the wall clock. Times every boundary as `anchor + frames
    /// written / rate`, and each file's recorded start (its first chunk's for the first file:
    /// with a pre-roll, the first pre-rolled frame's).
    var anchor = Double.infinity
    var anchorWindow = Double.infinity
    /// `framesWritten` when `anchor` was taken: a triggered recording's files each have their own.
    var anchorFrames: Int64 = 0
    /// After a pause: the next chunk sets the anchor afresh.
    private var reanchor = false
    /// The first segment of a clock-aligned session: its cut follows the anchor as it improves.
    /// Its start is the first read's estimate, late by however long that read waited (a busy
    /// machine: 133 ms was seen), and a later, less delayed read moves the cut to the boundary.
    private var refiningFirstCut = false
    /// Device frames received, for the anchor (capture thread).
    private var received: Int64 = 0
    let configuration: PCMConfiguration
    let fileRate: Int
    let fileChannels: Int
    /// For `record(forDuration:)`; set before `start()`.
    var frameLimit: Int64?
    /// The space guard's part here (nil: off): frames are written up to `spaceLimit`
    /// without asking the filesystem, and the room is measured again (statvfs) only there, so
    /// no chunk pays for a system call. The recorder's storage monitor moves the limit too.
    let spaceGuard: SpaceGuard?
    /// `framesWritten` up to which the disk is known to have room above the minimum.
    let spaceLimit = Atomic<Int64>(0)
    /// Frames one chunk can add to the file at most (resampling up included).
    private let chunkAllowance: Int64
    let meter: LevelMeter?
    let converter: FormatConverter?
    /// Uptime nanoseconds between two syncs (wall clock: an unpaced device delivers an hour
    /// of audio in seconds, and the point is to bound what a crash loses in time).
    let syncIntervalNanoseconds: UInt64
    var lastSync: UInt64 = 0
    let syncQueue = DispatchQueue(label: "recd.capture.sync")
    /// The capture thread's once-a-second fsync requests, coalesced onto the sync queue. A
    /// source, not a block per request: a block allocated on the capture thread and freed on
    /// a Dispatch worker fills that worker's cache (doc/architecture.md, "Resident memory").
    private let syncRequests: DispatchSourceUserDataOr
    /// The writer the last request was for (the capture thread may have moved to the next
    /// segment's by the time the request runs); taken by the request, cleared before a close.
    private let syncTarget = NIOLockedValueBox<HandedOver?>(nil)
    /// The write buffer and the thread that empties it.
    private(set) var worker: ChunkWorker!
    /// The engine position the next chunk should have (worker): a chunk further on follows a
    /// gap (the write buffer was full, the device overran).
    private var expectedPosition: Int64?
    /// Times the write buffer was full and refused a chunk (capture thread counts).
    let writeBufferOverflows = Atomic<Int>(0)
    private var overflowing = false
    /// How long the capture thread waits for room in a full buffer (ns): half the device's buffer.
    private let pushPatience: UInt64
    /// Gaps in this session, as each was found (worker); the recorder logs and publishes them.
    let gapFound: @Sendable (Gap, _ frames: Int64) -> Void
    /// `resume()` asked the worker to take its next chunk's time afresh.
    private let resumed = Atomic<Bool>(false)

    // Shared with the timer and the control thread.
    let framesWritten = Atomic<Int64>(0)
    let framesCaptured = Atomic<Int64>(0)
    let xruns = Atomic<Int>(0)
    let framesLost = Atomic<Int64>(0)
    /// Frames in the current segment's file.
    let segmentFramesWritten = Atomic<Int64>(0)
    /// The segment being written, for status (published copy of `segment`).
    let currentSegment: NIOLockedValueBox<Segment>
    /// Finalizing a closed segment failed (disk): the capture thread ends with it.
    let finalizeFailure = NIOLockedValueBox<RecorderError?>(nil)
    /// Uptime (ns) of the last chunk with a sample that was not exactly zero.
    let lastSignal = Atomic<UInt64>(0)
    private let outcome = NIOLockedValueBox<CaptureOutcome?>(nil)
    private let finished = DispatchSemaphore(value: 0)
    /// Signalled once the first segment's start is known (its first frame read, its file named
    /// after it) or the thread has ended: what `start` waits for, to answer with the final path.
    private let firstFrameKnown = DispatchSemaphore(value: 0)
    private let firstFrameMarked = Atomic<Bool>(false)
    let isPaused = Atomic<Bool>(false)
    private let startedFlag = Atomic<Bool>(false)

    /// Runs (on the capture thread) when the recording ends by itself: frame limit, failure.
    /// Taken (and so released) when capture ends: the recorder's closure holds this consumer,
    /// and kept here for longer it would keep it, its engine and the device open forever.
    private let onEnd = NIOLockedValueBox<(@Sendable (CaptureOutcome) -> Void)?>(nil)

    /// Whether capture has been started.
    var started: Bool { startedFlag.load(ordering: .acquiring) }
    /// Whether the recording's capture has ended.
    var hasEnded: Bool { isEnded }
    /// The device clock's drift against the monotonic clock (ppm); nil until it is stable.
    var deviceClockDriftPPM: Double? { engine.deviceClockDriftPPM }
    /// The device's name, for messages.
    var deviceName: String { engine.pcm.name }

    init(engine: CaptureEngine, writer: (any AudioFileWriter)?, segment: Segment,
         files: SegmentFileFactory, clock: SegmentClock, gate: EventGate? = nil,
         segmentClosed: @escaping @Sendable (Segment, RecorderError?) -> Void,
         segmentStarted: @escaping @Sendable () -> Void = {},
         clockSynchronized: @escaping @Sendable () -> Bool = { true },
         fileRate: Int, fileChannels: Int, converterQuality: RecordingQuality,
         frameLimit: Int64?, metering: Bool, syncInterval: Double, spaceGuard: SpaceGuard? = nil,
         sixteenBitFile: Bool = false, writeBuffer: Double = 10, preRollRoom: Double = 0,
         gapFound: @escaping @Sendable (Gap, Int64) -> Void = { _, _ in }) throws(RecorderError) {
        let configuration = engine.configuration
        self.engine = engine
        self.configuration = configuration
        self.writer = writer
        self.segment = segment
        self.currentSegment = NIOLockedValueBox(segment)
        self.files = files
        self.clock = clock
        self.segmentClosed = segmentClosed
        self.segmentStarted = segmentStarted
        self.clockSynchronized = clockSynchronized
        self.gate = gate
        self.fileRate = fileRate
        self.fileChannels = fileChannels
        self.frameLimit = frameLimit
        // A triggered recording meters its input, written or not: levels while armed too.
        self.meter = metering ? LevelMeter(channels: gate == nil ? fileChannels : configuration.channels) : nil
        self.syncIntervalNanoseconds = UInt64(Swift.max(0.001, syncInterval) * 1_000_000_000)
        self.spaceGuard = spaceGuard
        let chunkFrames = engine.maximumChunkFrames
        let upsampling = (fileRate + configuration.sampleRate - 1) / Swift.max(1, configuration.sampleRate)
        self.chunkAllowance = Int64(chunkFrames * Swift.max(1, upsampling) + 1024)
        if configuration.sampleRate != fileRate || configuration.channels != fileChannels {
            do {
                converter = try FormatConverter(
                    inputChannels: configuration.channels, outputChannels: fileChannels,
                    inputRate: configuration.sampleRate, outputRate: fileRate,
                    quality: converterQuality.converterQuality, maxInputFrames: chunkFrames,
                    inputFormat: configuration.sampleFormat, sixteenBitFile: sixteenBitFile)
            } catch {
                throw RecorderError(.invalidSettings, "cannot convert \(configuration.sampleRate) Hz to \(fileRate) Hz: \(error)")
            }
        } else {
            converter = nil
        }
        pushPatience = UInt64(Double(configuration.bufferFrames) / Double(Swift.max(1, configuration.sampleRate)) / 2 * 1e9)
        self.gapFound = gapFound
        // Room for the pre-roll handed over at the start on top of the write buffer.
        let ring = ChunkRing(frames: Int(((writeBuffer + preRollRoom) * Double(configuration.sampleRate)).rounded(.up))
                                 + chunkFrames,
                             bytesPerFrame: configuration.bytesPerFrame, typicalChunkFrames: configuration.periodFrames)
        syncRequests = DispatchSource.makeUserDataOrSource(queue: syncQueue)
        syncRequests.setEventHandler { [weak self] in
            guard let self else { return }
            let target = syncTarget.withLockedValue { target in defer { target = nil }; return target }
            try? target?.writer.sync()
        }
        syncRequests.activate()
        worker = ChunkWorker(ring: ring) { [weak self] chunk in _ = self?.process(chunk) }
    }

    deinit {
        syncRequests.cancel()
        worker.stop()
    }

    /// No requested fsync may run on `writer` from here on (it is about to close). On the sync
    /// queue, where requests run, or before waiting for it.
    func forgetSync(of writer: any AudioFileWriter) {
        syncTarget.withLockedValue { if $0?.writer === writer { $0 = nil } }
    }

    // MARK: Control (called from the recorder's control queue)

    /// Attaches the recording to the engine: from the next chunk on (after `preRoll`, which
    /// runs on the capture thread first and hands over frames the engine kept), every frame
    /// goes to the file. `onEnd` runs (on the worker) when it ends by itself.
    func start(preRoll: @escaping (RecordingConsumer) -> Void = { _ in },
               onEnd: @escaping @Sendable (CaptureOutcome) -> Void) throws(RecorderError) {
        self.onEnd.withLock { $0 = onEnd }
        lastSignal.store(CaptureEngine.uptime(), ordering: .relaxed)
        lastSync = CaptureEngine.uptime()
        startedFlag.store(true, ordering: .releasing)
        worker.start(name: "recd-writer")
        do throws(RecorderError) {
            try engine.attach(self, failure: .failedToBegin) { [self] _ in
                preRoll(self)
                return !isEnded
            }
        } catch {
            end(.failed(error), announce: false)
            throw error
        }
    }

    /// Waits until the first frame has been read (the first file then has its final name) or
    /// capture has ended; false after `timeout` seconds without either.
    func awaitFirstFrame(timeout: Double) -> Bool {
        if firstFrameMarked.load(ordering: .acquiring) { return true }
        return firstFrameKnown.wait(timeout: .now() + .nanoseconds(Int(timeout * 1e9))) == .success
    }

    func markFirstFrameKnown() {
        if !firstFrameMarked.exchange(true, ordering: .acquiringAndReleasing) { firstFrameKnown.signal() }
    }

    /// Detaches from the engine; returns once no more frames will be written (the worker has
    /// written every frame captured before). Frames written up to then are all the file holds
    /// until `resume()`. The engine stops the device if nobody else listens.
    func pause() throws(RecorderError) {
        guard !isEnded else { return }
        guard engine.detach(self) else {
            throw RecorderError(.deviceLost, "capture on '\(deviceName)' is not responding (stuck in the device driver); "
                                + "stop the recording to keep what was written")
        }
        worker.perform { [self] in if !isEnded { isPaused.store(true, ordering: .releasing) } }
    }

    /// Attaches again after `pause()`; throws `failedToResume` if the device will not start.
    func resume() throws(RecorderError) {
        guard !isEnded else { return }
        try engine.attach(self, failure: .failedToResume) { [self] _ in
            isPaused.store(false, ordering: .releasing)
            lastSignal.store(CaptureEngine.uptime(), ordering: .relaxed)  // a pause is not silence
            resumed.store(true, ordering: .releasing)  // frames stopped while the clock went on
            return true
        }
    }

    /// Closes the current segment at the last frame written and continues in a new file, with
    /// no frame lost or repeated. Returns the closed segment (being finalized in the
    /// background), or nil if the current segment is still empty or capture has ended.
    func split() -> Segment? {
        guard !isEnded, !isPaused.load(ordering: .acquiring) else { return nil }
        return worker.perform { [self] () -> Segment? in
            guard !isEnded, segmentFramesWritten.load(ordering: .relaxed) > 0 else { return nil }
            do throws(RecorderError) {
                return try rotate(at: boundaryTime(), reason: .split)
            } catch {
                end(.failed(error))  // the next chunk detaches it
                return nil
            }
        }
    }

    /// Detaches from the engine, lets the worker write what the buffer holds (flushing the
    /// converter) and returns how capture ended. A capture thread still stuck in the driver
    /// after `timeout` seconds is left there: what it pushes from now on is not written, and
    /// the file is finalized with what was captured.
    func stop(timeout: Double) -> CaptureOutcome {
        if let outcome = outcome.withLock({ $0 }) { return outcome }
        let detached = isPaused.load(ordering: .acquiring) || engine.detach(self, timeout: timeout)
        if !detached { detachedByStop.store(true, ordering: .releasing) }
        worker.perform { [self] in
            guard !isEnded else { return }
            let finished = finish()
            if detached || finished != .stopped {
                end(finished, announce: false)
            } else {
                end(.failed(RecorderError(.deviceLost,
                    "capture on '\(deviceName)' did not stop within \(timeout) s (stuck in the device driver); "
                    + "the file keeps the \(framesWritten.load(ordering: .acquiring)) frames written before")), announce: false)
            }
        }
        return join()
    }

    /// Waits for capture to end and returns how it ended.
    func join() -> CaptureOutcome {
        finished.wait()
        finished.signal()  // let later callers through too
        return outcome.withLock { $0! }
    }

    /// `stop` gave up on a capture thread stuck in the driver: it pushes nothing more.
    private let detachedByStop = Atomic<Bool>(false)

    /// Capture has ended: the first `outcome` stands; `announce` tells the recorder (an end it
    /// did not ask for).
    func end(_ ended: CaptureOutcome, announce: Bool = true) {
        let first = outcome.withLock { outcome -> Bool in
            guard outcome == nil else { return false }
            outcome = ended
            return true
        }
        guard first else { return }
        worker.stop()
        markFirstFrameKnown()
        finished.signal()
        let callback = onEnd.withLock { callback in defer { callback = nil }; return callback }
        if announce { callback?(ended) }
    }

    var isEnded: Bool { outcome.withLock { $0 != nil } }

    /// Finalizes the file after capture ended: header, sync, close.
    func closeFile() throws(RecorderError) {
        // No background fsync may run once the descriptor is closed.
        if let writer { forgetSync(of: writer) }
        syncQueue.sync {}
        do { try writer?.close() } catch { throw RecorderError.saving(error) }
    }

    /// The last segment as it ends: its frames, overruns and end, after capture ended.
    func finalSegment(endedAt: Date, reason: SegmentEnd) -> Segment {
        var last = segment
        last.frames = segmentFramesWritten.load(ordering: .acquiring)
        last.xruns = xruns.load(ordering: .relaxed) - segmentStartXruns
        last.framesLost = framesLost.load(ordering: .relaxed) - segmentStartLost
        last.endedAt = endedAt
        last.endReason = reason
        return last
    }

    /// Waits until every segment closed so far is finalized and announced.
    func drainFinalization() { syncQueue.sync {} }

    /// Closes the file without finalizing it, for a recording about to be deleted.
    func discardFile() {
        if let writer { forgetSync(of: writer) }
        syncQueue.sync {}
        writer?.discard()
    }

    // MARK: On the capture thread

    /// A recording takes every period (its first frames, `currentTime`, a stop's last frame
    /// come that soon). A sound-activated one needs its chunks only as often as its detector
    /// must decide, and the file begins at the pre-roll, not at the decision: it lets the
    /// capture thread sleep `armedWakeInterval`, as sox's VOX reads its 2048-frame blocks
    /// (43 ms at 48 kHz). An event opens up to that much later; a chunk every period made the
    /// capture thread and the worker wake 100 times a second for it (BENCHMARKS.md, issue 36).
    var wakeInterval: Double { gate == nil ? 0 : Self.armedWakeInterval }
    static let armedWakeInterval = 0.04

    /// Capture thread: the device failed, no more chunks will come. The worker writes what
    /// the buffer holds first: everything received is in the file.
    func engineFailed(_ error: RecorderError) {
        worker.finally { [self] in end(.failed(error)) }
    }

    /// Capture thread: hands the chunk to the worker through the write buffer, and nothing
    /// else. A full buffer loses the chunk (the worker sees the jump in positions and makes
    /// it a gap). false once the recording has ended: the engine detaches it.
    func receive(_ chunk: CaptureChunk) -> Bool {
        guard !isEnded, !detachedByStop.load(ordering: .acquiring) else { return false }
        // Waits for room only while the last chunk went in: once the buffer overflowed the
        // disk is stalled, and waiting would only make the device overrun as well.
        if worker.push(chunk, patience: overflowing ? 0 : pushPatience) {
            overflowing = false
        } else if !overflowing {
            overflowing = true
            writeBufferOverflows.add(1, ordering: .relaxed)
        }
        return true
    }

    /// Capture thread: the write buffer's next place, when it has room for a whole read, for
    /// the engine to read into (`receive` then copies nothing).
    func readTarget(frames: Int) -> UnsafeMutableRawPointer? {
        guard !isEnded, !detachedByStop.load(ordering: .acquiring) else { return nil }
        return worker.ring.reservation(frames: frames)
    }

    /// Frames the write buffer holds now and the most it held, in seconds of the device's audio.
    var writeBufferFill: (now: Double, peak: Double) {
        let rate = Double(configuration.sampleRate)
        return (Double(worker.ring.framesHeld) / rate, Double(worker.ring.mostFramesHeld) / rate)
    }

    /// Worker: writes one chunk (or the part of it the frame limit still takes). false once
    /// the recording has ended.
    @discardableResult
    func process(_ chunk: CaptureChunk) -> Bool {
        guard !isEnded else { return false }
        if resumed.exchange(false, ordering: .acquiringAndReleasing) {
            // After a pause: the device went on (listening) or stopped, either way the frames
            // in between are not lost audio, and the clock went on.
            reanchor = true
            expectedPosition = nil
        }
        followWallClockSteps(chunk)
        let lost = framesLostBefore(chunk)
        if let gate { return receiveGated(chunk, gate: gate, lost: lost) }
        var gapStart: Date?
        if lost != nil, !firstRead {
            // The file ends at the last frame before the gap; the next begins with this chunk.
            do {
                gapStart = try endFileAtGap()
            } catch {
                end(.failed(Self.writeFailure(error, device: deviceName)))
                return false
            }
            reanchor = true
        }
        // The engine's least delayed estimate when it has one (a recording that joins a device
        // open for a while, or taps, is then on the same clock as they are); else this read's.
        let captured = chunk.anchoredTime ?? chunk.captureTime
        let estimate = captured - Double(received) / Double(configuration.sampleRate)
        received += Int64(chunk.frames)
        anchorWindow = Swift.min(anchorWindow, estimate)
        if reanchor || anchor == .infinity {
            reanchor = false
            anchor = estimate
            anchorWindow = estimate
        } else if refiningFirstCut, estimate < anchor - 0.001 {
            anchor = estimate
            segmentTarget = clock.frames(startingAt: Date(timeIntervalSince1970: anchor), follows: false)
        }
        if let gapStart, let lost {
            let start = boundaryTime()
            let gap = Gap(start: gapStart, end: start, position: framesWritten.load(ordering: .relaxed),
                          error: lost.error(device: deviceName, rate: configuration.sampleRate))
            do throws(RecorderError) {
                _ = try rotate(at: start, reason: .gap, closedAt: gapStart, gap: gap)
            } catch {
                end(.failed(error))
                return false
            }
            gapFound(gap, lost.frames)
            segmentStarted()
        }
        if firstRead {
            // The first segment begins with the first frame.
            firstRead = false
            let start = Date(timeIntervalSince1970: anchor)
            let namedAt = segment.startedAt
            segment.startedAt = start
            // A gap ends when audio flows again, not when the device opened.
            if segment.gapBefore != nil { segment.gapBefore?.end = start }
            segmentTarget = clock.frames(startingAt: start, follows: false)
            refiningFirstCut = clock.alignToClock && segmentTarget != nil
            nameAfterStart(namedAt: namedAt)
            segment.unsynchronizedStart = stamp(writer, startedAt: start)
            currentSegment.withLock { $0 = segment }
            segmentStarted()
            markFirstFrameKnown()
        }
        if let failure = finalizeFailure.withLock({ $0 }) {
            end(.failed(failure))
            return false
        }
        let outOfSpace = checkSpace()
        var frames = chunk.frames
        if converter == nil, let frameLimit {
            // At the device's own format, no more than the file takes.
            frames = Swift.min(frames, Int(Swift.max(0, frameLimit - framesWritten.load(ordering: .relaxed))))
        }
        framesCaptured.add(Int64(frames), ordering: .relaxed)
        let now = CaptureEngine.uptime()
        let sync = now &- lastSync >= syncIntervalNanoseconds
        if sync { lastSync = now }
        do {
            try writeToFile(chunk.samples, frames: frames, sync: sync, readUptime: chunk.readUptime)
        } catch {
            end(.failed(Self.writeFailure(error, device: deviceName)))
            return false
        }
        if let outOfSpace {
            end(.failed(outOfSpace))
            return false
        }
        if let frameLimit, framesWritten.load(ordering: .relaxed) >= frameLimit {
            end(.limitReached)
            return false
        }
        return true
    }

    /// What was lost between the chunk before and `chunk` (worker): frames the write buffer
    /// had no room for (the jump in positions) and frames the device overran (estimated); nil
    /// when it follows on. Counts them.
    private func framesLostBefore(_ chunk: CaptureChunk) -> LostAudio? {
        defer { expectedPosition = chunk.position + Int64(chunk.frames) }
        let dropped = expectedPosition.map { Swift.max(0, chunk.position - $0) } ?? 0
        guard dropped > 0 || chunk.overruns > 0 else { return nil }
        xruns.add(chunk.overruns, ordering: .relaxed)
        framesLost.add(chunk.framesLost + dropped, ordering: .relaxed)
        return LostAudio(overrunFrames: chunk.framesLost, droppedFrames: dropped)
    }

    /// Before a gap (worker): the converter's tail goes into the current file, which then
    /// ends; returns when its last frame ended.
    private func endFileAtGap() throws -> Date {
        if let converter {
            try converter.flush { samples, frames in try write(samples, frames: frames) }
            try converter.reset()
        }
        return boundaryTime()
    }

    /// The space guard's check before a chunk is written: the error to end with once even
    /// retention cannot make room (this chunk still goes in: the minimum's margin holds it).
    func checkSpace() -> RecorderError? {
        guard let spaceGuard, framesWritten.load(ordering: .relaxed) + chunkAllowance > spaceLimit.load(ordering: .relaxed) else {
            return nil
        }
        // Rare: once per budget. Retention may free space first (deleting the oldest).
        if refreshSpaceLimit() { return nil }
        // More than the two chunks `refreshSpaceLimit` wants, so that it says yes after.
        spaceGuard.makeRoom(bytes: Int64(Double(4 * chunkAllowance) * spaceGuard.bytesPerFrame))
        return refreshSpaceLimit() ? nil : spaceGuard.insufficientSpace()
    }

    /// Measures free space and moves `spaceLimit` to what fits above the minimum. False when
    /// less than two more chunks fit. Any thread (atomics and statvfs only).
    @discardableResult
    func refreshSpaceLimit() -> Bool {
        guard let spaceGuard else { return true }
        // An .m4a is copied when it is finalized: keep room for a copy of what it holds so far
        // (frames written from now on count twice in `bytesPerFrame`).
        var reserve: Int64 = 0
        if spaceGuard.rewritesOnClose {
            var info = stat()
            if stat(currentSegment.withLock({ $0.partialPath }), &info) == 0 { reserve = Int64(info.st_blocks) * 512 }
        }
        // Measure first: frames written after the measurement are then counted twice, never missed.
        let measured = spaceGuard.roomInFrames(reserving: reserve)
        let written = framesWritten.load(ordering: .relaxed)
        guard let room = measured else {
            // statvfs failed (should not happen): try again after a second of audio, not every chunk.
            spaceLimit.store(written + Int64(fileRate), ordering: .relaxed)
            return true
        }
        // One chunk short of the room: when the thread gets there, the chunk in hand still fits
        // above the minimum, and it is written even when this says no more.
        spaceLimit.store(written + room - chunkAllowance, ordering: .relaxed)
        return room >= 2 * chunkAllowance
    }

    /// Whether every byte of the chunk is zero (exact digital silence in any sample format:
    /// a float -0.0 counts as signal, which no muted input delivers).
    static func isDigitalSilence(_ buffer: UnsafeRawPointer, bytes: Int) -> Bool {
        let words = bytes / 8
        let wide = buffer.assumingMemoryBound(to: UInt64.self)
        var bits: UInt64 = 0
        for index in 0..<words { bits |= wide[index] }
        let narrow = buffer.assumingMemoryBound(to: UInt8.self)
        for index in (words * 8)..<bytes { bits |= UInt64(narrow[index]) }
        return bits == 0
    }

    /// The first file was named when it was created, before the device delivered anything (an
    /// idle sound server takes seconds; a device that came back, a fraction): give it the name
    /// of its first frame's time, if the template has one. A failed rename keeps the old name.
    ///
    /// `namedAt` is the time the file was named after. When the template renders the same for
    /// both times (no time in it, or the same second) the name stands: asking for a free name
    /// again would find the file's own `.part` and number it (`-3` after a gap's `-2`).
    private func nameAfterStart(namedAt: Date) {
        guard files.render(index: segment.index, date: namedAt) != files.render(index: segment.index, date: segment.startedAt),
              let wanted = try? files.path(index: segment.index, startedAt: segment.startedAt)
        else { return }
        // link + unlink: never over another file; both names are on the same file system.
        guard link(segment.partialPath, wanted + ".part") == 0 else { return }
        unlink(segment.partialPath)
        segment.path = wanted
        writer?.renamed(to: segment.partialPath)
    }

    /// What a file whose first frame was captured at `time` says about its origin.
    func origin(startedAt time: Date, clock: StartClock) -> FileOrigin {
        FileOrigin(startedAt: time, recordingName: files.name, recordingId: files.recordingId, device: deviceName, clock: clock,
                   source: files.source)
    }

    /// Writes into a file beginning at `time` where it comes from, marked if the system clock is
    /// not synchronized now; returns the segment's mark then (nil: the clock vouches for it).
    func stamp(_ file: (any AudioFileWriter)?, startedAt time: Date) -> UnsynchronizedStart? {
        let mark = clockSynchronized() ? nil : UnsynchronizedStart(
            bootTime: time.timeIntervalSince1970 - (clockOffset.isNaN ? Double(recd_wall_clock_offset()) / 1e9 : clockOffset),
            template: files.template, localTime: files.localTime, bootId: BootIdentity.current)
        file?.stampOrigin(origin(startedAt: time, clock: mark == nil ? .synchronized : .unsynchronized))
        return mark
    }

    /// Moves the anchors by a step of the wall clock between the chunk before and `chunk`
    /// (worker), as the engine moved its own: the boundaries and the next files' starts are on
    /// the clock as it is now. The file being written keeps the start it was stamped with.
    private func followWallClockSteps(_ chunk: CaptureChunk) {
        guard !chunk.clockOffset.isNaN else { return }
        defer { clockOffset = chunk.clockOffset }
        guard !clockOffset.isNaN else { return }
        let step = chunk.clockOffset - clockOffset
        guard step != 0 else { return }
        if anchor.isFinite { anchor += step }
        if anchorWindow.isFinite { anchorWindow += step }
    }

    /// When the frame after the last one written was captured: the next segment's start.
    private func boundaryTime() -> Date {
        // The least delayed estimate over the segment that ends here (a triggered recording's
        // event keeps the time of its first frame).
        if gate == nil, anchorWindow < .infinity { anchor = anchorWindow }
        anchorWindow = .infinity
        return Date(timeIntervalSince1970: anchor + Double(framesWritten.load(ordering: .relaxed) - anchorFrames) / Double(fileRate))
    }

    /// Closes the current segment at the last frame written and opens the next, which starts
    /// at `time`. The old file is finalized and announced on the sync queue, off this thread.
    private func rotate(at time: Date, reason: SegmentEnd, closedAt: Date? = nil, gap: Gap? = nil) throws(RecorderError) -> Segment {
        refiningFirstCut = false
        let next = try files.create(index: segment.index + 1, startedAt: time,
                                    namedAt: clock.nameTime(forStart: time, follows: reason == .length))
        let mark = stamp(next.0, startedAt: time)
        let closed = finalSegment(endedAt: closedAt ?? time, reason: reason)
        let old = HandedOver(writer!)
        writer = next.0
        segment = next.1
        segment.unsynchronizedStart = mark
        segment.gapBefore = gap
        segmentTarget = clock.frames(startingAt: time, follows: reason == .length)
        segmentStartXruns = xruns.load(ordering: .relaxed)
        segmentStartLost = framesLost.load(ordering: .relaxed)
        segmentFramesWritten.store(0, ordering: .releasing)
        currentSegment.withLock { $0 = segment }
        let continued = gate?.continued(closed, next: segment, consumer: self)
        finalizeInBackground(old, closed) { finished in continued?(finished) }
        return closed
    }

    /// Finalizes a closed segment's file on the sync queue, off the capture thread, announces
    /// it, then runs `then` with it as finalized (its final path).
    func finalizeInBackground(_ old: HandedOver, _ closed: Segment, then: @escaping @Sendable (Segment) -> Void = { _ in }) {
        let segmentClosed = self.segmentClosed
        syncQueue.async { [self] in
            forgetSync(of: old.writer)
            let (finished, failure) = SegmentFinalizer.finish(old.writer, closed)
            if let failure { finalizeFailure.withLock { $0 = $0 ?? failure } }
            segmentClosed(finished, failure)
            then(finished)
        }
    }

    /// Writes `frames` file frames through `write(offset, count)`, moving to the next segment
    /// whenever the current one is full: the boundary falls exactly between two frames.
    private func writeSegmented(frames: Int, _ write: (_ offset: Int, _ count: Int) throws -> Void) throws {
        var offset = 0
        while offset < frames {
            var count = frames - offset
            if let segmentTarget {
                let room = segmentTarget - segmentFramesWritten.load(ordering: .relaxed)
                if room <= 0 {
                    // Frames still to write in this chunk arrived after the boundary.
                    _ = try rotate(at: boundaryTime(), reason: .length)
                    continue
                }
                count = Swift.min(count, Int(room))
            }
            try write(offset, count)
            offset += count
            segmentFramesWritten.add(Int64(count), ordering: .relaxed)
            framesWritten.add(Int64(count), ordering: .relaxed)
        }
    }

    /// Writes what the converter still holds (stop keeps the tail).
    private func finish() -> CaptureOutcome {
        if let gate { return finishGated(gate) }
        guard let converter else { return .stopped }
        do {
            try converter.flush { samples, frames in try write(samples, frames: frames) }
        } catch let error as SndfileError {
            return .failed(.saving(error))
        } catch let error as MPEG4Error {
            return .failed(.saving(error))
        } catch {
            return .failed(RecorderError(.unknown, "flushing the converter failed: \(error)"))
        }
        return .stopped
    }

    /// Meters and writes one chunk. A chunk with a sample other than zero moves `lastSignal`
    /// to `readUptime`.
    func writeToFile(_ buffer: UnsafeRawPointer, frames: Int, sync: Bool, readUptime: UInt64) throws {
        if try consume(buffer, frames: frames) { lastSignal.store(readUptime, ordering: .relaxed) }
        if sync { syncFile() }
    }

    /// Meters and writes one chunk; returns whether it had a sample other than zero.
    private func consume(_ buffer: UnsafeRawPointer, frames: Int) throws -> Bool {
        let channels = configuration.channels
        let samples = frames * channels
        // A triggered recording meters its input as it arrives (`receiveGated`), not here.
        let meter = gate == nil ? self.meter : nil
        if let converter {
            if converter.resamplesSixteenBit {
                // Metered as the device delivered it, which tells digital silence on the way.
                let typed = buffer.assumingMemoryBound(to: Int16.self)
                let silent = meter?.measure { $0.add(UnsafeBufferPointer(start: typed, count: samples), channels: channels) }
                    ?? bufferIsDigitalSilence(buffer, frames: frames)
                try converter.resample(typed, frames: frames) { samples, count in try write(samples, frames: count) }
                return !silent
            }
            let silent = bufferIsDigitalSilence(buffer, frames: frames)
            try converter.convert(buffer, format: configuration.sampleFormat, frames: frames,
                                  meter: { samples in meter?.measure { $0.add(samples, channels: converter.outputChannels) } },
                                  output: { samples, count in try write(samples, frames: count) })
            return !silent
        }
        // The meter's 16-bit pass tells digital silence too; otherwise (or without a meter) a
        // byte scan of its own.
        let silent = meter?.measure(buffer, frames: frames, format: configuration.sampleFormat)
            ?? bufferIsDigitalSilence(buffer, frames: frames)
        try writeSegmented(frames: frames) { offset, count in
            switch configuration.sampleFormat {
            case .int16: try writer?.write(buffer.assumingMemoryBound(to: Int16.self) + offset * channels, frames: count)
            case .int32: try writer?.write(buffer.assumingMemoryBound(to: Int32.self) + offset * channels, frames: count)
            case .float32: try writer?.write(buffer.assumingMemoryBound(to: Float.self) + offset * channels, frames: count)
            }
        }
        return !silent
    }

    /// The byte scan for digital silence over the chunk in `buffer`, where no 16-bit meter
    /// pass tells it.
    private func bufferIsDigitalSilence(_ buffer: UnsafeRawPointer, frames: Int) -> Bool {
        Self.isDigitalSilence(buffer, bytes: frames * configuration.bytesPerFrame)
    }

    /// Writes converted frames, never past the frame limit.
    func write(_ samples: ConvertedSamples, frames: Int) throws {
        var count = frames
        if let frameLimit {
            count = Swift.min(count, Int(frameLimit - framesWritten.load(ordering: .relaxed)))
            if count <= 0 { return }
        }
        let channels = fileChannels
        try writeSegmented(frames: count) { offset, part in
            switch samples {
            case .float(let floats): try writer?.write(floats + offset * channels, frames: part)
            case .int16(let integers): try writer?.write(integers + offset * channels, frames: part)
            }
        }
    }

    /// Makes the file playable up to here: header now, fsync in the background (an fsync can
    /// take longer than the device buffer lasts).
    func syncFile() {
        guard let writer else { return }
        writer.checkpoint()
        syncTarget.withLockedValue { $0 = HandedOver(writer) }
        syncRequests.or(data: 1)
    }
}

/// Audio lost between two chunks: what a gap says.
struct LostAudio {
    /// Frames device overruns lost (measured by the clock).
    var overrunFrames: Int64
    /// Frames the write buffer had no room for (exact: the jump in positions).
    var droppedFrames: Int64

    var frames: Int64 { overrunFrames + droppedFrames }

    func error(device: String, rate: Int) -> RecorderError {
        let seconds = String(printf: "%.3f", Double(frames) / Double(rate))
        if droppedFrames > 0 {
            return RecorderError(.audioLost, "\(seconds) s of audio from '\(device)' lost: the disk fell behind by more than "
                                 + "the write buffer holds ([capture] write_buffer)")
        }
        return RecorderError(.audioLost, "\(seconds) s of audio from '\(device)' lost: the device overran "
                             + "(recd did not read it in time)")
    }
}

/// A writer passed from the capture thread to the sync queue.
struct HandedOver: @unchecked Sendable {
    // @unchecked: the sync queue is serial, and the capture thread no longer touches a writer
    // it handed over for closing; a writer handed over for fsync is only synced, which
    // libsndfile's descriptor allows alongside writes.
    let writer: any AudioFileWriter
    init(_ writer: any AudioFileWriter) { self.writer = writer }
}
