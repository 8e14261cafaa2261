import NIOConcurrencyHelpers
import RecdProtocol

/// Encodes method results for the wire, and keeps `status`'s last answer: status bars and
/// scripts ask for it again and again, and it changes only when the recorder publishes
/// something (or the configuration is reloaded). A fresh `StatusResult` is still built for
/// every call (a few locked reads); only an equal one reuses the kept bytes.
final class ResultEncoder: Sendable {
    private let lastStatus = NIOLockedValueBox<(result: StatusResult, json: String)?>(nil)

    /// The result as JSON; nil if it cannot be encoded (a non-finite number).
    func encode(_ result: any Encodable & Sendable) -> String? {
        guard let status = result as? StatusResult else { return Self.encodeJSON(result) }
        return encode(status: status)
    }

    func encode(status: StatusResult) -> String? {
        // Compared in place: a copy of the kept result would retain each of its members.
        if let json = lastStatus.withLockedValue({ $0?.result == status ? $0?.json : nil }) { return json }
        guard let json = Self.encodeJSON(status) else { return nil }
        lastStatus.withLockedValue { $0 = (status, json) }
        return json
    }

    private static func encodeJSON(_ value: some Encodable) -> String? {
        (try? WireCoding.encoder().encode(value)).map { String(decoding: $0, as: UTF8.self) }
    }
}
