import Dispatch
import Foundation
import Logging
import NIOCore
import RecdProtocol
import RecorderCore

/// Settings and collaborators every connection shares.
struct ConnectionContext: Sendable {
    let executor: MethodExecutor
    let hub: TopicHub
    let policy: AccessPolicy
    /// Outbound messages a client may have queued before it is disconnected as too slow.
    let outboundLimit: Int
    let logger: Logger
    /// Where blocking methods run; each connection has a serial queue targeting it.
    let operations: DispatchQueue
}

/// One client: parses request lines, answers them, and delivers its subscriptions.
///
/// All mutable state is touched on the channel's event loop only: `channelRead` runs there,
/// publications and results of blocking methods hop there with `execute`.
final class ClientConnection: ChannelInboundHandler, PublicationReceiver, @unchecked Sendable {
    // @unchecked: every property below `peer` is confined to `eventLoop` (see above).
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let context: ConnectionContext
    let eventLoop: EventLoop
    let peer: PeerCredentials
    let permissions: Set<Permission>
    private let queue: DispatchQueue
    private var logger: Logger

    private var channel: Channel?
    private var subscriptions: [String: Subscription] = [:]
    private var outstandingWrites = 0
    private var closing = false
    /// Requests handed to `queue` and not answered yet. While there are any, every answer
    /// takes the same path, so answers leave in the order requests arrived.
    private var queuedRequests = 0
    private static let subscriptionCounter = SubscriptionCounter()

    private struct Subscription {
        let id: String
        let topics: Set<Topic>
        let interval: TimeAmount
        /// What counts as "an interval later", and when a held-back value goes out: 10 % less
        /// than the interval, so that with an interval equal to the recorder's period values are
        /// not held back a whole period for a few milliseconds of timer jitter.
        var minimumSpacing: TimeAmount { .nanoseconds(interval.nanoseconds * 9 / 10) }
        /// Nothing at or below these is sent again (the snapshot had it).
        var lastSeq: [Topic: UInt64] = [:]
        var lastSent: [Topic: NIODeadline] = [:]
        var pending: [Topic: Publication] = [:]
        var flushScheduled: Set<Topic> = []
    }

    init(context: ConnectionContext, eventLoop: EventLoop, peer: PeerCredentials) {
        self.context = context
        self.eventLoop = eventLoop
        self.peer = peer
        self.permissions = context.policy.permissions(of: peer)
        self.queue = DispatchQueue(label: "recd.client", target: context.operations)
        var logger = context.logger
        logger[metadataKey: "client.uid"] = "\(peer.uid)"
        logger[metadataKey: "client.pid"] = "\(peer.pid)"
        self.logger = logger
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        channel = context.channel
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let line = unwrapInboundIn(data)
        handle(line: Array(line.readableBytesView))
    }

    func channelInactive(context: ChannelHandlerContext) {
        closing = true
        subscriptions.removeAll()
        self.context.hub.remove(self)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        if error is ByteToMessageDecoderError.PayloadTooLargeError {
            logger.warning("request line too long; closing")
            send(error: .invalidRequest("request line exceeds \(JSONRPC.maximumLineLength) bytes; closing the connection"), id: nil)
        } else if !(error is ChannelError) {
            logger.debug("connection error", metadata: ["error": "\(error)"])
        }
        closeAfterPendingWrites()
    }

    // MARK: Requests

    private static let allowedMembers: Set<String> = ["jsonrpc", "id", "method", "params"]

