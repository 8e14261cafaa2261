import Foundation
@testable import RecorderCore
import RecorderModel
import Sndfile
import Testing

/// What retention chooses, as a plan over a listing (the end-to-end tests delete for real).
@Suite("retention plan and sizes")
struct RetentionPlanTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// A one-second, `size`-byte recording that ended `hoursAgo` hours before `now`.
    func entry(_ file: String, hoursAgo: Double, size: Int64 = 1000) -> RecordingLibrary.Entry {
        RecordingLibrary.Entry(name: file, file: file, path: "/rec/" + file, format: .wav,
                               info: SoundFileInfo(frames: 48000, sampleRate: 48000, channels: 2, formatName: "WAV"),
                               size: size, modified: now.addingTimeInterval(-hoursAgo * 3600), segment: nil)
    }

    @Test func sizesParseInBinaryAndDecimalUnitsAndPercentages() {
        #expect(SpaceAmount(parsing: "64 MiB") == .bytes(64 << 20))
        #expect(SpaceAmount(parsing: "2GB") == .bytes(2_000_000_000))
        #expect(SpaceAmount(parsing: "1.5 GiB") == .bytes(3 << 29))
        #expect(SpaceAmount(parsing: "4096") == .bytes(4096))
        #expect(SpaceAmount(parsing: " 5% ") == .percent(5))
        #expect(SpaceAmount(parsing: "5 %") == .percent(5))
        for bad in ["", "lots", "-1", "12 XB", "150%", "%", "1e3", "64 mib"] {
            #expect(SpaceAmount(parsing: bad) == nil, "\(bad)")
        }
        #expect(SpaceAmount.percent(10).bytes(ofTotal: 1000) == 100)
        #expect(SpaceAmount.describe(bytes: 1536) == "1.5 KiB")
        #expect(SpaceAmount.describe(bytes: 64 << 20) == "64 MiB")
    }

    @Test func maximumAgeDeletesEveryRecordingOlderOldestFirst() {
        let entries = [entry("new.wav", hoursAgo: 1), entry("old.wav", hoursAgo: 50), entry("older.wav", hoursAgo: 70)]
        let due = RetentionPlan.due(entries, settings: RetentionSettings(maximumAge: 48 * 3600),
                                    space: FileSystemSpace(freeBytes: 1 << 30, totalBytes: 2 << 30), now: now)
        #expect(due.map(\.entry.file) == ["older.wav", "old.wav"])
        #expect(due.allSatisfy { $0.reason == .maximumAge })
    }

    /// A file whose start the clock did not vouch for (issue 50: a boot that never synchronized,
    /// three days behind or ahead) is not deleted by its age, which may be a step of the clock;
    /// the size and space limits still count it.
    @Test func maximumAgeNeverJudgesAnUnsynchronizedStart() {
        var unsynchronized = entry("unsynchronized.wav", hoursAgo: 80)
        unsynchronized.startClock = .unsynchronized
        var redated = entry("redated.wav", hoursAgo: 75)
        redated.startClock = .redated
        let entries = [entry("new.wav", hoursAgo: 1), unsynchronized, redated, entry("older.wav", hoursAgo: 70)]
        let space = FileSystemSpace(freeBytes: 1 << 30, totalBytes: 2 << 30)
        let byAge = RetentionPlan.due(entries, settings: RetentionSettings(maximumAge: 48 * 3600), space: space, now: now)
        #expect(Set(byAge.map(\.entry.file)) == ["redated.wav", "older.wav"])
        let bySize = RetentionPlan.due(entries, settings: RetentionSettings(maximumTotalBytes: 1000), space: space, now: now)
        #expect(bySize.map(\.entry.file) == ["unsynchronized.wav", "redated.wav", "older.wav"])
    }

    @Test func maximumTotalSizeDeletesTheOldestUntilTheRestFits() {
        let entries = (1...5).map { entry("r\($0).wav", hoursAgo: Double(10 - $0), size: 100) }
        let due = RetentionPlan.due(entries, settings: RetentionSettings(maximumTotalBytes: 250),
                                    space: FileSystemSpace(freeBytes: 1 << 30, totalBytes: 2 << 30), now: now)
        #expect(due.map(\.entry.file) == ["r1.wav", "r2.wav", "r3.wav"])
        #expect(due.allSatisfy { $0.reason == .maximumTotalSize })
    }

    @Test func keepFreeAndTheGuardsNeedCountWhatEachDeletionFrees() {
        let entries = (1...4).map { entry("r\($0).wav", hoursAgo: Double(10 - $0), size: 300) }
        let space = FileSystemSpace(freeBytes: 500, totalBytes: 10_000)
        // 10 % of 10 000 is 1 000: two deletions of 300 bring 500 to 1 100.
        let keep = RetentionPlan.due(entries, settings: RetentionSettings(keepFree: .percent(10)), space: space, now: now)
        #expect(keep.map(\.entry.file) == ["r1.wav", "r2.wav"])
        #expect(keep.allSatisfy { $0.reason == .keepFree })
        // The guard's need, with retention on for another reason.
        let settings = RetentionSettings(maximumAge: 365 * 86400)
        let need = RetentionPlan.due(entries, settings: settings, space: space, now: now, needFree: 700)
        #expect(need.map(\.entry.file) == ["r1.wav"])
        #expect(need.first?.reason == .minimumFree)
        #expect(RetentionPlan.due(entries, settings: settings, space: space, now: now).isEmpty)
    }

    @Test func theOutlookIsWhatIsDueOrElseTheOldestAlone() {
        let entries = [entry("b.wav", hoursAgo: 2), entry("a.wav", hoursAgo: 3)]
        let space = FileSystemSpace(freeBytes: 1 << 30, totalBytes: 2 << 30)
        let settings = RetentionSettings(maximumAge: 4 * 3600)
        let next = RetentionPlan.outlook(entries, settings: settings, space: space, now: now)
        #expect(next.map(\.file) == ["a.wav"])
        #expect(next.first?.reason == nil)
        // Due by age one hour (plus its one second of audio) from now.
        #expect(next.first?.dueAt == now.addingTimeInterval(3600 - 1))
        let due = RetentionPlan.outlook(entries, settings: RetentionSettings(maximumAge: 1800), space: space, now: now)
        #expect(due.map(\.file) == ["a.wav", "b.wav"])
        #expect(RetentionPlan.outlook(entries, settings: RetentionSettings(), space: space, now: now).isEmpty)
    }

    /// A station of several sources (issue 53): age is each file's, wherever it is; the size
    /// and space limits take the oldest of the source holding the most, so a busy source gives
    /// before a quiet one whose files are older; one group is the plain plan exactly.
    @Test func aStationsSourcesGiveFairlyTheOneHoldingTheMostFirst() {
        func at(_ folder: String, _ file: String, hoursAgo: Double, size: Int64) -> RecordingLibrary.Entry {
            var made = entry(file, hoursAgo: hoursAgo, size: size)
            made.path = "/rec/\(folder)/" + file
            return made
        }
        let quiet = [at("west", "w1.wav", hoursAgo: 30, size: 1000)]
        let busy = (1...4).map { at("east", "e\($0).wav", hoursAgo: Double(10 - $0), size: 1000) }
        let space = FileSystemSpace(freeBytes: 1 << 30, totalBytes: 2 << 30)
        let size = RetentionPlan.due(groups: [busy, quiet], settings: RetentionSettings(maximumTotalBytes: 2500), space: space, now: now)
        // 5000 bytes to 2500: east (4000) gives e1, e2 (then 2000 vs 1000), and once more e3
        // (east still holds the most) to reach 2000.
        #expect(size.map(\.entry.file) == ["e1.wav", "e2.wav", "e3.wav"] && size.allSatisfy { $0.reason == .maximumTotalSize })
        // Over the free space: the same order, counting what each deletion frees.
        let free = RetentionPlan.due(groups: [quiet, busy], settings: RetentionSettings(keepFree: .bytes(3500)),
                                     space: FileSystemSpace(freeBytes: 1000, totalBytes: 1 << 20), now: now)
        #expect(free.map(\.entry.file) == ["e1.wav", "e2.wav", "e3.wav"] && free.allSatisfy { $0.reason == .keepFree })
        // Age: each source's files past it, the quiet one's too; an unsynchronized start is no age.
        var unsynchronized = at("west", "w0.wav", hoursAgo: 80, size: 1000)
        unsynchronized.startClock = .unsynchronized
        let aged = RetentionPlan.due(groups: [busy, [unsynchronized] + quiet], settings: RetentionSettings(maximumAge: 8.5 * 3600),
                                     space: space, now: now)
        #expect(Set(aged.map(\.entry.file)) == ["e1.wav", "w1.wav"] && aged.allSatisfy { $0.reason == .maximumAge })
        // One group: exactly the plan of one folder.
        let one = RetentionPlan.due(groups: [busy + quiet], settings: RetentionSettings(maximumTotalBytes: 2500), space: space, now: now)
        #expect(one.map(\.entry.file) == RetentionPlan.due(busy + quiet, settings: RetentionSettings(maximumTotalBytes: 2500),
                                                            space: space, now: now).map(\.entry.file))
        #expect(one.first?.entry.file == "w1.wav", "oldest first in one folder")
    }
}


