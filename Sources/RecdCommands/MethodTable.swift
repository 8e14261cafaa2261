import FoundationEssentials
import RecdProtocol
import RecorderCore
import SystemPackage

/// What a method acts on for the connection that asked: its subscriptions. The socket's
/// connections have them; a way in without subscriptions (MQTT publishes its own topics)
/// passes none, and `subscribe` is refused there.
public protocol SubscriptionHost: Sendable {
    /// `sources`: the indices in the station of the sources it follows.
    func subscribe(_ request: SubscribeParams, sources: [Int]) throws(RPCError) -> SubscribeResult
    func unsubscribe(_ request: UnsubscribeParams) throws(RPCError) -> UnsubscribeResult
}

/// A way in that can carry audio (the socket's connections): `tap` turns it into a stream;
/// `tap.update` comes from the same process, which the connection's credentials tell.
public protocol TapHost: Sendable {
    func openTap(_ params: TapParams, recorder: Recorder) throws(RPCError) -> TapResult
    func updateTap(_ params: TapUpdateParams, recorder: Recorder) throws(RPCError) -> TapStatus
}

/// The daemon's metrics in Prometheus's text format (RecdMetrics), for `metrics`.
public protocol MetricsSource: Sendable {
    /// `statuses`: each source's, in the station's order. Every value published before they
    /// were taken is counted (it may wait for that: a blocking call).
    func exposition(statuses: [StatusResult]) -> String
}

/// What a method handler works with: the station, the source the request names (its
/// `source`, resolved by `MethodTable` before the handler runs), and whoever asked.
public struct RequestContext: Sendable {
    public let station: Station
    /// The source's name and recorder: the one `source` names, or the only one (the first
    /// when `everySource`).
    public private(set) var source: String
    public private(set) var recorder: Recorder
    /// Its index in the station's sources.
    public private(set) var sourceIndex = 0
    /// A method that covers every source (`Method.coversEverySource`) asked without one on a
    /// station of several.
    public private(set) var everySource = false
    public let version: String
    /// nil for a way in without subscriptions.
    public let subscriptions: (any SubscriptionHost)?
    /// nil for a way in that cannot carry audio.
    public let taps: (any TapHost)?
    /// nil where the daemon keeps no metrics (a test's context).
    public let metrics: (any MetricsSource)?

    public init(station: Station, version: String, subscriptions: (any SubscriptionHost)?, taps: (any TapHost)? = nil,
                metrics: (any MetricsSource)? = nil) {
        self.station = station
        source = station.sources[0].name
        recorder = station.sources[0].recorder
        self.version = version
        self.subscriptions = subscriptions
        self.taps = taps
        self.metrics = metrics
    }

    /// For a station of one recorder (tests, and the implicit source).
    public init(recorder: Recorder, version: String, subscriptions: (any SubscriptionHost)?, taps: (any TapHost)? = nil,
                metrics: (any MetricsSource)? = nil) {
        self.init(station: Station(recorder: recorder), version: version, subscriptions: subscriptions, taps: taps, metrics: metrics)
    }

    /// This context for the source `params` names (`source`), or the only one; for a method
    /// that covers every source, all of them when none is named.
    func resolvingSource(_ params: JSONValue?, coversEverySource: Bool) throws(RPCError) -> RequestContext {
        var name: String?
        if case .object(let members) = params, let member = members["source"] {
            guard case .string(let text) = member else { throw .invalidParams("'source' must be a string") }
            name = text
        }
        var context = self
        if name == nil, coversEverySource, station.sources.count > 1 {
            context.everySource = true
            return context
        }
        let found = try station.source(named: name)
        context.source = found.name
        context.recorder = found.recorder
        context.sourceIndex = station.sources.firstIndex { $0.name == found.name } ?? 0
        return context
    }
}

/// How one method is answered.
public struct MethodHandler: Sendable {
    public typealias Body = @Sendable (RequestContext, JSONValue?) throws(RPCError) -> any Encodable & Sendable

    /// May block (finalizing a file, reading a directory, opening a device): run on a thread
    /// that may wait (the server's thread pool, MQTT's command queue), never on an event loop
    /// or the cooperative pool.
    public let blocking: Bool
    /// Runs the method with params that passed `RequestParser`'s member check.
    public let run: Body
    /// `run`'s result already encoded, for a method asked for again and again (`status`):
    /// skips boxing the result and casting it back to find the kept answer. Nil when `run`
    /// would fail, or for methods without one.
    public var encoded: (@Sendable (RequestContext, ResultEncoder) -> String?)? = nil

    static func inline(_ run: @escaping Body) -> MethodHandler { MethodHandler(blocking: false, run: run) }
    static func blocking(_ run: @escaping Body) -> MethodHandler { MethodHandler(blocking: true, run: run) }
}

