import CSndfile
import Glibc

/// A libsndfile failure: its message, the file, and the errno text when the system was to blame.
public struct SndfileError: Error, CustomStringConvertible, Sendable {
    public let path: String
    public let message: String
    /// The errno at the time of the failure, if the failure was a system call's (ENOSPC, EACCES...).
    public let errno: Int32?

    public var description: String {
        if let errno, errno != 0 { return "\(path): \(message) (\(String(cString: strerror(errno))))" }
        return "\(path): \(message)"
    }
}

/// A container + encoding pair in libsndfile's terms.
public struct SoundFileFormat: Sendable, Equatable {
    public enum Container: Sendable { case wav, rf64, flac, ogg, caf, mpeg }
    public enum Encoding: Sendable { case pcm16, pcm24, float32, vorbis, opus, mp3 }
    public var container: Container
    public var encoding: Encoding

    public init(container: Container, encoding: Encoding) {
        self.container = container
        self.encoding = encoding
    }

    var rawValue: Int32 {
        let major: Int32 = switch container {
        case .wav: Int32(SF_FORMAT_WAV)
        case .rf64: Int32(SF_FORMAT_RF64)
        case .flac: Int32(SF_FORMAT_FLAC)
        case .ogg: Int32(SF_FORMAT_OGG)
        case .caf: Int32(SF_FORMAT_CAF)
        case .mpeg: Int32(SF_FORMAT_MPEG)
        }
        let minor: Int32 = switch encoding {
        case .pcm16: Int32(SF_FORMAT_PCM_16)
        case .pcm24: Int32(SF_FORMAT_PCM_24)
        case .float32: Int32(SF_FORMAT_FLOAT)
        case .vorbis: Int32(SF_FORMAT_VORBIS)
        case .opus: Int32(SF_FORMAT_OPUS)
        case .mp3: Int32(SF_FORMAT_MPEG_LAYER_III)
        }
        return major | minor
    }

    /// Whether libsndfile can write this combination at this rate and channel count.
    public static func isWritable(_ format: SoundFileFormat, sampleRate: Int, channels: Int) -> Bool {
        var info = SF_INFO(frames: 0, samplerate: Int32(sampleRate), channels: Int32(channels),
                           format: format.rawValue, sections: 0, seekable: 0)
        return sf_format_check(&info) == Int32(SF_TRUE)
    }
}

/// The fields of a BWF `bext` chunk that recd writes and reads (EBU Tech 3285 v2).
public struct BroadcastInfo: Sendable, Equatable {
    /// Free text, at most 256 bytes.
    public var description: String
    /// Who made the file, at most 32 bytes.
    public var originator: String
    /// A reference unique to the originator, at most 32 bytes.
    public var originatorReference: String
    /// `yyyy-mm-dd`.
    public var originationDate: String
    /// `hh:mm:ss`.
    public var originationTime: String
    /// The first frame's position: frames since midnight at the file's rate.
    public var timeReference: UInt64

    public init(description: String, originator: String, originatorReference: String, originationDate: String,
                originationTime: String, timeReference: UInt64) {
        self.description = description
        self.originator = originator
        self.originatorReference = originatorReference
        self.originationDate = originationDate
        self.originationTime = originationTime
        self.timeReference = timeReference
    }
}

/// libsndfile's text fields. Each container names them its own way: Vorbis comments (FLAC,
/// Ogg) `TITLE`, `COMMENT`, `DATE`, and for `software` `ENCODER` (Opus), `SOFTWARE` (Vorbis)
/// or `software` (FLAC); CAF's `info` chunk the same names in lower case.
public enum SoundFileString: Sendable, CaseIterable {
    case title, comment, software, date

    var rawValue: Int32 {
        switch self {
        case .title: Int32(SF_STR_TITLE)
        case .comment: Int32(SF_STR_COMMENT)
        case .software: Int32(SF_STR_SOFTWARE)
        case .date: Int32(SF_STR_DATE)
        }
    }
}

