import ALSA
import AudioGraph
import FoundationEssentials
import NIOConcurrencyHelpers
import RecorderModel

/// The clients of one tap format, and the tap that serves them on the engine of the moment
/// (a new one when the device comes back).
final class TapGroup: @unchecked Sendable {
    // @unchecked: changed on the recorder's control queue only, under `tapGroups`' lock.
    let format: TapFormat
    /// Made for one client that asked for pre-roll: not shared.
    let exclusive: Bool
    var subscribers: [TapSubscriber] = []
    var tap: AudioTap?

    init(format: TapFormat, exclusive: Bool) {
        self.format = format
        self.exclusive = exclusive
    }
}

/// Taps: other programs hear the input, each in a format of its own, without slowing the
/// recording (AudioTap). A tap needs the device open: on an idle daemon it listens (state
/// `listening`) for as long as a tap is open. On the recorder's control queue.
extension RecorderController {
    /// Opens a tap for one client: chunks in `format` go to `sink` from now (after up to
    /// `preRoll` seconds of what listening held) until `closeTap`. Opens the device (listening)
    /// if it is not open.
    /// A rate or channels left nil take the recording settings', else the device's.
    /// `chunk`: the least seconds of audio each chunk carries (nil: each as the device gives it).
    func openTap(rate: Int?, channels: Int?, encoding: TapEncoding, preRoll: Double, chunk: Double? = nil, pid: Int32?, client: String? = nil,
                 sink: any AudioTapSink) throws(RecorderError) -> Recorder.OpenedTap {
        if let refusal = rate.flatMap({ Limits.refusal("rate", $0, Limits.sampleRate, "Hz") })
            ?? channels.flatMap({ Limits.refusal("channels", $0, Limits.channels) })
            ?? chunk.flatMap({ Limits.refusal("chunk", $0, Limits.tapChunk, "seconds") })
            ?? Limits.refusal("preRoll", preRoll, Limits.preRoll, "seconds") {
            throw RecorderError(.invalidSettings, refusal)
        }
        return try onControl { () throws(RecorderError) in
            if state.refusingRecordings { throw RecorderError(.invalidState, "cannot tap: recd is shutting down") }
            if state.listenPlan == nil { _ = try beginListening(preRoll: nil, requested: false) }
            let settings = configuration.defaultSettings
            let format = TapFormat(
                sampleRate: rate ?? settings.sampleRate ?? state.engine?.configuration.sampleRate ?? 48000,
                channels: channels ?? settings.channels ?? state.engine?.configuration.channels ?? 2, encoding: encoding)
            let joined = chunk.map { Swift.min(Int(($0 * Double(format.sampleRate)).rounded()), sink.largestJoinedPayload / format.bytesPerFrame) }
            let subscriber = TapSubscriber(id: TapSubscriber.nextID(), pid: pid, client: client, minimumFrames: joined ?? 0, sink: sink)
            var group = preRoll > 0 ? nil : tapGroups.withLockedValue { $0.first { !$0.exclusive && $0.format == format } }
            let joining = group != nil
            if group == nil { group = TapGroup(format: format, exclusive: preRoll > 0) }
            let tapGroup = group!
            var replayed = 0
            if let engine = state.engine {
                if let tap = tapGroup.tap {
                    tap.add(subscriber)
                } else {
                    // A pre-roll tap's ring takes the whole replay at once, with room to spare:
                    // as much as listening's ring holds, not more (the ring is touched whole
                    // when it is made).
                    let ring = preRoll > 0 ? listeningParts.withLock { $0.ring } : nil
                    let replayable = Double(ring?.capacityFrames ?? 0) / Double(engine.configuration.sampleRate)
                    let tap = try makeTap(tapGroup, on: engine, seconds: Swift.min(preRoll, replayable) + 2)
                    for earlier in tapGroup.subscribers { tap.add(earlier) }
                    tap.add(subscriber)
                    defer {
                        if tapGroup.tap == nil {
                            // The device would not start: no tap, and no listening for it alone.
                            tap.close(quietly: true)
                            if tapGroups.withLockedValue({ $0.isEmpty }), state.listenPlan?.requested == false { endListening() }
                        }
                    }
                    try engine.attach(tap) { engine in
                        // The ring's newest frames first, then the stream from the next read on.
                        guard let ring else { return true }
                        let dropped = tap.framesDroppedAtHandOver
                        replayed = ring.replay(frames: Int((preRoll * Double(engine.configuration.sampleRate)).rounded()),
                                               into: tap, chunkFrames: engine.maximumChunkFrames,
                                               captureTime: engine.captureTime(ofPosition:),
                                               clockOffset: engine.wallClockOffset ?? .nan).frames
                        // What the answer says it begins with: what the tap took, not what was offered.
                        replayed -= Int(tap.framesDroppedAtHandOver - dropped)
                        return true
                    }
                    tapGroup.tap = tap
                }
            }
            tapGroups.withLockedValue { groups in
                tapGroup.subscribers.append(subscriber)
                if !joining { groups.append(tapGroup) }
            }
            let rate = Double(state.engine?.configuration.sampleRate ?? format.sampleRate)
            logger.info("tap opened", metadata: ["tap.id": "\(subscriber.id)", "tap.rate": "\(format.sampleRate)",
                                                  "tap.channels": "\(format.channels)", "tap.encoding": "\(format.encoding.rawValue)",
                                                  "client.pid": "\(pid.map(String.init) ?? "-")"])
            return Recorder.OpenedTap(id: subscriber.id, format: format, preRollSeconds: Double(replayed) / rate)
        }
    }

