import NIOCore
@testable import RTSP
import Testing

/// recd-rtsp's protocol pieces on their own: the request decoder, Digest against RFC 2617's own
/// example, NTP times, and RTP/RTCP bytes as RFC 3550 lays them out.
@Suite("RTSP protocol")
struct RTSPProtocolTests {
    @Test func requestsAndInterleavedFramesAreSplitWhereverTheBytesBreak() throws {
        let text = "DESCRIBE rtsp://host:8554/live RTSP/1.0\r\nCSeq: 2\r\nAccept: application/sdp\r\n\r\n"
            + "SET_PARAMETER rtsp://host:8554/live RTSP/1.0\r\nCSeq: 3\r\ncontent-length: 5\r\n\r\nhello"
        var bytes = Array(text.utf8)
        bytes += [UInt8(ascii: "$"), 1, 0, 3, 9, 9, 9]  // an RTCP receiver report on channel 1
        bytes += Array("GET_PARAMETER * RTSP/1.0\r\nCSeq: 4\r\n\r\n".utf8)
        // Fed one byte at a time and all at once: the same messages.
        for step in [1, 7, bytes.count] {
            var buffer = ByteBuffer()
            var messages: [RTSPInbound] = []
            var offset = 0
            while offset < bytes.count {
                buffer.writeBytes(bytes[offset..<min(bytes.count, offset + step)])
                offset += step
                while let message = try RTSPDecoder.next(from: &buffer) { messages.append(message) }
            }
            #expect(messages.count == 4, "step \(step)")
            guard case .request(let describe) = messages[0], case .request(let set) = messages[1],
                  case .interleaved(let channel, let length) = messages[2], case .request(let keepalive) = messages[3] else {
                Issue.record("\(messages)")
                continue
            }
            #expect(describe.method == "DESCRIBE" && describe.header("cseq") == "2" && describe.path == ("/live", nil))
            #expect(set.body == Array("hello".utf8))
            #expect(channel == 1 && length == 3)
            #expect(keepalive.method == "GET_PARAMETER" && keepalive.uri == "*")
        }
        var setup = ByteBuffer(string: "SETUP rtsp://h/live/trackID=0 RTSP/1.0\r\nCSeq: 5\r\n\r\n")
        guard case .request(let request) = try RTSPDecoder.next(from: &setup) else { Issue.record("no request"); return }
        #expect(request.path == ("/live", "trackID=0"))
    }

    @Test func malformedAndOversizedRequestsAreRefused() {
        var http = ByteBuffer(string: "GET / HTTP/1.1\r\n\r\n")
        #expect(throws: RTSPDecoder.Malformed.self) { try RTSPDecoder.next(from: &http) }
        var long = ByteBuffer(string: "OPTIONS * RTSP/1.0\r\nX: " + String(repeating: "a", count: RTSPDecoder.maximumHead) + "\r\n\r\n")
        #expect(throws: RTSPDecoder.Malformed.self) { try RTSPDecoder.next(from: &long) }
        var body = ByteBuffer(string: "ANNOUNCE * RTSP/1.0\r\nContent-Length: 999999\r\n\r\n")
        #expect(throws: RTSPDecoder.Malformed.self) { try RTSPDecoder.next(from: &body) }
    }

    /// RFC 2617, section 3.5: Mufasa's request to testrealm@host.com.
    @Test func digestAcceptsRFC2617sExampleAndRefusesAnyChange() {
        let digest = DigestAuthentication(tokens: ["another-token", "Circle Of Life"], realm: "testrealm@host.com", nonce: "dcd98b7102dd2f0e8b11d0f600bfb0c093")
        let header = #"Digest username="Mufasa", realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", uri="/dir/index.html", qop=auth, nc=00000001, cnonce="0a4f113b", response="6629fae49393a05397450978507c4ef1", opaque="5ccc069c403ebaf9f0171e9517f40e41""#
        #expect(digest.accepts(header, method: "GET"), "the second of two tokens")
        #expect(!digest.accepts(header, method: "PLAY"), "the method is in the hash")
        #expect(!digest.accepts(header.replacing("6629f", with: "6629e"), method: "GET"))
        #expect(!DigestAuthentication(tokens: ["Circle of Life"], realm: "testrealm@host.com", nonce: "dcd98b7102dd2f0e8b11d0f600bfb0c093")
                    .accepts(header, method: "GET"), "another password")
        #expect(!digest.accepts(nil, method: "GET") && !digest.accepts("Basic TXVmYXNhOkNpcmNsZSBPZiBMaWZl", method: "GET"))
        // RFC 2069's form (no qop), as ffmpeg answers: MD5(HA1:nonce:HA2).
        let plain = DigestAuthentication(tokens: ["secret"], realm: "recd", nonce: "abc")
        let ha1 = DigestAuthentication.md5("birdnet:recd:secret"), ha2 = DigestAuthentication.md5("DESCRIBE:rtsp://h/live")
        let response = DigestAuthentication.md5("\(ha1):abc:\(ha2)")
        #expect(plain.accepts(#"Digest username="birdnet", realm="recd", nonce="abc", uri="rtsp://h/live", response="\#(response)""#, method: "DESCRIBE"))
        #expect(DigestAuthentication.md5("") == "d41d8cd98f00b204e9800998ecf8427e")
    }

    @Test func ntpTimesAndTheSenderReportsBytes() {
        let time = NTPTime(unixTime: 1_795_000_000.25)
        #expect(time.seconds == UInt32(truncatingIfNeeded: Int64(1_795_000_000) + 2_208_988_800), "NTP's era 0 wraps in 2036")
        #expect(time.fraction == 1 << 30)
        #expect(abs(time.unixTime - 1_795_000_000.25) < 1e-6)
        var buffer = ByteBuffer()
        RTP.writeSenderReport(channel: 1, ssrc: 0xDEADBEEF, ntp: time, rtpTimestamp: 123456, packets: 10, octets: 9600, cname: "recd-rtsp", into: &buffer)
        let bytes = Array(buffer.readableBytesView)
        #expect(bytes[0] == UInt8(ascii: "$") && bytes[1] == 1)
        #expect(Int(bytes[2]) << 8 | Int(bytes[3]) == bytes.count - 4)
        #expect(bytes[4] == 0x80 && bytes[5] == 200 && bytes[6] == 0 && bytes[7] == 6)
        #expect(bytes[8...11] == [0xDE, 0xAD, 0xBE, 0xEF])
        #expect((bytes.count - 4) % 4 == 0, "RTCP packets are whole 32-bit words")
        #expect(bytes[32] == 0x81 && bytes[33] == 202, "an SDES with the CNAME follows")
        var packet = ByteBuffer()
        let payload = ByteBuffer(bytes: [1, 2, 3, 4])
        RTP.writePacket(channel: 0, sequence: 65535, timestamp: 0xFFFF_FFFF, ssrc: 7, payload: payload.readableBytesView, into: &packet)
        #expect(Array(packet.readableBytesView) == [36, 0, 0, 16, 0x80, 96, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 7, 1, 2, 3, 4])
    }
}
