import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import RecorderModel
import Testing

/// The system clock as the real recd sees it (issue 50): whether it is synchronized, and its
/// steps, in `status`, `recctl status`, the metrics, MQTT and the log. Real clocks throughout:
/// - the kernel's synchronization state comes through its own call, adjtimex, answered by a
///   small interposer (Tests/reference/clock_discipline.c) as the test says: synchronized,
///   unsynchronized or refused (systemd's ProtectClock=);
/// - steps are libfaketime's (Debian's faketime): its offset file moves recd's CLOCK_REALTIME
///   and nothing else (`FAKETIME_DONT_FAKE_MONOTONIC=1`: the boot clock stays true, as a
///   step leaves it). libfaketime fakes clock_gettime, not the kernel's clock, so the kernel
///   announces nothing: recd finds such a step at its next reading of the clock (a `status`).
///   The kernel's announcement (the clock-set alarm, a timerfd) is tested by a real set of
///   the clock that does not move it (`nudgeTheClock`);
/// - systemd-timesyncd's file in a directory of the test's own (`RECD_TIMESYNC_DIRECTORY`).
@Suite("system clock")
struct ClockTests {
    static let reference = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("reference").path
    static let prefix = "recd/clock"

    let work = TemporaryDirectory()

    /// The adjtimex interposer, compiled for this test.
    func clockDiscipline() throws -> String {
        let library = work.file("clock_discipline.so")
        let cc = try run("/usr/bin/cc", ["-O2", "-Wall", "-shared", "-fPIC", "-o", library, Self.reference + "/clock_discipline.c", "-ldl"])
        guard cc.status == 0 else { throw TestFailure("cc: \(cc.stderr)") }
        return library
    }

    /// What the kernel says (`synchronized`, `unsynchronized`, `refused`), from now on.
    func setDiscipline(_ word: String) throws {
        try (word + "\n").write(toFile: work.file("discipline"), atomically: true, encoding: .utf8)
    }

    /// libfaketime's offset of recd's wall clock from the true one (`-3d`, `+0`, `-1h`), from
    /// its next reading of the clock on.
    func setFakeOffset(_ offset: String) throws {
        try (offset + "\n").write(toFile: work.file("faketime"), atomically: true, encoding: .utf8)
    }

