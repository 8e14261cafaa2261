import FoundationEssentials
import MPEG4
import RecorderModel
import Sndfile

/// The writer seam: what a capture session needs from the file it records to, whichever
/// library writes it (libsndfile for WAV, FLAC, Ogg, CAF and MP3; FFmpeg for .m4a).
///
/// Used by the capture thread only, except `sync()`, which may run on another thread.
protocol AudioFileWriter: AnyObject {
    var path: String { get }
    /// The open file was renamed to `path` (a writer that finds its file by name later, as the
    /// MPEG-4 rewrite at `close()` does, must use the new one).
    func renamed(to path: String)
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
    /// Writes where the file comes from (its first frame's time above all) into the file.
    /// Called once, before the first frame. Best effort: a format with no place for it, or a
    /// library that refuses it, leaves the audio untouched.
    func stampOrigin(_ origin: FileOrigin)
}

extension SoundFileWriter: AudioFileWriter {
    func checkpoint() { refreshHeader() }
    func discard() { try? close() }

    func stampOrigin(_ origin: FileOrigin) {
        switch format.container {
        case .wav, .rf64:
            // libsndfile writes the chunk with every header (the periodic refresh too), so a
            // crash-left `.part` has it as well.
            try? setBroadcastInfo(BroadcastInfo(origin: origin, sampleRate: sampleRate))
        case .flac, .ogg, .caf:
            // Vorbis comments (FLAC, Ogg) go out with the stream header at the first write;
            // CAF's `info` chunk with each header.
            try? setString(.date, origin.startText)
            try? setString(.title, origin.recordingName)
            try? setString(.software, origin.software)
            try? setString(.comment, origin.comment)
        case .mpeg:
            // ID3 (written with the first frame): a date keeps only its year there, so the
            // comment, which names the start to the millisecond, is what reads back.
            try? setString(.date, origin.startText)
            try? setString(.title, origin.recordingName)
            try? setString(.comment, origin.comment)
        }
    }
}

extension MPEG4AudioWriter: AudioFileWriter {
    func stampOrigin(_ origin: FileOrigin) {
        // `creation_time` goes into `mvhd` (whole seconds); `date` (©day) keeps the milliseconds.
        setTag("creation_time", origin.startText)
        setTag("date", origin.startText)
        setTag("title", origin.recordingName)
        setTag("comment", origin.comment)
    }
}

extension FileOrigin {
    /// The free-text line the formats with a comment field carry; it ends with the start.
    /// A start the clock did not vouch for says so before it (`StartClock.commentMark`).
    var comment: String {
        "recorded by \(software) from \(device)" + (source.map { " (source \($0))" } ?? "") + "; "
            + (clock.commentMark.map { $0 + "; " } ?? "") + Self.startMarker + startText
    }

    static let startMarker = "first frame at "

    /// The start a comment written as `comment` names (an MP3's only precise start).
    static func start(inComment comment: String) -> Date? {
        guard let time = comment.split(separator: " ").last, comment.dropLast(time.count).hasSuffix(startMarker) else { return nil }
        return UTCTimestamp.date(String(time))
    }

    /// What a comment written as `comment` says of its start's clock (nil: not recd's comment).
    static func startClock(inComment comment: String) -> StartClock? {
        guard start(inComment: comment) != nil else { return nil }
        for clock in StartClock.allCases {
            if let mark = clock.commentMark, comment.contains("; " + mark + "; " + startMarker) { return clock }
        }
        return .synchronized
    }
}

