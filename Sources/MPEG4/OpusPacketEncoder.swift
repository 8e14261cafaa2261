import CFFmpeg
import Glibc

/// Opus packets for RTP (RFC 7587) from interleaved 16-bit audio at 48 kHz, 20 ms each:
/// libavcodec's libopus encoder (FFmpeg's libraries are this module's), for recd-rtsp's Opus
/// stream. Each packet carries the position of its audio in the input's frames, so that a gap
/// in the input is a gap in the packets' RTP timestamps.
public final class OpusPacketEncoder {
    public static let rate = 48000
    public let channels: Int
    /// Frames per packet: 960 (20 ms).
    public let frameSize: Int
    private let av: recd_ffmpeg
    private let resources: FFmpegResources
    private let context: UnsafeMutablePointer<AVCodecContext>
    private let frame: UnsafeMutablePointer<AVFrame>
    private let packet: UnsafeMutablePointer<AVPacket>
    /// Samples waiting for a whole frame, and the position of the first.
    private var pending: [Int16] = []
    private var pendingPosition: UInt64 = 0
    /// The encoder's delay (libopus's pre-skip): libavcodec dates packets this much earlier.
    private let delay: Int64

    public struct Packet: Sendable {
        /// The input position (48 kHz frames) its audio begins at.
        public var position: UInt64
        public var bytes: [UInt8]
    }

    public init(channels: Int, bitRate: Int) throws(MPEG4Error) {
        let name = "opus stream"
        let av = try loadFFmpeg(for: name)
        self.av = av
        self.channels = channels
        let resources = FFmpegResources(av)
        guard let encoder = av.avcodec_find_encoder_by_name("libopus") else {
            throw MPEG4Error(path: name, message: "this FFmpeg has no libopus encoder")
        }
        guard let context = av.avcodec_alloc_context3(encoder) else { throw MPEG4Error(path: name, message: "out of memory") }
        resources.codecContext = context
        context.pointee.sample_rate = Int32(Self.rate)
        av.av_channel_layout_default(&context.pointee.ch_layout, Int32(channels))
        context.pointee.time_base = AVRational(num: 1, den: Int32(Self.rate))
        context.pointee.sample_fmt = AV_SAMPLE_FMT_S16
        context.pointee.bit_rate = Int64(bitRate)
        try check(av.avcodec_open2(context, encoder, nil), "cannot open the libopus encoder (\(channels) channel(s), \(bitRate) bit/s)", path: name)
        frameSize = Int(context.pointee.frame_size)
        delay = Int64(context.pointee.initial_padding)
        guard let frame = av.av_frame_alloc(), let packet = av.av_packet_alloc() else { throw MPEG4Error(path: name, message: "out of memory") }
        resources.frame = frame
        resources.packet = packet
        frame.pointee.nb_samples = Int32(frameSize)
        frame.pointee.format = AV_SAMPLE_FMT_S16.rawValue
        frame.pointee.sample_rate = Int32(Self.rate)
        try check(av.av_channel_layout_copy(&frame.pointee.ch_layout, &context.pointee.ch_layout), "out of memory", path: name)
        try check(av.av_frame_get_buffer(frame, 0), "cannot allocate a sample buffer", path: name)
        self.context = context
        self.frame = frame
        self.packet = packet
        self.resources = resources
        pending.reserveCapacity(frameSize * channels)
    }

    /// Encodes `samples` (interleaved, `channels` per frame) that begin at input `position`;
    /// returns the packets that are complete. A position that does not follow the samples before
    /// starts afresh there (the unfinished frame before it is padded with silence).
    public func encode(_ samples: UnsafeBufferPointer<Int16>, position: UInt64) throws(MPEG4Error) -> [Packet] {
        var packets: [Packet] = []
        let expected = pendingPosition + UInt64(pending.count / channels)
        if !pending.isEmpty, position != expected {
            pending += repeatElement(0, count: frameSize * channels - pending.count)
            try encodeFrame(into: &packets)
        }
        if pending.isEmpty { pendingPosition = position }
        var offset = 0
        while offset < samples.count {
            let take = min(frameSize * channels - pending.count, samples.count - offset)
            pending += samples[offset..<(offset + take)]
            offset += take
            if pending.count == frameSize * channels { try encodeFrame(into: &packets) }
        }
        return packets
    }

    private func encodeFrame(into packets: inout [Packet]) throws(MPEG4Error) {
        try check(av.av_frame_make_writable(frame), "cannot allocate a sample buffer", path: "opus stream")
        pending.withUnsafeBytes { bytes in
            UnsafeMutableRawPointer(frame.pointee.data.0!).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        }
        frame.pointee.pts = Int64(bitPattern: pendingPosition)
        pendingPosition += UInt64(frameSize)
        pending.removeAll(keepingCapacity: true)
        try check(av.avcodec_send_frame(context, frame), "the libopus encoder failed", path: "opus stream")
        while true {
            let received = av.avcodec_receive_packet(context, packet)
            if received == recd_averror(EAGAIN) || received == recd_averror_eof() { return }
            try check(received, "the libopus encoder failed", path: "opus stream")
            let data = UnsafeBufferPointer(start: packet.pointee.data, count: Int(packet.pointee.size))
            // libavcodec dates a packet by its audio less the encoder's delay: the input's
            // position is that plus the delay (the first packet's is the first sample's).
            packets.append(Packet(position: UInt64(bitPattern: max(0, packet.pointee.pts + delay)), bytes: Array(data)))
            av.av_packet_unref(packet)
        }
    }
}
