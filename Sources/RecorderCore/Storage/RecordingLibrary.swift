import CLinux
import FoundationEssentials
import Glibc
import Logging
import MPEG4
import RecorderModel
import Sndfile
import SystemPackage

/// The finished recordings in the recordings directory: list, inspect, delete, rename, and
/// recover what a crash left behind.
public struct RecordingLibrary: Sendable {
    public let directory: String

    public init(directory: String) {
        self.directory = directory
    }

    /// One finished file as libsndfile (or, for .m4a, libavformat) reads it.
    public struct Entry: Sendable, Equatable {
        public var name: String
        /// The path below the recordings directory (`meeting.flac`, `birds/2026-11-22/20261122T140000Z.flac`).
        public var file: String
        public var path: String
        public var format: AudioFileFormat
        public var info: SoundFileInfo
        public var size: Int64
        public var modified: Date
        /// The recording (session) and segment it is, when recd's session log knows the file.
        public var segment: Segment?
        /// The wall-clock time of the file's first frame as the file itself records it
        /// (`RecordingLibrary.startTime(ofFile:)`); nil for a file that does not say.
        public var recordedStart: Date?
        /// What the file says of its start's clock (recd's comment): `unsynchronized` for a file
        /// begun before the system clock was synchronized and not re-dated; nil when it does not say.
        public var startClock: StartClock?

        /// When the file's first frame was captured: what the file says, else what recd's
        /// session log says (files from before recd wrote it into them); nil if neither knows.
        public var startedAt: Date? { recordedStart ?? segment?.startedAt }
    }

    /// The wall-clock time of the first frame of the file at `path`, as the file records it:
    /// a WAV's `bext` chunk (OriginationDate plus TimeReference), the `DATE` Vorbis comment
    /// (FLAC, Opus, Vorbis), CAF's `info` date, an .m4a's `date` tag or else its
    /// `creation_time` (whole seconds), an MP3's ID3 comment as recd writes it. Nil for a file
    /// that carries none (other programs' files without one). Reads the file's header only;
    /// never its modification time.
    public static func startTime(ofFile path: String) -> Date? {
        let fileExtension = FilePath(path).extension ?? ""
        if AudioFileFormat.isMPEG4(fileExtension: fileExtension) {
            guard let info = try? MPEG4AudioInfo(path: path) else { return nil }
            return startTime(mpeg4Tags: info.tags)
        }
        guard let reader = try? SoundFileReader(path: path) else { return nil }
        return startTime(reader)
    }

    /// What the file at `path` says of its start's clock (recd's comment: `StartClock`); nil
    /// for a file without recd's comment.
    public static func startClock(ofFile path: String) -> StartClock? {
        let fileExtension = FilePath(path).extension ?? ""
        if AudioFileFormat.isMPEG4(fileExtension: fileExtension) {
            return (try? MPEG4AudioInfo(path: path))?.tags["comment"].flatMap(FileOrigin.startClock(inComment:))
        }
        guard let reader = try? SoundFileReader(path: path) else { return nil }
        return startClock(reader)
    }

    private static func startTime(_ reader: SoundFileReader) -> Date? {
        if let start = reader.broadcastInfo?.startTime(sampleRate: reader.info.sampleRate) { return start }
        if let start = reader.string(.date).flatMap({ UTCTimestamp.date($0) }) { return start }
        // An MP3's ID3 date is a year: recd's comment names the start.
        return reader.string(.comment).flatMap(FileOrigin.start(inComment:))
    }

    private static func startTime(mpeg4Tags tags: [String: String]) -> Date? {
        tags["date"].flatMap { UTCTimestamp.date($0) } ?? tags["creation_time"].flatMap { UTCTimestamp.date($0) }
    }

    /// Where recd logs each closed segment, one JSON object per line per session: what groups
    /// files into sessions. Hidden, so listings skip it.
    public static let sessionLogDirectory = ".sessions"

