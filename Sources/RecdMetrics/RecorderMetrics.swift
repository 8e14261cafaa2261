import Dispatch
import FoundationEssentials
import NIOConcurrencyHelpers
import Prometheus
import RecdCommands
import RecdHooks
import RecdProtocol
import RecorderCore

/// recd in Prometheus's text format (doc/metrics.md): what `metrics` answers over the socket
/// and `recctl metrics` prints for node_exporter's textfile collector.
///
/// Two kinds of figures. Counters count what happened since recd started, from the recorder's
/// discrete topics, each value once (`delivery: .every`): files, trigger events, retention,
/// errors, hook runs, the system clock's steps, and what capture lost, summed over the closed
/// segments plus the open one's live counts. Gauges are read from `status` when asked: state,
/// levels (only while someone measures them), the write buffer, the device, the disk, taps,
/// the last file, the system clock's synchronization.
/// Nothing here runs unless something observes the recorder or asks for the text.
///
/// A station of several sources labels every per-source series `source` (names unchanged);
/// the station's own (version, the disk, the system clock, hooks) have no label. A station of
/// one has no `source` label anywhere: its output is what it was before sources.
public final class RecorderMetrics: MetricsSource, Sendable {
    private let registry: PrometheusCollectorRegistry
    private let version: String
    private let sources: [SourceMetrics]
    /// Counting. Never blocks, so it runs on the global pool (a worker per
    /// core), not on the overcommit pool: that one starts a worker whenever work arrives
    /// while its workers are busy or not yet awake, and keeps them all while ticks arrive
    /// (issue 49: one more, now and then, at a segment's end; doc/architecture.md, "Why the
    /// overcommit pool grows").
    private let queue: DispatchQueue
    private let tokens = NIOLockedValueBox<[ObservationToken]>([])
    /// The system clock's steps counted so far: from the first source's `clock` topic (every
    /// source sees the same clock), and from a scrape's `status`, each once.
    private let clockSteps = NIOLockedValueBox(0)
    private let clockStepsCounter: Counter

    public init(station: Station, version: String) {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        self.version = version
        let labelled = station.sources.count > 1
        let queue = DispatchQueue(label: "recd.metrics", target: .global())
        self.queue = queue
        sources = station.sources.map { source in
            SourceMetrics(recorder: source.recorder, labels: labelled ? [("source", source.name)] : [], registry: registry, queue: queue)
        }
        clockStepsCounter = registry.makeCounter(descriptor: .recd("recd_clock_steps_total", help: "Steps of the system clock since recd started"))
        registry.makeGauge(descriptor: .recd("recd_info", help: "recd's version (always 1)"), labels: [("version", version)]).set(to: 1)
        let clockSteps = clockSteps
        let counter = clockStepsCounter
        tokens.withLockedValue { $0 = [
            station.sources[0].recorder.clock.subscribe(on: queue, delivery: .every) { clock in
                SourceMetrics.count(steps: clock.steps, counted: clockSteps, counter: counter)
            },
        ] }
    }

    /// Counts each hook run by its outcome (`recd_hook_runs_total`).
    public func observe(hooks: HookRunner) {
        let registry = self.registry
        let token = hooks.lastRun.subscribe(on: queue, delivery: .every, sendingCurrent: false) { run in
            guard let run else { return }
            registry.makeCounter(descriptor: .recd("recd_hook_runs_total", help: "Hook runs since recd started, by outcome"), labels: [("outcome", run.outcome.rawValue)]).increment()
        }
        tokens.withLockedValue { $0.append(token) }
    }

    /// Waits until every value observed so far is counted (for tests and a final scrape).
    public func drain() { queue.sync {} }