    /// The client leaves: its tap ends when it was the last of its format, and listening
    /// that only taps needed ends with the last tap.
    func closeTap(id: Int) {
        try? onControl { () throws(RecorderError) in
            let emptied: TapGroup? = tapGroups.withLockedValue { groups in
                guard let group = groups.first(where: { $0.subscribers.contains { $0.id == id } }) else { return nil }
                group.subscribers.removeAll { $0.id == id }
                _ = group.tap?.remove(id: id)
                guard group.subscribers.isEmpty else { return nil }
                groups.removeAll { $0 === group }
                return group
            }
            if let emptied, let tap = emptied.tap {
                if let engine = state.engine { engine.detach(tap, timeout: configuration.stopTimeout) }
                tap.close(quietly: true)
            }
            logger.info("tap closed", metadata: ["tap.id": "\(id)"])
            if tapGroups.withLockedValue({ $0.isEmpty }), state.listenPlan?.requested == false { endListening() }
        }
    }

    /// The taps and what each client was sent. Any thread.
    func currentTaps() -> [TapStatus] {
        tapGroups.withLockedValue { groups in
            groups.flatMap { group in
                group.subscribers.map { $0.status(format: group.format) }
            }.sorted { $0.id < $1.id }
        }
    }

    /// `tap.update` from the process `pid`: the tap's client says how many it serves the
    /// audio on to. Only the process that opened the tap may (another's would be a lie in
    /// its status). Any thread.
    func updateTap(id: Int, pid: Int32?, listeners: Int?) throws(RecorderError) -> TapStatus {
        let found = tapGroups.withLockedValue { groups in
            groups.lazy.compactMap { group in group.subscribers.first { $0.id == id }.map { ($0, group.format) } }.first
        }
        guard let (subscriber, format) = found else { throw RecorderError(.invalidState, "no tap \(id) is open") }
        guard let pid, subscriber.pid == pid else {
            throw RecorderError(.invalidState, "tap \(id) is another process's: only the process that opened it may update it")
        }
        if let listeners { subscriber.listeners.store(listeners, ordering: .relaxed) }
        return subscriber.status(format: format)
    }

    // MARK: The engine's life (from RecorderController+Listening)

    /// A new engine (the device opened or came back): every group gets a tap on it.
    func attachTaps(to engine: CaptureEngine) {
        for group in tapGroups.withLockedValue({ $0 }) {
            group.tap?.close(quietly: true)
            group.tap = nil
            var made: AudioTap?
            do throws(RecorderError) {
                let tap = try makeTap(group, on: engine, afterLoss: true)
                made = tap
                for subscriber in group.subscribers { tap.add(subscriber) }
                try engine.attach(tap)
                group.tap = tap
            } catch {
                // Its clients are told, rather than left with a stream that never moves again.
                logger.error("tap could not join the device", metadata: ["error.message": "\(error.message)"])
                made?.close(quietly: true)
                tapGroups.withLockedValue { groups in groups.removeAll { $0 === group } }
                for subscriber in group.subscribers { subscriber.sink.tapEnded(error) }
            }
        }
    }

    /// The engine ended: the taps' threads end; their clients stay for the next engine.
    func detachTaps() {
        for group in tapGroups.withLockedValue({ $0 }) {
            group.tap?.close(quietly: true)
            group.tap = nil
        }
    }

    /// Listening ended for good (recd stops, or the device is gone and not waited for): every
    /// client is told and the taps end.
    func endTaps(error: RecorderError?) {
        let groups = tapGroups.withLockedValue { groups in defer { groups = [] }; return groups }
        for group in groups {
            if let tap = group.tap, let engine = state.engine { engine.detach(tap, timeout: configuration.stopTimeout) }
            group.tap?.close(quietly: true)
            for subscriber in group.subscribers { subscriber.sink.tapEnded(error) }
        }
    }

    private func makeTap(_ group: TapGroup, on engine: CaptureEngine, afterLoss: Bool = false,
                         seconds: Double = 2) throws(RecorderError) -> AudioTap {
        try AudioTap(format: group.format, device: engine.configuration, maxChunkFrames: engine.maximumChunkFrames,
                     quality: configuration.defaultSettings.quality.converterQuality, exclusive: group.exclusive,
                     startsWithGap: afterLoss, seconds: seconds, captureTime: { [weak engine] in engine?.captureTime(ofPosition: $0) })
    }
}

extension RecorderController {
    /// At shutdown, before the server closes its connections: every tap's client is told the
    /// stream ends, and listening that only taps needed ends.
    func closeTaps() {
        try? onControl { () throws(RecorderError) in
            endTaps(error: RecorderError(.invalidState, "recd is shutting down"))
            if state.listenPlan?.requested == false { endListening() }
        }
    }
}
