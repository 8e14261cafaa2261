import ArgumentParser
import FoundationEssentials
import Glibc
import RecdProtocol
import RecorderModel
import Synchronization

/// How `watch` shows the recorder.
enum LiveFormat: String, CaseIterable, ExpressibleByArgument {
    /// One line redrawn in place, fitted to the terminal's width.
    case terminal
    /// Every event as a JSON object, one per line.
    case json
    /// waybar's custom module: `{"text", "tooltip", "class", "percentage"}` per line.
    case waybar
    /// One short line per change, for polybar and i3blocks.
    case plain

    var isStatusBar: Bool { self == .waybar || self == .plain }
}

/// Set by SIGWINCH: the terminal's width is measured again before the next redraw.
let terminalResized = Atomic<Bool>(true)

/// What `watch` and `start --wait` show: one line redrawn in place on a terminal, one JSON
/// event per line (flushed as it arrives) for pipes and scripts, or a status-bar line.
final class LiveView {
    let format: LiveFormat
    /// Shows nothing (progress on a pipe).
    let quiet: Bool
    private var state: RecorderState = .idle
    private var time: Double = 0
    private var levels: Levels = .none
    private var error: RecorderError?
    private var warning: RecorderWarning?
    private var drawn = false
    private var columns: Int?
    private var lastStatusLine: String?
    /// The snapshot's segment is old news: only segments closed while watching get a line.
    private var seenSegment = false
    private var seenRedated = false
    /// The snapshot's deletion happened before the watch began: only later ones are shown.
    private var seenDeletion = false
    /// The snapshot's trigger event happened before the watch began.
    private var seenTriggerEvent = false
    /// A triggered recording's event is open (from the `trigger` topic, snapshot included).
    private var eventOpen = false
    /// When listening began (the `listening` topic): while only listening, the time shown is
    /// how long it has listened, not the last recording's length.
    private var listeningSince: Date?
    /// `listen --spectrum`: the spectrum's lines above the meter.
    var spectrogram: SpectrogramLines?

    init(format: LiveFormat, quiet: Bool = false) {
        self.format = format
        self.quiet = quiet
        if format == .terminal && !quiet {
            signal(SIGWINCH) { _ in terminalResized.store(true, ordering: .relaxed) }
        }
    }

    convenience init(json: Bool, quiet: Bool = false) {
        self.init(format: json ? .json : .terminal, quiet: quiet)
    }

    func apply(_ values: [TopicValue], seq: UInt64? = nil, timestamp: Double? = nil) {
        for value in values {
            if format == .json {
                Output.printJSON(TopicUpdate(value: value, seq: seq ?? 0, timestamp: timestamp ?? Date().timeIntervalSince1970))
                continue
            }
            switch value {
            case .state(let newState): state = newState
            case .currentTime(let seconds): time = seconds
            case .levels(let newLevels): levels = newLevels
            case .error(let newError): error = newError
            case .recording: break
            case .listening(let listening): listeningSince = listening?.since
            case .warning(let newWarning): warning = newWarning
            case .retention(let deletion):
                defer { seenDeletion = true }
                if seenDeletion, let deletion { printAbove(Output.describeDeletion(deletion)) }
            case .trigger(let event):
                defer { seenTriggerEvent = true }
                eventOpen = event?.kind == .opened
                if seenTriggerEvent, let event { printAbove(Output.describeEvent(event)) }
            case .segment(let segment):
                defer { seenSegment = true }
                if seenSegment, let segment { printAbove(Output.describeClosed(segment)) }
            case .redated(let file):
                defer { seenRedated = true }
                if seenRedated, let file { printAbove(Output.describeRedated(file)) }
            case .spectrum(let column):
                if let column, let line = spectrogram?.add(column, columns: columns ?? 80) { printAbove(line) }
            }
        }
        guard !quiet else { return }
        let time = shownTime
        switch format {
        case .terminal: draw(time: time)
        case .waybar: emit(StatusBar.waybar(state: state, time: time, levels: levels, error: error, eventOpen: eventOpen))
        case .plain: emit(StatusBar.plain(state: state, time: time, levels: levels, error: error, eventOpen: eventOpen))
        case .json: break
        }
    }

    /// An event on a line of its own above the redrawn one (terminal only).
    private func printAbove(_ line: String) {
        guard !quiet, format == .terminal else { return }
        if drawn { print("\r\u{1B}[2K", terminator: "") }
        print(line)
        drawn = false
    }

