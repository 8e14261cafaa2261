import FoundationEssentials
import Glibc
import MPEG4
import RecorderModel
import Sndfile

/// A recorded file's spectrogram, for the web page: `columns` columns over the whole file,
/// each the mean power of up to four Hann windows spread over its stretch of time (every
/// window, for a file short enough), computed as the live spectrum is (PowerSpectrum: the
/// channels mixed to one, 1024-frame windows, dBFS against a full-scale sine on a bin).
/// Levels are kept as bytes: `floor + level × step` dBFS, 0 for the floor and below.
public struct FileSpectrogram: Sendable, Equatable, Codable {
    public var sampleRate: Int
    public var frames: Int64
    /// The FFT's length; each column has `size / 2 + 1` bins.
    public var size: Int
    public var columns: Int
    public var bins: Int
    public var floor: Float
    public var step: Float
    /// Column after column, bin 0 (0 Hz) first: `columns × bins` bytes, base64 on the wire.
    public var levels: Data
    /// The loudest sample of any channel, dBFS (-160 for digital silence).
    public var peak: Float

    public static let floor: Float = -120
    public static let step: Float = 0.5
    public static let windowsPerColumn = 4

    /// The spectrogram of the file at `path` (any format recd writes)
    /// in at most `columns` columns (fewer for a file shorter than `columns` half-windows).
    public static func compute(path: String, columns requested: Int) throws(RecorderError) -> FileSpectrogram {
        let source = try FrameSource(path: path)
        let total = source.frames
        let size = PowerSpectrum.size
        let columns = Swift.max(1, Swift.min(requested, Int(total / Int64(size / 2))))
        let span = Double(total) / Double(columns)
        // The windows: up to four a column, evenly spread; each ends at a frame of the file
        // (never before the first 1024). Ascending, as the file is read.
        let perColumn = Swift.max(1, Swift.min(windowsPerColumn, Int(span / Double(size / 2))))
        var ends: [(end: Int64, column: Int)] = []
        for column in 0..<columns {
            for window in 0..<perColumn {
                let centre = (Double(column) + (Double(window) + 0.5) / Double(perColumn)) * span
                let end = Swift.min(total, Swift.max(Int64(size), Int64(centre) + Int64(size / 2)))
                ends.append((end, column))
            }
        }
        let spectrum: PowerSpectrum
        do { spectrum = try PowerSpectrum() } catch {
            throw RecorderError(.unknown, "cannot compute a spectrum: \(error)")
        }
        var levels = Data(repeating: 0, count: columns * PowerSpectrum.bins)
        let ring = UnsafeMutablePointer<Float>.allocate(capacity: size)
        ring.initialize(repeating: 0, count: size)
        defer { ring.deallocate() }
        var next = 0, position: Int64 = 0, pending = 0, column = 0
        func finishColumn() {
            let dBFS = spectrum.takeDecibels()
            for (bin, level) in dBFS.enumerated() {
                let step = ((level - floor) / step).rounded()
                levels[column * PowerSpectrum.bins + bin] = UInt8(Swift.max(0, Swift.min(255, step)))
            }
        }
        let loudest = try source.forEachMonoSample { sample in
            ring[next] = sample
            next = next + 1 == size ? 0 : next + 1
            position += 1
            while pending < ends.count, ends[pending].end == position {
                if ends[pending].column != column {
                    finishColumn()
                    column = ends[pending].column
                }
                spectrum.addWindow(ring: ring, next: next)
                pending += 1
            }
            return pending < ends.count
        }
        if spectrum.windows > 0 { finishColumn() }
        return FileSpectrogram(sampleRate: source.sampleRate, frames: total, size: size, columns: columns,
                               bins: PowerSpectrum.bins, floor: floor, step: step, levels: levels,
                               peak: loudest > 0 ? Swift.max(-160, 20 * log10(loudest)) : -160)
    }
}

/// A file's frames in order, mixed to one channel: libsndfile's formats, and .m4a and .mp3 by
/// FFmpeg (FFmpegReader says why .mp3).
private struct FrameSource {
    let sampleRate: Int
    let channels: Int
    let frames: Int64
    private let sndfile: SoundFileReader?
    private let mpeg4: FFmpegReader?
    private let path: String

    init(path: String) throws(RecorderError) {
        self.path = path
        if path.hasSuffix(".m4a") || path.hasSuffix(".mp3") {
            do throws(MPEG4Error) {
                let reader = try FFmpegReader(path: path)
                (sndfile, mpeg4) = (nil, reader)
                (sampleRate, channels, frames) = (reader.sampleRate, reader.channels, reader.frames)
            } catch {
                throw RecorderError(.unknown, "cannot read \(path): \(error.message)")
            }
        } else {
            do throws(SndfileError) {
                let reader = try SoundFileReader(path: path)
                (sndfile, mpeg4) = (reader, nil)
                (sampleRate, channels, frames) = (reader.info.sampleRate, reader.info.channels, reader.info.frames)
            } catch {
                throw RecorderError(.unknown, "cannot read \(path): \(error.message)")
            }
        }
        guard channels > 0, sampleRate > 0 else { throw RecorderError(.unknown, "cannot read \(path): no audio") }
    }

    /// Calls `body` with each frame's mean over the channels until it returns false or the
    /// file ends. Returns the largest magnitude of any channel's sample read.
    func forEachMonoSample(_ body: (Float) -> Bool) throws(RecorderError) -> Float {
        let channels = self.channels, scale = 1 / Float(channels)
        var samples: [Float] = []
        var loudest: Float = 0
        func feed(_ count: Int) -> Bool {
            samples.withUnsafeBufferPointer { samples in
                for frame in 0..<count {
                    var total: Float = 0
                    for channel in 0..<channels {
                        let sample = samples[frame * channels + channel]
                        total += sample
                        loudest = Swift.max(loudest, Swift.abs(sample))
                    }
                    if !body(total * scale) { return false }
                }
                return true
            }
        }
        if let sndfile {
            let chunk = 8192
            samples = Array(repeating: 0, count: chunk * channels)
            while true {
                let got = samples.withUnsafeMutableBufferPointer { sndfile.readFloat(into: $0.baseAddress!, frames: chunk) }
                if got == 0 || !feed(got) { return loudest }
            }
        } else if let mpeg4 {
            do throws(MPEG4Error) {
                while true {
                    samples.removeAll(keepingCapacity: true)
                    guard try mpeg4.read(into: &samples) else { return loudest }
                    if !feed(samples.count / channels) { return loudest }
                }
            } catch {
                throw RecorderError(.unknown, "cannot decode \(path): \(error.message)")
            }
        }
        return loudest
    }
}
