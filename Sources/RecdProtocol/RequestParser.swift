import FoundationEssentials

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
        if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { return .blank }
        guard line.count <= JSONRPC.maximumLineLength else {
            return .unreadable(.invalidRequest("request line exceeds \(JSONRPC.maximumLineLength) bytes; closing the connection"))
        }
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(line))
        } catch {
            return .unreadable(.parseError("not valid JSON: \(describeParseError(error))"))
        }
        guard case .array(let elements) = value else { return .single(item(value)) }
        guard !elements.isEmpty else { return .unreadable(.invalidRequest("an empty batch: send at least one request")) }
        return .batch(elements.map(item))
    }

    /// Checks one request object.
    public static func item(_ value: JSONValue) -> RequestItem {
        guard case .object(let members) = value else {
            return .invalid(.invalidRequest("a request must be a JSON object"), id: nil, answered: true)
        }
        let id: RPCID?
        switch members["id"] {
        case nil, .null?: id = nil
        case .string(let string)?: id = .string(string)
        case .number(let number)? where number.rounded() == number && abs(number) < 9e15: id = .number(Int64(number))
        default: return .invalid(.invalidRequest("'id' must be a string or an integer"), id: nil, answered: true)
        }
        let isNotification = members["id"] == nil
        func invalid(_ message: String) -> RequestItem { .invalid(.invalidRequest(message), id: id, answered: true) }
        func failed(_ error: RPCError) -> RequestItem { .invalid(error, id: id, answered: !isNotification) }

        guard members["jsonrpc"] == .string(JSONRPC.version) else { return invalid("'jsonrpc' must be \"2.0\"") }
        if let unknown = members.keys.sorted().first(where: { !allowedMembers.contains($0) }) {
            return invalid("unknown member '\(unknown)' in request")
        }
        guard case .string(let name)? = members["method"] else { return invalid("'method' must be a string") }
        let params = members["params"]
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

    private static func describeParseError(_ error: Error) -> String {
        if case DecodingError.dataCorrupted(let context) = error {
            return context.underlyingError.map { "\($0)" } ?? context.debugDescription
        }
        return "\(error)"
    }
}