    /// Leaves the last line in place and moves to the next.
    func finish() {
        if drawn && format == .terminal {
            print("")
            fflush(nil)
        }
        drawn = false
    }

    /// The recording's length, or while only listening, how long it has listened.
    private var shownTime: Double {
        guard state.name == .listening else { return time }
        return listeningSince.map { max(0, Date().timeIntervalSince($0)) } ?? 0
    }

    private func draw(time: Double) {
        if terminalResized.exchange(false, ordering: .relaxed) { columns = Self.terminalColumns() }
        let line = LiveLine.render(state: state, time: time, levels: levels, error: error, warning: warning, columns: columns)
        // Carriage return + erase line: the meter is redrawn in place. It never reaches the last
        // column, so the terminal never wraps it (a wrapped line would be left behind).
        print("\r\u{1B}[2K" + line, terminator: "")
        fflush(nil)
        drawn = true
    }

    /// Status bars get a line only when it changed.
    private func emit(_ line: String) {
        guard line != lastStatusLine else { return }
        lastStatusLine = line
        Output.line(line)
    }

    /// The terminal's width (TIOCGWINSZ); COLUMNS when the terminal does not say; nil when
    /// neither does (then nothing is cut).
    static func terminalColumns() -> Int? {
        var size = winsize()
        if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        return ProcessInfo.processInfo.environment["COLUMNS"].flatMap(Int.init).flatMap { $0 > 0 ? $0 : nil }
    }
}

/// The terminal's live line, fitted to a width: shorter meters first, then fewer fields.
enum LiveLine {
    /// How much of the line to show; each step is narrower than the one before.
    struct Detail {
        var meterWidth: Int
        var average = true
        var peak = true
        var name = true
        var meters: Bool { meterWidth > 0 }
    }

    static let details: [Detail] = [
        Detail(meterWidth: 24), Detail(meterWidth: 16), Detail(meterWidth: 12),
        Detail(meterWidth: 12, average: false), Detail(meterWidth: 8, average: false),
        Detail(meterWidth: 8, average: false, peak: false), Detail(meterWidth: 4, average: false, peak: false),
        Detail(meterWidth: 0, average: false),
        Detail(meterWidth: 0, average: false, peak: false),
        Detail(meterWidth: 0, average: false, peak: false, name: false),
    ]

    static func render(state: RecorderState, time: Double, levels: Levels, error: RecorderError?,
                       warning: RecorderWarning? = nil, columns: Int?) -> String {
        // One column stays free: writing the last one would leave the cursor waiting to wrap.
        let limit = columns.map { max(1, $0 - 1) }
        for detail in details {
            let line = render(state: state, time: time, levels: levels, error: error, warning: warning, detail: detail)
            if limit == nil || visibleWidth(line) <= limit! { return line }
        }
        let line = render(state: state, time: time, levels: levels, error: error, warning: warning, detail: details.last!)
        return truncate(line, to: limit!)
    }

    static func render(state: RecorderState, time: Double, levels: Levels, error: RecorderError?,
                       warning: RecorderWarning? = nil, detail: Detail) -> String {
        var line = Output.styledState(state.name) + "  " + Output.duration(time)
        if [.recording, .paused, .listening].contains(state.name) {
            for (index, channel) in levels.channels.enumerated() where detail.meters || detail.peak {
                line += "  " + Meter.name(channel: index, of: levels.channels.count)
                if detail.meters { line += " " + Meter.bar(channel, width: detail.meterWidth) }
                if detail.peak {
                    line += " " + Meter.decibels(channel.peak)
                    if detail.average { line += "/" + Meter.decibels(channel.average).trimmingWhitespace() }
                    line += " dB"
                }
            }
            if levels.clipCount > 0 { line += "  " + Output.red("clip \(levels.clipCount)") }
        }
        if detail.name, let name = state.recording?.name { line += "  " + name }
        if detail.name, let segment = state.recording?.segment, segment.index > 1 { line += Output.dim(" #\(segment.index)") }
        if let wait = state.deviceWait {
            line += "  " + Output.yellow(wait.error.code.rawValue) + " " + Output.retry(wait)
        }
        if let warning { line += "  " + Output.yellow(warning.code.rawValue) }
        if let error { line += "  " + Output.red(error.code.rawValue) }
        return line
    }

