import Glibc
import SystemPackage

/// Why a crash-left file was not repaired. The file is then left exactly as it was.
public enum CrashedFileRepairError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The file is not laid out the way recd's writer leaves it (another program's file, a
    /// damaged header): nothing is changed on a guess.
    case unexpectedLayout(String)
    /// A system call failed (open, mmap, pwrite, ftruncate, fsync): its errno.
    case system(String, Errno)

    public var description: String {
        switch self {
        case .unexpectedLayout(let why): "unexpected layout: \(why)"
        case .system(let call, let errno): "\(call): \(errno)"
        }
    }
}

/// What a repair changes: bytes written over the file in place and, at most, a tail that holds
/// no whole frame cut off. Small (a header, a few bytes), so the old bytes can be kept and put
/// back if the repaired file turns out not to read.
public struct CrashedFilePatch: Equatable, Sendable {
    public var writes: [(offset: Int, bytes: [UInt8])]
    /// The length to cut the file to (a partial last frame a decoder would stumble on).
    public var truncateTo: Int?
    /// The frames the repaired file holds, as the format counts them.
    public var frames: Int64

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.truncateTo == rhs.truncateTo && lhs.frames == rhs.frames
            && lhs.writes.map(\.offset) == rhs.writes.map(\.offset) && lhs.writes.map(\.bytes) == rhs.writes.map(\.bytes)
    }
}

/// Gives a file that recd's libsndfile writer left unfinished (the daemon was killed, the
/// machine lost power) the length of the audio it really holds. libsndfile writes each
/// format's length only at `sf_close`, or, for WAV and CAF, at recd's once-a-second header
/// refresh, so after a crash:
///
/// - **WAV (RF64 while recording) and CAF**: the header counts the data up to the last
///   refresh; the audio written after it (up to a second) is there but unlisted and, for most
///   readers, unplayed. The sizes are set from the data really on disk, rounded down to whole
///   frames. A WAV small enough is given the plain RIFF header `sf_close` would have written
///   (libsndfile's RF64 auto-downgrade), so every WAV reader plays it.
/// - **FLAC**: STREAMINFO's total-samples is 0 ("unknown"; libsndfile then reports
///   SF_COUNT_MAX frames). The frames are walked, each checked by its header CRC-8 and its
///   CRC-16, and the total of the whole ones written into STREAMINFO; a torn last frame is cut.
/// - **MP3**: LAME leaves a blank first frame for the Xing/Info tag it writes at close, so a
///   reader can only estimate the length from the file's size. The frames are counted and
///   the tag LAME would have written is put into that frame: frame and byte counts, a seek
///   table, and the LAME extension with the encoder delay, so that every gapless decoder
///   (FFmpeg, mpg123 under libsndfile) plays the same number of samples.
///
/// Nothing here re-encodes: a patch of a few bytes takes the same time for an hour-long file
/// as for a short one but for the one read of the file, so recd's start-up (systemd waits for
/// READY) stays short. Any doubt (a layout recd's writer does not leave) throws, and the
/// caller leaves the file as it was.
public enum CrashedFileRepair {
    /// The patch that gives the file at `path` its real length; nil when it needs none.
    public static func patch(forFileAt path: String, fileExtension: String) throws(CrashedFileRepairError) -> CrashedFilePatch? {
        let file = try MappedFile(path: path)
        let bytes = file.bytes
        switch fileExtension {
        case "wav": return try waveSizes(bytes)
        case "caf": return try coreAudioSizes(bytes)
        case "flac": return try flacTotalSamples(bytes)
        case "mp3": return try mp3InfoTag(bytes)
        default: return nil
        }
    }

