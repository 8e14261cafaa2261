import FoundationEssentials

/// The range of every number recd takes from outside. Each way in — the socket, MQTT, recctl
/// and the configuration file — checks what it receives against these before anything acts on
/// it, and names the range when it refuses; the recorder checks again for callers of the library.
public enum Limits {
    /// `duration` (seconds): a year at most (a longer recording is one without a duration), at
    /// least a millisecond. Beyond a year, frames at 768 kHz would still fit in 64 bits; the
    /// bound is what a user can mean, not what the arithmetic allows.
    public static let duration: ClosedRange<Double> = 0.001...31_622_400
    /// `sampleRate` (Hz) of a file or a device.
    public static let sampleRate: ClosedRange<Int> = 1000...768_000
    /// `channels` of a file or a device (a format may hold fewer: `AudioFileFormat.maximumChannels`).
    public static let channels: ClosedRange<Int> = 1...8
    /// `bitRate` (bits per second, all channels); each codec takes a narrower range of it
    /// (`RecordingSettings.validate(bitRate:sampleRate:channels:)`).
    public static let bitRate: ClosedRange<Int> = 6000...4_608_000
    /// `segmentLength` (seconds); 0 in a `start` means one file.
    public static let segmentLength: ClosedRange<Double> = 1...86400
    /// `at` (seconds since 1970): from 1970 to the end of year 9999, what RFC 3339 can write.
    public static let scheduleTime: ClosedRange<Double> = 0...253_402_300_799
    /// Pre-roll kept while listening, seconds (0: none). 60 s of 48 kHz stereo 32-bit is 23 MB.
    public static let preRoll: ClosedRange<Double> = 0...60
    /// `[capture] write_buffer`, seconds: at least a device buffer's worth; at most two
    /// minutes (10 s of 48 kHz stereo 16-bit is 1.9 MB; two minutes of 8 channels of 32-bit
    /// at 192 kHz would be 737 MB).
    public static let writeBuffer: ClosedRange<Double> = 0.5...120
    /// A subscription's `interval` (seconds between continuous notifications).
    public static let subscriptionInterval: ClosedRange<Double> = 0.01...3600
    /// `tap.update`'s `listeners`: whom a tap's client serves the audio on to (recd-rtsp's
    /// RTSP clients; its own limit is `[rtsp] max_clients`).
    public static let tapListeners: ClosedRange<Int> = 0...100_000
    /// A tap's `chunk`: the least audio (seconds) each of its chunks carries. A millisecond is
    /// less than any device's period (every chunk as it comes); a second is as late as audio
    /// on its way to a listener should be.
    public static let tapChunk: ClosedRange<Double> = 0.001...1
    /// A tap's id (`tap`'s answer): positive, as recd counts them.
    public static let tapID: ClosedRange<Int> = 1...Int(Int32.max)

    /// "between 1 and 86400 seconds": how an error names a range.
    public static func describe<T: Comparable>(_ range: ClosedRange<T>, _ unit: String = "") -> String {
        "between \(number(range.lowerBound)) and \(number(range.upperBound))" + (unit.isEmpty ? "" : " " + unit)
    }

    /// A number as people write it: 1000, not 1000.0.
    public static func number<T>(_ value: T) -> String {
        if let double = value as? Double, double.isFinite, double == double.rounded(), Swift.abs(double) < 1e15 {
            return String(Int64(double))
        }
        return "\(value)"
    }

    /// nil if `value` lies in `range`, else the sentence that refuses it, naming the parameter.
    public static func refusal<T: Comparable>(_ name: String, _ value: T, _ range: ClosedRange<T>,
                                              _ unit: String = "") -> String? {
        requirement(value, range, unit).map { "'\(name)' " + $0 }
    }

    /// nil if `value` lies in `range`, else "must be between 1 and 8, not 9".
    public static func requirement<T: Comparable>(_ value: T, _ range: ClosedRange<T>, _ unit: String = "") -> String? {
        if let double = value as? Double, !double.isFinite {
            return "must be a finite number " + describe(range, unit) + ", not \(double)"
        }
        guard !range.contains(value) else { return nil }
        return "must be " + describe(range, unit) + ", not \(number(value))"
    }

    /// nil if `date` is a time `at` may name, else the sentence that refuses it.
    public static func refusal(at date: Date) -> String? {
        scheduleTime.contains(date.timeIntervalSince1970) ? nil : "'at' must be " + scheduleTimeDescription
    }

    public static let scheduleTimeDescription = "a time from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59Z"
}

/// Durations as recd reads them everywhere (recctl's options, the configuration file, MQTT and
/// socket clients that send text): one spelling.
///
/// - a number of seconds: `90`, `1.5`;
/// - numbers with units, in any order and with optional spaces: `500ms`, `90s`, `30m`, `1h`,
///   `1h30m`, `1.5 h`, `30d`, `2w`;
/// - a clock reading: `MM:SS` or `HH:MM:SS[.fff]`, minutes and seconds below 60.
///
/// Zero, negative and non-finite values are not durations.
public enum DurationText {
    /// The units a number may carry (matched whole, case-insensitively).
    private static let units: [(String, Double)] = [
        ("ms", 0.001), ("s", 1), ("sec", 1), ("min", 60), ("m", 60), ("h", 3600), ("d", 86400), ("w", 604_800),
    ]

    /// What the spelling says, in seconds; nil when it is not a duration. `allowingZero` for a
    /// setting where zero means "off" (`grace = "0s"`).
    public static func seconds(_ text: String, allowingZero: Bool = false) -> Double? {
        let trimmed = text.filter { $0 != " " && $0 != "\t" }
        guard !trimmed.isEmpty else { return nil }
        let value: Double?
        if trimmed.contains(":") {
            value = clock(trimmed)
        } else if let number = plainNumber(trimmed) {
            value = number
        } else {
            value = withUnits(trimmed)
        }
        guard let value, value > 0 || (allowingZero && value == 0), value.isFinite else { return nil }
        return value
    }

    /// What a duration may be written as, for error messages.
    public static let spellings = #"seconds (90, 1.5), a number with a unit (500ms, 90s, 30m, 1h30m, 30d, 2w) or HH:MM:SS"#

    /// Digits with at most one point: no sign, exponent, "inf" or "nan" (Double's own parser takes those).
    private static func plainNumber<S: StringProtocol>(_ text: S) -> Double? {
        guard !text.isEmpty, text != ".", text.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
              text.filter({ $0 == "." }).count <= 1 else { return nil }
        return Double(String(text))
    }

    private static func clock(_ text: String) -> Double? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard (2...3).contains(parts.count) else { return nil }
        var seconds = 0.0
        for (index, part) in parts.enumerated() {
            let isFirst = index == 0, isLast = index == parts.count - 1
            // Whole hours and minutes; seconds may have a fraction.
            guard let value = plainNumber(part), isLast || !part.contains(".") else { return nil }
            // Below the first field, a clock counts to 59.
            if !isFirst, value >= 60 { return nil }
            seconds = seconds * 60 + value
        }
        return seconds
    }

    private static func withUnits(_ text: String) -> Double? {
        var rest = Substring(text)
        var total = 0.0
        while !rest.isEmpty {
            let digits = rest.prefix { $0.isASCII && ($0.isNumber || $0 == ".") }
            guard let number = plainNumber(digits) else { return nil }
            rest = rest.dropFirst(digits.count)
            let letters = rest.prefix { $0.isLetter }
            guard let unit = units.first(where: { $0.0 == letters.lowercased() }) else { return nil }
            rest = rest.dropFirst(letters.count)
            total += number * unit.1
        }
        return total
    }
}
