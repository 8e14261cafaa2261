import ArgumentParser
import CBuildInfo
import CCommandLine  // linked for its constructor: argv for the runtime whatever a preload does (command_line.c)
import CMallocTuning
import FoundationEssentials
import Glibc
import Logging
import NIOCore
import NIOPosix
import RecdHooks
import RecdMQTT
import RecdMetrics
import RecdProtocol
import RecdCommands
import RecdConfiguration
import RecdServer
import RecorderCore
import ServiceLifecycle
import SoundCards
import SystemPackage
import Systemd

/// The version both binaries report.
let recdVersion = RecdVersion.current

@main
struct Recd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recd",
        abstract: "The recorder daemon: records from ALSA to files, controlled over a Unix socket.",
        // A paragraph is one line (`\` joins source lines): ArgumentParser wraps it to the terminal.
        discussion: """
            Settings come from the configuration file, described in recd.toml(5): \
            /etc/recd/recd.toml for the system instance, $XDG_CONFIG_HOME/recd/recd.toml for a \
            user's. The options below override it. SIGHUP reloads the file; SIGTERM or SIGINT \
            finalizes the recording in progress and exits. Control recd with recctl(1).

            Exit status: 0 after SIGTERM or SIGINT, or a valid configuration with --check-config; \
            1 an unexpected failure; 73 the recordings directory or the socket cannot be created; \
            75 another recd uses the recordings directory or the socket; 77 the recordings \
            directory is not writable by recd's user; 78 the configuration is invalid.
            """,
        version: RecdVersion.withCommit(String(cString: recd_build_commit())))

    @Option(help: ArgumentHelp("The configuration file.", discussion: "Default: /etc/recd/recd.toml (--system) or $XDG_CONFIG_HOME/recd/recd.toml (--user). A missing default file means all defaults.", valueName: "path"))
    var config: String?

    @Option(help: ArgumentHelp("The Unix socket to listen on (ignored under socket activation).", valueName: "path"))
    var socket: String?

    @Option(help: ArgumentHelp("The ALSA PCM to capture from, e.g. default, hw:1,0, plughw:CARD=USB,DEV=0.", valueName: "pcm"))
    var device: String?

    @Option(help: ArgumentHelp("Where recordings are written.", valueName: "dir"))
    var recordingsDir: String?

    @Option(help: ArgumentHelp("trace, debug, info, notice, warning, error or critical.", valueName: "level"))
    var logLevel: String?

    @Flag(help: "Run as the system instance (/etc, /var/lib, /run paths). The default for root.")
    var system = false

    @Flag(help: "Run as a user instance (XDG paths). The default for other users.")
    var user = false

    @Flag(help: "Check the configuration and exit: 0 when it is valid, 78 with the error otherwise.")
    var checkConfig = false

    func validate() throws {
        if system && user { throw ValidationError("--system and --user exclude each other") }
        if let logLevel, Logger.Level(rawValue: logLevel) == nil {
            throw ValidationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    var mode: DaemonConfiguration.Mode { DaemonConfiguration.mode(system: system, user: user) }

    /// Defaults for the mode, then the file, then the options.
    func loadConfiguration() throws -> DaemonConfiguration {
        var configuration = try DaemonConfiguration.load(mode: mode, path: config, environment: ProcessInfo.processInfo.environment)
        if let socket { configuration.socketPath = socket }
        if let recordingsDir { configuration.recordingsDirectory = recordingsDir }
        if let logLevel, let level = Logger.Level(rawValue: logLevel) { configuration.logLevel = level }
        if let device {
            if !configuration.declaredSources.isEmpty {
                throw ConfigurationError(file: "--device", line: nil, key: "device",
                                         message: "the configuration's [[source]] tables name their devices; --device is for a station of one")
            }
            configuration.device = device
            configuration.deviceFile = nil
            do throws(SoundCardError) {
                _ = try DeviceName(parsing: device)
            } catch {
                throw ConfigurationError(file: "--device", line: nil, key: "device", message: "\(error)")
            }
        }
        try configuration.checkDevice()
        return configuration
    }

    func run() async throws {
        ProcessMemory.configure()
        let configuration: DaemonConfiguration
        do {
            configuration = try loadConfiguration()
        } catch let error as ConfigurationError {
            _ = try? SystemPackage.FileDescriptor.standardError.writeAll("recd: \(error)\n".utf8)
            throw ExitCode(78)  // EX_CONFIG
        }
        if checkConfig {
            if let warning = SoundDevices.unstableNameWarning(configuration.device, roots: configuration.systemRoots) {
                _ = try? SystemPackage.FileDescriptor.standardError.writeAll("recd: warning: \(warning)\n".utf8)
            }
            print("recd: the configuration is valid")
            return
        }
        let journal = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] != nil
        StandardErrorLogHandler.level.store(UInt8(Logger.Level.allCases.firstIndex(of: configuration.logLevel)!), ordering: .relaxed)
        LoggingSystem.bootstrap { label in StandardErrorLogHandler(label: label, journal: journal) }
        let logger = Logger(label: "recd")
        Self.logMallocTuning(logger)

        let policy = AccessPolicy(controlUIDs: configuration.controlUIDs, controlGIDs: configuration.controlGIDs,
                                  tapUIDs: configuration.tapUIDs, tapGIDs: configuration.tapGIDs)
        let socketGroup = configuration.socketGID

        // Before any file in the directory is touched: its .part files may be another daemon's.
        // A station of several sources also locks each source's folder, so that a recd of one
        // pointed at a source's folder is refused as well.
        let sources = configuration.sources
        let lockedDirectories = [configuration.recordingsDirectory]
            + (sources.count > 1 ? sources.map { configuration.recordingsDirectory(for: $0.name) } : [])
        var directoryLocks: [RecordingsDirectoryLock] = []
        for directory in lockedDirectories {
            do {
                directoryLocks.append(try RecordingsDirectoryLock(directory: directory))
            } catch {
                let exit = Self.exitStatus(for: error)
                logger.critical(exit.message, metadata: ["error": "\(error)"])
                _ = try? SystemPackage.FileDescriptor.standardError.writeAll("recd: \(error)\n".utf8)
                throw exit.code
            }
        }
        defer { withExtendedLifetime(directoryLocks) {} }
        let clock = SystemClockSources(environment: ProcessInfo.processInfo.environment,
                                       timedated: { Systemd.timedatedSaysNTPSynchronized() })
        // Retention and the disk's guard weigh every source's folder together.
        let stationRecordings = sources.count > 1 ? StationRecordings() : nil
        let station = Station(sources: sources.map { source in
            var sourceLogger = Logger(label: "recd.recorder")
            if sources.count > 1 { sourceLogger[metadataKey: "source"] = "\(source.name)" }
            let recorderConfiguration = configuration.recorderConfiguration(for: source)
            _ = RecordingLibrary(directory: recorderConfiguration.recordingsDirectory).recoverPartialFiles(logger: sourceLogger)
            return Station.Source(name: source.name, recorder: Recorder(configuration: recorderConfiguration, clock: clock,
                                                                        station: stationRecordings, logger: sourceLogger))
        })

        // Socket activation: the socket named "control" (recd.socket's FileDescriptorName), or
        // the only one passed. Otherwise bind the configured path.
        let passed = Systemd.listenDescriptors()
        let listenTarget: ListenTarget
        if let socket = passed.first(where: { $0.name == "control" }) ?? (passed.count == 1 ? passed.first : nil) {
            listenTarget = .descriptor(socket.fd)
        } else {
            listenTarget = .path(configuration.socketPath, mode: configuration.socketMode, group: socketGroup)
        }

        let group = MultiThreadedEventLoopGroup(numberOfThreads: min(2, System.coreCount))
        let blocking = BlockingCalls()
        let metrics = RecorderMetrics(station: station, version: recdVersion)
        let server = ControlServer(station: station, version: recdVersion, policy: policy,
                                   limits: ServerLimits(maxClients: configuration.maxClients,
                                                        outboundLimit: configuration.clientQueueBytes),
                                   group: group, blocking: blocking, metrics: metrics,
                                   lastClientLeft: ProcessMemory.clientsLeft, logger: Logger(label: "recd.server"))
        let command = self
        let service = RecdService(station: station, server: server, blocking: blocking, listenTarget: listenTarget, reload: {
            do {
                var reloaded = try command.loadConfiguration()
                if reloaded.socketPath != configuration.socketPath || reloaded.maxClients != configuration.maxClients
                    || reloaded.controlUsers != configuration.controlUsers || reloaded.controlGroups != configuration.controlGroups
                    || reloaded.tapUsers != configuration.tapUsers || reloaded.tapGroups != configuration.tapGroups {
                    logger.warning("server settings (socket, clients, access) change only on restart")
                }
                if reloaded.recordingsDirectory != configuration.recordingsDirectory {
                    // The directory lock and crash recovery belong to the directory recd started with.
                    logger.warning("the recordings directory changes only on restart")
                    reloaded.recordingsDirectory = configuration.recordingsDirectory
                }
                if reloaded.sources.map(\.name) != configuration.sources.map(\.name) {
                    logger.warning("sources' names change only on restart")
                }
                if reloaded.mqtt != configuration.mqtt || reloaded.hooks != configuration.hooks {
                    logger.warning("[mqtt] and [hooks] settings change only on restart")
                }
                return reloaded
            } catch {
                logger.error("configuration not reloaded; keeping the current one", metadata: ["error": "\(error)"])
                throw error
            }
        }, logger: logger, startup: Dictionary(uniqueKeysWithValues: sources.map { ($0.name, RecdService.Startup($0.configuration)) }))
        // Hooks and the MQTT bridge observe the recorder; the bridge is listed first so that it
        // stops last, after the recording is finalized, and publishes the final state.
        let (integrations, hookToken) = try makeIntegrations(configuration, station: station, blocking: blocking, metrics: metrics)
        defer { for token in hookToken { token.cancel() } }
        let serviceGroup = ServiceGroup(configuration: .init(
            services: integrations + [.init(service: service)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
        do {
            try await serviceGroup.run()
        } catch let error as ServerError {
            // The socket: nothing ran yet. The same statuses as for the recordings directory.
            logger.critical("cannot listen", metadata: ["error": "\(error)"])
            try? await group.shutdownGracefully()
            switch error {
            case .alreadyRunning: throw ExitCode(75)  // EX_TEMPFAIL
            case .cannotBind: throw ExitCode(73)  // EX_CANTCREAT
            }
        } catch {
            logger.critical("recd stopped", metadata: ["error": "\(error)"])
            await blocking.shutdown()
            try? await group.shutdownGracefully()
            throw ExitCode.failure
        }
        await blocking.shutdown()
        try? await group.shutdownGracefully()
    }
}

extension Recd {
    /// Why the recordings directory cannot be taken, as a log message and an exit status
    /// (sysexits.h): another daemon in it is temporary (75, EX_TEMPFAIL: systemd may try
    /// again), a permission problem is not (77, EX_NOPERM), nor is a directory that cannot be
    /// created or written at all, e.g. on a read-only filesystem (73, EX_CANTCREAT).
    static func exitStatus(for error: RecordingsDirectoryLock.Failure) -> (message: Logger.Message, code: ExitCode) {
        switch error {
        case .held: ("recordings directory in use", ExitCode(75))
        case .cannotLock(_, let errno) where errno == .permissionDenied || errno == .notPermitted:
            ("recordings directory not writable", ExitCode(77))
        case .cannotLock: ("recordings directory unusable", ExitCode(73))
        }
    }
}

extension Recd {
    /// Says whether glibc's thread caches and fastbins are off (Sources/CMallocTuning): debug
    /// when they are, notice when recd runs with glibc's defaults and it could have been otherwise.
    static func logMallocTuning(_ logger: Logger) {
        switch Int32(recd_malloc_tuning()) {
        case Int32(RECD_MALLOC_TUNED.rawValue):
            logger.debug("malloc: thread caches and fastbins off (GLIBC_TUNABLES)")
        case Int32(RECD_MALLOC_USER.rawValue):
            logger.debug("malloc: GLIBC_TUNABLES sets glibc.malloc.tcache_count; left as given")
        case Int32(RECD_MALLOC_PRELOAD.rawValue):
            logger.debug("malloc: LD_PRELOAD is set; glibc's thread caches left on")
        case Int32(RECD_MALLOC_TOO_LONG.rawValue):
            logger.notice("malloc: GLIBC_TUNABLES is too long to add to; glibc's thread caches left on")
        case Int32(RECD_MALLOC_FAILED.rawValue):
            logger.notice("malloc: could not restart with glibc's thread caches off (is /proc mounted?); memory at rest may grow slowly under client churn")
        default:
            break
        }
    }
}
