import FoundationEssentials

/// What every file recd writes says about where it comes from: when its first frame was
/// captured, which recording it belongs to, the device and the software. Written into the
/// file itself (BWF `bext`, Vorbis comments, CAF `info`, MP4 tags), so that a renamed or
/// copied file keeps its start time.
public struct FileOrigin: Sendable, Equatable {
    /// The wall-clock time of the file's first frame (the device's time for it, not when the
    /// file was created or when the frame reached recd).
    public var startedAt: Date
    public var recordingName: String
    /// The recording (session) id: every segment of one recording carries the same.
    public var recordingId: String
    /// The ALSA PCM the audio came from.
    public var device: String
    /// "recd 0.1.0".
    public var software: String
    /// What the start time is worth: the clock's state when the file began, or its correction.
    public var clock: StartClock
    /// The station's source the audio came from (recd.toml's `[[source]]` name, or `default`);
    /// nil where no station names it.
    public var source: String?

    public init(startedAt: Date, recordingName: String, recordingId: String, device: String,
                software: String = "recd " + RecdVersion.current, clock: StartClock = .synchronized, source: String? = nil) {
        self.startedAt = startedAt
        self.recordingName = recordingName
        self.recordingId = recordingId
        self.device = device
        self.software = software
        self.clock = clock
        self.source = source
    }

    /// The start in RFC 3339, UTC, to the millisecond: `2026-11-22T14:00:00.123Z`.
    public var startText: String { UTCTimestamp.text(startedAt) }
}

/// What a file's recorded start time is worth, as the file itself says (its comment; `recctl
/// info`, `recordings.list`).
public enum StartClock: String, Sendable, Equatable, Codable, CaseIterable {
    /// The system clock was synchronized when the file began (or the file does not say: every
    /// file from before recd marked them).
    case synchronized
    /// It was not (a station without a real-time clock, before NTP): the start is the clock's
    /// as it was then, possibly days off, until recd re-dates the file.
    case unsynchronized
    /// It was not, and recd corrected the start (and the name) once the clock was synchronized,
    /// from the boot clock, which no step moves.
    case redated

    /// How the file's comment says it, just before the start. The two marks have the same
    /// length, so re-dating rewrites them in place.
    public var commentMark: String? {
        switch self {
        case .synchronized: nil
        case .unsynchronized: "clock not synchronized"
        case .redated: "re-dated at clock sync"
        }
    }
}

/// RFC 3339 timestamps in UTC with milliseconds, written and read without a date formatter
/// (the proleptic Gregorian calendar, as `timegm` counts it).
public enum UTCTimestamp {
    /// `2026-11-22T14:00:00.123Z`, rounded to the millisecond.
    public static func text(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded())
        let (seconds, millisecond) = floorDivision(milliseconds, 1000)
        let fields = fields(secondsSince1970: seconds)
        return "\(fields.date)T\(fields.time).\(padded(Int(millisecond), 3))Z"
    }

    /// Date and time of day of `secondsSince1970` in UTC: `2026-11-22` and `14:00:00`.
    public static func fields(secondsSince1970: Int64) -> (date: String, time: String) {
        let (days, secondOfDay) = floorDivision(secondsSince1970, 86400)
        let (year, month, day) = civil(daysSince1970: days)
        let date = "\(padded(Int(year), 4))-\(padded(month, 2))-\(padded(day, 2))"
        let time = "\(padded(Int(secondOfDay / 3600), 2)):\(padded(Int(secondOfDay / 60 % 60), 2)):\(padded(Int(secondOfDay % 60), 2))"
        return (date, time)
    }

    /// Reads `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (RFC 3339: also `t`, `z` or a space);
    /// with `allowingDateOnly`, also the date alone (midnight UTC, as files' date fields have
    /// it). Nil for anything else.
    public static func date(_ text: String, allowingDateOnly: Bool = true) -> Date? {
        let bytes = Array(text.utf8)
        func number(_ start: Int, _ count: Int) -> Int? {
            guard start + count <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[start..<(start + count)] {
                guard byte >= 0x30, byte <= 0x39 else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            return value
        }
        guard let year = number(0, 4), bytes.count >= 10, bytes[4] == 0x2D, let month = number(5, 2), bytes[7] == 0x2D,
              let day = number(8, 2), (1...12).contains(month), (1...31).contains(day) else { return nil }
        let midnight = Double(days(year: year, month: month, day: day)) * 86400
        if bytes.count == 10 { return allowingDateOnly ? Date(timeIntervalSince1970: midnight) : nil }
        guard bytes.count >= 19, bytes[10] == 0x54 || bytes[10] == 0x20 || bytes[10] == 0x74,
              let hour = number(11, 2), bytes[13] == 0x3A, let minute = number(14, 2), bytes[16] == 0x3A,
              let second = number(17, 2), hour < 24, minute < 60, second < 61 else { return nil }
        var seconds = midnight + Double(hour * 3600 + minute * 60 + second)
        var index = 19
        if index < bytes.count, bytes[index] == 0x2E {
            index += 1
            var scale = 0.1
            let start = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 {
                seconds += Double(bytes[index] - 0x30) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        if index == bytes.count { return nil }  // no zone: not RFC 3339
        if bytes[index] == 0x5A || bytes[index] == 0x7A {
            index += 1
        } else if bytes[index] == 0x2B || bytes[index] == 0x2D, let hours = number(index + 1, 2),
                  index + 3 < bytes.count, bytes[index + 3] == 0x3A, let minutes = number(index + 4, 2),
                  hours < 24, minutes < 60 {
            let offset = Double(hours * 3600 + minutes * 60)
            seconds += bytes[index] == 0x2B ? -offset : offset
            index += 6
        } else {
            return nil
        }
        return index == bytes.count ? Date(timeIntervalSince1970: seconds) : nil
    }

    /// Days from 1970-01-01 to a date (Howard Hinnant's days_from_civil).
    public static func days(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let m = Int64(month)
        let dayOfYear = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + Int64(day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }

    /// The date `days` after 1970-01-01 (civil_from_days).
    static func civil(daysSince1970 days: Int64) -> (year: Int64, month: Int, day: Int) {
        let z = days + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let dayOfEra = z - era * 146097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * mp + 2) / 5 + 1)
        let month = Int(mp < 10 ? mp + 3 : mp - 9)
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    static func floorDivision(_ value: Int64, _ divisor: Int64) -> (Int64, Int64) {
        let quotient = value >= 0 ? value / divisor : -((-value + divisor - 1) / divisor)
        return (quotient, value - quotient * divisor)
    }

    private static func padded(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}
