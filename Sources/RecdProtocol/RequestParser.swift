/// A request that passed every check that does not depend on who sent it.
public struct ParsedRequest: Sendable, Equatable {
    /// nil for a notification, and for a request whose `id` was null.
    public var id: RPCID?
    /// No `id` member at all: JSON-RPC's notification, never answered, not even with an error.
    public var isNotification: Bool
    public var method: Method
    /// An object with the method's own members only, or nil.
    public var params: JSONValue?

    public init(id: RPCID?, isNotification: Bool, method: Method, params: JSONValue?) {
        self.id = id
        self.isNotification = isNotification
        self.method = method
        self.params = params
    }
}

/// One element of a line: a request to dispatch, or the error that answers it.
public enum RequestItem: Sendable, Equatable {
    case request(ParsedRequest)
    /// Answered with `error` and `id` (null when the id could not be read) unless `answered`
    /// is false: a well-formed notification that fails is never answered.
    case invalid(RPCError, id: RPCID?, answered: Bool)

    /// The error response this item gets, if any.
    public var errorResponse: ErrorResponse? {
        guard case .invalid(let error, let id, true) = self else { return nil }
        return ErrorResponse(id: id, error: error)
    }
}

/// What one line of input is (JSON-RPC 2.0 sections 4-6, plus recd's stricter rules).
public enum ParsedLine: Sendable, Equatable {
    /// Only spaces or tabs: ignored.
    case blank
    case single(RequestItem)
    /// A non-empty array: answered with one array of the answers, or nothing if none is due.
    case batch([RequestItem])
    /// Not JSON, an empty batch or an over-long line: one error with `"id": null`.
    case unreadable(RPCError)
}

/// Turns a request line into requests or errors. Pure: no I/O, no state, no peer.
///
/// What is checked here, in this order: the line is JSON; each request is an object; its `id`
/// is a string, an integer or null; `jsonrpc` is "2.0"; it has no other members than `jsonrpc`,
/// `id`, `method` and `params`; `method` is a string; `params` is an object, an array or absent.
/// Those make an Invalid Request, answered even without an id (with `"id": null` when the id is
/// unreadable). Then the method must exist and `params` must be an object holding only the
/// method's members (an empty array, which generic clients send, counts as none); those failures
/// are answered only when the request has an id.
public enum RequestParser {
    private static let allowedMembers: Set<String> = ["jsonrpc", "id", "method", "params"]

    public static func parse(_ line: some Collection<UInt8>) -> ParsedLine {
        line.withContiguousStorageIfAvailable { parse(bytes: UnsafeRawBufferPointer($0)) }
            ?? Array(line).withUnsafeBytes { parse(bytes: $0) }
    }

    /// `parse` for bytes in memory: not generic, so a caller in another module runs it
    /// specialized (the server parses every request line here).
    public static func parse(bytes line: UnsafeRawBufferPointer) -> ParsedLine {
        if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { return .blank }
        guard line.count <= JSONRPC.maximumLineLength else {
            return .unreadable(.invalidRequest("request line exceeds \(JSONRPC.maximumLineLength) bytes; closing the connection"))
        }
        switch scan(line) {
        case .failure(let error):
            return .unreadable(.parseError("not valid JSON: \(error.message)"))
        case .success(.element(let element)):
            return .single(item(element))
        case .success(.batch(let elements)):
            guard !elements.isEmpty else { return .unreadable(.invalidRequest("an empty batch: send at least one request")) }
            return .batch(elements.map(item))
        }
    }

    private static func scan(_ bytes: UnsafeRawBufferPointer) -> Result<ScannedLine, JSONSyntaxError> {
        var scanner = JSONScanner(bytes)
        return Result { () throws(JSONSyntaxError) in try scanner.line() }
    }

    /// Checks one request (a JSON value of any kind; a request must be an object).
    public static func item(_ value: JSONValue) -> RequestItem {
        guard case .object(let object) = value else { return item(.other(value)) }
        var members = RequestMembers()
        for (name, value) in object { members.set(name, value) }
        return item(.object(members))
    }

