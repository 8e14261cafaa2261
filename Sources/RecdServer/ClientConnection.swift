import Dispatch
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RecdProtocol
import RecorderCore
import Synchronization

/// Settings and collaborators every connection shares.
struct ConnectionContext: Sendable {
    let recorder: Recorder
    let version: String
    let hub: TopicHub
    let policy: AccessPolicy
    /// Bytes of answers and notifications a client may leave unread beyond its socket buffer
    /// before it is disconnected as too slow.
    let outboundLimit: Int
    /// Where blocking handlers run.
    let threadPool: NIOThreadPool
    /// Where user and group look-ups (NSS, which may block) run.
    let lookups: NIOThreadPool
    /// Encodes results (and keeps `status`'s), shared by every connection.
    let results = ResultEncoder()
    let logger: Logger
}

/// One client, run as a task: reads request lines in order, answers each before it reads the
/// next (so answers leave in request order), and delivers its subscriptions' notifications in
/// between. Everything it writes goes through one `Outbox`, drained by a writer that waits for
/// the socket (NIO's write-buffer watermarks); `quiesce()` ends reading, and the connection
/// closes once every answer already due has been written.
final class ClientConnection: PublicationReceiver, Sendable {
    let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
    let peer: PeerCredentials
    private let context: ConnectionContext
    private let logger: Logger
    private let outbox: Outbox
    private let state = NIOLockedValueBox(State())
    private let shutdown = NIOLockedValueBox<(quiesced: Bool, released: Bool, waiter: CheckedContinuation<Void, Never>?)>(
        (false, false, nil))
    private static let subscriptionCounter = Atomic<Int>(0)

    private struct State {
        var subscriptions: [String: Subscription] = [:]
        /// Notifications that must wait for the answer being prepared (a subscribe's snapshot
        /// comes first); nil when none are being held.
        var heldBack: [(subscription: String, line: ByteBuffer)]?
        var closing = false
    }

    /// A class, changed in place: a copy out of `subscriptions` and back would duplicate its
    /// dictionaries (copy on write) for every notification sent.
    /// @unchecked Sendable: only used under `state`'s lock.
    private final class Subscription: @unchecked Sendable {
        let id: String
        let topics: Set<Topic>
        let interval: TimeAmount

        init(id: String, topics: Set<Topic>, interval: TimeAmount) {
            self.id = id
            self.topics = topics
            self.interval = interval
        }

        /// What counts as "an interval later", and when a held-back value goes out: 10 % less
        /// than the interval, so that with an interval equal to the recorder's period values are
        /// not held back a whole period for a few milliseconds of timer jitter.
        var minimumSpacing: TimeAmount { .nanoseconds(interval.nanoseconds * 9 / 10) }
        /// Nothing at or below these is sent again (the snapshot had it).
        var lastSeq: [Topic: UInt64] = [:]
        /// When what was sent last was published (or sent, if it was held back or the snapshot):
        /// measured on publication times, so a connection served late in a fan-out does not
        /// hold its next value back.
        var lastSent: [Topic: NIODeadline] = [:]
        var pending: [Topic: Publication] = [:]
        var flushScheduled: Set<Topic> = []
    }

    var eventLoop: any EventLoop { channel.channel.eventLoop }

    init(channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>, peer: PeerCredentials, context: ConnectionContext) {
        self.channel = channel
        self.peer = peer
        self.context = context
        self.outbox = Outbox(channel: channel.channel, limit: context.outboundLimit + Outbox.nioBufferAllowance)
        var logger = context.logger
        logger[metadataKey: "client.uid"] = "\(peer.uid)"
        logger[metadataKey: "client.pid"] = "\(peer.pid)"
        self.logger = logger
    }

    /// Serves the client until it leaves, breaks the protocol fatally, is too slow, or the
    /// server quiesces. Never throws: one client's failure ends only that client.
    func run() async {
        do {
            // Written through the outbox, straight into the channel (see Outbox).
            try await channel.executeThenClose { inbound, _ in
                await self.readRequests(inbound)
                // Quiesced by the server: notifications still come (the recording's last
                // states) until the server lets the connection go.
                await self.awaitRelease()
                // Whatever is already due is written (or the socket failed); then we close.
                self.outbox.finish()
                await self.outbox.waitUntilWritten()
            }
        } catch {
            logger.debug("connection ended", metadata: ["error": "\(error)"])
        }
        state.withLockedValue { $0.closing = true; $0.subscriptions.removeAll() }
        context.hub.remove(self)
    }

