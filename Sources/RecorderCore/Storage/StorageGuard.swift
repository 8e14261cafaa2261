import AudioGraph
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import RecorderModel
import SystemPackage

/// One recording's space guard: the minimum its filesystem keeps free and the most bytes a
/// frame of its files can take, so that the capture thread knows how far it may write.
final class SpaceGuard: Sendable {
    let directory: String
    let minimumFree: SpaceAmount
    /// An upper bound: the PCM size of a frame at the file's bit depth (16 bits for lossy
    /// codecs, far above their rate), +10 % for headers and encoder blocks; twice that for
    /// .m4a, whose finalization rewrites the segment (`moov` first).
    let bytesPerFrame: Double
    /// Finalizing the file copies it (.m4a): room for a copy of what it holds is kept too.
    let rewritesOnClose: Bool
    let fileRate: Int
    /// Retention on the capture thread: delete the oldest until this many bytes above the
    /// minimum are free. Nil with retention off.
    private let makeRoomHandler: (@Sendable (Int64) -> Void)?

    init(directory: String, minimumFree: SpaceAmount, settings: RecordingSettings, fileRate: Int, fileChannels: Int,
         makeRoom: (@Sendable (Int64) -> Void)?) {
        self.directory = directory
        self.minimumFree = minimumFree
        let bytesPerSample = Double(Swift.max(2, (settings.effectiveBitDepth ?? 16) / 8))
        self.rewritesOnClose = settings.format.properties.container == .mpeg4
        self.bytesPerFrame = Double(fileChannels) * bytesPerSample * 1.1 * (rewritesOnClose ? 2 : 1)
        self.fileRate = fileRate
        self.makeRoomHandler = makeRoom
    }

    var bytesPerSecond: Double { bytesPerFrame * Double(fileRate) }

    /// Frames that fit above the minimum now, keeping `reserve` bytes aside too; nil if the
    /// filesystem cannot be measured.
    func roomInFrames(reserving reserve: Int64 = 0) -> Int64? {
        guard let space = FileSystemSpace.measure(directory) else { return nil }
        let room = space.freeBytes - minimumFree.bytes(ofTotal: space.totalBytes) - reserve
        return room <= 0 ? 0 : Int64(Double(room) / bytesPerFrame)
    }

    func makeRoom(bytes: Int64) { makeRoomHandler?(bytes) }

    func insufficientSpace() -> RecorderError {
        let space = FileSystemSpace.measure(directory)
        let minimum = space.map { SpaceAmount.describe(bytes: minimumFree.bytes(ofTotal: $0.totalBytes)) } ?? minimumFree.description
        return RecorderError(.insufficientSpace,
            "free space on the filesystem of \(directory) is down to the \(minimum) recd keeps free ([storage] minimum_free = "
            + "\(minimumFree)) and the room to finalize the file: the recording ended and its file holds everything captured")
    }
}

/// What the storage guard remembers between its ticks (behind `StorageGuard.monitor`).
struct StorageMonitorState {
    /// Uptime (ns) of the last scan of the recordings directory; 0: never.
    var lastScan: UInt64 = 0
    /// A file closed: scan (and apply retention) at the next tick.
    var scanRequested = true
    /// Uptime (ns) of the last `ProcessMemory.releaseFreePages()`.
    var lastTrim: UInt64 = 0
    var recordingsBytes: Int64 = 0
    var recordingsCount = 0
    var outlook: [RetentionCandidate] = []
    /// Until when retention only announces what is due (`RetentionSettings.grace`): set when
    /// the recorder starts and when the retention settings change; nil once it has passed.
    var graceUntil: Date?
    /// The files announced during this grace, each once.
    var announced: Set<String> = []

    /// Starts a grace for `settings` (none when retention is off or the grace is 0).
    mutating func beginGrace(_ settings: RetentionSettings, now: Date = Date()) {
        graceUntil = settings.isEnabled && settings.grace > 0 ? now.addingTimeInterval(settings.grace) : nil
        announced = []
    }
}

