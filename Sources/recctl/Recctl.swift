import ArgumentParser
import CBuildInfo
import CCommandLine  // linked for its constructor: argv for the runtime whatever a preload does (command_line.c)
import Dispatch
import FoundationEssentials
import Glibc
import RecdClient
import RecdProtocol

/// recctl's exit codes (documented in `recctl --help` and the man page).
enum Exit {
    /// The daemon refused the request, or the recording failed.
    static let refused = ExitCode(1)
    /// Wrong usage (ArgumentParser's own code for validation errors).
    static let usage = ExitCode.validationFailure
    /// No daemon at the socket.
    static let cannotConnect = ExitCode(69)  // EX_UNAVAILABLE
    /// stop, pause, resume, cancel or split with nothing recording (a script may treat it as
    /// done rather than as a failure).
    static let nothingRecording = ExitCode(3)
}

@main
struct Recctl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recctl",
        abstract: "Control and watch recd, the recorder daemon.",
        // A paragraph is one line (`\` joins source lines): ArgumentParser wraps it to the terminal.
        discussion: """
            recctl talks to recd over its Unix socket (see doc/protocol.md). It finds the socket \
            in --socket, else RECD_SOCKET, else the user instance's socket \
            ($XDG_RUNTIME_DIR/recd/recd.sock, or /tmp/recd-<uid>/recd/recd.sock without \
            XDG_RUNTIME_DIR, as recd chooses) when there is one, else the system's \
            (/run/recd/recd.sock).

            Every command prints for people by default and JSON with --json. Color is used only \
            on a terminal, and never when NO_COLOR is set.

            Exit status: 0 success; 1 the daemon refused the request or the recording failed; \
            3 nothing is recording (stop, pause, resume, cancel, split); 64 wrong usage; \
            69 cannot connect to recd.
            """,
        version: RecdVersion.withCommit(String(cString: recd_build_commit())),
        subcommands: [Status.self, Start.self, Stop.self, Pause.self, Resume.self, Cancel.self, Split.self, Listen.self, Tap.self, Watch.self,
                      List.self, Info.self, Remove.self, Move.self, Devices.self, Metrics.self, Version.self])

    /// Lets --socket and --json come before the subcommand too (`recctl --json status`):
    /// ArgumentParser gives every command in the chain that declares this group the same values.
    @OptionGroup var options: ConnectionOptions

    static func main() {
        // ArgumentParser says only "Unexpected argument 'strat'": say which command was meant.
        if let (typed, meant) = misspelt(Array(CommandLine.arguments.dropFirst())) {
            Output.error("no command '\(typed)'; did you mean '\(meant)'? (recctl --help lists them)")
            Glibc.exit(64)
        }
        Self.main(nil)
    }

    /// The command word, when it is none of recctl's but within two edits of one.
    static func misspelt(_ arguments: [String]) -> (String, String)? {
        var index = 0
        // Only the options any command takes may come first; anything else (--help,
        // --generate-completion-script zsh) is ArgumentParser's to read.
        while index < arguments.count, arguments[index].hasPrefix("-") {
            let option = arguments[index]
            guard option == "--json" || option == "--socket" || option.hasPrefix("--socket=")
                    || option == "--source" || option.hasPrefix("--source=") else { return nil }
            index += option == "--socket" || option == "--source" ? 2 : 1
        }
        guard index < arguments.count else { return nil }
        let typed = arguments[index]
        let names = configuration.subcommands.map { $0._commandName } + ["help"]
        guard !names.contains(typed) else { return nil }
        let closest = names.map { ($0, editDistance(typed, $0)) }.min { $0.1 < $1.1 }
        guard let closest, closest.1 <= 2 else { return nil }
        return (typed, closest.0)
    }

    /// Levenshtein distance.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for i in 1...max(1, a.count) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(1, b.count) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return a.isEmpty ? b.count : previous[b.count]
    }
}

/// Options every subcommand shares.
struct ConnectionOptions: ParsableArguments {
    @Option(help: ArgumentHelp("recd's socket (default: RECD_SOCKET, the user socket if present, else /run/recd/recd.sock).",
                               valueName: "path"))
    var socket: String?

    @Flag(help: "Print JSON instead of text, one object per line.")
    var json = false

    @Option(help: ArgumentHelp("The source to act on (a [[source]] name in recd.toml; default: the station's only one).",
                               valueName: "name"))
    var source: String?

    var socketPath: String { socket ?? RecdConnection.defaultSocketPath() }

    /// Connects, or exits with a hint on how to start recd.
    func connect() throws -> RecdConnection {
        do {
            let connection = try RecdConnection(path: socketPath)
            connection.source = source
            return connection
        } catch {
            Output.error("\(error)")
            Output.hint("is recd running? Start it with `systemctl --user start recd` (user instance) or "
                        + "`sudo systemctl start recd` (system), or point --socket / RECD_SOCKET at its socket.")
            throw Exit.cannotConnect
        }
    }

    /// Calls a method; daemon errors print with a hint and exit 1.
    func call<Result: Decodable>(_ connection: RecdConnection, _ method: RecdProtocol.Method,
                                 as type: Result.Type = Result.self) throws -> Result {
        try call(connection, method, Empty?.none, as: type)
    }

