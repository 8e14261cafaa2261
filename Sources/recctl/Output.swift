import FoundationEssentials
import Glibc
import RecdProtocol
import RecorderModel
import SystemPackage

/// Text for people: durations, sizes, colors (terminal only, never with NO_COLOR), tables.
enum Output {
    static let isTerminal = isatty(STDOUT_FILENO) == 1
    static let useColor = isTerminal && ProcessInfo.processInfo.environment["NO_COLOR"].map(\.isEmpty) ?? true

    static func line(_ text: String) {
        print(text)
        fflush(nil)
    }

    static func error(_ text: String) {
        let prefix = isatty(STDERR_FILENO) == 1 && useColorOnStderr ? "\u{1B}[31mrecctl:\u{1B}[0m " : "recctl: "
        _ = try? FileDescriptor.standardError.writeAll((prefix + text + "\n").utf8)
    }

    static func hint(_ text: String) {
        _ = try? FileDescriptor.standardError.writeAll(("hint: " + text + "\n").utf8)
    }

    private static let useColorOnStderr = ProcessInfo.processInfo.environment["NO_COLOR"].map(\.isEmpty) ?? true

    static func printJSON(_ value: some Encodable) {
        let encoder = WireCoding.encoder()
        guard let data = try? encoder.encode(value) else { return }
        line(String(decoding: data, as: UTF8.self))
    }

    // MARK: Styles

    static func style(_ text: String, _ code: String) -> String { useColor ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text }
    static func bold(_ text: String) -> String { style(text, "1") }
    static func red(_ text: String) -> String { style(text, "31") }
    static func green(_ text: String) -> String { style(text, "32") }
    static func yellow(_ text: String) -> String { style(text, "33") }
    static func dim(_ text: String) -> String { style(text, "2") }

    static func styledState(_ name: RecorderState.Name) -> String {
        switch name {
        case .recording: red("● recording")
        case .paused: yellow("‖ paused")
        case .waitingForDevice: yellow("… waiting for device")
        case .failed: red("✗ failed")
        case .finished: green("✓ finished")
        case .idle: "idle"
        case .listening: green("○ listening")
        case .preparing: "preparing"
        case .stopping: "stopping"
        }
    }

    // MARK: Formats

    /// 00:01:23.4
    static func duration(_ seconds: Double) -> String {
        let tenths = Int((max(0, seconds) * 10).rounded(.down))
        let total = tenths / 10
        return String(printf: "%02d:%02d:%02d.%d", total / 3600, total / 60 % 60, total % 60, tenths % 10)
    }

    /// 512 B, 1.5 KiB, 23.4 MiB, 1.2 GiB
    static func size(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : String(printf: "%.1f", value) + " " + units[unit]
    }

    /// A segment's measured start (14:59:59.998) shows as the second it is named after.
    static func nearestSecond(_ date: Date?) -> Date? {
        date.map { Date(timeIntervalSince1970: $0.timeIntervalSince1970.rounded()) }
    }

    static func localTime(_ date: Date) -> String {
        CalendarTime.format(date, "%Y-%m-%d %H:%M:%S")
    }

    /// "retry in 0.8 s (attempt 5)"
    static func retry(_ wait: DeviceWait, now: Date = Date()) -> String {
        guard let retryAt = wait.retryAt else {
            return wait.watchingDevices ? "watching for the card (\(wait.attempts) attempts)" : "waiting"
        }
        return String(printf: "retry in %.1f s (attempt %d)", max(0, retryAt.timeIntervalSince(now)), wait.attempts + 1)
    }

    /// "closed segment #3 /path (00:02:00.0, 14:00:00, 2 xruns, after a 3.1 s gap)"
    static func describeClosed(_ segment: Segment) -> String {
        "closed segment #\(segment.index) \(segment.path) (" + segmentDetails(segment) + ")"
    }

    static func describeRedated(_ file: RedatedFile) -> String {
        "re-dated " + (file.previousPath == file.segment.path ? file.segment.path : "\(file.previousPath) -> \(file.segment.path)")
            + " (from " + localTime(file.segment.startedAt) + String(printf: ", the clock was %+.3f s off)", -file.correction)
    }

