import Glibc
import Logging
import NIOCore
import NIOEmbedded
import NIOPosix
@testable import RecdCommands
@testable import RecdServer
import RecdProtocol
import RecorderCore
import RecorderModel
import Testing

/// The dispatch table on its own, without a socket.
@Suite("method table")
struct MethodTableTests {
    @Test func onlyMethodsThatReadPublishedValuesOrTheConnectionRunInline() {
        let inline = Set(RecdProtocol.Method.allCases.filter { !MethodTable.handler(for: $0).blocking })
        // `tap.update` stores a number in the tap's counters. (`metrics` blocks: it waits until
        // its counters have taken in everything published before its statuses.)
        #expect(inline == [.status, .version, .subscribe, .unsubscribe, .tapUpdate])
    }

    @Test func statusReportsTheRecordersPublishedValues() {
        let recorder = Recorder(configuration: RecorderConfiguration(device: "null", recordingsDirectory: "/nonexistent"))
        let status = MethodTable.status(of: recorder)
        #expect(status.state == .idle)
        #expect(status.device == "null")
        #expect(status.recordingsDirectory == "/nonexistent")
        #expect(status.currentTime == 0)
    }

    @Test func everyParameterNameDecodes() throws {
        // A member the parser lets through must be one the handler's params type reads.
        let all: [String: JSONValue] = [
            "name": .string("x"), "format": .string("wav"), "sampleRate": .number(48000), "channels": .number(2),
            "bitDepth": .number(16), "quality": .string("high"), "bitRate": .number(64000), "duration": .number(1),
            "at": .string("2026-11-22T10:00:00Z"), "segmentLength": .number(3600), "alignToClock": .bool(true),
            "fileTemplate": .string("{name}/%Y%m%dT%H%M%SZ"), "preRoll": .number(2.5),
            "trigger": .object(["aboveFloor": .number(15), "highPass": .number(300), "hang": .number(1.5), "keepShort": .bool(true)]),
            "source": .string("default")]
        #expect(Set(all.keys) == RecdProtocol.Method.start.parameterNames)
        let start = try decodeParams(StartParams.self, .object(all))
        #expect(start?.name == "x")
        #expect(start?.trigger == TriggerParams(highPass: 300, aboveFloor: 15, hang: 1.5, keepShort: true))
        // The trigger's members are checked as the top level's are: an unknown one is refused by name.
        #expect(throws: RPCError.self) { try decodeParams(StartParams.self, .object(["trigger": .object(["hangover": .number(1)])])) }
        #expect(StartParams(trigger: TriggerParams(hang: -1)).rangeRefusal() == "trigger: 'hang' must be between 0 and 3600 seconds, not -1")
        #expect(StartParams(trigger: TriggerParams(highPass: 3000, lowPass: 300)).rangeRefusal()?.contains("must be below 'lowPass'") == true)
        // An aboveFloor alone makes a configured absolute trigger relative.
        #expect(TriggerParams(aboveFloor: 10).settings(over: TriggerSettings(threshold: -30)).threshold == nil)
        #expect(start?.duration == 1)
        #expect(start?.preRoll == 2.5)
        #expect(RecdProtocol.Method.listen.parameterNames == ["preRoll", "source"])
        #expect(try decodeParams(ListenParams.self, .object(["preRoll": .number(3)]))?.preRoll == 3)
        #expect(throws: RPCError.self) { try decodeParams(StartParams.self, .object(["sampleRate": .string("fast")])) }
        #expect(RecdProtocol.Method.tap.parameterNames == ["rate", "channels", "encoding", "preRoll", "client", "chunk", "source"])
        let tap = try decodeParams(TapParams.self, .object(["rate": .number(16000), "encoding": .string("f32le")]))
        #expect(tap == TapParams(rate: 16000, encoding: .f32le))
        let labelled = try decodeParams(TapParams.self, .object(["client": .string("recd-rtsp /live l16")]))
        #expect(labelled?.client == "recd-rtsp /live l16")
        #expect(TapParams(client: "a\u{1}b").rangeRefusal() == "'client' must be at most 64 bytes without control characters")
        #expect(throws: RPCError.self) { try decodeParams(TapParams.self, .object(["encoding": .string("s24le")])) }
    }

