import Dispatch
import Foundation
import RecdTestSupport
import RecorderCore
import NIOConcurrencyHelpers
import Testing

/// Collects delivered values, thread-safely.
final class Collected<T: Sendable>: Sendable {
    private let storage = NIOLockedValueBox<[T]>([])
    func append(_ value: T) { storage.withLockedValue { $0.append(value) } }
    var values: [T] { storage.withLockedValue { $0 } }
    var count: Int { storage.withLockedValue { $0.count } }
}

@Suite("Observed")
struct ObservedTests {
    @Test func currentValueIsReadableAndUpdated() {
        let observed = Observed(1)
        #expect(observed.value == 1)
        observed.send(2)
        #expect(observed.value == 2)
        observed.update { $0 += 40 }
        #expect(observed.value == 42)
    }

    @Test func subscriberGetsCurrentValueThenEveryChangeInOrder() {
        let observed = Observed(0)
        let received = Collected<Int>()
        let token = observed.subscribe(delivery: .every) { received.append($0) }
        for value in 1...500 { observed.send(value) }
        #expect(waitUntil { received.count == 501 })
        #expect(received.values == Array(0...500))
        token.cancel()
    }

    @Test func equalConsecutiveValuesAreNotResent() {
        let observed = Observed("a")
        let received = Collected<String>()
        let token = observed.subscribe(delivery: .every) { received.append($0) }
        for value in ["a", "b", "b", "b", "c", "c", "a"] { observed.send(value) }
        #expect(waitUntil { received.values.last == "a" && received.count == 4 })
        #expect(received.values == ["a", "b", "c", "a"])
        withExtendedLifetime(token) {}
    }

    @Test func nonEquatableValuesAreAlwaysSent() {
        struct Tick: Sendable { let id: Int }
        let observed = Observed(Tick(id: 0))
        let received = Collected<Int>()
        let token = observed.subscribe(delivery: .every, sendingCurrent: false) { received.append($0.id) }
        for _ in 0..<3 { observed.send(Tick(id: 7)) }
        #expect(waitUntil { received.count == 3 })
        withExtendedLifetime(token) {}
    }

