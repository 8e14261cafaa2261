import Crypto

/// RTSP's Digest authentication (RFC 2069/2617 with MD5, as ffmpeg, GStreamer, VLC and
/// ExoPlayer answer it): the password is one of the station's tokens; any user name is taken.
/// A nonce of its own per connection (make one of these per connection): an answer overheard
/// on one connection opens no other.
public struct DigestAuthentication: Sendable {
    public let realm: String
    public let nonce: String
    private let tokens: [String]

    public init(tokens: [String], realm: String = "recd") {
        var bytes = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255, using: &generator) }
        self.init(tokens: tokens, realm: realm, nonce: Self.hex(bytes))
    }

    init(tokens: [String], realm: String, nonce: String) {
        self.tokens = tokens
        self.realm = realm
        self.nonce = nonce
    }

    /// The `WWW-Authenticate` header's value for a 401.
    public var challenge: String { "Digest realm=\"\(realm)\", nonce=\"\(nonce)\", algorithm=\"MD5\"" }

    /// Whether `authorization` (the request's header) proves the token for `method`.
    public func accepts(_ authorization: String?, method: String) -> Bool {
        guard let authorization, authorization.lowercased().hasPrefix("digest ") else { return false }
        let fields = Self.fields(String(authorization.dropFirst(7)))
        guard let user = fields["username"], let uri = fields["uri"], let response = fields["response"],
              fields["nonce"] == nonce, fields["realm"] == realm else { return false }
        let ha2 = Self.md5("\(method):\(uri)")
        var accepted = false
        for token in tokens {
            let ha1 = Self.md5("\(user):\(realm):\(token)")
            let expected: String
            if let qop = fields["qop"], let nc = fields["nc"], let cnonce = fields["cnonce"] {
                expected = Self.md5("\(ha1):\(nonce):\(nc):\(cnonce):\(qop):\(ha2)")
            } else {
                expected = Self.md5("\(ha1):\(nonce):\(ha2)")
            }
            if Self.constantTimeEqual(Array(expected.utf8), Array(response.lowercased().utf8)) { accepted = true }
        }
        return accepted
    }

    /// `a="b", c=d` → [a: b, c: d].
    static func fields(_ text: String) -> [String: String] {
        var result: [String: String] = [:]
        var rest = Substring(text)
        while !rest.isEmpty {
            rest = rest.drop { $0 == " " || $0 == "," }
            guard let equals = rest.firstIndex(of: "=") else { break }
            let key = rest[..<equals].trimmingCharacters(" ").lowercased()
            rest = rest[rest.index(after: equals)...]
            let value: Substring
            if rest.first == "\"" {
                rest = rest.dropFirst()
                let end = rest.firstIndex(of: "\"") ?? rest.endIndex
                value = rest[..<end]
                rest = end < rest.endIndex ? rest[rest.index(after: end)...] : ""
            } else {
                let end = rest.firstIndex(of: ",") ?? rest.endIndex
                value = rest[..<end]
                rest = rest[end...]
            }
            result[key] = String(value).trimmingCharacters(" ")
        }
        return result
    }

    static func md5(_ text: String) -> String { hex(Array(Insecure.MD5.hash(data: Array(text.utf8)))) }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes { out.append(digits[Int(byte >> 4)]); out.append(digits[Int(byte & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in a.indices { difference |= a[i] ^ b[i] }
        return difference == 0
    }
}

extension StringProtocol {
    func trimmingCharacters(_ character: Character) -> String {
        String(String(self).drop { $0 == character }.reversed().drop { $0 == character }.reversed())
    }
}
