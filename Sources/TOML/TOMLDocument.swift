/// The TOML that recd's configuration is written in, read strictly, for untrusted input.
///
/// What it reads: comments, `[table]` headers (one level), arrays of tables (`[[source]]`, each
/// element with its own keys and its own `[source.recording]` sub-tables, one level), `key =
/// value` lines with bare or quoted keys, and values that are basic or literal strings,
/// integers (decimal, `0x`, `0o`, `0b`, with `_` between digits), floats (`inf` and `nan`
/// included), booleans and arrays (over several lines, with comments and a trailing comma).
/// What recd never uses is refused with a clear message rather than half-read: dotted keys,
/// dotted table names outside an array of tables, inline tables, multi-line strings, dates
/// and times.
///
/// Why not a general TOML library: the one recd used (toml++ inside TOMLKit) aborts the process
/// on some malformed files, which fuzzing found within minutes; a configuration reader must
/// answer every input with a value or an error. This one is fuzzed by `make fuzz`.
public struct TOMLDocument: Sendable, Equatable {
    public enum Value: Sendable, Equatable {
        case string(String)
        case integer(Int)
        case float(Double)
        case bool(Bool)
        case array([Value])
    }

    /// A value with the line (from 1) its key is on.
    public struct Entry: Sendable, Equatable {
        public var value: Value
        public var line: Int

        public init(value: Value, line: Int) {
            self.value = value
            self.line = line
        }
    }

    /// Keys before the first table header.
    public private(set) var root: [String: Entry] = [:]
    /// Each table's keys, and the line of its header.
    public private(set) var tables: [String: (line: Int, entries: [String: Entry])] = [:]
    /// Each array of tables (`[[source]]`), its elements in order: an element is a document of
    /// its own (its keys in `root`, its `[source.recording]` sub-tables in `tables`, the lines
    /// those of the file), with the line of its header.
    public private(set) var arrays: [String: [(line: Int, element: TOMLDocument)]] = [:]

    public static func == (lhs: TOMLDocument, rhs: TOMLDocument) -> Bool {
        lhs.root == rhs.root && lhs.tables.keys == rhs.tables.keys
            && lhs.tables.allSatisfy { name, table in rhs.tables[name].map { $0.line == table.line && $0.entries == table.entries } ?? false }
            && lhs.arrays.keys == rhs.arrays.keys
            && lhs.arrays.allSatisfy { name, elements in
                rhs.arrays[name].map { $0.count == elements.count && zip($0, elements).allSatisfy { $0.line == $1.line && $0.element == $1.element } }
                    ?? false
            }
    }

    /// `key` (top level) or `table.key`.
    public func entry(_ dottedKey: String) -> Entry? {
        let parts = dottedKey.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        if parts.count == 1 { return root[dottedKey] }
        return tables[parts[0]]?.entries[parts[1]]
    }

    public init(parsing text: String) throws(TOMLError) {
        var parser = Parser(bytes: Array(text.utf8))
        try parser.parseDocument(into: &self)
    }

    fileprivate mutating func insert(_ key: String, _ entry: Entry, table: String?) throws(TOMLError) {
        if let table {
            guard tables[table]?.entries[key] == nil else { throw TOMLError(line: entry.line, message: "'\(table).\(key)' is set twice") }
            tables[table]!.entries[key] = entry
        } else {
            guard root[key] == nil else { throw TOMLError(line: entry.line, message: "'\(key)' is set twice") }
            guard tables[key] == nil else { throw TOMLError(line: entry.line, message: "'\(key)' is already a table") }
            root[key] = entry
        }
    }

    fileprivate mutating func addTable(_ name: String, line: Int) throws(TOMLError) {
        guard tables[name] == nil else { throw TOMLError(line: line, message: "table [\(name)] appears twice") }
        guard root[name] == nil else { throw TOMLError(line: line, message: "'\(name)' is already set as a key") }
        guard arrays[name] == nil else { throw TOMLError(line: line, message: "'\(name)' is an array of tables: [[\(name)]]") }
        tables[name] = (line, [:])
    }

    fileprivate mutating func addArrayElement(_ name: String, line: Int) throws(TOMLError) {
        guard tables[name] == nil else { throw TOMLError(line: line, message: "'\(name)' is already a table: [\(name)]") }
        guard root[name] == nil else { throw TOMLError(line: line, message: "'\(name)' is already set as a key") }
        arrays[name, default: []].append((line, TOMLDocument()))
    }

    private init() {}

    /// Where a key goes: the top level, a table, the last element of an array of tables, or
    /// a sub-table of that element.
    fileprivate enum Place {
        case root
        case table(String)
        case element(array: String)
        case elementTable(array: String, table: String)
    }

