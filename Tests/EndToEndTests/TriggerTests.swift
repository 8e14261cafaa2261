import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import RecorderModel
import Sndfile
import Testing

/// Sound-activated recording through the real recd: a known signal on the paced file device
/// (bit-exact input at a real clock's pace: the device's frame n is the input's frame n), a
/// file per event beginning the pre-roll before its onset and ending the hang after it, bit
/// for bit, with the events on the socket's `trigger` topic.
@Suite("sound-activated recording")
struct TriggerTests {
    let inputs = TemporaryDirectory()

    /// Reads `trigger` notifications until `done` says the list is complete, or `timeout`.
    static func collectEvents(_ client: RecdConnection, timeout: Double, until done: ([TriggerEvent]) -> Bool) -> [TriggerEvent] {
        var events: [TriggerEvent] = []
        let deadline = Date().addingTimeInterval(timeout)
        while !done(events), Date() < deadline {
            guard let change = try? client.nextNotification(timeout: max(0.1, deadline.timeIntervalSinceNow)) else { continue }
            if case .trigger(let event?) = change.value { events.append(event) }
        }
        return events
    }

    @Test func eachBurstIsOneFileFromItsPreRollToItsHangBitForBitAndTheHumOpensNothing() throws {
        let server = try PulseServer()
        try server.tone()
        // 4.0–5.0: a burst; 8.0–10.1: three phrases with 300 ms pauses (one event: hang 1 s);
        // 13.0: a 5 ms click (shorter than the attack); 14.0–14.1: a blip that opens and is
        // discarded (its sound is under the minimum); 16.0–23.5: a long burst, cut every 5 s.
        let bursts = [(4.0, 5.0), (8.0, 8.5), (8.8, 9.3), (9.6, 10.1), (13.0, 13.005), (14.0, 14.1), (16.0, 23.5)]
        let samples = Signal.triggerScene(seconds: 40, bursts: bursts)
        let path = inputs.file("scene.raw")
        Signal.write(samples, to: path)
        let daemon = try Daemon(device: TestDevices.pacedFile(path, server: server),
                                config: "[recording]\nformat = \"wav\"\nsample_rate = 48000\nchannels = 2\n")
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.trigger]))
        let client = try daemon.connect()
        // Absolute: the 50 Hz hum is at -20 dBFS, above the threshold, until the band filter
        // takes it 24 dB down.
        let trigger = TriggerParams(highPass: 100, threshold: -35, hysteresis: 4, attack: 0.05, hang: 1,
                                    minimumLength: 0.2, maximumLength: 5, preRoll: 1)
        let started: Recording = try client.call(.start, StartParams(name: "scene", trigger: trigger))
        #expect(started.trigger?.threshold == -35 && started.trigger?.highPass == 100)
        #expect(started.segment == nil, "no file before the first event")

        let events = Self.collectEvents(watcher, timeout: 90) { events in
            events.contains { $0.kind == .closed && $0.reason == "hang" && $0.onsetFrame >= 16 * 48000 - 480 }
        }
        let status: StatusResult = try client.call(.status)
        let detector = try #require(status.trigger, "status shows the trigger")
        #expect(detector.state == "armed" && detector.events == 4 && detector.discarded == 1, "\(detector)")
        #expect(detector.level < -35 && detector.level > -50, "the filtered hum: \(detector.level) dBFS")
        let _: Recording = try client.call(.stop)

        let summary = events.map { "\($0.event) \($0.kind.rawValue) #\($0.index) \($0.firstFrame)+\($0.duration) \($0.reason ?? "")" }
        #expect(events.map(\.kind) == [.opened, .closed, .opened, .closed, .opened, .discarded, .opened, .closed, .opened, .closed],
                "\(summary) \(daemon.log)")
        #expect(events.map(\.event) == [1, 1, 2, 2, 3, 3, 4, 4, 4, 4], "\(summary)")
        #expect(events.filter { $0.kind != .opened }.map(\.index) == [1, 2, 3, 3, 4], "the discarded file's index is taken again: \(summary)")
        #expect(events.filter { $0.kind == .closed }.map { $0.reason ?? "" } == ["hang", "hang", "maximumLength", "hang"], "\(summary)")
        let closed = events.filter { $0.kind == .closed }
        try #require(closed.count == 4)

        // Every file is the input from its first frame on, bit for bit.
        var files: [(event: TriggerEvent, samples: [Int16])] = []
        for event in closed {
            #expect(FileManager.default.fileExists(atPath: event.path), "\(event.path)")
            let recorded = try SoundFileReader(path: event.path).readAllInt16()
            #expect(Double(recorded.count / 2) / 48000 == event.duration)
            let first = Int(event.firstFrame) * 2
            try #require(first >= 0 && first + recorded.count <= samples.count, "\(event)")
            #expect(recorded.elementsEqual(samples[first..<(first + recorded.count)]), "file \(event.index) is the input from frame \(event.firstFrame)")
            files.append((event, recorded))
        }
        let block = 480
        func expectEvent(_ event: TriggerEvent, frames: Int, onset: Double, offset: Double, _ label: String) {
            let onsetFrame = Int(onset * 48000)
            let endFrame = Int(event.firstFrame) + frames
            #expect(abs(Int(event.onsetFrame) - onsetFrame) <= block, "\(label): onset at \(event.onsetFrame), sound at \(onsetFrame)")
            #expect(Int(event.firstFrame) == Int(event.onsetFrame) - 48000, "\(label): begins the pre-roll before the onset")
            let expectedEnd = Int(offset * 48000) + 48000
            #expect(endFrame >= expectedEnd - block && endFrame <= expectedEnd + 2 * block,
                    "\(label): ends at \(endFrame), the hang after the sound's end is \(expectedEnd)")
        }
        expectEvent(files[0].event, frames: files[0].samples.count / 2, onset: 4, offset: 5, "the first burst")
        expectEvent(files[1].event, frames: files[1].samples.count / 2, onset: 8, offset: 10.1, "three phrases, one event")
        // The long burst: two files that follow each other without a frame lost or repeated.
        let long = files[2...]
        #expect(long.dropLast().allSatisfy { $0.samples.count / 2 == 5 * 48000 }, "cut at the maximum length")
        var next = Int(long.first!.event.firstFrame)
        for part in long {
            #expect(Int(part.event.firstFrame) == next, "file \(part.event.index) follows the one before")
            next = Int(part.event.firstFrame) + part.samples.count / 2
        }
        expectEvent(long.first!.event, frames: next - Int(long.first!.event.firstFrame), onset: 16, offset: 23.5, "the long burst")

        // Each file's start is its first frame's capture time: the same clock for all.
        let anchors = closed.map { $0.start.timeIntervalSince1970 - Double($0.firstFrame) / 48000 }
        #expect(anchors.max()! - anchors.min()! < 0.005, "one capture clock: \(anchors)")
        for event in closed {
            let bext = try #require(try BextChunk(wavPath: event.path))
            let midnight = try #require(UTCTimestamp.date(bext.originationDate))
            let fileStart = midnight.addingTimeInterval(Double(bext.timeReference) / 48000)
            #expect(abs(fileStart.timeIntervalSince(event.start)) < 0.001, "file \(event.index): \(fileStart) vs \(event.start)")
        }
        // Nothing else was written: the hum, the click and the blip left no file.
        let written = try FileManager.default.subpathsOfDirectory(atPath: daemon.recordings).filter { $0.hasSuffix(".wav") }
        #expect(written.count == 4, "\(written)")
    }

    @Test func eventsReachMQTTAndRecctlAndAStartOverMQTTCarriesItsTrigger() throws {
        let server = try PulseServer()
        try server.tone()
        let broker = try MosquittoBroker()
        let samples = Signal.triggerScene(seconds: 30, bursts: [(3.0, 4.0)])
        let path = inputs.file("mqtt-scene.raw")
        Signal.write(samples, to: path)
        let daemon = try Daemon(device: TestDevices.pacedFile(path, server: server), config: """
            [recording]
            format = "wav"
            sample_rate = 48000
            channels = 2
            [mqtt]
            enabled = true
            host = "127.0.0.1"
            port = \(broker.port)
            client_id = "recd-trigger"
            topic_prefix = "recd/trigger"
            control = true
            """)
        let watcher = try MQTTWatcher(port: broker.port, topics: ["recd/trigger/#", "homeassistant/#"])
        try #require(watcher.first("recd/trigger/availability", where: { $0.payload == "online" }) != nil, "\(watcher.messages)")
        let discovery = try #require(watcher.first(where: { $0.topic.hasPrefix("homeassistant/") && $0.payload.contains("_sound") }),
                                     "Home Assistant is told of the sound sensor")
        let components = try #require((discovery.json?["cmps"] as? [String: Any])?["sound"] as? [String: Any], "\(discovery)")
        #expect(components["p"] as? String == "binary_sensor" && components["dev_cla"] as? String == "sound"
                && components["stat_t"] as? String == "recd/trigger/sound", "\(components)")

        // A start over MQTT with a trigger: the same parser, nested members checked.
        try mqttPublish(port: broker.port, topic: "recd/trigger/command/start",
                        payload: #"{"name":"mq","trigger":{"highPass":100,"threshold":-35,"hang":0.5,"preRoll":0.5,"bogus":1}}"#)
        let refused = try #require(watcher.first("recd/trigger/reply"), "\(watcher.messages)")
        #expect(refused.payload.contains("bogus"), "an unknown trigger member is refused: \(refused)")
        // recctl watch on a terminal prints each event above its meter line.
        let terminal = try BackgroundCommand("/usr/bin/script", ["-qfec", "'\(Binaries.recctl)' --socket '\(daemon.socket)' watch --until finished",
                                                                 "/dev/null"], environment: ["NO_COLOR": "1"])
        #expect(waitUntil { terminal.stdout.contains("idle") }, "\(terminal.stdout)")
        let bar = try BackgroundCommand(Binaries.recctl, ["--socket", daemon.socket, "watch", "--format", "waybar", "--until", "finished"])
        #expect(waitUntil { bar.stdout.contains("\"idle\"") }, "\(bar.stdout)")
        let mark = watcher.messages.count
        try mqttPublish(port: broker.port, topic: "recd/trigger/command/start",
                        payload: #"{"name":"mq","trigger":{"highPass":100,"threshold":-35,"hang":0.5,"preRoll":0.5}}"#)
        let on = try #require(watcher.first("recd/trigger/sound", after: mark, timeout: 60, where: { $0.payload == "ON" }),
                              "sound detected: \(watcher.messages.suffix(20)) \(daemon.log)")
        #expect(on.payload == "ON")
        let opened = try #require(watcher.first("recd/trigger/event", after: mark, where: { $0.json?["kind"] as? String == "opened" }))
        let status = try run(Binaries.recctl, ["status"], environment: ["RECD_SOCKET": daemon.socket, "NO_COLOR": "1"], timeout: 30).stdout
        #expect(status.contains("trigger") && status.contains("1 event\n"), "\(status)")
        let closed = try #require(watcher.first("recd/trigger/event", after: mark, where: { $0.json?["kind"] as? String == "closed" }),
                                  "\(watcher.messages.suffix(20))")
        #expect(watcher.first("recd/trigger/sound", after: mark, where: { $0.payload == "OFF" }) != nil)
        let file = try #require(closed.json?["path"] as? String)
        #expect(FileManager.default.fileExists(atPath: file) && opened.json?["event"] as? Int == 1)
        let onset = try #require((closed.json?["onsetFrame"] as? NSNumber)?.intValue)
        #expect(abs(onset - 3 * 48000) <= 480, "onset \(onset)")
        let _: Recording = try daemon.connect().call(.stop)
        #expect(terminal.wait(timeout: 30) == 0, "\(terminal.stderr)")
        #expect(terminal.stdout.contains("event 1 opened \(file) (onset "), "\(terminal.stdout.debugDescription)")
        #expect(terminal.stdout.contains("event 1 closed \(file) ("), "\(terminal.stdout.debugDescription)")
        // A status bar shows armed, then recording while the event's file is written, then armed.
        #expect(bar.wait(timeout: 30) == 0, "\(bar.stderr)")
        var classes: [String] = []
        for line in bar.stdout.split(separator: "\n") {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let name = object["class"] as? String else { continue }
            if classes.last != name { classes.append(name) }
        }
        let during = Array(classes.drop { $0 != "armed" }.prefix(3))
        #expect(during == ["armed", "recording", "armed"], "\(classes) \(bar.stdout.suffix(2000))")
    }

    @Test func aDeviceLostDuringAnEventClosesItsFileAndTheTriggerRearmsWhenTheDeviceIsBack() throws {
        let server = try PulseServer()
        try server.tone()  // -15 dBFS all along: an event opens as soon as the trigger is armed
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"flac\"\n")
        let watcher = try daemon.connect()
        let _: SubscribeResult = try watcher.call(.subscribe, SubscribeParams(topics: [.trigger]))
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "lost", trigger: TriggerParams(threshold: -30, hang: 1, preRoll: 0.5)))
        let opened = Self.collectEvents(watcher, timeout: 30) { $0.contains { $0.kind == .opened } }
        try #require(opened.count == 1, "\(opened) \(daemon.log)")
        #expect(daemon.waitForStatus { $0.currentTime >= 1 } != nil)
        server.kill()
        let closed = Self.collectEvents(watcher, timeout: 30) { $0.contains { $0.kind == .closed } }
        let lost = try #require(closed.first { $0.kind == .closed }, "the event closes with the device: \(closed) \(daemon.log)")
        #expect(lost.reason == "deviceLost" && lost.event == 1 && lost.index == 1, "\(lost)")
        // Its file is finalized and whole: what was captured before the loss.
        let probe = try FFmpegTools.probe(lost.path)
        #expect(probe.codecName == "flac" && (probe.frames ?? 0) >= 48000, "\(probe)")
        #expect(daemon.waitForStatus { $0.state.name == .waitingForDevice } != nil)
        try server.restart()
        try server.tone()
        let again = Self.collectEvents(watcher, timeout: 30) { $0.contains { $0.kind == .opened } }
        let next = try #require(again.first { $0.kind == .opened }, "armed again once the device is back: \(again) \(daemon.log)")
        #expect(next.event == 2 && next.index == 2, "\(next)")
        let status: StatusResult = try client.call(.status)
        #expect(status.trigger?.events == 2 && status.trigger?.state == "open", "\(String(describing: status.trigger))")
        let _: Recording = try client.call(.stop)
    }
}

