import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// `metrics` and `recctl metrics` through the real daemon: Prometheus's text format, checked by
/// Prometheus's own `promtool check metrics`, with counters that follow what happened (files,
/// seconds recorded) and gauges that follow the recorder (state, levels only while someone
/// wants them, the last file's time).
@Suite("Metrics", .serialized)
struct MetricsTests {
    /// Samples of the text: `name{labels}` → value.
    static func samples(_ text: String) -> [String: Double] {
        var result: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            result[String(line[..<space])] = value
        }
        return result
    }

    func metrics(_ daemon: Daemon) throws -> String {
        let result = try run(Binaries.recctl, ["--socket", daemon.socket, "metrics"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout
    }

    /// promtool's verdict on `text` (its exit status and what it said).
    func promtool(_ text: String) throws -> CommandResult {
        let work = TemporaryDirectory()
        let file = work.file("recd.prom")
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        return try run("/bin/sh", ["-c", "/usr/bin/promtool check metrics < '\(file)'"], timeout: 30)
    }

    @Test func recctlMetricsFollowsARecordingInPrometheusFormat() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"flac\"\n")
        let idle = try metrics(daemon)
        let check = try promtool(idle)
        #expect(check.status == 0, "promtool: \(check.stdout) \(check.stderr)\n\(idle)")
        var values = Self.samples(idle)
        #expect(values[#"recd_state{state="idle"}"#] == 1 && values[#"recd_state{state="recording"}"#] == 0, "\(idle)")
        #expect(values["recd_files_total"] == 0 && values["recd_overruns_total"] == 0 && values["recd_frames_lost_total"] == 0)
        #expect(values.keys.contains { $0.hasPrefix("recd_info{version=") })
        #expect(!idle.contains("recd_input_peak_dbfs"), "levels measured for nobody: \(idle)")

        // Two 1 s recordings: two files, 2 s recorded, the state and the last file's end.
        for index in 1...2 {
            let _: Recording = try daemon.connect().call(.start, StartParams(name: "m\(index)", duration: 1))
            // The directory is counted by the storage guard's scan, after `finished`.
            _ = try #require(daemon.waitForStatus { $0.state.name == .finished && $0.recording?.name == "m\(index)"
                                                    && $0.storage?.recordingsCount == index })
        }
        let after = try metrics(daemon)
        values = Self.samples(after)
        #expect(values["recd_files_total"] == 2, "\(after)")
        #expect(abs((values["recd_recorded_seconds_total"] ?? 0) - 2) < 0.01, "\(after)")
        #expect(values[#"recd_state{state="finished"}"#] == 1 && values[#"recd_state{state="idle"}"#] == 0)
        let end = try #require(values["recd_last_file_end_timestamp_seconds"], "\(after)")
        #expect(abs(end - Date().timeIntervalSince1970) < 60)
        #expect((values["recd_disk_free_bytes"] ?? 0) > 0 && values["recd_recordings_files"] == 2, "\(after)")
        let checked = try promtool(after)
        #expect(checked.status == 0, "promtool: \(checked.stdout) \(checked.stderr)")

        // Levels while a client wants them (the tone peaks at -12 dBFS), gone once it leaves.
        let _: ListenResult = try daemon.connect().call(.listen)
        let client = try daemon.connect()
        let subscription: SubscribeResult = try client.call(.subscribe, SubscribeParams(topics: [.levels]))
        _ = try #require(daemon.waitForStatus { $0.levels.channels.count == 2 && $0.levels.channels.allSatisfy { $0.peak > -30 } })
        values = Self.samples(try metrics(daemon))
        #expect(values[#"recd_listening"#] == 1)
        for channel in 0..<2 {
            let peak = try #require(values[#"recd_input_peak_dbfs{channel="\#(channel)"}"#], "no level for channel \(channel)")
            #expect(abs(peak + 12) < 1, "channel \(channel): \(peak) dBFS")
        }
        let _: UnsubscribeResult = try client.call(.unsubscribe, UnsubscribeParams(subscription: subscription.subscription))
        // With nobody metering, a scrape measures at the call (the newest audio held): the tone still.
        let polled = Self.samples(try metrics(daemon))
        #expect((0..<2).allSatisfy { abs((polled[#"recd_input_peak_dbfs{channel="\#($0)"}"#] ?? 0) + 12) < 1 }, "a scrape's levels: \(polled)")
        let json = try run(Binaries.recctl, ["--socket", daemon.socket, "--json", "metrics"], timeout: 30)
        #expect(json.status == 0 && json.stdout.hasPrefix("{") && json.stdout.contains(#""text""#), "\(json.stdout.prefix(200))")
    }
}