    /// recd on the null device with the kernel's state from the interposer, timesyncd's
    /// directory below the test's own (`run/timesync`, absent until a test makes it) and, with
    /// `fakeOffset`, under libfaketime.
    func daemon(discipline: String, fakeOffset: String? = nil, config: String = "", device: String = "null",
                recordings: String? = nil) throws -> Daemon {
        try setDiscipline(discipline)
        var preload = [try clockDiscipline()]
        var environment = ["RECD_TEST_CLOCK_DISCIPLINE": work.file("discipline"),
                           "RECD_TIMESYNC_DIRECTORY": work.file("run/timesync")]
        try FileManager.default.createDirectory(atPath: work.file("run"), withIntermediateDirectories: true)
        if let fakeOffset {
            let libfaketime = try #require(PreloadTests.libfaketime, "libfaketime is not installed (Debian: faketime)")
            try #require(ProcessInfo.processInfo.environment["FAKETIME_SHARED"] == nil, "the tests run under libfaketime themselves")
            try setFakeOffset(fakeOffset)
            preload.insert(libfaketime, at: 0)
            environment["FAKETIME_TIMESTAMP_FILE"] = work.file("faketime")
            environment["FAKETIME_NO_CACHE"] = "1"
            environment["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        }
        environment["LD_PRELOAD"] = preload.joined(separator: " ")
        return try Daemon(device: device, config: config, environment: environment, recordings: recordings)
    }

    /// Why the tests with libfaketime run against the release binaries only (PreloadTests says more).
    static let noLibfaketimeUnderThreadSanitizer: Comment =
        "a ThreadSanitizer-built recd never starts under libfaketime: ThreadSanitizer's start calls clock_gettime, libfaketime initializes from it and its dlsym deadlocks in ThreadSanitizer's allocator"

    static func mqtt(port: Int) -> String {
        """
        [mqtt]
        enabled = true
        host = "127.0.0.1"
        port = \(port)
        client_id = "recd-clock"
        topic_prefix = "\(prefix)"
        """
    }

    func clock(_ daemon: Daemon) throws -> ClockStatus {
        let status: StatusResult = try daemon.connect().call(.status)
        return try #require(status.clock, "status has no clock")
    }

    func recctlStatusLine(_ daemon: Daemon) throws -> String {
        let result = try run(Binaries.recctl, ["--socket", daemon.socket, "status"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        return try #require(result.stdout.split(separator: "\n").first { $0.hasPrefix("time ") }.map(String.init),
                            "recctl status has no time line: \(result.stdout)")
    }

    func metrics(_ daemon: Daemon) throws -> [String: Double] {
        let result = try run(Binaries.recctl, ["--socket", daemon.socket, "metrics"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        return MetricsTests.samples(result.stdout)
    }

    /// The log's lines with `message`.
    func logLines(_ daemon: Daemon, _ message: String) -> [Substring] {
        daemon.log.split(separator: "\n").filter { $0.contains(": " + message) }
    }

    /// An unsynchronized kernel (as a Pi's at boot) and then a synchronized one, in every view:
    /// `status` (source, since, the kernel's error figures), `recctl status`'s line, the metrics
    /// and the log.
    @Test func theKernelsSynchronizationShowsInStatusRecctlMetricsAndTheLog() throws {
        let started = Date()
        let daemon = try daemon(discipline: "unsynchronized")
        let unsynchronized = try clock(daemon)
        #expect(!unsynchronized.synchronized)
        #expect(unsynchronized.source == .kernel)
        #expect(unsynchronized.since >= started.addingTimeInterval(-1) && unsynchronized.since <= Date())
        #expect(unsynchronized.maxError == 16 && unsynchronized.estimatedError == 16)
        #expect(unsynchronized.steps == 0 && unsynchronized.lastStep == nil)
        let line = try recctlStatusLine(daemon)
        #expect(line.hasPrefix("time     not synchronized since "), "\(line)")
        #expect(line.hasSuffix("(kernel); no steps"), "\(line)")
        var samples = try metrics(daemon)
        #expect(samples["recd_clock_synchronized"] == 0)
        #expect(samples["recd_clock_steps_total"] == 0)
        #expect(logLines(daemon, "system clock not synchronized").count == 1, "\(daemon.log)")

        // chrony (or ntpd, or timesyncd) synchronizes the clock by slewing it: no step, no event.
        // `status` reads the kernel afresh.
        try setDiscipline("synchronized")
        let changedAt = Date()
        let synchronized = try clock(daemon)
        #expect(synchronized.synchronized)
        #expect(synchronized.source == .kernel)
        #expect(synchronized.since >= changedAt.addingTimeInterval(-1) && synchronized.since <= Date())
        #expect(synchronized.maxError == 0.012 && synchronized.estimatedError == 0.003)
        #expect(synchronized.steps == 0)
        let synchronizedLine = try recctlStatusLine(daemon)
        #expect(synchronizedLine.hasPrefix("time     synchronized since "), "\(synchronizedLine)")
        #expect(synchronizedLine.contains("(kernel, max error 0.012 s); no steps"), "\(synchronizedLine)")
        samples = try metrics(daemon)
        #expect(samples["recd_clock_synchronized"] == 1)
        let logged = logLines(daemon, "system clock synchronized")
        #expect(logged.count == 1 && logged[0].contains(" notice "), "\(daemon.log)")
        #expect(logged.first?.contains("clock.source=kernel") == true)
        #expect(daemon.terminate() == 0)
    }

    /// A boot three days behind, then NTP's step to the true time: measured against the boot
    /// clock to the millisecond (libfaketime's offsets differ by exactly 259200 s), dated
    /// after it by the test's own clock, logged as a notice with its size, counted in the
    /// metrics, published on MQTT (retained) and shown by `recctl status`. Then a step back.
    @Test(.enabled(if: !Binaries.threadSanitized, ClockTests.noLibfaketimeUnderThreadSanitizer))
    func aStepIsMeasuredLoggedCountedAndPublished() throws {
        let broker = try MosquittoBroker()
        let daemon = try daemon(discipline: "unsynchronized", fakeOffset: "-3d", config: Self.mqtt(port: broker.port))
        let watcher = try MQTTWatcher(port: broker.port, topics: ["\(Self.prefix)/clock"])
        let published = try #require(watcher.first("\(Self.prefix)/clock", timeout: 30), "\(daemon.log)")
        #expect(published.json?["steps"] as? Int == 0)
        #expect(published.json?["synchronized"] as? Bool == false)
        let before = try clock(daemon)
        // recd's clock is three days behind the test's.
        #expect(abs(before.since.timeIntervalSinceNow + 259_200) < 60, "since \(before.since)")
        #expect(before.steps == 0)

        try setFakeOffset("+0")
        let stepped = try clock(daemon)
        #expect(stepped.steps == 1)
        let step = try #require(stepped.lastStep)
        #expect(abs(step.size - 259_200) < 0.01, "the step was \(step.size) s")
        #expect(abs(step.at.timeIntervalSinceNow) < 5, "dated \(step.at)")
        #expect(!stepped.synchronized, "a step is no synchronization")

        let logged = try #require(logLines(daemon, "system clock stepped").first, "\(daemon.log)")
        #expect(logged.contains(" notice "), "\(logged)")
        let size = try #require(logged.firstMatch(of: /clock\.step=\+(259[0-9]{3}\.[0-9]{6})/)?.1, "\(logged)")
        #expect(abs((Double(size) ?? 0) - 259_200) < 0.01)
        // Found by the status that asked (or, when another test sets the machine's clock meanwhile,
        // by the alarm that rang then).
        #expect(logged.contains("clock.seen=status") || logged.contains("clock.seen=alarm"), "\(logged)")
        #expect(logged.contains("clock.steps=1"))

        let message = try #require(watcher.first("\(Self.prefix)/clock", where: { $0.json?["steps"] as? Int == 1 }),
                                   "\(watcher.messages)")
        // Retained: a subscriber that comes later (Home Assistant starting) gets it too.
        let later = try MQTTWatcher(port: broker.port, topics: ["\(Self.prefix)/clock"])
        #expect(later.first("\(Self.prefix)/clock")?.retained == true)
        #expect(later.first("\(Self.prefix)/clock")?.json?["steps"] as? Int == 1)
        let lastStep = try #require(message.json?["lastStep"] as? [String: Any])
        #expect(abs((lastStep["size"] as? Double ?? 0) - 259_200) < 0.01)
        #expect(lastStep["at"] as? String == UTCTimestamp.text(step.at))

        var samples = try metrics(daemon)
        #expect(samples["recd_clock_steps_total"] == 1)
        #expect(samples["recd_clock_synchronized"] == 0)
        let line = try recctlStatusLine(daemon)
        #expect(line.contains("; 1 step, the last +259200.0"), "\(line)")

        // Back an hour (a clock that goes backwards).
        try setFakeOffset("-1h")
        let back = try clock(daemon)
        #expect(back.steps == 2)
        #expect(abs((back.lastStep?.size ?? 0) + 3600) < 0.01, "\(String(describing: back.lastStep))")
        samples = try metrics(daemon)
        #expect(samples["recd_clock_steps_total"] == 2)
        #expect(try recctlStatusLine(daemon).contains("; 2 steps, the last -3600.0"))
        #expect(watcher.first("\(Self.prefix)/clock", where: { $0.json?["steps"] as? Int == 2 }) != nil)
        #expect(daemon.terminate() == 0)
    }

    // MARK: Re-dating

    /// A station that boots three days behind (issue 50): FLAC in 4 s segments on the clock,
    /// named by strftime, from the paced device. The segments closed while the clock was wrong
    /// are marked; then the clock steps to the true time and is synchronized: each of them is
    /// re-dated (its in-file start, its name), and a subscriber, MQTT, the `on_file_redated`
    /// hook and the metrics see old path → new; the one open then is corrected as it closes;
    /// the ones after are not marked. Against the test's own clock (libfaketime's offset is
    /// exactly three days): every start within 10 ms of the truth, and the frame counts
    /// continuous across the step (each segment starts where the one before ended). Then a
    /// step back by 8 s, onto names already taken: nothing overwritten, nothing deleted.
    @Test(.enabled(if: !Binaries.threadSanitized, ClockTests.noLibfaketimeUnderThreadSanitizer))
    func filesBegunBeforeTheClockWasSynchronizedAreRedatedAndRenamed() throws {
        let server = try PulseServer()
        let broker = try MosquittoBroker()
        let hookLog = work.file("redated-hook.log")
        let config = Self.mqtt(port: broker.port) + """

            [hooks]
            on_file_redated = ["/bin/sh", "-c", "echo \\"$RECD_HOOK|$RECD_PREVIOUS_PATH|{path}|$RECD_PREVIOUS_STARTED_AT|$RECD_STARTED_AT\\" >> \(hookLog)"]
            """
        let daemon = try daemon(discipline: "unsynchronized", fakeOffset: "-3d", config: config, device: TestDevices.paced(server))
        let mqtt = try MQTTWatcher(port: broker.port, topics: ["\(Self.prefix)/redated"])
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.segment, .redated]))
        let client = try daemon.connect()
        let askedAt = Date()  // the test's own clock, which libfaketime does not touch
        let started: Recording = try client.call(.start, StartParams(name: "dawn", format: .flac, sampleRate: 48000, channels: 1,
                                                                     segmentLength: 4, alignToClock: true))
        var closed: [Segment] = []
        var redated: [RedatedFile] = []
        func collect(until done: () -> Bool) throws {
            let deadline = Date().addingTimeInterval(60)
            while !done(), Date() < deadline {
                let notification = try watcher.nextNotification(timeout: 60)
                if case .segment(let segment?) = notification.value, segment.recordingId == started.id { closed.append(segment) }
                if case .redated(let file?) = notification.value { redated.append(file) }
            }
        }
        // Two segments closed on the wrong clock.
        try collect { closed.count >= 2 }
        let early = closed
        #expect(early.allSatisfy { $0.unsynchronizedStart != nil && $0.redatedFrom == nil }, "\(early)")
        for segment in early {
            #expect(segment.path.contains("/" + UTCTimestamp.text(segment.startedAt).prefix(10) + "/"), "\(segment.path)")
            #expect(abs(segment.startedAt.timeIntervalSinceNow + 259_200) < 30, "\(UTCTimestamp.text(segment.startedAt))")
        }

        // status and recctl say how many wait (the two, and any that closed since).
        #expect((try clock(daemon).filesToRedate ?? 0) >= early.count)
        let waitingLine = try recctlStatusLine(daemon)
        #expect(waitingLine.contains(" files to re-date once it is synchronized"))
        print("recctl status, before: \(waitingLine)")

        // NTP steps the clock and synchronizes it.
        try setFakeOffset("+0")
        try setDiscipline("synchronized")
        _ = try clock(daemon)  // the next reading sees both (else the minute's)
        try collect { redated.count >= early.count }
        // Once settled (2 s without a step): the early files first, in order.
        #expect(redated.prefix(early.count).map(\.previousPath) == early.map(\.path))
        for (file, before) in zip(redated, early) {
            let truth = before.startedAt.addingTimeInterval(259_200)
            print("re-dated: \(before.path.split(separator: "/").suffix(3).joined(separator: "/")) \(UTCTimestamp.text(before.startedAt))"
                  + " -> \(file.segment.path.split(separator: "/").suffix(3).joined(separator: "/")) \(UTCTimestamp.text(file.segment.startedAt))"
                  + String(format: " (true start + %.1f ms by the test's clock)", file.segment.startedAt.timeIntervalSince(truth) * 1000))
            #expect(abs(file.segment.startedAt.timeIntervalSince(truth)) < 0.010,
                    "\(UTCTimestamp.text(file.segment.startedAt)) for \(UTCTimestamp.text(truth))")
            #expect(file.segment.redatedFrom == before.startedAt && file.segment.unsynchronizedStart == nil)
            #expect(file.segment.frames == before.frames)
            #expect(!FileManager.default.fileExists(atPath: before.path), "\(before.path) is still there")
            // The name its template gives the true start, and the start inside, read by recd and by ffprobe.
            #expect(file.segment.path.hasSuffix("/" + Self.utcName(file.segment.startedAt) + ".flac"), "\(file.segment.path)")
            let tags = try Self.dateAndComment(file.segment.path)
            #expect(tags.date == UTCTimestamp.text(file.segment.startedAt), "\(tags)")
            #expect(tags.comment.hasSuffix("; re-dated at clock sync; first frame at " + UTCTimestamp.text(file.segment.startedAt)), "\(tags)")
            // MQTT's event, and the hook's run.
            let message = mqtt.first("\(Self.prefix)/redated", where: { $0.json?["previousPath"] as? String == before.path })
            #expect((message?.json?["segment"] as? [String: Any])?["path"] as? String == file.segment.path, "\(mqtt.messages)")
            #expect(message?.json?["previousStart"] as? String == UTCTimestamp.text(before.startedAt))
            if let message { print("MQTT \(message.topic): \(message.payload)") }
            let line = "on_file_redated|\(before.path)|\(file.segment.path)|\(UTCTimestamp.text(before.startedAt))|\(UTCTimestamp.text(file.segment.startedAt))"
            #expect(waitUntil(timeout: 30) { ((try? String(contentsOfFile: hookLog, encoding: .utf8)) ?? "").contains(line) },
                    "\(line) not in \((try? String(contentsOfFile: hookLog, encoding: .utf8)) ?? "no hook log")")
        }
        print("recctl status, after: \(try recctlStatusLine(daemon))")
        print("metrics: recd_files_redated_total \(try metrics(daemon)["recd_files_redated_total"] ?? -1)")
        let waitingAfter = try clock(daemon).filesToRedate
        #expect(waitingAfter == 0, "\(String(describing: waitingAfter)) still waiting; closed: \(closed.map { "\($0.index) \($0.unsynchronizedStart != nil)" })\n\(daemon.log.suffix(4000))")