    func call<Result: Decodable>(_ connection: RecdConnection, _ method: RecdProtocol.Method,
                                 _ params: (some Encodable & Sendable)?, as type: Result.Type = Result.self) throws -> Result {
        do {
            return try connection.call(method, params, as: type)
        } catch {
            report(error)
            if case .closed = error { throw Exit.cannotConnect }
            throw Exit.refused
        }
    }

    /// Shows a subscription's snapshot and then its notifications in `view` until `isDone` holds
    /// for a state (checked on the snapshot's state too when `snapshotCounts`); returns that state.
    func follow(_ connection: RecdConnection, _ subscription: SubscribeResult, in view: LiveView,
                snapshotCounts: Bool, until isDone: (RecorderState) -> Bool) throws -> RecorderState {
        defer { view.finish() }
        for update in subscription.snapshot {
            view.apply([update.value], seq: update.seq, timestamp: update.timestamp)
            if snapshotCounts, case .state(let state) = update.value, isDone(state) { return state }
        }
        while true {
            let notification: ChangedNotification.Params
            do {
                notification = try connection.nextNotification()
            } catch {
                view.finish()  // end the meter's line before the error
                report(error)
                throw Exit.cannotConnect
            }
            view.apply([notification.value], seq: notification.seq, timestamp: notification.timestamp)
            if case .state(let state) = notification.value, isDone(state) { return state }
        }
    }

    /// stop, pause, resume, cancel, split: a refusal because no recording is under way is said
    /// plainly ("nothing is recording", and the last one's name) with its own exit status.
    /// The recorder's state decides, not the refusal's wording.
    func callOnRecording<Result: Decodable>(_ method: RecdProtocol.Method, as type: Result.Type = Result.self) throws -> Result {
        let connection = try connect()
        do {
            return try connection.call(method, as: type)
        } catch {
            guard case .rpc(let rpc) = error, rpc.data?.code == RecorderError.Code.invalidState.rawValue,
                  let status = try? connection.call(.status, as: StatusResult.self), !status.state.isActive else {
                report(error)
                if case .closed = error { throw Exit.cannotConnect }
                throw Exit.refused
            }
            if json { Output.printJSON(ErrorResponse(id: nil, error: rpc)) }
            let last = status.state.recording.map { " (the last recording, \($0.name), has \(status.state.name == .failed ? "failed" : "ended"))" }
            Output.error(RecorderError.nothingRecording + (last ?? ""))
            Output.hint("`recctl start NAME` starts a recording.")
            throw Exit.nothingRecording
        }
    }

    /// pause, resume, cancel: call, then print the new state as JSON or as `describe` says.
    func changeState(_ method: RecdProtocol.Method, describe: (RecorderState) -> String) throws {
        let result: StateResult = try callOnRecording(method)
        if json { return Output.printJSON(result) }
        Output.line(describe(result.state))
    }

    func report(_ error: ClientError) {
        if json, case .rpc(let rpc) = error {
            Output.printJSON(ErrorResponse(id: nil, error: rpc))
        }
        Output.error("\(error)")
        if case .rpc(let rpc) = error, let hint = Hints.hint(for: rpc) { Output.hint(hint) }
    }
}

// MARK: Commands

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show state, elapsed time, file and segment, format, device, levels, xruns, gaps, warnings, the system clock and the last error.")
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        let connection = try options.connect()
        let answer: StatusAnswer = try options.call(connection, .status)
        if options.json { return Output.printJSON(answer) }
        // A station of several (no --source): each source's, under its name.
        for (index, status) in answer.sources.enumerated() {
            if let source = status.source, case .station = answer {
                if index > 0 { print() }
                print(Output.bold("source \(source)"))
            }
            Output.printStatus(status)
        }
    }
}

/// `recctl start --trigger …`: `start`'s `trigger` member; any of these options arms it.
struct TriggerOptions: ParsableArguments {
    @Flag(help: "Record only sound: a file per event, with the daemon's [trigger] settings unless the options below say otherwise.")
    var trigger = false
    @Option(help: ArgumentHelp("Open an event at this level (dBFS, e.g. -35) instead of relative to the noise floor.", valueName: "dBFS"))
    var threshold: Double?
    @Option(help: ArgumentHelp("Open an event this many dB above the noise floor.", valueName: "dB"))
    var aboveFloor: Double?
    @Option(help: ArgumentHelp("Detect above this frequency only (the file stays unfiltered).", valueName: "hz"))
    var highPass: Double?
    @Option(help: ArgumentHelp("Detect below this frequency only.", valueName: "hz"))
    var lowPass: Double?
    @Option(parsing: .unconditional, help: ArgumentHelp("Time above the threshold before an event opens.", valueName: "duration"))
    var attack: String?
    @Option(parsing: .unconditional, help: ArgumentHelp("Time below before an event closes.", valueName: "duration"))
    var hang: String?
    @Option(parsing: .unconditional, help: ArgumentHelp("Discard events whose sound is shorter.", valueName: "duration"))
    var minLength: String?
    @Option(parsing: .unconditional, help: ArgumentHelp("Continue a longer event in a new file.", valueName: "duration"))
    var maxLength: String?

