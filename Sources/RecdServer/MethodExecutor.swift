import ALSA
import Foundation
import RecdProtocol
import RecorderCore

/// Runs the methods that act on the recorder and the recordings directory. Calls block (the
/// recorder finalizes files synchronously), so connections call these off their event loop.
public struct MethodExecutor: Sendable {
    public let recorder: Recorder
    public let version: String

    public init(recorder: Recorder, version: String) {
        self.recorder = recorder
        self.version = version
    }

    var library: RecordingLibrary { RecordingLibrary(directory: recorder.configuration.recordingsDirectory) }

    /// Runs `method` with already-checked `params`; returns the result to encode.
    func execute(_ method: RecdProtocol.Method, params: JSONValue?) throws(RPCError) -> any Encodable & Sendable {
        switch method {
        case .status:
            return status()
        case .version:
            return VersionResult(version: version, protocolRevision: JSONRPC.protocolRevision)
        case .start:
            let params = try decode(StartParams.self, params) ?? StartParams()
            let settings = params.settings(over: recorder.configuration.defaultSettings)
            return try recorderCall { () throws(RecorderError) in
                try recorder.start(name: params.name, settings: settings, duration: params.duration, at: params.at)
            }
        case .pause:
            try recorderCall { () throws(RecorderError) in try recorder.pause() }
            return StateResult(state: recorder.state.value)
        case .resume:
            try recorderCall { () throws(RecorderError) in try recorder.resume() }
            return StateResult(state: recorder.state.value)
        case .stop:
            return try recorderCall { () throws(RecorderError) in try recorder.stop() }
        case .cancel:
            try recorderCall { () throws(RecorderError) in try recorder.cancel() }
            return StateResult(state: recorder.state.value)
        case .recordingsList:
            return RecordingsListResult(recordings: library.list().map(Self.file))
        case .recordingsInfo:
            let params = try required(RecordingNameParams.self, params)
            return Self.file(try find(params.name))
        case .recordingsDelete:
            let params = try required(RecordingNameParams.self, params)
            let entry = try find(params.name)
            try recorderCall { () throws(RecorderError) in try library.delete(entry) }
            return DeleteResult(deleted: entry.file)
        case .recordingsRename:
            let params = try required(RenameParams.self, params)
            let entry = try find(params.from)
            // "meeting.flac" as the new name of a FLAC file means "meeting".
            let suffix = "." + entry.format.fileExtension
            let newName = params.to.hasSuffix(suffix) ? String(params.to.dropLast(suffix.count)) : params.to
            let renamed = try recorderCall { () throws(RecorderError) in try library.rename(entry, to: newName) }
            return Self.file(renamed)
        case .devicesList:
            let devices = CapturePCM.captureDevices().map {
                DeviceInfo(name: $0.name, description: $0.description, direction: $0.direction)
            }
            return DevicesResult(current: recorder.configuration.device, devices: devices)
        case .subscribe, .unsubscribe:
            throw RPCError(code: RPCErrorCode.internalError, message: "\(method.rawValue) is handled by the connection",
                           data: .init(code: "internalError"))
        }
    }

    func status() -> StatusResult {
        let configuration = recorder.configuration
        let state = recorder.state.value
        return StatusResult(
            state: state, currentTime: recorder.currentTime.value, error: recorder.error.value,
            levels: recorder.levels.value, recording: recorder.recording.value,
            device: state.isActive ? (state.recording?.device ?? configuration.device) : configuration.device,
            statistics: recorder.statistics.value, settings: configuration.defaultSettings,
            recordingsDirectory: configuration.recordingsDirectory)
    }

    private func find(_ name: String) throws(RPCError) -> RecordingLibrary.Entry {
        do {
            return try library.find(name)
        } catch {
            switch error {
            case .notFound: throw .notFound(error.description)
            case .ambiguous: throw .invalidParams(error.description)
            }
        }
    }

    private func recorderCall<T>(_ body: () throws(RecorderError) -> T) throws(RPCError) -> T {
        do {
            return try body()
        } catch {
            throw Self.rpcError(error)
        }
    }

    static func rpcError(_ error: RecorderError) -> RPCError {
        RPCError(code: RPCErrorCode.recorderError, message: error.message, data: .init(code: error.code.rawValue))
    }

    static func file(_ entry: RecordingLibrary.Entry) -> RecordingFile {
        RecordingFile(name: entry.name, file: entry.file, path: entry.path, format: entry.format,
                      duration: entry.info.duration, frames: entry.info.frames, sampleRate: entry.info.sampleRate,
                      channels: entry.info.channels, size: entry.size, modified: entry.modified)
    }

    private func required<T: Decodable>(_ type: T.Type, _ params: JSONValue?) throws(RPCError) -> T {
        guard let value = try decode(type, params) else { throw .invalidParams("params are required") }
        return value
    }
}

/// Decodes params that passed the member check into their typed form.
func decode<T: Decodable>(_ type: T.Type, _ params: JSONValue?) throws(RPCError) -> T? {
    guard let params, params != .null else { return nil }
    do {
        let data = try WireCoding.encoder().encode(params)
        return try WireCoding.decoder().decode(T.self, from: data)
    } catch let error as DecodingError {
        throw .invalidParams(describe(error))
    } catch {
        throw .invalidParams("\(error)")
    }
}

/// A DecodingError in one sentence naming the member and, for enumerations, the values allowed.
func describe(_ error: DecodingError) -> String {
    func path(_ context: DecodingError.Context) -> String {
        var text = ""
        for key in context.codingPath {
            if let index = key.intValue { text += "[\(index)]" } else { text += (text.isEmpty ? "" : ".") + key.stringValue }
        }
        return text.isEmpty ? "params" : "'" + text + "'"
    }
    func member(_ context: DecodingError.Context) -> String? {
        context.codingPath.last(where: { $0.intValue == nil })?.stringValue
    }
    /// What a member must be, by name, when the decoder's own words would name Swift types.
    func expectation(_ context: DecodingError.Context) -> String? {
        switch member(context) {
        case "format": "one of " + AudioFileFormat.allCases.map(\.rawValue).joined(separator: ", ")
        case "quality": "one of " + RecordingQuality.allCases.map(\.rawValue).joined(separator: ", ")
        case "topics": "a list of topics: " + Topic.allCases.map(\.rawValue).joined(separator: ", ")
        case "sampleRate", "channels", "bitDepth", "bitRate": "an integer"
        case "duration", "interval": "a number of seconds"
        case "at": "an RFC 3339 time (2026-11-21T09:30:00Z) or seconds since 1970"
        case "name", "from", "to", "subscription": "a string"
        default: nil
        }
    }
    switch error {
    case .typeMismatch(let type, let context):
        return "\(path(context)) must be \(expectation(context) ?? describeType(type))"
    case .valueNotFound(let type, let context):
        return "\(path(context)) must be \(expectation(context) ?? describeType(type)), not null"
    case .keyNotFound(let key, _):
        return "'\(key.stringValue)' is required"
    case .dataCorrupted(let context):
        if let expected = expectation(context) { return "\(path(context)) must be \(expected)" }
        return "\(path(context)): \(context.debugDescription)"
    @unknown default:
        return "\(error)"
    }
}

private func describeType(_ type: Any.Type) -> String {
    switch type {
    case is String.Type: "a string"
    case is Int.Type, is Int64.Type, is UInt64.Type: "an integer"
    case is Double.Type: "a number"
    case is Bool.Type: "true or false"
    default: "\(type)"
    }
}
