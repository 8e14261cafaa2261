import Dispatch
import Glibc
import NIOConcurrencyHelpers
@testable import AudioGraph
@testable import RecorderCore
import Testing

/// The write buffer's ring (`ChunkRing`): chunks copied in or read straight into its
/// reservation come out whole, in order, with their positions; it refuses what it has no room
/// for; an emptied ring starts again at its beginning. The last test runs a producer and a
/// consumer thread against each other (under ThreadSanitizer in `make test`).
@Suite("write buffer ring")
struct ChunkRingTests {
    static let bytesPerFrame = 4

    /// `frames` frames whose 32-bit words count up from `first`.
    static func frames(_ count: Int, from first: Int) -> [UInt32] { (0..<count).map { UInt32(truncatingIfNeeded: first + $0) } }

    static func chunk(_ samples: UnsafeRawPointer, frames: Int, position: Int) -> CaptureChunk {
        CaptureChunk(samples: samples, frames: frames, position: Int64(position), captureTime: 0, readUptime: 0,
                     overruns: 0, framesLost: 0)
    }

    /// What the oldest chunk holds, as words; nil when empty. Releases it.
    static func take(_ ring: ChunkRing) -> (position: Int64, words: [UInt32], at: UnsafeRawPointer)? {
        guard let chunk = ring.peek() else { return nil }
        let words = Array(UnsafeBufferPointer(start: chunk.samples.assumingMemoryBound(to: UInt32.self), count: chunk.frames))
        ring.release()
        return (chunk.position, words, chunk.samples)
    }

