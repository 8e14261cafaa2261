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

    /// libsndfile's container and encoding for the formats it writes; nil for the others,
    /// and for a container and codec it does not write together.
    var soundFileFormat: SoundFileFormat? {
        let properties = format.properties
        guard properties.library == .libsndfile else { return nil }
        let encoding: SoundFileFormat.Encoding? = switch properties.codec {
        case .pcm, .flac: pcmEncoding
        case .opus: .opus
        case .vorbis: .vorbis
        case .mp3: .mp3
        case .aac, .alac: nil
        }
        let container: SoundFileFormat.Container? = switch properties.container {
        // RF64 is WAV that grows past 4 GiB: libsndfile writes a plain RIFF header until then.
        case .wav: .rf64
        case .flac: .flac
        case .ogg: .ogg
        case .caf: .caf
        case .mpeg: .mpeg
        case .mpeg4: nil
        }
        guard let encoding, let container else { return nil }
        return SoundFileFormat(container: container, encoding: encoding)
    }

    private var pcmEncoding: SoundFileFormat.Encoding {
        switch effectiveBitDepth {
        case 24: .pcm24
        case 32: .float32
        default: .pcm16
        }
    }
}
