import ALSA
import Dispatch
import FoundationEssentials
import Glibc
import MPEG4
import NIOConcurrencyHelpers
import RecorderModel
import Sndfile
import Synchronization

/// How a capture thread ended.
enum CaptureOutcome: Sendable, Equatable {
    /// `stop()` or `cancel()` asked it to.
    case stopped
    /// `record(forDuration:)`'s frame count was reached.
    case limitReached
    /// The device or the file failed; everything before the failure is in the file.
    case failed(RecorderError)
}

/// One recording's capture thread: reads the device, converts, meters, writes the file.
///
/// The thread does nothing else. Publishing happens on the recorder's timer, which reads the
/// counters here (atomics) and the level meter (a mutex taken once per chunk). Control
/// (pause, resume, stop) is a request the thread picks up between reads, answered through
/// a condition, so that `pause()` returns only once no more frames will be written.
final class CaptureSession: @unchecked Sendable {
    // @unchecked: `pcm`, `writer`, `converter`, the buffers and the segment bookkeeping
    // (`segment`, `segmentTarget`, the anchors) are used by the capture thread only, after
    // `start()` and until `finished` is signalled; the control thread touches the writer and
    // the segment again only after that (in `finalize`). A writer the capture thread replaced
    // is handed to the serial sync queue and never touched again by the thread. Everything
    // shared is atomic or behind a lock.

    private enum Request: Sendable { case none, pause, resume, stop, split }

    let pcm: CapturePCM
    /// The file being written. Replaced by the capture thread at each segment boundary.
    private(set) var writer: any AudioFileWriter
    /// Creates the next segment's file.
    private let files: SegmentFileFactory
    private let clock: SegmentClock
    /// Runs on the sync queue after each segment the capture thread closed is finalized.
    private let segmentClosed: @Sendable (Segment, RecorderError?) -> Void
    /// Runs on the capture thread when the first segment's start is known (and its file may
    /// have been renamed to match).
    private let segmentStarted: @Sendable () -> Void
    // The current segment, its length and what it had counted when it began (capture thread).
    private var segment: Segment
    private var segmentTarget: Int64?
    private var segmentStartXruns = 0
    private var segmentStartLost: Int64 = 0
    private var firstRead = true
    /// When frame 0 was captured (seconds since 1970), as the earliest of the estimates "read
    /// time less the frames captured (read, and still in the device's buffer)" over the last
    /// segment: a read that came late (a busy machine) only makes an estimate later, so the
    /// minimum is the least delayed one; taking it afresh every segment follows the device
    /// clock's drift against the wall clock. Times every boundary as `anchor + frames written
    /// / rate`, and each file's recorded start (its first read's estimate for the first file).
    private var anchor = Double.infinity
    private var anchorWindow = Double.infinity
    /// After a pause: the next read sets the anchor afresh.
    private var reanchor = false
    /// The device clock against the monotonic clock, fed by every read.
    private var drift: ClockDriftEstimator
    let configuration: PCMConfiguration
    let fileRate: Int
    let fileChannels: Int
    /// For `record(forDuration:)`; set before `start()`.
    var frameLimit: Int64?
    /// The space guard's part here (nil: off): the thread writes up to `spaceLimit` frames
    /// without asking the filesystem, and measures again (statvfs) only when it gets there, so
    /// no chunk pays for a system call. The recorder's storage monitor moves the limit too.
    let spaceGuard: SpaceGuard?
    /// `framesWritten` up to which the disk is known to have room above the minimum.
    let spaceLimit = Atomic<Int64>(0)
    /// Frames one chunk can add to the file at most (resampling up included).
    private let chunkAllowance: Int64
    let meter: LevelMeter?
    private let converter: FormatConverter?
    /// Uptime nanoseconds between two syncs (wall clock: an unpaced device delivers an hour
    /// of audio in seconds, and the point is to bound what a crash loses in time).
    private let syncIntervalNanoseconds: UInt64
    private let syncQueue = DispatchQueue(label: "recd.capture.sync")
    /// An fsync is queued or running: never queue another behind it.
    private let syncPending = Atomic<Bool>(false)
    private let chunkFrames: Int
    private let buffer: UnsafeMutableRawPointer