/// The one place a method name becomes an action, for every way in: the socket's connections
/// and MQTT's commands dispatch here, after the same permission check (`refusal`). The
/// handlers are an exhaustive `switch` over `Method`: a method without one does not compile.
public enum MethodTable {
    /// The handler for `method`.
    public static func handler(for method: RecdProtocol.Method) -> MethodHandler { handlers[method]! }

    /// nil if `permissions` allow `method`, else the error that refuses it.
    public static func refusal(of method: RecdProtocol.Method, permissions: Set<Permission>) -> RPCError? {
        permissions.contains(method.permission) ? nil
            : .permissionDenied(method: method.rawValue, permission: method.permission.rawValue)
    }

    /// Checks the permission and runs the method, blocking if it blocks: for a way in that is
    /// itself on a thread that may wait (MQTT's command queue).
    public static func perform(_ method: RecdProtocol.Method, params: JSONValue?, permissions: Set<Permission>,
                               context: RequestContext) throws(RPCError) -> any Encodable & Sendable {
        if let refusal = refusal(of: method, permissions: permissions) { throw refusal }
        return try handler(for: method).run(context, params)
    }

    /// Built once from `makeHandler`, so that a request costs a lookup.
    private static let handlers = Dictionary(uniqueKeysWithValues: RecdProtocol.Method.allCases.map { ($0, sourced($0, makeHandler($0))) })

    /// A method that acts on a source runs with the source its params name (or the only one)
    /// as the context's recorder: the one place a `source` is read, for every way in. The kept
    /// answer (`encoded`) is for a request without params only.
    private static func sourced(_ method: RecdProtocol.Method, _ handler: MethodHandler) -> MethodHandler {
        guard method.takesSource else { return handler }
        let run: MethodHandler.Body = { context, params throws(RPCError) in
            try handler.run(try context.resolvingSource(params, coversEverySource: method.coversEverySource), params)
        }
        var sourced = MethodHandler(blocking: handler.blocking, run: run)
        if let encoded = handler.encoded {
            sourced.encoded = { @Sendable context, results in context.station.sources.count == 1 ? encoded(context, results) : nil }
        }
        return sourced
    }

