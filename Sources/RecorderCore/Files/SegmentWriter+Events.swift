import ALSA
import AudioGraph
import Dispatch
import FoundationEssentials
import Glibc
import MPEG4
import RecorderModel
import Sndfile
import Synchronization

/// Counts a triggered recording keeps over its capture sessions (a device lost and back
/// brings a new consumer); `status` reads them from any thread.
final class TriggerCounters: Sendable {
    let events = Atomic<Int>(0)
    let discarded = Atomic<Int>(0)
    /// The open event's onset (seconds since 1970), NaN when none is open.
    let openOnset = Atomic<UInt64>(Double.nan.bitPattern)

    var onset: Double? {
        let value = Double(bitPattern: openOnset.load(ordering: .relaxed))
        return value.isNaN ? nil : value
    }
}

/// A triggered recording's side of its writer (on the worker): the detector, a ring of the
/// device's last frames (the pre-roll, the attack and the block being decided), and the event
/// open now. Frames reach an event's file from the ring, a block at a time, once the block is
/// decided: an event ends exactly where the detector says, never a frame later.
final class EventGate: @unchecked Sendable {
    // @unchecked: used on the worker only, but for the atomics and immutable values.
    let trigger: SoundTrigger
    let ring: PreRollRing
    let preRollFrames: Int64
    let counters: TriggerCounters
    /// Runs for every event opened, closed or discarded (the worker for `opened`, the
    /// sync queue once the file is finalized for the others).
    let announce: @Sendable (TriggerEvent) -> Void
    /// The next event file's segment index.
    var nextIndex: Int
    /// The open event's frames are in its file up to this engine position.
    var writtenUpTo: Int64 = 0
    var open: OpenEvent?

    struct OpenEvent {
        var number: Int
        var onset: Int64
        var onsetTime: Double
        /// The current file's first frame (engine position).
        var firstFrame: Int64
        /// Files so far (a maximum length cuts an event into more).
        var files = 1
    }

    init(settings: TriggerSettings, preRoll: Double, configuration: PCMConfiguration, counters: TriggerCounters,
         firstIndex: Int, announce: @escaping @Sendable (TriggerEvent) -> Void) {
        trigger = SoundTrigger(settings: settings, configuration: configuration)
        let rate = Double(configuration.sampleRate)
        preRollFrames = Int64((preRoll * rate).rounded())
        // The pre-roll, the attack, the block being decided and one to spare.
        ring = PreRollRing(seconds: preRoll + settings.attack + 2 * TriggerSettings.blockSeconds + 0.01,
                           configuration: configuration)
        self.counters = counters
        self.announce = announce
        nextIndex = firstIndex
    }

    /// A maximum length cut the open event at a segment boundary (worker): the next
    /// file is announced as opened now, the closed one (returned) once it is finalized.
    func continued(_ closed: Segment, next: Segment, writer: SegmentWriter) -> (@Sendable (Segment) -> Void)? {
        guard let previous = open else { return nil }
        var event = previous
        event.files += 1
        // The next file begins where the closed one ended (exactly, at the device's own rate).
        let deviceFrames = Double(closed.frames) * Double(writer.configuration.sampleRate) / Double(writer.fileRate)
        event.firstFrame = previous.firstFrame + Int64(deviceFrames.rounded())
        open = event
        nextIndex = next.index + 1
        let peak = trigger.eventPeak
        let announce = self.announce
        let opened = writer.event(.opened, event, segment: next, lastAbove: nil, peak: peak, reason: nil)
        let closedEvent = writer.event(.closed, previous, segment: closed, lastAbove: trigger.lastAbove, peak: peak,
                                         reason: "maximumLength")
        // In order: the closed file (once finalized), then the one that continues it.
        return { finished in
            var told = closedEvent
            told.path = finished.path
            told.duration = finished.duration
            announce(told)
            announce(opened)
        }
    }
}

