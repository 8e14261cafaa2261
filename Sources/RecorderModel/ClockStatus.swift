import FoundationEssentials

/// What recd knows of the system's wall clock (`status.clock`, MQTT's `clock`): whether it is
/// synchronized to a time source, and the steps it took since recd started. A station without
/// a real-time clock (a Raspberry Pi) boots with whatever time was saved at its last shutdown
/// until NTP corrects it; every start time recd writes follows the clock as it is.
public struct ClockStatus: Sendable, Equatable, Codable {
    /// Whether the clock is synchronized: the kernel's word (no `STA_UNSYNC` in adjtimex's
    /// status, which chrony, ntpd and systemd-timesyncd clear while they discipline the clock),
    /// or, where the kernel cannot be asked (systemd's `ProtectClock=`), systemd-timesyncd's
    /// (its `/run/systemd/timesync/synchronized` exists once it synchronized since boot).
    public var synchronized: Bool
    /// When recd saw `synchronized` become what it is: when it started, if it was so then.
    public var since: Date
    /// Who says so.
    public var source: ClockSynchronizationSource
    /// The kernel's bound on the clock's error and its estimate of it, in seconds (adjtimex's
    /// `maxerror` and `esterror`; 16 while unsynchronized). In `status` only, read when asked;
    /// nil where the kernel cannot be asked.
    public var maxError: Double?
    public var estimatedError: Double?
    /// Steps of the wall clock since recd started (a set of the clock that moved it by at
    /// least `ClockStep.minimumSize`).
    public var steps: Int
    /// The last of them.
    public var lastStep: ClockStep?
    /// Finished files begun while the clock was not synchronized that recd will re-date once it
    /// is (protocol.md, "Re-dating"). In `status` only.
    public var filesToRedate: Int?

    public init(synchronized: Bool, since: Date, source: ClockSynchronizationSource, maxError: Double? = nil,
                estimatedError: Double? = nil, steps: Int = 0, lastStep: ClockStep? = nil) {
        self.synchronized = synchronized
        self.since = since
        self.source = source
        self.maxError = maxError
        self.estimatedError = estimatedError
        self.steps = steps
        self.lastStep = lastStep
    }
}

/// Where `ClockStatus.synchronized` comes from.
public enum ClockSynchronizationSource: String, Sendable, Codable, CaseIterable {
    /// The kernel's clock discipline (adjtimex), whoever disciplines it.
    case kernel
    /// systemd-timedated (over the system bus), where the kernel cannot be asked here: it reads
    /// the kernel's flag outside recd's sandbox.
    case timedated
    /// systemd-timesyncd's file, where the kernel cannot be asked and timedated cannot answer.
    case timesyncd
}

/// A step of the wall clock: the clock was set, and moved by `size` against the boot clock.
public struct ClockStep: Sendable, Equatable, Codable {
    /// The wall clock when recd saw the step, after it.
    public var at: Date
    /// Seconds the wall clock moved: positive forwards, negative backwards.
    public var size: Double

    /// A set of the clock that moves it by less is not a step: a resume from suspend, a clock
    /// set to the time it had (what measuring one clock against the other can resolve is a
    /// few microseconds).
    public static let minimumSize = 0.001

    public init(at: Date, size: Double) {
        self.at = at
        self.size = size
    }
}
