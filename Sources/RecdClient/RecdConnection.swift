import FoundationEssentials
import Glibc
import RecdProtocol

/// Why a call to recd did not return a result.
public enum ClientError: Error, CustomStringConvertible, Sendable, Equatable {
    /// No daemon listens at the path (or the socket cannot be reached).
    case cannotConnect(path: String, reason: String)
    /// The daemon answered with a JSON-RPC error.
    case rpc(RPCError)
    /// The connection closed before the answer arrived.
    case closed
    /// Nothing arrived in time.
    case timedOut
    /// The answer was not what the protocol says.
    case malformed(String)

    public var description: String {
        switch self {
        case .cannotConnect(let path, let reason): "cannot connect to recd at \(path): \(reason)"
        case .rpc(let error): error.message
        case .closed: "recd closed the connection"
        case .timedOut: "recd did not answer in time"
        case .malformed(let detail): "unexpected answer from recd: \(detail)"
        }
    }
}

/// A blocking connection to recd's socket: write a request line, read lines until its answer.
/// Notifications that arrive meanwhile are kept for `nextNotification`.
public final class RecdConnection {
    public let path: String
    private let fd: Int32
    /// Bytes read and not yet taken, from `taken` on (taking a line moves `taken`, not the
    /// bytes after it: a page's 40 lines a second were each a copy of the rest).
    private var buffer: [UInt8] = []
    private var taken = 0
    /// What read(2) fills, kept from one read to the next.
    private var chunk = [UInt8](repeating: 0, count: 65536)
    private var nextID: Int64 = 1
    /// The source every request that acts on one names (`source`: recctl's `--source`); nil:
    /// the station's only source.
    public var source: String?
    private var notifications: [ChangedNotification.Params] = []
    private let encoder = WireCoding.encoder()
    private let decoder = WireCoding.decoder()

