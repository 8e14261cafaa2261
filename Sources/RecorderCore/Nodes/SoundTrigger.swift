import ALSA
import FoundationEssentials
import Glibc
import RecorderModel
import Synchronization

/// One second-order section, transposed direct form II, in double precision (a 10 Hz
/// high-pass at 48 kHz has poles this close to 1 that single precision rings).
struct Biquad {
    var b0, b1, b2, a1, a2: Double
    private var z1 = 0.0, z2 = 0.0

    init(b0: Double, b1: Double, b2: Double, a0: Double, a1: Double, a2: Double) {
        self.b0 = b0 / a0
        self.b1 = b1 / a0
        self.b2 = b2 / a0
        self.a1 = a1 / a0
        self.a2 = a2 / a0
    }

    /// The RBJ cookbook's high- or low-pass at `frequency` with quality `q`: the bilinear
    /// transform prewarped at the corner, as `scipy.signal.butter` designs it.
    init(highPass: Bool, frequency: Double, q: Double, rate: Double) {
        let w0 = 2 * Double.pi * frequency / rate
        let cosine = cos(w0), alpha = sin(w0) / (2 * q)
        let edge = highPass ? (1 + cosine) / 2 : (1 - cosine) / 2
        self.init(b0: edge, b1: highPass ? -(1 + cosine) : 1 - cosine, b2: edge,
                  a0: 1 + alpha, a1: -2 * cosine, a2: 1 - alpha)
    }

    mutating func process(_ x: Double) -> Double {
        let y = b0 * x + z1
        z1 = b1 * x - a1 * y + z2
        z2 = b2 * x - a2 * y
        return y
    }

    /// A 4th-order Butterworth high- or low-pass: two sections with the poles' Q values
    /// 1/(2 cos(π/8)) and 1/(2 cos(3π/8)).
    static func butterworth4(highPass: Bool, frequency: Double, rate: Double) -> [Biquad] {
        [Double.pi / 8, 3 * Double.pi / 8].map { Biquad(highPass: highPass, frequency: frequency, q: 1 / (2 * cos($0)), rate: rate) }
    }
}

/// The noise floor: a percentile of the last `capacity` block levels, exactly as numpy's
/// `percentile` (linear interpolation) computes it. A sorted copy is kept beside the
/// ring, so adding a level costs two binary searches and a move of at most `capacity` doubles.
struct PercentileWindow {
    let capacity: Int
    let percentile: Double
    private var ring: [Double]
    private var sorted: [Double]
    private var next = 0

    init(capacity: Int, percentile: Double) {
        self.capacity = Swift.max(1, capacity)
        self.percentile = percentile
        ring = []
        sorted = []
        ring.reserveCapacity(self.capacity)
        sorted.reserveCapacity(self.capacity)
    }

    var count: Int { sorted.count }

    mutating func add(_ value: Double) {
        if ring.count < capacity {
            ring.append(value)
        } else {
            let oldest = ring[next]
            ring[next] = value
            next = (next + 1) % capacity
            sorted.remove(at: Self.firstIndex(notBelow: oldest, in: sorted))
        }
        sorted.insert(value, at: Self.firstIndex(notBelow: value, in: sorted))
    }

    var value: Double? {
        guard !sorted.isEmpty else { return nil }
        let position = percentile / 100 * Double(sorted.count - 1)
        let lower = Int(position.rounded(.down))
        let upper = Swift.min(lower + 1, sorted.count - 1)
        return sorted[lower] + (sorted[upper] - sorted[lower]) * (position - Double(lower))
    }

    private static func firstIndex(notBelow value: Double, in array: [Double]) -> Int {
        var low = 0, high = array.count
        while low < high {
            let middle = (low + high) / 2
            if array[middle] < value { low = middle + 1 } else { high = middle }
        }
        return low
    }
}

/// Decides when sound-activated events open and close, on the capture thread, in blocks of
/// `TriggerSettings.blockSeconds`: band filter, the block's level over the chosen channels,
/// the noise floor, then attack, hysteresis and hang. It only decides; the recording acts
/// (`SegmentWriter`'s gate). Its figures for `status` are atomics.
final class SoundTrigger: @unchecked Sendable {
    // @unchecked: everything but the atomics is used on the capture thread only.

    enum Decision: Equatable {
        /// The attack passed at the end of this block: the sound began at `onset`.
        case open(onset: Int64)
        /// The hang passed: the event ends at `end` (at or before the end of this block).
        case close(end: Int64, lastAbove: Int64)
    }

