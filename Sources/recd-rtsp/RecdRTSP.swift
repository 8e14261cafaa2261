import ArgumentParser
import CBuildInfo
import CCommandLine  // linked for its constructor: argv for the runtime whatever a preload does (command_line.c)
import Dispatch
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTSP
import RecdConfiguration
import RecdProtocol
import SystemPackage
import Systemd

/// recd-rtsp: the station's live input as RTSP for analysers on other machines (BirdNET-Go,
/// BirdNET-Pi, ffmpeg, VLC), a client of recd's socket that reads a tap (doc/rtsp.md). recd
/// itself stays off the network: whatever goes wrong here, the recording goes on.
@main
struct RecdRTSP: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recd-rtsp",
        abstract: "recd's live input served as RTSP on the LAN.",
        discussion: """
            Reads [rtsp] (and the socket) from recd's configuration file, recd.toml(5), and, with \
            rtsp.access = "token", the tokens with the listen role from web.tokens_file (RTSP's \
            Digest authentication: any user name, the token as the password). It talks to recd \
            only through recd's socket, as recctl does.

            Exit status: 0 after SIGTERM or SIGINT, or after --exit-idle-time without a client; \
            1 an unexpected failure; 78 the configuration or the tokens file is invalid.
            """,
        version: RecdVersion.withCommit(String(cString: recd_build_commit())))

    @Option(help: ArgumentHelp("recd's configuration file.", discussion: "Default: /etc/recd/recd.toml (--system) or $XDG_CONFIG_HOME/recd/recd.toml (--user).", valueName: "path"))
    var config: String?

    @Option(help: ArgumentHelp("recd's socket.", valueName: "path"))
    var socket: String?

    @Option(help: ArgumentHelp("The address to listen on (rtsp.address).", valueName: "address"))
    var address: String?

    @Option(help: ArgumentHelp("The TCP port to listen on (rtsp.port; 0: any free port, logged).", valueName: "port"))
    var port: Int?

    @Option(help: ArgumentHelp("The tokens file (web.tokens_file).", valueName: "path"))
    var tokensFile: String?

    @Option(help: ArgumentHelp("Exit after this many seconds without a connection (socket activation starts it again).", valueName: "seconds"))
    var exitIdleTime: Int?

    @Option(help: ArgumentHelp("Write the stream's mDNS announcement (an Avahi service file, `_rtsp._tcp`) for the configuration to this path, or '-' for standard output, and exit. Nothing when the path's directory does not exist (Avahi is not installed).",
                               discussion: "recd-rtsp.socket writes /etc/avahi/services/recd-rtsp.service this way when it starts listening and removes it when it stops.",
                               valueName: "path"))
    var avahiService: String?

    @Flag(help: "Use the system instance's paths. The default for root.")
    var system = false

    @Flag(help: "Use a user instance's paths (XDG). The default for other users.")
    var user = false

    func validate() throws {
        if system && user { throw ValidationError("--system and --user exclude each other") }
        if let port, !(0...65535).contains(port) { throw ValidationError("--port must be between 0 and 65535, not \(port)") }
        if let exitIdleTime, !(1...86400).contains(exitIdleTime) { throw ValidationError("--exit-idle-time must be between 1 and 86400 seconds") }
    }

    func run() async throws {
        if let avahiService { return try announce(to: avahiService) }
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        let logger = {
            var logger = Logger(label: "recd-rtsp")
            // RECD_RTSP_LOG=debug: every connection and request.
            if let level = ProcessInfo.processInfo.environment["RECD_RTSP_LOG"].flatMap(Logger.Level.init(rawValue:)) { logger.logLevel = level }
            return logger
        }()
        let service: RTSPService
        do {
            service = try loadService(logger: logger)
        } catch {
            _ = try? FileDescriptor.standardError.writeAll("recd-rtsp: \(error)\n".utf8)
            throw ExitCode(78)
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let connections = ConnectionCount()
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 32)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // A client that stops reading holds at most this much before its packets are dropped.
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 64 * 1024, high: 256 * 1024))
            .childChannelInitializer { channel in
                connections.opened()
                channel.closeFuture.whenComplete { _ in connections.closed() }
                return channel.pipeline.eventLoop.makeCompletedFuture {
                    // Small packets (RTCP, answers) without Nagle's delay, where the kernel allows
                    // it: a container refused it, and as a child channel option that refusal
                    // closed every connection unseen.
                    try? channel.syncOptions?.setOption(.socketOption(.tcp_nodelay), value: 1)
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(RTSPDecoder()))
                    try channel.pipeline.syncOperations.addHandler(RTSPConnection(service: service))
                }.flatMapErrorThrowing { error in
                    logger.warning("cannot take a connection", metadata: ["error": "\(error)"])
                    throw error
                }
            }
        let server: any Channel
        if let passed = Systemd.listenDescriptors().first {
            server = try await bootstrap.withBoundSocket(passed.fd).get()
        } else {
            server = try await bootstrap.bind(host: address ?? service.settings.address, port: port ?? service.settings.port).get()
        }
        logger.info("serving", metadata: ["url": "rtsp://\(server.localAddress?.ipAddress ?? "?"):\(server.localAddress?.port ?? 0)\(service.path)",
                                          "access": "\(service.settings.access.rawValue)", "recd": "\(service.socketPath)"])
        Systemd.notify("READY=1")
        let signals = SignalWaiter()
        if let exitIdleTime {
            connections.exitWhenIdle(for: exitIdleTime, on: group.next()) { signals.fire() }
        }
        await signals.wait()
        try? await server.close()
        try? await group.shutdownGracefully()
    }

    /// `--avahi-service`: the announcement for the configuration, written whole (a temporary
    /// file renamed: avahi-daemon watches the directory and must never read half a file).
    func announce(to path: String) throws {
        let text: String
        do {
            let mode = DaemonConfiguration.mode(system: system, user: user)
            text = AvahiService.file(for: try DaemonConfiguration.load(mode: mode, path: config, environment: ProcessInfo.processInfo.environment))
        } catch {
            _ = try? FileDescriptor.standardError.writeAll("recd-rtsp: \(error)\n".utf8)
            throw ExitCode(78)
        }
        if path == "-" { _ = try FileDescriptor.standardOutput.writeAll(text.utf8); return }
        let directory = FilePath(path).removingLastComponent().string
        var info = stat()
        guard stat(directory.isEmpty ? "." : directory, &info) == 0 else {
            _ = try? FileDescriptor.standardError.writeAll("recd-rtsp: \(directory) does not exist (Avahi is not installed): no mDNS announcement\n".utf8)
            return
        }
        let temporary = path + ".new"
        do {
            let file = try FileDescriptor.open(temporary, .writeOnly, options: [.create, .truncate], permissions: [.ownerReadWrite, .groupRead, .otherRead])
            try file.closeAfter { _ = try file.writeAll(text.utf8) }
            guard rename(temporary, path) == 0 else { throw Errno(rawValue: errno) }
        } catch {
            unlink(temporary)
            _ = try? FileDescriptor.standardError.writeAll("recd-rtsp: cannot write \(path): \(error)\n".utf8)
            throw ExitCode(1)
        }
    }

    func loadService(logger: Logger) throws -> RTSPService {
        let environment = ProcessInfo.processInfo.environment
        let mode = DaemonConfiguration.mode(system: system, user: user)
        let configuration = try DaemonConfiguration.load(mode: mode, path: config, environment: environment)
        var tokens: [String] = []
        if configuration.rtsp.access == .token {
            let path = tokensFile ?? (configuration.web.tokensFile.isEmpty
                ? DaemonConfiguration.defaultTokensPath(for: mode, environment: environment) : configuration.web.tokensFile)
            tokens = try WebTokens.read(path: path).roles.filter { $0.value.contains(.listen) }.map(\.key).sorted()
            if tokens.isEmpty {
                throw ConfigurationError(file: path, line: nil, key: "rtsp.access",
                                         message: "rtsp.access = \"token\" needs a token with the listen role here (or rtsp.access = \"open\" on a trusted LAN)")
            }
        }
        return RTSPService(settings: configuration.rtsp, sources: configuration.sources.map(\.name), socketPath: socket ?? configuration.socketPath,
                           tokens: tokens, logger: logger)
    }
}