    /// `statuses`: each source's status, in the station's order. The counters first take in
    /// every value published before the statuses were taken: a scrape that shows a recording
    /// finished counts its file.
    public func exposition(statuses: [StatusResult]) -> String {
        drain()
        let first = statuses[0]
        if let clock = first.clock {
            SourceMetrics.count(steps: clock.steps, counted: clockSteps, counter: clockStepsCounter)
            SourceMetrics.gauge(registry, "recd_clock_synchronized", [], "1 while the system clock is synchronized (the kernel's word, or systemd-timesyncd's where the kernel cannot be asked)")
                .set(to: clock.synchronized ? 1 : 0)
        }
        if let storage = first.storage {
            SourceMetrics.gauge(registry, "recd_disk_free_bytes", [], "Free bytes on the recordings' filesystem").set(to: Double(storage.freeBytes))
            SourceMetrics.gauge(registry, "recd_disk_size_bytes", [], "Size of the recordings' filesystem").set(to: Double(storage.totalBytes))
        }
        for (source, status) in zip(sources, statuses) { source.update(status) }
        return registry.emitToString()
    }
}

/// One source's series: its counters, fed by its recorder's topics, and its gauges, set from
/// its status at a scrape. `labels` is `source` on a station of several, none on a station of one.
private final class SourceMetrics: Sendable {
    private let registry: PrometheusCollectorRegistry
    private let labels: [(String, String)]
    private let tokens = NIOLockedValueBox<[ObservationToken]>([])
    private let counters: Counters
    /// Channel gauges made so far (levels come and go with demand and the device's channels).
    private let channelGauges = NIOLockedValueBox<[String: Gauge]>([:])

    /// What capture lost, per segment: counted while a segment is open (its live counts, as a
    /// scrape sees them) and when it closes (its final counts, less what was counted live), so
    /// that every frame lost is counted once, as soon as a scrape can see it.
    fileprivate struct Losses {
        struct Key: Hashable { var recording: String; var index: Int }
        struct Counts { var overruns: Int64 = 0; var framesLost: Int64 = 0; var gaps: Int64 = 0 }
        /// Open segments counted live, and what was counted of each.
        var open: [Key: Counts] = [:]
        /// Segments closed lately: a scrape's status taken before one closed must not count it again.
        var closed: [Key] = []

        /// What to add for `segment` now that it has `counts`, and remembers it.
        mutating func add(_ segment: Segment, closing: Bool) -> Counts {
            let key = Key(recording: segment.recordingId, index: segment.index)
            if !closing, closed.contains(key) { return Counts() }
            let now = Counts(overruns: Int64(segment.xruns), framesLost: segment.framesLost, gaps: segment.gapBefore == nil ? 0 : 1)
            let before = open[key] ?? Counts()
            if closing {
                open[key] = nil
                closed.append(key)
                if closed.count > 16 { closed.removeFirst() }
            } else {
                open[key] = Counts(overruns: max(now.overruns, before.overruns), framesLost: max(now.framesLost, before.framesLost),
                                   gaps: max(now.gaps, before.gaps))
            }
            return Counts(overruns: max(0, now.overruns - before.overruns), framesLost: max(0, now.framesLost - before.framesLost),
                          gaps: max(0, now.gaps - before.gaps))
        }
    }
    private let losses = NIOLockedValueBox(Losses())

    fileprivate struct Counters: Sendable {
        let files: Counter
        let recordedSeconds: Counter
        let overruns: Counter
        let framesLost: Counter
        let gaps: Counter
        let retentionFiles: Counter
        let retentionBytes: Counter
        let redatedFiles: Counter
    }

