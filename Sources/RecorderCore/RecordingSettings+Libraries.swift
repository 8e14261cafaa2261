import ALSA
import RecorderModel
import Sndfile
import Soxr

// How the model's settings map onto the C libraries.

extension RecordingQuality {
    var converterQuality: Resampler.Quality {
        switch self {
        case .min: .quick
        case .low: .low
        case .medium: .medium
        case .high: .high
        case .max: .veryHigh
        }
    }
}

extension RecordingSettings {
    /// The sample format to ask the device for: the file's own where possible, so the
    /// common case needs no conversion at all.
    var preferredCaptureFormat: SampleFormat {
        switch effectiveBitDepth {
        case 24: .int32
        case 32: .float32
        default: .int16
        }
    }

    /// libsndfile's container and encoding; nil for the .m4a formats, which FFmpeg writes.
    var soundFileFormat: SoundFileFormat? {
        switch format {
        case .wav: SoundFileFormat(container: .rf64, encoding: pcmEncoding)
        case .caf: SoundFileFormat(container: .caf, encoding: pcmEncoding)
        case .flac: SoundFileFormat(container: .flac, encoding: pcmEncoding)
        case .opus: SoundFileFormat(container: .ogg, encoding: .opus)
        case .vorbis: SoundFileFormat(container: .ogg, encoding: .vorbis)
        case .mp3: SoundFileFormat(container: .mpeg, encoding: .mp3)
        case .aac, .alac: nil
        }
    }

    private var pcmEncoding: SoundFileFormat.Encoding {
        switch effectiveBitDepth {
        case 24: .pcm24
        case 32: .float32
        default: .pcm16
        }
    }
}
