import CMosquitto
import Dispatch
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import SystemPackage

/// A libmosquitto failure: the function, its `MOSQ_ERR_*` code and libmosquitto's text for it
/// (with the errno text when the code is `MOSQ_ERR_ERRNO`).
public struct MosquittoError: Error, Sendable, CustomStringConvertible {
    /// The `MOSQ_ERR_*` value.
    public let code: Int32
    public let function: String
    /// `errno` when `code` is `MOSQ_ERR_ERRNO`.
    public let systemErrno: Int32?

    /// Why libmosquitto could not be loaded, when it could not.
    public let loadFailure: String?

    init(_ code: Int32, _ function: String) {
        self.code = code
        self.function = function
        systemErrno = code == Int32(MOSQ_ERR_ERRNO.rawValue) ? errno : nil
        loadFailure = nil
    }

    init(loadFailure: String) {
        code = Int32(MOSQ_ERR_UNKNOWN.rawValue)
        function = "dlopen"
        systemErrno = nil
        self.loadFailure = loadFailure
    }

    public var description: String {
        if let loadFailure { return "cannot load libmosquitto: \(loadFailure)" }
        if let systemErrno { return "\(function): \(Errno(rawValue: systemErrno))" }
        var failure: UnsafePointer<CChar>?
        guard let library = recd_mosquitto_load(&failure)?.pointee else { return "\(function): error \(code)" }
        return "\(function): \(library.mosquitto_strerror(code).map { String(cString: $0) } ?? "error \(code)")"
    }
}

/// Where the broker is and who we are to it.
public struct MQTTClientOptions: Sendable {
    public enum Endpoint: Sendable, Equatable, CustomStringConvertible {
        case tcp(host: String, port: Int)
        /// A broker's Unix socket (mosquitto: `listener 0 /path`).
        case unixSocket(path: String)

        public var description: String {
            switch self {
            case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            case .unixSocket(let path): "unix:" + path
            }
        }
    }

    /// The last will: what the broker publishes when we vanish without disconnecting.
    public struct Will: Sendable {
        public var topic: String
        public var payload: [UInt8]
        public var qos: Int32
        public var retain: Bool
        public init(topic: String, payload: [UInt8], qos: Int32, retain: Bool) {
            self.topic = topic
            self.payload = payload
            self.qos = qos
            self.retain = retain
        }
    }

    public var endpoint: Endpoint
    public var clientID: String
    public var keepAlive: Int32
    public var username: String?
    public var password: String?
    /// Turns TLS on, trusting the certificate authorities in this PEM file.
    public var caFile: String?
    public var will: Will?
    /// First and longest wait between connection attempts; the wait doubles after each failure.
    public var reconnectDelay: ClosedRange<Double>

    public init(endpoint: Endpoint, clientID: String, keepAlive: Int32 = 30, username: String? = nil,
                password: String? = nil, caFile: String? = nil, will: Will? = nil,
                reconnectDelay: ClosedRange<Double> = 0.5...30) {
        self.endpoint = endpoint
        self.clientID = clientID
        self.keepAlive = keepAlive
        self.username = username
        self.password = password
        self.caFile = caFile
        self.will = will
        self.reconnectDelay = reconnectDelay
    }
}

/// An MQTT 3.1.1 client on libmosquitto with a network thread of its own.
///
/// - The network thread runs `mosquitto_loop`, and connects and reconnects with a doubling
///   delay for as long as the client runs: a broker that is down, refuses us or goes away is
///   retried, never fatal.
/// - `publish` and `subscribe` may be called from any thread and never block on the network
///   (libmosquitto in threaded mode queues the packet and wakes the loop).
/// - Events arrive on the network thread: handlers must return quickly.
public final class MQTTClient: @unchecked Sendable {
    // @unchecked: `handle` is created in init and destroyed in deinit; libmosquitto guards its
    // own state with mutexes in threaded mode (`mosquitto_threaded_set`). `control` is a lock
    // box (a pthread mutex: ThreadSanitizer sees it, unlike Synchronization.Mutex).