    init(recorder: Recorder, labels: [(String, String)], registry: PrometheusCollectorRegistry, queue: DispatchQueue) {
        self.registry = registry
        self.labels = labels
        func counter(_ name: String, _ help: String) -> Counter {
            labels.isEmpty ? registry.makeCounter(descriptor: .recd(name, help: help)) : registry.makeCounter(descriptor: .recd(name, help: help), labels: labels)
        }
        counters = Counters(
            files: counter("recd_files_total", "Files (segments, trigger events) finalized since recd started"),
            recordedSeconds: counter("recd_recorded_seconds_total", "Seconds of audio in the files finalized since recd started"),
            overruns: counter("recd_overruns_total", "Device overruns since recd started"),
            framesLost: counter("recd_frames_lost_total", "Device frames lost (overruns, a full write buffer) since recd started"),
            gaps: counter("recd_gaps_total", "Gaps in recordings (a lost device, lost audio) since recd started"),
            retentionFiles: counter("recd_retention_deleted_files_total", "Files retention deleted since recd started"),
            retentionBytes: counter("recd_retention_deleted_bytes_total", "Bytes retention deleted since recd started"),
            redatedFiles: counter("recd_files_redated_total", "Finished files re-dated once the system clock was synchronized, since recd started"))
        let counters = self.counters
        let losses = self.losses
        tokens.withLockedValue { $0 = [
            recorder.closedSegment.subscribe(on: queue, delivery: .every, sendingCurrent: false) { segment in
                guard let segment else { return }
                counters.files.increment()
                counters.recordedSeconds.increment(by: Double(segment.frames) / Double(max(1, segment.sampleRate)))
                losses.withLockedValue { counters.add($0.add(segment, closing: true)) }
            },
            recorder.redatedFile.subscribe(on: queue, delivery: .every, sendingCurrent: false) { file in
                if file != nil { counters.redatedFiles.increment() }
            },
            recorder.triggerEvent.subscribe(on: queue, delivery: .every, sendingCurrent: false) { event in
                guard let event else { return }
                registry.makeCounter(descriptor: .recd("recd_trigger_events_total", help: "Trigger events opened, closed and discarded since recd started"), labels: labels + [("kind", event.kind.rawValue)]).increment()
            },
            recorder.retentionDeletion.subscribe(on: queue, delivery: .every, sendingCurrent: false) { deletion in
                guard let deletion else { return }
                counters.retentionFiles.increment()
                counters.retentionBytes.increment(by: deletion.size)
            },
            recorder.error.subscribe(on: queue, delivery: .every, sendingCurrent: false) { error in
                guard let error else { return }
                registry.makeCounter(descriptor: .recd("recd_errors_total", help: "Recording errors since recd started, by code"), labels: labels + [("code", error.code.rawValue)]).increment()
            },
        ] }
    }

    /// The gauges from `status`, and the open segment's losses so far.
    func update(_ status: StatusResult) {
        updateLosses(status)
        for name in RecorderState.Name.allCases {
            gauge("recd_state", [("state", name.rawValue)], "1 for the recorder's state, 0 for the others")
                .set(to: status.state.name == name ? 1 : 0)
        }
        gauge("recd_listening", [], "1 while recd listens (the device open without a file)").set(to: status.listening == nil ? 0 : 1)
        let waiting = status.state.name == .waitingForDevice || status.listening?.wait != nil
        gauge("recd_device_waiting", [], "1 while recd waits for a capture device that is missing or was lost").set(to: waiting ? 1 : 0)
        gauge("recd_recording_seconds", [], "Seconds of audio in the current (or last) recording").set(to: status.currentTime)
        gauge("recd_device_clock_drift_ppm", [], "The capture device's clock against the system's, parts per million (0 until measured)")
            .set(to: status.statistics.deviceClockDriftPPM ?? 0)
        // Levels of the moment only: a finished recording's last levels are not the input's now.
        levels(status.state.isActive || status.listening != nil ? status.levels : .none)
        let buffer = status.writeBuffer
        gauge("recd_write_buffer_seconds", [], "Seconds of audio waiting to be written (0 when not recording)").set(to: buffer?.held ?? 0)
        gauge("recd_write_buffer_peak_seconds", [], "The most audio that waited to be written in this recording").set(to: buffer?.peak ?? 0)
        gauge("recd_write_buffer_capacity_seconds", [], "The write buffer's length ([capture] write_buffer)").set(to: buffer?.capacity ?? 0)
        if let storage = status.storage {
            gauge("recd_recordings_bytes", [], "Bytes of the recordings in the directory").set(to: Double(storage.recordingsBytes))
            gauge("recd_recordings_files", [], "Recordings in the directory").set(to: Double(storage.recordingsCount))
        }
        let taps = status.taps ?? []
        gauge("recd_tap_clients", [], "Clients reading a tap").set(to: Double(taps.count))
        gauge("recd_tap_listeners", [], "Whom the taps' clients serve the audio on to, as they say (recd-rtsp: its RTSP clients)")
            .set(to: Double(taps.compactMap(\.listeners).reduce(0, +)))
        gauge("recd_tap_dropped_chunks", [], "Chunks the open taps' clients did not read in time").set(to: Double(taps.map(\.chunksDropped).reduce(0, +)))
        if let segment = status.lastSegment {
            gauge("recd_last_file_end_timestamp_seconds", [], "When the last finalized file ended (a station that stopped recording shows here)")
                .set(to: (segment.endedAt ?? segment.startedAt).timeIntervalSince1970)
        }
        if let trigger = status.trigger {
            gauge("recd_trigger_level_dbfs", [], "The sound trigger's level after its band filter").set(to: trigger.level)
            if let floor = trigger.floor { gauge("recd_trigger_floor_dbfs", [], "The sound trigger's noise floor").set(to: floor) }
            if let open = trigger.openLevel { gauge("recd_trigger_open_level_dbfs", [], "The level that opens an event").set(to: open) }
        }
    }

