@testable import ALSA
import Foundation
import Glibc
@testable import RecorderCore
import RecorderModel
import Testing

/// The sound trigger's signal processing against independent references: the band filter's
/// sections against scipy's Butterworth design and `sosfilt`, the noise floor's percentile
/// window against numpy, block levels against their definitions, and the detector's
/// decisions against positions worked out from the settings' definitions (attack, hang,
/// hysteresis, the floor). scipy and numpy run in Tests/reference/trigger_reference.py
/// (Debian's python3-scipy and python3-numpy), which reads and prints raw float64.
@Suite("Sound trigger: DSP")
struct SoundTriggerTests {
    // MARK: The reference

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("reference/trigger_reference.py").path

    struct ReferenceFailure: Error, CustomStringConvertible {
        var description: String
    }

    /// What `trigger_reference.py arguments…` prints, as float64 values; `input` (if any) is
    /// written to a temporary file whose path comes first after the command.
    static func python(_ command: String, input: [Double]? = nil, _ arguments: [String], script: String = script) throws -> [Double] {
        var all = [script, command]
        var inputPath: String?
        if let input {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("trigger-\(UUID().uuidString).f64").path
            try input.withUnsafeBytes { Data($0) }.write(to: URL(fileURLWithPath: path))
            inputPath = path
            all.append(path)
        }
        defer { if let inputPath { try? FileManager.default.removeItem(atPath: inputPath) } }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = all + arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw ReferenceFailure(description: "\(script) \(command) \(arguments) exited \(process.terminationStatus)")
        }
        guard data.count % 8 == 0 else { throw ReferenceFailure(description: "\(script) printed \(data.count) bytes") }
        return data.withUnsafeBytes { raw in (0..<data.count / 8).map { raw.loadUnaligned(fromByteOffset: $0 * 8, as: Double.self) } }
    }

    // MARK: Deterministic signals

    /// splitmix64: the same numbers on every run and machine.
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        /// Uniform in [0, 1).
        mutating func uniform() -> Double { Double(next() >> 11) * 0x1p-53 }
        /// Standard normal (Box–Muller).
        mutating func gaussian() -> Double {
            let u = 1 - uniform(), v = uniform()
            return (-2 * log(u)).squareRoot() * cos(2 * Double.pi * v)
        }
    }

    /// Noise, a DC step (half-way) and sines at 50, 440, 1000 and 5000 Hz (those below the
    /// Nyquist frequency): every filter here has both its pass- and its stop-band excited.
    static func testSignal(rate: Double, count: Int, seed: UInt64) -> [Double] {
        var random = Random(state: seed)
        return (0..<count).map { n in
            let t = Double(n) / rate
            var x = 0.25 * (2 * random.uniform() - 1) + (n >= count / 2 ? 0.1 : 0)
            for (frequency, amplitude) in [(50.0, 0.2), (440, 0.15), (1000, 0.1), (5000, 0.1)] where frequency < rate / 2 {
                x += amplitude * sin(2 * Double.pi * frequency * t)
            }
            return x
        }
    }

    static func sections(_ spec: String, rate: Double) -> [Biquad] {
        let parts = spec.split(separator: ":").map(String.init)
        switch parts[0] {
        case "hp": return Biquad.butterworth4(highPass: true, frequency: Double(parts[1])!, rate: rate)
        case "lp": return Biquad.butterworth4(highPass: false, frequency: Double(parts[1])!, rate: rate)
        default:
            return Biquad.butterworth4(highPass: true, frequency: Double(parts[1])!, rate: rate)
                + Biquad.butterworth4(highPass: false, frequency: Double(parts[2])!, rate: rate)
        }
    }

    static func filter(_ input: [Double], through sections: [Biquad]) -> [Double] {
        var sections = sections
        return input.map { sample in
            var x = sample
            for index in sections.indices { x = sections[index].process(x) }
            return x
        }
    }

    // MARK: 1. The band filter against scipy

    /// The configurations: 4th-order Butterworth high-pass at 100 Hz, low-pass at 3400 Hz and
    /// the band 1–10 kHz (where 10 kHz is below half the rate: not at 16 kHz, which the
    /// settings refuse), at 48, 44.1 and 16 kHz.
    static let filterCases: [(rate: Double, specs: [String])] = [
        (48000, ["hp:100", "lp:3400", "band:1000:10000"]),
        (44100, ["hp:100", "lp:3400", "band:1000:10000"]),
        (16000, ["hp:100", "lp:3400", "band:1000:7000"]),
    ]

    /// Sample by sample against `sosfilt` with `butter(4, …, output='sos')`. scipy pairs the
    /// poles into sections in another order and spreads the gain differently, so the two
    /// agree only up to rounding: each of the ~6000 outputs carries a few ulp of error per
    /// multiply-add, amplified by the poles' closeness to the unit circle (|p| ≈ 0.993 for
    /// 100 Hz at 48 kHz). 1e-9 of full scale leaves several orders of magnitude for that,
    /// while any design difference (another Q, warping, a wrong corner by 0.01 Hz) gives
    /// differences of 1e-5 and more.
    @Test(arguments: filterCases.indices)
    func sectionsMatchScipy(_ caseIndex: Int) throws {
        let (rate, specs) = Self.filterCases[caseIndex]
        let count = 6000
        let input = Self.testSignal(rate: rate, count: count, seed: 7 + UInt64(caseIndex))
        let expected = try Self.python("filter", input: input, ["\(rate)"] + specs)
        try #require(expected.count == count * specs.count)
        var report: [String] = []
        for (index, spec) in specs.enumerated() {
            let output = Self.filter(input, through: Self.sections(spec, rate: rate))
            let reference = expected[(index * count)..<((index + 1) * count)]
            let difference = zip(output, reference).map { Swift.abs($0 - $1) }.max()!
            let energy = (reference.map { $0 * $0 }.reduce(0, +) / Double(count)).squareRoot()
            #expect(difference <= 1e-9, "\(spec) at \(rate) Hz: max |swift - scipy| = \(difference)")
            // Not vacuous: the filters pass something and stop something.
            #expect(energy > 0.01 && energy < 0.3, "\(spec) at \(rate) Hz: output RMS \(energy)")
            report.append("\(spec) \(String(format: "%.3g", difference))")
        }
        print("Trigger band filter at \(Int(rate)) Hz, max |swift - scipy.sosfilt|: " + report.joined(separator: ", "))
    }

    /// The sections' steady-state gain for sines, measured over whole periods after the
    /// transient, against scipy's `sosfreqz`; 50 Hz through the 100 Hz high-pass is at least
    /// 23 dB down (an ideal 4th-order Butterworth: 10·log10(1 + 2^8) = 24.1 dB).
    @Test(arguments: [48000.0, 16000.0])
    func highPassAttenuatesMains(_ rate: Double) throws {
        let frequencies = [50.0, 100.0, 1000.0]
        let expected = try Self.python("response", ["\(rate)", "hp:100"] + frequencies.map { "\($0)" })
        try #require(expected.count == frequencies.count)
        var report: [String] = []
        for (frequency, reference) in zip(frequencies, expected) {
            let count = Int(2 * rate)
            let input = (0..<count).map { sin(2 * Double.pi * frequency * Double($0) / rate) }
            let output = Self.filter(input, through: Self.sections("hp:100", rate: rate))
            // The second second: a whole number of periods of each frequency.
            let tail = output[(count / 2)...]
            let rms = (tail.map { $0 * $0 }.reduce(0, +) / Double(tail.count)).squareRoot()
            let gain = 20 * log10(rms * 2.0.squareRoot())
            #expect(Swift.abs(gain - reference) < 0.001, "\(frequency) Hz at \(rate) Hz: \(gain) dB, scipy \(reference) dB")
            report.append("\(Int(frequency)) Hz \(String(format: "%.4f", gain)) dB (scipy \(String(format: "%.4f", reference)))")
            if frequency == 50 {
                #expect(gain <= -23 && reference <= -23, "50 Hz through the 100 Hz high-pass: \(gain) dB")
            }
        }
        print("Trigger 100 Hz high-pass at \(Int(rate)) Hz: " + report.joined(separator: ", "))
    }

    /// The filter as `SoundTrigger` wires it (float32 mono, settings' highPass/lowPass): each
    /// block's RMS level against numpy's of scipy's filtered signal.
    static let levelCases: [(rate: Double, highPass: Double?, lowPass: Double?)] = [
        (48000, 100, nil), (48000, nil, 3400), (48000, 1000, 10000), (16000, 100, 3400), (44100, nil, nil),
    ]

    @Test(arguments: levelCases.indices)
    func triggerLevelsMatchScipy(_ caseIndex: Int) throws {
        let (rate, highPass, lowPass) = Self.levelCases[caseIndex]
        let samples = Self.testSignal(rate: rate, count: Int(rate / 2), seed: 99).map { Float($0) }
        let spec = switch (highPass, lowPass) {
        case let (high?, low?): "band:\(high):\(low)"
        case let (high?, nil): "hp:\(high)"
        case let (nil, low?): "lp:\(low)"
        case (nil, nil): "none"
        }
        let blockFrames = Int(rate / 100)
        let expected = try Self.python("levels", input: samples.map(Double.init), ["\(rate)", "\(blockFrames)", spec])
        try #require(expected.count == samples.count / blockFrames)
        let trigger = SoundTrigger(settings: TriggerSettings(measure: .rms, channels: .mix, highPass: highPass, lowPass: lowPass, threshold: 0),
                                   configuration: Self.configuration(.float32, rate: Int(rate), channels: 1))
        let levels = Self.blockLevels(trigger, Self.bytes(samples), chunk: 333)
        try #require(levels.count == expected.count)
        let difference = zip(levels, expected).map { Swift.abs($0 - $1) }.max()!
        #expect(difference < 1e-9, "\(spec) at \(rate) Hz: block levels differ by up to \(difference) dB")
        print("Trigger block levels through \(spec) at \(Int(rate)) Hz, max |swift - numpy/scipy|: \(String(format: "%.3g", difference)) dB")
    }

    /// The settings refuse a filter edge at or above half the device rate (scipy's butter would too).
    @Test func filterEdgeAboveNyquistIsRefused() {
        #expect(throws: RecorderError.self) { try TriggerSettings(highPass: 1000, lowPass: 10000).validate(deviceRate: 16000) }
        #expect(throws: Never.self) { try TriggerSettings(highPass: 1000, lowPass: 10000).validate(deviceRate: 48000) }
    }

    // MARK: 2. The percentile window against numpy

    static let percentiles = [0.0, 10, 50, 90, 100]

    /// After every add, each percentile of the window against `numpy.percentile` of the last
    /// `capacity` values, within 1e-12: numpy interpolates as `b - (b - a)·(1 - t)` when the
    /// fraction t ≥ 0.5, the window as `a + (b - a)·t`, which differ by an ulp or so (7e-15
    /// at -60). A third of the values are rounded to one decimal so that the window
    /// holds equal values (removing the oldest of several equal ones), and 12500 values wrap
    /// even the 6000-value ring more than once.
    @Test(arguments: [1, 7, 100, 6000])
    func percentileWindowMatchesNumpy(_ capacity: Int) throws {
        var random = Random(state: 2024 + UInt64(capacity))
        let values: [Double] = (0..<12500).map { index in
            let value = -60 + 40 * random.uniform()
            return index % 3 == 0 ? (value * 10).rounded() / 10 : value
        }
        let expected = try Self.python("percentile", input: values, ["\(capacity)"] + Self.percentiles.map { "\($0)" })
        try #require(expected.count == values.count * Self.percentiles.count)
        var windows = Self.percentiles.map { PercentileWindow(capacity: capacity, percentile: $0) }
        var largest = 0.0, mismatches = 0
        for (index, value) in values.enumerated() {
            for column in windows.indices {
                windows[column].add(value)
                let reference = expected[index * Self.percentiles.count + column]
                let difference = windows[column].value.map { Swift.abs($0 - reference) } ?? .infinity
                largest = Swift.max(largest, difference)
                if difference > 1e-12 {
                    mismatches += 1
                    if mismatches <= 5 { Issue.record("capacity \(capacity), p\(Self.percentiles[column]), value #\(index): \(String(describing: windows[column].value)), numpy \(reference)") }
                }
            }
        }
        #expect(mismatches == 0)
        #expect(windows.allSatisfy { $0.count == capacity })
        print("Percentile window, capacity \(capacity): max |swift - numpy.percentile| over \(values.count) adds × \(Self.percentiles.count) percentiles = \(largest)")
    }

    @Test func emptyPercentileWindowHasNoValue() {
        var window = PercentileWindow(capacity: 0, percentile: 50)
        #expect(window.value == nil)
        #expect(window.capacity == 1)
        window.add(-3)
        window.add(-5)
        #expect(window.value == -5)
        #expect(window.count == 1)
    }

    // MARK: Feeding a trigger

    static func configuration(_ format: SampleFormat, rate: Int, channels: Int) -> PCMConfiguration {
        PCMConfiguration(sampleFormat: format, sampleRate: rate, channels: channels, periodFrames: rate / 100, bufferFrames: rate / 10)
    }

    static func bytes<T>(_ samples: [T]) -> [UInt8] { samples.withUnsafeBytes { Array($0) } }

    /// Interleaved samples in [-1, 1] as the device format's bytes (integers rounded, as a
    /// converter would).
    static func bytes(_ samples: [Double], format: SampleFormat) -> [UInt8] {
        switch format {
        case .int16: bytes(samples.map { Int16(($0 * 32768).rounded()) })
        case .int32: bytes(samples.map { Int32(($0 * 2_147_483_648).rounded()) })
        case .float32: bytes(samples.map { Float($0) })
        }
    }

    /// Feeds all of `bytes` from engine position 0 in chunks of at most `chunk` frames (never
    /// past a block's end); `block` sees each completed block's end position and decision.
    static func feed(_ trigger: SoundTrigger, _ bytes: [UInt8], bytesPerFrame: Int, chunk: Int,
                     block: (_ end: Int64, _ decision: SoundTrigger.Decision?) -> Void) {
        let frames = bytes.count / bytesPerFrame
        bytes.withUnsafeBytes { raw in
            var frame = 0
            while frame < frames {
                let count = Swift.min(chunk, trigger.framesToBlockEnd, frames - frame)
                let decision = trigger.feed(raw.baseAddress! + frame * bytesPerFrame, frames: count, at: Int64(frame))
                frame += count
                if trigger.framesToBlockEnd == trigger.blockFrames { block(Int64(frame), decision) }
                else { #expect(decision == nil) }
            }
        }
    }

    /// The level of every block `bytes` completes.
    static func blockLevels(_ trigger: SoundTrigger, _ bytes: [UInt8], bytesPerFrame: Int = 4, chunk: Int) -> [Double] {
        var levels: [Double] = []
        feed(trigger, bytes, bytesPerFrame: bytesPerFrame, chunk: chunk) { _, _ in levels.append(trigger.currentLevel) }
        return levels
    }

    // MARK: 3. Block levels

    /// A 1 kHz sine of RMS 0.1 in the left channel; the right one silent or a 1 kHz sine of
    /// RMS 0.01 in opposite phase. 48 kHz: a 10 ms block holds exactly 10 periods.
    static func stereo(rightRMS: Double, frames: Int) -> [Double] {
        var samples: [Double] = []
        for n in 0..<frames {
            let phase = sin(2 * Double.pi * 1000 * Double(n) / 48000)
            samples += [0.1 * 2.0.squareRoot() * phase, -rightRMS * 2.0.squareRoot() * phase]
        }
        return samples
    }

    /// The level (dBFS) of one block of one channel's samples, by definition.
    static func level(_ block: [Double], _ measure: TriggerSettings.Measure) -> Double {
        let amplitude = measure == .rms
            ? (block.map { $0 * $0 }.reduce(0, +) / Double(block.count)).squareRoot()
            : block.map { Swift.abs($0) }.max()!
        return amplitude > 0 ? Swift.max(-160, 20 * log10(amplitude)) : -160
    }

    static let formats: [SampleFormat] = [.int16, .float32, .int32]

    @Test(arguments: formats, [0.0, 0.01])
    func levelsOfASine(_ format: SampleFormat, rightRMS: Double) throws {
        let frames = 48000 / 5
        let samples = Self.stereo(rightRMS: rightRMS, frames: frames)
        let data = Self.bytes(samples, format: format)
        // What the device delivers, back in [-1, 1]: the definitions work on these.
        let scale = switch format { case .int16: 32768.0; case .int32: 2_147_483_648.0; case .float32: 1.0 }
        let delivered: [Double] = switch format {
        case .int16: samples.map { Double(Int16(($0 * 32768).rounded())) / scale }
        case .int32: samples.map { Double(Int32(($0 * 2_147_483_648).rounded())) / scale }
        case .float32: samples.map { Double(Float($0)) }
        }
        let left = stride(from: 0, to: delivered.count, by: 2).map { delivered[$0] }
        let right = stride(from: 1, to: delivered.count, by: 2).map { delivered[$0] }
        let mix = zip(left, right).map { ($0 + $1) / 2 }

        // The documented figures: RMS 0.1 is -20 dBFS, its peak 0.1·√2 is -16.99; the mix
        // halves a sine beside silence (-6.02 dB) and subtracts one in opposite phase.
        let loud = (rms: -20.0, peak: 20 * log10(0.1 * 2.0.squareRoot()))
        let quiet = rightRMS > 0 ? (rms: 20 * log10(rightRMS), peak: 20 * log10(rightRMS * 2.0.squareRoot())) : (rms: -160.0, peak: -160.0)
        let mixed = (rms: 20 * log10((0.1 - rightRMS) / 2), peak: 20 * log10((0.1 - rightRMS) / 2 * 2.0.squareRoot()))

        var report: [String] = []
        for measure in TriggerSettings.Measure.allCases {
            for channels in TriggerSettings.Channels.allCases {
                let trigger = SoundTrigger(settings: TriggerSettings(measure: measure, channels: channels, threshold: 0),
                                           configuration: Self.configuration(format, rate: 48000, channels: 2))
                #expect(trigger.blockFrames == 480)
                let levels = Self.blockLevels(trigger, data, bytesPerFrame: 2 * format.bytesPerSample, chunk: 137)
                try #require(levels.count == frames / 480)
                let documented = switch (channels, measure) {
                case (.any, .rms): loud.rms
                case (.any, .peak): loud.peak
                case (.each, .rms): quiet.rms
                case (.each, .peak): quiet.peak
                case (.mix, .rms): mixed.rms
                case (.mix, .peak): mixed.peak
                }
                let definitions = levels.indices.map { index in
                    let range = (index * 480)..<((index + 1) * 480)
                    return switch channels {
                    case .any: Swift.max(Self.level(Array(left[range]), measure), Self.level(Array(right[range]), measure))
                    case .each: Swift.min(Self.level(Array(left[range]), measure), Self.level(Array(right[range]), measure))
                    case .mix: Self.level(Array(mix[range]), measure)
                    }
                }
                let fromDefinition = zip(levels, definitions).map { Swift.abs($0 - $1) }.max()!
                let fromDocumented = levels.map { Swift.abs($0 - documented) }.max()!
                #expect(fromDefinition < 1e-9, "\(format) \(measure) \(channels): \(levels) against \(definitions)")
                #expect(fromDocumented < 0.05, "\(format) \(measure) \(channels): \(levels) against \(documented)")
                report.append("\(measure)/\(channels) \(String(format: "%.3f", levels[0])) (Δ≤\(String(format: "%.1e", fromDocumented)))")
            }
        }
        print("Trigger levels, 1 kHz RMS 0.1 beside \(rightRMS > 0 ? "RMS 0.01 in opposite phase" : "silence"), \(format): " + report.joined(separator: ", "))
    }

    // MARK: 4. The detector

    /// 16 kHz mono float32: a block is 160 frames.
    static let rate = 16000
    static let block = 160

    /// A signal as runs of blocks at a level (dBFS; -160 is silence): ±a alternating, whose
    /// RMS and peak are both exactly a.
    static func blocks(_ runs: [(blocks: Int, dB: Double)]) -> [Float] {
        var samples: [Float] = []
        for run in runs {
            let amplitude = run.dB <= -160 ? 0 : pow(10, run.dB / 20)
            for n in 0..<(run.blocks * block) { samples.append(Float(n % 2 == 0 ? amplitude : -amplitude)) }
        }
        return samples
    }

    struct Decided: Equatable, CustomStringConvertible {
        var at: Int64
        var decision: SoundTrigger.Decision
        var description: String { "\(decision) at \(at)" }
    }

    /// Every decision with the position (end of the block) it was made at.
    static func decisions(_ settings: TriggerSettings, _ samples: [Float], chunk: Int = 70) -> [Decided] {
        let trigger = SoundTrigger(settings: settings, configuration: configuration(.float32, rate: rate, channels: 1))
        var decided: [Decided] = []
        feed(trigger, bytes(samples), bytesPerFrame: 4, chunk: chunk) { end, decision in
            if let decision { decided.append(Decided(at: end, decision: decision)) }
        }
        return decided
    }

    static func frames(_ blocks: Int) -> Int64 { Int64(blocks * block) }

    /// Threshold -30 dBFS, closing at -36 (hysteresis 6), attack 50 ms (5 blocks), hang 0.5 s.
    static let absolute = TriggerSettings(threshold: -30, hysteresis: 6, attack: 0.05, hang: 0.5)
    static let quiet = -60.0, loud = -20.0

    @Test func absoluteThresholdOpensAfterTheAttackAndClosesAfterTheHang() {
        let decided = Self.decisions(Self.absolute, Self.blocks([(100, Self.quiet), (100, Self.loud), (200, Self.quiet)]))
        // Onset: the run's first block (100); decided when 5 blocks have passed. The close:
        // the end of the last loud block (200) plus the hang, 8000 frames, decided right then.
        #expect(decided == [
            Decided(at: Self.frames(105), decision: .open(onset: Self.frames(100))),
            Decided(at: Self.frames(250), decision: .close(end: Self.frames(200) + 8000, lastAbove: Self.frames(200))),
        ])
    }

    @Test func aClickShorterThanTheAttackOpensNothing() {
        // 4 blocks (40 ms) < 50 ms; runs interrupted by one quiet block do not add up.
        #expect(Self.decisions(Self.absolute, Self.blocks([(50, Self.quiet), (4, Self.loud), (50, Self.quiet),
                                                           (3, Self.loud), (1, Self.quiet), (3, Self.loud), (50, Self.quiet)])) == [])
        // 5 blocks is the attack: it opens, with the onset at the run's start.
        let decided = Self.decisions(Self.absolute, Self.blocks([(50, Self.quiet), (5, Self.loud), (100, Self.quiet)]))
        #expect(decided.first == Decided(at: Self.frames(55), decision: .open(onset: Self.frames(50))))
        // An attack not a whole number of blocks (45 ms) counts whole blocks: 5 again.
        var settings = Self.absolute
        settings.attack = 0.045
        #expect(Self.decisions(settings, Self.blocks([(50, Self.quiet), (4, Self.loud), (100, Self.quiet)])) == [])
        #expect(Self.decisions(settings, Self.blocks([(50, Self.quiet), (5, Self.loud), (100, Self.quiet)])).first
            == Decided(at: Self.frames(55), decision: .open(onset: Self.frames(50))))
        // No attack: the first block above opens.
        settings.attack = 0
        #expect(Self.decisions(settings, Self.blocks([(50, Self.quiet), (1, Self.loud), (100, Self.quiet)])).first
            == Decided(at: Self.frames(51), decision: .open(onset: Self.frames(50))))
    }

    @Test func pausesShorterThanTheHangKeepOneEvent() {
        // Pauses of 30 and 49 blocks (< 50, the hang): one event, closed 0.5 s after the last loud block.
        let decided = Self.decisions(Self.absolute, Self.blocks([(20, Self.quiet), (30, Self.loud), (30, Self.quiet), (30, Self.loud),
                                                                 (49, Self.quiet), (30, Self.loud), (100, Self.quiet)]))
        let lastAbove = Self.frames(20 + 30 + 30 + 30 + 49 + 30)
        #expect(decided == [
            Decided(at: Self.frames(25), decision: .open(onset: Self.frames(20))),
            Decided(at: lastAbove + 8000, decision: .close(end: lastAbove + 8000, lastAbove: lastAbove)),
        ])
        // A pause as long as the hang closes the event; the next sound is a new one.
        let split = Self.decisions(Self.absolute, Self.blocks([(20, Self.quiet), (30, Self.loud), (50, Self.quiet), (30, Self.loud), (100, Self.quiet)]))
        #expect(split == [
            Decided(at: Self.frames(25), decision: .open(onset: Self.frames(20))),
            Decided(at: Self.frames(100), decision: .close(end: Self.frames(100), lastAbove: Self.frames(50))),
            Decided(at: Self.frames(105), decision: .open(onset: Self.frames(100))),
            Decided(at: Self.frames(180), decision: .close(end: Self.frames(180), lastAbove: Self.frames(130))),
        ])
    }

    @Test func theCloseIsTheLastBlockAbovePlusTheHang() {
        // A hang of 0.505 s (8080 frames, not whole blocks): the event ends 8080 frames after
        // the last block above, decided at the end of the block that contains that position.
        var settings = Self.absolute
        settings.hang = 0.505
        let decided = Self.decisions(settings, Self.blocks([(10, Self.quiet), (10, Self.loud), (100, Self.quiet)]))
        #expect(decided == [
            Decided(at: Self.frames(15), decision: .open(onset: Self.frames(10))),
            Decided(at: Self.frames(20 + 51), decision: .close(end: Self.frames(20) + 8080, lastAbove: Self.frames(20))),
        ])
        // No hang: the first block below closes, at the end of the last one above.
        settings.hang = 0
        #expect(Self.decisions(settings, Self.blocks([(10, Self.quiet), (10, Self.loud), (10, Self.quiet)])) == [
            Decided(at: Self.frames(15), decision: .open(onset: Self.frames(10))),
            Decided(at: Self.frames(21), decision: .close(end: Self.frames(20), lastAbove: Self.frames(20))),
        ])
    }

    @Test func hysteresisKeepsAnEventOpenAndOpensNothing() {
        // -33 dBFS lies between the closing (-36) and opening (-30) levels.
        let between = -33.0
        let decided = Self.decisions(Self.absolute, Self.blocks([(10, Self.quiet), (20, Self.loud), (100, between), (100, Self.quiet),
                                                                 (100, between), (100, Self.quiet)]))
        #expect(decided == [
            Decided(at: Self.frames(15), decision: .open(onset: Self.frames(10))),
            Decided(at: Self.frames(130 + 50), decision: .close(end: Self.frames(130) + 8000, lastAbove: Self.frames(130))),
        ])
        // Just below the closing level (-37) counts as quiet: the hang runs from the loud sound's end.
        let below = Self.decisions(Self.absolute, Self.blocks([(10, Self.quiet), (20, Self.loud), (100, -37)]))
        #expect(below.last == Decided(at: Self.frames(30 + 50), decision: .close(end: Self.frames(30) + 8000, lastAbove: Self.frames(30))))
        // Without hysteresis -33 closes it.
        var settings = Self.absolute
        settings.hysteresis = 0
        #expect(Self.decisions(settings, Self.blocks([(10, Self.quiet), (20, Self.loud), (100, between)])).last
            == Decided(at: Self.frames(30 + 50), decision: .close(end: Self.frames(30) + 8000, lastAbove: Self.frames(30))))
    }

    @Test func anEventOverABackgroundAboveTheHysteresisClosesWhenItsSoundGoes() {
        // A steady background at -34 dBFS: above the closing level by hysteresis alone (-36),
        // below the opening one (-30). With 2 s of it measured, the event closes halfway (-32).
        let decided = Self.decisions(Self.absolute, Self.blocks([(200, -34), (20, Self.loud), (300, -34)]))
        #expect(decided == [
            Decided(at: Self.frames(205), decision: .open(onset: Self.frames(200))),
            Decided(at: Self.frames(220 + 50), decision: .close(end: Self.frames(220) + 8000, lastAbove: Self.frames(220))),
        ])
    }

    /// The relative threshold: 12 dB above the 10th percentile of the last 60 s of block levels.
    static let relative = TriggerSettings(threshold: nil, aboveFloor: 12, floorWindow: 60, floorPercentile: 10)

    /// White noise whose level rises by 20 dB over 240 s (from -60 dBFS RMS), 16 kHz mono.
    static let risingNoise: [Float] = {
        var random = Random(state: 31337)
        let count = 240 * rate
        return (0..<count).map { n in Float(0.001 * pow(10, Double(n) / Double(count)) * random.gaussian()) }
    }()

    @Test func aSlowlyRisingNoiseFloorOpensNothingButABurstOnItDoes() {
        #expect(Self.decisions(Self.relative, Self.risingNoise, chunk: 1000) == [])
        // The same noise 20 dB louder for a second from 150 s.
        var burst = Self.risingNoise
        for n in (150 * Self.rate)..<(151 * Self.rate) { burst[n] *= 10 }
        let decided = Self.decisions(Self.relative, burst, chunk: 1000)
        // Onset at the burst's first block, after the 50 ms attack; closed 2 s (the hang) after
        // its last block: the noise after it stays below the closing level (floor + 6 dB).
        let start = Int64(150 * Self.rate), end = Int64(151 * Self.rate)
        #expect(decided == [
            Decided(at: start + 800, decision: .open(onset: start)),
            Decided(at: end + 2 * Int64(Self.rate), decision: .close(end: end + 2 * Int64(Self.rate), lastAbove: end)),
        ])
    }

    @Test func aRelativeTriggerOpensNothingInItsFirstSecond() {
        // Loud (-20) from 0.5 to 0.9 s: there is no floor yet. Again at 1.5 s: against the
        // floor of the quiet -60 (the 10th percentile of 150 blocks, 110 of them quiet), it opens.
        let samples = Self.blocks([(50, Self.quiet), (40, Self.loud), (60, Self.quiet), (50, Self.loud), (50, Self.quiet)])
        let trigger = SoundTrigger(settings: Self.relative, configuration: Self.configuration(.float32, rate: Self.rate, channels: 1))
        var decided: [Decided] = []
        var blocks = 0, withFloor: [Int] = []
        Self.feed(trigger, Self.bytes(samples), bytesPerFrame: 4, chunk: 100) { end, decision in
            blocks += 1
            if trigger.thresholds != nil && trigger.currentFloor != nil { withFloor.append(blocks) }
            if let decision { decided.append(Decided(at: end, decision: decision)) }
        }
        // The block just decided joined the floor: a second's worth (100 blocks) makes one.
        #expect(withFloor == Array(100...250))
        #expect(decided.first == Decided(at: Self.frames(155), decision: .open(onset: Self.frames(150))))
        #expect(decided.allSatisfy { $0.at > Int64(Self.rate) })
    }
}
