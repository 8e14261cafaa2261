/// How fast a device's sample clock runs against the system's monotonic clock, from the
/// capture thread's reads: each read says "by uptime t, the device had captured n frames".
///
/// If the device runs fast by d (parts of one), n/rate = (t - t0)(1 + d), so the lag
/// `t - n/rate` falls by d per second. Each lag is late by however long the read waited to be
/// scheduled (never early), so the estimator keeps only the least delayed read of every
/// `blockSeconds` and fits a least-squares line through those minima: over a baseline of
/// B seconds and minima spread by s seconds, its error is of the order of s / B. The
/// monotonic clock is slewed by NTP towards true time but never stepped, so a clock step
/// does not show up as drift.
///
/// Value type, no allocation: one `add` per read, on the capture thread.
struct ClockDriftEstimator: Sendable {
    let rate: Double
    let blockSeconds: Double
    /// The span of minima a figure needs: shorter fits are too noisy to publish.
    let minimumBaseline: Double

    private var origin: UInt64?
    private var blockStart = 0.0
    private var blockLag = Double.infinity
    private var blockTime = 0.0
    // A running least-squares fit (Welford's update) of lag against time over the minima.
    private var count = 0
    private var meanTime = 0.0
    private var meanLag = 0.0
    private var timeVariance = 0.0
    private var covariance = 0.0
    private var firstTime = 0.0
    private var lastTime = 0.0

    init(rate: Int, blockSeconds: Double = 0.5, minimumBaseline: Double = 4) {
        self.rate = Double(rate)
        self.blockSeconds = blockSeconds
        self.minimumBaseline = minimumBaseline
    }

    /// A read: by `uptimeNanoseconds`, the device had captured `frames` frames since the
    /// last `restart()`. Returns true when a block closed (the figure may have changed).
    mutating func add(uptimeNanoseconds: UInt64, frames: Int64) -> Bool {
        guard let origin else {
            origin = uptimeNanoseconds &- UInt64(Double(frames) / rate * 1e9)
            blockStart = 0
            blockLag = .infinity
            return false
        }
        let time = Double(uptimeNanoseconds &- origin) / 1e9
        let lag = time - Double(frames) / rate
        var closed = false
        if time - blockStart >= blockSeconds, blockLag < .infinity {
            include(time: blockTime, lag: blockLag)
            blockStart = time
            blockLag = .infinity
            closed = true
        }
        if lag < blockLag {
            blockLag = lag
            blockTime = time
        }
        return closed
    }

    private mutating func include(time: Double, lag: Double) {
        if count == 0 { firstTime = time }
        lastTime = time
        count += 1
        let timeDeviation = time - meanTime
        meanTime += timeDeviation / Double(count)
        meanLag += (lag - meanLag) / Double(count)
        timeVariance += timeDeviation * (time - meanTime)
        covariance += timeDeviation * (lag - meanLag)
    }

    /// The device clock's rate error in parts per million (positive: it runs fast); nil until
    /// the minima span `minimumBaseline` seconds.
    var partsPerMillion: Double? {
        guard count >= 3, lastTime - firstTime >= minimumBaseline, timeVariance > 0 else { return nil }
        return -covariance / timeVariance * 1e6
    }

    /// Forgets everything: frames stopped counting while time went on (a pause, an overrun).
    mutating func restart() {
        self = ClockDriftEstimator(rate: Int(rate), blockSeconds: blockSeconds, minimumBaseline: minimumBaseline)
    }
}
