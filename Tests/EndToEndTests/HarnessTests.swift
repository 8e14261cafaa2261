import Foundation
import Glibc
import RecdTestSupport
import Testing

/// The paced device's test signal, which every level- and trigger-dependent test relies on.
@Suite("test harness: the paced device's tone")
struct HarnessTests {
    @Test func zeroRunsAreFoundBetweenTheFirstAndLastSoundOnly() {
        let tone = Signal.toInt16(Signal.sine(frequency: 440, rate: 48000, frames: 4800, channels: 1, amplitude: 0.25))
        let silence = [Int16](repeating: 0, count: 500)
        let gap = [Int16](repeating: 0, count: 120)
        let runs = (silence + tone + gap + tone + silence).withUnsafeBufferPointer { PulseServer.zeroRuns(in: $0) }
        #expect(runs == [120 + 1], "the gap, and the next tone's first sample: sin(0) = 0")
        let clean = (silence + tone + silence).withUnsafeBufferPointer { PulseServer.zeroRuns(in: $0) }
        #expect(clean.isEmpty, "a sine's zero crossings and the silence around it are no gap: \(clean)")
    }

    /// The tone, read back from the sink's monitor by parec (an independent client): -12 dBFS
    /// peak on both channels, and no run of zeros while it plays.
    @Test func theToneIsASteadyMinus12dBFSSineOnBothChannels() throws {
        let server = try PulseServer()
        try server.tone()
        let directory = TemporaryDirectory()
        var environment = ProcessInfo.processInfo.environment
        environment["PULSE_SERVER"] = server.address
        environment["HOME"] = directory.path
        let recorder = try ChildProcess("/bin/sh", ["-c", "exec parec --device=testsink.monitor --rate=48000 --channels=2 "
                                                     + "--format=s16le --latency-msec=20 2>/dev/null"],
                                        environment: environment, output: directory.file("monitor.raw"))
        // Two seconds of the tone (96 000 frames, 384 000 bytes), whatever the machine's load.
        #expect(waitUntil(timeout: 30) {
            ((try? FileManager.default.attributesOfItem(atPath: directory.file("monitor.raw"))[.size] as? Int) ?? 0) >= 384_000
        })
        recorder.signal(SIGKILL)
        _ = recorder.wait(timeout: 10)
        let data = try #require(FileManager.default.contents(atPath: directory.file("monitor.raw")))
        let samples = data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        try #require(samples.count >= 192_000)
        let settled = samples.suffix(96_000)
        let left = stride(from: settled.startIndex, to: settled.endIndex, by: 2).map { settled[$0] }
        let right = stride(from: settled.startIndex + 1, to: settled.endIndex, by: 2).map { settled[$0] }
        #expect(left == right, "the mono tone is on both channels alike")
        let peak = left.map { abs(Int($0)) }.max() ?? 0
        #expect(abs(peak - 8192) <= 2, "peak \(peak), -12 dBFS is 8192")
        let wholeLeft = stride(from: 0, to: samples.count, by: 2).map { samples[$0] }
        #expect(wholeLeft.withUnsafeBufferPointer { PulseServer.zeroRuns(in: $0) }.isEmpty)
        server.stopTone()
    }
}