    /// Stops reading requests; answers to those already read are still written, and
    /// notifications still delivered, until `release()`.
    func quiesce() {
        shutdown.withLockedValue { $0.quiesced = true }
        channel.channel.close(mode: .input, promise: nil)
    }

    /// After `quiesce`: write what is due and close.
    func release() {
        let waiter = shutdown.withLockedValue { state in
            state.released = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    private func awaitRelease() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let wait = shutdown.withLockedValue { state in
                guard state.quiesced, !state.released else { return false }
                state.waiter = continuation
                return true
            }
            if !wait { continuation.resume() }
        }
    }

    /// Whether the client has been given something to read and has not read any of it for
    /// `seconds` (at shutdown such a client is closed rather than waited for).
    func isStalled(for seconds: Double) -> Bool { outbox.isStalled(for: seconds) }

    /// Closes at once, whatever is unwritten (a client that did not read in time at shutdown).
    func close() {
        channel.channel.close(promise: nil)
    }

    // MARK: Requests

    private func readRequests(_ inbound: NIOAsyncChannelInboundStream<ByteBuffer>) async {
        let permissions = await resolvePermissions()
        do {
            for try await line in inbound {
                guard await handle(line: line.readableBytesView, permissions: permissions) else { return }
                // Backpressure: no next request while the client leaves its answers unread.
                await outbox.waitForRoom()
            }
        } catch is ByteToMessageDecoderError.PayloadTooLargeError {
            // NIO bounds what it buffers of an unfinished line.
            refuseLongLine()
        } catch {
            logger.debug("connection read failed", metadata: ["error": "\(error)"])
        }
    }

    /// Answers one line. False when the connection must close after what is due is written.
    private func handle(line: ByteBufferView, permissions: Set<Permission>) async -> Bool {
        switch RequestParser.parse(line) {
        case .blank:
            return true
        case .unreadable(let error):
            if line.count > JSONRPC.maximumLineLength {
                refuseLongLine()
                return false
            }
            send(answer: Self.encode(ErrorResponse(id: nil, error: error)))
        case .single(let item):
            send(answer: await answer(item, permissions: permissions))
        case .batch(let items):
            var answers: [String] = []
            for item in items {
                if let answer = await answer(item, permissions: permissions) { answers.append(answer) }
            }
            // A batch of notifications gets nothing at all, not an empty array.
            send(answer: answers.isEmpty ? nil : "[" + answers.joined(separator: ",") + "]")
        }
        return true
    }

    private func refuseLongLine() {
        logger.warning("request line too long; closing")
        send(answer: Self.encode(ErrorResponse(id: nil, error: .invalidRequest(
            "request line exceeds \(JSONRPC.maximumLineLength) bytes; closing the connection"))))
    }