    /// Writes `patch` into the file and flushes it. Returns what it overwrote, for `undo`.
    public static func apply(_ patch: CrashedFilePatch, toFileAt path: String) throws(CrashedFileRepairError) -> CrashedFilePatch {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw .system("open \(path)", Errno(rawValue: errno)) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .system("fstat \(path)", Errno(rawValue: errno)) }
        let size = Int(info.st_size)
        var undo = CrashedFilePatch(writes: [], truncateTo: nil, frames: 0)
        for write in patch.writes {
            // A write past the end (a pad byte) is undone by cutting the file back to its size.
            var old = [UInt8](repeating: 0, count: max(0, min(write.bytes.count, size - write.offset)))
            guard pread(fd, &old, old.count, off_t(write.offset)) == old.count else { throw .system("pread \(path)", Errno(rawValue: errno)) }
            undo.writes.append((write.offset, old))
            if write.offset + write.bytes.count > size { undo.truncateTo = size }
        }
        if let length = patch.truncateTo, length < size {
            // The cut tail is kept in the undo as a write past the new end.
            var tail = [UInt8](repeating: 0, count: size - length)
            guard pread(fd, &tail, tail.count, off_t(length)) == tail.count else { throw .system("pread \(path)", Errno(rawValue: errno)) }
            undo.writes.append((length, tail))
        }
        // A write that fails part way (a full disk) puts back what was already written: a
        // repair never leaves a file half-patched.
        func failed(_ call: String) -> CrashedFileRepairError {
            let error = CrashedFileRepairError.system("\(call) \(path)", Errno(rawValue: errno))
            for write in undo.writes { _ = pwrite(fd, write.bytes, write.bytes.count, off_t(write.offset)) }
            if let length = undo.truncateTo { _ = ftruncate(fd, off_t(length)) }
            return error
        }
        // What extends the file first: it is what a full disk refuses, before anything changed.
        for write in patch.writes.sorted(by: { ($0.offset + $0.bytes.count > size ? 0 : 1) < ($1.offset + $1.bytes.count > size ? 0 : 1) }) {
            guard pwrite(fd, write.bytes, write.bytes.count, off_t(write.offset)) == write.bytes.count else { throw failed("pwrite") }
        }
        if let length = patch.truncateTo, length < size, ftruncate(fd, off_t(length)) != 0 {
            throw failed("ftruncate")
        }
        guard fsync(fd) == 0 else { throw .system("fsync \(path)", Errno(rawValue: errno)) }
        return undo
    }

    // MARK: WAV / RF64

    /// libsndfile's RF64 writer (recd's .wav) while recording: `RF64`, a `ds64` chunk with the
    /// 64-bit sizes, `fmt `, maybe `bext`, then `data` (size 0xFFFFFFFF) as the last chunk.
    /// A plain RIFF WAV (data last) is accepted too.
    static func waveSizes(_ bytes: UnsafeRawBufferPointer) throws(CrashedFileRepairError) -> CrashedFilePatch? {
        guard bytes.count >= 12, bytes.ascii(0, 4) == "RF64" || bytes.ascii(0, 4) == "RIFF", bytes.ascii(8, 4) == "WAVE" else {
            throw .unexpectedLayout("not a RIFF/RF64 WAVE file")
        }
        var chunks: [(id: String, offset: Int, size: Int)] = []
        var offset = 12
        var blockAlign = 0
        var dataChunk: (offset: Int, size: Int)?
        while offset + 8 <= bytes.count {
            let id = bytes.ascii(offset, 4)
            let size = Int(bytes.littleEndian(UInt32.self, at: offset + 4))
            chunks.append((id, offset, size))
            if id == "fmt ", offset + 8 + 14 <= bytes.count {
                blockAlign = Int(bytes.littleEndian(UInt16.self, at: offset + 8 + 12))
            }
            if id == "data" {
                dataChunk = (offset, size)
                break
            }
            offset += 8 + size + (size & 1)
        }
        guard let data = dataChunk else { throw .unexpectedLayout("no data chunk") }
        guard blockAlign > 0 else { throw .unexpectedLayout("no fmt chunk before the data") }
        let dataStart = data.offset + 8
        let dataSize = (bytes.count - dataStart) / blockAlign * blockAlign
        let frames = Int64(dataSize / blockAlign)
        let end = dataStart + dataSize
        var writes: [(offset: Int, bytes: [UInt8])] = []
        if end + (dataSize & 1) - 8 < Int(UInt32.max) {
            // RIFF sizes fit: the header libsndfile's auto-downgrade writes at close (`RIFF`,
            // `ds64` turned into `JUNK` of the same size).
            let riffSize = end + (dataSize & 1) - 8
            if bytes.ascii(0, 4) != "RIFF" { writes.append((0, Array("RIFF".utf8))) }
            writes.append((4, UInt32(riffSize).littleEndianBytes))
            if let ds64 = chunks.first(where: { $0.id == "ds64" }) { writes.append((ds64.offset, Array("JUNK".utf8))) }
            writes.append((data.offset + 4, UInt32(dataSize).littleEndianBytes))
        } else {
            guard bytes.ascii(0, 4) == "RF64", let ds64 = chunks.first(where: { $0.id == "ds64" }), ds64.size >= 24 else {
                throw .unexpectedLayout("more than 4 GiB of data without a ds64 chunk")
            }
            writes.append((ds64.offset + 8, UInt64(end + (dataSize & 1) - 8).littleEndianBytes))
            writes.append((ds64.offset + 16, UInt64(dataSize).littleEndianBytes))
            writes.append((ds64.offset + 24, UInt64(frames).littleEndianBytes))
        }
        // Writes that change nothing are dropped: a file already right needs no patch.
        writes = writes.filter { write in write.bytes.enumerated().contains { bytes[write.offset + $0.offset] != $0.element } }
        var fileEnd = end
        if dataSize & 1 == 1 {
            // An odd-sized chunk is followed by a pad byte (RIFF), as `sf_close` writes it.
            if end >= bytes.count || bytes[end] != 0 { writes.append((end, [0])) }
            fileEnd += 1
        }
        let truncate = fileEnd < bytes.count ? fileEnd : nil
        guard !writes.isEmpty || truncate != nil else { return nil }
        return CrashedFilePatch(writes: writes, truncateTo: truncate, frames: frames)
    }

    // MARK: CAF

    /// libsndfile's CAF writer: `caff`, `desc`, then `info`/`free`/..., and `data` last, whose
    /// 64-bit size counts its 4-byte edit count and the samples up to the last header refresh.
    /// Only linear PCM (constant bytes per packet) is sized from the data.
    static func coreAudioSizes(_ bytes: UnsafeRawBufferPointer) throws(CrashedFileRepairError) -> CrashedFilePatch? {
        guard bytes.count >= 8 + 12 + 32, bytes.ascii(0, 4) == "caff", bytes.ascii(8, 4) == "desc" else {
            throw .unexpectedLayout("not a CAF file starting with its desc chunk")
        }
        guard bytes.ascii(20 + 8, 4) == "lpcm" else { throw .unexpectedLayout("not linear PCM") }
        let bytesPerPacket = Int(bytes.bigEndian(UInt32.self, at: 20 + 16))
        let framesPerPacket = Int(bytes.bigEndian(UInt32.self, at: 20 + 20))
        guard bytesPerPacket > 0, framesPerPacket == 1 else { throw .unexpectedLayout("packets of \(bytesPerPacket) bytes, \(framesPerPacket) frames") }
        var offset = 8
        while offset + 12 <= bytes.count {
            let id = bytes.ascii(offset, 4)
            let size = Int64(bitPattern: bytes.bigEndian(UInt64.self, at: offset + 4))
            if id == "data" {
                let samplesStart = offset + 12 + 4
                guard samplesStart <= bytes.count else { throw .unexpectedLayout("a data chunk cut in its edit count") }
                let dataSize = (bytes.count - samplesStart) / bytesPerPacket * bytesPerPacket
                let chunkSize = Int64(4 + dataSize)
                let end = samplesStart + dataSize
                let truncate = end < bytes.count ? end : nil
                guard size != chunkSize || truncate != nil else { return nil }
                return CrashedFilePatch(writes: [(offset + 4, UInt64(chunkSize).bigEndianBytes)], truncateTo: truncate,
                                        frames: Int64(dataSize / bytesPerPacket))
            }
            guard size >= 0 else { throw .unexpectedLayout("chunk '\(id)' of unknown size before the data") }
            // A damaged size must not trap (this runs at every start-up): past the end is a layout we leave.
            guard size <= Int64(bytes.count - offset - 12) else { throw .unexpectedLayout("chunk '\(id)' larger than the file") }
            offset += 12 + Int(size)
        }
        throw .unexpectedLayout("no data chunk")
    }

    // MARK: FLAC

    /// STREAMINFO's total-samples (36 bits) from the frames that are whole: each frame's header
    /// parses and passes its CRC-8, and the frame up to the next header (or the end of the file)
    /// passes its CRC-16. libFLAC writes fixed-size blocks, numbered.
    static func flacTotalSamples(_ bytes: UnsafeRawBufferPointer) throws(CrashedFileRepairError) -> CrashedFilePatch? {
        guard bytes.count >= 8 + 34, bytes.ascii(0, 4) == "fLaC", bytes[4] & 0x7F == 0,
              Int(bytes[5]) << 16 | Int(bytes[6]) << 8 | Int(bytes[7]) == 34 else {
            throw .unexpectedLayout("not a FLAC file starting with STREAMINFO")
        }
        let streamInfo = 8
        let totalField = streamInfo + 13
        let total = UInt64(bytes[totalField] & 0x0F) << 32 | UInt64(bytes.bigEndian(UInt32.self, at: totalField + 1))
        var offset = 4
        while true {
            guard offset + 4 <= bytes.count else { throw .unexpectedLayout("metadata cut short") }
            let last = bytes[offset] & 0x80 != 0
            offset += 4 + (Int(bytes[offset + 1]) << 16 | Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3]))
            if last { break }
        }
        guard offset <= bytes.count else { throw .unexpectedLayout("metadata cut short") }
        var samples: Int64 = 0
        var frameStart = offset
        var expectedNumber: UInt64 = 0
        var end = offset
        var maxFrameLength = 0
        frames: while frameStart < bytes.count {
            guard let header = FLACFrameHeader(bytes, at: frameStart), !header.variableBlockSize,
                  header.number == expectedNumber else { break }
            // The frame ends where the CRC-16 of everything from its start is 0 (its own CRC
            // included) and a next frame's header follows, or the file ends.
            var crc: UInt16 = 0
            var index = frameStart
            while index < bytes.count {
                crc = FLACFrameHeader.crc16Table[Int(UInt8(crc >> 8) ^ bytes[index])] ^ (crc << 8)
                index += 1
                if crc == 0, index >= frameStart + header.length + 2 {
                    let nextIsFrame = index + 1 < bytes.count && bytes[index] == 0xFF && bytes[index + 1] & 0xFE == 0xF8
                        && FLACFrameHeader(bytes, at: index)?.number == expectedNumber + 1
                    if index == bytes.count || nextIsFrame {
                        samples += Int64(header.blockSize)
                        maxFrameLength = max(maxFrameLength, index - frameStart)
                        expectedNumber += 1
                        end = index
                        frameStart = index
                        continue frames
                    }
                }
            }
            break
        }
        guard samples > 0 else { throw .unexpectedLayout("no whole frame") }
        guard total == 0 || total == UInt64(samples) else {
            throw .unexpectedLayout("STREAMINFO says \(total) samples, the frames hold \(samples)")
        }
        // A crash tears at most the frame being written: a longer undecodable tail, or one with
        // a later frame in it, is damage this repair does not understand, and cutting it could
        // lose audio. The longest frame is its samples stored verbatim, plus headers.
        let channels = Int(bytes[streamInfo + 12] >> 1 & 7) + 1
        let bitsPerSample = Int(bytes[streamInfo + 12] & 1) << 4 + Int(bytes[streamInfo + 13] >> 4) + 1
        let blockSize = Int(bytes.bigEndian(UInt16.self, at: streamInfo + 2))
        let longestFrame = max(maxFrameLength, blockSize * channels * (bitsPerSample + 1) / 8 + 64)
        guard bytes.count - end <= longestFrame,
              !(end..<bytes.count).contains(where: { FLACFrameHeader(bytes, at: $0).map { $0.number > expectedNumber } ?? false }) else {
            throw .unexpectedLayout("\(bytes.count - end) bytes after the last whole frame")
        }
        let truncate = end < bytes.count ? end : nil
        guard total == 0 || truncate != nil else { return nil }
        let field = (UInt64(bytes[totalField] & 0xF0) << 32) | UInt64(samples)
        let written = [UInt8((field >> 32) & 0xFF)] + UInt32(truncatingIfNeeded: field).bigEndianBytes
        return CrashedFilePatch(writes: [(totalField, written)], truncateTo: truncate, frames: samples)
    }

    // MARK: MP3

    /// An Xing (VBR) or Info (CBR) tag with the LAME extension, as LAME 3.100 writes it at
    /// close, into the blank frame LAME put first (after an ID3v2 tag, if any). The frame must
    /// be blank: a frame with audio, or a tag already there, is left alone.
    static func mp3InfoTag(_ bytes: UnsafeRawBufferPointer) throws(CrashedFileRepairError) -> CrashedFilePatch? {
        var start = 0
        if bytes.count >= 10, bytes.ascii(0, 3) == "ID3" {
            let size = (0..<4).reduce(0) { $0 << 7 | Int(bytes[6 + $1] & 0x7F) }
            start = 10 + size + (bytes[5] & 0x10 != 0 ? 10 : 0)
        }
        guard let tagFrame = MPEGAudioFrameHeader(bytes, at: start), start + tagFrame.length <= bytes.count else {
            throw .unexpectedLayout("no MPEG audio frame first")
        }
        let tagOffset = start + 4 + tagFrame.sideInformationLength
        // Xing tag (120 bytes with the seek table) + LAME extension (36 bytes).
        guard tagOffset + 156 <= start + tagFrame.length else { throw .unexpectedLayout("the first frame is too short for a tag") }
        guard (start + 4..<start + tagFrame.length).allSatisfy({ bytes[$0] == 0 }) else {
            if ["Xing", "Info"].contains(bytes.ascii(tagOffset, 4)) { return nil }
            throw .unexpectedLayout("the first frame is not LAME's blank tag frame")
        }
        // The audio frames after it, all of the first one's version, layer and rate.
        var frameOffsets: [Int] = []
        var offset = start + tagFrame.length
        while let frame = MPEGAudioFrameHeader(bytes, at: offset), frame.sameStream(as: tagFrame), offset + frame.length <= bytes.count {
            frameOffsets.append(offset)
            offset += frame.length
        }
        guard !frameOffsets.isEmpty else { throw .unexpectedLayout("no audio frame after the tag frame") }
        let end = offset
        // A crash leaves at most a torn frame (1441 bytes at most for Layer III) after the last.
        guard bytes.count - end <= 4096 else { throw .unexpectedLayout("\(bytes.count - end) bytes after the last whole frame") }
        let streamBytes = end - start
        var tag = [UInt8](repeating: 0, count: 156)
        let isVBR = Set(frameOffsets.map { MPEGAudioFrameHeader(bytes, at: $0)!.bitRate }).count > 1
        tag.replace(0, Array((isVBR ? "Xing" : "Info").utf8))
        tag.replace(4, UInt32(0x0F).bigEndianBytes)  // frames, bytes, seek table, quality
        tag.replace(8, UInt32(frameOffsets.count).bigEndianBytes)
        tag.replace(12, UInt32(streamBytes).bigEndianBytes)
        for percent in 0..<100 {
            // The byte position (of 256) of the frame `percent` % into the audio.
            let frame = frameOffsets[percent * frameOffsets.count / 100]
            tag[16 + percent] = UInt8(min(255, (frame - start) * 256 / streamBytes))
        }
        // Quality (bytes 116...119) stays 0: unknown to the repair.
        // LAME extension: the version of the LAME that encoded recd's MP3 (Debian 12's), the
        // encoder delay LAME 3.100 always has (576), and padding 529, the decoder delay: a
        // gapless decoder then drops nothing at the end, the samples cut by the crash being
        // unknown.
        tag.replace(120, Array("LAME3.100".utf8))
        let delay = 576, padding = 529
        tag.replace(141, [UInt8(delay >> 4), UInt8((delay & 0x0F) << 4 | padding >> 8), UInt8(padding & 0xFF)])
        tag.replace(148, UInt32(streamBytes).bigEndianBytes)
        var musicCRC: UInt16 = 0
        for index in start + tagFrame.length..<end { musicCRC = MPEGAudioFrameHeader.crc16(musicCRC, bytes[index]) }
        tag.replace(152, musicCRC.bigEndianBytes)
        // The tag's own CRC covers the frame from its header to just before the CRC field.
        var frame = (0..<tagFrame.length).map { bytes[start + $0] }
        frame.replace(tagOffset - start, tag)
        let crcEnd = tagOffset - start + 154
        let tagCRC = frame[0..<crcEnd].reduce(UInt16(0), MPEGAudioFrameHeader.crc16)
        frame.replace(crcEnd, tagCRC.bigEndianBytes)
        // The tag frame itself, minus the decoder delay, is not audio.
        let samples = Int64(frameOffsets.count * tagFrame.samplesPerFrame - delay - padding)
        return CrashedFilePatch(writes: [(tagOffset, Array(frame[(tagOffset - start)..<(crcEnd + 2)]))],
                                truncateTo: end < bytes.count ? end : nil, frames: samples)
    }
}