/// Writes one audio file. Not thread-safe except `sync()`, which only touches the descriptor.
public final class SoundFileWriter {
    /// Where the file is: `renamed(to:)` follows a rename made while it is open.
    public private(set) var path: String
    public let format: SoundFileFormat
    public let sampleRate: Int
    private let handle: OpaquePointer
    private let fd: Int32
    private var closed = false
    /// WAV, RF64 and CAF carry sizes in a header that can be rewritten mid-file; Ogg and FLAC
    /// streams cannot (libsndfile corrupts an Ogg stream if asked to).
    private let hasRewritableHeader: Bool
    private let channels: Int
    /// Stereo MP3: 16-bit samples go to libsndfile as 32-bit ones (`write(_:frames:)` says why).
    private let shortsNeedWidening: Bool
    private var widened: [Int32] = []

    /// Seconds of Opus held before an Ogg page is written (libsndfile's default: 1).
    public static let opusPageLatency = 0.25

    /// The file was renamed while open (its descriptor stays valid): later messages name the new path.
    public func renamed(to newPath: String) { path = newPath }

    /// Creates `path` (which must not exist) and opens it for writing.
    ///
    /// - Parameters:
    ///   - compressionLevel: libsndfile's 0 (best quality, largest) ... 1 (smallest), for FLAC, Vorbis, Opus, MP3.
    ///   - variableBitRate: for MP3, VBR (the compression level then sets LAME's VBR quality).
    public init(path: String, format: SoundFileFormat, sampleRate: Int, channels: Int,
                compressionLevel: Double? = nil, variableBitRate: Bool = false) throws(SndfileError) {
        self.path = path
        self.format = format
        self.sampleRate = sampleRate
        self.channels = channels
        shortsNeedWidening = format.encoding == .mp3 && channels > 1
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw SndfileError(path: path, message: "cannot create file", errno: Glibc.errno) }
        var info = SF_INFO(frames: 0, samplerate: Int32(sampleRate), channels: Int32(channels),
                           format: format.rawValue, sections: 0, seekable: 0)
        // We keep the descriptor (close_desc false) to fsync after sf_close wrote the final header.
        guard let handle = sf_open_fd(fd, Int32(SFM_WRITE), &info, Int32(SF_FALSE)) else {
            let message = String(cString: sf_strerror(nil))
            Glibc.close(fd)
            unlink(path)
            throw SndfileError(path: path, message: message, errno: nil)
        }
        self.handle = handle
        self.fd = fd
        self.hasRewritableHeader = [.wav, .rf64, .caf].contains(format.container)
        if format.container == .rf64 {
            sf_command(handle, Int32(SFC_RF64_AUTO_DOWNGRADE), nil, Int32(SF_TRUE))
        }
        // Float data converted to integer samples saturates instead of wrapping around.
        sf_command(handle, Int32(SFC_SET_CLIPPING), nil, Int32(SF_TRUE))
        if format.encoding == .opus {
            // libsndfile holds up to a second of Opus before it writes an Ogg page: what a
            // crash loses. A quarter of a second costs ~100 bytes/s of page headers.
            var latency = Self.opusPageLatency * 1000
            sf_command(handle, Int32(SFC_SET_OGG_PAGE_LATENCY_MS), &latency, Int32(MemoryLayout<Double>.size))
        }
        // The bit-rate mode first: libsndfile applies the compression level according to it.
        // (libsndfile 1.2.0 returns 0 whether or not it took the mode: read it back.)
        var mode = Int32(SF_BITRATE_MODE_VARIABLE)
        if variableBitRate,
           sf_command(handle, Int32(SFC_SET_BITRATE_MODE), &mode, Int32(MemoryLayout<Int32>.size)) < 0
            || sf_command(handle, Int32(SFC_GET_BITRATE_MODE), nil, 0) != mode {
            sf_close(handle)
            Glibc.close(fd)
            unlink(path)
            throw SndfileError(path: path, message: "the encoder refused variable bit rate", errno: nil)
        }
        if var level = compressionLevel {
            guard sf_command(handle, Int32(SFC_SET_COMPRESSION_LEVEL), &level, Int32(MemoryLayout<Double>.size)) == Int32(SF_TRUE) else {
                sf_close(handle)
                Glibc.close(fd)
                unlink(path)
                throw SndfileError(path: path, message: "the encoder refused compression level \(level)", errno: nil)
            }
        }
    }

    deinit {
        if !closed {
            sf_close(handle)
            Glibc.close(fd)
        }
    }

    public func write(_ samples: UnsafePointer<Int16>, frames: Int) throws(SndfileError) {
        guard shortsNeedWidening else {
            return try checkWritten(sf_writef_short(handle, samples, sf_count_t(frames)), frames)
        }
        // libsndfile 1.2.0's MP3 encoder mangles 16-bit stereo (sf_writef_short: half the
        // level and a residue 10-16 dB below the signal, Debian 12's version); 32-bit is right.
        // The same samples in the top 16 bits, exactly.
        let count = frames * channels
        if widened.count < count { widened = [Int32](repeating: 0, count: count) }
        try widened.withUnsafeMutableBufferPointer { (wide) throws(SndfileError) in
            for index in 0..<count { wide[index] = Int32(samples[index]) << 16 }
            try checkWritten(sf_writef_int(handle, wide.baseAddress!, sf_count_t(frames)), frames)
        }
    }

    public func write(_ samples: UnsafePointer<Int32>, frames: Int) throws(SndfileError) {
        try checkWritten(sf_writef_int(handle, samples, sf_count_t(frames)), frames)
    }

    public func write(_ samples: UnsafePointer<Float>, frames: Int) throws(SndfileError) {
        try checkWritten(sf_writef_float(handle, samples, sf_count_t(frames)), frames)
    }

    private func checkWritten(_ written: sf_count_t, _ frames: Int) throws(SndfileError) {
        let savedErrno = Glibc.errno
        guard written == sf_count_t(frames) else {
            throw SndfileError(path: path, message: String(cString: sf_strerror(handle)), errno: savedErrno)
        }
    }

    /// Gives a WAV or RF64 file its `bext` chunk (libsndfile adds a coding history line).
    /// Before the first frame: libsndfile refuses it once data is written.
    public func setBroadcastInfo(_ info: BroadcastInfo) throws(SndfileError) {
        guard recd_sf_set_broadcast_info(handle, info.description, info.originator, info.originatorReference,
                                         info.originationDate, info.originationTime, info.timeReference) == Int32(SF_TRUE)
        else { throw SndfileError(path: path, message: "cannot set the bext chunk: " + String(cString: sf_strerror(handle)), errno: nil) }
    }

    /// Sets a text field (a Vorbis comment, a CAF `info` entry). Before the first frame:
    /// FLAC and Ogg write them with the stream header.
    public func setString(_ field: SoundFileString, _ value: String) throws(SndfileError) {
        let result = sf_set_string(handle, field.rawValue, value)
        guard result == 0 else {
            throw SndfileError(path: path, message: "cannot set a text field: " + String(cString: sf_error_number(result)), errno: nil)
        }
    }

    /// Rewrites the header (WAV/RF64/CAF sizes) so the file is playable up to here.
    /// Streams (FLAC, Ogg) need no header update and get none.
    public func refreshHeader() {
        guard hasRewritableHeader else { return }
        sf_command(handle, Int32(SFC_UPDATE_HEADER_NOW), nil, 0)
    }

    /// Flushes written data to the disk. Safe to call from a thread other than the writer's.
    public func sync() throws(SndfileError) {
        if fsync(fd) != 0 { throw SndfileError(path: path, message: "fsync failed", errno: Glibc.errno) }
    }

    /// Finalizes the header, flushes and closes. The file is complete once this returns.
    public func close() throws(SndfileError) {
        guard !closed else { return }
        closed = true
        let result = sf_close(handle)
        let syncResult = fsync(fd)
        let syncErrno = Glibc.errno
        Glibc.close(fd)
        if result != 0 {
            throw SndfileError(path: path, message: String(cString: sf_error_number(result)), errno: nil)
        }
        if syncResult != 0 { throw SndfileError(path: path, message: "fsync failed", errno: syncErrno) }
    }
}