    /// Columns the text takes on a terminal: escape sequences take none, every character one
    /// (what recctl prints has no wide characters except in recording names).
    static func visibleWidth(_ text: String) -> Int {
        var width = 0
        var inEscape = false
        for scalar in text.unicodeScalars {
            if inEscape {
                if (0x40...0x7E).contains(scalar.value) && scalar != "[" { inEscape = false }
            } else if scalar == "\u{1B}" {
                inEscape = true
            } else if scalar.properties.generalCategory != .nonspacingMark {
                width += 1
            }
        }
        return width
    }

    /// The first `columns` visible characters, keeping escape sequences (and resetting style).
    static func truncate(_ text: String, to columns: Int) -> String {
        var result = ""
        var width = 0
        var inEscape = false
        for scalar in text.unicodeScalars {
            if inEscape {
                result.unicodeScalars.append(scalar)
                if (0x40...0x7E).contains(scalar.value) && scalar != "[" { inEscape = false }
            } else if scalar == "\u{1B}" {
                inEscape = true
                result.unicodeScalars.append(scalar)
            } else {
                guard width < columns else { break }
                result.unicodeScalars.append(scalar)
                width += 1
            }
        }
        return Output.useColor ? result + "\u{1B}[0m" : result
    }
}

/// Lines for status bars: waybar's JSON and a plain line for polybar and i3blocks.
enum StatusBar {
    /// waybar's custom-module JSON (`return-type: json`).
    struct WaybarLine: Encodable {
        var text: String
        var tooltip: String
        /// The state's name, for CSS (`#custom-recd.recording`).
        var `class`: String
        /// The loudest channel's peak, 0 (-60 dBFS or below) to 100 (full scale).
        var percentage: Int
    }

    /// A triggered recording with no event open: listening, nothing written (a bar shows it
    /// as such, not as recording).
    static func isArmed(_ state: RecorderState, eventOpen: Bool) -> Bool {
        state.name == .recording && state.recording?.trigger != nil && !eventOpen
    }

    static func text(state: RecorderState, time: Double, error: RecorderError?, eventOpen: Bool = false) -> String {
        let elapsed = clock(time)
        if isArmed(state, eventOpen: eventOpen) { return "◎ armed" }
        switch state.name {
        case .recording: return "● " + elapsed
        case .paused: return "‖ " + elapsed
        case .preparing: return "◌ " + (state.recording?.scheduledAt != nil ? "scheduled" : "preparing")
        case .stopping: return "■ " + elapsed
        case .failed: return "✗ " + ((error ?? state.error)?.code.rawValue ?? "failed")
        case .waitingForDevice: return "⧗ " + elapsed + " " + (state.deviceWait?.error.code.rawValue ?? "waiting")
        case .listening: return "○"
        case .idle, .finished: return ""
        }
    }

    static func percentage(state: RecorderState, levels: Levels) -> Int {
        guard state.name == .recording || state.name == .listening, let peak = levels.channels.map(\.peak).max() else { return 0 }
        return Int(((max(-60, min(0, peak)) + 60) / 60 * 100).rounded())
    }

    static func waybar(state: RecorderState, time: Double, levels: Levels, error: RecorderError?, eventOpen: Bool = false) -> String {
        let armed = isArmed(state, eventOpen: eventOpen)
        var tooltip = "recd: " + (armed ? "armed (sound-activated)" : state.name.rawValue)
        if let recording = state.recording {
            // The file being written, as it is named (segments and events have names of their own).
            let file = recording.trigger != nil ? "\(recording.name)/ (a file per sound event)"
                : recording.path.split(separator: "/").last.map(String.init) ?? "\(recording.name).\(recording.format.fileExtension)"
            tooltip += " \(file)\nelapsed \(Output.duration(time))"
            tooltip += "\n\(recording.format.rawValue) \(recording.sampleRate) Hz \(recording.channels) ch"
        }
        if state.name == .recording || state.name == .listening, let peak = levels.channels.map(\.peak).max() {
            tooltip += "\npeak " + Meter.decibels(peak).trimmingWhitespace() + " dBFS"
        }
        if let error = error ?? state.error { tooltip += "\n\(error.code.rawValue): \(error.message)" }
        if let wait = state.deviceWait { tooltip += "\nwaiting for the device: \(wait.error.message)" }
        let line = WaybarLine(text: text(state: state, time: time, error: error, eventOpen: eventOpen), tooltip: tooltip,
                              class: armed ? "armed" : state.name.rawValue, percentage: percentage(state: state, levels: levels))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(line)) ?? Data(), as: UTF8.self)
    }

    static func plain(state: RecorderState, time: Double, levels: Levels, error: RecorderError?, eventOpen: Bool = false) -> String {
        var line = text(state: state, time: time, error: error, eventOpen: eventOpen)
        if state.name == .recording || state.name == .listening, let peak = levels.channels.map(\.peak).max() {
            line += " " + Meter.decibels(peak).trimmingWhitespace() + " dB"
        }
        return line
    }

    /// 1:02:03 or 02:03.
    static func clock(_ seconds: Double) -> String {
        let total = Int(max(0, seconds))
        return total >= 3600 ? String(printf: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60)
                             : String(printf: "%02d:%02d", total / 60, total % 60)
    }
}