    /// Connects to `path`.
    public init(path: String) throws(ClientError) {
        self.path = path
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .cannotConnect(path: path, reason: String(cString: strerror(errno))) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw .cannotConnect(path: path, reason: "path too long for a Unix socket")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw .cannotConnect(path: path, reason: reason)
        }
        self.fd = fd
    }

    deinit { close(fd) }

    /// Calls a method that takes no params.
    public func call<Result: Decodable>(_ method: RecdProtocol.Method, as type: Result.Type = Result.self,
                                        timeout: Double? = 30) throws(ClientError) -> Result {
        try call(method, Empty?.none, as: type, timeout: timeout)
    }

    /// Calls `method` and decodes its result.
    public func call<Result: Decodable>(_ method: RecdProtocol.Method, _ params: (some Encodable & Sendable)?,
                                        as type: Result.Type = Result.self, timeout: Double? = 30) throws(ClientError) -> Result {
        let id = RPCID.number(nextID)
        nextID += 1
        let data: Data
        do {
            if let source, method.takesSource {
                data = try encoder.encode(Request(id: id, method: method, params: SourcedParams(params: params, source: source)))
            } else {
                data = try encoder.encode(Request(id: id, method: method, params: params))
            }
        } catch {
            throw .malformed("cannot encode request: \(error)")
        }
        try send(line: data)
        let line = try response(to: id, deadline: timeout.map { Date().addingTimeInterval($0) })
        do {
            return try decoder.decode(Response<ResultBox<Result>>.self, from: line).result.value
        } catch {
            throw .malformed("\(error)")
        }
    }

    /// Calls `method` with params already in JSON (an object, or nil for none) and returns the
    /// response line as recd wrote it. recd-web passes a page's params through this way: recd
    /// is the one place where they are parsed.
    public func call(_ method: RecdProtocol.Method, paramsJSON: [UInt8]?, timeout: Double? = 30) throws(ClientError) -> Data {
        let id = RPCID.number(nextID)
        nextID += 1
        var request = Array(#"{"jsonrpc":"2.0","id":\#(nextID - 1),"method":"\#(method.rawValue)""#.utf8)
        if let paramsJSON {
            // A line break outside a string is whitespace in JSON, and inside one it is invalid
            // anyway: blanking it keeps the request one line.
            request += Array(#","params":"#.utf8) + paramsJSON.map { $0 == 10 || $0 == 13 ? 32 : $0 }
        }
        request += Array("}\n".utf8)
        try send(raw: request)
        return try response(to: id, deadline: timeout.map { Date().addingTimeInterval($0) })
    }

    /// The response line to request `id` (notifications that come first are kept for
    /// `nextNotification`); an error response is thrown.
    private func response(to id: RPCID, deadline: Date?) throws(ClientError) -> Data {
        while true {
            let line = try readLine(deadline: deadline)
            guard let envelope = try? decoder.decode(ResponseEnvelope.self, from: line) else {
                throw .malformed(String(decoding: line, as: UTF8.self))
            }
            if envelope.method == ChangedNotification.method {
                if let notification = try? decoder.decode(ChangedNotification.self, from: line) {
                    notifications.append(notification.params)
                }
                continue
            }
            guard envelope.id == id || envelope.id == nil else { continue }
            if let error = envelope.error { throw .rpc(error) }
            return line
        }
    }

    /// The next `changed` notification (waiting up to `timeout` seconds; nil waits forever).
    public func nextNotification(timeout: Double? = nil) throws(ClientError) -> ChangedNotification.Params {
        if !notifications.isEmpty { return notifications.removeFirst() }
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        while true {
            let line = try readLine(deadline: deadline)
            if let notification = try? decoder.decode(ChangedNotification.self, from: line) {
                return notification.params
            }
        }
    }

    /// Writes bytes as they are (tests use this to send malformed input).
    public func send(raw: [UInt8]) throws(ClientError) {
        var offset = 0
        while offset < raw.count {
            // MSG_NOSIGNAL: a daemon that closed the connection is an error here, not SIGPIPE.
            let written = raw[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                if errno == EINTR { continue }
                throw .closed
            }
            offset += written
        }
    }

    /// Reads one line (without its `\n`) as bytes.
    public func readLine(timeout: Double?) throws(ClientError) -> Data {
        try readLine(deadline: timeout.map { Date().addingTimeInterval($0) })
    }

    /// Fills `destination` with the next bytes on the connection (after any line already
    /// buffered): false at the end of the stream before the first byte, `closed` in the middle.
    public func readExactly(into destination: UnsafeMutableRawBufferPointer) throws(ClientError) -> Bool {
        compact()
        var filled = min(buffer.count, destination.count)
        if filled > 0 {
            buffer.withUnsafeBytes { destination.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: filled) }
            buffer.removeFirst(filled)
        }
        while filled < destination.count {
            let count = read(fd, destination.baseAddress! + filled, destination.count - filled)
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw .closed
            }
            if count == 0 {
                if filled == 0 { return false }
                throw .closed
            }
            filled += count
        }
        return true
    }

    /// Half-closes the connection: the daemon sees end of input.
    public func shutdownWriting() { shutdown(fd, Int32(SHUT_WR)) }

    /// Ends the connection from another thread: a read waiting in it returns (`closed`) at
    /// once. The descriptor stays open until the connection is released.
    public func interrupt() { shutdown(fd, Int32(SHUT_RDWR)) }

    private func send(line: Data) throws(ClientError) {
        var bytes = [UInt8](line)
        bytes.append(UInt8(ascii: "\n"))
        try send(raw: bytes)
    }

    /// Drops the bytes already taken.
    private func compact() {
        if taken == buffer.count {
            buffer.removeAll(keepingCapacity: true)
        } else if taken > 0 {
            buffer.removeSubrange(..<taken)
        }
        taken = 0
    }

    /// Whether a whole line is already read (the next `readLine` returns without waiting).
    public var hasBufferedLine: Bool { buffer[taken...].contains(UInt8(ascii: "\n")) }

    private func readLine(deadline: Date?) throws(ClientError) -> Data {
        while true {
            if let newline = buffer[taken...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = Data(buffer[taken..<newline])
                taken = newline + 1
                if taken == buffer.count || taken >= 65536 { compact() }
                return line
            }
            if let deadline {
                let remaining = deadline.timeIntervalSinceNow
                if remaining <= 0 { throw .timedOut }
                var pollfd = Glibc.pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let ready = poll(&pollfd, 1, Int32(min(remaining * 1000, 60_000)) + 1)
                if ready == 0 { continue }
                if ready < 0 && errno != EINTR { throw .closed }
            }
            let fd = self.fd
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw .closed
            }
            if count == 0 {
                // An end of file in the middle of a line: the answer was cut short.
                if buffer.count > taken { throw .malformed("the connection closed in the middle of a line") }
                throw .closed
            }
            buffer.append(contentsOf: chunk[..<count])
        }
    }

    /// Where recd listens: `RECD_SOCKET`, else the user instance's socket when one exists
    /// (`$XDG_RUNTIME_DIR/recd/recd.sock`, or `/tmp/recd-<uid>/recd/recd.sock` without
    /// `XDG_RUNTIME_DIR`, as recd itself chooses), else the system one (`SocketLocation`).
    public static func defaultSocketPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        SocketLocation.forClient(environment: environment)
    }
}

/// Enough of any incoming line to tell a response from a notification.
private struct ResponseEnvelope: Decodable {
    var id: RPCID?
    var method: String?
    var error: RPCError?
}

/// Decodes a result that may be any Decodable (Response needs Codable & Sendable).
private struct ResultBox<Value: Decodable>: Codable, @unchecked Sendable {
    // @unchecked: only ever created and read on the calling thread.
    var value: Value
    init(from decoder: Decoder) throws { value = try Value(from: decoder) }
    func encode(to encoder: Encoder) throws {}
}

/// A request's params with `source` beside its own members (one object on the wire).
private struct SourcedParams<Params: Encodable & Sendable>: Encodable, Sendable {
    let params: Params?
    let source: String

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    func encode(to encoder: any Encoder) throws {
        try params?.encode(to: encoder)
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(source, forKey: Key(stringValue: "source"))
    }
}