    /// Appends `segment` to its session's log (best effort: the file itself is what matters).
    public func log(_ segment: Segment) { append(segment, toLog: segment.recordingId + ".jsonl") }

    /// Appends `segment` as one JSON line to `name` in the session log directory (best effort).
    func append(_ segment: Segment, toLog name: String) {
        let logDirectory = directory + "/" + Self.sessionLogDirectory
        guard Directories.make(logDirectory) == nil,
              var data = try? JSONEncoder.sessionLog.encode(segment) else { return }
        data.append(0x0A)
        let fd = open(logDirectory + "/" + name, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        defer { close(fd) }
        _ = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// Every logged segment by its final path.
    func loggedSegments() -> [String: Segment] {
        let logDirectory = directory + "/" + Self.sessionLogDirectory
        guard let logs = try? FileManager.default.contentsOfDirectory(atPath: logDirectory) else { return [:] }
        var segments: [String: Segment] = [:]
        let decoder = JSONDecoder.sessionLog
        for log in logs where log.hasSuffix(".jsonl") {
            guard let text = try? String(contentsOfFile: logDirectory + "/" + log, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n") {
                if let segment = try? decoder.decode(Segment.self, from: Data(line.utf8)) { segments[segment.path] = segment }
            }
        }
        return segments
    }

    public enum LookupError: Error, Equatable, CustomStringConvertible {
        case notFound(String)
        case ambiguous(String, [String])

        public var description: String {
            switch self {
            case .notFound(let name): "no recording named '\(name)'"
            case .ambiguous(let name, let files): "'\(name)' is ambiguous: \(files.joined(separator: ", "))"
            }
        }
    }

    /// Every finished recording, oldest first (segments by their start). Unfinished (`.part`)
    /// and unreadable files are skipped.
    public func list() -> [Entry] {
        let segments = loggedSegments()
        let entries = fileNames().compactMap { file -> Entry? in
            guard var entry = entry(file: file) else { return nil }
            entry.segment = segments[entry.path]
            return entry
        }
        // A session's segments stay together, in their order, at the session's start.
        var sessionStart: [String: Date] = [:]
        for case let segment? in entries.map(\.segment) {
            sessionStart[segment.recordingId] = min(sessionStart[segment.recordingId] ?? segment.startedAt, segment.startedAt)
        }
        func key(_ entry: Entry) -> (Date, String, Int, String) {
            guard let segment = entry.segment else { return (entry.startedAt ?? entry.modified, "", 0, entry.file) }
            return (sessionStart[segment.recordingId]!, segment.recordingId, segment.index, entry.file)
        }
        return entries.sorted { key($0) < key($1) }
    }

    /// The recording `name` names: a file name with extension, or a name without one that only
    /// one file has.
    public func find(_ name: String) throws(LookupError) -> Entry {
        // A name, or a path below the directory (a segment), never leaving it or entering hidden ones.
        let components = name.split(separator: "/", omittingEmptySubsequences: false)
        guard !name.isEmpty, components.allSatisfy({ !$0.isEmpty && !$0.hasPrefix(".") }) else { throw .notFound(name) }
        let files = fileNames()
        if files.contains(name), var entry = entry(file: name) {
            entry.segment = loggedSegments()[entry.path]
            return entry
        }
        let matches = files.filter { file in
            var path = FilePath(file)
            path.extension = nil
            return path.string == name
        }
        if matches.count > 1 { throw .ambiguous(name, matches.sorted()) }
        guard let file = matches.first, let entry = entry(file: file) else { throw .notFound(name) }
        return entry
    }

    /// Deletes a recording's file.
    public func delete(_ entry: Entry) throws(RecorderError) {
        if unlink(entry.path) != 0 {
            throw RecorderError(.failedToSave, "cannot delete \(entry.path): \(Errno(rawValue: errno))")
        }
    }

    /// Renames a recording, keeping its extension. Never replaces another file.
    public func rename(_ entry: Entry, to newName: String) throws(RecorderError) -> Entry {
        try RecordingName.validate(newName)
        // A segment keeps its directory.
        let folder = FilePath(entry.file).removingLastComponent().string
        let file = (folder.isEmpty ? "" : folder + "/") + newName + "." + entry.format.fileExtension
        let target = directory + "/" + file
        switch Self.renameWithoutReplacing(entry.path, target) {
        case .success: break
        case .failure(.fileExists): throw RecorderError(.invalidSettings, "a recording named '\(file)' already exists")
        case .failure(let error): throw RecorderError(.failedToSave, "cannot rename \(entry.path) to \(target): \(error)")
        }
        guard let renamed = self.entry(file: file) else {
            throw RecorderError(.unknown, "renamed \(entry.path) to \(target) but cannot read it back")
        }
        return renamed
    }

    /// Files a crashed recorder left as `<name>.<ext>.part`: they hold everything written up to
    /// the crash, so give them their final name, or a numbered one when that is taken. A
    /// fragmented `.m4a.part` is first rewritten as a regular MP4 (`moov` before `mdat`); a
    /// libsndfile file first gets the length it really holds (`CrashedFileRepair`). Only the holder
    /// of the directory's lock may call this: another daemon's `.part` is a live file.
    /// Returns the recovered paths.
    public func recoverPartialFiles(logger: Logger) -> [String] {
        let names = walk { $0.hasSuffix(".part") }
        var recovered: [String] = []
        for partial in names.sorted() {
            let source = directory + "/" + partial
            let wanted = String(source.dropLast(5))
            if wanted.hasSuffix(".m4a"), !rewriteMPEG4(source, logger: logger) {
                logger.warning("unfinished recording left as it is", metadata: ["recording.path": "\(source)"])
                continue
            }
            Self.repairLength(source, fileExtension: FilePath(wanted).extension ?? "", logger: logger)
            do throws(RecorderError) {
                let target = try Self.moveIntoPlace(source, preferred: wanted)
                recovered.append(target)
                logger.notice("recovered unfinished recording", metadata: ["recording.path": "\(target)"])
                if target != wanted {
                    logger.warning("recording's name was taken; saved under another",
                                   metadata: ["recording.path": "\(target)", "recording.wanted": "\(wanted)"])
                }
            } catch {
                logger.warning("unfinished recording left as it is", metadata: ["recording.path": "\(source)",
                                                                              "error": "\(error.message)"])
            }
        }
        return recovered
    }

    /// Renames `source` to `preferred`, or to `name-2.ext`, `name-3.ext`, ... when that exists:
    /// never over another file, whoever created it. Returns the path it got.
    public static func moveIntoPlace(_ source: String, preferred: String) throws(RecorderError) -> String {
        let directory = FilePath(preferred).removingLastComponent().string
        let file = (FilePath(preferred).lastComponent?.string ?? "")
        let base = FilePath(file).stem ?? file
        let fileExtension = FilePath(file).extension ?? ""
        for counter in 1...10_000 {
            let candidate = counter == 1 ? preferred
                : "\(directory)/\(base)-\(counter)" + (fileExtension.isEmpty ? "" : "." + fileExtension)
            switch renameWithoutReplacing(source, candidate) {
            case .success: return candidate
            case .failure(.fileExists): continue
            case .failure(let error):
                throw RecorderError(.failedToSave, "cannot rename \(source) to \(candidate): \(error)")
            }
        }
        throw RecorderError(.failedToSave, "cannot rename \(source): every numbered name of \(preferred) is taken")
    }

    /// rename(2) that fails with EEXIST instead of replacing: renameat2's RENAME_NOREPLACE, or
    /// on a filesystem without it, link + unlink (vfat has neither: an existence check then).
    private static func renameWithoutReplacing(_ source: String, _ target: String) -> Result<Void, Errno> {
        if recd_rename_noreplace(source, target) == 0 { return .success(()) }
        let error = Errno(rawValue: errno)
        guard error == .invalidArgument || error == .notSupported else { return .failure(error) }
        if link(source, target) == 0 {
            unlink(source)
            return .success(())
        }
        let linkError = Errno(rawValue: errno)
        guard linkError == .notPermitted || linkError == .notSupported else { return .failure(linkError) }
        if access(target, F_OK) == 0 { return .failure(.fileExists) }
        return Glibc.rename(source, target) == 0 ? .success(()) : .failure(Errno(rawValue: errno))
    }

    /// Gives a crash-left libsndfile file the length of the audio it holds (`CrashedFileRepair`).
    /// Never makes it worse: the patch is undone unless libsndfile then reads the file with
    /// exactly the frames the patch counted; a file the repair does not understand is left as
    /// it is (and still recovered: it plays as far as its header says).
    public static func repairLength(_ path: String, fileExtension: String, logger: Logger) {
        let metadata: Logger.Metadata = ["recording.path": "\(path)"]
        do throws(CrashedFileRepairError) {
            guard let patch = try CrashedFileRepair.patch(forFileAt: path, fileExtension: fileExtension) else { return }
            let undo = try CrashedFileRepair.apply(patch, toFileAt: path)
            let frames = (try? SoundFileReader(path: path))?.info.frames
            guard frames == patch.frames else {
                logger.warning("repaired length does not read back; unfinished recording's header left as it was", metadata: metadata.merging([
                    "recording.frames": "\(patch.frames)", "recording.framesRead": "\(frames.map(String.init) ?? "unreadable")"]) { $1 })
                do throws(CrashedFileRepairError) { _ = try CrashedFileRepair.apply(undo, toFileAt: path) } catch {
                    logger.error("cannot undo the repair of an unfinished recording", metadata: metadata.merging(["error.message": "\(error)"]) { $1 })
                }
                return
            }
            logger.notice("unfinished recording given the length it holds", metadata: metadata.merging(["recording.frames": "\(patch.frames)"]) { $1 })
        } catch {
            logger.warning("unfinished recording's length left as its header says", metadata: metadata.merging(["error.message": "\(error)"]) { $1 })
        }
    }

    /// Rewrites a crash-left fragmented .m4a as a regular one. False if it holds no readable
    /// audio; a file that cannot be rewritten (a full disk) but reads is recovered fragmented.
    private func rewriteMPEG4(_ path: String, logger: Logger) -> Bool {
        do throws(MPEG4Error) {
            if try MPEG4Layout.needsRewrite(path: path) { try MPEG4FileRewriter.makeRegular(path: path) }
            return true
        } catch {
            logger.warning("cannot rewrite unfinished recording as a regular MP4", metadata: [
                "recording.path": "\(path)", "error.message": "\(error.description)"])
            return (try? MPEG4AudioInfo(path: path)) != nil
        }
    }

    /// How many finished recordings the directory holds and their bytes, by name and size
    /// alone: recd's extensions, below the directory (segment folders included), never a
    /// `.part`, a link, a hidden entry or `activeFile`. Reads no header and holds no listing,
    /// so that its cost in memory stays the same however many files a station keeps; what
    /// `status` shows after every closed file when retention, which needs every file's
    /// start, is off.
    func totals(excluding activeFile: String?) -> (count: Int, bytes: Int64) {
        let extensions = Set(AudioFileFormat.allCases.map(\.fileExtension))
        var count = 0
        var bytes: Int64 = 0
        visitFiles { path, name, info in
            guard let dot = name.lastIndex(of: "."), extensions.contains(String(name[name.index(after: dot)...])),
                  activeFile.map({ $0 != directory + "/" + path }) ?? true else { return }
            count += 1
            bytes += Int64(info.st_size)
        }
        return (count, bytes)
    }

    private func fileNames() -> [String] {
        let extensions = Set(AudioFileFormat.allCases.map(\.fileExtension))
        return walk { extensions.contains(FilePath($0).extension ?? "") }
    }

    /// Paths below the directory (segments live in subdirectories) whose name `matches`;
    /// hidden entries are skipped, symbolic links not followed.
    private func walk(_ matches: (String) -> Bool) -> [String] {
        var found: [String] = []
        visitFiles { path, name, _ in if matches(name) { found.append(path) } }
        return found
    }

    /// Every regular file below the directory, one at a time, as it is read (nothing is
    /// listed first): its path below the directory, its name, its lstat. Hidden entries are
    /// skipped, symbolic links not followed, at most 100 000 folders entered.
    private func visitFiles(_ body: (_ path: String, _ name: String, _ info: stat) -> Void) {
        var pending = [""]
        var entered = 0
        while let relative = pending.popLast(), entered < 100_000 {
            entered += 1
            guard let stream = opendir(relative.isEmpty ? directory : directory + "/" + relative) else { continue }
            defer { closedir(stream) }
            let descriptor = dirfd(stream)
            while let entry = readdir(stream) {
                let name = withUnsafePointer(to: &entry.pointee.d_name) {
                    $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
                }
                guard !name.hasPrefix(".") else { continue }
                var info = stat()
                guard fstatat(descriptor, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                let path = relative.isEmpty ? name : relative + "/" + name
                switch info.st_mode & S_IFMT {
                case S_IFDIR: pending.append(path)
                case S_IFREG: body(path, name, info)
                default: continue
                }
            }
        }
    }

    private func entry(file: String) -> Entry? {
        let path = directory + "/" + file
        // lstat, not FileManager's attributes: their value types differ between
        // FoundationEssentials and Foundation (a size read as 0 in a process with both).
        var status = stat()
        guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG,
              let (format, info, start, clock) = Self.read(path: path, fileExtension: FilePath(file).extension ?? "")
        else { return nil }
        let modified = Double(status.st_mtim.tv_sec) + Double(status.st_mtim.tv_nsec) / 1e9
        return Entry(name: FilePath(file).stem ?? "", file: file, path: path, format: format,
                     info: info, size: Int64(status.st_size), modified: Date(timeIntervalSince1970: modified),
                     recordedStart: start, startClock: clock)
    }

    /// The format, contents and recorded start of a file: .m4a through libavformat (AAC or
    /// ALAC is in the file, not its name), everything else through libsndfile.
    private static func read(path: String, fileExtension: String) -> (AudioFileFormat, SoundFileInfo, Date?, StartClock?)? {
        if AudioFileFormat.isMPEG4(fileExtension: fileExtension) {
            guard let info = try? MPEG4AudioInfo(path: path), let format = AudioFileFormat(mpeg4Codec: info.codecName) else { return nil }
            return (format, SoundFileInfo(frames: info.frames, sampleRate: info.sampleRate, channels: info.channels,
                                          formatName: format.properties.summary),
                    startTime(mpeg4Tags: info.tags), info.tags["comment"].flatMap(FileOrigin.startClock(inComment:)))
        }
        guard let reader = try? SoundFileReader(path: path), let format = AudioFileFormat(fileExtension: fileExtension)
        else { return nil }
        return (format, reader.info, startTime(reader), startClock(reader))
    }

    private static func startClock(_ reader: SoundFileReader) -> StartClock? {
        if let description = reader.broadcastInfo?.description, let clock = FileOrigin.startClock(inComment: description) {
            return clock
        }
        return reader.string(.comment).flatMap(FileOrigin.startClock(inComment:))
    }
}

extension JSONEncoder {
    /// Session logs: dates as seconds since 1970, exact to the microsecond.
    static var sessionLog: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.timeIntervalSince1970)
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

extension JSONDecoder {
    static var sessionLog: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return decoder
    }
}