        // The segment open at the step closes corrected; the next ones are not marked.
        let seen = closed.count
        try collect { closed.count >= seen + 2 }
        // Back by 8 s: the next segments' names are ones taken already.
        try setFakeOffset("-8s")
        _ = try clock(daemon)
        let beforeBack = closed.count
        try collect { closed.count >= beforeBack + 3 }
        let stopped: Recording = try client.call(.stop)
        // Until the last file is announced (the one the stop's answer names).
        let last = try #require(stopped.segment)
        try collect { closed.contains { $0.index == last.index } }
        let later = Array(closed[seen..<beforeBack])
        // The one open at the synchronization: corrected as it closed, or, if it closed while the
        // clock was settling, re-dated right after. Either way announced re-dated once.
        let late = redated.first { $0.previousPath == later[0].path }
        if let late {
            #expect(later[0].unsynchronizedStart != nil && late.segment.redatedFrom != nil, "\(later[0])")
        } else {
            #expect(later[0].redatedFrom != nil && later[0].unsynchronizedStart == nil, "\(later[0])")
        }
        let laterFirst = late?.segment ?? later[0]
        #expect(later.dropFirst().allSatisfy { $0.redatedFrom == nil && $0.unsynchronizedStart == nil })
        // The segments after it are on the clock's 4 s boundaries again (UTC), by the true clock.
        for segment in later.dropFirst() {
            let offBoundary = segment.startedAt.timeIntervalSince1970.truncatingRemainder(dividingBy: 4)
            #expect(min(offBoundary, 4 - offBoundary) < 0.010, "segment \(segment.index) starts \(UTCTimestamp.text(segment.startedAt))")
        }
        #expect(try Self.dateAndComment(laterFirst.path).comment.contains("; re-dated at clock sync; "))
        #expect(try !Self.dateAndComment(later[1].path).comment.contains("clock"), "\(later[1].path)")
        #expect(redated.count == early.count + (late == nil ? 0 : 1), "each file announced re-dated once: \(redated.map(\.previousPath))")
        #expect(try metrics(daemon)["recd_files_redated_total"] == Double(redated.count))

