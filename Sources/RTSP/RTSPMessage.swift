import NIOCore

/// A request as RTSP 1.0 (RFC 2326) sends it: a request line, headers, an optional body.
public struct RTSPRequest: Sendable, Equatable {
    public var method: String
    public var uri: String
    public var version: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(method: String, uri: String, version: String = "RTSP/1.0", headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.method = method
        self.uri = uri
        self.version = version
        self.headers = headers
        self.body = body
    }

    /// The URI's path and track: `rtsp://host:port/live/trackID=0` → ("/live", "trackID=0").
    public var path: (path: String, track: String?) {
        var rest = Substring(uri)
        if let scheme = rest.firstRange(of: "://") {
            rest = rest[scheme.upperBound...]
            rest = rest[(rest.firstIndex(of: "/") ?? rest.endIndex)...]
        }
        if let query = rest.firstIndex(of: "?") { rest = rest[..<query] }
        while rest.hasSuffix("/") { rest = rest.dropLast() }
        if let slash = rest.lastIndex(of: "/"), rest[rest.index(after: slash)...].hasPrefix("trackID=") {
            return (String(rest[..<slash]), String(rest[rest.index(after: slash)...]))
        }
        return (String(rest), nil)
    }

    /// The first header of that name, whatever its case.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    public static func == (a: RTSPRequest, b: RTSPRequest) -> Bool {
        a.method == b.method && a.uri == b.uri && a.version == b.version && a.body == b.body
            && a.headers.map { "\($0.name): \($0.value)" } == b.headers.map { "\($0.name): \($0.value)" }
    }
}

/// What a client sends on an RTSP connection: requests, and (over TCP) interleaved `$` frames —
/// its RTCP receiver reports, which the server reads and drops.
public enum RTSPInbound: Sendable, Equatable {
    case request(RTSPRequest)
    case interleaved(channel: UInt8, bytes: Int)
}

/// Splits an RTSP connection's bytes into requests and interleaved frames. A request's head is
/// at most 16 KiB and its body 64 KiB: more is an error, and the connection closes.
public struct RTSPDecoder: ByteToMessageDecoder {
    public typealias InboundOut = RTSPInbound

    public static let maximumHead = 16 * 1024
    public static let maximumBody = 64 * 1024

    public struct Malformed: Error, CustomStringConvertible {
        public var description: String
    }

    public init() {}

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let message = try Self.next(from: &buffer) else { return .needMoreData }
        context.fireChannelRead(Self.wrapInboundOut(message))
        return .continue
    }

    /// The next whole message at the front of `buffer` (consumed), or nil if it is not all there.
    public static func next(from buffer: inout ByteBuffer) throws -> RTSPInbound? {
        // Some clients send a bare CRLF between requests.
        while let byte = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self), byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "\n") {
            buffer.moveReaderIndex(forwardBy: 1)
        }
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return nil }
        if first == UInt8(ascii: "$") {
            // '$', channel, 16-bit length, then that many bytes.
            guard buffer.readableBytes >= 4, let channel = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self),
                  let length = buffer.getInteger(at: buffer.readerIndex + 2, as: UInt16.self) else { return nil }
            guard buffer.readableBytes >= 4 + Int(length) else { return nil }
            buffer.moveReaderIndex(forwardBy: 4 + Int(length))
            return .interleaved(channel: channel, bytes: Int(length))
        }
        let view = buffer.readableBytesView
        guard let end = Self.endOfHead(view) else {
            if view.count > maximumHead { throw Malformed(description: "a request head longer than \(maximumHead) bytes") }
            return nil
        }
        let headLength = end - view.startIndex
        guard headLength <= maximumHead else { throw Malformed(description: "a request head longer than \(maximumHead) bytes") }
        let head = String(decoding: view[view.startIndex..<end], as: UTF8.self)
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let parts = lines[0].split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("RTSP/") else {
            throw Malformed(description: "not an RTSP request line: \(lines[0].prefix(80))")
        }
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw Malformed(description: "a header without a colon: \(line.prefix(80))") }
            headers.append((String(line[..<colon]).trimmed, String(line[line.index(after: colon)...]).trimmed))
        }
        var request = RTSPRequest(method: String(parts[0]), uri: String(parts[1]), version: String(parts[2]), headers: headers)
        let length = Int(request.header("Content-Length") ?? "0") ?? -1
        guard (0...maximumBody).contains(length) else { throw Malformed(description: "Content-Length must be 0 to \(maximumBody)") }
        let headBytes = headLength + 4
        guard buffer.readableBytes >= headBytes + length else { return nil }
        buffer.moveReaderIndex(forwardBy: headBytes)
        request.body = buffer.readBytes(length: length) ?? []
        return .request(request)
    }

    /// Where the blank line that ends a head begins (`\r\n\r\n`).
    static func endOfHead(_ view: ByteBufferView) -> ByteBufferView.Index? {
        var index = view.startIndex
        while index + 3 < view.endIndex {
            if view[index] == 13, view[index + 1] == 10, view[index + 2] == 13, view[index + 3] == 10 { return index }
            index += 1
        }
        return nil
    }
}

/// A response: status line, headers (CSeq first, as the request's), optional body.
public struct RTSPResponse: Sendable {
    public var status: Int
    public var reason: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, reason: String? = nil, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.reason = reason ?? Self.reasons[status] ?? "Status"
        self.headers = headers
        self.body = body
    }

    public func write(into buffer: inout ByteBuffer) {
        buffer.writeString("RTSP/1.0 \(status) \(reason)\r\n")
        for header in headers { buffer.writeString("\(header.name): \(header.value)\r\n") }
        if !body.isEmpty { buffer.writeString("Content-Length: \(body.count)\r\n") }
        buffer.writeString("\r\n")
        buffer.writeBytes(body)
    }

    static let reasons: [Int: String] = [
        200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
        453: "Not Enough Bandwidth", 454: "Session Not Found", 455: "Method Not Valid in This State",
        459: "Aggregate Operation Not Allowed", 461: "Unsupported Transport", 500: "Internal Server Error",
        501: "Not Implemented", 503: "Service Unavailable", 505: "RTSP Version Not Supported",
    ]
}

extension String {
    var trimmed: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed())
    }
}
