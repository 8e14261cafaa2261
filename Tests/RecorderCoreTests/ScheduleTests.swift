import Foundation
import Glibc
import RecorderModel
import Testing

/// Recording windows: sun times against astral (Tests/reference/sun_times.py), the text forms,
/// windows on concrete days, merging, status and the next change, and daylight saving time
/// against Python's zoneinfo (Tests/reference/zone_times.py).
///
/// No test sets TZ: the other suites read local time on other threads at the same time. Days
/// and clock readings come from a `CalendarZone` given to each call — UTC, a fixed offset, or
/// Europe/Berlin's 2026 transitions as zoneinfo lists them. `CalendarZone.system` (the
/// daemon's) is checked with TZ=Europe/Berlin in a child process: this test binary again.
@Suite("Schedule")
struct ScheduleTests {
    static let reference = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("reference").path

    /// What `/usr/bin/python3 script arguments` prints (Debian's Python: python3-astral).
    static func python(_ script: String, _ arguments: [String], environment: [String: String]? = nil) throws -> String {
        try run("/usr/bin/python3", [reference + "/" + script] + arguments, environment: environment)
    }

    static func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw ReferenceFailure("\(executable) \(arguments) exited \(process.terminationStatus)") }
        return String(decoding: data, as: UTF8.self)
    }

    struct ReferenceFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    static func date(_ seconds: Double) -> Date { Date(timeIntervalSince1970: seconds) }
    /// A UTC instant, for the zone-free tests.
    static func utc(_ year: Int, _ month: Int, _ day: Int, _ hour: Int = 0, _ minute: Int = 0, _ second: Int = 0) -> Date {
        date(Double(CalendarDay(year: year, month: month, day: day).dayNumber * 86400 + hour * 3600 + minute * 60 + second))
    }

    // MARK: Sun times

    struct Place: Sendable {
        var name: String
        var latitude: Double
        var longitude: Double
        var key: String { String(format: "%g,%g", latitude, longitude) }
    }

    static let places = [
        Place(name: "Quito (equator)", latitude: 0, longitude: -78.47),
        Place(name: "London", latitude: 51.5, longitude: -0.13),
        Place(name: "Cape Town", latitude: -33.92, longitude: 18.42),
        Place(name: "Helsinki", latitude: 60.17, longitude: 24.94),
        Place(name: "Tromsø", latitude: 69.65, longitude: 18.96),
        Place(name: "Longyearbyen", latitude: 78.22, longitude: 15.63),
        // Far east: in UTC its sunrise is on the UTC day before its date.
        Place(name: "Auckland", latitude: -36.85, longitude: 174.76),
    ]

    /// Astral's instants per place and event, from two days before 2026 to two days after,
    /// nil where astral says the sun does not reach the altitude.
    static func astral(_ places: [Place], year: Int = 2026) throws -> [String: [SunEvent: [(date: String, time: Double?)]]] {
        let text = try python("sun_times.py", [String(year)] + places.map(\.key))
        var table: [String: [SunEvent: [(date: String, time: Double?)]]] = [:]
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count == 6 else { throw ReferenceFailure("sun_times.py printed '\(line)'") }
            for (index, event) in [SunEvent.dawn, .sunrise, .sunset, .dusk].enumerated() {
                table[fields[0], default: [:]][event, default: []].append((fields[1], Double(fields[2 + index])))
            }
        }
        return table
    }

    /// Every event of every day of 2026 within 60 s of astral's, in UTC; the days without one
    /// the same on both sides. Except in the few days at the edge of a polar day or night (or,
    /// for dawn and dusk, white nights): there the event's time runs away from noon or
    /// midnight by ever more minutes a day (dt/dδ grows without bound as the hour angle nears
    /// 0° or 180°), so a difference in the models' last digits becomes minutes, or the event
    /// on one side and none on the other. Astral itself is only good to the second (it
    /// truncates), and 1.6 evaluates the sun at whole seconds.
    @Test func sunTimesMatchAstralEveryDayOf2026AtSevenPlaces() throws {
        let astral = try Self.astral(Self.places)
        var report: [String] = []
        for place in Self.places {
            var worst = 0.0, worstAtLimit = 0.0, edges = 0
            for event in SunEvent.allCases {
                let rows = try #require(astral[place.key]?[event])
                let instants = rows.compactMap(\.time).sorted()
                let astralNone = Set(rows.filter { $0.time == nil }.map(\.date))
                var day = CalendarDay(year: 2026, month: 1, day: 1)
                var edgeDays = 0
                var ownNone = Set<String>()
                let days = (0..<365).map { day.adding(days: $0) }
                let times = days.map { SolarTimes.time(of: event, on: $0, latitude: place.latitude, longitude: place.longitude, zone: .utc) }
                for (day, time) in zip(days, times) where time.date == nil { ownNone.insert(day.description) }
                for (index, time) in times.enumerated() {
                    day = days[index]
                    let nearby = (-2...2).map { day.adding(days: $0).description }
                    let nearLimit = nearby.contains { astralNone.contains($0) || ownNone.contains($0) }
                    let start = Double(day.dayNumber * 86400)
                    let theirs = instants.first { $0 >= start && $0 < start + 86400 }
                    let label = "\(place.name) \(event) \(day)"
                    switch (time, theirs) {
                    case (.at(let mine), let theirs?):
                        let error = abs(mine.timeIntervalSince1970 - theirs)
                        if nearLimit {
                            #expect(error < 300, "\(label): \(mine) against astral's \(Self.date(theirs)), at the polar limit")
                            worstAtLimit = max(worstAtLimit, error)
                        } else {
                            #expect(error <= 60, "\(label): \(mine) against astral's \(Self.date(theirs))")
                            worst = max(worst, error)
                        }
                    case (.at(let mine), nil):
                        #expect(nearLimit, "\(label): \(mine), astral has none")
                        edgeDays += 1
                    case (_, let theirs?):
                        #expect(nearLimit, "\(label): \(time), astral has \(Self.date(theirs))")
                        edgeDays += 1
                    case (_, nil):
                        // Which way: up in the hemisphere's summer half, down in its winter half.
                        let northernSummer = day >= CalendarDay(year: 2026, month: 3, day: 20) && day < CalendarDay(year: 2026, month: 9, day: 23)
                        let expected: SunTime = (northernSummer == (place.latitude > 0)) ? .alwaysUp : .alwaysDown
                        #expect(time == expected, "\(label)")
                    }
                }
                // A polar day and a polar night each have two edges; a day at each at most.
                #expect(edgeDays <= 4, "\(place.name) \(event): \(edgeDays) days where one side has the event and the other not")
                edges += edgeDays
                if place.latitude < 66 { #expect(edgeDays == 0 && ownNone.isEmpty || event == .dawn || event == .dusk, "\(place.name) \(event)") }
            }
            report.append("\(place.name) \(Int(worst)) s (at polar limits \(Int(worstAtLimit)) s, \(edges) days with the event on one side only)")
        }
        print("Sun times, largest difference from astral: " + report.joined(separator: ", "))
    }

    @Test func polarDaysAndNightsAreSaidAsSuch() {
        // Tromsø: midnight sun around the June solstice, polar night around December's.
        let june = CalendarDay(year: 2026, month: 6, day: 21), december = CalendarDay(year: 2026, month: 12, day: 21)
        let summer = SolarTimes(day: june, latitude: 69.65, longitude: 18.96, zone: .utc)
        let winter = SolarTimes(day: december, latitude: 69.65, longitude: 18.96, zone: .utc)
        #expect(summer.sunrise == .alwaysUp && summer.sunset == .alwaysUp && summer.dawn == .alwaysUp && summer.dusk == .alwaysUp)
        #expect(winter.sunrise == .alwaysDown && winter.sunset == .alwaysDown)
        // Civil twilight still comes in Tromsø's polar night: the sun is 3° below at noon.
        #expect(winter.dawn.date != nil && winter.dusk.date != nil)
        // The South Pole's seasons are the other way round.
        #expect(SolarTimes.time(of: .sunrise, on: june, latitude: -90, longitude: 0, zone: .utc) == .alwaysDown)
        #expect(SolarTimes.time(of: .sunset, on: december, latitude: -90, longitude: 0, zone: .utc) == .alwaysUp)
    }

    @Test func calendarDaysCountAndNameTheirWeekdays() {
        #expect(CalendarDay(dayNumber: 0) == CalendarDay(year: 1970, month: 1, day: 1))
        #expect(CalendarDay(year: 1970, month: 1, day: 1).weekday == .thursday)
        #expect(CalendarDay(year: 2026, month: 6, day: 21).weekday == .sunday)
        #expect(CalendarDay(year: 1969, month: 12, day: 31).dayNumber == -1 && CalendarDay(dayNumber: -1).weekday == .wednesday)
        #expect(CalendarDay(year: 2026, month: 2, day: 29) == CalendarDay(year: 2026, month: 3, day: 1))
        #expect(CalendarDay(year: 2026, month: 13, day: 1) == CalendarDay(year: 2027, month: 1, day: 1))
        #expect(CalendarDay(year: 2024, month: 2, day: 29).adding(days: 366).description == "2025-03-01")
        // Against the C library, over a few centuries.
        for number in stride(from: -200_000, through: 200_000, by: 997) {
            var seconds = time_t(number) * 86400
            var fields = tm()
            gmtime_r(&seconds, &fields)
            let day = CalendarDay(dayNumber: number)
            let expected: [Int] = [Int(fields.tm_year) + 1900, Int(fields.tm_mon) + 1, Int(fields.tm_mday)]
            #expect([day.year, day.month, day.day] == expected)
            #expect(day.weekday.rawValue % 7 == Int(fields.tm_wday))
            #expect(day.dayNumber == number)
        }
        let east = CalendarZone.fixed(secondsEastOfUTC: 10 * 3600)
        #expect(CalendarDay(containing: Self.utc(2026, 6, 21, 14), in: east) == CalendarDay(year: 2026, month: 6, day: 22))
        #expect(CalendarDay(containing: Self.utc(2026, 6, 21, 13, 59, 59), in: east) == CalendarDay(year: 2026, month: 6, day: 21))
    }

    // MARK: Text

    @Test func windowTextsParseAndRenderCanonically() throws {
        let canonical: [(String, String)] = [
            ("mon-fri 05:00..09:00", "mon-fri 05:00..09:00"),
            ("sat,sun 06:00..10:00", "sat,sun 06:00..10:00"),
            ("sunrise-1h..sunrise+3h", "sunrise-1h..sunrise+3h"),
            ("22:00..02:00", "22:00..02:00"),
            ("sunset..sunrise", "sunset..sunrise"),
            ("dawn..dusk+1h30m", "dawn..dusk+1h30m"),
            ("fri-mon 07:15:30..7:20", "fri-mon 07:15:30..07:20"),
            ("  Mon-FRI   5:00 .. 09:00:00 ", "mon-fri 05:00..09:00"),
            ("sat sunrise - 1h..sunset+90", "sat sunrise-1h..sunset+1m30s"),
            ("sunset + 0s..sunrise-1h1s", "sunset..sunrise-1h1s"),
            ("sun,tue-wed,sat 00:00..00:00", "sun,tue-wed,sat 00:00..00:00"),
            ("dusk..dawn+12h", "dusk..dawn+12h"),
            // DurationText's clock readings: MM:SS, or HH:MM:SS.
            ("sunrise-01:30..sunset+1:30:00", "sunrise-1m30s..sunset+1h30m"),
        ]
        for (text, expected) in canonical {
            let window = try RecordingWindow(parsing: text)
            #expect(window.description == expected, "\(text)")
            #expect(try RecordingWindow(parsing: window.description) == window, "\(text)")
        }
        let window = try RecordingWindow(parsing: "fri-mon sunset-30m..02:00")
        #expect(window.days == [WeekdayRange(.friday, .monday)])
        #expect(window.weekdays == [.friday, .saturday, .sunday, .monday])
        #expect(window.start == .sun(.sunset, offset: -1800) && window.end == .clock(7200))
        #expect(try RecordingWindow(parsing: "sat,sun 1:00..2:00").weekdays == [.saturday, .sunday])
        #expect(try RecordingWindow(parsing: "01:00..02:00").weekdays == Set(Weekday.allCases))
        #expect(try RecordingWindow(parsing: "wed-tue 01:00..02:00").weekdays == Set(Weekday.allCases))
        #expect(try WindowTime(parsing: "dusk+1h30m") == .sun(.dusk, offset: 5400))
        #expect(try WindowTime(parsing: "07:15:30") == .clock(7 * 3600 + 15 * 60 + 30))
    }

    @Test func badTextsAreRefusedNamingThePart() {
        let refusals: [(String, String)] = [
            ("mon-fry 05:00..09:00", "'mon-fry' is not a weekday"),
            ("mon,,fri 05:00..09:00", "'mon,,fri' is not a weekday"),
            ("sat,sun,funday 05:00..09:00", "'funday' is not a weekday"),
            ("mon-tue-wed 05:00..09:00", "'mon-tue-wed' is not a weekday"),
            ("05:00-09:00", "'05:00-09:00' is not a window"),
            ("05:00..", "lacks a start or an end"),
            ("..09:00", "lacks a start or an end"),
            ("05:00..06:00..07:00", "more than one '..'"),
            ("24:00..09:00", "'24:00' is not a time of day or sun event"),
            ("05:60..09:00", "'05:60' is not a time of day"),
            ("05:00..09:00:60", "'09:00:60' is not a time of day"),
            ("5..9", "'5' is not a time of day"),
            ("+5:00..09:00", "'+5:00' is not a time of day"),
            ("05:000..09:00", "'05:000' is not a time of day"),
            ("noon..09:00", "'noon' is not a time of day"),
            ("sunrise*2..09:00", "'sunrise*2' is not a time of day"),
            ("sunrise+1x..09:00", "'sunrise+1x' has an offset '1x' that is not a duration"),
            ("sunrise-13h..09:00", "'sunrise-13h' has an offset of more than 12 hours"),
            ("sunrise+1.5s..09:00", "'sunrise+1.5s' has an offset of a fraction of a second"),
            ("sunrise+-1h..09:00", "'sunrise+-1h' has an offset '-1h' that is not a duration"),
        ]
        for (text, message) in refusals {
            do {
                let window = try RecordingWindow(parsing: text)
                Issue.record("'\(text)' parsed as \(window)")
            } catch {
                #expect(error.code == .invalidSettings)
                #expect(error.message.contains(message), "\(text): \(error.message)")
            }
        }
    }

    @Test func windowsAndSchedulesAreCodableAsTheirText() throws {
        let schedule = Schedule(windows: [try RecordingWindow(parsing: "mon-fri 05:00..09:00"),
                                          try RecordingWindow(parsing: "sunset-30m..sunrise")],
                                latitude: 51.5, longitude: -0.13)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let json = String(decoding: try encoder.encode(schedule), as: UTF8.self)
        #expect(json == #"{"latitude":51.5,"longitude":-0.13,"windows":["mon-fri 05:00..09:00","sunset-30m..sunrise"]}"#)
        #expect(try JSONDecoder().decode(Schedule.self, from: Data(json.utf8)) == schedule)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(RecordingWindow.self, from: Data(#""mon-fry 05:00..09:00""#.utf8)) }
        #expect(try JSONDecoder().decode(WindowTime.self, from: Data(#""dusk + 90m""#.utf8)) == .sun(.dusk, offset: 5400))
        let status = ScheduleStatus(current: nil, next: ScheduleInterval(start: Self.date(100), end: Self.date(200)))
        let statusJSON = String(decoding: try encoder.encode(status), as: UTF8.self)
        #expect(statusJSON.contains(#""active":false"#) && statusJSON.contains(#""nextStart""#) && !statusJSON.contains("currentStart"))
        #expect(try JSONDecoder().decode(ScheduleStatus.self, from: Data(statusJSON.utf8)) == status)
    }

    @Test func validationWantsALocationForSunWindowsAndSaneCoordinates() throws {
        let sun = try RecordingWindow(parsing: "sunset..sunrise"), clock = try RecordingWindow(parsing: "05:00..09:00")
        #expect(throws: Never.self) { try Schedule(windows: [clock]).validate() }
        #expect(throws: Never.self) { try Schedule(windows: [clock, sun], latitude: -90, longitude: 180).validate() }
        func refusal(_ schedule: Schedule) -> String? {
            do { try schedule.validate() } catch { return error.message }
            return nil
        }
        #expect(refusal(Schedule(windows: [clock, sun]))?.contains("'sunset..sunrise' follows the sun") == true)
        #expect(refusal(Schedule(windows: [sun], latitude: 51.5))?.contains("both latitude and longitude") == true)
        #expect(refusal(Schedule(windows: [sun], latitude: 91, longitude: 0)) == "'latitude' must be between -90 and 90 degrees, not 91")
        #expect(refusal(Schedule(windows: [sun], latitude: 0, longitude: -180.5)) == "'longitude' must be between -180 and 180 degrees, not -180.5")
        #expect(refusal(Schedule(windows: [sun], latitude: .nan, longitude: 0))?.contains("finite") == true)
    }

    // MARK: Windows on days

    // 2026-01-02 is a Friday.
    static let friday = CalendarDay(year: 2026, month: 1, day: 2)

    @Test func weekdaysFilterTheDayAWindowStarts() throws {
        let weekdays = Schedule(windows: [try RecordingWindow(parsing: "mon-fri 05:00..09:00")])
        #expect(Self.friday.weekday == .friday)
        let fridayMorning = weekdays.status(at: Self.utc(2026, 1, 2, 6), zone: .utc)
        #expect(fridayMorning.active && fridayMorning.current == ScheduleInterval(start: Self.utc(2026, 1, 2, 5), end: Self.utc(2026, 1, 2, 9)))
        // Saturday 06:00: nothing; next on Monday.
        let saturday = weekdays.status(at: Self.utc(2026, 1, 3, 6), zone: .utc)
        #expect(!saturday.active && saturday.current == nil)
        #expect(saturday.next == ScheduleInterval(start: Self.utc(2026, 1, 5, 5), end: Self.utc(2026, 1, 5, 9)))

        // A Friday 22:00..02:00 window is still on Saturday at 01:00, and not on Sunday's.
        let night = Schedule(windows: [try RecordingWindow(parsing: "fri 22:00..02:00")])
        let saturdayNight = night.status(at: Self.utc(2026, 1, 3, 1), zone: .utc)
        #expect(saturdayNight.active && saturdayNight.current == ScheduleInterval(start: Self.utc(2026, 1, 2, 22), end: Self.utc(2026, 1, 3, 2)))
        #expect(saturdayNight.next == ScheduleInterval(start: Self.utc(2026, 1, 9, 22), end: Self.utc(2026, 1, 10, 2)))
        #expect(!night.status(at: Self.utc(2026, 1, 4, 1), zone: .utc).active)
        #expect(!night.status(at: Self.utc(2026, 1, 2, 1), zone: .utc).active)
        // A wrapping range.
        let long = Schedule(windows: [try RecordingWindow(parsing: "fri-mon 12:00..13:00")])
        let starts = long.occurrences(around: Self.utc(2026, 1, 7), zone: .utc).map { CalendarDay(containing: $0.start, in: .utc).weekday }
        // From Monday 5 January (two days before the 7th) to Thursday the 15th.
        #expect(starts == [.monday, .friday, .saturday, .sunday, .monday])
    }

    @Test func windowsCrossingMidnightEndTheNextDayAndOverlapsMerge() throws {
        let zone = CalendarZone.fixed(secondsEastOfUTC: -5 * 3600)
        func local(_ day: Int, _ hour: Int, _ minute: Int = 0) -> Date { Self.utc(2026, 1, day, hour + 5, minute) }
        let nightly = Schedule(windows: [try RecordingWindow(parsing: "22:00..02:00")])
        let intervals = nightly.occurrences(around: local(10, 12), zone: zone)
        #expect(intervals.count == 11)
        #expect(intervals.first == ScheduleInterval(start: local(8, 22), end: local(9, 2)))
        #expect(intervals.last == ScheduleInterval(start: local(18, 22), end: local(19, 2)))
        #expect(intervals.allSatisfy { $0.end.timeIntervalSince($0.start) == 4 * 3600 })

        // Same start and end: a whole day, so every day's touches the next: one interval.
        let always = Schedule(windows: [try RecordingWindow(parsing: "00:00..00:00")])
        #expect(always.occurrences(around: local(10, 12), zone: zone) == [ScheduleInterval(start: local(8, 0), end: local(19, 0))])

        let overlapping = Schedule(windows: [
            try RecordingWindow(parsing: "05:00..07:00"), try RecordingWindow(parsing: "07:00..08:00"),  // touching
            try RecordingWindow(parsing: "06:30..06:45"),  // inside
            try RecordingWindow(parsing: "23:00..05:00"),  // touching the next morning's
            try RecordingWindow(parsing: "sat 12:00..13:00"), try RecordingWindow(parsing: "sat 12:30..14:00"),
        ])
        let merged = overlapping.occurrences(around: local(10, 12), zone: zone)  // 10 January is a Saturday
        #expect(merged.contains(ScheduleInterval(start: local(9, 23), end: local(10, 8))))
        #expect(merged.contains(ScheduleInterval(start: local(10, 12), end: local(10, 14))))
        // 8 January's morning has no evening before it among the days looked at.
        #expect(merged.first == ScheduleInterval(start: local(8, 5), end: local(8, 8)))
        #expect(merged.last == ScheduleInterval(start: local(18, 23), end: local(19, 5)))
        for (one, next) in zip(merged, merged.dropFirst()) { #expect(one.end < next.start) }
        // Eleven evenings (ten with the next morning), the first morning, two Saturdays.
        #expect(merged.count == 14)
    }

    @Test func statusAndNextChangeAroundTheBoundaries() throws {
        let schedule = Schedule(windows: [try RecordingWindow(parsing: "mon-fri 05:00..09:00"), try RecordingWindow(parsing: "fri 22:00..02:00")])
        let fridayOpen = Self.utc(2026, 1, 2, 5)
        let before = schedule.status(at: fridayOpen.addingTimeInterval(-1), zone: .utc)
        #expect(!before.active && before.nextStart == fridayOpen && before.nextEnd == Self.utc(2026, 1, 2, 9))
        #expect(schedule.nextChange(after: fridayOpen.addingTimeInterval(-1), zone: .utc) == fridayOpen)
        // The start belongs to the interval, the end does not.
        let atOpen = schedule.status(at: fridayOpen, zone: .utc)
        #expect(atOpen.active && atOpen.currentStart == fridayOpen && atOpen.nextStart == Self.utc(2026, 1, 2, 22))
        #expect(schedule.nextChange(after: fridayOpen, zone: .utc) == Self.utc(2026, 1, 2, 9))
        let atClose = schedule.status(at: Self.utc(2026, 1, 2, 9), zone: .utc)
        #expect(!atClose.active && atClose.nextStart == Self.utc(2026, 1, 2, 22) && atClose.nextEnd == Self.utc(2026, 1, 3, 2))
        #expect(schedule.nextChange(after: Self.utc(2026, 1, 3, 1), zone: .utc) == Self.utc(2026, 1, 3, 2))
        // After Friday night: Monday morning.
        #expect(schedule.nextChange(after: Self.utc(2026, 1, 3, 2), zone: .utc) == Self.utc(2026, 1, 5, 5))
        // Walking the changes flips `active` every time.
        var time = Self.utc(2026, 1, 1)
        var active = schedule.status(at: time, zone: .utc).active
        for _ in 0..<20 {
            let change = try #require(schedule.nextChange(after: time, zone: .utc))
            #expect(change > time)
            #expect(schedule.status(at: change.addingTimeInterval(-1), zone: .utc).active == active)
            let now = schedule.status(at: change, zone: .utc).active
            #expect(now != active, "\(change)")
            active = now
            time = change
        }
        #expect(Schedule(windows: []).nextChange(after: time, zone: .utc) == nil)
        #expect(Schedule(windows: []).status(at: time, zone: .utc) == ScheduleStatus(current: nil, next: nil))
    }

    /// `sunrise..sunset` and `sunset..sunrise` at Tromsø in its summer time (UTC+2), each day
    /// of 2026, against intervals made from astral's instants by the rule `RecordingWindow`
    /// states: open at the start event of the local day; close at the first end event after
    /// it on that day or the next; neither missing.
    @Test func sunWindowsFollowAstralIncludingThePolarRule() throws {
        let tromsø = Place(name: "Tromsø", latitude: 69.65, longitude: 18.96)
        let astral = try Self.astral([tromsø])[tromsø.key]!
        let zone = CalendarZone.fixed(secondsEastOfUTC: 7200)
        let instants = Dictionary(uniqueKeysWithValues: SunEvent.allCases.map { ($0, astral[$0]!.compactMap(\.time).sorted()) })
        func events(_ event: SunEvent) -> [Double] { instants[event]! }
        let missing = Dictionary(uniqueKeysWithValues: SunEvent.allCases.map { event in (event, Set(astral[event]!.filter { $0.time == nil }.map(\.date))) })
        func dayStart(_ day: CalendarDay) -> Double { Double(day.dayNumber * 86400 - 7200) }
        func inDay(_ event: SunEvent, _ day: CalendarDay) -> Double? { events(event).first { $0 >= dayStart(day) && $0 < dayStart(day.adding(days: 1)) } }
        var crossings = 0, polarSkips = 0, opened = 0
        for (start, end) in [(SunEvent.sunrise, SunEvent.sunset), (.sunset, .sunrise)] {
            let window = RecordingWindow(start: .sun(start, offset: 0), end: .sun(end, offset: 0))
            let first = CalendarDay(year: 2026, month: 1, day: 1)
            for day in (0..<365).map({ first.adding(days: $0) }) {
                let mine = window.interval(startingOn: day, location: (tromsø.latitude, tromsø.longitude), zone: zone)
                let opening = inDay(start, day)
                let closing = opening.flatMap { opening in [day, day.adding(days: 1)].compactMap { inDay(end, $0) }.first { $0 > opening } }
                // At the polar limits the two sides may disagree on whether an event happens
                // (sunTimesMatchAstralEveryDayOf2026AtSevenPlaces): skip those days.
                let nearLimit = (-3...3).contains { offset in
                    [start, end].contains { missing[$0]!.contains(day.adding(days: offset).description) }
                }
                if let opening, let closing {
                    guard let mine else {
                        #expect(nearLimit, "\(window) \(day): astral opens \(Self.date(opening)) to \(Self.date(closing))")
                        continue
                    }
                    #expect(abs(mine.start.timeIntervalSince1970 - opening) <= 60 && abs(mine.end.timeIntervalSince1970 - closing) <= 60,
                            "\(window) \(day): \(mine) against \(Self.date(opening))...\(Self.date(closing))")
                    opened += 1
                    if closing >= dayStart(day.adding(days: 1)) && start == .sunrise { crossings += 1 }
                } else {
                    #expect(mine == nil || nearLimit, "\(window) \(day): \(String(describing: mine)), astral's days do not open it")
                    if mine == nil { polarSkips += 1 }
                }
            }
        }
        // The cases this is about happened: polar days and nights skipped, and sunrise..sunset
        // closing at a sunset after midnight in the days before and after the polar day.
        #expect(polarSkips > 100 && crossings > 0 && opened > 300, "\(polarSkips) skipped, \(crossings) crossing midnight, \(opened) opened")
    }

    @Test func aSunWindowWaitsOutThePolarNight() throws {
        // Longyearbyen: no sunrise from late October to mid February.
        let schedule = Schedule(windows: [try RecordingWindow(parsing: "sunrise-1h..sunrise+1h")], latitude: 78.22, longitude: 15.63)
        let november = Self.utc(2026, 11, 15)
        let status = schedule.status(at: november, zone: .utc)
        #expect(!status.active && status.current == nil)
        let astral = try Self.astral([Place(name: "Longyearbyen", latitude: 78.22, longitude: 15.63)], year: 2027)["78.22,15.63"]!
        let firstSunrise = try #require(astral[.sunrise]!.compactMap(\.time).first { $0 > november.timeIntervalSince1970 })
        let next = try #require(status.nextStart)
        // Astral's first sunrise of 2027 is on the polar limit: a day either way is allowed.
        #expect(abs(next.timeIntervalSince1970 + 3600 - firstSunrise) < 2 * 86400, "\(next) against astral's \(Self.date(firstSunrise))")
        #expect(schedule.nextChange(after: november, zone: .utc) == next)
        #expect(status.nextEnd == next.addingTimeInterval(7200))
        // A window that never opens: no change within the year.
        let never = Schedule(windows: [try RecordingWindow(parsing: "sunrise..sunset")], latitude: 90, longitude: 0)
        #expect(never.nextChange(after: Self.utc(2026, 11, 15), zone: .utc) == nil)
    }

    // MARK: Daylight saving time

    static let dstReadings = ["2026-03-28 22:00:00", "2026-03-29 00:00:00", "2026-03-29 01:30:00", "2026-03-29 02:00:00",
                              "2026-03-29 02:30:00", "2026-03-29 03:00:00", "2026-03-29 04:00:00", "2026-03-30 00:00:00",
                              "2026-10-25 00:00:00", "2026-10-25 02:00:00", "2026-10-25 02:30:00", "2026-10-25 03:00:00",
                              "2026-10-25 03:30:00", "2026-10-26 00:00:00", "2026-07-01 12:00:00", "2026-12-31 23:59:59"]

    /// Europe/Berlin's 2026 from zoneinfo: its offsets as a `CalendarZone`, and the instants of
    /// `dstReadings`.
    static func berlin() throws -> (zone: CalendarZone, readings: [String: Double]) {
        let lines = try python("zone_times.py", ["Europe/Berlin", "2026"] + dstReadings).split(separator: "\n").map { $0.split(separator: " ") }
        var initial = 0
        var transitions: [(Int64, Int)] = []
        var readings: [String: Double] = [:]
        for fields in lines {
            switch fields[0] {
            case "initial": initial = Int(fields[1])!
            case "transition": transitions.append((Int64(fields[1])!, Int(fields[2])!))
            case "reading": readings[fields[1] + " " + fields[2]] = Double(fields[3])!
            default: throw ReferenceFailure("zone_times.py printed \(fields)")
            }
        }
        guard transitions.count == 2 else { throw ReferenceFailure("Europe/Berlin has \(transitions.count) transitions in 2026") }
        let (changes, before) = (transitions, initial)
        let zone = CalendarZone { seconds in changes.last { $0.0 <= seconds }?.1 ?? before }
        return (zone, readings)
    }

    static func reading(_ text: String, in zone: CalendarZone) -> Date {
        let parts = text.split(whereSeparator: { " -:".contains($0) }).map { Int($0)! }
        return zone.date(CalendarDay(year: parts[0], month: parts[1], day: parts[2]), hour: parts[3], minute: parts[4], second: parts[5])
    }

    @Test func clockReadingsOnDSTDaysAreZoneinfosFoldZero() throws {
        let (zone, readings) = try Self.berlin()
        for text in Self.dstReadings {
            #expect(Self.reading(text, in: zone).timeIntervalSince1970 == readings[text], "\(text)")
        }
        // The skipped 02:30 is 03:30 summer time (01:30 UTC); the repeated one the first, in summer time (00:30 UTC).
        #expect(readings["2026-03-29 02:30:00"] == Self.utc(2026, 3, 29, 1, 30).timeIntervalSince1970)
        #expect(readings["2026-10-25 02:30:00"] == Self.utc(2026, 10, 25, 0, 30).timeIntervalSince1970)
    }

    @Test func windowsOnDSTDays() throws {
        let (zone, readings) = try Self.berlin()
        func at(_ text: String) -> Date { Self.date(readings[text]!) }
        func interval(_ window: String, _ day: CalendarDay) throws -> ScheduleInterval? {
            try RecordingWindow(parsing: window).interval(startingOn: day, location: nil, zone: zone)
        }
        let spring = CalendarDay(year: 2026, month: 3, day: 29), autumn = CalendarDay(year: 2026, month: 10, day: 25)
        // 02:30 does not exist on 29 March: the window opens at 03:30 summer time.
        #expect(try interval("02:30..04:00", spring) == ScheduleInterval(start: at("2026-03-29 02:30:00"), end: at("2026-03-29 04:00:00")))
        #expect(try interval("02:30..04:00", spring).map { $0.end.timeIntervalSince($0.start) } == 1800)
        // Saturday night into the short night: 22:00 to 03:00 is four hours.
        #expect(try interval("22:00..03:00", spring.adding(days: -1)) == ScheduleInterval(start: at("2026-03-28 22:00:00"), end: at("2026-03-29 03:00:00")))
        #expect(try interval("22:00..03:00", spring.adding(days: -1)).map { $0.end.timeIntervalSince($0.start) } == 4 * 3600)
        // The whole day: 23 hours in spring, 25 in autumn.
        #expect(try interval("00:00..00:00", spring) == ScheduleInterval(start: at("2026-03-29 00:00:00"), end: at("2026-03-30 00:00:00")))
        #expect(try interval("00:00..00:00", spring).map { $0.end.timeIntervalSince($0.start) } == 23 * 3600)
        #expect(try interval("00:00..00:00", autumn) == ScheduleInterval(start: at("2026-10-25 00:00:00"), end: at("2026-10-26 00:00:00")))
        #expect(try interval("00:00..00:00", autumn).map { $0.end.timeIntervalSince($0.start) } == 25 * 3600)
        // 02:30 happens twice on 25 October: the window opens at the first, so 02:30..03:30 lasts two hours.
        #expect(try interval("02:30..03:30", autumn) == ScheduleInterval(start: at("2026-10-25 02:30:00"), end: at("2026-10-25 03:30:00")))
        #expect(try interval("02:30..03:30", autumn).map { $0.end.timeIntervalSince($0.start) } == 2 * 3600)
        // And the day boundaries follow: the local day of an instant just before the change.
        #expect(CalendarDay(containing: at("2026-10-26 00:00:00").addingTimeInterval(-1), in: zone) == autumn)
        #expect(CalendarDay(containing: at("2026-10-26 00:00:00"), in: zone) == autumn.adding(days: 1))
    }

    static let childVariable = "RECD_SCHEDULE_SYSTEM_ZONE_OUTPUT"

    /// `CalendarZone.system` (the daemon's: localtime_r) under TZ=Europe/Berlin, in a child
    /// process — this test binary running `systemZoneChild` — against zoneinfo. The readings
    /// come in an order that would change glibc mktime's answer for the repeated 02:30 (it
    /// starts from the offset of its previous call): the system zone does not depend on it.
    @Test func theSystemZoneReadsTZInAChildProcess() throws {
        let (_, readings) = try Self.berlin()
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("recd-schedule-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        _ = try Self.run(executable, ["--testing-library", "swift-testing", "--filter", "systemZoneChild"],
                         environment: ["TZ": "Europe/Berlin", Self.childVariable: output])
        let lines = try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == Self.dstReadings.count)
        for line in lines {
            let text = String(line.prefix(19)), seconds = Double(line.dropFirst(20))
            #expect(seconds == readings[text], "\(line)")
        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[ScheduleTests.childVariable] != nil))
    func systemZoneChild() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childVariable])
        var lines: [String] = []
        for text in Self.dstReadings {
            // A winter mktime first: were mktime used, it would then take the repeated 02:30
            // of 25 October as the second (winter time) one, not zoneinfo's first.
            var winter = tm()
            winter.tm_year = 126
            winter.tm_mon = 11
            winter.tm_mday = 1
            winter.tm_isdst = -1
            _ = mktime(&winter)
            lines.append(text + " " + String(Int(Self.reading(text, in: .system).timeIntervalSince1970)))
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }
}