    static func segmentDetails(_ segment: Segment) -> String {
        var details = [duration(segment.duration), "from " + localTime(segment.startedAt)]
        if segment.unsynchronizedStart != nil { details.append("clock not synchronized") }
        if let before = segment.redatedFrom { details.append("re-dated from " + localTime(before)) }
        if segment.xruns > 0 { details.append("\(segment.xruns) xruns, \(segment.framesLost) frames lost") }
        if let gap = segment.gapBefore { details.append(String(printf: "after a %.1f s gap", gap.duration)) }
        if let end = segment.endReason, end != .length { details.append("ended by " + end.rawValue) }
        return details.joined(separator: ", ")
    }

    static func format(of recording: Recording) -> String {
        var text = "\(recording.format.rawValue) \(recording.sampleRate) Hz \(recording.channels) ch"
        if let bits = recording.bitDepth { text += bits == 32 ? " float" : " \(bits)-bit" }
        let device = recording.deviceFormat
        if device.sampleRate != recording.sampleRate || device.channels != recording.channels {
            text += dim(" (device \(device.sampleFormat) \(device.sampleRate) Hz \(device.channels) ch)")
        }
        return text
    }

    // MARK: Commands' output

    static func printStatus(_ status: StatusResult) {
        var rows: [(String, String)] = [("state", styledState(status.state.name))]
        if let wait = status.state.deviceWait {
            rows.append(("waiting", yellow("\(wait.error.code.rawValue): \(wait.error.message)")))
            rows.append(("", "since " + localTime(wait.since) + ", " + retry(wait)))
        }
        // While listening, the last recording (finished) is `recctl ls`'s business.
        let recording = status.state.name == .listening ? nil : status.recording
        if let recording, let at = recording.startsLater, status.state.name == .preparing {
            rows.append(("starts", localTime(at) + " (in " + duration(max(0, at.timeIntervalSinceNow)) + "): nothing is opened or created until then"))
        }
        if let recording {
            rows.append(("elapsed", duration(status.currentTime)))
            // A triggered recording between events writes nothing: its path is the last event's
            // file, finalized.
            let betweenEvents = recording.trigger != nil && status.trigger?.state != "open"
            let writing = status.state.isActive && status.state.name != .waitingForDevice && !betweenEvents
            if betweenEvents, status.state.isActive {
                rows.append(("file", "none open" + (recording.path.isEmpty ? "" : dim(" (the last event's: \(recording.path))"))))
            } else if !recording.path.isEmpty {
                rows.append(("file", recording.path + (writing ? dim(" (writing .part)") : "")))
            }
            if writing, let segment = recording.segment, segment.index > 1 || recording.segmentSettings?.length != nil {
                let length = recording.segmentSettings?.length.map {
                    (recording.trigger != nil ? ", cut at " : " of ") + duration($0)
                        + (recording.segmentSettings?.alignToClock == true ? " on the clock" : "")
                } ?? ""
                rows.append(recording.trigger != nil ? ("event", "file #\(segment.index)\(length), from " + localTime(segment.startedAt))
                                                     : ("segment", "#\(segment.index)\(length), from " + localTime(segment.startedAt)))
            }
            rows.append(("format", format(of: recording)))
        }
        rows.append(("device", status.device))
        if let listening = status.listening {
            var text = "listening since " + localTime(listening.since)
            if let format = listening.deviceFormat { text += ", \(format.sampleFormat) \(format.sampleRate) Hz \(format.channels) ch" }
            rows.append(("input", text))
            if listening.preRollCapacity > 0 {
                rows.append(("pre-roll", String(printf: "%.1f s of %.1f s held", listening.preRollHeld, listening.preRollCapacity)
                                         + " (" + size(Int64(listening.preRollBytes)) + ")"))
            }
            if let wait = listening.wait {
                rows.append(("", yellow("waiting for the device: \(wait.error.message)")))
            }
        }
        if let preRoll = status.recording?.preRoll, status.state.isActive {
            rows.append(("pre-roll", String(printf: "began %.3f s before the start", preRoll.seconds)))
        }
        if let trigger = status.trigger { rows += triggerRows(trigger) }
        if let schedule = status.schedule { rows.append(("schedule", scheduleRow(schedule))) }
        for (index, tap) in (status.taps ?? []).enumerated() {
            let format = tap.format
            var text = "#\(tap.id) \(format.encoding.rawValue) \(format.sampleRate) Hz \(format.channels) ch"
            if let client = tap.client { text += ", \(client)" }
            if let listeners = tap.listeners { text += listeners == 1 ? ", 1 listener" : ", \(listeners) listeners" }
            if let pid = tap.pid { text += ", pid \(pid)" }
            text += String(printf: ", %.1f s sent", Double(tap.framesSent) / Double(format.sampleRate))
            if tap.chunksDropped > 0 { text += yellow(", \(tap.chunksDropped) chunks dropped (\(tap.framesDropped) frames)") }
            rows.append((index == 0 ? "taps" : "", text))
        }
        if [.recording, .paused, .listening].contains(status.state.name), !status.levels.channels.isEmpty {
            for (index, channel) in status.levels.channels.enumerated() {
                rows.append((index == 0 ? "levels" : "", Meter.describe(channel: index, of: status.levels.channels.count, channel)))
            }
            if status.levels.clipCount > 0 { rows.append(("clipped", red("\(status.levels.clipCount) samples"))) }
        }
        rows.append(("xruns", "\(status.statistics.xruns)" + (status.statistics.framesLost > 0 ? " (\(status.statistics.framesLost) frames lost)" : "")))
        if recording != nil, let drift = status.statistics.deviceClockDriftPPM {
            rows.append(("clock", clockDrift(drift)))
        }
        if let buffer = status.writeBuffer {
            var text = String(printf: "%.1f s of %.1f s waiting to be written, at most %.1f s", buffer.held, buffer.capacity, buffer.peak)
            if buffer.overflows > 0 { text += yellow(", full \(buffer.overflows) time(s): audio lost") }
            rows.append(("buffer", text))
        }
        if recording != nil, status.statistics.segmentsClosed > 0 || !status.statistics.gaps.isEmpty {
            var session = "\(status.statistics.segmentsClosed) segment(s) closed"
            let lost = status.statistics.gaps.filter { $0.error.code == .audioLost }
            let away = status.statistics.gaps.filter { $0.error.code != .audioLost }
            if !away.isEmpty {
                session += String(printf: ", %d device gap(s), %.1f s without capture", away.count, away.reduce(0) { $0 + $1.duration })
            }
            if !lost.isEmpty {
                session += yellow(String(printf: ", %d gap(s) of lost audio, %.3f s", lost.count, lost.reduce(0) { $0 + $1.duration }))
            }
            rows.append(("session", session))
        }
        if let warning = status.warning {
            rows.append(("warning", yellow("\(warning.code.rawValue): \(warning.message)")))
        }
        if let storage = status.storage { rows += storageRows(storage) }
        if let clock = status.clock { rows.append(("time", clockRow(clock))) }
        rows.append(("error", status.error.map { red("\($0.code.rawValue): \($0.message)") } ?? "none"))
        for (key, value) in rows { line(key.padded(to: 9) + value) }
    }

