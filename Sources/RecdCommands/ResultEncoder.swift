import NIOConcurrencyHelpers
import RecdProtocol

/// Encodes method results for the wire, and keeps `status`'s last answer: status bars and
/// scripts ask for it again and again, and it changes only when the recorder publishes
/// something (or the configuration is reloaded). A fresh `StatusResult` is still built for
/// every call (a few locked reads); only an equal one reuses the kept bytes.
public final class ResultEncoder: Sendable {
    /// A class: taken out of the lock with one retain, not a copy of every member.
    private final class KeptStatus: Sendable {
        let result: StatusResult
        let json: String

        init(result: StatusResult, json: String) {
            self.result = result
            self.json = json
        }
    }

    private let lastStatus = NIOLockedValueBox<KeptStatus?>(nil)

    /// The result as JSON; nil if it cannot be encoded (a non-finite number).
    public init() {}

    public func encode(_ result: any Encodable & Sendable) -> String? {
        guard let status = result as? StatusResult else { return Self.encodeJSON(result) }
        return encode(status: status)
    }

    public func encode(status: StatusResult) -> String? {
        if let kept = lastStatus.withLockedValue({ $0 }), kept.result == status { return kept.json }
        guard let json = Self.encodeJSON(status) else { return nil }
        lastStatus.withLockedValue { $0 = KeptStatus(result: status, json: json) }
        return json
    }

    private static func encodeJSON(_ value: some Encodable) -> String? {
        (try? WireCoding.encoder().encode(value)).map { String(decoding: $0, as: UTF8.self) }
    }
}
