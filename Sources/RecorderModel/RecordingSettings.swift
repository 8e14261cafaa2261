/// The file formats recd writes. What each one is lives in one table, `properties`: adding a
/// format is a case, its entry there, and (if its library has no writer for its codec yet) that
/// writer in `RecordingSettings.makeFileWriter`, which refuses a codec it has no writer for.
public enum AudioFileFormat: String, Sendable, CaseIterable {
    case wav, flac, opus, vorbis, caf, aac, alac, mp3

    /// How a format is stored and which library writes it.
    public struct Properties: Sendable, Equatable {
        public enum Container: String, Sendable { case wav, flac, ogg, caf, mpeg4, mpeg }
        public enum Codec: String, Sendable { case pcm, flac, opus, vorbis, aac, alac, mp3 }
        public enum Library: String, Sendable { case libsndfile, ffmpeg }

        public var container: Container
        public var codec: Codec
        public var library: Library
        public var fileExtension: String
        public var isLossy: Bool
        /// The bit depths a file may have; empty for a codec that has none (the lossy ones).
        public var bitDepths: [Int]
        /// The sample rates the codec takes; nil for any.
        public var sampleRates: [Int]?
        public var maximumChannels: Int
        /// What people call it, for help texts and `recctl ls`.
        public var summary: String
    }

    /// The table.
    public var properties: Properties {
        switch self {
        case .wav:
            // RIFF WAV, switching to RF64 by itself once the file passes 4 GiB.
            Properties(container: .wav, codec: .pcm, library: .libsndfile, fileExtension: "wav", isLossy: false,
                       bitDepths: [16, 24, 32], sampleRates: nil, maximumChannels: 8, summary: "WAV (RF64 past 4 GiB)")
        case .flac:
            Properties(container: .flac, codec: .flac, library: .libsndfile, fileExtension: "flac", isLossy: false,
                       bitDepths: [16, 24], sampleRates: nil, maximumChannels: 8, summary: "FLAC")
        case .opus:
            Properties(container: .ogg, codec: .opus, library: .libsndfile, fileExtension: "opus", isLossy: true,
                       bitDepths: [], sampleRates: [8000, 12000, 16000, 24000, 48000], maximumChannels: 8,
                       summary: "Opus in Ogg")
        case .vorbis:
            Properties(container: .ogg, codec: .vorbis, library: .libsndfile, fileExtension: "ogg", isLossy: true,
                       bitDepths: [], sampleRates: nil, maximumChannels: 8, summary: "Vorbis in Ogg")
        case .caf:
            Properties(container: .caf, codec: .pcm, library: .libsndfile, fileExtension: "caf", isLossy: false,
                       bitDepths: [16, 24, 32], sampleRates: nil, maximumChannels: 8, summary: "Core Audio Format")
        case .aac:
            // AAC-LC (AVAudioRecorder's kAudioFormatMPEG4AAC), with its sampling-frequency table.
            Properties(container: .mpeg4, codec: .aac, library: .ffmpeg, fileExtension: "m4a", isLossy: true,
                       bitDepths: [], sampleRates: [8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000],
                       maximumChannels: 8, summary: "AAC-LC in .m4a")
        case .alac:
            Properties(container: .mpeg4, codec: .alac, library: .ffmpeg, fileExtension: "m4a", isLossy: false,
                       bitDepths: [16, 24], sampleRates: nil, maximumChannels: 8, summary: "Apple Lossless in .m4a")
        case .mp3:
            // MPEG-1, MPEG-2 and MPEG-2.5 Layer III, variable bit rate.
            Properties(container: .mpeg, codec: .mp3, library: .libsndfile, fileExtension: "mp3", isLossy: true,
                       bitDepths: [], sampleRates: [8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000],
                       maximumChannels: 2, summary: "MP3, variable bit rate")
        }
    }

    /// A format by the name a user types: its own (`flac`, any case), or `m4a`, the file type,
    /// for the .m4a codec recd records by default (AAC). Everything that reads a format from
    /// outside (the socket, MQTT, recctl, the configuration) reads it through this.
    public init?(name: String) {
        let name = name.lowercased()
        if let format = AudioFileFormat(rawValue: name) {
            self = format
        } else if name == "m4a" {
            self = .aac
        } else {
            return nil
        }
    }

    /// The format an MPEG-4 file's codec (as libavformat names it: `aac`, `alac`) records.
    public init?(mpeg4Codec codec: String) {
        guard let format = AudioFileFormat.allCases.first(where: {
            $0.properties.container == .mpeg4 && $0.properties.codec.rawValue == codec
        }) else { return nil }
        self = format
    }

    /// The format a file with this extension holds, when the extension says (.m4a does not:
    /// read its codec).
    public init?(fileExtension: String) {
        let formats = AudioFileFormat.allCases.filter { $0.fileExtension == fileExtension }
        guard formats.count == 1 else { return nil }
        self = formats[0]
    }

    /// Whether files with this extension are MPEG-4 files, whose codec only reading them tells.
    public static func isMPEG4(fileExtension: String) -> Bool {
        allCases.contains { $0.properties.container == .mpeg4 && $0.fileExtension == fileExtension }
    }

