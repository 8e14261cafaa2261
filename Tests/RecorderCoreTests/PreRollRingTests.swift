@testable import ALSA
@testable import AudioGraph
@testable import RecorderCore
import RecorderModel
import Testing

/// The pre-roll ring against the plainest reference: the last N frames of everything it was
/// given, kept in an array. Whatever the chunk sizes and however often the ring wrapped, a
/// replay hands over exactly those frames, oldest first, in chunks no longer than asked, with
/// the positions the engine gave them.
@Suite("pre-roll ring")
struct PreRollRingTests {
    /// Collects what a replay hands over.
    final class Collector: CaptureConsumer {
        var samples: [Int16] = []
        var chunks: [(position: Int64, frames: Int, time: Double)] = []
        var acceptChunks = Int.max

        func receive(_ chunk: CaptureChunk) -> Bool {
            guard acceptChunks > 0 else { return false }
            acceptChunks -= 1
            let typed = chunk.samples.assumingMemoryBound(to: Int16.self)
            samples += UnsafeBufferPointer(start: typed, count: chunk.frames * 2)
            chunks.append((chunk.position, chunk.frames, chunk.captureTime))
            return true
        }

        func engineFailed(_ error: RecorderError) {}
    }

    static let format = PCMConfiguration(sampleFormat: .int16, sampleRate: 1000, channels: 2, periodFrames: 10, bufferFrames: 100)

    /// Feeds `total` frames of a counter (frame n: n, -n) in chunks of the given sizes, in turn.
    static func feed(_ ring: PreRollRing, total: Int, chunkSizes: [Int], from start: Int64 = 0) -> [Int16] {
        var all: [Int16] = []
        var position = start
        var index = 0
        while position < start + Int64(total) {
            let frames = min(chunkSizes[index % chunkSizes.count], Int(start + Int64(total) - position))
            index += 1
            var chunk: [Int16] = []
            for frame in 0..<frames {
                let value = Int16(truncatingIfNeeded: Int(position) + frame)
                chunk += [value, value &* -1]
            }
            all += chunk
            chunk.withUnsafeBytes { bytes in
                _ = ring.receive(CaptureChunk(samples: bytes.baseAddress!, frames: frames, position: position, captureTime: 0,
                                              readUptime: 0, overruns: 0, framesLost: 0))
            }
            position += Int64(frames)
        }
        return all
    }

    @Test(arguments: [[7], [10, 3, 25], [1], [250], [99, 101]])
    func aReplayIsTheLastFramesGivenOldestFirst(chunkSizes: [Int]) {
        let ring = PreRollRing(seconds: 0.2, configuration: Self.format)  // 200 frames
        #expect(ring.capacityFrames == 200 && ring.bytes == 800)
        let all = Self.feed(ring, total: 1234, chunkSizes: chunkSizes)
        #expect(ring.heldFrames.load(ordering: .relaxed) == 200)
        for wanted in [0, 1, 64, 199, 200, 500] {
            let collector = Collector()
            let (frames, first) = ring.replay(frames: wanted, into: collector, chunkFrames: 64) { Double($0) / 1000 }
            let expected = min(wanted, 200)
            #expect(frames == expected)
            #expect(first == Int64(1234 - expected))
            #expect(collector.samples == Array(all.suffix(expected * 2)), "\(chunkSizes), \(wanted) frames")
            #expect(collector.chunks.allSatisfy { $0.frames <= 64 })
            // Contiguous positions, each chunk timed by its own position.
            var position = first
            for chunk in collector.chunks {
                #expect(chunk.position == position && chunk.time == Double(position) / 1000)
                position += Int64(chunk.frames)
            }
            #expect(position == 1234, "the next live chunk follows the last replayed frame")
        }
    }

    @Test func lessThanItHoldsBeforeItFillsAndNothingAcrossAGap() {
        let ring = PreRollRing(seconds: 0.2, configuration: Self.format)
        let all = Self.feed(ring, total: 50, chunkSizes: [20])
        let collector = Collector()
        let (frames, first) = ring.replay(frames: 200, into: collector, chunkFrames: 64) { _ in nil }
        #expect(frames == 50 && first == 0 && collector.samples == all)

        // A chunk that does not follow the last (a new device opening): what was held is not
        // contiguous with it, and is dropped.
        let after = Self.feed(ring, total: 30, chunkSizes: [30], from: 5000)
        #expect(ring.heldFrames.load(ordering: .relaxed) == 30)
        let fresh = Collector()
        let (again, start) = ring.replay(frames: 200, into: fresh, chunkFrames: 64) { _ in nil }
        #expect(again == 30 && start == 5000 && fresh.samples == after)
    }

    @Test func aConsumerThatEndsMidwayGetsNoMore() {
        let ring = PreRollRing(seconds: 0.2, configuration: Self.format)
        _ = Self.feed(ring, total: 400, chunkSizes: [33])
        let collector = Collector()
        collector.acceptChunks = 2
        let (frames, _) = ring.replay(frames: 200, into: collector, chunkFrames: 50) { _ in nil }
        #expect(frames == 100 && collector.chunks.count == 2)
    }
}
