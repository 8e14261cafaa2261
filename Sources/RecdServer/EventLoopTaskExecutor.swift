import NIOCore

/// Runs a task's jobs on one NIO event loop (a Swift `TaskExecutor`; NIO 2.101 offers an event
/// loop as a `SerialExecutor` only).
///
/// A connection's task prefers the executor of its channel's event loop, so that reading a
/// request, answering it and writing the answer stay on the thread that owns the socket:
/// every hop between them is a job queued on that loop, not a wake-up of another thread.
final class EventLoopTaskExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