/// The totals `status` shows with retention off, counted by name and size without reading
/// a header, against the listing that reads every file.
@Suite("recordings totals")
struct RecordingTotalsTests {
    /// A valid 16-bit stereo WAV of `frames` frames.
    static func wav(frames: Int) -> Data {
        var data = Data()
        func put<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) } }
        data.append(contentsOf: Array("RIFF".utf8)); put(UInt32(36 + frames * 4))
        data.append(contentsOf: Array("WAVEfmt ".utf8)); put(UInt32(16)); put(UInt16(1)); put(UInt16(2))
        put(UInt32(48000)); put(UInt32(48000 * 4)); put(UInt16(4)); put(UInt16(16))
        data.append(contentsOf: Array("data".utf8)); put(UInt32(frames * 4))
        data.append(Data(count: frames * 4))
        return data
    }

    @Test func countedByNameAndSizeTheyMatchTheListingAndSkipWhatItSkips() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("totals-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fm = FileManager.default
        try fm.createDirectory(atPath: directory + "/station/2026-11-26", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: directory + "/.sessions", withIntermediateDirectories: true)
        let files = ["a.wav": 100, "b.wav": 4800, "station/2026-11-26/c.wav": 48000, "station/d.wav": 1]
        for (file, frames) in files { try Self.wav(frames: frames).write(to: URL(fileURLWithPath: directory + "/" + file)) }
        // Not recordings: a .part, a hidden file, a foreign extension, a session log, a link.
        for other in ["e.wav.part", ".hidden.wav", "notes.txt", ".sessions/x.jsonl"] {
            try Self.wav(frames: 10).write(to: URL(fileURLWithPath: directory + "/" + other))
        }
        #expect(symlink(directory + "/a.wav", directory + "/link.wav") == 0)
        let library = RecordingLibrary(directory: directory)
        let listed = library.list()
        #expect(listed.map(\.file).sorted() == files.keys.sorted())
        let totals = library.totals(excluding: nil)
        #expect(totals.count == listed.count)
        #expect(totals.bytes == listed.reduce(0) { $0 + $1.size })
        #expect(totals.bytes == Int64(files.values.reduce(0) { $0 + 44 + $1 * 4 }))
        // The recording being written, by its final path, is not counted (as retention skips it).
        let active = library.totals(excluding: directory + "/station/2026-11-26/c.wav")
        #expect(active.count == 3)
        #expect(active.bytes == totals.bytes - Int64(44 + 48000 * 4))
    }
}
