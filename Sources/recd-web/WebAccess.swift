import FoundationEssentials
import HTTPTypes
import Hummingbird
import RecdConfiguration

/// Who may do what on the page: three roles, as on recd's socket (observe, listen = tap,
/// control), each open, behind a token, or off (`[web]`). A token comes as
/// `Authorization: Bearer TOKEN` or in the cookie the page's login sets.
struct WebAccess: Sendable {
    typealias Role = WebTokens.Role
    static let cookieName = "recd_web"

    let settings: WebSettings
    let tokens: WebTokens

    func access(_ role: Role) -> WebSettings.Access {
        switch role {
        case .observe: settings.observe
        case .listen: settings.listen
        case .control: settings.control
        }
    }

    /// The roles open to everyone.
    var openRoles: Set<Role> { Set(Role.allCases.filter { access($0) == .open }) }

    /// The roles a token grants (a token for listen or control also observes), only those
    /// that are not off.
    func roles(ofToken token: String) -> Set<Role>? {
        // Every token is compared in full, so that the time taken says nothing about which
        // characters matched.
        var found: Set<Role>?
        for (candidate, roles) in tokens.roles where Self.equalInConstantTime(candidate, token) { found = roles }
        guard var roles = found else { return nil }
        if !roles.isEmpty { roles.insert(.observe) }
        return roles.filter { access($0) != .off }
    }

    func token(of request: Request) -> String? {
        if let authorization = request.headers[.authorization], authorization.hasPrefix("Bearer ") {
            return String(authorization.dropFirst(7)).trimmingSpaces
        }
        for cookies in request.headers[values: .cookie] {
            for cookie in cookies.split(separator: ";") {
                let pair = cookie.split(separator: "=", maxSplits: 1)
                if pair.count == 2, String(pair[0]).trimmingSpaces == Self.cookieName { return String(pair[1]).trimmingSpaces }
            }
        }
        return nil
    }

    /// The open roles and those of the request's token.
    func roles(of request: Request) -> Set<Role> {
        var roles = openRoles
        if let token = token(of: request), let granted = self.roles(ofToken: token) { roles.formUnion(granted) }
        return roles
    }

    /// Refuses a request without `role`, saying why: 403 when the role is off or the token
    /// does not grant it, 401 when a token is needed and none (or an unknown one) came.
    func require(_ role: Role, _ request: Request) throws {
        switch access(role) {
        case .open: return
        case .off: throw HTTPError(.forbidden, message: "the '\(role.rawValue)' role is off on this station ([web] \(role.rawValue) = \"off\")")
        case .token:
            guard let token = token(of: request) else {
                throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Bearer realm=\"recd\""],
                                message: "the '\(role.rawValue)' role needs a token")
            }
            guard let granted = roles(ofToken: token) else {
                throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Bearer realm=\"recd\", error=\"invalid_token\""],
                                message: "this token is not known")
            }
            guard granted.contains(role) else { throw HTTPError(.forbidden, message: "this token does not grant the '\(role.rawValue)' role") }
        }
    }

    /// A request that changes something, or opens a live stream, must come from the page itself: a form or script on
    /// another site may make the browser send one (with the cookie, were it not SameSite).
    /// Browsers say where a request comes from in `Sec-Fetch-Site` and `Origin`; a client
    /// that is not a browser (curl with a token) sends neither.
    func requireSameOrigin(_ request: Request) throws {
        if let site = request.headers[HTTPField.Name("Sec-Fetch-Site")!], site != "same-origin", site != "none" {
            throw HTTPError(.forbidden, message: "a cross-site request (Sec-Fetch-Site: \(site)) is refused: only this station's own page may do this")
        }
        if let origin = request.headers[.origin] {
            let host = request.head.authority ?? request.headers[HTTPField.Name("Host")!] ?? ""
            // Over TLS only an https:// page; without, either (a reverse proxy may add TLS).
            guard origin == "https://" + host || !settings.usesTLS && origin == "http://" + host else {
                throw HTTPError(.forbidden, message: "a request from \(origin) is refused: only this station's own page may do this")
            }
        }
    }

    private static func equalInConstantTime(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        var difference = UInt8(x.count == y.count ? 0 : 1)
        for index in 0..<max(x.count, y.count) {
            difference |= (index < x.count ? x[index] : 0) ^ (index < y.count ? y[index] : 0)
        }
        return difference == 0
    }
}

extension String {
    var trimmingSpaces: String {
        String(drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
    }
}
