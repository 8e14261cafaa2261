import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import RecorderModel
import Testing

/// The `spectrum` topic through the real daemon on the paced device, with the sound server's
/// 440 Hz tone (-12 dBFS) on both channels: columns only while a client
/// subscribes (the node's thread exists only then), the tone in its bin, columns on while a
/// recording starts from listening; `recctl listen --spectrum` draws it.
@Suite("Spectrum", .serialized)
struct SpectrumTests {
    /// Columns from `client` until `count` have come (or 20 s have passed).
    func columns(_ client: RecdConnection, count: Int) throws -> [Spectrum] {
        var columns: [Spectrum] = []
        let deadline = Date().addingTimeInterval(20)
        while columns.count < count, Date() < deadline {
            let notification = try client.nextNotification(timeout: 20)
            if case .spectrum(let column?) = notification.value { columns.append(column) }
        }
        return columns
    }

    @Test func columnsOnlyWhileSubscribedWithTheToneInItsBin() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"flac\"\n")
        let _: ListenResult = try daemon.connect().call(.listen, ListenParams(preRoll: 1))
        _ = try #require(daemon.waitForStatus { ($0.listening?.preRollHeld ?? 0) >= 0.5 })
        #expect(daemon.threads(named: "recd-spectrum") == 0, "a spectrum computed for nobody")

        // The tone's peak per channel, from the level meter: what the spectrum must agree with.
        let meter = try daemon.connect()
        let _: SubscribeResult = try meter.call(.subscribe, SubscribeParams(topics: [.levels]))
        let levels = try #require(daemon.waitForStatus { $0.levels.channels.count == 2 && $0.levels.channels.allSatisfy { $0.peak > -30 } }?.levels)
        let tonePeak = Double(levels.channels.map(\.peak).max()!)
        #expect(abs(Double(levels.channels[0].peak) - Double(levels.channels[1].peak)) < 0.1, "the same tone on both channels: \(levels)")
        let client = try daemon.connect()
        let subscription: SubscribeResult = try client.call(.subscribe, SubscribeParams(topics: [.spectrum], interval: 0.05))
        let heard = try columns(client, count: 20)
        try #require(heard.count == 20, "\(heard.count) columns in 20 s")
        #expect(daemon.threads(named: "recd-spectrum") == 1)
        // Every column: 513 bins at 48 kHz, 50 ms apart, the tone's bin (440 Hz is 9.39 bins:
        // bin 9) the loudest, at the tone's peak less the Hann window's scalloping 0.39 bins
        // off centre (sinc(0.39) / (1 - 0.39²): 0.86 dB).
        let bin = 9
        for (index, column) in heard.enumerated() {
            #expect(column.sampleRate == 48000 && column.size == 1024 && column.dBFS.count == 513)
            let peak = column.dBFS.indices.max { column.dBFS[$0] < column.dBFS[$1] }!
            #expect(peak == bin, "column \(index): loudest bin \(peak) (\(column.frequency(ofBin: peak)) Hz)")
            #expect(abs(Double(column.dBFS[bin]) - (tonePeak - 0.86)) < 0.3, "column \(index): \(column.dBFS[bin]) dBFS at 440 Hz, the tone's peak \(tonePeak)")
            // Far from the tone (5–15 kHz): the sound server's tone has nothing there.
            let far = column.dBFS[107...320].max()!
            #expect(far < -60, "column \(index): \(far) dBFS between 5 and 15 kHz")
        }
        // Columns 50 ms apart by their frames' capture times, in order; on a loaded machine one
        // may be left out (the node's worker or the hub behind: the next is as good), never
        // sent twice or out of order.
        let steps = zip(heard.dropFirst(), heard).map { ($0.time - $1.time) / 0.05 }
        #expect(steps.allSatisfy { $0 > 0.6 && abs($0 - $0.rounded()) < 0.4 }, "column steps in periods: \(steps)")
        #expect(steps.filter { $0.rounded() == 1 }.count >= steps.count - 2, "columns left out: \(steps)")

        // A recording started from listening keeps the same engine, and the columns go on.
        let _: Recording = try daemon.connect().call(.start, StartParams(name: "spectral"))
        #expect(daemon.waitForStatus { $0.currentTime >= 0.3 } != nil)
        #expect(try columns(client, count: 5).count == 5, "columns while recording")
        let _: Recording = try daemon.connect().call(.stop)

        // The last subscriber leaves: the node and its thread go.
        let _: UnsubscribeResult = try client.call(.unsubscribe, UnsubscribeParams(subscription: subscription.subscription))
        #expect(waitUntil(timeout: 20) { daemon.threads(named: "recd-spectrum") == 0 }, "the spectrum goes on for nobody")
        #expect(daemon.terminate() == 0)
    }

    /// `recctl listen --spectrum` in a terminal: a ruler in kHz, then lines whose loudest
    /// character sits where 440 Hz is.
    @Test func recctlListenSpectrumDrawsTheTone() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let columns = 100
        let terminal = try Tmux(columns: columns, rows: 30, command: [Binaries.recctl, "--socket", daemon.socket, "listen", "--spectrum"])
        // 88 characters span 0–24 kHz: 440 Hz is in the second (272 Hz each).
        let drawn = { terminal.screen().split(separator: "\n").map(String.init).filter { $0.range(of: #"^\d\d:\d\d:\d\d\.\d "#, options: .regularExpression) != nil } }
        #expect(waitUntil(timeout: 20) { drawn().count >= 5 }, "\(terminal.screen())")
        let screen = terminal.screen()
        #expect(screen.contains("|0.0k") && screen.contains("|2.7k"), "the ruler: \(screen)")
        for line in drawn().prefix(5) {
            let shades = Array(line.dropFirst(11))
            // Fitted to the terminal (tmux drops the trailing blanks: quiet bands).
            #expect(shades.count <= columns - 12, "\(line)")
            let loudest = shades.indices.max { SpectrogramShade.rank(shades[$0]) < SpectrogramShade.rank(shades[$1]) }
            #expect(loudest == 1, "the tone's character: \(line)")
        }
    }
}

/// recctl's shades, quiet to loud (`recctl listen --help`).
enum SpectrogramShade {
    static let order = Array(" .:-=+*#%@")
    static func rank(_ character: Character) -> Int { order.firstIndex(of: character) ?? -1 }
}
