import Foundation
import RecdProtocol
import Testing

/// The request parser on its own: JSON-RPC 2.0's rules and recd's, without a socket.
@Suite("request parser")
struct RequestParserTests {
    func parse(_ line: String) -> ParsedLine { RequestParser.parse(Array(line.utf8)) }

    func request(_ line: String) -> ParsedRequest? {
        if case .single(.request(let request)) = parse(line) { return request }
        return nil
    }

    func error(_ line: String) -> (code: Int, id: RPCID?, answered: Bool)? {
        if case .single(.invalid(let error, let id, let answered)) = parse(line) { return (error.code, id, answered) }
        return nil
    }

    @Test func aRequestHasItsIdMethodAndParams() {
        let parsed = request(#"{"jsonrpc":"2.0","id":7,"method":"recordings.info","params":{"name":"take"}}"#)
        #expect(parsed == ParsedRequest(id: .number(7), isNotification: false, method: .recordingsInfo,
                                        params: .object(["name": .string("take")])))
    }

    @Test func withoutAnIdItIsANotificationAndANullIdIsNot() {
        #expect(request(#"{"jsonrpc":"2.0","method":"status"}"#)?.isNotification == true)
        let nullID = request(#"{"jsonrpc":"2.0","id":null,"method":"status"}"#)
        #expect(nullID?.isNotification == false)
        #expect(nullID?.id == nil)
    }

    @Test func invalidRequestsAreAnsweredEvenWithoutAnIdAndWithANullIdWhenUnreadable() {
        // The specification's own example: method not a string, params not structured.
        let invalid = error(#"{"jsonrpc": "2.0", "method": 1, "params": "bar"}"#)
        #expect(invalid?.code == -32600)
        #expect(invalid?.id == nil)
        #expect(invalid?.answered == true)
        #expect(error(#"{"jsonrpc":"2.0","id":"x","method":"status","extra":1}"#).map { ($0.code, $0.id) } ?? (0, nil) == (-32600, .string("x")))
        #expect(error(#"{"jsonrpc":"1.0","id":3,"method":"status"}"#)?.code == -32600)
        #expect(error(#"{"jsonrpc":"2.0","id":1.5,"method":"status"}"#).map { ($0.code, $0.id) } ?? (0, .number(0)) == (-32600, nil))
        #expect(error(#"{"jsonrpc":"2.0","id":2,"method":"status","params":"bar"}"#)?.code == -32600)
    }

    @Test func aFailingNotificationIsNeverAnswered() {
        #expect(error(#"{"jsonrpc":"2.0","method":"nosuch"}"#).map { ($0.code, $0.answered) } ?? (0, true) == (-32601, false))
        #expect(error(#"{"jsonrpc":"2.0","method":"start","params":{"bogus":1}}"#).map { ($0.code, $0.answered) } ?? (0, true) == (-32602, false))
        #expect(error(#"{"jsonrpc":"2.0","id":1,"method":"nosuch"}"#).map { ($0.code, $0.answered) } ?? (0, false) == (-32601, true))
    }

    @Test func paramsAreNamedAndCheckedAgainstTheMethod() {
        #expect(error(#"{"jsonrpc":"2.0","id":1,"method":"start","params":[1]}"#)?.code == -32602)
        #expect(error(#"{"jsonrpc":"2.0","id":1,"method":"status","params":{"x":1}}"#)?.code == -32602)
        // An empty array is what generic clients send for "no params".
        #expect(request(#"{"jsonrpc":"2.0","id":1,"method":"status","params":[]}"#)?.params == nil)
    }

    @Test func unreadableLinesGetOneErrorWithNullId() {
        guard case .unreadable(let invalidJSON) = parse(#"{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]"#) else {
            Issue.record("invalid JSON is not one error"); return
        }
        #expect(invalidJSON.code == -32700)
        guard case .unreadable(let empty) = parse("[]") else { Issue.record("[] is not one error"); return }
        #expect(empty.code == -32600)
        guard case .unreadable(let notJSON) = parse(#"[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"}, {"jsonrpc": "2.0", "method"]"#) else {
            Issue.record("invalid JSON in a batch is not one parse error"); return
        }
        #expect(notJSON.code == -32700)
        guard case .unreadable(let long) = parse(String(repeating: " ", count: 10) + "\"" + String(repeating: "a", count: JSONRPC.maximumLineLength) + "\"") else {
            Issue.record("an over-long line is not refused"); return
        }
        #expect(long.code == -32600)
        #expect(parse("  \t") == .blank)
    }

    @Test func aBatchIsCheckedElementByElement() {
        guard case .batch(let three) = parse("[1,2,3]") else { Issue.record("[1,2,3] is not a batch"); return }
        #expect(three.map(\.errorResponse?.error.code) == [-32600, -32600, -32600])
        #expect(three.allSatisfy { $0.errorResponse?.id == nil })

        let mixed = #"""
            [{"jsonrpc": "2.0", "method": "status", "id": "1"},
             {"jsonrpc": "2.0", "method": "version"},
             {"jsonrpc": "2.0", "method": "recordings.list", "id": "2"},
             {"foo": "boo"},
             {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
             {"jsonrpc": "2.0", "method": "devices.list", "id": "9"}]
            """#
        guard case .batch(let items) = parse(mixed.replacingOccurrences(of: "\n", with: " ")) else {
            Issue.record("not a batch"); return
        }
        #expect(items.count == 6)
        #expect(items[0] == .request(ParsedRequest(id: .string("1"), isNotification: false, method: .status, params: nil)))
        #expect(items[1] == .request(ParsedRequest(id: nil, isNotification: true, method: .version, params: nil)))
        #expect(items[3].errorResponse?.error.code == -32600)
        #expect(items[3].errorResponse?.id == nil)
        #expect(items[4].errorResponse?.error.code == -32601)
        #expect(items[4].errorResponse?.id == .string("5"))
        guard case .batch(let notifications) = parse(#"[{"jsonrpc":"2.0","method":"status"},{"jsonrpc":"2.0","method":"nosuch"}]"#) else {
            Issue.record("not a batch"); return
        }
        #expect(notifications.allSatisfy { $0.errorResponse == nil })
    }

    @Test func onlyStrictJSONIsRead() {
        let notJSON = [
            #"{"jsonrpc":"2.0","id":1,"method":"status"} {}"#,  // a second value
            #"{"jsonrpc":"2.0","id":1,"method":"status",}"#,  // a trailing comma
            #"{"jsonrpc":"2.0","id":01,"method":"status"}"#,  // a leading zero
            #"{"jsonrpc":"2.0","id":1e999,"method":"status"}"#,  // out of range
            #"{"jsonrpc":"2.0","id":"\ud800","method":"status"}"#,  // a lone surrogate
            #"{"jsonrpc":"2.0","id":"\x","method":"status"}"#,  // an unknown escape
            "{\"jsonrpc\":\"2.0\",\"id\":\"a\tb\",\"method\":\"status\"}",  // a raw control character
            #"{'jsonrpc':'2.0'}"#, "tru", "-", "1.", "[1,]", "{\"a\" 1}",
            String(repeating: "[", count: 600) + String(repeating: "]", count: 600),  // nested too deep
        ]
        for line in notJSON {
            guard case .unreadable(let error) = parse(line) else { Issue.record("read as JSON: \(line)"); continue }
            #expect(error.code == -32700, "\(line)")
            #expect(error.message.hasPrefix("not valid JSON: "))
        }
        let invalidUTF8: [UInt8] = Array(#"{"jsonrpc":"2.0","id":""#.utf8) + [0xC3, 0x28] + Array(#"","method":"status"}"#.utf8)
        guard case .unreadable(let error) = RequestParser.parse(invalidUTF8) else { Issue.record("invalid UTF-8 read"); return }
        #expect(error.code == -32700)
    }

    @Test func escapesAndWhitespaceAreRead() {
        let parsed = request(" {\"jsonrpc\" : \"2.0\",\r\t\"id\":\"\\u00e9\\ud83c\\udfa4\\n\\\"/\\/\", \"method\":\"status\", \"params\":null} ")
        #expect(parsed?.id == .string("é🎤\n\"//"))
        #expect(parsed?.params == nil)
        let nested = request(#"{"jsonrpc":"2.0","id":-3,"method":"start","params":{"name":"a b","duration":1.5e1,"alignToClock":false}}"#)
        #expect(nested?.id == .number(-3))
        #expect(nested?.params == .object(["name": .string("a b"), "duration": .number(15), "alignToClock": .bool(false)]))
    }

    @Test func timesOnTheWireAreRFC3339DateTimes() throws {
        let utc = try #require(WireCoding.parseDate("2026-11-21T09:30:00Z"))
        #expect(utc.timeIntervalSince1970 == 1_795_253_400)
        #expect(WireCoding.parseDate("2026-11-21T10:30:00+01:00") == utc)
        #expect(WireCoding.parseDate("2026-11-21t09:30:00z") == utc)
        let fraction = try #require(WireCoding.parseDate("2026-11-21T09:30:00.25Z"))
        #expect(abs(fraction.timeIntervalSince1970 - 1_795_253_400.25) < 1e-6)
        // What recd writes reads back to the millisecond.
        #expect(WireCoding.parseDate(WireCoding.formatDate(fraction)) == fraction)
        for bad in ["2026-11-21", "2026-11-21T09:30:00", "2026-11-21T09:30Z", "2026-11-21T09:30:00+0100",
                    "2026-11-21T09:30:00+24:00", "2026-11-21T09:30:00Z ", "tomorrow", ""] {
            #expect(WireCoding.parseDate(bad) == nil, "\(bad)")
        }
    }
}