    static func printTable(_ files: [RecordingFile]) {
        guard !files.isEmpty else { return line(dim("no recordings")) }
        let header = ["NAME", "DURATION", "SIZE", "FORMAT", "DATE"]
        func row(_ file: RecordingFile, indent: String = "") -> [String] {
            [indent + file.file, duration(file.duration), size(file.size),
             "\(file.format.rawValue) \(file.sampleRate / 1000) kHz \(file.channels) ch", localTime(nearestSecond(file.startedAt) ?? file.modified)]
        }
        // Segments of one recording (session) under a line that sums them up, in place of its first.
        var rows: [[String]] = []
        var grouped = Set<String>()
        for file in files {
            guard let session = file.session else {
                rows.append(row(file))
                continue
            }
            guard !grouped.contains(session) else { continue }
            grouped.insert(session)
            let segments = files.filter { $0.session == session }.sorted { ($0.segment ?? 0) < ($1.segment ?? 0) }
            if segments.count == 1 {
                rows.append(row(segments[0]))
                continue
            }
            let first = segments[0]
            rows.append(["\(first.sessionName ?? first.name)/ (\(segments.count) segments)",
                         duration(segments.reduce(0) { $0 + $1.duration }), size(segments.reduce(0) { $0 + $1.size }),
                         "\(first.format.rawValue) \(first.sampleRate / 1000) kHz \(first.channels) ch",
                         localTime(nearestSecond(first.startedAt) ?? first.modified)])
            rows += segments.map { row($0, indent: "  ") }
        }
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max()! }
        func render(_ cells: [String]) -> String {
            cells.enumerated().map { index, cell in
                index == cells.count - 1 ? cell : cell.padded(to: widths[index])
            }.joined(separator: "  ")
        }
        line(bold(render(header)))
        for row in rows { line(render(row)) }
    }

    /// "device clock +12.5 ppm against the system clock"; yellow beyond 100 ppm (0.36 s an
    /// hour), which no working crystal reaches: a device whose rate is not what it says.
    static func clockDrift(_ ppm: Double) -> String {
        let tenths = Int((ppm * 10).rounded())
        let text = (tenths < 0 ? "-" : "+") + "\(abs(tenths) / 10).\(abs(tenths) % 10) ppm"
        let line = "device clock " + text + " against the system clock"
        return abs(ppm) > 100 ? yellow(line) : line
    }

    /// The system clock on one line: "synchronized since 2026-11-28 09:40:01 (kernel, max error
    /// 0.012 s); 1 step, the last +259200.000 s at 2026-11-28 09:40:03"; yellow while not
    /// synchronized (the start times recd writes follow the clock as it is).
    static func clockRow(_ clock: ClockStatus) -> String {
        var source = clock.source.rawValue
        if let maxError = clock.maxError, clock.synchronized { source += String(printf: ", max error %.3f s", maxError) }
        var text = (clock.synchronized ? "synchronized" : yellow("not synchronized")) + " since " + localTime(clock.since)
            + dim(" (" + source + ")")
        if let step = clock.lastStep {
            text += "; \(clock.steps) step\(clock.steps == 1 ? "" : "s"), the last " + String(printf: "%+.3f s", step.size)
                + " at " + localTime(step.at)
        } else {
            text += "; no steps"
        }
        if let waiting = clock.filesToRedate, waiting > 0 {
            text += "; \(waiting) file\(waiting == 1 ? "" : "s") to re-date once it is synchronized"
        }
        return text
    }

    /// `storage` and `retention` rows: free and used space, and what retention deletes next.
    static func storageRows(_ storage: StorageStatus) -> [(String, String)] {
        var free = size(storage.freeBytes) + " free of " + size(storage.totalBytes)
        if storage.minimumFreeBytes > 0 { free += dim(" (recording stops at " + size(storage.minimumFreeBytes) + ")") }
        if storage.warningFreeBytes > 0, storage.freeBytes < storage.warningFreeBytes { free = yellow(free) }
        var rows = [("storage", free), ("", "recordings " + size(storage.recordingsBytes) + " in \(storage.recordingsCount) file(s)")]
        guard storage.retention else {
            rows.append(("", "retention off"))
            return rows
        }
        guard let next = storage.retentionNext.first else {
            rows.append(("", "retention: nothing to delete"))
            return rows
        }
        if next.reason != nil {
            let due = storage.retentionNext.map { "\($0.file) (\($0.reason?.rawValue ?? ""))" }
            rows.append(("", yellow("retention deletes now: " + due.joined(separator: ", "))))
        } else {
            rows.append(("", "retention deletes next: \(next.file), " + size(next.size)
                         + (next.dueAt.map { ", due " + localTime($0) } ?? ", when a limit is reached")))
        }
        return rows
    }

    static func printStorage(_ storage: StorageStatus) {
        for (key, value) in storageRows(storage) { line(key.padded(to: 9) + value) }
    }

    /// A triggered recording's event, as `recctl watch` shows it: "event 3 opened /path (onset
    /// 14:00:01)", "event 3 closed /path (00:00:04.2, sound 2.1 s, peak -12.0 dBFS, hang)".
    static func describeEvent(_ event: TriggerEvent) -> String {
        let head = "event \(event.event) \(event.kind.rawValue) \(event.path)"
        if event.kind == .opened { return head + " (onset " + localTime(event.onset) + ")" }
        return head + " (" + duration(event.duration) + String(printf: ", sound %.1f s, peak %.1f dBFS", event.soundDuration, event.peak)
            + (event.reason.map { ", " + $0 } ?? "") + ")"
    }

    /// "window open until 09:00:00; next 2026-11-26 05:00:00–09:00:00" (local time).
    static func scheduleRow(_ schedule: ScheduleStatus) -> String {
        var parts: [String] = []
        if schedule.active, let end = schedule.currentEnd { parts.append("window open until " + localTime(end)) } else { parts.append("outside the windows") }
        if let held = schedule.heldForClock {
            parts.append(yellow("held until the clock is synchronized") + String(printf: " (at most %.0f s more)", held))
        }
        if let start = schedule.nextStart, let end = schedule.nextEnd { parts.append("next " + localTime(start) + " – " + localTime(end)) }
        return parts.joined(separator: "; ")
    }

    /// What `stop` or `cancel` of a start that had not begun says.
    static func cancelledBeforeItsTime(_ recording: Recording, at: Date) -> String {
        "cancelled \(bold(recording.name)), scheduled for \(localTime(at)): nothing was recorded"
    }

    /// "1 event", "2 events".
    static func counted(_ count: Int, _ noun: String) -> String { "\(count) \(noun)" + (count == 1 ? "" : "s") }

    /// The `trigger` rows of `recctl status`: state, level against the thresholds, counts.
    static func triggerRows(_ trigger: TriggerStatus) -> [(String, String)] {
        let settings = trigger.settings
        var rows: [(String, String)] = []
        var state = trigger.state + String(printf: ", level %.1f dBFS", trigger.level)
        if let floor = trigger.floor { state += String(printf: ", floor %.1f", floor) }
        if let open = trigger.openLevel, let close = trigger.closeLevel { state += String(printf: ", opens at %.1f, closes below %.1f", open, close) }
        if trigger.floor == nil, settings.threshold == nil { state += ", measuring the floor" }
        rows.append(("trigger", state))
        rows.append(("", counted(trigger.events, "event") + (trigger.discarded > 0 ? ", \(trigger.discarded) discarded as too short" : "")))
        var how: String
        if let threshold = settings.threshold {
            how = String(printf: "%.1f dBFS", threshold)
        } else {
            how = String(printf: "%.1f dB above the floor (%.0fth percentile over ", settings.aboveFloor, settings.floorPercentile)
                + duration(settings.floorWindow) + ")"
        }
        how += ", \(settings.measure.rawValue) of \(settings.channels.rawValue)"
        if settings.highPass != nil || settings.lowPass != nil {
            let low: String = settings.highPass.map { Limits.number($0) } ?? "0"
            let high: String = settings.lowPass.map { Limits.number($0) } ?? ""
            how += ", band \(low)–\(high) Hz"
        }
        rows.append(("", how))
        rows.append(("", String(printf: "attack %.2f s, hang %.1f s, pre-roll %.1f s", settings.attack, settings.hang, settings.preRoll ?? 0)
            + (settings.minimumLength > 0 ? String(printf: ", minimum %.1f s", settings.minimumLength) : "")
            + (settings.maximumLength.map { ", maximum " + duration($0) } ?? "")))
        return rows
    }

    /// A file retention deleted, as `recctl watch` shows it.
    static func describeDeletion(_ deletion: RetentionDeletion) -> String {
        "retention deleted \(deletion.file) (" + size(deletion.size) + ", from " + localTime(deletion.startedAt)
            + ", \(deletion.reason.rawValue)); " + size(deletion.freeBytes) + " free"
    }

    static func printInfo(_ file: RecordingFile) {
        var rows = [("name", file.name), ("file", file.path), ("format", file.format.rawValue),
                    ("duration", duration(file.duration) + " (\(file.frames) frames)"),
                    ("rate", "\(file.sampleRate) Hz"), ("channels", "\(file.channels)"), ("size", size(file.size)),
                    ("modified", localTime(file.modified))]
        if let start = file.startedAt {
            let clock = switch file.startClock {
            case .unsynchronized: " (first frame; the clock was not synchronized: may be off)"
            case .redated: " (first frame; re-dated once the clock was synchronized)"
            default: " (first frame)"
            }
            rows.insert(("started", UTCTimestamp.text(start) + dim(clock)), at: rows.count - 1)
        }
        for (key, value) in rows { line(key.padded(to: 9) + value) }
    }

    static func printDevices(_ result: DevicesResult) {
        for card in result.cards {
            var marks: [String] = []
            if card.configured { marks.append(green("configured") + (card.inUse ? ", in use by recd" : "")) }
            let usb = card.usb.map { dim("  USB \($0)") } ?? ""
            line(bold("card \(card.index)") + "  \(card.id)  \(card.name)" + usb + (marks.isEmpty ? "" : "  " + marks.joined(separator: ", ")))
            line("    device = \"\(card.stableDevice)\"" + dim(card.usb == nil ? "  (its ALSA id)" : card.serialDevice == nil
                ? "  (the port it is plugged into: it has no serial of its own)" : "  (its serial number)"))
            if card.usb != nil {
                if let serial = card.serialDevice { line("    by serial  " + serial) } else {
                    line("    by serial  " + dim(card.serial.map { "none usable ('\($0)' is shared or empty)" } ?? "none (the device reports no serial)"))
                }
                if let port = card.portDevice { line("    by port    " + port) }
            }
            for link in card.links { line("    link       " + link) }
            if !card.alsaNames.isEmpty {
                line("    ALSA       " + card.alsaNames.joined(separator: "  ") + dim("  (the number changes with probe order)"))
            }
        }
        if !result.devices.isEmpty {
            line(bold("ALSA's capture PCMs") + dim(" (* the configured device)"))
        }
        for device in result.devices {
            let marker = device.name == result.current ? "*" : " "
            let description = device.description.map { dim(" — " + $0.replacing("\n", with: ", ")) } ?? ""
            line("\(marker) \(device.name)\(description)")
        }
        if !result.devices.contains(where: { $0.name == result.current }) && !result.cards.contains(where: \.configured) {
            line("* \(result.current)" + dim(" (configured; not present now)"))
        }
        if let warning = result.warning { line(yellow("warning: ") + warning) }
    }
}