    func validate() throws {
        for (name, value) in [("--attack", attack), ("--hang", hang), ("--min-length", minLength), ("--max-length", maxLength)] {
            if let value, value != "0", TimeParsing.duration(value) == nil {
                throw ValidationError("\(name) must be \(DurationText.spellings), not '\(value)'")
            }
        }
    }

    /// nil unless one of the options was given.
    var params: TriggerParams? {
        func seconds(_ text: String?) -> Double? { text.map { $0 == "0" ? 0 : TimeParsing.duration($0) ?? 0 } }
        let params = TriggerParams(highPass: highPass, lowPass: lowPass, threshold: threshold, aboveFloor: aboveFloor,
                                   attack: seconds(attack), hang: seconds(hang), minimumLength: seconds(minLength),
                                   maximumLength: seconds(maxLength))
        return trigger || params != TriggerParams() ? params : nil
    }
}

struct Start: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "start",
        abstract: "Start a recording.",
        discussion: "Unset settings follow the daemon's configuration. With --wait, recctl stays until the recording ends, showing progress, and exits 0 when it finished, 1 when it failed or was cancelled. Ctrl-C leaves the wait, not the recording: recd records on (a daemon's recording outlives the command that started it), recctl says so on stderr and exits 130; `recctl stop` ends it. With --at nothing is opened or created until that time; `recctl stop` before then cancels the start.")

    @Argument(help: "The recording's name (the file name without extension). Default: recording-<date>.")
    var name: String?
    @Option(help: ArgumentHelp(AudioFileFormat.summaries + ".", valueName: "format"))
    var format: AudioFileFormat?
    @Option(name: .customLong("rate"), help: ArgumentHelp("Sample rate of the file, Hz.", valueName: "hz"))
    var sampleRate: Int?
    @Option(help: ArgumentHelp("Channels in the file (1-8).", valueName: "n"))
    var channels: Int?
    @Option(help: ArgumentHelp("16, 24 or 32 (float) for wav/caf; 16 or 24 for flac/alac.", valueName: "bits"))
    var bitDepth: Int?
    @Option(help: ArgumentHelp("min, low, medium, high or max.", valueName: "quality"))
    var quality: RecordingQuality?
    @Option(name: .customLong("bitrate"), help: ArgumentHelp("Opus or AAC bitrate, bits per second (all channels).", valueName: "bps"))
    var bitRate: Int?
    // `.unconditional`: "--duration -5" is a bad duration to say so about, not a missing one.
    @Option(parsing: .unconditional,
            help: ArgumentHelp("Record exactly this long: seconds (90, 1.5), with a unit (90s, 30m, 1h30m) or HH:MM:SS.", valueName: "duration"))
    var duration: String?
    @Option(parsing: .unconditional,
            help: ArgumentHelp("Start at this time: HH:MM[:SS] (next occurrence, local time), +DURATION, or RFC 3339.", valueName: "time"))
    var at: String?
    @Option(parsing: .unconditional,
            help: ArgumentHelp("Cut the recording into files this long: a duration as for --duration (0: one file).", valueName: "duration"))
    var segment: String?
    @Flag(help: "Cut segments at whole multiples of their length from midnight (3600: on the hour).")
    var alignToClock = false
    @Option(help: ArgumentHelp("The files' path below the recordings directory: strftime fields, {name}, {n}.", valueName: "template"))
    var template: String?
    @Option(parsing: .unconditional,
            help: ArgumentHelp("While recd listens: begin the file with this much of the input from before the start (default: [listen] pre_roll; 0: none).", valueName: "duration"))
    var preRoll: String?
    @Flag(help: "Wait until the recording ends, showing progress; exit with its outcome.")
    var wait = false
    @OptionGroup(title: "Sound-activated recording") var trigger: TriggerOptions
    @OptionGroup var options: ConnectionOptions

    func validate() throws {
        try trigger.validate()
        if let preRoll, preRoll != "0", TimeParsing.duration(preRoll) == nil {
            throw ValidationError("--pre-roll must be \(DurationText.spellings), or 0 for none, not '\(preRoll)'")
        }
        if let segment, segment != "0", TimeParsing.duration(segment) == nil {
            throw ValidationError("--segment must be \(DurationText.spellings), or 0 for one file, not '\(segment)'")
        }
        if let duration, TimeParsing.duration(duration) == nil {
            throw ValidationError("--duration must be \(DurationText.spellings), not '\(duration)'")
        }
        if let at, TimeParsing.time(at) == nil {
            throw ValidationError("--at must be HH:MM[:SS], +DURATION or an RFC 3339 time, not '\(at)'")
        }
        // The daemon's own range check, here too: the same sentence, without a round trip.
        if let refusal = params.rangeRefusal() { throw ValidationError(OptionNames.onTheCommandLine(refusal)) }
    }

    /// The request, from options that passed `validate()`.
    var params: StartParams {
        StartParams(name: name, format: format, sampleRate: sampleRate, channels: channels, bitDepth: bitDepth,
                    quality: quality, bitRate: bitRate, duration: duration.flatMap(TimeParsing.duration),
                    at: at.flatMap { TimeParsing.time($0) },
                    segmentLength: segment.map { $0 == "0" ? 0 : TimeParsing.duration($0) ?? 0 },
                    alignToClock: alignToClock ? true : nil, fileTemplate: template,
                    preRoll: preRoll.map { $0 == "0" ? 0 : TimeParsing.duration($0) ?? 0 },
                    trigger: trigger.params)
    }

    func run() throws {
        let connection = try options.connect()
        let params = self.params
        // Subscribe first so that the end of a short recording cannot slip past.
        let subscription: SubscribeResult? = wait
            ? try options.call(connection, .subscribe, SubscribeParams(topics: [.state, .currentTime, .levels], interval: 0.1))
            : nil
        let recording: Recording = try options.call(connection, .start, params)
        if options.json { Output.printJSON(recording) } else if let trigger = recording.trigger {
            let how = trigger.threshold.map { String(printf: "at %.1f dBFS", $0) } ?? String(printf: "%.1f dB above the noise floor", trigger.aboveFloor)
            Output.line("recording \(Output.bold(recording.name)): armed, a file per sound event (opens \(how))")
        } else if let at = recording.startsLater {
            Output.line("recording \(Output.bold(recording.name)): starts at \(Output.localTime(at)); nothing is opened or created until then "
                        + "(`recctl stop` cancels it)")
        } else if recording.segment == nil {
            // The device is missing: recd waits for it.
            Output.line("recording \(Output.bold(recording.name)): waiting for the device; it starts when the device appears "
                        + "(`recctl status` says why)")
        } else {
            let when = recording.scheduledAt.map { " at " + Output.localTime($0) } ?? ""
            let before = recording.preRoll.map { String(printf: " (from %.1f s before)", $0.seconds) } ?? ""
            Output.line("recording \(Output.bold(recording.name)) -> \(recording.path)\(when)\(before)")
        }
        guard let subscription else { return }
        // Progress is for people: on a pipe only the outcome is printed (or every event with --json).
        let view = LiveView(json: options.json, quiet: !options.json && !Output.isTerminal)
        // Ctrl-C ends the wait; the recording goes on in recd, and recctl says so.
        signal(SIGINT, SIG_IGN)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        let name = recording.name
        interrupt.setEventHandler {
            view.finish()
            Output.error("stopped waiting; recording '\(name)' goes on in recd (`recctl stop` ends it)")
            Glibc.exit(130)
        }
        let armed = DispatchSemaphore(value: 0)
        interrupt.setRegistrationHandler { armed.signal() }
        interrupt.resume()
        armed.wait()
        // The snapshot shows the state before this start: only what follows can end the wait.
        var started = false
        let final = try options.follow(connection, subscription, in: view, snapshotCounts: false) { state in
            if state.recording?.id == recording.id, state.isActive { started = true }
            guard started || !state.isActive, state.recording?.id == recording.id || state == .idle else { return false }
            return !state.isActive
        }
        switch final {
        case .finished(let finished):
            if !options.json { Output.line("finished \(finished.path) (\(Output.duration(finished.duration)))") }
        case .failed(_, let error):
            Output.error(error.message)
            throw Exit.refused
        default:
            Output.error("the recording was cancelled")
            throw Exit.refused
        }
    }
}

