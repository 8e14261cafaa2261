import Dispatch
import NIOConcurrencyHelpers

/// A current value that publishes its changes to subscribers.
///
/// - Reading `value` and calling `send(_:)` are thread-safe, from any thread.
/// - Each subscriber has a serial queue (its own, or the one it names). Handlers run there, one
///   at a time, in the order values were sent, never on the publisher's thread and never under
///   a lock: `send` only appends to the subscriber's inbox and schedules a drain.
/// - **A slow subscriber never blocks the publisher.** With `.latest` delivery (the default) its
///   inbox holds one value: while its handler is busy, newer values replace older ones, and
///   when it returns it gets the latest. With `.every` it gets every value, in order; the
///   inbox grows while it lags, so use it for rare, discrete changes (states, errors).
/// - When `Value` is `Equatable`, a value equal to the current one is not re-sent.
/// - Values sent inside `Observations.together { }` reach each subscriber queue in one block.
/// - A subscription lasts until its `ObservationToken` is cancelled or released. The
///   observed value holds the handler; the token holds the observed value weakly, so an
///   observer that keeps a token creates no retain cycle with what it observes.
///
/// Modelled on grpc-swift's broadcast sequence: one lock around the state, side effects
/// (scheduling handlers) outside it. The locks are pthread mutexes (NIO's lock box) rather
/// than Synchronization.Mutex, whose futex ThreadSanitizer cannot see on Linux.
public final class Observed<Value: Sendable>: Sendable {
    /// What a subscriber whose handler lags behind gets.
    public enum Delivery: Sendable {
        /// Only the newest value that arrived while the handler was busy.
        case latest
        /// Every value, in order.
        case every
    }

    @usableFromInline
    struct State: Sendable {
        @usableFromInline var value: Value
        var subscribers: [UInt64: Subscriber] = [:]
        var nextID: UInt64 = 0
    }

    @usableFromInline let state: NIOLockedValueBox<State>
    private let isDuplicate: (@Sendable (Value, Value) -> Bool)?

    /// Creates an observed value; every `send` is published.
    public init(_ initial: Value) {
        state = NIOLockedValueBox(State(value: initial))
        isDuplicate = nil
    }

    /// Creates an observed value that skips sends equal to the current value.
    public init(_ initial: Value) where Value: Equatable {
        state = NIOLockedValueBox(State(value: initial))
        isDuplicate = { $0 == $1 }
    }

    /// The current value. Inlinable: specialized where it is read (`status` reads a dozen),
    /// it is a lock and a copy rather than a generic metadata look-up each.
    @inlinable public var value: Value { state.withLockedValue { $0.value } }

    /// The number of live subscriptions.
    public var subscriberCount: Int { state.withLockedValue { $0.subscribers.count } }

    /// Replaces the current value and publishes it (unless it equals the current one).
    public func send(_ newValue: Value) {
        let toSchedule: [Subscriber] = state.withLockedValue { state in
            if let isDuplicate, isDuplicate(state.value, newValue) { return [] }
            state.value = newValue
            // Enqueued under the lock so every inbox sees values in the order they became current.
            return state.subscribers.values.filter { $0.enqueue(newValue) }
        }
        for subscriber in toSchedule { subscriber.scheduleDrain() }
    }

    /// Changes the current value in place and publishes the result.
    public func update(_ change: (inout Value) -> Void) {
        let toSchedule: [Subscriber] = state.withLockedValue { state in
            var newValue = state.value
            change(&newValue)
            if let isDuplicate, isDuplicate(state.value, newValue) { return [] }
            state.value = newValue
            return state.subscribers.values.filter { $0.enqueue(newValue) }
        }
        for subscriber in toSchedule { subscriber.scheduleDrain() }
    }

    /// Calls `handler` with each new value.
    ///
    /// - Parameters:
    ///   - queue: where the handler runs; by default a serial queue of the subscription's own.
    ///   - delivery: what a lagging handler gets (see `Delivery`).
    ///   - sendingCurrent: deliver the current value first, so the subscriber misses nothing
    ///     between reading and subscribing.
    /// - Returns: the token that keeps the subscription alive.
    public func subscribe(
        on queue: DispatchQueue? = nil,
        delivery: Delivery = .latest,
        sendingCurrent: Bool = true,
        _ handler: @escaping @Sendable (Value) -> Void
    ) -> ObservationToken {
        let queue = queue ?? DispatchQueue(label: "recd.observed.subscriber", target: .global())
        let subscriber = Subscriber(queue: queue, delivery: delivery, handler: handler)
        let (id, schedule) = state.withLockedValue { state -> (UInt64, Bool) in
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = subscriber
            return (id, sendingCurrent && subscriber.enqueue(state.value))
        }
        if schedule { subscriber.scheduleDrain() }
        return ObservationToken { [weak self] in
            subscriber.cancel()
            _ = self?.state.withLockedValue { $0.subscribers.removeValue(forKey: id) }
        }
    }