    // Shared with the timer and the control thread.
    let framesWritten = Atomic<Int64>(0)
    let framesCaptured = Atomic<Int64>(0)
    let xruns = Atomic<Int>(0)
    let framesLost = Atomic<Int64>(0)
    /// Frames in the current segment's file.
    let segmentFramesWritten = Atomic<Int64>(0)
    /// The segment being written, for status (published copy of `segment`).
    let currentSegment: NIOLockedValueBox<Segment>
    /// The segment `split()` closed.
    private let splitResult = NIOLockedValueBox<Segment?>(nil)
    /// Finalizing a closed segment failed (disk): the capture thread ends with it.
    private let finalizeFailure = NIOLockedValueBox<RecorderError?>(nil)
    /// Uptime (ns) of the last chunk with a sample that was not exactly zero.
    let lastSignal = Atomic<UInt64>(0)
    /// Uptime (ns) of the last successful read: the watchdog's proof of progress.
    let lastProgress = Atomic<UInt64>(0)
    /// The drift estimate's bit pattern; NaN until there is one.
    private let driftPartsPerMillion = Atomic<UInt64>(Double.nan.bitPattern)
    private let request = NIOLockedValueBox<Request>(.none)
    /// Signalled when the thread has acted on the request in hand, or has ended: what the
    /// control thread waits on, woken by the answer, not polled. A semaphore, whose timeout is
    /// on the monotonic clock (a clock step after boot must not make a thread look stuck).
    private let answered = DispatchSemaphore(value: 0)
    private let wake = DispatchSemaphore(value: 0)
    private let resumeError = NIOLockedValueBox<RecorderError?>(nil)
    private let outcome = NIOLockedValueBox<CaptureOutcome?>(nil)
    private let finished = DispatchSemaphore(value: 0)
    /// Signalled once the first segment's start is known (its first frame read, its file named
    /// after it) or the thread has ended: what `start` waits for, to answer with the final path.
    private let firstFrameKnown = DispatchSemaphore(value: 0)
    private let firstFrameMarked = Atomic<Bool>(false)
    let isPaused = Atomic<Bool>(false)
    private let startedFlag = Atomic<Bool>(false)
    /// Who may use `writer` (and the converter): the capture thread until it ends or is abandoned.
    private let fileAccess = NIOLockedValueBox<FileAccess>(.captureThread)
    private enum FileAccess { case captureThread, abandoned }

    /// Whether the capture thread has been started.
    var started: Bool { startedFlag.load(ordering: .acquiring) }
    /// Whether the capture thread has ended.
    var hasEnded: Bool { isEnded }
    /// The device clock's drift against the monotonic clock (ppm); nil until it is stable.
    var deviceClockDriftPPM: Double? {
        let value = Double(bitPattern: driftPartsPerMillion.load(ordering: .relaxed))
        return value.isNaN ? nil : value
    }

