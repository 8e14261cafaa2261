import Dispatch
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RecdCommands
import RecdProtocol
import RecorderCore
import SystemPackage

/// Where the server listens.
public enum ListenTarget: Sendable, Equatable {
    /// Bind this path (creating its directory); refuses if another daemon answers there.
    case path(String, mode: mode_t, group: gid_t?)
    /// A listening socket systemd passed (socket activation).
    case descriptor(Int32)
}

public struct ServerLimits: Sendable, Equatable {
    public var maxClients: Int
    /// Bytes that may wait for one client beyond its socket buffer (see `ConnectionContext`).
    public var outboundLimit: Int

    public init(maxClients: Int = 64, outboundLimit: Int = 1 << 20) {
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

/// recd's JSON-RPC server on a Unix stream socket, as structured tasks (NIOAsyncChannel).
///
/// `listen` binds; `serve` accepts connections and runs each as a child task of one discarding
/// task group until `shutdown`, which stops accepting, lets every connection write the answers
/// already due, and returns once they are all closed. A failing client closes only itself.
/// Connections beyond `maxClients` get an error and close.
public final class ControlServer: Sendable {
    private let group: EventLoopGroup
    private let context: ConnectionContext
    private let limits: ServerLimits
    private let logger: Logger
    private let state = NIOLockedValueBox(State())
    /// Signalled when `serve` has returned: every connection is closed.
    private let served = NIOLockedValueBox<(done: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    private struct State {
        var listener: NIOAsyncChannel<ClientConnection, Never>?
        var clients: [ObjectIdentifier: ClientConnection] = [:]
        var path: String?
        var shuttingDown = false
    }

    /// - Parameter blocking: where methods that block run (shared with the rest of recd; its
    ///   owner shuts it down after the server).
    public init(station: Station, version: String, policy: AccessPolicy, limits: ServerLimits,
                group: EventLoopGroup, blocking: BlockingCalls, metrics: (any MetricsSource)? = nil,
                lastClientLeft: @escaping @Sendable () -> Void = {}, logger: Logger) {
        self.group = group
        self.lastClientLeft = lastClientLeft
        self.limits = limits
        self.logger = logger
        // User and group look-ups apart, so that slow requests cannot hold up new connections.
        let lookups = NIOThreadPool(numberOfThreads: 1)
        lookups.start()
        let named = station.sources.count > 1
        let hubs = station.sources.enumerated().map { index, source in
            TopicHub(recorder: source.recorder, source: index, name: named ? source.name : nil)
        }
        context = ConnectionContext(station: station, version: version, hubs: hubs,
                                    policy: policy, metrics: metrics, outboundLimit: limits.outboundLimit, blocking: blocking, lookups: lookups,
                                    flushers: Dictionary(uniqueKeysWithValues: group.makeIterator().map {
                                        (ObjectIdentifier($0), LoopFlusher(eventLoop: $0))
                                    }),
                                    logger: logger)
    }

    /// Runs each time the last client connected leaves (recd: malloc returns their memory).
    private let lastClientLeft: @Sendable () -> Void

    /// The number of connected clients.
    public var clientCount: Int { state.withLockedValue { $0.clients.count } }

    /// Starts listening; returns once connections can be accepted (`serve` accepts them).
    public func listen(_ target: ListenTarget) async throws {
        // Every topic's snapshot first: the first client's `subscribe` answers with them.
        for hub in context.hubs { await hub.drain() }
        // What a client leaves unread is counted by its connection's outbox (Outbox), against
        // `outboundLimit` plus NIO's share.
        let bootstrap = ServerBootstrap(group: group).serverChannelOption(.backlog, value: 256)
            // A client that shuts down its writing side still gets its answers.
            .childChannelOption(.allowRemoteHalfClosure, value: true)
        let context = context
        let initializer: @Sendable (Channel) -> EventLoopFuture<ClientConnection> = { channel in
            Self.peerCredentials(of: channel).flatMapThrowing { peer in
                try channel.pipeline.syncOperations.addHandler(
                    ByteToMessageHandler(NIOSplitLinesMessageDecoder(omittingEmptySubsequences: true),
                                         maximumBufferSize: JSONRPC.maximumLineLength))
                let inline = InlineRequestHandler()
                try channel.pipeline.syncOperations.addHandler(inline)
                let connection = ClientConnection(
                    channel: try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel),
                    peer: peer, context: context, writer: inline)
                // On the event loop, before the first read.
                inline.connection = connection
                return connection
            }
        }
        let listener: NIOAsyncChannel<ClientConnection, Never>
        switch target {
        case .descriptor(let fd):
            listener = try await bootstrap.bind(fd, childChannelInitializer: initializer)
            logger.info("listening on the socket systemd passed", metadata: ["socket.fd": "\(fd)"])
        case .path(let path, let mode, let group):
            try Self.prepare(path: path)
            do {
                listener = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true,
                                                    childChannelInitializer: initializer)
            } catch let error as IOError {
                throw ServerError.cannotBind(path, "\(Errno(rawValue: error.errnoCode))")
            } catch {
                throw ServerError.cannotBind(path, "\(error)")
            }
            if chmod(path, mode) != 0 || (group.map { chown(path, uid_t.max, $0) } ?? 0) != 0 {
                logger.warning("cannot set the socket's mode or group", metadata: ["socket.path": "\(path)",
                                                                                  "error": "\(Errno(rawValue: errno))"])
            }
            state.withLockedValue { $0.path = path }
            logger.info("listening", metadata: ["socket.path": "\(path)"])
        }
        state.withLockedValue { $0.listener = listener }
    }

    /// Accepts and serves connections until `shutdown`; returns when every one has closed.
    public func serve() async {
        defer {
            let waiters = served.withLockedValue { served in
                served.done = true
                defer { served.waiters = [] }
                return served.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
        guard let listener = state.withLockedValue({ $0.listener }) else { return }
        await withDiscardingTaskGroup { group in
            do {
                try await listener.executeThenClose { inbound in
                    // A connection answers nothing (not even inline) until it runs.
                    for try await client in inbound {
                        switch admit(client) {
                        case .admitted: break
                        case .full:
                            group.addTask { await self.refuse(client.channel) }
                            continue
                        case .shuttingDown:
                            try? await client.channel.channel.close()
                            continue
                        }
                        // On the connection's event loop: see EventLoopTaskExecutor.
                        group.addTask(executorPreference: EventLoopTaskExecutor(client.eventLoop)) {
                            await client.run()
                            let none = self.state.withLockedValue { state in
                                state.clients.removeValue(forKey: ObjectIdentifier(client))
                                return state.clients.isEmpty
                            }
                            if none { self.lastClientLeft() }
                        }
                    }
                }
            } catch {
                logger.error("accepting connections failed", metadata: ["error": "\(error)"])
            }
        }
    }

    private enum Admission { case admitted, full, shuttingDown }

    /// Registers a connection unless the server is full or stopping (one check-and-insert).
    private func admit(_ client: ClientConnection) -> Admission {
        state.withLockedValue { state in
            if state.shuttingDown { return .shuttingDown }
            guard state.clients.count < limits.maxClients else { return .full }
            state.clients[ObjectIdentifier(client)] = client
            return .admitted
        }
    }

    /// Tells a client over the limit why, then closes its connection.
    private func refuse(_ channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>) async {
        logger.warning("client limit reached; refusing a connection", metadata: ["server.maxClients": "\(limits.maxClients)"])
        let error = ErrorResponse(id: nil, error: RPCError(code: RPCErrorCode.tooManyClients,
            message: "recd serves at most \(limits.maxClients) clients; try again later", data: .init(code: "tooManyClients")))
        try? await channel.executeThenClose { _, outbound in
            var buffer = ByteBuffer(string: ClientConnection.encode(error))
            buffer.writeInteger(UInt8(ascii: "\n"))
            try await outbound.write(buffer)
        }
    }

    /// Stops accepting and lets each connection finish the request it is on; it then reads
    /// no more requests. Call before stopping the recorder: nothing can start a new one after.
    public func quiesce() async {
        let (listener, clients, path) = state.withLockedValue { state in
            state.shuttingDown = true
            return (state.listener, Array(state.clients.values), state.path)
        }
        try? await listener?.channel.close()
        if let path { unlink(path) }
        for client in clients { client.quiesce() }
    }

    /// After `quiesce`: waits until every connection has written every answer and notification
    /// already due, and closed. A client that leaves what it was sent unread for `grace`
    /// seconds is closed regardless, and so is every client after `limit` seconds.
    public func shutdown(grace: Double = 2, limit: Double = 10) async {
        await quiesce()
        for hub in context.hubs { await hub.drain() }
        for client in state.withLockedValue({ Array($0.clients.values) }) { client.release() }
        let begun = DispatchTime.now()
        let watcher = group.next().scheduleRepeatedTask(initialDelay: .milliseconds(250), delay: .milliseconds(250)) { [self] _ in
            let overdue = DispatchTime.now().uptimeNanoseconds - begun.uptimeNanoseconds > UInt64(limit * 1e9)
            let remaining = state.withLockedValue { Array($0.clients.values) }.filter { overdue || $0.isStalled(for: grace) }
            if !remaining.isEmpty {
                logger.warning("closing clients that did not take their answers", metadata: ["clients": "\(remaining.count)"])
            }
            for client in remaining { client.close() }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = served.withLockedValue { served in
                if !served.done { served.waiters.append(continuation) }
                return served.done
            }
            if done { continuation.resume() }
        }
        watcher.cancel()
        try? await context.lookups.shutdownGracefully()
    }

    private static func peerCredentials(of channel: Channel) -> EventLoopFuture<PeerCredentials> {
        guard let provider = channel as? SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(ChannelError.operationUnsupported)
        }
        let future: EventLoopFuture<KernelPeerCredentials> = provider.unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        return future.map { PeerCredentials(pid: $0.pid, uid: $0.uid, gid: $0.gid) }
    }

    /// Creates the socket's directory; refuses to take over a path another daemon answers on.
    private static func prepare(path: String) throws {
        let directory = FilePath(path).removingLastComponent().string
        if let refusal = SocketLocation.prepareFallback(for: path) { throw ServerError.cannotBind(path, refusal) }
        // Said here, in words, rather than by NIO's bind ("stat(pathname:outStat:): Permission denied").
        if let error = Directories.make(directory) {
            throw ServerError.cannotBind(path, "cannot create the directory \(directory): \(Errno(rawValue: error))")
        }
        if access(directory, W_OK | X_OK) != 0 {
            let error = Errno(rawValue: errno)
            let user = getpwuid(getuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "\(getuid())"
            throw ServerError.cannotBind(path, "user \(user) cannot create a socket in \(directory): \(error); "
                                         + "give it write access there, or set socket (--socket) to a path it may create")
        }
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