    /// Hearing the input is its own permission: control does not grant it; recd's own user and
    /// group, root, and the listed users and groups have it.
    @Test func tapUpdateTakesATapAndItsListenersWithinTheirRanges() throws {
        #expect(RecdProtocol.Method.tapUpdate.parameterNames == ["tap", "listeners"])
        #expect(RecdProtocol.Method.tapUpdate.permission == .tap)
        let update = try decodeParams(TapUpdateParams.self, .object(["tap": .number(3), "listeners": .number(2)]))
        #expect(update == TapUpdateParams(tap: 3, listeners: 2))
        #expect(update?.rangeRefusal() == nil)
        #expect(TapUpdateParams(tap: 0, listeners: 1).rangeRefusal()?.hasPrefix("'tap' must be") == true)
        #expect(TapUpdateParams(tap: 1, listeners: -1).rangeRefusal()?.hasPrefix("'listeners' must be") == true)
        #expect(TapUpdateParams(tap: 1, listeners: 100_001).rangeRefusal()?.hasPrefix("'listeners' must be") == true)
        #expect(TapUpdateParams(tap: 1, listeners: 100_000).rangeRefusal() == nil)
        // Over MQTT (no tap host): refused, as `tap` is.
        let recorder = Recorder(configuration: RecorderConfiguration(device: "null", recordingsDirectory: "/nonexistent"))
        let context = RequestContext(recorder: recorder, version: "test", subscriptions: nil)
        #expect(throws: RPCError.self) {
            _ = try MethodTable.handler(for: .tapUpdate).run(context, .object(["tap": .number(1), "listeners": .number(1)]))
        }
    }

    @Test func tapIsAPermissionOfItsOwn() {
        let policy = AccessPolicy(controlUIDs: [1001], tapUIDs: [1002], tapGIDs: [3000], daemonUID: 990, daemonGID: 990)
        func permissions(uid: uid_t, gid: gid_t) -> Set<Permission> { policy.permissions(of: PeerCredentials(pid: 1, uid: uid, gid: gid)) }
        #expect(permissions(uid: 0, gid: 0) == [.observe, .control, .tap])
        #expect(permissions(uid: 990, gid: 990) == [.observe, .control, .tap])
        #expect(permissions(uid: 1001, gid: 1001) == [.observe, .control], "control is not tap")
        #expect(permissions(uid: 1002, gid: 1002) == [.observe, .tap])
        #expect(permissions(uid: 1003, gid: 990) == [.observe, .tap], "recd's group")
        #expect(permissions(uid: 1004, gid: 3000) == [.observe, .tap], "a listed group")
        #expect(permissions(uid: 1005, gid: 1005) == [.observe])
        #expect(MethodTable.refusal(of: .tap, permissions: [.observe, .control]) != nil)
        #expect(MethodTable.refusal(of: .tap, permissions: [.observe, .tap]) == nil)
    }
}

/// Handlers run through the table with a connection on an embedded channel: no socket.
@Suite("method handlers")
struct MethodHandlerTests {
    let directory = "/tmp/recd-method-table-\(UInt32.random(in: 0...UInt32.max))"
    let recorder: Recorder
    let context: RequestContext

    init() async throws {
        recorder = Recorder(configuration: RecorderConfiguration(device: "null", recordingsDirectory: directory))
        let channel = EmbeddedChannel()
        let asyncChannel = try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
        let connectionContext = ConnectionContext(
            station: Station(recorder: recorder), version: "test", hubs: [TopicHub(recorder: recorder)], policy: AccessPolicy(),
            outboundLimit: 1 << 20, blocking: BlockingCalls(threads: 1), lookups: NIOThreadPool.singleton, logger: Logger(label: "test"))
        let connection = ClientConnection(channel: asyncChannel, peer: PeerCredentials(pid: 1, uid: 0, gid: 0),
                                          context: connectionContext)
        // Every topic's first snapshot, as the server awaits it before its first client.
        await connectionContext.hubs[0].drain()
        context = RequestContext(recorder: recorder, version: "test", subscriptions: connection)
    }

    func run(_ method: RecdProtocol.Method, _ params: JSONValue? = nil) -> Result<any Encodable & Sendable, RPCError> {
        Result { () throws(RPCError) in try MethodTable.handler(for: method).run(context, params) }
    }

    func error(_ method: RecdProtocol.Method, _ params: JSONValue? = nil) -> RPCError? {
        if case .failure(let error) = run(method, params) { return error }
        return nil
    }

    @Test func versionAndStatusAnswerFromTheRecorder() throws {
        let version = try #require(try run(.version).get() as? VersionResult)
        #expect(version.version == "test")
        let status = try #require(try run(.status).get() as? StatusResult)
        #expect(status.state == .idle)
    }

