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

    /// Producer: copies `chunk` in. false: no room (the chunk is not kept).
    func push(_ chunk: CaptureChunk) -> Bool {
        let count = pushed.load(ordering: .relaxed)
        guard count - taken.load(ordering: .acquiring) < headerCapacity else { return false }
        let size = chunk.frames * bytesPerFrame
        guard size <= capacityBytes else { return false }
        var offset = producerBytes % capacityBytes
        var skipped = 0
        if offset + size > capacityBytes {
            skipped = capacityBytes - offset
            offset = 0
        }
        let end = producerBytes + skipped + size
        guard end - releasedBytes.load(ordering: .acquiring) <= capacityBytes else { return false }
        (storage + offset).copyMemory(from: chunk.samples, byteCount: size)
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
        // @unchecked: `body` runs once, on the worker thread.
        let body: () -> Void
        let done = DispatchSemaphore(value: 0)
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
    func push(_ chunk: CaptureChunk, patience: UInt64) -> Bool {
        if ring.push(chunk) {
            wake.signal()
            return true
        }
        guard patience > 0 else { return false }
        let deadline = CaptureEngine.uptime() + patience
        producerWaiting.store(true, ordering: .releasing)
        defer { producerWaiting.store(false, ordering: .releasing) }
        while true {
            wake.signal()
            if ring.push(chunk) {
                wake.signal()
                return true
            }
            let now = CaptureEngine.uptime()
            guard now < deadline, !stopping.load(ordering: .acquiring) else { return false }
            _ = room.wait(timeout: .now() + .nanoseconds(Int(Swift.min(deadline - now, 10_000_000))))
        }
    }

    /// The producer waits for room (`push`): the worker signals `room` after each chunk.
    private let producerWaiting = Atomic<Bool>(false)
    private let room = DispatchSemaphore(value: 0)

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
            while let chunk = ring.peek() {
                if !stopping.load(ordering: .acquiring) { process?(chunk) }
                ring.release()
                if producerWaiting.load(ordering: .acquiring) { room.signal() }
            }
            if ring.isEmpty, let body = last.withLock({ body in defer { body = nil }; return body }) { body() }
            let pending = commands.withLock { pending in defer { pending = [] }; return pending }
            for command in pending {
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
            if pending.isEmpty { wake.wait() }
        }
    }
}
