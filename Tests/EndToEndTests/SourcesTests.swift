import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// A station of several sources (issue 53), through the real recd and recctl: each source
/// records its own device into its own folder, every way in names the source, and one lost
/// microphone never stops another.
@Suite("a station of several sources")
struct SourcesTests {
    let inputs = TemporaryDirectory()

    /// Two ALSA file devices, different audio: each source's file is exactly its own device's
    /// first second, in its folder and its own format; the socket, recctl and the metrics name
    /// the sources.
    @Test func twoSourcesRecordSideBySideEachItsOwnDeviceIntoItsOwnFolder() throws {
        let (east, west) = writeTwoSourceInputs(inputs, seconds: 3)
        let daemon = try Daemon(device: nil, config: """
            [recording]
            format = "wav"
            \(sourceTables(["east": TestDevices.file(east.path), "west": TestDevices.file(west.path)]))
            [source.recording]
            format = "flac"
            """)
        let client = try daemon.connect()
        // Without a source, `status` is the station's; a method that acts on one asks which.
        let station = try client.exchange(#"{"jsonrpc":"2.0","id":1,"method":"status"}"#)
        let sources = try #require((station["result"] as? [String: Any])?["sources"] as? [[String: Any]], "\(station)")
        #expect(sources.map { $0["source"] as? String } == ["east", "west"])
        #expect(sources.map { ($0["state"] as? [String: Any])?["name"] as? String } == ["idle", "idle"])
        let ambiguous = try client.exchange(#"{"jsonrpc":"2.0","id":2,"method":"start"}"#)
        #expect(ambiguous.errorCode == -32005 && ambiguous.errorDataCode == "ambiguousSource", "\(ambiguous)")
        // A subscription without a source follows both, each notification naming its source.
        let watcher = try daemon.connect()
        let subscribed = try watcher.exchange(#"{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topics":["state"]}}"#)
        let snapshot = try #require((subscribed["result"] as? [String: Any])?["snapshot"] as? [[String: Any]], "\(subscribed)")
        #expect(Set(snapshot.compactMap { $0["source"] as? String }) == ["east", "west"])
        let eastOnly = try daemon.connect()
        let onlyEast = try eastOnly.exchange(#"{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topics":["state"],"source":"east"}}"#)
        let eastSnapshot = try #require((onlyEast["result"] as? [String: Any])?["snapshot"] as? [[String: Any]], "\(onlyEast)")
        #expect(eastSnapshot.map { $0["source"] as? String } == ["east"])

        for (source, name) in [("east", "e-take"), ("west", "w-take")] {
            let answer = try client.exchange(#"{"jsonrpc":"2.0","id":3,"method":"start","params":{"source":"\#(source)","name":"\#(name)","duration":1}}"#)
            #expect(answer["result"] != nil, "\(source): \(answer)")
        }
        // Both finish, each seen through the subscription that follows both.
        var finished: Set<String> = []
        let deadline = Date().addingTimeInterval(30)
        while finished.count < 2, Date() < deadline {
            let notification = try watcher.nextObject(timeout: 30)
            let params = notification["params"] as? [String: Any]
            if (params?["value"] as? [String: Any])?["name"] as? String == "finished", let source = params?["source"] as? String {
                finished.insert(source)
            }
        }
        #expect(finished == ["east", "west"])
        // The east-only subscription saw east's states only.
        var seen: Set<String> = []
        while let line = try? eastOnly.nextObject(timeout: 0.5) {
            if let source = (line["params"] as? [String: Any])?["source"] as? String { seen.insert(source) }
        }
        #expect(seen == ["east"])

        // Each file in its source's folder, its own format, exactly its own device's audio.
        for (path, expected) in [(daemon.recordings + "/east/e-take.wav", east.samples), (daemon.recordings + "/west/w-take.flac", west.samples)] {
            let samples = try SoundFileReader(path: path).readAllInt16()
            #expect(samples.count == 48000 * 2, "\(path)")
            #expect(samples == Array(expected.prefix(48000 * 2)), "\(path): not its device's first second")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: daemon.recordings).filter { !$0.hasPrefix(".") }.sorted() == ["east", "west"])
        // recctl: the station's status shows both; --source names one; recordings per source.
        let environment = ["RECD_SOCKET": daemon.socket, "NO_COLOR": "1"]
        let status = try run(Binaries.recctl, ["status"], environment: environment, timeout: 30)
        #expect(status.status == 0 && status.stdout.contains("source east") && status.stdout.contains("source west"), "\(status)")
        let westRun = try run(Binaries.recctl, ["status", "--source", "west", "--json"], environment: environment, timeout: 30)
        let westStatus = try WireCoding.decoder().decode(StatusResult.self, from: Data(westRun.stdout.utf8))
        #expect(westStatus.source == "west" && westStatus.recording?.name == "w-take")
        let listed = try run(Binaries.recctl, ["ls", "--source", "west"], environment: environment, timeout: 30)
        #expect(listed.stdout.contains("w-take") && !listed.stdout.contains("e-take"), "\(listed)")
        // The metrics: per-source series labelled, the station's not.
        let metrics = try run(Binaries.recctl, ["metrics"], environment: environment, timeout: 30).stdout
        #expect(metrics.contains(#"recd_files_total{source="east"} 1"#) && metrics.contains(#"recd_files_total{source="west"} 1"#), "\(metrics)")
        #expect(metrics.contains(#"recd_state{source="west",state="finished"} 1"#), "\(metrics)")
        #expect(metrics.contains("\nrecd_disk_free_bytes "), "the disk is the station's")
        #expect(daemon.terminate() == 0)
    }

    /// Retention is the station's, and fair: over both folders together, the source holding
    /// the most gives its oldest first. West's one file is the oldest of all, east's three come
    /// after; a limit that four files break by two goes to east's two oldest, never to west's
    /// (oldest-first over the station would have deleted it first). Each deletion is
    /// announced as its own source's.
    @Test func retentionOverTheStationDeletesTheOldestOfTheSourceHoldingTheMost() throws {
        let (east, west) = writeTwoSourceInputs(inputs, seconds: 6)
        // 1 s of 48 kHz stereo 16-bit WAV is 192 000 bytes (and a header): four files are
        // about 768 kB, two of them about 384 kB.
        let daemon = try Daemon(device: nil, config: """
            [recording]
            format = "wav"
            [retention]
            max_total_size = "450 kB"
            grace = 0
            \(sourceTables(["east": TestDevices.file(east.path), "west": TestDevices.file(west.path)]))
            """)
        let watcher = try daemon.connect()
        _ = try watcher.exchange(#"{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topics":["retention"]}}"#)
        func record(_ source: String, _ name: String) throws {
            let client = try daemon.connect()
            client.source = source
            let _: Recording = try client.call(.start, StartParams(name: name, duration: 1))
            guard waitUntil(timeout: 30, { (try? client.call(.status, as: StatusResult.self))?.state.name == .finished }) else {
                throw TestFailure("\(source) \(name) did not finish: \(daemon.log.suffix(2000))")
            }
        }
        try record("west", "w1")
        for name in ["e1", "e2", "e3"] { try record("east", name) }
        func files(_ source: String) -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: daemon.recordings + "/" + source)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
        }
        let settled = waitUntil(timeout: 30) { files("east") == ["e3.wav"] }
        #expect(settled && files("west") == ["w1.wav"], "east \(files("east")), west \(files("west"))\n\(daemon.log.suffix(3000))")
        // Announced on the subscription as east's, each once, for the station's size limit.
        var deleted: [(String?, String?)] = []
        while deleted.count < 2, let line = try? watcher.nextObject(timeout: 10) {
            let params = line["params"] as? [String: Any]
            guard let value = params?["value"] as? [String: Any] else { continue }
            deleted.append((params?["source"] as? String, value["file"] as? String))
            #expect(value["reason"] as? String == "maximumTotalSize")
        }
        #expect(deleted.map(\.0) == ["east", "east"] && deleted.map(\.1) == ["e1.wav", "e2.wav"], "\(deleted)")
        #expect(daemon.terminate() == 0)
    }

    /// Two paced devices, autostart: west's server is down at boot, so west waits while east
    /// records; west records once its server is back; then east's is lost and east waits while
    /// west records on. SIGTERM finalizes both sources' files, every one playable.
    @Test func aMissingOrLostSourceWaitsWhileTheOtherRecords() throws {
        let eastServer = try PulseServer(), westServer = try PulseServer()
        try eastServer.tone()
        try westServer.tone()
        westServer.kill()
        var notify: NotifyListener? = try NotifyListener()
        let daemon = try Daemon(device: nil, config: """
            [recording]
            format = "flac"
            [autostart]
            enabled = true
            [capture]
            retry_interval_max = 1
            \(sourceTables(["east": TestDevices.paced(eastServer), "west": TestDevices.paced(westServer)]))
            """, environment: ["NOTIFY_SOCKET": notify!.path])
        let east = try daemon.connect(), west = try daemon.connect()
        east.source = "east"
        west.source = "west"
        func status(_ connection: RecdConnection) -> StatusResult? { try? connection.call(.status) }
        func waitFor(_ connection: RecdConnection, _ what: String, _ condition: (StatusResult) -> Bool) throws -> StatusResult {
            var last: StatusResult?
            _ = waitUntil(timeout: 30) {
                last = status(connection)
                return last.map(condition) ?? false
            }
            guard let last, condition(last) else { throw TestFailure("\(connection.source ?? ""): not \(what): \(String(describing: last?.state))\n\(daemon.log.suffix(3000))") }
            return last
        }
        let eastRecording = try waitFor(east, "recording") { $0.state.name == .recording && $0.currentTime >= 0.5 }
        _ = try waitFor(west, "waiting for its device") { $0.state.name == .waitingForDevice }
        // systemd's STATUS= names each source's state (both start at once: which reaches its
        // state first is not fixed).
        let line = notify?.waitFor {
            $0.contains("STATUS=east: recording") && $0.contains("; west: waiting for device (deviceNotFound), attempt")
        }
        #expect(line != nil, "\(daemon.log.suffix(2000))")
        // Closed, not left unread: a full datagram queue would block recd's next notification.
        notify = nil
        // West comes: it records, and east went on meanwhile in its first file.
        try westServer.restart()
        try westServer.tone()
        _ = try waitFor(west, "recording") { $0.state.name == .recording && $0.currentTime >= 0.5 }
        let eastNow = try waitFor(east, "still recording") { $0.state.name == .recording }
        #expect(eastNow.recording?.segment?.index == eastRecording.recording?.segment?.index, "east's file was never interrupted")
        #expect(eastNow.statistics.gaps.isEmpty && eastNow.error == nil)
        // East is lost: it waits; west records on, uninterrupted.
        let westBefore = try #require(status(west))
        eastServer.kill()
        let eastLost = try waitFor(east, "waiting for its device") { $0.state.name == .waitingForDevice }
        let westAfter = try waitFor(west, "recording on") { $0.state.name == .recording && $0.currentTime >= westBefore.currentTime + 1 }
        // (West's recording began waiting for its device: that wait is its gap, before any audio.)
        #expect(westAfter.statistics.gaps.count == westBefore.statistics.gaps.count
                && westAfter.recording?.segment?.index == westBefore.recording?.segment?.index, "\(westAfter.statistics.gaps)")
        // East comes back, in a new segment of its recording; west never paused.
        try eastServer.restart()
        try eastServer.tone()
        let eastBack = try waitFor(east, "recording again") {
            $0.state.name == .recording && ($0.recording?.segment?.index ?? 0) == 2 && $0.currentTime >= eastLost.currentTime + 0.5
        }
        #expect(eastBack.recording?.id == eastRecording.recording?.id)
        #expect(try #require(status(west)).statistics.gaps.count == westBefore.statistics.gaps.count)
        #expect(daemon.terminate() == 0, "\(daemon.log.suffix(3000))")
        // Every file finalized and playable: east's two (before and after the loss), west's one.
        for source in ["east", "west"] {
            let folder = daemon.recordings + "/" + source
            let files = try FileManager.default.contentsOfDirectory(atPath: folder).filter { !$0.hasPrefix(".") }
            #expect(files.count == (source == "east" ? 2 : 1) && files.allSatisfy { $0.hasSuffix(".flac") }, "\(source): \(files)")
            for file in files {
                let info = try SoundFileReader(path: folder + "/" + file).info
                #expect(info.frames >= 24000, "\(source)/\(file): \(info.frames) frames")
            }
        }
    }

    /// A trigger on one source only: west is armed and opens an event on its 3 kHz burst; east
    /// records every frame, and its file is one, uncut.
    @Test func aTriggerOnOneSourceOnly() throws {
        let eastServer = try PulseServer(), westServer = try PulseServer()
        try eastServer.tone()
        try westServer.tone()
        let daemon = try Daemon(device: nil, config: """
            [recording]
            format = "wav"
            [autostart]
            enabled = true
            [trigger]
            high_pass = 2000
            threshold = -40
            hang = 0.5
            \(sourceTables(["east": TestDevices.paced(eastServer), "west": TestDevices.paced(westServer)]))
            [source.trigger]
            enabled = true
            """)
        let east = try daemon.connect(), west = try daemon.connect()
        east.source = "east"
        west.source = "west"
        let armed = waitUntil(timeout: 30) { (try? west.call(.status, as: StatusResult.self))?.trigger?.state == "armed" }
        #expect(armed, "\(daemon.log.suffix(2000))")
        let recording = waitUntil(timeout: 30) { (try? east.call(.status, as: StatusResult.self))?.state.name == .recording }
        let eastStatus: StatusResult = try east.call(.status)
        #expect(recording && eastStatus.trigger == nil && eastStatus.recording?.trigger == nil, "\(eastStatus.state)")
        let watcher = try daemon.connect()
        _ = try watcher.exchange(#"{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topics":["trigger"]}}"#)
        let burst = try westServer.sine(frequency: 3000)
        var opened: [String: Any]?
        let deadline = Date().addingTimeInterval(30)
        while opened == nil, Date() < deadline, let line = try? watcher.nextObject(timeout: 30) {
            let params = line["params"] as? [String: Any]
            if (params?["value"] as? [String: Any])?["kind"] as? String == "opened" { opened = params }
        }
        try westServer.unload(burst)
        #expect(opened?["source"] as? String == "west", "\(String(describing: opened))")
        let event = try #require((opened?["value"] as? [String: Any])?["path"] as? String)
        #expect(event.hasPrefix(daemon.recordings + "/west/"), "\(event)")
        let eastAfter: StatusResult = try east.call(.status)
        #expect(eastAfter.recording?.segment?.index == 1 && eastAfter.statistics.gaps.isEmpty, "east is one file, uncut")
        #expect(daemon.terminate() == 0)
    }
}
