import ArgumentParser
import Foundation
import Logging
import RecdHooks
import RecdMQTT
import RecorderCore
import ServiceLifecycle

extension Recd {
    /// The file hooks and the MQTT bridge, as configured. Returns the bridge's service (if
    /// enabled) and the subscription that feeds finalized files to the hooks (if any).
    func makeIntegrations(_ configuration: DaemonConfiguration, recorder: Recorder) throws
        -> ([ServiceGroupConfiguration.ServiceConfiguration], ObservationToken?) {
        var hooks: HookRunner?
        var hookToken: ObservationToken?
        if !configuration.hookCommands.isEmpty {
            let runner = HookRunner(commands: configuration.hookCommands, recordingsDirectory: configuration.recordingsDirectory,
                                    timeout: configuration.hooks.timeout, maxConcurrent: configuration.hooks.maxConcurrent,
                                    logger: Logger(label: "recd.hooks"))
            hookToken = observeFinalizedFiles(of: recorder) { runner.fileFinalized($0) }
            hooks = runner
        }
        let bridgeConfiguration: MQTTBridgeConfiguration?
        do {
            bridgeConfiguration = try configuration.mqttBridgeConfiguration()
        } catch {
            FileHandle.standardError.write(Data("recd: \(error)\n".utf8))
            throw ExitCode(78)
        }
        guard let bridgeConfiguration else { return ([], hookToken) }
        do {
            let bridge = try MQTTBridge(recorder: recorder, configuration: bridgeConfiguration, hooks: hooks,
                                        version: recdVersion, logger: Logger(label: "recd.mqtt"))
            return ([.init(service: bridge)], hookToken)
        } catch {
            FileHandle.standardError.write(Data("recd: mqtt: \(error)\n".utf8))
            throw ExitCode(78)
        }
    }
}
