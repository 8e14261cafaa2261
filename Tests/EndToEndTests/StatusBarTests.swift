import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// recctl's live line in a real terminal (tmux, read back from the screen), and its status-bar
/// formats on a pipe.
@Suite("recctl live line and status bars")
struct StatusBarTests {
    let inputs = TemporaryDirectory()

    /// A paced recording of a stereo half-scale 1 kHz tone (peaks at -6 dBFS), long enough to watch.
    func recordingDaemon(_ server: PulseServer, seconds: Int = 60) throws -> Daemon {
        let tone = Signal.toInt16(Signal.sine(frequency: 1000, rate: 48000, frames: seconds * 48000, channels: 2, amplitude: 0.5))
        let input = inputs.file("tone.raw")
        Signal.write(tone, to: input)
        try server.tone()
        return try Daemon(device: TestDevices.pacedFile(input, server: server))
    }

    func elapsed(_ daemon: Daemon) -> Double {
        ((try? daemon.connect().call(.status, as: StatusResult.self))?.currentTime) ?? 0
    }

    @Test(arguments: [80, 120])
    func liveLineStaysOneLineInATerminalOf(columns: Int) throws {
        let server = try PulseServer()
        let daemon = try recordingDaemon(server)
        #expect(try recctl(daemon, "start", "wide", "--format", "wav").status == 0)
        let terminal = try Tmux(columns: columns, rows: 12, command: [Binaries.recctl, "--socket", daemon.socket, "watch"])

        // Let it redraw for at least a second of recording (about ten redraws).
        #expect(waitUntil(timeout: 20) { terminal.screen().contains("● recording") }, "\(terminal.screen())")
        let start = elapsed(daemon)
        #expect(waitUntil(timeout: 20) { elapsed(daemon) >= start + 1.2 })
        let screen = terminal.screen()
        let lines = screen.split(separator: "\n").map(String.init).filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        #expect(lines.count == 1, "the live line left lines behind:\n\(screen)")
        let line = try #require(lines.first)
        #expect(line.count < columns, "\(line.count) characters: \(line)")
        #expect(line.contains("● recording") && line.contains("L ▕") && line.contains("R ▕") && line.contains("-6.0"), "\(line)")
        #expect(line.contains("wide"))
        if columns >= 120 {
            #expect(line.contains("-6.0/"), "peak and average fit in 120 columns: \(line)")
        }

        // Narrower (SIGWINCH): the next redraws fit the new width, with fewer fields.
        terminal.resize(columns: 50)
        let before = elapsed(daemon)
        #expect(waitUntil(timeout: 20) { elapsed(daemon) >= before + 0.5 })
        #expect(waitUntil(timeout: 20) {
            let last = terminal.screen().split(separator: "\n").last.map(String.init) ?? ""
            return last.contains("● recording") && last.count < 50
        }, "\(terminal.screen())")
        #expect(try recctl(daemon, "stop").status == 0)
        #expect(daemon.terminate() == 0)
    }

    @Test func waybarFormatPrintsOneJSONObjectPerChange() throws {
        let server = try PulseServer()
        let daemon = try recordingDaemon(server, seconds: 10)
        let watch = try BackgroundCommand(Binaries.recctl, ["--socket", daemon.socket, "watch", "--format", "waybar",
                                                            "--interval", "0.2", "--until", "finished"])
        #expect(waitUntil { watch.stdout.contains("\n") })
        // Recording until the bar has shown what is checked below, then stopped (a deadline:
        // with a duration, a loaded machine could run past the second it looks for).
        #expect(try recctl(daemon, "start", "bar").status == 0)
        let shown = { (stdout: String) -> [[String: Any]] in
            stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
                .filter { $0["class"] as? String == "recording" }
        }
        #expect(waitUntil {
            let recording = shown(watch.stdout)
            return recording.count >= 3 && recording.contains { ($0["text"] as? String)?.hasPrefix("● 00:01") == true }
                && recording.contains { $0["percentage"] as? Int == 90 }
        }, "\(watch.stdout)")
        #expect(try recctl(daemon, "stop").status == 0)
        #expect(watch.wait(timeout: 30) == 0, "\(watch.stderr)")

        let objects = try watch.stdout.split(separator: "\n").map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
        }
        for object in objects {
            #expect(Set(object.keys) == ["text", "tooltip", "class", "percentage"], "\(object)")
        }
        #expect(objects.first?["class"] as? String == "idle")
        #expect(objects.first?["text"] as? String == "")
        #expect(objects.last?["class"] as? String == "finished")
        let recording = objects.filter { $0["class"] as? String == "recording" }
        #expect(recording.count >= 3, "\(watch.stdout)")
        #expect(recording.contains { ($0["text"] as? String)?.hasPrefix("● 00:01") == true }, "\(watch.stdout)")
        // -6 dBFS on a 60 dB scale.
        #expect(recording.contains { $0["percentage"] as? Int == 90 }, "\(watch.stdout)")
        #expect(recording.contains { ($0["tooltip"] as? String)?.contains("bar.wav") == true })
        // One object per change: no line repeats the one before.
        let lines = watch.stdout.split(separator: "\n")
        #expect(zip(lines, lines.dropFirst()).allSatisfy { $0 != $1 })
    }

    @Test func plainFormatPrintsOneShortLinePerChange() throws {
        let server = try PulseServer()
        let daemon = try recordingDaemon(server, seconds: 10)
        let watch = try BackgroundCommand(Binaries.recctl, ["--socket", daemon.socket, "watch", "--format", "plain",
                                                            "--interval", "0.2", "--until", "finished"])
        #expect(waitUntil { watch.stdout.contains("\n") })
        // Recording until the line checked below has shown, then stopped (a deadline: with a
        // duration, a loaded machine could run past the second it looks for).
        #expect(try recctl(daemon, "start", "plain").status == 0)
        #expect(waitUntil { watch.stdout.components(separatedBy: "\n").contains { $0.hasPrefix("● 00:01 -6.0 dB") } }, "\(watch.stdout)")
        #expect(try recctl(daemon, "stop").status == 0)
        #expect(watch.wait(timeout: 30) == 0, "\(watch.stderr)")
        let lines = watch.stdout.components(separatedBy: "\n").dropLast()
        #expect(lines.first == "")  // idle: nothing to show
        #expect(lines.contains { $0.hasPrefix("● 00:01 -6.0 dB") }, "\(watch.stdout)")
        #expect(lines.last == "")   // finished
        #expect(lines.allSatisfy { !$0.contains("\u{1B}") && $0.count < 30 })
    }
}

/// A private tmux server with one window running `command`, read back with capture-pane.
final class Tmux {
    private let directory = TemporaryDirectory()
    var socket: String { directory.file("tmux") }

    init(columns: Int, rows: Int, command: [String]) throws {
        let quoted = command.map { "'" + $0.replacingOccurrences(of: "'", with: #"'\''"#) + "'" }.joined(separator: " ")
        let result = try run("/usr/bin/tmux", ["-S", socket, "-f", "/dev/null", "new-session", "-d", "-x", String(columns),
                                               "-y", String(rows), "-e", "NO_COLOR=1", quoted])
        guard result.status == 0 else { throw TestFailure("tmux did not start: \(result.stderr)") }
    }

    /// What the window shows now, one line per row, trailing spaces trimmed.
    func screen() -> String {
        (try? run("/usr/bin/tmux", ["-S", socket, "capture-pane", "-p"]).stdout) ?? ""
    }

    func resize(columns: Int) {
        _ = try? run("/usr/bin/tmux", ["-S", socket, "resize-window", "-x", String(columns)])
    }

    deinit {
        _ = try? run("/usr/bin/tmux", ["-S", socket, "kill-server"])
    }
}