    fileprivate mutating func insert(_ key: String, _ entry: Entry, in place: Place) throws(TOMLError) {
        switch place {
        case .root: try insert(key, entry, table: nil)
        case .table(let table): try insert(key, entry, table: table)
        case .element(let array):
            try arrays[array]![arrays[array]!.count - 1].element.insert(key, entry, table: nil)
        case .elementTable(let array, let table):
            do {
                try arrays[array]![arrays[array]!.count - 1].element.insert(key, entry, table: table)
            } catch {
                // Said as the file says it: [source.recording]'s key, not the element's own table's.
                throw TOMLError(line: error.line, message: "'\(array).\(table).\(key)' is set twice")
            }
        }
    }

    fileprivate mutating func addElementTable(array: String, table: String, line: Int) throws(TOMLError) {
        guard arrays[array] != nil else {
            throw TOMLError(line: line, message: "[\(array).\(table)] must follow a [[\(array)]] (nested tables are used only under an array of tables)")
        }
        do {
            try arrays[array]![arrays[array]!.count - 1].element.addTable(table, line: line)
        } catch {
            guard error.message.hasPrefix("table [") else { throw error }
            throw TOMLError(line: error.line, message: "[\(array).\(table)] appears twice in one [[\(array)]]")
        }
    }
}

/// Why a file could not be read: the line (from 1) and what is wrong there.
public struct TOMLError: Error, Sendable, Equatable, CustomStringConvertible {
    public var line: Int
    public var message: String

    public init(line: Int, message: String) {
        self.line = line
        self.message = message
    }

    public var description: String { "line \(line): \(message)" }
}

/// A byte-level recursive-descent reader; every loop advances or stops, arrays nest at most
/// `maximumDepth` deep.
private struct Parser {
    let bytes: [UInt8]
    var index = 0
    var line = 1
    static let maximumDepth = 32

