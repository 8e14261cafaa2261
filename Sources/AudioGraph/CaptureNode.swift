import RecorderModel

/// One read from the device, as every consumer receives it: interleaved frames in the
/// device's format, valid only during the call.
public struct CaptureChunk {
    public let samples: UnsafeRawPointer
    public let frames: Int
    /// The engine's count of the first frame: frames delivered before it since the device opened.
    public let position: Int64
    /// When the first frame was captured (seconds since 1970), estimated from this read: its
    /// time less the frames it and the device's buffer hold. A late read makes it later, so
    /// consumers keep the least delayed estimate.
    public let captureTime: Double
    /// Uptime (ns) of the read.
    public let readUptime: UInt64
    /// Overruns since the chunk before, and the frames they lost (estimated).
    public let overruns: Int
    public let framesLost: Int64
    /// The engine's least delayed estimate of when the first frame was captured, as of this
    /// read (nil: none yet). A consumer that takes the chunk later (on a worker) times it with
    /// this, not with the engine's estimate by then: a device that delivers faster than real
    /// time (a file) moves that ever earlier.
    public var anchoredTime: Double? = nil
    /// Another chunk follows at once: the device held at least a period beyond this read (an
    /// unpaced device, a catch-up after a stall, a pre-roll replayed). A consumer may leave
    /// its worker asleep until that one, or until its ring fills (`ChunkWorker.push`).
    public var followedAtOnce = false
    /// Replayed from a pre-roll ring to a node just attached: captured before it was.
    public var isPreRoll = false
    /// CLOCK_REALTIME − CLOCK_BOOTTIME (seconds) the times above are on (NaN: not known). It
    /// changes only when the wall clock steps: a consumer keeping times of its own moves them
    /// by the change, and a file's start less it is its place on the boot clock, which no
    /// step moves (what re-dates a file once the clock is synchronized).
    public var clockOffset = Double.nan

    public init(samples: UnsafeRawPointer, frames: Int, position: Int64, captureTime: Double, readUptime: UInt64,
                overruns: Int, framesLost: Int64, anchoredTime: Double? = nil, followedAtOnce: Bool = false,
                isPreRoll: Bool = false, clockOffset: Double = .nan) {
        self.samples = samples
        self.frames = frames
        self.position = position
        self.captureTime = captureTime
        self.readUptime = readUptime
        self.overruns = overruns
        self.framesLost = framesLost
        self.anchoredTime = anchoredTime
        self.followedAtOnce = followedAtOnce
        self.isPreRoll = isPreRoll
        self.clockOffset = clockOffset
    }
}

/// A node of the audio graph: what a consumer of the capture engine promises. It takes a
/// chunk on the capture thread and returns without waiting for anything (no lock another
/// thread holds for long, no disk sync, no socket, no allocation). A node is one of two kinds:
///
/// - **real-time**: its work is done in `receive`, on the capture thread (the input meter, the
///   pre-roll ring);
/// - **worker**: `receive` only pushes the chunk into the node's `ChunkWorker` (one producer,
///   one consumer, memory allocated once) and the work runs on the worker's thread (the
///   recording's writer, the spectrum, a tap). The one hand-over from the capture thread to
///   another. A worker node's state belongs to its worker; `ChunkWorker.perform` changes it.
public protocol CaptureConsumer: AnyObject {
    /// Capture thread, every chunk in capture order. false: detach me (I am done).
    func receive(_ chunk: CaptureChunk) -> Bool
    /// Capture thread: the device failed, no more chunks will come (the engine ended).
    func engineFailed(_ error: RecorderError)
    /// Seconds the consumer lets the capture thread sleep between two reads: the thread wakes
    /// as often as the most demanding consumer attached needs (0: every device period).
    var wakeInterval: Double { get }
    /// Capture thread: memory of the consumer's own where the next read of up to `frames`
    /// frames may go, so that its `receive` keeps the chunk without copying it (nil: the
    /// engine's buffer). The first consumer attached that offers one gets the read.
    func readTarget(frames: Int) -> UnsafeMutableRawPointer?
}

extension CaptureConsumer {
    public var wakeInterval: Double { 0 }
    public func readTarget(frames: Int) -> UnsafeMutableRawPointer? { nil }
}
