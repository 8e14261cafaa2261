import CFFmpeg
import Glibc

/// Decodes a file's audio with FFmpeg (an .m4a's AAC or ALAC, an .mp3) to interleaved floats
/// in -1...1, in order, for the web page's spectrogram of a file. libsndfile reads the other
/// formats; its MP3 decoding (1.2.0, Debian 12) clips: a tone at -12 dBFS read back at 0 dBFS.
public final class FFmpegReader {
    public let path: String
    public private(set) var sampleRate = 0
    public private(set) var channels = 0
    /// The track's length by its declared duration (exact for the files recd writes).
    public private(set) var frames: Int64 = 0

    private let av: recd_ffmpeg
    private var input: UnsafeMutablePointer<AVFormatContext>?
    private var codec: UnsafeMutablePointer<AVCodecContext>?
    private var packet: UnsafeMutablePointer<AVPacket>?
    private var frame: UnsafeMutablePointer<AVFrame>?
    private var stream: Int32 = -1
    private var draining = false
    private var ended = false

    public init(path: String) throws(MPEG4Error) {
        self.path = path
        av = try loadFFmpeg(for: path)
        try check(av.avformat_open_input(&input, path, nil, nil), "cannot read", path: path)
        guard let input else { throw MPEG4Error(path: path, message: "cannot read") }
        do throws(MPEG4Error) {
            try check(av.avformat_find_stream_info(input, nil), "cannot read the stream description", path: path)
            var decoder: UnsafePointer<AVCodec>?
            stream = try check(av.av_find_best_stream(input, AVMEDIA_TYPE_AUDIO, -1, -1, &decoder, 0), "has no audio stream", path: path)
            guard let decoder, let context = av.avcodec_alloc_context3(decoder) else {
                throw MPEG4Error(path: path, message: "has no decoder for its audio")
            }
            codec = context
            let parameters = input.pointee.streams[Int(stream)]!.pointee.codecpar!
            try check(av.avcodec_parameters_to_context(context, parameters), "cannot set up its decoder", path: path)
            try check(av.avcodec_open2(context, decoder, nil), "cannot open its decoder", path: path)
            guard let packet = av.av_packet_alloc(), let frame = av.av_frame_alloc() else {
                throw MPEG4Error(path: path, message: "out of memory")
            }
            self.packet = packet
            self.frame = frame
            sampleRate = Int(context.pointee.sample_rate)
            channels = Int(context.pointee.ch_layout.nb_channels)
            let track = input.pointee.streams[Int(stream)]!.pointee
            let timeBase = track.time_base
            frames = track.duration == recd_av_nopts_value() || timeBase.den == 0 ? 0
                : track.duration * Int64(timeBase.num) * Int64(sampleRate) / Int64(timeBase.den)
        } catch {
            release()
            throw error
        }
    }

    deinit { release() }

    private func release() {
        av.av_frame_free(&frame)
        av.av_packet_free(&packet)
        av.avcodec_free_context(&codec)
        av.avformat_close_input(&input)
    }

    /// Appends the next decoded frames to `samples` (interleaved); false once the file ended.
    public func read(into samples: inout [Float]) throws(MPEG4Error) -> Bool {
        guard let input, let codec, let packet, let frame else { return false }
        while !ended {
            let received = av.avcodec_receive_frame(codec, frame)
            if received >= 0 {
                append(frame.pointee, to: &samples)
                return true
            }
            if received == recd_averror_eof() { ended = true; break }
            guard received == recd_averror(EAGAIN) else { try check(received, "cannot decode", path: path); break }
            if draining { ended = true; break }
            if av.av_read_frame(input, packet) < 0 {
                // The end: what the decoder still holds comes out after a flush.
                draining = true
                _ = av.avcodec_send_packet(codec, nil)
                continue
            }
            defer { av.av_packet_unref(packet) }
            guard packet.pointee.stream_index == stream else { continue }
            let sent = av.avcodec_send_packet(codec, packet)
            if sent < 0, sent != recd_averror(EAGAIN) { try check(sent, "cannot decode", path: path) }
        }
        return false
    }

    /// A decoded frame as interleaved floats, whatever layout the decoder gave (AAC: planar
    /// float; ALAC: planar 16- or 32-bit integers).
    private func append(_ frame: AVFrame, to samples: inout [Float]) {
        let count = Int(frame.nb_samples), channels = self.channels
        let format = AVSampleFormat(rawValue: frame.format)
        let planar = [AV_SAMPLE_FMT_FLTP, AV_SAMPLE_FMT_S16P, AV_SAMPLE_FMT_S32P].contains(format)
        let start = samples.count
        samples.append(contentsOf: repeatElement(0, count: count * channels))
        samples.withUnsafeMutableBufferPointer { out in
            for channel in 0..<channels {
                guard let plane = planar ? frame.extended_data[channel] : frame.extended_data[0] else { continue }
                for index in 0..<count {
                    let at = planar ? index : index * channels + channel
                    let value: Float = switch format {
                    case AV_SAMPLE_FMT_FLTP, AV_SAMPLE_FMT_FLT: UnsafeRawPointer(plane).load(fromByteOffset: at * 4, as: Float.self)
                    case AV_SAMPLE_FMT_S16P, AV_SAMPLE_FMT_S16: Float(UnsafeRawPointer(plane).load(fromByteOffset: at * 2, as: Int16.self)) / 32768
                    case AV_SAMPLE_FMT_S32P, AV_SAMPLE_FMT_S32: Float(UnsafeRawPointer(plane).load(fromByteOffset: at * 4, as: Int32.self)) / 2_147_483_648
                    default: 0
                    }
                    out[start + index * channels + channel] = value
                }
            }
        }
    }
}
