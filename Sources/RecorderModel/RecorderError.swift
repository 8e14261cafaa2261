/// Why the recorder could not do what was asked, or why a recording ended badly.
///
/// `code` is stable: it is also the `data.code` of recd's JSON-RPC errors.
public struct RecorderError: Error, Sendable, Equatable, Codable, CustomStringConvertible {
    public enum Code: String, Sendable, Codable, CaseIterable {
        /// The device refused us (EACCES/EPERM): the user is not in the `audio` group, or similar.
        case noPermission
        /// No such PCM, or the file/card behind it does not exist.
        case deviceNotFound
        /// The device id matches several sound cards (two identical USB microphones named by
        /// vendor and product, or sharing a serial): recd does not guess; the message names
        /// each card's port id to write instead.
        case ambiguousDevice
        /// Another process holds the device (EBUSY).
        case deviceBusy
        /// The device failed mid-recording (unplugged, sound server gone).
        case deviceLost
        /// The settings cannot be recorded (the message says which and why).
        case invalidSettings
        /// The operation makes no sense in the recorder's current state.
        case invalidState
        /// Recording could not start (device configuration, file creation).
        case failedToBegin
        /// A paused recording could not continue.
        case failedToResume
        /// Writing, syncing or closing the file failed (disk full included).
        case failedToSave
        /// Free space on the recordings' filesystem is below `[storage] minimum_free`: `start`
        /// is refused, and a recording under way ends (its file finalized) unless retention
        /// can free space.
        case insufficientSpace
        /// Audio was lost and the recording went on in a new file (a gap): the device overran
        /// (recd did not read it in time), or the disk fell behind by more than the write
        /// buffer holds. Only in a gap's `error` and the `warning`, never the end of a recording.
        case audioLost
        /// Anything else.
        case unknown
    }

    public var code: Code
    /// A sentence for people: names the device or file and the underlying errno text.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// The `invalidState` message for stop, pause, resume, cancel and split when no recording
    /// is under way.
    public static let nothingRecording = "nothing is recording"
}
