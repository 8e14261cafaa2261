import ArgumentParser
import CBuildInfo
import CCommandLine  // linked for its constructor: argv for the runtime whatever a preload does (command_line.c)
import FoundationEssentials
import Glibc
import Hummingbird
import HummingbirdWebSocket
import Logging
import RecdConfiguration
import RecdProtocol
import SystemPackage
import Systemd

/// recd-web: the page and /metrics, a client of recd's socket (doc/web.md). recd itself stays
/// off the network: whatever goes wrong here, the recording goes on.
@main
struct RecdWeb: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recd-web",
        abstract: "recd's web page and Prometheus metrics, served on the LAN.",
        discussion: """
            Reads [web] (and the socket and recordings directory) from recd's configuration file, \
            recd.toml(5), and the tokens from web.tokens_file. It talks to recd only through \
            recd's socket, as recctl does.

            Exit status: 0 after SIGTERM or SIGINT; 1 an unexpected failure; 78 the configuration \
            or the tokens file is invalid.
            """,
        version: RecdVersion.withCommit(String(cString: recd_build_commit())) + WebServerKind.builtWith)

    @Option(help: ArgumentHelp("recd's configuration file.", discussion: "Default: /etc/recd/recd.toml (--system) or $XDG_CONFIG_HOME/recd/recd.toml (--user).", valueName: "path"))
    var config: String?

    @Option(help: ArgumentHelp("recd's socket.", valueName: "path"))
    var socket: String?

    @Option(help: ArgumentHelp("recd's recordings directory (recordings_dir).", valueName: "dir"))
    var recordingsDir: String?

    @Option(help: ArgumentHelp("The address to listen on (web.address).", valueName: "address"))
    var address: String?

    @Option(help: ArgumentHelp("The TCP port to listen on (web.port; 0: any free port, logged).", valueName: "port"))
    var port: Int?

    @Option(help: ArgumentHelp("The tokens file (web.tokens_file).", valueName: "path"))
    var tokensFile: String?

    @Option(help: ArgumentHelp(
        "Listen on this Unix socket instead of web.address and web.port.",
        discussion: "For socket activation: systemd-socket-proxyd holds the TCP port (recd-web.socket) and forwards each connection here, so recd-web itself needs no network (doc/web.md).",
        valueName: "path"))
    var unixSocket: String?

    @Option(help: ArgumentHelp(
        "Where the recordings' pictures are kept (at most 64 MiB).",
        discussion: "Default: $CACHE_DIRECTORY (systemd's CacheDirectory=), else /var/cache/recd-web (--system) or $XDG_CACHE_HOME/recd-web (--user).",
        valueName: "dir"))
    var cacheDir: String?

    @Option(help: ArgumentHelp("The most the pictures may take in --cache-dir, in MiB (1…4096).", valueName: "MiB"))
    var cacheSize = 64

    @Flag(help: "Use the system instance's paths. The default for root.")
    var system = false

    @Flag(help: "Use a user instance's paths (XDG). The default for other users.")
    var user = false

    func validate() throws {
        if system && user { throw ValidationError("--system and --user exclude each other") }
        if let port, !(0...65535).contains(port) { throw ValidationError("--port must be between 0 and 65535, not \(port)") }
        if !(1...4096).contains(cacheSize) { throw ValidationError("--cache-size must be between 1 and 4096 (MiB), not \(cacheSize)") }
        if let unixSocket {
            if unixSocket.isEmpty || !unixSocket.hasPrefix("/") { throw ValidationError("--unix-socket must be an absolute path") }
            // sockaddr_un's sun_path holds 108 bytes with the terminating NUL.
            if unixSocket.utf8.count > 107 { throw ValidationError("--unix-socket must be at most 107 bytes long") }
            if address != nil || port != nil { throw ValidationError("--unix-socket excludes --address and --port") }
        }
    }

    func run() async throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        let logger = Logger(label: "recd-web")
        let site: WebSite, serverKind: WebServerKind
        do {
            (site, serverKind) = try loadSite()
        } catch {
            _ = try? FileDescriptor.standardError.writeAll("recd-web: \(error)\n".utf8)
            throw ExitCode(78)
        }
        let router = Router(context: BasicWebSocketRequestContext.self)
        site.addRoutes(to: router)
        let bindAddress: BindAddress = unixSocket.map { .unixDomainSocket(path: $0) }
            ?? .hostname(site.access.settings.address, port: site.access.settings.port)
        let app = Application(
            router: router,
            server: try serverKind.builder(router),
            configuration: .init(address: bindAddress, serverName: "recd-web"),
            onServerRunning: { channel in
                if let unixSocket {
                    logger.info("serving", metadata: ["socket": "\(unixSocket)", "tls": "\(site.access.settings.usesTLS)", "recd": "\(site.socketPath)"])
                } else {
                    logger.info("serving", metadata: ["address": "\(channel.localAddress?.ipAddress ?? "?")", "tls": "\(site.access.settings.usesTLS)",
                                                      "port": "\(channel.localAddress?.port ?? 0)", "recd": "\(site.socketPath)"])
                }
                // systemd's Type=notify, when run by it.
                Systemd.notify("READY=1")
            },
            logger: logger)
        try await app.runService()
    }

    /// systemd's CacheDirectory= when it runs recd-web; else the instance's cache directory.
    static func defaultCacheDirectory(mode: DaemonConfiguration.Mode, environment: [String: String]) -> String? {
        if let given = environment["CACHE_DIRECTORY"], !given.isEmpty { return given.split(separator: ":").first.map(String.init) }
        if mode == .system { return "/var/cache/recd-web" }
        if let cache = environment["XDG_CACHE_HOME"], cache.hasPrefix("/") { return cache + "/recd-web" }
        return environment["HOME"].map { $0 + "/.cache/recd-web" }
    }

    /// recd's configuration, the options over it, the tokens, and TLS's files.
    func loadSite() throws -> (WebSite, WebServerKind) {
        let environment = ProcessInfo.processInfo.environment
        let mode = DaemonConfiguration.mode(system: system, user: user)
        let configuration = try DaemonConfiguration.load(mode: mode, path: config, environment: environment)
        var settings = configuration.web
        if let address { settings.address = address }
        if let port { settings.port = port }
        let tokensPath = tokensFile ?? (settings.tokensFile.isEmpty
            ? DaemonConfiguration.defaultTokensPath(for: mode, environment: environment) : settings.tokensFile)
        let needsTokens = [settings.observe, settings.listen, settings.control].contains(.token)
        var tokens = WebTokens()
        if needsTokens, FileManager.default.fileExists(atPath: tokensPath) || tokensFile != nil || !settings.tokensFile.isEmpty {
            tokens = try WebTokens.read(path: tokensPath)
        }
        let serverKind = try WebServerKind(settings, configFile: config ?? DaemonConfiguration.defaultConfigPath(for: mode, environment: environment))
        return (WebSite(access: WebAccess(settings: settings, tokens: tokens),
                        socketPath: socket ?? configuration.socketPath,
                        recordingsDirectory: recordingsDir ?? configuration.recordingsDirectory,
                        schedule: configuration.schedule, latitude: configuration.latitude, longitude: configuration.longitude,
                        rtsp: configuration.rtsp,
                        sourceSchedules: configuration.declaredSources.count > 1
                            ? Dictionary(uniqueKeysWithValues: configuration.sources.map { ($0.name, $0.configuration.schedule) }) : [:],
                        pictureDirectory: cacheDir ?? Self.defaultCacheDirectory(mode: mode, environment: environment),
                        pictureCacheBytes: Int64(cacheSize) << 20),
                serverKind)
    }
}

