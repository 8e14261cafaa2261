import FoundationEssentials

// Params as every way in reads them (the socket's dispatch table and MQTT's commands): decoded
// from JSON into their typed form, with one sentence naming the member when that fails.

/// Decodes params that passed the member check into their typed form.
public func decodeParams<T: Decodable>(_ type: T.Type, _ params: JSONValue?) throws(RPCError) -> T? {
    guard let params, params != .null else { return nil }
    do {
        let data = try WireCoding.encoder().encode(params)
        return try WireCoding.decoder().decode(T.self, from: data)
    } catch let error as DecodingError {
        // A number an integer member cannot hold (a fraction, 2^63 and beyond) fails before the
        // decoder knows which member it was reading: name the member here.
        if case .dataCorrupted(let context) = error, context.codingPath.isEmpty, case .object(let members) = params,
           let (name, value) = members.sorted(by: { $0.key < $1.key }).first(where: { member in
               guard case .number(let number) = member.value else { return false }
               return number != number.rounded() || Swift.abs(number) >= 9.2e18
           }), case .number(let number) = value {
            throw .invalidParams("'\(name)' must be an integer" + (StartParams.range(of: name).map { " " + $0 } ?? "")
                                 + ", not \(Limits.number(number))")
        }
        throw .invalidParams(describe(error))
    } catch {
        throw .invalidParams("\(error)")
    }
}

/// A DecodingError in one sentence naming the member and, for enumerations, the values allowed.
public func describe(_ error: DecodingError) -> String {
    func path(_ context: DecodingError.Context) -> String {
        var text = ""
        for key in context.codingPath {
            if let index = key.intValue { text += "[\(index)]" } else { text += (text.isEmpty ? "" : ".") + key.stringValue }
        }
        return text.isEmpty ? "params" : "'" + text + "'"
    }
    func member(_ context: DecodingError.Context) -> String? {
        context.codingPath.last(where: { $0.intValue == nil })?.stringValue
    }
    /// What a member must be, by name, when the decoder's own words would name Swift types.
    func expectation(_ context: DecodingError.Context) -> String? {
        switch member(context) {
        case "format": "one of " + AudioFileFormat.names
        case "quality": "one of " + RecordingQuality.allCases.map(\.rawValue).joined(separator: ", ")
        case "topics": "a list of topics: " + Topic.allCases.map(\.rawValue).joined(separator: ", ")
        case "sampleRate", "channels", "bitDepth", "bitRate": "an integer"
        case "duration", "interval": "a number of seconds"
        case "at": "an RFC 3339 time (2026-11-21T09:30:00Z) or seconds since 1970"
        case "name", "from", "to", "subscription": "a string"
        default: nil
        }
    }
    switch error {
    case .typeMismatch(let type, let context):
        return "\(path(context)) must be \(expectation(context) ?? describeType(type))"
    case .valueNotFound(let type, let context):
        return "\(path(context)) must be \(expectation(context) ?? describeType(type)), not null"
    case .keyNotFound(let key, _):
        return "'\(key.stringValue)' is required"
    case .dataCorrupted(let context):
        if let expected = expectation(context) { return "\(path(context)) must be \(expected)" }
        return "\(path(context)): \(context.debugDescription)"
    @unknown default:
        return "\(error)"
    }
}

private func describeType(_ type: Any.Type) -> String {
    switch type {
    case is String.Type: "a string"
    case is Int.Type, is Int64.Type, is UInt64.Type: "an integer"
    case is Double.Type: "a number"
    case is Bool.Type: "true or false"
    default: "\(type)"
    }
}
