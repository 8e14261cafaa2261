import CFFmpeg
import Glibc

/// Rewrites a fragmented MP4 (or any MP4 libavformat reads) as a regular one with `moov`
/// before `mdat`, copying the packets and their timestamps as they are.
public enum MPEG4FileRewriter {
    /// Replaces `path` by its regular form: written next to it under a hidden name, synced,
    /// then renamed over it, so a crash at any point leaves one whole file. A fragmented file
    /// cut short (a crash, a full disk) keeps every whole packet before the cut.
    ///
    /// `frames`, when the writer knows it (a file it closed): the audio's exact length at
    /// `sampleRate`, which ends the last packet. Otherwise the track's declared duration does,
    /// which libavformat 7 reads from a fragmented file as whole blocks (an .m4a of 96 000
    /// frames came out declaring 96 256, the padding of its last AAC block).
    public static func makeRegular(path: String, frames: Int64? = nil, sampleRate: Int? = nil) throws(MPEG4Error) {
        let av = try loadFFmpeg(for: path)
        let temporary = temporaryPath(for: path)
        unlink(temporary)  // a previous attempt's leftover
        var input: UnsafeMutablePointer<AVFormatContext>?
        try check(av.avformat_open_input(&input, path, nil, nil), "cannot read", path: path)
        defer { av.avformat_close_input(&input) }
        guard let input else { throw MPEG4Error(path: path, message: "cannot read") }
        try check(av.avformat_find_stream_info(input, nil), "cannot read the stream description", path: path)
        let index = try check(av.av_find_best_stream(input, AVMEDIA_TYPE_AUDIO, -1, -1, nil, 0), "has no audio stream", path: path)
        let inputStream = input.pointee.streams[Int(index)]!

        let resources = FFmpegResources(av)
        do throws(MPEG4Error) {
            var created: UnsafeMutablePointer<AVFormatContext>?
            try check(av.avformat_alloc_output_context2(&created, nil, "ipod", temporary), "cannot set up the MP4 muxer", path: temporary)
            guard let output = created else { throw MPEG4Error(path: temporary, message: "cannot set up the MP4 muxer") }
            resources.outputContext = output
            guard let stream = av.avformat_new_stream(output, nil) else { throw MPEG4Error(path: temporary, message: "out of memory") }
            try check(av.avcodec_parameters_copy(stream.pointee.codecpar, inputStream.pointee.codecpar), "cannot copy the stream description", path: temporary)
            stream.pointee.codecpar.pointee.codec_tag = 0
            stream.pointee.time_base = inputStream.pointee.time_base
            guard let packet = av.av_packet_alloc(), let pending = av.av_packet_alloc() else {
                throw MPEG4Error(path: temporary, message: "out of memory")
            }
            resources.packet = packet
            resources.pendingPacket = pending
            // The tags (the first frame's time among them) go along; the muxer writes its own encoder.
            try check(av.av_dict_copy(&output.pointee.metadata, input.pointee.metadata, 0), "cannot copy the tags", path: temporary)
            try check(av.avio_open(&output.pointee.pb, temporary, AVIO_FLAG_WRITE), "cannot create", path: temporary)
            var options: OpaquePointer?
            defer { av.av_dict_free(&options) }
            // faststart: a second pass moves the moov in front of the mdat. A movie timescale of
            // the sample rate makes the edit list's duration exact to the frame.
            for (key, value) in [("movflags", "faststart"), ("movie_timescale", String(inputStream.pointee.codecpar.pointee.sample_rate))] {
                try check(av.av_dict_set(&options, key, value, 0), "cannot write the MP4 header", path: temporary)
            }
            try check(av.avformat_write_header(output, &options), "cannot write the MP4 header", path: temporary)
            // Each packet is written once the next one is read: libavformat 5.1 does not report
            // a fragment's per-sample durations, and the muxer takes the last sample's (the
            // block the encoder padded) from its packet, so it is set from where the next
            // one starts, and the last one's from where the track ends.
            var packets = 0
            func writePending(duration: Int64) throws(MPEG4Error) {
                if duration > 0 { pending.pointee.duration = duration }
                pending.pointee.stream_index = stream.pointee.index
                pending.pointee.pos = -1
                av.av_packet_rescale_ts(pending, inputStream.pointee.time_base, stream.pointee.time_base)
                let written = av.av_write_frame(output, pending)
                av.av_packet_unref(pending)
                try check(written, "cannot write", path: temporary)
            }
            // Read to the end, or to the first damaged fragment (the cut a crash left).
            while av.av_read_frame(input, packet) >= 0 {
                guard packet.pointee.stream_index == index else {
                    av.av_packet_unref(packet)
                    continue
                }
                // A packet cut short by the end of the file (a torn last fragment) is left out.
                if packet.pointee.flags & AV_PKT_FLAG_CORRUPT != 0 {
                    av.av_packet_unref(packet)
                    break
                }
                if packets > 0 { try writePending(duration: packet.pointee.dts - pending.pointee.dts) }
                av.av_packet_move_ref(pending, packet)
                packets += 1
            }
            guard packets > 0 else { throw MPEG4Error(path: path, message: "holds no audio") }
            // The track's end: its declared duration counts from the first packet's timestamp
            // (negative by the encoder delay). Trusted only if it ends within the last packet.
            let start = inputStream.pointee.start_time == recd_av_nopts_value() ? 0 : inputStream.pointee.start_time
            let timeBase = inputStream.pointee.time_base
            if let frames, let sampleRate, timeBase.num > 0, sampleRate > 0 {
                // The first frame is at timestamp 0 (the encoder delay before it is negative).
                let end = frames * Int64(timeBase.den) / (Int64(timeBase.num) * Int64(sampleRate))
                let lastDuration = end - pending.pointee.dts
                try writePending(duration: lastDuration > 0 ? lastDuration : 0)
            } else {
                let end = start + inputStream.pointee.duration
                let lastDuration = end - pending.pointee.dts
                let trusted = inputStream.pointee.duration != recd_av_nopts_value()
                    && lastDuration > 0 && (pending.pointee.duration <= 0 || lastDuration <= pending.pointee.duration)
                try writePending(duration: trusted ? lastDuration : 0)
            }
            try check(av.av_write_trailer(output), "cannot finish the file", path: temporary)
            if output.pointee.pb.pointee.error < 0 {
                throw MPEG4Error(path: temporary, message: "cannot write", code: output.pointee.pb.pointee.error)
            }
            resources.release()
            try syncFile(temporary)
            guard rename(temporary, path) == 0 else {
                throw .system(path: path, message: "cannot replace it with its rewritten form")
            }
        } catch {
            resources.release()
            unlink(temporary)
            throw error
        }
    }

