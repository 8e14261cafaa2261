/// A response line around a result that is already JSON: the envelope is spliced, not encoded,
/// so an answer kept from an earlier request (`status`'s) is reused byte for byte.
///
/// The members come in the order `WireCoding.encoder()` (`.sortedKeys`) writes them, so a
/// spliced line is the same bytes as an encoded `Response`.
public enum ResponseLine {
    /// `{"id":…,"jsonrpc":"2.0","result":…}`; `id` null when the request's id was null.
    public static func success(id: RPCID?, result: String) -> String {
        var line = "{\"id\":"
        line.reserveCapacity(result.utf8.count + 40)
        appendJSON(of: id, to: &line)
        line += ",\"jsonrpc\":\"2.0\",\"result\":"
        line += result
        line += "}"
        return line
    }

    /// An id as JSON: a number, a quoted string or `null`.
    public static func appendJSON(of id: RPCID?, to line: inout String) {
        switch id {
        case nil: line += "null"
        case .number(let number)?: line += String(number)
        case .string(let string)?: appendQuoted(string, to: &line)
        }
    }

    /// A string as a JSON string literal, escaped as JSONEncoder escapes it (slashes as they are).
    public static func appendQuoted(_ string: String, to line: inout String) {
        var bytes: [UInt8] = [UInt8(ascii: "\"")]
        bytes.reserveCapacity(string.utf8.count + 2)
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), byte]
            case 0x0A: bytes += Array("\\n".utf8)
            case 0x0D: bytes += Array("\\r".utf8)
            case 0x09: bytes += Array("\\t".utf8)
            case 0x08: bytes += Array("\\b".utf8)
            case 0x0C: bytes += Array("\\f".utf8)
            case 0x00..<0x20: bytes += Array("\\u00".utf8) + Array(((byte < 0x10 ? "0" : "") + String(byte, radix: 16)).utf8)
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
        line += String(decoding: bytes, as: UTF8.self)
    }
}
