import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Sndfile
import Testing

/// recd's MQTT bridge against Debian's mosquitto, with mosquitto_sub / mosquitto_pub as the
/// independent clients.
@Suite("MQTT bridge")
struct MQTTTests {
    let inputs = TemporaryDirectory()
    static let prefix = "recd/test"
    static let objectID = "recd-test"

    static func config(port: Int, control: Bool = false, extra: String = "") -> String {
        """
        [mqtt]
        enabled = true
        host = "127.0.0.1"
        port = \(port)
        client_id = "\(objectID)"
        topic_prefix = "\(prefix)"
        control = \(control)
        telemetry_interval = 0.25
        \(extra)
        """
    }

    /// A watcher that has seen recd come online (so it is subscribed and recd connected).
    func watch(_ broker: MosquittoBroker, timeout: Double = 30) throws -> MQTTWatcher {
        let watcher = try MQTTWatcher(port: broker.port, topics: ["\(Self.prefix)/#", "homeassistant/#"])
        guard watcher.first("\(Self.prefix)/availability", timeout: timeout, where: { $0.payload == "online" }) != nil else {
            throw TestFailure("recd never came online: \(watcher.messages)")
        }
        return watcher
    }

    @Test func deviceDiscoveryCarriesWhatHomeAssistantRequires() throws {
        let broker = try MosquittoBroker()
        let input = writeCounterInput(inputs, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: Self.config(port: broker.port))
        let watcher = try watch(broker)

        let topic = "homeassistant/device/\(Self.objectID)/config"
        let message = try #require(watcher.first(topic))
        // Retained: a subscriber that comes later (Home Assistant starting) gets it too.
        let later = try MQTTWatcher(port: broker.port, topics: [topic])
        #expect(later.first(topic)?.retained == true)
        let config = try #require(message.json)
        let device = try #require(config["dev"] as? [String: Any])
        #expect((device["ids"] as? [String])?.isEmpty == false)
        #expect(device["name"] as? String != nil)
        let origin = try #require(config["o"] as? [String: Any])
        #expect(origin["name"] as? String == "recd")
        #expect(config["avty_t"] as? String == "\(Self.prefix)/availability")
        let components = try #require(config["cmps"] as? [String: [String: Any]])
        for (key, component) in components {
            #expect(component["p"] as? String != nil, "\(key) has no platform")
            #expect(component["uniq_id"] as? String != nil, "\(key) has no unique id")
            #expect((component["stat_t"] as? String)?.hasPrefix(Self.prefix + "/") == true, "\(key) has no state topic")
        }
        #expect(Set(components.values.compactMap { $0["uniq_id"] as? String }).count == components.count)
        #expect(components["elapsed"]?["dev_cla"] as? String == "duration")
        #expect(components["elapsed"]?["unit_of_meas"] as? String == "s")
        #expect(components["started"]?["dev_cla"] as? String == "timestamp")
        #expect(components["problem"]?["p"] as? String == "binary_sensor")
        #expect(components["problem"]?["dev_cla"] as? String == "problem")
        #expect(components["state"]?["p"] as? String == "sensor")
        #expect(components["last_file"]?["p"] as? String == "sensor")
        #expect(components["free_space"]?["dev_cla"] as? String == "data_size")
        #expect(components["free_space"]?["unit_of_meas"] as? String == "MiB")
        #expect(components["free_space"]?["stat_t"] as? String == "\(Self.prefix)/storage")
        // Without remote control, "Recording" can only be watched.
        #expect(components["recording"]?["p"] as? String == "binary_sensor")
        #expect(components["recording"]?["cmd_t"] == nil)

        // The state topics the entities read are there, retained.
        #expect(watcher.first("\(Self.prefix)/state")?.payload == "idle")
        #expect(watcher.first("\(Self.prefix)/problem")?.json?["problem"] as? Bool == false)
        let storage = watcher.first("\(Self.prefix)/storage")
        #expect((storage?.json?["free"] as? Int ?? 0) > 0 && (storage?.json?["total"] as? Int ?? 0) > 0, "\(storage?.payload ?? "")")

        // Home Assistant restarting (its birth message) gets everything announced again.
        let seen = watcher.messages.count
        try mqttPublish(port: broker.port, topic: "homeassistant/status", payload: "online")
        let again = try #require(watcher.first(topic, after: seen))
        #expect(!again.retained)
        #expect(again.json?["cmps"] != nil)
        #expect(daemon.terminate() == 0)
        // A clean exit says offline itself.
        #expect(watcher.first("\(Self.prefix)/availability", after: seen, where: { $0.payload == "offline" }) != nil)
    }