struct Stop: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "stop", abstract: "Stop the recording; its file is finalized.")
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        let answer: StopAnswer = try options.callOnRecording(.stop)
        let recording: Recording
        switch answer {
        case .listening(let result):
            // Nothing was recording: stop ended listening.
            if options.json { return Output.printJSON(result) }
            return Output.line("stopped listening")
        case .recording(let stopped):
            recording = stopped
        }
        if options.json { return Output.printJSON(recording) }
        if let at = recording.startsLater {
            Output.line(Output.cancelledBeforeItsTime(recording, at: at))
        } else if recording.trigger != nil, recording.path.isEmpty {
            Output.line("stopped \(Output.bold(recording.name)): no sound opened an event, nothing was recorded")
        } else if recording.trigger != nil {
            Output.line("stopped \(Output.bold(recording.name)); the last event's file: \(recording.path)")
        } else if recording.path.isEmpty {
            // Stopped while waiting for a device that never came: no file was made.
            Output.line("stopped \(Output.bold(recording.name)): nothing was recorded (the device never appeared)")
        } else {
            Output.line("stopped \(Output.bold(recording.name)) -> \(recording.path) (\(Output.duration(recording.duration)))")
        }
    }
}

/// `stop` answers with the recording it stopped, or, when recd was only listening, with the
/// listening it ended.
enum StopAnswer: Decodable {
    case recording(Recording)
    case listening(ListenResult)

    init(from decoder: Decoder) throws {
        if let result = try? ListenResult(from: decoder), (try? Recording(from: decoder)) == nil {
            self = .listening(result)
        } else {
            self = .recording(try Recording(from: decoder))
        }
    }
}

