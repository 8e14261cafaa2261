import Glibc
import MPEG4
import RecorderModel

/// One Hann window's power spectrum by FFmpeg's real FFT, summed over windows and turned into
/// dBFS: what the live spectrum (SpectrumNode) and a file's spectrogram (FileSpectrogram)
/// both compute, the same way (doc/protocol.md, Spectrum).
public final class PowerSpectrum {
    public static let size = Spectrum.windowSize
    public static let bins = size / 2 + 1

    private let fft: RealFFT
    private let hann: [Float]
    private var windowed: [Float]
    private var power: [Float]
    /// The summed power per bin, and how many windows it sums.
    public private(set) var sum: [Float]
    public private(set) var windows = 0
    /// A full-scale sine centred on a bin has |X| = size / 4 through a Hann window.
    private let reference = Float(size) / 4

    public init() throws(RealFFTError) {
        let size = Self.size
        fft = try RealFFT(length: size)
        hann = (0..<size).map { Float(0.5 - 0.5 * cos(2 * Double.pi * Double($0) / Double(size))) }
        windowed = Array(repeating: 0, count: size)
        power = Array(repeating: 0, count: Self.bins)
        sum = Array(repeating: 0, count: Self.bins)
    }

    /// Adds the window of the `size` samples of `ring` that end just before `next` (a ring
    /// of `size` samples: the oldest is at `next`).
    public func addWindow(ring: UnsafePointer<Float>, next: Int) {
        let size = Self.size
        hann.withUnsafeBufferPointer { hann in
            windowed.withUnsafeMutableBufferPointer { windowed in
                let tail = size - next
                for index in 0..<tail { windowed[index] = ring[next + index] * hann[index] }
                for index in 0..<next { windowed[tail + index] = ring[index] * hann[tail + index] }
            }
        }
        windowed.withUnsafeBufferPointer { input in
            power.withUnsafeMutableBufferPointer { fft.power(of: input.baseAddress!, into: $0.baseAddress!) }
        }
        for bin in 0..<Self.bins { sum[bin] += power[bin] }
        windows += 1
    }

    /// The mean power of the windows added since the last reset, per bin, in dBFS to 0.1 dB
    /// (at least `Spectrum.floor`); then starts afresh.
    public func takeDecibels() -> [Float] {
        let scale = 1 / (Float(Swift.max(1, windows)) * reference * reference)
        let dBFS = sum.map { total -> Float in
            let level = total > 0 ? 10 * log10(total * scale) : Spectrum.floor
            return (Swift.max(Spectrum.floor, level) * 10).rounded() / 10
        }
        reset()
        return dBFS
    }

    public func reset() {
        for bin in 0..<Self.bins { sum[bin] = 0 }
        windows = 0
    }
}