/// Connections open now; with --exit-idle-time, the process ends once there has been none for that long.
final class ConnectionCount: @unchecked Sendable {
    private let count = NIOLockedValueBox(0)
    func opened() { count.withLockedValue { $0 += 1 } }
    func closed() { count.withLockedValue { $0 -= 1 } }

    private let idleSince = NIOLockedValueBox(NIODeadline.now())

    func exitWhenIdle(for seconds: Int, on loop: any EventLoop, _ exit: @escaping @Sendable () -> Void) {
        loop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { [self] task in
            if count.withLockedValue({ $0 }) > 0 { idleSince.withLockedValue { $0 = .now() }; return }
            if NIODeadline.now() - idleSince.withLockedValue({ $0 }) >= .seconds(Int64(seconds)) {
                task.cancel()
                exit()
            }
        }
    }
}

/// SIGTERM, SIGINT, or `fire()`: the end.
final class SignalWaiter: @unchecked Sendable {
    private let lock = NIOLock()
    private var continuation: CheckedContinuation<Void, Never>?
    private var fired = false
    private var sources: [any DispatchSourceSignal] = []

    init() {
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in self?.fire() }
            source.resume()
            sources.append(source)
        }
    }

    func fire() {
        let waiting = lock.withLock { () -> CheckedContinuation<Void, Never>? in
            fired = true
            defer { continuation = nil }
            return continuation
        }
        waiting?.resume()
    }

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = lock.withLock { () -> Bool in
                if fired { return true }
                self.continuation = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }
}
