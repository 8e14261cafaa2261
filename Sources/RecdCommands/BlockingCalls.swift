import NIOConcurrencyHelpers
import NIOPosix

/// The one boundary between the ways in and blocking work: the Recorder's operations (which
/// open devices and finalize files), reading the configuration again, stopping libmosquitto.
/// Every caller — the socket's connections, the MQTT bridge's commands, its start and stop,
/// the service's start-up and shutdown, SIGHUP — runs such work here, on one pool of dedicated
/// threads, never on the cooperative pool, an event loop or Dispatch's global queues.
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

    /// A lane for work that must run in the order it was submitted (MQTT's commands, as they
    /// arrived), one item at a time, on the same pool.
    public func serialLane() -> SerialLane { SerialLane(pool: pool) }

    /// Waits for the work under way and stops the threads: once every service has stopped.
    public func shutdown() async {
        try? await pool.shutdownGracefully()
    }
}

/// Items run one after another on the `BlockingCalls` pool, in the order submitted: each is
/// handed to the pool when the one before has returned. Once the pool has shut down, what
/// is left is dropped.
public final class SerialLane: Sendable {
    private let pool: NIOThreadPool
    private let pending = NIOLockedValueBox<(items: [@Sendable () -> Void], running: Bool)>(([], false))

    fileprivate init(pool: NIOThreadPool) { self.pool = pool }

    /// Runs `body` after everything submitted before it. Returns at once.
    public func submit(_ body: @escaping @Sendable () -> Void) {
        let idle = pending.withLockedValue { lane -> Bool in
            lane.items.append(body)
            defer { lane.running = true }
            return !lane.running
        }
        if idle { runNext() }
    }

    private func runNext() {
        let next = pending.withLockedValue { lane -> (@Sendable () -> Void)? in
            guard !lane.items.isEmpty else {
                lane.running = false
                return nil
            }
            return lane.items.removeFirst()
        }
        guard let next else { return }
        pool.submit { [self] state in
            guard case .active = state else {
                pending.withLockedValue { $0 = ([], false) }
                return
            }
            next()
            runNext()
        }
    }
}
