import Foundation
import Glibc
import RecdTestSupport
@testable import RecorderCore
import RecorderModel
import Testing

/// The system clock's monitor: what a reading changes (`ClockWatch`, pure), and the readings
/// themselves on this machine's real clocks. The kernel's clock-set alarm, libfaketime's steps
/// and timesyncd's file through the real recd are EndToEndTests.ClockTests.
@Suite("system clock")
struct SystemClockTests {
    static let start = Date(timeIntervalSince1970: 1_795_000_000)
    static let unsynchronized = KernelClockDiscipline(synchronized: false, maxError: 16, estimatedError: 16)
    static let synchronized = KernelClockDiscipline(synchronized: true, maxError: 0.012, estimatedError: 0.003)

    /// A reading `seconds` after the start whose offset moved by `moved` nanoseconds.
    func reading(after seconds: Double, moved: Int64 = 0, kernel: KernelClockDiscipline? = unsynchronized,
                 timesyncd: Bool = false) -> ClockReading {
        ClockReading(offset: 1_700_000_000_000_000_000 + moved, kernel: kernel, timesyncdSynchronized: timesyncd,
                     wallClock: Self.start.addingTimeInterval(seconds + Double(moved) / 1e9))
    }

    @Test func aStepIsTheOffsetsMoveWithItsSignCountedAndDatedAfterIt() {
        var watch = ClockWatch(reading(after: 0))
        #expect(watch.status == ClockStatus(synchronized: false, since: Self.start, source: .kernel))

        let forward = watch.observe(reading(after: 10, moved: 259_200_000_000_000))
        let step = ClockStep(at: Self.start.addingTimeInterval(10 + 259_200), size: 259_200)
        #expect(forward == [.stepped(step, before: Self.start.addingTimeInterval(10))])
        #expect(watch.status.steps == 1)
        #expect(watch.status.lastStep == step)

        // Measured from the new reference: back by an hour.
        let backward = watch.observe(reading(after: 20, moved: 259_200_000_000_000 - 3_600_000_000_000))
        #expect(watch.status.steps == 2)
        #expect(watch.status.lastStep?.size == -3600)
        #expect(backward.count == 1)
        // Nothing moved since: nothing changes.
        #expect(watch.observe(reading(after: 30, moved: 255_600_000_000_000)).isEmpty)
        #expect(watch.status.steps == 2)
    }

    /// A set of less than a millisecond (a resume from suspend, measuring jitter) is no step,
    /// but sets that add up to one are measured against the last reference, not lost.
    @Test func setsTooSmallToBeStepsAddUpAgainstTheReference() {
        var watch = ClockWatch(reading(after: 0))
        #expect(watch.observe(reading(after: 1, moved: 400_000)).isEmpty)
        #expect(watch.observe(reading(after: 2, moved: 800_000)).isEmpty)
        #expect(watch.observe(reading(after: 3, moved: -999_999)).isEmpty)
        #expect(watch.status.steps == 0)
        let changes = watch.observe(reading(after: 4, moved: 1_200_000))
        #expect(watch.status.steps == 1)
        #expect(abs((watch.status.lastStep?.size ?? 0) - 0.0012) < 1e-12, "\(changes)")
    }

    @Test func synchronizationIsTheKernelsWordAndStartsANewSince() {
        var watch = ClockWatch(reading(after: 0, timesyncd: true))
        // The kernel says unsynchronized: timesyncd's file does not overrule it.
        #expect(!watch.status.synchronized)
        #expect(watch.status.source == .kernel)
        #expect(watch.observe(reading(after: 5, timesyncd: true)).isEmpty)
        #expect(watch.status.since == Self.start)

        #expect(watch.observe(reading(after: 60, kernel: Self.synchronized)) == [.synchronization(true)])
        #expect(watch.status.synchronized)
        #expect(watch.status.since == Self.start.addingTimeInterval(60))
        // Still synchronized: the same since.
        #expect(watch.observe(reading(after: 120, kernel: Self.synchronized)).isEmpty)
        #expect(watch.status.since == Self.start.addingTimeInterval(60))

        #expect(watch.observe(reading(after: 180)) == [.synchronization(false)])
        #expect(watch.status.since == Self.start.addingTimeInterval(180))
    }