/// Recording windows on a running daemon: short windows by the local clock, a triggered
/// recording armed inside, listening outside.
@Suite("recording windows")
struct ScheduleWindowTests {
    /// The local clock reading `date` (as the daemon, in the same TZ, reads it): HH:MM:SS.
    static func clock(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var fields = tm()
        localtime_r(&seconds, &fields)
        return String(format: "%02d:%02d:%02d", fields.tm_hour, fields.tm_min, fields.tm_sec)
    }

    @Test func aWindowOpeningArmsTheTriggerAndItsEndFinalizesTheEventThenRecdListens() throws {
        let server = try PulseServer()
        try server.tone()  // -15 dBFS, 440 Hz, all along: an event opens as soon as the trigger is armed
        let now = Date().timeIntervalSince1970.rounded(.up)
        let opens = Date(timeIntervalSince1970: now + 5), closes = Date(timeIntervalSince1970: now + 10)
        let later = Date(timeIntervalSince1970: now + 3600 * 5)
        let windows = "[\"\(Self.clock(opens))..\(Self.clock(closes))\", \"\(Self.clock(later))..\(Self.clock(later.addingTimeInterval(60)))\"]"
        let daemon = try Daemon(device: TestDevices.paced(server), config: """
            [recording]
            format = "flac"
            [trigger]
            threshold = -30
            hang = "1s"
            pre_roll = "0.5s"
            [schedule]
            windows = \(windows)
            mode = "trigger"
            outside = "listen"
            name = "window"
            """)
        let client = try daemon.connect()
        let before = try #require(daemon.waitForStatus { $0.schedule != nil && $0.state.name == .listening }, "outside: listening. \(daemon.log)")
        let schedule = try #require(before.schedule)
        #expect(!schedule.active && schedule.nextStart == opens && schedule.nextEnd == closes, "\(schedule)")

        let armed = try #require(daemon.waitForStatus(timeout: 30) { $0.state.name == .recording }, "the window opens. \(daemon.log)")
        #expect(Date() >= opens.addingTimeInterval(-0.05), "not before the window")
        #expect(armed.recording?.trigger?.threshold == -30 && armed.recording?.name == "window")
        #expect(armed.schedule?.active == true && armed.schedule?.currentEnd == closes)
        let finished = try #require(daemon.waitForStatus(timeout: 30) {
            $0.state.name == .listening && $0.lastSegment?.recordingId == armed.recording?.id
        }, "the window closes: the event's file finalized, listening again. \(daemon.log)")
        #expect(Date() >= closes.addingTimeInterval(-0.05))
        let segment = try #require(finished.lastSegment)
        #expect(segment.endReason == .end || segment.endReason == .event, "\(segment)")
        let probe = try FFmpegTools.probe(segment.path)
        let seconds = Double(probe.frames ?? 0) / Double(max(1, probe.sampleRate))
        #expect(probe.codecName == "flac" && seconds > 2 && seconds < 6.5, "\(probe) \(segment)")
        #expect(finished.schedule?.active == false && finished.schedule?.nextStart == later)
        _ = client
    }
}
