import FoundationEssentials
import Glibc

// Recording windows: when a schedule wants the recorder running. Pure values and arithmetic
// (the sun's position, the calendar); the only outside input is the UTC offset a
// `CalendarZone` gives, so the same schedule gives the same intervals anywhere it is evaluated.

// MARK: - The sun

/// The sun events a window may start or end at.
public enum SunEvent: String, Sendable, Codable, CaseIterable {
    /// Civil dawn: the sun's centre 6° below the horizon, rising.
    case dawn
    /// The sun's upper edge on the horizon with standard refraction (centre at zenith 90.833°).
    case sunrise
    case sunset
    /// Civil dusk: 6° below the horizon, setting.
    case dusk

    /// The sun's zenith distance at the event, degrees.
    public var zenith: Double { self == .dawn || self == .dusk ? 96 : 90.833 }
    public var isRising: Bool { self == .dawn || self == .sunrise }
}

/// When a sun event happens on a day, or why it does not.
public enum SunTime: Sendable, Equatable, Codable {
    case at(Date)
    /// The sun stays above the event's altitude all day (polar day; for dawn and dusk, also
    /// the white nights below the polar circle): nothing rises or sets.
    case alwaysUp
    /// The sun stays below it all day (polar night).
    case alwaysDown

    public var date: Date? {
        if case .at(let date) = self { return date }
        return nil
    }
}

/// Dawn, sunrise, sunset and dusk of one local calendar day at one place, by the NOAA solar
/// calculator's equations (Meeus' low-precision sun: declination and equation of time),
/// evaluated at the event's own time (iterated) rather than once per day, which is worth
/// minutes near the equinoxes at high latitudes. Good to well under a minute between the
/// polar circles; near a polar day or night's first and last days the events move by
/// many minutes per day and any small model difference becomes a large time difference.
///
/// An event belongs to the local day it happens in (sunrise "on 2026-06-21" is the sunrise
/// during that date by the zone's clock). When no event happens in the day, `SunTime` says
/// whether the sun is above or below the event's altitude in the middle of the day; that is
/// the polar day or night, or, in its first or last days, a day the event leaves by drifting
/// across midnight. Where a day holds two (an event drifting across midnight the other way,
/// near polar day), it is the first.
public struct SolarTimes: Sendable, Equatable, Codable {
    public var day: CalendarDay
    public var dawn: SunTime
    public var sunrise: SunTime
    public var sunset: SunTime
    public var dusk: SunTime

    /// Latitude in degrees north (-90...90), longitude in degrees east (-180...180).
    public init(day: CalendarDay, latitude: Double, longitude: Double, zone: CalendarZone = .system) {
        self.day = day
        let bounds = SolarTimes.bounds(of: day, zone)
        dawn = SolarTimes.time(of: .dawn, within: bounds, latitude: latitude, longitude: longitude)
        sunrise = SolarTimes.time(of: .sunrise, within: bounds, latitude: latitude, longitude: longitude)
        sunset = SolarTimes.time(of: .sunset, within: bounds, latitude: latitude, longitude: longitude)
        dusk = SolarTimes.time(of: .dusk, within: bounds, latitude: latitude, longitude: longitude)
    }

    public subscript(event: SunEvent) -> SunTime {
        switch event {
        case .dawn: dawn
        case .sunrise: sunrise
        case .sunset: sunset
        case .dusk: dusk
        }
    }

    /// One event alone.
    public static func time(of event: SunEvent, on day: CalendarDay, latitude: Double, longitude: Double,
                            zone: CalendarZone = .system) -> SunTime {
        time(of: event, within: bounds(of: day, zone), latitude: latitude, longitude: longitude)
    }

    private static func bounds(of day: CalendarDay, _ zone: CalendarZone) -> (start: Double, end: Double) {
        (zone.start(of: day).timeIntervalSince1970, zone.start(of: day.adding(days: 1)).timeIntervalSince1970)
    }

