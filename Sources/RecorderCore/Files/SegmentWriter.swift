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

/// A recording's disk side: everything between a chunk taken from the write buffer and the
/// file on disk. On the recording's worker thread (`recd-writer`, `RecordingConsumer`'s), a
/// chunk at a time, it converts, meters, cuts segments (at a length, a split, a gap, an
/// event's edges) and writes; its serial sync queue fsyncs and finalizes the closed segments
/// off that thread; once capture has ended, the control queue closes the last file here. As
/// jack_capture's disk thread, it never runs on the capture thread: what the device hands
/// over is only copied into the write buffer there (`RecordingConsumer.receive`).
///
/// A disk that stalls for less than the write buffer holds loses nothing; a longer stall, or
/// an overrun of the device, is a gap: the file ends at the last frame before it and the next
/// begins with its true capture time, never spliced across it.
final class SegmentWriter: @unchecked Sendable {
    // @unchecked: `file`, `converter` and the segment bookkeeping (`segment`, `segmentTarget`,
    // the anchors) are used on the worker thread only, from the recording's start until its
    // end; the control queue touches the file and the segment again only after that (in
    // `finalize`). A file replaced at a boundary is handed to the serial sync queue and never
    // touched again here. Everything shared is atomic or behind a lock.

    /// The file being written. Replaced at each segment boundary; nil between the events of a
    /// triggered recording.
    var file: (any AudioFileWriter)?
    /// Creates the next segment's file.
    let files: SegmentFileFactory
    let clock: SegmentClock
    /// Runs on the sync queue after each segment closed at a boundary is finalized.
    let segmentClosed: @Sendable (Segment, RecorderError?) -> Void
    /// Runs on the worker when the first segment's start is known (and its file may have been
    /// renamed to match), and when a file begins after a gap.
    let segmentStarted: @Sendable () -> Void
    /// Whether the system clock is synchronized now: asked as each file begins (its mark).
    let clockSynchronized: @Sendable () -> Bool
    /// The wall clock's offset from the boot clock the chunks' times were on, last chunk
    /// (worker; NaN before the first): a change is a step, which the anchors follow.
    private var clockOffset = Double.nan
    // The current segment, its length and what it had counted when it began.
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
    /// Device frames received, for the anchor.
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
    /// The worker's once-a-second fsync requests, coalesced onto the sync queue. A
    /// source, not a block per request: a block allocated on the worker and freed on
    /// a Dispatch worker fills that worker's cache (doc/architecture.md, "Resident memory").
    private let syncRequests: DispatchSourceUserDataOr
    /// The file the last request was for (the worker may have moved to the next
    /// segment's by the time the request runs); taken by the request, cleared before a close.
    private let syncTarget = NIOLockedValueBox<HandedOver?>(nil)
    /// The engine position the next chunk should have (worker): a chunk further on follows a
    /// gap (the write buffer was full, the device overran).
    private var expectedPosition: Int64?
    /// Gaps in this session, as each was found (worker); the recorder logs and counts each, and
    /// gives it back as counted (its position in the whole recording), which the next segment carries.
    let gapFound: @Sendable (Gap, _ frames: Int64) -> Gap
    /// `resume()` asked for the next chunk's time to be taken afresh.
    let resumed = Atomic<Bool>(false)

    // Shared with the timer and the control thread.
    let framesWritten = Atomic<Int64>(0)
    let framesCaptured = Atomic<Int64>(0)
    let xruns = Atomic<Int>(0)
    let framesLost = Atomic<Int64>(0)
    /// Frames in the current segment's file.
    let segmentFramesWritten = Atomic<Int64>(0)
    /// The segment being written, for status (published copy of `segment`).
    let currentSegment: NIOLockedValueBox<Segment>
    /// Finalizing a closed segment failed (disk): the recording ends with it.
    let finalizeFailure = NIOLockedValueBox<RecorderError?>(nil)
    /// Uptime (ns) of the last chunk with a sample that was not exactly zero.
    let lastSignal = Atomic<UInt64>(0)
    /// Signalled once the first segment's start is known (its first frame read, its file named
    /// after it) or capture has ended: what `start` waits for, to answer with the final path.
    private let firstFrameKnown = DispatchSemaphore(value: 0)
    private let firstFrameMarked = Atomic<Bool>(false)
    /// The device's name, for messages.
    let deviceName: String

    init(configuration: PCMConfiguration, deviceName: String, maximumChunkFrames chunkFrames: Int,
         file: (any AudioFileWriter)?, segment: Segment,
         files: SegmentFileFactory, clock: SegmentClock, gate: EventGate? = nil,
         segmentClosed: @escaping @Sendable (Segment, RecorderError?) -> Void,
         segmentStarted: @escaping @Sendable () -> Void = {},
         clockSynchronized: @escaping @Sendable () -> Bool = { true },
         fileRate: Int, fileChannels: Int, converterQuality: RecordingQuality,
         frameLimit: Int64?, metering: Bool, syncInterval: Double, spaceGuard: SpaceGuard? = nil,
         sixteenBitFile: Bool = false,
         gapFound: @escaping @Sendable (Gap, Int64) -> Gap = { gap, _ in gap }) throws(RecorderError) {
        self.configuration = configuration
        self.deviceName = deviceName
        self.file = file
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
        self.gapFound = gapFound
        syncRequests = DispatchSource.makeUserDataOrSource(queue: syncQueue)
        syncRequests.setEventHandler { [weak self] in
            guard let self else { return }
            let target = syncTarget.withLockedValue { target in defer { target = nil }; return target }
            try? target?.writer.sync()
        }
        syncRequests.activate()
    }