/// A FLAC frame header (RFC 9639 §9.1), checked by its CRC-8.
struct FLACFrameHeader {
    var variableBlockSize: Bool
    var blockSize: Int
    /// The frame number (fixed block size) or first sample number (variable).
    var number: UInt64
    /// The header's length, its CRC-8 included.
    var length: Int

    init?(_ bytes: UnsafeRawBufferPointer, at start: Int) {
        guard start + 6 <= bytes.count, bytes[start] == 0xFF, bytes[start + 1] & 0xFE == 0xF8 else { return nil }
        variableBlockSize = bytes[start + 1] & 1 != 0
        let blockCode = Int(bytes[start + 2] >> 4)
        let rateCode = Int(bytes[start + 2] & 0x0F)
        guard blockCode != 0, rateCode != 15, bytes[start + 3] >> 4 <= 10, bytes[start + 3] & 1 == 0 else { return nil }
        var index = start + 4
        // The number, coded like UTF-8 (up to 7 bytes).
        let first = bytes[index]
        let extra = first < 0x80 ? 0 : first & 0xE0 == 0xC0 ? 1 : first & 0xF0 == 0xE0 ? 2 : first & 0xF8 == 0xF0 ? 3
            : first & 0xFC == 0xF8 ? 4 : first & 0xFE == 0xFC ? 5 : first == 0xFE ? 6 : -1
        guard extra >= 0, index + extra + 1 < bytes.count else { return nil }
        var number = UInt64(extra == 0 ? first : first & (0x7F >> (extra + 1)))
        for offset in 1...max(1, extra) where extra > 0 {
            let byte = bytes[index + offset]
            guard byte & 0xC0 == 0x80 else { return nil }
            number = number << 6 | UInt64(byte & 0x3F)
        }
        self.number = number
        index += 1 + extra
        switch blockCode {
        case 1: blockSize = 192
        case 2...5: blockSize = 576 << (blockCode - 2)
        case 6: blockSize = Int(bytes[index]) + 1; index += 1
        case 7: blockSize = (Int(bytes[index]) << 8 | Int(bytes[index + 1])) + 1; index += 2
        default: blockSize = 256 << (blockCode - 8)
        }
        index += rateCode == 12 ? 1 : (rateCode == 13 || rateCode == 14) ? 2 : 0
        guard index < bytes.count else { return nil }
        var crc: UInt8 = 0
        for offset in start..<index { crc = Self.crc8Table[Int(crc ^ bytes[offset])] }
        guard crc == bytes[index] else { return nil }
        length = index + 1 - start
    }