    /// Where the rewrite is written first: hidden (a leading dot), so listings and crash
    /// recovery pass it by.
    static func temporaryPath(for path: String) -> String {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { String(path[...$0]) } ?? ""
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        return directory + "." + name + ".rewrite"
    }

    private static func syncFile(_ path: String) throws(MPEG4Error) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .system(path: path, message: "cannot open to sync") }
        defer { close(fd) }
        if fsync(fd) != 0 { throw .system(path: path, message: "fsync failed") }
    }
}

/// The layout of an MP4 file: its top-level boxes in order.
public enum MPEG4Layout {
    /// The four-character types of the top-level boxes (`ftyp`, `moov`, `mdat`, `moof`...),
    /// read from the 8-byte (or 16-byte, for 64-bit sizes) box headers. Stops at a header
    /// that runs past the end of the file.
    public static func topLevelBoxes(path: String) throws(MPEG4Error) -> [String] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .system(path: path, message: "cannot open") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .system(path: path, message: "cannot stat") }
        let length = Int64(info.st_size)
        var offset: Int64 = 0
        var boxes: [String] = []
        var header = [UInt8](repeating: 0, count: 16)
        while offset + 8 <= length {
            let got = header.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 16, off_t(offset)) }
            guard got >= 8 else { break }
            var size = header[0..<4].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            let type = String(decoding: header[4..<8], as: UTF8.self)
            if size == 1 {
                guard got >= 16 else { break }
                size = header[8..<16].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            } else if size == 0 {
                size = length - offset  // to the end of the file
            }
            guard size >= 8 else { break }
            boxes.append(type)
            offset += size
        }
        return boxes
    }

    /// Whether the file is fragmented (`moof` boxes) or has its `moov` after the `mdat`:
    /// either way, not what a player expecting a regular, progressive file can stream.
    public static func needsRewrite(path: String) throws(MPEG4Error) -> Bool {
        let boxes = try topLevelBoxes(path: path)
        guard let moov = boxes.firstIndex(of: "moov") else { return true }
        if boxes.contains("moof") { return true }
        if let mdat = boxes.firstIndex(of: "mdat"), mdat < moov { return true }
        return false
    }
}

/// What an `.m4a` file holds, as libavformat reads it.
public struct MPEG4AudioInfo: Sendable, Equatable {
    /// FFmpeg's codec name: "aac", "alac"...
    public var codecName: String
    public var sampleRate: Int
    public var channels: Int
    /// The declared length in frames: the edit list's, without the encoder delay.
    public var frames: Int64
    /// The file's tags as libavformat reads them (`creation_time`, `date`, `title`...).
    public var tags: [String: String]

    public init(path: String) throws(MPEG4Error) {
        let av = try loadFFmpeg(for: path)
        var input: UnsafeMutablePointer<AVFormatContext>?
        try check(av.avformat_open_input(&input, path, nil, nil), "cannot read", path: path)
        defer { av.avformat_close_input(&input) }
        guard let input else { throw MPEG4Error(path: path, message: "cannot read") }
        try check(av.avformat_find_stream_info(input, nil), "cannot read the stream description", path: path)
        let index = try check(av.av_find_best_stream(input, AVMEDIA_TYPE_AUDIO, -1, -1, nil, 0), "has no audio stream", path: path)
        let stream = input.pointee.streams[Int(index)]!
        var tags: [String: String] = [:]
        var entry: UnsafeMutablePointer<AVDictionaryEntry>?
        while let next = av.av_dict_get(input.pointee.metadata, "", entry, AV_DICT_IGNORE_SUFFIX) {
            tags[String(cString: next.pointee.key)] = String(cString: next.pointee.value)
            entry = next
        }
        self.tags = tags
        let parameters = stream.pointee.codecpar.pointee
        codecName = av.avcodec_get_name(parameters.codec_id).map { String(cString: $0) } ?? "unknown"
        sampleRate = Int(parameters.sample_rate)
        channels = Int(parameters.ch_layout.nb_channels)
        let timeBase = stream.pointee.time_base
        var duration = stream.pointee.duration
        if duration == recd_av_nopts_value() {
            duration = 0
        } else if stream.pointee.start_time != recd_av_nopts_value(), stream.pointee.start_time < 0 {
            // A fragmented file: its duration counts the encoder delay before time 0.
            duration += stream.pointee.start_time
        }
        frames = timeBase.den > 0
            ? (Int64(duration) * Int64(timeBase.num) * Int64(sampleRate) + Int64(timeBase.den) / 2) / Int64(timeBase.den)
            : 0
    }

    public var duration: Double { sampleRate > 0 ? Double(frames) / Double(sampleRate) : 0 }
}