    @Test func subscribeSnapshotsEveryTopicAndUnsubscribeForgetsIt() throws {
        let subscribed = try #require(try run(.subscribe).get() as? SubscribeResult)
        // Every topic but the spectrum, which a client names: with it, every topic has a snapshot.
        #expect(Set(subscribed.snapshot.map(\.topic)) == Set(Topic.byDefault))
        let spectral = try #require(try run(.subscribe, .object(["topics": .array([.string("spectrum")])])).get() as? SubscribeResult)
        #expect(Set(subscribed.snapshot.map(\.topic) + spectral.snapshot.map(\.topic)) == Set(Topic.allCases))
        #expect(error(.subscribe, .object(["interval": .number(0)]))?.code == RPCErrorCode.invalidParams)
        #expect(error(.subscribe, .object(["topics": .array([])]))?.code == RPCErrorCode.invalidParams)
        let unsubscribe = JSONValue.object(["subscription": .string(subscribed.subscription)])
        #expect((try run(.unsubscribe, unsubscribe).get() as? UnsubscribeResult)?.subscription == subscribed.subscription)
        #expect(error(.unsubscribe, unsubscribe)?.code == RPCErrorCode.invalidParams, "only once")
    }

    @Test func recordingsAreLookedUpInTheRecordingsDirectory() throws {
        #expect(error(.recordingsInfo, .object(["name": .string("missing")]))?.code == RPCErrorCode.notFound)
        #expect(error(.recordingsInfo)?.code == RPCErrorCode.invalidParams, "params are required")
        #expect(error(.pause)?.data?.code == "invalidState")
    }
}

/// A request's `source` (issue 53): read in one place for every way in; a station of one takes
/// its name or none; several take a name, and say which there are otherwise.
@Suite("sources in requests")
struct SourceResolutionTests {
    let directory = "/tmp/recd-sources-\(UInt32.random(in: 0...UInt32.max))"

    func recorder(_ name: String) -> Recorder {
        Recorder(configuration: RecorderConfiguration(device: "null", recordingsDirectory: directory + "/" + name))
    }

    func run(_ context: RequestContext, _ method: RecdProtocol.Method, _ params: JSONValue?) -> RPCError? {
        if case .failure(let error) = Result(catching: { () throws(RPCError) in try MethodTable.handler(for: method).run(context, params) }) {
            return error
        }
        return nil
    }

    @Test func aStationOfOneTakesItsNameOrNone() throws {
        let context = RequestContext(station: Station(recorder: recorder("east"), name: "east"), version: "test", subscriptions: nil)
        #expect(run(context, .status, nil) == nil)
        #expect(run(context, .status, .object(["source": .string("east")])) == nil)
        let unknown = try #require(run(context, .status, .object(["source": .string("default")])))
        #expect(unknown.code == RPCErrorCode.unknownSource && unknown.data?.code == "unknownSource" && unknown.data?.sources == ["east"])
        #expect(unknown.message == "no source named 'default' (this station has: east)")
        #expect(run(context, .stop, .object(["source": .number(1)])) == .invalidParams("'source' must be a string"))
        // The station's methods take none: the parser refuses the member before a handler runs.
        #expect(!RecdProtocol.Method.version.parameterNames.contains("source"))
        #expect(!RecdProtocol.Method.devicesList.parameterNames.contains("source"))
        // The kept status answer stands for the only source.
        #expect(MethodTable.handler(for: .status).encoded?(context, ResultEncoder()) != nil)
    }

    @Test func aStationOfSeveralNeedsTheNameAndActsOnThatSource() throws {
        let east = recorder("east"), west = recorder("west")
        let station = Station(sources: [.init(name: "east", recorder: east), .init(name: "west", recorder: west)])
        let context = RequestContext(station: station, version: "test", subscriptions: nil)
        let ambiguous = try #require(run(context, .pause, nil))
        #expect(ambiguous.code == RPCErrorCode.ambiguousSource && ambiguous.data?.sources == ["east", "west"])
        #expect(MethodTable.handler(for: .status).encoded?(context, ResultEncoder()) == nil, "no kept answer stands in for the station")
        let named = try context.resolvingSource(.object(["source": .string("west")]), coversEverySource: false)
        #expect(named.source == "west" && named.recorder === west && named.sourceIndex == 1 && !named.everySource)
        #expect(try context.resolvingSource(.object(["source": .string("east"), "name": .string("x")]), coversEverySource: false).recorder === east)
        // `status` without a source is the station's: each source's, named, in order.
        let whole = try #require(try MethodTable.handler(for: .status).run(context, nil) as? StationStatusResult)
        #expect(whole.sources.map(\.source) == ["east", "west"])
        let one = try #require(try MethodTable.handler(for: .status).run(context, .object(["source": .string("west")])) as? StatusResult)
        #expect(one.source == "west")
        #expect(try context.resolvingSource(nil, coversEverySource: true).everySource)
        // Each source's own state answers: west's pause is refused by west (nothing records).
        #expect(run(context, .pause, .object(["source": .string("west")]))?.data?.code == "invalidState")
        #expect(run(context, .version, nil) == nil)
    }
}
