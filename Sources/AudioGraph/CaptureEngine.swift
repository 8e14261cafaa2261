import ALSA
import CLinux
import Dispatch
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import RecorderModel
import Synchronization

/// Owns the capture device: opens and reads it on a thread of its own, recovers overruns,
/// estimates when each frame was captured and the device clock's drift, and hands every
/// chunk to the consumers attached (level meter, pre-roll ring, recording). With no
/// consumer attached the device is stopped (not closed); `close()` ends the thread and
/// releases the device.
///
/// Consumers are attached, detached and asked things through `perform`, which runs a block
/// on the capture thread between two reads: a consumer's state is only ever touched by
/// that thread, and a block sees the stream at an exact frame.
public final class CaptureEngine: @unchecked Sendable {
    // @unchecked: `consumers`, `buffer`, `drift`, `lastRead` and the anchors are used by
    // the capture thread only; commands pass through `commands` (a lock); counters are atomic.

    public let pcm: CapturePCM
    public let configuration: PCMConfiguration
    /// Tells engines apart for callbacks that run after one may be gone (an address may be reused).
    public let serial = CaptureEngine.serials.add(1, ordering: .relaxed).newValue
    private static let serials = Atomic<UInt64>(0)
    /// `close()` asked: the thread ends at its next turn even if the block that says so timed out.
    private let closeRequested = Atomic<Bool>(false)
    /// Frames delivered since the device opened: the next chunk's position.
    let framesCaptured = Atomic<Int64>(0)
    let overruns = Atomic<Int>(0)
    let framesLost = Atomic<Int64>(0)
    /// Uptime (ns) of the last successful read and of the consumers' return from its chunk, or
    /// of the device starting: the watchdog's proof, and the stall watch's.
    let lastProgress = Atomic<UInt64>(0)
    /// `lastProgress` on the wall clock.
    public var lastProgressDate: Date {
        Date(timeIntervalSinceNow: -Double(Self.uptime() &- lastProgress.load(ordering: .relaxed)) / 1e9)
    }
    /// Whether the device is running (a consumer is attached).
    let isRunning = Atomic<Bool>(false)

    // Read-only, for the control plane (any thread).
    public var frameCount: Int64 { framesCaptured.load(ordering: .acquiring) }
    public var overrunCount: Int { overruns.load(ordering: .relaxed) }
    public var lastProgressUptime: UInt64 { lastProgress.load(ordering: .relaxed) }
    public var isDeviceRunning: Bool { isRunning.load(ordering: .acquiring) }
    /// The failure that ended the engine, once it has.
    private let failure = NIOLockedValueBox<RecorderError?>(nil)
    private let ended = Atomic<Bool>(false)
    /// When position 0 was captured (seconds since 1970, bit pattern; NaN until the first read).
    private let anchorBits = Atomic<UInt64>(Double.nan.bitPattern)
    /// The wall clock's offset from the boot clock the times are on (seconds, bit pattern; NaN
    /// until the first read): it moves only when the wall clock steps.
    private let clockOffsetBits = Atomic<UInt64>(Double.nan.bitPattern)
    /// The device clock's drift against the monotonic clock (ppm bit pattern; NaN until stable).
    private let driftBits = Atomic<UInt64>(Double.nan.bitPattern)

    private var consumers: [any CaptureConsumer] = []
    private var drift: ClockDriftEstimator
    /// The least delayed estimate of position 0's time over the current window, and when the
    /// window began (position). A new window every minute follows the clock's drift.
    private var anchorWindow = Double.infinity
    private var anchorWindowStart: Int64 = 0
    private var reanchor = true
    private let chunkFrames: Int
    private let buffer: UnsafeMutableRawPointer
    private let commands = NIOLockedValueBox<[Command]>([])
    /// Set by `perform` after it posted a command and wrote the eventfd: the capture thread
    /// reads the eventfd and takes the commands only then, not with two more system calls and
    /// a lock on every read. Each write is followed by a store, and each store by a read of the
    /// eventfd after it, so the eventfd never stays readable (which would keep `poll` from
    /// sleeping).
    private let commandsPosted = Atomic<Bool>(false)
    private let wake = DispatchSemaphore(value: 0)
    /// Written by `perform`, watched beside the PCM's descriptors: a control block runs at once,
    /// not after the next period.
    private let wakeDescriptor = recd_wake_descriptor()
    private var closing = false
    /// Serializes the blocks run once the thread has ended.
    private let afterEnd = NIOLock()
    /// Held by the capture thread except while it waits in the driver for audio: whoever else
    /// holds it knows the thread is not touching the consumers, and may end the engine in its
    /// place (`endIfStalled`).
    private let ownership = ThreadOwnership()
    /// `endIfStalled` ended the engine: the thread, if the driver ever lets it go, leaves
    /// without touching anything. Under `ownership`.
    private var abandoned = false
    /// `start`'s callback, for `endIfStalled`.
    private var onEnd: (@Sendable (RecorderError) -> Void)?
    /// Checks every second whether capture has stalled (`endIfStalled`).
    private var stallWatch: DispatchSourceTimer?