    /// The names `init(name:)` takes, for messages: "wav, flac, …, mp3 (m4a: aac)".
    public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") + " (m4a: aac)" }

    /// Every format with what it is, for help texts: "wav (WAV (RF64 past 4 GiB)), flac (FLAC), …".
    public static var summaries: String {
        allCases.map { "\($0.rawValue) (\($0.properties.summary))" }.joined(separator: ", ") + "; m4a means aac"
    }

    public var fileExtension: String { properties.fileExtension }
    public var isLossy: Bool { properties.isLossy }
    public var bitDepths: [Int] { properties.bitDepths }
    public var sampleRates: [Int]? { properties.sampleRates }
    public var maximumChannels: Int { properties.maximumChannels }

    /// The rate a file records at when none is asked for and the device runs at `deviceRate`:
    /// the device's, unless the codec does not take it (then 48 kHz, which they all take).
    public func fileRate(forDeviceRate deviceRate: Int) -> Int {
        guard let rates = sampleRates, !rates.contains(deviceRate) else { return deviceRate }
        return 48000
    }
}

extension AudioFileFormat: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let name = try container.decode(String.self)
        guard let format = AudioFileFormat(name: name) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "no format named '\(name)'")
        }
        self = format
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
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

    /// AAC bits per sample per channel: the bit rate is this × rate × channels (at least
    /// 8 kbit/s per channel). `high` at 12 kHz mono is 24 kbit/s, at
    /// 48 kHz stereo 192 kbit/s.
    public var aacBitsPerSample: Double {
        switch self {
        case .min: 0.5
        case .low: 0.75
        case .medium: 1.0
        case .high: 2.0
        case .max: 3.0
        }
    }

    /// libsndfile's compression level for MP3: LAME's VBR quality ÷ 10 (`high` is -V 2, about
    /// 190 kbit/s for stereo music).
    var mp3CompressionLevel: Double {
        switch self {
        case .min: 0.9
        case .low: 0.7
        case .medium: 0.5
        case .high: 0.2
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
    /// 16, 24 or 32 (32 is float) for WAV and CAF; 16 or 24 for FLAC and ALAC; nil for 16
    /// (formats that store samples; the lossy ones take none).
    public var bitDepth: Int?
    public var quality: RecordingQuality
    /// Opus and AAC: the target bitrate in bits per second, all channels (Opus 6 to 256 kbit/s
    /// per channel; AAC 8 kbit/s per channel up to 6 bits per sample per channel).
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

    public static let opusRates = AudioFileFormat.opus.sampleRates!

    /// Checks what can be checked before opening the device.
    public func validate() throws(RecorderError) {
        func invalid(_ reason: String) -> RecorderError { RecorderError(.invalidSettings, reason) }
        if let sampleRate, !(1000...768_000).contains(sampleRate) {
            throw invalid("sampleRate \(sampleRate) is outside 1000...768000 Hz")
        }
        if let sampleRate, let rates = format.sampleRates, !rates.contains(sampleRate) {
            let list = rates.dropLast().map(String.init).joined(separator: ", ") + " or \(rates.last!)"
            throw invalid("\(format.rawValue) records at \(list) Hz, not \(sampleRate)")
        }
        if let channels, !(1...format.maximumChannels).contains(channels) {
            throw invalid(format.maximumChannels == 8 ? "channels \(channels) is outside 1...8"
                                                      : "\(format.rawValue) holds 1 or 2 channels, not \(channels)")
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
            guard format == .opus || format == .aac else {
                throw invalid("bitRate applies to opus and aac only; \(format.rawValue) is set through quality")
            }
            if format == .opus || (sampleRate != nil && channels != nil) {
                try validate(bitRate: bitRate, sampleRate: sampleRate ?? 48000, channels: channels ?? 2)
            }
        }
    }

    /// Checks `bitRate` once the file's rate and channel count are known.
    public func validate(bitRate: Int, sampleRate: Int, channels: Int) throws(RecorderError) {
        let range: ClosedRange<Int> = switch format {
        case .opus: (6000 * channels)...(256_000 * channels)
        // AAC-LC carries at most 6144 bits per channel per 1024-frame block.
        default: (8000 * channels)...Swift.max(8000 * channels, 6144 * sampleRate / 1024 * channels)
        }
        if !range.contains(bitRate) {
            let rate = format == .opus ? "" : " at \(sampleRate) Hz"
            throw RecorderError(.invalidSettings,
                "\(format.rawValue) bitRate for \(channels) channel(s)\(rate) must be within \(range.lowerBound)...\(range.upperBound), not \(bitRate)")
        }
    }

    /// The AAC bit rate for these settings at this rate and channel count: `bitRate`, or the
    /// quality's (see `RecordingQuality.aacBitsPerSample`).
    public func aacBitRate(sampleRate: Int, channels: Int) -> Int {
        if let bitRate { return bitRate }
        let perChannel = Swift.max(8000, Int((quality.aacBitsPerSample * Double(sampleRate)).rounded()))
        return Swift.min(perChannel, 6144 * sampleRate / 1024) * channels
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
        case .mp3: return quality.mp3CompressionLevel
        case .wav, .caf, .aac, .alac: return nil
        }
    }
}
