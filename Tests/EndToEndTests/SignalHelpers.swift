import Foundation
import RecdTestSupport

/// Stereo 16-bit noise at 48 kHz from a fixed LCG, written to `directory`: no two stretches
/// alike, so a stretch found in it is found at one offset only.
func noiseInput(_ directory: TemporaryDirectory, seconds: Int, seed: UInt32 = 0x1234_5678) -> (path: String, samples: [Int16]) {
    var state = seed
    var samples = [Int16](repeating: 0, count: seconds * 48000 * 2)
    for index in samples.indices {
        state = state &* 1_664_525 &+ 1_013_904_223
        samples[index] = Int16(truncatingIfNeeded: Int32(bitPattern: state) >> 18)  // about -12 dBFS
    }
    let path = directory.file("noise-\(seconds)-\(seed).raw")
    Signal.write(samples, to: path)
    return (path, samples)
}

/// Signal to noise (dB) of `converted` against `reference` shifted by `lag`, away from both
/// ends (`margin` samples), where resampling filters start and stop.
func signalToNoise(_ converted: [Double], _ reference: [Double], lag: Int, margin: Int = 1600, upTo end: Int? = nil) -> Double {
    var signal = 0.0, noise = 0.0
    for index in margin..<min(end ?? Int.max, converted.count - margin) where index + lag >= 0 && index + lag < reference.count {
        let a = converted[index], b = reference[index + lag]
        signal += b * b
        noise += (a - b) * (a - b)
    }
    return 10 * log10(signal / max(noise, 1e-20))
}

extension Daemon {
    /// recd's threads with this name (/proc/PID/task/*/comm).
    func threads(named name: String) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.pid)/task")) ?? []
        return tasks.filter {
            (try? String(contentsOfFile: "/proc/\(process.pid)/task/\($0)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) == name
        }.count
    }
}