    static func item(_ element: ScannedElement) -> RequestItem {
        guard case .object(let members) = element else {
            return .invalid(.invalidRequest("a request must be a JSON object"), id: nil, answered: true)
        }
        let id: RPCID?
        switch members.id {
        case nil, .null?: id = nil
        case .string(let string)?: id = .string(string)
        case .number(let number)? where number.rounded() == number && abs(number) < 9e15: id = .number(Int64(number))
        default: return .invalid(.invalidRequest("'id' must be a string or an integer"), id: nil, answered: true)
        }
        let isNotification = members.id == nil
        func invalid(_ message: String) -> RequestItem { .invalid(.invalidRequest(message), id: id, answered: true) }
        func failed(_ error: RPCError) -> RequestItem { .invalid(error, id: id, answered: !isNotification) }

        guard members.jsonrpc == .string(JSONRPC.version) else { return invalid("'jsonrpc' must be \"2.0\"") }
        if let unknown = members.unknown.min() { return invalid("unknown member '\(unknown)' in request") }
        guard case .string(let name)? = members.method else { return invalid("'method' must be a string") }
        let params = members.params
        switch params {
        case nil, .null?, .object?, .array?: break
        default: return invalid("'params' must be an object or an array")
        }
        guard let method = Method(rawValue: name) else { return failed(.methodNotFound(name)) }
        switch params {
        case .object(let object)?:
            if let unknown = object.keys.sorted().first(where: { !method.parameterNames.contains($0) }) {
                let accepted = method.parameterNames.sorted().joined(separator: ", ")
                return failed(.invalidParams("unknown parameter '\(unknown)' for '\(name)'"
                                             + (accepted.isEmpty ? " (it takes none)" : " (accepted: \(accepted))")))
            }
        case .array(let positional)? where !positional.isEmpty:
            return failed(.invalidParams("params must be an object with named members"))
        default:
            break
        }
        return .request(ParsedRequest(id: id, isNotification: isNotification, method: method,
                                      params: params == .null || params == .array([]) ? nil : params))
    }
}

/// The members of a request object as the scanner found them (the last of a repeated member
/// counts); only `params` is kept as a tree, for the method's own decoding.
struct RequestMembers: Equatable {
    var jsonrpc: JSONValue?
    var id: JSONValue?
    var method: JSONValue?
    var params: JSONValue?
    /// Names of members a request may not have.
    var unknown: [String] = []

    mutating func set(_ name: String, _ value: JSONValue) {
        switch name {
        case "jsonrpc": jsonrpc = value
        case "id": id = value
        case "method": method = value
        case "params": params = value
        default: unknown.append(name)
        }
    }
}

/// One element of a line: an object read as a request's members, or any other JSON value.
enum ScannedElement {
    case object(RequestMembers)
    case other(JSONValue)
}

enum ScannedLine {
    case element(ScannedElement)
    /// A JSON array at the top: each element a request.
    case batch([ScannedElement])
}

/// Why a line is not JSON, for the parse error's message.
struct JSONSyntaxError: Error {
    let message: String
}

/// A strict JSON (RFC 8259) reader over one line, written for requests: the top-level object,
/// or each object of a top-level array, is read straight into `RequestMembers`; other values
/// become `JSONValue`s. Invalid UTF-8, lone surrogates, trailing data and nesting deeper than
/// `maximumDepth` are errors, as they were for JSONDecoder.
struct JSONScanner {
    static let maximumDepth = 512

    private let bytes: UnsafeRawBufferPointer
    private var position = 0
    private var depth = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    /// The whole line: one value, then nothing but whitespace.
    mutating func line() throws(JSONSyntaxError) -> ScannedLine {
        skipWhitespace()
        let scanned: ScannedLine
        if peek() == UInt8(ascii: "[") {
            scanned = .batch(try array { (scanner) throws(JSONSyntaxError) in try scanner.element() })
        } else {
            scanned = .element(try element())
        }
        skipWhitespace()
        guard position == bytes.count else { throw error("data after the JSON value") }
        return scanned
    }

