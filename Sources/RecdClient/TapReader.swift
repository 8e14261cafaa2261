import FoundationEssentials
import RecdProtocol

/// A tap: the input's audio in the format asked for, chunk by chunk (doc/protocol.md, "Taps").
///
///     let tap = try TapReader(params: TapParams(rate: 16000, channels: 1))
///     while let chunk = try tap.next() { analyze(chunk.payload, at: chunk.header.captureTime) }
public final class TapReader {
    public let connection: RecdConnection
    /// The format and what the stream begins with.
    public let result: TapResult
    private var headerBytes: [UInt8]

    /// Connects and asks for the tap (of `source`; nil: the station's only one); chunks follow.
    public init(path: String = RecdConnection.defaultSocketPath(), params: TapParams, source: String? = nil) throws(ClientError) {
        connection = try RecdConnection(path: path)
        connection.source = source
        result = try connection.call(.tap, params, timeout: 60)
        headerBytes = [UInt8](repeating: 0, count: max(result.headerBytes, TapChunkHeader.size))
    }

    /// The next chunk; nil when recd ended the stream (it stops, or the device is gone).
    public func next() throws(ClientError) -> (header: TapChunkHeader, payload: [UInt8])? {
        let connection = connection
        let more = try headerBytes.withUnsafeMutableBytes { bytes in
            Result { () throws(ClientError) in try connection.readExactly(into: bytes) }
        }.get()
        guard more else { return nil }
        guard let header = headerBytes.withUnsafeBytes({ TapChunkHeader($0) }) else {
            throw .malformed("a tap chunk without its header")
        }
        var payload = [UInt8](repeating: 0, count: Int(header.payloadBytes))
        let complete = try payload.withUnsafeMutableBytes { bytes in
            Result { () throws(ClientError) in try connection.readExactly(into: bytes) }
        }.get()
        guard complete || payload.isEmpty else { throw .closed }
        return (header, payload)
    }
}