/// The space guard and retention, off the control and capture paths on a queue of their
/// own: every `storage.checkInterval` while a recording is active (every `idleCheckInterval`
/// otherwise) it measures free space (publishing `storage`, raising and clearing the
/// `lowDiskSpace` warning, moving the capture thread's space limit); every
/// `retention.interval`, and after each file closes, it scans the directory and applies
/// retention. A recording's `SpaceGuard` calls back into it when the disk fills.
final class StorageGuard: @unchecked Sendable {
    // @unchecked: `timer` is set in init only; `monitor` is behind its lock and retention
    // passes behind `retentionLock`; everything else is immutable or Sendable.
    private let queue = DispatchQueue(label: "recd.recorder.storage")
    private let monitor = NIOLockedValueBox(StorageMonitorState())
    /// One retention pass at a time (the monitor's, a start's, the capture thread's).
    private let retentionLock = NIOLock()
    private var timer: DispatchSourceTimer?
    private let configurationBox: NIOLockedValueBox<RecorderConfiguration>
    /// The recording's capture session, if one runs: its space limit follows the free space.
    private let activeSession: NIOLockedValueBox<RecordingConsumer?>
    private let published: RecorderOutputs
    private let logger: Logger
    /// Follows the recorder's state: the tick's interval depends on whether a recording is active.
    private var stateObservation: ObservationToken?
    /// Whether the timer ticks at the recording's interval (on `queue`).
    private var tickingForRecording = false
    /// The station's other sources' folders, which retention weighs together with this one's;
    /// nil for a station of one.
    private let station: StationRecordings?

    /// Between recordings free space only feeds `storage` and the low-space warning (nothing is
    /// written, and a start measures it anyway): measured this often, or at `check_interval` if
    /// that is longer. An idle or listening daemon's one-second tick was a fifth of its own CPU.
    static let idleCheckInterval: Double = 10

    init(configuration: NIOLockedValueBox<RecorderConfiguration>, activeSession: NIOLockedValueBox<RecordingConsumer?>,
         published: RecorderOutputs, station: StationRecordings? = nil, logger: Logger) {
        self.configurationBox = configuration
        self.activeSession = activeSession
        self.published = published
        self.station = station
        self.logger = logger
        let configuration = configuration.withLock { $0 }
        station?.join(StationRecordings.Member(
            directory: configuration.recordingsDirectory,
            active: { Self.activeFile(published) },
            deleted: { published.retentionDeletion.send($0) },
            changed: { [weak self] in self?.requestRetentionPass() },
            logger: logger))
        monitor.withLock { $0.beginGrace(configuration.retention) }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        Self.schedule(timer, interval: Self.interval(configuration, recording: false))
        timer.setEventHandler { [weak self] in self?.checkStorage() }
        timer.resume()
        self.timer = timer
        stateObservation = published.state.subscribe(on: queue) { [weak self] state in self?.stateChanged(state) }
    }

    deinit {
        stateObservation?.cancel()
        timer?.cancel()
    }

    /// The tick's interval: `check_interval` while a recording is active, at least
    /// `idleCheckInterval` otherwise.
    private static func interval(_ configuration: RecorderConfiguration, recording: Bool) -> Double {
        recording ? configuration.storage.checkInterval : Swift.max(configuration.storage.checkInterval, idleCheckInterval)
    }

    /// On `queue`: a recording became active or ended; a new interval begins with a tick.
    private func stateChanged(_ state: RecorderState) {
        // Waiting for its device, a recording writes nothing: the idle interval, so that
        // nothing but a change of the sound cards wakes a waiting station every second.
        let writing = state.isActive && state.name != .waitingForDevice
        guard writing != tickingForRecording, let timer else { return }
        tickingForRecording = writing
        Self.schedule(timer, interval: Self.interval(configuration, recording: tickingForRecording))
    }

    private var configuration: RecorderConfiguration { configurationBox.withLock { $0 } }

    /// The configuration changed from `previous`: the tick's interval follows, and new
    /// retention settings begin a grace and a pass.
    func reconfigured(from previous: RecorderConfiguration, to configuration: RecorderConfiguration) {
        if previous.storage.checkInterval != configuration.storage.checkInterval {
            queue.async { [weak self] in
                guard let self, let timer else { return }
                Self.schedule(timer, interval: Self.interval(configuration, recording: tickingForRecording))
            }
        }
        if previous.retention != configuration.retention {
            monitor.withLock { $0.beginGrace(configuration.retention) }
            requestRetentionPass()
        }
    }