    private static func time(of event: SunEvent, within bounds: (start: Double, end: Double),
                             latitude: Double, longitude: Double) -> SunTime {
        // Every UTC day's event that could fall in the local day: a solar day's events lie
        // within 12 hours (and the equation of time) of its noon, which longitude puts up to
        // 12 hours from the UTC day's; one more each side for good measure.
        let first = Int((bounds.start / 86400).rounded(.down)) - 2, last = Int((bounds.end / 86400).rounded(.down)) + 2
        let inDay = (first...last).compactMap { utcDay -> Double? in
            guard let time = eventTime(event, utcDay: utcDay, latitude: latitude, longitude: longitude),
                  time >= bounds.start, time < bounds.end else { return nil }
            return time
        }
        if let time = inDay.min() { return .at(Date(timeIntervalSince1970: time.rounded())) }
        let middle = (bounds.start + bounds.end) / 2
        return cosZenith(at: middle, latitude: latitude, longitude: longitude) > cos(radians(event.zenith)) ? .alwaysUp : .alwaysDown
    }

    /// The event of the solar day around noon of UTC day `utcDay` at this longitude (seconds
    /// since 1970), or nil when the sun does not reach the event's altitude that day.
    private static func eventTime(_ event: SunEvent, utcDay: Int, latitude: Double, longitude: Double) -> Double? {
        let midnight = Double(utcDay) * 86400
        var time = midnight + 43200 - longitude * 240
        // Three rounds: the first from noon, then at the event's own time; the third moves
        // it by well under a second.
        for _ in 0..<3 {
            let sun = SunPosition(at: time)
            let phi = radians(latitude), delta = radians(sun.declination)
            let cosHourAngle = (cos(radians(event.zenith)) - sin(phi) * sin(delta)) / (cos(phi) * cos(delta))
            guard cosHourAngle >= -1, cosHourAngle <= 1 else { return nil }
            let hourAngle = degrees(acos(cosHourAngle)) * (event.isRising ? 1 : -1)
            // Minutes after UTC midnight: solar noon, less the hour angle at 4 minutes a degree.
            let minutes = 720 - 4 * (longitude + hourAngle) - sun.equationOfTime
            time = midnight + minutes * 60
        }
        return time
    }

    /// Cosine of the sun's zenith distance at `time` (seconds since 1970).
    private static func cosZenith(at time: Double, latitude: Double, longitude: Double) -> Double {
        let sun = SunPosition(at: time)
        let minutesOfDay = (time / 60).truncatingRemainder(dividingBy: 1440)
        let hourAngle = radians((minutesOfDay + 4 * longitude + sun.equationOfTime) / 4 - 180)
        let phi = radians(latitude), delta = radians(sun.declination)
        return sin(phi) * sin(delta) + cos(phi) * cos(delta) * cos(hourAngle)
    }
}

/// The sun's declination and the equation of time at an instant: NOAA's solar calculator
/// (after Jean Meeus, "Astronomical Algorithms").
private struct SunPosition {
    /// Degrees.
    var declination: Double
    /// Minutes: apparent solar time minus mean solar time.
    var equationOfTime: Double