    init(pcm: CapturePCM, configuration: PCMConfiguration, writer: any AudioFileWriter, segment: Segment,
         files: SegmentFileFactory, clock: SegmentClock,
         segmentClosed: @escaping @Sendable (Segment, RecorderError?) -> Void,
         segmentStarted: @escaping @Sendable () -> Void = {},
         fileRate: Int, fileChannels: Int, converterQuality: RecordingQuality,
         frameLimit: Int64?, metering: Bool, syncInterval: Double, spaceGuard: SpaceGuard? = nil,
         sixteenBitFile: Bool = false) throws(RecorderError) {
        self.pcm = pcm
        self.configuration = configuration
        self.writer = writer
        self.segment = segment
        self.currentSegment = NIOLockedValueBox(segment)
        self.files = files
        self.clock = clock
        self.segmentClosed = segmentClosed
        self.segmentStarted = segmentStarted
        self.fileRate = fileRate
        self.fileChannels = fileChannels
        self.frameLimit = frameLimit
        self.drift = ClockDriftEstimator(rate: configuration.sampleRate)
        self.meter = metering ? LevelMeter(channels: fileChannels) : nil
        self.syncIntervalNanoseconds = UInt64(Swift.max(0.001, syncInterval) * 1_000_000_000)
        // Read whole periods when the device paces us; larger chunks when it has more ready
        // (an unpaced device, or catching up), up to the device buffer.
        self.chunkFrames = Swift.max(configuration.periodFrames, Swift.min(configuration.bufferFrames, 8192))
        self.spaceGuard = spaceGuard
        let upsampling = (fileRate + configuration.sampleRate - 1) / Swift.max(1, configuration.sampleRate)
        self.chunkAllowance = Int64(chunkFrames * Swift.max(1, upsampling) + 1024)
        self.buffer = .allocate(byteCount: chunkFrames * configuration.bytesPerFrame, alignment: 16)
        if configuration.sampleRate != fileRate || configuration.channels != fileChannels {
            do {
                converter = try FormatConverter(
                    inputChannels: configuration.channels, outputChannels: fileChannels,
                    inputRate: configuration.sampleRate, outputRate: fileRate,
                    quality: converterQuality.converterQuality, maxInputFrames: chunkFrames,
                    inputFormat: configuration.sampleFormat, sixteenBitFile: sixteenBitFile)
            } catch {
                buffer.deallocate()
                throw RecorderError(.invalidSettings, "cannot convert \(configuration.sampleRate) Hz to \(fileRate) Hz: \(error)")
            }
        } else {
            converter = nil
        }
    }

    deinit { buffer.deallocate() }

    // MARK: Control (called from the recorder's control queue)

    /// Starts the capture thread. `onEnd` runs (on that thread) when it ends by itself.
    func start(onEnd: @escaping @Sendable (CaptureOutcome) -> Void) {
        lastProgress.store(Self.uptime(), ordering: .relaxed)
        lastSignal.store(Self.uptime(), ordering: .relaxed)
        startedFlag.store(true, ordering: .releasing)
        DispatchQueue(label: "recd.capture").async { [self] in
            let result = run()
            outcome.withLock { $0 = result }
            acknowledge()
            markFirstFrameKnown()
            finished.signal()
            onEnd(result)
        }
    }

    /// Waits until the first frame has been read (the first file then has its final name) or
    /// the thread has ended; false after `timeout` seconds without either.
    func awaitFirstFrame(timeout: Double) -> Bool {
        if firstFrameMarked.load(ordering: .acquiring) { return true }
        return firstFrameKnown.wait(timeout: .now() + .nanoseconds(Int(timeout * 1e9))) == .success
    }

    private func markFirstFrameKnown() {
        if !firstFrameMarked.exchange(true, ordering: .acquiringAndReleasing) { firstFrameKnown.signal() }
    }

    /// Asks the thread to pause; returns once it has stopped the device. Frames written up to
    /// then are all the file holds until `resume()`.
    func pause() throws(RecorderError) {
        guard !isEnded else { return }
        post(.pause)
        guard awaitAcknowledgement() else {
            request.withLock { $0 = .none }
            throw RecorderError(.deviceLost, "capture on '\(pcm.name)' is not responding (stuck in the device driver); "
                                + "stop the recording to keep what was written")
        }
    }

    /// Restarts the device after `pause()`; throws `failedToResume` if it will not start.
    func resume() throws(RecorderError) {
        guard !isEnded else { return }
        post(.resume)
        wake.signal()
        guard awaitAcknowledgement() else {
            throw RecorderError(.failedToResume, "capture on '\(pcm.name)' is not responding (stuck in the device driver)")
        }
        if let error = resumeError.withLock({ $0 }) { throw error }
    }

    /// Closes the current segment at the last frame written and continues in a new file, with
    /// no frame lost or repeated. Returns the closed segment (being finalized in the
    /// background), or nil if the current segment is still empty or capture has ended.
    func split() -> Segment? {
        guard !isEnded, !isPaused.load(ordering: .acquiring) else { return nil }
        splitResult.withLock { $0 = nil }
        post(.split)
        guard awaitAcknowledgement() else {
            request.withLock { $0 = .none }
            return nil
        }
        return splitResult.withLock { $0 }
    }

