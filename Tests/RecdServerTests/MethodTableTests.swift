@testable import RecdServer
import RecdProtocol
import RecorderCore
import Testing

/// The dispatch table on its own, without a socket.
@Suite("method table")
struct MethodTableTests {
    @Test func everyMethodHasExactlyOneHandler() {
        #expect(Set(MethodTable.handlers.keys) == Set(RecdProtocol.Method.allCases))
    }

    @Test func onlyMethodsThatReadPublishedValuesOrTheConnectionRunInline() {
        let inline = Set(MethodTable.handlers.filter { !$0.value.blocking }.keys)
        #expect(inline == [.status, .version, .subscribe, .unsubscribe])
    }

    @Test func statusReportsTheRecordersPublishedValues() {
        let recorder = Recorder(configuration: RecorderConfiguration(device: "null", recordingsDirectory: "/nonexistent"))
        let status = MethodTable.status(of: recorder)
        #expect(status.state == .idle)
        #expect(status.device == "null")
        #expect(status.recordingsDirectory == "/nonexistent")
        #expect(status.currentTime == 0)
    }

    @Test func everyParameterNameDecodes() throws {
        // A member the parser lets through must be one the handler's params type reads.
        let all: [String: JSONValue] = [
            "name": .string("x"), "format": .string("wav"), "sampleRate": .number(48000), "channels": .number(2),
            "bitDepth": .number(16), "quality": .string("high"), "bitRate": .number(64000), "duration": .number(1),
            "at": .string("2026-11-22T10:00:00Z")]
        #expect(Set(all.keys) == RecdProtocol.Method.start.parameterNames)
        let start = try decode(StartParams.self, .object(all))
        #expect(start?.name == "x")
        #expect(start?.duration == 1)
        #expect(throws: RPCError.self) { try decode(StartParams.self, .object(["sampleRate": .string("fast")])) }
    }
}
