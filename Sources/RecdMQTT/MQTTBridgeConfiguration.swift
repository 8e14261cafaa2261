import FoundationEssentials
import Glibc
import Mosquitto

/// What the `[mqtt]` section of recd.toml says, resolved (defaults filled in, password read).
public struct MQTTBridgeConfiguration: Sendable, Equatable {
    /// How Home Assistant is told about recd.
    public enum Discovery: String, Sendable, CaseIterable {
        /// One `homeassistant/device/<id>/config` message with every component (HA 2024.11+).
        case device
        /// One `homeassistant/<component>/<id>/<object>/config` message per entity (older HA).
        case component
        case off
    }

    public var endpoint: MQTTClientOptions.Endpoint
    public var clientID: String
    public var username: String?
    public var password: String?
    public var caFile: String?
    public var keepAlive: Int32
    /// Every topic recd publishes or listens to starts with this (`recd/<hostname>`).
    public var topicPrefix: String
    /// The QoS of state messages, commands and replies. Telemetry (time, levels) uses 0.
    public var qos: Int32
    /// Whether commands are obeyed (otherwise each is refused on the reply topic).
    public var controlAllowed: Bool
    /// Seconds between `time` and `levels` messages while recording; 0 turns them off.
    public var telemetryInterval: Double
    public var discovery: Discovery
    public var discoveryPrefix: String
    /// Shown as the device name in Home Assistant.
    public var deviceName: String

    public init(endpoint: MQTTClientOptions.Endpoint, clientID: String, username: String? = nil, password: String? = nil,
                caFile: String? = nil, keepAlive: Int32 = 30, topicPrefix: String, qos: Int32 = 1,
                controlAllowed: Bool = false, telemetryInterval: Double = 1, discovery: Discovery = .device,
                discoveryPrefix: String = "homeassistant", deviceName: String) {
        self.endpoint = endpoint
        self.clientID = clientID
        self.username = username
        self.password = password
        self.caFile = caFile
        self.keepAlive = keepAlive
        self.topicPrefix = topicPrefix
        self.qos = qos
        self.controlAllowed = controlAllowed
        self.telemetryInterval = telemetryInterval
        self.discovery = discovery
        self.discoveryPrefix = discoveryPrefix
        self.deviceName = deviceName
    }

    /// Home Assistant's identifier for this recorder: the client id with anything but
    /// letters, digits, `_` and `-` replaced by `_`.
    public var objectID: String {
        String(clientID.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") ? $0 : "_" })
    }

    /// The machine's host name.
    public static var hostname: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// The topics under the prefix. A station of several sources has the station's under the
/// prefix (availability, storage, clock, hook) and each source's under `<prefix>/<source>`
/// (`source(_:)`); a station of one has them all under the prefix.
public struct MQTTTopics: Sendable {
    public let prefix: String
    public init(prefix: String) { self.prefix = prefix }

    /// A source's topics on a station of several.
    public func source(_ name: String) -> MQTTTopics { MQTTTopics(prefix: prefix + "/" + name) }

    /// `online` / `offline` (the last will), retained. A source's (on a station of several):
    /// `offline` while its device is missing or lost.
    public var availability: String { prefix + "/availability" }
    /// The state's name (`idle`, `recording`…), retained.
    public var state: String { prefix + "/state" }
    /// The current (or last) recording as JSON, `{}` when none, retained.
    public var recording: String { prefix + "/recording" }
    /// Seconds recorded so far, retained.
    public var time: String { prefix + "/time" }
    /// Levels as JSON, while recording, not retained.
    public var levels: String { prefix + "/levels" }
    /// `{"problem": bool, "error": …, "warnings": […]}`, retained.
    public var problem: String { prefix + "/problem" }
    /// The last finalized file as JSON, retained.
    public var lastFile: String { prefix + "/last_file" }
    /// The last hook run as JSON, retained.
    public var hook: String { prefix + "/hook" }
    /// Free and used space on the recordings' filesystem in MiB, retained.
    public var storage: String { prefix + "/storage" }
    /// `ON` while recd listens (the device open for levels and pre-roll), else `OFF`, retained.
    public var listening: String { prefix + "/listening" }
    /// `ON` while a triggered recording's event is open (sound detected), else `OFF`, retained.
    public var sound: String { prefix + "/sound" }
    /// Each trigger event (`TriggerEvent` as JSON: opened, closed, discarded), not retained.
    public var event: String { prefix + "/event" }
    /// Each file re-dated once the system clock was synchronized (`RedatedFile` as JSON: the
    /// file as it is now, `previousPath`, `previousStart`), not retained.
    public var redated: String { prefix + "/redated" }
    /// The system clock (`ClockStatus` as JSON: synchronized, since, source, steps, lastStep), retained.
    public var clock: String { prefix + "/clock" }
    /// Commands: `<prefix>/command/<method>` (any socket method but subscribe/unsubscribe),
    /// `switch` (recording ON/OFF) and `listen_switch` (listening ON/OFF).
    public var commands: String { prefix + "/command/+" }
    public func command(_ name: String) -> String { prefix + "/command/" + name }
    /// Every command's answer.
    public var reply: String { prefix + "/reply" }
}