    /// Asks the thread to finish (flushing the converter) and waits for it, at most `timeout`
    /// seconds. A thread still stuck in the driver then is abandoned: it will never touch the
    /// file again, so the file can be finalized with what was written.
    func stop(timeout: Double) -> CaptureOutcome {
        if !isEnded {
            let wasPaused = isPaused.load(ordering: .acquiring)
            request.withLock { $0 = .stop }
            if wasPaused { wake.signal() }
        }
        if let outcome = join(timeout: timeout) { return outcome }
        abandon()
        return .failed(RecorderError(.deviceLost,
            "capture on '\(pcm.name)' did not stop within \(timeout) s (stuck in the device driver); "
            + "the file keeps the \(framesWritten.load(ordering: .acquiring)) frames written before"))
    }

    /// Waits for the thread to end and returns how it ended.
    func join() -> CaptureOutcome {
        finished.wait()
        finished.signal()  // let later callers through too
        return outcome.withLock { $0! }
    }

    /// `join()`, giving up after `timeout` seconds (nil).
    func join(timeout: Double) -> CaptureOutcome? {
        guard finished.wait(timeout: .now() + .nanoseconds(Int(timeout * 1e9))) == .success else { return nil }
        finished.signal()
        return outcome.withLock { $0! }
    }

    /// Takes the file away from a thread that does not end: once this returns, the thread
    /// writes nothing more (it checks under the same lock before every write), and ends
    /// quietly whenever the driver lets it go. The PCM stays open until then.
    private func abandon() {
        fileAccess.withLock { $0 = .abandoned }
    }

    /// Hands the thread a request that `awaitAcknowledgement` waits on.
    private func post(_ next: Request) {
        // An answer left from an earlier request (one that timed out) is not this one's.
        while answered.wait(timeout: .now()) == .success {}
        request.withLock { $0 = next }
    }

    /// On the capture thread: the request in hand is done (or the thread has ended).
    private func acknowledge() {
        answered.signal()
    }

    /// Waits for the thread to act on the request just posted, unless it ends first (a frame
    /// limit reached or the device lost at the same moment: ending answers too). False if it
    /// did neither within 5 s: the thread is stuck in the driver.
    private func awaitAcknowledgement() -> Bool {
        if isEnded { return true }
        return answered.wait(timeout: .now() + .seconds(5)) == .success
    }

    private var isEnded: Bool { outcome.withLock { $0 != nil } }

    /// Finalizes the file after the thread ended: header, sync, close.
    func closeFile() throws(RecorderError) {
        syncQueue.sync {}  // no background fsync may run once the descriptor is closed
        do { try writer.close() } catch { throw RecorderError.saving(error) }
    }

