import FoundationEssentials
import Glibc
import RecorderModel
import TOML

extension KeyReader {
    /// A size: an integer of bytes, or a string such as "64 MiB", "2 GB" or (unless
    /// `percentAllowed` is false) "5%" of the filesystem.
    func readSpace(_ key: String, percentAllowed: Bool = true,
                   _ apply: (SpaceAmount) throws(ConfigurationError) -> Void) throws(ConfigurationError) {
        used.insert(key)
        guard let entry = document.entry(key) else { return }
        let example = percentAllowed ? #"a size such as "64 MiB", "2 GB", "5%" or a number of bytes"#
            : #"a size such as "10 GiB", "500 MB" or a number of bytes"#
        let amount: SpaceAmount?
        switch entry.value {
        case .integer(let bytes): amount = bytes >= 0 ? .bytes(Int64(bytes)) : nil
        case .string(let text): amount = SpaceAmount(parsing: text)
        default: amount = nil
        }
        guard let amount else { throw invalid(key, "must be " + example) }
        if case .percent = amount, !percentAllowed { throw invalid(key, "must be " + example + " (not a percentage)") }
        try apply(amount)
    }

    /// A duration within `range` (seconds): a number of seconds, or a string in recd's one
    /// spelling of durations (`DurationText`: "90s", "30m", "1h30m", "30d", "2w", "01:30:00").
    func readDuration(_ key: String, in range: ClosedRange<Double>, _ apply: (Double) -> Void) throws(ConfigurationError) {
        used.insert(key)
        guard let entry = document.entry(key) else { return }
        let seconds: Double? = switch entry.value {
        case .integer(let value): Double(value)
        case .float(let value): value
        case .string(let text): DurationText.seconds(text, allowingZero: range.lowerBound == 0)
        default: nil
        }
        guard let seconds else {
            throw invalid(key, "must be a duration: " + DurationText.spellings)
        }
        if let requirement = Limits.requirement(seconds, range, "seconds") { throw invalid(key, requirement) }
        apply(seconds)
    }
}

/// A bad configuration: which file, line and key, and what is wrong.
public struct ConfigurationError: Error, CustomStringConvertible, Equatable {
    public var file: String
    public var line: Int?
    public var key: String?
    public var message: String

    public init(file: String, line: Int?, key: String?, message: String) {
        self.file = file
        self.line = line
        self.key = key
        self.message = message
    }

    public var description: String {
        var location = file
        if let line { location += ":\(line)" }
        if let key { return "\(location): \(key): \(message)" }
        return "\(location): \(message)"
    }
}

/// Reads typed values by dotted key, remembering which keys were used so that unknown ones
/// (typos) are errors rather than silently ignored.
final class KeyReader {
    let document: TOMLDocument
    let file: String
    var used: Set<String> = []

    init(document: TOMLDocument, file: String) {
        self.document = document
        self.file = file
    }

    func read<T>(_ key: String, _ apply: (T) throws(ConfigurationError) -> Void) throws(ConfigurationError) {
        used.insert(key)
        guard let entry = document.entry(key) else { return }
        let value: Any? = switch (T.self, entry.value) {
        case (is String.Type, .string(let string)): string
        case (is Int.Type, .integer(let integer)): integer
        case (is Double.Type, .float(let float)): float
        case (is Double.Type, .integer(let integer)): Double(integer)
        case (is Bool.Type, .bool(let bool)): bool
        case (is [String].Type, .array(let array)):
            array.allSatisfy { if case .string = $0 { true } else { false } }
                ? array.compactMap { if case .string(let string) = $0 { string } else { nil } } : nil
        default: nil
        }
        guard let typed = value as? T else { throw invalid(key, "must be \(Self.describe(T.self))") }
        try apply(typed)
    }

