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
import Synchronization

/// Settings and collaborators every connection shares.
struct ConnectionContext: Sendable {
    let station: Station
    let version: String
    /// Each source's, in the station's order.
    let hubs: [TopicHub]
    let policy: AccessPolicy
    /// What `metrics` answers with (nil: no metrics kept).
    var metrics: (any MetricsSource)? = nil
    /// Bytes of answers and notifications a client may leave unread beyond its socket buffer
    /// before it is disconnected as too slow.
    let outboundLimit: Int
    /// Where blocking handlers run.
    let blocking: BlockingCalls
    /// Where user and group look-ups (NSS, which may block) run.
    let lookups: NIOThreadPool
    /// One per event loop of the server's group (a connection elsewhere gets its own).
    var flushers: [ObjectIdentifier: LoopFlusher] = [:]
    /// Encodes results (and keeps `status`'s), shared by every connection.
    let results = ResultEncoder()
    let logger: Logger

    func flusher(for eventLoop: any EventLoop) -> LoopFlusher {
        flushers[ObjectIdentifier(eventLoop)] ?? LoopFlusher(eventLoop: eventLoop)
    }
}

/// One client, run as a task: reads request lines in order, answers each before it reads the
/// next (so answers leave in request order), and delivers its subscriptions' notifications in
/// between. Lines whose handlers do not block are answered before they reach the task, on the
/// event loop as they are read (`InlineRequestHandler`), unless an earlier line still waits.
/// Everything it writes goes through one `Outbox`, which counts what the socket has not taken;
/// `quiesce()` ends reading, and the connection closes once every answer already due has been
/// written.
final class ClientConnection: PublicationReceiver, SubscriptionHost, TapHost, Sendable {
    let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
    let peer: PeerCredentials
    private let context: ConnectionContext
    private let logger: Logger
    private let outbox: Outbox
    private let state = NIOLockedValueBox(State())
    /// What `InlineRequestHandler` may answer on the event loop: nothing until the peer's
    /// permissions are known, nor while lines it passed to the stream are unanswered.
    private let inline = NIOLockedValueBox<(permissions: Set<Permission>?, forwarded: Int)>((nil, 0))
    private let shutdown = NIOLockedValueBox<(quiesced: Bool, released: Bool, waiter: CheckedContinuation<Void, Never>?)>(
        (false, false, nil))
    private static let subscriptionCounter = Atomic<Int>(0)

    private struct State {
        var subscriptions: [String: Subscription] = [:]
        /// Notifications that must wait for the answer being prepared (a subscribe's snapshot
        /// comes first); nil when none are being held.
        var heldBack: [(subscription: String, line: ByteBuffer)]?
        var closing = false
        /// Set by `tap`: the connection carries that tap's audio once its answer is out, and
        /// reads no more requests.
        var tap: (id: Int, stream: TapStream, recorder: Recorder)?
    }

    /// A class, changed in place: a copy out of `subscriptions` and back would duplicate its
    /// dictionaries (copy on write) for every notification sent.
    /// @unchecked Sendable: only used under `state`'s lock.
    private final class Subscription: @unchecked Sendable {
        let id: String
        let topics: Set<Topic>
        /// `topics` as bits (`Topic.slot`): tested for every publication.
        let topicBits: UInt32
        let interval: TimeAmount
        /// The indices of the sources it follows (the station's hubs).
        let sources: [Int]
        private let sourceBits: UInt64

        init(id: String, topics: Set<Topic>, interval: TimeAmount, sources: [Int]) {
            self.id = id
            self.topics = topics
            self.topicBits = topics.reduce(0) { $0 | 1 << $1.slot }
            self.interval = interval
            self.sources = sources
            self.sourceBits = sources.reduce(0) { $0 | 1 << UInt64($1) }
        }

        func follows(_ topic: Topic) -> Bool { topicBits & 1 << topic.slot != 0 }

        func follows(_ publication: Publication) -> Bool {
            topicBits & 1 << publication.topic.slot != 0 && sourceBits & 1 << UInt64(publication.source) != 0
        }

        func follows(source: Int) -> Bool { sourceBits & 1 << UInt64(source) != 0 }

        /// Whether values of `publication`'s topic may be held back for the interval: not when
        /// it is no longer than the recorder's period, which already spaces them. Then every
        /// value goes out as published, however its timer jitters, in the write of its tick.
        func coalesces(_ publication: Publication) -> Bool {
            guard let period = publication.period else { return true }
            return interval > period
        }

        /// What counts as "an interval later", and when a held-back value goes out: 10 % less
        /// than the interval, so that with an interval a multiple of the recorder's period values
        /// are not held back a whole period for a few milliseconds of timer jitter.
        var minimumSpacing: TimeAmount { .nanoseconds(interval.nanoseconds * 9 / 10) }
        /// Nothing at or below these is sent again (the snapshot had it).
        var lastSeq = PerTopic<UInt64>()
        /// When what was sent last was published (or sent, if it was held back or the snapshot):
        /// measured on publication times, so a connection served late in a fan-out does not
        /// hold its next value back.
        var lastSent = PerTopic<NIODeadline>()
        var pending = PerTopic<Publication>()
        var flushScheduled = PerTopic<Bool>()
    }

