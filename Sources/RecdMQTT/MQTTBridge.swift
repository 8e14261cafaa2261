import Dispatch
import FoundationEssentials
import Logging
import Mosquitto
import RecdCommands
import RecdHooks
import RecdProtocol
import RecorderCore
import RecorderModel
import ServiceLifecycle
import NIOConcurrencyHelpers

/// Publishes what the station's recorders do to an MQTT broker, announces them to Home
/// Assistant, and (when allowed) obeys commands from the broker.
///
/// One connection for the station, with its last will on `<prefix>/availability`. A station
/// of one source publishes everything under the prefix, as before sources. A station of
/// several publishes each source's topics under `<prefix>/<source>/` with an availability of
/// its own (`offline` while its device is missing or lost), takes each source's commands on
/// its own topics, and keeps the station's (storage, clock, hooks) under the prefix.
///
/// - It only observes the recorder (`Observed` values, on a queue of its own) and calls its
///   public operations on another queue for commands: the capture path never waits for it.
/// - The network is libmosquitto's, on `MQTTClient`'s thread. A broker that is down costs one
///   log line; the client reconnects with a growing delay and everything retained is
///   published again on every connection.
/// - Telemetry (`time`, `levels`) is QoS 0 and skipped while earlier telemetry has not left
///   yet: a slow broker gets fewer updates, never a growing queue.
public final class MQTTBridge: Service, @unchecked Sendable {
    // @unchecked: everything mutable (`retained`, `connected`, `tokens`, `telemetryTimer`,
    // `outageReported`, `warningsFromHook`) is touched only on `queue`; `client` is set once in init;
    // `telemetryInFlight` is a lock box.

    public let configuration: MQTTBridgeConfiguration
    private let hooks: HookRunner?
    /// The station's topics (a station of one: every topic).
    private let topics: MQTTTopics
    /// Each source's recorder and topics, touched on `queue`.
    private let links: [SourceLink]
    private let discovery: HomeAssistantDiscovery
    /// recd's version, for the `version` command.
    private let version: String
    /// Where the bridge's start and stop wait (libmosquitto's thread, the queue's first turn).
    private let blocking: BlockingCalls
    /// Where commands run, in the order they arrived: they make blocking Recorder calls.
    private let commands: SerialLane
    private let logger: Logger
    private let queue = DispatchQueue(label: "recd.mqtt.bridge")
    private var client: MQTTClient!

    private var retained: [String: [UInt8]] = [:]
    private var connected = false
    private var everConnected = false
    private var outageReported = false
    private var tokens: [ObservationToken] = []
    private var lastHookWarning: String?
    private let telemetryInFlight = NIOLockedValueBox(TelemetryInFlight())

    /// Telemetry messages handed to libmosquitto that have not left yet. The network thread may
    /// report a message sent before `publish` has returned its id: such ids wait in `sentEarly`.
    struct TelemetryInFlight {
        var waiting: Set<Int32> = []
        var sentEarly: Set<Int32> = []

        mutating func published(_ id: Int32) {
            if sentEarly.remove(id) == nil { waiting.insert(id) }
        }

        mutating func sent(_ id: Int32) {
            guard waiting.remove(id) == nil else { return }
            // Also every state message's id: keep only the recent ones.
            if sentEarly.count >= 64 { sentEarly.removeAll() }
            sentEarly.insert(id)
        }
    }

    /// The station the commands act on.
    private let station: Station

    /// A source as the bridge publishes it. Its mutable members are touched only on `queue`.
    final class SourceLink: @unchecked Sendable {
        let name: String
        let recorder: Recorder
        let topics: MQTTTopics
        /// The source's own availability topic, on a station of several; nil on a station of one.
        let availability: String?
        var telemetryTimer: DispatchSourceTimer?
        /// The path `last_file` names (a re-dated file that is the last one replaces it).
        var lastFilePath: String?

        init(_ source: Station.Source, prefix: MQTTTopics, several: Bool) {
            name = source.name
            recorder = source.recorder
            topics = several ? prefix.source(source.name) : prefix
            availability = several ? topics.availability : nil
        }
    }