    private static func schedule(_ timer: DispatchSourceTimer, interval: Double) {
        let nanoseconds = Int(Swift.max(0.05, interval) * 1_000_000_000)
        timer.schedule(deadline: .now(), repeating: .nanoseconds(nanoseconds), leeway: .nanoseconds(nanoseconds / 10))
    }

    /// The recordings directory changed (a file closed, was deleted or renamed): scan it and
    /// apply retention soon, off the caller's queue.
    func requestRetentionPass() {
        monitor.withLock { $0.scanRequested = true }
        queue.async { [weak self] in self?.checkStorage() }
    }

    /// The storage status for a listing made just now (`recordings.list`): fresh free space,
    /// and retention's outlook over exactly those files.
    func storageStatus(listing entries: [RecordingLibrary.Entry]) -> StorageStatus? {
        let configuration = self.configuration
        guard let space = FileSystemSpace.measure(configuration.recordingsDirectory) else { return nil }
        return makeStatus(space: space, configuration: configuration,
                          recordingsBytes: entries.reduce(0) { $0 + $1.size }, recordingsCount: entries.count,
                          outlook: Self.held(RetentionPlan.outlook(entries, settings: configuration.retention, space: space),
                                             until: currentGrace()))
    }

    /// The end of the retention grace under way, if one is; ends it (and asks for a pass)
    /// once it has passed.
    private func currentGrace(now: Date = Date()) -> Date? {
        let (until, ended) = monitor.withLock { monitor -> (Date?, Bool) in
            guard let until = monitor.graceUntil else { return (nil, false) }
            guard until <= now else { return (until, false) }
            monitor.graceUntil = nil
            monitor.announced = []
            monitor.scanRequested = true
            return (nil, true)
        }
        if ended { logger.notice("retention grace over; recordings due are deleted from now on") }
        return until
    }

    /// Logs, at warning level and each once per grace, the recordings retention would delete
    /// now but holds until `until`.
    private func announceHeld(_ due: [(entry: RecordingLibrary.Entry, reason: RetentionReason)], until: Date) {
        let new = monitor.withLock { monitor in
            let new = due.filter { !monitor.announced.contains($0.entry.path) }
            monitor.announced.formUnion(new.map(\.entry.path))
            return new
        }
        guard !new.isEmpty else { return }
        logger.warning("retention will delete recordings when its grace ends; change [retention] and reload to keep them",
                       metadata: ["retention.count": "\(new.count)", "retention.bytes": "\(new.reduce(0) { $0 + $1.entry.size })",
                                  "retention.until": "\(until.formatted(.iso8601))"])
        for (entry, reason) in new {
            logger.warning("retention will delete recording", metadata: [
                "recording.file": "\(entry.file)", "recording.size": "\(entry.size)",
                "recording.started": "\(entry.retentionStart.formatted(.iso8601))",
                "retention.reason": "\(reason.rawValue)", "retention.until": "\(until.formatted(.iso8601))"])
        }
    }

    /// During a grace, what is due now goes when it ends: its due time says so.
    static func held(_ outlook: [RetentionCandidate], until: Date?) -> [RetentionCandidate] {
        guard let until else { return outlook }
        return outlook.map { candidate in
            guard candidate.reason != nil else { return candidate }
            var held = candidate
            held.dueAt = Swift.max(candidate.dueAt ?? until, until)
            return held
        }
    }

