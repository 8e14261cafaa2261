import CFFmpeg
import Glibc

/// The codecs an MPEG-4 audio file (`.m4a`) is written with.
public enum MPEG4AudioCodec: Sendable, Equatable {
    /// AAC-LC through FFmpeg's native `aac` encoder, at this bit rate (bit/s, all channels).
    case aac(bitRate: Int)
    /// Apple Lossless, 16 or 24 bits per sample.
    case alac(bitDepth: Int)

    var encoderName: String {
        switch self {
        case .aac: "aac"
        case .alac: "alac"
        }
    }

    /// The highest AAC-LC bit rate: 6144 bits per channel per 1024-frame block.
    public static func maximumAACBitRate(sampleRate: Int, channels: Int) -> Int {
        6144 * sampleRate / 1024 * channels
    }
}

/// Encodes interleaved samples and writes them to a new `.m4a` file that survives a crash.
///
/// While recording, the file is a fragmented MP4 (`moov` up front, then `moof`+`mdat` pairs):
/// a fragment is cut at least every `fragmentDuration` seconds of audio and whenever
/// `checkpoint()` is called, and each one goes to the kernel as soon as it is cut, so a
/// killed process loses only the fragment under way. `close()` rewrites it as a regular MP4
/// with `moov` before `mdat` (what QuickTime, iOS and progressive download expect); a file
/// that a crash left fragmented is rewritten later by `MPEG4FileRewriter.makeRegular(path:)`.
///
/// The encoder delay and the padding of the last block are declared in the edit list, so the
/// file's duration is the number of frames written.
///
/// Not thread-safe, except `sync()`, which only touches the descriptor.
public final class MPEG4AudioWriter {
    /// Where the file is. `close()` rewrites it by this name, so a rename made while it is open
    /// must be told with `renamed(to:)`.
    public private(set) var path: String
    public let sampleRate: Int
    public let channels: Int
    public let codec: MPEG4AudioCodec

    private let av: recd_ffmpeg
    private let resources: FFmpegResources
    private let codecContext: UnsafeMutablePointer<AVCodecContext>
    private let formatContext: UnsafeMutablePointer<AVFormatContext>
    private let stream: UnsafeMutablePointer<AVStream>
    private let frame: UnsafeMutablePointer<AVFrame>
    private let packet: UnsafeMutablePointer<AVPacket>
    /// Kept open for fsync: libavformat's own descriptor is out of reach.
    private let syncDescriptor: Int32
    /// Frames per encoder block (AAC 1024, ALAC 4096); the last block may be shorter.
    private let blockFrames: Int
    private let planeFormat: PlaneFormat
    /// Frames in the block being filled.
    private var filled = 0
    private var nextTimestamp: Int64 = 0
    private var packetsWritten = 0
    /// The file length at the end of the last fragment known to be entirely written: after a
    /// write error the file is cut back to it, so it never ends in half a fragment.
    private var completeLength: Int64 = 0
    /// The length of what `avformat_write_header` wrote (the `ftyp`).
    private var headerLength: Int64 = 0
    /// The first write error: every later write throws it, and `close()` reports it.
    private var failure: MPEG4Error?
    private var closed = false
    /// The header waits for the first frame (or `close()`), so that tags set before it, such
    /// as the first frame's time, are in it: libavformat reads `creation_time` only then.
    private var headerWritten = false
    private let fragmentDuration: Double

    private enum PlaneFormat { case float, int16, int32 }

    /// The file was renamed while open: libavformat and the fsync descriptor keep writing to it,
    /// and `close()` rewrites it under the new name.
    public func renamed(to newPath: String) { path = newPath }

