// A pthread hands 64-byte dispatch continuations to serial queues (the capture thread's fsync
// hand-over, at 1000 Hz instead of 1 Hz), while a 20 Hz timer keeps the workers awake as in recd.
// Prints malloc's in-use bytes as the hand-overs accumulate.
import Dispatch
import Foundation
import Glibc
let queues = (0..<4).map { DispatchQueue(label: "q\($0)") }
let timerQueue = DispatchQueue(label: "timer")
let timer = DispatchSource.makeTimerSource(queue: timerQueue)
timer.schedule(deadline: .now(), repeating: .milliseconds(50))
timer.setEventHandler {}
timer.resume()
func inUse() -> Int { Int(heap_in_use()) }
let start = inUse()
let thread = Thread {
    var n = 0
    while n < 60_000 {
        queues[n % 4].async { usleep(200) }   // some work, so that several workers exist
        n += 1
        usleep(1000)
        if n % 6000 == 0 {
            let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
            print("\(n) hand-overs: in use +\((inUse() - start) / 1024) KiB, threads \(threads)")
            fflush(stdout)
        }
    }
    exit(0)
}
thread.start()
dispatchMain()