    let settings: TriggerSettings
    let blockFrames: Int
    private let channels: Int
    private let format: SampleFormat
    private let attackFrames: Int64
    private let hangFrames: Int64
    /// Per decision channel (one for `mix`): its filter sections.
    private var filters: [[Biquad]]
    private var squares: [Double]
    private var peaks: [Double]
    private var filled = 0
    /// The engine position after the last frame fed.
    private(set) var position: Int64 = 0
    private var floorWindow: PercentileWindow
    /// Blocks of history before a floor counts (a second's worth).
    private let floorMinimumBlocks: Int
    private(set) var isOpen = false
    /// Where the current run of blocks above the opening level began (closed), and the end of
    /// the last block above the closing level (open).
    private var runStart: Int64?
    private(set) var lastAbove: Int64 = 0
    private(set) var onset: Int64 = 0
    /// The loudest block of the open event, dBFS.
    private(set) var eventPeak = -160.0

    // For status, any thread.
    let level = Atomic<UInt64>((-160.0).bitPattern)
    let floor = Atomic<UInt64>(Double.nan.bitPattern)
    /// The opening and closing levels of the last decision (NaN before one).
    let openLevel = Atomic<UInt64>(Double.nan.bitPattern)
    let closeLevel = Atomic<UInt64>(Double.nan.bitPattern)

    init(settings: TriggerSettings, configuration: PCMConfiguration) {
        self.settings = settings
        let rate = Double(configuration.sampleRate)
        blockFrames = Swift.max(1, Int((rate * TriggerSettings.blockSeconds).rounded()))
        channels = configuration.channels
        format = configuration.sampleFormat
        attackFrames = Int64((settings.attack * rate).rounded())
        hangFrames = Int64((settings.hang * rate).rounded())
        let decisionChannels = settings.channels == .mix ? 1 : configuration.channels
        var sections: [Biquad] = []
        if let highPass = settings.highPass { sections += Biquad.butterworth4(highPass: true, frequency: highPass, rate: rate) }
        if let lowPass = settings.lowPass { sections += Biquad.butterworth4(highPass: false, frequency: lowPass, rate: rate) }
        filters = Array(repeating: sections, count: decisionChannels)
        squares = Array(repeating: 0, count: decisionChannels)
        peaks = Array(repeating: 0, count: decisionChannels)
        let blocksPerSecond = rate / Double(blockFrames)
        floorWindow = PercentileWindow(capacity: Int((settings.floorWindow * blocksPerSecond).rounded()),
                                       percentile: settings.floorPercentile)
        floorMinimumBlocks = Swift.min(floorWindow.capacity, Int(blocksPerSecond.rounded()))
    }

    /// Frames until the current block is complete: feed at most this many at a time.
    var framesToBlockEnd: Int { blockFrames - filled }

    /// The levels that open and close an event now (`TriggerSettings.levels`); nil while a
    /// relative threshold has no floor yet. The floor closes an event only if it was known
    /// when the event opened: one that opened in the first second is closed by `hysteresis`
    /// alone, as the floor measured since is mostly its own sound.
    var thresholds: (open: Double, close: Double)? {
        settings.levels(floor: floorWindow.count >= floorMinimumBlocks ? floorWindow.value : nil,
                        closingByFloor: !isOpen || floorKnownAtOnset)
    }
    /// Whether the floor was measured when the open event opened.
    private var floorKnownAtOnset = false

    /// Feeds `frames` (at most `framesToBlockEnd`) interleaved device frames that begin at
    /// engine position `at`; decides when they complete a block.
    func feed(_ samples: UnsafeRawPointer, frames: Int, at start: Int64) -> Decision? {
        precondition(frames <= framesToBlockEnd)
        if start != position, filled > 0 {
            filled = 0  // not contiguous (an overrun's jump): begin the block afresh
            for index in squares.indices { squares[index] = 0; peaks[index] = 0 }
        }
        switch format {
        case .int16: accumulate(samples.assumingMemoryBound(to: Int16.self), frames: frames, scale: 1.0 / 32768)
        case .int32: accumulate(samples.assumingMemoryBound(to: Int32.self), frames: frames, scale: 1.0 / 2_147_483_648)
        case .float32: accumulate(samples.assumingMemoryBound(to: Float.self), frames: frames, scale: 1)
        }
        filled += frames
        position = start + Int64(frames)
        guard filled == blockFrames else { return nil }
        return decide()
    }

    private func accumulate<S: BinaryInteger>(_ samples: UnsafePointer<S>, frames: Int, scale: Double) {
        accumulate(frames: frames) { Double(samples[$0]) * scale }
    }

    private func accumulate(_ samples: UnsafePointer<Float>, frames: Int, scale: Double) {
        accumulate(frames: frames) { Double(samples[$0]) }
    }

