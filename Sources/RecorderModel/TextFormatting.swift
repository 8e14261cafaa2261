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

/// A date of the civil (proleptic Gregorian) calendar, without a time or a place: a schedule's
/// "day". Counted as days since 1970-01-01 so that stepping through days and weekdays is
/// arithmetic, not calendar calls.
public struct CalendarDay: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int

    /// Out-of-range months and days carry over, as mktime's do: (2026, 2, 29) is 2026-03-01.
    public init(year: Int, month: Int, day: Int) {
        let months = year * 12 + (month - 1)
        let wholeYears = months >= 0 ? months / 12 : (months - 11) / 12
        let first = CalendarDay.dayNumber(year: wholeYears, month: months - wholeYears * 12 + 1, day: 1)
        self.init(dayNumber: first + day - 1)
    }

    /// The day `dayNumber` days after 1970-01-01.
    public init(dayNumber: Int) {
        // Howard Hinnant's civil_from_days: eras of 400 years starting on March 1.
        let z = dayNumber + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    }

    /// The local day `date` falls in.
    public init(containing date: Date, in zone: CalendarZone = .system) {
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        let local = seconds + Int64(zone.offset(atSecond: seconds))
        self.init(dayNumber: Int(local >= 0 ? local / 86400 : (local - 86399) / 86400))
    }

    /// Days since 1970-01-01 (negative before).
    public var dayNumber: Int { CalendarDay.dayNumber(year: year, month: month, day: day) }

    public func adding(days: Int) -> CalendarDay { CalendarDay(dayNumber: dayNumber + days) }

    /// 1970-01-01 was a Thursday.
    public var weekday: Weekday { Weekday(rawValue: ((dayNumber + 3) % 7 + 7) % 7 + 1)! }

    /// "2026-06-21".
    public var description: String { String(printf: "%04d-%02d-%02d", year, month, day) }

    public static func < (lhs: CalendarDay, rhs: CalendarDay) -> Bool { lhs.dayNumber < rhs.dayNumber }

    /// Howard Hinnant's days_from_civil.
    private static func dayNumber(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}

/// The days of the week, Monday first (ISO 8601 numbers).
public enum Weekday: Int, Sendable, Codable, CaseIterable, CustomStringConvertible {
    case monday = 1, tuesday, wednesday, thursday, friday, saturday, sunday

    /// "mon" ... "sun": how schedules write it.
    public var name: String { ["mon", "tue", "wed", "thu", "fri", "sat", "sun"][rawValue - 1] }

    public init?(name: String) {
        guard let day = Weekday.allCases.first(where: { $0.name == name.lowercased() }) else { return nil }
        self = day
    }

    public var description: String { name }
}

/// Where local clock readings come from: the system's time zone (TZ, /etc/localtime, through
/// localtime_r), or a fixed offset. Only the UTC offset in force at an instant is asked of it;
/// everything else (days, clock readings, daylight saving time's gaps and repeats) follows
/// from that, the same way for both, so tests can use a zone of their own without touching
/// the process-wide TZ that every other thread's localtime reads.
public struct CalendarZone: Sendable {
    private let offsetAt: @Sendable (Int64) -> Int

    /// `offset(secondsSince1970)`: seconds east of UTC in force at that instant.
    public init(offset: @escaping @Sendable (_ secondsSince1970: Int64) -> Int) {
        offsetAt = offset
    }

    /// The system's local time, as the daemon keeps it.
    public static let system = CalendarZone { seconds in
        var time = time_t(seconds)
        var fields = tm()
        guard localtime_r(&time, &fields) != nil else { return 0 }
        return Int(fields.tm_gmtoff)
    }

    /// A zone without daylight saving time, `seconds` east of UTC.
    public static func fixed(secondsEastOfUTC seconds: Int) -> CalendarZone { CalendarZone { _ in seconds } }

    public static let utc = fixed(secondsEastOfUTC: 0)

    /// Seconds east of UTC in force at `date`.
    public func offset(at date: Date) -> Int { offsetAt(Int64(date.timeIntervalSince1970.rounded(.down))) }

    func offset(atSecond seconds: Int64) -> Int { offsetAt(seconds) }

    /// The instant the local clock reads `hour:minute:second` on `day`.
    ///
    /// Where daylight saving time makes that reading ambiguous or impossible, the result is
    /// PEP 495's `fold=0` (what Python's zoneinfo gives):
    /// - a reading the clock skips (02:30 when it jumps from 02:00 to 03:00) is taken with the
    ///   offset in force before the jump, so it comes out as late as the jump: 03:30;
    /// - a reading the clock shows twice (02:30 when it goes back from 03:00 to 02:00) is the
    ///   first of the two (still in summer time).
    ///
    /// Not mktime: glibc's mktime with `tm_isdst = -1` picks between the two 02:30s by the
    /// offset of the previous mktime call anywhere in the process (a cached guess), so its
    /// answer depends on what ran before.
    public func date(_ day: CalendarDay, hour: Int, minute: Int, second: Int) -> Date {
        let wall = Int64(day.dayNumber) * 86400 + Int64(hour * 3600 + minute * 60 + second)
        // The offsets in force a day either side: a transition between them is the only way
        // the reading can be ambiguous or skipped (transitions are months apart).
        let before = offsetAt(wall - 86400), here = offsetAt(wall), after = offsetAt(wall + 86400)
        let valid = Set([before, here, after]).map { wall - Int64($0) }.filter { Int64(offsetAt($0)) == wall - $0 }
        return Date(timeIntervalSince1970: Double(valid.min() ?? wall - Int64(before)))
    }

    /// Local midnight starting `day` (as `date(_:hour:minute:second:)` resolves it).
    public func start(of day: CalendarDay) -> Date { date(day, hour: 0, minute: 0, second: 0) }
}
