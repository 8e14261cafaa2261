import FoundationEssentials
import Glibc
import RecorderModel
import Sndfile

/// Corrects, in place, the start time recd wrote into a finished file that began while the
/// system clock was not synchronized (`StartClock`), once it is: a few bytes of metadata
/// rewritten where they are, never the audio, so an hour's file on an SD card costs a block,
/// not a copy.
///
/// Every start recd writes has a fixed width (`2026-11-22T14:00:00.123Z`, a `bext` date and
/// time, an MP4 time in seconds) and the two clock marks have the same length, so each is
/// overwritten by its correction byte for byte. What each format needs beyond the texts
/// (the comment, a Vorbis comment's `DATE`, CAF's `info`, an MP4's `©day`):
///
/// - WAV/RF64: `bext`'s OriginationDate, OriginationTime and TimeReference;
/// - Ogg (Opus, Vorbis): the CRC of each page changed;
/// - MPEG-4: `mvhd`, `tkhd` and `mdhd`'s creation and modification times (FFmpeg writes
///   `creation_time` into all three);
/// - MP3: the ID3v2 year frame (and ID3v1's year), when the year changes.
///
/// The file is read back afterwards: it must name the new start, marked `redated`.
enum FileRedating {
    /// How far from each end of the file its metadata is looked for (an MP4's is found by its
    /// atoms wherever it is).
    static let searchedBytes = 256 * 1024

    /// Rewrites the start of the file at `path`, stamped as `old` (its start and its
    /// `unsynchronized` mark), to `start`, marked `redated`; `sampleRate` is the file's.
    static func redate(path: String, from old: FileOrigin, to start: Date, sampleRate: Int) throws(RecorderError) {
        var new = old
        new.startedAt = start
        new.clock = .redated
        let descriptor = open(path, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure(path, "cannot open it") }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw failure(path, "cannot read its size") }
        var file = PatchedFile(descriptor: descriptor, size: Int64(info.st_size))

        let isMPEG4 = AudioFileFormat.isMPEG4(fileExtension: String(path.split(separator: ".").last ?? ""))
        var regions: [Range<Int64>]
        if isMPEG4 {
            guard let moov = try file.atom("moov", in: 0..<file.size) else { throw failure(path, "has no moov atom") }
            regions = [moov]
        } else {
            let head = 0..<Swift.min(file.size, Int64(searchedBytes))
            let tail = Swift.max(head.upperBound, file.size - Int64(searchedBytes))..<file.size
            regions = tail.isEmpty ? [head] : [head, tail]
        }
        var replaced = 0
        for region in regions {
            try file.load(region)
            replaced += file.replace(old.startText, with: new.startText, in: region)
            if let from = old.clock.commentMark, let to = new.clock.commentMark {
                _ = file.replace("; " + from + "; ", with: "; " + to + "; ", in: region)
            }
        }
        guard replaced > 0 else { throw failure(path, "does not carry the start \(old.startText)") }

        if isMPEG4 {
            try file.patchMPEG4Times(in: regions[0], from: old.startedAt, to: start)
        } else if let kind = try file.leadingTag() {
            switch kind {
            case "RIFF", "RF64", "BW64":
                try file.patchBroadcastInfo(BroadcastInfo(origin: new, sampleRate: sampleRate))
            case "OggS":
                try file.fixOggChecksums()
            case "ID3":
                try file.patchID3Year(from: old.startText, to: new.startText)
            default:
                break
            }
        }
        try file.writeChanges()
        guard fsync(descriptor) == 0 else { throw failure(path, "fsync failed") }

        let reread = RecordingLibrary.startTime(ofFile: path)
        guard let reread, Swift.abs(reread.timeIntervalSince1970 - start.timeIntervalSince1970) < 0.002 else {
            throw failure(path, "reads back \(reread.map(UTCTimestamp.text) ?? "no start"), not \(new.startText)")
        }
    }

    static func failure(_ path: String, _ what: String) -> RecorderError {
        RecorderError(.failedToSave, "cannot re-date \(path): it \(what)")
    }
}