    /// One tick of the monitor (on its queue).
    private func checkStorage() {
        let configuration = self.configuration
        guard var space = FileSystemSpace.measure(configuration.recordingsDirectory) else { return }
        let minimum = configuration.storage.minimumFree.bytes(ofTotal: space.totalBytes)
        // Only a capture thread that still writes: not one that ended (its last file closing).
        let session = activeSession.withLock { $0 }.flatMap { $0.started && !$0.hasEnded ? $0 : nil }
        let now = CaptureEngine.uptime()
        // Scans read every recording's header: on a file closing, and, for max_age, periodically.
        _ = currentGrace()  // a grace that has passed asks for a scan
        var scan = monitor.withLock { monitor in
            monitor.scanRequested || monitor.lastScan == 0
                || (configuration.retention.isEnabled && Double(now &- monitor.lastScan) / 1e9 >= configuration.retention.interval)
        }
        // While recording, retention keeps two ticks' worth of the recording above the minimum,
        // so that the capture thread seldom has to wait for a deletion itself.
        var needFree: Int64?
        if configuration.retention.isEnabled, minimum > 0, let spaceGuard = session?.writer.spaceGuard {
            let wanted = minimum + Int64(spaceGuard.bytesPerSecond * 2 * Swift.max(1, configuration.storage.checkInterval))
            if space.freeBytes < wanted {
                needFree = wanted
                scan = true
            }
        }
        if scan { space = applyRetention(configuration, needFree: needFree) ?? space }
        session?.writer.refreshSpaceLimit()
        // What a closed file's encoder and buffers freed goes back to the system.
        let trim = monitor.withLock { monitor in
            let due = scan || Double(now &- monitor.lastTrim) / 1e9 >= ProcessMemory.trimInterval
            if due { monitor.lastTrim = now }
            return due
        }
        if trim { ProcessMemory.releaseFreePages() }
        let cached = monitor.withLock { $0 }
        // The figures first, then the warning drawn from them: a `status` read between the two
        // never shows a warning raised or cleared that the free space it shows does not explain.
        Observations.together {
            published.storage.send(makeStatus(space: space, configuration: configuration, recordingsBytes: cached.recordingsBytes,
                                    recordingsCount: cached.recordingsCount, outlook: cached.outlook))
            updateSpaceWarning(space, configuration: configuration)
        }
    }

    private func makeStatus(space: FileSystemSpace, configuration: RecorderConfiguration, recordingsBytes: Int64,
                            recordingsCount: Int, outlook: [RetentionCandidate]) -> StorageStatus {
        StorageStatus(freeBytes: space.freeBytes, totalBytes: space.totalBytes, recordingsBytes: recordingsBytes,
                      recordingsCount: recordingsCount,
                      minimumFreeBytes: configuration.storage.minimumFree.bytes(ofTotal: space.totalBytes),
                      warningFreeBytes: configuration.storage.warningFree.bytes(ofTotal: space.totalBytes),
                      retention: configuration.retention.isEnabled, retentionNext: outlook)
    }

    /// Scans the recordings directory and deletes what retention says is due, oldest first
    /// (with `needFree`, also the oldest until that many bytes are free). Any thread; one
    /// pass at a time. Returns the free space afterwards.
    @discardableResult
    private func applyRetention(_ configuration: RecorderConfiguration, needFree: Int64? = nil) -> FileSystemSpace? {
        if configuration.retention.isEnabled, let station, case let members = station.all, members.count > 1 {
            return station.passLock.withLock { stationPass(configuration, members, needFree: needFree) }
        }
        return retentionLock.withLock { () -> FileSystemSpace? in
            let directory = configuration.recordingsDirectory
            let library = RecordingLibrary(directory: directory)
            let active = Self.activeFile(published)
            guard var space = FileSystemSpace.measure(directory) else { return nil }
            let retention = configuration.retention
            guard retention.isEnabled else {
                // Nothing to delete: the totals need names and sizes only, not a listing that
                // reads every header and session log (a station that keeps every file would pay
                // for all of them after each one closed, in time and in memory).
                let (count, bytes) = library.totals(excluding: active)
                monitor.withLock { monitor in
                    monitor.lastScan = CaptureEngine.uptime()
                    monitor.scanRequested = false
                    monitor.recordingsBytes = bytes
                    monitor.recordingsCount = count
                    monitor.outlook = []
                }
                return space
            }
            var entries = library.retainable(excluding: active)
            let graceUntil = currentGrace()
            if retention.isEnabled {
                // During the grace only the space guard's need deletes (the disk filling cannot
                // wait); what the limits make due is announced instead.
                let limits = graceUntil == nil ? retention : RetentionSettings(interval: retention.interval, grace: 0)
                if let graceUntil { announceHeld(RetentionPlan.due(entries, settings: retention, space: space), until: graceUntil) }
                for (entry, reason) in RetentionPlan.due(entries, settings: limits, space: space, needFree: needFree) {
                    if let failure = RecordingLibrary.deleteForRetention(entry.path) {
                        logger.warning("retention could not delete recording", metadata: [
                            "recording.path": "\(entry.path)", "error.message": "\(Errno(rawValue: failure))"])
                        continue
                    }
                    entries.removeAll { $0.path == entry.path }
                    space = FileSystemSpace.measure(directory) ?? space
                    let deletion = RetentionDeletion(file: entry.file, path: entry.path, size: entry.size,
                                                     startedAt: entry.retentionStart, reason: reason,
                                                     freeBytes: space.freeBytes, deletedAt: Date())
                    logger.notice("retention deleted recording", metadata: [
                        "recording.file": "\(entry.file)", "recording.size": "\(entry.size)",
                        "recording.started": "\(entry.retentionStart.formatted(.iso8601))",
                        "retention.reason": "\(reason.rawValue)", "storage.free": "\(space.freeBytes)"])
                    published.retentionDeletion.send(deletion)
                }
            }
            let outlook = Self.held(RetentionPlan.outlook(entries, settings: retention, space: space), until: currentGrace())
            let scanned = CaptureEngine.uptime()
            monitor.withLock { monitor in
                monitor.lastScan = scanned
                monitor.scanRequested = false
                monitor.recordingsBytes = entries.reduce(0) { $0 + $1.size }
                monitor.recordingsCount = entries.count
                monitor.outlook = outlook
            }
            return space
        }
    }

