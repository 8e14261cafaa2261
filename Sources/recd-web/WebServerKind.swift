import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import RecdConfiguration
#if TLS
import HummingbirdTLS
import NIOSSL
#endif

/// What recd-web speaks: HTTP/1.1 with WebSocket upgrades, inside TLS when [web] names a
/// certificate. The files are read and checked before the server starts, so that a bad one
/// is a configuration error (exit status 78), said with its key, as every other.
struct WebServerKind {
    #if TLS
    private let tls: TLSConfiguration?
    #endif

    /// For --version: whether this build can serve HTTPS.
    #if TLS
    static let builtWith = ", with TLS"
    #else
    static let builtWith = ", without TLS"
    #endif

    /// `configFile`: where [web] was read, named by an error about it.
    init(_ settings: WebSettings, configFile: String) throws(ConfigurationError) {
        #if TLS
        tls = settings.usesTLS ? try Self.tlsConfiguration(certificate: settings.tlsCertificate, key: settings.tlsKey) : nil
        #else
        guard settings.usesTLS else { return }
        throw ConfigurationError(file: configFile, line: nil, key: "web.tls_certificate",
                                 message: "this recd-web was built without TLS (the package's TLS trait): serve it behind a reverse proxy for HTTPS, or build it with TLS")
        #endif
    }

    func builder(_ router: Router<BasicWebSocketRequestContext>) throws -> HTTPServerBuilder {
        let plain = HTTPServerBuilder.http1WebSocketUpgrade(webSocketRouter: router)
        #if TLS
        if let tls { return try .tls(plain, tlsConfiguration: tls) }
        #endif
        return plain
    }

    #if TLS
    private static func tlsConfiguration(certificate: String, key: String) throws(ConfigurationError) -> TLSConfiguration {
        // The key is a secret: refused when everyone may read it; its group may (root:recd-web
        // 0640, as Debian's ssl-cert group does).
        try ConfigurationFile.checkSecret(key, key: "web.tls_key", forbidden: 0o007, who: "everyone", advice: "chmod 640 or 600 it",
                                          ownedByReader: false)
        let chain: [NIOSSLCertificate]
        do { chain = try NIOSSLCertificate.fromPEMFile(certificate) } catch {
            throw ConfigurationError(file: certificate, line: nil, key: "web.tls_certificate", message: "is not a readable PEM certificate chain (\(error))")
        }
        guard !chain.isEmpty else {
            throw ConfigurationError(file: certificate, line: nil, key: "web.tls_certificate", message: "holds no certificate")
        }
        let privateKey: NIOSSLPrivateKey
        do { privateKey = try NIOSSLPrivateKey(file: key, format: .pem) } catch {
            throw ConfigurationError(file: key, line: nil, key: "web.tls_key", message: "is not a readable PEM private key (\(error))")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) },
                                                                     privateKey: .privateKey(privateKey))
        configuration.minimumTLSVersion = .tlsv12
        // BoringSSL checks here that the key belongs to the certificate.
        do { _ = try NIOSSLContext(configuration: configuration) } catch {
            throw ConfigurationError(file: key, line: nil, key: "web.tls_key", message: "does not go with web.tls_certificate (\(error))")
        }
        return configuration
    }
    #endif
}