    private mutating func element() throws(JSONSyntaxError) -> ScannedElement {
        skipWhitespace()
        guard peek() == UInt8(ascii: "{") else { return .other(try value()) }
        var members = RequestMembers()
        try object { (scanner, name) throws(JSONSyntaxError) in members.set(name, try scanner.value()) }
        return .object(members)
    }

    private mutating func value() throws(JSONSyntaxError) -> JSONValue {
        skipWhitespace()
        guard let byte = peek() else { throw error("the line ends where a value was expected") }
        switch byte {
        case UInt8(ascii: "{"):
            var members: [String: JSONValue] = [:]
            try object { (scanner, name) throws(JSONSyntaxError) in members[name] = try scanner.value() }
            return .object(members)
        case UInt8(ascii: "["):
            return .array(try array { (scanner) throws(JSONSyntaxError) in try scanner.value() })
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
        default: throw error("unexpected \(describe(byte))")
        }
    }

    /// `[ element, … ]`, reading each element with `element`.
    private mutating func array<Element>(
        _ element: (inout JSONScanner) throws(JSONSyntaxError) -> Element
    ) throws(JSONSyntaxError) -> [Element] {
        try enter()
        position += 1
        var elements: [Element] = []
        skipWhitespace()
        if peek() == UInt8(ascii: "]") {
            position += 1
        } else {
            while true {
                elements.append(try element(&self))
                if try separator(closing: UInt8(ascii: "]")) { break }
            }
        }
        depth -= 1
        return elements
    }

    /// `{ "name": value, … }`, calling `member` with the scanner positioned at each value.
    private mutating func object(
        _ member: (inout JSONScanner, String) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) {
        try enter()
        position += 1
        skipWhitespace()
        if peek() == UInt8(ascii: "}") {
            position += 1
        } else {
            while true {
                skipWhitespace()
                guard peek() == UInt8(ascii: "\"") else { throw error("expected a member name in quotes") }
                let name = try string()
                skipWhitespace()
                guard peek() == UInt8(ascii: ":") else { throw error("expected ':' after a member name") }
                position += 1
                try member(&self, name)
                if try separator(closing: UInt8(ascii: "}")) { break }
            }
        }
        depth -= 1
    }

    private mutating func enter() throws(JSONSyntaxError) {
        depth += 1
        guard depth <= Self.maximumDepth else { throw error("nested deeper than \(Self.maximumDepth) levels") }
    }