    public init(station: Station, configuration: MQTTBridgeConfiguration, hooks: HookRunner? = nil,
                version: String, blocking: BlockingCalls, logger: Logger) throws(MosquittoError) {
        self.station = station
        self.blocking = blocking
        self.commands = blocking.serialLane()
        self.configuration = configuration
        self.hooks = hooks
        let topics = MQTTTopics(prefix: configuration.topicPrefix)
        self.topics = topics
        let several = station.sources.count > 1
        links = station.sources.map { SourceLink($0, prefix: topics, several: several) }
        self.discovery = HomeAssistantDiscovery(configuration: configuration, version: version, sources: several ? station.names : [])
        self.version = version
        self.logger = logger
        let options = MQTTClientOptions(
            endpoint: configuration.endpoint, clientID: configuration.clientID, keepAlive: configuration.keepAlive,
            username: configuration.username, password: configuration.password, caFile: configuration.caFile,
            will: .init(topic: topics.availability, payload: Array("offline".utf8), qos: configuration.qos, retain: true))
        client = try MQTTClient(options: options) { [weak self] event in self?.handle(event) }
    }

    /// A station of one recorder, the implicit source.
    public convenience init(recorder: Recorder, sourceName: String = "default", configuration: MQTTBridgeConfiguration,
                            hooks: HookRunner? = nil, version: String, blocking: BlockingCalls, logger: Logger) throws(MosquittoError) {
        try self.init(station: Station(recorder: recorder, name: sourceName), configuration: configuration, hooks: hooks,
                      version: version, blocking: blocking, logger: logger)
    }

    // MARK: Service

    public func run() async throws {
        // `start` waits for the bridge's queue: not on the cooperative pool.
        do {
            try await blocking.run { [self] in start() }
        } catch {
            logger.error("MQTT bridge not started: recd is stopping", metadata: ["error": "\(error)"])
        }
        try? await gracefulShutdown()
        await stop()
    }

    /// Starts observing the recorders and connecting to the broker.
    public func start() {
        queue.sync {
            retained[topics.availability] = Array("online".utf8)
            for link in links { observe(link) }
            // The station's: the disk every source's folder is on, the system clock, the hooks.
            let first = links[0].recorder
            tokens.append(first.storage.subscribe(on: queue) { [weak self] storage in
                if let storage { self?.storageChanged(storage) }
            })
            tokens.append(first.clock.subscribe(on: queue) { [weak self] clock in
                guard let self else { return }
                setRetained(topics.clock, Self.encode(clock))
            })
            if let hooks {
                tokens.append(hooks.lastRun.subscribe(on: queue, delivery: .every, sendingCurrent: false) { [weak self] run in
                    if let run { self?.hookFinished(run) }
                })
            }
        }
        logger.info("MQTT bridge started", metadata: ["mqtt.broker": "\(configuration.endpoint)", "mqtt.prefix": "\(topics.prefix)"])
        client.start()
    }

    /// A source's topics follow its recorder.
    private func observe(_ link: SourceLink) {
        let recorder = link.recorder
        let topics = link.topics
        tokens.append(recorder.state.subscribe(on: queue, delivery: .every) { [weak self] state in self?.stateChanged(state, link) })
        tokens.append(recorder.listening.subscribe(on: queue, delivery: .every) { [weak self] listening in
            self?.setRetained(topics.listening, Array((listening == nil ? "OFF" : "ON").utf8))
            self?.availabilityChanged(link)
        })
        // Sound detected: ON from an event's opening to its end (retained), and each event as
        // it happens (not retained).
        tokens.append(recorder.triggerEvent.subscribe(on: queue, delivery: .every, sendingCurrent: false) { [weak self] event in
            guard let self, let event else { return }
            setRetained(topics.sound, Array((event.kind == .opened ? "ON" : "OFF").utf8))
            if connected { send(topics.event, Self.encode(event), retain: false) }
        })
        tokens.append(recorder.state.subscribe(on: queue) { [weak self] state in
            // No recording, no event open.
            if !state.isActive { self?.setRetained(topics.sound, Array("OFF".utf8)) }
        })
        tokens.append(recorder.error.subscribe(on: queue) { [weak self] _ in self?.publishProblem(link) })
        tokens.append(recorder.statistics.subscribe(on: queue) { [weak self] _ in self?.publishProblem(link) })
        tokens.append(recorder.warning.subscribe(on: queue) { [weak self] _ in self?.publishProblem(link) })
        tokens.append(observeFinalizedFiles(of: recorder, on: queue) { [weak self] file in self?.fileFinalized(file, link) })
        // A file re-dated once the clock was synchronized: the event, and `last_file` if it is that one.
        tokens.append(observeRedatedFiles(of: recorder, on: queue) { [weak self] file, redated in
            guard let self else { return }
            if connected { send(topics.redated, Self.encode(redated), retain: false, qos: 1) }
            if link.lastFilePath == redated.previousPath { fileFinalized(file, link) }
        })
    }