    /// Under systemd's ProtectClock= adjtimex is refused: timesyncd's file decides.
    @Test func whereTheKernelCannotBeAskedTimesyncdsFileDecides() {
        var watch = ClockWatch(reading(after: 0, kernel: nil))
        #expect(watch.status == ClockStatus(synchronized: false, since: Self.start, source: .timesyncd))
        #expect(watch.observe(reading(after: 30, kernel: nil, timesyncd: true)) == [.synchronization(true)])
        #expect(watch.status.source == .timesyncd)
        #expect(watch.status.since == Self.start.addingTimeInterval(30))
    }

    /// `status` has the kernel's error figures of its reading; what is published has none
    /// (they change by the second).
    @Test func theErrorFiguresAreTheReadingsAndNotPublished() {
        let watch = ClockWatch(reading(after: 0, kernel: Self.synchronized))
        #expect(watch.status.maxError == nil && watch.status.estimatedError == nil)
        let status = watch.status(with: reading(after: 1, kernel: Self.synchronized))
        #expect(status.maxError == 0.012)
        #expect(status.estimatedError == 0.003)
        #expect(watch.status(with: reading(after: 1, kernel: nil)).maxError == nil)
    }

    @Test func timesyncdsDirectoryIsSystemdsUnlessTheTestsSayOtherwise() {
        #expect(SystemClockSources(environment: [:]).timesyncDirectory == "/run/systemd/timesync")
        #expect(SystemClockSources(environment: ["RECD_TIMESYNC_DIRECTORY": ""]).timesyncDirectory == "/run/systemd/timesync")
        #expect(SystemClockSources(environment: ["RECD_TIMESYNC_DIRECTORY": "/tmp/t/timesync"]).timesyncDirectory == "/tmp/t/timesync")
        #expect(SystemClockMonitor.parent(of: "/run/systemd/timesync") == "/run/systemd")
        #expect(SystemClockMonitor.parent(of: "/run/systemd/timesync/") == "/run/systemd")
        #expect(SystemClockMonitor.parent(of: "/timesync") == "/")
    }

    // MARK: The real clocks

    static func nanoseconds(_ clock: clockid_t) -> Int64 {
        var time = timespec()
        clock_gettime(clock, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    /// The reading's offset is CLOCK_REALTIME − CLOCK_BOOTTIME as the test reads them itself,
    /// and it holds still on an undisturbed machine: no step between two readings.
    @Test func aReadingsOffsetIsTheWallClockAgainstTheBootClock() {
        let directory = TemporaryDirectory()
        let (first, _) = ClockReading.now(timesyncDirectory: directory.path)
        let own = Self.nanoseconds(CLOCK_REALTIME) - Self.nanoseconds(CLOCK_BOOTTIME)
        #expect(abs(own - first.offset) < 1_000_000, "recd: \(first.offset), the test: \(own)")
        #expect(!first.timesyncdSynchronized)
        var watch = ClockWatch(first)
        Thread.sleep(forTimeInterval: 0.2)
        let (second, _) = ClockReading.now(timesyncDirectory: directory.path)
        #expect(watch.observe(second).filter { if case .stepped = $0 { true } else { false } }.isEmpty,
                "the offset moved by \(second.offset - first.offset) ns")
    }

    /// A recorder's monitor publishes its first reading before anyone can subscribe, and
    /// `status`'s reading adds the kernel's figures.
    @Test func aRecordersClockIsPublishedFromItsFirstReading() {
        let directory = TemporaryDirectory()
        let before = Date()
        let recorder = Recorder(configuration: RecorderConfiguration(recordingsDirectory: directory.file("recordings")),
                                clock: SystemClockSources(timesyncDirectory: directory.file("timesync")))
        let published = recorder.clock.value
        #expect(published.since >= before.addingTimeInterval(-0.001) && published.since <= Date())
        #expect(published.steps == 0)
        #expect(published.maxError == nil)
        let current = recorder.currentClockStatus()
        #expect(current.synchronized == published.synchronized)
        // The kernel's figures where it answers (a container's seccomp filter may refuse it).
        let (reading, _) = ClockReading.now(timesyncDirectory: directory.file("timesync"))
        #expect(current.source == (reading.kernel == nil ? .timesyncd : .kernel))
        #expect((current.maxError == nil) == (reading.kernel == nil))
    }
}
