import Dispatch
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import Synchronization

/// The hand-over from the capture thread to a worker thread: chunks copied into memory
/// allocated (and touched) once, taken by the worker in capture order. One producer (the
/// capture thread), one consumer (the worker): no lock, no allocation, and no system call on
/// the capture thread but the semaphore post that wakes a sleeping worker. When the worker
/// falls behind by more than the ring holds (a disk that stalls for longer than the write
/// buffer), `push` refuses the chunk: the frames are lost, and the worker sees it as a jump
/// in the next chunk's position.
///
/// Chunks are stored whole, each in one contiguous piece: a chunk that does not fit before the
/// end of the storage starts again at its beginning (the bytes skipped count as used until
/// the worker has taken the chunk).
final class ChunkRing: @unchecked Sendable {
    // @unchecked: `storage` and `headers` are written by the producer only in the part the
    // counters say is free, and read by the consumer only in the part they say is filled;
    // the counters are atomics with release/acquire ordering.

    struct Header {
        var start: Int
        var end: Int
        var frames: Int
        var position: Int64
        var captureTime: Double
        var readUptime: UInt64
        var overruns: Int
        var framesLost: Int64
        var anchoredTime: Double
    }

    let capacityBytes: Int
    let bytesPerFrame: Int
    private let storage: UnsafeMutableRawPointer
    private let headers: UnsafeMutablePointer<Header>
    private let headerCapacity: Int
    /// Chunks pushed and taken (monotonic counts).
    private let pushed = Atomic<Int>(0)
    private let taken = Atomic<Int>(0)
    /// Bytes used up to the newest chunk pushed and the oldest chunk still held (monotonic).
    private var producerBytes = 0
    private let releasedBytes = Atomic<Int>(0)
    /// Frames held now and the most ever held, for status.
    let heldFrames = Atomic<Int>(0)
    let peakFrames = Atomic<Int>(0)

    /// Room for `frames` device frames in chunks of `typicalChunkFrames` (a chunk larger than
    /// the whole ring is refused).
    init(frames: Int, bytesPerFrame: Int, typicalChunkFrames: Int) {
        self.bytesPerFrame = bytesPerFrame
        capacityBytes = Swift.max(1, frames) * bytesPerFrame
        headerCapacity = Swift.max(64, 2 * frames / Swift.max(1, typicalChunkFrames) + 16)
        storage = .allocate(byteCount: capacityBytes, alignment: 16)
        // Every page now, off the capture thread: its first pass through the ring must not
        // fault them in one by one.
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: capacityBytes)
        headers = .allocate(capacity: headerCapacity)
        headers.initialize(repeating: Header(start: 0, end: 0, frames: 0, position: 0, captureTime: 0, readUptime: 0,
                                             overruns: 0, framesLost: 0, anchoredTime: .nan), count: headerCapacity)
    }

    deinit {
        storage.deallocate()
        headers.deallocate()
    }

    /// Memory the ring takes, in bytes.
    var bytes: Int { capacityBytes + headerCapacity * MemoryLayout<Header>.stride }

    /// Producer: where a chunk of up to `frames` frames goes next, if the ring has room for
    /// that many now (nil: it has not). The capture engine reads the device straight into it;
    /// `push` of a chunk read there keeps it where it is. A read that fails leaves the ring as
    /// it was (at most moved back to its start, empty).
    func reservation(frames: Int) -> UnsafeMutableRawPointer? {
        guard pushed.load(ordering: .relaxed) - taken.load(ordering: .acquiring) < headerCapacity else { return nil }
        return place(frames * bytesPerFrame).map { storage + $0.offset }
    }

    /// Where `size` bytes go next (the storage's start if they do not fit before its end) and
    /// the producer's count after them; nil: not that much room.
    private func place(_ size: Int) -> (offset: Int, end: Int)? {
        guard size <= capacityBytes else { return nil }
        rewindIfEmpty()
        let offset = producerBytes % capacityBytes
        let skipped = offset + size > capacityBytes ? capacityBytes - offset : 0
        let end = producerBytes + skipped + size
        guard end - releasedBytes.load(ordering: .acquiring) <= capacityBytes else { return nil }
        return (skipped > 0 ? 0 : offset, end)
    }

    /// Producer: back to the storage's start whenever the worker has taken everything. A
    /// worker that keeps up (a paced device) then has the capture thread fill the same few
    /// kilobytes over and over, which stay in the CPU's caches, instead of streaming through
    /// the whole buffer (megabytes, fetched from memory again on each pass: BENCHMARKS.md,
    /// issue 36). The producer may move the released count too: with nothing held, the
    /// worker has stored its last and touches it again only for a chunk pushed after this.
    private func rewindIfEmpty() {
        let offset = producerBytes % capacityBytes
        guard offset > 0, taken.load(ordering: .acquiring) == pushed.load(ordering: .relaxed) else { return }
        producerBytes += capacityBytes - offset
        releasedBytes.store(producerBytes, ordering: .releasing)
    }

    /// Producer: copies `chunk` in, or keeps it where it is if it was read into the ring's
    /// `reservation`. false: no room (the chunk is not kept).
    func push(_ chunk: CaptureChunk) -> Bool {
        let count = pushed.load(ordering: .relaxed)
        guard count - taken.load(ordering: .acquiring) < headerCapacity else { return false }
        let size = chunk.frames * bytesPerFrame
        let offset: Int
        let end: Int
        let inPlace = UnsafeRawPointer(storage)
        if chunk.samples >= inPlace, chunk.samples < inPlace + capacityBytes {
            // Read into the reservation: at the producer's place, or at the start if a whole
            // chunk did not fit before the end (this smaller one may have).
            offset = chunk.samples - inPlace
            let current = producerBytes % capacityBytes
            assert(offset == current || offset == 0, "a chunk in the ring but not at its reservation")
            end = producerBytes + (offset == current ? 0 : capacityBytes - current) + size
        } else {
            guard let (at, after) = place(size) else { return false }
            offset = at
            end = after
            (storage + offset).copyMemory(from: chunk.samples, byteCount: size)
        }
        headers[count % headerCapacity] = Header(start: offset, end: end, frames: chunk.frames, position: chunk.position,
                                                 captureTime: chunk.captureTime, readUptime: chunk.readUptime,
                                                 overruns: chunk.overruns, framesLost: chunk.framesLost,
                                                 anchoredTime: chunk.anchoredTime ?? .nan)
        producerBytes = end
        pushed.store(count + 1, ordering: .releasing)
        let held = heldFrames.add(chunk.frames, ordering: .relaxed).newValue
        if held > peakFrames.load(ordering: .relaxed) { peakFrames.store(held, ordering: .relaxed) }
        return true
    }

    /// Consumer: the oldest chunk held, valid until `release()`; nil when empty.
    func peek() -> CaptureChunk? {
        let count = taken.load(ordering: .relaxed)
        guard count < pushed.load(ordering: .acquiring) else { return nil }
        let header = headers[count % headerCapacity]
        return CaptureChunk(samples: storage + header.start, frames: header.frames, position: header.position,
                            captureTime: header.captureTime, readUptime: header.readUptime,
                            overruns: header.overruns, framesLost: header.framesLost,
                            anchoredTime: header.anchoredTime.isNaN ? nil : header.anchoredTime)
    }

    /// Consumer: done with the chunk `peek()` returned; its room goes back to the producer.
    func release() {
        let count = taken.load(ordering: .relaxed)
        let header = headers[count % headerCapacity]
        heldFrames.subtract(header.frames, ordering: .relaxed)
        releasedBytes.store(header.end, ordering: .releasing)
        taken.store(count + 1, ordering: .releasing)
    }

    var isEmpty: Bool { taken.load(ordering: .acquiring) >= pushed.load(ordering: .acquiring) }

    /// Chunks pushed and taken so far (any thread).
    var pushedCount: Int { pushed.load(ordering: .acquiring) }
    var takenCount: Int { taken.load(ordering: .acquiring) }
}

