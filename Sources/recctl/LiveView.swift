import Foundation
import Glibc
import RecdProtocol

/// What `watch` and `start --wait` show: one line redrawn in place on a terminal, or one JSON
/// event per line (flushed as it arrives) for pipes and scripts.
final class LiveView {
    let json: Bool
    /// Shows nothing (progress on a pipe).
    let quiet: Bool
    private var state: RecorderState = .idle
    private var time: Double = 0
    private var levels: Levels = .none
    private var error: RecorderError?
    private var warning: RecorderWarning?
    private var drawn = false
    /// The snapshot's segment is old news: only segments closed while watching get a line.
    private var seenSegment = false

    init(json: Bool, quiet: Bool = false) {
        self.json = json
        self.quiet = quiet
    }

    func apply(_ values: [TopicValue], seq: UInt64? = nil, timestamp: Double? = nil) {
        for value in values {
            if json {
                Output.printJSON(TopicUpdate(value: value, seq: seq ?? 0, timestamp: timestamp ?? Date().timeIntervalSince1970))
                continue
            }
            switch value {
            case .state(let newState): state = newState
            case .currentTime(let seconds): time = seconds
            case .levels(let newLevels): levels = newLevels
            case .error(let newError): error = newError
            case .recording: break
            case .warning(let newWarning): warning = newWarning
            case .segment(let segment):
                defer { seenSegment = true }
                guard seenSegment, let segment, !quiet else { break }
                // A line of its own above the redrawn one.
                if drawn { print("\r\u{1B}[2K", terminator: "") }
                print(Output.describeClosed(segment))
                drawn = false
            }
        }
        if !json && !quiet { draw() }
    }

    /// Leaves the last line in place and moves to the next.
    func finish() {
        if drawn && !json {
            print("")
            fflush(nil)
        }
        drawn = false
    }

    private func draw() {
        var line = Output.styledState(state.name) + "  " + Output.duration(time)
        if state.name == .recording || state.name == .paused {
            for (index, channel) in levels.channels.enumerated() {
                line += "  " + Meter.name(channel: index, of: levels.channels.count) + " " + Meter.bar(channel)
                    + " " + Meter.decibels(channel.peak) + "/" + Meter.decibels(channel.average).trimmingCharacters(in: .whitespaces) + " dB"
            }
            if levels.clipCount > 0 { line += "  " + Output.red("clip \(levels.clipCount)") }
        }
        if let name = state.recording?.name { line += "  " + name }
        if let segment = state.recording?.segment, segment.index > 1 { line += Output.dim(" #\(segment.index)") }
        if let wait = state.deviceWait {
            line += "  " + Output.yellow(wait.error.code.rawValue) + " " + Output.retry(wait)
        }
        if let warning { line += "  " + Output.yellow(warning.code.rawValue) }
        if let error { line += "  " + Output.red(error.code.rawValue) }
        // Carriage return + erase line: the meter is redrawn in place.
        print("\r\u{1B}[2K" + line, terminator: "")
        fflush(nil)
        drawn = true
    }
}

/// Parsing of --duration and --at.
enum TimeParsing {
    /// "90", "1.5", "1:30", "00:01:30", "01:02:03.5" -> seconds.
    static func duration(_ text: String) -> Double? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard (1...3).contains(parts.count) else { return nil }
        var seconds = 0.0
        for (index, part) in parts.enumerated() {
            let isLast = index == parts.count - 1
            guard let value = isLast ? Double(part) : Double(Int(part) ?? -1), value >= 0, value.isFinite else { return nil }
            if !isLast, value < 0 { return nil }
            seconds = seconds * 60 + value
        }
        return seconds > 0 ? seconds : nil
    }

    /// "14:30" / "14:30:15" (next occurrence, local), "+10m"/"+90"/"+00:05:00", or RFC 3339.
    static func time(_ text: String, now: Date = Date()) -> Date? {
        if text.hasPrefix("+") {
            var rest = String(text.dropFirst())
            var multiplier = 1.0
            if let unit = rest.last, let factor = ["s": 1.0, "m": 60.0, "h": 3600.0][String(unit)] {
                multiplier = factor
                rest.removeLast()
            }
            return duration(rest).map { now.addingTimeInterval($0 * multiplier) }
        }
        if let date = WireCoding.parseDate(text) { return date }
        let parts = text.split(separator: ":").map { Int($0) }
        guard (2...3).contains(parts.count), parts.allSatisfy({ $0 != nil }) else { return nil }
        let (hour, minute, second) = (parts[0]!, parts[1]!, parts.count == 3 ? parts[2]! : 0)
        guard (0..<24).contains(hour), (0..<60).contains(minute), (0..<60).contains(second) else { return nil }
        let calendar = Calendar.current
        guard let today = calendar.date(bySettingHour: hour, minute: minute, second: second, of: now) else { return nil }
        return today > now ? today : calendar.date(byAdding: .day, value: 1, to: today)
    }
}

/// Hints for errors people can fix themselves.
enum Hints {
    static func hint(for error: RPCError) -> String? {
        switch error.data?.code {
        case "noPermission":
            let group = deviceGroup() ?? "audio"
            return "the user recd runs as cannot open the sound device. Sound devices belong to group '\(group)': "
                + "add that user to it (`sudo usermod -aG \(group) USER`) and restart recd."
        case "deviceBusy":
            return "another program holds the device. Record from a shared device instead (e.g. dsnoop:CARD=… or default), or stop the other program."
        case "deviceNotFound":
            return "`recctl devices` lists the capture devices ALSA knows; set `device` in recd.toml or pass recd --device."
        case "notPermitted":
            return "you may watch but not control this recorder. An administrator can add your user or group to "
                + "server.control_users / server.control_groups in recd.toml (then `systemctl reload recd`)."
        case "invalidState":
            return "`recctl status` shows what the recorder is doing now."
        case "tooManyClients":
            return "raise server.max_clients in recd.toml if this many clients are expected."
        default:
            return nil
        }
    }

    /// The group owning the sound devices, as /dev/snd shows it.
    static func deviceGroup() -> String? {
        var info = stat()
        for path in ["/dev/snd/controlC0", "/dev/snd/timer", "/dev/snd"] where stat(path, &info) == 0 {
            if let group = getgrgid(info.st_gid), let name = group.pointee.gr_name { return String(cString: name) }
        }
        return nil
    }
}
