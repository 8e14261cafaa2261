// Records from an ALSA device in-process with RecorderCore — what AVAudioRecorder is to an
// iOS app: a Recorder, its Observed state, settings, metering and typed errors.
//
//     simple-recorder DEVICE DIRECTORY SECONDS [NAME]
//     simple-recorder default ~/Music 10 memo
//
// Prints each state, a level line per second, and the finished file; exits 1 with the
// recorder's error code and message if the recording cannot begin or fails.
import Dispatch
import Foundation
import RecorderCore
import RecorderModel

let arguments = CommandLine.arguments
guard arguments.count >= 4, let seconds = Double(arguments[3]) else {
    FileHandle.standardError.write(Data("usage: simple-recorder DEVICE DIRECTORY SECONDS [NAME]\n".utf8))
    exit(64)
}
let recorder = Recorder(configuration: RecorderConfiguration(
    device: arguments[1], recordingsDirectory: arguments[2],
    defaultSettings: RecordingSettings(format: .flac, sampleRate: 48000, channels: 2, quality: .high),
    levelsInterval: 1.0))

// Every state change, in order, on a queue of the subscription's own.
let ended = DispatchSemaphore(value: 0)
let stateToken = recorder.state.subscribe(delivery: .every) { state in
    print("state: \(state.name.rawValue)")
    if state.name == .finished || state.name == .failed { ended.signal() }
}
// Levels: the newest only, if this handler is slow.
let levelsToken = recorder.levels.subscribe { levels in
    guard !levels.channels.isEmpty else { return }
    let peaks = levels.channels.map { String(format: "%.1f", $0.peak) }.joined(separator: " ")
    print(String(format: "%6.1f s  peak dBFS: ", recorder.currentTime.value) + peaks)
}

do throws(RecorderError) {
    try recorder.prepare(name: arguments.count > 4 ? arguments[4] : nil)
    try recorder.record(forDuration: seconds)
} catch {
    FileHandle.standardError.write(Data("simple-recorder: \(error.code.rawValue): \(error.message)\n".utf8))
    exit(1)
}
ended.wait()
switch recorder.state.value {
case .finished(let recording):
    print("finished: \(recording.path) (\(recording.frames) frames, \(recording.duration) s)")
case .failed(_, let error):
    FileHandle.standardError.write(Data("simple-recorder: \(error.code.rawValue): \(error.message)\n".utf8))
    exit(1)
default:
    break
}
withExtendedLifetime((stateToken, levelsToken)) {}