    /// The last segment as it ends: its frames, overruns and end, after the thread ended.
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
        syncQueue.sync {}
        writer.discard()
    }

    static func uptime() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    // MARK: The capture thread

    private func run() -> CaptureOutcome {
        do {
            try pcm.start()
        } catch {
            return .failed(RecorderError(.failedToBegin, "cannot start capture on '\(pcm.name)': \(error.reason)"))
        }
        var lastSync = Self.uptime()
        while true {
            switch request.withLock({ request in defer { request = .none }; return request }) {
            case .none, .resume: break
            case .stop: return finish()
            case .split:
                if segmentFramesWritten.load(ordering: .relaxed) > 0 {
                    do throws(RecorderError) {
                        let closed = try rotate(at: boundaryTime(), reason: .split)
                        splitResult.withLock { $0 = closed }
                    } catch {
                        acknowledge()
                        return .failed(error)
                    }
                }
                acknowledge()
            case .pause:
                if let ended = pausedUntilResumed() { return ended }
            }
            do {
                guard try pcm.wait(timeoutMilliseconds: 100) else { continue }
                let available = try pcm.available()
                var frames = Swift.min(Swift.max(available, configuration.periodFrames), chunkFrames)
                if converter == nil, let frameLimit {
                    // At the device's own format, read no more than the file will take.
                    frames = Swift.min(frames, Int(frameLimit - framesWritten.load(ordering: .relaxed)))
                }
                let got = try pcm.read(into: buffer, frames: frames)
                let readUptime = Self.uptime()
                lastProgress.store(readUptime, ordering: .relaxed)
                if got == 0 { continue }
                // Frames the device holds beyond this read were captured before now as well.
                let capturedByNow = framesCaptured.load(ordering: .relaxed) + Int64(got) + Int64(Swift.max(0, available - got))
                let estimate = Date().timeIntervalSince1970 - Double(capturedByNow) / Double(configuration.sampleRate)
                if reanchor { drift.restart() }
                if drift.add(uptimeNanoseconds: readUptime, frames: capturedByNow), let ppm = drift.partsPerMillion {
                    driftPartsPerMillion.store(ppm.bitPattern, ordering: .relaxed)
                }
                anchorWindow = Swift.min(anchorWindow, estimate)
                if reanchor || anchor == .infinity {
                    reanchor = false
                    anchor = estimate
                    anchorWindow = estimate
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
                    nameAfterStart(namedAt: namedAt)
                    writer.stampOrigin(origin(startedAt: start))
                    currentSegment.withLock { $0 = segment }
                    segmentStarted()
                    markFirstFrameKnown()
                }
                if let failure = finalizeFailure.withLock({ $0 }) { return .failed(failure) }
                var outOfSpace: RecorderError?
                if let spaceGuard, framesWritten.load(ordering: .relaxed) + chunkAllowance > spaceLimit.load(ordering: .relaxed) {
                    // Rare: once per budget. Retention may free space first (deleting the oldest).
                    if !refreshSpaceLimit() {
                        // More than the two chunks `refreshSpaceLimit` wants, so that it says yes after.
                        spaceGuard.makeRoom(bytes: Int64(Double(4 * chunkAllowance) * spaceGuard.bytesPerFrame))
                        // This chunk still goes in (the minimum's margin holds it): nothing captured is lost.
                        if !refreshSpaceLimit() { outOfSpace = spaceGuard.insufficientSpace() }
                    }
                }
                framesCaptured.add(Int64(got), ordering: .relaxed)
                let now = Self.uptime()
                let sync = now &- lastSync >= syncIntervalNanoseconds
                if sync { lastSync = now }
                guard try writeToFile(frames: got, sync: sync, readUptime: readUptime) else { return .stopped }
                if let outOfSpace { return .failed(outOfSpace) }
                if let frameLimit, framesWritten.load(ordering: .relaxed) >= frameLimit {
                    return .limitReached
                }
            } catch let error as ALSAError {
                do {
                    try recover(from: error)
                } catch {
                    return .failed(.deviceLost(error))
                }
            } catch let error as SndfileError {
                return .failed(.saving(error))
            } catch let error as MPEG4Error {
                return .failed(.saving(error))
            } catch let error as RecorderError {
                return .failed(error)
            } catch {
                return .failed(RecorderError(.unknown, "capture on '\(pcm.name)' failed: \(error)"))
            }
        }
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
        // Under the file's lock: a thread that was abandoned (stuck before its first read, woken
        // after `stop` gave up on it) must not rename the file the control thread is finalizing.
        fileAccess.withLock { access in
            guard access == .captureThread else { return }
            // link + unlink: never over another file; both names are on the same file system.
            guard link(segment.partialPath, wanted + ".part") == 0 else { return }
            unlink(segment.partialPath)
            segment.path = wanted
            writer.renamed(to: segment.partialPath)
        }
    }

    /// What a file whose first frame was captured at `time` says about its origin.
    private func origin(startedAt time: Date) -> FileOrigin {
        FileOrigin(startedAt: time, recordingName: files.name, recordingId: files.recordingId, device: pcm.name)
    }

    /// When the frame after the last one written was captured: the next segment's start.
    private func boundaryTime() -> Date {
        // The least delayed estimate over the segment that ends here.
        if anchorWindow < .infinity { anchor = anchorWindow }
        anchorWindow = .infinity
        return Date(timeIntervalSince1970: anchor + Double(framesWritten.load(ordering: .relaxed)) / Double(fileRate))
    }

    /// Closes the current segment at the last frame written and opens the next, which starts
    /// at `time`. The old file is finalized and announced on the sync queue, off this thread.
    private func rotate(at time: Date, reason: SegmentEnd) throws(RecorderError) -> Segment {
        let next = try files.create(index: segment.index + 1, startedAt: time,
                                    namedAt: clock.nameTime(forStart: time, follows: reason == .length))
        next.0.stampOrigin(origin(startedAt: time))
        let closed = finalSegment(endedAt: time, reason: reason)
        let old = HandedOver(writer)
        writer = next.0
        segment = next.1
        segmentTarget = clock.frames(startingAt: time, follows: reason == .length)
        segmentStartXruns = xruns.load(ordering: .relaxed)
        segmentStartLost = framesLost.load(ordering: .relaxed)
        segmentFramesWritten.store(0, ordering: .releasing)
        currentSegment.withLock { $0 = segment }
        let segmentClosed = self.segmentClosed
        syncQueue.async { [self] in
            let (finished, failure) = SegmentFinalizer.finish(old.writer, closed)
            if let failure { finalizeFailure.withLock { $0 = $0 ?? failure } }
            segmentClosed(finished, failure)
        }
        return closed
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

    /// Overrun or suspend: count it, estimate what was lost, restart. Anything else rethrows.
    private func recover(from error: ALSAError) throws(ALSAError) {
        if error.code == -EPIPE, let seconds = pcm.overrunDuration() {
            framesLost.add(Int64(seconds * Double(configuration.sampleRate)), ordering: .relaxed)
        }
        try pcm.recover(from: error)
        if error.code == -EPIPE || error.code == -ESTRPIPE {
            xruns.add(1, ordering: .relaxed)
            drift.restart()  // the lost frames broke the count against the clock
        }
    }

    /// Stops the device and waits for resume or stop. Returns an outcome if the thread must end.
    private func pausedUntilResumed() -> CaptureOutcome? {
        pcm.drop()
        isPaused.store(true, ordering: .releasing)
        acknowledge()
        while true {
            wake.wait()
            switch request.withLock({ request in defer { request = .none }; return request }) {
            case .stop:
                isPaused.store(false, ordering: .releasing)
                return finish()
            case .resume:
                isPaused.store(false, ordering: .releasing)
                do {
                    try pcm.prepare()
                    try pcm.start()
                    lastProgress.store(Self.uptime(), ordering: .relaxed)
                    resumeError.withLock { $0 = nil }
                    lastSignal.store(Self.uptime(), ordering: .relaxed)  // a pause is not silence
                    reanchor = true  // frames stopped while the clock went on
                    acknowledge()
                    return nil
                } catch {
                    let failure = RecorderError(.failedToResume, "cannot restart capture on '\(pcm.name)': \(error.reason)")
                    resumeError.withLock { $0 = failure }
                    acknowledge()
                    return .failed(failure)
                }
            case .none, .pause, .split:
                continue
            }
        }
    }

    /// Writes what the converter still holds (stop keeps the tail).
    private func finish() -> CaptureOutcome {
        guard let converter else { return .stopped }
        do {
            try fileAccess.withLock { access in
                guard case .captureThread = access else { return }
                try converter.flush { samples, frames in try write(samples, frames: frames) }
            }
        } catch let error as SndfileError {
            return .failed(.saving(error))
        } catch let error as MPEG4Error {
            return .failed(.saving(error))
        } catch {
            return .failed(RecorderError(.unknown, "flushing the converter failed: \(error)"))
        }
        return .stopped
    }

    /// Meters and writes one chunk, unless the file was taken away (false): a stop that timed
    /// out while this thread was stuck in the driver. A chunk with a sample other than zero
    /// moves `lastSignal` to `readUptime`.
    private func writeToFile(frames: Int, sync: Bool, readUptime: UInt64) throws -> Bool {
        try fileAccess.withLock { access in
            guard case .captureThread = access else { return false }
            if try consume(frames: frames) { lastSignal.store(readUptime, ordering: .relaxed) }
            if sync { syncFile() }
            return true
        }
    }

    /// Meters and writes one chunk; returns whether it had a sample other than zero.
    private func consume(frames: Int) throws -> Bool {
        let channels = configuration.channels
        let samples = frames * channels
        if let converter {
            if converter.resamplesSixteenBit {
                // Metered as the device delivered it, which tells digital silence on the way.
                let typed = buffer.assumingMemoryBound(to: Int16.self)
                let silent = meter?.measure { $0.add(UnsafeBufferPointer(start: typed, count: samples), channels: channels) }
                    ?? bufferIsDigitalSilence(frames: frames)
                try converter.resample(typed, frames: frames) { samples, count in try write(samples, frames: count) }
                return !silent
            }
            let silent = bufferIsDigitalSilence(frames: frames)
            try converter.convert(buffer, format: configuration.sampleFormat, frames: frames,
                                  meter: { samples in meter?.measure { $0.add(samples, channels: converter.outputChannels) } },
                                  output: { samples, count in try write(samples, frames: count) })
            return !silent
        }
        switch configuration.sampleFormat {
        case .int16:
            let typed = buffer.assumingMemoryBound(to: Int16.self)
            // The meter's pass tells digital silence too; without a meter, a pass of its own.
            let silent = meter?.measure { $0.add(UnsafeBufferPointer(start: typed, count: samples), channels: channels) }
                ?? bufferIsDigitalSilence(frames: frames)
            try writeSegmented(frames: frames) { offset, count in
                try writer.write(typed + offset * channels, frames: count)
            }
            return !silent
        case .int32:
            let silent = bufferIsDigitalSilence(frames: frames)
            let typed = buffer.assumingMemoryBound(to: Int32.self)
            meter?.measure { $0.add(UnsafeBufferPointer(start: typed, count: samples), channels: channels,
                                    scale: 1 / 2_147_483_648, clipLimit: Int32.max - 255) }
            try writeSegmented(frames: frames) { offset, count in
                try writer.write(typed + offset * channels, frames: count)
            }
            return !silent
        case .float32:
            // A float -0.0 counts as signal here; the meter's magnitudes could not tell it.
            let silent = bufferIsDigitalSilence(frames: frames)
            let typed = buffer.assumingMemoryBound(to: Float.self)
            meter?.measure { $0.add(UnsafeBufferPointer(start: typed, count: samples), channels: channels) }
            try writeSegmented(frames: frames) { offset, count in
                try writer.write(typed + offset * channels, frames: count)
            }
            return !silent
        }
    }

    /// The byte scan for digital silence over the chunk in `buffer`, where no 16-bit meter
    /// pass tells it.
    private func bufferIsDigitalSilence(frames: Int) -> Bool {
        Self.isDigitalSilence(buffer, bytes: frames * configuration.bytesPerFrame)
    }

    /// Writes converted frames, never past the frame limit.
    private func write(_ samples: ConvertedSamples, frames: Int) throws {
        var count = frames
        if let frameLimit {
            count = Swift.min(count, Int(frameLimit - framesWritten.load(ordering: .relaxed)))
            if count <= 0 { return }
        }
        let channels = fileChannels
        try writeSegmented(frames: count) { offset, part in
            switch samples {
            case .float(let floats): try writer.write(floats + offset * channels, frames: part)
            case .int16(let integers): try writer.write(integers + offset * channels, frames: part)
            }
        }
    }

    /// Makes the file playable up to here: header now, fsync in the background (an fsync can
    /// take longer than the device buffer lasts).
    private func syncFile() {
        writer.checkpoint()
        guard !syncPending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // This writer: the capture thread may have moved to the next segment's by the time it runs.
        let current = HandedOver(writer)
        syncQueue.async { [self] in
            try? current.writer.sync()
            syncPending.store(false, ordering: .releasing)
        }
    }
}

/// A writer passed from the capture thread to the sync queue.
private struct HandedOver: @unchecked Sendable {
    // @unchecked: the sync queue is serial, and the capture thread no longer touches a writer
    // it handed over for closing; a writer handed over for fsync is only synced, which
    // libsndfile's descriptor allows alongside writes.
    let writer: any AudioFileWriter
    init(_ writer: any AudioFileWriter) { self.writer = writer }
}
