import FoundationEssentials
import Glibc
import SystemPackage

/// `[web]`: recd-web, the web page and /metrics (doc/web.md). recd itself reads and checks
/// these keys but uses none of them: it stays off the network.
public struct WebSettings: Equatable, Sendable {
    /// Who may use a role: everyone who reaches the port, holders of a token, or nobody.
    public enum Access: String, Equatable, Sendable, CaseIterable { case open, token, off }

    public var address = "0.0.0.0"
    public var port = 8090
    /// State, levels, spectrum, the recordings' list, /metrics.
    public var observe = Access.open
    /// Audio: live listening and the recordings' files.
    public var listen = Access.token
    /// listen, start, stop, split, arm the trigger.
    public var control = Access.token
    /// Lines `ROLE TOKEN`; must be readable by its owner only. Empty: the mode's default.
    public var tokensFile = ""
    /// Pages open at once (each holds a subscription, and a listener a tap, on recd's socket).
    public var maxViewers = 16
    /// HTTPS: the certificate chain and its private key, PEM files; both or neither. Empty:
    /// plain HTTP (a reverse proxy may add TLS in front).
    public var tlsCertificate = ""
    public var tlsKey = ""
    public var usesTLS: Bool { !tlsCertificate.isEmpty }
}

extension DaemonConfiguration {
    mutating func applyWeb(_ reader: KeyReader) throws(ConfigurationError) {
        try reader.read("web.address") { (value: String) throws(ConfigurationError) in
            guard !value.isEmpty, !value.contains(" ") else { throw reader.invalid("web.address", "must be an address such as \"0.0.0.0\", \"::\" or \"127.0.0.1\"") }
            web.address = value
        }
        try reader.read("web.port", in: 1...65535) { (value: Int) in web.port = value }
        try reader.read("web.observe") { (value: WebSettings.Access) in web.observe = value }
        try reader.read("web.listen") { (value: WebSettings.Access) in web.listen = value }
        try reader.read("web.control") { (value: WebSettings.Access) in web.control = value }
        try reader.read("web.tokens_file") { (value: String) throws(ConfigurationError) in
            guard value.isEmpty || value.hasPrefix("/") else { throw reader.invalid("web.tokens_file", "must be an absolute path") }
            web.tokensFile = value
        }
        try reader.read("web.max_viewers", in: 1...256) { (value: Int) in web.maxViewers = value }
        for key in ["web.tls_certificate", "web.tls_key"] {
            try reader.read(key) { (value: String) throws(ConfigurationError) in
                guard value.hasPrefix("/") else { throw reader.invalid(key, "must be an absolute path") }
                if key == "web.tls_key" { web.tlsKey = value } else { web.tlsCertificate = value }
            }
        }
        if web.tlsCertificate.isEmpty != web.tlsKey.isEmpty {
            let missing = web.tlsKey.isEmpty ? "web.tls_key" : "web.tls_certificate"
            let given = web.tlsKey.isEmpty ? "web.tls_certificate" : "web.tls_key"
            throw reader.invalid(given, "needs \(missing) too: HTTPS takes a certificate and its private key")
        }
    }

    /// Where the tokens are read from: `web.tokens_file`, else beside the mode's recd.toml.
    public static func defaultTokensPath(for mode: Mode, environment: [String: String]) -> String {
        let config = defaultConfigPath(for: mode, environment: environment)
        return String(config[..<(config.lastIndex(of: "/") ?? config.startIndex)]) + "/web-tokens"
    }
}

/// The web's tokens: which roles each grants.
public struct WebTokens: Equatable, Sendable {
    public enum Role: String, Equatable, Hashable, Sendable, CaseIterable, Comparable {
        case observe, listen, control
        public static func < (a: Role, b: Role) -> Bool { allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)! }
    }

    public private(set) var roles: [String: Set<Role>] = [:]

    public init(roles: [String: Set<Role>] = [:]) { self.roles = roles }

    /// Reads `ROLE TOKEN` lines (`#` comments, blank lines). The file holds secrets, so it is
    /// refused when others than its owner may read it, or when it belongs to someone else
    /// than the reader or root, as ssh refuses a private key.
    public static func read(path: String) throws(ConfigurationError) -> WebTokens {
        try ConfigurationFile.checkSecret(path, key: "web.tokens_file", forbidden: 0o077, who: "others", advice: "chmod 600 it",
                                          ownedByReader: true)
        return try parse(try ConfigurationFile.readText(path, key: "web.tokens_file"), file: path)
    }

    public static func parse(_ text: String, file: String) throws(ConfigurationError) -> WebTokens {
        var tokens = WebTokens()
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let words = rawLine.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            if words.isEmpty || words[0].hasPrefix("#") { continue }
            guard words.count == 2, let role = Role(rawValue: String(words[0])) else {
                throw ConfigurationError(file: file, line: index + 1, key: nil,
                                         message: "must be ROLE TOKEN, ROLE one of observe, listen, control")
            }
            let token = String(words[1])
            guard token.utf8.count >= 16, token.utf8.allSatisfy({ $0 > 32 && $0 < 127 && $0 != UInt8(ascii: ";") && $0 != UInt8(ascii: ",") }) else {
                throw ConfigurationError(file: file, line: index + 1, key: nil,
                                         message: "a token must be at least 16 printable characters without ';' or ',' (`openssl rand -hex 16` makes one)")
            }
            tokens.roles[token, default: []].insert(role)
        }
        return tokens
    }
}