struct Listen: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "listen",
        abstract: "Listen without recording: the input's live level meter, and its spectrum with --spectrum (Ctrl-C ends it).",
        discussion: """
            recd opens the device and publishes levels as it does while recording, and keeps the last --pre-roll of the input for the next `recctl start` (which then begins the file with it). Ctrl-C ends listening, unless recd was already listening before (`[listen] enabled`, or another client): then it only stops showing it. With --json: one JSON event per line.
            """)

    @Option(parsing: .unconditional,
            help: ArgumentHelp("Keep this much of the input for the next start (default: [listen] pre_roll; 0: none).", valueName: "duration"))
    var preRoll: String?
    @Flag(help: "Draw the input's spectrum above the meter: a line per 0.1 s, frequency across (0 Hz at the left, linear to half the rate), louder as . : - = + * # % @ (-100 to -20 dBFS). With --json: the spectrum topic's columns.")
    var spectrum = false
    @OptionGroup var options: ConnectionOptions

    var params: ListenParams {
        ListenParams(preRoll: preRoll.map { $0 == "0" ? 0 : TimeParsing.duration($0) ?? 0 })
    }

    func validate() throws {
        if let preRoll, preRoll != "0", TimeParsing.duration(preRoll) == nil {
            throw ValidationError("--pre-roll must be \(DurationText.spellings), or 0 for none, not '\(preRoll)'")
        }
        if let refusal = params.rangeRefusal() { throw ValidationError(OptionNames.onTheCommandLine(refusal)) }
    }

    func run() throws {
        let connection = try options.connect()
        let before: StatusResult = try options.call(connection, .status)
        let subscription: SubscribeResult = try options.call(
            connection, .subscribe,
            SubscribeParams(topics: [.state, .levels, .error, .warning, .listening] + (spectrum ? [.spectrum] : []),
                            interval: spectrum ? Spectrum.columnPeriod : 0.1))
        let result: ListenResult = try options.call(connection, .listen, params)
        if !options.json, let listening = result.listening {
            let format = listening.deviceFormat.map { " (\($0.sampleFormat), \($0.sampleRate) Hz, \($0.channels) ch)" } ?? ""
            let preRoll = listening.preRollCapacity > 0
                ? String(printf: "; keeping %.1f s", listening.preRollCapacity)
                    + " (" + Output.size(Int64(listening.preRollBytes)) + ") for the next start"
                : ""
            Output.line("listening to \(Output.bold(listening.device))\(format)\(preRoll)")
        }
        // Ctrl-C: end listening if this command began it, then exit.
        let began = before.listening == nil
        let socket = options.socketPath
        let source = options.source
        signal(SIGINT, SIG_IGN)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        let view = LiveView(format: options.json ? .json : (Output.isTerminal ? .terminal : .json))
        if spectrum { view.spectrogram = SpectrogramLines() }
        interrupt.setEventHandler {
            view.finish()
            if began, let control = try? RecdConnection(path: socket) {
                control.source = source
                _ = try? control.call(.unlisten, as: ListenResult.self)
            }
            Glibc.exit(0)
        }
        // Until the source is armed, SIGINT is ignored: go on (and print) only once it is, or
        // a Ctrl-C right after the first lines is lost and recctl listens on.
        let armed = DispatchSemaphore(value: 0)
        interrupt.setRegistrationHandler { armed.signal() }
        interrupt.resume()
        armed.wait()
        // Ends by itself only when listening does (`unlisten`, or `stop` with nothing recording,
        // from elsewhere): a recording started and stopped meanwhile leaves it listening.
        for update in subscription.snapshot { view.apply([update.value], seq: update.seq, timestamp: update.timestamp) }
        while true {
            let notification: ChangedNotification.Params
            do {
                notification = try connection.nextNotification()
            } catch {
                view.finish()
                options.report(error)
                throw Exit.cannotConnect
            }
            view.apply([notification.value], seq: notification.seq, timestamp: notification.timestamp)
            if case .listening(nil) = notification.value { break }
        }
        interrupt.cancel()
        view.finish()
        if !options.json { Output.line("listening ended") }
    }
}

struct Pause: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pause", abstract: "Pause the recording (resume continues the same file).")
    @OptionGroup var options: ConnectionOptions

    func run() throws { try options.changeState(.pause) { "paused \($0.recording?.name ?? "")" } }
}

struct Resume: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "resume", abstract: "Resume a paused recording.")
    @OptionGroup var options: ConnectionOptions

    func run() throws { try options.changeState(.resume) { "recording \($0.recording?.name ?? "")" } }
}

struct Cancel: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "cancel", abstract: "Stop the recording and delete its file.")
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        // What is being cancelled, to say so after: the answer is only the state that follows.
        let before = try? options.connect().call(.status, as: StatusResult.self).recording
        try options.changeState(.cancel) { _ in
            guard let recording = before else { return "cancelled" }
            if let at = recording.startsLater { return Output.cancelledBeforeItsTime(recording, at: at) }
            if recording.path.isEmpty { return "cancelled \(Output.bold(recording.name)): it had no file" }
            let kept = (recording.segment?.index ?? 1) > 1 ? " (its closed segments stay)" : ""
            return "cancelled \(Output.bold(recording.name)): deleted \(recording.path)\(kept)"
        }
    }
}

