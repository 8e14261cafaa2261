import CLinux
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import RecorderModel

/// Where recd learns whether the system clock is synchronized where the kernel cannot be
/// asked (recd.service's `ProtectClock=` filters adjtimex out, reads included).
public struct SystemClockSources: Sendable {
    /// systemd-timesyncd's runtime directory: its `synchronized` file appears there once
    /// timesyncd synchronized the clock since boot, and is touched at every synchronization.
    public var timesyncDirectory: String
    /// Asks systemd-timedated (over the system bus) whether the clock is synchronized: it reads
    /// the kernel's flag outside recd's sandbox, whoever disciplines the clock (chrony and ntpd
    /// too). Blocking; nil when it cannot answer. recd passes `Systemd`'s; nil: not asked.
    public var timedated: (@Sendable () -> Bool?)?

    public static let defaultTimesyncDirectory = "/run/systemd/timesync"

    public init(timesyncDirectory: String = SystemClockSources.defaultTimesyncDirectory, timedated: (@Sendable () -> Bool?)? = nil) {
        self.timesyncDirectory = timesyncDirectory
        self.timedated = timedated
    }

    /// The default sources, with timesyncd's directory from `RECD_TIMESYNC_DIRECTORY` when it
    /// is set: for the tests, which cannot run a timesyncd of their own (doc/testing.md) and
    /// stand in for the machine's time services, so timedated is not asked then. Not a
    /// setting: a station's timesyncd is where systemd puts it.
    public init(environment: [String: String], timedated: (@Sendable () -> Bool?)? = nil) {
        let directory = environment["RECD_TIMESYNC_DIRECTORY"].flatMap { $0.isEmpty ? nil : $0 }
        self.init(timesyncDirectory: directory ?? Self.defaultTimesyncDirectory, timedated: directory == nil ? timedated : nil)
    }
}

/// The kernel's clock discipline (adjtimex, read only).
struct KernelClockDiscipline: Sendable, Equatable {
    /// No `STA_UNSYNC`.
    var synchronized: Bool
    /// `maxerror` and `esterror`, seconds.
    var maxError: Double
    var estimatedError: Double
}

/// One look at the clock: everything `ClockWatch` decides from.
struct ClockReading: Sendable, Equatable {
    /// CLOCK_REALTIME − CLOCK_BOOTTIME, nanoseconds: only a step of the wall clock changes it.
    var offset: Int64
    /// nil when the kernel cannot be asked (a seccomp filter: systemd's ProtectClock=).
    var kernel: KernelClockDiscipline?
    /// systemd-timesyncd's `synchronized` file exists.
    var timesyncdSynchronized: Bool
    /// systemd-timedated's `NTPSynchronized`, as last asked (nil: not asked, or no answer).
    var timedated: Bool? = nil
    /// The wall clock when it was taken.
    var wallClock: Date

    /// Reads the kernel, the clocks and timesyncd's file now. Also returns adjtimex's errno
    /// when the kernel could not be asked.
    static func now(timesyncDirectory: String, timedated: Bool? = nil) -> (reading: ClockReading, kernelError: Int32?) {
        var unsynchronized: Int32 = 0
        var maxError = 0
        var estimatedError = 0
        let asked = recd_clock_discipline(&unsynchronized, &maxError, &estimatedError) == 0
        let kernelError = asked ? nil : errno
        let offset = recd_wall_clock_offset()
        var file = stat()
        let timesyncd = stat(timesyncDirectory + "/synchronized", &file) == 0
        let reading = ClockReading(
            offset: offset,
            kernel: asked ? KernelClockDiscipline(synchronized: unsynchronized == 0, maxError: Double(maxError) / 1e6,
                                                  estimatedError: Double(estimatedError) / 1e6) : nil,
            timesyncdSynchronized: timesyncd, timedated: timedated, wallClock: Date())
        return (reading, kernelError)
    }
}

/// What the monitor remembers between readings, and what each reading changes. No I/O.
struct ClockWatch: Sendable, Equatable {
    /// As published: without the kernel's error figures, which change by the second.
    private(set) var status: ClockStatus
    /// The offset (CLOCK_REALTIME − CLOCK_BOOTTIME) at the start or the last step: each
    /// reading is measured against it, so that sets too small to be steps cannot add up unseen.
    private(set) var reference: Int64

