import ALSA
import AudioGraph
import FoundationEssentials
import Glibc
import MPEG4
import RecorderModel
import SignalProcessing

/// The input's spectrum, one column per `period`: the channels mixed to one, Hann windows of
/// `size` frames every `size / 2` frames, their power averaged over the period (so a burst
/// shorter than a period still shows). Attached only while someone wants the `spectrum` topic.
///
/// A worker node: the capture thread only copies each chunk into the node's ring; the
/// conversion, the FFTs and the publishing run on the node's own thread (`recd-spectrum`).
/// A worker that falls behind loses chunks, not the capture thread's time: the next column
/// starts afresh after the jump.
///
/// Columns are handed on `columnsPerPublication` at a time (two: every 0.1 s), and the capture
/// thread wakes for the node as seldom: each hand-over costs the same thread hops after it
/// (the hub, the event loop, a client's write) whether it carries one column or two, and a
/// viewer of the web page paid more for those hops than for the FFTs.
final class SpectrumNode: CaptureConsumer, @unchecked Sendable {
    // @unchecked: everything but `worker` is used by the worker thread only.

    static let size = Spectrum.windowSize
    static let period = Spectrum.columnPeriod

    private let configuration: PCMConfiguration
    private let publish: ([Spectrum]) -> Void
    private let columnsPerPublication: Int
    private var pending: [Spectrum] = []
    private let spectrum: PowerSpectrum
    private var worker: ChunkWorker!

    /// The newest `size` mixed samples (a ring: `historyIndex` is where the next goes), and
    /// a chunk's samples mixed to one channel. Pointers, not arrays: the per-frame loop reads
    /// and writes them without an exclusivity check each time.
    private let history: UnsafeMutablePointer<Float>
    private var historyIndex = 0
    private var historyFilled = 0
    private var mono: UnsafeMutablePointer<Float>
    private var monoCapacity: Int
    private var sinceWindow = 0
    private var sincePeriod = 0
    private let periodFrames: Int
    /// The position the next chunk should have (a jump starts afresh).
    private var expectedPosition: Int64?

    init(configuration: PCMConfiguration, columnsPerPublication: Int = 2,
         publish: @escaping ([Spectrum]) -> Void) throws(RealFFTError) {
        self.configuration = configuration
        self.publish = publish
        self.columnsPerPublication = Swift.max(1, columnsPerPublication)
        pending.reserveCapacity(self.columnsPerPublication)
        spectrum = try PowerSpectrum()
        history = .allocate(capacity: Self.size)
        history.initialize(repeating: 0, count: Self.size)
        monoCapacity = Swift.max(1024, configuration.periodFrames * 4)
        mono = .allocate(capacity: monoCapacity)
        periodFrames = Swift.max(1, Int((Double(configuration.sampleRate) * Self.period).rounded()))
        let ring = ChunkRing(frames: configuration.sampleRate, bytesPerFrame: configuration.bytesPerFrame,
                             typicalChunkFrames: Swift.max(1, configuration.periodFrames))
        // Weak: a node let go while its worker is between two chunks is not touched again.
        worker = ChunkWorker(ring: ring) { [weak self] chunk in self?.take(chunk) }
        worker.start(name: "recd-spectrum")
    }

    deinit {
        history.deallocate()
        mono.deallocate()
    }

    func receive(_ chunk: CaptureChunk) -> Bool {
        _ = worker.push(chunk, patience: 0)
        return true
    }

    func engineFailed(_ error: RecorderError) { worker.stop() }

    /// A hand-over every `columnsPerPublication` columns: chunks at least as often.
    var wakeInterval: Double { Self.period * Double(columnsPerPublication) }

    /// Ends the worker (after the node is detached).
    func stop() { worker.stop() }

    // MARK: The worker

    private func take(_ chunk: CaptureChunk) {
        if chunk.position != expectedPosition {
            // What was measured before the jump goes now, on its own.
            if !pending.isEmpty { handOver() }
            historyFilled = 0
            sinceWindow = 0
            sincePeriod = 0
            spectrum.reset()
        }
        expectedPosition = chunk.position + Int64(chunk.frames)
        mix(chunk)
        let size = Self.size, start = chunk.anchoredTime ?? chunk.captureTime, rate = Double(configuration.sampleRate)
        for frame in 0..<chunk.frames {
            history[historyIndex] = mono[frame]
            historyIndex += 1
            if historyIndex == size { historyIndex = 0 }
            if historyFilled < size { historyFilled += 1 }
            sinceWindow += 1
            sincePeriod += 1
            if sinceWindow >= size / 2, historyFilled == size { addWindow() }
            if sincePeriod >= periodFrames {
                // A period shorter than the windows' stride (a low rate) still gets one.
                if spectrum.windows == 0, historyFilled == size { addWindow() }
                if spectrum.windows > 0 { publishColumn(time: start + Double(frame + 1) / rate) }
                sincePeriod = 0
            }
        }
    }

    /// The chunk's frames mixed to one channel (their mean) into `mono`.
    private func mix(_ chunk: CaptureChunk) {
        if chunk.frames > monoCapacity {
            mono.deallocate()
            monoCapacity = chunk.frames
            mono = .allocate(capacity: monoCapacity)
        }
        let channels = configuration.channels, frames = chunk.frames, mono = self.mono
        func mix<T>(_ type: T.Type, _ value: (T) -> Float) {
            let samples = chunk.samples.assumingMemoryBound(to: T.self)
            let scale = 1 / Float(channels)
            for frame in 0..<frames {
                var total: Float = 0
                for channel in 0..<channels { total += value(samples[frame * channels + channel]) }
                mono[frame] = total * scale
            }
        }
        switch configuration.sampleFormat {
        case .int16: mix(Int16.self) { Float($0) / 32768 }
        case .int32: mix(Int32.self) { Float($0) / 2_147_483_648 }
        case .float32: mix(Float.self) { $0 }
        }
    }

    private func addWindow() {
        spectrum.addWindow(ring: history, next: historyIndex)
        sinceWindow = 0
    }

    private func publishColumn(time: Double) {
        pending.append(Spectrum(time: time, sampleRate: configuration.sampleRate, size: Self.size,
                                period: Double(periodFrames) / Double(configuration.sampleRate), dBFS: spectrum.takeDecibels()))
        if pending.count >= columnsPerPublication { handOver() }
    }

    private func handOver() {
        publish(pending)
        pending.removeAll(keepingCapacity: true)
    }
}
