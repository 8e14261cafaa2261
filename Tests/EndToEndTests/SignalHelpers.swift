import Foundation
import RecdTestSupport

/// Stereo 16-bit noise at 48 kHz from a fixed LCG, written to `directory`: no two stretches
/// alike, so a stretch found in it is found at one offset only.
func noiseInput(_ directory: TemporaryDirectory, seconds: Int, seed: UInt32 = 0x1234_5678) -> (path: String, samples: [Int16]) {
    let samples = Signal.noise16(frames: seconds * 48000, channels: 2, seed: seed)
    let path = directory.file("noise-\(seconds)-\(seed).raw")
    Signal.write(samples, to: path)
    return (path, samples)
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