    private final class Command: @unchecked Sendable {
        // @unchecked: `body` runs once, on the capture thread; `state` is behind its lock.
        enum State { case pending, running, done, cancelled }
        let body: (CaptureEngine) -> Void
        let state = NIOLockedValueBox<State>(.pending)
        let done = DispatchSemaphore(value: 0)
        init(_ body: @escaping (CaptureEngine) -> Void) { self.body = body }
    }

    public init(pcm: CapturePCM, configuration: PCMConfiguration) {
        self.pcm = pcm
        self.configuration = configuration
        self.drift = ClockDriftEstimator(rate: configuration.sampleRate)
        // Whole periods when the device paces us; larger chunks when it has more ready (an
        // unpaced device, or catching up), up to the device buffer.
        self.chunkFrames = Swift.max(configuration.periodFrames, Swift.min(configuration.bufferFrames, 8192))
        self.buffer = .allocate(byteCount: chunkFrames * configuration.bytesPerFrame, alignment: 16)
    }

    deinit {
        buffer.deallocate()
        if wakeDescriptor >= 0 { Glibc.close(wakeDescriptor) }
    }

    /// The most frames one chunk holds.
    public var maximumChunkFrames: Int { chunkFrames }

    /// Whether the thread has ended (device lost, or closed).
    public var hasEnded: Bool { ended.load(ordering: .acquiring) }

    /// When the frame at `position` was captured, by the least delayed estimate so far; nil
    /// before the first read.
    public func captureTime(ofPosition position: Int64) -> Double? {
        let anchor = Double(bitPattern: anchorBits.load(ordering: .relaxed))
        return anchor.isNaN ? nil : anchor + Double(position) / Double(configuration.sampleRate)
    }

    /// CLOCK_REALTIME − CLOCK_BOOTTIME (seconds) as of the last read: what the capture times are
    /// on. A consumer that sees it change between two chunks saw the wall clock step.
    public var wallClockOffset: Double? {
        let value = Double(bitPattern: clockOffsetBits.load(ordering: .relaxed))
        return value.isNaN ? nil : value
    }

    public var deviceClockDriftPPM: Double? {
        let value = Double(bitPattern: driftBits.load(ordering: .relaxed))
        return value.isNaN ? nil : value
    }

    // MARK: Control (any thread but the capture thread)

