import ALSA
import FoundationEssentials
import Glibc
import MPEG4
import RecorderModel

/// The input's spectrum, one column per `period`: the channels mixed to one, Hann windows of
/// `size` frames every `size / 2` frames, their power averaged over the period (so a burst
/// shorter than a period still shows). Attached only while someone wants the `spectrum` topic.
///
/// A worker node: the capture thread only copies each chunk into the node's ring; the
/// conversion, the FFTs and the publishing run on the node's own thread (`recd-spectrum`).
/// A worker that falls behind loses chunks, not the capture thread's time: the next column
/// starts afresh after the jump.
final class SpectrumNode: CaptureConsumer, @unchecked Sendable {
    // @unchecked: everything but `worker` is used by the worker thread only.

    static let size = Spectrum.windowSize
    static let period = Spectrum.columnPeriod

    private let configuration: PCMConfiguration
    private let publish: (Spectrum) -> Void
    private let fft: RealFFT
    private var worker: ChunkWorker!

    /// The newest `size` mixed samples (a ring: `historyIndex` is where the next goes).
    private var history: [Float]
    private var historyIndex = 0
    private var historyFilled = 0
    /// The window's samples in order, multiplied by the Hann window: what the FFT reads.
    private var windowed: [Float]
    private let hann: [Float]
    private var power: [Float]
    /// The period's summed power per bin, and how many windows it sums.
    private var sum: [Float]
    private var windows = 0
    private var sinceWindow = 0
    private var sincePeriod = 0
    private let periodFrames: Int
    /// The position the next chunk should have (a jump starts afresh).
    private var expectedPosition: Int64?
    /// A full-scale sine centred on a bin has |X| = size / 4 through a Hann window.
    private let reference: Float

    init(configuration: PCMConfiguration, publish: @escaping (Spectrum) -> Void) throws(RealFFTError) {
        self.configuration = configuration
        self.publish = publish
        let size = Self.size
        fft = try RealFFT(length: size)
        history = Array(repeating: 0, count: size)
        windowed = Array(repeating: 0, count: size)
        hann = (0..<size).map { Float(0.5 - 0.5 * cos(2 * Double.pi * Double($0) / Double(size))) }
        power = Array(repeating: 0, count: size / 2 + 1)
        sum = Array(repeating: 0, count: size / 2 + 1)
        periodFrames = Swift.max(1, Int((Double(configuration.sampleRate) * Self.period).rounded()))
        reference = Float(size) / 4
        let ring = ChunkRing(frames: configuration.sampleRate, bytesPerFrame: configuration.bytesPerFrame,
                             typicalChunkFrames: Swift.max(1, configuration.periodFrames))
        // Weak: a node let go while its worker is between two chunks is not touched again.
        worker = ChunkWorker(ring: ring) { [weak self] chunk in self?.take(chunk) }
        worker.start(name: "recd-spectrum")
    }

    func receive(_ chunk: CaptureChunk) -> Bool {
        _ = worker.push(chunk, patience: 0)
        return true
    }

    func engineFailed(_ error: RecorderError) { worker.stop() }

    /// A column every 50 ms: chunks at least as often.
    var wakeInterval: Double { Self.period }

    /// Ends the worker (after the node is detached).
    func stop() { worker.stop() }

    // MARK: The worker

    private func take(_ chunk: CaptureChunk) {
        if chunk.position != expectedPosition {
            historyFilled = 0
            sinceWindow = 0
            sincePeriod = 0
            windows = 0
            for bin in sum.indices { sum[bin] = 0 }
        }
        expectedPosition = chunk.position + Int64(chunk.frames)
        let channels = configuration.channels
        let start = chunk.anchoredTime ?? chunk.captureTime
        let rate = Double(configuration.sampleRate)
        for frame in 0..<chunk.frames {
            history[historyIndex] = mixed(chunk.samples, frame: frame, channels: channels)
            historyIndex = (historyIndex + 1) % Self.size
            historyFilled = Swift.min(Self.size, historyFilled + 1)
            sinceWindow += 1
            sincePeriod += 1
            if sinceWindow >= Self.size / 2, historyFilled == Self.size { addWindow() }
            if sincePeriod >= periodFrames {
                // A period shorter than the windows' stride (a low rate) still gets one.
                if windows == 0, historyFilled == Self.size { addWindow() }
                if windows > 0 { publishColumn(time: start + Double(frame + 1) / rate) }
                sincePeriod = 0
            }
        }
    }

    private func mixed(_ samples: UnsafeRawPointer, frame: Int, channels: Int) -> Float {
        var total: Float = 0
        let first = frame * channels
        switch configuration.sampleFormat {
        case .int16:
            let values = samples.assumingMemoryBound(to: Int16.self)
            for channel in 0..<channels { total += Float(values[first + channel]) / 32768 }
        case .int32:
            let values = samples.assumingMemoryBound(to: Int32.self)
            for channel in 0..<channels { total += Float(values[first + channel]) / 2_147_483_648 }
        case .float32:
            let values = samples.assumingMemoryBound(to: Float.self)
            for channel in 0..<channels { total += values[first + channel] }
        }
        return total / Float(channels)
    }

    private func addWindow() {
        let size = Self.size
        for index in 0..<size { windowed[index] = history[(historyIndex + index) % size] * hann[index] }
        windowed.withUnsafeBufferPointer { input in
            power.withUnsafeMutableBufferPointer { fft.power(of: input.baseAddress!, into: $0.baseAddress!) }
        }
        for bin in sum.indices { sum[bin] += power[bin] }
        windows += 1
        sinceWindow = 0
    }

    private func publishColumn(time: Double) {
        let scale = 1 / (Float(windows) * reference * reference)
        let dBFS = sum.map { total -> Float in
            let level = total > 0 ? 10 * log10(total * scale) : Spectrum.floor
            return (Swift.max(Spectrum.floor, level) * 10).rounded() / 10
        }
        for bin in sum.indices { sum[bin] = 0 }
        windows = 0
        publish(Spectrum(time: time, sampleRate: configuration.sampleRate, size: Self.size,
                         period: Double(periodFrames) / Double(configuration.sampleRate), dBFS: dBFS))
    }
}