    private func gauge(_ name: String, _ labels: [(String, String)], _ help: String) -> Gauge {
        Self.gauge(registry, name, self.labels + labels, help)
    }

    static func gauge(_ registry: PrometheusCollectorRegistry, _ name: String, _ labels: [(String, String)], _ help: String) -> Gauge {
        labels.isEmpty ? registry.makeGauge(descriptor: .recd(name, help: help)) : registry.makeGauge(descriptor: .recd(name, help: help), labels: labels)
    }

    /// Per-channel levels while they are measured; none otherwise (a stale level would lie).
    private func levels(_ levels: Levels) {
        var wanted: [String: Double] = [:]
        for (index, channel) in levels.channels.enumerated() {
            wanted["peak/\(index)"] = Double(channel.peak)
            wanted["average/\(index)"] = Double(channel.average)
        }
        channelGauges.withLockedValue { gauges in
            for (key, gauge) in gauges where wanted[key] == nil {
                registry.unregisterGauge(gauge)
                gauges[key] = nil
            }
            for (key, value) in wanted {
                let parts = key.split(separator: "/")
                let name = parts[0] == "peak" ? "recd_input_peak_dbfs" : "recd_input_average_dbfs"
                let gauge = gauges[key] ?? registry.makeGauge(
                    descriptor: .recd(name, help: parts[0] == "peak"
                        ? "Peak level per channel over the last metering interval (only while someone wants levels)"
                        : "RMS level per channel over the last metering interval (only while someone wants levels)"),
                    labels: labels + [("channel", String(parts[1]))])
                gauges[key] = gauge
                gauge.set(to: value)
            }
        }
    }

    /// Counts the clock's steps up to `steps` (what the recorder counted since it began).
    static func count(steps: Int, counted: NIOLockedValueBox<Int>, counter: Counter) {
        let new = counted.withLockedValue { counted in
            defer { counted = max(counted, steps) }
            return steps - counted
        }
        if new > 0 { counter.increment(by: Int64(new)) }
    }

    /// The open segment's losses so far (its live counts), counted now rather than when it closes.
    private func updateLosses(_ status: StatusResult) {
        guard status.state.isActive, let open = status.recording?.segment else { return }
        losses.withLockedValue { counters.add($0.add(open, closing: false)) }
    }
}

extension SourceMetrics.Counters {
    fileprivate func add(_ counts: SourceMetrics.Losses.Counts) {
        if counts.overruns > 0 { overruns.increment(by: counts.overruns) }
        if counts.framesLost > 0 { framesLost.increment(by: counts.framesLost) }
        if counts.gaps > 0 { gaps.increment(by: counts.gaps) }
    }
}

extension MetricNameDescriptor {
    /// A metric named in full (`recd_files_total`), as doc/metrics.md lists it.
    static func recd(_ name: String, help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }
}