    /// After an element: true at the closing bracket, false at a comma (both consumed).
    private mutating func separator(closing: UInt8) throws(JSONSyntaxError) -> Bool {
        skipWhitespace()
        switch peek() {
        case UInt8(ascii: ",")?: position += 1; return false
        case closing?: position += 1; return true
        case nil: throw error("the line ends inside \(closing == UInt8(ascii: "]") ? "an array" : "an object")")
        default: throw error("expected ',' or '\(Character(Unicode.Scalar(closing)))'")
        }
    }

    private mutating func string() throws(JSONSyntaxError) -> String {
        let start = position
        position += 1  // the opening quote
        var decoded: [UInt8]?  // only once an escape is met
        var plainFrom = position
        while true {
            guard let byte = peek() else { throw error("the line ends inside a string", at: start) }
            switch byte {
            case UInt8(ascii: "\""):
                let text: String?
                if var decoded {
                    decoded.append(contentsOf: bytes[plainFrom..<position])
                    text = String(validating: decoded, as: UTF8.self)
                } else {
                    let plain = UnsafeRawBufferPointer(rebasing: bytes[plainFrom..<position])
                    // ASCII (method names, members, most ids) needs no validation, which is slow.
                    text = plain.allSatisfy { $0 < 0x80 }
                        ? plain.withMemoryRebound(to: UInt8.self) { String(decoding: $0, as: UTF8.self) }
                        : String(validating: plain, as: UTF8.self)
                }
                guard let text else { throw error("a string that is not valid UTF-8", at: start) }
                position += 1
                return text
            case UInt8(ascii: "\\"):
                var buffer = decoded ?? []
                buffer.append(contentsOf: bytes[plainFrom..<position])
                try escape(into: &buffer)
                decoded = buffer
                plainFrom = position
            case 0x00..<0x20:
                throw error("a control character in a string (escape it)")
            default:
                position += 1
            }
        }
    }

    /// One escape sequence after a backslash, appended as UTF-8.
    private mutating func escape(into buffer: inout [UInt8]) throws(JSONSyntaxError) {
        let start = position
        position += 1
        guard let byte = peek() else { throw error("the line ends inside a string") }
        position += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): buffer.append(byte)
        case UInt8(ascii: "b"): buffer.append(0x08)
        case UInt8(ascii: "f"): buffer.append(0x0C)
        case UInt8(ascii: "n"): buffer.append(0x0A)
        case UInt8(ascii: "r"): buffer.append(0x0D)
        case UInt8(ascii: "t"): buffer.append(0x09)
        case UInt8(ascii: "u"):
            var value = try hex4()
            if (0xD800..<0xDC00).contains(value) {
                // A high surrogate: its low half must follow as a second escape.
                guard peek() == UInt8(ascii: "\\"), peek(1) == UInt8(ascii: "u") else {
                    throw error("a lone surrogate in a \\u escape", at: start)
                }
                position += 2
                let low = try hex4()
                guard (0xDC00..<0xE000).contains(low) else { throw error("a lone surrogate in a \\u escape", at: start) }
                value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00..<0xE000).contains(value) {
                throw error("a lone surrogate in a \\u escape", at: start)
            }
            guard let scalar = Unicode.Scalar(value) else { throw error("an invalid \\u escape", at: start) }
            buffer.append(contentsOf: UTF8.encode(scalar)!)
        default:
            throw error("an invalid escape in a string", at: start)
        }
    }

    private mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = peek() else { throw error("the line ends inside a \\u escape") }
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error("a \\u escape needs four hexadecimal digits")
            }
            value = value << 4 | UInt32(digit)
            position += 1
        }
        return value
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    private mutating func number() throws(JSONSyntaxError) -> Double {
        let start = position
        if peek() == UInt8(ascii: "-") { position += 1 }
        if peek() == UInt8(ascii: "0") {
            position += 1
        } else {
            guard try digits() > 0 else { throw error("a number needs digits", at: start) }
        }
        if peek() == UInt8(ascii: ".") {
            position += 1
            guard try digits() > 0 else { throw error("a number needs digits after '.'", at: start) }
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            position += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { position += 1 }
            guard try digits() > 0 else { throw error("a number needs digits in its exponent", at: start) }
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
        guard let number = Double(text), number.isFinite else { throw error("the number \(text) is out of range", at: start) }
        return number
    }

    /// Skips decimal digits; returns how many.
    private mutating func digits() throws(JSONSyntaxError) -> Int {
        let start = position
        while let byte = peek(), byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { position += 1 }
        return position - start
    }

    private mutating func literal(_ word: StaticString) throws(JSONSyntaxError) {
        let start = position
        for expected in UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount) {
            guard peek() == expected else { throw error("expected \(word)", at: start) }
            position += 1
        }
    }

    private mutating func skipWhitespace() {
        while let byte = peek(), byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { position += 1 }
    }

    private func peek(_ offset: Int = 0) -> UInt8? {
        position + offset < bytes.count ? bytes[position + offset] : nil
    }

    private func describe(_ byte: UInt8) -> String {
        (0x21..<0x7F).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
    }

    private func error(_ what: String, at offset: Int? = nil) -> JSONSyntaxError {
        JSONSyntaxError(message: "\(what) at byte \((offset ?? position) + 1)")
    }
}