    init(at secondsSince1970: Double) {
        let julianDay = secondsSince1970 / 86400 + 2_440_587.5
        let t = (julianDay - 2_451_545) / 36525
        let meanLongitude = (280.46646 + t * (36000.76983 + t * 0.0003032)).truncatingRemainder(dividingBy: 360)
        let meanAnomaly = 357.52911 + t * (35999.05029 - 0.0001537 * t)
        let eccentricity = 0.016708634 - t * (0.000042037 + 0.0000001267 * t)
        let m = radians(meanAnomaly)
        let centre = sin(m) * (1.914602 - t * (0.004817 + 0.000014 * t)) + sin(2 * m) * (0.019993 - 0.000101 * t)
            + sin(3 * m) * 0.000289
        let omega = radians(125.04 - 1934.136 * t)
        let apparentLongitude = meanLongitude + centre - 0.00569 - 0.00478 * sin(omega)
        let meanObliquity = 23 + (26 + (21.448 - t * (46.815 + t * (0.00059 - t * 0.001813))) / 60) / 60
        let obliquity = radians(meanObliquity + 0.00256 * cos(omega))
        declination = degrees(asin(sin(obliquity) * sin(radians(apparentLongitude))))
        let y = pow(tan(obliquity / 2), 2)
        let l0 = radians(meanLongitude)
        equationOfTime = 4 * degrees(y * sin(2 * l0) - 2 * eccentricity * sin(m)
            + 4 * eccentricity * y * sin(m) * cos(2 * l0) - 0.5 * y * y * sin(4 * l0)
            - 1.25 * eccentricity * eccentricity * sin(2 * m))
    }
}

private func radians(_ degrees: Double) -> Double { degrees * .pi / 180 }
private func degrees(_ radians: Double) -> Double { radians * 180 / .pi }

// MARK: - Windows

/// Where a window starts or ends: a clock reading, or a sun event with an offset.
///
/// Text: `05:00`, `21:30`, `07:15:30` (hours 00-23); `sunrise`, `sunset`, `dawn`, `dusk`, with
/// `+` or `-` and a duration as `DurationText` reads it (`sunrise-1h`, `dusk+1h30m`, `sunset+90`:
/// whole seconds, at most 12 hours). The canonical text (`description`, and the Codable string)
/// writes hours with two digits, seconds only when not zero, and offsets in h, m and s
/// (`sunset+90` is `sunset+1m30s`).
public enum WindowTime: Sendable, Equatable, Codable, CustomStringConvertible {
    /// Seconds after local midnight (0..<86400) by the clock.
    case clock(Int)
    /// Seconds after (negative: before) the event.
    case sun(SunEvent, offset: Int)

    /// The largest offset from a sun event. Beyond it, "sunrise-13h" is the previous evening:
    /// better written as a clock time or the other event.
    public static let maximumOffset = 12 * 3600

    public static let spellings = "HH:MM, HH:MM:SS, or sunrise, sunset, dawn or dusk with an optional offset such as sunrise-1h or sunset+30m"

    public init(parsing text: String) throws(RecorderError) {
        let trimmed = text.trimmingWhitespace()
        let compact = trimmed.filter { !$0.isWhitespace }.lowercased()
        func invalid(_ why: String? = nil) -> RecorderError {
            RecorderError(.invalidSettings, "'\(trimmed)' " + (why ?? "is not a time of day or sun event (\(WindowTime.spellings))"))
        }
        if let event = SunEvent.allCases.first(where: { compact.hasPrefix($0.rawValue) }) {
            let rest = compact.dropFirst(event.rawValue.count)
            guard let sign = rest.first else {
                self = .sun(event, offset: 0)
                return
            }
            guard sign == "+" || sign == "-" else { throw invalid() }
            let amount = String(rest.dropFirst())
            guard let seconds = DurationText.seconds(amount, allowingZero: true) else {
                throw invalid("has an offset '\(amount)' that is not a duration: write " + DurationText.spellings)
            }
            guard seconds == seconds.rounded() else { throw invalid("has an offset of a fraction of a second") }
            guard seconds <= Double(WindowTime.maximumOffset) else { throw invalid("has an offset of more than 12 hours") }
            self = .sun(event, offset: Int(seconds) * (sign == "-" ? -1 : 1))
            return
        }
        let fields = compact.split(separator: ":", omittingEmptySubsequences: false)
        // Two digits a field; the hour may have one.
        let numbers = fields.enumerated().map { index, field in
            field.allSatisfy({ $0.isASCII && $0.isNumber }) && (field.count == 2 || (index == 0 && field.count == 1)) ? Int(field) : nil
        }
        guard (2...3).contains(fields.count), let hour = numbers[0], let minute = numbers[1] else { throw invalid() }
        let second = fields.count == 3 ? numbers[2] : 0
        guard let second, (0..<24).contains(hour), (0..<60).contains(minute), (0..<60).contains(second) else {
            throw invalid()
        }
        self = .clock(hour * 3600 + minute * 60 + second)
    }

