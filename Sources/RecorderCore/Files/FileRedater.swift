import CLinux
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import RecorderModel
import SystemPackage

/// Gives the files begun while the system clock was not synchronized their true start once it
/// is (issue 50): a station without a real-time clock records from boot with whatever time
/// it saved at its last shutdown, and NTP corrects the clock later, or never.
///
/// A file's first frame is placed on the boot clock when it begins
/// (`Segment.unsynchronizedStart`); no step of the wall clock moves that. Once the clock is
/// synchronized, its true start is that plus the wall clock's offset from the boot clock
/// then. `FileRedating` writes it into the file, the file takes the name its template gives
/// the true start (never over another file), the session log learns it, and `redatedFile`
/// announces it (old path → new). A file still being written is corrected as it closes,
/// before it is announced at all (`correctedAtClose`). The files waiting are also written to
/// `<recordings>/.sessions/unsynchronized.ndjson`, so that recd started again in the same boot
/// (a crash, an upgrade) re-dates them too (`resume`); files of an earlier boot stay marked,
/// as does a file a crash left open (repaired at the next start, it was never closed here):
/// nothing is guessed.
final class FileRedater: Sendable {
    private struct Pending: Sendable {
        var segment: Segment
        var directory: String
    }

    private let published: RecorderOutputs
    private let logger: Logger
    private let isSynchronized: @Sendable () -> Bool
    /// Closed files that began unsynchronized, waiting for the clock: the newest
    /// `pendingLimit` (an offline station's clock may never be synchronized; past the limit
    /// the oldest stay marked, and the log says so once).
    private let pending = NIOLockedValueBox<(files: [Pending], dropped: Int)>(([], 0))
    /// Each costs about 0.8 KiB of resident memory (measured with `bench/soak_subscribers.py
    /// --clock unsynchronized --segment-seconds 1`, BENCHMARKS.md), so about 4 MiB at most:
    /// 41 hours of 30 s segments, 83 days of hourly files.
    static let pendingLimit = 5000
    /// Re-dating rewrites and renames files: off the clock's and the control queue.
    private let queue = DispatchQueue(label: "recd.redate")
    /// Follows the clock's publications (never blocks), beside `queue`, which may be waiting
    /// out a settling or rewriting files.
    private let clockQueue = DispatchQueue(label: "recd.redate.clock", target: .global())
    private let tokens = NIOLockedValueBox<[ObservationToken]>([])
    /// The clock counts as settled this long after it became synchronized or last stepped: a
    /// time service that declared synchronization just before its step must not have files
    /// re-dated by the clock it was about to correct.
    static let settleSeconds = 2.0
    /// When the clock settles (uptime ns; nil while it is not synchronized), the steps counted
    /// when it was last looked at, and which settling the timer is for.
    private let settling = NIOLockedValueBox<(settlesAt: UInt64?, steps: Int, generation: Int)>((nil, 0, 0))

    init(published: RecorderOutputs, isSynchronized: @escaping @Sendable () -> Bool, logger: Logger) {
        self.published = published
        self.isSynchronized = isSynchronized
        self.logger = logger
        // Synchronized when recd starts: settled already.
        let clock = published.clock.value
        settling.withLockedValue { $0 = (clock.synchronized ? 0 : nil, clock.steps, 0) }
        let observation = published.clock.subscribe(on: clockQueue, delivery: .every, sendingCurrent: false) { [weak self] clock in
            self?.clockChanged(clock)
        }
        // A file retention deleted waits no more.
        let deletions = published.retentionDeletion.subscribe(on: clockQueue, delivery: .every, sendingCurrent: false) {
            [weak self] deletion in
            if let deletion { self?.fileMoved(from: deletion.path, to: nil) }
        }
        tokens.withLock { $0 = [observation, deletions] }
    }

