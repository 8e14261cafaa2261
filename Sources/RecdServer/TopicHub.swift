import Dispatch
import FoundationEssentials
import NIOConcurrencyHelpers
import RecdProtocol
import RecorderCore
import Synchronization

/// A recorder publication, numbered and stamped, with its JSON encoded once for every client.
struct Publication: Sendable {
    let update: TopicUpdate
    /// `"seq":…,"timestamp":…,"topic":…,"value":…` — the members of a `changed` notification's
    /// params after `subscription`, without braces.
    let members: String
}

/// Something that receives publications (a client connection).
protocol PublicationReceiver: AnyObject, Sendable {
    func receive(_ publication: Publication)
}

/// Fans the recorder's observed values out to every subscribed connection.
///
/// The hub observes the recorder once per topic, numbers each change (`seq`), encodes it once,
/// and hands it to every receiver subscribed to the topic. Receivers do their own throttling
/// and queueing on their event loops; nothing here waits for a client.
final class TopicHub: Sendable {
    private struct State {
        var latest: [Topic: Publication] = [:]
        var seq: [Topic: UInt64] = [:]
        var receivers: [ObjectIdentifier: (receiver: any PublicationReceiver, topics: Set<Topic>)] = [:]
    }

    private let state = NIOLockedValueBox(State())
    private let queue = DispatchQueue(label: "recd.hub")
    private let tokens: NIOLockedValueBox<[ObservationToken]> = NIOLockedValueBox([])

    init(recorder: Recorder) {
        // Discrete topics: every change, in order. Continuous ones: the latest when we lag.
        let observations: [ObservationToken] = [
            recorder.state.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.state($0)) },
            recorder.error.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.error($0)) },
            recorder.recording.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.recording($0)) },
            recorder.closedSegment.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.segment($0)) },
            recorder.warning.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.warning($0)) },
            recorder.retentionDeletion.subscribe(on: queue, delivery: .every) { [weak self] in self?.publish(.retention($0)) },
            recorder.currentTime.subscribe(on: queue) { [weak self] in self?.publish(.currentTime($0)) },
            recorder.levels.subscribe(on: queue) { [weak self] in self?.publish(.levels($0)) },
        ]
        tokens.withLockedValue { $0 = observations }
        // Each subscription delivers its current value first; wait for those so that every
        // topic has a snapshot before the first client asks.
        queue.sync {}
    }

    /// Waits until every publication already observed has been handed to receivers.
    func drain() { queue.sync {} }

    private func publish(_ value: TopicValue) {
        let timestamp = Date().timeIntervalSince1970
        let (publication, receivers) = state.withLockedValue { state -> (Publication, [any PublicationReceiver]) in
            let seq = (state.seq[value.topic] ?? 0) + 1
            state.seq[value.topic] = seq
            let update = TopicUpdate(value: value, seq: seq, timestamp: timestamp)
            let publication = Publication(update: update, members: Self.members(of: update))
            state.latest[value.topic] = publication
            let receivers = state.receivers.values.filter { $0.topics.contains(value.topic) }.map(\.receiver)
            return (publication, receivers)
        }
        for receiver in receivers { receiver.receive(publication) }
    }

    /// Registers `receiver` for `topics` and returns their current values. No publication can
    /// fall between the snapshot and the registration.
    func add(_ receiver: any PublicationReceiver, topics: Set<Topic>) -> [Publication] {
        state.withLockedValue { state in
            let id = ObjectIdentifier(receiver)
            let existing = state.receivers[id]?.topics ?? []
            state.receivers[id] = (receiver, existing.union(topics))
            return topics.sorted().compactMap { state.latest[$0] }
        }
    }

    /// Sets the topics `receiver` gets (removing it when empty).
    func update(_ receiver: any PublicationReceiver, topics: Set<Topic>) {
        state.withLockedValue { state in
            let id = ObjectIdentifier(receiver)
            if topics.isEmpty { state.receivers[id] = nil } else { state.receivers[id] = (receiver, topics) }
        }
    }

    func remove(_ receiver: any PublicationReceiver) {
        _ = state.withLockedValue { $0.receivers.removeValue(forKey: ObjectIdentifier(receiver)) }
    }

    var receiverCount: Int { state.withLockedValue { $0.receivers.count } }

    private static let encoder = WireCoding.encoder()

    private static func members(of update: TopicUpdate) -> String {
        // sortedKeys: {"seq":…,"timestamp":…,"topic":…,"value":…}
        let json = (try? encoder.encode(update)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        return String(json.dropFirst().dropLast())
    }
}