    /// A source's own availability (a station of several): `offline` while its device is
    /// missing or lost, recording or listening.
    private func availabilityChanged(_ link: SourceLink) {
        guard let topic = link.availability else { return }
        let waiting = link.recorder.state.value.name == .waitingForDevice || link.recorder.listening.value?.wait != nil
        setRetained(topic, Array((waiting ? "offline" : "online").utf8))
    }

    /// Publishes `offline` and disconnects cleanly (the broker keeps the will for a crash).
    public func stop() async {
        _ = try? await blocking.run { [self] in
            queue.sync {
                tokens.forEach { $0.cancel() }
                tokens = []
                for link in links {
                    stopTelemetry(link)
                    if let availability = link.availability { setRetained(availability, Array("offline".utf8)) }
                }
                setRetained(topics.availability, Array("offline".utf8))
            }
            client.stop()
        }
    }

    // MARK: Broker events (network thread → queue)

    private func handle(_ event: MQTTClient.Event) {
        switch event {
        case .published(let messageID):
            telemetryInFlight.withLockedValue { $0.sent(messageID) }
        case .message(let topic, let payload, _):
            if topic == configuration.discoveryPrefix + "/status" {
                if String(decoding: payload, as: UTF8.self) == "online" { queue.async { self.announce() } }
            } else if let link = links.first(where: { topic.hasPrefix($0.topics.prefix + "/command/") }) {
                let name = String(topic.dropFirst((link.topics.prefix + "/command/").count))
                commands.submit { self.execute(command: name, payload: payload, link: link) }
            }
        case .connected:
            queue.async { self.connectionUp() }
        case .connectionFailed(let reason), .disconnected(let reason):
            queue.async { self.connectionDown(reason) }
        }
    }

    private func connectionUp() {
        connected = true
        telemetryInFlight.withLockedValue { $0 = TelemetryInFlight() }
        if outageReported || everConnected {
            logger.notice("MQTT broker reachable again; state re-published", metadata: ["mqtt.broker": "\(configuration.endpoint)"])
        } else {
            logger.info("MQTT connected", metadata: ["mqtt.broker": "\(configuration.endpoint)"])
        }
        everConnected = true
        outageReported = false
        for link in links { try? client.subscribe(link.topics.commands, qos: configuration.qos) }
        if configuration.discovery != .off {
            try? client.subscribe(configuration.discoveryPrefix + "/status", qos: configuration.qos)
        }
        for (topic, payload) in retained.sorted(by: { $0.key < $1.key }) { send(topic, payload, retain: true) }
        announce()
    }

    private func connectionDown(_ reason: String) {
        connected = false
        telemetryInFlight.withLockedValue { $0 = TelemetryInFlight() }
        // One line per outage, however many attempts it takes.
        guard !outageReported else { return }
        outageReported = true
        logger.warning("MQTT broker unreachable; recording is unaffected, retrying with backoff",
                       metadata: ["mqtt.broker": "\(configuration.endpoint)", "mqtt.reason": "\(reason)"])
    }

    // MARK: Publishing (on queue)

    private func send(_ topic: String, _ payload: [UInt8], retain: Bool, qos: Int32? = nil) {
        do {
            try client.publish(topic: topic, payload: payload, qos: qos ?? configuration.qos, retain: retain)
        } catch {
            logger.debug("MQTT publish failed", metadata: ["mqtt.topic": "\(topic)", "error": "\(error)"])
        }
    }

    /// Remembers a retained value and publishes it if it changed and we are connected.
    private func setRetained(_ topic: String, _ payload: [UInt8]) {
        guard retained[topic] != payload else { return }
        retained[topic] = payload
        if connected { send(topic, payload, retain: true) }
    }