    public var description: String {
        switch self {
        case .clock(let seconds):
            let text = String(printf: "%02d:%02d", seconds / 3600, seconds / 60 % 60)
            return seconds % 60 == 0 ? text : text + String(printf: ":%02d", seconds % 60)
        case .sun(let event, let offset):
            guard offset != 0 else { return event.rawValue }
            let size = Swift.abs(offset)
            var text = event.rawValue + (offset < 0 ? "-" : "+")
            if size >= 3600 { text += "\(size / 3600)h" }
            if size % 3600 >= 60 { text += "\(size / 60 % 60)m" }
            if size % 60 != 0 { text += "\(size % 60)s" }
            return text
        }
    }

    /// The instant on `day`: the clock reading (`CalendarZone.date` says what happens when
    /// daylight saving time skips or repeats it), or the event plus the offset (which may fall
    /// on the day before or after). Nil when the event does not happen that day (`SolarTimes`).
    /// A sun time needs `location`; without one it is nil.
    public func date(on day: CalendarDay, location: (latitude: Double, longitude: Double)?,
                     zone: CalendarZone = .system) -> Date? {
        switch self {
        case .clock(let seconds):
            return zone.date(day, hour: seconds / 3600, minute: seconds / 60 % 60, second: seconds % 60)
        case .sun(let event, let offset):
            guard let location, case .at(let date) = SolarTimes.time(of: event, on: day, latitude: location.latitude,
                                                                       longitude: location.longitude, zone: zone)
            else { return nil }
            return date.addingTimeInterval(Double(offset))
        }
    }