    private func handle(line: [UInt8]) {
        guard !closing else { return }
        if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return }  // blank lines are harmless
        guard line.count <= JSONRPC.maximumLineLength else {
            // NIO bounds what it buffers of an unfinished line; a whole line that arrived at once
            // is measured here.
            logger.warning("request line too long; closing")
            inOrder { self.send(error: .invalidRequest("request line exceeds \(JSONRPC.maximumLineLength) bytes; closing the connection"), id: nil) }
            return closeAfterPendingWrites()
        }
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(line))
        } catch {
            return reply(error: .parseError("not valid JSON: \(Self.describeParseError(error))"), id: nil)
        }
        guard case .object(let members) = value else {
            if case .array = value { return reply(error: .invalidRequest("batch requests are not supported; send one request per line"), id: nil) }
            return reply(error: .invalidRequest("a request must be a JSON object"), id: nil)
        }
        let id: RPCID?
        switch members["id"] {
        case nil, .null?: id = nil
        case .string(let string)?: id = .string(string)
        case .number(let number)? where number.rounded() == number && abs(number) < 9e15: id = .number(Int64(number))
        default: return reply(error: .invalidRequest("'id' must be a string or an integer"), id: nil)
        }
        // A request without an id is a notification: JSON-RPC sends it no answer, not even an error.
        let answered = members["id"] != nil
        func fail(_ error: RPCError) {
            if answered { reply(error: error, id: id) }
        }
        guard members["jsonrpc"] == .string(JSONRPC.version) else {
            return fail(.invalidRequest("'jsonrpc' must be \"2.0\""))
        }
        if let unknown = members.keys.sorted().first(where: { !Self.allowedMembers.contains($0) }) {
            return fail(.invalidRequest("unknown member '\(unknown)' in request"))
        }
        guard case .string(let name)? = members["method"] else {
            return fail(.invalidRequest("'method' must be a string"))
        }
        guard let method = RecdProtocol.Method(rawValue: name) else {
            return fail(.methodNotFound(name))
        }
        guard permissions.contains(method.permission) else {
            logger.notice("request refused", metadata: ["request.method": "\(name)", "permission": "\(method.permission.rawValue)"])
            return fail(.permissionDenied(method: name, permission: method.permission.rawValue))
        }
        let params = members["params"]
        switch params {
        case nil, .null?:
            break
        case .object(let object)?:
            if let unknown = object.keys.sorted().first(where: { !method.parameterNames.contains($0) }) {
                let accepted = method.parameterNames.sorted().joined(separator: ", ")
                return fail(.invalidParams("unknown parameter '\(unknown)' for '\(name)'"
                                           + (accepted.isEmpty ? " (it takes none)" : " (accepted: \(accepted))")))
            }
        default:
            return fail(.invalidParams("params must be an object with named members"))
        }
        logger.debug("request", metadata: ["request.method": "\(name)", "request.id": "\(id?.description ?? "-")"])

        switch method {
        case .subscribe:
            inOrder { self.subscribe(params: params, id: id) }
        case .unsubscribe:
            inOrder { self.unsubscribe(params: params, id: id) }
        case .status, .version:
            // Reads observed values only: answered on the event loop unless answers are queued.
            let executor = context.executor
            inOrder { self.respond(id: id) { () throws(RPCError) in try executor.execute(method, params: params) } }
        default:
            // May block (finalizing a file, reading a directory): off the event loop, in order.
            let executor = context.executor
            queuedRequests += 1
            queue.async {
                let outcome: Result<any Encodable & Sendable, RPCError> = Result { () throws(RPCError) in
                    try executor.execute(method, params: params)
                }
                self.eventLoop.execute {
                    self.queuedRequests -= 1
                    self.respond(id: id) { () throws(RPCError) in try outcome.get() }
                }
            }
        }
    }

    /// Runs `body` on the event loop now, or after the queued requests when there are any.
    private func inOrder(_ body: @escaping @Sendable () -> Void) {
        guard queuedRequests > 0 else { return body() }
        queuedRequests += 1
        queue.async {
            self.eventLoop.execute {
                self.queuedRequests -= 1
                body()
            }
        }
    }

    private func reply(error: RPCError, id: RPCID?) {
        inOrder { self.send(error: error, id: id) }
    }

    private func respond(id: RPCID?, _ body: () throws(RPCError) -> any Encodable & Sendable) {
        do {
            let result = try body()
            guard let id else { return }  // a notification: no answer
            send(line: Self.encode(OutgoingResponse(id: id, result: result)))
        } catch {
            send(error: error, id: id)
        }
    }

    private func send(error: RPCError, id: RPCID?) {
        send(line: Self.encode(ErrorResponse(id: id, error: error)))
    }

    // MARK: Subscriptions

    private func subscribe(params: JSONValue?, id: RPCID?) {
        let request: SubscribeParams
        do {
            request = try decode(SubscribeParams.self, params) ?? SubscribeParams()
        } catch {
            return send(error: error, id: id)
        }
        let topics = Set(request.topics ?? Topic.allCases)
        guard !topics.isEmpty else { return send(error: .invalidParams("'topics' must name at least one topic"), id: id) }
        let interval = request.interval ?? SubscribeParams.defaultInterval
        guard interval.isFinite, interval >= SubscribeParams.minimumInterval, interval <= 3600 else {
            return send(error: .invalidParams("'interval' must be between \(SubscribeParams.minimumInterval) and 3600 seconds"), id: id)
        }
        let subscriptionID = Self.subscriptionCounter.next()
        var subscription = Subscription(id: subscriptionID, topics: topics, interval: .nanoseconds(Int64(interval * 1e9)))
        let allTopics = subscriptions.values.reduce(topics) { $0.union($1.topics) }
        let snapshot = context.hub.add(self, topics: allTopics).filter { topics.contains($0.update.topic) }
        let now = NIODeadline.now()
        for publication in snapshot {
            subscription.lastSeq[publication.update.topic] = publication.update.seq
            subscription.lastSent[publication.update.topic] = now
        }
        subscriptions[subscriptionID] = subscription
        logger.debug("subscribed", metadata: ["subscription.id": "\(subscriptionID)", "subscription.topics": "\(topics.sorted())"])
        guard let id else { return }
        let result = SubscribeResult(subscription: subscriptionID, topics: topics.sorted(), interval: interval,
                                     snapshot: snapshot.map(\.update))
        send(line: Self.encode(OutgoingResponse(id: id, result: result)))
    }

    private func unsubscribe(params: JSONValue?, id: RPCID?) {
        let request: UnsubscribeParams
        do {
            guard let decoded = try decode(UnsubscribeParams.self, params) else {
                return send(error: .invalidParams("'subscription' is required"), id: id)
            }
            request = decoded
        } catch {
            return send(error: error, id: id)
        }
        guard subscriptions.removeValue(forKey: request.subscription) != nil else {
            return send(error: .invalidParams("no subscription '\(request.subscription)' on this connection"), id: id)
        }
        context.hub.update(self, topics: subscriptions.values.reduce([]) { $0.union($1.topics) })
        respond(id: id) { UnsubscribeResult(subscription: request.subscription) }
    }

    /// Called by the hub on its own queue.
    func receive(_ publication: Publication) {
        eventLoop.execute { self.deliver(publication) }
    }

    private func deliver(_ publication: Publication) {
        guard !closing else { return }
        let topic = publication.update.topic
        for id in subscriptions.keys {
            guard var subscription = subscriptions[id], subscription.topics.contains(topic),
                  publication.update.seq > subscription.lastSeq[topic] ?? 0 else { continue }
            let now = NIODeadline.now()
            if topic.isContinuous, let last = subscription.lastSent[topic], now < last + subscription.minimumSpacing {
                // Too soon: keep the latest and send it when the interval has passed.
                subscription.pending[topic] = publication
                if !subscription.flushScheduled.contains(topic) {
                    subscription.flushScheduled.insert(topic)
                    eventLoop.scheduleTask(deadline: last + subscription.minimumSpacing) { self.flush(topic, of: id) }
                }
                subscriptions[id] = subscription
                continue
            }
            if !topic.isContinuous {
                // Time and levels held back for the interval go first: a client sees the final
                // currentTime before the state that ends the recording.
                for (pendingTopic, pending) in subscription.pending.sorted(by: { $0.key < $1.key })
                where pending.update.seq > subscription.lastSeq[pendingTopic] ?? 0 {
                    send(pending, on: &subscription, at: now)
                }
                subscription.pending.removeAll()
            }
            send(publication, on: &subscription, at: now)
            subscriptions[id] = subscription
        }
    }

    private func flush(_ topic: Topic, of id: String) {
        guard !closing, var subscription = subscriptions[id] else { return }
        subscription.flushScheduled.remove(topic)
        if let publication = subscription.pending.removeValue(forKey: topic),
           publication.update.seq > subscription.lastSeq[topic] ?? 0 {
            send(publication, on: &subscription, at: .now())
        }
        subscriptions[id] = subscription
    }

    private func send(_ publication: Publication, on subscription: inout Subscription, at now: NIODeadline) {
        subscription.lastSeq[publication.update.topic] = publication.update.seq
        subscription.lastSent[publication.update.topic] = now
        send(line: "{\"jsonrpc\":\"2.0\",\"method\":\"changed\",\"params\":{\"subscription\":\"\(subscription.id)\","
             + publication.members + "}}")
    }

    // MARK: Writing

    /// Queues one line. A client with more than `outboundLimit` lines unwritten is not reading:
    /// it is disconnected rather than allowed to hold memory or slow anyone down.
    private func send(line: String) {
        guard !closing, let channel else { return }
        outstandingWrites += 1
        if outstandingWrites > context.outboundLimit {
            logger.warning("client not reading; disconnecting", metadata: ["client.queued": "\(outstandingWrites)"])
            closing = true
            channel.close(promise: nil)
            return
        }
        var buffer = channel.allocator.buffer(capacity: line.utf8.count + 1)
        buffer.writeString(line)
        buffer.writeInteger(UInt8(ascii: "\n"))
        channel.writeAndFlush(buffer).whenComplete { _ in self.outstandingWrites -= 1 }
    }

    /// Closes once what is queued has been written (used after a fatal protocol error and at shutdown).
    func closeAfterPendingWrites() {
        eventLoop.execute {
            guard let channel = self.channel, !self.closing else { return }
            self.closing = true
            channel.writeAndFlush(channel.allocator.buffer(capacity: 0)).whenComplete { _ in
                channel.close(promise: nil)
            }
        }
    }

    private static func encode(_ value: some Encodable) -> String {
        do {
            return String(decoding: try WireCoding.encoder().encode(value), as: UTF8.self)
        } catch {
            return #"{"error":{"code":-32603,"message":"cannot encode the answer"},"id":null,"jsonrpc":"2.0"}"#
        }
    }

    private static func describeParseError(_ error: Error) -> String {
        if case DecodingError.dataCorrupted(let context) = error {
            return (context.underlyingError as NSError?)?.userInfo[NSDebugDescriptionErrorKey] as? String ?? context.debugDescription
        }
        return "\(error)"
    }
}

/// A response whose result is any Encodable.
private struct OutgoingResponse: Encodable {
    let id: RPCID
    let result: any Encodable & Sendable

    private enum CodingKeys: String, CodingKey { case jsonrpc, id, result }

    func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(JSONRPC.version, forKey: .jsonrpc)
        try container.encode(id, forKey: .id)
        try container.encode(result, forKey: .result)
    }
}

/// Subscription ids unique for the daemon's lifetime.
private final class SubscriptionCounter: Sendable {
    private let value = Synchronization.Atomic<Int>(0)
    func next() -> String { String(value.add(1, ordering: .relaxed).newValue) }
}

import Synchronization
