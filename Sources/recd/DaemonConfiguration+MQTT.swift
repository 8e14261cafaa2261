import Foundation
import Mosquitto
import RecdHooks
import RecdMQTT

/// `[mqtt]`: the MQTT bridge (off unless `enabled = true`).
struct MQTTSettings: Equatable, Sendable {
    var enabled = false
    var host = "localhost"
    var port = 1883
    /// A broker's Unix socket; replaces host and port when set.
    var socket = ""
    var tlsCAFile = ""
    var username = ""
    var passwordFile = ""
    var clientID = ""
    var topicPrefix = ""
    var qos = 1
    var control = false
    var telemetryInterval = 1.0
    var discovery = MQTTBridgeConfiguration.Discovery.device
    var discoveryPrefix = "homeassistant"
    var deviceName = ""
    var keepAlive = 30
}

/// `[hooks]`: commands run for every finalized file.
struct HookSettings: Equatable, Sendable {
    var onFileClosed: [String] = []
    var timeout = 600.0
    var maxConcurrent = 2
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
        try reader.read("mqtt.telemetry_interval", in: 0...3600, "seconds") { (value: Double) in mqtt.telemetryInterval = value }
        try reader.read("mqtt.discovery") { (value: MQTTBridgeConfiguration.Discovery) in mqtt.discovery = value }
        try reader.read("mqtt.discovery_prefix") { (value: String) in mqtt.discoveryPrefix = value }
        try reader.read("mqtt.device_name") { (value: String) in mqtt.deviceName = value }
        try reader.read("mqtt.keepalive", in: 5...3600, "seconds") { (value: Int) in mqtt.keepAlive = value }

        try reader.read("hooks.on_file_closed") { (value: [String]) throws(ConfigurationError) in
            do throws(HookTemplateError) {
                _ = try HookCommand(name: "on_file_closed", template: value)
            } catch {
                throw reader.invalid("hooks.on_file_closed", error.description)
            }
            hooks.onFileClosed = value
        }
        try reader.read("hooks.timeout", in: 0.1...86400, "seconds") { (value: Double) in hooks.timeout = value }
        try reader.read("hooks.max_concurrent", in: 1...64) { (value: Int) in hooks.maxConcurrent = value }
    }

    /// The bridge's settings with defaults filled in and the password read; nil when disabled.
    func mqttBridgeConfiguration() throws(ConfigurationError) -> MQTTBridgeConfiguration? {
        guard mqtt.enabled else { return nil }
        var password: String?
        if !mqtt.passwordFile.isEmpty {
            guard let text = try? String(contentsOfFile: mqtt.passwordFile, encoding: .utf8) else {
                throw ConfigurationError(file: mqtt.passwordFile, line: nil, key: "mqtt.password_file",
                                         message: "cannot be read: \(String(cString: strerror(errno)))")
            }
            password = text.trimmingCharacters(in: .newlines)
        }
        let hostname = MQTTBridgeConfiguration.hostname
        return MQTTBridgeConfiguration(
            endpoint: mqtt.socket.isEmpty ? .tcp(host: mqtt.host, port: mqtt.port) : .unixSocket(path: mqtt.socket),
            clientID: mqtt.clientID.isEmpty ? "recd-\(hostname)" : mqtt.clientID,
            username: mqtt.username.isEmpty ? nil : mqtt.username, password: password,
            caFile: mqtt.tlsCAFile.isEmpty ? nil : mqtt.tlsCAFile, keepAlive: Int32(mqtt.keepAlive),
            topicPrefix: mqtt.topicPrefix.isEmpty ? "recd/\(hostname)" : mqtt.topicPrefix, qos: Int32(mqtt.qos),
            controlAllowed: mqtt.control, telemetryInterval: mqtt.telemetryInterval, discovery: mqtt.discovery,
            discoveryPrefix: mqtt.discoveryPrefix, deviceName: mqtt.deviceName.isEmpty ? "recd \(hostname)" : mqtt.deviceName)
    }

    /// The hook commands; empty when none is configured.
    var hookCommands: [HookCommand] {
        guard !hooks.onFileClosed.isEmpty else { return [] }
        return [try! HookCommand(name: "on_file_closed", template: hooks.onFileClosed)]  // validated when read
    }
}