    @Test func handlerRunsOnTheQueueItNames() {
        let queue = DispatchQueue(label: "test.named")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 99)
        let observed = Observed(0)
        let seenOnQueue = Collected<Bool>()
        let token = observed.subscribe(on: queue) { _ in seenOnQueue.append(DispatchQueue.getSpecific(key: key) == 99) }
        observed.send(1)
        #expect(waitUntil { seenOnQueue.count >= 1 })
        #expect(seenOnQueue.values.allSatisfy { $0 })
        withExtendedLifetime(token) {}
    }

    @Test func valuesSentTogetherReachAQueueInOneTurn() {
        let queue = DispatchQueue(label: "test.together")
        let time = Observed(0.0)
        let levels = Observed("silent")
        let events = Collected<String>()
        let tokens = [
            time.subscribe(on: queue, sendingCurrent: false) { value in
                events.append("time \(value)")
                // Queued behind the turn that runs this handler.
                queue.async { events.append("next turn") }
            },
            levels.subscribe(on: queue, sendingCurrent: false) { events.append("levels \($0)") },
        ]
        let heldBack = Collected<Bool>()
        // From a Dispatch thread, outside any task, as the recorder's timer does; nested.
        DispatchQueue(label: "test.publisher").sync {
            Observations.together {
                time.send(1.5)
                Observations.together { levels.send("loud") }
                // Nothing runs before the outer body returns, however idle the queue is.
                queue.sync {}
                heldBack.append(events.values.isEmpty)
            }
        }
        #expect(heldBack.values == [true])
        #expect(waitUntil { events.count == 3 })
        #expect(events.values == ["time 1.5", "levels loud", "next turn"])
        // Outside `together`, each send schedules its own turn as before.
        time.send(2.5)
        #expect(waitUntil { events.count == 5 })
        #expect(events.values.suffix(2) == ["time 2.5", "next turn"])
        withExtendedLifetime(tokens) {}
    }

    @Test func aSendAfterTheBatchWentOutIsDeliveredOnItsOwn() async {
        let time = Observed(0.0)
        let received = Collected<Double>()
        let token = time.subscribe(sendingCurrent: false) { received.append($0) }
        // A task started inside the body inherits the batch, and sends once it has gone out.
        var inherited: Task<Void, Never>?
        Observations.together {
            time.send(1)
            inherited = Task {
                _ = await eventually { received.values == [1] }
                time.send(2)
            }
        }
        await inherited?.value
        #expect(await eventually { received.values == [1, 2] }, "\(received.values)")
        withExtendedLifetime(token) {}
    }

    @Test func cancellingFromInsideTheHandlerStopsDelivery() {
        let observed = Observed(0)
        let received = Collected<Int>()
        let tokenBox = NIOLockedValueBox<ObservationToken?>(nil)
        let token = observed.subscribe(delivery: .every, sendingCurrent: false) { value in
            received.append(value)
            if value == 3 { tokenBox.withLockedValue { $0?.cancel() } }
        }
        tokenBox.withLockedValue { $0 = token }
        for value in 1...10 { observed.send(value) }
        #expect(waitUntil { received.values.contains(3) })
        // Give any wrongly scheduled delivery time to happen.
        Thread.sleep(forTimeInterval: 0.2)
        #expect(received.values == [1, 2, 3])
        #expect(observed.subscriberCount == 0)
    }

    @Test func releasingTheTokenEndsTheSubscriptionAndReleasesTheHandler() {
        final class Observer: Sendable {
            let received = Collected<Int>()
        }
        let observed = Observed(0)
        weak var weakObserver: Observer?
        do {
            let observer = Observer()
            weakObserver = observer
            let token = observed.subscribe { [observer] in observer.received.append($0) }
            #expect(observed.subscriberCount == 1)
            #expect(waitUntil { observer.received.count == 1 })
            _ = token
        }
        #expect(observed.subscriberCount == 0)
        #expect(waitUntil { weakObserver == nil })
        observed.send(5)  // nobody left to call
    }

    @Test func tokenDoesNotKeepTheObservedValueAlive() {
        weak var weakObserved: Observed<Int>?
        var token: ObservationToken?
        do {
            let observed = Observed(0)
            weakObserved = observed
            token = observed.subscribe { _ in }
        }
        #expect(weakObserved == nil)
        token?.cancel()  // harmless once the observed value is gone
    }

    @Test func aBlockedSubscriberNeverBlocksThePublisherAndGetsTheLatestValue() {
        let observed = Observed(0)
        let gate = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let received = Collected<Int>()
        let token = observed.subscribe(sendingCurrent: false) { value in
            received.append(value)
            if value == 1 {
                entered.signal()
                gate.wait()
            }
        }
        observed.send(1)
        entered.wait()  // the handler is now stuck inside value 1
        let fast = Collected<Int>()
        let otherToken = observed.subscribe(delivery: .every, sendingCurrent: false) { fast.append($0) }
        let publisherDone = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            for value in 2...100_000 { observed.send(value) }
            publisherDone.signal()
        }
        // The publisher finishes while the slow handler is still blocked...
        #expect(publisherDone.wait(timeout: .now() + 30) == .success)
        // ...and other subscribers are served meanwhile.
        #expect(waitUntil { fast.count == 99_999 })
        gate.signal()
        // The slow one then gets only the latest value.
        #expect(waitUntil { received.values.last == 100_000 })
        #expect(received.values == [1, 100_000])
        withExtendedLifetime((token, otherToken)) {}
    }

    @Test func manyThreadsPublishingAndSubscribingAtOnce() async {
        let observed = Observed(0)
        let threads = 8
        let perThread = 2_000
        /// The subscribers made during the storm and kept: each one's last value received.
        let survivors = Collected<(token: ObservationToken, last: NIOLockedValueBox<Int?>)>()
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<threads {
                group.addTask {
                    var tokens: [(token: ObservationToken, last: NIOLockedValueBox<Int?>)] = []
                    for index in 0..<perThread {
                        observed.send(thread * perThread + index + 1)
                        if index % 50 == 0 {
                            let last = NIOLockedValueBox<Int?>(nil)
                            tokens.append((observed.subscribe { value in last.withLockedValue { $0 = value } }, last))
                        }
                        if index % 75 == 0, !tokens.isEmpty {
                            tokens.removeFirst().token.cancel()
                        }
                    }
                    for kept in tokens { survivors.append(kept) }
                }
            }
        }
        // Every subscriber made during the storm and still subscribed ends with the value that
        // is current: none missed the last change or got an older value after it.
        let settled = observed.value
        let kept = survivors.values
        #expect(kept.count == threads * (perThread / 50 - perThread / 75 - 1))
        #expect(waitUntil { kept.allSatisfy { $0.last.withLockedValue { $0 } == settled } },
                "\(kept.filter { $0.last.withLockedValue { $0 } != settled }.count) subscribers did not settle on \(settled)")
        #expect(observed.subscriberCount == kept.count)
        withExtendedLifetime(kept) {}
    }

    @Test func concurrentSendersAllReachAnEverySubscriberExactlyOnce() async {
        let observed = Observed(0)
        let received = Collected<Int>()
        let token = observed.subscribe(delivery: .every, sendingCurrent: false) { received.append($0) }
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<4 {
                group.addTask {
                    for index in 0..<1000 { observed.send(thread * 1000 + index + 1) }
                }
            }
        }
        #expect(waitUntil { received.count == 4000 })
        #expect(Set(received.values) == Set(1...4000))
        #expect(received.values.last == observed.value)
        withExtendedLifetime(token) {}
    }

    @Test func asyncSequenceYieldsCurrentValueThenChanges() async {
        let observed = Observed(10)
        var iterator = observed.values.makeAsyncIterator()
        #expect(await iterator.next() == 10)
        observed.send(11)
        #expect(await iterator.next() == 11)
        observed.send(12)
        #expect(await iterator.next() == 12)
    }

    @Test func asyncSequenceEndsItsSubscriptionWhenTheTaskIsCancelled() async {
        let observed = Observed(0)
        let task = Task {
            for await _ in observed.values {}
        }
        #expect(await eventually { observed.subscriberCount == 1 })
        task.cancel()
        await task.value
        #expect(await eventually { observed.subscriberCount == 0 })
    }
}