    /// Runs one request through the dispatch table; returns its encoded answer, if it gets one.
    private func answer(_ item: RequestItem, permissions: Set<Permission>) async -> String? {
        guard case .request(let request) = item else { return item.errorResponse.map(Self.encode) }
        let name = request.method.rawValue
        let outcome: Result<any Encodable & Sendable, RPCError>
        if !permissions.contains(request.method.permission) {
            logger.notice("request refused", metadata: ["request.method": "\(name)",
                                                        "permission": "\(request.method.permission.rawValue)"])
            outcome = .failure(.permissionDenied(method: name, permission: request.method.permission.rawValue))
        } else if let handler = MethodTable.handlers[request.method] {
            logger.debug("request", metadata: ["request.method": "\(name)", "request.id": "\(request.id?.description ?? "-")"])
            let requestContext = RequestContext(recorder: context.recorder, version: context.version, connection: self)
            let params = request.params
            let run: @Sendable () -> Result<any Encodable & Sendable, RPCError> = {
                Result { () throws(RPCError) in try handler.run(requestContext, params) }
            }
            if handler.blocking {
                do {
                    outcome = try await context.threadPool.runIfActive(run)
                } catch {
                    outcome = .failure(RPCError(code: RPCErrorCode.internalError, message: "recd is shutting down",
                                                data: .init(code: "internalError")))
                }
            } else {
                outcome = run()
            }
        } else {
            outcome = .failure(RPCError(code: RPCErrorCode.internalError, message: "no handler for '\(name)'",
                                        data: .init(code: "internalError")))
        }
        // A notification is never answered, not even when it failed.
        guard !request.isNotification else { return nil }
        switch outcome {
        case .success(let result):
            guard let json = context.results.encode(result) else {
                return Self.encode(ErrorResponse(id: request.id, error: RPCError(
                    code: RPCErrorCode.internalError, message: "cannot encode the answer", data: .init(code: "internalError"))))
            }
            return ResponseLine.success(id: request.id, result: json)
        case .failure(let error): return Self.encode(ErrorResponse(id: request.id, error: error))
        }
    }

    /// The peer's permissions; user and group look-ups may block (NSS), so off the cooperative pool.
    private func resolvePermissions() async -> Set<Permission> {
        let policy = context.policy
        let peer = peer
        return (try? await context.lookups.runIfActive { policy.permissions(of: peer) }) ?? [.observe]
    }

    // MARK: Subscriptions (called by the dispatch table)

    func subscribe(_ request: SubscribeParams) throws(RPCError) -> SubscribeResult {
        let topics = Set(request.topics ?? Topic.allCases)
        guard !topics.isEmpty else { throw .invalidParams("'topics' must name at least one topic") }
        let interval = request.interval ?? SubscribeParams.defaultInterval
        guard interval.isFinite, interval >= SubscribeParams.minimumInterval, interval <= 3600 else {
            throw .invalidParams("'interval' must be between \(SubscribeParams.minimumInterval) and 3600 seconds")
        }
        let id = String(Self.subscriptionCounter.add(1, ordering: .relaxed).newValue)
        let snapshot = state.withLockedValue { state -> [Publication] in
            let subscription = Subscription(id: id, topics: topics, interval: .nanoseconds(Int64(interval * 1e9)))
            let allTopics = state.subscriptions.values.reduce(topics) { $0.union($1.topics) }
            // Registered and snapshotted at once; changes after it wait for this answer.
            let snapshot = context.hub.add(self, topics: allTopics).filter { topics.contains($0.update.topic) }
            let now = NIODeadline.now()
            for publication in snapshot {
                subscription.lastSeq[publication.update.topic] = publication.update.seq
                subscription.lastSent[publication.update.topic] = now
            }
            state.subscriptions[id] = subscription
            if state.heldBack == nil { state.heldBack = [] }
            return snapshot
        }
        logger.debug("subscribed", metadata: ["subscription.id": "\(id)", "subscription.topics": "\(topics.sorted())"])
        return SubscribeResult(subscription: id, topics: topics.sorted(), interval: interval, snapshot: snapshot.map(\.update))
    }

    func unsubscribe(_ request: UnsubscribeParams) throws(RPCError) -> UnsubscribeResult {
        let remaining = state.withLockedValue { state -> Set<Topic>? in
            guard state.subscriptions.removeValue(forKey: request.subscription) != nil else { return nil }
            state.heldBack?.removeAll { $0.subscription == request.subscription }
            return state.subscriptions.values.reduce([]) { $0.union($1.topics) }
        }
        guard let remaining else {
            throw .invalidParams("no subscription '\(request.subscription)' on this connection")
        }
        context.hub.update(self, topics: remaining)
        return UnsubscribeResult(subscription: request.subscription)
    }

    /// Called by the hub on the connection's event loop.
    func receive(_ publication: Publication) {
        state.withLockedValue { state in deliver(publication, state: &state) }
    }