    /// Creates `path` (which must not exist) and writes the start of a fragmented MP4.
    ///
    /// - Parameter fragmentDuration: seconds of audio after which a fragment is cut at the latest.
    public init(path: String, codec: MPEG4AudioCodec, sampleRate: Int, channels: Int,
                fragmentDuration: Double = 1.0) throws(MPEG4Error) {
        self.path = path
        self.codec = codec
        self.sampleRate = sampleRate
        self.channels = channels
        let av = try loadFFmpeg(for: path)
        self.av = av
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw .system(path: path, message: "cannot create file") }
        let resources = FFmpegResources(av)
        do throws(MPEG4Error) {
            guard let encoder = av.avcodec_find_encoder_by_name(codec.encoderName) else {
                throw MPEG4Error(path: path, message: "this FFmpeg has no \(codec.encoderName) encoder")
            }
            guard let context = av.avcodec_alloc_context3(encoder) else { throw MPEG4Error(path: path, message: "out of memory") }
            resources.codecContext = context
            context.pointee.sample_rate = Int32(sampleRate)
            av.av_channel_layout_default(&context.pointee.ch_layout, Int32(channels))
            context.pointee.time_base = AVRational(num: 1, den: Int32(sampleRate))
            // MP4 keeps the decoder configuration in the sample description, not in the stream.
            context.pointee.flags |= recd_codec_flag_global_header()
            switch codec {
            case .aac(let bitRate):
                context.pointee.sample_fmt = AV_SAMPLE_FMT_FLTP
                context.pointee.bit_rate = Int64(bitRate)
                context.pointee.profile = FF_PROFILE_AAC_LOW
                planeFormat = .float
            case .alac(let bitDepth):
                if bitDepth > 16 {
                    context.pointee.sample_fmt = AV_SAMPLE_FMT_S32P
                    context.pointee.bits_per_raw_sample = 24
                    planeFormat = .int32
                } else {
                    context.pointee.sample_fmt = AV_SAMPLE_FMT_S16P
                    planeFormat = .int16
                }
            }
            try check(av.avcodec_open2(context, encoder, nil), "cannot open the \(codec.encoderName) encoder at \(sampleRate) Hz, \(channels) channel(s)", path: path)
            blockFrames = Int(context.pointee.frame_size)

            var format: UnsafeMutablePointer<AVFormatContext>?
            // "ipod": MP4 with the M4A brand, Apple's audio-only flavour.
            try check(av.avformat_alloc_output_context2(&format, nil, "ipod", path), "cannot set up the MP4 muxer", path: path)
            guard let format else { throw MPEG4Error(path: path, message: "cannot set up the MP4 muxer") }
            resources.outputContext = format
            guard let stream = av.avformat_new_stream(format, nil) else { throw MPEG4Error(path: path, message: "out of memory") }
            try check(av.avcodec_parameters_from_context(stream.pointee.codecpar, context), "cannot describe the stream", path: path)
            stream.pointee.time_base = context.pointee.time_base
            try check(av.avio_open(&format.pointee.pb, path, AVIO_FLAG_WRITE), "cannot open for writing", path: path)
            self.fragmentDuration = fragmentDuration

            guard let frame = av.av_frame_alloc(), let packet = av.av_packet_alloc() else { throw MPEG4Error(path: path, message: "out of memory") }
            resources.frame = frame
            resources.packet = packet
            frame.pointee.nb_samples = Int32(blockFrames)
            frame.pointee.format = context.pointee.sample_fmt.rawValue
            frame.pointee.sample_rate = Int32(sampleRate)
            try check(av.av_channel_layout_copy(&frame.pointee.ch_layout, &context.pointee.ch_layout), "out of memory", path: path)
            try check(av.av_frame_get_buffer(frame, 0), "cannot allocate a sample buffer", path: path)

            codecContext = context
            formatContext = format
            self.stream = stream
            self.frame = frame
            self.packet = packet
            self.resources = resources
            syncDescriptor = fd
        } catch {
            resources.release()
            Glibc.close(fd)
            unlink(path)
            throw error
        }
    }

    deinit {
        if !closed {
            resources.release()
            Glibc.close(syncDescriptor)
        }
    }

    // MARK: Writing

    /// Sets a file-level tag: `creation_time` (ISO 8601, kept to the second in `mvhd`), or one
    /// the `ipod` muxer writes as an iTunes tag (`title`, `comment`, `date`, `encoder`...).
    /// Before the first frame: later ones are ignored (false).
    @discardableResult
    public func setTag(_ key: String, _ value: String) -> Bool {
        guard !headerWritten, !closed else { return false }
        return av.av_dict_set(&formatContext.pointee.metadata, key, value, 0) >= 0
    }

    private func writeHeaderIfNeeded() throws(MPEG4Error) {
        guard !headerWritten else { return }
        headerWritten = true
        try remembering { () throws(MPEG4Error) in
            var options: OpaquePointer?
            defer { av.av_dict_free(&options) }
            // empty_moov: fragmented from the start. delay_moov: the moov waits for the first
            // fragment, so its edit list knows the encoder delay (the first packet's negative
            // timestamp). frag_duration: a fragment per second of audio at the latest
            // (frag_keyframe alone would never cut one: every audio packet is a keyframe).
            // Without these options the file would not survive a crash: their failure is the header's.
            for (key, value) in [("movflags", "empty_moov+delay_moov+default_base_moof"),
                                 ("frag_duration", String(Int(fragmentDuration * 1_000_000))),
                                 ("movie_timescale", String(sampleRate))] {
                try check(av.av_dict_set(&options, key, value, 0), "cannot write the MP4 header", path: path)
            }
            try check(av.avformat_write_header(formatContext, &options), "cannot write the MP4 header", path: path)
            try flushToFile()
            headerLength = completeLength
        }
    }

    /// Interleaved 16-bit samples.
    public func write(_ samples: UnsafePointer<Int16>, frames: Int) throws(MPEG4Error) {
        switch planeFormat {
        case .float: try append(samples, frames: frames) { Float($0) * (1 / 32768) }
        case .int16: try append(samples, frames: frames) { $0 }
        case .int32: try append(samples, frames: frames) { Int32($0) << 16 }
        }
    }

    /// Interleaved 32-bit samples (24-bit data in the top bits, as ALSA delivers it).
    public func write(_ samples: UnsafePointer<Int32>, frames: Int) throws(MPEG4Error) {
        switch planeFormat {
        case .float: try append(samples, frames: frames) { Float($0) * (1 / 2_147_483_648) }
        case .int16: try append(samples, frames: frames) { Int16(truncatingIfNeeded: $0 >> 16) }
        case .int32: try append(samples, frames: frames) { $0 }
        }
    }

    /// Interleaved float samples in -1...1; integer codecs saturate outside it (and take NaN as 0).
    public func write(_ samples: UnsafePointer<Float>, frames: Int) throws(MPEG4Error) {
        switch planeFormat {
        case .float: try append(samples, frames: frames) { $0 }
        case .int16: try append(samples, frames: frames) { Int16(Self.saturated($0 * 32768, limit: 32767)) }
        case .int32: try append(samples, frames: frames) { Int32(Self.saturated($0 * 8_388_608, limit: 8_388_607)) << 8 }
        }
    }

    @inline(__always)
    private static func saturated(_ value: Float, limit: Float) -> Float {
        value.isNaN ? 0 : Swift.max(-limit - 1, Swift.min(limit, value.rounded()))
    }

    /// De-interleaves into the encoder's block, encoding each block as it fills.
    @inline(__always)
    private func append<Source, Target>(_ source: UnsafePointer<Source>, frames: Int,
                                        _ convert: (Source) -> Target) throws(MPEG4Error) {
        if let failure { throw failure }
        if !headerWritten { try writeHeaderIfNeeded() }
        var done = 0
        while done < frames {
            if filled == 0 {
                try check(av.av_frame_make_writable(frame), "cannot allocate a sample buffer", path: path)
            }
            let count = Swift.min(blockFrames - filled, frames - done)
            for channel in 0..<channels {
                let plane = UnsafeMutableRawPointer(frame.pointee.extended_data[channel]!).assumingMemoryBound(to: Target.self)
                var input = source + (done * channels + channel)
                for index in filled..<(filled + count) {
                    plane[index] = convert(input.pointee)
                    input += channels
                }
            }
            filled += count
            done += count
            if filled == blockFrames { try encodeBlock() }
        }
    }

    private func encodeBlock() throws(MPEG4Error) {
        frame.pointee.nb_samples = Int32(filled)
        frame.pointee.pts = nextTimestamp
        nextTimestamp += Int64(filled)
        filled = 0
        try remembering { () throws(MPEG4Error) in
            try check(av.avcodec_send_frame(codecContext, frame), "the \(codec.encoderName) encoder failed", path: path)
            try writeEncodedPackets()
        }
    }

    /// Muxes what the encoder has ready. A packet that completes a fragment writes it out.
    private func writeEncodedPackets() throws(MPEG4Error) {
        while true {
            let received = av.avcodec_receive_packet(codecContext, packet)
            if received == recd_averror(EAGAIN) || received == recd_averror_eof() { return }
            try check(received, "the \(codec.encoderName) encoder failed", path: path)
            packet.pointee.stream_index = stream.pointee.index
            av.av_packet_rescale_ts(packet, codecContext.pointee.time_base, stream.pointee.time_base)
            let written = av.av_write_frame(formatContext, packet)
            av.av_packet_unref(packet)
            try check(written, "cannot write", path: path)
            packetsWritten += 1
            if packetsWritten == 1 {
                // The first packet tells the delayed moov the encoder delay: write it now, so
                // that a file killed in its first second is readable too.
                try check(av.av_write_frame(formatContext, nil), "cannot write", path: path)
            }
            try flushToFile()
        }
    }

    /// Hands libavformat's buffer to the kernel: after this the file ends at a fragment boundary.
    private func flushToFile() throws(MPEG4Error) {
        let pb = formatContext.pointee.pb!
        av.avio_flush(pb)
        if pb.pointee.error < 0 { throw MPEG4Error(path: path, message: "cannot write", code: pb.pointee.error) }
        completeLength = av.avio_seek(pb, 0, SEEK_CUR)
    }

    private func remembering(_ body: () throws(MPEG4Error) -> Void) throws(MPEG4Error) {
        do throws(MPEG4Error) { try body() } catch {
            failure = failure ?? error
            throw error
        }
    }

    /// Cuts a fragment now, so that everything muxed so far is in the file. Called at every
    /// sync; a failure is reported by the next write.
    public func checkpoint() {
        // Before the first packet, the delayed moov would not know the encoder delay yet.
        guard failure == nil, !closed, packetsWritten > 0 else { return }
        try? remembering { () throws(MPEG4Error) in
            // With delay_moov the first cut writes only the moov and keeps the samples for the
            // next one: until the moov is out the file is no longer than its header.
            if completeLength == headerLength {
                try check(av.av_write_frame(formatContext, nil), "cannot write", path: path)
            }
            try check(av.av_write_frame(formatContext, nil), "cannot write", path: path)
            try flushToFile()
        }
    }

    /// Flushes written data to the disk. Safe to call from a thread other than the writer's.
    public func sync() throws(MPEG4Error) {
        if fsync(syncDescriptor) != 0 { throw .system(path: path, message: "fsync failed") }
    }

    /// Closes the file as it is, without encoding the rest or rewriting it: for a file about
    /// to be deleted.
    public func discard() {
        guard !closed else { return }
        closed = true
        resources.release()
        Glibc.close(syncDescriptor)
    }

    /// Encodes what is left, finishes the fragmented file, and rewrites it as a regular MP4
    /// (`moov` first). After a write error the file is cut back to its last whole fragment and
    /// the error is thrown; the rewrite is still tried, and if it fails too (a full disk) the
    /// file stays fragmented, which players read as well.
    public func close() throws(MPEG4Error) {
        guard !closed else { return }
        closed = true
        if failure == nil { try? writeHeaderIfNeeded() }
        if failure == nil {
            try? remembering { () throws(MPEG4Error) in
                if filled > 0 { try encodeBlock() }
                try check(av.avcodec_send_frame(codecContext, nil), "the \(codec.encoderName) encoder failed", path: path)
                try writeEncodedPackets()
                try check(av.av_write_trailer(formatContext), "cannot finish the file", path: path)
                try flushToFile()
            }
        }
        resources.release()
        var firstError = failure
        if failure != nil, ftruncate(syncDescriptor, off_t(completeLength)) != 0 {
            firstError = firstError ?? .system(path: path, message: "cannot cut the file back to its last whole fragment")
        }
        if fsync(syncDescriptor) != 0 {
            firstError = firstError ?? .system(path: path, message: "fsync failed")
        }
        Glibc.close(syncDescriptor)
        if packetsWritten > 0 {
            do throws(MPEG4Error) {
                // Every frame handed to the encoder is in the file: nextTimestamp counts them.
                try MPEG4FileRewriter.makeRegular(path: path, frames: failure == nil ? nextTimestamp : nil, sampleRate: sampleRate)
            } catch {
                firstError = firstError ?? MPEG4Error(
                    path: path, message: "has all its audio but stays fragmented: \(error.message) at \(error.path)",
                    errno: error.errno, reason: error.reason)
            }
        }
        if let firstError { throw firstError }
    }
}

/// FFmpeg objects freed together; each is optional so a half-built writer frees what it has.
final class FFmpegResources {
    let av: recd_ffmpeg
    var codecContext: UnsafeMutablePointer<AVCodecContext>?
    var outputContext: UnsafeMutablePointer<AVFormatContext>?
    var frame: UnsafeMutablePointer<AVFrame>?
    var packet: UnsafeMutablePointer<AVPacket>?
    var pendingPacket: UnsafeMutablePointer<AVPacket>?

    init(_ av: recd_ffmpeg) { self.av = av }

    func release() {
        if codecContext != nil { av.avcodec_free_context(&codecContext) }
        if frame != nil { av.av_frame_free(&frame) }
        if packet != nil { av.av_packet_free(&packet) }
        if pendingPacket != nil { av.av_packet_free(&pendingPacket) }
        if let context = outputContext {
            // After close (already flushed and checked) or after a failure (already reported).
            if context.pointee.pb != nil { _ = av.avio_closep(&context.pointee.pb) }
            av.avformat_free_context(context)
            outputContext = nil
        }
    }

    deinit { release() }
}