    enum Change: Sendable, Equatable {
        /// The wall clock stepped (`ClockStep.size` seconds), from `before` to the reading's time.
        case stepped(ClockStep, before: Date)
        /// `synchronized` changed.
        case synchronization(Bool)
    }

    init(_ reading: ClockReading) {
        let verdict = Self.verdict(reading)
        status = ClockStatus(synchronized: verdict.synchronized, since: reading.wallClock, source: verdict.source)
        reference = reading.offset
    }

    /// The kernel's word where it can be asked, else timedated's (the kernel's, read outside
    /// the sandbox), else timesyncd's.
    static func verdict(_ reading: ClockReading) -> (synchronized: Bool, source: ClockSynchronizationSource) {
        if let kernel = reading.kernel { return (kernel.synchronized, .kernel) }
        if let timedated = reading.timedated { return (timedated, .timedated) }
        return (reading.timesyncdSynchronized, .timesyncd)
    }

    /// Takes a reading in: a step when the offset moved by `ClockStep.minimumSize` or more
    /// since the reference, a change of `synchronized` (which starts a new `since`).
    mutating func observe(_ reading: ClockReading) -> [Change] {
        var changes: [Change] = []
        let moved = reading.offset - reference
        if Double(moved.magnitude) >= ClockStep.minimumSize * 1e9 {
            let step = ClockStep(at: reading.wallClock, size: Double(moved) / 1e9)
            reference = reading.offset
            status.steps += 1
            status.lastStep = step
            changes.append(.stepped(step, before: reading.wallClock.addingTimeInterval(-step.size)))
        }
        let verdict = Self.verdict(reading)
        status.source = verdict.source
        if verdict.synchronized != status.synchronized {
            status.synchronized = verdict.synchronized
            status.since = reading.wallClock
            changes.append(.synchronization(verdict.synchronized))
        }
        return changes
    }

    /// `status` with the kernel's error figures of `reading`: what `status` answers.
    func status(with reading: ClockReading) -> ClockStatus {
        var status = self.status
        status.maxError = reading.kernel?.maxError
        status.estimatedError = reading.kernel?.estimatedError
        return status
    }
}

/// Watches the system clock for steps and for its synchronization, and publishes both
/// (`Recorder.clock`). It polls nothing that has an event:
///
/// - A step is seen as the kernel makes it: a CLOCK_REALTIME timerfd with
///   `TFD_TIMER_CANCEL_ON_SET` wakes the monitor when the clock is set (settimeofday,
///   clock_settime, adjtimex's ADJ_SETOFFSET: how chrony, ntpd and timesyncd step, a leap
///   second, a resume from suspend), and the step's size is how far CLOCK_REALTIME moved
///   against CLOCK_BOOTTIME, which no slewing changes. Every other reading (below) measures the
///   same difference, so a step the kernel did not announce (libfaketime's, which fakes
///   clock_gettime and not the kernel's clock) is found at the next one.
/// - systemd-timesyncd's `synchronized` appearing or being touched is seen with inotify on its
///   directory (or, until that exists, on its parent).
/// - The kernel's synchronization flag has no event: the kernel clears STA_UNSYNC when chrony
///   or ntpd tell it to (a slewed clock moves no timer) and sets it by itself once its maximum
///   error passes 16 s, hours after a daemon stopped. It is read again at every event above,
///   at every `status`, and once a minute (`recheckInterval`).
///
/// Steps and synchronization changes are logged (notice) and published; `status` reads it
/// all afresh (`refresh(.asked)`).
final class SystemClockMonitor: @unchecked Sendable {
    // @unchecked: `watch` is behind its lock; `dispatchSources` is set in init only;
    // `watchedParent` is touched only on `queue` (and in init, before any source runs).

    /// How often the kernel's synchronization flag is read when nothing else happened.
    static let recheckInterval: Double = 60

    private let sources: SystemClockSources
    private let published: Observed<ClockStatus>
    private let logger: Logger
    private let queue = DispatchQueue(label: "recd.clock")
    private let watch: NIOLockedValueBox<ClockWatch>
    /// timedated's last answer, asked on `queue` only (a bus round trip; the first may start
    /// timedated), and only where the kernel cannot be asked: `status` reads it from here.
    private let timedatedAnswer = NIOLockedValueBox<Bool?>(nil)
    /// The kernel refused to say (the first reading): timedated is asked instead.
    private let kernelRefused: Bool
    private var dispatchSources: [any DispatchSourceProtocol] = []
    /// The inotify descriptor (-1: none).
    private let directoryWatch: Int32
    /// The watch on timesyncd's directory's parent, while the directory does not exist.
    private var watchedParent: Int32?

