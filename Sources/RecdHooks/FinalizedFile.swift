import Dispatch
import FoundationEssentials
import RecorderCore
import RecorderModel
import SystemPackage

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
    /// For a file re-dated once the system clock was synchronized (`on_file_redated`): the path
    /// and the start it had.
    public var previousPath: String?
    public var previousStartedAt: Date?
    /// The station's source it was recorded from (`[[source]]`'s name, or `default`).
    public var source: String?

    public init(id: String, path: String, name: String, format: AudioFileFormat, frames: Int64, sampleRate: Int,
                channels: Int, startedAt: Date?, endedAt: Date?, previousPath: String? = nil, previousStartedAt: Date? = nil,
                source: String? = nil) {
        self.source = source
        self.previousPath = previousPath
        self.previousStartedAt = previousStartedAt
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

/// Calls `handler` once for every finished file the recorder re-dates once the system clock is
/// synchronized (`Recorder.redatedFile`), with the file as it is now and where it was before.
public func observeRedatedFiles(of recorder: Recorder, on queue: DispatchQueue? = nil,
                                _ handler: @escaping @Sendable (FinalizedFile, RedatedFile) -> Void) -> ObservationToken {
    recorder.redatedFile.subscribe(on: queue, delivery: .every, sendingCurrent: false) { redated in
        guard let redated else { return }
        let segment = redated.segment
        let recording = recorder.recording.value.flatMap { $0.id == segment.recordingId ? $0 : nil }
        guard let format = recording?.format ?? AudioFileFormat(fileExtension: FilePath(segment.path).extension ?? "") else { return }
        handler(FinalizedFile(id: segment.recordingId, path: segment.path, name: FilePath(segment.path).stem ?? "",
                              format: format, frames: segment.frames, sampleRate: segment.sampleRate,
                              channels: recording?.channels ?? 0, startedAt: segment.startedAt, endedAt: segment.endedAt,
                              previousPath: redated.previousPath, previousStartedAt: redated.previousStart,
                              source: recorder.configuration.sourceName), redated)
    }
}

/// Calls `handler` once for every file the recorder finalizes, on `queue` (by default one of
/// the subscription's own). On the queue that also observes the recorder's state, a file is
/// handled before the state that follows its closing (`finished`).
///
/// The one place that decides what "a file was finalized" means: the recorder's closed
/// segments, each announced once its `.part` has its final name. A recording of one file is
/// one segment; a segmented one, a device gap or a `split` make more.
public func observeFinalizedFiles(of recorder: Recorder, on queue: DispatchQueue? = nil,
                                  _ handler: @escaping @Sendable (FinalizedFile) -> Void) -> ObservationToken {
    // Every segment, in order; not the last one of an earlier recording (the current value).
    recorder.closedSegment.subscribe(on: queue, delivery: .every, sendingCurrent: false) { segment in
        guard let segment else { return }
        // The recording it belongs to is the recorder's current one until the next starts.
        let recording = recorder.recording.value.flatMap { $0.id == segment.recordingId ? $0 : nil }
        let fileExtension = FilePath(segment.path).extension ?? ""
        guard let format = recording?.format
                ?? AudioFileFormat(fileExtension: fileExtension) else { return }
        handler(FinalizedFile(id: segment.recordingId, path: segment.path,
                              name: FilePath(segment.path).stem ?? "",
                              format: format, frames: segment.frames, sampleRate: segment.sampleRate,
                              channels: recording?.channels ?? 0, startedAt: segment.startedAt, endedAt: segment.endedAt,
                              source: recorder.configuration.sourceName))
    }
}