    @Test func copiedChunksComeOutWholeAndInOrderAcrossTheEnd() {
        let ring = ChunkRing(frames: 1000, bytesPerFrame: Self.bytesPerFrame, typicalChunkFrames: 100)
        var position = 0
        var expected: [[UInt32]] = []
        var refusals = 0
        // 300-frame chunks pushed until the ring refuses one (a chunk that does not fit before
        // the end starts at 0), then one to three taken: it holds 1 to 3 and wraps often.
        for round in 0..<40 {
            while true {
                let words = Self.frames(300, from: position)
                guard words.withUnsafeBytes({ ring.push(Self.chunk($0.baseAddress!, frames: 300, position: position)) }) else {
                    // Refused only without room: a held chunk and the bytes skipped at the end
                    // leave less than 300 frames (at most 299 are skipped).
                    #expect(ring.heldFrames.load(ordering: .relaxed) > 1000 - 300 - 300, "round \(round)")
                    refusals += 1
                    break
                }
                expected.append(words)
                position += 300
            }
            for _ in 0...(round % 3) {
                guard let taken = Self.take(ring) else { break }
                #expect(taken.words == expected.removeFirst(), "round \(round)")
                #expect(taken.position == Int64(position - 300 * (expected.count + 1)))
            }
        }
        while let rest = Self.take(ring) { #expect(rest.words == expected.removeFirst()) }
        #expect(expected.isEmpty)
        #expect(refusals == 40)
        #expect(position > 40 * 300, "chunks went through the end many times")
        #expect(ring.heldFrames.load(ordering: .relaxed) == 0)
    }

    @Test func aChunkReadIntoTheReservationIsKeptWhereItIsNotCopied() throws {
        let ring = ChunkRing(frames: 1000, bytesPerFrame: Self.bytesPerFrame, typicalChunkFrames: 100)
        for round in 0..<30 {
            let place = try #require(ring.reservation(frames: 200))
            // The device delivers fewer frames than the reservation's room.
            let words = Self.frames(150, from: round * 150)
            words.withUnsafeBytes { place.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            #expect(ring.push(Self.chunk(place, frames: 150, position: round * 150)))
            let taken = try #require(Self.take(ring))
            #expect(taken.at == UnsafeRawPointer(place), "the chunk was moved")
            #expect(taken.words == words)
            #expect(taken.position == Int64(round * 150))
        }
    }

    @Test func aReservationThatDoesNotFitBeforeTheEndIsAtTheStartAndAShortReadThereCountsTheSkip() throws {
        let ring = ChunkRing(frames: 1000, bytesPerFrame: Self.bytesPerFrame, typicalChunkFrames: 100)
        let start = try #require(ring.reservation(frames: 100))
        let words = Self.frames(700, from: 0)
        // One chunk of 700 held: frames 700...999 are free, 0...699 are not.
        #expect(words.withUnsafeBytes { ring.push(Self.chunk($0.baseAddress!, frames: 700, position: 0)) })
        // 200 fit before the end; 400 would not, and nothing fits at the start yet.
        #expect(ring.reservation(frames: 200) == start + 700 * Self.bytesPerFrame)
        #expect(ring.reservation(frames: 400) == nil)
        _ = Self.take(ring)
        // Taken: empty, so the next chunk goes to the start (rewound), whatever its size.
        #expect(ring.reservation(frames: 400) == start)
        // Hold 600 at 0...599, then reserve 500: not before the end (600 + 500 > 1000) and not
        // at the start yet.
        #expect(words.withUnsafeBytes { ring.push(Self.chunk($0.baseAddress!, frames: 600, position: 700)) })
        #expect(ring.reservation(frames: 500) == nil)
        // 300 fit after them; a device read of 250 there, then the rest comes back in order.
        let place = try #require(ring.reservation(frames: 300))
        #expect(place == start + 600 * Self.bytesPerFrame)
        let tail = Self.frames(250, from: 1300)
        tail.withUnsafeBytes { place.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        #expect(ring.push(Self.chunk(place, frames: 250, position: 1300)))
        // 850 held, 150 free at the end: a reservation of 200 wraps, and there is no room there.
        #expect(ring.reservation(frames: 200) == nil)
        _ = Self.take(ring)
        // 0...599 free again: a reservation of 200 (not before the end: 850 + 200 > 1000) is at
        // the start; a short read of 100 there counts the 150 skipped until it is taken.
        let wrapped = try #require(ring.reservation(frames: 200))
        #expect(wrapped == start)
        let head = Self.frames(100, from: 1550)
        head.withUnsafeBytes { wrapped.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        #expect(ring.push(Self.chunk(wrapped, frames: 100, position: 1550)))
        // Held: 250 at 600...849, 150 skipped, 100 at 0...99: 500 of 1000 counted as used.
        // 500 fit at 100...599; 501 do not (the skip counts until the 250 are taken).
        #expect(ring.reservation(frames: 500) == start + 100 * Self.bytesPerFrame)
        #expect(ring.reservation(frames: 501) == nil)
        let second = try #require(Self.take(ring))
        #expect(second.words == tail && second.position == 1300)
        let third = try #require(Self.take(ring))
        #expect(third.at == UnsafeRawPointer(start) && third.words == head && third.position == 1550)
        #expect(Self.take(ring) == nil)
    }

    @Test func anEmptiedRingStartsAgainAtItsBeginning() throws {
        let ring = ChunkRing(frames: 1000, bytesPerFrame: Self.bytesPerFrame, typicalChunkFrames: 100)
        let start = try #require(ring.reservation(frames: 100))
        let words = Self.frames(100, from: 0)
        for position in stride(from: 0, to: 300, by: 100) {
            #expect(words.withUnsafeBytes { ring.push(Self.chunk($0.baseAddress!, frames: 100, position: position)) })
        }
        // Three held: the next place is after them.
        #expect(ring.reservation(frames: 100) == start + 300 * Self.bytesPerFrame)
        while Self.take(ring) != nil {}
        // Nothing held: back to the first bytes, still in the caches.
        #expect(ring.reservation(frames: 100) == start)
        #expect(words.withUnsafeBytes { ring.push(Self.chunk($0.baseAddress!, frames: 100, position: 300)) })
        let taken = try #require(Self.take(ring))
        #expect(taken.at == UnsafeRawPointer(start))
        #expect(taken.position == 300)
    }

    @Test func aFullRingRefusesAndHasRoomAgainOnceTheWorkerTakes() throws {
        let ring = ChunkRing(frames: 1000, bytesPerFrame: Self.bytesPerFrame, typicalChunkFrames: 100)
        let words = Self.frames(250, from: 0)
        for position in stride(from: 0, to: 1000, by: 250) {
            #expect(words.withUnsafeBytes { ring.push(Self.chunk($0.baseAddress!, frames: 250, position: position)) })
        }
        #expect(!words.withUnsafeBytes { ring.push(Self.chunk($0.baseAddress!, frames: 250, position: 1000)) })
        #expect(ring.reservation(frames: 1) == nil)
        #expect(ring.heldFrames.load(ordering: .relaxed) == 1000)
        #expect(ring.peakFrames.load(ordering: .relaxed) == 1000)
        // More than the whole ring is never taken.
        let large = Self.frames(1001, from: 0)
        _ = Self.take(ring)
        #expect(!large.withUnsafeBytes { ring.push(Self.chunk($0.baseAddress!, frames: 1001, position: 0)) })
        #expect(words.withUnsafeBytes { ring.push(Self.chunk($0.baseAddress!, frames: 250, position: 1000)) })
        #expect(ring.reservation(frames: 1) == nil)
    }

    @Test func aProducerAndAConsumerThreadLoseAndReorderNothing() {
        let ring = ChunkRing(frames: 4096, bytesPerFrame: Self.bytesPerFrame, typicalChunkFrames: 256)
        let total = 2_000_000
        let done = DispatchSemaphore(value: 0)
        let problems = NIOLockedValueBox<[String]>([])
        let received = NIOLockedValueBox(0)
        // Consumer: every frame's word is its position, whatever the chunking.
        DedicatedThread.spawn(name: "ring-test") {
            var next = 0
            while next < total {
                guard let chunk = ring.peek() else { sched_yield(); continue }
                let words = UnsafeBufferPointer(start: chunk.samples.assumingMemoryBound(to: UInt32.self), count: chunk.frames)
                if chunk.position != Int64(next) || words.enumerated().contains(where: { $0.element != UInt32(next + $0.offset) }) {
                    problems.withLock { $0.append("chunk at \(chunk.position), expected \(next)") }
                }
                next += chunk.frames
                ring.release()
            }
            received.withLockedValue { $0 = next }
            done.signal()
        }
        // Producer: chunks of 1 to 700 frames, read into the reservation or copied in.
        var position = 0
        var scratch = [UInt32](repeating: 0, count: 700)
        var generator = SystemRandomNumberGenerator()
        while position < total {
            let frames = Swift.min(total - position, Int.random(in: 1...700, using: &generator))
            if Bool.random(using: &generator), let place = ring.reservation(frames: 700) {
                let words = place.assumingMemoryBound(to: UInt32.self)
                for index in 0..<frames { words[index] = UInt32(position + index) }
                if ring.push(Self.chunk(place, frames: frames, position: position)) { position += frames }
            } else if ring.heldFrames.load(ordering: .relaxed) > 4096 - 700 {
                sched_yield()
            } else {
                for index in 0..<frames { scratch[index] = UInt32(position + index) }
                if scratch.withUnsafeBytes({ ring.push(Self.chunk($0.baseAddress!, frames: frames, position: position)) }) {
                    position += frames
                }
            }
        }
        done.wait()
        #expect(received.withLockedValue { $0 } == total)
        let found = problems.withLockedValue { $0 }
        #expect(found.isEmpty, "\(found.prefix(5))")
    }
}

/// The writer thread's side of the hand-over (`ChunkWorker`): whatever the batching of a burst,
/// no chunk is left in the ring while the worker sleeps, however the burst ends; a control
/// block runs after every chunk pushed before it; a capture thread waiting for room gets it.
@Suite("write buffer worker")
struct ChunkWorkerTests {
    /// A worker over a ring of `frames` 4-byte frames that records the positions it took.
    static func worker(frames: Int) -> (ChunkWorker, NIOLockedValueBox<[Int64]>) {
        let taken = NIOLockedValueBox<[Int64]>([])
        let worker = ChunkWorker(ring: ChunkRing(frames: frames, bytesPerFrame: 4, typicalChunkFrames: 480)) { chunk in
            taken.withLockedValue { $0.append(chunk.position) }
        }
        worker.start(name: "ring-test")
        return (worker, taken)
    }

    /// 480 frames of the same bytes, as the device's read would leave them.
    nonisolated(unsafe) static let samples: UnsafeMutableRawPointer = {
        let samples = UnsafeMutableRawPointer.allocate(byteCount: 480 * 4, alignment: 16)
        samples.initializeMemory(as: UInt8.self, repeating: 7, count: 480 * 4)
        return samples
    }()

    static func chunk(position: Int, followed: Bool) -> CaptureChunk {
        CaptureChunk(samples: samples, frames: 480, position: Int64(position), captureTime: 0,
                     readUptime: 0, overruns: 0, framesLost: 0, followedAtOnce: followed)
    }

    static func waitUntil(_ condition: () -> Bool) -> Bool {
        let deadline = DispatchTime.now().uptimeNanoseconds + 30_000_000_000
        while !condition() {
            if DispatchTime.now().uptimeNanoseconds > deadline { return false }
            usleep(1000)
        }
        return true
    }

    @Test func theEndOfABurstWakesTheWorkerForEveryChunkInIt() {
        // 10 s at 48 kHz: 256 KiB is 65 536 frames, so a burst of 20 chunks of 480 stays below it.
        let (worker, taken) = Self.worker(frames: 480_000)
        defer { worker.stop() }
        for round in 0..<200 {
            for index in 0..<20 {
                let position = (round * 21 + index) * 480
                #expect(worker.push(Self.chunk(position: position, followed: true), patience: 0))
            }
            // The burst's last chunk (a paced device's read): the worker takes all 21.
            #expect(worker.push(Self.chunk(position: (round * 21 + 20) * 480, followed: false), patience: 0))
            #expect(Self.waitUntil { taken.withLockedValue { $0.count } == (round + 1) * 21 }, "round \(round)")
        }
        #expect(taken.withLockedValue { $0 } == (0..<(200 * 21)).map { Int64($0 * 480) })
    }

    @Test func aBurstThatEndsWithoutAWordIsTakenAllTheSame() {
        // A device that says more is ready and then blocks in its read (ALSA's file plugin on
        // a pipe): every chunk was deferred, none ended the burst. They are taken all the same.
        let (worker, taken) = Self.worker(frames: 480_000)
        defer { worker.stop() }
        for round in 0..<50 {
            for index in 0..<5 {
                _ = worker.push(Self.chunk(position: (round * 5 + index) * 480, followed: true), patience: 0)
            }
            #expect(Self.waitUntil { taken.withLockedValue { $0.count } == (round + 1) * 5 }, "round \(round)")
        }
    }

    @Test func aControlBlockRunsAfterEveryChunkPushedBeforeItEvenInABurst() {
        let (worker, taken) = Self.worker(frames: 480_000)
        defer { worker.stop() }
        for round in 0..<100 {
            for index in 0..<5 {
                _ = worker.push(Self.chunk(position: (round * 5 + index) * 480, followed: true), patience: 0)
            }
            // As a pause or a stop: after every chunk before it, though none woke the worker.
            let seen = worker.perform { taken.withLockedValue { $0.count } }
            #expect(seen == (round + 1) * 5, "round \(round)")
        }
    }

    @Test func aProducerThatOutrunsTheWorkerWaitsForRoomAndLosesNothing() {
        // A ring of 4 800 frames, chunks of 480 pushed flat out, as from a file device: the
        // capture thread waits for room (up to its patience) instead of losing chunks.
        let (worker, taken) = Self.worker(frames: 4800)
        defer { worker.stop() }
        var refused = 0
        // The last one ends the burst, as a read that emptied the device does.
        for index in 0..<20_000 where !worker.push(Self.chunk(position: index * 480, followed: index < 19_999),
                                                    patience: 5_000_000_000) {
            refused += 1
        }
        #expect(refused == 0)
        #expect(Self.waitUntil { taken.withLockedValue { $0.count } == 20_000 })
        #expect(taken.withLockedValue { $0 } == (0..<20_000).map { Int64($0 * 480) })
    }
}
