import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// recd over its real socket: every method, every error, subscriptions, limits.
@Suite("recd protocol")
struct ProtocolTests {
    let inputs = TemporaryDirectory()

    func waitForState(_ connection: RecdConnection, _ name: RecorderState.Name, timeout: Double = 20) throws -> StatusResult {
        var status: StatusResult = try connection.call(.status)
        let deadline = Date().addingTimeInterval(timeout)
        while status.state.name != name, Date() < deadline {
            usleep(20_000)
            status = try connection.call(.status)
        }
        return status
    }

    @Test func everyMethodRoundTrips() throws {
        let input = writeCounterInput(inputs, seconds: 4)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        let client = try daemon.connect()

        let version: VersionResult = try client.call(.version)
        #expect(version.version == RecdVersion.current)
        #expect(version.protocolRevision == JSONRPC.protocolRevision)

        let idle: StatusResult = try client.call(.status)
        #expect(idle.state == .idle)
        #expect(idle.device == daemon.device)
        #expect(idle.recordingsDirectory == daemon.recordings)

        let started: Recording = try client.call(.start, StartParams(name: "take", format: .wav, sampleRate: 48000, channels: 2, duration: 1))
        #expect(started.name == "take")
        #expect(started.frameLimit == 48000)
        let finished = try waitForState(client, .finished)
        #expect(finished.recording?.frames == 48000)
        #expect(finished.currentTime == 1.0)

        let list: RecordingsListResult = try client.call(.recordingsList)
        #expect(list.recordings.map(\.file) == ["take.wav"])
        #expect(list.recordings.first?.frames == 48000)
        let info: RecordingFile = try client.call(.recordingsInfo, RecordingNameParams(name: "take"))
        #expect(info.duration == 1.0)
        #expect(info.size > 48000 * 4)
        let renamed: RecordingFile = try client.call(.recordingsRename, RenameParams(from: "take.wav", to: "kept"))
        #expect(renamed.file == "kept.wav")
        #expect(FileManager.default.fileExists(atPath: daemon.recordings + "/kept.wav"))
        let deleted: DeleteResult = try client.call(.recordingsDelete, RecordingNameParams(name: "kept"))
        #expect(deleted.deleted == "kept.wav")
        #expect(!FileManager.default.fileExists(atPath: daemon.recordings + "/kept.wav"))

        let devices: DevicesResult = try client.call(.devicesList)
        #expect(devices.current == daemon.device)
        #expect(devices.devices.contains { $0.name == "null" || $0.name == "default" })
        #expect(daemon.terminate() == 0)
    }

