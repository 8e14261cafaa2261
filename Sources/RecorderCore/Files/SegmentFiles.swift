import FoundationEssentials
import Glibc
import RecorderModel
import Sndfile
import SystemPackage

/// Where a session's segment boundaries fall.
struct SegmentClock: Sendable {
    let length: Double?
    let alignToClock: Bool
    let localTime: Bool
    let rate: Int

    init(settings: SegmentSettings, rate: Int) {
        length = settings.length
        alignToClock = settings.alignToClock
        localTime = settings.localTime
        self.rate = rate
    }

    /// How many frames the segment whose first frame is at `start` holds; nil: unbounded.
    ///
    /// Unaligned segments are exactly `length × rate` frames. Aligned ones end at the next
    /// multiple of `length` from midnight: recomputed from each segment's measured start, so
    /// the device clock's drift against the wall clock never accumulates. A segment that
    /// `follows` a boundary ends at the boundary after the one it started on (at least half
    /// a length away); a first segment ends at the next boundary at least a second away.
    func frames(startingAt start: Date, follows: Bool) -> Int64? {
        guard let length else { return nil }
        guard alignToClock else { return Int64((length * Double(rate)).rounded()) }
        let time = start.timeIntervalSince1970
        let boundary = nextBoundary(after: time, atLeast: follows ? length / 2 : Swift.min(1, length / 2), length: length)
        return Swift.max(1, Int64(((boundary - time) * Double(rate)).rounded()))
    }

    /// The time a segment starting at `start` is named after: its start, or, for a segment that
    /// `follows` a boundary on the clock, the boundary itself (the measured start of an hourly
    /// file may fall a few milliseconds before hh:00:00, and it is still the hh:00:00 file).
    func nameTime(forStart start: Date, follows: Bool) -> Date {
        guard alignToClock, follows, let length else { return start }
        let time = start.timeIntervalSince1970
        let day = startOfDay(time)
        let nearest = day + ((time - day) / length).rounded() * length
        // Only a boundary within a tenth of a second is one the clock meant.
        return Swift.abs(nearest - time) < 0.1 ? Date(timeIntervalSince1970: nearest) : start
    }

    /// The first multiple of `length` from midnight (or midnight itself) at least `gap` after `time`.
    func nextBoundary(after time: Double, atLeast gap: Double, length: Double) -> Double {
        var day = startOfDay(time)
        while true {
            let nextDay = startOfDay(day + 86400 + 7200)  // DST days are 23 or 25 hours long
            let multiples = ((time + gap - day) / length).rounded(.up)
            let boundary = Swift.min(day + Swift.max(0, multiples) * length, nextDay)
            if boundary - time >= gap { return boundary }
            day = nextDay
        }
    }

    private func startOfDay(_ time: Double) -> Double {
        guard localTime else { return (time / 86400).rounded(.down) * 86400 }
        return CalendarTime.localTime(on: Date(timeIntervalSince1970: time), hour: 0, minute: 0, second: 0).timeIntervalSince1970
    }
}

/// Creates a session's segment files: names them from the template, never over an existing
/// file, and opens them for writing as `.part`.
struct SegmentFileFactory: Sendable {
    let directory: String
    let template: String
    let localTime: Bool
    let name: String
    let recordingId: String
    let fileExtension: String
    let settings: RecordingSettings
    let sampleRate: Int
    let channels: Int
    /// The station's source the files are of (their metadata names it).
    var source: String? = nil

    /// The final path a segment starting at `date` would get (unique now).
    func path(index: Int, startedAt date: Date) throws(RecorderError) -> String {
        try Self.uniquePath(directory: directory, relative: render(index: index, date: date), fileExtension: fileExtension)
    }

    /// `directory/relative.fileExtension`, or the first of `relative-2`, `-3`… that neither
    /// exists nor is being written (`.part`); its directories made.
    static func uniquePath(directory: String, relative: String, fileExtension: String) throws(RecorderError) -> String {
        let base = directory + "/" + relative
        let parent = FilePath(base).removingLastComponent().string
        if let errnoValue = Directories.make(parent) {
            throw RecorderError(.failedToSave, "cannot create directory \(parent): \(Directories.reason(errnoValue))")
        }
        var candidate = base + "." + fileExtension
        var counter = 1
        while Self.exists(candidate) || Self.exists(candidate + ".part") {
            counter += 1
            candidate = "\(base)-\(counter).\(fileExtension)"
        }
        return candidate
    }

    /// Creates segment `index`'s file, as `.part`, named after `namedAt` (by default its start).
    func create(index: Int, startedAt date: Date, namedAt nameDate: Date? = nil,
                gapBefore: Gap? = nil) throws(RecorderError) -> (any AudioFileWriter, Segment) {
        let path = try path(index: index, startedAt: nameDate ?? date)
        return (try open(path: path), Segment(recordingId: recordingId, name: name, index: index, path: path,
                                               startedAt: date, sampleRate: sampleRate, gapBefore: gapBefore))
    }

    /// What a triggered recording's consumer holds before its first event: no file, no path.
    func placeholder(index: Int) -> Segment {
        Segment(recordingId: recordingId, name: name, index: index, path: "", startedAt: Date(), sampleRate: sampleRate)
    }

    func open(path: String) throws(RecorderError) -> any AudioFileWriter {
        do throws(RecorderError) {
            return try settings.makeFileWriter(path: path + ".part", sampleRate: sampleRate, channels: channels)
        } catch {
            throw RecorderError(.failedToSave, error.message)
        }
    }

    /// The template with its fields filled in: strftime's, then `{name}` and `{n}`.
    func render(index: Int, date: Date) -> String {
        Self.render(template, localTime: localTime, name: name, index: index, date: date)
    }

    static func render(_ template: String, localTime: Bool, name: String, index: Int, date: Date) -> String {
        // Names show the second the start falls in (`SegmentClock.nameTime` gives a segment on
        // the clock its boundary's); `{name}` is filled in after strftime, so a '%' in a recording's name stays literal.
        // The time as the file records it (to the millisecond): 46.9996 is 47.000 inside the
        // file, so its name must say :47 too.
        let recorded = Date(timeIntervalSince1970: (date.timeIntervalSince1970 * 1000).rounded() / 1000)
        let formatted = CalendarTime.format(recorded, template, local: localTime)
        let expanded = formatted.isEmpty ? template : formatted
        return expanded.replacing("{name}", with: name).replacing("{n}", with: String(index))
    }

    private static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }
}

/// Closing a segment: header, close, fsync, and the `.part` renamed to its final name, never
/// over another file (a numbered name if something took it meanwhile).
enum SegmentFinalizer {
    /// Closes `writer` and gives `segment` its final name. Returns the segment with the path
    /// it got and the first failure; the data stays in whichever name the file ended up with.
    static func finish(_ writer: any AudioFileWriter, _ segment: Segment) -> (Segment, RecorderError?) {
        var failure: RecorderError?
        do {
            try writer.close()
        } catch {
            failure = RecorderError.saving(error)
        }
        return moveIntoPlace(segment, failure: failure)
    }

    /// Renames a closed segment's `.part` into place.
    static func moveIntoPlace(_ segment: Segment, failure: RecorderError?) -> (Segment, RecorderError?) {
        var segment = segment
        var failure = failure
        do throws(RecorderError) {
            segment.path = try RecordingLibrary.moveIntoPlace(segment.partialPath, preferred: segment.path)
            Directories.sync(containing: segment.path)
        } catch {
            failure = failure ?? error
        }
        return (segment, failure)
    }
}
