import Dispatch
import FoundationEssentials
import NIOConcurrencyHelpers
import NIOCore
import RecdProtocol
import RecorderCore

/// A recorder publication, numbered and stamped, with its JSON encoded once for every client.
/// A class: handed to every subscriber, it costs one retain, not one per member.
final class Publication: Sendable {
    let update: TopicUpdate
    /// When the hub published it (monotonic): what a subscription's interval is measured on.
    let published: NIODeadline
    /// A `changed` notification's line after the subscription id: `",` + `"seq":…,"timestamp":…,
    /// "topic":…,"value":…` + `}}\n`. Every subscription's line is `notificationHead`, its id, this.
    let notificationTail: ByteBuffer

    static let notificationHead: StaticString = #"{"jsonrpc":"2.0","method":"changed","params":{"subscription":""#

    /// `update`'s, stored: read for every subscription it reaches.
    let topic: Topic
    let seq: UInt64
    /// The index of its source in the station (its hub's).
    let source: Int
    var key: TopicKey { TopicKey(source: source, topic: topic) }
    /// For `currentTime` and `levels`: how often the recorder publishes the topic. A
    /// subscription with an interval no longer than this gets every value (see `ClientConnection`).
    let period: TimeAmount?

    init(update: TopicUpdate, source: Int, published: NIODeadline, period: TimeAmount? = nil, notificationTail: ByteBuffer) {
        self.update = update
        self.source = source
        self.topic = update.topic
        self.seq = update.seq
        self.published = published
        self.period = period
        self.notificationTail = notificationTail
    }

    /// The notification line for one subscription (ids are the server's decimal counter: no escaping).
    func notification(for subscription: String) -> ByteBuffer {
        var line = ByteBuffer()
        line.reserveCapacity(notificationLength(for: subscription))
        writeNotification(for: subscription, into: &line)
        return line
    }

    func notificationLength(for subscription: String) -> Int {
        Self.notificationHead.utf8CodeUnitCount + subscription.utf8.count + notificationTail.readableBytes
    }

    func writeNotification(for subscription: String, into buffer: inout ByteBuffer) {
        buffer.writeStaticString(Self.notificationHead)
        buffer.writeString(subscription)
        buffer.writeImmutableBuffer(notificationTail)
    }
}

/// Something that receives publications (a client connection), on its event loop.
protocol PublicationReceiver: AnyObject, Sendable {
    var eventLoop: any EventLoop { get }
    func receive(_ publication: Publication)
}

/// Fans a source's recorder's observed values out to every connection subscribed to them
/// (one hub per source; on a station of several, each notification names its `source`).
///
/// The hub observes the recorder once per topic, numbers each change (`seq`), encodes it once,
/// and hands it to every receiver subscribed to the topic: one task per event loop carrying
/// that loop's receivers and every publication made meanwhile, so a tick (time and levels)
/// costs each loop one wake-up and each client one write. Receivers do
/// their own throttling and queueing; nothing here waits for a client.
final class TopicHub: Sendable {
    private struct State {
        var latest: [Topic: Publication] = [:]
        /// A continuous topic's latest value while nobody receives it: encoded only when a
        /// client subscribes (its snapshot), not at every tick.
        var unencoded: [Topic: (update: TopicUpdate, published: NIODeadline, period: TimeAmount?)] = [:]
        var seq: [Topic: UInt64] = [:]
        /// `levelsEvery`: how often the receiver wants `levels` (seconds), when it follows them.
        var receivers: [ObjectIdentifier: (receiver: any PublicationReceiver, topics: Set<Topic>, levelsEvery: Double?)] = [:] {
            didSet { routes = [:] }
        }
        /// Each topic's receivers, by event loop: built on the first publication after
        /// `receivers` changes, not on every one.
        var routes: [Topic: [Batch]] = [:]

        mutating func route(_ topic: Topic) -> [Batch] {
            if let batches = routes[topic] { return batches }
            var batches: [ObjectIdentifier: Batch] = [:]
            for (receiver, topics, _) in receivers.values where topics.contains(topic) {
                batches[ObjectIdentifier(receiver.eventLoop), default: Batch(loop: receiver.eventLoop)].receivers.append(receiver)
            }
            routes[topic] = Array(batches.values)
            return routes[topic]!
        }
    }