    /// What a reading was taken for (the log's `clock.seen`).
    enum Occasion: String {
        /// The kernel announced a set of the clock (the timerfd).
        case clockSet = "alarm"
        /// timesyncd's directory changed.
        case timesyncd
        /// The minute's reading.
        case recheck
        /// Someone asked (`status`, the metrics).
        case asked = "status"
    }

    init(sources: SystemClockSources, publishing published: Observed<ClockStatus>, logger: Logger) {
        self.sources = sources
        self.published = published
        self.logger = logger

        // The alarm and the directory's watch first, then the first reading: a set or a file
        // between the two is both in the reading and announced, never missed.
        let alarm = Self.makeClockSetAlarm(logger)
        directoryWatch = recd_directory_watch()
        watchedParent = Self.watchDirectory(sources.timesyncDirectory, on: directoryWatch, parent: nil)
        var (reading, kernelError) = ClockReading.now(timesyncDirectory: sources.timesyncDirectory)
        kernelRefused = kernelError != nil
        if kernelError != nil, let ask = sources.timedated {
            let answer = ask()
            timedatedAnswer.withLockedValue { $0 = answer }
            reading.timedated = answer
        }
        let first = ClockWatch(reading)
        watch = NIOLockedValueBox(first)
        published.send(first.status)

        if let kernelError {
            logger.info(reading.timedated == nil
                        ? "the kernel's clock state cannot be read, nor systemd-timedated asked; synchronization is systemd-timesyncd's word alone"
                        : "the kernel's clock state cannot be read here; systemd-timedated reads it",
                        metadata: ["error": "\(String(cString: strerror(kernelError)))",
                                   "clock.timesyncd": "\(sources.timesyncDirectory)/synchronized"])
        }
        let metadata = Self.metadata(first.status(with: reading))
        if first.status.synchronized {
            logger.info("system clock synchronized", metadata: metadata)
        } else {
            logger.notice("system clock not synchronized", metadata: metadata)
        }

        if let alarm {
            let source = DispatchSource.makeReadSource(fileDescriptor: alarm, queue: queue)
            source.setEventHandler { [weak self] in self?.clockSetAlarmRang(alarm) }
            source.setCancelHandler { close(alarm) }
            source.resume()
            dispatchSources.append(source)
        }
        if directoryWatch >= 0 {
            let descriptor = directoryWatch
            let source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
            source.setEventHandler { [weak self] in
                _ = recd_drain_directory_watch(descriptor)
                self?.timesyncDirectoryChanged()
            }
            source.setCancelHandler { close(descriptor) }
            source.resume()
            dispatchSources.append(source)
        }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let interval = Int(Self.recheckInterval * 1e9)
        timer.schedule(deadline: .now() + .nanoseconds(interval), repeating: .nanoseconds(interval), leeway: .seconds(10))
        timer.setEventHandler { [weak self] in
            self?.askTimedated()
            self?.refresh(.recheck)
        }
        timer.resume()
        dispatchSources.append(timer)
    }

    /// The timerfd that rings when the clock is set, armed; nil (and a warning: steps are then
    /// seen only when the clock is read) if the kernel gives none.
    private static func makeClockSetAlarm(_ logger: Logger) -> Int32? {
        let alarm = recd_clock_set_alarm()
        guard alarm >= 0, recd_arm_clock_set_alarm(alarm) == 0 else {
            logger.warning("no clock-set alarm: clock steps are seen only when the clock is read",
                           metadata: ["error": "\(String(cString: strerror(errno)))"])
            if alarm >= 0 { close(alarm) }
            return nil
        }
        return alarm
    }

    deinit {
        for source in dispatchSources { source.cancel() }
    }

    /// Whether the clock is synchronized, as last read (no system call).
    var isSynchronized: Bool { watch.withLockedValue { $0.status.synchronized } }