/// What a finished file holds, as libsndfile reads it back.
public struct SoundFileInfo: Sendable, Equatable {
    public var frames: Int64
    public var sampleRate: Int
    public var channels: Int
    /// libsndfile's major format name, e.g. "WAV (Microsoft)".
    public var formatName: String

    public init(frames: Int64, sampleRate: Int, channels: Int, formatName: String) {
        self.frames = frames
        self.sampleRate = sampleRate
        self.channels = channels
        self.formatName = formatName
    }

    public var duration: Double { sampleRate > 0 ? Double(frames) / Double(sampleRate) : 0 }
}

/// Reads a sound file (for `recordings.info`, and for tests checking what was written).
public final class SoundFileReader {
    public let path: String
    public let info: SoundFileInfo
    private let handle: OpaquePointer

    public init(path: String) throws(SndfileError) {
        self.path = path
        var sfInfo = SF_INFO()
        guard let handle = sf_open(path, Int32(SFM_READ), &sfInfo) else {
            throw SndfileError(path: path, message: String(cString: sf_strerror(nil)), errno: nil)
        }
        self.handle = handle
        var formatInfo = SF_FORMAT_INFO(format: sfInfo.format & Int32(SF_FORMAT_TYPEMASK), name: nil, extension: nil)
        sf_command(handle, Int32(SFC_GET_FORMAT_INFO), &formatInfo, Int32(MemoryLayout<SF_FORMAT_INFO>.size))
        self.info = SoundFileInfo(
            frames: Int64(sfInfo.frames), sampleRate: Int(sfInfo.samplerate), channels: Int(sfInfo.channels),
            formatName: formatInfo.name.map { String(cString: $0) } ?? "unknown")
    }

