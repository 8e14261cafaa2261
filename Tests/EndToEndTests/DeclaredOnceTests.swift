import Foundation
import RecdProtocol
import RecdTestSupport
import Testing

/// `start`'s params are declared once (`StartParams`); the parser and MQTT read them off the
/// declaration, and these tests fail when recctl or the docs lack a member.
@Suite("start's params, declared once")
struct DeclaredOnceTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// How recctl spells each member. A member missing here is a member recctl cannot send.
    static let recctlSpelling: [String: String] = [
        "name": "<name>", "format": "--format", "sampleRate": "--rate", "channels": "--channels", "bitDepth": "--bit-depth",
        "quality": "--quality", "bitRate": "--bitrate", "duration": "--duration", "at": "--at", "segmentLength": "--segment",
        "alignToClock": "--align-to-clock", "fileTemplate": "--template", "preRoll": "--pre-roll", "trigger": "--trigger",
    ]

    @Test func theParserTakesExactlyTheDeclaredMembers() {
        #expect(RecdProtocol.Method.start.parameterNames == StartParams.names.union(["source"]))
        #expect(StartParams.names.contains("segmentLength") && StartParams.names.count == 14, "\(StartParams.names.sorted())")
    }

    @Test func recctlStartHasAnOptionForEveryMember() throws {
        let help = try run(Binaries.recctl, ["start", "--help"], timeout: 30).stdout
        for member in StartParams.names.sorted() {
            let spelling = try #require(Self.recctlSpelling[member], "recctl start has no option for '\(member)'")
            #expect(help.contains(spelling), "recctl start --help lacks \(spelling) for '\(member)'")
        }
    }

    @Test func protocolAndMQTTDocumentEveryMember() throws {
        let protocolText = try String(contentsOf: Self.repository.appendingPathComponent("doc/protocol.md"), encoding: .utf8)
        let start = try #require(protocolText.range(of: "### `start`"))
        let table = protocolText[start.upperBound...].prefix { _ in true }.components(separatedBy: "\n\n")
            .first { $0.contains("| param |") } ?? ""
        let mqtt = try String(contentsOf: Self.repository.appendingPathComponent("doc/mqtt.md"), encoding: .utf8)
        let mqttStart = mqtt.components(separatedBy: "\n").first { $0.hasPrefix("| `start` |") } ?? ""
        for member in StartParams.names.sorted() {
            #expect(table.contains("| `\(member)` |"), "protocol.md's start table lacks '\(member)'")
            #expect(mqttStart.contains("`\(member)`"), "mqtt.md's start row lacks '\(member)'")
        }
    }
}
