import AudioGraph
import Dispatch
import FoundationEssentials
import Hummingbird
import NIOConcurrencyHelpers
import RecdClient
import RecdProtocol

/// recd-web's side of recd's socket. Each request and each open page has a connection of its
/// own, read by a blocking thread (RecdClient), never on Swift's cooperative pool; recd decides
/// what a connection may do and computes levels and the spectrum once for all of them.
struct RecdBridge: Sendable {
    let socketPath: String

    /// Calls `method` with `params` (JSON as the page sent it; recd parses it) and returns
    /// recd's whole response line.
    func call(_ method: RecdProtocol.Method, paramsJSON: [UInt8]? = nil) async throws -> Data {
        let socketPath = socketPath
        return try await Self.blocking { () throws(ClientError) -> Data in
            try RecdConnection(path: socketPath).call(method, paramsJSON: paramsJSON)
        }
    }

    func metrics() async throws -> String {
        let socketPath = socketPath
        return try await Self.blocking { () throws(ClientError) -> String in
            try RecdConnection(path: socketPath).call(.metrics, as: MetricsResult.self).text
        }
    }

    /// Subscriptions' lines as recd writes them, on one connection: each `subscribe` response
    /// (with its snapshot) first, one per element of `paramsJSON`, then `changed` notifications, those that came within `batch` seconds
    /// of the first joined by line breaks, until the page goes. A page that reads
    /// too slowly loses the oldest lines, never recd's time.
    ///
    /// Batched because every message costs the same hops whatever its size (this thread, the
    /// cooperative pool, NIO's event loop, a TCP send): the page's levels and spectrum
    /// columns, 30 lines a second, go as 10 messages, and a viewer costs half as much.
    func subscription(paramsJSON: [[UInt8]], batch: Double) -> AsyncThrowingStream<Data, any Error> {
        let socketPath = socketPath
        return AsyncThrowingStream(bufferingPolicy: .bufferingNewest(256)) { continuation in
            let connection: RecdConnection
            do throws(ClientError) { connection = try RecdConnection(path: socketPath) } catch {
                continuation.finish(throwing: Self.httpError(error))
                return
            }
            let shared = SharedConnection(connection)
            continuation.onTermination = { _ in shared.interrupt() }
            DedicatedThread.spawn(name: "recd-web-live") {
                do throws(ClientError) {
                    for params in paramsJSON { continuation.yield(try shared.connection.call(.subscribe, paramsJSON: params)) }
                    while true {
                        var lines = try shared.connection.readLine(timeout: nil)
                        // The monotonic clock: a step of the wall clock (NTP on a board without
                        // a real-time clock) must not stretch the batch.
                        let until = ContinuousClock.now.advanced(by: .milliseconds(Int(batch * 1000)))
                        while true {
                            let left = ContinuousClock.now.duration(to: until).components
                            let remaining = Double(left.seconds) + Double(left.attoseconds) / 1e18
                            guard shared.connection.hasBufferedLine || remaining > 0 else { break }
                            let next: Data
                            do throws(ClientError) {
                                next = try shared.connection.readLine(timeout: shared.connection.hasBufferedLine ? nil : remaining)
                            } catch .timedOut { break } catch { throw error }
                            lines.append(UInt8(ascii: "\n"))
                            lines.append(next)
                        }
                        continuation.yield(lines)
                    }
                } catch {
                    continuation.finish(throwing: Self.httpError(error))
                }
            }
        }
    }

    /// A tap's chunks as recd writes them (the 40-byte header, then the samples), the answer
    /// first as a line of JSON. A listener who falls more than ~0.5 s behind loses chunks;
    /// the next chunk's header then says how many frames are missing.
    /// `source`: the station's source to tap (nil: the only one).
    func tap(_ params: TapParams, source: String? = nil) -> AsyncThrowingStream<TapChunk, any Error> {
        let socketPath = socketPath
        return AsyncThrowingStream(bufferingPolicy: .bufferingNewest(64)) { continuation in
            let reader: TapReader
            do throws(ClientError) { reader = try TapReader(path: socketPath, params: params, source: source) } catch {
                continuation.finish(throwing: Self.httpError(error))
                return
            }
            let shared = SharedConnection(reader.connection)
            continuation.onTermination = { _ in shared.interrupt() }
            continuation.yield(.answer(reader.result))
            nonisolated(unsafe) let unsharedReader = reader
            DedicatedThread.spawn(name: "recd-web-audio") {
                do throws(ClientError) {
                    while let chunk = try unsharedReader.next() {
                        continuation.yield(.audio(header: chunk.header, payload: chunk.payload))
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: Self.httpError(error))
                }
            }
        }
    }

    enum TapChunk: Sendable {
        case answer(TapResult)
        case audio(header: TapChunkHeader, payload: [UInt8])
    }

    /// Requests: short calls, each on a connection of its own. A subscription or a tap is read
    /// by a thread of its own instead (DedicatedThread), for as long as the page is open.
    private static let readers = DispatchQueue(label: "recd-web.requests", attributes: .concurrent)

    private static func blocking<T: Sendable>(_ work: @escaping @Sendable () throws(ClientError) -> T) async throws -> T {
        let result: Result<T, ClientError> = await withCheckedContinuation { continuation in
            readers.async {
                do throws(ClientError) { continuation.resume(returning: .success(try work())) } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        switch result {
        case .success(let value): return value
        case .failure(let error): throw httpError(error)
        }
    }

    /// What the page is told when recd could not answer: recd's own error, with an HTTP
    /// status that says whose fault it is.
    static func httpError(_ error: ClientError) -> any Error {
        switch error {
        case .cannotConnect(let path, let reason):
            return HTTPError(.serviceUnavailable, message: "recd is not running (\(path): \(reason))")
        case .rpc(let rpc):
            let status: HTTPResponse.Status = switch rpc.code {
            case RPCErrorCode.permissionDenied: .forbidden
            case RPCErrorCode.invalidParams, RPCErrorCode.invalidRequest, RPCErrorCode.parseError: .badRequest
            case RPCErrorCode.notFound: .notFound
            case RPCErrorCode.tooManyClients: .serviceUnavailable
            case RPCErrorCode.recorderError: .conflict
            default: .badGateway
            }
            let hint = rpc.code == RPCErrorCode.permissionDenied
                ? " (recd-web's user needs it on recd's socket: server.control_users or server.tap_users)" : ""
            return HTTPError(status, message: rpc.message + hint)
        case .closed, .timedOut, .malformed:
            return HTTPError(.badGateway, message: error.description)
        }
    }
}

/// A connection read by one thread while another may interrupt it: RecdConnection's
/// `interrupt()` is a shutdown(2), safe beside a blocked read.
private final class SharedConnection: @unchecked Sendable {
    let connection: RecdConnection
    init(_ connection: RecdConnection) { self.connection = connection }
    func interrupt() { connection.interrupt() }
}
