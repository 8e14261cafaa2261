/// Rules for recording names, which become file names inside the recordings directory.
public enum RecordingName {
    /// The longest name accepted, in UTF-8 bytes (file systems allow 255 with the extension).
    public static let maximumLength = 200

    /// Throws `invalidSettings` unless `name` is a plain file name that stays inside the
    /// recordings directory: not empty, no `/`, no NUL or control characters, not hidden
    /// (leading `.`, which also rules out `.` and `..`), and not too long.
    public static func validate(_ name: String) throws(RecorderError) {
        func invalid(_ reason: String) -> RecorderError {
            RecorderError(.invalidSettings, "invalid recording name \(String(reflecting: name)): \(reason)")
        }
        if name.isEmpty { throw invalid("it is empty") }
        if name.utf8.count > maximumLength { throw invalid("longer than \(maximumLength) bytes") }
        if name.contains("/") { throw invalid("it contains '/'") }
        if name.hasPrefix(".") { throw invalid("it starts with '.'") }
        if name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw invalid("it contains a control character")
        }
        if name.hasSuffix(".part") { throw invalid("'.part' marks unfinished files") }
    }
}
