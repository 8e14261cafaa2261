import FoundationEssentials
import RecorderModel

/// Home Assistant MQTT discovery messages for a station.
///
/// A station of one source is one device with every entity. A station of several is a device
/// for the station (free space, the clock) and a device per source with the recorder's
/// entities (`via_device`: the station), each with both availabilities (the station's last
/// will and the source's own): a lost microphone's entities show unavailable, the others stay.
///
/// Entities: "Recording" and "Listening" (switches when remote control is allowed, else
/// running binary sensors), "State", "Elapsed" (duration, s), "Started" (timestamp), "Last file", "Level"
/// (when telemetry is on), "Free space" (data size, MiB, on the recordings' filesystem),
/// "Problem" (a problem binary sensor whose attributes carry the error and warnings) and, a
/// diagnostic entity, "Clock synchronized" (whose attributes carry the clock's steps). All
/// share the availability topic.
public struct HomeAssistantDiscovery: Sendable {
    public let configuration: MQTTBridgeConfiguration
    public let version: String
    /// The station's sources, on a station of several; empty for a station of one.
    public let sources: [String]
    var topics: MQTTTopics { MQTTTopics(prefix: configuration.topicPrefix) }

    public init(configuration: MQTTBridgeConfiguration, version: String, sources: [String] = []) {
        self.configuration = configuration
        self.version = version
        self.sources = sources
    }

    /// One device's discovery: its id, device, availability and components.
    struct Device {
        var id: String
        var device: [String: Any]
        var shared: [String: Any]
        var components: [(key: String, config: [String: Any])]
    }

    /// The devices: one for a station of one; the station and each source for several.
    func devices() -> [Device] {
        let id = configuration.objectID
        let qos = Int(configuration.qos)
        guard !sources.isEmpty else {
            return [Device(id: id, device: device, shared: ["avty_t": topics.availability, "qos": qos],
                           components: recorderComponents(id: id, topics: topics) + stationComponents(id: id))]
        }
        return [Device(id: id, device: device, shared: ["avty_t": topics.availability, "qos": qos], components: stationComponents(id: id))]
            + sources.map { source in
                let sourceID = id + "_" + source
                let sourceTopics = topics.source(source)
                let device: [String: Any] = ["ids": [sourceID], "name": configuration.deviceName + " " + source, "mf": "recd",
                                             "mdl": "recd audio source", "sw": version, "via_device": id]
                let availability: [[String: Any]] = [["t": topics.availability], ["t": sourceTopics.availability]]
                return Device(id: sourceID, device: device, shared: ["avty": availability, "avty_mode": "all", "qos": qos],
                              components: recorderComponents(id: sourceID, topics: sourceTopics))
            }
    }

    /// (topic, payload) pairs to publish, retained. Empty when discovery is off.
    public func messages() -> [(topic: String, payload: [String: Any])] {
        switch configuration.discovery {
        case .off:
            return []
        case .device:
            return devices().map { device in
                var payload: [String: Any] = ["dev": device.device, "o": origin,
                                              "cmps": Dictionary(uniqueKeysWithValues: device.components.map { ($0.key, $0.config) })]
                payload.merge(device.shared) { $1 }
                return ("\(configuration.discoveryPrefix)/device/\(device.id)/config", payload)
            }
        case .component:
            return devices().flatMap { device in
                device.components.map { component in
                    var payload = component.config
                    payload.removeValue(forKey: "p")
                    payload["dev"] = device.device
                    payload["o"] = origin
                    payload.merge(device.shared) { $1 }
                    return ("\(configuration.discoveryPrefix)/\(component.config["p"]!)/\(device.id)/\(component.key)/config", payload)
                }
            }
        }
    }

    /// The station's device (every entity's on a station of one).
    public var device: [String: Any] {
        ["ids": [configuration.objectID], "name": configuration.deviceName, "mf": "recd", "mdl": "recd audio recorder",
         "sw": version]
    }

    var origin: [String: Any] { ["name": "recd", "sw": version] }