    var eventLoop: any EventLoop { channel.channel.eventLoop }

    /// `writer`: the channel's `InlineRequestHandler`, through which the outbox writes.
    init(channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>, peer: PeerCredentials, context: ConnectionContext,
         writer: InlineRequestHandler? = nil) {
        self.channel = channel
        self.peer = peer
        self.context = context
        self.outbox = Outbox(channel: channel.channel, limit: context.outboundLimit + Outbox.nioBufferAllowance,
                             flusher: context.flusher(for: channel.channel.eventLoop),
                             writer: writer.map { NIOLoopBound($0, eventLoop: channel.channel.eventLoop) })
        var logger = context.logger
        logger[metadataKey: "client.uid"] = "\(peer.uid)"
        logger[metadataKey: "client.pid"] = "\(peer.pid)"
        self.logger = logger
        outbox.onCaughtUp { [weak self] in self?.sendHeld() }
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
        stopAnsweringInline()
        let tap = state.withLockedValue { state in
            state.closing = true
            state.subscriptions.removeAll()
            return state.tap.map { (id: $0.id, recorder: $0.recorder) }
        }
        for hub in context.hubs { hub.remove(self) }
        if let tap {
            _ = try? await context.blocking.run { tap.recorder.closeTap(id: tap.id) }
        }
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
        // From here on `InlineRequestHandler` answers what it can on the event loop, until
        // reading ends.
        inline.withLockedValue { $0.permissions = permissions }
        defer { stopAnsweringInline() }
        do {
            var lines = inbound.makeAsyncIterator()
            while let line = try await lines.next() {
                let keepOpen = await handle(line: line, permissions: permissions)
                forwardedLineAnswered()
                guard keepOpen else { return }
                if state.withLockedValue({ $0.tap != nil }) {
                    // A stream from here on: what the client writes is ignored; its end (or the
                    // connection's) ends the tap.
                    stopAnsweringInline()
                    while try await lines.next() != nil {}
                    return
                }
                // Backpressure: no next request while the client leaves its answers unread.
                await outbox.waitForRoom()
            }
        } catch is ByteToMessageDecoderError.PayloadTooLargeError {
            // NIO bounds what it buffers of an unfinished line. (A tap's stream gets no JSON.)
            if state.withLockedValue({ $0.tap == nil }) { refuseLongLine() }
        } catch {
            logger.debug("connection read failed", metadata: ["error": "\(error)"])
        }
    }

    /// Answers one line read through the inbound stream. False when the connection must close
    /// after what is due is written.
    private func handle(line: ByteBuffer, permissions: Set<Permission>) async -> Bool {
        let parsed = line.withUnsafeReadableBytes { RequestParser.parse(bytes: $0) }
        if case .unreadable = parsed, line.readableBytes > JSONRPC.maximumLineLength {
            refuseLongLine()
            return false
        }
        if Self.isInline(parsed, permissions: permissions) {
            answerInline(parsed, permissions: permissions)
            return true
        }
        switch parsed {
        case .blank, .unreadable:
            break  // inline: answered above
        case .single(let item):
            send(answer: await answer(item, permissions: permissions))
        case .batch(let items):
            var answers: [String] = []
            for item in items {
                if let answer = await answer(item, permissions: permissions) { answers.append(answer) }
            }
            send(answer: Self.batchAnswer(answers))
        }
        return true
    }

    /// Called by `InlineRequestHandler` on the event loop for each line, before the line goes
    /// to the inbound stream: answers it here and now (true) if nothing read earlier is still
    /// unanswered, the client reads its answers, and no handler the line names blocks.
    /// Otherwise (false) the line goes through the stream and is counted until answered there,
    /// so that no answer overtakes an earlier one.
    func answerInline(line: ByteBuffer) -> Bool {
        let permissions = inline.withLockedValue { $0.forwarded == 0 ? $0.permissions : nil }
        if let permissions, outbox.hasRoom {
            let parsed = line.withUnsafeReadableBytes { RequestParser.parse(bytes: $0) }
            let tooLong = if case .unreadable = parsed { line.readableBytes > JSONRPC.maximumLineLength } else { false }
            if !tooLong, Self.isInline(parsed, permissions: permissions) {
                answerInline(parsed, permissions: permissions, flushedByCaller: true)
                return true
            }
        }
        inline.withLockedValue { $0.forwarded += 1 }
        return false
    }

    /// No more inline answers (the input failed or ended): what follows, if anything, goes to
    /// the stream, which ends the connection.
    func stopAnsweringInline() {
        inline.withLockedValue { $0.permissions = nil }
    }

