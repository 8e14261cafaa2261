import Foundation
import Glibc

/// Debian's mosquitto broker on a private port, the test's own child process.
public final class MosquittoBroker {
    public let directory = TemporaryDirectory()
    public let port: Int
    public private(set) var process: ChildProcess

    /// Starts a broker on a free port and waits until it accepts connections. `settings`
    /// replaces `allow_anonymous true` (e.g. password_file and acl_file lines).
    public init(settings: String = "allow_anonymous true") throws {
        // A port found free can still be taken before mosquitto binds it (by another test's
        // broker): then another one.
        var attempt = 0
        while true {
            attempt += 1
            let port = MosquittoBroker.freePort()
            let config = """
            listener \(port) 127.0.0.1
            \(settings)
            persistence false
            log_dest stdout
            log_type error
            log_type warning
            log_type notice

            """
            try config.write(toFile: directory.file("mosquitto.conf"), atomically: true, encoding: .utf8)
            unlink(directory.file("mosquitto.log"))  // appended to: this attempt's lines only
            let process = try MosquittoBroker.launch(directory)
            if MosquittoBroker.listens(process, on: port) {
                self.port = port
                self.process = process
                return
            }
            process.signal(SIGTERM)
            _ = process.wait(timeout: 15)
            let log = (try? String(contentsOfFile: directory.file("mosquitto.log"), encoding: .utf8)) ?? ""
            guard log.contains("Address already in use"), attempt < 5 else {
                throw TestFailure("mosquitto did not start: \(log)")
            }
        }
    }

    private static func launch(_ directory: TemporaryDirectory) throws -> ChildProcess {
        try ChildProcess("/usr/sbin/mosquitto", ["-c", directory.file("mosquitto.conf")],
                         environment: ProcessInfo.processInfo.environment, output: directory.file("mosquitto.log"))
    }

    /// Whether `process` runs and accepts connections on `port` within 15 s.
    private static func listens(_ process: ChildProcess, on port: Int) -> Bool {
        waitUntil(timeout: 15, { !process.isRunning || canConnect(port) }) && process.isRunning
    }

    private func waitUntilListening() throws {
        guard MosquittoBroker.listens(process, on: port) else {
            throw TestFailure("mosquitto did not start: \((try? String(contentsOfFile: directory.file("mosquitto.log"), encoding: .utf8)) ?? "")")
        }
    }

    /// Stops the broker (SIGTERM) and waits for it to exit.
    public func stop() {
        process.signal(SIGTERM)
        _ = process.wait(timeout: 15)
    }

    /// Starts the broker again on the same port (nothing retained survives: no persistence).
    public func restart() throws {
        stop()
        process = try MosquittoBroker.launch(directory)
        try waitUntilListening()
    }

    deinit { stop() }

    /// A port nobody listens on right now, below the kernel's ephemeral range
    /// (`ip_local_port_range`, 32768–60999 by default): port 0's choice comes from that range,
    /// where any process's next outgoing connection may take it before the broker binds it.
    public static func freePort() -> Int {
        while true {
            let port = Int.random(in: 20000..<32768)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = UInt16(port).bigEndian
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            close(fd)
            if bound == 0 { return port }
        }
    }

    static func canConnect(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}

/// One message as `mosquitto_sub` printed it.
public struct MQTTMessage: CustomStringConvertible {
    public var topic: String
    public var payload: String
    /// Whether the broker delivered it as a retained message (sent before we subscribed).
    public var retained: Bool

    public var json: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(payload.utf8))) as? [String: Any]
    }

    public var description: String { "\(retained ? "[retained] " : "")\(topic) \(payload)" }
}

/// `mosquitto_sub` as an independent client: every message on `topics`, read back as it arrives.
public final class MQTTWatcher {
    private let directory = TemporaryDirectory()
    private let process: ChildProcess

    /// - Parameters:
    ///   - login: user name and password, when the broker wants them.
    ///   - options: more mosquitto_sub options (`--cafile`, `--unix`…).
    public init(port: Int, topics: [String], login: (String, String)? = nil, options: [String] = []) throws {
        // %r: retained flag, %t: topic, %p: payload; one message per line (our payloads have no newlines).
        let credentials = login.map { ["-u", $0.0, "-P", $0.1] } ?? []
        process = try ChildProcess("/usr/bin/mosquitto_sub",
                                   ["-h", "127.0.0.1", "-p", String(port), "-F", "%r %t %p"] + credentials + options + topics.flatMap { ["-t", $0] },
                                   environment: ProcessInfo.processInfo.environment, output: directory.file("messages"))
    }

    deinit {
        process.signal(SIGTERM)
        _ = process.wait(timeout: 5)
    }

    /// Everything received so far, in order.
    public var messages: [MQTTMessage] {
        let text = (try? String(contentsOfFile: directory.file("messages"), encoding: .utf8)) ?? ""
        return completeLines(text).compactMap { line in
            let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count >= 2, parts[0] == "0" || parts[0] == "1" else { return nil }
            return MQTTMessage(topic: String(parts[1]), payload: parts.count > 2 ? String(parts[2]) : "", retained: parts[0] == "1")
        }
    }

    /// The first message (from index `after` on) that matches, waiting up to `timeout` seconds.
    public func first(after: Int = 0, timeout: Double = 30, where predicate: (MQTTMessage) -> Bool) -> MQTTMessage? {
        var found: MQTTMessage?
        _ = waitUntil(timeout: timeout) {
            found = messages.dropFirst(after).first(where: predicate)
            return found != nil
        }
        return found
    }

    /// The first message on `topic` (from index `after` on) whose payload satisfies `predicate`.
    public func first(_ topic: String, after: Int = 0, timeout: Double = 30,
                      where predicate: (MQTTMessage) -> Bool = { _ in true }) -> MQTTMessage? {
        first(after: after, timeout: timeout) { $0.topic == topic && predicate($0) }
    }
}

/// Publishes one message with `mosquitto_pub`.
public func mqttPublish(port: Int, topic: String, payload: String, retain: Bool = false, login: (String, String)? = nil) throws {
    let credentials = login.map { ["-u", $0.0, "-P", $0.1] } ?? []
    let process = try ChildProcess("/usr/bin/mosquitto_pub",
                                   ["-h", "127.0.0.1", "-p", String(port), "-q", "1", "-t", topic, "-m", payload] + credentials + (retain ? ["-r"] : []),
                                   environment: ProcessInfo.processInfo.environment)
    guard process.wait(timeout: 20) == 0 else { throw TestFailure("mosquitto_pub to \(topic) failed") }
}
