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
        self.outbox = Outbox(limit: context.outboundLimit)
        var logger = context.logger
        logger[metadataKey: "client.uid"] = "\(peer.uid)"
        logger[metadataKey: "client.pid"] = "\(peer.pid)"
        self.logger = logger
    }

    /// Serves the client until it leaves, breaks the protocol fatally, is too slow, or the
    /// server quiesces. Never throws: one client's failure ends only that client.
    func run() async {
        do {
            try await channel.executeThenClose { inbound, outbound in
                await withTaskGroup(of: Void.self) { group in
                    group.addTask {
                        do {
                            try await self.outbox.drain(into: outbound)
                            // Handed to NIO is not yet written: wait for the socket to take
                            // the last byte before executeThenClose closes the channel.
                            self.outbox.beginFinalFlush()
                            try await self.channel.channel.writeAndFlush(ByteBuffer()).get()
                        } catch {
                            self.close()  // the socket failed: stop reading too
                        }
                        self.outbox.markWritten()
                    }
                    await self.readRequests(inbound)
                    // Quiesced by the server: notifications still come (the recording's last
                    // states) until the server lets the connection go.
                    await self.awaitRelease()
                    // Whatever is already due is written; then the writer ends and we close.
                    self.outbox.finish()
                    await group.waitForAll()
                }
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

/// What waits to be written to one client, in order, counted in bytes. The writer takes
/// everything queued at once: what one tick publishes leaves in one write.
final class Outbox: Sendable {
    private let limit: Int
    private let state = NIOLockedValueBox(State())

    private struct State {
        /// Queued, not yet taken by the writer.
        var queue: [ByteBuffer] = []
        var finished = false
        /// The writer, waiting for something to write.
        var writer: CheckedContinuation<Void, Never>?
        /// Queued or taken, not yet written.
        var bytes = 0
        /// Uptime (ns) of the last write the socket took, or of the first byte queued since.
        var lastProgress: UInt64 = 0
        /// In the final flush: everything is handed to NIO, not yet known to be written.
        var flushing = false
        var roomWaiters: [CheckedContinuation<Void, Never>] = []
    }

    init(limit: Int) {
        self.limit = limit
    }

    var queuedBytes: Int { state.withLockedValue { $0.bytes } }

    /// Queues `line`. With `limited`, refuses (false) if that would leave more than `limit`
    /// bytes unwritten: a notification for a client that does not read.
    @discardableResult
    func send(_ line: ByteBuffer, limited: Bool) -> Bool {
        let (accepted, writer) = state.withLockedValue { state -> (Bool, CheckedContinuation<Void, Never>?) in
            guard !limited || state.bytes + line.readableBytes <= limit else { return (false, nil) }
            // After `finish` (the connection is closing): dropped, as an answer to nobody.
            guard !state.finished else { return (true, nil) }
            if state.bytes == 0 { state.lastProgress = DispatchTime.now().uptimeNanoseconds }
            state.bytes += line.readableBytes
            state.queue.append(line)
            defer { state.writer = nil }
            return (true, state.writer)
        }
        writer?.resume()
        return accepted
    }

    /// Returns once no more than `limit` bytes wait (at once if none do).
    func waitForRoom() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let wait = state.withLockedValue { state in
                guard state.bytes > limit else { return false }
                state.roomWaiters.append(continuation)
                return true
            }
            if !wait { continuation.resume() }
        }
    }

    /// Nothing more will be queued: `drain` returns once the rest is written.
    func finish() {
        let writer = state.withLockedValue { state in
            state.finished = true
            defer { state.writer = nil }
            return state.writer
        }
        writer?.resume()
    }

    /// Everything queued so far, waiting until there is some; nil once finished and empty.
    private func take() async -> [ByteBuffer]? {
        while true {
            let taken = state.withLockedValue { state -> [ByteBuffer]?? in
                if !state.queue.isEmpty {
                    defer { state.queue = [] }
                    return state.queue
                }
                return state.finished ? .some(nil) : nil
            }
            if let taken { return taken }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLockedValue { state in
                    guard state.queue.isEmpty, !state.finished else { return true }
                    state.writer = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        }
    }

    /// Writes the queue to the socket in order, waiting while the socket's buffer is full.
    func drain(into outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>) async throws {
        while let lines = await take() {
            try await outbound.write(contentsOf: lines)
            let written = lines.reduce(0) { $0 + $1.readableBytes }
            let waiters = state.withLockedValue { state in
                state.bytes -= written
                state.lastProgress = DispatchTime.now().uptimeNanoseconds
                guard state.bytes <= limit else { return [CheckedContinuation<Void, Never>]() }
                defer { state.roomWaiters = [] }
                return state.roomWaiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    /// Everything is handed to NIO; the final flush begins (it waits for the client to read).
    func beginFinalFlush() {
        state.withLockedValue { state in
            state.flushing = true
            state.lastProgress = DispatchTime.now().uptimeNanoseconds
        }
    }

    /// The final flush is done (or failed): nothing of ours is left unwritten.
    func markWritten() {
        let waiters = state.withLockedValue { state in
            state.flushing = false
            state.bytes = 0
            defer { state.roomWaiters = [] }
            return state.roomWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func isStalled(for seconds: Double) -> Bool {
        state.withLockedValue { state in
            (state.bytes > 0 || state.flushing)
                && DispatchTime.now().uptimeNanoseconds &- state.lastProgress > UInt64(seconds * 1e9)
        }
    }
}