    @Test func perComponentDiscoveryForOlderHomeAssistant() throws {
        let broker = try MosquittoBroker()
        let input = writeCounterInput(inputs, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path),
                                config: Self.config(port: broker.port, control: true, extra: "discovery = \"component\""))
        let watcher = try watch(broker)
        let expected = ["switch/\(Self.objectID)/recording", "sensor/\(Self.objectID)/state", "sensor/\(Self.objectID)/elapsed",
                        "sensor/\(Self.objectID)/started", "sensor/\(Self.objectID)/last_file",
                        "binary_sensor/\(Self.objectID)/problem"]
        for path in expected {
            let message = try #require(watcher.first("homeassistant/\(path)/config"), "no \(path)")
            let config = try #require(message.json)
            #expect(config["uniq_id"] as? String != nil)
            #expect(config["dev"] as? [String: Any] != nil)
            #expect(config["o"] as? [String: Any] != nil)
            #expect(config["avty_t"] as? String == "\(Self.prefix)/availability")
            #expect(config["p"] == nil)
        }
        let recordingSwitch = watcher.first("homeassistant/switch/\(Self.objectID)/recording/config")?.json
        #expect(recordingSwitch?["cmd_t"] as? String == "\(Self.prefix)/command/switch")
        #expect(daemon.terminate() == 0)
        // Nothing was announced the other way: the offline of a clean exit is the daemon's last
        // message, so every message it sent before it has reached the watcher by then.
        #expect(watcher.first("\(Self.prefix)/availability", where: { $0.payload == "offline" }) != nil)
        #expect(watcher.messages.first { $0.topic.hasPrefix("homeassistant/device/") } == nil)
    }

    @Test func stateAndElapsedFollowAPacedRecordingStartedAndStoppedOverMQTT() throws {
        let broker = try MosquittoBroker()
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server), config: Self.config(port: broker.port, control: true))
        let watcher = try watch(broker)

        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/start",
                        payload: #"{"name": "over-mqtt", "format": "flac", "id": "a1"}"#)
        let started = try #require(watcher.first("\(Self.prefix)/reply", where: { $0.json?["command"] as? String == "start" }))
        #expect(started.json?["ok"] as? Bool == true, "\(started)")
        #expect(started.json?["id"] as? String == "a1")
        #expect((started.json?["recording"] as? [String: Any])?["name"] as? String == "over-mqtt")
        #expect(watcher.first("\(Self.prefix)/state", where: { $0.payload == "recording" }) != nil)
        let recording = try #require(watcher.first("\(Self.prefix)/recording", where: { $0.json?["startedAt"] != nil }))
        #expect(recording.json?["name"] as? String == "over-mqtt")

        // Elapsed time climbs while the paced device delivers (telemetry every 0.25 s). It is
        // published to a tenth of a second: "1.1" means at least 1.05 s, so more than 48 000 frames.
        var times: [Double] = []
        _ = waitUntil(timeout: 30) {
            times = watcher.messages.filter { $0.topic == "\(Self.prefix)/time" }.compactMap { Double($0.payload) }.filter { $0 > 0 }
            return times.count >= 3 && times.last! >= 1.1
        }
        #expect(times.count >= 3 && (times.last ?? 0) >= 1.1, "time updates: \(times)")
        #expect(times == times.sorted())
        let levels = try #require(watcher.first("\(Self.prefix)/levels"))
        #expect(levels.json?["peak"] as? Double != nil)
        #expect((levels.json?["channels"] as? [Any])?.count == 2)

        let seen = watcher.messages.count
        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/stop", payload: "")
        let stopped = try #require(watcher.first("\(Self.prefix)/reply", after: seen, where: { $0.json?["command"] as? String == "stop" }))
        #expect(stopped.json?["ok"] as? Bool == true, "\(stopped)")
        let frames = try #require((stopped.json?["recording"] as? [String: Any])?["frames"] as? Int)
        #expect(frames >= 48000)
        #expect(watcher.first("\(Self.prefix)/state", after: seen, where: { $0.payload == "finished" }) != nil)
        let lastFile = try #require(watcher.first("\(Self.prefix)/last_file", after: seen))
        #expect(lastFile.json?["name"] as? String == "over-mqtt")
        #expect(lastFile.json?["frames"] as? Int == frames)
        let file = try SoundFileReader(path: daemon.recordings + "/over-mqtt.flac")
        #expect(Int(file.info.frames) == frames)

        // A command the recorder refuses is answered with the recorder's reason.
        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/pause", payload: "")
        let refused = try #require(watcher.first("\(Self.prefix)/reply", after: seen, where: { $0.json?["command"] as? String == "pause" }))
        #expect(refused.json?["ok"] as? Bool == false)
        #expect((refused.json?["error"] as? [String: Any])?["code"] as? String == "invalidState")
        #expect(daemon.terminate() == 0)
    }

    /// A station of two sources (issue 53): each source's topics under `<prefix>/<source>/`,
    /// its commands on its own topics, an availability of its own that goes `offline` while its
    /// microphone is away (the other's stays `online`), and in Home Assistant a station device
    /// and a device per source (`via_device`) whose entities need both availabilities.
    @Test func aStationOfTwoSourcesHasTopicsAndAHomeAssistantDevicePerSource() throws {
        let broker = try MosquittoBroker()
        let eastServer = try PulseServer(), westServer = try PulseServer()
        try eastServer.tone()
        try westServer.tone()
        let daemon = try Daemon(device: nil, config: Self.config(port: broker.port, control: true) + """

            \(sourceTables(["east": TestDevices.paced(eastServer), "west": TestDevices.paced(westServer)]))
            """)
        let watcher = try watch(broker)
        let station = try #require(watcher.first("homeassistant/device/\(Self.objectID)/config")?.json)
        #expect(Set((station["cmps"] as? [String: Any] ?? [:]).keys) == ["free_space", "clock"])
        #expect(station["avty_t"] as? String == "\(Self.prefix)/availability")
        for source in ["east", "west"] {
            let config = try #require(watcher.first("homeassistant/device/\(Self.objectID)_\(source)/config")?.json, "\(source)")
            let device = try #require(config["dev"] as? [String: Any])
            #expect(device["via_device"] as? String == Self.objectID && device["ids"] as? [String] == ["\(Self.objectID)_\(source)"])
            let availability = (config["avty"] as? [[String: Any]])?.compactMap { $0["t"] as? String }
            #expect(availability == ["\(Self.prefix)/availability", "\(Self.prefix)/\(source)/availability"] && config["avty_mode"] as? String == "all")
            let components = try #require(config["cmps"] as? [String: [String: Any]])
            #expect(components["recording"]?["cmd_t"] as? String == "\(Self.prefix)/\(source)/command/switch")
            #expect(components["state"]?["stat_t"] as? String == "\(Self.prefix)/\(source)/state" && components["free_space"] == nil)
            #expect(watcher.first("\(Self.prefix)/\(source)/availability", where: { $0.payload == "online" }) != nil, "\(source)")
        }
        // West's command starts west alone; a payload naming another source is refused.
        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/west/command/start", payload: #"{"name": "w", "format": "wav"}"#)
        let started = try #require(watcher.first("\(Self.prefix)/west/reply", where: { $0.json?["command"] as? String == "start" }))
        #expect(started.json?["ok"] as? Bool == true, "\(started)")
        #expect(watcher.first("\(Self.prefix)/west/state", where: { $0.payload == "recording" }) != nil)
        #expect(watcher.first("\(Self.prefix)/east/state", timeout: 1, where: { $0.payload == "recording" }) == nil)
        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/east/command/stop", payload: #"{"source": "west"}"#)
        let refused = try #require(watcher.first("\(Self.prefix)/east/reply", where: { $0.json?["command"] as? String == "stop" }))
        #expect(refused.json?["ok"] as? Bool == false && (refused.json?["error"] as? [String: Any])?["code"] as? String == "invalidPayload", "\(refused)")
        // West's microphone goes: west's availability is offline, east's and the station's stay online.
        let seen = watcher.messages.count
        westServer.kill()
        #expect(watcher.first("\(Self.prefix)/west/availability", after: seen, where: { $0.payload == "offline" }) != nil)
        #expect(!watcher.messages.dropFirst(seen).contains { ($0.topic == "\(Self.prefix)/east/availability" || $0.topic == "\(Self.prefix)/availability") && $0.payload == "offline" })
        // Its file, closed by the loss, is announced as west's.
        let lastFile = try #require(watcher.first("\(Self.prefix)/west/last_file", where: { $0.json?["source"] as? String == "west" }))
        #expect(lastFile.json?["name"] as? String == "w")
        try westServer.restart()
        #expect(watcher.first("\(Self.prefix)/west/availability", after: seen, where: { $0.payload == "online" }) != nil)
        #expect(daemon.terminate() == 0)
    }

    @Test func splitOverMQTTContinuesInANewFileWithoutLosingAFrame() throws {
        let broker = try MosquittoBroker()
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: Self.config(port: broker.port, control: true))
        let watcher = try watch(broker)
        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/start", payload: #"{"name": "halves", "format": "wav"}"#)
        #expect(watcher.first("\(Self.prefix)/reply", where: { $0.json?["command"] as? String == "start" })?.json?["ok"] as? Bool == true)
        let client = try daemon.connect()
        #expect(waitUntil(timeout: 30) { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 0.5 })
        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/split", payload: "")
        let split = try #require(watcher.first("\(Self.prefix)/reply", where: { $0.json?["command"] as? String == "split" }))
        #expect(split.json?["ok"] as? Bool == true, "\(split)")
        #expect(waitUntil(timeout: 30) { ((try? client.call(.status) as StatusResult)?.currentTime ?? 0) > 1.0 })
        let stopped: Recording = try client.call(.stop)
        let first = try SoundFileReader(path: daemon.recordings + "/halves.wav")
        let second = try SoundFileReader(path: daemon.recordings + "/halves-2.wav")
        #expect(first.info.frames > 0 && second.info.frames > 0)
        #expect(first.info.frames + second.info.frames == stopped.frames, "the two files hold every frame")
        #expect(daemon.terminate() == 0)
    }

    /// MQTT's start takes every member the socket's does (segments among them), decoded and
    /// range-checked the same way: a number out of range is refused by name and recd goes on.
    @Test func aSegmentedM4ARecordingStartsOverMQTTAndAbsurdNumbersAreRefused() throws {
        let broker = try MosquittoBroker()
        let input = writeCounterInput(inputs, seconds: 5)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: Self.config(port: broker.port, control: true))
        let watcher = try watch(broker)
        for (id, payload, member) in [("d", #"{"id": "d", "duration": 1e30}"#, "duration"),
                                      ("r", #"{"id": "r", "sampleRate": 9223372036854775807}"#, "sampleRate"),
                                      ("s", #"{"id": "s", "segmentLength": -3}"#, "segmentLength")] {
            try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/start", payload: payload)
            let reply = try #require(watcher.first("\(Self.prefix)/reply", where: { $0.json?["id"] as? String == id }))
            #expect(reply.json?["ok"] as? Bool == false)
            let error = reply.json?["error"] as? [String: Any]
            #expect(error?["code"] as? String == "invalidPayload", "\(reply)")
            #expect((error?["message"] as? String)?.hasPrefix("'\(member)' must be") == true, "\(reply)")
        }
        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/start",
                        payload: #"{"id": "ok", "name": "cuts", "format": "m4a", "sampleRate": 48000, "channels": 2, "segmentLength": 1, "duration": 2.5}"#)
        let reply = try #require(watcher.first("\(Self.prefix)/reply", where: { $0.json?["id"] as? String == "ok" }))
        #expect(reply.json?["ok"] as? Bool == true, "\(reply)")
        #expect(daemon.waitForStatus(timeout: 30) { $0.state.name == .finished } != nil)
        let list: RecordingsListResult = try daemon.connect().call(.recordingsList)
        let files = list.recordings.filter { $0.sessionName == "cuts" }
        #expect(files.count == 3, "\(list.recordings.map(\.file))")
        #expect(files.allSatisfy { $0.format == .aac && $0.file.hasSuffix(".m4a") })
        #expect(files.map(\.frames).reduce(0, +) == 120_000)
        #expect(daemon.terminate() == 0)
    }

    /// Every method of the socket protocol but subscriptions is a command, read by the same
    /// parser and run by the same table (control on; with it off every command is refused).
    @Test func socketMethodsAreCommandsReadAndRunAsOnTheSocket() throws {
        let broker = try MosquittoBroker()
        let input = writeCounterInput(inputs, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: Self.config(port: broker.port, control: true))
        let watcher = try watch(broker)
        func reply(_ command: String, _ payload: String) throws -> [String: Any] {
            try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/\(command)", payload: payload)
            return try #require(watcher.first("\(Self.prefix)/reply", where: { $0.json?["id"] as? String == command })?.json)
        }
        let status = try reply("status", #"{"id": "status"}"#)
        #expect(status["ok"] as? Bool == true, "\(status)")
        #expect((status["result"] as? [String: Any])?["recordingsDirectory"] as? String == daemon.recordings)
        let list = try reply("recordings.list", #"{"id": "recordings.list"}"#)
        #expect((list["result"] as? [String: Any])?["recordings"] as? [Any] != nil, "\(list)")
        let cancel = try reply("cancel", #"{"id": "cancel"}"#)
        #expect((cancel["error"] as? [String: Any])?["code"] as? String == "invalidState", "nothing to cancel: \(cancel)")
        let subscribe = try reply("subscribe", #"{"id": "subscribe"}"#)
        #expect((subscribe["error"] as? [String: Any])?["code"] as? String == "unknownCommand", "\(subscribe)")
        let unknownMember = try reply("recordings.info", #"{"id": "recordings.info", "nme": "x"}"#)
        let error = unknownMember["error"] as? [String: Any]
        #expect(error?["code"] as? String == "invalidPayload")
        #expect((error?["message"] as? String)?.hasPrefix("unknown parameter 'nme' for 'recordings.info'") == true, "\(unknownMember)")
        #expect(daemon.terminate() == 0)
    }

    @Test func commandsAreRefusedWhenRemoteControlIsOff() throws {
        let broker = try MosquittoBroker()
        let input = writeCounterInput(inputs, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: Self.config(port: broker.port))
        let watcher = try watch(broker)
        for command in ["start", "switch", "stop", "status", "recordings.list"] {
            try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/\(command)",
                            payload: command == "switch" ? "ON" : #"{"name": "nope"}"#)
            let reply = try #require(watcher.first("\(Self.prefix)/reply", where: { $0.json?["command"] as? String == command }))
            #expect(reply.json?["ok"] as? Bool == false)
            #expect((reply.json?["error"] as? [String: Any])?["code"] as? String == "notAllowed")
        }
        let status: StatusResult = try daemon.connect().call(.status)
        #expect(status.state == .idle)
        #expect(!FileManager.default.fileExists(atPath: daemon.recordings + "/nope.wav"))
        #expect(watcher.messages.filter { $0.topic == "\(Self.prefix)/state" }.map(\.payload) == ["idle"])
        #expect(daemon.terminate() == 0)
    }

    @Test func shutdownPublishesTheFinishedRecordingBeforeGoingOffline() throws {
        let broker = try MosquittoBroker()
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server), config: Self.config(port: broker.port, control: true))
        let watcher = try watch(broker)
        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/start", payload: #"{"name": "at-shutdown"}"#)
        #expect(watcher.first("\(Self.prefix)/state", where: { $0.payload == "recording" }) != nil)
        #expect(daemon.terminate() == 0)
        #expect(watcher.first("\(Self.prefix)/availability", where: { $0.payload == "offline" }) != nil)
        let messages = watcher.messages
        let finished = messages.firstIndex { $0.topic == "\(Self.prefix)/state" && $0.payload == "finished" }
        let lastFile = messages.firstIndex { $0.topic == "\(Self.prefix)/last_file" && $0.payload.contains("at-shutdown") }
        let offline = messages.firstIndex { $0.topic == "\(Self.prefix)/availability" && $0.payload == "offline" }
        #expect(finished != nil && lastFile != nil && offline != nil, "\(messages)")
        if let finished, let lastFile, let offline {
            #expect(finished < offline && lastFile < offline)
        }
    }

    @Test func brokerSendsTheLastWillWhenRecdIsKilled() throws {
        let broker = try MosquittoBroker()
        let input = writeCounterInput(inputs, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: Self.config(port: broker.port))
        let watcher = try watch(broker)
        let seen = watcher.messages.count
        daemon.terminate(SIGKILL)
        let will = try #require(watcher.first("\(Self.prefix)/availability", after: seen, where: { $0.payload == "offline" }))
        #expect(!will.retained)
        // Retained: whoever subscribes later learns recd is gone.
        let later = try MQTTWatcher(port: broker.port, topics: ["\(Self.prefix)/availability"])
        #expect(later.first("\(Self.prefix)/availability")?.payload == "offline")
    }

    @Test func recordingGoesOnWhileTheBrokerRestartsAndEverythingIsPublishedAgain() throws {
        let broker = try MosquittoBroker()
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server), config: Self.config(port: broker.port, control: true))
        var watcher = try watch(broker)
        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/start", payload: #"{"name": "through-outage"}"#)
        #expect(watcher.first("\(Self.prefix)/state", where: { $0.payload == "recording" }) != nil)

        watcher = try MQTTWatcher(port: broker.port, topics: [])  // release the old subscriber before the broker goes
        broker.stop()
        #expect(waitUntil(timeout: 20) { daemon.log.contains("MQTT broker unreachable") })
        // The recording is unaffected: still recording, time still advancing.
        let client = try daemon.connect()
        let before: StatusResult = try client.call(.status)
        #expect(before.state.name == .recording)
        #expect(waitUntil(timeout: 20) { ((try? client.call(.status, as: StatusResult.self))?.currentTime ?? 0) > before.currentTime + 0.5 })

        try broker.restart()
        // recd's next attempt can be up to its longest back-off (30 s) away.
        watcher = try watch(broker, timeout: 60)
        // Nothing survived the broker (no persistence): all of this comes from recd again.
        #expect(watcher.first("\(Self.prefix)/state")?.payload == "recording")
        #expect(watcher.first("\(Self.prefix)/recording")?.json?["name"] as? String == "through-outage")
        #expect(watcher.first("homeassistant/device/\(Self.objectID)/config")?.json?["cmps"] != nil)
        #expect(watcher.first("\(Self.prefix)/time", where: { (Double($0.payload) ?? 0) > before.currentTime }) != nil)

        try mqttPublish(port: broker.port, topic: "\(Self.prefix)/command/stop", payload: "")
        let stopped = try #require(watcher.first("\(Self.prefix)/reply", where: { $0.json?["command"] as? String == "stop" }))
        #expect(stopped.json?["ok"] as? Bool == true)
        let frames = try #require((stopped.json?["recording"] as? [String: Any])?["frames"] as? Int)
        let file = try SoundFileReader(path: daemon.recordings + "/through-outage.wav")
        #expect(Int(file.info.frames) == frames)
        #expect(Double(frames) / 48000 > before.currentTime + 0.5)
        // One line for the outage, however many reconnection attempts it took.
        #expect(daemon.log.components(separatedBy: "MQTT broker unreachable").count == 2, "\(daemon.log)")
        #expect(daemon.log.contains("MQTT broker reachable again"))
        #expect(daemon.terminate() == 0)
    }
}

/// The documented setup: recd logs in with a password file, the broker's ACL decides who controls.
@Suite("MQTT bridge with a broker ACL")
struct MQTTAccessTests {
    @Test func theBrokersACLDecidesWhoMayControlRecd() throws {
        let files = TemporaryDirectory()
        // doc/mqtt.md's ACL, for prefix recd/test.
        let acl = """
        user recd
        topic write recd/test/#
        topic read recd/test/command/#
        topic write homeassistant/#
        topic read homeassistant/status

        user homeassistant
        topic read recd/#
        topic write recd/+/command/#
        topic readwrite homeassistant/#

        user dashboard
        topic read recd/#

        """
        try acl.write(toFile: files.file("acl"), atomically: true, encoding: .utf8)
        #expect(FileManager.default.createFile(atPath: files.file("passwords"), contents: Data()))
        for (user, password) in [("recd", "recd-secret"), ("homeassistant", "ha-secret"), ("dashboard", "dash-secret")] {
            #expect(try run("/usr/bin/mosquitto_passwd", ["-b", files.file("passwords"), user, password]).status == 0)
        }
        chmod(files.file("passwords"), 0o644)  // the broker drops root for user mosquitto
        try "recd-secret\n".write(toFile: files.file("recd-password"), atomically: true, encoding: .utf8)

        let broker = try MosquittoBroker(settings: "allow_anonymous false\npassword_file \(files.file("passwords"))\nacl_file \(files.file("acl"))")
        let inputs = TemporaryDirectory()
        let input = writeCounterInput(inputs, seconds: 4)
        let config = MQTTTests.config(port: broker.port, control: true,
                                      extra: "username = \"recd\"\npassword_file = \"\(files.file("recd-password"))\"")
        let daemon = try Daemon(device: TestDevices.file(input.path), config: config)
        let homeAssistant = ("homeassistant", "ha-secret")
        let watcher = try MQTTWatcher(port: broker.port, topics: ["recd/test/#", "homeassistant/#"], login: homeAssistant)
        #expect(watcher.first("recd/test/availability", where: { $0.payload == "online" }) != nil, "\(daemon.log)")
        #expect(watcher.first("homeassistant/device/\(MQTTTests.objectID)/config") != nil)

        // The dashboard may read but its command never reaches recd; Home Assistant's does.
        try mqttPublish(port: broker.port, topic: "recd/test/command/start", payload: #"{"name": "from-dashboard", "id": "d"}"#,
                        login: ("dashboard", "dash-secret"))
        try mqttPublish(port: broker.port, topic: "recd/test/command/start", payload: #"{"name": "from-ha", "duration": 1, "id": "h"}"#,
                        login: homeAssistant)
        let reply = try #require(watcher.first("recd/test/reply"))
        #expect(reply.json?["id"] as? String == "h")
        #expect(reply.json?["ok"] as? Bool == true)
        #expect(watcher.first("recd/test/last_file", where: { $0.json?["name"] as? String == "from-ha" }) != nil)
        #expect(!watcher.messages.contains { $0.payload.contains("from-dashboard") })
        #expect(!FileManager.default.fileExists(atPath: daemon.recordings + "/from-dashboard.wav"))
        #expect(daemon.terminate() == 0)
    }
}

/// The other ways to reach a broker: TLS with a CA file, and a Unix socket.
@Suite("MQTT bridge transports")
struct MQTTTransportTests {
    let inputs = TemporaryDirectory()

    /// A CA and a server certificate for localhost / 127.0.0.1, made with openssl.
    func makeCertificates(in directory: TemporaryDirectory) throws {
        let steps: [[String]] = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=recd test CA"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"],
            ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem",
             "-days", "2", "-extfile", "san.cnf"],
        ]
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\n".write(toFile: directory.file("san.cnf"), atomically: true, encoding: .utf8)
        for step in steps {
            let result = try run("/bin/sh", ["-c", "cd \"$0\" && exec openssl \"$@\"", directory.path] + step)
            guard result.status == 0 else { throw TestFailure("openssl \(step[0]) failed: \(result.stderr)") }
        }
        // The broker drops root for user mosquitto.
        for file in ["ca.pem", "server.pem", "server.key"] { chmod(directory.file(file), 0o644) }
    }

    @Test func connectsOverTLSTrustingTheConfiguredCA() throws {
        let certificates = TemporaryDirectory()
        try makeCertificates(in: certificates)
        let broker = try MosquittoBroker(settings: """
            allow_anonymous true
            cafile \(certificates.file("ca.pem"))
            certfile \(certificates.file("server.pem"))
            keyfile \(certificates.file("server.key"))
            """)
        let input = writeCounterInput(inputs, seconds: 2)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: MQTTTests.config(
            port: broker.port, extra: "tls_ca_file = \"\(certificates.file("ca.pem"))\""))
        let watcher = try MQTTWatcher(port: broker.port, topics: ["recd/test/#"], options: ["--cafile", certificates.file("ca.pem")])
        #expect(watcher.first("recd/test/availability", where: { $0.payload == "online" }) != nil, "\(daemon.log)")
        #expect(watcher.first("recd/test/state")?.payload == "idle")
        #expect(daemon.terminate() == 0)
    }

    @Test func aBrokerThatRefusesTheCertificateCostsOneLogLineAndNothingElse() throws {
        let certificates = TemporaryDirectory()
        try makeCertificates(in: certificates)
        let broker = try MosquittoBroker(settings: """
            allow_anonymous true
            cafile \(certificates.file("ca.pem"))
            certfile \(certificates.file("server.pem"))
            keyfile \(certificates.file("server.key"))
            """)
        // Trusting only the system's CAs, recd cannot verify this broker.
        let input = writeCounterInput(inputs, seconds: 4)
        let daemon = try Daemon(device: TestDevices.file(input.path), config: MQTTTests.config(
            port: broker.port, extra: "tls_ca_file = \"/etc/ssl/certs/ca-certificates.crt\""))
        #expect(waitUntil(timeout: 20) { daemon.log.contains("MQTT broker unreachable") }, "\(daemon.log)")
        // Recording is unaffected.
        let client = try daemon.connect()
        let _: Recording = try client.call(.start, StartParams(name: "no-broker", duration: 1))
        #expect(waitUntil(timeout: 20) { (try? client.call(.status, as: StatusResult.self))?.state.name == .finished })
        #expect(try SoundFileReader(path: daemon.recordings + "/no-broker.wav").info.frames == 48000)
        #expect(daemon.log.components(separatedBy: "MQTT broker unreachable").count == 2, "\(daemon.log)")
        #expect(daemon.terminate() == 0)
    }

    @Test func connectsThroughTheBrokersUnixSocket() throws {
        let sockets = TemporaryDirectory()
        chmod(sockets.path, 0o777)  // the broker binds as user mosquitto
        let path = sockets.file("mosquitto.sock")
        let broker = try MosquittoBroker(settings: "allow_anonymous true\nlistener 0 \(path)")
        let input = writeCounterInput(inputs, seconds: 2)
        let config = """
            [mqtt]
            enabled = true
            socket = "\(path)"
            client_id = "recd-unix"
            topic_prefix = "recd/unix"
            """
        let daemon = try Daemon(device: TestDevices.file(input.path), config: config)
        let watcher = try MQTTWatcher(port: broker.port, topics: ["recd/unix/#"])
        #expect(watcher.first("recd/unix/availability", where: { $0.payload == "online" }) != nil, "\(daemon.log)")
        #expect(daemon.log.contains("mqtt.broker=unix:\(path)"))
        #expect(daemon.terminate() == 0)
    }
}
