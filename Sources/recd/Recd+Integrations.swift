import ArgumentParser
import FoundationEssentials
import Logging
import Mosquitto
import RecdCommands
import RecdConfiguration
import RecdHooks
import RecdMetrics
import RecdMQTT
import RecorderCore
import ServiceLifecycle
import SystemPackage

extension Recd {
    /// The file hooks and the MQTT bridge, as configured. Returns the bridge's service (if
    /// enabled) and the subscriptions that feed every source's finalized files to the hooks
    /// (if any).
    func makeIntegrations(_ configuration: DaemonConfiguration, station: Station, blocking: BlockingCalls,
                          metrics: RecorderMetrics) throws
        -> ([ServiceGroupConfiguration.ServiceConfiguration], [ObservationToken]) {
        var hooks: HookRunner?
        var hookToken: [ObservationToken] = []
        if !configuration.hookCommands.isEmpty {
            let runner = HookRunner(commands: configuration.hookCommands, recordingsDirectory: configuration.recordingsDirectory,
                                    timeout: configuration.hooks.timeout, maxConcurrent: configuration.hooks.maxConcurrent,
                                    logger: Logger(label: "recd.hooks"))
            hookToken = station.sources.flatMap { source in
                [observeFinalizedFiles(of: source.recorder) { runner.fileFinalized($0) },
                 observeRedatedFiles(of: source.recorder) { file, _ in runner.fileRedated(file) }]
            }
            hooks = runner
            metrics.observe(hooks: runner)
        }
        let bridgeConfiguration: MQTTBridgeConfiguration?
        do {
            bridgeConfiguration = try configuration.mqttBridgeConfiguration()
        } catch {
            _ = try? FileDescriptor.standardError.writeAll("recd: \(error)\n".utf8)
            throw ExitCode(78)
        }
        guard let bridgeConfiguration else { return ([], hookToken) }
        do {
            let bridge = try MQTTBridge(station: station, configuration: bridgeConfiguration, hooks: hooks,
                                        version: recdVersion, blocking: blocking, logger: Logger(label: "recd.mqtt"))
            return ([.init(service: bridge)], hookToken)
        } catch {
            _ = try? FileDescriptor.standardError.writeAll("recd: mqtt: \(error)\n".utf8)
            throw ExitCode(78)
        }
    }
}

extension DaemonConfiguration {
    /// The bridge's settings with defaults filled in and the password read; nil when disabled.
    func mqttBridgeConfiguration() throws(ConfigurationError) -> MQTTBridgeConfiguration? {
        guard mqtt.enabled else { return nil }
        var password: String?
        if !mqtt.passwordFile.isEmpty {
            let text = try ConfigurationFile.readText(mqtt.passwordFile, key: "mqtt.password_file")
            password = String(text.drop(while: \.isNewline).reversed().drop(while: \.isNewline).reversed())
        }
        let hostname = MQTTBridgeConfiguration.hostname
        return MQTTBridgeConfiguration(
            endpoint: mqtt.socket.isEmpty ? .tcp(host: mqtt.host, port: mqtt.port) : .unixSocket(path: mqtt.socket),
            clientID: mqtt.clientID.isEmpty ? "recd-\(hostname)" : mqtt.clientID,
            username: mqtt.username.isEmpty ? nil : mqtt.username, password: password,
            caFile: mqtt.tlsCAFile.isEmpty ? nil : mqtt.tlsCAFile, keepAlive: Int32(mqtt.keepAlive),
            topicPrefix: mqtt.topicPrefix.isEmpty ? "recd/\(hostname)" : mqtt.topicPrefix, qos: Int32(mqtt.qos),
            controlAllowed: mqtt.control, telemetryInterval: mqtt.telemetryInterval, discovery: MQTTBridgeConfiguration.Discovery(rawValue: mqtt.discovery.rawValue)!,
            discoveryPrefix: mqtt.discoveryPrefix, deviceName: mqtt.deviceName.isEmpty ? "recd \(hostname)" : mqtt.deviceName)
    }

    /// The hook commands; empty when none is configured.
    var hookCommands: [HookCommand] {
        // Validated when read.
        [(HookCommand.onFileClosed, hooks.onFileClosed), (HookCommand.onFileRedated, hooks.onFileRedated)]
            .filter { !$0.1.isEmpty }.map { try! HookCommand(name: $0.0, template: $0.1) }
    }
}
