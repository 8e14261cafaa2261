import ALSA
import AudioGraph
import RecorderModel
import Synchronization

/// Measures the input as the device delivers it, while listening: what the `levels` topic
/// publishes when no recording meters its own file.
final class InputMeter: CaptureConsumer, @unchecked Sendable {
    // @unchecked: the meter is behind its own lock; the format is immutable.
    let meter: LevelMeter
    private let configuration: PCMConfiguration
    /// Levels go out every `levelsInterval` (which follows who wants them, so it may change
    /// while the meter runs): chunks twice as often keep every interval fed.
    var wakeInterval: Double { Double(levelsNanoseconds.load(ordering: .relaxed)) / 2e9 }
    var levelsInterval: Double {
        get { Double(levelsNanoseconds.load(ordering: .relaxed)) / 1e9 }
        set { levelsNanoseconds.store(UInt64(newValue * 1e9), ordering: .relaxed) }
    }
    private let levelsNanoseconds: Synchronization.Atomic<UInt64>

    init(configuration: PCMConfiguration, levelsInterval: Double) {
        self.configuration = configuration
        meter = LevelMeter(channels: configuration.channels, keepsLastWhenIdle: true)
        levelsNanoseconds = Atomic(UInt64(levelsInterval * 1e9))
    }

    func receive(_ chunk: CaptureChunk) -> Bool {
        meter.measure(chunk.samples, frames: chunk.frames, format: configuration.sampleFormat)
        return true
    }

    func engineFailed(_ error: RecorderError) {}
}