    /// CRC-8, polynomial x^8 + x^2 + x + 1, initial 0.
    static let crc8Table: [UInt8] = (0..<256).map { value in
        var crc = UInt8(value)
        for _ in 0..<8 { crc = crc & 0x80 != 0 ? (crc << 1) ^ 0x07 : crc << 1 }
        return crc
    }

    /// CRC-16, polynomial x^16 + x^15 + x^2 + 1, initial 0, not reflected.
    static let crc16Table: [UInt16] = (0..<256).map { value in
        var crc = UInt16(value) << 8
        for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x8005 : crc << 1 }
        return crc
    }
}

/// An MPEG-1/2/2.5 Layer III frame header.
struct MPEGAudioFrameHeader {
    var version: Int  // 3 = MPEG-1, 2 = MPEG-2, 0 = MPEG-2.5
    var sampleRate: Int
    var bitRate: Int
    var channels: Int
    var length: Int

    init?(_ bytes: UnsafeRawBufferPointer, at start: Int) {
        guard start + 4 <= bytes.count, bytes[start] == 0xFF, bytes[start + 1] & 0xE0 == 0xE0 else { return nil }
        version = Int(bytes[start + 1] >> 3 & 3)
        guard version != 1, bytes[start + 1] >> 1 & 3 == 1 else { return nil }  // Layer III only
        let bitRateIndex = Int(bytes[start + 2] >> 4)
        let rateIndex = Int(bytes[start + 2] >> 2 & 3)
        guard bitRateIndex != 0, bitRateIndex != 15, rateIndex != 3 else { return nil }
        let bitRates = version == 3 ? [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]
            : [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160]
        bitRate = bitRates[bitRateIndex] * 1000
        sampleRate = [44100, 48000, 32000][rateIndex] >> (version == 3 ? 0 : version == 2 ? 1 : 2)
        channels = bytes[start + 3] >> 6 == 3 ? 1 : 2
        let padding = Int(bytes[start + 2] >> 1 & 1)
        length = (version == 3 ? 144 : 72) * bitRate / sampleRate + padding
    }