    /// The stream's line is answered and its answer queued: inline answers may follow it.
    /// Counted on the event loop (through its queue if the task ran elsewhere), which is
    /// where `answerInline(line:)` reads the count.
    private func forwardedLineAnswered() {
        if eventLoop.inEventLoop {
            inline.withLockedValue { $0.forwarded -= 1 }
        } else {
            eventLoop.execute { self.inline.withLockedValue { $0.forwarded -= 1 } }
        }
    }

    /// Whether every request in `line` is answered without blocking.
    private static func isInline(_ line: ParsedLine, permissions: Set<Permission>) -> Bool {
        func isInline(_ item: RequestItem) -> Bool {
            guard case .request(let request) = item, permissions.contains(request.method.permission) else { return true }
            return !MethodTable.handler(for: request.method).blocking
        }
        switch line {
        case .blank, .unreadable: return true
        case .single(let item): return isInline(item)
        case .batch(let items): return items.allSatisfy(isInline)
        }
    }

    /// Answers a line whose requests do not block (`isInline`), synchronously. With
    /// `flushedByCaller`, the caller flushes (`flushInlineAnswers`) before the loop's turn ends.
    private func answerInline(_ line: ParsedLine, permissions: Set<Permission>, flushedByCaller: Bool = false) {
        let answer: String?
        switch line {
        case .blank: return
        case .unreadable(let error): answer = Self.encode(ErrorResponse(id: nil, error: error))
        case .single(let item): answer = answerInline(item, permissions: permissions)
        case .batch(let items): answer = Self.batchAnswer(items.compactMap { answerInline($0, permissions: permissions) })
        }
        send(answer: answer, flushedByCaller: flushedByCaller)
    }

    /// On the event loop, at the end of a read: writes the answers `answerInline(line:)` gave.
    func flushInlineAnswers() {
        outbox.flush()
    }

    /// A batch of notifications gets nothing at all, not an empty array.
    private static func batchAnswer(_ answers: [String]) -> String? {
        answers.isEmpty ? nil : "[" + answers.joined(separator: ",") + "]"
    }

    private func refuseLongLine() {
        logger.warning("request line too long; closing")
        send(answer: Self.encode(ErrorResponse(id: nil, error: .invalidRequest(
            "request line exceeds \(JSONRPC.maximumLineLength) bytes; closing the connection"))))
    }

    private typealias Outcome = Result<any Encodable & Sendable, RPCError>

    /// How one request item is answered: now, or by a handler that blocks.
    private enum Dispatch {
        case answered(String?)
        case blocking(ParsedRequest, @Sendable () -> Outcome)
    }

    /// Runs one request through the dispatch table; returns its encoded answer, if it gets one.
    private func answer(_ item: RequestItem, permissions: Set<Permission>) async -> String? {
        switch dispatch(item, permissions: permissions) {
        case .answered(let answer):
            return answer
        case .blocking(let request, let run):
            let outcome: Outcome
            do {
                outcome = try await context.blocking.run(run)
            } catch {
                outcome = .failure(RPCError(code: RPCErrorCode.internalError, message: "recd is shutting down",
                                            data: .init(code: "internalError")))
            }
            return answer(request, outcome)
        }
    }

    /// The answer to an item `isInline` accepted.
    private func answerInline(_ item: RequestItem, permissions: Set<Permission>) -> String? {
        switch dispatch(item, permissions: permissions) {
        case .answered(let answer): answer
        case .blocking(let request, let run): answer(request, run())  // not reached: isInline checked
        }
    }

    private func dispatch(_ item: RequestItem, permissions: Set<Permission>) -> Dispatch {
        guard case .request(let request) = item else { return .answered(item.errorResponse.map(Self.encode)) }
        let name = request.method.rawValue
        if let refusal = MethodTable.refusal(of: request.method, permissions: permissions) {
            logger.notice("request refused", metadata: ["request.method": "\(name)",
                                                        "permission": "\(request.method.permission.rawValue)"])
            return .answered(answer(request, .failure(refusal)))
        }
        let handler = MethodTable.handler(for: request.method)
        logger.debug("request", metadata: ["request.method": "\(name)", "request.id": "\(request.id?.description ?? "-")"])
        let requestContext = RequestContext(station: context.station, version: context.version, subscriptions: self, taps: self,
                                            metrics: context.metrics)
        // The kept answer is for a request without params (a `source` is checked by `run`).
        if let encoded = handler.encoded, request.params == nil || request.params == .object([:]) {
            guard !request.isNotification else { return .answered(nil) }
            if let json = encoded(requestContext, context.results) { return .answered(ResponseLine.success(id: request.id, result: json)) }
        }
        let params = request.params
        let run: @Sendable () -> Outcome = { Result { () throws(RPCError) in try handler.run(requestContext, params) } }
        return handler.blocking ? .blocking(request, run) : .answered(answer(request, run()))
    }

