import Dispatch
import FoundationEssentials
import Glibc
import NIOConcurrencyHelpers
import RecdProtocol

/// What a `RecorderClient.changes` sequence delivers.
public enum RecorderChange: Sendable, Equatable {
    /// Connected (first, or again after recd restarted): every subscribed topic's current value.
    /// It replaces whatever the consumer knew; `seq` numbers restart with a restarted recd.
    case connected([TopicUpdate])
    /// One topic's new value.
    case changed(TopicUpdate)
    /// The connection ended (recd stopped or restarted); `connected` follows once recd is back.
    case disconnected(String)
}

/// recd for other Swift programs: methods as async functions, and the recorder's changes as an
/// `AsyncSequence` that reconnects by itself when recd restarts.
///
///     let recd = RecorderClient()
///     let recording = try await recd.start(StartParams(name: "take", format: .flac))
///     for await change in recd.changes(topics: [.state, .currentTime]) {
///         if case .changed(let update) = change, case .state(.finished(let done)) = update.value {
///             print("finished", done.path)
///             break
///         }
///     }
///
/// Each call opens a connection of its own and runs off the caller's thread (the socket is
/// blocking), so calls may be made from any task concurrently.
public final class RecorderClient: Sendable {
    public let socketPath: String

    /// - Parameter socketPath: recd's socket; by default RECD_SOCKET, the user instance's
    ///   socket if there is one, else the system's.
    public init(socketPath: String = RecdConnection.defaultSocketPath()) {
        self.socketPath = socketPath
    }

    /// Calls `method` with `params` and decodes its result.
    public func call<Result: Decodable & Sendable>(_ method: RecdProtocol.Method, _ params: (some Encodable & Sendable)?,
                                                   as type: Result.Type = Result.self) async throws(ClientError) -> Result {
        let path = socketPath
        let result: Swift.Result<Result, ClientError> = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(returning: Swift.Result { () throws(ClientError) in
                    try RecdConnection(path: path).call(method, params, as: type)
                })
            }
        }
        return try result.get()
    }

    /// Calls a method that takes no params.
    public func call<Result: Decodable & Sendable>(_ method: RecdProtocol.Method,
                                                   as type: Result.Type = Result.self) async throws(ClientError) -> Result {
        try await call(method, Empty?.none, as: type)
    }

    public func status() async throws(ClientError) -> StatusResult { try await call(.status) }
    public func start(_ params: StartParams = StartParams()) async throws(ClientError) -> Recording { try await call(.start, params) }
    public func stop() async throws(ClientError) -> Recording { try await call(.stop) }
    public func pause() async throws(ClientError) -> StateResult { try await call(.pause) }
    public func resume() async throws(ClientError) -> StateResult { try await call(.resume) }

    /// The recorder's changes: `connected` with a snapshot, then every change, for as long as
    /// the consumer iterates. When recd goes away the sequence says `disconnected`, tries again
    /// every `retryDelay` seconds, and says `connected` with a fresh snapshot once recd is back.
    ///
    /// Discrete topics (state, error, recording) arrive in order, continuous ones (currentTime,
    /// levels) at most once per `interval`. A consumer that falls more than 1024 changes behind
    /// loses the oldest.
    public func changes(topics: [Topic] = Topic.allCases, interval: Double = SubscribeParams.defaultInterval,
                        retryDelay: Double = 0.5) -> AsyncStream<RecorderChange> {
        let path = socketPath
        return AsyncStream(bufferingPolicy: .bufferingNewest(1024)) { continuation in
            let reader = SubscriptionReader()
            let wake = DispatchSemaphore(value: 0)
            continuation.onTermination = { _ in
                reader.cancel()
                wake.signal()
            }
            DispatchQueue(label: "recd.client.subscription").async {
                var connected = false
                while !reader.isCancelled {
                    do throws(ClientError) {
                        let connection = try RecdConnection(path: path)
                        defer { _ = reader.reads(nil) }
                        guard reader.reads(connection) else { break }
                        let subscription: SubscribeResult = try connection.call(
                            .subscribe, SubscribeParams(topics: topics, interval: interval))
                        connected = true
                        continuation.yield(.connected(subscription.snapshot))
                        while true {
                            let notification = try connection.nextNotification()
                            continuation.yield(.changed(TopicUpdate(value: notification.value, seq: notification.seq,
                                                                    timestamp: notification.timestamp)))
                        }
                    } catch {
                        if reader.isCancelled { break }
                        if connected { continuation.yield(.disconnected(error.description)) }
                        connected = false
                        _ = wake.wait(timeout: .now() + retryDelay)
                    }
                }
                continuation.finish()
            }
        }
    }
}

/// The connection a `changes` sequence reads, shared with the consumer's end: ending the
/// sequence interrupts the read in it at once, so the reader waits without a timeout.
// @unchecked: `connection` and `cancelled` are touched only under `lock` (a pthread lock, which
// ThreadSanitizer sees); of the connection only `interrupt()` (shutdown(2), safe while another
// thread reads) is called from the consumer's side.
private final class SubscriptionReader: @unchecked Sendable {
    private let lock = NIOLock()
    private var connection: RecdConnection?
    private var cancelled = false

    var isCancelled: Bool { lock.withLock { cancelled } }

    func cancel() {
        lock.withLock {
            cancelled = true
            connection?.interrupt()
        }
    }

    /// The connection now read (nil: none); false if the sequence has ended already.
    func reads(_ connection: RecdConnection?) -> Bool {
        lock.withLock {
            self.connection = connection
            return !cancelled
        }
    }
}
