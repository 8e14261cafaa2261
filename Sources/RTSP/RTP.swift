import NIOCore

/// RTP (RFC 3550) as recd-rtsp sends it over RTSP's TCP connection: each packet inside an
/// interleaved frame (`$`, channel, length), RTP on the even channel, RTCP on the odd one.
public enum RTP {
    /// The dynamic payload type the SDP maps to the stream's codec.
    public static let payloadType: UInt8 = 96

    /// Appends an interleaved frame holding an RTP packet: header, then `payload`.
    public static func writePacket(channel: UInt8, sequence: UInt16, timestamp: UInt32, ssrc: UInt32, marker: Bool = false,
                                   payload: ByteBufferView, into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "$"))
        buffer.writeInteger(channel)
        buffer.writeInteger(UInt16(12 + payload.count))
        buffer.writeInteger(UInt8(0x80))  // version 2, no padding, no extension, no CSRC
        buffer.writeInteger((marker ? 0x80 : 0) | payloadType)
        buffer.writeInteger(sequence)
        buffer.writeInteger(timestamp)
        buffer.writeInteger(ssrc)
        buffer.writeBytes(payload)
    }

    /// Appends an interleaved frame holding an RTCP sender report (with an SDES CNAME, as RFC
    /// 3550 asks of every compound packet): `ntp` is the capture time of the frame whose RTP
    /// timestamp is `rtpTimestamp`.
    public static func writeSenderReport(channel: UInt8, ssrc: UInt32, ntp: NTPTime, rtpTimestamp: UInt32,
                                         packets: UInt32, octets: UInt32, cname: String, into buffer: inout ByteBuffer) {
        let name = Array(cname.utf8.prefix(255))
        // SDES: header (4), SSRC (4), CNAME item (2 + name), end (1), padded to 32 bits.
        let sdesLength = (4 + 4 + 2 + name.count + 1 + 3) / 4 * 4
        buffer.writeInteger(UInt8(ascii: "$"))
        buffer.writeInteger(channel)
        buffer.writeInteger(UInt16(28 + sdesLength))
        buffer.writeInteger(UInt8(0x80))
        buffer.writeInteger(UInt8(200))  // SR
        buffer.writeInteger(UInt16(6))   // length in 32-bit words minus one
        buffer.writeInteger(ssrc)
        buffer.writeInteger(ntp.seconds)
        buffer.writeInteger(ntp.fraction)
        buffer.writeInteger(rtpTimestamp)
        buffer.writeInteger(packets)
        buffer.writeInteger(octets)
        buffer.writeInteger(UInt8(0x81))  // SDES, one chunk
        buffer.writeInteger(UInt8(202))
        buffer.writeInteger(UInt16(sdesLength / 4 - 1))
        buffer.writeInteger(ssrc)
        buffer.writeInteger(UInt8(1))     // CNAME
        buffer.writeInteger(UInt8(name.count))
        buffer.writeBytes(name)
        buffer.writeRepeatingByte(0, count: sdesLength - (4 + 4 + 2 + name.count))
    }
}

/// A time as NTP writes it: seconds since 1900 and a binary fraction.
public struct NTPTime: Sendable, Equatable {
    public var seconds: UInt32
    public var fraction: UInt32

    /// From seconds since 1970 (finite: a caller checks).
    public init(unixTime: Double) {
        let ntp = unixTime.isFinite ? unixTime + 2_208_988_800 : 0
        let whole = ntp.rounded(.down)
        seconds = UInt32(truncatingIfNeeded: Int64(whole))
        fraction = UInt32(min(4_294_967_295, ((ntp - whole) * 4_294_967_296).rounded()))
    }

    public var unixTime: Double { Double(seconds) - 2_208_988_800 + Double(fraction) / 4_294_967_296 }
}