    /// The current value, then every change (latest wins when the consumer lags). Ends when
    /// the consuming task is cancelled or stops iterating.
    public var values: AsyncStream<Value> {
        AsyncStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
            let token = subscribe { continuation.yield($0) }
            continuation.onTermination = { _ in token.cancel() }
        }
    }

    /// One subscription: its handler, its queue and its inbox.
    final class Subscriber: Sendable {
        private struct Inbox {
            var values: [Value] = []
            var draining = false
            var cancelled = false
        }

        let queue: DispatchQueue
        let delivery: Delivery
        let handler: @Sendable (Value) -> Void
        private let inbox = NIOLockedValueBox(Inbox())

        init(queue: DispatchQueue, delivery: Delivery, handler: @escaping @Sendable (Value) -> Void) {
            self.queue = queue
            self.delivery = delivery
            self.handler = handler
        }

        /// Adds a value; returns true when the caller must schedule a drain.
        func enqueue(_ value: Value) -> Bool {
            inbox.withLockedValue { inbox in
                guard !inbox.cancelled else { return false }
                switch delivery {
                case .latest: inbox.values = [value]
                case .every: inbox.values.append(value)
                }
                if inbox.draining { return false }
                inbox.draining = true
                return true
            }
        }

        func scheduleDrain() {
            if let batch = ObservedBatch.current {
                batch.add(queue) { self.drain() }
            } else {
                queue.async { self.drain() }
            }
        }

        func cancel() {
            inbox.withLockedValue { $0.cancelled = true; $0.values = [] }
        }

        private var isCancelled: Bool { inbox.withLockedValue { $0.cancelled } }

        private func drain() {
            while true {
                let batch: [Value] = inbox.withLockedValue { inbox in
                    if inbox.cancelled || inbox.values.isEmpty {
                        inbox.draining = false
                        return []
                    }
                    defer { inbox.values.removeAll(keepingCapacity: true) }
                    return inbox.values
                }
                if batch.isEmpty { return }
                for value in batch {
                    // A handler may cancel its own subscription; nothing is delivered after that.
                    if isCancelled { return }
                    handler(value)
                }
            }
        }
    }
}

/// Values sent together: see `together(_:)`.
public enum Observations {
    /// Runs `body` and holds back the handler runs its sends schedule until it returns; then
    /// each subscriber queue gets one block with all of them, in the order they were scheduled.
    /// So values published together (a recorder tick's time and levels) reach a queue in one
    /// turn, however soon the queue would have run the first on its own. Nested calls join
    /// the outermost.
    public static func together(_ body: () -> Void) {
        if ObservedBatch.current != nil { return body() }
        let batch = ObservedBatch()
        ObservedBatch.$current.withValue(batch) { body() }
        batch.schedule()
    }
}

/// The drains held back by `Observations.together`, by queue.
final class ObservedBatch: Sendable {
    @TaskLocal static var current: ObservedBatch?
    /// nil once scheduled: a task started in the body inherits the binding and may send later,
    /// and its drain must then go out on its own.
    private let drains = NIOLockedValueBox<[(queue: DispatchQueue, blocks: [@Sendable () -> Void])]?>([])

    func add(_ queue: DispatchQueue, _ drain: @escaping @Sendable () -> Void) {
        let held = drains.withLockedValue { drains -> Bool in
            guard drains != nil else { return false }
            if let index = drains!.firstIndex(where: { $0.queue === queue }) {
                drains![index].blocks.append(drain)
            } else {
                drains!.append((queue, [drain]))
            }
            return true
        }
        if !held { queue.async(execute: drain) }
    }

    func schedule() {
        let due = drains.withLockedValue { drains in
            defer { drains = nil }
            return drains ?? []
        }
        for (queue, blocks) in due {
            queue.async { for block in blocks { block() } }
        }
    }
}

/// Keeps a subscription alive. Cancelling it, or releasing the last reference, ends it.
public final class ObservationToken: Sendable {
    private let onCancel: NIOLockedValueBox<(@Sendable () -> Void)?>

    init(onCancel: @escaping @Sendable () -> Void) {
        self.onCancel = NIOLockedValueBox(onCancel)
    }

    /// Ends the subscription. The handler is not called again once this returns, except for a
    /// call already running on the subscriber's queue. Safe to call from inside the handler.
    public func cancel() {
        let action = onCancel.withLockedValue { action in
            defer { action = nil }
            return action
        }
        action?()
    }

    deinit { cancel() }
}

extension NIOLockedValueBox {
    /// The spelling of `Synchronization.Mutex`, which RecorderCore does not use: ThreadSanitizer
    /// cannot see its futex on Linux and would report every access it guards as a race.
    @inlinable
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try withLockedValue(body)
    }
}