/// A level meter like a VU bar: peak as the bar's length, average as its brighter part.
enum Meter {
    static let width = 24

    static func bar(_ level: ChannelLevel, width: Int = Meter.width) -> String {
        func cells(_ dB: Float) -> Int { Int(((max(-60, min(0, dB)) + 60) / 60 * Float(width)).rounded()) }
        let peak = cells(level.peak)
        let average = min(cells(level.average), peak)
        let solid = String(repeating: "█", count: average)
        let light = String(repeating: "▒", count: peak - average)
        let rest = String(repeating: " ", count: width - peak)
        let color = level.peak >= -1 ? "31" : level.peak >= -9 ? "33" : "32"
        return "▕" + Output.style(solid + light, color) + rest + "▏"
    }

    static func name(channel: Int, of count: Int) -> String {
        count == 2 ? (channel == 0 ? "L" : "R") : count == 1 ? "M" : "\(channel + 1)"
    }

    static func decibels(_ value: Float) -> String {
        value <= -160 ? "  -inf" : String(printf: "%6.1f", value)
    }

    static func describe(channel: Int, of count: Int, _ level: ChannelLevel) -> String {
        "\(name(channel: channel, of: count)) \(bar(level)) peak \(decibels(level.peak)) dB  avg \(decibels(level.average)) dB"
    }
}

extension String {
    /// Followed by spaces up to `width` characters.
    func padded(to width: Int) -> String { self + String(repeating: " ", count: max(0, width - count)) }
}