    /// A closed segment about to be announced: re-dated now if it began unsynchronized and the
    /// clock is synchronized by now (the segment as it is then); else, if it began so, kept
    /// for when it will be. Any thread but the clock's.
    func correctedAtClose(_ segment: Segment, directory: String) -> Segment {
        guard segment.unsynchronizedStart != nil else { return segment }
        if isSettled, let redated = redate(segment, directory: directory) { return redated.segment }
        let (firstDrop, trimmed) = pending.withLock { pending -> (Bool, [Segment]?) in
            pending.files.append(Pending(segment: segment, directory: directory))
            guard pending.files.count > Self.pendingLimit else { return (false, nil) }
            pending.files.removeFirst(pending.files.count - Self.pendingLimit)
            pending.dropped += 1
            // The log is cut back to what is kept once per `pendingLimit` files dropped: at most
            // twice as long, never rewritten at every close.
            let cut = pending.dropped % Self.pendingLimit == 1
            return (pending.dropped == 1, cut ? pending.files.filter { $0.directory == directory }.map(\.segment) : nil)
        }
        if let trimmed {
            Self.rewriteWaitingLog(directory: directory, trimmed)
        } else {
            Self.appendToWaitingLog(directory: directory, segment)
        }
        if firstDrop {
            logger.warning("the clock has not been synchronized for \(Self.pendingLimit) files; the oldest will keep their unsynchronized start",
                           metadata: ["segment.path": "\(segment.path)"])
        }
        // The clock may have been synchronized in between: its announcement found nothing.
        if isSettled { queue.async { [weak self] in self?.redatePending() } }
        return segment
    }

    /// Files waiting for the clock (status).
    var pendingCount: Int { pending.withLock { $0.files.count } }

    /// recd renamed a file (`recordings.rename`) or deleted it (`recordings.delete`, retention).
    /// A file waiting for the clock follows its new name, which it keeps when it is re-dated
    /// (a name a person gave it, not the template's), or waits no more. Any thread.
    func fileMoved(from path: String, to newPath: String?) {
        pending.withLock { pending in
            guard let directory = pending.files.first(where: { $0.segment.path == path })?.directory else { return }
            pending.files = pending.files.compactMap { file in
                guard file.segment.path == path else { return file }
                guard let newPath else { return nil }
                var moved = file
                moved.segment.path = newPath
                moved.segment.unsynchronizedStart?.template = ""
                return moved
            }
            Self.rewriteWaitingLog(directory: directory, pending.files.filter { $0.directory == directory }.map(\.segment))
        }
    }

    /// Synchronized, and neither that nor a step happened in the last `settleSeconds`.
    private var isSettled: Bool {
        guard isSynchronized() else { return false }
        return settling.withLockedValue { $0.settlesAt }.map { DispatchTime.now().uptimeNanoseconds >= $0 } ?? false
    }

    // MARK: On the queues

    /// On `clockQueue`. A synchronization or a step (while synchronized) starts the settling afresh; the files
    /// waiting are re-dated when it ends, unless another starts first.
    private func clockChanged(_ clock: ClockStatus) {
        let generation = settling.withLockedValue { settling -> Int? in
            let stepped = clock.steps != settling.steps
            settling.steps = clock.steps
            guard clock.synchronized else {
                settling.settlesAt = nil
                return nil
            }
            guard settling.settlesAt == nil || stepped else { return nil }
            settling.settlesAt = DispatchTime.now().uptimeNanoseconds + UInt64(Self.settleSeconds * 1e9)
            settling.generation += 1
            return settling.generation
        }
        guard let generation else { return }
        // Waited out on the re-dating's own queue (it may block), not with a Dispatch timer;
        // the settling state is kept by `clockQueue`, so a step meanwhile is seen at the end.
        queue.async { [weak self] in
            // Until this settling ends (then re-date), or another takes its place (then leave it
            // to that one's block), looking every 0.1 s.
            while let self, let settlesAt = settling.withLockedValue({ $0.generation == generation ? $0.settlesAt : nil }) {
                let now = DispatchTime.now().uptimeNanoseconds
                if now >= settlesAt {
                    redatePending()
                    return
                }
                usleep(UInt32(Swift.min(settlesAt - now, 100_000_000) / 1000))
            }
        }
    }

