/// The file formats recd writes.
public enum AudioFileFormat: String, Sendable, Codable, CaseIterable {
    /// WAV, switching to RF64 by itself once the file passes 4 GiB.
    case wav
    case flac
    /// Opus in Ogg.
    case opus
    /// Vorbis in Ogg.
    case vorbis
    /// Core Audio Format.
    case caf

    public var fileExtension: String {
        switch self {
        case .wav: "wav"
        case .flac: "flac"
        case .opus: "opus"
        case .vorbis: "ogg"
        case .caf: "caf"
        }
    }

    public var isLossy: Bool { self == .opus || self == .vorbis }
    public var bitDepths: [Int] {
        switch self {
        case .wav, .caf: [16, 24, 32]
        case .flac: [16, 24]
        case .opus, .vorbis: []
        }
    }
}

/// AVAudioRecorder's five quality levels. They choose the codec's compression or bitrate and
/// the sample-rate converter's precision.
public enum RecordingQuality: String, Sendable, Codable, CaseIterable {
    case min, low, medium, high, max

    /// Opus bitrate per channel, bits per second.
    var opusBitRatePerChannel: Int {
        switch self {
        case .min: 16_000
        case .low: 32_000
        case .medium: 48_000
        case .high: 64_000
        case .max: 128_000
        }
    }

    /// libsndfile's compression level for Vorbis: 0 best quality ... 1 smallest.
    var vorbisCompressionLevel: Double {
        switch self {
        case .min: 0.9
        case .low: 0.7
        case .medium: 0.5
        case .high: 0.3
        case .max: 0.0
        }
    }

    /// libsndfile's compression level for FLAC (lossless: quality buys smaller files at more CPU).
    /// `.high` is FLAC's own default, level 5.
    var flacCompressionLevel: Double {
        switch self {
        case .min: 0.0
        case .low: 0.25
        case .medium: 0.5
        case .high: 0.625
        case .max: 1.0
        }
    }
}

/// What a recording should be, in AVAudioRecorder's terms. Unset values follow the device.
public struct RecordingSettings: Sendable, Equatable, Codable {
    public var format: AudioFileFormat
    /// The file's sample rate; nil records at the device's rate.
    public var sampleRate: Int?
    /// The file's channel count; nil records the device's channels.
    public var channels: Int?
    /// 16, 24 or 32 (32 is float) for WAV and CAF; 16 or 24 for FLAC; nil for 16 (PCM formats).
    public var bitDepth: Int?
    public var quality: RecordingQuality
    /// Opus only: the target bitrate in bits per second (6 to 256 kbit/s per channel).
    public var bitRate: Int?

    public init(format: AudioFileFormat = .wav, sampleRate: Int? = nil, channels: Int? = nil,
                bitDepth: Int? = nil, quality: RecordingQuality = .high, bitRate: Int? = nil) {
        self.format = format
        self.sampleRate = sampleRate
        self.channels = channels
        self.bitDepth = bitDepth
        self.quality = quality
        self.bitRate = bitRate
    }

    public static let opusRates = [8000, 12000, 16000, 24000, 48000]

    /// Checks what can be checked before opening the device.
    public func validate() throws(RecorderError) {
        func invalid(_ reason: String) -> RecorderError { RecorderError(.invalidSettings, reason) }
        if let sampleRate, !(1000...768_000).contains(sampleRate) {
            throw invalid("sampleRate \(sampleRate) is outside 1000...768000 Hz")
        }
        if format == .opus, let sampleRate, !Self.opusRates.contains(sampleRate) {
            throw invalid("opus records at 8000, 12000, 16000, 24000 or 48000 Hz, not \(sampleRate)")
        }
        if let channels, !(1...8).contains(channels) {
            throw invalid("channels \(channels) is outside 1...8")
        }
        if let bitDepth {
            if format.bitDepths.isEmpty {
                throw invalid("\(format.rawValue) is compressed and has no bit depth; use quality or bitRate")
            }
            if !format.bitDepths.contains(bitDepth) {
                throw invalid("\(format.rawValue) takes a bitDepth of \(format.bitDepths.map(String.init).joined(separator: ", ")), not \(bitDepth)")
            }
        }
        if let bitRate {
            guard format == .opus else {
                throw invalid("bitRate applies to opus only; \(format.rawValue) is set through quality")
            }
            let channelCount = channels ?? 2
            let range = (6000 * channelCount)...(256_000 * channelCount)
            if !range.contains(bitRate) {
                throw invalid("opus bitRate for \(channelCount) channel(s) must be within \(range.lowerBound)...\(range.upperBound), not \(bitRate)")
            }
        }
    }

    /// The bit depth the file will have; nil for compressed formats.
    public var effectiveBitDepth: Int? { format.isLossy ? nil : (bitDepth ?? 16) }

    /// libsndfile's compression level for this format and quality, if the codec takes one.
    public func compressionLevel(channels: Int) -> Double? {
        switch format {
        case .flac: return quality.flacCompressionLevel
        case .vorbis: return quality.vorbisCompressionLevel
        case .opus:
            // libsndfile maps level to bitrate as ((1 - level) * 250000 + 6000) * channels.
            let perChannel = Double(bitRate.map { $0 / channels } ?? quality.opusBitRatePerChannel)
            return Swift.min(1, Swift.max(0, 1 - (perChannel - 6000) / 250_000))
        case .wav, .caf: return nil
        }
    }
}