    /// The encoded answer to `request`, if it gets one.
    private func answer(_ request: ParsedRequest, _ outcome: Outcome) -> String? {
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

    // MARK: Taps (called by the dispatch table)

    func openTap(_ params: TapParams, recorder: Recorder) throws(RPCError) -> TapResult {
        let refusal: RPCError? = state.withLockedValue { state in
            if state.tap != nil { return .invalidRequest("this connection is a tap already") }
            if !state.subscriptions.isEmpty {
                return .invalidRequest("a connection with subscriptions cannot become a tap; tap on a connection of its own")
            }
            return nil
        }
        if let refusal { throw refusal }
        // Nothing is answered inline from here on: the next bytes are the answer and the audio.
        stopAnsweringInline()
        // Until the answer is out the chunks wait, pre-roll and all: room for it (in the most
        // the format could take), up to 256 MiB.
        let preRollBytes = ((params.preRoll ?? 0) + 1) * Double(params.rate ?? 192_000) * Double((params.channels ?? 8) * 4)
        let holding = context.outboundLimit + Int(min(preRollBytes, 256 * 1_048_576))
        let stream = TapStream(outbox: outbox, allocator: channel.channel.allocator, holding: holding,
                               queue: context.outboundLimit) { [weak self] error in
            // The tap ended (recd stops, the device is gone): what is queued goes out, then the end.
            guard let self else { return }
            if let error { self.logger.info("tap ended", metadata: ["error.message": "\(error.message)"]) }
            self.channel.channel.close(mode: .input, promise: nil)
        }
        let opened: Recorder.OpenedTap
        do throws(RecorderError) {
            opened = try recorder.openTap(rate: params.rate, channels: params.channels, encoding: params.encoding ?? .s16le,
                                          preRoll: params.preRoll ?? 0, chunk: params.chunk, pid: peer.pid, client: params.client, sink: stream)
        } catch {
            throw MethodTable.rpcError(error)
        }
        state.withLockedValue { $0.tap = (opened.id, stream, recorder) }
        return TapResult(tap: opened.id, format: opened.format, preRoll: opened.preRollSeconds)
    }

    func updateTap(_ params: TapUpdateParams, recorder: Recorder) throws(RPCError) -> TapStatus {
        do throws(RecorderError) {
            return try recorder.updateTap(id: params.tap, pid: peer.pid, listeners: params.listeners)
        } catch {
            throw MethodTable.rpcError(error)
        }
    }

    // MARK: Subscriptions (called by the dispatch table)

    func subscribe(_ request: SubscribeParams, sources: [Int]) throws(RPCError) -> SubscribeResult {
        if state.withLockedValue({ $0.tap != nil }) {
            throw .invalidRequest("this connection is a tap: subscribe on a connection of its own")
        }
        let topics = Set(request.topics ?? Topic.byDefault)
        guard !topics.isEmpty else { throw .invalidParams("'topics' must name at least one topic") }
        let interval = request.interval ?? SubscribeParams.defaultInterval
        if let refusal = Limits.refusal("interval", interval, Limits.subscriptionInterval, "seconds") {
            throw .invalidParams(refusal)
        }
        let id = String(Self.subscriptionCounter.add(1, ordering: .relaxed).newValue)
        let snapshot = state.withLockedValue { state -> [Publication] in
            let subscription = Subscription(id: id, topics: topics, interval: .interval(seconds: interval), sources: sources)
            var snapshot: [Publication] = []
            for source in sources {
                let following = state.subscriptions.values.filter { $0.follows(source: source) }
                let allTopics = following.reduce(topics) { $0.union($1.topics) }
                // Registered and snapshotted at once; changes after it wait for this answer.
                snapshot += context.hubs[source].add(self, topics: allTopics, levelsEvery: Self.levelsInterval(following, subscription))
                    .filter { topics.contains($0.update.topic) }
            }
            let now = NIODeadline.now()
            for publication in snapshot {
                subscription.lastSeq[publication.key] = publication.seq
                subscription.lastSent[publication.key] = now
            }
            state.subscriptions[id] = subscription
            if state.heldBack == nil { state.heldBack = [] }
            return snapshot
        }
        logger.debug("subscribed", metadata: ["subscription.id": "\(id)", "subscription.topics": "\(topics.sorted())"])
        return SubscribeResult(subscription: id, topics: topics.sorted(), interval: interval, snapshot: snapshot.map(\.update))
    }

    func unsubscribe(_ request: UnsubscribeParams) throws(RPCError) -> UnsubscribeResult {
        let remaining = state.withLockedValue { state -> [(source: Int, topics: Set<Topic>, levelsEvery: Double?)]? in
            guard let removed = state.subscriptions.removeValue(forKey: request.subscription) else { return nil }
            state.heldBack?.removeAll { $0.subscription == request.subscription }
            return removed.sources.map { source in
                let following = state.subscriptions.values.filter { $0.follows(source: source) }
                return (source, following.reduce([]) { $0.union($1.topics) }, Self.levelsInterval(following))
            }
        }
        guard let remaining else {
            throw .invalidParams("no subscription '\(request.subscription)' on this connection")
        }
        for (source, topics, levelsEvery) in remaining {
            context.hubs[source].update(self, topics: topics, levelsEvery: levelsEvery)
        }
        return UnsubscribeResult(subscription: request.subscription)
    }

    /// How often this connection's subscriptions want `levels`: the shortest interval of
    /// those that follow it (seconds; nil: none does). The recorder publishes them as often
    /// as its most demanding subscriber asks (doc/protocol.md).
    private static func levelsInterval(_ subscriptions: some Sequence<Subscription>, _ added: Subscription? = nil) -> Double? {
        let intervals = (Array(subscriptions) + (added.map { [$0] } ?? [])).filter { $0.follows(.levels) }.map(\.interval.nanoseconds)
        return intervals.min().map { Double($0) / 1e9 }
    }

    /// Called by the hub on the connection's event loop.
    func receive(_ publication: Publication) {
        state.withLockedValue { state in deliver(publication, state: &state) }
    }

    private func deliver(_ publication: Publication, state: inout State) {
        guard !state.closing else { return }
        let topic = publication.topic
        let key = publication.key
        for subscription in state.subscriptions.values {
            guard subscription.follows(publication), publication.seq > subscription.lastSeq[key] ?? 0 else { continue }
            let now = publication.published
            if topic.isContinuous, isBehind(adding: publication, for: subscription) {
                // Latest only: the next value of the topic replaces this one, or goes out in
                // its place once the client has caught up.
                subscription.pending[key] = publication
                continue
            }
            if topic.isContinuous, subscription.coalesces(publication), let last = subscription.lastSent[key],
               now < last + subscription.minimumSpacing {
                // Too soon: keep the latest and send it when the interval has passed.
                subscription.pending[key] = publication
                if subscription.flushScheduled[key] != true {
                    subscription.flushScheduled[key] = true
                    let due = last + subscription.minimumSpacing
                    let id = subscription.id
                    channel.channel.eventLoop.scheduleTask(deadline: due) {
                        self.state.withLockedValue { state in self.flush(key, of: id, due: due, state: &state) }
                    }
                }
                continue
            }
            if !topic.isContinuous {
                // Time and levels held back for the interval go first: a client sees the final
                // currentTime before the state that ends the recording.
                for pending in subscription.pending.values where pending.seq > subscription.lastSeq[pending.key] ?? 0 {
                    send(pending, on: subscription, at: now, state: &state)
                }
                subscription.pending = PerTopic()
            }
            send(publication, on: subscription, at: now, state: &state)
        }
    }

    /// Sends the value held back for `key`, due at `due`: the next interval is counted from
    /// then, not from when the loop got to it, so a busy loop does not push every later value back.
    private func flush(_ key: TopicKey, of id: String, due: NIODeadline, state: inout State) {
        guard !state.closing, let subscription = state.subscriptions[id] else { return }
        subscription.flushScheduled[key] = nil
        let held = subscription.pending[key]
        subscription.pending[key] = nil
        if let held, held.seq > subscription.lastSeq[key] ?? 0 {
            if isBehind(adding: held, for: subscription) {
                subscription.pending[key] = held
            } else {
                send(held, on: subscription, at: due, state: &state)
            }
        }
    }

    /// Whether the client has more than `behindBytes` unwritten, so that a continuous value
    /// (time, levels, spectrum) for it is held, latest only, instead of queued: a client that
    /// stops reading (a paused pager, a stuck status bar) then makes recd hold that much and
    /// one value per topic, not `server.client_queue_bytes` of stale levels, and it is not
    /// disconnected for them. Not past the limit itself: a queue that answers filled beyond it
    /// still closes the connection at the next notification, as any other.
    /// A value held so is sent by `sendHeld()` once the client has caught up (`Outbox`
    /// calls it when what waits has drained to `behindBytes`): the last one before the
    /// values stop (a recording's final time, the levels as the device closes) is not lost.
    private func isBehind(adding publication: Publication, for subscription: Subscription) -> Bool {
        outbox.holdsBack(adding: publication.notificationLength(for: subscription.id), beyond: behindBytes)
    }

    /// On the event loop, once the client has caught up: the continuous values held back for
    /// it (not those the interval holds: their flush is scheduled), newest of each topic.
    private func sendHeld() {
        state.withLockedValue { state in
            guard !state.closing else { return }
            let now = NIODeadline.now()
            for subscription in state.subscriptions.values {
                for held in subscription.pending.values where subscription.flushScheduled[held.key] != true {
                    guard held.seq > subscription.lastSeq[held.key] ?? 0 else {
                        subscription.pending[held.key] = nil
                        continue
                    }
                    // Behind again: held on, and sent at the next catch-up.
                    if isBehind(adding: held, for: subscription) { continue }
                    subscription.pending[held.key] = nil
                    send(held, on: subscription, at: now, state: &state)
                }
            }
        }
    }

    /// Unwritten bytes beyond which a client is behind (`isBehind`): 64 KiB, or half the
    /// configured queue if that is smaller.
    private var behindBytes: Int { Swift.min(64 * 1024, context.outboundLimit / 2) }

    private func send(_ publication: Publication, on subscription: Subscription, at now: NIODeadline,
                      state: inout State) {
        subscription.lastSeq[publication.key] = publication.seq
        subscription.lastSent[publication.key] = now
        if state.heldBack != nil {
            state.heldBack!.append((subscription.id, publication.notification(for: subscription.id)))
        } else {
            enqueue(count: publication.notificationLength(for: subscription.id), state: &state) {
                publication.writeNotification(for: subscription.id, into: &$0)
            }
        }
    }

    // MARK: Writing

    /// Queues an answer (if any), then the notifications that waited for it. An answer is
    /// always queued, however large: reading stops until the client takes it (`waitForRoom`).
    /// With `flushedByCaller`, the caller flushes the outbox before the loop's turn ends.
    private func send(answer: String?, flushedByCaller: Bool = false) {
        state.withLockedValue { state in
            if let answer, !state.closing {
                _ = outbox.send(count: answer.utf8.count + 1, limited: false, flushedByCaller: flushedByCaller) {
                    $0.writeString(answer)
                    $0.writeInteger(UInt8(ascii: "\n"))
                }
            }
            for (_, line) in state.heldBack ?? [] {
                enqueue(count: line.readableBytes, state: &state) { $0.writeImmutableBuffer(line) }
            }
            state.heldBack = nil
            state.tap?.stream.answered()
        }
    }

    /// Queues a notification of `count` bytes, unless the client has left too much unread.
    private func enqueue(count: Int, state: inout State, write: (inout ByteBuffer) -> Void) {
        guard !state.closing else { return }
        if !outbox.send(count: count, limited: true, write: write) {
            // Not reading: it may not hold memory or anyone's time. No message: it would not read it.
            logger.warning("client not reading; disconnecting", metadata: ["client.queuedBytes": "\(outbox.queuedBytes)"])
            state.closing = true
            close()
        }
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
/// Lines are appended to one pending buffer, in the order they are sent, and handed to the
/// channel in one write and flush: by the loop's `LoopFlusher` after the task that sent them
/// (what one tick publishes, an answer with the notifications that waited for it), or by the
/// caller at the end of a read (`flush()`, inline answers). One write, one promise and one
/// system call per client per turn of the loop; NIO keeps what the socket does not take yet,
/// and this counts it.
final class Outbox: Sendable {
    /// What NIO may hold for a client before `server.client_queue_bytes` starts to count
    /// (doc/protocol.md: "beyond its socket buffer and NIO's 32 KiB").
    static let nioBufferAllowance = 32 * 1024

    private let channel: any Channel
    /// Bytes that may wait unwritten: `server.client_queue_bytes` and NIO's allowance.
    let limit: Int
    private let flusher: LoopFlusher
    /// Writes from its place in the pipeline, next to the head: a write from the channel would
    /// pass NIOAsyncChannel's handler too, for nothing (its writer is not used).
    private let writer: NIOLoopBound<InlineRequestHandler>?
    private let state = NIOLockedValueBox(State())

    private struct State {
        /// Sent and not yet written to the socket: in `pending`, or in the channel.
        var bytes = 0
        /// Sent, not yet handed to the channel.
        var pending: ByteBuffer?
        /// Whether the loop's flusher will flush `pending`.
        var flushScheduled = false
        /// A write handed to the channel has not completed: what is sent meanwhile grows
        /// `pending`, one buffer, instead of becoming a write of its own. A client that stops
        /// reading then holds one large buffer (mapped on its own and returned whole when it
        /// goes), not a thousand 1 KiB blocks scattered through the shared heap.
        var writeInFlight = false
        var finished = false
        /// The channel has closed: nothing queued will be written, and nobody waits for it.
        var closed = false
        /// Uptime (ns) of the last write the socket took, or of the first byte queued since.
        var lastProgress: UInt64 = 0
        var roomWaiters: [CheckedContinuation<Void, Never>] = []
        var writtenWaiters: [CheckedContinuation<Void, Never>] = []
        /// A value was held back while more than this waited (`holdsBack`): `caughtUp` runs
        /// once no more does.
        var holdingBeyond: Int?
        var caughtUp: (@Sendable () -> Void)?
    }

    init(channel: any Channel, limit: Int, flusher: LoopFlusher, writer: NIOLoopBound<InlineRequestHandler>? = nil) {
        self.channel = channel
        self.limit = limit
        self.flusher = flusher
        self.writer = writer
        // A write that never completes (the channel closed with bytes still pending) must not
        // keep a waiter, and with it the connection and the server's shutdown, forever.
        channel.closeFuture.whenComplete { [self] _ in channelClosed() }
    }

    private func channelClosed() {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.closed = true
            defer { state.roomWaiters = []; state.writtenWaiters = [] }
            return state.roomWaiters + state.writtenWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    var queuedBytes: Int { state.withLockedValue { $0.bytes } }

    /// Whether a notification of `count` bytes is to be held back: more than `threshold`
    /// waits, but not so much that `count` more would pass the limit (then it is sent, and
    /// refused, as any other). If so, the `onCaughtUp` body runs once no more than
    /// `threshold` waits.
    func holdsBack(adding count: Int, beyond threshold: Int) -> Bool {
        state.withLockedValue { state in
            guard state.bytes > threshold, state.bytes + count <= limit else { return false }
            state.holdingBeyond = threshold
            return true
        }
    }

    /// What runs (on the event loop) when a client that had values held back has caught up.
    func onCaughtUp(_ body: @escaping @Sendable () -> Void) {
        state.withLockedValue { $0.caughtUp = body }
    }

    /// Queues `line`. With `limited`, refuses (false) if that would leave more than the limit
    /// unwritten: a notification for a client that does not read. With `flushedByCaller`, the
    /// caller calls `flush()` on the event loop before its turn ends.
    @discardableResult
    func send(_ line: ByteBuffer, limited: Bool, flushedByCaller: Bool = false) -> Bool {
        send(count: line.readableBytes, limited: limited, flushedByCaller: flushedByCaller) { $0.writeImmutableBuffer(line) }
    }

    /// Queues the `count` bytes `write` appends (a notification written straight into the
    /// pending buffer, without a line of its own). As `send(_:limited:flushedByCaller:)`.
    func send(count: Int, limited: Bool, flushedByCaller: Bool = false, write: (inout ByteBuffer) -> Void) -> Bool {
        enum Action { case refuse, drop, queued, schedule }
        let action = state.withLockedValue { state -> Action in
            guard !limited || state.bytes + count <= limit else { return .refuse }
            // After `finish` (the connection is closing): dropped, as an answer to nobody.
            guard !state.finished else { return .drop }
            if state.bytes == 0 { state.lastProgress = DispatchTime.now().uptimeNanoseconds }
            state.bytes += count
            if state.pending == nil {
                // Room for what a tick publishes (time and levels) without growing.
                state.pending = channel.allocator.buffer(capacity: max(count, 1024))
            }
            write(&state.pending!)
            guard !flushedByCaller, !state.flushScheduled else { return .queued }
            state.flushScheduled = true
            return .schedule
        }
        switch action {
        case .refuse: return false
        case .drop, .queued: return true
        case .schedule where channel.eventLoop.inEventLoop: flusher.add(self)
        case .schedule: channel.eventLoop.execute { self.flusher.add(self) }
        }
        return true
    }

    /// On the event loop: hands what is pending to the channel, in one write, and flushes.
    func flush() {
        let pending = state.withLockedValue { state -> ByteBuffer? in
            state.flushScheduled = false
            guard !state.writeInFlight, let pending = state.pending else { return nil }
            state.pending = nil
            state.writeInFlight = true
            return pending
        }
        guard let pending else { return }
        let count = pending.readableBytes
        let promise = channel.eventLoop.makePromise(of: Void.self)
        promise.futureResult.whenComplete { result in self.written(count, failed: (try? result.get()) == nil) }
        if let writer {
            writer.value.writeAndFlush(pending, promise: promise)
        } else {
            channel.writeAndFlush(pending, promise: promise)
        }
    }

    /// The socket took `count` bytes (or the channel failed and never will).
    private func written(_ count: Int, failed: Bool) {
        if failed { channel.close(promise: nil) }  // the socket failed: stop reading too
        let (waiters, more, caughtUp) = state.withLockedValue { state -> ([CheckedContinuation<Void, Never>], Bool, (@Sendable () -> Void)?) in
            state.bytes -= count
            state.writeInFlight = false
            state.lastProgress = DispatchTime.now().uptimeNanoseconds
            var waiters: [CheckedContinuation<Void, Never>] = []
            if state.bytes <= limit { swap(&waiters, &state.roomWaiters) }
            if state.bytes == 0 { waiters += state.writtenWaiters; state.writtenWaiters = [] }
            var caughtUp: (@Sendable () -> Void)?
            if !failed, let threshold = state.holdingBeyond, state.bytes <= threshold {
                state.holdingBeyond = nil
                caughtUp = state.caughtUp
            }
            // What was sent while the write was under way goes now, unless the flusher has it.
            return (waiters, !failed && state.pending != nil && !state.flushScheduled, caughtUp)
        }
        for waiter in waiters { waiter.resume() }
        // On the event loop (a write's promise completes there). The values held back are
        // queued as any notification (the loop's flusher writes them).
        caughtUp?()
        if more { flush() }
    }

    /// Whether no more than the limit waits: the client reads its answers.
    var hasRoom: Bool { state.withLockedValue { $0.bytes <= limit } }

    /// Returns once no more than the limit waits (at once if not more does).
    func waitForRoom() async {
        await wait(in: \.roomWaiters) { $0.bytes > limit }
    }

    /// Nothing more will be queued (what is sent later is dropped). What was queued for the
    /// caller to flush (an inline answer whose read never completed: the client left, or its
    /// handler went with the pipeline) is flushed now, so that `waitUntilWritten` ends.
    func finish() {
        let flushNow = state.withLockedValue { state -> Bool in
            state.finished = true
            guard state.pending != nil, !state.flushScheduled else { return false }
            state.flushScheduled = true
            return true
        }
        if flushNow { channel.eventLoop.execute { self.flush() } }
    }

    /// Returns once everything queued is written, or the channel failed.
    func waitUntilWritten() async {
        await wait(in: \.writtenWaiters) { $0.bytes > 0 }
    }

    private func wait(in waiters: WritableKeyPath<State, [CheckedContinuation<Void, Never>]>,
                      while condition: (State) -> Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let wait = state.withLockedValue { state in
                guard !state.closed, condition(state) else { return false }
                state[keyPath: waiters].append(continuation)
                return true
            }
            if !wait { continuation.resume() }
        }
    }

    /// Whether something waits unwritten and the socket has taken nothing for `seconds`.
    func isStalled(for seconds: Double) -> Bool {
        state.withLockedValue { state in
            !state.closed && state.bytes > 0 && DispatchTime.now().uptimeNanoseconds &- state.lastProgress > UInt64(seconds * 1e9)
        }
    }
}

/// Answers the lines a connection can answer without blocking (`status`, `version`,
/// `subscribe`, ...) as they are decoded, on the event loop in the same turn as the read:
/// no hop to the connection's task, no other thread woken. Every other line, and every line
/// behind one still unanswered, goes on to the connection's inbound stream.
final class InlineRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// Set once the connection exists (in the channel initializer, before any read); dropped
    /// with the pipeline, which would otherwise keep the connection alive.
    var connection: ClientConnection?
    private var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    /// The connection's outbox writes here (on the event loop).
    func writeAndFlush(_ buffer: ByteBuffer, promise: EventLoopPromise<Void>) {
        guard let context else {
            promise.fail(ChannelError.ioOnClosedChannel)
            return
        }
        context.writeAndFlush(NIOAny(buffer), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let line = unwrapInboundIn(data)
        if let connection, connection.answerInline(line: line) {
            answeredThisRead = true
            return
        }
        context.fireChannelRead(data)
    }

    /// Whether `channelRead` answered a line since the last `channelReadComplete`.
    private var answeredThisRead = false

    func channelReadComplete(context: ChannelHandlerContext) {
        // One write for every answer this read gave; none when it gave none. A write here that
        // fails (the peer reset the connection: a tap's reader that leaves with audio unread)
        // makes NIO close the channel in the middle of handling that end of input, which trips
        // its own assertion; a read that answered nothing has nothing to write anyway.
        if answeredThisRead {
            answeredThisRead = false
            connection?.flushInlineAnswers()
        }
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A line too long or a failed read ends the connection through its stream.
        connection?.stopAnsweringInline()
        context.fireErrorCaught(error)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        connection = nil
        self.context = nil
    }
}

/// Flushes, once per turn of one event loop, every outbox that was sent something in it: one
/// task for all of them instead of one per client (a tick's fan-out reaches hundreds).
/// @unchecked Sendable: `outboxes` is only touched on `eventLoop`.
final class LoopFlusher: @unchecked Sendable {
    let eventLoop: any EventLoop
    private var outboxes: [Outbox] = []

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// On the event loop: `outbox` is flushed after the task running now (and those queued
    /// before the first outbox of this round was added).
    func add(_ outbox: Outbox) {
        eventLoop.preconditionInEventLoop()
        outboxes.append(outbox)
        if outboxes.count == 1 { eventLoop.execute { self.flushAll() } }
    }

    private func flushAll() {
        var due: [Outbox] = []
        swap(&due, &outboxes)
        for outbox in due { outbox.flush() }
    }
}

/// A source's topic: what a subscription keeps its sequence numbers, timing and held-back
/// values by (each source numbers its topics' publications apart).
struct TopicKey: Equatable {
    var source: Int
    var topic: Topic

    /// Its position in a `PerTopic`: every topic of source 0, then of source 1, …
    var slot: Int { source * Topic.allCases.count + topic.slot }
}

/// A value for each source's topic, found by position rather than by hashing: a subscription
/// looks several up for every notification.
struct PerTopic<Value> {
    private var slots: [Value?] = []

    subscript(key: TopicKey) -> Value? {
        get { key.slot < slots.count ? slots[key.slot] : nil }
        set {
            if key.slot >= slots.count {
                guard newValue != nil else { return }
                slots.append(contentsOf: repeatElement(nil, count: key.slot + 1 - slots.count))
            }
            slots[key.slot] = newValue
        }
    }

    /// The values set, in source and topic order.
    var values: [Value] { slots.compactMap { $0 } }
}

extension Topic {
    /// The topic's position in `allCases` (and so in its order).
    var slot: Int {
        switch self {
        case .state: 0
        case .currentTime: 1
        case .error: 2
        case .levels: 3
        case .recording: 4
        case .segment: 5
        case .warning: 6
        case .retention: 7
        case .listening: 8
        case .trigger: 9
        case .redated: 10
        case .spectrum: 11
        }
    }
}
