import Foundation
import Glibc
import Logging
import RecorderModel
import Sndfile

/// The finished recordings in the recordings directory: list, inspect, delete, rename, and
/// recover what a crash left behind.
public struct RecordingLibrary: Sendable {
    public let directory: String

    public init(directory: String) {
        self.directory = directory
    }

    /// One finished file as libsndfile reads it.
    public struct Entry: Sendable, Equatable {
        public var name: String
        public var file: String
        public var path: String
        public var format: AudioFileFormat
        public var info: SoundFileInfo
        public var size: Int64
        public var modified: Date
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

    /// Every finished recording, oldest first. Unfinished (`.part`) and unreadable files are skipped.
    public func list() -> [Entry] {
        fileNames().compactMap { entry(file: $0) }.sorted { ($0.modified, $0.file) < ($1.modified, $1.file) }
    }

    /// The recording `name` names: a file name with extension, or a name without one that only
    /// one file has.
    public func find(_ name: String) throws(LookupError) -> Entry {
        guard !name.isEmpty, !name.contains("/"), !name.hasPrefix(".") else { throw .notFound(name) }
        let files = fileNames()
        if files.contains(name), let entry = entry(file: name) { return entry }
        let matches = files.filter { ($0 as NSString).deletingPathExtension == name }
        if matches.count > 1 { throw .ambiguous(name, matches.sorted()) }
        guard let file = matches.first, let entry = entry(file: file) else { throw .notFound(name) }
        return entry
    }

    /// Deletes a recording's file.
    public func delete(_ entry: Entry) throws(RecorderError) {
        if unlink(entry.path) != 0 {
            throw RecorderError(.failedToSave, "cannot delete \(entry.path): \(String(cString: strerror(errno)))")
        }
    }

    /// Renames a recording, keeping its extension. Never replaces another file.
    public func rename(_ entry: Entry, to newName: String) throws(RecorderError) -> Entry {
        try RecordingName.validate(newName)
        let file = newName + "." + entry.format.fileExtension
        let target = directory + "/" + file
        // link + unlink: link fails with EEXIST instead of silently replacing a file.
        if link(entry.path, target) != 0 {
            let error = errno
            if error == EEXIST { throw RecorderError(.invalidSettings, "a recording named '\(file)' already exists") }
            throw RecorderError(.failedToSave, "cannot rename \(entry.path) to \(target): \(String(cString: strerror(error)))")
        }
        unlink(entry.path)
        guard let renamed = self.entry(file: file) else {
            throw RecorderError(.unknown, "renamed \(entry.path) to \(target) but cannot read it back")
        }
        return renamed
    }

    /// Files a crashed recorder left as `<name>.<ext>.part`: they are playable up to the last
    /// sync, so give them their final name (unless that is taken). Returns the recovered paths.
    public func recoverPartialFiles(logger: Logger) -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var recovered: [String] = []
        for partial in names where partial.hasSuffix(".part") && !partial.hasPrefix(".") {
            let final = String(partial.dropLast(5))
            let source = directory + "/" + partial
            let target = directory + "/" + final
            guard !FileManager.default.fileExists(atPath: target), link(source, target) == 0 else {
                logger.warning("unfinished recording left as it is", metadata: ["recording.path": "\(source)"])
                continue
            }
            unlink(source)
            recovered.append(target)
            logger.notice("recovered unfinished recording", metadata: ["recording.path": "\(target)"])
        }
        return recovered
    }

    private func fileNames() -> [String] {
        let extensions = Set(AudioFileFormat.allCases.map(\.fileExtension))
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { !$0.hasPrefix(".") && extensions.contains(($0 as NSString).pathExtension) }
    }

    private func entry(file: String) -> Entry? {
        let path = directory + "/" + file
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              attributes[.type] as? FileAttributeType == .typeRegular,
              let reader = try? SoundFileReader(path: path),
              let format = AudioFileFormat.allCases.first(where: { $0.fileExtension == (file as NSString).pathExtension })
        else { return nil }
        return Entry(name: (file as NSString).deletingPathExtension, file: file, path: path, format: format,
                     info: reader.info, size: (attributes[.size] as? NSNumber)?.int64Value ?? 0,
                     modified: attributes[.modificationDate] as? Date ?? Date(timeIntervalSince1970: 0))
    }
}