    private static func makeHandler(_ method: RecdProtocol.Method) -> MethodHandler {
        switch method {
        case .status:
            MethodHandler(blocking: false, run: { context, _ throws(RPCError) in
                let station = context.station
                guard !context.everySource else { return StationStatusResult(sources: station.sources.map { status(of: $0, in: station) }) }
                return status(of: station.sources[context.sourceIndex], in: station)
            }, encoded: { context, results in results.encode(status: status(of: context.recorder)) })
        case .metrics:
            .blocking { context, _ throws(RPCError) in
                guard let metrics = context.metrics else { throw .methodNotFound("metrics") }
                return MetricsResult(text: metrics.exposition(statuses: context.station.sources.map { status(of: $0.recorder) }))
            }
        case .version:
            .inline { context, _ throws(RPCError) in
                VersionResult(version: context.version, protocolRevision: JSONRPC.protocolRevision)
            }
        case .subscribe:
            .inline { context, params throws(RPCError) in
                try subscriptions(of: context).subscribe(try decodeParams(SubscribeParams.self, params) ?? SubscribeParams(),
                                                         sources: context.everySource ? Array(context.station.sources.indices) : [context.sourceIndex])
            }
        case .unsubscribe:
            .inline { context, params throws(RPCError) in
                try subscriptions(of: context).unsubscribe(try required(UnsubscribeParams.self, params))
            }
        case .start:
            .blocking { context, params throws(RPCError) in
                let recorder = context.recorder
                let params = try decodeParams(StartParams.self, params) ?? StartParams()
                if let refusal = params.rangeRefusal() { throw .invalidParams(refusal) }
                let settings = params.settings(over: recorder.configuration.defaultSettings)
                let segments = params.segments(over: recorder.configuration.segments)
                return try recorderCall { () throws(RecorderError) in
                    try recorder.start(name: params.name, settings: settings, duration: params.duration, at: params.at,
                                       segments: segments, preRoll: params.preRoll,
                                       trigger: params.trigger?.settings(over: context.recorder.configuration.trigger))
                }
            }
        case .pause:
            .blocking { context, _ throws(RPCError) in
                try recorderCall { () throws(RecorderError) in try context.recorder.pause() }
                return StateResult(state: context.recorder.state.value)
            }
        case .resume:
            .blocking { context, _ throws(RPCError) in
                try recorderCall { () throws(RecorderError) in try context.recorder.resume() }
                return StateResult(state: context.recorder.state.value)
            }
        case .stop:
            .blocking { context, _ throws(RPCError) in
                let recorder = context.recorder
                if case .listening = recorder.state.value {
                    // Nothing records: stop ends listening (`unlisten`).
                    let last = try recorderCall { () throws(RecorderError) in try recorder.unlisten() }
                    return ListenResult(state: recorder.state.value, listening: last) as any Encodable & Sendable
                }
                return try recorderCall { () throws(RecorderError) in try recorder.stop() }
            }
        case .listen:
            .blocking { context, params throws(RPCError) in
                let params = try decodeParams(ListenParams.self, params) ?? ListenParams()
                if let refusal = params.rangeRefusal() { throw .invalidParams(refusal) }
                let status = try recorderCall { () throws(RecorderError) in try context.recorder.listen(preRoll: params.preRoll) }
                return ListenResult(state: context.recorder.state.value, listening: status)
            }
        case .unlisten:
            .blocking { context, _ throws(RPCError) in
                let last = try recorderCall { () throws(RecorderError) in try context.recorder.unlisten() }
                return ListenResult(state: context.recorder.state.value, listening: last)
            }
        case .tap:
            .blocking { context, params throws(RPCError) in
                let params = try decodeParams(TapParams.self, params) ?? TapParams()
                if let refusal = params.rangeRefusal() { throw .invalidParams(refusal) }
                guard let host = context.taps else {
                    throw .invalidRequest("taps are for socket connections: audio cannot go over MQTT")
                }
                return try host.openTap(params, recorder: context.recorder)
            }
        case .tapUpdate:
            .inline { context, params throws(RPCError) in
                let params = try decodeParams(TapUpdateParams.self, params) ?? TapUpdateParams(tap: 0)
                if let refusal = params.rangeRefusal() { throw .invalidParams(refusal) }
                guard let host = context.taps else {
                    throw .invalidRequest("taps are for socket connections: audio cannot go over MQTT")
                }
                // Ids are the station's: the tap is on whichever source has it.
                let recorder = context.station.sources.first { $0.recorder.currentTaps().contains { $0.id == params.tap } }?.recorder
                return try host.updateTap(params, recorder: recorder ?? context.recorder)
            }
        case .cancel:
            .blocking { context, _ throws(RPCError) in
                try recorderCall { () throws(RecorderError) in try context.recorder.cancel() }
                return StateResult(state: context.recorder.state.value)
            }
        case .split:
            .blocking { context, _ throws(RPCError) in
                let closed = try recorderCall { () throws(RecorderError) in try context.recorder.split() }
                return SplitResult(closed: closed, recording: context.recorder.recording.value)
            }
        case .recordingsList:
            .blocking { context, _ throws(RPCError) in
                let entries = library(of: context.recorder).list()
                return RecordingsListResult(recordings: entries.map(file), storage: context.recorder.storageStatus(listing: entries))
            }
        case .recordingsInfo:
            .blocking { context, params throws(RPCError) in
                let params = try required(RecordingNameParams.self, params)
                return file(try find(params.name, in: library(of: context.recorder)))
            }
        case .recordingsDelete:
            .blocking { context, params throws(RPCError) in
                let params = try required(RecordingNameParams.self, params)
                // On the recorder's queue: no recording starts or finishes in between.
                return try context.recorder.withRecordingsDirectory { library, active throws(RPCError) in
                    try refuseIfBeingRecorded(params.name, active: active)
                    let entry = try find(params.name, in: library)
                    try recorderCall { () throws(RecorderError) in try library.delete(entry) }
                    context.recorder.recordingFileMoved(from: entry.path, to: nil)
                    context.recorder.requestRetentionPass()
                    return DeleteResult(deleted: entry.file)
                }
            }
        case .recordingsRename:
            .blocking { context, params throws(RPCError) in
                let params = try required(RenameParams.self, params)
                return try context.recorder.withRecordingsDirectory { library, active throws(RPCError) in
                    try refuseIfBeingRecorded(params.from, active: active)
                    let entry = try find(params.from, in: library)
                    // "meeting.flac" as the new name of a FLAC file means "meeting".
                    let suffix = "." + entry.format.fileExtension
                    let newName = params.to.hasSuffix(suffix) ? String(params.to.dropLast(suffix.count)) : params.to
                    if newName + suffix == active {
                        throw rpcError(RecorderError(.invalidSettings,
                            "'\(newName + suffix)' is the name of the recording in progress; choose another name"))
                    }
                    let renamed = try recorderCall { () throws(RecorderError) in try library.rename(entry, to: newName) }
                    context.recorder.recordingFileMoved(from: entry.path, to: renamed.path)
                    return file(renamed)
                }
            }
        case .devicesList:
            .blocking { context, _ throws(RPCError) in
                let devices = SoundDevices.captureDevices().map {
                    DeviceInfo(name: $0.name, description: $0.description, direction: $0.direction, card: $0.card)
                }
                let configuration = context.recorder.configuration
                let open = context.recorder.holdsDevice
                let cards = SoundDevices.cards(configured: configuration.device, roots: configuration.systemRoots).map {
                    SoundCardInfo(index: $0.index, id: $0.id, name: $0.name, stableDevice: $0.stableIDs.recommended, usb: $0.usb,
                                  serial: $0.serial, port: $0.port, serialDevice: $0.stableIDs.serial, portDevice: $0.stableIDs.port,
                                  links: $0.stableIDs.links, alsaNames: $0.alsaNames, configured: $0.configured,
                                  inUse: $0.configured && open)
                }
                return DevicesResult(current: configuration.device, devices: devices, cards: cards,
                                     warning: SoundDevices.deviceWarning(configuration.device, roots: configuration.systemRoots))
            }
        }
    }