struct Split: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "split",
        abstract: "Close the current file and continue recording in the next, without losing a frame.")
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        let result: SplitResult = try options.callOnRecording(.split)
        if options.json { return Output.printJSON(result) }
        Output.line("closed \(result.closed.path) (\(Output.duration(result.closed.duration)))")
        if let next = result.recording?.segment { Output.line("now writing \(next.path)") }
    }
}

struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Watch the recorder live.",
        discussion: """
            On a terminal: one line redrawn in place with the state, elapsed time and a level meter per channel (peak and average, dBFS), fitted to the terminal's width. On a pipe or with --json: one JSON event per line as it arrives.

            For status bars, --format waybar prints one JSON object per change for a waybar custom module (text, tooltip, class = the state, percentage = the peak level), and --format plain one short line per change for polybar and i3blocks (empty while idle).
            """)

    @Option(help: ArgumentHelp("terminal, json, waybar or plain (default: terminal on a terminal, else json).", valueName: "format"))
    var format: LiveFormat?
    @Option(parsing: .upToNextOption, help: ArgumentHelp("Topics: state, currentTime, error, levels, recording, segment, warning, retention, listening, trigger, spectrum (default: all but spectrum).", valueName: "topic"))
    var topics: [Topic] = []
    @Option(help: ArgumentHelp("Seconds between time and level updates at most (default: 0.1; 1 for waybar and plain).", valueName: "seconds"))
    var interval: Double?
    @Option(help: ArgumentHelp("Exit once the recorder is in this state (idle, preparing, recording, paused, waitingForDevice, stopping, finished, failed) — at once if it already is.", valueName: "state"))
    var until: RecorderState.Name?
    @OptionGroup var options: ConnectionOptions

    var resolvedFormat: LiveFormat { format ?? (options.json || !Output.isTerminal ? .json : .terminal) }

    func validate() throws {
        if let interval, interval < SubscribeParams.minimumInterval {
            throw ValidationError("--interval must be at least \(SubscribeParams.minimumInterval)")
        }
    }

    func run() throws {
        let connection = try options.connect()
        let format = resolvedFormat
        var topics = Set(self.topics.isEmpty ? Topic.byDefault : self.topics)
        if until != nil || format.isStatusBar { topics.insert(.state) }
        let interval = self.interval ?? (format.isStatusBar ? 1 : 0.1)
        let subscription: SubscribeResult = try options.call(connection, .subscribe,
                                                            SubscribeParams(topics: topics.sorted(), interval: interval))
        let view = LiveView(format: format)
        _ = try options.follow(connection, subscription, in: view, snapshotCounts: true) { $0.name == until }
    }
}

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List recordings: name, duration, size, format, date; a recording's segments grouped under it; free space and what retention deletes next.")
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        let result: RecordingsListResult = try options.call(try options.connect(), .recordingsList)
        if options.json { return Output.printJSON(result) }
        Output.printTable(result.recordings)
        if let storage = result.storage {
            Output.line("")
            Output.printStorage(storage)
        }
    }
}

struct Info: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "info", abstract: "Show one recording.")
    @Argument(help: "The file name (meeting.flac) or, if unique, the name (meeting).")
    var name: String
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        let connection = try options.connect()
        // A name `ls` shows for a group (a segmented or sound-activated recording: `birds/`)
        // is the group: its files, summed up.
        if let group = try RecordingGroup.files(named: name, connection) {
            if options.json { return Output.printJSON(group) }
            return Output.printTable(group)
        }
        let file: RecordingFile = try options.call(connection, .recordingsInfo, RecordingNameParams(name: name))
        if options.json { return Output.printJSON(file) }
        Output.printInfo(file)
    }
}

/// The names `ls` shows for groups of files: a recording's segments, a sound-activated
/// recording's events, all under its name (`station/ (2 segments)`).
enum RecordingGroup {
    /// The files of the group `name` (with or without its trailing `/`); nil when `name` is
    /// one file's (or no group's): the daemon then answers for it.
    static func files(named name: String, _ connection: RecdConnection) throws -> [RecordingFile]? {
        let group = name.hasSuffix("/") ? String(name.dropLast()) : name
        // A file's own name wins, as the daemon resolves it.
        if !name.hasSuffix("/"), (try? connection.call(.recordingsInfo, RecordingNameParams(name: name), as: RecordingFile.self)) != nil {
            return nil
        }
        let listed = try connection.call(.recordingsList, as: RecordingsListResult.self)
        let files = listed.recordings.filter { $0.sessionName == group || $0.file.hasPrefix(group + "/") }
        return files.isEmpty ? nil : files
    }
}

