import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// A small tmpfs of the test's own, unmounted when released (also when the test fails).
final class SmallFilesystem {
    let mountPoint = TemporaryDirectory()
    var path: String { mountPoint.path }

    init(size: String) throws {
        let mounted = try run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", mountPoint.path])
        guard mounted.status == 0 else { throw TestFailure("mount: \(mounted.stderr)") }
    }

    deinit { _ = try? run("/bin/umount", ["-l", mountPoint.path]) }

    func file(_ name: String) -> String { mountPoint.file(name) }

    /// statvfs: bytes an unprivileged writer can use.
    var freeBytes: Int64 {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return -1 }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    /// Writes `bytes` bytes into `name` from outside recd; stops quietly at ENOSPC.
    func fill(_ name: String, bytes: Int) {
        let fd = open(file(name), O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let block = [UInt8](repeating: 0x5A, count: 64 * 1024)
        var left = bytes
        while left > 0 {
            let written = block.withUnsafeBytes { write(fd, $0.baseAddress, Swift.min(left, $0.count)) }
            guard written > 0 else { return }
            left -= written
        }
    }
}

/// The space guard and retention through the real recd and recctl, on filesystems the tests
/// mount: a refused start, the low-space warning, a clean end before the disk is full,
/// retention making room and deleting exactly the oldest, and ENOSPC caused by someone else.
@Suite("storage: space guard and retention")
struct StorageTests {
    let inputs = TemporaryDirectory()

    func touch(_ path: String, hoursAgo: Double) throws {
        let result = try run("/usr/bin/touch", ["-h", "-d", "@\(Int(Date().timeIntervalSince1970 - hoursAgo * 3600))", path])
        try #require(result.status == 0, "touch: \(result.stderr)")
    }