extension BroadcastInfo {
    /// A `bext` chunk for `origin`: OriginationDate and OriginationTime in UTC, TimeReference
    /// the first frame's position in frames since midnight UTC at the file's rate (exact to
    /// the frame where the date and time fields stop at the second).
    init(origin: FileOrigin, sampleRate: Int) {
        let seconds = origin.startedAt.timeIntervalSince1970
        let sinceMidnight = seconds - (seconds / 86400).rounded(.down) * 86400
        let fields = UTCTimestamp.fields(secondsSince1970: Int64(seconds.rounded(.down)))
        self.init(description: Self.truncated(origin.recordingName + "; " + origin.comment, bytes: 256),
                  originator: Self.truncated(origin.software, bytes: 32),
                  // 32 hexadecimal digits: the recording's UUID, shared by its segments.
                  originatorReference: Self.truncated(origin.recordingId.filter { $0 != "-" }, bytes: 32),
                  originationDate: fields.date, originationTime: fields.time,
                  timeReference: UInt64(Swift.max(0, (sinceMidnight * Double(sampleRate)).rounded())))
    }

    /// When the first frame was captured: midnight UTC of OriginationDate plus TimeReference
    /// frames; OriginationDate + OriginationTime when TimeReference disagrees with them by a
    /// second or more (a writer that counts from another midnight). Nil without a date.
    func startTime(sampleRate: Int) -> Date? {
        guard let midnight = UTCTimestamp.date(originationDate)?.timeIntervalSince1970 else { return nil }
        let clock = UTCTimestamp.date(originationDate + "T" + originationTime + "Z")?.timeIntervalSince1970
        guard sampleRate > 0 else { return clock.map(Date.init(timeIntervalSince1970:)) }
        let precise = midnight + Double(timeReference) / Double(sampleRate)
        if let clock, Swift.abs(precise - clock) >= 1 { return Date(timeIntervalSince1970: clock) }
        return Date(timeIntervalSince1970: precise)
    }

    /// The longest prefix of whole characters that fits in `bytes` bytes of UTF-8.
    static func truncated(_ text: String, bytes: Int) -> String {
        var result = ""
        var used = 0
        for character in text {
            let size = character.utf8.count
            if used + size > bytes { break }
            result.append(character)
            used += size
        }
        return result
    }
}

extension RecordingSettings {
    /// Creates the file at `path` for these settings, at the file's rate and channel count.
    /// Throws `invalidSettings` for a combination the codec refuses, `failedToBegin` otherwise.
    func makeFileWriter(path: String, sampleRate: Int, channels: Int) throws(RecorderError) -> any AudioFileWriter {
        let properties = format.properties
        func noWriter() -> RecorderError {
            RecorderError(.invalidSettings, "\(properties.library.rawValue) has no writer for \(properties.codec.rawValue) in \(properties.container.rawValue)")
        }
        switch properties.library {
        case .ffmpeg:
            let codec: MPEG4AudioCodec
            switch (properties.container, properties.codec) {
            case (.mpeg4, .aac):
                if let bitRate { try validate(bitRate: bitRate, sampleRate: sampleRate, channels: channels) }
                codec = .aac(bitRate: aacBitRate(sampleRate: sampleRate, channels: channels))
            case (.mpeg4, .alac):
                codec = .alac(bitDepth: effectiveBitDepth ?? 16)
            default:
                throw noWriter()
            }
            do throws(MPEG4Error) {
                return try MPEG4AudioWriter(path: path, codec: codec, sampleRate: sampleRate, channels: channels)
            } catch {
                throw RecorderError(error.errno == nil ? .invalidSettings : .failedToBegin, "cannot create \(error.description)")
            }
        case .libsndfile:
            break
        }
        guard let fileFormat = soundFileFormat else { throw noWriter() }
        guard SoundFileFormat.isWritable(fileFormat, sampleRate: sampleRate, channels: channels) else {
            throw RecorderError(.invalidSettings, "\(format.rawValue) cannot hold \(channels) channel(s) at \(sampleRate) Hz")
        }
        do throws(SndfileError) {
            return try SoundFileWriter(path: path, format: fileFormat, sampleRate: sampleRate, channels: channels,
                                       compressionLevel: compressionLevel(channels: channels),
                                       variableBitRate: properties.codec == .mp3)
        } catch {
            throw RecorderError(.failedToBegin, "cannot create \(error.description)")
        }
    }
}