extension SegmentWriter {
    /// A triggered recording's chunk: every frame goes into the gate's ring and through the
    /// detector, a block at a time; an open event's frames go on from the ring to its file.
    ///
    /// After a gap (`lost`) an open event ends with the last frame before it (reason `gap`):
    /// no event's file is spliced across lost audio.
    func processGated(_ chunk: CaptureChunk, gate: EventGate, lost: LostAudio?) -> CaptureOutcome? {
        if let lost {
            let rate = Double(configuration.sampleRate)
            let resumedAt = chunk.anchoredTime ?? chunk.captureTime
            let endPosition = gate.trigger.position
            let stoppedAt = resumedAt - Double(lost.frames) / rate
            if gate.open != nil {
                do {
                    try catchUp(gate, to: endPosition, readUptime: chunk.readUptime)
                    try closeEvent(gate, end: endPosition, lastAbove: Swift.min(gate.trigger.lastAbove, endPosition), reason: "gap")
                } catch {
                    return .failed(Self.writeFailure(error, device: deviceName))
                }
            }
            gate.trigger.reset()
            _ = gapFound(Gap(start: Date(timeIntervalSince1970: stoppedAt), end: Date(timeIntervalSince1970: resumedAt),
                         position: framesWritten.load(ordering: .relaxed), error: lost.error(device: deviceName, rate: Int(rate))),
                     lost.frames)
        }
        framesCaptured.add(Int64(chunk.frames), ordering: .relaxed)
        markFirstFrameKnown()
        if let failure = finalizeFailure.withLock({ $0 }) {
            return .failed(failure)
        }
        // Levels and digital silence from the input, written or not.
        let bytesPerFrame = configuration.bytesPerFrame
        let silent = meter?.measure(chunk.samples, frames: chunk.frames, format: configuration.sampleFormat)
            ?? Self.isDigitalSilence(chunk.samples, bytes: chunk.frames * bytesPerFrame)
        if !silent { lastSignal.store(chunk.readUptime, ordering: .relaxed) }
        let rate = Double(configuration.sampleRate)
        let trigger = gate.trigger
        do {
            var offset = 0
            while offset < chunk.frames {
                let count = Swift.min(chunk.frames - offset, trigger.framesToBlockEnd)
                let samples = chunk.samples + offset * bytesPerFrame
                let position = chunk.position + Int64(offset)
                _ = gate.ring.receive(CaptureChunk(samples: samples, frames: count, position: position,
                                                   captureTime: chunk.captureTime + Double(offset) / rate,
                                                   readUptime: chunk.readUptime, overruns: 0, framesLost: 0))
                let decision = trigger.feed(samples, frames: count, at: position)
                offset += count
                switch decision {
                case .open(let onset):
                    try openEvent(gate, onset: onset, chunk: chunk)
                    try catchUp(gate, to: trigger.position, readUptime: chunk.readUptime)
                case .close(let end, let lastAbove):
                    try catchUp(gate, to: end, readUptime: chunk.readUptime)
                    try closeEvent(gate, end: end, lastAbove: lastAbove, reason: "hang")
                case nil:
                    if gate.open != nil, trigger.framesToBlockEnd == trigger.blockFrames {
                        try catchUp(gate, to: trigger.position, readUptime: chunk.readUptime)
                    }
                }
            }
        } catch {
            return .failed(Self.writeFailure(error, device: deviceName))
        }
        if gate.open != nil {
            let now = CaptureEngine.uptime()
            if now &- lastSync >= syncIntervalNanoseconds {
                lastSync = now
                syncFile()
            }
        }
        if let outOfSpace = checkSpace() {
            return .failed(outOfSpace)
        }
        return nil
    }

    /// The error a failed write ends the recording with.
    static func writeFailure(_ error: any Error, device: String) -> RecorderError {
        switch error {
        case let error as SndfileError: .saving(error)
        case let error as MPEG4Error: .saving(error)
        case let error as RecorderError: error
        default: RecorderError(.unknown, "writing the recording from '\(device)' failed: \(error)")
        }
    }

    /// Writes the open event's frames from the ring up to engine position `end`.
    private func catchUp(_ gate: EventGate, to end: Int64, readUptime: UInt64) throws {
        guard gate.open != nil, end > gate.writtenUpTo else { return }
        try gate.ring.read(from: gate.writtenUpTo, upTo: end) { samples, frames, _ in
            try writeToFile(samples, frames: frames, sync: false, readUptime: readUptime)
        }
        gate.writtenUpTo = end
    }

    /// Opens an event's file, which begins the pre-roll before `onset` (as much of it as the
    /// ring holds: less right after the device opened).
    private func openEvent(_ gate: EventGate, onset: Int64, chunk: CaptureChunk) throws(RecorderError) {
        let rate = Double(configuration.sampleRate)
        let first = Swift.max(onset - gate.preRollFrames, gate.ring.oldestPosition)
        func time(_ position: Int64) -> Double {
            (chunk.anchoredTime ?? chunk.captureTime) - Double(chunk.position - position) / rate
        }
        let start = time(first)
        let date = Date(timeIntervalSince1970: start)
        let (file, opened) = try files.create(index: gate.nextIndex, startedAt: date)
        let mark = stamp(file, startedAt: date)
        self.file = file
        segment = opened
        segment.unsynchronizedStart = mark
        segmentTarget = clock.frames(startingAt: date, follows: false)
        segmentStartXruns = xruns.load(ordering: .relaxed)
        segmentStartLost = framesLost.load(ordering: .relaxed)
        segmentFramesWritten.store(0, ordering: .releasing)
        anchor = start
        anchorFrames = framesWritten.load(ordering: .relaxed)
        currentSegment.withLock { $0 = segment }
        gate.writtenUpTo = first
        let number = gate.counters.events.add(1, ordering: .relaxed).newValue
        let event = EventGate.OpenEvent(number: number, onset: onset, onsetTime: time(onset), firstFrame: first)
        gate.open = event
        gate.counters.openOnset.store(event.onsetTime.bitPattern, ordering: .relaxed)
        segmentStarted()
        gate.announce(self.event(.opened, event, segment: opened, lastAbove: nil, peak: gate.trigger.eventPeak, reason: nil))
    }

