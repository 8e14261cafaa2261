import CLinux
import Dispatch
import Glibc
import Synchronization

/// What recd asks of glibc's malloc so that a daemon running for months keeps a flat resident
/// size (issue 27; doc/architecture.md, "Resident memory over a long run"; BENCHMARKS.md,
/// "Long runs").
///
/// - glibc gives each thread that allocates an arena of its own (up to 8 per core) and keeps
///   them: every recording's capture thread is a new thread, so a daemon's heap grew by about
///   2 MiB over its first ten recordings. Two serve the event loops and the capture thread.
///
/// Measured with `make soak`: what grew was memory malloc held free, not memory in use.
/// - glibc raises its mmap threshold to the size of every large block freed (dynamically, up
///   to 32 MiB): after the first encoder or client queue is freed, every later one comes from
///   the heap instead of its own mapping, and the holes they leave are refilled only in part.
///   A fixed threshold keeps large, short-lived blocks out of the heap.
/// - Free pages between live blocks stay resident until `malloc_trim`: it is called after
///   each scan of the recordings directory (a file closed: a recording or a segment ended),
///   when the last client has left (`clientsLeft()`), and every `trimInterval` seconds.
/// - Small chunks parked in a thread's cache (tcache) or a fastbin are never merged with their
///   free neighbours, so client churn fragmented the heap around them and the memory at rest
///   still grew (+0.24 MiB/h at ten times the churn). recd's binary turns both off before main
///   (Sources/CMallocTuning); `configure()` turns fastbins off too, for when that could not run.
public enum ProcessMemory {
    /// Blocks at least this large get their own mapping, returned to the system when freed.
    static let mmapThreshold: Int32 = 64 * 1024
    /// Free memory at the top of the heap beyond this is returned at once.
    static let trimThreshold: Int32 = 128 * 1024
    /// Seconds between two trims when no file closes.
    static let trimInterval: Double = 600

    /// Sets malloc's arenas and thresholds; once, before the daemon's threads start.
    public static func configure() {
        _ = recd_limit_malloc_arenas(2)
        _ = mallopt(M_MMAP_THRESHOLD, mmapThreshold)
        _ = mallopt(M_TRIM_THRESHOLD, trimThreshold)
        _ = recd_disable_malloc_fastbins()
    }

    /// Hands the free pages inside malloc's arenas back to the system (glibc's malloc only:
    /// a sanitizer's allocator keeps its own).
    static func releaseFreePages() {
        if mallocIsGlibc { _ = malloc_trim(0) }
    }

    private static let mallocIsGlibc = recd_malloc_is_glibc() != 0

    /// The last client connected has left (the socket server): what the clients' buffers and
    /// queues freed goes back to the system a second later, not up to `trimInterval` later. At
    /// most once every `clientsLeftSpacing` seconds, so that clients coming and going one at a
    /// time (a status bar polling) cost a trim only that often.
    /// One comes sooner than that after the last is delayed (not dropped): the memory of a
    /// client that left just after another (a tap's queue may be large) goes back too.
    public static func clientsLeft() {
        // At most one trim scheduled at a time; it trims what every client gone by then freed.
        guard !clientsLeftTrimScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let now = DispatchTime.now().uptimeNanoseconds
        let last = lastClientsLeftTrim.load(ordering: .acquiring)
        let spacing = UInt64(clientsLeftSpacing * 1e9)
        let wait = last == 0 || now &- last >= spacing ? 1e9 : Double(spacing - (now &- last)) + 1e9
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + .nanoseconds(Int(wait))) {
            lastClientsLeftTrim.store(DispatchTime.now().uptimeNanoseconds, ordering: .releasing)
            clientsLeftTrimScheduled.store(false, ordering: .releasing)
            releaseFreePages()
        }
    }

    static let clientsLeftSpacing: Double = 10
    private static let lastClientsLeftTrim = Atomic<UInt64>(0)
    private static let clientsLeftTrimScheduled = Atomic<Bool>(false)
}