/// Parsing of --duration and --at.
enum TimeParsing {
    /// recd's one spelling of durations (`DurationText`): "90", "1.5", "90s", "1h30m", "01:02:03.5".
    static func duration(_ text: String) -> Double? { DurationText.seconds(text) }

    /// "14:30" / "14:30:15" (next occurrence, local), "+10m"/"+90"/"+00:05:00", or RFC 3339.
    static func time(_ text: String, now: Date = Date()) -> Date? {
        if text.hasPrefix("+") {
            return duration(String(text.dropFirst())).map { now.addingTimeInterval($0) }
        }
        if let date = WireCoding.parseDate(text) { return date }
        let parts = text.split(separator: ":").map { Int($0) }
        guard (2...3).contains(parts.count), parts.allSatisfy({ $0 != nil }) else { return nil }
        let (hour, minute, second) = (parts[0]!, parts[1]!, parts.count == 3 ? parts[2]! : 0)
        guard (0..<24).contains(hour), (0..<60).contains(minute), (0..<60).contains(second) else { return nil }
        let today = CalendarTime.localTime(on: now, hour: hour, minute: minute, second: second)
        return today > now ? today : CalendarTime.localTime(on: now, hour: hour, minute: minute, second: second, dayOffset: 1)
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

/// `recctl listen --spectrum`: the input's spectrum as text, one line per two columns (0.1 s;
/// the louder of each pair, so a short sound is not skipped), frequency across (0 Hz at the
/// left, linear to half the rate), each character shaded by the loudest bin under it.
struct SpectrogramLines {
    /// Shades from quiet to loud, and the dBFS range they span.
    static let shades = Array(" .:-=+*#%@")
    static let quietest: Float = -100
    static let loudest: Float = -20
    private var pending: Spectrum?
    private var ruled = false

    /// The line to print for `column`, or nil while its pair is incomplete.
    mutating func add(_ column: Spectrum, columns: Int) -> String? {
        guard let first = pending else {
            pending = column
            return nil
        }
        pending = nil
        var louder = column
        if first.dBFS.count == column.dBFS.count {
            louder.dBFS = zip(first.dBFS, column.dBFS).map { Swift.max($0, $1) }
        }
        let line = Self.render(louder, width: Swift.max(10, columns - 12))
        guard !ruled else { return line }
        ruled = true
        return Self.ruler(louder, width: Swift.max(10, columns - 12)) + "\n" + line
    }

    /// `HH:MM:SS.s ` and one character per frequency band.
    static func render(_ column: Spectrum, width: Int) -> String {
        let bins = column.dBFS.count
        var text = ""
        for index in 0..<width {
            let first = index * bins / width, last = Swift.max(first + 1, (index + 1) * bins / width)
            let level = column.dBFS[first..<Swift.min(last, bins)].max() ?? Spectrum.floor
            let fraction = (level - quietest) / (loudest - quietest)
            text.append(shades[Swift.min(shades.count - 1, Swift.max(0, Int(fraction * Float(shades.count))))])
        }
        return Self.clock(column.time) + " " + text
    }

    /// The frequency of every tenth character, in kHz, above the first line.
    static func ruler(_ column: Spectrum, width: Int) -> String {
        var text = String(repeating: " ", count: 11)
        let nyquist = Double(column.sampleRate) / 2
        var index = 0
        while index < width {
            let label = String(printf: "|%.1fk", nyquist * Double(index) / Double(width) / 1000)
            text += label.count <= 10 ? label + String(repeating: " ", count: 10 - label.count) : String(label.prefix(10))
            index += 10
        }
        return String(text.prefix(11 + width))
    }

    static func clock(_ time: Double) -> String {
        var seconds = time
        var parts = tm()
        var whole = time_t(seconds.rounded(.down))
        localtime_r(&whole, &parts)
        seconds -= Double(whole)
        return String(printf: "%02d:%02d:%02d.%d", parts.tm_hour, parts.tm_min, parts.tm_sec, Int(seconds * 10))
    }
}
