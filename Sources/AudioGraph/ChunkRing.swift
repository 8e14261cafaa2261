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
public final class ChunkRing: @unchecked Sendable {
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
        var isPreRoll: Bool
        var clockOffset: Double
    }

    public let capacityBytes: Int
    public let bytesPerFrame: Int
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
    public var framesHeld: Int { heldFrames.load(ordering: .relaxed) }
    public var mostFramesHeld: Int { peakFrames.load(ordering: .relaxed) }

    /// Room for `frames` device frames in chunks of `typicalChunkFrames` (a chunk larger than
    /// the whole ring is refused).
    public init(frames: Int, bytesPerFrame: Int, typicalChunkFrames: Int) {
        self.bytesPerFrame = bytesPerFrame
        capacityBytes = Swift.max(1, frames) * bytesPerFrame
        headerCapacity = Swift.max(64, 2 * frames / Swift.max(1, typicalChunkFrames) + 16)
        storage = .allocate(byteCount: capacityBytes, alignment: 16)
        // Every page now, off the capture thread: its first pass through the ring must not
        // fault them in one by one.
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: capacityBytes)
        headers = .allocate(capacity: headerCapacity)
        headers.initialize(repeating: Header(start: 0, end: 0, frames: 0, position: 0, captureTime: 0, readUptime: 0,
                                             overruns: 0, framesLost: 0, anchoredTime: .nan, isPreRoll: false,
                                             clockOffset: .nan), count: headerCapacity)
    }

    deinit {
        storage.deallocate()
        headers.deallocate()
    }

    /// Memory the ring takes, in bytes.
    public var bytes: Int { capacityBytes + headerCapacity * MemoryLayout<Header>.stride }

    /// Producer: where a chunk of up to `frames` frames goes next, if the ring has room for
    /// that many now (nil: it has not). The capture engine reads the device straight into it;
    /// `push` of a chunk read there keeps it where it is. A read that fails leaves the ring as
    /// it was (at most moved back to its start, empty).
    public func reservation(frames: Int) -> UnsafeMutableRawPointer? {
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
                                                 anchoredTime: chunk.anchoredTime ?? .nan, isPreRoll: chunk.isPreRoll,
                                                 clockOffset: chunk.clockOffset)
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
                            anchoredTime: header.anchoredTime.isNaN ? nil : header.anchoredTime,
                            isPreRoll: header.isPreRoll, clockOffset: header.clockOffset)
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
