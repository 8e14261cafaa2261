import FoundationEssentials

/// recd speaks JSON-RPC 2.0, one JSON object per line (UTF-8, `\n`), over a Unix stream socket.
/// See doc/protocol.md.
public enum JSONRPC {
    public static let version = "2.0"
    /// The longest request line the server reads; longer ones get an error and the connection closes.
    public static let maximumLineLength = 64 * 1024
    /// The protocol revision `version` reports; bumped on incompatible changes.
    public static let protocolRevision = 1
}

/// A request id: JSON-RPC allows numbers and strings (and null, which we treat as absent).
public enum RPCID: Hashable, Sendable, Codable, CustomStringConvertible {
    case number(Int64)
    case string(String)

    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int64.self) {
            self = .number(number)
        } else {
            self = .string(try container.decode(String.self))
        }
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .number(let number): try container.encode(number)
        case .string(let string): try container.encode(string)
        }
    }

    public var description: String {
        switch self {
        case .number(let number): String(number)
        case .string(let string): string
        }
    }
}

/// Error codes: JSON-RPC's own, and recd's server errors (-32000 ... -32099).
public enum RPCErrorCode {
    public static let parseError = -32700
    public static let invalidRequest = -32600
    public static let methodNotFound = -32601
    public static let invalidParams = -32602
    public static let internalError = -32603
    /// The recorder refused or failed; `data.code` is its stable code (`deviceBusy`, …).
    public static let recorderError = -32000
    /// The caller's uid/groups lack the permission the method needs; `data.permission` names it.
    public static let permissionDenied = -32001
    /// No recording by that name.
    public static let notFound = -32002
    /// The server is at its client limit; the connection closes.
    public static let tooManyClients = -32003
    /// `source` names no source of this station; `data.sources` lists them.
    public static let unknownSource = -32004
    /// The station has several sources and the request named none; `data.sources` lists them.
    public static let ambiguousSource = -32005
}

/// The `error` member of a response.
public struct RPCError: Error, Codable, Sendable, Equatable, CustomStringConvertible {
    public var code: Int
    public var message: String
    public var data: Details?

    /// Machine-readable details: `code` is a stable string (`deviceBusy`, `notPermitted`, …).
    public struct Details: Codable, Sendable, Equatable {
        public var code: String
        /// For `permissionDenied`: the permission that was missing (`control`).
        public var permission: String?
        /// For `unknownSource` and `ambiguousSource`: the station's sources, by name.
        public var sources: [String]?

        public init(code: String, permission: String? = nil, sources: [String]? = nil) {
            self.code = code
            self.permission = permission
            self.sources = sources
        }
    }

    public init(code: Int, message: String, data: Details? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    public var description: String { message }

    public static func parseError(_ message: String) -> RPCError {
        RPCError(code: RPCErrorCode.parseError, message: message, data: Details(code: "parseError"))
    }
    public static func invalidRequest(_ message: String) -> RPCError {
        RPCError(code: RPCErrorCode.invalidRequest, message: message, data: Details(code: "invalidRequest"))
    }
    public static func methodNotFound(_ method: String) -> RPCError {
        RPCError(code: RPCErrorCode.methodNotFound, message: "unknown method '\(method)'", data: Details(code: "methodNotFound"))
    }
    public static func invalidParams(_ message: String) -> RPCError {
        RPCError(code: RPCErrorCode.invalidParams, message: message, data: Details(code: "invalidParams"))
    }
    public static func permissionDenied(method: String, permission: String) -> RPCError {
        RPCError(code: RPCErrorCode.permissionDenied,
                 message: "'\(method)' needs the '\(permission)' permission, which this user does not have",
                 data: Details(code: "notPermitted", permission: permission))
    }
    public static func notFound(_ message: String) -> RPCError {
        RPCError(code: RPCErrorCode.notFound, message: message, data: Details(code: "notFound"))
    }
    public static func unknownSource(_ name: String, sources: [String]) -> RPCError {
        RPCError(code: RPCErrorCode.unknownSource, message: "no source named '\(name)' (this station has: \(sources.joined(separator: ", ")))",
                 data: Details(code: "unknownSource", sources: sources))
    }
    public static func ambiguousSource(sources: [String]) -> RPCError {
        RPCError(code: RPCErrorCode.ambiguousSource, message: "this station has several sources; name one with 'source': \(sources.joined(separator: ", "))",
                 data: Details(code: "ambiguousSource", sources: sources))
    }
}

/// The fields every incoming message has; `params` is decoded per method afterwards.
public struct RequestEnvelope: Decodable, Sendable {
    public var jsonrpc: String?
    public var id: RPCID?
    public var method: String?
    public var params: JSONValue?