    private let state = NIOLockedValueBox(State())
    /// Published, not yet handed to the event loops (see `deliver`).
    private let undelivered = NIOLockedValueBox<[(Publication, [Batch])]>([])
    /// Publications to notifications. Never blocks, so it runs on the global pool (a worker per
    /// core), not on the overcommit pool: that one starts a worker whenever work arrives
    /// while its workers are busy or not yet awake, and keeps them all while ticks arrive
    /// (issue 49: one more, now and then, at a segment's end; doc/architecture.md, "Why the
    /// overcommit pool grows").
    private let queue = DispatchQueue(label: "recd.hub", target: .global())
    private let tokens: NIOLockedValueBox<[ObservationToken]> = NIOLockedValueBox([])
    private let recorder: Recorder
    /// The source's index in the station, and its name in notifications (nil on a station of one).
    private let source: Int
    private let name: String?

    init(recorder: Recorder, source: Int = 0, name: String? = nil) {
        self.recorder = recorder
        self.source = source
        self.name = name
        // Discrete topics: every change, in order. Continuous ones: the latest when we lag.
        let observations: [ObservationToken] = [
            recorder.state.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.state($0)) },
            recorder.error.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.error($0)) },
            recorder.recording.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.recording($0)) },
            recorder.closedSegment.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.segment($0)) },
            recorder.warning.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.warning($0)) },
            recorder.retentionDeletion.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.retention($0)) },
            recorder.triggerEvent.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.trigger($0)) },
            recorder.redatedFile.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.redated($0)) },
            recorder.listening.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.listening($0)) },
            recorder.currentTime.subscribe(on: queue) { [weak self] in self?.publish(.currentTime($0)) },
            recorder.levels.subscribe(on: queue) { [weak self] in self?.publish(.levels($0)) },
            // Every column: each is a different slice of time, not a newer value of the same thing.
            recorder.spectrum.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.spectrum($0)) },
        ]
        tokens.withLockedValue { $0 = observations }
        // Each subscription delivers its current value first: the server awaits them
        // (`drain`) before it accepts a client, so that every topic has a snapshot.
    }

    /// Waits until every publication already observed has been received by every receiver.
    func drain() async {
        // Twice: a publication observed before the first may queue its delivery behind it.
        // Awaited, not `sync`: no thread of the cooperative pool waits on the queue.
        for _ in 0..<2 {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                queue.async { continuation.resume() }
            }
        }
        let loops = state.withLockedValue { state in
            Dictionary(state.receivers.values.map { (ObjectIdentifier($0.receiver.eventLoop), $0.receiver.eventLoop) },
                       uniquingKeysWith: { first, _ in first }).values
        }
        for loop in loops { try? await loop.submit {}.get() }
    }

    private func publish(_ value: TopicValue) {
        let timestamp = Date().timeIntervalSince1970
        let published = NIODeadline.now()
        let period: TimeAmount? = switch value.topic {
        case .currentTime: .interval(seconds: recorder.publishingPeriods.currentTime)
        case .levels: .interval(seconds: recorder.publishingPeriods.levels)
        case .spectrum: .interval(seconds: Spectrum.columnPeriod)
        default: nil
        }
        let routed = state.withLockedValue { state -> (Publication, [Batch])? in
            let seq = (state.seq[value.topic] ?? 0) + 1
            state.seq[value.topic] = seq
            let update = TopicUpdate(value: value, seq: seq, timestamp: timestamp, source: name)
            let batches = state.route(value.topic)
            if period != nil, batches.isEmpty {
                state.unencoded[value.topic] = (update, published, period)
                state.latest[value.topic] = nil
                return nil
            }
            state.unencoded[value.topic] = nil
            let publication = Publication(update: update, source: source, published: published, period: period,
                                          notificationTail: Self.notificationTail(of: update))
            state.latest[value.topic] = publication
            return (publication, batches)
        }
        guard let (publication, batches) = routed else { return }
        // Handed on by a task queued behind this one: what the recorder sent together (time
        // and levels, each tick) reaches each event loop in one task, so that each client
        // gets it in one write.
        let first = undelivered.withLockedValue { undelivered in
            undelivered.append((publication, batches))
            return undelivered.count == 1
        }
        if first { queue.async { self.deliver() } }
    }

    /// On `queue`: one task per event loop for every publication not yet handed on.
    private func deliver() {
        let publications = undelivered.withLockedValue { undelivered in
            defer { undelivered.removeAll() }
            return undelivered
        }
        var byLoop: [ObjectIdentifier: (loop: any EventLoop, deliveries: [(Publication, [any PublicationReceiver])])] = [:]
        for (publication, batches) in publications {
            for batch in batches {
                byLoop[ObjectIdentifier(batch.loop), default: (batch.loop, [])].deliveries.append((publication, batch.receivers))
            }
        }
        for (loop, deliveries) in byLoop.values {
            loop.execute {
                for (publication, receivers) in deliveries {
                    for receiver in receivers { receiver.receive(publication) }
                }
            }
        }
    }

    private struct Batch {
        let loop: any EventLoop
        var receivers: [any PublicationReceiver] = []
    }

    /// Registers `receiver` for `topics` and returns their current values. No publication can
    /// fall between the snapshot and the registration.
    func add(_ receiver: any PublicationReceiver, topics: Set<Topic>, levelsEvery: Double? = nil) -> [Publication] {
        defer { updateDemand() }
        return state.withLockedValue { state in
            let id = ObjectIdentifier(receiver)
            let all = (state.receivers[id]?.topics ?? []).union(topics)
            // `levelsEvery` covers all of the receiver's subscriptions (nil: as often as configured).
            state.receivers[id] = (receiver, all, Self.levelsDemand(all, levelsEvery))
            return topics.sorted().compactMap { topic in
                if let (update, published, period) = state.unencoded.removeValue(forKey: topic) {
                    state.latest[topic] = Publication(update: update, source: source, published: published, period: period,
                                                      notificationTail: Self.notificationTail(of: update))
                }
                return state.latest[topic]
            }
        }
    }

    /// Sets the topics `receiver` gets (removing it when empty).
    func update(_ receiver: any PublicationReceiver, topics: Set<Topic>, levelsEvery: Double? = nil) {
        state.withLockedValue { state in
            let id = ObjectIdentifier(receiver)
            if topics.isEmpty { state.receivers[id] = nil } else { state.receivers[id] = (receiver, topics, Self.levelsDemand(topics, levelsEvery)) }
        }
        updateDemand()
    }

    func remove(_ receiver: any PublicationReceiver) {
        _ = state.withLockedValue { $0.receivers.removeValue(forKey: ObjectIdentifier(receiver)) }
        updateDemand()
    }

    /// Tells the recorder whether a client of the socket wants `levels` (and how often: the
    /// shortest interval asked), `spectrum` and `currentTime`: it computes and publishes them
    /// only while someone does (the time once a second otherwise), levels no more often than
    /// someone asks.
    ///
    /// Told under the hub's lock: two connections changing at once (one subscribing, one
    /// leaving) must not tell it in the opposite order of what they saw. The recorder's side
    /// only records it and posts the change to its queue.
    private func updateDemand() {
        state.withLockedValue { state in
            let levels = state.receivers.values.compactMap { $0.topics.contains(.levels) ? $0.levelsEvery ?? 0 : nil }
            recorder.setLevelsWanted(!levels.isEmpty, by: "socket", every: levels.min() ?? 0)
            recorder.setSpectrumWanted(state.receivers.values.contains { $0.topics.contains(.spectrum) }, by: "socket")
            recorder.setTimeWanted(state.receivers.values.contains { $0.topics.contains(.currentTime) }, by: "socket")
        }
    }

    /// How often a receiver of `topics` wants levels: `levelsEvery`, 0 (as often as
    /// configured) when it did not say, nil when it does not follow them.
    private static func levelsDemand(_ topics: Set<Topic>, _ levelsEvery: Double?) -> Double? {
        topics.contains(.levels) ? levelsEvery ?? 0 : nil
    }

    var receiverCount: Int { state.withLockedValue { $0.receivers.count } }

    private static let encoder = WireCoding.encoder()

    private static func notificationTail(of update: TopicUpdate) -> ByteBuffer {
        // sortedKeys: {"seq":…,"timestamp":…,"topic":…,"value":…}; its members follow the id.
        // A spectrum column, 20 a second to every viewer, is written by hand, envelope and
        // all (`Spectrum.wireJSON`; SpectrumWireTests decodes it as the encoder's).
        if case .spectrum(let column?) = update.value {
            let column = column.wireJSON
            var tail = ByteBuffer()
            tail.reserveCapacity(column.count + 100)
            // A source's name is plain (a-z, 0-9, _ and -): no escaping.
            let source = update.source.map { ",\"source\":\"\($0)\"" } ?? ""
            tail.writeString("\",\"seq\":\(update.seq)\(source),\"timestamp\":\(update.timestamp),\"topic\":\"spectrum\",\"value\":")
            tail.writeBytes(column)
            tail.writeStaticString("}}\n")
            return tail
        }
        let json = (try? encoder.encode(update)) ?? Data("{}".utf8)
        var tail = ByteBuffer()
        tail.reserveCapacity(json.count + 4)
        tail.writeStaticString("\",")
        tail.writeBytes(json.dropFirst().dropLast())
        tail.writeStaticString("}}\n")
        return tail
    }
}

extension TimeAmount {
    /// A number of seconds from the configuration or the wire, converted the same way
    /// everywhere, so that equal numbers give equal amounts (a subscription's interval is
    /// compared with the recorder's period).
    static func interval(seconds: Double) -> TimeAmount { .nanoseconds(Int64(seconds * 1e9)) }
}
