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
/// each chunk into its write buffer (`ChunkRing`); its worker thread (`recd-writer`) takes them
/// from there and hands each to the recording's `SegmentWriter`, which does all the disk work.
/// Here is the control of it, from the recorder's control queue: start, pause, resume, split,
/// stop, and how capture ended.
///
/// Control runs on the worker between two chunks (`ChunkWorker.perform`), after every chunk
/// captured before, so that `pause()` returns only once no more frames will be written, and a
/// split falls between two frames.
final class RecordingConsumer: CaptureConsumer, @unchecked Sendable {
    // @unchecked: `overflowing` is the capture thread's alone; everything else shared is
    // atomic, behind a lock, or immutable.

    let engine: CaptureEngine
    /// The disk side: files, segments, conversion, metering, fsync and finalizing.
    let writer: SegmentWriter
    /// The write buffer and the thread that empties it into `writer`.
    private(set) var worker: ChunkWorker!
    /// Times the write buffer was full and refused a chunk (capture thread counts).
    let writeBufferOverflows = Atomic<Int>(0)
    private var overflowing = false
    /// How long the capture thread waits for room in a full buffer (ns): half the device's buffer.
    private let pushPatience: UInt64
    private let outcome = NIOLockedValueBox<CaptureOutcome?>(nil)
    private let finished = DispatchSemaphore(value: 0)
    let isPaused = Atomic<Bool>(false)
    private let startedFlag = Atomic<Bool>(false)
    /// `stop` gave up on a capture thread stuck in the driver: it pushes nothing more.
    private let detachedByStop = Atomic<Bool>(false)

    /// Runs (on the worker) when the recording ends by itself: frame limit, failure.
    /// Taken (and so released) when capture ends: the recorder's closure holds this consumer,
    /// and kept here for longer it would keep it, its engine and the device open forever.
    private let onEnd = NIOLockedValueBox<(@Sendable (CaptureOutcome) -> Void)?>(nil)

    /// Whether capture has been started.
    var started: Bool { startedFlag.load(ordering: .acquiring) }
    /// Whether the recording's capture has ended.
    var hasEnded: Bool { isEnded }
    var isEnded: Bool { outcome.withLock { $0 != nil } }
    /// The device clock's drift against the monotonic clock (ppm); nil until it is stable.
    var deviceClockDriftPPM: Double? { engine.deviceClockDriftPPM }
    /// The device's name, for messages.
    var deviceName: String { engine.pcm.name }
    var configuration: PCMConfiguration { engine.configuration }

    /// `writeBuffer` seconds of the device's audio, and room for `preRollRoom` seconds of
    /// pre-roll handed over at the start on top.
    init(engine: CaptureEngine, writer: SegmentWriter, writeBuffer: Double = 10, preRollRoom: Double = 0) {
        let configuration = engine.configuration
        self.engine = engine
        self.writer = writer
        pushPatience = UInt64(Double(configuration.bufferFrames) / Double(Swift.max(1, configuration.sampleRate)) / 2 * 1e9)
        let ring = ChunkRing(frames: Int(((writeBuffer + preRollRoom) * Double(configuration.sampleRate)).rounded(.up))
                                 + engine.maximumChunkFrames,
                             bytesPerFrame: configuration.bytesPerFrame, typicalChunkFrames: configuration.periodFrames)
        worker = ChunkWorker(ring: ring) { [weak self] chunk in self?.write(chunk) }
    }

    deinit {
        worker.stop()
    }

    // MARK: Control (called from the recorder's control queue)

    /// Attaches the recording to the engine: from the next chunk on (after `preRoll`, which
    /// runs on the capture thread first and hands over frames the engine kept), every frame
    /// goes to the file. `onEnd` runs (on the worker) when it ends by itself.
    func start(preRoll: @escaping (RecordingConsumer) -> Void = { _ in },
               onEnd: @escaping @Sendable (CaptureOutcome) -> Void) throws(RecorderError) {
        self.onEnd.withLock { $0 = onEnd }
        writer.lastSignal.store(CaptureEngine.uptime(), ordering: .relaxed)
        writer.lastSync = CaptureEngine.uptime()
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
    func awaitFirstFrame(timeout: Double) -> Bool { writer.awaitFirstFrame(timeout: timeout) }

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
            writer.lastSignal.store(CaptureEngine.uptime(), ordering: .relaxed)  // a pause is not silence
            writer.resumed.store(true, ordering: .releasing)  // frames stopped while the clock went on
            return true
        }
    }

    /// Closes the current segment at the last frame written and continues in a new file, with
    /// no frame lost or repeated. Returns the closed segment (being finalized in the
    /// background), or nil if the current segment is still empty or capture has ended.
    func split() -> Segment? {
        guard !isEnded, !isPaused.load(ordering: .acquiring) else { return nil }
        return worker.perform { [self] () -> Segment? in
            guard !isEnded else { return nil }
            do throws(RecorderError) {
                return try writer.split()
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
            let finished = writer.finish()
            if detached || finished != .stopped {
                end(finished, announce: false)
            } else {
                end(.failed(RecorderError(.deviceLost,
                    "capture on '\(deviceName)' did not stop within \(timeout) s (stuck in the device driver); "
                    + "the file keeps the \(writer.framesWritten.load(ordering: .acquiring)) frames written before")), announce: false)
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
        writer.markFirstFrameKnown()
        finished.signal()
        let callback = onEnd.withLock { callback in defer { callback = nil }; return callback }
        if announce { callback?(ended) }
    }

    // MARK: On the capture thread

    /// A recording takes every period (its first frames, `currentTime`, a stop's last frame
    /// come that soon). A sound-activated one needs its chunks only as often as its detector
    /// must decide, and the file begins at the pre-roll, not at the decision: it lets the
    /// capture thread sleep `armedWakeInterval`, as sox's VOX reads its 2048-frame blocks
    /// (43 ms at 48 kHz). An event opens up to that much later; a chunk every period made the
    /// capture thread and the worker wake 100 times a second for it (BENCHMARKS.md, issue 36).
    var wakeInterval: Double { writer.gate == nil ? 0 : Self.armedWakeInterval }
    static let armedWakeInterval = 0.04

    /// Capture thread: the device failed, no more chunks will come. The worker writes what
    /// the buffer holds first: everything received is in the file.
    func engineFailed(_ error: RecorderError) {
        worker.finally { [self] in end(.failed(error)) }
    }

    /// Capture thread: hands the chunk to the worker through the write buffer, and nothing
    /// else. A full buffer loses the chunk (the writer sees the jump in positions and makes
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

    // MARK: On the worker

    /// One chunk from the write buffer to the writer; the recording ends when the writer says so.
    private func write(_ chunk: CaptureChunk) {
        guard !isEnded else { return }
        if let ended = writer.process(chunk) { end(ended) }
    }
}