    private func deliver(_ publication: Publication, state: inout State) {
        guard !state.closing else { return }
        let topic = publication.update.topic
        for subscription in state.subscriptions.values {
            guard subscription.topics.contains(topic), publication.update.seq > subscription.lastSeq[topic] ?? 0 else { continue }
            let now = publication.published
            if topic.isContinuous, let last = subscription.lastSent[topic], now < last + subscription.minimumSpacing {
                // Too soon: keep the latest and send it when the interval has passed.
                subscription.pending[topic] = publication
                if !subscription.flushScheduled.contains(topic) {
                    subscription.flushScheduled.insert(topic)
                    let due = last + subscription.minimumSpacing
                    let id = subscription.id
                    channel.channel.eventLoop.scheduleTask(deadline: due) {
                        self.state.withLockedValue { state in self.flush(topic, of: id, due: due, state: &state) }
                    }
                }
                continue
            }
            if !topic.isContinuous {
                // Time and levels held back for the interval go first: a client sees the final
                // currentTime before the state that ends the recording.
                for (pendingTopic, pending) in subscription.pending.sorted(by: { $0.key < $1.key })
                where pending.update.seq > subscription.lastSeq[pendingTopic] ?? 0 {
                    send(pending, on: subscription, at: now, state: &state)
                }
                subscription.pending.removeAll()
            }
            send(publication, on: subscription, at: now, state: &state)
        }
    }

    /// Sends the value held back for `topic`, due at `due`: the next interval is counted from
    /// then, not from when the loop got to it, so a busy loop does not push every later value back.
    private func flush(_ topic: Topic, of id: String, due: NIODeadline, state: inout State) {
        guard !state.closing, let subscription = state.subscriptions[id] else { return }
        subscription.flushScheduled.remove(topic)
        if let publication = subscription.pending.removeValue(forKey: topic),
           publication.update.seq > subscription.lastSeq[topic] ?? 0 {
            send(publication, on: subscription, at: due, state: &state)
        }
    }

    private func send(_ publication: Publication, on subscription: Subscription, at now: NIODeadline,
                      state: inout State) {
        subscription.lastSeq[publication.update.topic] = publication.update.seq
        subscription.lastSent[publication.update.topic] = now
        let line = publication.notification(for: subscription.id)
        if state.heldBack != nil {
            state.heldBack!.append((subscription.id, line))
        } else {
            enqueue(line, state: &state)
        }
    }

    // MARK: Writing

    /// Queues an answer (if any), then the notifications that waited for it. An answer is
    /// always queued, however large: reading stops until the client takes it (`waitForRoom`).
    private func send(answer: String?) {
        state.withLockedValue { state in
            if let answer, !state.closing { outbox.send(Self.buffer(answer), limited: false) }
            for (_, line) in state.heldBack ?? [] { enqueue(line, state: &state) }
            state.heldBack = nil
        }
    }

    /// Queues a notification, unless the client has left too much unread.
    private func enqueue(_ line: ByteBuffer, state: inout State) {
        guard !state.closing else { return }
        if !outbox.send(line, limited: true) {
            // Not reading: it may not hold memory or anyone's time. No message: it would not read it.
            logger.warning("client not reading; disconnecting", metadata: ["client.queuedBytes": "\(outbox.queuedBytes)"])
            state.closing = true
            close()
        }
    }

    private static func buffer(_ line: String) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(line.utf8.count + 1)
        buffer.writeString(line)
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }

    static func encode(_ value: some Encodable) -> String {
        do {
            return String(decoding: try WireCoding.encoder().encode(value), as: UTF8.self)
        } catch {
            return #"{"error":{"code":-32603,"message":"cannot encode the answer"},"id":null,"jsonrpc":"2.0"}"#
        }
    }
}

/// What waits to be written to one client, in order, counted in bytes until the socket has
/// taken them.
///
/// Lines go straight into the channel, on its event loop and in the order they are sent, and
/// are flushed once per turn of the loop: what one tick publishes, and an answer with the
/// notifications that waited for it, leave in one write. Nothing runs between a line and the
/// socket but NIO's pipeline; NIO keeps what the socket does not take yet, and this counts it.
final class Outbox: Sendable {
    /// What NIO may hold for a client before `server.client_queue_bytes` starts to count
    /// (doc/protocol.md: "beyond its socket buffer and NIO's 32 KiB").
    static let nioBufferAllowance = 32 * 1024