    deinit {
        syncRequests.cancel()
    }

    /// No requested fsync may run on `file` from here on (it is about to close). On the sync
    /// queue, where requests run, or before waiting for it.
    func forgetSync(of file: any AudioFileWriter) {
        syncTarget.withLockedValue { if $0?.writer === file { $0 = nil } }
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

    // MARK: After capture ended (the control queue)

    /// Finalizes the file after capture ended: header, sync, close.
    func closeFile() throws(RecorderError) {
        // No background fsync may run once the descriptor is closed.
        if let file { forgetSync(of: file) }
        syncQueue.sync {}
        do { try file?.close() } catch { throw RecorderError.saving(error) }
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
        if let file { forgetSync(of: file) }
        syncQueue.sync {}
        file?.discard()
    }

    /// Worker: writes one chunk (or the part of it the frame limit still takes). Returns how
    /// the recording ends with it (a failure, the frame limit reached), or nil: it goes on.
    func process(_ chunk: CaptureChunk) -> CaptureOutcome? {
        if resumed.exchange(false, ordering: .acquiringAndReleasing) {
            // After a pause: the device went on (listening) or stopped, either way the frames
            // in between are not lost audio, and the clock went on.
            reanchor = true
            expectedPosition = nil
        }
        followWallClockSteps(chunk)
        let lost = framesLostBefore(chunk)
        if let gate { return processGated(chunk, gate: gate, lost: lost) }
        var gapStart: Date?
        if lost != nil, !firstRead {
            // The file ends at the last frame before the gap; the next begins with this chunk.
            do {
                gapStart = try endFileAtGap()
            } catch {
                return .failed(Self.writeFailure(error, device: deviceName))
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
                _ = try rotate(at: start, reason: .gap, closedAt: gapStart, gap: (gap, lost.frames))
            } catch {
                return .failed(error)
            }
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
            segment.unsynchronizedStart = stamp(file, startedAt: start)
            currentSegment.withLock { $0 = segment }
            segmentStarted()
            markFirstFrameKnown()
        }
        if let failure = finalizeFailure.withLock({ $0 }) {
            return .failed(failure)
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
            return .failed(Self.writeFailure(error, device: deviceName))
        }
        if let outOfSpace {
            return .failed(outOfSpace)
        }
        if let frameLimit, framesWritten.load(ordering: .relaxed) >= frameLimit {
            return .limitReached
        }
        return nil
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
        file?.renamed(to: segment.partialPath)
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

    /// A split (worker, between two chunks): the current segment ends at the last frame
    /// written and the next begins. nil when the current segment holds nothing yet.
    func split() throws(RecorderError) -> Segment? {
        guard segmentFramesWritten.load(ordering: .relaxed) > 0 else { return nil }
        return try rotate(at: boundaryTime(), reason: .split)
    }

    /// Closes the current segment at the last frame written and opens the next, which starts
    /// at `time`. The old file is finalized and announced on the sync queue, off this thread.
    /// After a gap, the gap is counted before the next segment can be seen: whoever sees the
    /// segment that follows a gap (status, the finalizer's update) sees the gap too.
    private func rotate(at time: Date, reason: SegmentEnd, closedAt: Date? = nil,
                        gap lost: (gap: Gap, frames: Int64)? = nil) throws(RecorderError) -> Segment {
        refiningFirstCut = false
        let next = try files.create(index: segment.index + 1, startedAt: time,
                                    namedAt: clock.nameTime(forStart: time, follows: reason == .length))
        let mark = stamp(next.0, startedAt: time)
        let closed = finalSegment(endedAt: closedAt ?? time, reason: reason)
        let old = HandedOver(file!)
        file = next.0
        segment = next.1
        segment.unsynchronizedStart = mark
        segment.gapBefore = lost.map { gapFound($0.gap, $0.frames) }
        segmentTarget = clock.frames(startingAt: time, follows: reason == .length)
        segmentStartXruns = xruns.load(ordering: .relaxed)
        segmentStartLost = framesLost.load(ordering: .relaxed)
        segmentFramesWritten.store(0, ordering: .releasing)
        currentSegment.withLock { $0 = segment }
        let continued = gate?.continued(closed, next: segment, writer: self)
        finalizeInBackground(old, closed) { finished in continued?(finished) }
        return closed
    }

    /// Finalizes a closed segment's file on the sync queue, off the worker, announces
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
    func finish() -> CaptureOutcome {
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
            case .int16: try file?.write(buffer.assumingMemoryBound(to: Int16.self) + offset * channels, frames: count)
            case .int32: try file?.write(buffer.assumingMemoryBound(to: Int32.self) + offset * channels, frames: count)
            case .float32: try file?.write(buffer.assumingMemoryBound(to: Float.self) + offset * channels, frames: count)
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
            case .float(let floats): try file?.write(floats + offset * channels, frames: part)
            case .int16(let integers): try file?.write(integers + offset * channels, frames: part)
            }
        }
    }

    /// Makes the file playable up to here: header now, fsync in the background (an fsync can
    /// take longer than the device buffer lasts).
    func syncFile() {
        guard let file else { return }
        file.checkpoint()
        syncTarget.withLockedValue { $0 = HandedOver(file) }
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

/// A file passed from the worker to the sync queue.
struct HandedOver: @unchecked Sendable {
    // @unchecked: the sync queue is serial, and the worker no longer touches a file
    // it handed over for closing; a file handed over for fsync is only synced, which
    // libsndfile's descriptor allows alongside writes.
    let writer: any AudioFileWriter
    init(_ writer: any AudioFileWriter) { self.writer = writer }
}