        // Nothing overwritten, nothing deleted: every file there, under a name of its own, with
        // every frame the recording counted.
        let final = redated.map(\.segment) + closed[seen...].filter { segment in !redated.contains { $0.previousPath == segment.path } }
        #expect(Set(final.map(\.path)).count == final.count, "\(final.map(\.path))")
        for segment in final { #expect(FileManager.default.fileExists(atPath: segment.path), "\(segment.path) is gone") }
        #expect(final.map(\.frames).reduce(0, +) == stopped.frames, "\(final.map(\.frames)) vs \(stopped.frames)")
        #expect(final.contains { $0.path.hasSuffix("Z-2.flac") }, "no name was taken twice: \(final.map(\.path))")

        // Continuous across the step: each segment starts where the one before ended. The first
        // file's start is the first read's estimate, and the second's the least delayed one over
        // the first file (SegmentWriter.boundaryTime): a first read the loaded machine held back
        // puts the second file's start that much before the first's end (28 ms once in CI), never
        // after it. Every later boundary is between two least delayed estimates.
        let all = redated.prefix(early.count).map(\.segment) + [laterFirst] + later.dropFirst()
        for (one, next) in zip(all, all.dropFirst()) {
            let end = one.startedAt.addingTimeInterval(Double(one.frames) / 48000)
            let apart = next.startedAt.timeIntervalSince(end)
            let earliest = one.index == 1 ? -0.25 : -0.010
            #expect(apart > earliest && apart < 0.010, "segment \(next.index) starts \(apart) s after \(one.index) ended")
            if one.index == 1 { print("segment 2 starts \(apart) s after 1 ended") }
        }
        // And on the test's own clock: the first frame, re-dated, after the start was asked and
        // within the paced device's opening (a fraction of a second).
        let firstFrame = all[0].startedAt.timeIntervalSince(askedAt)
        #expect(all[0].index == 1 && firstFrame > -0.05 && firstFrame < 3, "the first frame \(firstFrame) s after the start was asked")
        #expect(daemon.terminate() == 0)
    }

    /// A `[schedule]` window open now by a clock three days behind, and closed by the true one:
    /// the behind clock's weekday, from a minute before its time of day to five after.
    static func windowOfTheClockBehind() -> String {
        let behind = Date().addingTimeInterval(-259_200)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .current
        let parts = calendar.dateComponents([.weekday, .hour, .minute], from: behind.addingTimeInterval(-60))
        let end = calendar.dateComponents([.hour, .minute], from: behind.addingTimeInterval(300))
        let day = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"][(parts.weekday ?? 1) - 1]
        return String(format: "%@ %02d:%02d..%02d:%02d", day, parts.hour ?? 0, parts.minute ?? 0, end.hour ?? 0, end.minute ?? 0)
    }

