import MPEG4
import RecorderModel
import Sndfile

/// The writer seam: what a capture session needs from the file it records to, whichever
/// library writes it (libsndfile for WAV, FLAC, Ogg, CAF and MP3; FFmpeg for .m4a).
///
/// Used by the capture thread only, except `sync()`, which may run on another thread.
protocol AudioFileWriter: AnyObject {
    var path: String { get }
    /// Interleaved samples; 32-bit integers carry 24-bit data in the top bits.
    func write(_ samples: UnsafePointer<Int16>, frames: Int) throws
    func write(_ samples: UnsafePointer<Int32>, frames: Int) throws
    func write(_ samples: UnsafePointer<Float>, frames: Int) throws
    /// Makes the file playable up to here (a header rewrite, a fragment cut): called before
    /// every background `sync()`. A failure shows at the next write.
    func checkpoint()
    /// Flushes what was written to the disk.
    func sync() throws
    /// Finalizes the file; it is complete once this returns.
    func close() throws
    /// Closes without finalizing: the file is about to be deleted (a cancelled recording).
    func discard()
}

extension SoundFileWriter: AudioFileWriter {
    func checkpoint() { refreshHeader() }
    func discard() { try? close() }
}

extension MPEG4AudioWriter: AudioFileWriter {}

extension RecordingSettings {
    /// Creates the file at `path` for these settings, at the file's rate and channel count.
    /// Throws `invalidSettings` for a combination the codec refuses, `failedToBegin` otherwise.
    func makeFileWriter(path: String, sampleRate: Int, channels: Int) throws(RecorderError) -> any AudioFileWriter {
        guard let fileFormat = soundFileFormat else {
            let codec: MPEG4AudioCodec
            if format == .aac {
                if let bitRate { try validate(bitRate: bitRate, sampleRate: sampleRate, channels: channels) }
                codec = .aac(bitRate: aacBitRate(sampleRate: sampleRate, channels: channels))
            } else {
                codec = .alac(bitDepth: effectiveBitDepth ?? 16)
            }
            do throws(MPEG4Error) {
                return try MPEG4AudioWriter(path: path, codec: codec, sampleRate: sampleRate, channels: channels)
            } catch {
                throw RecorderError(error.errno == nil ? .invalidSettings : .failedToBegin, "cannot create \(error.description)")
            }
        }
        guard SoundFileFormat.isWritable(fileFormat, sampleRate: sampleRate, channels: channels) else {
            throw RecorderError(.invalidSettings, "\(format.rawValue) cannot hold \(channels) channel(s) at \(sampleRate) Hz")
        }
        do throws(SndfileError) {
            return try SoundFileWriter(path: path, format: fileFormat, sampleRate: sampleRate, channels: channels,
                                       compressionLevel: compressionLevel(channels: channels),
                                       variableBitRate: format == .mp3)
        } catch {
            throw RecorderError(.failedToBegin, "cannot create \(error.description)")
        }
    }
}
