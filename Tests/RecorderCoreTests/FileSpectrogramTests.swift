import Foundation
import Glibc
import RecorderModel
import SignalProcessing
import RecdTestSupport
import Testing

/// A recorded file's spectrogram (FileSpectrogram), on files sox makes: each column where its
/// stretch of the file is, each tone in its bin at its level, the bytes as documented.
@Suite("file spectrogram")
struct FileSpectrogramTests {
    /// 1 s of 1 kHz then 1 s of 5 kHz, both at half of full scale (-6 dBFS), in `format`.
    static func twoTones(_ directory: TemporaryDirectory, _ name: String) throws -> String {
        let path = directory.file(name)
        let first = directory.file("a.wav"), second = directory.file("b.wav")
        for (file, frequency) in [(first, 1000), (second, 5000)] {
            let made = try ChildProcess("/usr/bin/sox", ["-n", "-r", "48000", "-c", "2", "-b", "16", file, "synth", "1", "sine", "\(frequency)", "vol", "0.5"],
                                        environment: ProcessInfo.processInfo.environment)
            guard made.wait(timeout: 30) == 0 else { throw TestFailure("sox failed") }
        }
        let joined = try ChildProcess("/usr/bin/sox", [first, second, path], environment: ProcessInfo.processInfo.environment)
        guard joined.wait(timeout: 30) == 0 else { throw TestFailure("sox failed joining") }
        return path
    }

    @Test(arguments: ["two.wav", "two.flac", "two.ogg"])
    func eachColumnHoldsItsStretchOfTheFile(name: String) throws {
        let directory = TemporaryDirectory()
        let path = try Self.twoTones(directory, name)
        let spectrogram = try FileSpectrogram.compute(path: path, columns: 20)
        #expect(spectrogram.columns == 20 && spectrogram.bins == 513 && spectrogram.size == 1024)
        #expect(spectrogram.sampleRate == 48000 && spectrogram.frames == 96000)
        #expect(spectrogram.levels.count == 20 * 513)
        for column in 0..<20 {
            let levels = spectrogram.levels[(column * 513)..<((column + 1) * 513)]
            let loudest = levels.indices.max { levels[$0] < levels[$1] }! - column * 513
            // 1000 Hz is bin 21.33, 5000 Hz bin 106.67 (at 46.875 Hz a bin).
            let expected = column < 10 ? 21 : 107
            #expect(loudest == expected, "column \(column): loudest bin \(loudest)")
            // Half of full scale (-6.02 dB) less the window's scalloping a third of a bin off
            // centre (0.44 dB); the level is kept to 0.5 dB.
            let dB = spectrogram.floor + Float(levels[column * 513 + loudest]) * spectrogram.step
            // Vorbis, lossy, may move it a little more.
            #expect(abs(dB - (-6.02 - 0.44)) < (name == "two.ogg" ? 2 : 1), "column \(column): \(dB) dBFS")
        }
    }

    @Test func aFileShorterThanItsColumnsGetsFewer() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("short.wav")
        let made = try ChildProcess("/usr/bin/sox", ["-n", "-r", "8000", "-c", "1", "-b", "16", path, "synth", "0.2", "sine", "440"],
                                    environment: ProcessInfo.processInfo.environment)
        #expect(made.wait(timeout: 30) == 0)
        // 1600 frames: three half-windows.
        let spectrogram = try FileSpectrogram.compute(path: path, columns: 600)
        #expect(spectrogram.columns == 3)
        #expect(throws: RecorderError.self) { try FileSpectrogram.compute(path: directory.file("none.wav"), columns: 10) }
    }
}