    /// A schedule under a clock three days behind (issue 50, item 4). By default its window
    /// opens by the clock as it is (an offline station must record), the files are marked, and
    /// once the clock steps and is synchronized the window is seen closed at once (not within
    /// the hour) and the files are re-dated. With `wait_for_clock` the window is held instead:
    /// nothing recorded by the wrong time, and after the synchronization nothing at all (by the
    /// true clock it is another day).
    @Test(.enabled(if: !Binaries.threadSanitized, ClockTests.noLibfaketimeUnderThreadSanitizer), arguments: [false, true])
    func aScheduleUnderAClockThreeDaysBehind(waitForClock: Bool) throws {
        let server = try PulseServer()
        let window = Self.windowOfTheClockBehind()
        let config = "[recording]\nformat = \"flac\"\n[schedule]\nwindows = [\"\(window)\"]\n"
            + (waitForClock ? "wait_for_clock = \"10m\"\n" : "")
        let daemon = try daemon(discipline: "unsynchronized", fakeOffset: "-3d", config: config, device: TestDevices.paced(server))
        let client = try daemon.connect()
        if waitForClock {
            let held = try #require(daemon.waitForStatus { $0.schedule?.heldForClock != nil }, "\(window): never held\n\(daemon.log)")
            #expect(held.schedule?.active == true && !held.state.isActive, "\(held.state)")
            #expect((held.schedule?.heldForClock ?? 0) > 500 && (held.schedule?.heldForClock ?? 0) <= 600)
            #expect(waitUntil { logLines(daemon, "recording window held until the system clock is synchronized").count == 1 }, "\(daemon.log)")
        } else {
            // Its file marked once its first frame is known.
            _ = try #require(daemon.waitForStatus { $0.state.isActive && $0.recording?.segment?.unsynchronizedStart != nil },
                             "\(window): never recorded, or not marked\n\(daemon.log)")
            // A second of it, on the wrong clock.
            _ = daemon.waitForStatus { $0.currentTime >= 1 }
        }
        try setFakeOffset("+0")
        try setDiscipline("synchronized")
        _ = try clock(daemon)
        // By the true clock the window is closed: seen at once.
        let after = try #require(daemon.waitForStatus(timeout: 15) { $0.schedule?.active == false && !$0.state.isActive },
                                 "the window still open after the synchronization\n\(daemon.log)")
        #expect(after.schedule?.heldForClock == nil)
        let list: RecordingsListResult = try client.call(.recordingsList)
        if waitForClock {
            #expect(list.recordings.isEmpty, "\(list.recordings.map(\.file))")
        } else {
            #expect(list.recordings.count == 1, "\(list.recordings.map(\.file))")
            // Closed while the clock settled: re-dated 2 s after the synchronization.
            var files = list.recordings
            #expect(waitUntil(timeout: 30) {
                files = ((try? client.call(.recordingsList)) as RecordingsListResult?)?.recordings ?? []
                return files.count == 1 && files.allSatisfy { $0.startClock == .redated }
            }, "\(files.map { "\($0.file) \(String(describing: $0.startClock))" })")
            for file in files {
                #expect(file.startClock == .redated, "\(file.file)")
                #expect(abs((file.startedAt ?? .distantPast).timeIntervalSinceNow) < 60, "\(file.file) starts \(String(describing: file.startedAt))")
            }
        }
        #expect(daemon.terminate() == 0)
    }

    /// recd started again in the same boot before the clock is synchronized (a crash, an
    /// upgrade): the files the first run closed wait in the recordings' log and the second run
    /// re-dates them; an entry of another boot (its boot clock means nothing now) stays marked.
    static let flac = "[recording]\nformat = \"flac\"\n"

    /// recd on `server`'s paced device with its clock 3 days behind and not synchronized
    /// records `name` in 2 s FLAC segments until `closed` have closed, and stops: the daemon
    /// and the list of its files.
    func recordOnAClockBehind(_ server: PulseServer, into recordings: String, name: String, closed: Int) throws
        -> (Daemon, RecordingsListResult) {
        let recd = try daemon(discipline: "unsynchronized", fakeOffset: "-3d", config: Self.flac, device: TestDevices.paced(server),
                              recordings: recordings)
        let client = try recd.connect()
        let _: Recording = try client.call(.start, StartParams(name: name, segmentLength: 2))
        _ = try #require(recd.waitForStatus { $0.statistics.segmentsClosed >= closed }, "\(recd.log)")
        let _: Recording = try client.call(.stop)
        _ = try #require(recd.waitForStatus { $0.state.name == .finished })
        return (recd, try client.call(.recordingsList))
    }

    @Test(.enabled(if: !Binaries.threadSanitized, ClockTests.noLibfaketimeUnderThreadSanitizer))
    func filesAnEarlierRunOfThisBootClosedAreRedatedByTheNext() throws {
        let server = try PulseServer()
        let recordings = work.file("station")
        let config = Self.flac
        let (first, made) = try recordOnAClockBehind(server, into: recordings, name: "run1", closed: 2)
        #expect(made.recordings.count >= 3 && made.recordings.allSatisfy { $0.startClock == .unsynchronized },
                "\(made.recordings.map { "\($0.file) \(String(describing: $0.startClock))" })")
        #expect(first.terminate() == 0)

        // The last file as another boot's.
        let log = recordings + "/.sessions/unsynchronized.ndjson"
        var lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.count == made.recordings.count, "\(lines)")
        let last = try #require(lines.last)
        lines[lines.count - 1] = last.replacing(/"bootId":"[^"]*"/, with: #""bootId":"another-boot""#)
        #expect(lines.last != last)
        try (lines.joined(separator: "\n") + "\n").write(toFile: log, atomically: true, encoding: .utf8)
        // The session log's encoder does not escape slashes.
        let otherBootsFile = try #require(made.recordings.last { last.contains("\"path\":\"" + $0.path + "\"") }, "\(last)")

        // recd again, same boot, the clock still behind; then NTP.
        let second = try daemon(discipline: "unsynchronized", fakeOffset: "-3d", config: config, device: TestDevices.paced(server),
                                recordings: recordings)
        #expect(waitUntil(timeout: 30) { ((try? clock(second))?.filesToRedate ?? 0) == made.recordings.count - 1 },
                "\(String(describing: try? clock(second).filesToRedate)) waiting")
        try setFakeOffset("+0")
        try setDiscipline("synchronized")
        _ = try clock(second)
        var after: [RecordingFile] = []
        // Re-dated, then renamed: done once the old names are gone too.
        let done = waitUntil(timeout: 30) {
            after = ((try? second.connect().call(.recordingsList)) as RecordingsListResult?)?.recordings ?? []
            return after.filter { $0.startClock == .redated }.count == made.recordings.count - 1
                && made.recordings.allSatisfy { $0.path == otherBootsFile.path || !FileManager.default.fileExists(atPath: $0.path) }
        }
        #expect(done, "\(after.map { "\($0.file) \(String(describing: $0.startClock))" })\n\(second.log)")
        for file in made.recordings where file.path != otherBootsFile.path {
            #expect(!FileManager.default.fileExists(atPath: file.path), "\(file.file) was not renamed")
        }
        #expect(after.first { $0.path == otherBootsFile.path }?.startClock == .unsynchronized, "another boot's file is left as it is")
        #expect(logLines(second, "files from before recd started wait for the clock to be re-dated").count == 1, "\(second.log)")
        #expect(waitUntil(timeout: 10) { !FileManager.default.fileExists(atPath: log) }, "the log is gone once every file in it was dealt with")
        #expect(second.terminate() == 0)
    }

    /// Files waiting for the clock that recd renames or deletes meanwhile: one renamed through
    /// recctl is re-dated under the name it was given; one deleted through recctl and one
    /// retention deleted wait no more (also after a restart: the log on disk says the same);
    /// one someone else deleted is a notice when the clock comes, not an error.
    @Test(.enabled(if: !Binaries.threadSanitized, ClockTests.noLibfaketimeUnderThreadSanitizer))
    func filesRenamedOrDeletedWhileTheyWaitForTheClock() throws {
        let server = try PulseServer()
        let recordings = work.file("station")
        let config = Self.flac
        let (first, made) = try recordOnAClockBehind(server, into: recordings, name: "run", closed: 4)
        let files = made.recordings.sorted { ($0.startedAt ?? .distantPast) < ($1.startedAt ?? .distantPast) }
        #expect(files.count >= 5 && files.allSatisfy { $0.startClock == .unsynchronized }, "\(files.map(\.file))")
        #expect(try clock(first).filesToRedate == files.count)

        // The newest renamed, the second deleted, through recctl.
        let renamed = try #require(files.last)
        let moved = try run(Binaries.recctl, ["--socket", first.socket, "mv", renamed.file, "owl-at-dawn"], timeout: 30)
        #expect(moved.status == 0, "\(moved.stderr)")
        let removed = try run(Binaries.recctl, ["--socket", first.socket, "rm", files[1].file], timeout: 30)
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(try clock(first).filesToRedate == files.count - 1)
        // Retention: room for all but the oldest.
        let kept = files.dropFirst(2).map(\.size).reduce(0, +)
        try (config + "[retention]\nmax_total_size = \(kept)\ngrace = 0\n").write(toFile: first.configPath, atomically: true, encoding: .utf8)
        first.process.signal(SIGHUP)
        #expect(waitUntil(timeout: 30) { !FileManager.default.fileExists(atPath: files[0].path) }, "\(first.log.suffix(3000))")
        #expect(waitUntil(timeout: 10) { (try? clock(first).filesToRedate) == files.count - 2 },
                "\(String(describing: try? clock(first).filesToRedate)) waiting")
        #expect(first.terminate() == 0)

        // recd again in the same boot: the same files wait, the renamed one under its new name.
        let second = try daemon(discipline: "unsynchronized", fakeOffset: "-3d", config: config, device: TestDevices.paced(server),
                                recordings: recordings)
        #expect(waitUntil(timeout: 30) { (try? clock(second).filesToRedate) == files.count - 2 },
                "\(String(describing: try? clock(second).filesToRedate)) waiting\n\(second.log)")
        // One more goes behind recd's back (an uploader that moves files away).
        let goneBehind = files[2]
        #expect(unlink(goneBehind.path) == 0)
        try setFakeOffset("+0")
        try setDiscipline("synchronized")
        _ = try clock(second)
        #expect(waitUntil(timeout: 30) { (try? clock(second).filesToRedate) == 0 }, "\(second.log)")
        let after: RecordingsListResult = try second.connect().call(.recordingsList)
        let owl = try #require(after.recordings.first { $0.file.hasSuffix("/owl-at-dawn.flac") || $0.file == "owl-at-dawn.flac" },
                               "\(after.recordings.map(\.file))")
        #expect(owl.startClock == .redated)
        let truth = try #require(renamed.startedAt).addingTimeInterval(259_200)
        #expect(abs(try #require(owl.startedAt).timeIntervalSince(truth)) < 0.010, "\(String(describing: owl.startedAt)) for \(truth)")
        #expect(try Self.dateAndComment(owl.path).comment.contains("; re-dated at clock sync; "))
        let rest = files.dropFirst(3).dropLast()
        #expect(after.recordings.filter { $0.startClock == .redated }.count == rest.count + 1,
                "\(after.recordings.map { "\($0.file) \(String(describing: $0.startClock))" })")
        #expect(after.recordings.count == rest.count + 1)
        #expect(waitUntil(timeout: 10) { !logLines(second, "file gone before the clock was synchronized").isEmpty }, "\(second.log)")
        #expect(logLines(second, "file gone before the clock was synchronized").count == 1
                && logLines(second, "file gone before the clock was synchronized")[0].contains(goneBehind.file), "\(second.log)")
        #expect(logLines(first, "file could not be re-dated").isEmpty && logLines(second, "file could not be re-dated").isEmpty, "\(second.log)")
        #expect(second.terminate() == 0)
    }

    /// A sound-activated station three days behind: an event's file is marked, and re-dated
    /// (start, name) once the clock steps and is synchronized; the event after is not marked.
    @Test(.enabled(if: !Binaries.threadSanitized, ClockTests.noLibfaketimeUnderThreadSanitizer))
    func aTriggerEventBeforeTheSynchronizationIsRedated() throws {
        let server = try PulseServer()
        let path = work.file("scene.raw")
        Signal.write(Signal.triggerScene(seconds: 60, bursts: [(2.0, 3.0), (12.0, 13.0)]), to: path)
        let daemon = try daemon(discipline: "unsynchronized", fakeOffset: "-3d",
                                config: "[recording]\nformat = \"flac\"\nsample_rate = 48000\nchannels = 2\n",
                                device: TestDevices.pacedFile(path, server: server))
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.trigger, .redated]))
        let client = try daemon.connect()
        let trigger = TriggerParams(highPass: 100, threshold: -35, hysteresis: 4, attack: 0.05, hang: 1, minimumLength: 0.2, preRoll: 1)
        let _: Recording = try client.call(.start, StartParams(name: "birds", trigger: trigger))
        var closed: [TriggerEvent] = []
        var redated: [RedatedFile] = []
        func collect(until done: () -> Bool) throws {
            let deadline = Date().addingTimeInterval(60)
            while !done(), Date() < deadline {
                let notification = try watcher.nextNotification(timeout: 60)
                if case .trigger(let event?) = notification.value, event.kind == .closed { closed.append(event) }
                if case .redated(let file?) = notification.value { redated.append(file) }
            }
        }
        try collect { closed.count >= 1 }
        let first = closed[0]
        let listed: RecordingsListResult = try client.call(.recordingsList)
        #expect(listed.recordings.first { $0.path == first.path }?.startClock == .unsynchronized, "\(listed.recordings.map(\.file))")

        try setFakeOffset("+0")
        try setDiscipline("synchronized")
        _ = try clock(daemon)
        try collect { redated.count >= 1 && closed.count >= 2 }
        let _: Recording = try client.call(.stop)
        let file = try #require(redated.first { $0.previousPath == first.path }, "\(redated)")
        #expect(abs(file.segment.startedAt.timeIntervalSince(first.start.addingTimeInterval(259_200))) < 0.002,
                "\(UTCTimestamp.text(file.segment.startedAt)) for \(UTCTimestamp.text(first.start))")
        #expect(file.segment.path != first.path && FileManager.default.fileExists(atPath: file.segment.path))
        #expect(try Self.dateAndComment(file.segment.path).date == UTCTimestamp.text(file.segment.startedAt))
        let second = try #require(closed.dropFirst().first)
        let after: RecordingsListResult = try client.call(.recordingsList)
        #expect(after.recordings.first { $0.path == second.path }?.startClock == .synchronized, "\(after.recordings.map(\.file))")
        #expect(after.recordings.first { $0.path == file.segment.path }?.startClock == .redated)
        #expect(daemon.terminate() == 0)
    }

    /// `%Y%m%dT%H%M%SZ` of a start, as the default template names segments.
    static func utcName(_ date: Date) -> String {
        let fields = UTCTimestamp.fields(secondsSince1970: Int64(((date.timeIntervalSince1970 * 1000).rounded() / 1000).rounded(.down)))
        return fields.date.filter { $0 != "-" } + "T" + fields.time.filter { $0 != ":" } + "Z"
    }

    /// A FLAC's DATE and COMMENT as ffprobe reads them.
    static func dateAndComment(_ path: String) throws -> (date: String, comment: String) {
        let probed = try run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "format_tags=DATE,COMMENT", "-of", "json", path])
        let json = try JSONSerialization.jsonObject(with: Data(probed.stdout.utf8)) as? [String: Any]
        let tags = (json?["format"] as? [String: Any])?["tags"] as? [String: String] ?? [:]
        return (tags["DATE"] ?? tags["date"] ?? "", tags["COMMENT"] ?? tags["comment"] ?? "")
    }

    // MARK: The kernel's clock-set alarm

    /// Whether this test may set the machine's clock: this process has CAP_SYS_TIME (root
    /// here), and no daemon disciplines the clock (`clock_nudge --check`: the kernel's state is
    /// already what a set resets it to, so the nudge changes nothing but the microsecond).
    static let mayNudgeTheClock: Bool = {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
              let bits = UInt64(line.dropFirst("CapEff:".count).trimmingCharacters(in: .whitespaces), radix: 16),
              bits & (1 << 25) != 0 else { return false }
        let work = TemporaryDirectory()
        let binary = work.file("clock_nudge")
        guard (try? run("/usr/bin/cc", ["-O2", "-o", binary, reference + "/clock_nudge.c"]))?.status == 0 else { return false }
        return (try? run(binary, ["--check"]))?.status == 0
    }()

    /// Sets the machine's clock twice without moving it (Tests/reference/clock_nudge.c: +1 µs,
    /// then −1 µs, adjtimex's ADJ_SETOFFSET): two sets the kernel announces to every clock-set
    /// alarm. The clock is a microsecond ahead for the few microseconds between the two, then
    /// exactly where it was: nothing another test measures can see it. Returns the nudge,
    /// compiled for this test.
    func clockNudge() throws -> () throws -> Void {
        let binary = work.file("clock_nudge")
        let cc = try run("/usr/bin/cc", ["-O2", "-Wall", "-o", binary, Self.reference + "/clock_nudge.c"])
        guard cc.status == 0 else { throw TestFailure("cc: \(cc.stderr)") }
        return {
            let nudge = try run(binary, [])
            guard nudge.status == 0 else { throw TestFailure("clock_nudge: \(nudge.stderr)") }
        }
    }

    /// A step announced by the kernel is seen at once, with nobody asking: libfaketime moves
    /// recd's clock (silently), then a real set of the clock rings recd's alarm, which measures
    /// the step and publishes it on MQTT; the log says the alarm saw it. Needs CAP_SYS_TIME
    /// (root on this machine) and a clock no NTP daemon disciplines (a set would reset the
    /// kernel's NTP state); skipped otherwise.
    @Test(.enabled(if: mayNudgeTheClock, "setting the clock needs CAP_SYS_TIME and a clock no NTP daemon disciplines"),
          .enabled(if: !Binaries.threadSanitized, ClockTests.noLibfaketimeUnderThreadSanitizer))
    func theKernelsClockSetAlarmSeesAStepWithNobodyAsking() throws {
        let broker = try MosquittoBroker()
        let daemon = try daemon(discipline: "unsynchronized", fakeOffset: "-3d", config: Self.mqtt(port: broker.port))
        let watcher = try MQTTWatcher(port: broker.port, topics: ["\(Self.prefix)/clock"])
        #expect(watcher.first("\(Self.prefix)/clock", timeout: 30)?.json?["steps"] as? Int == 0, "\(daemon.log)")

        let nudgeTheClock = try clockNudge()
        try setFakeOffset("+0")
        try nudgeTheClock()
        let message = try #require(watcher.first("\(Self.prefix)/clock", timeout: 10, where: { $0.json?["steps"] as? Int == 1 }),
                                   "no step published: \(watcher.messages) \(daemon.log)")
        let lastStep = try #require(message.json?["lastStep"] as? [String: Any])
        #expect(abs((lastStep["size"] as? Double ?? 0) - 259_200) < 0.01, "\(lastStep)")
        let logged = logLines(daemon, "system clock stepped")
        #expect(logged.count == 1, "\(daemon.log)")
        #expect(logged.first?.contains("clock.seen=alarm") == true, "\(logged)")
        // The nudge back (a microsecond) is a set without a step.
        #expect(try clock(daemon).steps == 1)
        #expect(daemon.terminate() == 0)
    }

    // MARK: systemd-timesyncd

    /// Under recd.service's ProtectClock= the kernel cannot be asked (adjtimex is refused):
    /// timesyncd's `synchronized` decides, and its appearing is seen at once (inotify on its
    /// directory, which itself appears first), without `status` or the minute's reading.
    @Test func whereTheKernelCannotBeAskedTimesyncdsFileDecides() throws {
        let broker = try MosquittoBroker()
        let daemon = try daemon(discipline: "refused", config: Self.mqtt(port: broker.port))
        let discovery = "homeassistant/device/recd-clock/config"
        let watcher = try MQTTWatcher(port: broker.port, topics: ["\(Self.prefix)/clock", discovery])
        let first = try #require(watcher.first("\(Self.prefix)/clock", timeout: 30)?.json, "\(daemon.log)")
        // Home Assistant's entity: a diagnostic binary sensor on that topic.
        let components = try #require(watcher.first(discovery)?.json?["cmps"] as? [String: [String: Any]])
        let entity = try #require(components["clock"], "\(components.keys)")
        #expect(entity["p"] as? String == "binary_sensor")
        #expect(entity["ent_cat"] as? String == "diagnostic")
        #expect(entity["stat_t"] as? String == "\(Self.prefix)/clock")
        #expect(entity["json_attr_t"] as? String == "\(Self.prefix)/clock")
        #expect(entity["val_tpl"] as? String == "{{ 'ON' if value_json.synchronized else 'OFF' }}")
        #expect(first["synchronized"] as? Bool == false)
        #expect(first["source"] as? String == "timesyncd")
        let before = try clock(daemon)
        #expect(!before.synchronized && before.source == .timesyncd)
        #expect(before.maxError == nil)
        #expect(logLines(daemon, "the kernel's clock state cannot be read").count == 1, "\(daemon.log)")
        #expect(try recctlStatusLine(daemon).contains("(timesyncd); no steps"))

        // timesyncd starts (its directory) and synchronizes (its file).
        let synchronizedAt = Date()
        try FileManager.default.createDirectory(atPath: work.file("run/timesync"), withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: work.file("run/timesync/synchronized"), contents: nil))
        let message = try #require(watcher.first("\(Self.prefix)/clock", timeout: 10, where: { $0.json?["synchronized"] as? Bool == true }),
                                   "not published: \(watcher.messages) \(daemon.log)")
        let since = try #require((message.json?["since"] as? String).flatMap { UTCTimestamp.date($0) })
        #expect(since >= synchronizedAt.addingTimeInterval(-1) && since <= Date(), "since \(since)")
        #expect(logLines(daemon, "system clock synchronized").first?.contains("clock.source=timesyncd") == true, "\(daemon.log)")
        let after = try clock(daemon)
        #expect(after.synchronized && after.source == .timesyncd)
        #expect(try metrics(daemon)["recd_clock_synchronized"] == 1)
        #expect(daemon.terminate() == 0)
    }
}
