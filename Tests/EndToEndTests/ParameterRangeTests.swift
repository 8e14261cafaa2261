import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// Every number a client can send, driven with extreme values through the real daemon — over
/// the socket, MQTT's `command/start` and recctl's options: each value is refused with an error
/// that names the parameter, or accepted within the documented range and honoured; and recd
/// never dies (after each value it is running and answers `status`). A value that kills it is
/// reported with recd's log, and a fresh daemon takes the remaining values.
@Suite("parameter ranges: extreme values through the real daemon")
struct ParameterRangeTests {
    /// One number a client can send, the request around it, and its documented range (doc/protocol.md).
    struct NumericParameter: Sendable, CustomTestStringConvertible {
        var method: String
        var name: String
        /// The request's other params, as JSON members.
        var context: String
        /// recctl's arguments before the value (nil: no option for it).
        var recctl: [String]?
        /// What recctl's error names.
        var option: String
        var integer: Bool
        var documented: @Sendable (Double) -> Bool

        var testDescription: String { "\(method) \(name)" }
    }

    static let wav = #""format":"wav","sampleRate":48000,"channels":2"#
    static let parameters: [NumericParameter] = [
        NumericParameter(method: "start", name: "duration", context: wav, recctl: ["start", "--format", "wav", "--duration"],
                         option: "duration", integer: false, documented: { $0.isFinite && $0 > 0 }),
        NumericParameter(method: "start", name: "sampleRate", context: #""format":"wav","channels":2"#,
                         recctl: ["start", "--format", "wav", "--rate"], option: "rate", integer: true,
                         documented: { (1000...768_000).contains($0) }),
        NumericParameter(method: "start", name: "channels", context: #""format":"wav","sampleRate":48000"#,
                         recctl: ["start", "--format", "wav", "--channels"], option: "channels", integer: true,
                         documented: { (1...8).contains($0) }),
        NumericParameter(method: "start", name: "bitDepth", context: wav, recctl: ["start", "--format", "wav", "--bit-depth"],
                         option: "bit-depth", integer: true, documented: { [16, 24, 32].contains($0) }),
        // Opus takes 6000…256000 per channel.
        NumericParameter(method: "start", name: "bitRate", context: #""format":"opus","sampleRate":48000,"channels":2"#,
                         recctl: ["start", "--format", "opus", "--rate", "48000", "--channels", "2", "--bitrate"], option: "bitrate",
                         integer: true, documented: { (12000...512_000).contains($0) }),
        NumericParameter(method: "start", name: "segmentLength", context: wav, recctl: ["start", "--format", "wav", "--segment"],
                         option: "segment", integer: false, documented: { $0 == 0 || (1...86400).contains($0) }),
        // Any time: one not in the future starts at once.
        NumericParameter(method: "start", name: "at", context: wav, recctl: ["start", "--format", "wav", "--at"], option: "at",
                         integer: false, documented: { $0.isFinite }),
        NumericParameter(method: "start", name: "preRoll", context: wav, recctl: ["start", "--format", "wav", "--pre-roll"],
                         option: "pre-roll", integer: false, documented: { (0...60).contains($0) }),
        // `recctl listen` runs until Ctrl-C: its option is checked by the same range, over the socket here.
        NumericParameter(method: "listen", name: "preRoll", context: "",
                         recctl: nil, option: "pre-roll", integer: false, documented: { (0...60).contains($0) }),
        NumericParameter(method: "subscribe", name: "interval", context: #""topics":["state"]"#,
                         recctl: ["watch", "--until", "idle", "--interval"], option: "interval", integer: false,
                         documented: { (0.01...3600).contains($0) }),
    ]
    static var startParameters: [NumericParameter] { parameters.filter { $0.method == "start" } }

    /// A crash ends recd at once with its "Fatal error" line: Swift's backtracer takes seconds.
    static let quickCrash = ["SWIFT_BACKTRACE": "enable=no"]

    /// Whether `message` names `parameter` (as on the wire, or spelt as words: "segment length").
    static func names(_ message: String, _ parameter: String) -> Bool {
        func squeezed(_ text: String) -> String { text.lowercased().filter { $0.isLetter || $0.isNumber } }
        return squeezed(message).contains(squeezed(parameter))
    }

    /// As JSON text: zero and signs, fractions where integers are expected, the edges of
    /// Double, Int64 and UInt64, what overflows a frame count (2e14 s × 48 kHz > Int64.max),
    /// and what JSON cannot carry (NaN and infinities as strings, and as bare tokens).
    static let values = [
        "0", "-0", "-1", "0.5", "-0.5", "1e-300", "1", "1e14", "2e14", "1e30", "1e308", "-1e308", "1e400", "-1e400",
        "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e19", "18446744073709551616", "2147483648",
        "4294967296", #""NaN""#, #""Infinity""#, #""-Infinity""#, "NaN", "Infinity", "-Infinity", #""1""#, "true",
    ]