/// A thread of its own that takes chunks from a `ChunkRing` and hands them to `process`, in
/// order, and runs control blocks between two chunks. What the capture thread must not do
/// (write and sync files, encode, create and rename files) runs here: a stall of this thread
/// costs nothing until the ring is full.
final class ChunkWorker: @unchecked Sendable {
    // @unchecked: `process` is used by the worker thread only; commands pass through a lock.

    let ring: ChunkRing
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

    init(ring: ChunkRing, process: @escaping (CaptureChunk) -> Void) {
        self.ring = ring
        self.process = process
    }

    /// Starts the thread (once).
    func start(name: String) {
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
    func push(_ chunk: CaptureChunk, patience: UInt64) -> Bool {
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
    func finally(_ body: @escaping () -> Void) {
        last.withLock { $0 = body }
        wake.signal()
    }

    /// Runs `body` on the worker after every chunk pushed before, and returns its result.
    /// On a worker that has ended (or never started), runs it here.
    func perform<T>(_ body: @escaping () -> T) -> T {
        let result = NIOLockedValueBox<T?>(nil)
        let command = Command { result.withLock { $0 = body() } }
        let posted = commands.withLock { pending -> Bool in
            guard running.load(ordering: .acquiring), !stopping.load(ordering: .acquiring) else { return false }
            command.after = ring.pushedCount
            pending.append(command)
            return true
        }
        guard posted else { return body() }
        wake.signal()
        command.done.wait()
        return result.withLock { $0! }
    }

    /// Ends the thread after what it is doing (chunks still held are dropped). Any thread,
    /// the worker included.
    func stop() {
        stopping.store(true, ordering: .releasing)
        wake.signal()
    }

    private func run() {
        while true {
            let before = ring.takenCount
            while takeChunk() {}
            if let body = last.withLock({ body in defer { body = nil }; return body }) {
                // The capture thread's last word comes after its last chunk: all of them first.
                while takeChunk() {}
                body()
            }
            let pending = commands.withLock { pending in defer { pending = [] }; return pending }
            for command in pending {
                // Chunks pushed after the ring was drained above and before the command was
                // posted come first: `perform` promises every chunk pushed before it.
                while ring.takenCount < command.after, takeChunk() {}
                command.body()
                command.done.signal()
            }
            if stopping.load(ordering: .acquiring) {
                // Blocks posted meanwhile run here, where `perform` waits for them.
                let late = commands.withLock { pending in defer { pending = [] }; running.store(false, ordering: .releasing); return pending }
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