    /// The loop runs for every sample (96 000 a second for 48 kHz stereo), on locals: a class's
    /// stored arrays cost an exclusivity check and a uniqueness check on every write, which
    /// took more of the writer thread than the filtering itself (perf, armed on the paced device).
    @inline(__always)
    private func accumulate(frames: Int, _ sample: (Int) -> Double) {
        let mix = settings.channels == .mix
        let channels = self.channels
        var filters: [[Biquad]] = []
        var squares: [Double] = []
        var peaks: [Double] = []
        swap(&filters, &self.filters)
        swap(&squares, &self.squares)
        swap(&peaks, &self.peaks)
        defer {
            swap(&filters, &self.filters)
            swap(&squares, &self.squares)
            swap(&peaks, &self.peaks)
        }
        for channel in filters.indices {
            filters[channel].withUnsafeMutableBufferPointer { sections in
                var square = squares[channel], peak = peaks[channel]
                for frame in 0..<frames {
                    let base = frame * channels
                    var x: Double
                    if mix {
                        x = 0
                        for input in 0..<channels { x += sample(base + input) }
                        x /= Double(channels)
                    } else {
                        x = sample(base + channel)
                    }
                    for section in sections.indices { x = sections[section].process(x) }
                    square += x * x
                    peak = Swift.max(peak, Swift.abs(x))
                }
                squares[channel] = square
                peaks[channel] = peak
            }
        }
    }

    /// The block's level (dBFS): RMS (20·log10, a full-scale sine is -3) or peak.
    /// Nothing allocated: it runs every 10 ms.
    private func blockLevel() -> Double {
        var loudest = -Double.infinity, quietest = Double.infinity
        for channel in squares.indices {
            let amplitude = settings.measure == .rms ? (squares[channel] / Double(blockFrames)).squareRoot() : peaks[channel]
            let level = amplitude > 0 ? Swift.max(-160, 20 * log10(amplitude)) : -160
            loudest = Swift.max(loudest, level)
            quietest = Swift.min(quietest, level)
            squares[channel] = 0
            peaks[channel] = 0
        }
        guard !squares.isEmpty else { return -160 }
        switch settings.channels {
        case .any, .mix: return loudest
        case .each: return quietest
        }
    }

    private func decide() -> Decision? {
        filled = 0
        let value = blockLevel()
        let blockStart = position - Int64(blockFrames)
        level.store(value.bitPattern, ordering: .relaxed)
        // Decided against the floor before this block, which then joins it.
        let limits = thresholds
        let floorKnown = floorWindow.count >= floorMinimumBlocks
        floorWindow.add(value)
        if let floor = floorWindow.value, floorWindow.count >= floorMinimumBlocks {
            self.floor.store(floor.bitPattern, ordering: .relaxed)
        }
        guard let limits else { return nil }
        openLevel.store(limits.open.bitPattern, ordering: .relaxed)
        closeLevel.store(limits.close.bitPattern, ordering: .relaxed)
        if !isOpen {
            guard value >= limits.open else {
                runStart = nil
                return nil
            }
            let start = runStart ?? blockStart
            runStart = start
            eventPeak = Swift.max(runStart == blockStart ? -160 : eventPeak, value)
            // The attack counts whole blocks: a run of them at least `attack` long.
            guard position - start >= Swift.max(attackFrames, 1) else { return nil }
            floorKnownAtOnset = floorKnown
            isOpen = true
            onset = start
            lastAbove = position
            runStart = nil
            return .open(onset: start)
        }
        eventPeak = Swift.max(eventPeak, value)
        if value >= limits.close {
            lastAbove = position
            return nil
        }
        guard position - lastAbove >= hangFrames else { return nil }
        isOpen = false
        return .close(end: lastAbove + hangFrames, lastAbove: lastAbove)
    }

    /// Ends an open event from outside (the recording stops): nothing is decided after it.
    func reset() {
        isOpen = false
        runStart = nil
    }

    var currentLevel: Double { Double(bitPattern: level.load(ordering: .relaxed)) }
    /// The levels the detector decides with now; nil before its first decision.
    var currentThresholds: (open: Double, close: Double)? {
        let open = Double(bitPattern: openLevel.load(ordering: .relaxed))
        let close = Double(bitPattern: closeLevel.load(ordering: .relaxed))
        return open.isNaN || close.isNaN ? nil : (open, close)
    }
    var currentFloor: Double? {
        let value = Double(bitPattern: floor.load(ordering: .relaxed))
        return value.isNaN ? nil : value
    }
}