    public init(jsonrpc: String? = JSONRPC.version, id: RPCID?, method: String, params: JSONValue? = nil) {
        self.jsonrpc = jsonrpc
        self.id = id
        self.method = method
        self.params = params
    }
}

/// A request as a client sends it.
public struct Request<Params: Encodable & Sendable>: Encodable, Sendable {
    public var jsonrpc = JSONRPC.version
    public var id: RPCID
    public var method: String
    public var params: Params?

    public init(id: RPCID, method: Method, params: Params?) {
        self.id = id
        self.method = method.rawValue
        self.params = params
    }
}

/// A successful response.
public struct Response<Result: Codable & Sendable>: Codable, Sendable {
    public var jsonrpc = JSONRPC.version
    public var id: RPCID?
    public var result: Result

    public init(id: RPCID?, result: Result) {
        self.id = id
        self.result = result
    }
}

/// A failed response.
public struct ErrorResponse: Codable, Sendable {
    public var jsonrpc = JSONRPC.version
    public var id: RPCID?
    public var error: RPCError

    public init(id: RPCID?, error: RPCError) {
        self.id = id
        self.error = error
    }

    private enum CodingKeys: String, CodingKey { case jsonrpc, id, error }

    /// `id` is written as null when the request's id could not be read, as JSON-RPC requires.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(jsonrpc, forKey: .jsonrpc)
        try container.encode(id, forKey: .id)
        try container.encode(error, forKey: .error)
    }
}

/// Any JSON value, for params before they are checked and for generic inspection.
public enum JSONValue: Codable, Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let bool = try? container.decode(Bool.self) { self = .bool(bool) }
        else if let number = try? container.decode(Double.self) { self = .number(number) }
        else if let string = try? container.decode(String.self) { self = .string(string) }
        else if let array = try? container.decode([JSONValue].self) { self = .array(array) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let bool): try container.encode(bool)
        case .number(let number): try container.encode(number)
        case .string(let string): try container.encode(string)
        case .array(let array): try container.encode(array)
        case .object(let object): try container.encode(object)
        }
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { return object[key] }
        return nil
    }
}

/// The encoders both ends use: ISO 8601 dates, stable key order.
public enum WireCoding {
    public static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(formatDate(date))
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    public static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            if let seconds = try? container.decode(Double.self) { return Date(timeIntervalSince1970: seconds) }
            let text = try container.decode(String.self)
            guard let date = parseDate(text) else {
                throw DecodingError.dataCorruptedError(in: container,
                    debugDescription: "'\(text)' is not an RFC 3339 time like 2026-11-21T09:30:00Z")
            }
            return date
        }
        return decoder
    }

    /// RFC 3339 with milliseconds, UTC.
    public static func formatDate(_ date: Date) -> String {
        // Rounded, as in the files' own start times (ISO8601FormatStyle truncates).
        UTCTimestamp.text(date)
    }

    /// An RFC 3339 date and time, with or without fractional seconds, any offset.
    public static func parseDate(_ text: String) -> Date? {
        UTCTimestamp.date(text, allowingDateOnly: false)
    }
}

extension Spectrum {
    /// The column as JSON, written by hand: what `WireCoding.encoder()` writes for it decodes
    /// to the same values (RecdProtocolTests checks), at a small part of the cost. A viewer gets
    /// 20 columns of 513 numbers a second, and the generic encoder spent more on them than the
    /// FFTs did (BENCHMARKS.md, the web page).
    public var wireJSON: [UInt8] {
        var json: [UInt8] = []
        json.reserveCapacity(dBFS.count * 7 + 120)
        json += Array(#"{"dBFS":["#.utf8)
        for (index, level) in dBFS.enumerated() {
            if index > 0 { json.append(UInt8(ascii: ",")) }
            Self.appendTenths(level, to: &json)
        }
        json += Array(#"],"period":\#(period),"sampleRate":\#(sampleRate),"size":\#(size),"time":\#(time)}"#.utf8)
        return json
    }

    /// A level (a multiple of 0.1, as the node rounds it) as its tenths: -78.1, 0.0, -160.0.
    private static func appendTenths(_ level: Float, to json: inout [UInt8]) {
        guard level.isFinite else { json += Array("-160.0".utf8); return }
        var tenths = Int((level * 10).rounded())
        if tenths < 0 {
            json.append(UInt8(ascii: "-"))
            tenths = -tenths
        }
        // Digits without an array of their own: 513 levels a column, 20 columns a second.
        let whole = tenths / 10
        var scale = 1
        while scale * 10 <= whole { scale *= 10 }
        while scale > 0 {
            json.append(UInt8(ascii: "0") + UInt8(whole / scale % 10))
            scale /= 10
        }
        json.append(UInt8(ascii: "."))
        json.append(UInt8(ascii: "0") + UInt8(tenths % 10))
    }
}