    /// A switch sending ON/OFF to `command` when remote control is allowed, else a running
    /// binary sensor.
    private func onOff(_ entity: [String: Any], command: String, topics: MQTTTopics) -> [String: Any] {
        var entity = entity
        if configuration.controlAllowed {
            entity.merge(["p": "switch", "cmd_t": topics.command(command), "pl_on": "ON", "pl_off": "OFF"]) { $1 }
        } else {
            entity.merge(["p": "binary_sensor", "dev_cla": "running"]) { $1 }
        }
        return entity
    }

    /// A recorder's entities (a source's), on `topics`, their ids beginning with `id`.
    func recorderComponents(id: String, topics: MQTTTopics) -> [(key: String, config: [String: Any])] {
        let activeStates = "['preparing', 'recording', 'paused', 'stopping']"
        let recording = onOff([
            "name": "Recording", "uniq_id": "\(id)_recording", "stat_t": topics.state,
            "val_tpl": "{{ 'ON' if value in \(activeStates) else 'OFF' }}", "icon": "mdi:record-rec",
        ], command: "switch", topics: topics)
        let listening = onOff([
            "name": "Listening", "uniq_id": "\(id)_listening", "stat_t": topics.listening, "icon": "mdi:ear-hearing",
        ], command: "listen_switch", topics: topics)
        var result: [(String, [String: Any])] = [
            ("recording", recording),
            ("listening", listening),
            ("state", ["p": "sensor", "name": "State", "uniq_id": "\(id)_state", "stat_t": topics.state,
                       "dev_cla": "enum",
                       "options": RecorderState.Name.allCases.map(\.rawValue)]),
            ("elapsed", ["p": "sensor", "name": "Elapsed", "uniq_id": "\(id)_elapsed", "stat_t": topics.time,
                         "dev_cla": "duration", "unit_of_meas": "s", "stat_cla": "measurement",
                         "sug_dsp_prc": 0]),
            ("started", ["p": "sensor", "name": "Started", "uniq_id": "\(id)_started", "stat_t": topics.recording,
                         "dev_cla": "timestamp", "val_tpl": "{{ value_json.startedAt | default(None) }}"]),
            ("last_file", ["p": "sensor", "name": "Last file", "uniq_id": "\(id)_last_file", "stat_t": topics.lastFile,
                           "val_tpl": "{{ value_json.name | default(None) }}", "json_attr_t": topics.lastFile,
                           "icon": "mdi:file-music"]),
            ("problem", ["p": "binary_sensor", "name": "Problem", "uniq_id": "\(id)_problem", "stat_t": topics.problem,
                         "dev_cla": "problem", "val_tpl": "{{ 'ON' if value_json.problem else 'OFF' }}",
                         "json_attr_t": topics.problem]),
            ("sound", ["p": "binary_sensor", "name": "Sound detected", "uniq_id": "\(id)_sound", "stat_t": topics.sound,
                       "dev_cla": "sound", "icon": "mdi:waveform"]),
        ]
        if configuration.telemetryInterval > 0 {
            result.append(("level", ["p": "sensor", "name": "Level", "uniq_id": "\(id)_level", "stat_t": topics.levels,
                                     "unit_of_meas": "dB", "stat_cla": "measurement", "val_tpl": "{{ value_json.peak }}",
                                     "icon": "mdi:waveform", "exp_aft": max(10, Int(configuration.telemetryInterval * 5))]))
        }
        return result
    }

    /// The station's entities: the recordings' disk and the system clock.
    func stationComponents(id: String) -> [(key: String, config: [String: Any])] {
        [
            ("free_space", ["p": "sensor", "name": "Free space", "uniq_id": "\(id)_free_space", "stat_t": topics.storage,
                            "dev_cla": "data_size", "unit_of_meas": "MiB", "stat_cla": "measurement",
                            "val_tpl": "{{ value_json.free }}", "json_attr_t": topics.storage, "icon": "mdi:harddisk"]),
            // A diagnostic entity: about the station, not the recording (Home Assistant shows it
            // apart, under the device's diagnostics).
            ("clock", ["p": "binary_sensor", "name": "Clock synchronized", "uniq_id": "\(id)_clock", "stat_t": topics.clock,
                       "val_tpl": "{{ 'ON' if value_json.synchronized else 'OFF' }}", "json_attr_t": topics.clock,
                       "ent_cat": "diagnostic", "icon": "mdi:clock-check-outline"]),
        ]
    }
}