    deinit { sf_close(handle) }

    /// The file's `bext` chunk (WAV, RF64), if it has one.
    public var broadcastInfo: BroadcastInfo? {
        var fields = recd_broadcast_fields()
        guard recd_sf_get_broadcast_info(handle, &fields) == 1 else { return nil }
        func text<T>(_ tuple: inout T) -> String {
            withUnsafeBytes(of: &tuple) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        return BroadcastInfo(description: text(&fields.description), originator: text(&fields.originator),
                             originatorReference: text(&fields.originator_reference),
                             originationDate: text(&fields.origination_date), originationTime: text(&fields.origination_time),
                             timeReference: UInt64(fields.time_reference))
    }

    /// A text field the file carries (Vorbis comment, CAF `info`, RIFF `INFO`), if it has it.
    public func string(_ field: SoundFileString) -> String? {
        sf_get_string(handle, field.rawValue).map { String(cString: $0) }
    }

    /// Reads every remaining frame as interleaved 32-bit integers (16-bit data lands in the top bits).
    public func readAllInt32() -> [Int32] {
        readAll { sf_readf_int(handle, $0, $1) }
    }

    /// Reads every remaining frame as interleaved 16-bit integers.
    public func readAllInt16() -> [Int16] {
        readAll { sf_readf_short(handle, $0, $1) }
    }

    /// Reads up to `frames` frames as interleaved floats in -1...1 into `buffer` (room for
    /// frames × channels); returns how many came (0 at the end).
    public func readFloat(into buffer: UnsafeMutablePointer<Float>, frames: Int) -> Int {
        Swift.max(0, Int(sf_readf_float(handle, buffer, sf_count_t(frames))))
    }

    /// Reads every remaining frame as interleaved floats in -1...1.
    public func readAllFloat() -> [Float] {
        readAll { sf_readf_float(handle, $0, $1) }
    }

    private func readAll<T: Numeric>(_ read: (UnsafeMutablePointer<T>, sf_count_t) -> sf_count_t) -> [T] {
        let chunk = 4096
        var samples: [T] = []
        var buffer = [T](repeating: 0, count: chunk * info.channels)
        while true {
            let got = buffer.withUnsafeMutableBufferPointer { read($0.baseAddress!, sf_count_t(chunk)) }
            if got <= 0 { break }
            samples.append(contentsOf: buffer[0..<Int(got) * info.channels])
        }
        return samples
    }
}