    /// The final path of the recording being written while its .part exists: a .part is in no
    /// listing, and its final name is excluded too (a name taken meanwhile by someone else).
    private static func activeFile(_ published: RecorderOutputs) -> String? {
        published.recording.value.flatMap { access($0.partialPath, F_OK) == 0 ? $0.path : nil }
    }

    /// A retention pass over the whole station (several sources, `StationRecordings`): every
    /// source's folder listed, what is due deleted from whichever holds it and announced as
    /// that source's. This source's totals and outlook are its own folder's. Under the
    /// station's pass lock.
    private func stationPass(_ configuration: RecorderConfiguration, _ members: [StationRecordings.Member],
                             needFree: Int64?) -> FileSystemSpace? {
        let directory = configuration.recordingsDirectory
        guard var space = FileSystemSpace.measure(directory) else { return nil }
        let retention = configuration.retention
        var groups = members.map { RecordingLibrary(directory: $0.directory).retainable(excluding: $0.active()) }
        let own = members.firstIndex { $0.directory == directory } ?? 0
        let isOwn = { (entry: RecordingLibrary.Entry) in members[own].owns(entry.path) }
        // A grace is each source's (they begin together): each announces its own files.
        let graceUntil = currentGrace()
        if let graceUntil {
            announceHeld(RetentionPlan.due(groups: groups, settings: retention, space: space).filter { isOwn($0.entry) }, until: graceUntil)
        }
        let limits = graceUntil == nil ? retention : RetentionSettings(interval: retention.interval, grace: 0)
        var changed = Set<Int>()
        for (entry, reason) in RetentionPlan.due(groups: groups, settings: limits, space: space, needFree: needFree) {
            guard let index = members.firstIndex(where: { $0.owns(entry.path) }) else { continue }
            let member = members[index]
            if let failure = RecordingLibrary.deleteForRetention(entry.path) {
                member.logger.warning("retention could not delete recording", metadata: [
                    "recording.path": "\(entry.path)", "error.message": "\(Errno(rawValue: failure))"])
                continue
            }
            groups[index].removeAll { $0.path == entry.path }
            space = FileSystemSpace.measure(directory) ?? space
            member.logger.notice("retention deleted recording", metadata: [
                "recording.file": "\(entry.file)", "recording.size": "\(entry.size)",
                "recording.started": "\(entry.retentionStart.formatted(.iso8601))",
                "retention.reason": "\(reason.rawValue)", "storage.free": "\(space.freeBytes)"])
            member.deleted(RetentionDeletion(file: entry.file, path: entry.path, size: entry.size, startedAt: entry.retentionStart,
                                             reason: reason, freeBytes: space.freeBytes, deletedAt: Date()))
            if index != own { changed.insert(index) }
        }
        for index in changed { members[index].changed() }
        let due = RetentionPlan.due(groups: groups, settings: retention, space: space).filter { isOwn($0.entry) }
        let outlook = due.isEmpty
            ? RetentionPlan.oldestFirst(groups[own]).prefix(1).map { RetentionPlan.candidate($0, reason: nil, settings: retention) }
            : due.map { RetentionPlan.candidate($0.entry, reason: $0.reason, settings: retention) }
        let held = Self.held(outlook, until: currentGrace())
        let scanned = CaptureEngine.uptime()
        monitor.withLock { monitor in
            monitor.lastScan = scanned
            monitor.scanRequested = false
            monitor.recordingsBytes = groups[own].reduce(0) { $0 + $1.size }
            monitor.recordingsCount = groups[own].count
            monitor.outlook = held
        }
        return space
    }

