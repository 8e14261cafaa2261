import CFFmpeg
import Glibc

/// A PNG file from 8-bit RGB pixels: libavcodec's PNG encoder (FFmpeg's libraries are this
/// module's), for recd-web's spectrogram pictures.
public enum PNGEncoder {
    /// `pixels`: `height` rows of `width` RGB triples, top row first.
    public static func encode(rgb pixels: [UInt8], width: Int, height: Int) throws(MPEG4Error) -> [UInt8] {
        let name = "png picture"
        guard width > 0, height > 0, pixels.count == width * height * 3 else {
            throw MPEG4Error(path: name, message: "\(pixels.count) bytes are not \(width)×\(height) RGB pixels")
        }
        let av = try loadFFmpeg(for: name)
        let resources = FFmpegResources(av)
        defer { resources.release() }
        guard let encoder = av.avcodec_find_encoder_by_name("png") else {
            throw MPEG4Error(path: name, message: "this FFmpeg has no PNG encoder")
        }
        guard let context = av.avcodec_alloc_context3(encoder) else { throw MPEG4Error(path: name, message: "out of memory") }
        resources.codecContext = context
        context.pointee.width = Int32(width)
        context.pointee.height = Int32(height)
        context.pointee.pix_fmt = AV_PIX_FMT_RGB24
        context.pointee.time_base = AVRational(num: 1, den: 1)
        try check(av.avcodec_open2(context, encoder, nil), "cannot open the PNG encoder", path: name)
        guard let frame = av.av_frame_alloc(), let packet = av.av_packet_alloc() else { throw MPEG4Error(path: name, message: "out of memory") }
        resources.frame = frame
        resources.packet = packet
        frame.pointee.width = Int32(width)
        frame.pointee.height = Int32(height)
        frame.pointee.format = AV_PIX_FMT_RGB24.rawValue
        try check(av.av_frame_get_buffer(frame, 0), "cannot allocate a picture", path: name)
        // The frame's rows may be padded (linesize): copied row by row.
        let stride = Int(frame.pointee.linesize.0)
        let rows = UnsafeMutableRawPointer(frame.pointee.data.0!)
        pixels.withUnsafeBytes { source in
            for row in 0..<height {
                (rows + row * stride).copyMemory(from: source.baseAddress! + row * width * 3, byteCount: width * 3)
            }
        }
        frame.pointee.pts = 0
        try check(av.avcodec_send_frame(context, frame), "the PNG encoder failed", path: name)
        try check(av.avcodec_send_frame(context, nil), "the PNG encoder failed", path: name)
        var file: [UInt8] = []
        while true {
            let received = av.avcodec_receive_packet(context, packet)
            if received == recd_averror(EAGAIN) || received == recd_averror_eof() { break }
            try check(received, "the PNG encoder failed", path: name)
            file += UnsafeBufferPointer(start: packet.pointee.data, count: Int(packet.pointee.size))
            av.av_packet_unref(packet)
        }
        guard !file.isEmpty else { throw MPEG4Error(path: name, message: "the PNG encoder gave nothing") }
        return file
    }
}