    private func redatePending() {
        let files = pending.withLock { pending -> [Pending] in
            pending.dropped = 0
            return pending.files
        }
        for file in files {
            let redated = redate(file.segment, directory: file.directory)
            // Waiting until done (`filesToRedate` counts it until then), or not to be done (a
            // file that cannot be re-dated keeps its mark for good).
            pending.withLock { pending in
                if let index = pending.files.firstIndex(where: { $0.segment.path == file.segment.path }) { pending.files.remove(at: index) }
            }
            guard let redated else { continue }
            if redated.segment.index > 1 || redated.segment.endReason != .end {
                RecordingLibrary(directory: file.directory).log(redated.segment)
            }
            published.redatedFile.send(redated)
        }
        for directory in Set(files.map(\.directory)) {
            Self.rewriteWaitingLog(directory: directory, pending.withLock { $0.files.filter { $0.directory == directory }.map(\.segment) })
        }
    }

    // MARK: The files waiting, on disk

    /// Not `.jsonl`: the session logs' listing (`RecordingLibrary.loggedSegments`) must not read it.
    static let waitingLogName = "unsynchronized.ndjson"

    static func waitingLogPath(_ directory: String) -> String {
        directory + "/" + RecordingLibrary.sessionLogDirectory + "/" + waitingLogName
    }

    /// Reads `directory`'s log of files waiting for the clock (at start): those of this boot
    /// that are still there and still marked wait again; the rest (another boot's, gone,
    /// re-dated) leave the log. Then, if the clock is synchronized already, re-dates them.
    func resume(directory: String) {
        queue.async { [self] in
            guard let text = try? String(contentsOfFile: Self.waitingLogPath(directory), encoding: .utf8) else { return }
            let decoder = JSONDecoder.sessionLog
            var seen: Set<String> = []
            var waiting: [Segment] = []
            for line in text.split(separator: "\n").reversed() {
                guard let segment = try? decoder.decode(Segment.self, from: Data(line.utf8)), seen.insert(segment.path).inserted,
                      let bootId = segment.unsynchronizedStart?.bootId, bootId == BootIdentity.current,
                      RecordingLibrary.startClock(ofFile: segment.path) == .unsynchronized else { continue }
                waiting.append(segment)
            }
            waiting.reverse()
            Self.rewriteWaitingLog(directory: directory, waiting)
            guard !waiting.isEmpty else { return }
            pending.withLock { pending in
                let known = Set(pending.files.map(\.segment.path))
                pending.files.insert(contentsOf: waiting.filter { !known.contains($0.path) }.map { Pending(segment: $0, directory: directory) }, at: 0)
            }
            logger.notice("files from before recd started wait for the clock to be re-dated",
                          metadata: ["files": "\(waiting.count)", "recordings_dir": "\(directory)"])
            if isSettled { redatePending() }
        }
    }

    /// Appends a file to the log (best effort: without it only this run re-dates the file).
    /// Only files that know their boot: others could never be trusted after a restart.
    private static func appendToWaitingLog(directory: String, _ segment: Segment) {
        guard segment.unsynchronizedStart?.bootId != nil else { return }
        RecordingLibrary(directory: directory).append(segment, toLog: waitingLogName)
    }

    /// Replaces the log with `segments` (a new file renamed over it), or removes it when none.
    private static func rewriteWaitingLog(directory: String, _ segments: [Segment]) {
        let path = waitingLogPath(directory)
        let kept = segments.filter { $0.unsynchronizedStart?.bootId != nil }
        guard !kept.isEmpty else {
            unlink(path)
            return
        }
        var data = Data()
        for segment in kept {
            guard let line = try? JSONEncoder.sessionLog.encode(segment) else { continue }
            data.append(line)
            data.append(0x0A)
        }
        let temporary = path + ".new"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        let wrote = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        if wrote == data.count { rename(temporary, path) } else { unlink(temporary) }
    }