    @Test func aStartBelowTheMinimumIsRefusedWithInsufficientSpace() throws {
        let disk = try SmallFilesystem(size: "1m")
        // 95 % of the filesystem must stay free; someone else's file takes more than 5 %.
        disk.fill("other-program.dat", bytes: 200 * 1024)
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 2).path),
                                config: "[storage]\nminimum_free = \"95%\"\nwarning_free = 0\n",
                                recordings: disk.file("recordings"))
        let client = try daemon.connect()
        let refused = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"start","params":{"name":"take","format":"wav"}}"#)
        #expect(refused.errorDataCode == "insufficientSpace", "\(refused)")
        #expect(refused.errorMessage?.contains("minimum_free = 95.0%") == true, "\(refused)")
        let status: StatusResult = try client.call(.status)
        #expect(status.state.name == .idle)
        #expect(try daemon.recordingFiles().isEmpty, "no file was created")
        #expect(daemon.log.contains("recording refused: too little free space"))
        // recctl says why, and fails.
        let started = try recctl(daemon, "start", "take")
        #expect(started.status != 0)
        #expect(started.stderr.contains("insufficientSpace") || started.stderr.contains("free on the filesystem"), "\(started.stderr)")
        // Space back: the same start is accepted (once statvfs says so: it can lag an unlink).
        unlink(disk.file("other-program.dat"))
        #expect(waitUntil { disk.freeBytes > 1_000_000 }, "\(disk.freeBytes) bytes free")  // above 95 % of 1 MiB
        let accepted: Recording = try client.call(.start, StartParams(name: "take", format: .wav, duration: 0.5))
        #expect(accepted.name == "take")
    }

    @Test func withRetentionAStartBelowTheMinimumDeletesTheOldestFirst() throws {
        let disk = try SmallFilesystem(size: "2m")
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 3).path),
                                config: "[storage]\nminimum_free = \"1 MiB\"\nwarning_free = 0\n[retention]\nmax_age = \"365d\"\n",
                                recordings: disk.file("recordings"))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "old", format: .wav, sampleRate: 48000, channels: 2, duration: 2))
        #expect(daemon.waitForStatus() { $0.state.name == .finished } != nil)
        // Someone else's 700 KB bring free space below the minimum; retention never deletes them.
        disk.fill("other-program.dat", bytes: 700_000)
        #expect(disk.freeBytes < 1 << 20)
        let started: Recording = try client.call(.start, StartParams(name: "new", format: .wav, sampleRate: 48000, channels: 2, duration: 0.5))
        #expect(started.name == "new")
        #expect(daemon.waitForStatus() { $0.state.name == .finished } != nil)
        let left = try daemon.recordingFiles()
        #expect(left == ["new.wav"], "\(left)\n\(daemon.log)")
        #expect(FileManager.default.fileExists(atPath: disk.file("other-program.dat")))
        #expect(daemon.log.contains("retention deleted recording recording.file=old.wav"))
        #expect(daemon.log.contains("retention.reason=minimumFree"))
    }

    @Test func theLowSpaceWarningAppearsBelowItsLevelAndClearsWhenSpaceReturns() throws {
        let disk = try SmallFilesystem(size: "4m")
        let daemon = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 2).path),
                                config: "[storage]\nminimum_free = \"256 KiB\"\nwarning_free = \"2 MiB\"\ncheck_interval = 0.1\n",
                                recordings: disk.file("recordings"))
        let idle = try #require(daemon.waitForStatus() { $0.storage != nil })
        #expect(idle.warning == nil)
        #expect(idle.storage?.warningFreeBytes == 2 << 20)
        #expect(idle.storage?.minimumFreeBytes == 256 << 10)
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.warning]))

        disk.fill("download.iso", bytes: 3 << 20)
        let warned = try #require(daemon.waitForStatus() { $0.warning?.code == .lowDiskSpace }, "the warning appears")
        #expect(warned.warning?.message.contains("warning below 2 MiB") == true, "\(warned.warning?.message ?? "")")
        #expect(try recctl(daemon, "status").stdout.contains("warning  lowDiskSpace: only"))
        #expect(waitUntil { daemon.log.contains("free space is low") }, "\(daemon.log)")

        unlink(disk.file("download.iso"))
        let cleared = try #require(daemon.waitForStatus() { $0.warning == nil }, "the warning clears")
        #expect((cleared.storage?.freeBytes ?? 0) >= 2 << 20)
        #expect(waitUntil { daemon.log.contains("free space is back above the warning level") }, "\(daemon.log)")
        // Subscribers saw it come and go, in order.
        var values: [RecorderWarning?] = []
        while values.count < 2, let notification = try? watcher.nextNotification(timeout: 20) {
            if case .warning(let warning) = notification.value { values.append(warning) }
        }
        #expect(values.map { $0?.code } == [.lowDiskSpace, nil])
    }

    @Test func reachingTheMinimumEndsTheRecordingWithAPlayableFileBeforeTheDiskIsFull() throws {
        let disk = try SmallFilesystem(size: "3m")
        let input = writeCounterInput(inputs, seconds: 12)
        let minimum: Int64 = 1 << 20
        let daemon = try Daemon(device: TestDevices.file(input.path),
                                config: "[storage]\nminimum_free = \"1 MiB\"\nwarning_free = 0\n" + unpacedInputInTheWriteBuffer,
                                recordings: disk.file("recordings"))
        let client = try daemon.connect()
        // 11 s of 48 kHz stereo is 2.1 MB: more than the 2 MiB above the minimum can hold.
        let _: Recording = try client.call(.start, StartParams(name: "long", format: .wav, sampleRate: 48000, channels: 2, duration: 11))
        let ended = try #require(daemon.waitForStatus() { !$0.state.isActive && $0.state.name != .idle })
        #expect(ended.state.name == .failed)
        #expect(ended.error?.code == .insufficientSpace, "\(String(describing: ended.error))")
        // Not full: the minimum is still free (the header, fsync and rename had room).
        #expect(disk.freeBytes >= minimum, "\(disk.freeBytes) bytes free")
        let recording = try #require(ended.recording)
        #expect(!FileManager.default.fileExists(atPath: recording.partialPath))
        #expect(recording.frames > 200_000 && recording.frames < 528_000, "\(recording.frames) frames")
        let reader = try SoundFileReader(path: recording.path)
        let files = (try? FileManager.default.subpathsOfDirectory(atPath: disk.file("recordings"))) ?? []
        let size = (try? FileManager.default.attributesOfItem(atPath: recording.path)[.size] as? Int) ?? -1
        let evidence = "\(recording.path), \(size) bytes; files \(files); free \(disk.freeBytes); \(ended.statistics)\n\(daemon.log.suffix(3000))"
        #expect(ended.statistics.gaps.isEmpty && ended.statistics.segmentsClosed == 1, "one file, nothing lost: \(evidence)")
        #expect(reader.info.frames == recording.frames, "the header counts every frame written: \(evidence)")
        let samples = reader.readAllInt16()
        let unbroken = samples.elementsEqual(input.samples[0..<samples.count])
        #expect(unbroken, "what was saved is the input, unbroken: \(evidence)")
        // An independent reader agrees.
        let probed = try FFmpegTools.probe(recording.path)
        #expect(probed.frames == recording.frames)
        #expect(daemon.log.contains("error.code=insufficientSpace"))
        let version: VersionResult = try client.call(.version)
        #expect(version.version == RecdVersion.current)
    }

    @Test func anM4AReachingTheMinimumKeepsRoomForTheCopyItsFinalizationMakes() throws {
        let disk = try SmallFilesystem(size: "3m")
        // Noise: Apple Lossless cannot shrink it.
        var state: UInt32 = 7
        let noise = (0..<48000 * 2 * 20).map { _ -> Int16 in
            state = state &* 1_664_525 &+ 1_013_904_223
            return Int16(truncatingIfNeeded: state >> 16)
        }
        let input = inputs.file("noise.raw")
        Signal.write(noise, to: input)
        let daemon = try Daemon(device: TestDevices.file(input), config: "[storage]\nminimum_free = \"1 MiB\"\nwarning_free = 0\n",
                                recordings: disk.file("recordings"))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "lossless", format: .alac, sampleRate: 48000, channels: 2, duration: 15))
        let ended = try #require(daemon.waitForStatus { !$0.state.isActive && $0.state.name != .idle })
        #expect(ended.error?.code == .insufficientSpace, "\(String(describing: ended.error))")
        #expect(disk.freeBytes >= 1 << 20, "\(disk.freeBytes) bytes free")
        let recording = try #require(ended.recording)
        // Rewritten as a regular MP4 (the copy had room), every frame in it.
        #expect(FFmpegTools.topLevelBoxes(recording.path).prefix(2) == ["ftyp", "moov"], "\(FFmpegTools.topLevelBoxes(recording.path))")
        #expect(try FFmpegTools.probe(recording.path).frames == recording.frames)
        #expect(recording.frames > 48000)
    }

    @Test func withRetentionTheOldestRecordingMakesRoomAndRecordingGoesOn() throws {
        let disk = try SmallFilesystem(size: "4m")
        let input = writeCounterInput(inputs, seconds: 12)
        // Retention on (nothing is a year old); the guard keeps 1 MiB free.
        let daemon = try Daemon(device: TestDevices.file(input.path),
                                config: "[storage]\nminimum_free = \"1 MiB\"\nwarning_free = 0\ncheck_interval = 0.1\n"
                                    + "[retention]\nmax_age = \"365d\"\n" + unpacedInputInTheWriteBuffer,
                                recordings: disk.file("recordings"))
        let client = try daemon.connect()
        for name in ["first", "second"] {
            let _: Recording = try client.call(.start, StartParams(name: name, format: .wav, sampleRate: 48000, channels: 2, duration: 3))
            #expect(daemon.waitForStatus() { $0.state.name == .finished } != nil)
        }
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.retention]))
        // 10.5 s (2.0 MB) fits only once the oldest recording (576 KB) is gone.
        let _: Recording = try client.call(.start, StartParams(name: "third", format: .wav, sampleRate: 48000, channels: 2, duration: 10.5))
        let ended = try #require(daemon.waitForStatus() { !$0.state.isActive && $0.state.name != .idle })
        #expect(ended.state.name == .finished, "\(String(describing: ended.error))")
        #expect(ended.recording?.frames == 504_000)
        let samples = try SoundFileReader(path: daemon.recordings + "/third.wav").readAllInt16()
        let complete = samples.elementsEqual(input.samples[0..<Swift.min(samples.count, 504_000 * 2)]) && samples.count == 504_000 * 2
        #expect(complete, "every frame, in order")
        #expect(try daemon.recordingFiles() == ["second.wav", "third.wav"])
        #expect(disk.freeBytes >= 1 << 20)
        var deleted: [RetentionDeletion] = []
        while deleted.isEmpty, let notification = try? watcher.nextNotification(timeout: 20) {
            if case .retention(let deletion?) = notification.value { deleted.append(deletion) }
        }
        #expect(deleted.map(\.file) == ["first.wav"])
        #expect(deleted.first?.reason == .minimumFree)
        #expect(daemon.log.contains("retention deleted recording recording.file=first.wav"), "\(daemon.log)")
    }

    @Test func retentionDeletesExactlyTheOldestAndNeverAForeignFileAPartOrTheActiveRecording() throws {
        let disk = try SmallFilesystem(size: "8m")
        let recordings = disk.file("recordings")
        // Three recordings made by recd, one after the other: a started first (the start inside
        // each file is what "oldest" goes by, not the file's time).
        let maker = try Daemon(device: TestDevices.file(writeCounterInput(inputs, seconds: 2).path),
                               config: "[storage]\nminimum_free = \"256 KiB\"\n", recordings: recordings)
        for name in ["a", "b", "c"] {
            let made = try recctl(maker, "start", name, "--format", "wav", "--rate", "48000", "--channels", "2",
                                  "--duration", "0.5", "--wait")
            try #require(made.status == 0, "\(made.stderr)")
        }
        #expect(maker.terminate() == 0)
        // Beside them: someone else's files, a link to a recording outside, and a link to a
        // directory of recordings outside.
        let outside = inputs.file("outside.wav")
        try FileManager.default.copyItem(atPath: recordings + "/a.wav", toPath: outside)
        try "notes".write(toFile: recordings + "/notes.txt", atomically: false, encoding: .utf8)
        try Data(repeating: 7, count: 1000).write(to: URL(fileURLWithPath: recordings + "/garbage.wav"))
        try Data(repeating: 7, count: 1000).write(to: URL(fileURLWithPath: recordings + "/old.mp4"))
        try FileManager.default.createSymbolicLink(atPath: recordings + "/link.wav", withDestinationPath: outside)
        let outsideFolder = inputs.file("archive")
        try FileManager.default.createDirectory(atPath: outsideFolder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: recordings + "/a.wav", toPath: outsideFolder + "/archived.wav")
        try FileManager.default.createSymbolicLink(atPath: recordings + "/archive", withDestinationPath: outsideFolder)

        let server = try PulseServer()
        try server.tone()
        let relaxed = "[storage]\nminimum_free = \"256 KiB\"\nwarning_free = 0\ncheck_interval = 0.1\n"
        // grace = 0: deletions at once, as this test is about what is deleted (FirstHourTests: the grace).
        let daemon = try Daemon(device: TestDevices.paced(server), config: relaxed + "[retention]\nmax_total_size = \"10 MiB\"\ngrace = 0\n",
                                recordings: recordings)
        // A .part recd did not leave (made after it recovered what a crash leaves), and files
        // older by their time than any recording: neither counts.
        try FileManager.default.copyItem(atPath: recordings + "/a.wav", toPath: recordings + "/stray.wav.part")
        for other in ["stray.wav.part", "notes.txt", "garbage.wav", "old.mp4", "link.wav"] { try touch(recordings + "/" + other, hoursAgo: 240) }
        try touch(outside, hoursAgo: 240)
        try touch(outsideFolder + "/archived.wav", hoursAgo: 240)
        let client = try daemon.connect()
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.retention]))
        let active: Recording = try client.call(.start, StartParams(name: "live", format: .wav, sampleRate: 48000, channels: 2))
        #expect(daemon.waitForStatus { $0.currentTime > 0.2 } != nil)
        try touch(active.partialPath, hoursAgo: 240)
        let fresh = try #require(daemon.waitForStatus { $0.storage?.recordingsCount == 3 })
        #expect(fresh.storage?.retentionNext.map(\.file) == ["a.wav"], "the oldest is next, not due")
        #expect(fresh.storage?.retentionNext.first?.reason == nil)

        // Now the three may take 150 KB together (each holds 96 KB): a and b must go (SIGHUP
        // applies retention at once), while live.wav.part grows.
        try (relaxed + "[retention]\nmax_total_size = \"150 kB\"\ngrace = 0\n").write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        var deleted: [RetentionDeletion] = []
        while deleted.count < 2, let notification = try? watcher.nextNotification(timeout: 20) {
            if case .retention(let deletion?) = notification.value { deleted.append(deletion) }
        }
        #expect(deleted.map(\.file) == ["a.wav", "b.wav"], "oldest first")
        #expect(deleted.allSatisfy { $0.reason == .maximumTotalSize })
        // A later pass finds nothing more due: c is next.
        let after = try #require(daemon.waitForStatus { $0.storage?.recordingsCount == 1 })
        #expect(after.storage?.retentionNext.map(\.file) == ["c.wav"])
        #expect(after.storage?.retentionNext.first?.reason == nil)
        let listed = try recctl(daemon, "ls").stdout
        #expect(listed.contains("retention deletes next: c.wav"), "\(listed)")

        // Retention off again before the live recording ends (it alone is larger than 150 kB).
        try relaxed.write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.process.signal(SIGHUP)
        #expect(daemon.waitForStatus { $0.storage?.retention == false } != nil)
        let stopped: Recording = try client.call(.stop)
        let files = Set(try FileManager.default.contentsOfDirectory(atPath: recordings).filter { !$0.hasPrefix(".") })
        #expect(files == ["c.wav", "live.wav", "stray.wav.part", "notes.txt", "garbage.wav", "old.mp4", "link.wav", "archive"])
        #expect(FileManager.default.fileExists(atPath: outside))
        #expect(FileManager.default.fileExists(atPath: outsideFolder + "/archived.wav"))
        let reader = try SoundFileReader(path: stopped.path)
        #expect(reader.info.frames == stopped.frames && stopped.frames > 0)
        let lines = daemon.log.split(separator: "\n").filter { $0.contains("retention deleted recording") }
        #expect(lines.count == 2, "\(lines)")
        #expect(lines.first?.contains("recording.file=a.wav") == true && lines.last?.contains("recording.file=b.wav") == true)
    }

    @Test(arguments: [
        ("[storage]\nminimum_free = \"lots\"\n", "recd.toml:2: storage.minimum_free: must be a size such as"),
        ("[storage]\nwarning_free = \"150%\"\n", "recd.toml:2: storage.warning_free: must be a size such as"),
        ("[storage]\nminimum_free = -5\n", "recd.toml:2: storage.minimum_free: must be a size such as"),
        ("[storage]\ncheck_interval = 0\n", "recd.toml:2: storage.check_interval: must be between 0.05 and 60 seconds, not 0"),
        ("[retention]\nmax_age = \"3 fortnights\"\n", "recd.toml:2: retention.max_age: must be a duration: seconds (90, 1.5)"),
        ("[retention]\nmax_age = 0\n", "recd.toml:2: retention.max_age: must be between 1 and 3162240000 seconds, not 0"),
        ("[retention]\nmax_total_size = \"10%\"\n", "recd.toml:2: retention.max_total_size: must be a size such as \"10 GiB\""),
        ("[retention]\nmax_total_size = 0\n", "recd.toml:2: retention.max_total_size: must be more than 0 bytes"),
        ("[retention]\nkeep_free = \"0%\"\n", "recd.toml:2: retention.keep_free: must be more than 0"),
        ("[retention]\nmax_files = 3\n", "recd.toml:2: retention.max_files: unknown key"),
    ])
    func checkConfigCatchesBadStorageAndRetentionValues(text: String, expected: String) throws {
        let directory = TemporaryDirectory()
        let path = directory.file("recd.toml")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let result = try run(Binaries.recd, ["--user", "--config", path, "--check-config"], timeout: 20)
        #expect(result.status == 78)
        #expect(result.stderr.contains(expected), "\(result.stderr)")
    }

    @Test func checkConfigAcceptsEveryFormOfSizeAndDuration() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("recd.toml")
        try """
            [storage]
            minimum_free = 1048576
            warning_free = "5%"
            check_interval = 0.5
            [retention]
            max_age = "30d"
            max_total_size = "10 GiB"
            keep_free = "2 GB"
            interval = 300
            """.write(toFile: path, atomically: true, encoding: .utf8)
        let result = try run(Binaries.recd, ["--user", "--config", path, "--check-config"], timeout: 20)
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test func theShippedStorageAndRetentionExamplesAreValid() throws {
        // etc/recd.toml's [storage] and [retention] with every key uncommented.
        let shipped = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("etc/recd.toml")
        var section = ""
        var lines: [String] = []
        for line in try String(contentsOf: shipped, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("[") { section = String(line) }
            guard section == "[storage]" || section == "[retention]" else { continue }
            if line.hasPrefix("[") {
                lines.append(String(line))
            } else if line.hasPrefix("#"), let first = line.dropFirst().first, first.isLowercase, line.contains(" = ") {
                lines.append(String(line.dropFirst()))
            }
        }
        #expect(lines.count == 10, "\(lines)")
        let directory = TemporaryDirectory()
        let path = directory.file("recd.toml")
        try lines.joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
        let result = try run(Binaries.recd, ["--user", "--config", path, "--check-config"], timeout: 20)
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test func enospcCausedBySomeoneElseStillLeavesAPlayableFileAndALiveDaemon() throws {
        let disk = try SmallFilesystem(size: "4m")
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server),
                                config: "[storage]\nminimum_free = \"256 KiB\"\nwarning_free = 0\n",
                                recordings: disk.file("recordings"))
        let client = try daemon.connect()
        let started: Recording = try client.call(.start, StartParams(name: "victim", format: .wav, sampleRate: 48000, channels: 2))
        #expect(daemon.waitForStatus() { $0.currentTime > 0.5 } != nil)
        // Another program takes every byte left, faster than any check can see it coming.
        disk.fill("hog.bin", bytes: 8 << 20)
        let ended = try #require(daemon.waitForStatus() { !$0.state.isActive })
        #expect(ended.state.name == .failed)
        // Whichever noticed first: the write (ENOSPC) or the guard.
        #expect([.failedToSave, .insufficientSpace].contains(ended.error?.code), "\(String(describing: ended.error))")
        let recording = try #require(ended.recording)
        #expect(recording.path == started.path)
        #expect(!FileManager.default.fileExists(atPath: recording.partialPath))
        let reader = try SoundFileReader(path: recording.path)
        #expect(reader.info.frames >= recording.frames && recording.frames > 24_000, "\(reader.info.frames) / \(recording.frames)")
        let probed = try FFmpegTools.probe(recording.path)
        #expect(probed.sampleRate == 48000)
        let version: VersionResult = try client.call(.version)
        #expect(version.version == RecdVersion.current)
        // With the space back, recd records again.
        #expect(unlink(disk.file("hog.bin")) == 0)
        // The kernel gives the space back with the file's last page: wait for statvfs to say so
        // (once seen here on a busy machine: 0 B free just after the unlink).
        #expect(waitUntil(timeout: 20) { disk.freeBytes > 1 << 20 }, "free: \(disk.freeBytes) B")
        let again: Recording = try client.call(.start, StartParams(name: "again", format: .wav, duration: 0.3))
        #expect(again.name == "again")
    }
}