    public var isSunTime: Bool {
        if case .sun = self { return true }
        return false
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        do { self = try WindowTime(parsing: try container.decode(String.self)) } catch let error as RecorderError {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.message)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// Weekdays as written: one (`sat`) or a range (`mon-fri`; `fri-mon` wraps past Sunday).
public struct WeekdayRange: Sendable, Equatable, CustomStringConvertible {
    public var first: Weekday
    public var last: Weekday

    public init(_ first: Weekday, _ last: Weekday) {
        self.first = first
        self.last = last
    }

    public var days: Set<Weekday> {
        let count = (last.rawValue - first.rawValue + 7) % 7 + 1
        return Set((0..<count).map { Weekday(rawValue: (first.rawValue - 1 + $0) % 7 + 1)! })
    }

    public var description: String { first == last ? first.name : first.name + "-" + last.name }
}

/// When to record: on some weekdays (all when `days` is empty), from `start` to `end`.
///
/// Text: `[DAYS ]START..END`. DAYS is a comma-separated list of weekdays (`mon` ... `sun`) and
/// ranges (`mon-fri`, `fri-mon`), without spaces; START and END are `WindowTime`s:
/// `mon-fri 05:00..09:00`, `sat,sun 06:00..10:00`, `sunrise-1h..sunrise+3h`, `22:00..02:00`,
/// `sunset..sunrise`. The canonical text (`description`, and the Codable string) writes days
/// and times as `WeekdayRange` and `WindowTime` do, one space after the days.
///
/// On each day the window applies to — the weekday the window STARTS on — it opens at START
/// on that day and closes at the first END after it, on that day or the next: `22:00..02:00`
/// and `sunset..sunrise` end the next morning; a window whose start and end are the same
/// reading lasts until that reading the next day.
///
/// Sun events missing on a day (polar day or night; see `SolarTimes`): the window does not
/// open on a day whose START event does not happen, nor when neither that day's nor the
/// next day's END event comes after START. So `sunrise..sunset` records nothing during a
/// polar day, although the sun is up, and nothing during a polar night; the one exception is
/// that END may come from the next day, so in the days before a polar day, when the evening's
/// sunset falls after midnight, `sunrise..sunset` still closes at it.
public struct RecordingWindow: Sendable, Equatable, Codable, CustomStringConvertible {
    /// As written; empty: every day.
    public var days: [WeekdayRange]
    public var start: WindowTime
    public var end: WindowTime

    public init(days: [WeekdayRange] = [], start: WindowTime, end: WindowTime) {
        self.days = days
        self.start = start
        self.end = end
    }

    /// The weekdays it may start on.
    public var weekdays: Set<Weekday> {
        days.isEmpty ? Set(Weekday.allCases) : days.reduce(into: Set()) { $0.formUnion($1.days) }
    }

    public var usesSun: Bool { start.isSunTime || end.isSunTime }

    public static let syntax = "[DAYS ]START..END, e.g. 'mon-fri 05:00..09:00', 'sat,sun 06:00..10:00' or 'sunset..sunrise+1h'"

    /// Refusals name the part at fault: "'mon-fry' is not a weekday or range of weekdays (...)".
    public init(parsing text: String) throws(RecorderError) {
        let trimmed = text.trimmingWhitespace()
        guard let dots = trimmed.indices.first(where: { trimmed[$0...].hasPrefix("..") }) else {
            throw RecorderError(.invalidSettings, "'\(trimmed)' is not a window: write " + RecordingWindow.syntax)
        }
        var left = trimmed[..<dots].trimmingWhitespace()
        let right = trimmed[dots...].dropFirst(2).trimmingWhitespace()
        var days: [WeekdayRange] = []
        // Days come first, separated by white space; a sun time may itself hold spaces ("sunrise - 1h").
        if let space = left.firstIndex(where: { $0.isWhitespace }),
           !SunEvent.allCases.contains(where: { left.lowercased().hasPrefix($0.rawValue) }) {
            days = try RecordingWindow.days(String(left[..<space]))
            left = left[space...].trimmingWhitespace()
        }
        guard !left.isEmpty, !right.isEmpty else {
            throw RecorderError(.invalidSettings, "'\(trimmed)' lacks a start or an end: write " + RecordingWindow.syntax)
        }
        guard !right.contains("..") else {
            throw RecorderError(.invalidSettings, "'\(trimmed)' has more than one '..': write " + RecordingWindow.syntax)
        }
        self.init(days: days, start: try WindowTime(parsing: left), end: try WindowTime(parsing: right))
    }

    private static func days(_ text: String) throws(RecorderError) -> [WeekdayRange] {
        var ranges: [WeekdayRange] = []
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let ends = item.split(separator: "-", omittingEmptySubsequences: false)
            guard (1...2).contains(ends.count), let first = Weekday(name: String(ends[0])),
                  let last = Weekday(name: String(ends[ends.count - 1])) else {
                throw RecorderError(.invalidSettings, "'\(item.isEmpty ? text : String(item))' is not a weekday or range of "
                                    + "weekdays (mon, tue, wed, thu, fri, sat, sun; ranges like mon-fri, lists like sat,sun)")
            }
            ranges.append(WeekdayRange(first, last))
        }
        return ranges
    }

    public var description: String {
        (days.isEmpty ? "" : days.map(\.description).joined(separator: ",") + " ") + "\(start)..\(end)"
    }

    /// The window's interval starting on `day`, nil when it does not open that day (a weekday
    /// it skips, a sun event that does not happen).
    public func interval(startingOn day: CalendarDay, location: (latitude: Double, longitude: Double)?,
                         zone: CalendarZone = .system) -> ScheduleInterval? {
        guard weekdays.contains(day.weekday), let opening = start.date(on: day, location: location, zone: zone) else {
            return nil
        }
        let closing = [day, day.adding(days: 1)].lazy.compactMap { end.date(on: $0, location: location, zone: zone) }
            .first { $0 > opening }
        return closing.map { ScheduleInterval(start: opening, end: $0) }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        do { self = try RecordingWindow(parsing: try container.decode(String.self)) } catch let error as RecorderError {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.message)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

// MARK: - Schedules

/// A stretch of time a schedule records in: from `start` up to, not including, `end`.
public struct ScheduleInterval: Sendable, Equatable, Codable {
    public var start: Date
    public var end: Date

    public init(start: Date, end: Date) {
        self.start = start
        self.end = end
    }

    public func contains(_ date: Date) -> Bool { start <= date && date < end }
}

/// Whether a schedule wants to record at an instant, and from when to when: recd's `status`
/// answer. Seconds since 1970 like every date in the protocol.
public struct ScheduleStatus: Sendable, Equatable, Codable {
    public var active: Bool
    /// The interval (windows merged) the instant is in.
    public var currentStart: Date?
    public var currentEnd: Date?
    /// The first interval starting after it; nil when none starts within a year (a sun
    /// window far inside a polar circle, or no windows).
    public var nextStart: Date?
    public var nextEnd: Date?
    /// Set while a window that is open by the clock is held because the system clock is not
    /// synchronized yet (`[schedule] wait_for_clock`): the seconds the hold may still last.
    public var heldForClock: Double?

    public init(current: ScheduleInterval?, next: ScheduleInterval?) {
        active = current != nil
        currentStart = current?.start
        currentEnd = current?.end
        nextStart = next?.start
        nextEnd = next?.end
    }

    public var current: ScheduleInterval? { currentStart.flatMap { start in currentEnd.map { ScheduleInterval(start: start, end: $0) } } }
    public var next: ScheduleInterval? { nextStart.flatMap { start in nextEnd.map { ScheduleInterval(start: start, end: $0) } } }
}

/// The windows a recorder follows, and where it is (for sun windows).
public struct Schedule: Sendable, Equatable, Codable {
    public var windows: [RecordingWindow]
    /// Degrees north, -90...90; with `longitude`, needed by sun windows only.
    public var latitude: Double?
    /// Degrees east, -180...180.
    public var longitude: Double?

    public init(windows: [RecordingWindow], latitude: Double? = nil, longitude: Double? = nil) {
        self.windows = windows
        self.latitude = latitude
        self.longitude = longitude
    }

    public static let latitudes: ClosedRange<Double> = -90...90
    public static let longitudes: ClosedRange<Double> = -180...180

    public var location: (latitude: Double, longitude: Double)? {
        guard let latitude, let longitude else { return nil }
        return (latitude, longitude)
    }

    /// The location's ranges, and a location for sun windows.
    public func validate() throws(RecorderError) {
        func invalid(_ reason: String) -> RecorderError { RecorderError(.invalidSettings, reason) }
        if (latitude == nil) != (longitude == nil) { throw invalid("a schedule's location needs both latitude and longitude") }
        if let latitude, let refusal = Limits.refusal("latitude", latitude, Schedule.latitudes, "degrees") { throw invalid(refusal) }
        if let longitude, let refusal = Limits.refusal("longitude", longitude, Schedule.longitudes, "degrees") { throw invalid(refusal) }
        if location == nil, let window = windows.first(where: \.usesSun) {
            throw invalid("the window '\(window)' follows the sun: the schedule needs a latitude and a longitude")
        }
    }

    /// Every window's intervals starting on the local days from two before `date`'s to eight
    /// after, merged where they overlap or touch, in order. Two days back covers any interval
    /// still open at `date` (none lasts two days); eight ahead, the next one of a weekly window.
    /// Intervals that join up beyond those days (`00:00..00:00`, every day) end, as far as
    /// this says, with the last day looked at: asked again then, it says the next part.
    public func occurrences(around date: Date, zone: CalendarZone = .system) -> [ScheduleInterval] {
        let today = CalendarDay(containing: date, in: zone)
        return occurrences(days: today.adding(days: -2)...today.adding(days: 8), zone: zone)
    }

    private func occurrences(days: ClosedRange<CalendarDay>, zone: CalendarZone) -> [ScheduleInterval] {
        let location = location
        var intervals: [ScheduleInterval] = []
        for number in days.lowerBound.dayNumber...days.upperBound.dayNumber {
            let day = CalendarDay(dayNumber: number)
            intervals += windows.compactMap { $0.interval(startingOn: day, location: location, zone: zone) }
        }
        var merged: [ScheduleInterval] = []
        for interval in intervals.sorted(by: { $0.start < $1.start }) {
            if let last = merged.last, interval.start <= last.end {
                merged[merged.count - 1].end = max(last.end, interval.end)
            } else {
                merged.append(interval)
            }
        }
        return merged
    }

    /// Whether `date` is in an interval, that interval, and the next one.
    public func status(at date: Date, zone: CalendarZone = .system) -> ScheduleStatus {
        let around = occurrences(around: date, zone: zone)
        return ScheduleStatus(current: around.first { $0.contains(date) }, next: next(after: date, around, zone))
    }

    /// The next instant after `date` at which `status(at:).active` changes: the current
    /// interval's end, or the next one's start. Nil when nothing opens within a year: the
    /// daemon need not wake before the configuration (or its location) changes. For windows
    /// that join up for more than a week, an end that is not one (see `occurrences`): at it,
    /// `active` stays true and the next call looks further.
    public func nextChange(after date: Date, zone: CalendarZone = .system) -> Date? {
        let around = occurrences(around: date, zone: zone)
        if let current = around.first(where: { $0.contains(date) }) { return current.end }
        return next(after: date, around, zone)?.start
    }

    /// The first interval starting after `date`: in `around` (the days near it), else looking
    /// on a week at a time, up to a year (sun windows can pause for months near the poles).
    private func next(after date: Date, _ around: [ScheduleInterval], _ zone: CalendarZone) -> ScheduleInterval? {
        if let next = around.first(where: { $0.start > date }) { return next }
        let today = CalendarDay(containing: date, in: zone)
        for week in stride(from: 7, through: 371, by: 7) {
            let days = today.adding(days: week - 2)...today.adding(days: week + 8)
            if let next = occurrences(days: days, zone: zone).first(where: { $0.start > date }) { return next }
        }
        return nil
    }
}

/// Recording by the clock or the sun: inside a window recd records (every frame, or armed
/// with a trigger); outside it only listens or closes the device. A window opening starts a
/// recording as `start` would; one closing stops the recording it started (finalized as by
/// `stop`). A recording a client started is left alone either way.
public struct ScheduledRecording: Sendable, Equatable {
    public enum Outside: String, Sendable, Codable, CaseIterable {
        /// The device closes between windows.
        case close
        /// recd listens between windows (levels, pre-roll).
        case listen
    }

    public var schedule: Schedule
    /// Armed in the windows with this trigger; nil: every frame is recorded.
    public var trigger: TriggerSettings?
    /// The recordings' name (nil: recording-<date>).
    public var name: String?
    public var outside: Outside
    /// Seconds after recd starts for which a window does not open while the system clock is
    /// not synchronized (a Raspberry Pi before NTP: its windows would open by the time saved
    /// at its last shutdown). Once the clock is synchronized, or this has passed, windows
    /// follow the clock as it is. 0: they always do (an offline station must record).
    public var waitForClock: Double

    public init(schedule: Schedule, trigger: TriggerSettings? = nil, name: String? = nil, outside: Outside = .close,
                waitForClock: Double = 0) {
        self.schedule = schedule
        self.trigger = trigger
        self.name = name
        self.outside = outside
        self.waitForClock = waitForClock
    }
}