    /// Reads the clock now (publishing and logging what changed) and returns its status with
    /// the kernel's error figures of the moment. Any thread; a few system calls.
    @discardableResult
    func refresh(_ occasion: Occasion) -> ClockStatus {
        let sources = self.sources
        let published = self.published
        // Read under the lock: two readings taken on two threads must not be taken in one order
        // and measured in the other (a step, then the same step back).
        let timedated = timedatedAnswer.withLockedValue { $0 }
        // The log first, then the publication: a client that sees a change finds it in the journal.
        let (status, changes) = watch.withLockedValue { watch -> (ClockStatus, [ClockWatch.Change]) in
            let (reading, _) = ClockReading.now(timesyncDirectory: sources.timesyncDirectory, timedated: timedated)
            let changes = watch.observe(reading)
            let status = watch.status(with: reading)
            for change in changes { log(change, status, occasion) }
            if !changes.isEmpty { published.send(watch.status) }
            return (status, changes)
        }
        if changes.isEmpty, occasion == .clockSet {
            logger.debug("system clock set without a step", metadata: ["clock.synchronized": "\(status.synchronized)"])
        }
        return status
    }

    // MARK: On queue

    private func clockSetAlarmRang(_ alarm: Int32) {
        guard recd_clock_was_set(alarm) == 1 else { return }
        // Armed again before the clock is read: a set after the reading rings again.
        if recd_arm_clock_set_alarm(alarm) != 0 {
            logger.warning("the clock-set alarm cannot be armed again", metadata: ["error": "\(String(cString: strerror(errno)))"])
        }
        askTimedated()
        refresh(.clockSet)
    }

    /// On `queue`, where the kernel cannot be asked: timedated's word, kept for the readings
    /// (at each event and each minute; timedated exits when idle and the bus starts it again).
    private func askTimedated() {
        guard kernelRefused, let ask = sources.timedated else { return }
        let answer = ask()
        timedatedAnswer.withLockedValue { $0 = answer }
    }

    /// On `queue`: something appeared, changed or went in timesyncd's directory (or its parent).
    private func timesyncDirectoryChanged() {
        watchedParent = Self.watchDirectory(sources.timesyncDirectory, on: directoryWatch, parent: watchedParent)
        askTimedated()
        refresh(.timesyncd)
    }

    /// Watches timesyncd's directory if it exists, else its parent for it to appear (nothing
    /// when neither exists: the minute's reading still looks for the file). Again after every
    /// event: the kernel drops the watch of a directory that went (watching one again is a
    /// no-op). Returns the parent's watch, if that is what is watched.
    private static func watchDirectory(_ directory: String, on descriptor: Int32, parent: Int32?) -> Int32? {
        guard descriptor >= 0 else { return nil }
        if recd_watch_directory(descriptor, directory) >= 0 {
            if let parent { _ = recd_unwatch_directory(descriptor, parent) }
            return nil
        }
        let number = recd_watch_directory(descriptor, Self.parent(of: directory))
        return number >= 0 ? number : nil
    }

    static func parent(of path: String) -> String {
        var components = path.split(separator: "/", omittingEmptySubsequences: true)
        guard !components.isEmpty else { return "/" }
        components.removeLast()
        return "/" + components.joined(separator: "/")
    }

    // MARK: The log

    private func log(_ change: ClockWatch.Change, _ status: ClockStatus, _ occasion: Occasion) {
        var metadata = Self.metadata(status)
        switch change {
        case .stepped(let step, let before):
            metadata["clock.step"] = "\(String(printf: "%+.6f", step.size))"
            metadata["clock.before"] = "\(UTCTimestamp.text(before))"
            metadata["clock.after"] = "\(UTCTimestamp.text(step.at))"
            metadata["clock.seen"] = "\(occasion.rawValue)"
            logger.notice("system clock stepped", metadata: metadata)
        case .synchronization(true):
            logger.notice("system clock synchronized", metadata: metadata)
        case .synchronization(false):
            logger.notice("system clock no longer synchronized", metadata: metadata)
        }
    }

    private static func metadata(_ status: ClockStatus) -> Logger.Metadata {
        var metadata: Logger.Metadata = ["clock.source": "\(status.source.rawValue)", "clock.steps": "\(status.steps)",
                                         "clock.since": "\(UTCTimestamp.text(status.since))"]
        if let maxError = status.maxError { metadata["clock.max_error"] = "\(String(printf: "%.6f", maxError))" }
        return metadata
    }
}
