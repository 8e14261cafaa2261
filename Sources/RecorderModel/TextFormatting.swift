import FoundationEssentials
import Glibc

// Formatting FoundationEssentials leaves out (it has no ICU): printf-style numbers and local
// calendar time, from the C library, which reads TZ and /etc/localtime as every daemon does.

extension String {
    /// `printf(3)`-style formatting: `String(printf: "%.1f s", 2.25)` is "2.3 s". Strings go in
    /// as `%s` with a C string (`"…".withCString`), or better, by interpolation around the call.
    public init(printf format: String, _ arguments: CVarArg...) {
        self = withVaList(arguments) { list in
            var buffer = [CChar](repeating: 0, count: 256)
            let needed = Int(vsnprintf(&buffer, buffer.count, format, list))
            guard needed >= buffer.count else { return String(decoding: buffer.prefix(Swift.max(0, needed)).map { UInt8(bitPattern: $0) }, as: UTF8.self) }
            buffer = [CChar](repeating: 0, count: needed + 1)
            return withVaList(arguments) { again in
                _ = vsnprintf(&buffer, buffer.count, format, again)
                return String(decoding: buffer.prefix(needed).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
        }
    }
}

extension StringProtocol {
    /// Without the white space (spaces, tabs, line breaks) at either end.
    public func trimmingWhitespace() -> String {
        String(drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
    }
}

/// Calendar time through the C library: local time (TZ, /etc/localtime) or UTC.
public enum CalendarTime {
    /// `strftime(3)` of `date` (whole seconds, rounded): "%Y-%m-%d %H:%M:%S" gives "2026-11-22 19:30:00".
    public static func format(_ date: Date, _ format: String, local: Bool = true) -> String {
        // The second the time falls in, as a clock shows it: 14.541 is 14, not 15.
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var fields = tm()
        if local { localtime_r(&seconds, &fields) } else { gmtime_r(&seconds, &fields) }
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = strftime(&buffer, buffer.count, format, &fields)
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `date`'s local day at `hour`:`minute`:`second` (mktime resolves daylight saving time);
    /// `dayOffset` days later.
    public static func localTime(on date: Date, hour: Int, minute: Int, second: Int, dayOffset: Int = 0) -> Date {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var fields = tm()
        localtime_r(&seconds, &fields)
        fields.tm_mday += Int32(dayOffset)
        fields.tm_hour = Int32(hour)
        fields.tm_min = Int32(minute)
        fields.tm_sec = Int32(second)
        fields.tm_isdst = -1
        return Date(timeIntervalSince1970: Double(mktime(&fields)))
    }
}