    /// `start` with less than the minimum free: retention may delete first; otherwise refused.
    func checkSpaceBeforeStart(_ configuration: RecorderConfiguration) throws(RecorderError) {
        let directory = configuration.recordingsDirectory
        guard var space = FileSystemSpace.measure(directory) else { return }
        let minimum = configuration.storage.minimumFree.bytes(ofTotal: space.totalBytes)
        guard minimum > 0, space.freeBytes <= minimum else { return }
        if configuration.retention.isEnabled {
            space = applyRetention(configuration, needFree: minimum + 1) ?? space
            guard space.freeBytes <= minimum else { return }
        }
        let free = SpaceAmount.describe(bytes: space.freeBytes)
        let needed = SpaceAmount.describe(bytes: minimum)
        logger.warning("recording refused: too little free space", metadata: [
            "recordings.directory": "\(directory)", "storage.free": "\(space.freeBytes)", "storage.minimum": "\(minimum)"])
        throw RecorderError(.insufficientSpace,
            "only \(free) free on the filesystem of \(directory); recd keeps at least \(needed) free "
            + "([storage] minimum_free = \(configuration.storage.minimumFree))"
            + (configuration.retention.isEnabled ? ", and retention found nothing more to delete" : ""))
    }

    /// The space guard for a recording's files (nil with the guard off).
    func makeSpaceGuard(_ configuration: RecorderConfiguration, settings: RecordingSettings, fileRate: Int,
                        fileChannels: Int) -> SpaceGuard? {
        guard !configuration.storage.minimumFree.isZero else { return nil }
        let makeRoom: (@Sendable (Int64) -> Void)?
        if configuration.retention.isEnabled {
            makeRoom = { [weak self] bytes in
                guard let self, let space = FileSystemSpace.measure(configuration.recordingsDirectory) else { return }
                let minimum = configuration.storage.minimumFree.bytes(ofTotal: space.totalBytes)
                applyRetention(configuration, needFree: minimum + bytes)
            }
        } else {
            makeRoom = nil
        }
        return SpaceGuard(directory: configuration.recordingsDirectory, minimumFree: configuration.storage.minimumFree,
                          settings: settings, fileRate: fileRate, fileChannels: fileChannels, makeRoom: makeRoom)
    }

    /// Raises `lowDiskSpace` below the warning level and clears it above; one warning shows
    /// at a time, and this one goes before digital silence.
    private func updateSpaceWarning(_ space: FileSystemSpace, configuration: RecorderConfiguration) {
        let level = configuration.storage.warningFree.bytes(ofTotal: space.totalBytes)
        let low = level > 0 && space.freeBytes < level
        // Logged inside the update, before observers hear of it: a client that sees the warning
        // finds it in the journal.
        published.warning.update { warning in
            if low, warning?.code != .lowDiskSpace {
                let minimum = configuration.storage.minimumFree.bytes(ofTotal: space.totalBytes)
                logger.warning("free space is low", metadata: ["recordings.directory": "\(configuration.recordingsDirectory)",
                                                               "storage.free": "\(space.freeBytes)", "storage.warning": "\(level)"])
                warning = RecorderWarning(
                    code: .lowDiskSpace,
                    message: "only \(SpaceAmount.describe(bytes: space.freeBytes)) free on the filesystem of "
                        + "\(configuration.recordingsDirectory) (warning below \(SpaceAmount.describe(bytes: level))"
                        + (minimum > 0 ? "; recording stops at \(SpaceAmount.describe(bytes: minimum)))" : ")"),
                    since: Date())
            } else if !low, warning?.code == .lowDiskSpace {
                logger.notice("free space is back above the warning level", metadata: [
                    "recordings.directory": "\(configuration.recordingsDirectory)", "storage.free": "\(space.freeBytes)"])
                warning = nil
            }
        }
    }
}