struct Remove: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rm", abstract: "Delete recordings.",
        discussion: "A group `recctl ls` shows (`station/ (2 segments)`, a sound-activated recording's events) is deleted whole: on a terminal after saying how many files and asking, elsewhere only with --all.")
    @Argument(help: "File names, unique names, or group names as `ls` shows them.")
    var names: [String]
    @Flag(help: "Delete every file of a group without asking.")
    var all = false
    @OptionGroup var options: ConnectionOptions

    func validate() throws {
        if names.isEmpty { throw ValidationError("name at least one recording to delete") }
    }

    func run() throws {
        let connection = try options.connect()
        var failed = false
        for name in names {
            guard let group = try RecordingGroup.files(named: name, connection) else {
                if !remove(name, connection) { failed = true }
                continue
            }
            let total = Output.duration(group.reduce(0) { $0 + $1.duration }) + ", " + Output.size(group.reduce(0) { $0 + $1.size })
            let what = "\(name.hasSuffix("/") ? name : name + "/") is \(group.count) file\(group.count == 1 ? "" : "s") (\(total))"
            if !all {
                guard Output.isTerminal, isatty(STDIN_FILENO) == 1 else {
                    Output.error("\(what): add --all to delete them all")
                    failed = true
                    continue
                }
                print("\(what); delete them all? [y/N] ", terminator: "")
                fflush(nil)
                guard let answer = readLine(), ["y", "yes"].contains(answer.lowercased()) else {
                    Output.line("kept \(name)")
                    continue
                }
            }
            for file in group where !remove(file.file, connection) { failed = true }
        }
        if failed { throw Exit.refused }
    }

    /// Deletes one file by name; false when refused (said on stderr).
    private func remove(_ name: String, _ connection: RecdConnection) -> Bool {
        do {
            let result: DeleteResult = try connection.call(.recordingsDelete, RecordingNameParams(name: name))
            if options.json { Output.printJSON(result) } else { Output.line("deleted \(result.deleted)") }
            return true
        } catch {
            options.report(error)
            return false
        }
    }
}

struct Move: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "mv", abstract: "Rename a recording (it keeps its format).")
    @Argument(help: "The recording to rename.")
    var old: String
    @Argument(help: "The new name, without extension.")
    var new: String
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        let file: RecordingFile = try options.call(try options.connect(), .recordingsRename, RenameParams(from: old, to: new))
        if options.json { return Output.printJSON(file) }
        Output.line("renamed \(old) -> \(file.file)")
    }
}

struct Devices: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "devices", abstract: "List the capture devices ALSA knows; * marks the one in use.")
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        let result: DevicesResult = try options.call(try options.connect(), .devicesList)
        if options.json { return Output.printJSON(result) }
        Output.printDevices(result)
    }
}

struct Metrics: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics",
        abstract: "Print recd's metrics in Prometheus's text format (doc/metrics.md).",
        discussion: """
            For node_exporter's textfile collector, write to a temporary name and rename, so that it never reads half a file:
              recctl metrics > /var/lib/prometheus/node-exporter/recd.prom.$$ && mv /var/lib/prometheus/node-exporter/recd.prom.$$ /var/lib/prometheus/node-exporter/recd.prom
            With --json: {"text": …}.
            """)
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        let result: MetricsResult = try options.call(try options.connect(), .metrics)
        if options.json { return Output.printJSON(result) }
        print(result.text, terminator: "")
    }
}

struct Version: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "version", abstract: "Show recctl's and recd's versions.")
    @OptionGroup var options: ConnectionOptions

    func run() throws {
        let connection: RecdConnection
        do {
            connection = try RecdConnection(path: options.socketPath)
        } catch {
            Output.line("recctl \(RecdVersion.current)")
            Output.error("\(error)")
            throw Exit.cannotConnect
        }
        let daemon: VersionResult = try options.call(connection, .version)
        if options.json {
            struct Both: Codable { var recctl: String; var recd: VersionResult }
            return Output.printJSON(Both(recctl: RecdVersion.current, recd: daemon))
        }
        Output.line("recctl \(RecdVersion.current)")
        Output.line("recd \(daemon.version) (protocol \(daemon.protocolRevision))")
    }
}

extension AudioFileFormat: ExpressibleByArgument {
    public init?(argument: String) { self.init(name: argument) }
}
extension RecordingQuality: ExpressibleByArgument {}
extension Topic: ExpressibleByArgument {}
extension RecorderState.Name: ExpressibleByArgument {}

/// The daemon's range sentences name the wire's members ('preRoll'); on the command line
/// they name the options typed (--pre-roll).
enum OptionNames {
    static let options = [
        "sampleRate": "--rate", "rate": "--rate", "channels": "--channels", "bitDepth": "--bit-depth", "bitRate": "--bitrate",
        "duration": "--duration", "segmentLength": "--segment", "preRoll": "--pre-roll", "at": "--at",
        "highPass": "--high-pass", "lowPass": "--low-pass", "threshold": "--threshold", "aboveFloor": "--above-floor",
        "attack": "--attack", "hang": "--hang", "minimumLength": "--min-length", "maximumLength": "--max-length",
    ]

    static func onTheCommandLine(_ sentence: String) -> String {
        options.reduce(sentence) { text, pair in text.replacing("'\(pair.key)'", with: pair.value) }
    }
}