    /// Rewrites the start in `segment`'s file and renames it as its template names the true
    /// start. Nil (logged) when the file cannot be re-dated: it keeps its mark.
    private func redate(_ segment: Segment, directory: String) -> RedatedFile? {
        guard let mark = segment.unsynchronizedStart else { return nil }
        // Moved away or deleted by someone else (an uploader, a person): nothing to correct.
        guard access(segment.path, F_OK) == 0 else {
            logger.notice("file gone before the clock was synchronized; nothing to re-date",
                          metadata: ["segment.path": "\(segment.path)", "recording.id": "\(segment.recordingId)"])
            return nil
        }
        let offset = Double(recd_wall_clock_offset()) / 1e9
        let start = Date(timeIntervalSince1970: mark.bootTime + offset)
        let stamped = FileOrigin(startedAt: segment.startedAt, recordingName: segment.name, recordingId: segment.recordingId,
                                 device: "", clock: .unsynchronized)
        var metadata: Logger.Metadata = ["segment.path": "\(segment.path)", "recording.id": "\(segment.recordingId)",
                                         "start.before": "\(UTCTimestamp.text(segment.startedAt))",
                                         "start.after": "\(UTCTimestamp.text(start))"]
        do throws(RecorderError) {
            try FileRedating.redate(path: segment.path, from: stamped, to: start, sampleRate: segment.sampleRate)
        } catch {
            metadata["error.message"] = "\(error.message)"
            logger.error("file could not be re-dated; it keeps its unsynchronized start", metadata: metadata)
            return nil
        }
        var redated = segment
        redated.startedAt = start
        redated.redatedFrom = segment.startedAt
        redated.unsynchronizedStart = nil
        if let ended = segment.endedAt { redated.endedAt = ended.addingTimeInterval(start.timeIntervalSince(segment.startedAt)) }
        redated.path = renamed(segment, mark: mark, start: start, directory: directory) ?? segment.path
        metadata["segment.path"] = "\(redated.path)"
        metadata["segment.previous_path"] = "\(segment.path)"
        metadata["start.correction"] = "\(String(printf: "%+.3f", start.timeIntervalSince(segment.startedAt)))"
        logger.notice("file re-dated", metadata: metadata)
        return RedatedFile(segment: redated, previousPath: segment.path, previousStart: segment.startedAt)
    }

    /// The file's new path when its template names the true start otherwise (nil: the name
    /// stands). A link, then the old name's unlink: never over another file.
    private func renamed(_ segment: Segment, mark: UnsynchronizedStart, start: Date, directory: String) -> String? {
        let fileExtension = FilePath(segment.path).extension ?? ""
        let before = SegmentFileFactory.render(mark.template, localTime: mark.localTime, name: segment.name,
                                               index: segment.index, date: segment.startedAt)
        let after = SegmentFileFactory.render(mark.template, localTime: mark.localTime, name: segment.name,
                                              index: segment.index, date: start)
        guard before != after else { return nil }
        do throws(RecorderError) {
            let wanted = try SegmentFileFactory.uniquePath(directory: directory, relative: after, fileExtension: fileExtension)
            guard link(segment.path, wanted) == 0 else {
                throw RecorderError(.failedToSave, String(cString: strerror(errno)))
            }
            unlink(segment.path)
            Directories.sync(containing: wanted)
            Directories.sync(containing: segment.path)
            return wanted
        } catch {
            logger.error("re-dated file could not be renamed; it keeps its name",
                         metadata: ["segment.path": "\(segment.path)", "error.message": "\(error.message)"])
            return nil
        }
    }
}
