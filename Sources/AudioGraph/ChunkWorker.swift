import Dispatch
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import Synchronization

/// A thread of its own that takes chunks from a `ChunkRing` and hands them to `process`, in
/// order, and runs control blocks between two chunks. What the capture thread must not do
/// (write and sync files, encode, create and rename files) runs here: a stall of this thread
/// costs nothing until the ring is full.
public final class ChunkWorker: @unchecked Sendable {
    // @unchecked: `process` is used by the worker thread only; commands pass through a lock.

    public let ring: ChunkRing
    private var process: ((CaptureChunk) -> Void)?
    private let wake = DispatchSemaphore(value: 0)
    private let commands = NIOLockedValueBox<[Command]>([])
    private let stopping = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)
    /// The capture thread's last word (the device failed): runs once every chunk before it has.
    private let last = NIOLockedValueBox<(() -> Void)?>(nil)

    private final class Command: @unchecked Sendable {
        // @unchecked: `body` runs once, on the worker thread; `after` is set under the
        // commands' lock before the worker can see the command.
        let body: () -> Void
        let done = DispatchSemaphore(value: 0)
        /// Chunks pushed when it was posted: the worker takes them all before it runs it.
        var after = 0
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    public init(ring: ChunkRing, process: @escaping (CaptureChunk) -> Void) {
        self.ring = ring
        self.process = process
    }

    /// Starts the thread (once).
    public func start(name: String) {
        guard !running.exchange(true, ordering: .acquiringAndReleasing) else { return }
        DedicatedThread.spawn(name: name) { [self] in run() }
    }

    /// Capture thread: hands a chunk over, waiting at most `patience` nanoseconds for room.
    /// false: the ring stayed full (the chunk is lost).
    ///
    /// The wait is for a device that is not paced by a clock (a file read through ALSA
    /// delivers as fast as it is read), whose capture thread would otherwise outrun any
    /// writer; a sound card's buffer holds more than the wait (half of it), so a disk that
    /// is merely slow for a moment costs nothing either.
    ///
    /// A chunk that another follows at once (`CaptureChunk.followedAtOnce`) wakes the worker
    /// only once the ring holds `batchBytes`: behind a device that delivers faster than real
    /// time the worker then takes chunks in batches instead of being woken for each (a futex
    /// wake and, on another CPU, an interrupt: BENCHMARKS.md, issue 36's capture rows). A
    /// paced device's chunk, the last of a burst, wakes it at once. A deferred chunk still
    /// wakes a worker in its untimed sleep; one napping (after work) takes it within `nap`:
    /// a device that says more is ready and then blocks in its read (a file plugin reading a
    /// pipe) leaves no chunk waiting longer than that.
    public func push(_ chunk: CaptureChunk, patience: UInt64) -> Bool {
        if ring.push(chunk) {
            if !chunk.followedAtOnce || ring.heldFrames.load(ordering: .relaxed) * ring.bytesPerFrame >= batchBytes {
                wakeIfAsleep()
            } else {
                wakeIfSleeping()
            }
            return true
        }
        // Full: whatever the batch, the worker has work.
        wakeIfAsleep()
        guard patience > 0 else { return false }
        let deadline = CaptureEngine.uptime() + patience
        let size = chunk.frames * ring.bytesPerFrame
        // Signals left from an earlier wait (the worker made room just as a retry succeeded).
        while room.wait(timeout: .now()) == .success {}
        defer { producerNeeds.store(0, ordering: .sequentiallyConsistent) }
        while true {
            let now = CaptureEngine.uptime()
            guard now < deadline, !stopping.load(ordering: .acquiring) else { return false }
            // Announced before the last look, so that the worker either sees it or has
            // already made the room this look finds.
            producerNeeds.store(size, ordering: .sequentiallyConsistent)
            if ring.push(chunk) {
                wakeIfAsleep()
                return true
            }
            wakeIfAsleep()
            _ = room.wait(timeout: .now() + .nanoseconds(Int(Swift.min(deadline - now, 10_000_000))))
        }
    }

    /// What a burst of chunks fills before the worker is woken for them: a quarter of the ring,
    /// at most 256 KiB (what the worker takes then is still in the caches).
    private var batchBytes: Int { Swift.min(ring.capacityBytes / 4, 256 * 1024) }

    /// Wakes the worker if it sleeps (or is about to): one system call per sleep, not one per
    /// chunk, and none while it is busy.
    private func wakeIfAsleep() {
        // The chunk's count is stored before `asleep` is read (the worker: `asleep` stored
        // before the count is read), so one of the two sees the other.
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        if asleep.exchange(Self.awake, ordering: .sequentiallyConsistent) != Self.awake { wake.signal() }
    }

    /// Wakes the worker only if it sleeps without a timeout.
    private func wakeIfSleeping() {
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        guard asleep.load(ordering: .sequentiallyConsistent) == Self.sleeping else { return }
        if asleep.compareExchange(expected: Self.sleeping, desired: Self.awake, ordering: .sequentiallyConsistent).exchanged {
            wake.signal()
        }
    }

    /// Bytes of room the producer waits for in `push` (0: it is not waiting). The worker wakes
    /// it once a quarter of the ring is free (or all of it), not after every chunk it takes:
    /// behind an unpaced device the two threads would otherwise take turns chunk by chunk, a
    /// futex wake and a context switch each (BENCHMARKS.md, issue 36's capture rows).
    private let producerNeeds = Atomic<Int>(0)
    private let room = DispatchSemaphore(value: 0)
    /// Whether the worker waits on `wake` (or is about to): `napping` for at most `nap` after
    /// it took chunks, `sleeping` without a timeout after a nap that found none.
    private let asleep = Atomic<Int>(ChunkWorker.awake)
    private static let awake = 0
    private static let napping = 1
    private static let sleeping = 2
    /// How long a worker that took chunks waits before it looks again unwoken.
    static let nap = 0.05

    /// Capture thread (or the stall watch): runs `body` on the worker after every chunk
    /// pushed before.
    public func finally(_ body: @escaping () -> Void) {
        last.withLockedValue { $0 = body }
        wake.signal()
    }

    /// Runs `body` on the worker after every chunk pushed before, and returns its result.
    /// On a worker that has ended (or never started), runs it here.
    public func perform<T>(_ body: @escaping () -> T) -> T {
        let result = NIOLockedValueBox<T?>(nil)
        let command = Command { result.withLockedValue { $0 = body() } }
        let posted = commands.withLockedValue { pending -> Bool in
            guard running.load(ordering: .acquiring), !stopping.load(ordering: .acquiring) else { return false }
            command.after = ring.pushedCount
            pending.append(command)
            return true
        }
        guard posted else { return body() }
        wake.signal()
        command.done.wait()
        return result.withLockedValue { $0! }
    }

    /// Ends the thread after what it is doing (chunks still held are dropped). Any thread,
    /// the worker included.
    public func stop() {
        stopping.store(true, ordering: .releasing)
        wake.signal()
    }

    private func run() {
        while true {
            let before = ring.takenCount
            while takeChunk() {}
            if let body = last.withLockedValue({ body in defer { body = nil }; return body }) {
                // The capture thread's last word comes after its last chunk: all of them first.
                while takeChunk() {}
                body()
            }
            let pending = commands.withLockedValue { pending in defer { pending = [] }; return pending }
            for command in pending {
                // Chunks pushed after the ring was drained above and before the command was
                // posted come first: `perform` promises every chunk pushed before it.
                while ring.takenCount < command.after, takeChunk() {}
                command.body()
                command.done.signal()
            }
            if stopping.load(ordering: .acquiring) {
                // Blocks posted meanwhile run here, where `perform` waits for them.
                let late = commands.withLockedValue { pending in defer { pending = [] }; running.store(false, ordering: .releasing); return pending }
                for command in late {
                    command.body()
                    command.done.signal()
                }
                process = nil
                return
            }
            if pending.isEmpty {
                // Asleep first, then the last look: a chunk pushed in between is either seen
                // here or finds `asleep` set and signals. After work a nap (chunks of a burst
                // may be deferred, `push`), after a nap that found nothing a sleep.
                let napping = ring.takenCount != before
                asleep.store(napping ? Self.napping : Self.sleeping, ordering: .sequentiallyConsistent)
                atomicMemoryFence(ordering: .sequentiallyConsistent)
                if ring.isEmpty {
                    if napping {
                        _ = wake.wait(timeout: .now() + .nanoseconds(Int(Self.nap * 1e9)))
                    } else {
                        wake.wait()
                    }
                }
                asleep.store(Self.awake, ordering: .sequentiallyConsistent)
            }
        }
    }

    /// Worker: processes the oldest chunk held, if any.
    private func takeChunk() -> Bool {
        guard let chunk = ring.peek() else { return false }
        if !stopping.load(ordering: .acquiring) { process?(chunk) }
        ring.release()
        wakeProducerIfRoom()
        return true
    }

    /// Worker: signals a producer waiting in `push` once there is room for its chunk and a
    /// quarter of the ring besides, or the ring is empty.
    private func wakeProducerIfRoom() {
        let needs = producerNeeds.load(ordering: .sequentiallyConsistent)
        guard needs > 0 else { return }
        let held = ring.heldFrames.load(ordering: .relaxed) * ring.bytesPerFrame
        guard ring.isEmpty || held + needs <= ring.capacityBytes - ring.capacityBytes / 4 else { return }
        if producerNeeds.compareExchange(expected: needs, desired: 0, ordering: .sequentiallyConsistent).exchanged {
            room.signal()
        }
    }
}
