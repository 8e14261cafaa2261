import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// The control server's guarantees through the real binary and socket: all of JSON-RPC 2.0,
/// no lost answers, no race that loses a recording, bounded stops.
@Suite("recd control server")
struct ControlServerTests {
    let inputs = TemporaryDirectory()

    /// The next line as parsed JSON (an object or an array).
    func nextValue(_ connection: RecdConnection, timeout: Double = 10) throws -> Any {
        try JSONSerialization.jsonObject(with: try connection.readLine(timeout: timeout), options: [.fragmentsAllowed])
    }

    func ids(_ answers: Any) -> [String] {
        ((answers as? [[String: Any]]) ?? []).map { answer in
            switch answer["id"] {
            case let string as String: string
            case let number as Int: String(number)
            default: "null"
            }
        }
    }

    // MARK: Clients that leave badly

    /// Connections that vanish in every bad way while notifications flow (gone with answers
    /// unread, pipelined requests left unanswered, subscribed at 100 Hz and never reading)
    /// give back their descriptors once gone, and SIGTERM still ends recd promptly: a
    /// connection whose last answer could never be written once kept shutdown waiting forever.
    @Test func clientsThatLeaveBadlyLetGoAndSigtermStillEndsRecd() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let _: Recording = try daemon.connect().call(.start, StartParams(name: "busy", format: .wav))
        #expect(daemon.waitForStatus { $0.currentTime > 0.2 } != nil)
        func descriptors() -> Int {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(daemon.process.pid)/fd")) ?? []).count
        }
        let baseline = descriptors()
        let subscribeAll = #"{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"interval":0.01}}"# + "\n"
        let status = #"{"jsonrpc":"2.0","id":2,"method":"status"}"# + "\n"
        var stalled: [RecdConnection] = []
        for round in 0..<60 {
            let client = try daemon.connect()
            switch round % 4 {
            case 0: try client.send(subscribeAll + status)  // gone at once, answers unread
            case 1: try client.send(String(repeating: status, count: 20))  // pipelined, never read
            case 2:
                try client.send(status)
                client.interrupt()  // both directions shut while the answer is on its way
            default:
                try client.send(subscribeAll)  // subscribed at 100 Hz, never reading: kept open
                stalled.append(client)
            }
        }
        Thread.sleep(forTimeInterval: 0.5)  // the stalled ones fall behind: part of the scenario
        stalled.removeAll()  // and now they leave too
        #expect(waitUntil(timeout: 30) { descriptors() <= baseline + 2 },
                "descriptors back to about \(baseline): \(descriptors())")
        // Some that never read are still there at shutdown.
        for _ in 0..<10 { stalled.append(try daemon.connect()); try stalled.last!.send(subscribeAll) }
        #expect(daemon.terminate(timeout: 30) == 0, "recd ended on SIGTERM\n\(daemon.log.suffix(1500))")
        #expect(try SoundFileReader(path: daemon.recordings + "/busy.wav").readAllInt16().count > 0, "the recording was finalized")
    }

    // MARK: JSON-RPC 2.0 (the specification's section 7, method names adapted)

    @Test func theSpecificationsExamplesGetTheSpecificationsAnswers() throws {
        let daemon = try Daemon(device: "null")
        let client = try daemon.connect()

        // Named params; a notification gets nothing.
        let info = try client.exchange(#"{"jsonrpc": "2.0", "method": "recordings.info", "params": {"name": "none"}, "id": 3}"#)
        #expect(info["id"] as? Int == 3)
        #expect(info.errorCode == -32002)
        try client.send(#"{"jsonrpc": "2.0", "method": "version"}"# + "\n")
        // A non-existent method.
        let missing = try client.exchange(#"{"jsonrpc": "2.0", "method": "foobar", "id": "1"}"#)
        #expect(missing["id"] as? String == "1")
        #expect(missing.errorCode == -32601)
        // Invalid JSON.
        let invalidJSON = try client.exchange(#"{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]"#)
        #expect(invalidJSON.errorCode == -32700)
        #expect(invalidJSON["id"] is NSNull)
        // An invalid Request object: answered although it has no id, with "id": null.
        let invalid = try client.exchange(#"{"jsonrpc": "2.0", "method": 1, "params": "bar"}"#)
        #expect(invalid.errorCode == -32600)
        #expect(invalid["id"] is NSNull)
        // A batch that is not JSON: one error.
        try client.send(#"[{"jsonrpc": "2.0", "method": "status", "id": "1"}, {"jsonrpc": "2.0", "method"]"# + "\n")
        let batchParse = try #require(try nextValue(client) as? [String: Any])
        #expect(batchParse.errorCode == -32700)
        // An empty array: one error, not an array.
        try client.send("[]\n")
        let empty = try #require(try nextValue(client) as? [String: Any])
        #expect(empty.errorCode == -32600)
        #expect(empty["id"] is NSNull)
        // A batch of invalid requests: one error each, in an array.
        try client.send("[1]\n")
        #expect((try nextValue(client) as? [[String: Any]])?.map(\.errorCode) == [-32600])
        try client.send("[1,2,3]\n")
        #expect((try nextValue(client) as? [[String: Any]])?.map(\.errorCode) == [-32600, -32600, -32600])
        // A mixed batch: answers for the requests and the invalid ones, none for the notifications.
        try client.send("""
            [{"jsonrpc": "2.0", "method": "status", "id": "1"}, \
            {"jsonrpc": "2.0", "method": "version"}, \
            {"jsonrpc": "2.0", "method": "recordings.list", "id": "2"}, \
            {"foo": "boo"}, \
            {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"}, \
            {"jsonrpc": "2.0", "method": "version", "id": "9"}]

            """)
        let mixed = try #require(try nextValue(client) as? [[String: Any]])
        #expect(ids(mixed) == ["1", "2", "null", "5", "9"])
        #expect(mixed.map(\.errorCode) == [nil, nil, -32600, -32601, nil])
        #expect(((mixed[4]["result"] as? [String: Any])?["version"] as? String) == RecdVersion.current)
        // A batch of notifications only: nothing at all. The next answer is the next request's.
        try client.send(#"[{"jsonrpc": "2.0", "method": "version"}, {"jsonrpc": "2.0", "method": "stop"}]"# + "\n")
        let after = try client.exchange(#"{"jsonrpc":"2.0","id":"after","method":"version"}"#)
        #expect(after["id"] as? String == "after")
    }

    @Test func aNotificationThatFailsGetsNoAnswer() throws {
        let daemon = try Daemon(device: "null")
        let client = try daemon.connect()
        // Each would be an error as a request: not possible while idle, unknown, bad params.
        try client.send(#"{"jsonrpc":"2.0","method":"stop"}"# + "\n")
        try client.send(#"{"jsonrpc":"2.0","method":"nosuch"}"# + "\n")
        try client.send(#"{"jsonrpc":"2.0","method":"start","params":{"sampleRate":"fast"}}"# + "\n")
        let answer = try client.exchange(#"{"jsonrpc":"2.0","id":"after","method":"version"}"#)
        #expect(answer["id"] as? String == "after", "\(answer)")
    }

    @Test func aSubscribeInABatchAnswersBeforeItsFirstNotification() throws {
        let input = writeCounterInput(inputs, seconds: 3)
        let daemon = try Daemon(device: TestDevices.file(input.path))
        let client = try daemon.connect()
        try client.send(#"[{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topics":["state"]}},{"jsonrpc":"2.0","id":2,"method":"start","params":{"duration":0.5}}]"# + "\n")
        let batch = try #require(try nextValue(client) as? [[String: Any]])
        #expect(ids(batch) == ["1", "2"])
        #expect(batch.map(\.errorCode) == [nil, nil])
        // Then the states, in order, after the snapshot the answer carried.
        var names: [String] = []
        while names.last != "finished" {
            let notification = try client.nextNotification(timeout: 20)
            if case .state(let state) = notification.value { names.append(state.name.rawValue) }
        }
        #expect(names == ["preparing", "recording", "finished"])
    }

    // MARK: Answer order (inline and blocking requests on one connection)

    /// A recordings directory of 200 files: `recordings.list` reads them all on the thread pool,
    /// long enough for an inline request behind it to overtake it if anything let it.
    func fillRecordings(_ daemon: Daemon) throws {
        try FileManager.default.createDirectory(atPath: daemon.recordings, withIntermediateDirectories: true)
        let source = daemon.recordings + "/take-0.wav"
        let writer = try SoundFileWriter(path: source, format: SoundFileFormat(container: .wav, encoding: .pcm16), sampleRate: 8000, channels: 1)
        try writer.close()
        for index in 1..<200 { #expect(link(source, daemon.recordings + "/take-\(index).wav") == 0) }
    }

    @Test func inlineRequestsBehindABlockingOneAreAnsweredAfterIt() throws {
        let daemon = try Daemon(device: "null")
        try fillRecordings(daemon)
        let client = try daemon.connect()
        // Answered once: the connection is fully set up (its permissions known) before the rest.
        #expect(try client.exchange(#"{"jsonrpc":"2.0","id":0,"method":"version"}"#)["id"] as? Int == 0)
        let methods = ["recordings.list", "status", "version", "devices.list", "status", "recordings.list", "version", "status"]
        try client.send(methods.enumerated().map { #"{"jsonrpc":"2.0","id":\#($0.offset + 1),"method":"\#($0.element)"}"# + "\n" }.joined())
        for id in 1...methods.count {
            let answer = try client.nextObject()
            #expect(answer["id"] as? Int == id)
            #expect(answer["result"] != nil)
        }
    }

    @Test func batchesMixingBlockingAndInlineRequestsKeepTheirPlace() throws {
        let daemon = try Daemon(device: "null")
        try fillRecordings(daemon)
        let client = try daemon.connect()
        #expect(try client.exchange(#"{"jsonrpc":"2.0","id":0,"method":"version"}"#)["id"] as? Int == 0)
        func request(_ id: Int, _ method: String) -> String { #"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)"}"# }
        try client.send([
            request(1, "status"),
            "[" + [request(2, "version"), request(3, "recordings.list"), request(4, "status")].joined(separator: ",") + "]",
            request(5, "status"),
            "[" + [request(6, "status"), request(7, "version")].joined(separator: ",") + "]",
            "[" + [request(8, "recordings.list"), request(9, "status")].joined(separator: ",") + "]",
            request(10, "version"),
        ].joined(separator: "\n") + "\n")
        #expect(try #require(try nextValue(client) as? [String: Any])["id"] as? Int == 1)
        #expect(ids(try nextValue(client)) == ["2", "3", "4"])
        #expect(try #require(try nextValue(client) as? [String: Any])["id"] as? Int == 5)
        #expect(ids(try nextValue(client)) == ["6", "7"])
        #expect(ids(try nextValue(client)) == ["8", "9"])
        #expect(try #require(try nextValue(client) as? [String: Any])["id"] as? Int == 10)
    }

    @Test func pipelinedRequestsFromAClientThatReadsLateAreAllAnsweredInOrder() throws {
        // A small queue: the server stops reading while the answers wait, then goes on.
        let daemon = try Daemon(device: "null", config: "[server]\nclient_queue_bytes = 4096\n")
        let client = try daemon.connect()
        let count = 4000
        let lines = (1...count).map { id in
            #"{"jsonrpc":"2.0","id":\#(id),"method":"\#(id % 500 == 0 ? "recordings.list" : "status")"}"# + "\n"
        }
        // The first 1000 requests (about 50 KB) fit the socket's buffer whatever the server
        // does; their answers (about 1000 statuses) do not fit in what it may queue.
        let head = Array(lines[..<1000].joined().utf8), rest = Array(lines[1000...].joined().utf8)
        try client.send(raw: head)
        // Writing and reading apart, as a pipelining client does (only `send` runs there).
        nonisolated(unsafe) let sender = client
        Thread { try? sender.send(raw: rest) }.start()
        for id in 1...count {
            let answer = try client.nextObject(timeout: 30)
            #expect(answer["id"] as? Int == id)
            if answer["id"] as? Int != id { break }
        }
    }

    // MARK: No lost answers

    @Test func answersQueuedBehindABlockingRequestSurviveALineTooLong() throws {
        let daemon = try Daemon(device: "null")
        let client = try daemon.connect()
        // Several requests that block (directory reads, device lists), then a line over the
        // limit, in one write: every answer comes, in order, then the error, then the close.
        var bytes = Array((1...5).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"\#($0 % 2 == 0 ? "devices.list" : "recordings.list")"}"# + "\n" }.joined().utf8)
        bytes += [UInt8](repeating: UInt8(ascii: "a"), count: 70_000)
        try client.send(raw: bytes)
        for id in 1...5 {
            let answer = try client.nextObject()
            #expect(answer["id"] as? Int == id)
            #expect(answer["result"] != nil)
        }
        let tooLong = try client.nextObject()
        #expect(tooLong.errorCode == -32600)
        #expect(tooLong.errorMessage?.contains("65536") == true)
        #expect(client.closesWithoutAnotherLine(within: 10))
    }

    @Test func aClientThatClosesItsWritingSideStillGetsItsAnswers() throws {
        let daemon = try Daemon(device: "null")
        let client = try daemon.connect()
        try client.send(#"{"jsonrpc":"2.0","id":1,"method":"version"}"# + "\n" + #"{"jsonrpc":"2.0","id":2,"method":"recordings.list"}"# + "\n")
        client.shutdownWriting()
        #expect(try client.nextObject()["id"] as? Int == 1)
        #expect(try client.nextObject()["id"] as? Int == 2)
        #expect(client.closesWithoutAnotherLine(within: 10))
    }

    @Test func aLargeAnswerIsWrittenWholeThoughItExceedsTheQueueLimit() throws {
        let daemon = try Daemon(device: "null", config: "[server]\nclient_queue_bytes = 4096\n")
        // 200 recordings make a recordings.list answer of about 60 KB.
        try FileManager.default.createDirectory(atPath: daemon.recordings, withIntermediateDirectories: true)
        let source = daemon.recordings + "/take-0.wav"
        let writer = try SoundFileWriter(path: source, format: SoundFileFormat(container: .wav, encoding: .pcm16), sampleRate: 8000, channels: 1)
        try writer.close()
        for index in 1..<200 { #expect(link(source, daemon.recordings + "/take-\(index).wav") == 0) }
        let client = try daemon.connect()
        let list: RecordingsListResult = try client.call(.recordingsList)
        #expect(list.recordings.count == 200)
        let status: StatusResult = try client.call(.status)
        #expect(status.state == .idle)
    }

    @Test func shutdownWritesEveryAnswerAlreadyDueBeforeClosing() throws {
        let daemon = try Daemon(device: "null")
        let client = try daemon.connect()
        let _: StatusResult = try client.call(.status)
        // Pipeline many blocking requests, then stop the daemon while it works through them.
        let count = 300
        try client.send(raw: Array((1...count).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"recordings.list"}"# + "\n" }.joined().utf8))
        let first = try client.nextObject()
        #expect(first["id"] as? Int == 1)
        daemon.process.signal(SIGTERM)
        // Whatever was answered arrives whole and in order, and then the connection closes:
        // an end of file, not a truncated line or a silence.
        var next = 2
        while true {
            do {
                let line = try client.readLine(timeout: 20)
                let answer = try #require(try JSONSerialization.jsonObject(with: line) as? [String: Any])
                #expect(answer["id"] as? Int == next)
                #expect(answer["result"] != nil || answer.errorCode != nil)
                next += 1
            } catch {
                #expect((error as? ClientError) == .closed, "after \(next - 1) answers: \(error)")
                break
            }
        }
        #expect(daemon.process.wait(timeout: 30) == 0)
        // It stopped reading at the signal: closed by quiescing, not by the grace period.
        #expect(!daemon.log.contains("closing clients that did not take their answers"), "\(daemon.log)")
    }

    // MARK: No race loses a recording

    @Test func theRecordingInProgressCannotBeRenamedOntoDeletedOrRenamed() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "keep", format: .wav, duration: 0.5))
        #expect(waitUntil(timeout: 20) { ((try? client.call(.status) as StatusResult)?.state.name) == .finished })
        let active: Recording = try client.call(.start, StartParams(name: "active", format: .wav))

        for from in ["active", "active.wav", "active.wav.part"] {
            let away = try client.exchange(#"{"jsonrpc":"2.0","id":2,"method":"recordings.rename","params":{"from":"\#(from)","to":"other"}}"#)
            #expect(away.errorDataCode == "invalidState", "\(away)")
            #expect(away.errorMessage?.contains("is being recorded") == true, "\(away)")
            let delete = try client.exchange(#"{"jsonrpc":"2.0","id":3,"method":"recordings.delete","params":{"name":"\#(from)"}}"#)
            #expect(delete.errorDataCode == "invalidState", "\(delete)")
        }
        #expect(FileManager.default.fileExists(atPath: active.partialPath))
        let onto = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"recordings.rename","params":{"from":"keep","to":"active.wav"}}"#)
        #expect(onto.errorDataCode == "invalidSettings", "\(onto)")
        #expect(onto.errorMessage?.contains("in progress") == true)
        #expect(FileManager.default.fileExists(atPath: daemon.recordings + "/keep.wav"))

        let stopped: Recording = try client.call(.stop)
        #expect(stopped.path == active.path)
        let keep = try SoundFileReader(path: daemon.recordings + "/keep.wav")
        #expect(keep.info.frames == 24000, "keep.wav is still the first recording")
        #expect(try SoundFileReader(path: active.path).info.frames == stopped.frames)
    }

    /// Nobody follows `currentTime`: the recording ticks (publishes its time and statistics)
    /// once a second, not every `time_interval` (what that saves is in BENCHMARKS.md), and
    /// `status` computes both afresh, so two reads a quarter second apart differ. A subscriber
    /// gets the time every `time_interval` (0.1 s).
    @Test func statusTimeIsFreshWhileNobodyFollowsItAndASubscriberGetsItEveryInterval() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "unwatched", format: .wav))
        #expect(waitUntil { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 0.2 })
        // Status read again and again (a deadline, not a window): a value published once a
        // second only ever rises by about a second of audio; a fresh one soon rises by less
        // than half that between two reads. In recording time, so a loaded machine that runs
        // the reads late only makes it take longer.
        var times: [Double] = []
        let fresh = waitUntil(timeout: 30) {
            guard let time = (try? client.call(.status) as StatusResult)?.currentTime else { return false }
            defer { if times.last != time { times.append(time) } }
            return times.last.map { time > $0 && time - $0 < 0.5 } ?? false
        }
        #expect(fresh, "status's time never rose by less than 0.5 s between two reads: \(times.suffix(40))")

        // A subscriber to the time: every 0.1 s. Published once a second, the values would
        // step by about a second of audio; every 0.1 s they step by about 0.1 s (the median:
        // a tick a loaded machine runs late makes one step longer, not the others).
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.currentTime]))
        var values: [Double] = []
        let deadline = Date().addingTimeInterval(30)
        while values.count < 11, Date() < deadline, let notification = try? watcher.nextNotification(timeout: 30) {
            guard case .currentTime(let time) = notification.value else { continue }
            values.append(time)
        }
        #expect(values.count == 11, "\(values)")
        // From the second value: the first may be the snapshot or the last tick before the change.
        let steps = zip(values.dropFirst(), values.dropFirst(2)).map { $1 - $0 }.sorted()
        #expect(!steps.isEmpty && steps[steps.count / 2] < 0.5, "the time stepped by \(steps): \(values)")
        let _: Recording = try client.call(.stop)
    }

    @Test func finalizingNeverReplacesAFileThatTookTheRecordingsName() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let client = try daemon.connect()
        let active: Recording = try client.call(.start, StartParams(name: "taken", format: .wav))
        #expect(waitUntil { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 0.2 })
        // Another program writes a file under the name the recording will get.
        let foreign = Data("someone else's file".utf8)
        try foreign.write(to: URL(fileURLWithPath: active.path))
        let stopped: Recording = try client.call(.stop)
        #expect(try Data(contentsOf: URL(fileURLWithPath: active.path)) == foreign, "the other file is untouched")
        #expect(stopped.path == daemon.recordings + "/taken-2.wav")
        #expect(stopped.name == "taken-2")
        #expect(try SoundFileReader(path: stopped.path).info.frames == stopped.frames)
        #expect(daemon.log.contains("recording's name was taken; saved under another"))
    }

    @Test func aSecondDaemonOnTheSameDirectoryExitsAtOnceAndTheFirstRecordingSurvives() throws {
        let server = try PulseServer()
        let first = try Daemon(device: TestDevices.paced(server))
        let client = try first.connect()
        let started: Recording = try client.call(.start, StartParams(name: "first", format: .wav))
        #expect(waitUntil { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 0.3 })

        // Another socket, the same recordings directory.
        let second = try Daemon(device: "null", recordings: first.recordings, waitForSocket: false)
        let status = second.process.wait(timeout: 20)
        #expect(status == 75, "exit status \(String(describing: status))")
        #expect(second.log.contains("pid \(first.process.pid)"), "\(second.log)")
        #expect(second.log.contains(first.recordings))
        #expect(FileManager.default.fileExists(atPath: started.partialPath), "the live .part was not touched")

        let stopped: Recording = try client.call(.stop)
        #expect(stopped.path == started.path)
        #expect(try SoundFileReader(path: started.path).info.frames == stopped.frames)
        let final: StatusResult = try client.call(.status)
        #expect(final.state.name == .finished)
        // Once the first is gone, a daemon may take the directory.
        #expect(first.terminate() == 0)
        let third = try Daemon(device: "null", recordings: first.recordings)
        let _: StatusResult = try third.connect().call(.status)
    }

    // MARK: Bounded waits

    @Test func aCaptureThreadStuckInTheDriverHoldsUpNeitherStopNorShutdown() throws {
        // The file plugin reads its input with a blocking read(2): from a FIFO whose writer
        // sends a second of audio and then nothing, capture blocks inside libasound for good.
        let fifo = inputs.file("stuck.fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        // The shell opens the FIFO itself: posix_spawn would block the test until a reader comes.
        let writer = try ChildProcess("/bin/sh", ["-c", "exec >\"$0\"; head -c 192000 /dev/urandom; exec sleep 600", fifo],
                                      environment: ProcessInfo.processInfo.environment)
        defer { writer.signal(SIGKILL) }
        let notify = try NotifyListener()
        let daemon = try Daemon(device: TestDevices.file(fifo), config: "[capture]\nstop_timeout = 1.0\n",
                                environment: ["NOTIFY_SOCKET": notify.path])
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "stuck", format: .wav, sampleRate: 48000, channels: 2))
        // All of the FIFO's second written: the thread is now blocked in read(2), not about to be.
        #expect(waitUntil(timeout: 20) { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) >= 1.0 })
        var told = notify.receive(for: 0.1).map(\.1)  // its queue holds ten datagrams: keep it read
        let begun = Date()
        let answer = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"stop"}"#, timeout: 30)
        let waited = Date().timeIntervalSince(begun)
        #expect(waited >= 1 && waited < 20, "stop took \(waited) s")  // gives up: it does not hang
        // Stop gave up on the thread: the file holds what was written, the failure is published.
        let result = try #require(answer["result"], "\(answer)")
        let recording = try WireCoding.decoder().decode(Recording.self, from: JSONSerialization.data(withJSONObject: result))
        let status: StatusResult = try client.call(.status)
        #expect(status.state.name == .failed)
        #expect(status.error?.code == .deviceLost)
        #expect(status.error?.message.contains("did not stop within 1.0 s") == true, "\(String(describing: status.error))")
        #expect(recording.path == started.path)
        #expect(recording.frames >= 24000)
        #expect(try SoundFileReader(path: started.path).info.frames == recording.frames)
        #expect(daemon.log.contains("recording failed"))
        // The daemon still serves and records. A second recording blocks at its first read
        // (the FIFO is empty); SIGTERM still finalizes it and exits well within TimeoutStopSec.
        let second: Recording = try client.call(.start, StartParams(name: "second", format: .wav, sampleRate: 48000, channels: 2))
        #expect(waitUntil { ((try? client.call(.status) as StatusResult)?.state.name) == .recording })
        told += notify.receive(for: 0.1).map(\.1)
        let exitBegun = Date()
        #expect(daemon.terminate(timeout: 30) == 0)
        #expect(Date().timeIntervalSince(exitBegun) < 20)
        #expect(FileManager.default.fileExists(atPath: second.path), "\(daemon.log)")
        #expect(!FileManager.default.fileExists(atPath: second.partialPath))
        // systemd is not asked for more time again and again while nothing progresses.
        told += notify.receive(for: 0.5).map(\.1)
        #expect(told.contains { $0.contains("STOPPING=1") }, "\(told)")
        #expect(told.filter { $0.contains("EXTEND_TIMEOUT_USEC") }.count <= 1, "\(told)")
    }
}
