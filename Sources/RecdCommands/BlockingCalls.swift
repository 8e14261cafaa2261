import NIOPosix

/// The one boundary between async code and blocking work: the Recorder's operations (which
/// open devices and finalize files), reading the configuration again, stopping libmosquitto.
/// Every async caller — the socket's connections, the service's start-up and shutdown, SIGHUP,
/// the MQTT bridge's stop — runs such work here, on one pool of dedicated threads, never on the
/// cooperative pool, an event loop or Dispatch's global queues.
public final class BlockingCalls: Sendable {
    private let pool: NIOThreadPool

    /// Starts `threads` threads. Four: a `start` that waits for a device and a `stop` that
    /// finalizes a long file must not hold up `recordings.list`.
    public init(threads: Int = 4) {
        pool = NIOThreadPool(numberOfThreads: threads)
        pool.start()
    }

    /// Runs `body` on the pool and returns what it returns. Throws only when the pool has been
    /// shut down (recd is stopping).
    public func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async throws -> T {
        try await pool.runIfActive(body)
    }

    /// Waits for the work under way and stops the threads: once every service has stopped.
    public func shutdown() async {
        try? await pool.shutdownGracefully()
    }
}
