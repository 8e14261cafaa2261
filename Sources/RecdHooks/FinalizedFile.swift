import Foundation
import RecorderCore
import RecorderModel

/// A file recd has finished writing: complete, under its final name, never touched again.
public struct FinalizedFile: Sendable, Equatable, Codable {
    public var id: String
    public var path: String
    /// The file name without extension.
    public var name: String
    public var format: AudioFileFormat
    public var frames: Int64
    public var sampleRate: Int
    public var channels: Int
    public var startedAt: Date?
    public var endedAt: Date?

    public init(id: String, path: String, name: String, format: AudioFileFormat, frames: Int64, sampleRate: Int,
                channels: Int, startedAt: Date?, endedAt: Date?) {
        self.id = id
        self.path = path
        self.name = name
        self.format = format
        self.frames = frames
        self.sampleRate = sampleRate
        self.channels = channels
        self.startedAt = startedAt
        self.endedAt = endedAt
    }

    public init(_ recording: Recording) {
        self.init(id: recording.id, path: recording.path, name: recording.name, format: recording.format,
                  frames: recording.frames, sampleRate: recording.sampleRate, channels: recording.channels,
                  startedAt: recording.startedAt, endedAt: recording.endedAt)
    }

    /// Seconds of audio.
    public var duration: Double { sampleRate > 0 ? Double(frames) / Double(sampleRate) : 0 }
}

/// Calls `handler` once for every file the recorder finalizes, on a queue of the subscription's own.
///
/// The one place that decides what "a file was finalized" means. Today that is a recording's end
/// (finished, or failed after capture began with the file kept under its name); when the
/// recorder closes segments, point this at its segment-closed event instead.
public func observeFinalizedFiles(of recorder: Recorder,
                                  _ handler: @escaping @Sendable (FinalizedFile) -> Void) -> ObservationToken {
    // Every state, in order: a `finished` must never be coalesced away by the next `preparing`.
    recorder.state.subscribe(delivery: .every, sendingCurrent: false) { state in
        switch state {
        case .finished(let recording):
            handler(FinalizedFile(recording))
        case .failed(let recording?, _) where recording.startedAt != nil
            && FileManager.default.fileExists(atPath: recording.path):
            handler(FinalizedFile(recording))
        default:
            break
        }
    }
}