    private static func subscriptions(of context: RequestContext) throws(RPCError) -> any SubscriptionHost {
        guard let host = context.subscriptions else {
            throw .invalidRequest("subscriptions are for socket connections; MQTT publishes the recorder's topics itself")
        }
        return host
    }

    /// A source's status: named (`source`) on a station of several.
    public static func status(of source: Station.Source, in station: Station) -> StatusResult {
        var result = status(of: source.recorder)
        if station.sources.count > 1 { result.source = source.name }
        return result
    }

    public static func status(of recorder: Recorder) -> StatusResult {
        let configuration = recorder.configuration
        let state = recorder.state.value
        let recording = recorder.recording.value
        let lastSegment = recorder.closedSegment.value
        // The figures after what they count: a segment after a gap is published once the gap
        // is counted, and a closed segment once it is counted, so a status that names either
        // counts it too.
        let figures = recorder.currentFigures()
        return StatusResult(
            state: state, currentTime: figures.time, error: recorder.error.value,
            levels: recorder.currentLevels(), recording: recording,
            device: state.isActive ? (state.recording?.device ?? configuration.device) : configuration.device,
            statistics: figures.statistics, settings: configuration.defaultSettings,
            recordingsDirectory: configuration.recordingsDirectory, warning: recorder.warning.value,
            lastSegment: lastSegment, storage: recorder.storage.value,
            listening: recorder.currentListeningStatus(), taps: Optional(recorder.currentTaps()).flatMap { $0.isEmpty ? nil : $0 },
            trigger: recorder.currentTriggerStatus(), schedule: recorder.currentScheduleStatus(),
            writeBuffer: recorder.currentWriteBuffer(), clock: recorder.currentClockStatus())
    }

    /// `recordings.delete` and `.rename` leave the file being recorded alone.
    private static func refuseIfBeingRecorded(_ name: String, active: String?) throws(RPCError) {
        if let active, names(name, active) {
            throw rpcError(RecorderError(.invalidState, "'\(active)' is being recorded; stop it first"))
        }
    }

    /// Whether `name`, as `recordings.*` methods take names, may mean the recording in progress
    /// (`take.wav`): `take.wav`, `take` or `take.wav.part`.
    private static func names(_ name: String, _ active: String) -> Bool {
        name == active || name == active + ".part" || name == Self.withoutExtension(active)
    }

    private static func withoutExtension(_ name: String) -> String {
        var path = FilePath(name)
        path.extension = nil
        return path.string
    }

    private static func library(of recorder: Recorder) -> RecordingLibrary {
        RecordingLibrary(directory: recorder.configuration.recordingsDirectory)
    }

    private static func find(_ name: String, in library: RecordingLibrary) throws(RPCError) -> RecordingLibrary.Entry {
        do {
            return try library.find(name)
        } catch {
            switch error {
            case .notFound: throw .notFound(error.description)
            case .ambiguous: throw .invalidParams(error.description)
            }
        }
    }

    static func recorderCall<T>(_ body: () throws(RecorderError) -> T) throws(RPCError) -> T {
        do {
            return try body()
        } catch {
            throw rpcError(error)
        }
    }

    public static func rpcError(_ error: RecorderError) -> RPCError {
        RPCError(code: RPCErrorCode.recorderError, message: error.message, data: .init(code: error.code.rawValue))
    }

    static func file(_ entry: RecordingLibrary.Entry) -> RecordingFile {
        RecordingFile(name: entry.name, file: entry.file, path: entry.path, format: entry.format,
                      duration: entry.info.duration, frames: entry.info.frames, sampleRate: entry.info.sampleRate,
                      channels: entry.info.channels, size: entry.size, modified: entry.modified,
                      session: entry.segment?.recordingId, sessionName: entry.segment?.name, segment: entry.segment?.index,
                      startedAt: entry.startedAt, startClock: entry.startClock, end: entry.segment?.endReason)
    }

    private static func required<T: Decodable>(_ type: T.Type, _ params: JSONValue?) throws(RPCError) -> T {
        guard let value = try decodeParams(type, params) else { throw .invalidParams("params are required") }
        return value
    }
}