    @Test func pauseResumeStopAndCancelRoundTrip() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "live", format: .flac))
        _ = try waitForState(client, .recording)
        #expect(waitUntil { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 0.2 })
        let paused: StateResult = try client.call(.pause)
        #expect(paused.state.name == .paused)
        let resumed: StateResult = try client.call(.resume)
        #expect(resumed.state.name == .recording)
        let stopped: Recording = try client.call(.stop)
        #expect(stopped.frames > 0)
        #expect(FileManager.default.fileExists(atPath: stopped.path))

        let _: Recording = try client.call(.start, StartParams(name: "discard"))
        let cancelled: StateResult = try client.call(.cancel)
        #expect(cancelled.state == .idle)
        #expect(!FileManager.default.fileExists(atPath: daemon.recordings + "/discard.wav"))
        #expect(!FileManager.default.fileExists(atPath: daemon.recordings + "/discard.wav.part"))
    }

    @Test func protocolErrorsHaveTheirCodes() throws {
        let input = writeCounterInput(inputs, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        let client = try daemon.connect()
        let cases: [(String, Int, String?)] = [
            ("{not json", -32700, "parseError"),
            ("\"text\"", -32600, "invalidRequest"),
            (#"{"id":1,"method":"status"}"#, -32600, "invalidRequest"),
            (#"{"jsonrpc":"2.0","id":2,"method":7}"#, -32600, "invalidRequest"),
            (#"{"jsonrpc":"2.0","id":3,"method":"status","extra":1}"#, -32600, "invalidRequest"),
            (#"{"jsonrpc":"2.0","id":{"a":1},"method":"status"}"#, -32600, "invalidRequest"),
            (#"{"jsonrpc":"2.0","id":4,"method":"record"}"#, -32601, "methodNotFound"),
            (#"{"jsonrpc":"2.0","id":5,"method":"start","params":{"nmae":"x"}}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":6,"method":"start","params":{"sampleRate":"fast"}}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":7,"method":"start","params":{"format":"wma"}}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":8,"method":"start","params":[1]}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":9,"method":"status","params":{"x":1}}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":10,"method":"recordings.info"}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":11,"method":"start","params":{"at":"tomorrow"}}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":12,"method":"subscribe","params":{"topics":["weather"]}}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":13,"method":"subscribe","params":{"interval":0}}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":14,"method":"unsubscribe","params":{"subscription":"nope"}}"#, -32602, "invalidParams"),
            (#"{"jsonrpc":"2.0","id":15,"method":"pause"}"#, -32000, "invalidState"),
            (#"{"jsonrpc":"2.0","id":16,"method":"stop"}"#, -32000, "invalidState"),
            (#"{"jsonrpc":"2.0","id":17,"method":"start","params":{"format":"opus","sampleRate":44100}}"#, -32000, "invalidSettings"),
            (#"{"jsonrpc":"2.0","id":18,"method":"start","params":{"name":"../escape"}}"#, -32000, "invalidSettings"),
            (#"{"jsonrpc":"2.0","id":19,"method":"recordings.info","params":{"name":"missing"}}"#, -32002, "notFound"),
            (#"{"jsonrpc":"2.0","id":20,"method":"recordings.delete","params":{"name":"../../etc/passwd"}}"#, -32002, "notFound"),
        ]
        for (line, code, dataCode) in cases {
            let answer = try client.exchange(line)
            #expect(answer.errorCode == code, "\(line) -> \(answer)")
            #expect(answer.errorDataCode == dataCode, "\(line) -> \(answer)")
            #expect(!(answer.errorMessage ?? "").isEmpty)
            #expect(answer["jsonrpc"] as? String == "2.0")
            #expect(answer.keys.contains("id"), "an error answer always carries id (null when unreadable)")
        }
        // The connection survived all of it.
        let status: StatusResult = try client.call(.status)
        #expect(status.state == .idle)
    }

    @Test func errorMessagesSayWhatIsWrong() throws {
        let daemon = try Daemon(device: "null")
        let client = try daemon.connect()
        let unknown = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"start","params":{"nmae":"x"}}"#)
        #expect(unknown.errorMessage?.contains("unknown parameter 'nmae' for 'start'") == true)
        let type = try client.exchange(#"{"jsonrpc":"2.0","id":2,"method":"start","params":{"channels":"two"}}"#)
        #expect(type.errorMessage == "'channels' must be an integer", "\(type)")
        let state = try client.exchange(#"{"jsonrpc":"2.0","id":3,"method":"resume"}"#)
        #expect(state.errorMessage == "nothing is recording")
    }

    @Test func aDeviceLostMidRecordingIsReportedToSubscribersAndStatus() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[capture]\nwait_for_device = false\n")
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.state, .error]))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "unplugged", format: .flac))
        #expect(waitUntil { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 0.3 })
        server.kill()
        var sawError: RecorderError?
        while let notification = try? watcher.nextNotification(timeout: 20) {
            if case .error(let error?) = notification.value { sawError = error }
            if case .state(let state) = notification.value, state.name == .failed { break }
        }
        #expect(sawError?.code == .deviceLost)
        let status: StatusResult = try client.call(.status)
        #expect(status.state.name == .failed)
        #expect(status.error?.code == .deviceLost)
        let file = try #require(status.recording)
        let reader = try SoundFileReader(path: file.path)
        #expect(reader.info.frames == file.frames)
    }

    @Test func aRequestWithoutIdGetsNoAnswer() throws {
        let daemon = try Daemon(device: "null")
        let client = try daemon.connect()
        try client.send(#"{"jsonrpc":"2.0","method":"status"}"# + "\n")
        let answer = try client.exchange(#"{"jsonrpc":"2.0","id":"after","method":"version"}"#)
        #expect(answer["id"] as? String == "after")
    }

    @Test func aDeviceThatCannotBeOpenedIsARecorderError() throws {
        let daemon = try Daemon(device: "no_such_device_here", config: "[capture]\nwait_for_device = false\n")
        let client = try daemon.connect()
        let answer = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"start"}"#)
        #expect(answer.errorCode == -32000)
        #expect(answer.errorDataCode == "deviceNotFound")
        #expect(answer.errorMessage?.contains("no_such_device_here") == true)
        let status: StatusResult = try client.call(.status)
        #expect(status.state.name == .failed)
        #expect(status.error?.code == .deviceNotFound)
    }

    // MARK: Subscriptions

    @Test func subscribeSendsASnapshotThenOrderedChanges() throws {
        let input = writeCounterInput(inputs, seconds: 3)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        let client = try daemon.connect()
        let subscription: SubscribeResult = try client.call(.subscribe, SubscribeParams(topics: [.state, .recording, .error]))
        #expect(subscription.topics == [.state, .error, .recording])
        #expect(Set(subscription.snapshot.map(\.topic)) == [.state, .error, .recording])
        let snapshotSeq = subscription.snapshot.first { $0.topic == .state }!.seq
        #expect(subscription.snapshot.first { $0.topic == .state }?.value == .state(.idle))

        let control = try daemon.connect()
        let _: Recording = try control.call(.start, StartParams(name: "seq", duration: 0.5))
        var states: [ChangedNotification.Params] = []
        while states.last.map({ if case .state(let s) = $0.value { return s.name != .finished }; return true }) ?? true {
            let notification = try client.nextNotification(timeout: 20)
            #expect(notification.subscription == subscription.subscription)
            if notification.topic == .state { states.append(notification) }
        }
        let names = states.compactMap { if case .state(let state) = $0.value { return state.name } else { return nil } }
        #expect(names == [.preparing, .recording, .finished])
        // Discrete topics: consecutive sequence numbers, continuing from the snapshot.
        #expect(states.map(\.seq) == Array((snapshotSeq + 1)...(snapshotSeq + 3)))
    }

    /// Levels are published as often as the most demanding subscriber asks, never more often
    /// than [metering] levels_interval: a subscriber at 0.5 s alone gets every publication
    /// (each `seq` one more than the last); beside one at 0.05 s, it gets one of about ten;
    /// once that one is gone, every one again. Sequence numbers count publications exactly,
    /// whatever the machine's load.
    @Test func levelsComeAsOftenAsTheMostDemandingSubscriberAsks() throws {
        let server = try PulseServer()
        // A changing signal, so that levels change (equal levels are not re-sent).
        let input = writeCounterInput(inputs, seconds: 120)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server))
        let _: ListenResult = try daemon.connect().call(.listen, ListenParams(preRoll: 0))
        let slow = try daemon.connect()
        let _: SubscribeResult = try slow.call(.subscribe, SubscribeParams(topics: [.levels], interval: 0.5))
        /// How far `seq` moved between consecutive levels notifications, over `count` of them.
        func steps(_ count: Int) throws -> [Int] {
            var seqs: [UInt64] = []
            while seqs.count < count + 1 {
                let notification = try slow.nextNotification(timeout: 30)
                if notification.topic == .levels { seqs.append(notification.seq) }
            }
            return zip(seqs, seqs.dropFirst()).map { Int($0.1) - Int($0.0) }
        }
        _ = try steps(1)  // levels running at the slow subscriber's period
        let alone = try steps(4)
        #expect(alone.allSatisfy { $0 == 1 }, "alone at 0.5 s, every publication reaches it: \(alone)")

        let fast = try daemon.connect()
        let fastSubscription: SubscribeResult = try fast.call(.subscribe, SubscribeParams(topics: [.levels], interval: 0.05))
        _ = try steps(2)  // the change takes effect
        let beside = try steps(4)
        #expect(beside.allSatisfy { $0 >= 5 }, "beside a subscriber at 0.05 s, publications come ten times as often: \(beside)")

        let _: UnsubscribeResult = try fast.call(.unsubscribe, UnsubscribeParams(subscription: fastSubscription.subscription))
        _ = try steps(2)
        let again = try steps(4)
        #expect(again.allSatisfy { $0 == 1 }, "alone again: \(again)")
    }

    @Test func continuousTopicsAreCoalescedToTheInterval() throws {
        let server = try PulseServer()
        try server.tone()
        // A changing signal, so that levels change (equal levels are not re-sent).
        let input = writeCounterInput(inputs, seconds: 40)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server))
        let client = try daemon.connect()
        let _: SubscribeResult = try client.call(.subscribe, SubscribeParams(topics: [.currentTime, .levels], interval: 0.5))
        let control = try daemon.connect()
        let _: Recording = try control.call(.start, StartParams(name: "slow"))
        // PulseAudio takes a moment to deliver the first frames; measure once time runs.
        #expect(waitUntil { ((try? control.call(.status) as StatusResult)?.currentTime ?? 0) > 0.05 })
        while (try? client.nextNotification(timeout: 0.01)) != nil {}
        // Six currentTime notifications (a deadline, not a window: a loaded machine only
        // makes them later).
        var received: [(at: Date, notification: ChangedNotification.Params)] = []
        var times: [(at: Date, notification: ChangedNotification.Params)] { received.filter { $0.notification.topic == .currentTime } }
        let deadline = Date().addingTimeInterval(60)
        while times.count < 6, Date() < deadline {
            if let notification = try? client.nextNotification(timeout: deadline.timeIntervalSinceNow) {
                received.append((Date(), notification))
            }
        }
        let _: Recording = try control.call(.stop)
        try #require(times.count == 6, "\(times.count) currentTime notifications")
        // The recorder publishes currentTime every 0.1 s and levels every 0.05 s; at 0.5 s
        // this subscription gets at most one of each per half second (recd allows 10 % slack
        // for timer jitter), the latest. Receipt times carry the machine's scheduling delays
        // (one late delivery makes the next gap short), so the spacing is checked on the
        // median; the sequence numbers show that values in between were skipped.
        let gaps = zip(times, times.dropFirst()).map { $0.1.at.timeIntervalSince($0.0.at) }.sorted()
        #expect(gaps[gaps.count / 2] >= 0.42, "received \(gaps) s apart")
        let skipped = zip(times, times.dropFirst()).map { Int($0.1.notification.seq) - Int($0.0.notification.seq) }.sorted()
        #expect(skipped[skipped.count / 2] >= 3, "seq advanced by \(skipped)")
        // Levels the same: no more than one per interval over the same span.
        let levels = received.filter { $0.notification.topic == .levels }
        #expect(levels.count >= 2 && levels.count <= times.count + 1, "\(levels.count) levels notifications")
    }

    @Test func anIntervalEqualToTheRecordersPeriodGetsEveryValue() throws {
        let server = try PulseServer()
        try server.tone()
        let input = writeCounterInput(inputs, seconds: 8)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server),
                                config: "[metering]\ntime_interval = 0.05\nlevels_interval = 0.05\n")
        let client = try daemon.connect()
        let subscription: SubscribeResult = try client.call(
            .subscribe, SubscribeParams(topics: [.state, .currentTime, .levels], interval: 0.05))
        var lastSeq: [Topic: UInt64] = Dictionary(uniqueKeysWithValues: subscription.snapshot.map { ($0.topic, $0.seq) })
        let control = try daemon.connect()
        let _: Recording = try control.call(.start, StartParams(name: "every", format: .wav, sampleRate: 48000, channels: 2, duration: 1.5))
        // Not coalesced: each continuous value follows the one before it (a value replaced
        // while held back for the interval would leave a gap in `seq`).
        var received: [Topic: Int] = [:]
        while true {
            let notification = try client.nextNotification(timeout: 30)
            if notification.topic != .state {
                #expect(notification.seq == (lastSeq[notification.topic] ?? 0) + 1,
                        "\(notification.topic) seq \(notification.seq) after \(lastSeq[notification.topic] ?? 0)")
                received[notification.topic, default: 0] += 1
            }
            lastSeq[notification.topic] = notification.seq
            if case .state(let state) = notification.value, state.name == .finished { break }
        }
        // 1.5 s at one publication per 0.05 s: 30 each, fewer only if the hub itself lagged a
        // whole period (the recorder's latest value wins there, without a `seq` of its own).
        #expect((received[.currentTime] ?? 0) >= 20, "\(received)")
        #expect((received[.levels] ?? 0) >= 20, "\(received)")
    }

    @Test func unsubscribeStopsNotifications() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let subscription: SubscribeResult = try client.call(.subscribe, SubscribeParams(topics: [.currentTime], interval: 0.05))
        let control = try daemon.connect()
        let _: Recording = try control.call(.start, StartParams(name: "unsub"))
        _ = try client.nextNotification(timeout: 10)
        let result: UnsubscribeResult = try client.call(.unsubscribe, UnsubscribeParams(subscription: subscription.subscription))
        #expect(result.subscription == subscription.subscription)
        // Drain what was already on its way, then expect silence on a connection that still
        // answers (a closed one would be silent too).
        while (try? client.nextNotification(timeout: 0.3)) != nil {}
        do {
            let notification = try client.nextNotification(timeout: 1.0)
            Issue.record("a notification after unsubscribe: \(notification)")
        } catch {
            #expect(error == .timedOut, "\(error)")
        }
        let stillThere: StatusResult = try client.call(.status)
        #expect(stillThere.state.name == .recording)
        let _: Recording = try control.call(.stop)
    }

    @Test func twoHundredSubscribersWhileRecordingLoseNoFrame() throws {
        let server = try PulseServer()
        let input = writeCounterInput(inputs, seconds: 8)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server),
                                config: "[server]\nmax_clients = 300\n")
        var subscribers: [RecdConnection] = []
        for _ in 0..<200 {
            let connection = try daemon.connect()
            let _: SubscribeResult = try connection.call(.subscribe, SubscribeParams(topics: [.state, .currentTime, .levels], interval: 0.05))
            subscribers.append(connection)
        }
        let control = try daemon.connect()
        let _: Recording = try control.call(.start, StartParams(name: "crowd", format: .wav, sampleRate: 48000, channels: 2, duration: 2))
        // Every subscriber reads everything until it sees the recording finish.
        var finishedSeen = 0
        for connection in subscribers {
            while true {
                let notification = try connection.nextNotification(timeout: 30)
                if case .state(let state) = notification.value, state.name == .finished {
                    finishedSeen += 1
                    break
                }
            }
        }
        #expect(finishedSeen == 200)
        let status: StatusResult = try control.call(.status)
        #expect(status.statistics.xruns == 0)
        #expect(status.statistics.framesLost == 0)
        let reader = try SoundFileReader(path: daemon.recordings + "/crowd.wav")
        #expect(reader.info.frames == 96000)
        let samples = reader.readAllInt16()
        #expect(samples == Array(input.samples[0..<192_000]), "the file is the input, bit for bit")
    }

    @Test func aClientThatNeverReadsBlocksNothingAndIsDisconnected() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[server]\nclient_queue_bytes = 16384\n")
        // A client that subscribes at the highest rate and then never reads.
        let stuck = try daemon.connect()
        try stuck.send(#"{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"interval":0.01}}"# + "\n")
        let control = try daemon.connect()
        let _: Recording = try control.call(.start, StartParams(name: "busy", format: .wav))
        // Meanwhile other clients are answered (a blocked loop would never answer: the call
        // throws at its bound; how fast is bench/'s business).
        for _ in 0..<20 {
            let _: StatusResult = try control.call(.status, timeout: 10)
            usleep(100_000)
        }
        // It also pipelines requests whose answers it never reads: its socket buffer fills,
        // then its queue; then the daemon drops it (and the send may fail once it has).
        try? stuck.send(raw: Array(String(repeating: #"{"jsonrpc":"2.0","id":2,"method":"status"}"# + "\n", count: 3000).utf8))
        let other = try daemon.connect()
        #expect(waitUntil(timeout: 60) {
            // The stuck client's socket buffer fills, then its queue; then recd closes it.
            let _: StatusResult? = try? other.call(.status, timeout: 2)
            return daemon.log.contains("client not reading; disconnecting")
        }, "\(daemon.log)")
        // The recording went on meanwhile and goes on.
        #expect(waitUntil(timeout: 20) { ((try? control.call(.status) as StatusResult)?.currentTime ?? 0) > 1.0 })
        let recording: Recording = try control.call(.stop)
        let status: StatusResult = try control.call(.status)
        #expect(status.statistics.xruns == 0)
        #expect(recording.frames > 48000)
        #expect(try SoundFileReader(path: recording.path).info.frames == recording.frames)
    }

    @Test func aSubscriberThatPausesReadingKeepsItsConnectionAndThenGetsTheLatestValues() throws {
        let server = try PulseServer()
        // Time and levels 100 times a second into a 64 KiB queue: before continuous topics were
        // kept latest-only for a client behind, they filled it (after the socket's buffer)
        // within seconds, and the client was disconnected.
        let daemon = try Daemon(device: TestDevices.paced(server), config: """
            [server]
            client_queue_bytes = 65536
            [metering]
            levels_interval = 0.01
            time_interval = 0.01
            """)
        // A meter that stops reading for a while (a pager, a suspended status bar), subscribed
        // at the highest rate to the continuous topics only: no event of its own pushes a
        // held value out.
        let paused = try daemon.connect()
        let _: SubscribeResult = try paused.call(.subscribe, SubscribeParams(topics: [.currentTime, .levels], interval: 0.01))
        let control = try daemon.connect()
        let _: Recording = try control.call(.start, StartParams(name: "long", format: .wav))
        // 20 s of them are about 800 KB: the socket's buffer and the queue limit twice over.
        let status = try #require(daemon.waitForStatus(timeout: 120) { $0.currentTime >= 20 })
        #expect(!daemon.log.contains("client not reading"), "\(daemon.log)")
        // The recording stops while the client is still behind: its last currentTime is held.
        let recording: Recording = try control.call(.stop)
        let final = Double(recording.frames) / 48000
        #expect(try SoundFileReader(path: recording.path).info.frames == recording.frames)
        // It reads again: what waited drains, then the held values, the final time among them.
        var stale = 0
        var last: Double?
        let deadline = Date().addingTimeInterval(30)
        while last.map({ abs($0 - final) > 0.001 }) ?? true, Date() < deadline {
            guard let notification = try? paused.nextNotification(timeout: 10) else { break }
            if case .currentTime(let time) = notification.value {
                if time < status.currentTime { stale += 1 }
                last = time
            }
        }
        #expect(last.map { abs($0 - final) <= 0.001 } == true,
                "the final currentTime \(final) did not reach the client (last \(String(describing: last)), \(stale) stale)")
        // The connection still answers.
        let after: StatusResult = try paused.call(.status)
        #expect(after.state.name == .finished)
        // Held back: at most what the socket's buffer and the 32 KiB recd keeps for this client
        // (half its queue) hold, not the 2000 values of the paused seconds.
        #expect(stale < 1500, "\(stale) stale currentTime values")
    }

    @Test func malformedInputGetsErrorsWhileARecordingGoesOnIntact() throws {
        let server = try PulseServer()
        let input = writeCounterInput(inputs, seconds: 8)
        let daemon = try Daemon(device: TestDevices.pacedFile(input.path, server: server))
        let control = try daemon.connect()
        let _: Recording = try control.call(.start, StartParams(name: "intact", format: .wav, sampleRate: 48000, channels: 2, duration: 3))

        // Invalid JSON, wrong types, unknown fields: errors, the connection stays.
        let noisy = try daemon.connect()
        #expect(try noisy.exchange("{\"jsonrpc\":").errorCode == -32700)
        #expect(try noisy.exchange(#"{"jsonrpc":"2.0","id":1,"method":"start","params":{"duration":"long"}}"#).errorCode == -32602)
        #expect(try noisy.exchange(#"{"jsonrpc":"2.0","id":2,"method":"status","bogus":true}"#).errorCode == -32600)
        // Binary garbage (no newline inside) is a parse error too.
        let garbage = (0..<512).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }.filter { !(10...13).contains($0) }
        try noisy.send(raw: garbage + [10])
        #expect(try noisy.nextObject().errorCode == -32700)

        // A line over 64 KiB: an error, then the server closes that connection.
        let huge = try daemon.connect()
        try huge.send(raw: [UInt8](repeating: UInt8(ascii: "a"), count: 70_000))
        let tooLong = try huge.nextObject()
        #expect(tooLong.errorCode == -32600)
        #expect(tooLong.errorMessage?.contains("65536") == true)
        #expect(huge.closesWithoutAnotherLine(within: 10), "the server closes the connection")

        // Half a line, then disconnect.
        do {
            let half = try daemon.connect()
            try half.send(#"{"jsonrpc":"2.0","id":1,"meth"#)
        }

        let status: StatusResult = try noisy.call(.status)
        #expect(status.state.name == .recording)
        #expect(waitUntil(timeout: 30) { ((try? control.call(.status) as StatusResult)?.state.name) == .finished })
        let reader = try SoundFileReader(path: daemon.recordings + "/intact.wav")
        #expect(reader.info.frames == 144_000)
        #expect(reader.readAllInt16() == Array(input.samples[0..<288_000]))
    }

    @Test func clientsBeyondTheLimitAreRefused() throws {
        let daemon = try Daemon(device: "null", config: "[server]\nmax_clients = 2\n")
        // The harness's start-up probe may still count for a moment: retry until accepted.
        func accepted() throws -> RecdConnection {
            var connection: RecdConnection?
            _ = waitUntil {
                guard let candidate = try? daemon.connect(), (try? candidate.call(.status) as StatusResult) != nil else { return false }
                connection = candidate
                return true
            }
            return try #require(connection)
        }
        let first = try accepted()
        let second = try accepted()
        let third = try daemon.connect()
        let refusal = try third.nextObject()
        #expect(refusal.errorCode == -32003)
        #expect(refusal.errorDataCode == "tooManyClients")
        #expect(third.closesWithoutAnotherLine(within: 10), "the server closes the connection")
        // Once one leaves, there is room again.
        withExtendedLifetime(first) {}
        _ = consume first
        let fourth = try accepted()
        withExtendedLifetime((second, fourth)) {}
    }
}