    init(bytes: [UInt8]) {
        self.bytes = bytes
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }  // a byte-order mark
    }

    var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    func error(_ message: String) -> TOMLError { TOMLError(line: line, message: message) }

    mutating func parseDocument(into document: inout TOMLDocument) throws(TOMLError) {
        var place = TOMLDocument.Place.root
        while true {
            skipBlanks()
            guard let byte = current else { return }
            switch byte {
            case UInt8(ascii: "\n"):
                index += 1
                line += 1
            case UInt8(ascii: "\r"):
                try endOfLine()
            case UInt8(ascii: "#"):
                try skipComment()
            case UInt8(ascii: "["):
                let headerLine = line
                index += 1
                place = try header(into: &document, line: headerLine)
                try endOfLine()
            default:
                let keyLine = line
                let name = try key(what: "expected a key, a [table] or a comment")
                skipBlanks()
                if current == UInt8(ascii: ".") { throw error("dotted keys (a.b = …) are not used in recd's configuration") }
                guard current == UInt8(ascii: "=") else { throw error("expected '=' after '\(name)'") }
                index += 1
                skipBlanks()
                let value = try value(depth: 0)
                try document.insert(name, TOMLDocument.Entry(value: value, line: keyLine), in: place)
                try endOfLine()
            }
        }
    }

    /// After a header's `[`: a table, an element of an array of tables (`[[source]]`) or a
    /// table of that array's last element (`[source.recording]`). Where the keys after it go.
    mutating func header(into document: inout TOMLDocument, line: Int) throws(TOMLError) -> TOMLDocument.Place {
        let tableHeader = "a table header must be a name in brackets, like [recording]"
        if current == UInt8(ascii: "[") {
            let arrayHeader = "an array of tables' header must be a name in double brackets, like [[source]]"
            index += 1
            let name = try headerName(arrayHeader)
            if current == UInt8(ascii: ".") { throw error("nested arrays of tables ([[a.b]]) are not used in recd's configuration") }
            try closeHeader(arrayHeader)
            try closeHeader("an array of tables' header ends with ]]")
            try document.addArrayElement(name, line: line)
            return .element(array: name)
        }
        let name = try headerName(tableHeader)
        if current == UInt8(ascii: ".") {
            let innerHeader = "a table header must be a name in brackets, like [source.recording]"
            index += 1
            let inner = try headerName(innerHeader)
            if current == UInt8(ascii: ".") { throw error("tables nested deeper than [a.b] are not used in recd's configuration") }
            try closeHeader(innerHeader)
            try document.addElementTable(array: name, table: inner, line: line)
            return .elementTable(array: name, table: inner)
        }
        try closeHeader(tableHeader)
        try document.addTable(name, line: line)
        return .table(name)
    }

    /// A header's name, with the blanks around it.
    mutating func headerName(_ what: String) throws(TOMLError) -> String {
        skipBlanks()
        let name = try key(what: what)
        skipBlanks()
        return name
    }

    /// The `]` that closes a header.
    mutating func closeHeader(_ what: String) throws(TOMLError) {
        guard current == UInt8(ascii: "]") else { throw error(what) }
        index += 1
    }

    /// Spaces and tabs.
    mutating func skipBlanks() {
        while let byte = current, byte == 0x20 || byte == 0x09 { index += 1 }
    }

    mutating func skipComment() throws(TOMLError) {
        while let byte = current, byte != UInt8(ascii: "\n") {
            if byte == 0x7F || (byte < 0x20 && byte != 0x09 && byte != 0x0D) { throw error("a control character in a comment") }
            index += 1
        }
    }

    /// After a header or a value: blanks, an optional comment, then a line break or the end.
    mutating func endOfLine() throws(TOMLError) {
        skipBlanks()
        if current == UInt8(ascii: "#") { try skipComment() }
        if current == UInt8(ascii: "\r") {
            index += 1
            guard current == UInt8(ascii: "\n") else { throw error("a carriage return must be followed by a line feed") }
        }
        guard let byte = current else { return }
        guard byte == UInt8(ascii: "\n") else { throw error("unexpected text after the value; one setting per line") }
        index += 1
        line += 1
    }

    /// A bare key (`A-Za-z0-9_-`) or a quoted one.
    mutating func key(what: String) throws(TOMLError) -> String {
        guard let byte = current else { throw error(what) }
        if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
            let name = try string()
            if name.isEmpty { throw error("an empty key ('' = …) is not a setting") }
            // recd names settings `table.key`: a dot inside a name would make that ambiguous.
            if name.contains(".") { throw error("a name with a dot in it ('\(name)') is not a setting") }
            return name
        }
        let start = index
        while let byte = current, Self.isBareKey(byte) { index += 1 }
        guard index > start else { throw error(what) }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    static func isBareKey(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
    }

    mutating func value(depth: Int) throws(TOMLError) -> TOMLDocument.Value {
        guard let byte = current, byte != UInt8(ascii: "\n"), byte != UInt8(ascii: "#") else { throw error("a value is missing") }
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "'"):
            return .string(try string())
        case UInt8(ascii: "["):
            return .array(try array(depth: depth + 1))
        case UInt8(ascii: "{"):
            throw error("inline tables ({ … }) are not used in recd's configuration")
        default:
            return try scalar()
        }
    }

    mutating func array(depth: Int) throws(TOMLError) -> [TOMLDocument.Value] {
        guard depth <= Self.maximumDepth else { throw error("arrays nested more than \(Self.maximumDepth) deep") }
        index += 1  // [
        var elements: [TOMLDocument.Value] = []
        while true {
            try skipWhitespaceCommentsAndNewlines()
            guard let byte = current else { throw error("an array is not closed with ']'") }
            if byte == UInt8(ascii: "]") {
                index += 1
                return elements
            }
            elements.append(try value(depth: depth))
            try skipWhitespaceCommentsAndNewlines()
            guard let next = current else { throw error("an array is not closed with ']'") }
            if next == UInt8(ascii: ",") {
                index += 1
            } else if next != UInt8(ascii: "]") {
                throw error("expected ',' or ']' in an array")
            }
        }
    }

    mutating func skipWhitespaceCommentsAndNewlines() throws(TOMLError) {
        while let byte = current {
            switch byte {
            case 0x20, 0x09: index += 1
            case UInt8(ascii: "\n"):
                index += 1
                line += 1
            case UInt8(ascii: "\r"):
                index += 1
                guard current == UInt8(ascii: "\n") else { throw error("a carriage return must be followed by a line feed") }
            case UInt8(ascii: "#"): try skipComment()
            default: return
            }
        }
    }

    /// A basic ("…", with escapes) or literal ('…') string on one line.
    mutating func string() throws(TOMLError) -> String {
        let quote = bytes[index]
        if bytes[index...].starts(with: [quote, quote, quote]) {
            throw error("multi-line strings are not used in recd's configuration")
        }
        index += 1
        var result: [UInt8] = []
        while true {
            guard let byte = current, byte != UInt8(ascii: "\n") else { throw error("a string is not closed on its line") }
            index += 1
            if byte == quote { break }
            if byte == 0x7F || (byte < 0x20 && byte != 0x09) { throw error("a control character in a string; write it as an escape") }
            guard quote == UInt8(ascii: "\""), byte == UInt8(ascii: "\\") else {
                result.append(byte)
                continue
            }
            guard let escape = current else { throw error("a string is not closed on its line") }
            index += 1
            switch escape {
            case UInt8(ascii: "b"): result.append(0x08)
            case UInt8(ascii: "t"): result.append(0x09)
            case UInt8(ascii: "n"): result.append(0x0A)
            case UInt8(ascii: "f"): result.append(0x0C)
            case UInt8(ascii: "r"): result.append(0x0D)
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): result.append(escape)
            case UInt8(ascii: "u"), UInt8(ascii: "U"):
                let count = escape == UInt8(ascii: "u") ? 4 : 8
                guard index + count <= bytes.count,
                      let code = UInt32(String(decoding: bytes[index..<index + count], as: UTF8.self), radix: 16),
                      let scalar = Unicode.Scalar(code) else { throw error("an invalid \\u escape in a string") }
                index += count
                result.append(contentsOf: Array(String(Character(scalar)).utf8))
            default:
                throw error("an unknown escape '\\\(Character(Unicode.Scalar(escape)))' in a string")
            }
        }
        guard let text = String(validating: result, as: UTF8.self) else { throw error("a string is not valid UTF-8") }
        return text
    }

    /// An integer, a float or a boolean: up to the next blank, comma, bracket, comment or line end.
    mutating func scalar() throws(TOMLError) -> TOMLDocument.Value {
        let start = index
        while let byte = current, !Self.endsScalar(byte) { index += 1 }
        let token = String(decoding: bytes[start..<index], as: UTF8.self)
        switch token {
        case "true": return .bool(true)
        case "false": return .bool(false)
        case "inf", "+inf": return .float(.infinity)
        case "-inf": return .float(-.infinity)
        case "nan", "+nan", "-nan": return .float(.nan)
        default: break
        }
        if let integer = Self.integer(token) { return .integer(integer) }
        if let float = Self.float(token) { return .float(float) }
        if token.contains(":") || token.filter({ $0 == "-" }).count >= 2 {
            throw error("dates and times are not used in recd's configuration")
        }
        throw error(token.isEmpty ? "a value is missing" : "'\(token)' is not a value (strings need quotes)")
    }

    static func endsScalar(_ byte: UInt8) -> Bool {
        [0x20, 0x09, 0x0A, 0x0D, UInt8(ascii: ","), UInt8(ascii: "]"), UInt8(ascii: "["), UInt8(ascii: "#"),
         UInt8(ascii: "="), UInt8(ascii: "\""), UInt8(ascii: "'"), UInt8(ascii: "{"), UInt8(ascii: "}")].contains(byte)
    }

    /// Digits with single underscores between them.
    static func digits(_ text: Substring, radix: Int) -> Substring? {
        guard let first = text.first, let last = text.last, first != "_", last != "_", !text.contains("__") else { return nil }
        let plain = text.filter { $0 != "_" }
        guard !plain.isEmpty, plain.allSatisfy({ $0.isASCII && $0.hexDigitValue.map { $0 < radix } == true }) else { return nil }
        return Substring(plain)
    }

    static func integer(_ token: String) -> Int? {
        var text = Substring(token)
        for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] where text.hasPrefix(prefix) {
            return digits(text.dropFirst(2), radix: radix).flatMap { Int($0, radix: radix) }
        }
        var negative = false
        if let sign = text.first, sign == "+" || sign == "-" {
            negative = sign == "-"
            text = text.dropFirst()
        }
        guard let plain = digits(text, radix: 10), plain == "0" || !plain.hasPrefix("0") else { return nil }
        return Int(negative ? "-" + plain : plain)
    }

    static func float(_ token: String) -> Double? {
        var text = Substring(token)
        var sign = ""
        if let first = text.first, first == "+" || first == "-" {
            sign = first == "-" ? "-" : ""
            text = text.dropFirst()
        }
        let exponentSplit = text.split(separator: "e", maxSplits: 1, omittingEmptySubsequences: false)
            .flatMap { $0.split(separator: "E", maxSplits: 1, omittingEmptySubsequences: false) }
        guard (1...2).contains(exponentSplit.count) else { return nil }
        let mantissa = exponentSplit[0]
        let parts = mantissa.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = digits(parts[0], radix: 10), whole == "0" || !whole.hasPrefix("0") else { return nil }
        var number = sign + whole
        if parts.count == 2 {
            guard let fraction = digits(parts[1], radix: 10) else { return nil }
            number += "." + fraction
        }
        if exponentSplit.count == 2 {
            var exponent = exponentSplit[1]
            var exponentSign = ""
            if let first = exponent.first, first == "+" || first == "-" {
                exponentSign = String(first)
                exponent = exponent.dropFirst()
            }
            guard let value = digits(exponent, radix: 10) else { return nil }
            number += "e" + exponentSign + value
        } else if parts.count == 1 {
            return nil  // an integer, or nothing
        }
        return Double(number)
    }
}