    /// A number that must lie in `range` (`unit` names it in the error).
    func read<T: Comparable & CustomStringConvertible>(_ key: String, in range: ClosedRange<T>, _ unit: String = "",
                                                       _ apply: (T) -> Void) throws(ConfigurationError) {
        try read(key) { (value: T) throws(ConfigurationError) in
            guard range.contains(value) else {
                throw invalid(key, "must be between \(range.lowerBound) and \(range.upperBound)" + (unit.isEmpty ? "" : " " + unit))
            }
            apply(value)
        }
    }

    /// One of an enumeration's string values.
    func read<T: RawRepresentable & CaseIterable>(_ key: String, _ apply: (T) -> Void) throws(ConfigurationError) where T.RawValue == String {
        try read(key) { (value: String) throws(ConfigurationError) in
            guard let typed = T(rawValue: value) else {
                throw invalid(key, "must be one of " + T.allCases.map(\.rawValue).joined(separator: ", "))
            }
            apply(typed)
        }
    }

    /// `arrays`: the arrays of tables that may appear (`[[source]]`). `stationTables`: tables
    /// that are known, but not here (a `[[source]]`'s `[source.mqtt]`), said as such.
    func rejectUnknownKeys(arrays: Set<String>, stationTables: Set<String> = [], stationKeys: Set<String> = []) throws(ConfigurationError) {
        let sections = Set(used.compactMap { $0.contains(".") ? String($0.split(separator: ".")[0]) : nil })
        for key in document.root.keys.sorted() where !used.contains(key) {
            throw ConfigurationError(file: file, line: line(of: key), key: key,
                                     message: sections.contains(key) ? "must be a table ([\(key)])"
                                        : stationKeys.contains(key) ? "is the station's, not a source's: set it at the top level" : "unknown key")
        }
        for name in document.arrays.keys.sorted() where !arrays.contains(name) {
            throw ConfigurationError(file: file, line: document.arrays[name]?.first?.line, key: name, message: "unknown array of tables")
        }
        for name in document.tables.keys.sorted() {
            guard sections.contains(name) else {
                throw ConfigurationError(file: file, line: line(of: name), key: name,
                                         message: stationTables.contains(name) ? "is the station's, not a source's: set it at the top level"
                                            : "unknown table")
            }
            for inner in document.tables[name]!.entries.keys.sorted() where !used.contains(name + "." + inner) {
                throw ConfigurationError(file: file, line: line(of: name + "." + inner), key: name + "." + inner, message: "unknown key")
            }
        }
    }

    /// The uids of user names (or numeric uids written as strings); an unknown name is an error
    /// at the key's line.
    func userIDs(_ key: String, _ names: [String]) throws(ConfigurationError) -> Set<uid_t> {
        try ids(key, names, kind: "user") { getpwnam($0)?.pointee.pw_uid }
    }

    /// The gids of group names (or numeric gids written as strings).
    func groupIDs(_ key: String, _ names: [String]) throws(ConfigurationError) -> Set<gid_t> {
        try ids(key, names, kind: "group") { getgrnam($0)?.pointee.gr_gid }
    }

    private func ids(_ key: String, _ names: [String], kind: String,
                     lookUp: (String) -> UInt32?) throws(ConfigurationError) -> Set<UInt32> {
        var result: Set<UInt32> = []
        for name in names {
            guard let id = UInt32(name) ?? lookUp(name) else { throw invalid(key, "no \(kind) named '\(name)'") }
            result.insert(id)
        }
        return result
    }

    func invalid(_ key: String, _ message: String) -> ConfigurationError {
        ConfigurationError(file: file, line: line(of: key), key: key, message: message)
    }

    /// The line a dotted key, or a table's header, is written on.
    func line(of key: String) -> Int? {
        document.entry(key)?.line ?? document.tables[key]?.line
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int.Type: "an integer"
        case is Double.Type: "a number"
        case is Bool.Type: "true or false"
        case is [String].Type: "a list of strings"
        default: "\(type)"
        }
    }
}