    private func announce() {
        guard connected else { return }
        for message in discovery.messages() {
            send(message.topic, Self.json(message.payload), retain: true)
        }
    }

    private func stateChanged(_ state: RecorderState, _ link: SourceLink) {
        let topics = link.topics
        setRetained(topics.state, Array(state.name.rawValue.utf8))
        setRetained(topics.recording, state.recording.map { Self.encode($0) } ?? Array("{}".utf8))
        setRetained(topics.time, Array(Self.seconds(link.recorder.currentTimeNow()).utf8))
        publishProblem(link)
        availabilityChanged(link)
        switch state {
        case .recording, .paused, .listening: startTelemetry(link)
        default: stopTelemetry(link)
        }
    }

    private func fileFinalized(_ file: FinalizedFile, _ link: SourceLink) {
        link.lastFilePath = file.path
        setRetained(link.topics.lastFile, Self.encode(LastFile(file, source: link.availability == nil ? nil : link.name)))
    }

    private func hookFinished(_ run: HookRun) {
        setRetained(topics.hook, Self.encode(run))
        lastHookWarning = run.outcome == .succeeded ? nil : "hook \(run.hook) for \(run.path): \(run.message)"
        links.forEach(publishProblem)
    }

    /// In whole MiB, so that a recording's steady writing publishes once per MiB, not per check.
    private func storageChanged(_ storage: StorageStatus) {
        setRetained(topics.storage, Self.encode(Storage(storage)))
    }

    private func publishProblem(_ link: SourceLink) {
        let recorder = link.recorder
        let statistics = recorder.statistics.value
        var warnings: [String] = []
        if statistics.xruns > 0 || statistics.framesLost > 0 {
            let gaps = statistics.gaps.filter { $0.error.code == .audioLost }.count
            warnings.append("\(statistics.xruns) overrun(s) in this recording, \(statistics.framesLost) frame(s) lost"
                            + (gaps > 0 ? " (\(gaps) gap(s): the recording went on in a new file)" : ""))
        }
        if let lastHookWarning { warnings.append(lastHookWarning) }
        if let warning = recorder.warning.value { warnings.append("\(warning.code.rawValue): \(warning.message)") }
        let error = recorder.error.value
        setRetained(link.topics.problem, Self.encode(Problem(problem: error != nil || !warnings.isEmpty, error: error, warnings: warnings)))
    }

    // MARK: Telemetry

