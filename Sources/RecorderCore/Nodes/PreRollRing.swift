import ALSA
import AudioGraph
import FoundationEssentials
import NIOConcurrencyHelpers
import RecorderModel
import Synchronization

/// The most recent input, in the device's format, kept while listening: what a `start`
/// puts at the beginning of its file (pre-roll). Allocated once, at its full size.
final class PreRollRing: CaptureConsumer, @unchecked Sendable {
    // @unchecked: `storage`, `writeIndex` and `endPosition` are written on the capture thread
    // only, under `writing`, and read there freely; another thread reads them only under
    // `writing` (`levels`). `heldFrames` is atomic for status.

    let capacityFrames: Int
    let bytesPerFrame: Int
    private let storage: UnsafeMutableRawPointer
    /// Where the next frame goes (frames into `storage`).
    private var writeIndex = 0
    /// The engine position after the newest frame held.
    private var endPosition: Int64 = 0
    /// Frames held now (at most `capacityFrames`).
    let heldFrames = Atomic<Int>(0)
    /// Taken by the capture thread while it writes (8 times a second) and by `levels`.
    private let writing = NIOLock()
    let sampleFormat: SampleFormat
    let channels: Int
    let sampleRate: Int

    /// Memory the ring takes, in bytes.
    var bytes: Int { capacityFrames * bytesPerFrame }

    init(seconds: Double, configuration: PCMConfiguration) {
        capacityFrames = Swift.max(0, Int((seconds * Double(configuration.sampleRate)).rounded()))
        bytesPerFrame = configuration.bytesPerFrame
        sampleFormat = configuration.sampleFormat
        channels = configuration.channels
        sampleRate = configuration.sampleRate
        storage = .allocate(byteCount: Swift.max(1, capacityFrames * bytesPerFrame), alignment: 16)
        // Touch every page now: the ring's memory is resident from the start, as stated.
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: Swift.max(1, capacityFrames * bytesPerFrame))
    }

    deinit { storage.deallocate() }

    func receive(_ chunk: CaptureChunk) -> Bool {
        guard capacityFrames > 0 else { return true }
        writing.withLock { write(chunk) }
        return true
    }

    private func write(_ chunk: CaptureChunk) {
        if chunk.position != endPosition { heldFrames.store(0, ordering: .relaxed) }  // not contiguous (a new engine)
        var source = chunk.samples
        var frames = chunk.frames
        if frames > capacityFrames {
            source += (frames - capacityFrames) * bytesPerFrame
            frames = capacityFrames
        }
        let first = Swift.min(frames, capacityFrames - writeIndex)
        (storage + writeIndex * bytesPerFrame).copyMemory(from: source, byteCount: first * bytesPerFrame)
        if first < frames {
            storage.copyMemory(from: source + first * bytesPerFrame, byteCount: (frames - first) * bytesPerFrame)
        }
        writeIndex = (writeIndex + frames) % capacityFrames
        endPosition = chunk.position + Int64(chunk.frames)
        heldFrames.store(Swift.min(capacityFrames, heldFrames.load(ordering: .relaxed) + chunk.frames), ordering: .relaxed)
    }

    /// Any thread: the levels of the newest `seconds` held, measured now (a `status` while
    /// nobody meters the input); nil when nothing is held.
    func levels(ofNewest seconds: Double) -> Levels? {
        writing.withLock { () -> Levels? in
            let frames = Swift.min(heldFrames.load(ordering: .relaxed), Int(seconds * Double(sampleRate)))
            guard frames > 0 else { return nil }
            let meter = LevelMeter(channels: channels)
            read(from: endPosition - Int64(frames), upTo: endPosition) { samples, count, _ in
                meter.measure(samples, frames: count, format: sampleFormat)
            }
            return meter.takeLevels()
        }
    }

    func engineFailed(_ error: RecorderError) {}

    /// Nobody waits for the ring: read as seldom as arecord does (an eighth of a second).
    var wakeInterval: Double { 0.125 }

    /// The engine position of the oldest frame held.
    var oldestPosition: Int64 { endPosition - Int64(heldFrames.load(ordering: .relaxed)) }

    /// On the capture thread: hands the frames held from engine position `start` up to `end`
    /// (clipped to what is held) to `body`, oldest first, in at most two contiguous pieces.
    func read(from start: Int64, upTo end: Int64,
              _ body: (_ samples: UnsafeRawPointer, _ frames: Int, _ position: Int64) throws -> Void) rethrows {
        let first = Swift.max(start, oldestPosition)
        let last = Swift.min(end, endPosition)
        guard last > first else { return }
        var index = (writeIndex - Int(endPosition - first) + capacityFrames) % capacityFrames
        var position = first
        while position < last {
            let count = Swift.min(Int(last - position), capacityFrames - index)
            try body(storage + index * bytesPerFrame, count, position)
            index = (index + count) % capacityFrames
            position += Int64(count)
        }
    }

    /// On the capture thread: hands the newest `frames` (at most what is held) to `consumer`
    /// as chunks of at most `chunkFrames`, oldest first, timed by `captureTime` (the engine's
    /// estimate for a position). The next
    /// chunk the engine delivers follows the last of them exactly. Returns the frames handed
    /// over and the position of the first.
    func replay(frames wanted: Int, into consumer: any CaptureConsumer, chunkFrames: Int,
                captureTime: (Int64) -> Double?, clockOffset: Double = .nan) -> (frames: Int, position: Int64) {
        let held = heldFrames.load(ordering: .relaxed)
        let frames = Swift.max(0, Swift.min(wanted, held))
        let firstPosition = endPosition - Int64(frames)
        guard frames > 0 else { return (0, endPosition) }
        var index = (writeIndex - frames + capacityFrames) % capacityFrames
        var position = firstPosition
        var remaining = frames
        while remaining > 0 {
            let count = Swift.min(remaining, capacityFrames - index, chunkFrames)
            let time = captureTime(position)
            let chunk = CaptureChunk(samples: storage + index * bytesPerFrame, frames: count, position: position,
                                     captureTime: time ?? Date().timeIntervalSince1970,
                                     readUptime: CaptureEngine.uptime(), overruns: 0, framesLost: 0, anchoredTime: time,
                                     followedAtOnce: remaining > count, isPreRoll: true, clockOffset: clockOffset)
            guard consumer.receive(chunk) else { break }
            index = (index + count) % capacityFrames
            position += Int64(count)
            remaining -= count
        }
        return (frames - remaining, firstPosition)
    }
}
