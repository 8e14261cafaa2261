import Dispatch
import Foundation
import Glibc
import Logging
import NIOCore
import NIOPosix
import RecdProtocol
import RecorderCore
import Synchronization

/// Where the server listens.
public enum ListenTarget: Sendable, Equatable {
    /// Bind this path (creating its directory); refuses if another daemon answers there.
    case path(String, mode: mode_t, group: gid_t?)
    /// A listening socket systemd passed (socket activation).
    case descriptor(Int32)
}

public struct ServerLimits: Sendable, Equatable {
    public var maxClients: Int
    public var outboundLimit: Int

    public init(maxClients: Int = 64, outboundLimit: Int = 1024) {
        self.maxClients = maxClients
        self.outboundLimit = outboundLimit
    }
}

public enum ServerError: Error, CustomStringConvertible {
    case alreadyRunning(String)
    case cannotBind(String, String)

    public var description: String {
        switch self {
        case .alreadyRunning(let path): "another recd already answers at \(path)"
        case .cannotBind(let path, let reason): "cannot listen at \(path): \(reason)"
        }
    }
}

/// recd's JSON-RPC server on a Unix stream socket (SwiftNIO).
///
/// Each connection gets NIO's line splitter (with the 64 KiB limit) and a `ClientConnection`;
/// a failing client closes only itself. Connections beyond `maxClients` get an error and close.
public final class ControlServer: Sendable {
    private let group: EventLoopGroup
    private let connectionContext: ConnectionContext
    private let limits: ServerLimits
    private let logger: Logger
    private let state = Mutex<(channel: Channel?, clients: [ObjectIdentifier: ClientConnection], path: String?)>((nil, [:], nil))

    public init(recorder: Recorder, version: String, policy: AccessPolicy, limits: ServerLimits,
                group: EventLoopGroup, logger: Logger) {
        self.group = group
        self.limits = limits
        self.logger = logger
        connectionContext = ConnectionContext(
            executor: MethodExecutor(recorder: recorder, version: version), hub: TopicHub(recorder: recorder),
            policy: policy, outboundLimit: limits.outboundLimit, logger: logger,
            operations: DispatchQueue(label: "recd.operations", attributes: .concurrent))
    }

    /// The number of connected clients.
    public var clientCount: Int { state.withLock { $0.clients.count } }

    /// Starts listening; returns once connections are accepted.
    public func start(_ target: ListenTarget) async throws {
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .childChannelInitializer { [self] channel in initialize(channel) }
        let channel: Channel
        switch target {
        case .descriptor(let fd):
            channel = try await bootstrap.withBoundSocket(fd).get()
            logger.info("listening on the socket systemd passed", metadata: ["socket.fd": "\(fd)"])
        case .path(let path, let mode, let group):
            try Self.prepare(path: path)
            do {
                channel = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true).get()
            } catch {
                throw ServerError.cannotBind(path, "\(error)")
            }
            if chmod(path, mode) != 0 || (group.map { chown(path, uid_t.max, $0) } ?? 0) != 0 {
                logger.warning("cannot set the socket's mode or group", metadata: ["socket.path": "\(path)",
                                                                                  "error": "\(String(cString: strerror(errno)))"])
            }
            state.withLock { $0.path = path }
            logger.info("listening", metadata: ["socket.path": "\(path)"])
        }
        state.withLock { $0.channel = channel }
    }

    /// Makes every queued notification reach the clients' outbound queues, then closes every
    /// connection once its queue is written, and the listening socket.
    public func shutdown() async {
        connectionContext.hub.drain()
        let (channel, clients, path) = state.withLock { ($0.channel, Array($0.clients.values), $0.path) }
        for client in clients { client.closeAfterPendingWrites() }
        try? await channel?.close()
        if let path { unlink(path) }
    }

    private func initialize(_ channel: Channel) -> EventLoopFuture<Void> {
        let accepted = state.withLock { state -> ObjectIdentifier? in
            guard state.clients.count < limits.maxClients else { return nil }
            return ObjectIdentifier(channel)
        }
        guard accepted != nil else {
            logger.warning("client limit reached; refusing a connection", metadata: ["server.maxClients": "\(limits.maxClients)"])
            return channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(RefusingHandler(maxClients: limits.maxClients))
            }
        }
        return peerCredentials(of: channel).flatMap { [self] peer in
            let client = ClientConnection(context: connectionContext, eventLoop: channel.eventLoop, peer: peer)
            let id = ObjectIdentifier(client)
            state.withLock { $0.clients[id] = client }
            channel.closeFuture.whenComplete { [self] _ in _ = state.withLock { $0.clients.removeValue(forKey: id) } }
            return channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(
                    ByteToMessageHandler(NIOSplitLinesMessageDecoder(omittingEmptySubsequences: true),
                                         maximumBufferSize: JSONRPC.maximumLineLength))
                try channel.pipeline.syncOperations.addHandler(client)
            }
        }
    }

    private func peerCredentials(of channel: Channel) -> EventLoopFuture<PeerCredentials> {
        guard let provider = channel as? SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(ChannelError.operationUnsupported)
        }
        let future: EventLoopFuture<KernelPeerCredentials> = provider.unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        return future.map { PeerCredentials(pid: $0.pid, uid: $0.uid, gid: $0.gid) }
    }

    /// Creates the socket's directory; refuses to take over a path another daemon answers on.
    private static func prepare(path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o755])
        guard FileManager.default.fileExists(atPath: path) else { return }
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(probe) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw ServerError.cannotBind(path, "path too long") }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let answered = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        } == 0
        if answered { throw ServerError.alreadyRunning(path) }
    }
}

/// Linux's `struct ucred` (Glibc exposes it only with _GNU_SOURCE): what SO_PEERCRED fills in.
private struct KernelPeerCredentials: Sendable {
    var pid: pid_t = 0
    var uid: uid_t = 0
    var gid: gid_t = 0
}

/// Tells a client over the limit why, then closes its connection.
private final class RefusingHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let maxClients: Int

    init(maxClients: Int) { self.maxClients = maxClients }

    func channelActive(context: ChannelHandlerContext) {
        let error = ErrorResponse(id: nil, error: RPCError(code: RPCErrorCode.tooManyClients,
            message: "recd serves at most \(maxClients) clients; try again later", data: .init(code: "tooManyClients")))
        var buffer = context.channel.allocator.buffer(capacity: 256)
        buffer.writeBytes((try? WireCoding.encoder().encode(error)) ?? Data())
        buffer.writeInteger(UInt8(ascii: "\n"))
        let channel = context.channel
        context.writeAndFlush(NIOAny(buffer)).whenComplete { _ in channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}  // nothing it says matters
}
