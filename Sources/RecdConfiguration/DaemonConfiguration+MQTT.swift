import FoundationEssentials
import Glibc
import RecdHooks

/// `[mqtt]`: the MQTT bridge (off unless `enabled = true`).
public struct MQTTSettings: Equatable, Sendable {
    public var enabled = false
    public var host = "localhost"
    public var port = 1883
    /// A broker's Unix socket; replaces host and port when set.
    public var socket = ""
    public var tlsCAFile = ""
    public var username = ""
    public var passwordFile = ""
    public var clientID = ""
    public var topicPrefix = ""
    public var qos = 1
    public var control = false
    public var telemetryInterval = 1.0
    public var discovery = MQTTDiscoveryForm.device
    public var discoveryPrefix = "homeassistant"
    public var deviceName = ""
    public var keepAlive = 30
}

/// `[mqtt] discovery`: how Home Assistant is told about recd (RecdMQTT's `Discovery`).
public enum MQTTDiscoveryForm: String, Equatable, Sendable, CaseIterable {
    case device, component, off
}

/// `[hooks]`: commands run for every finalized file.
public struct HookSettings: Equatable, Sendable {
    public var onFileClosed: [String] = []
    public var onFileRedated: [String] = []
    public var timeout = 600.0
    public var maxConcurrent = 2
}

extension DaemonConfiguration {
    mutating func applyMQTTAndHooks(_ reader: KeyReader) throws(ConfigurationError) {
        try reader.read("mqtt.enabled") { (value: Bool) in mqtt.enabled = value }
        try reader.read("mqtt.host") { (value: String) in mqtt.host = value }
        try reader.read("mqtt.port", in: 1...65535) { (value: Int) in mqtt.port = value }
        try reader.read("mqtt.socket") { (value: String) throws(ConfigurationError) in
            guard value.isEmpty || value.hasPrefix("/") else { throw reader.invalid("mqtt.socket", "must be an absolute path") }
            mqtt.socket = value
        }
        try reader.read("mqtt.tls_ca_file") { (value: String) in mqtt.tlsCAFile = value }
        try reader.read("mqtt.username") { (value: String) in mqtt.username = value }
        try reader.read("mqtt.password_file") { (value: String) throws(ConfigurationError) in
            guard value.isEmpty || value.hasPrefix("/") else { throw reader.invalid("mqtt.password_file", "must be an absolute path") }
            mqtt.passwordFile = value
        }
        try reader.read("mqtt.client_id") { (value: String) in mqtt.clientID = value }
        try reader.read("mqtt.topic_prefix") { (value: String) throws(ConfigurationError) in
            guard !value.hasSuffix("/"), !value.contains("+"), !value.contains("#") else {
                throw reader.invalid("mqtt.topic_prefix", "must not end in / or contain + or #")
            }
            mqtt.topicPrefix = value
        }
        try reader.read("mqtt.qos", in: 0...2) { (value: Int) in mqtt.qos = value }
        try reader.read("mqtt.control") { (value: Bool) in mqtt.control = value }
        try reader.readDuration("mqtt.telemetry_interval", in: 0...3600) { (value: Double) in mqtt.telemetryInterval = value }
        try reader.read("mqtt.discovery") { (value: MQTTDiscoveryForm) in mqtt.discovery = value }
        try reader.read("mqtt.discovery_prefix") { (value: String) in mqtt.discoveryPrefix = value }
        try reader.read("mqtt.device_name") { (value: String) in mqtt.deviceName = value }
        try reader.read("mqtt.keepalive", in: 5...3600, "seconds") { (value: Int) in mqtt.keepAlive = value }

        for (key, keyPath) in [(HookCommand.onFileClosed, \HookSettings.onFileClosed), (HookCommand.onFileRedated, \HookSettings.onFileRedated)] {
            try reader.read("hooks." + key) { (value: [String]) throws(ConfigurationError) in
                do throws(HookTemplateError) {
                    _ = try HookCommand(name: key, template: value)
                } catch {
                    throw reader.invalid("hooks." + key, error.description)
                }
                hooks[keyPath: keyPath] = value
            }
        }
        try reader.readDuration("hooks.timeout", in: 0.1...86400) { (value: Double) in hooks.timeout = value }
        try reader.read("hooks.max_concurrent", in: 1...64) { (value: Int) in hooks.maxConcurrent = value }
    }
}