/// A file's bytes as far as they were read, with the changes made to them, written back
/// where they changed.
private struct PatchedFile {
    let descriptor: Int32
    let size: Int64
    /// Loaded ranges and their bytes (as changed).
    private var loaded: [(range: Range<Int64>, bytes: [UInt8])] = []
    /// Changed byte ranges (absolute), to write back.
    private var changed: [Range<Int64>] = []

    init(descriptor: Int32, size: Int64) {
        self.descriptor = descriptor
        self.size = size
    }

    mutating func load(_ range: Range<Int64>) throws(RecorderError) {
        if loaded.contains(where: { $0.range == range }) { return }
        loaded.append((range, try read(range)))
    }

    func read(_ range: Range<Int64>) throws(RecorderError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: Int(range.count))
        var done = 0
        while done < bytes.count {
            let got = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress! + done, $0.count - done, off_t(range.lowerBound) + off_t(done)) }
            guard got > 0 else { throw RecorderError(.failedToSave, "cannot read the file to re-date it") }
            done += got
        }
        return bytes
    }

    /// The bytes at `range` (loaded, with the changes), reading what is not loaded yet.
    mutating func bytes(_ range: Range<Int64>) throws(RecorderError) -> [UInt8] {
        if let index = loaded.firstIndex(where: { $0.range.lowerBound <= range.lowerBound && range.upperBound <= $0.range.upperBound }) {
            let start = Int(range.lowerBound - loaded[index].range.lowerBound)
            return Array(loaded[index].bytes[start..<(start + range.count)])
        }
        try load(range)
        return try bytes(range)
    }

    /// Sets bytes at `offset` in every loaded copy that holds them (loading them if none does).
    mutating func set(_ new: [UInt8], at offset: Int64) throws(RecorderError) {
        let range = offset..<(offset + Int64(new.count))
        if !loaded.contains(where: { $0.range.lowerBound <= range.lowerBound && range.upperBound <= $0.range.upperBound }) {
            try load(range)
        }
        for index in loaded.indices where loaded[index].range.overlaps(range) {
            for (at, byte) in new.enumerated() {
                let position = offset + Int64(at)
                if loaded[index].range.contains(position) {
                    loaded[index].bytes[Int(position - loaded[index].range.lowerBound)] = byte
                }
            }
        }
        changed.append(range)
    }

    /// Replaces every occurrence of `old` by `new` (the same length) in the loaded `region`.
    mutating func replace(_ old: String, with new: String, in region: Range<Int64>) -> Int {
        let from = Array(old.utf8), to = Array(new.utf8)
        precondition(from.count == to.count, "re-dating rewrites in place")
        guard let index = loaded.firstIndex(where: { $0.range == region }), !from.isEmpty else { return 0 }
        var count = 0
        var bytes = loaded[index].bytes
        var at = 0
        while at + from.count <= bytes.count {
            if bytes[at] == from[0], Array(bytes[at..<(at + from.count)]) == from {
                bytes.replaceSubrange(at..<(at + from.count), with: to)
                changed.append((region.lowerBound + Int64(at))..<(region.lowerBound + Int64(at + to.count)))
                count += 1
                at += from.count
            } else {
                at += 1
            }
        }
        loaded[index].bytes = bytes
        // Another loaded range that overlaps (a short file's head and tail) takes the same bytes.
        for other in loaded.indices where other != index && loaded[other].range.overlaps(region) {
            for position in loaded[other].range.clamped(to: region) {
                loaded[other].bytes[Int(position - loaded[other].range.lowerBound)] = bytes[Int(position - region.lowerBound)]
            }
        }
        return count
    }

    mutating func writeChanges() throws(RecorderError) {
        for range in changed {
            let bytes = try bytes(range)
            let wrote = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, off_t(range.lowerBound)) }
            guard wrote == bytes.count else { throw RecorderError(.failedToSave, "cannot write the file's new start") }
        }
        changed.removeAll()
    }

    /// The file's first four bytes as text ("RIFF", "OggS", "ID3" and a version byte, "fLaC", "caff").
    mutating func leadingTag() throws(RecorderError) -> String? {
        guard size >= 4 else { return nil }
        let bytes = try bytes(0..<4)
        if bytes[0...2] == [0x49, 0x44, 0x33] { return "ID3" }
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: WAV

    /// Writes `info`'s date, time and time reference into the `bext` chunk.
    mutating func patchBroadcastInfo(_ info: BroadcastInfo) throws(RecorderError) {
        var offset: Int64 = 12
        while offset + 8 <= size {
            let header = try bytes(offset..<(offset + 8))
            let length = Int64(UInt32(header[4]) | UInt32(header[5]) << 8 | UInt32(header[6]) << 16 | UInt32(header[7]) << 24)
            if header[0..<4] == [0x62, 0x65, 0x78, 0x74] {  // "bext"
                let body = offset + 8
                try set(Array(info.originationDate.utf8.prefix(10)), at: body + 320)
                try set(Array(info.originationTime.utf8.prefix(8)), at: body + 330)
                var reference = info.timeReference.littleEndian
                try set(withUnsafeBytes(of: &reference) { Array($0) }, at: body + 338)
                return
            }
            if header[0..<4] == [0x64, 0x61, 0x74, 0x61] { break }  // "data": bext comes before it
            offset += 8 + length + (length & 1)
        }
        throw RecorderError(.failedToSave, "the file has no bext chunk to re-date")
    }

    // MARK: Ogg

    /// Recomputes the CRC of every page in the loaded head whose bytes changed.
    mutating func fixOggChecksums() throws(RecorderError) {
        let changedRanges = changed
        var offset: Int64 = 0
        while offset + 27 <= size {
            let header = try bytes(offset..<(offset + 27))
            guard header[0..<4] == [0x4F, 0x67, 0x67, 0x53] else { break }
            let segments = Int64(header[26])
            let table = try bytes((offset + 27)..<(offset + 27 + segments))
            let length = 27 + segments + table.reduce(Int64(0)) { $0 + Int64($1) }
            let page = offset..<(offset + length)
            if changedRanges.contains(where: { $0.overlaps(page) }) {
                var bytes = try bytes(page)
                bytes[22] = 0; bytes[23] = 0; bytes[24] = 0; bytes[25] = 0
                let crc = OggChecksum.of(bytes)
                try set([UInt8(crc & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 24)], at: offset + 22)
            }
            // The metadata is in the first pages; stop once past every change.
            if let last = changedRanges.map(\.upperBound).max(), page.upperBound >= last { break }
            offset = page.upperBound
        }
    }

    // MARK: MPEG-4

    /// The first atom of `type` in `range` (at its top level): its whole extent.
    mutating func atom(_ type: String, in range: Range<Int64>) throws(RecorderError) -> Range<Int64>? {
        let wanted = Array(type.utf8)
        var offset = range.lowerBound
        while offset + 8 <= range.upperBound {
            let header = try bytes(offset..<(offset + 8))
            var length = Int64(UInt32(header[0]) << 24 | UInt32(header[1]) << 16 | UInt32(header[2]) << 8 | UInt32(header[3]))
            if length == 1 {
                let large = try bytes((offset + 8)..<(offset + 16))
                length = large.reduce(Int64(0)) { $0 << 8 | Int64($1) }
            } else if length == 0 {
                length = range.upperBound - offset
            }
            guard length >= 8 else { return nil }
            if Array(header[4..<8]) == wanted { return offset..<Swift.min(range.upperBound, offset + length) }
            offset += length
        }
        return nil
    }

    /// Sets `mvhd`'s, each `tkhd`'s and `mdhd`'s creation and modification times that say
    /// `old` (seconds since 1904, as FFmpeg writes `creation_time`) to `new`.
    mutating func patchMPEG4Times(in moov: Range<Int64>, from old: Date, to new: Date) throws(RecorderError) {
        let epoch1904 = 2_082_844_800.0
        let before = UInt64(Swift.max(0, (old.timeIntervalSince1970 + epoch1904).rounded(.down)))
        let after = UInt64(Swift.max(0, (new.timeIntervalSince1970 + epoch1904).rounded(.down)))
        func patchTimes(_ box: Range<Int64>) throws(RecorderError) {
            let body = box.lowerBound + 8
            let version = try bytes(body..<(body + 1))[0]
            let width: Int64 = version == 1 ? 8 : 4
            for field in 0..<2 {
                let at = body + 4 + Int64(field) * width
                let value = try bytes(at..<(at + width)).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                guard value == before else { continue }
                try set((0..<Int(width)).reversed().map { UInt8(truncatingIfNeeded: after >> (8 * UInt64($0))) }, at: at)
            }
        }
        let inside = (moov.lowerBound + 8)..<moov.upperBound
        if let mvhd = try atom("mvhd", in: inside) { try patchTimes(mvhd) }
        var offset = inside.lowerBound
        while let trak = try atom("trak", in: offset..<inside.upperBound) {
            let trakInside = (trak.lowerBound + 8)..<trak.upperBound
            if let tkhd = try atom("tkhd", in: trakInside) { try patchTimes(tkhd) }
            if let mdia = try atom("mdia", in: trakInside), let mdhd = try atom("mdhd", in: (mdia.lowerBound + 8)..<mdia.upperBound) {
                try patchTimes(mdhd)
            }
            offset = trak.upperBound
        }
    }

    // MARK: MP3

    /// An ID3 date is a year (TYER, TDRC; ID3v1's field): the new one where it changed.
    mutating func patchID3Year(from old: String, to new: String) throws(RecorderError) {
        let before = Array(old.utf8.prefix(4)), after = Array(new.utf8.prefix(4))
        guard before != after, size >= 10 else { return }
        let header = try bytes(0..<10)
        let tagSize = Int64(header[6]) << 21 | Int64(header[7]) << 14 | Int64(header[8]) << 7 | Int64(header[9])
        let version = header[3]
        var offset: Int64 = 10
        while offset + 10 <= Swift.min(size, 10 + tagSize) {
            let frame = try bytes(offset..<(offset + 10))
            guard frame[0] != 0 else { break }
            let length = version >= 4
                ? Int64(frame[4]) << 21 | Int64(frame[5]) << 14 | Int64(frame[6]) << 7 | Int64(frame[7])
                : Int64(frame[4]) << 24 | Int64(frame[5]) << 16 | Int64(frame[6]) << 8 | Int64(frame[7])
            let id = String(decoding: frame[0..<4], as: UTF8.self)
            if id == "TYER" || id == "TDRC", length >= 5 {
                // One encoding byte, then the text.
                let text = try bytes((offset + 11)..<(offset + 11 + Swift.min(4, length - 1)))
                if text == before { try set(after, at: offset + 11) }
            }
            offset += 10 + length
        }
        if size >= 128 {
            let v1 = try bytes((size - 128)..<size)
            if v1[0..<3] == [0x54, 0x41, 0x47], Array(v1[93..<97]) == before { try set(after, at: size - 128 + 93) }
        }
    }
}

/// Ogg's page checksum: CRC-32, polynomial 0x04C11DB7, not reflected, initial value 0.
enum OggChecksum {
    static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index) << 24
        for _ in 0..<8 { value = value & 0x8000_0000 != 0 ? (value << 1) ^ 0x04C1_1DB7 : value << 1 }
        return value
    }

    static func of(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0
        for byte in bytes { crc = (crc << 8) ^ table[Int((crc >> 24) ^ UInt32(byte))] }
        return crc
    }
}