    /// Closes the open event's file at the frames written (the converter's tail added) and
    /// finalizes it off this thread, or deletes it when its sound was shorter than the minimum.
    private func closeEvent(_ gate: EventGate, end: Int64, lastAbove: Int64, reason: String) throws {
        guard let event = gate.open, let file else { return }
        if let converter {
            try converter.flush { samples, frames in try write(samples, frames: frames) }
            try converter.reset()
        }
        let frames = segmentFramesWritten.load(ordering: .acquiring)
        let endedAt = Date(timeIntervalSince1970: anchor + Double(framesWritten.load(ordering: .relaxed) - anchorFrames) / Double(fileRate))
        let closed = finalSegment(endedAt: endedAt, reason: reason == "hang" ? .event : reason == "gap" ? .gap : .end)
        self.file = nil
        gate.open = nil
        gate.counters.openOnset.store(Double.nan.bitPattern, ordering: .relaxed)
        segmentFramesWritten.store(0, ordering: .releasing)
        let settings = gate.trigger.settings
        let soundSeconds = Double(lastAbove - event.onset) / Double(configuration.sampleRate)
        let tooShort = reason == "hang" && event.files == 1 && !settings.keepShort && soundSeconds < settings.minimumLength
        let told = self.event(tooShort ? .discarded : .closed, event, segment: closed, lastAbove: lastAbove,
                              peak: gate.trigger.eventPeak, reason: reason)
        let old = HandedOver(file)
        let announce = gate.announce
        if tooShort {
            // Not a file anyone wants: the next event's file takes its index.
            framesWritten.subtract(frames, ordering: .relaxed)
            gate.counters.discarded.add(1, ordering: .relaxed)
            syncQueue.async { [self] in
                forgetSync(of: old.writer)
                old.writer.discard()
                unlink(closed.partialPath)
                announce(told)
            }
            return
        }
        gate.nextIndex = closed.index + 1
        finalizeInBackground(old, closed) { finished in
            var final = told
            final.path = finished.path
            final.duration = finished.duration
            announce(final)
        }
    }

    /// At `stop` (worker): the open event ends
    /// with the last frame received.
    func finishGated(_ gate: EventGate) -> CaptureOutcome {
        guard gate.open != nil else { return .stopped }
        do {
            try catchUp(gate, to: gate.trigger.position, readUptime: lastSignal.load(ordering: .relaxed))
            try closeEvent(gate, end: gate.trigger.position, lastAbove: gate.trigger.lastAbove, reason: "stopped")
        } catch {
            return .failed(Self.writeFailure(error, device: deviceName))
        }
        gate.trigger.reset()
        return .stopped
    }

    /// A triggered recording with no event open has no file to finalize at its end.
    var hasOpenFile: Bool { file != nil }

    /// After capture ended with an event open (the device went away, a write failed): the
    /// event's `closed`, for the file the recorder finalized as `finished`. Control queue, once
    /// the worker has ended.
    func eventEnded(in finished: Segment, reason: String) -> TriggerEvent? {
        guard let gate, let open = gate.open else { return nil }
        gate.open = nil
        gate.nextIndex = finished.index + 1
        gate.counters.openOnset.store(Double.nan.bitPattern, ordering: .relaxed)
        return event(.closed, open, segment: finished, lastAbove: gate.trigger.lastAbove, peak: gate.trigger.eventPeak, reason: reason)
    }

    func event(_ kind: TriggerEvent.Kind, _ event: EventGate.OpenEvent, segment: Segment, lastAbove: Int64?,
               peak: Double, reason: String?) -> TriggerEvent {
        let sound = lastAbove.map { Double($0 - event.onset) / Double(configuration.sampleRate) } ?? 0
        return TriggerEvent(kind: kind, recordingId: files.recordingId, event: event.number, index: segment.index,
                            path: segment.path, start: segment.startedAt, onset: Date(timeIntervalSince1970: event.onsetTime),
                            firstFrame: event.firstFrame, onsetFrame: event.onset, duration: segment.duration, soundDuration: sound, peak: peak, reason: reason)
    }
}