    /// Starts the capture thread; the device starts when the first consumer is attached.
    /// `onEnd` runs once when the device fails (not after `close()`): on that thread, or on
    /// the stall watch's when the device stopped delivering (`endIfStalled`).
    public func start(onEnd: @escaping @Sendable (RecorderError) -> Void) {
        lastProgress.store(Self.uptime(), ordering: .relaxed)
        self.onEnd = onEnd
        let watch = DispatchSource.makeTimerSource(queue: Self.stallWatchQueue)
        watch.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(250))
        watch.setEventHandler { [weak self] in self?.endIfStalled() }
        stallWatch = watch
        watch.resume()
        DedicatedThread.spawn(name: "recd-capture") { [self] in
            ownership.lock()
            let error = run()
            if !abandoned { end(error) }
            ownership.unlock()
        }
    }

    /// The engine's last steps, under `ownership`: the consumers are told, blocks posted
    /// before run now (seeing an ended engine, so that nobody waits on them), and from here
    /// blocks run where they are posted, one at a time (`afterEnd`).
    private func end(_ error: RecorderError?) {
        stallWatch?.cancel()
        if let error {
            failure.withLockedValue { $0 = error }
            for consumer in consumers { consumer.engineFailed(error) }
        }
        consumers = []
        let waiting = commands.withLockedValue { pending in
            ended.store(true, ordering: .releasing)
            defer { pending = [] }
            return pending
        }
        afterEnd.withLock { for command in waiting { execute(command) } }
        if let error { onEnd?(error) }
        onEnd = nil
    }

    /// Capture that delivers nothing for this long while the device runs has lost its device:
    /// a sound server that stopped answering, or a driver that never returns (libpulse
    /// deadlocks in the read when its server dies while a fragment is half read). Far above
    /// any device's buffer (at most half a second here) and the 2 s blocks of an idle
    /// PulseAudio sink; below what withholds systemd's watchdog pings long enough for a
    /// restart (recd.service: WatchdogSec=10s, pings withheld after 5 s without progress).
    public static let stallLimit: UInt64 = 6_000_000_000
    private static let stallWatchQueue = DispatchQueue(label: "recd.capture-stall-watch")

    /// Ends the engine with `deviceLost` when the running device has delivered nothing for
    /// `stallLimit`, as if the thread had seen the device fail: the consumers and `onEnd`
    /// are told, and the recorder waits for the device and opens it anew. The thread may be
    /// stuck in the driver for good; it is left there (with its handle) and, should it come
    /// back, leaves without touching anything. Not while the thread is anywhere but waiting
    /// for audio (writing a file on a stalled disk is not a lost device).
    private func endIfStalled() {
        guard isRunning.load(ordering: .acquiring), !ended.load(ordering: .acquiring),
              Self.uptime() &- lastProgress.load(ordering: .relaxed) > Self.stallLimit,
              ownership.tryLock() else { return }
        defer { ownership.unlock() }
        let silence = Self.uptime() &- lastProgress.load(ordering: .relaxed)
        guard !abandoned, !ended.load(ordering: .acquiring), isRunning.load(ordering: .acquiring),
              silence > Self.stallLimit else { return }
        abandoned = true
        end(RecorderError(.deviceLost, "capture device '\(pcm.name)' delivered nothing for "
                          + "\(Int(Double(silence) / 1e9)) s (its sound server stopped answering, or its driver is stuck)"))
    }

    /// Runs `body` on the capture thread between two reads and returns its result, or nil
    /// when the thread did not get to it within `timeout` seconds (stuck in the driver): the
    /// block is then cancelled and never runs. On an ended engine, runs it here.
    func perform<T>(timeout: Double = 5, _ body: @escaping (CaptureEngine) -> T) -> T? {
        let result = NIOLockedValueBox<T?>(nil)
        let command = Command { engine in
            let value = body(engine)
            result.withLockedValue { $0 = value }
        }
        var posted = false
        commands.withLockedValue { pending in
            guard !ended.load(ordering: .acquiring) else { return }
            pending.append(command)
            posted = true
        }
        guard posted else {
            afterEnd.withLock { execute(command) }
            return result.withLockedValue { $0 }
        }
        if wakeDescriptor >= 0 {
            var one: UInt64 = 1
            _ = Glibc.write(wakeDescriptor, &one, 8)
        }
        // Before the semaphore: a thread that waits there for a consumer runs the command
        // once woken, only if it sees the flag.
        commandsPosted.store(true, ordering: .releasing)
        wake.signal()
        if command.done.wait(timeout: .now() + .nanoseconds(Int(timeout * 1e9))) == .success {
            return result.withLockedValue { $0 }
        }
        let cancelled = command.state.withLockedValue { state -> Bool in
            guard state == .pending else { return false }
            state = .cancelled
            return true
        }
        if cancelled { return nil }
        command.done.wait()  // it is running now: blocks do not wait, so it ends soon
        return result.withLockedValue { $0 }
    }

    /// Attaches `consumer` and starts the device if it was stopped. `prepare` runs on the
    /// capture thread just before, where it may hand the consumer frames the engine kept (the
    /// pre-roll); false from it: do not attach after all. Throws `failure` (with the reason)
    /// when the device will not start; the consumer is then not attached.
    public func attach(_ consumer: any CaptureConsumer, failure code: RecorderError.Code = .failedToBegin,
                timeout: Double = 5, prepare: @escaping (CaptureEngine) -> Bool = { _ in true }) throws(RecorderError) {
        let outcome: Result<Void, RecorderError>? = perform(timeout: timeout) { engine in
            if engine.hasEnded {
                let reason = engine.failure.withLockedValue { $0?.message } ?? "the device was closed"
                return .failure(RecorderError(code, "capture on '\(engine.pcm.name)' has ended: \(reason)"))
            }
            do throws(ALSAError) {
                try engine.startDevice()
            } catch {
                return .failure(RecorderError(code, "cannot start capture on '\(engine.pcm.name)': \(error.reason)"))
            }
            if prepare(engine) { engine.consumers.append(consumer) }
            return .success(())
        }
        guard let outcome else {
            throw RecorderError(code, "capture on '\(pcm.name)' is not responding (stuck in the device driver)")
        }
        try outcome.get()
    }

    /// Detaches `consumer`; `lastly` runs on the capture thread after its last chunk. false:
    /// the thread did not answer within `timeout` (stuck in the driver).
    @discardableResult
    public func detach(_ consumer: any CaptureConsumer, timeout: Double = 5,
                lastly: @escaping (CaptureEngine) -> Void = { _ in }) -> Bool {
        perform(timeout: timeout) { engine in
            engine.consumers.removeAll { $0 === consumer }
            lastly(engine)
            return true
        } ?? false
    }

    /// Ends the thread and lets the device go (when the engine is released). false if the
    /// thread is stuck in the driver: it ends by itself whenever the driver lets it go.
    @discardableResult
    public func close(timeout: Double = 5) -> Bool {
        closeRequested.store(true, ordering: .releasing)
        return perform(timeout: timeout) { engine in
            engine.closing = true
            engine.consumers = []
            return true
        } ?? false
    }

    public static func uptime() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    // MARK: The capture thread

    private func execute(_ command: Command) {
        let run = command.state.withLockedValue { state -> Bool in
            guard state == .pending else { return false }
            state = .running
            return true
        }
        guard run else { return }
        command.body(self)
        command.state.withLockedValue { $0 = .done }
        command.done.signal()
    }

    private func startDevice() throws(ALSAError) {
        guard !isRunning.load(ordering: .relaxed) else { return }
        if framesCaptured.load(ordering: .relaxed) > 0 || reanchorAfterStop { try pcm.prepare() }
        try pcm.start()
        reanchorAfterStop = false
        reanchor = true  // frames stopped while the clock went on
        drift.restart()
        lastProgress.store(Self.uptime(), ordering: .relaxed)
        lastRead = (Self.uptime(), 0)
        isRunning.store(true, ordering: .releasing)
    }

    /// The device was stopped (dropped) at least once: it needs `prepare` to start again.
    private var reanchorAfterStop = false

    private func stopDevice() {
        guard isRunning.load(ordering: .relaxed) else { return }
        pcm.drop()
        reanchorAfterStop = true
        isRunning.store(false, ordering: .releasing)
    }

    private func runCommands() {
        guard commandsPosted.exchange(false, ordering: .acquiringAndReleasing) else { return }
        if wakeDescriptor >= 0 {
            var count: UInt64 = 0
            _ = Glibc.read(wakeDescriptor, &count, 8)  // non-blocking: clears what `perform` wrote
        }
        let pending = commands.withLockedValue { pending in defer { pending = [] }; return pending }
        for command in pending { execute(command) }
    }

    /// The read loop. Returns the device failure that ended it, or nil after `close()`.
    private func run() -> RecorderError? {
        while true {
            runCommands()
            if closing || closeRequested.load(ordering: .acquiring) {
                stopDevice()
                return nil
            }
            if consumers.isEmpty {
                // Nobody listens: stop the device (other programs may have it meanwhile, if it shares) and wait.
                stopDevice()
                wake.wait()
                continue
            }
            sleepUntilWanted()
            // Straight into the recording's write buffer when it has room: one copy fewer.
            var target = buffer
            // Kept alive through the read: a stall watch that ends the engine meanwhile lets
            // the consumers go, and the ring's memory must outlive a driver that comes back.
            var targetOwner: (any CaptureConsumer)?
            for consumer in consumers {
                if let place = consumer.readTarget(frames: chunkFrames) {
                    target = place
                    targetOwner = consumer
                    break
                }
            }
            defer { withExtendedLifetime(targetOwner) {} }
            do throws(ALSAError) {
                // In the driver without `ownership`: a stall watch may end the engine meanwhile.
                let read = try inDriver { () throws(ALSAError) -> (available: Int, got: Int)? in
                    let available: Int
                    if wakeDescriptor >= 0 {
                        // What the wait found ready: no second look into the driver (through
                        // the pulse plugin, a lock and a walk of libpulse's queue each).
                        available = try pcm.wait(timeoutMilliseconds: 100, orReadable: wakeDescriptor)
                        guard available > 0 else { return nil }
                    } else {
                        guard try pcm.wait(timeoutMilliseconds: 100) else { return nil }
                        available = try pcm.available()
                    }
                    let frames = Swift.min(Swift.max(available, configuration.periodFrames), chunkFrames)
                    return (available, try pcm.read(into: target, frames: frames))
                }
                if abandoned { return nil }
                guard let (available, got) = read else { continue }
                let readUptime = Self.uptime()
                lastProgress.store(readUptime, ordering: .relaxed)
                lastRead = (readUptime, Swift.max(0, available - got))
                if got == 0 { continue }
                let position = framesCaptured.load(ordering: .relaxed)
                // Frames the device holds beyond this read were captured before now as well.
                let capturedByNow = position + Int64(got) + Int64(Swift.max(0, available - got))
                let rate = Double(configuration.sampleRate)
                var offsetNanoseconds: Int64 = 0
                let wallClock = Double(recd_wall_clock_now(&offsetNanoseconds)) / 1e9
                followWallClockSteps(offset: Double(offsetNanoseconds) / 1e9)
                let estimate = wallClock - Double(capturedByNow) / rate
                if reanchor { drift.restart() }
                if drift.add(uptimeNanoseconds: readUptime, frames: capturedByNow), let ppm = drift.partsPerMillion {
                    driftBits.store(ppm.bitPattern, ordering: .relaxed)
                }
                updateAnchor(estimate: estimate, position: position)
                let lostOverruns = pendingOverruns
                let lostFrames = pendingLost
                pendingOverruns = 0
                pendingLost = 0
                let chunk = CaptureChunk(samples: target, frames: got, position: position,
                                         captureTime: estimate + Double(position) / rate, readUptime: readUptime,
                                         overruns: lostOverruns, framesLost: lostFrames,
                                         anchoredTime: captureTime(ofPosition: position),
                                         followedAtOnce: available - got >= configuration.periodFrames,
                                         clockOffset: Double(bitPattern: clockOffsetBits.load(ordering: .relaxed)))
                framesCaptured.store(position + Int64(got), ordering: .releasing)
                var index = 0
                while index < consumers.count {
                    if consumers[index].receive(chunk) { index += 1 } else { consumers.remove(at: index) }
                }
                // Progress too: a consumer held up (a write to a stalled disk) must not look,
                // once the thread is back in the driver, like a device that delivered nothing.
                lastProgress.store(Self.uptime(), ordering: .relaxed)
            } catch {
                if abandoned { return nil }
                do throws(ALSAError) {
                    try recover(from: error)
                } catch {
                    if abandoned { return nil }
                    stopDevice()
                    return .deviceLost(error)
                }
            }
        }
    }

    private var pendingOverruns = 0
    private var pendingLost: Int64 = 0
    /// When the last read returned, and the frames the device still held beyond it.
    private var lastRead: (uptime: UInt64, unread: Int) = (0, 0)

    /// A step of the wall clock (NTP's first synchronization on a station without a real-time
    /// clock, a set by hand) moves the anchor with it at once: the frames' times follow the
    /// clock as it is now, and the minimum below never keeps a time of the clock before. Sets
    /// under `ClockStep.minimumSize` add up against the offset last followed until they are one.
    private func followWallClockSteps(offset: Double) {
        let followed = Double(bitPattern: clockOffsetBits.load(ordering: .relaxed))
        guard !followed.isNaN else {
            clockOffsetBits.store(offset.bitPattern, ordering: .relaxed)
            return
        }
        let step = offset - followed
        guard Swift.abs(step) >= ClockStep.minimumSize else { return }
        if anchorWindow.isFinite { anchorWindow += step }
        let anchor = Double(bitPattern: anchorBits.load(ordering: .relaxed))
        if !anchor.isNaN { anchorBits.store((anchor + step).bitPattern, ordering: .relaxed) }
        clockOffsetBits.store(offset.bitPattern, ordering: .relaxed)
    }

    /// The anchor (position 0's time) is the least delayed estimate: within a window of a
    /// minute of frames, the minimum; each new window starts from its own first estimate and
    /// replaces the anchor once it is a window long, so that the device clock's drift against
    /// the wall clock is followed. After a restart (an overrun, the device stopped) the count
    /// no longer matches the clock: start over.
    private func updateAnchor(estimate: Double, position: Int64) {
        readsSinceAnchored = reanchor ? 0 : readsSinceAnchored + 1
        if reanchor {
            reanchor = false
            anchorWindow = estimate
            anchorWindowStart = position
            anchorBits.store(estimate.bitPattern, ordering: .relaxed)
            return
        }
        anchorWindow = Swift.min(anchorWindow, estimate)
        let current = Double(bitPattern: anchorBits.load(ordering: .relaxed))
        if estimate < current { anchorBits.store(estimate.bitPattern, ordering: .relaxed) }
        if position - anchorWindowStart >= Int64(configuration.sampleRate) * 60 {
            anchorBits.store(anchorWindow.bitPattern, ordering: .relaxed)
            anchorWindow = .infinity
            anchorWindowStart = position
        }
    }

    /// When every consumer attached can wait (listening with only a pre-roll ring: nobody
    /// looks), sleeps after a read that emptied the device until the least patient consumer's
    /// `wakeInterval` has passed, then reads all that came meanwhile in one go: a few wake-ups
    /// a second instead of one per period. At most a quarter of the device buffer, so that
    /// the buffer never fills; a command (`perform`) wakes it at once.
    ///
    /// Not in the first `denseReads` reads after the clock is anchored (the device opened or
    /// restarted): the anchor is the least delayed of the reads' estimates, and it needs many
    /// reads close together to be as tight from the start as it was before (what is timed in
    /// the first seconds, a pre-roll or a tap, to the millisecond).
    private func sleepUntilWanted() {
        guard wakeDescriptor >= 0, lastRead.uptime > 0, lastRead.unread < configuration.periodFrames,
              readsSinceAnchored >= Self.denseReads else { return }
        var interval = Double(configuration.bufferFrames) / Double(configuration.sampleRate) / 4
        for consumer in consumers { interval = Swift.min(interval, consumer.wakeInterval) }
        let period = UInt64(Double(configuration.periodFrames) / Double(configuration.sampleRate) * 1e9)
        let deadline = lastRead.uptime &+ UInt64(interval * 1e9)
        let now = Self.uptime()
        guard UInt64(interval * 1e9) > period * 3 / 2, now < deadline else { return }
        var descriptor = pollfd(fd: wakeDescriptor, events: Int16(POLLIN), revents: 0)
        _ = poll(&descriptor, 1, Int32((deadline - now + 999_999) / 1_000_000))
    }

    /// Reads since the anchor was set (capture thread), and how many come every period first.
    private var readsSinceAnchored = 0
    static let denseReads = 500

    /// Runs `body` (a call into the driver that may block) without `ownership`.
    private func inDriver<T>(_ body: () throws(ALSAError) -> T) throws(ALSAError) -> T {
        ownership.unlock()
        defer { ownership.lock() }
        return try body()
    }

    /// Overrun or suspend: count it, measure what was lost, restart. Anything else rethrows.
    ///
    /// Lost is everything the device captured after the last frame read: the time since that
    /// read by the monotonic clock, plus what the device held beyond it (the restart drops the
    /// buffer). Not the status's trigger timestamp: through ALSA's plugins (pulse, jack) that
    /// is when the stream started, and a 1 s overrun four seconds in was counted as 4 s.
    private func recover(from error: ALSAError) throws(ALSAError) {
        var lost: Int64 = 0
        if error.code == -EPIPE || error.code == -ESTRPIPE, lastRead.uptime > 0 {
            let seconds = Double(Self.uptime() &- lastRead.uptime) / 1e9
            lost = Int64((seconds * Double(configuration.sampleRate)).rounded()) + Int64(lastRead.unread)
        }
        try inDriver { () throws(ALSAError) in try pcm.recover(from: error) }
        if abandoned { return }
        if error.code == -EPIPE || error.code == -ESTRPIPE {
            overruns.add(1, ordering: .relaxed)
            framesLost.add(lost, ordering: .relaxed)
            pendingOverruns += 1
            pendingLost += lost
            drift.restart()  // the lost frames broke the count against the clock
            reanchor = true  // and position 0's time: the next read times the frames after the loss
        }
    }
}

/// A mutex the capture thread holds while it works and lets go of while it waits in the
/// driver; another thread may try it without blocking (NIOLock cannot).
final class ThreadOwnership: @unchecked Sendable {
    // @unchecked: a pthread mutex, allocated once and never moved.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
    func tryLock() -> Bool { pthread_mutex_trylock(mutex) == 0 }
}

extension RecorderError {
    static func deviceLost(_ error: ALSAError) -> RecorderError {
        RecorderError(.deviceLost, "capture device '\(error.device)' failed: \(error.reason) (\(error.function))")
    }
}