struct Tap: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tap",
        abstract: "Write the input's audio to standard output, in a format of your choosing.",
        discussion: """
            Raw interleaved little-endian PCM (or, with --wav, a WAV header first) for as long as it runs, or for exactly --duration: `recctl tap --rate 16000 --channels 1 | analyzer`, `recctl tap --wav | ffmpeg -i - out.opus`. recd converts (soxr) and opens the device if it is not open; a reader that falls behind loses chunks, never slows the recording (what was lost is said on standard error at the end). Needs the tap permission (root, recd's user or group, [server] tap_users / tap_groups).
            """)

    @Option(help: ArgumentHelp("Sample rate, Hz (default: the recording settings').", valueName: "hz"))
    var rate: Int?
    @Option(help: ArgumentHelp("Channels (default: the recording settings').", valueName: "n"))
    var channels: Int?
    @Flag(help: "32-bit float samples instead of 16-bit integers.")
    var float = false
    @Option(parsing: .unconditional, help: ArgumentHelp("Stop after exactly this much audio.", valueName: "duration"))
    var duration: String?
    @Option(parsing: .unconditional,
            help: ArgumentHelp("Begin with up to this much of the input from before (what listening holds).", valueName: "duration"))
    var preRoll: String?
    @Flag(help: "A WAV header first (its sizes are exact with --duration, unknown otherwise).")
    var wav = false
    @OptionGroup var options: ConnectionOptions

    var params: TapParams {
        TapParams(rate: rate, channels: channels, encoding: float ? .f32le : .s16le,
                  preRoll: preRoll.map { $0 == "0" ? 0 : TimeParsing.duration($0) ?? 0 })
    }

    func validate() throws {
        // As gzip does: binary audio on a terminal is noise that can upset it.
        if isatty(STDOUT_FILENO) == 1 {
            throw ValidationError("standard output is a terminal: recctl tap writes binary audio; pipe it into a program or a file (recctl tap --wav > take.wav)")
        }
        for (name, text) in [("--duration", duration), ("--pre-roll", preRoll)] {
            if let text, text != "0" || name == "--duration", TimeParsing.duration(text) == nil {
                throw ValidationError("\(name) must be \(DurationText.spellings), not '\(text)'")
            }
        }
        if let duration, let seconds = TimeParsing.duration(duration),
           let refusal = Limits.refusal("duration", seconds, Limits.duration, "seconds") { throw ValidationError(OptionNames.onTheCommandLine(refusal)) }
        if let refusal = params.rangeRefusal() { throw ValidationError(OptionNames.onTheCommandLine(refusal)) }
    }

    func run() throws {
        signal(SIGPIPE, SIG_IGN)
        let connection = try options.connect()
        let result: TapResult = try options.call(connection, .tap, params)
        let format = result.format
        let limit = duration.flatMap(TimeParsing.duration).map { Int64(($0 * Double(format.sampleRate)).rounded()) }
        if wav { try write(Self.wavHeader(format, frames: limit)) }
        var header = [UInt8](repeating: 0, count: result.headerBytes)
        var written: Int64 = 0
        var lost: Int64 = 0
        var ended = "recd ended the stream"
        while limit.map({ written < $0 }) ?? true {
            guard try header.withUnsafeMutableBytes({ try connection.readExactly(into: $0) }),
                  let chunk = header.withUnsafeBytes({ TapChunkHeader($0) }) else { break }
            var payload = [UInt8](repeating: 0, count: Int(chunk.payloadBytes))
            guard try payload.withUnsafeMutableBytes({ try connection.readExactly(into: $0) }) else { break }
            lost += Int64(chunk.lostFrames)
            let frames = min(Int64(chunk.frames), (limit ?? Int64.max) - written)
            try write(payload[..<(Int(frames) * format.bytesPerFrame)])
            written += frames
            ended = ""
        }
        if let limit, written < limit {
            Output.error("\(ended.isEmpty ? "recd ended the stream" : ended) after \(written) of \(limit) frames")
            throw Exit.refused
        }
        if lost > 0 { Output.error("\(lost) frames were lost (this reader fell behind, or the device was)") }
    }

    /// Standard output, whole (a reader that left gives EPIPE: the end, quietly).
    private func write(_ bytes: some Collection<UInt8>) throws {
        let array = Array(bytes)
        var offset = 0
        while offset < array.count {
            let count = array.withUnsafeBytes { Glibc.write(1, $0.baseAddress! + offset, $0.count - offset) }
            if count < 0 {
                if errno == EINTR { continue }
                throw errno == EPIPE ? ExitCode.success : Exit.refused
            }
            offset += count
        }
    }

    /// RIFF/WAVE with a PCM (or IEEE float) fmt chunk; sizes 0xFFFFFFFF when unknown, as
    /// streaming readers (ffmpeg, sox) accept.
    static func wavHeader(_ format: TapFormat, frames: Int64?) -> [UInt8] {
        var bytes: [UInt8] = []
        func le32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
        func le16(_ value: UInt16) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
        let dataBytes = frames.map { UInt32(clamping: $0 * Int64(format.bytesPerFrame)) } ?? UInt32.max
        bytes += Array("RIFF".utf8)
        le32(frames == nil ? UInt32.max : UInt32(clamping: Int64(dataBytes) + 36))
        bytes += Array("WAVEfmt ".utf8)
        le32(16)
        le16(format.encoding == .f32le ? 3 : 1)
        le16(UInt16(format.channels))
        le32(UInt32(format.sampleRate))
        le32(UInt32(format.sampleRate * format.bytesPerFrame))
        le16(UInt16(format.bytesPerFrame))
        le16(UInt16(format.encoding.bytesPerSample * 8))
        bytes += Array("data".utf8)
        le32(dataBytes)
        return bytes
    }
}
