import FoundationEssentials
import Glibc
import Logging
import RecorderModel
import Synchronization

/// Logs one line per message to stderr: `level label: message key=value …`.
///
/// Under systemd (JOURNAL_STREAM set) each line starts with its syslog priority (`<6>`),
/// which journald strips and records as the entry's level; the timestamp is left to journald.
struct StandardErrorLogHandler: LogHandler {
    /// One level for every logger, so SIGHUP can change it for loggers already handed out.
    static let level = Atomic<UInt8>(UInt8(Logger.Level.allCases.firstIndex(of: .info)!))

    let label: String
    let journal: Bool
    var metadata: Logger.Metadata = [:]

    var logLevel: Logger.Level {
        get { Logger.Level.allCases[Int(Self.level.load(ordering: .relaxed))] }
        set { Self.level.store(UInt8(Logger.Level.allCases.firstIndex(of: newValue)!), ordering: .relaxed) }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var line = journal ? "<\(event.level.syslogPriority)>" : Self.timestamp() + " "
        if !journal { line += event.level.rawValue + " " }
        line += label + ": " + event.message.description
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        for key in merged.keys.sorted() { line += " \(key)=\(merged[key]!)" }
        line += "\n"
        // One write(2) per line: lines from several threads never interleave.
        line.utf8CString.withUnsafeBufferPointer { buffer in
            _ = write(STDERR_FILENO, buffer.baseAddress, buffer.count - 1)
        }
    }

    private static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        return String(printf: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, now.tv_nsec / 1_000_000)
    }
}

extension Logger.Level {
    /// The syslog priority journald reads from a `<N>` line prefix.
    var syslogPriority: Int {
        switch self {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }
}