    var samplesPerFrame: Int { version == 3 ? 1152 : 576 }
    var sideInformationLength: Int { version == 3 ? (channels == 1 ? 17 : 32) : (channels == 1 ? 9 : 17) }

    func sameStream(as other: Self) -> Bool {
        version == other.version && sampleRate == other.sampleRate && channels == other.channels
    }

    /// CRC-16/ARC (polynomial 0x8005 reflected, initial 0): the LAME tag's CRCs. By table:
    /// the music CRC runs over the whole file, hours of it at start-up.
    static func crc16(_ crc: UInt16, _ byte: UInt8) -> UInt16 {
        crc16Table[Int(UInt8(truncatingIfNeeded: crc) ^ byte)] ^ (crc >> 8)
    }

    private static let crc16Table: [UInt16] = (0..<256).map { value in
        var crc = UInt16(value)
        for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xA001 : crc >> 1 }
        return crc
    }
}

/// A file mapped read-only for one repair: hours-long files are read without copying them.
private final class MappedFile {
    let bytes: UnsafeRawBufferPointer

    init(path: String) throws(CrashedFileRepairError) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .system("open \(path)", Errno(rawValue: errno)) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .system("fstat \(path)", Errno(rawValue: errno)) }
        let size = Int(info.st_size)
        guard size > 0 else {
            bytes = UnsafeRawBufferPointer(start: nil, count: 0)
            return
        }
        guard let address = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), address != MAP_FAILED else {
            throw .system("mmap \(path)", Errno(rawValue: errno))
        }
        bytes = UnsafeRawBufferPointer(start: address, count: size)
    }

    deinit {
        if let base = bytes.baseAddress { munmap(UnsafeMutableRawPointer(mutating: base), bytes.count) }
    }
}

extension UnsafeRawBufferPointer {
    fileprivate func ascii(_ offset: Int, _ count: Int) -> String {
        guard offset + count <= self.count else { return "" }
        return String(decoding: self[offset..<offset + count], as: UTF8.self)
    }

    fileprivate func littleEndian<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T {
        (0..<MemoryLayout<T>.size).reduce(T(0)) { $0 | T(self[offset + $1]) << (8 * $1) }
    }

    fileprivate func bigEndian<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T {
        (0..<MemoryLayout<T>.size).reduce(T(0)) { $0 << 8 | T(self[offset + $1]) }
    }
}

extension FixedWidthInteger {
    fileprivate var littleEndianBytes: [UInt8] { (0..<MemoryLayout<Self>.size).map { UInt8(truncatingIfNeeded: self >> (8 * $0)) } }
    fileprivate var bigEndianBytes: [UInt8] { littleEndianBytes.reversed() }
}

extension Array where Element == UInt8 {
    fileprivate mutating func replace(_ offset: Int, _ bytes: [UInt8]) {
        replaceSubrange(offset..<offset + bytes.count, with: bytes)
    }
}