    private let channel: any Channel
    private let limit: Int
    private let state = NIOLockedValueBox(State())

    private struct State {
        /// Handed to the channel (or on the way to its loop), not yet written to the socket.
        var bytes = 0
        var finished = false
        var flushScheduled = false
        /// Uptime (ns) of the last write the socket took, or of the first byte queued since.
        var lastProgress: UInt64 = 0
        var roomWaiters: [CheckedContinuation<Void, Never>] = []
        var writtenWaiters: [CheckedContinuation<Void, Never>] = []
    }

    init(channel: any Channel, limit: Int) {
        self.channel = channel
        self.limit = limit
    }

    var queuedBytes: Int { state.withLockedValue { $0.bytes } }

    /// Queues `line`. With `limited`, refuses (false) if that would leave more than the limit
    /// unwritten: a notification for a client that does not read. Called on the channel's
    /// event loop (the connection's task and the hub run there); from elsewhere it hops there.
    @discardableResult
    func send(_ line: ByteBuffer, limited: Bool) -> Bool {
        enum Action { case refuse, drop, write }
        let action = state.withLockedValue { state -> Action in
            guard !limited || state.bytes + line.readableBytes <= limit else { return .refuse }
            // After `finish` (the connection is closing): dropped, as an answer to nobody.
            guard !state.finished else { return .drop }
            if state.bytes == 0 { state.lastProgress = DispatchTime.now().uptimeNanoseconds }
            state.bytes += line.readableBytes
            return .write
        }
        switch action {
        case .refuse: return false
        case .drop: return true
        case .write where channel.eventLoop.inEventLoop: write(line)
        case .write: channel.eventLoop.execute { self.write(line) }
        }
        return true
    }

    /// On the event loop: hands `line` to the channel; the flush comes after whatever else
    /// this turn of the loop writes (`flushScheduled` is only touched here, on the loop).
    private func write(_ line: ByteBuffer) {
        let count = line.readableBytes
        let promise = channel.eventLoop.makePromise(of: Void.self)
        promise.futureResult.whenComplete { result in self.written(count, failed: (try? result.get()) == nil) }
        channel.write(line, promise: promise)
        let scheduleFlush = state.withLockedValue { state in
            defer { state.flushScheduled = true }
            return !state.flushScheduled
        }
        if scheduleFlush {
            channel.eventLoop.execute {
                self.state.withLockedValue { $0.flushScheduled = false }
                self.channel.flush()
            }
        }
    }

    /// The socket took `count` bytes (or the channel failed and never will).
    private func written(_ count: Int, failed: Bool) {
        if failed { channel.close(promise: nil) }  // the socket failed: stop reading too
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.bytes -= count
            state.lastProgress = DispatchTime.now().uptimeNanoseconds
            var waiters: [CheckedContinuation<Void, Never>] = []
            if state.bytes <= limit { swap(&waiters, &state.roomWaiters) }
            if state.bytes == 0 { waiters += state.writtenWaiters; state.writtenWaiters = [] }
            return waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once no more than the limit waits (at once if not more does).
    func waitForRoom() async {
        await wait(in: \.roomWaiters) { $0.bytes > limit }
    }

    /// Nothing more will be queued (what is sent later is dropped).
    func finish() {
        state.withLockedValue { $0.finished = true }
    }

    /// Returns once everything queued is written, or the channel failed.
    func waitUntilWritten() async {
        await wait(in: \.writtenWaiters) { $0.bytes > 0 }
    }

    private func wait(in waiters: WritableKeyPath<State, [CheckedContinuation<Void, Never>]>,
                      while condition: (State) -> Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let wait = state.withLockedValue { state in
                guard condition(state) else { return false }
                state[keyPath: waiters].append(continuation)
                return true
            }
            if !wait { continuation.resume() }
        }
    }

    /// Whether something waits unwritten and the socket has taken nothing for `seconds`.
    func isStalled(for seconds: Double) -> Bool {
        state.withLockedValue { state in
            state.bytes > 0 && DispatchTime.now().uptimeNanoseconds &- state.lastProgress > UInt64(seconds * 1e9)
        }
    }
}
