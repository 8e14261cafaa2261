// swift-tools-version: 6.1
import PackageDescription

// Data flows one way: ALSA device -> AudioGraph -> RecorderCore -> RecdServer -> socket -> recctl.
// Each C library has exactly one Swift module that imports it.

// `make` links the released recctl as a static position-independent executable: no dynamic
// loader, no shared libraries to map and bind, so a status bar's `recctl status` starts faster
// (BENCHMARKS.md, 2b); it loads nothing with dlopen. Only under `make`, which sets
// RECD_STATIC_RECCTL and drops SwiftPM's $ORIGIN run path (RELEASE_FLAGS): glibc refuses to
// start a static PIE that has one.
let staticClient: [LinkerSetting] = Context.environment["RECD_STATIC_RECCTL"] == "1"
    ? [.unsafeFlags(["-static-stdlib", "-static-executable", "-use-ld=lld", "-Xclang-linker", "-static-pie"], .when(configuration: .release))]
    : []
// The tests' signal generators (RecdTestSupport: a minute of noise, a trigger scene, a sine)
// are compiled optimized in every configuration: unoptimized, and more so under
// ThreadSanitizer, they cost more CPU than the daemons they feed (a 30 s trigger scene took 9 s
// to make under TSan, 0.05 s optimized). Only there: the tests themselves and the code under
// test keep their configuration's flags (optimized, a test's copy of an array taken under a lock
// was read after the lock, which TSan reported).
let optimizedTestCode: [SwiftSetting] = [.unsafeFlags(["-O"], .when(configuration: .debug))]
let package = Package(
    name: "recd",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "recd", targets: ["recd"]),
        .executable(name: "recctl", targets: ["recctl"]),
        .executable(name: "recd-rtsp", targets: ["recd-rtsp"]),
        // For other Swift programs: recd's client (blocking and async), and the recorder itself
        // to record in-process (Examples/simple-recorder shows it).
        .library(name: "RecdClient", targets: ["RecdClient", "RecdProtocol", "RecorderModel"]),
        .library(name: "RecorderCore", targets: ["RecorderCore", "RecorderModel"]),
    ],
    traits: [
        // HTTPS in recd-web when [web] tls_certificate is set (HummingbirdTLS: swift-nio-ssl and
        // its BoringSSL, about 3.5 minutes to compile here). On by default and in the release
        // binaries; `make` builds the debug and TSan configurations without it, so only the
        // shipping build pays for it (doc/testing.md).
        .trait(name: "TLS", description: "recd-web serves HTTPS when a certificate is configured."),
        .default(enabledTraits: ["TLS"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-system.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // recd-web only. Without Hummingbird's default traits: swift-configuration is not built.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        // recd-web's HTTPS (the TLS trait), under HummingbirdTLS.
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // recd-rtsp's Digest authentication (MD5, as RTSP clients answer it). Already built for
        // Hummingbird's WebSocket module.
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
    ],
    targets: [
        // C libraries, found through pkg-config.
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .systemLibrary(name: "CSndfile", pkgConfig: "sndfile", providers: [.apt(["libsndfile1-dev"])]),
        .systemLibrary(name: "CSoxr", pkgConfig: "soxr", providers: [.apt(["libsoxr-dev"])]),
        // libmosquitto (libmosquitto-dev), loaded with dlopen when [mqtt] is on (see CMosquitto.h).
        .target(name: "CMosquitto"),
        // glibc calls Swift's Glibc module hides (renameat2, mallopt, timerfd, adjtimex, inotify);
        // used by RecorderCore and recd.
        .systemLibrary(name: "CLinux"),
        // FFmpeg's libavformat, libavcodec and libavutil (libavcodec-dev, libavformat-dev,
        // libavutil-dev), loaded with dlopen on first use rather than linked (see CFFmpeg.h).
        .target(name: "CFFmpeg"),
        // The git commit `make` builds from, for --version (see CBuildInfo.h); "" without make.
        .target(name: "CBuildInfo"),
        // Turns glibc's thread caches and fastbins off before recd's main (see malloc_tuning.c);
        // recd only.
        .target(name: "CMallocTuning"),
        // Gives Swift's runtime argc and argv before main, so that a preloaded library that sets
        // an environment variable (libfaketime) cannot empty CommandLine.arguments (see
        // command_line.c); every executable that parses arguments.
        .target(name: "CCommandLine"),

        // The only Swift module per C library.
        .target(name: "ALSA", dependencies: ["CALSA"]),
        // Sound cards by what they are and where they are plugged (sysfs, udev's links), and the
        // inotify watch that tells when they change. No C library: the kernel's files.
        .target(name: "SoundCards"),
        .target(name: "Systemd", dependencies: ["CSystemd"]),
        .target(name: "Sndfile", dependencies: ["CSndfile"]),
        .target(name: "Soxr", dependencies: ["CSoxr"]),
        .target(name: "Mosquitto", dependencies: [
            "CMosquitto",
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "SystemPackage", package: "swift-system"),
        ]),
        // AAC and Apple Lossless in .m4a: encoder, crash-safe fragmented writer, rewriter, reader.
        .target(name: "MPEG4", dependencies: ["CFFmpeg"]),

        // The values the recorder publishes (state, recording, levels, errors, settings): plain
        // Codable structs shared by the daemon, the protocol and the client.
        .target(name: "RecorderModel"),
        // The data plane: the capture engine (its thread, the device's reads, the frames'
        // times), the node protocol and the one hand-over to a node's worker thread.
        .target(name: "AudioGraph", dependencies: [
            "RecorderModel", "ALSA", "CLinux",
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
        ]),
        // The spectrum as recd computes it, live (the spectrum node) and over a file (recd-web's
        // spectrograms): power spectra by FFmpeg's FFT, files read by libsndfile and FFmpeg.
        .target(name: "SignalProcessing", dependencies: ["MPEG4", "Sndfile", "RecorderModel"]),
        // Observed<T>, Recorder (the control plane) and the graph's nodes.
        .target(name: "RecorderCore", dependencies: [
            "AudioGraph", "RecorderModel", "ALSA", "Sndfile", "Soxr", "CLinux", "MPEG4", "SoundCards", "SignalProcessing",
            .product(name: "Logging", package: "swift-log"),
            // A pthread lock for Observed: ThreadSanitizer cannot see Synchronization.Mutex's
            // futex on Linux and reports every access it guards as a race.
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "SystemPackage", package: "swift-system"),
        ]),
        // The TOML subset recd's configuration is written in, read strictly (fuzzed).
        .target(name: "TOML"),
        // recd.toml read into DaemonConfiguration: every key typed, range- and unit-checked,
        // unknown keys refused at file:line. A library, so that it has unit tests and the
        // fuzzer links it.
        .target(name: "RecdConfiguration", dependencies: [
            "TOML", "RecorderCore", "RecorderModel", "RecdProtocol", "RecdHooks", "SoundCards",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "SystemPackage", package: "swift-system"),
        ]),
        // Codable wire types, shared by the daemon and the client. No NIO.
        .target(name: "RecdProtocol", dependencies: ["RecorderModel"]),
        // The method table: what every way in (the socket, MQTT) runs for a method, after the
        // same permission check. No NIO, no MQTT: the ways in depend on it, not it on them.
        .target(name: "RecdCommands", dependencies: [
            "RecorderCore", "RecdProtocol",
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            // NIOThreadPool only: BlockingCalls' threads.
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "SystemPackage", package: "swift-system"),
        ]),
        // The Unix-socket JSON-RPC server.
        .target(name: "RecdServer", dependencies: [
            "RecorderCore", "RecdProtocol", "RecdCommands",
            // Locks ThreadSanitizer can see (pthread mutexes), as in RecorderCore.
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "SystemPackage", package: "swift-system"),
        ]),
        // Commands run for every finalized file (upload hooks).
        .target(name: "RecdHooks", dependencies: [
            "RecorderCore", "RecorderModel",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "SystemPackage", package: "swift-system"),
        ]),
        // The daemon's metrics in Prometheus's text format (swift-prometheus); observes the
        // in-process Recorder and reads its status when asked (`metrics`).
        .target(name: "RecdMetrics", dependencies: [
            "RecorderCore", "RecdProtocol", "RecdCommands", "RecdHooks",
            .product(name: "Prometheus", package: "swift-prometheus"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
        ]),
        // The MQTT bridge and Home Assistant discovery; observes the in-process Recorder.
        .target(name: "RecdMQTT", dependencies: [
            "RecorderCore", "RecorderModel", "RecdProtocol", "RecdCommands", "RecdHooks", "Mosquitto",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ]),
        .executableTarget(name: "recd", dependencies: [
            "RecdServer", "RecdCommands", "RecdConfiguration", "RecdMQTT", "RecdMetrics", "RecdHooks", "RecorderCore", "RecorderModel", "RecdProtocol",
            "Systemd", "Mosquitto", "SoundCards", "CBuildInfo", "CMallocTuning", "CCommandLine",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "SystemPackage", package: "swift-system"),
        ]),
        // A blocking client of the protocol (plain sockets, no event loop): one line out, one
        // line in. Used by recctl, the end-to-end tests and the benchmark.
        .target(name: "RecdClient", dependencies: [
            "RecdProtocol",
            // A pthread lock for the subscription's reader, as everywhere (ThreadSanitizer).
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
        ]),
        .executableTarget(name: "recctl", dependencies: [
            "RecdClient", "RecdProtocol", "RecorderModel", "CBuildInfo", "CCommandLine",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "SystemPackage", package: "swift-system"),
        ], linkerSettings: staticClient),

        // The web page and /metrics: a client of recd's socket in a process of its own, so that
        // recd stays off the network (doc/web.md).
        .executableTarget(name: "recd-web", dependencies: [
            "RecdClient", "RecdProtocol", "RecorderModel", "SignalProcessing", "AudioGraph", "RecdConfiguration", "CBuildInfo", "Systemd",
            "CCommandLine",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HummingbirdCore", package: "hummingbird"),
            .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
            .product(name: "HummingbirdTLS", package: "hummingbird", condition: .when(traits: ["TLS"])),
            .product(name: "NIOSSL", package: "swift-nio-ssl", condition: .when(traits: ["TLS"])),
            .product(name: "HTTPTypes", package: "swift-http-types"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "SystemPackage", package: "swift-system"),
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
        ], resources: [.embedInCode("page/index.html"), .embedInCode("page/app.js"), .embedInCode("page/app.css")]),

        // libFuzzer over the request parser and the configuration reader (`make fuzz`); built
        // plainly, it replays a corpus.
        .executableTarget(name: "recd-fuzz", dependencies: ["RecdProtocol", "RecdConfiguration", "RecorderModel"]),
        // RTSP 1.0's messages, RTP and RTCP over interleaved TCP, Digest authentication: what
        // recd-rtsp speaks, without its sockets (tested on its own).
        .target(name: "RTSP", dependencies: [
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "Crypto", package: "swift-crypto"),
        ]),
        // The live input as RTSP, a client of recd's socket (a tap): recd stays off the network.
        .executableTarget(name: "recd-rtsp", dependencies: [
            "RTSP", "MPEG4", "RecdClient", "RecdProtocol", "RecdConfiguration", "RecorderModel", "Systemd", "CLinux", "CBuildInfo", "CCommandLine",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "SystemPackage", package: "swift-system"),
        ]),
        // RecorderCore used as a library: record a file in-process.
        .executableTarget(name: "simple-recorder", dependencies: ["RecorderCore", "RecorderModel"], path: "Examples/simple-recorder"),

        // Real test devices (ALSA file plugin, a private PulseAudio server), shared by the tests.
        .target(name: "RecdTestSupport", path: "Tests/RecdTestSupport", swiftSettings: optimizedTestCode),
        .testTarget(name: "RecorderCoreTests", dependencies: [
            "AudioGraph", "RecorderCore", "RecorderModel", "ALSA", "Sndfile", "Soxr", "MPEG4", "SoundCards", "RecdTestSupport", "SignalProcessing",
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "RecdProtocolTests", dependencies: ["RecdProtocol"]),
        .testTarget(name: "RTSPProtocolTests", dependencies: ["RTSP", .product(name: "NIOCore", package: "swift-nio")]),
        .testTarget(name: "TOMLTests", dependencies: ["TOML"]),
        .testTarget(name: "RecdConfigurationTests", dependencies: ["RecdConfiguration", "RecorderModel"]),
        .testTarget(name: "RecdServerTests", dependencies: [
            "RecdServer", "RecdCommands", "RecdProtocol", "RecorderCore", "RecorderModel",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOEmbedded", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "EndToEndTests", dependencies: ["RecdClient", "RecdProtocol", "RecorderModel", "Sndfile", "RecdTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