    private func startTelemetry(_ link: SourceLink) {
        guard link.telemetryTimer == nil, configuration.telemetryInterval > 0 else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let interval = DispatchTimeInterval.nanoseconds(Int(configuration.telemetryInterval * 1e9))
        timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(50))
        timer.setEventHandler { [weak self] in self?.publishTelemetry(link) }
        timer.resume()
        link.telemetryTimer = timer
        // Levels are read at each telemetry tick: metered over the whole period, published no
        // more often (unless a client of the socket asks for more).
        link.recorder.setLevelsWanted(true, by: "mqtt", every: configuration.telemetryInterval)
    }

    private func stopTelemetry(_ link: SourceLink) {
        link.telemetryTimer?.cancel()
        link.telemetryTimer = nil
        link.recorder.setLevelsWanted(false, by: "mqtt")
    }

    private func publishTelemetry(_ link: SourceLink) {
        let topics = link.topics
        let time = Array(Self.seconds(link.recorder.currentTimeNow()).utf8)
        retained[topics.time] = time
        guard connected else { return }
        // Drop, don't queue: while the last tick's messages are still on their way, skip this one.
        guard telemetryInFlight.withLockedValue({ $0.waiting.isEmpty }) else { return }
        var messages: [(String, [UInt8], Bool)] = [(topics.time, time, true)]
        let levels = link.recorder.levels.value
        if !levels.channels.isEmpty {
            messages.append((topics.levels, Self.encode(LevelsMessage(levels)), false))
        }
        for (topic, payload, retain) in messages {
            // Never call into libmosquitto under our lock: its network thread holds its own
            // locks while it reports messages sent.
            if let id = try? client.publish(topic: topic, payload: payload, qos: 0, retain: retain) {
                telemetryInFlight.withLockedValue { $0.published(id) }
            }
        }
    }

    // MARK: Commands (on the blocking calls' serial lane)

    /// The methods MQTT takes as commands: every one of the socket's but those that act on a
    /// connection (MQTT publishes the recorder's topics itself; a tap's audio needs a socket).
    static let commandMethods = RecdProtocol.Method.allCases.filter { $0 != .subscribe && $0 != .unsubscribe && $0 != .tap && $0 != .tapUpdate && $0 != .metrics }
    static let commandNames = (commandMethods.map(\.rawValue) + ["switch", "listen_switch"]).joined(separator: ", ")

    /// What a client on the broker may do: everything when `[mqtt] control` is on (the broker's
    /// ACL decides who may publish commands at all), nothing otherwise: recordings' names and
    /// paths are not for everyone on a shared broker, and a flood of listings would occupy the
    /// command queue.
    private var permissions: Set<Permission> { configuration.controlAllowed ? [.observe, .control] : [] }

    /// A command is a request: read by the socket's parser into the same method and params,
    /// refused or run by the same table, after the same permission check. `switch` (Home
    /// Assistant's ON/OFF) is `start` or `stop`, by the state it finds.
    private func execute(command: String, payload: [UInt8], link: SourceLink) {
        let recorder = link.recorder
        var reply = Reply(command: command, ok: false)
        let text = String(decoding: payload, as: UTF8.self).trimmingWhitespace()
        let object: [String: JSONValue]? = text.isEmpty ? [:]
            : (try? WireCoding.decoder().decode(JSONValue.self, from: Data(payload))).flatMap { value in
                if case .object(let members) = value { members } else { nil }
            }
        reply.id = object?["id"]
        logger.info("MQTT command received", metadata: ["mqtt.command": "\(command)"])
        defer { send(link.topics.reply, Self.encode(reply), retain: false) }
        do throws(RPCError) {
            let method: RecdProtocol.Method
            var params: [String: JSONValue]? = object?.filter { $0.key != "id" }
            if command == "switch" {
                if let refusal = MethodTable.refusal(of: .start, permissions: permissions) { throw refusal }
                let active = recorder.state.value.isActive
                switch text {
                case "ON" where active: reply.recording = recorder.state.value.recording; reply.ok = true; return
                case "OFF" where !active: reply.ok = true; return
                case "ON": method = .start
                case "OFF": method = .stop
                default: throw .invalidParams("switch takes ON or OFF")
                }
                params = nil
            } else if command == "listen_switch" {
                // Home Assistant's listening switch: `listen` or `unlisten`, by what it finds.
                if let refusal = MethodTable.refusal(of: .listen, permissions: permissions) { throw refusal }
                let listening = recorder.listening.value != nil
                switch text {
                case "ON" where listening, "OFF" where !listening: reply.ok = true; return
                case "ON": method = .listen
                case "OFF": method = .unlisten
                default: throw .invalidParams("listen_switch takes ON or OFF")
                }
                params = nil
            } else {
                guard let named = RecdProtocol.Method(rawValue: command), Self.commandMethods.contains(named) else {
                    throw .methodNotFound(command)
                }
                method = named
                guard let params else { throw .invalidParams("\(command) takes a JSON object (or nothing)") }
                if let refusal = MethodTable.refusal(of: method, permissions: permissions) { throw refusal }
                // The socket's own parser checks the members against the method's.
                let request = JSONValue.object(["jsonrpc": .string(JSONRPC.version), "id": .number(0), "method": .string(command),
                                                "params": .object(params)])
                if case .invalid(let error, _, _) = RequestParser.item(request) { throw error }
            }
            // The topic names the source: a payload may repeat it, not name another.
            if method.takesSource {
                var members = params ?? [:]
                if let named = members["source"], named != .string(link.name) {
                    throw .invalidParams("this topic is source '\(link.name)'s; its commands act on it alone")
                }
                members["source"] = .string(link.name)
                params = members
            }
            let context = RequestContext(station: station, version: version, subscriptions: nil)
            let result = try MethodTable.perform(method, params: params.map(JSONValue.object), permissions: permissions,
                                                 context: context)
            reply.recording = switch result {
            case let recording as Recording: recording
            case let split as SplitResult: split.recording
            case let state as StateResult: state.state.recording
            default: nil
            }
            reply.result = (try? WireCoding.encoder().encode(result))
                .flatMap { try? WireCoding.decoder().decode(JSONValue.self, from: $0) }
            reply.ok = true
        } catch {
            reply.error = ReplyError(code: Self.replyCode(error), message: Self.replyMessage(error, command: command))
            if error.data?.code == "notPermitted" {
                logger.notice("MQTT command refused: remote control is off", metadata: ["mqtt.command": "\(command)"])
            }
        }
    }

    /// MQTT's reply codes: the recorder's own (`invalidState`, …) and `notFound` as on the
    /// socket; the protocol's errors under the names MQTT documents.
    static func replyCode(_ error: RPCError) -> String {
        switch error.data?.code {
        case "invalidParams"?, "invalidRequest"?, "parseError"?: "invalidPayload"
        case "methodNotFound"?: "unknownCommand"
        case "notPermitted"?: "notAllowed"
        case let code?: code
        case nil: "internalError"
        }
    }

    private static func replyMessage(_ error: RPCError, command: String) -> String {
        switch error.data?.code {
        case "methodNotFound"?: "no command '\(command)'; commands: \(commandNames)"
        case "notPermitted"?: "remote control over MQTT is off ([mqtt] control = false)"
        default: error.message
        }
    }

    // MARK: Payloads

    struct Reply: Encodable {
        var command: String
        var ok: Bool
        var id: JSONValue?
        /// The recording the command acted on (start, stop, pause, resume, split, switch).
        var recording: Recording?
        /// The method's result, as the socket's answer carries it.
        var result: JSONValue?
        var error: ReplyError?
    }

    struct ReplyError: Encodable {
        var code: String
        var message: String
    }

    struct Problem: Encodable {
        var problem: Bool
        var error: RecorderError?
        var warnings: [String]
    }

    struct Storage: Encodable {
        var free: Int64
        var total: Int64
        var recordings: Int64
        var recordingsCount: Int
        var minimumFree: Int64
        var retentionNext: String?

        init(_ storage: StorageStatus) {
            free = storage.freeBytes >> 20
            total = storage.totalBytes >> 20
            recordings = storage.recordingsBytes >> 20
            recordingsCount = storage.recordingsCount
            minimumFree = storage.minimumFreeBytes >> 20
            retentionNext = storage.retentionNext.first?.file
        }
    }

    struct LastFile: Encodable {
        var name: String
        var path: String
        var format: String
        var frames: Int64
        var duration: Double
        var startedAt: Date?
        var endedAt: Date?
        /// On a station of several sources: whose file it is.
        var source: String?

        init(_ file: FinalizedFile, source: String? = nil) {
            self.source = source
            name = file.name
            path = file.path
            format = file.format.rawValue
            frames = file.frames
            duration = file.duration
            startedAt = file.startedAt
            endedAt = file.endedAt
        }
    }

    struct LevelsMessage: Encodable {
        /// The loudest channel's values, dBFS.
        var peak: Float
        var average: Float
        var channels: [ChannelLevel]
        var clipCount: Int

        init(_ levels: Levels) {
            peak = levels.channels.map(\.peak).max() ?? -160
            average = levels.channels.map(\.average).max() ?? -160
            channels = levels.channels
            clipCount = levels.clipCount
        }
    }

    static func encode(_ value: some Encodable) -> [UInt8] {
        Array((try? WireCoding.encoder().encode(value)) ?? Data("{}".utf8))
    }

    static func json(_ object: [String: Any]) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(DiscoveryJSON(object))) ?? Data("{}".utf8))
    }

    static func seconds(_ value: Double) -> String { String(printf: "%.1f", value) }
}

/// Home Assistant's discovery payloads (nested dictionaries of strings, numbers, booleans and
/// arrays) as JSON.
private struct DiscoveryJSON: Encodable {
    let value: Any
    init(_ value: Any) { self.value = value }

    func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch value {
        case let text as String: try container.encode(text)
        case let flag as Bool: try container.encode(flag)
        case let number as Int: try container.encode(number)
        case let number as Double: try container.encode(number)
        case let array as [Any]: try container.encode(array.map(DiscoveryJSON.init))
        case let object as [String: Any]: try container.encode(object.mapValues(DiscoveryJSON.init))
        default: throw EncodingError.invalidValue(value, .init(codingPath: encoder.codingPath, debugDescription: "not JSON"))
        }
    }
}