    /// What a user may type for an option.
    static let optionValues = [
        "0", "-1", "0.5", "-0.5", "1e-300", "1e14", "2e14", "1e30", "1e308", "-1e308", "1e400", "9223372036854775807",
        "9223372036854775808", "1e19", "NaN", "nan", "inf", "-inf", "Infinity", "99:99:99", "+1e308", "0x10", "",
    ]

    /// A value JSON can carry (else the line is not JSON at all).
    static func isJSON(_ value: String) -> Bool {
        (try? JSONSerialization.jsonObject(with: Data("[\(value)]".utf8))) != nil
    }

    /// The value as a number, when it is one.
    static func number(_ value: String) -> Double? {
        guard value != "true" && value != "false" else { return nil }
        return ((try? JSONSerialization.jsonObject(with: Data("[\(value)]".utf8))) as? [Any])?.first.flatMap { $0 as? NSNumber }?.doubleValue
    }

    // MARK: The socket

    @Test("over the socket", arguments: parameters)
    func socket(parameter: NumericParameter) throws {
        let server = try PulseServer()
        try server.tone()
        let guardian = try DaemonGuardian { try Daemon(device: TestDevices.paced(server), environment: Self.quickCrash) }
        for (index, value) in Self.values.enumerated() {
            let label = "\(parameter.method) {\(parameter.name): \(value)}"
            let params = parameter.method == "start"
                ? #"{"name":"v\#(index)",\#(parameter.context),"\#(parameter.name)":\#(value)}"#
                : parameter.context.isEmpty ? #"{"\#(parameter.name)":\#(value)}"#
                : #"{\#(parameter.context),"\#(parameter.name)":\#(value)}"#
            let line = #"{"jsonrpc":"2.0","id":\#(index + 1),"method":"\#(parameter.method)","params":\#(params)}"#
            let reply = try? guardian.daemon.connect().exchange(line, timeout: 30)
            guard guardian.survived(label) else { continue }
            guard let reply else {
                Issue.record("\(label): no answer")
                continue
            }
            if !Self.isJSON(value) {
                #expect(reply.errorCode == -32700, "\(label): \(reply)")
                continue
            }
            if let message = reply.errorMessage {
                #expect(reply.errorCode == -32602 || reply.errorDataCode == "invalidSettings", "\(label): \(reply)")
                #expect(Self.names(message, parameter.name), "\(label): the error does not name '\(parameter.name)': \(message)")
                continue
            }
            let result = try #require(reply["result"] as? [String: Any], "\(label): \(reply)")
            checkAccepted(parameter, value: value, result: result, label: label)
            if parameter.method == "start" { guardian.cancel() }
            // Listening again never shortens the shared pre-roll: each value listens afresh.
            if parameter.method == "listen" {
                _ = try? guardian.daemon.connect().exchange(#"{"jsonrpc":"2.0","id":0,"method":"unlisten"}"#, timeout: 30)
            }
        }
    }

    /// An accepted value is a number in the documented range, and the answer carries it.
    func checkAccepted(_ parameter: NumericParameter, value: String, result: [String: Any], label: String) {
        guard let number = Self.number(value) else {
            Issue.record("\(label): accepted what is not a number: \(result)")
            return
        }
        #expect(parameter.documented(number), "\(label): accepted outside the documented range")
        if parameter.integer { #expect(number == number.rounded(), "\(label): a fraction accepted as an integer") }
        switch parameter.name {
        case "sampleRate", "channels", "bitDepth", "bitRate":
            #expect((result[parameter.name] as? NSNumber)?.doubleValue == number, "\(label): recorded with \(result[parameter.name] ?? "nothing")")
        case "duration":
            let rate = (result["sampleRate"] as? NSNumber)?.doubleValue ?? 0
            #expect((result["frameLimit"] as? NSNumber)?.doubleValue == (number * rate).rounded(), "\(label): frameLimit \(result["frameLimit"] ?? "none")")
        case "interval":
            #expect((result["interval"] as? NSNumber)?.doubleValue == number, "\(label): subscribed with \(result["interval"] ?? "nothing")")
        case "preRoll" where parameter.method == "listen":
            let listening = result["listening"] as? [String: Any]
            #expect((listening?["preRollCapacity"] as? NSNumber)?.doubleValue == number, "\(label): listening with \(listening ?? [:])")
        default:
            break
        }
    }

    // MARK: MQTT

    @Test("over MQTT command/start", arguments: startParameters)
    func mqtt(parameter: NumericParameter) throws {
        let broker = try MosquittoBroker()
        let server = try PulseServer()
        try server.tone()
        let prefix = "recd/range"
        let config = """
            [mqtt]
            enabled = true
            host = "127.0.0.1"
            port = \(broker.port)
            client_id = "recd-range"
            topic_prefix = "\(prefix)"
            control = true

            """
        let watcher = try MQTTWatcher(port: broker.port, topics: ["\(prefix)/reply", "\(prefix)/availability"])
        let guardian = try DaemonGuardian { try Daemon(device: TestDevices.paced(server), config: config, environment: Self.quickCrash) }
        try #require(watcher.first("\(prefix)/availability", where: { $0.payload == "online" }) != nil, "recd never came online")
        for (index, value) in Self.values.enumerated() {
            let label = "MQTT command/start {\(parameter.name): \(value)}"
            let id = "r\(index)"
            let seen = watcher.messages.count
            try mqttPublish(port: broker.port, topic: "\(prefix)/command/start",
                            payload: #"{"id":"\#(id)","name":"m\#(index)",\#(parameter.context),"\#(parameter.name)":\#(value)}"#)
            // A payload that is not JSON has no id to echo: its reply is the next one.
            let reply = watcher.first("\(prefix)/reply", after: seen, timeout: 20) {
                (Self.isJSON(value) ? $0.json?["id"] as? String == id : $0.json?["command"] as? String == "start")
                    || !guardian.daemon.process.isRunning
            }
            guard guardian.survived(label) else {
                // The new daemon's availability: wait for it before the next value.
                _ = watcher.first("\(prefix)/availability", after: seen, where: { $0.payload == "online" })
                continue
            }
            guard let json = reply?.json else {
                Issue.record("\(label): no reply")
                continue
            }
            if json["ok"] as? Bool == true {
                checkAccepted(parameter, value: value, result: json["recording"] as? [String: Any] ?? [:], label: label)
                guardian.cancel()
                continue
            }
            let error = json["error"] as? [String: Any]
            let code = error?["code"] as? String ?? ""
            let message = error?["message"] as? String ?? ""
            #expect(["invalidPayload", "invalidSettings"].contains(code), "\(label): \(json)")
            guard Self.isJSON(value) else { continue }  // the payload is not JSON: nothing to name
            #expect(Self.names(message, parameter.name), "\(label): the error does not name '\(parameter.name)': \(message)")
            // For people: no Swift type or coding-path dump.
            let internals = ["CodingKeys", "Swift.", "DecodingError", "debugDescription"].filter { message.contains($0) }
            #expect(internals.isEmpty, "\(label): the error is Swift's, not a sentence: \(message)")
        }
    }

    // MARK: recctl

    @Test("through recctl's options", arguments: parameters.filter { $0.recctl != nil })
    func recctl(parameter: NumericParameter) throws {
        let arguments = try #require(parameter.recctl)
        let server = try PulseServer()
        try server.tone()
        let guardian = try DaemonGuardian { try Daemon(device: TestDevices.paced(server), environment: Self.quickCrash) }
        for value in Self.optionValues {
            let label = "recctl \(arguments.joined(separator: " ")) '\(value)'"
            let result = try run(Binaries.recctl, arguments + [value], environment: ["RECD_SOCKET": guardian.daemon.socket], timeout: 30)
            #expect(result.status < 128 && !result.stderr.contains("Fatal error"), "\(label): recctl crashed (\(result.status)): \(result.stderr)")
            guard guardian.survived(label) else { continue }
            if result.status == 0 {
                if parameter.method == "start" {
                    // Accepted: the value was a number in the documented range (or a duration recctl spells).
                    if let number = Double(value), !parameter.documented(number) || (parameter.integer && number != number.rounded()) {
                        Issue.record("\(label): accepted outside the documented range: \(result.stdout)")
                    }
                    guardian.cancel()
                }
                continue
            }
            #expect(result.stderr.contains("--" + parameter.option) || Self.names(result.stderr, parameter.name), "\(label): the error does not name --\(parameter.option): \(result.stderr)")
        }
    }
}

/// A daemon that a test expects to survive every request: when one kills it, `survived` records
/// what killed it (with recd's log) and starts a fresh one for the rest.
final class DaemonGuardian {
    private(set) var daemon: Daemon
    private let make: () throws -> Daemon

    init(_ make: @escaping () throws -> Daemon) throws {
        self.make = make
        daemon = try make()
    }

    /// Whether recd still runs and answers `status`; if not, records an issue naming `cause`.
    func survived(_ cause: String) -> Bool {
        let answered = daemon.process.isRunning
            && (try? daemon.connect().exchange(#"{"jsonrpc":"2.0","id":0,"method":"status"}"#, timeout: 20))?["result"] != nil
        if answered && daemon.process.isRunning { return true }
        let exit = daemon.process.wait(timeout: 5).map { "exit \($0)" } ?? "running but not answering"
        let log = daemon.log
        let excerpt = log.range(of: "Fatal error").map { String(log[$0.lowerBound...].prefix(1500)) } ?? String(log.suffix(1500))
        Issue.record("\(cause) killed recd (\(exit)):\n\(excerpt)")
        daemon.process.signal(SIGKILL)
        do { daemon = try make() } catch { Issue.record("no fresh daemon: \(error)") }
        return false
    }

    /// Ends whatever an accepted start began, and waits until nothing is active.
    func cancel() {
        _ = try? daemon.connect().exchange(#"{"jsonrpc":"2.0","id":0,"method":"cancel"}"#, timeout: 20)
        _ = daemon.waitForStatus(timeout: 20) { !$0.state.isActive }
    }
}