    public enum Event: Sendable {
        /// The broker accepted the connection.
        case connected
        /// A connection attempt failed (unreachable, refused, TLS, authentication).
        case connectionFailed(String)
        /// An established connection ended.
        case disconnected(String)
        case message(topic: String, payload: [UInt8], retained: Bool)
        /// A message with this id has left (QoS 0) or was acknowledged (QoS 1, 2).
        case published(messageID: Int32)
    }

    private struct Control {
        var started = false
        var stopping = false
        var connected = false
    }

    private let handle: OpaquePointer
    private let options: MQTTClientOptions
    private let onEvent: @Sendable (Event) -> Void
    private let control = NIOLockedValueBox(Control())
    private let wake = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)

    /// libmosquitto's functions: loaded by the first client (CMosquitto.h), never before.
    private let library: recd_mosquitto

    public init(options: MQTTClientOptions, onEvent: @escaping @Sendable (Event) -> Void) throws(MosquittoError) {
        var failure: UnsafePointer<CChar>?
        guard let library = recd_mosquitto_load(&failure)?.pointee else {
            throw MosquittoError(loadFailure: failure.map { String(cString: $0) } ?? "unknown reason")
        }
        self.library = library
        self.options = options
        self.onEvent = onEvent
        guard let handle = library.mosquitto_new(options.clientID, true, nil) else {
            throw MosquittoError(Int32(MOSQ_ERR_ERRNO.rawValue), "mosquitto_new")
        }
        self.handle = handle
        library.mosquitto_user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
        try check(library.mosquitto_threaded_set(handle, true), "mosquitto_threaded_set")
        if let username = options.username {
            try check(library.mosquitto_username_pw_set(handle, username, options.password), "mosquitto_username_pw_set")
        }
        if let caFile = options.caFile {
            try check(library.mosquitto_tls_set(handle, caFile, nil, nil, nil, nil), "mosquitto_tls_set")
        }
        if let will = options.will {
            try check(will.payload.withUnsafeBytes {
                library.mosquitto_will_set(handle, will.topic, Int32($0.count), $0.baseAddress, will.qos, will.retain)
            }, "mosquitto_will_set")
        }
        library.mosquitto_connect_callback_set(handle) { _, context, code in
            MQTTClient.from(context).connectionAnswered(code: code)
        }
        library.mosquitto_publish_callback_set(handle) { _, context, messageID in
            MQTTClient.from(context).onEvent(.published(messageID: messageID))
        }
        library.mosquitto_message_callback_set(handle) { _, context, message in
            guard let pointer = message else { return }
            let message = pointer.pointee
            let topic = String(cString: message.topic)
            let payload = message.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: Int(message.payloadlen))) } ?? []
            MQTTClient.from(context).onEvent(.message(topic: topic, payload: payload, retained: message.retain))
        }
    }

    deinit {
        library.mosquitto_destroy(handle)
    }

    private static func from(_ context: UnsafeMutableRawPointer?) -> MQTTClient {
        Unmanaged<MQTTClient>.fromOpaque(context!).takeUnretainedValue()
    }

    /// Whether the broker has accepted us and the connection is up.
    public var isConnected: Bool { control.withLockedValue { $0.connected } }

    /// Starts the network thread. It keeps (re)connecting until `stop`.
    public func start() {
        let alreadyStarted = control.withLockedValue { state in
            defer { state.started = true }
            return state.started
        }
        guard !alreadyStarted else { return }
        DispatchQueue(label: "recd.mqtt.network").async { [self] in
            runNetworkLoop()
            finished.signal()
        }
    }

    /// Disconnects cleanly (what was published before goes out first) and ends the network
    /// thread, waiting at most `timeout` seconds for the broker.
    public func stop(timeout: Double = 2) {
        let started = control.withLockedValue { state in
            state.stopping = true
            return state.started
        }
        guard started else { return }
        wake.signal()
        _ = finished.wait(timeout: .now() + timeout + 1)
    }

    /// Queues a message. Returns its message id.
    @discardableResult
    public func publish(topic: String, payload: [UInt8], qos: Int32, retain: Bool) throws(MosquittoError) -> Int32 {
        var messageID: Int32 = 0
        let code = payload.withUnsafeBytes {
            library.mosquitto_publish(handle, &messageID, topic, Int32($0.count), $0.baseAddress, qos, retain)
        }
        try check(code, "mosquitto_publish")
        return messageID
    }

    public func subscribe(_ pattern: String, qos: Int32) throws(MosquittoError) {
        try check(library.mosquitto_subscribe(handle, nil, pattern, qos), "mosquitto_subscribe")
    }

    // MARK: The network thread

    private func runNetworkLoop() {
        var delay = options.reconnectDelay.lowerBound
        var needsConnecting = true
        var disconnectSent = false
        var stopDeadline: Date?
        while true {
            let (stopping, connected) = control.withLockedValue { ($0.stopping, $0.connected) }
            if stopping {
                // Say goodbye if we can (a clean disconnect: the broker does not send the will).
                guard connected, !needsConnecting else { break }
                if !disconnectSent {
                    disconnectSent = true
                    stopDeadline = Date().addingTimeInterval(2)
                    _ = library.mosquitto_disconnect(handle)  // the deadline covers a failure
                }
                if let stopDeadline, Date() > stopDeadline { break }
            }
            if needsConnecting {
                let code: Int32 = switch options.endpoint {
                case .tcp(let host, let port): library.mosquitto_connect_async(handle, host, Int32(port), options.keepAlive)
                // libmosquitto connects to a Unix socket when the port is 0.
                case .unixSocket(let path): library.mosquitto_connect_async(handle, path, 0, options.keepAlive)
                }
                if code != Int32(MOSQ_ERR_SUCCESS.rawValue) {
                    onEvent(.connectionFailed(MosquittoError(code, "connect").description))
                    pause(&delay)
                    continue
                }
                needsConnecting = false
            }
            let code = library.mosquitto_loop(handle, 200, 1)
            if code != Int32(MOSQ_ERR_SUCCESS.rawValue) {
                let wasConnected = control.withLockedValue { state in
                    defer { state.connected = false }
                    return state.connected
                }
                if control.withLockedValue({ $0.stopping }) { break }
                let reason = MosquittoError(code, "mosquitto_loop").description
                onEvent(wasConnected ? .disconnected(reason) : .connectionFailed(reason))
                if wasConnected { delay = options.reconnectDelay.lowerBound }
                pause(&delay)
                needsConnecting = true
            } else if control.withLockedValue({ $0.connected }) {
                delay = options.reconnectDelay.lowerBound
            }
        }
        control.withLockedValue { $0.connected = false }
    }

    /// Waits `delay` (cut short by `stop`), then doubles it up to the maximum.
    private func pause(_ delay: inout Double) {
        _ = wake.wait(timeout: .now() + delay)
        delay = min(delay * 2, options.reconnectDelay.upperBound)
    }

    // An ended connection is reported by the loop, with its reason, when mosquitto_loop
    // returns an error; a disconnect we asked for needs no event.
    private func connectionAnswered(code: Int32) {
        if code == 0 {
            control.withLockedValue { $0.connected = true }
            onEvent(.connected)
        } else {
            onEvent(.connectionFailed("broker refused the connection: \(library.mosquitto_connack_string(code).map { String(cString: $0) } ?? "code \(code)")"))
        }
    }
}

private func check(_ code: Int32, _ function: String) throws(MosquittoError) {
    guard code == Int32(MOSQ_ERR_SUCCESS.rawValue) else { throw MosquittoError(code, function) }
}
