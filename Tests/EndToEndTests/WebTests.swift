import Foundation
import Glibc
import RecdClient
import RecdProtocol
import RecdTestSupport
import Testing

/// A real recd-web before a real recd: each route answers only the roles it needs (curl),
/// changes come only from the page itself, recordings are served with ranges and nothing
/// beside them, a tokens file others may read is refused, the page works in Chromium and
/// WebKitGTK (Tests/web/browser_check.py), and a real Prometheus scrapes /metrics.
@Suite("Web", .serialized)
struct WebTests {
    static let controlToken = "control-0123456789abcdef"
    static let listenToken = "listen-0123456789abcdef"
    static let observeToken = "observe-0123456789abcdef"
    /// One token with both listen and control, as a station's owner would have.
    static let ownerToken = "owner-0123456789abcdef01"
    static let tokens = """
        # role token
        control \(controlToken)
        listen \(listenToken)
        observe \(observeToken)
        control \(ownerToken)
        listen \(ownerToken)

        """

    /// A recd-web process on a free port of the loopback, or on a Unix socket (`unixSocket`:
    /// then `port` is set by whoever forwards to it).
    final class WebServer {
        let directory = TemporaryDirectory()
        let process: ChildProcess
        var port = 0
        var scheme = "http"
        var url: String { "\(scheme)://127.0.0.1:\(port)" }
        var log: String { (try? String(contentsOfFile: directory.file("web.log"), encoding: .utf8)) ?? "" }

        init(daemon: Daemon, web: String = "", schedule: String = "", tokens: String? = WebTests.tokens, tokensMode: mode_t = 0o600,
             environment: [String: String] = [:], unixSocket: String? = nil, wait: Bool = true, arguments: [String] = []) throws {
            try "\(schedule)\n[web]\naddress = \"127.0.0.1\"\n\(web)\n".write(toFile: directory.file("recd.toml"), atomically: true, encoding: .utf8)
            if let tokens {
                try tokens.write(toFile: directory.file("tokens"), atomically: true, encoding: .utf8)
                chmod(directory.file("tokens"), tokensMode)
            }
            process = try ChildProcess(Binaries.directory + "/recd-web",
                                       ["--user", "--config", directory.file("recd.toml"), "--socket", daemon.socket,
                                        "--recordings-dir", daemon.recordings, "--tokens-file", directory.file("tokens"),
                                        "--cache-dir", directory.file("pictures")] + arguments
                                       + (unixSocket.map { ["--unix-socket", $0] } ?? ["--port", "0"]),
                                       environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
                                       output: directory.file("web.log"))
            guard wait else { return }
            if let unixSocket {
                guard waitUntil(timeout: 60, { log.contains("socket=\(unixSocket)") || !process.isRunning }), process.isRunning else {
                    throw TestFailure("recd-web did not start: \(log)")
                }
                return
            }
            var found = 0
            _ = waitUntil(timeout: 60) {
                if let range = log.range(of: #"port=(\d+)"#, options: .regularExpression) {
                    found = Int(log[range].dropFirst(5)) ?? 0
                }
                return found > 0 || !process.isRunning
            }
            guard found > 0 else { throw TestFailure("recd-web did not start: \(log)") }
            port = found
        }

        deinit {
            process.signal(SIGTERM)
            _ = process.wait(timeout: 10)
            let log = self.log
            if let start = ["WARNING: ThreadSanitizer", "Fatal error:", "Program crashed"].compactMap({ log.range(of: $0)?.lowerBound }).min() {
                Issue.record("recd-web reported:\n\(log[start...].prefix(12_000))")
            }
        }

        /// curl's answer: the status and the body (`headers`: the headers first).
        /// A recording's picture: the status, the headers, where the PNG is, and its `Recd-Picture`.
        func picture(_ file: String, _ query: String, _ arguments: [String]) throws -> (status: Int, headers: String, path: String, info: [String: Any]?) {
            let png = directory.file("picture-\(UUID().uuidString).png"), headers = directory.file("picture-headers")
            let result = try run("/usr/bin/curl", ["-s", "--max-time", "120", "-D", headers, "-o", png, "-w", "%{http_code}"]
                                 + arguments + [url + "/api/picture/" + file + query], timeout: 150)
            let text = (try? String(contentsOfFile: headers, encoding: .utf8)) ?? ""
            let json = text.split(separator: "\r\n").first { $0.lowercased().hasPrefix("recd-picture:") }
                .map { String($0.dropFirst("recd-picture:".count)).trimmingCharacters(in: .whitespaces) }
            let info = json.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            return (Int(result.stdout) ?? 0, text, png, info)
        }

        func curl(_ path: String, _ arguments: [String] = [], headers: Bool = false) throws -> (status: Int, body: String) {
            let body = directory.file("body")
            unlink(body)
            let result = try run("/usr/bin/curl", ["-s", "--max-time", "10", "-o", body, "-w", "%{http_code}"] + (headers ? ["-i"] : [])
                                 + arguments + [url + path], timeout: 30)
            return (Int(result.stdout) ?? 0, String(decoding: (try? Data(contentsOf: URL(fileURLWithPath: body))) ?? Data(), as: UTF8.self))
        }

        /// A WebSocket on `path`: the upgrade's status and its first frame, as curl got them
        /// in 2 s: `text` (the stream began) or `closed` with the close code and reason.
        enum Upgrade: Equatable { case text, closed(Int, String), status(Int) }
        func upgrade(_ path: String, _ arguments: [String] = []) throws -> Upgrade {
            let frames = directory.file("frames")
            unlink(frames)
            let result = try run("/usr/bin/curl", ["-s", "-o", frames, "--max-time", "2", "-w", "%{http_code}", "--http1.1",
                                                   "-H", "Connection: Upgrade", "-H", "Upgrade: websocket",
                                                   "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
                                 + arguments + [url + path], timeout: 30)
            guard result.stdout == "101" else { return .status(Int(result.stdout) ?? 0) }
            let bytes = [UInt8]((try? Data(contentsOf: URL(fileURLWithPath: frames))) ?? Data())
            guard bytes.count >= 2 else { return .status(101) }
            switch bytes[0] {
            case 0x81: return .text
            case 0x88 where bytes.count >= 4:
                let length = Int(bytes[1] & 0x7f)
                return .closed(Int(bytes[2]) << 8 | Int(bytes[3]), String(decoding: bytes[4..<min(bytes.count, 2 + length)], as: UTF8.self))
            default: return .status(101)
            }
        }
    }

    static func bearer(_ token: String?) -> [String] { token.map { ["-H", "Authorization: Bearer \($0)"] } ?? [] }

    @Test func everyRouteAnswersOnlyTheRolesItNeeds() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"flac\"\n")
        let _: Recording = try daemon.connect().call(.start, StartParams(name: "take", duration: 0.5))
        _ = try #require(daemon.waitForStatus { $0.state.name == .finished })
        let web = try WebServer(daemon: daemon, web: "observe = \"token\"\nlisten = \"token\"\ncontrol = \"token\"\n")

        enum Way { case get, post, upgrade }
        let routes: [(Way, String, WebTestsRole)] = [
            (.get, "/api/status", .observe), (.get, "/api/recordings", .observe), (.get, "/api/day", .observe), (.get, "/api/devices", .observe), (.get, "/api/stream", .observe),
            (.get, "/metrics", .observe), (.upgrade, "/api/live", .observe),
            (.get, "/recordings/take.flac", .listen), (.get, "/api/spectrogram/take.flac", .listen), (.upgrade, "/api/audio", .listen),
            (.post, "/api/control/unlisten", .control),
        ]
        let credentials: [(String, String?, Set<WebTestsRole>)] = [
            ("no token", nil, []), ("an unknown token", "unknown-0123456789abcdef", []),
            ("observe", Self.observeToken, [.observe]), ("listen", Self.listenToken, [.observe, .listen]),
            ("control", Self.controlToken, [.observe, .control]),
        ]
        for (way, path, role) in routes {
            for (name, token, roles) in credentials {
                let allowed = roles.contains(role)
                switch way {
                case .get, .post:
                    let answer = way == .get ? try web.curl(path, Self.bearer(token))
                        : try web.curl(path, ["-X", "POST", "-H", "Content-Type: application/json", "-d", "{}"] + Self.bearer(token))
                    // Allowed: 200; a refused unlisten (recd is not listening) is recd's own 409.
                    let expected = allowed ? (way == .post ? 409 : 200) : (token == nil || roles.isEmpty ? 401 : 403)
                    #expect(answer.status == expected, "\(path) with \(name): \(answer.status), not \(expected): \(answer.body.prefix(300))")
                    if !allowed { #expect(answer.body.contains("'\(role)' role") || answer.body.contains("not known"), "\(answer.body)") }
                case .upgrade:
                    // Refused once upgraded: closed with 1008 (policy violation) and the reason.
                    let answer = try web.upgrade(path, Self.bearer(token))
                    if allowed {
                        #expect(answer == .text, "\(path) with \(name): \(answer)")
                    } else if case .closed(let code, let reason) = answer {
                        #expect(code == 1008 && (reason.contains("'\(role)' role") || reason.contains("not known")), "\(path) with \(name): \(code) \(reason)")
                    } else {
                        Issue.record("\(path) with \(name): \(answer), not closed")
                    }
                }
            }
        }
        // The page itself needs no role (it asks for the token).
        #expect(try web.curl("/").status == 200 && web.curl("/app.js").status == 200)
        let session = try web.curl("/api/session").body
        #expect(session.contains(#""roles":[]"#), "\(session)")

        // Open and off: observe open to all, control off even with a token.
        let open = try WebServer(daemon: daemon, web: "observe = \"open\"\ncontrol = \"off\"\n")
        #expect(try open.curl("/api/status").status == 200)
        let off = try open.curl("/api/control/listen", ["-X", "POST", "-H", "Content-Type: application/json", "-d", "{}"] + Self.bearer(Self.controlToken))
        #expect(off.status == 403 && off.body.contains("off"), "\(off)")
    }

    @Test func changesComeOnlyFromThePageItself() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let web = try WebServer(daemon: daemon)
        let post = ["-X", "POST", "-H", "Content-Type: application/json", "-d", "{}"] + Self.bearer(Self.controlToken)
        let crossOrigin = try web.curl("/api/control/listen", post + ["-H", "Origin: http://evil.example"])
        #expect(crossOrigin.status == 403 && crossOrigin.body.contains("evil.example"), "\(crossOrigin)")
        let crossSite = try web.curl("/api/control/listen", post + ["-H", "Sec-Fetch-Site: cross-site"])
        #expect(crossSite.status == 403, "\(crossSite)")
        let form = try web.curl("/api/control/listen", ["-X", "POST", "-H", "Content-Type: application/x-www-form-urlencoded", "-d", "a=b"] + Self.bearer(Self.controlToken))
        #expect(form.status == 415, "\(form)")
        // A WebSocket from another site's page: closed, whatever its token.
        let crossSocket = try web.upgrade("/api/audio", Self.bearer(Self.ownerToken) + ["-H", "Origin: http://evil.example"])
        #expect(crossSocket == .closed(1008, "a request from http://evil.example is refused: only this station's own page may do this"), "\(crossSocket)")
        #expect(daemon.waitForStatus(timeout: 1) { $0.state.name == .listening } == nil, "a refused request changed something")
        let unknown = try web.curl("/api/control/recordings.delete", post)
        #expect(unknown.status == 404, "\(unknown)")

        // The page's own origin, signed in with the cookie the login sets: allowed.
        let login = try web.curl("/api/login", ["-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"token":"\#(Self.controlToken)"}"#], headers: true)
        let cookie = try #require(login.body.split(separator: "\r\n").first { $0.lowercased().hasPrefix("set-cookie:") }, "\(login)")
        #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "\(cookie)")
        let value = try #require(cookie.dropFirst("set-cookie: ".count).split(separator: ";").first)
        let sameOrigin = try web.curl("/api/control/listen", ["-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"preRoll":2}"#,
                                                              "-H", "Origin: \(web.url)", "-H", "Sec-Fetch-Site: same-origin", "-H", "Cookie: \(value)"])
        #expect(sameOrigin.status == 200 && sameOrigin.body.contains(#""state":{"name":"listening"}"#), "\(sameOrigin)")
        // The same page served over HTTPS by a reverse proxy in front: its own origin too.
        let proxied = try web.curl("/api/control/unlisten", ["-X", "POST", "-H", "Content-Type: application/json", "-d", "{}",
                                                             "-H", "Origin: https://127.0.0.1:\(web.port)", "-H", "Sec-Fetch-Site: same-origin",
                                                             "-H", "Cookie: \(value)"])
        #expect(proxied.status == 200, "\(proxied)")
        // recd checks what the page sends: a number out of range is recd's own error.
        let bad = try web.curl("/api/control/listen", ["-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"preRoll":600}"#] + Self.bearer(Self.controlToken))
        #expect(bad.status == 400 && bad.body.contains("'preRoll' must be between 0 and 60"), "\(bad)")
        let badLogin = try web.curl("/api/login", ["-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"token":"nope-0123456789abcdef"}"#])
        #expect(badLogin.status == 401, "\(badLogin)")
    }

    @Test func recordingsAreServedWithRangesAndNothingElse() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[recording]\nformat = \"flac\"\n")
        let _: Recording = try daemon.connect().call(.start, StartParams(name: "take", duration: 1))
        _ = try #require(daemon.waitForStatus { $0.state.name == .finished })
        let web = try WebServer(daemon: daemon)
        let file = try Data(contentsOf: URL(fileURLWithPath: daemon.recordings + "/take.flac"))
        let range = try run("/usr/bin/curl", ["-s", "-D", "-", "-o", "/dev/null", "-H", "Range: bytes=100-1099"] + Self.bearer(Self.listenToken)
                            + [web.url + "/recordings/take.flac"])
        #expect(range.stdout.contains("206") && range.stdout.lowercased().contains("content-range: bytes 100-1099/\(file.count)"), "\(range.stdout)")
        #expect(range.stdout.lowercased().contains("content-type: audio/flac"), "\(range.stdout)")
        let part = web.directory.file("part")
        _ = try run("/usr/bin/curl", ["-s", "-o", part, "-H", "Range: bytes=100-1099"] + Self.bearer(Self.listenToken) + [web.url + "/recordings/take.flac"])
        #expect(try Data(contentsOf: URL(fileURLWithPath: part)) == file[100...1099])

        try "secret".write(toFile: daemon.recordings + "/.hidden.wav", atomically: true, encoding: .utf8)
        try "partial".write(toFile: daemon.recordings + "/now.wav.part", atomically: true, encoding: .utf8)
        for path in ["/recordings/.hidden.wav", "/recordings/now.wav.part", "/recordings/../recd.toml", "/recordings/%2e%2e/recd.toml",
                     "/recordings/nothing.flac"] {
            let answer = try web.curl(path, ["--path-as-is"] + Self.bearer(Self.listenToken))
            #expect([400, 404].contains(answer.status), "\(path): \(answer.status) \(answer.body.prefix(200))")
        }
    }

    /// The spectrogram of a recorded file, in every format recd writes: recd records the tone
    /// (440 Hz, -12 dBFS), recd-web reads the file back (libsndfile, FFmpeg for .m4a).
    @Test func aRecordingsSpectrogramInEveryFormat() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let web = try WebServer(daemon: daemon)
        for format in AudioFileFormat.allCases {
            let _: Recording = try daemon.connect().call(.start, StartParams(name: "tone-\(format.rawValue)", format: format, duration: 1.5))
            _ = try #require(daemon.waitForStatus { $0.state.name == .finished && $0.recording?.name == "tone-\(format.rawValue)" })
        }
        let files = try daemon.recordingFiles()
        #expect(files.count == AudioFileFormat.allCases.count, "\(files)")
        for file in files {
            let answer = try web.curl("/api/spectrogram/\(file)?columns=10", Self.bearer(Self.listenToken))
            guard answer.status == 200, let json = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any],
                  let columns = json["columns"] as? Int, let bins = json["bins"] as? Int, let text = json["levels"] as? String,
                  let levels = Data(base64Encoded: text), let floor = json["floor"] as? Double, let step = json["step"] as? Double else {
                Issue.record("\(file): \(answer.status) \(answer.body.prefix(300))")
                continue
            }
            #expect(columns == 10 && bins == 513 && levels.count == columns * bins, "\(file)")
            #expect(json["sampleRate"] as? Int == 48000, "\(file)")
            // Every column: the tone's bin (440 Hz is bin 9.39) the loudest, at the tone's
            // peak (-12 dBFS) less the window's scalloping (0.86 dB), to the 0.5 dB kept;
            // the lossy codecs within 2 dB.
            for column in 0..<columns {
                let slice = [UInt8](levels[(column * bins)..<((column + 1) * bins)])
                let loudest = slice.indices.max { slice[$0] < slice[$1] }!
                let dB = floor + Double(slice[loudest]) * step
                #expect(loudest == 9, "\(file) column \(column): loudest bin \(loudest)")
                #expect(abs(dB - (-12.86)) < 2, "\(file) column \(column): \(dB) dBFS")
            }
        }
        #expect(try web.curl("/api/spectrogram/\(files[0])", Self.bearer(Self.observeToken)).status == 403)
        #expect(try web.curl("/api/spectrogram/\(files[0])?columns=0", Self.bearer(Self.listenToken)).status == 400)
        #expect(try web.curl("/api/spectrogram/nothing.flac", Self.bearer(Self.listenToken)).status == 404)

        // Each file's picture (issue 54): a PNG ffprobe reads, of the size its header says, and
        // the file's peak as ffmpeg measures it (volumedetect; the lossy codecs within 1 dB).
        for file in files {
            let picture = try web.picture(file, "?width=100", Self.bearer(Self.listenToken))
            guard picture.status == 200, let info = picture.info, let peak = info["peak"] as? Double,
                  let width = info["width"] as? Int, let height = info["height"] as? Int else {
                Issue.record("\(file): \(picture.status) \(picture.headers)")
                continue
            }
            #expect(picture.headers.lowercased().contains("content-type: image/png"), "\(file): \(picture.headers)")
            let probe = try run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "stream=width,height", "-of", "csv=p=0", picture.path])
            #expect(probe.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "\(width),\(height)", "\(file): \(probe.stdout)")
            let detected = try run("/usr/bin/ffmpeg", ["-v", "info", "-i", daemon.recordings + "/" + file, "-af", "volumedetect", "-f", "null", "-"])
            let maximum = detected.stderr.components(separatedBy: "max_volume: ").dropFirst().first
                .flatMap { Double($0.components(separatedBy: " dB")[0]) }
            let lossy = [".opus", ".ogg", ".mp3", ".m4a"].contains { file.hasSuffix($0) }
            #expect(maximum.map { abs($0 - peak) <= (lossy ? 1 : 0.15) } == true, "\(file): peak \(peak), ffmpeg \(String(describing: maximum))")
        }
        #expect(try web.picture(files[0], "", Self.bearer(Self.observeToken)).status == 403)
        for query in ["?width=99", "?width=2001", "?width=x", "?range=999", "?range=linear", "?range=96001"] {
            let refused = try web.curl("/api/picture/\(files[0])\(query)", Self.bearer(Self.listenToken))
            #expect(refused.status == 400 && refused.body.contains("must be"), "\(query): \(refused)")
        }
        #expect(try web.curl("/api/picture/nothing.flac", Self.bearer(Self.listenToken)).status == 404)
    }

    /// Pictures are rendered once and kept (a request for the same file and size is served from
    /// the cache directory, the same file), rendered again when the recording changes, and the
    /// directory never holds more than its limit (--cache-size 1: 1 MiB).
    @Test func picturesAreRenderedOnceAndKeptWithinTheirBound() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let web = try WebServer(daemon: daemon, arguments: ["--cache-size", "1"])
        // 10 s of pink noise: a picture of many different pixels, over a hundred KiB as a PNG
        // (and little to decode: under ThreadSanitizer each picture takes a second or two).
        let file = "noise.flac"
        let made = try run("/usr/bin/sox", ["-n", "-r", "48000", "-c", "1", "-b", "16", daemon.recordings + "/" + file, "synth", "10", "pinknoise"])
        try #require(made.status == 0, "\(made.stderr)")
        let cache = web.directory.file("pictures")
        func pictures() -> [String: ino_t] {
            var found: [String: ino_t] = [:]
            for name in (try? FileManager.default.contentsOfDirectory(atPath: cache)) ?? [] where name.hasSuffix(".png") && !name.hasPrefix(".") {
                var status = stat()
                if stat(cache + "/" + name, &status) == 0 { found[name] = status.st_ino }
            }
            return found
        }
        func bytes() -> Int64 {
            ((try? FileManager.default.contentsOfDirectory(atPath: cache)) ?? []).reduce(0) { total, name in
                var status = stat()
                return total + (stat(cache + "/" + name, &status) == 0 ? Int64(status.st_size) : 0)
            }
        }
        let first = try web.picture(file, "?width=800", Self.bearer(Self.listenToken))
        try #require(first.status == 200, "\(first.headers)")
        let kept = pictures()
        #expect(kept.count == 1, "\(kept)")
        // Again: the same picture, from the same file of the cache.
        let again = try web.picture(file, "?width=800", Self.bearer(Self.listenToken))
        #expect(again.status == 200 && (try? Data(contentsOf: URL(fileURLWithPath: again.path))) == (try? Data(contentsOf: URL(fileURLWithPath: first.path))))
        #expect(pictures() == kept, "rendered again: \(pictures()) after \(kept)")
        // The recording rewritten (a re-dating, a repair): a picture of its own.
        var times = [timespec(tv_sec: 1_700_000_000, tv_nsec: 0), timespec(tv_sec: 1_700_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, daemon.recordings + "/" + file, &times, 0) == 0)
        _ = try web.picture(file, "?width=800", Self.bearer(Self.listenToken))
        #expect(pictures().count == 2, "\(pictures())")
        // More pictures than the limit holds: the directory stays within 1 MiB, the newest kept.
        var sizes: [Int64] = [], rendered: Int64 = 0
        for width in stride(from: 500, through: 1400, by: 100) {
            let answer = try web.picture(file, "?width=\(width)&range=full", Self.bearer(Self.listenToken))
            #expect(answer.status == 200, "width \(width): \(answer.headers)")
            var status = stat()
            rendered += stat(answer.path, &status) == 0 ? Int64(status.st_size) : 0
            sizes.append(bytes())
        }
        #expect(rendered > 1 << 20, "the pictures add up to \(rendered) bytes: less than the limit, nothing to trim")
        #expect(sizes.allSatisfy { $0 <= 1 << 20 }, "the cache directory held \(sizes.max() ?? 0) bytes")
        let newest = pictures()
        _ = try web.picture(file, "?width=1400&range=full", Self.bearer(Self.listenToken))
        #expect(pictures() == newest, "the newest picture was not kept")
    }

    /// The day's timeline: sunrise, sunset, dawn and dusk where [schedule] says the station is
    /// (checked against astral, an independent implementation), and the schedule's windows.
    @Test func theDayHasItsSunAndItsWindows() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let schedule = "[schedule]\nlatitude = 52.52\nlongitude = 13.40\nwindows = [\"sunset..sunset+1h\", \"23:00..01:00\"]\n"
        let web = try WebServer(daemon: daemon, schedule: schedule, environment: ["TZ": "UTC"])
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let sunTimes = try run("/usr/bin/python3", [root + "/Tests/reference/sun_times.py", "2026", "52.52,13.4"]).stdout
        for date in ["2026-06-21", "2026-12-21", "2026-03-29"] {
            let answer = try web.curl("/api/day?date=\(date)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any], "\(answer)")
            // ScheduleTests' reference: astral's events for each UTC date (Berlin's fall on it).
            let line = try #require(sunTimes.split(separator: "\n").first { $0.contains(" \(date) ") }, "astral has no \(date)")
            let fields = line.split(separator: " ").dropFirst(2).map { Double($0) }
            let reference = Dictionary(uniqueKeysWithValues: zip(["dawn", "sunrise", "sunset", "dusk"], fields.map { $0 ?? .nan }))
            for event in ["dawn", "sunrise", "sunset", "dusk"] {
                let ours = try #require(json[event] as? Double, "\(date): no \(event) in \(answer.body)")
                #expect(abs(ours - reference[event]!) < 60, "\(date) \(event): \(ours), astral \(reference[event]!)")
            }
            let start = try #require(json["start"] as? Double), end = try #require(json["end"] as? Double)
            #expect(end - start == 86400 && Int(start) % 86400 == 0, "\(date): the UTC day, not \(start)…\(end)")
            // The windows that touch the day: the night before's end, the sunset's hour, the
            // night's beginning.
            let windows = try #require(json["windows"] as? [[String: Double]])
            let sunset = reference["sunset"]!
            #expect(windows.count == 3, "\(date): \(windows)")
            #expect(windows.contains { abs($0["start"]! - sunset) < 60 && abs($0["end"]! - (sunset + 3600)) < 60 }, "\(date): \(windows)")
            #expect(windows.contains { $0["start"]! == start + 23 * 3600 && $0["end"]! == end + 3600 }, "\(date): \(windows)")
            #expect(windows.contains { $0["start"]! == start - 3600 && $0["end"]! == start + 3600 }, "\(date): \(windows)")
        }
        #expect(try web.curl("/api/day?date=2026-02-30").status == 400)
    }

    @Test func aTokensFileOthersMayReadIsRefused() throws {
        let server = try PulseServer()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let readable = try WebServer(daemon: daemon, web: "control = \"token\"", tokensMode: 0o644, wait: false)
        #expect(readable.process.wait(timeout: 30) == 78)
        #expect(readable.log.contains("may be read by others (mode 644): chmod 600 it"), "\(readable.log)")
        let malformed = try WebServer(daemon: daemon, web: "control = \"token\"", tokens: "control short\n", wait: false)
        #expect(malformed.process.wait(timeout: 30) == 78)
        #expect(malformed.log.contains(":1") && malformed.log.contains("at least 16"), "\(malformed.log)")
        let badKey = try WebServer(daemon: daemon, web: "port = 70000", wait: false)
        #expect(badKey.process.wait(timeout: 30) == 78)
        #expect(badKey.log.contains("web.port"), "\(badKey.log)")
    }

    /// Open pages do not hold up anyone else: each holds a blocking reader of recd's socket,
    /// on a thread of its own (on Dispatch's pool, eight of them delayed a status call by 4 s).
    @Test func manyOpenPagesHoldUpNoOtherRequest() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let web = try WebServer(daemon: daemon)
        var pages: [ChildProcess] = []
        for page in 0..<12 {
            pages.append(try ChildProcess("/usr/bin/curl", ["-s", "-N", "-o", web.directory.file("page-\(page)"), "--max-time", "60", "--http1.1",
                                                            "-H", "Connection: Upgrade", "-H", "Upgrade: websocket",
                                                            "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                                                            web.url + "/api/live"], environment: ProcessInfo.processInfo.environment))
        }
        defer { for page in pages { page.signal(SIGKILL); _ = page.wait(timeout: 10) } }
        // All twelve live: each got its snapshot (and more).
        func live() -> Int {
            (0..<12).filter { ((try? FileManager.default.attributesOfItem(atPath: web.directory.file("page-\($0)"))[.size] as? Int) ?? 0) > 0 }.count
        }
        #expect(waitUntil(timeout: 30) { live() == 12 }, "\(live()) of 12 pages live")
        for _ in 0..<5 {
            // A deadline far beyond a call's milliseconds, far below the pages' minute.
            let answer = try web.curl("/api/status", ["--max-time", "20"])
            #expect(answer.status == 200, "\(answer.status)")
        }
    }

    @Test func recdGoneIsSaidAndWebGoneStopsNothing() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        var web = try WebServer(daemon: daemon)
        let _: Recording = try daemon.connect().call(.start, StartParams(name: "goes-on"))
        // recd-web killed outright: the recording does not notice.
        web.process.signal(SIGKILL)
        _ = web.process.wait(timeout: 10)
        let before = try #require(daemon.waitForStatus { $0.currentTime > 0.5 }).currentTime
        #expect(daemon.waitForStatus { $0.state.name == .recording && $0.currentTime > before + 0.5 } != nil)
        web = try WebServer(daemon: daemon)
        let stopped: Recording = try daemon.connect().call(.stop)
        #expect(stopped.name == "goes-on")
        #expect(daemon.terminate() == 0)
        let gone = try web.curl("/api/status")
        #expect(gone.status == 503 && gone.body.contains("recd is not running"), "\(gone)")
        #expect(web.process.isRunning)
    }

    /// HTTPS when [web] names a certificate and its key (the release binaries have the TLS
    /// trait; the debug and TSan builds leave it out and must say so). curl checks the
    /// certificate chain itself; the login cookie is then Secure and only an https:// page
    /// may change anything.
    @Test func httpsWhenACertificateIsConfigured() throws {
        let version = try run(Binaries.directory + "/recd-web", ["--version"]).stdout
        if ProcessInfo.processInfo.environment["RECD_TEST_BINARIES"] != nil {
            #expect(version.contains(", with TLS"), "the shipping recd-web has TLS: \(version)")
        }
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        let keys = TemporaryDirectory()
        func makeCertificate(_ name: String) throws {
            let made = try run("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                                                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                                                    "-keyout", keys.file(name + ".key"), "-out", keys.file(name + ".pem")])
            guard made.status == 0 else { throw TestFailure("openssl: \(made.stderr)") }
            chmod(keys.file(name + ".key"), 0o600)
        }
        try makeCertificate("station")
        try makeCertificate("other")
        func tls(_ certificate: String, _ key: String) -> String {
            "tls_certificate = \"\(keys.file(certificate + ".pem"))\"\ntls_key = \"\(keys.file(key + ".key"))\""
        }
        guard version.contains(", with TLS") else {
            let refused = try WebServer(daemon: daemon, web: tls("station", "station"), wait: false)
            #expect(refused.process.wait(timeout: 30) == 78)
            #expect(refused.log.contains("web.tls_certificate") && refused.log.contains("built without TLS"), "\(refused.log)")
            return
        }
        // A key everyone may read, and a key that is not the certificate's: refused (78).
        chmod(keys.file("station.key"), 0o644)
        let readable = try WebServer(daemon: daemon, web: tls("station", "station"), wait: false)
        #expect(readable.process.wait(timeout: 30) == 78)
        #expect(readable.log.contains("may be read by everyone (mode 644)"), "\(readable.log)")
        chmod(keys.file("station.key"), 0o640)
        let mismatched = try WebServer(daemon: daemon, web: tls("station", "other"), wait: false)
        #expect(mismatched.process.wait(timeout: 30) == 78)
        #expect(mismatched.log.contains("does not go with web.tls_certificate"), "\(mismatched.log)")

        let web = try WebServer(daemon: daemon, web: tls("station", "station"))
        web.scheme = "https"
        let trust = ["--cacert", keys.file("station.pem")]
        let status = try web.curl("/api/status", trust)
        #expect(status.status == 200 && status.body.contains("\"state\""), "\(status)")
        // The same port in plain HTTP gets no page, and a client that does not trust the
        // certificate refuses it (curl's own check: status 0).
        web.scheme = "http"
        #expect(try web.curl("/api/status").status != 200)
        web.scheme = "https"
        #expect(try web.curl("/api/status").status == 0)
        #expect(try web.upgrade("/api/live", trust) == .text)
        let login = ["-X", "POST", "-H", "Content-Type: application/json", "--data", "{\"token\":\"\(Self.ownerToken)\"}"]
        let signedIn = try web.curl("/api/login", trust + login + ["-H", "Origin: https://127.0.0.1:\(web.port)"], headers: true)
        #expect(signedIn.status == 200, "\(signedIn)")
        let cookie = signedIn.body.split(separator: "\r\n").first { $0.lowercased().hasPrefix("set-cookie:") } ?? ""
        #expect(cookie.contains("HttpOnly") && cookie.contains("; Secure"), "\(cookie)")
        // A page served over plain HTTP under this name is not this station's page.
        let downgraded = try web.curl("/api/login", trust + login + ["-H", "Origin: http://127.0.0.1:\(web.port)"])
        #expect(downgraded.status == 403, "\(downgraded)")
    }

    /// Socket activation as recd-web.socket and recd-web-proxy.service do it, with systemd's
    /// own tools: the port is held by systemd-socket-proxyd (here handed its listening socket
    /// by systemd-socket-activate, as PID 1 would), which forwards each connection to
    /// recd-web's Unix socket, and exits once no connection has been open for its idle time.
    @Test func socketActivatedBehindSystemdsProxy() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server))
        // --unix-socket excludes a TCP address (a usage error, 64).
        let both = try run(Binaries.directory + "/recd-web", ["--unix-socket", "/tmp/x.sock", "--port", "8090"])
        #expect(both.status == 64 && both.stderr.contains("--unix-socket excludes --address and --port"), "\(both)")
        let path = TemporaryDirectory()
        let socket = path.file("http.sock")
        let web = try WebServer(daemon: daemon, unixSocket: socket)
        var status = stat()
        #expect(stat(socket, &status) == 0 && status.st_mode & S_IFMT == S_IFSOCK, "no socket at \(socket)")
        // Straight to the socket, as the proxy connects.
        let direct = try run("/usr/bin/curl", ["-s", "--max-time", "10", "--unix-socket", socket, "http://station/api/status"], timeout: 30)
        #expect(direct.stdout.contains("\"state\""), "\(direct.stdout)")

        let idle = 3.0
        web.port = try Self.freePort()
        let proxy = try ChildProcess("/usr/bin/systemd-socket-activate",
                                     ["-l", "127.0.0.1:\(web.port)", "/lib/systemd/systemd-socket-proxyd",
                                      "--exit-idle-time=\(Int(idle))", socket],
                                     environment: ProcessInfo.processInfo.environment, output: path.file("proxy.log"))
        defer { proxy.signal(SIGTERM); _ = proxy.wait(timeout: 10) }
        #expect(waitUntil(timeout: 30) { (try? web.curl("/"))?.status == 200 }, "the page through the proxy: \((try? String(contentsOfFile: path.file("proxy.log"), encoding: .utf8)) ?? "")")
        #expect(try web.curl("/api/status").body.contains("\"state\""))
        #expect(try web.upgrade("/api/live") == .text)
        // A page left open holds the proxy (and so recd-web.service) past the idle time; a
        // recording's time goes to it all the while.
        let _: Recording = try daemon.connect().call(.start, StartParams(name: "proxied"))
        let frames = path.file("frames")
        let page = try ChildProcess("/usr/bin/curl", ["-s", "-N", "-o", frames, "--max-time", "\(Int(idle * 3))", "--http1.1",
                                                      "-H", "Connection: Upgrade", "-H", "Upgrade: websocket",
                                                      "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                                                      web.url + "/api/live"], environment: ProcessInfo.processInfo.environment)
        #expect(waitUntil(timeout: 30) { ((try? FileManager.default.attributesOfItem(atPath: frames)[.size] as? Int) ?? 0) > 0 }, "the live page did not begin")
        func frameBytes() -> Int { (try? FileManager.default.attributesOfItem(atPath: frames)[.size] as? Int) ?? 0 }
        // Past the idle time with the page open (a wait for time itself: the point is that
        // the idle time passes), the proxy is still there and frames still come through it.
        let opened = Date()
        usleep(UInt32((idle + 1.5) * 1_000_000))
        #expect(Date().timeIntervalSince(opened) > idle && page.isRunning, "the page's curl ended early: the check below means nothing")
        #expect(proxy.isRunning, "the proxy exited while a page was open")
        let bytes = frameBytes()
        #expect(waitUntil(timeout: 10) { frameBytes() > bytes }, "no frame came through the proxy after its idle time")
        #expect(page.wait(timeout: idle * 3 + 30) != nil)
        // No connection: it exits by itself within its idle time (and systemd would stop
        // recd-web.service, StopWhenUnneeded=yes).
        let exit = proxy.wait(timeout: idle + 30)
        #expect(exit == 0, "the idle proxy: \(String(describing: exit))")
        #expect(web.process.isRunning)
    }

    /// The page in a browser: Tests/web/browser_check.py, which prints what it measured. One
    /// browser at a time on the machine (a lock file, across the suite's processes): each takes
    /// a core while it draws, and six at once, beside TSan-built daemons, made a burst take
    /// 1.3 s to show where one alone takes 0.1 s.
    func browserCheck(_ browser: String) throws -> BrowserRun {
        let lock = open("/tmp/recd-browser-tests.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o666)
        defer { if lock >= 0 { close(lock) } }
        if lock >= 0 { _ = flock(lock, LOCK_EX) }
        let server = try PulseServer()
        try server.tone()
        let config = """
            [trigger]
            high_pass = 2000
            threshold = -40
            hang = 0.5
            pre_roll = 0.5
            """
        let daemon = try Daemon(device: TestDevices.paced(server), config: config)
        // The station's place, for the sun on the timeline (checked against astral).
        let web = try WebServer(daemon: daemon, schedule: "[schedule]\nlatitude = 52.52\nlongitude = 13.40\n")
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let screenshots = root + "/.build/web-screenshots"
        let script = root + "/Tests/web/browser_check.py"
        // make deps' environment: Debian's Selenium, and Mozilla's Marionette client for Firefox.
        let python = root + "/.build/web-venv/bin/python"
        try #require(FileManager.default.isExecutableFile(atPath: python), "no \(python): make deps makes it")
        let command = [python, script, "--browser", browser, "--url", web.url, "--token", Self.ownerToken,
                       "--pulse-server", server.address, "--recordings", daemon.recordings, "--screenshots", screenshots,
                       "--recd-pid", String(daemon.process.pid)]
        let result = try runBrowserScript(browser, command)
        try result.line.write(toFile: screenshots + "/\(browser).json", atomically: true, encoding: .utf8)
        return result
    }

    /// What a browser script printed: its status, its last JSON line, and its stderr.
    struct BrowserRun {
        var status: Int32, line: String, detail: String
        var passed: Bool { status == 0 && !line.isEmpty && !line.contains(#""failure""#) }
        /// WebKitGTK's web process crashed under the page: WebKitWebDriver ends the session,
        /// and MiniBrowser says so on stderr.
        var webProcessCrashed: Bool { line.contains("page crash") && detail.contains("WebProcess CRASHED") }
    }

    func runBrowserScript(_ browser: String, _ command: [String]) throws -> BrowserRun {
        let result = browser == "webkit"
            ? try run("/usr/bin/xvfb-run", ["-a", "-s", "-screen 0 1280x1024x24"] + command, timeout: 300)
            : try run("/usr/bin/env", command, timeout: 300)
        let line = result.stdout.split(separator: "\n").last { $0.hasPrefix("{") }.map(String.init) ?? ""
        return BrowserRun(status: result.status, line: line, detail: String(result.stderr.suffix(3000)))
    }

    /// A browser check passes. WebKitGTK 2.50's web process crashed once in CI on a loaded
    /// machine, during a plain getBoundingClientRect, with no message of its own: after such a
    /// crash, and only then, the whole check runs once more with new daemons, and says so. A
    /// page that crashes the browser twice fails.
    func expectBrowserCheckPasses(_ browser: String, _ check: () throws -> BrowserRun) throws {
        var run = try check()
        if run.webProcessCrashed {
            print("WebKit's web process crashed (\(run.line)); the check runs once more")
            run = try check()
        }
        #expect(run.passed, "\(browser): \(run.line)\n\(run.detail)")
    }

    /// A station of two sources in a browser (Tests/web/sources_check.py): the switcher, a
    /// state and meter per source, and the shown source's controls, spectrum, stream and files.
    func sourcesCheck(_ browser: String) throws -> BrowserRun {
        let lock = open("/tmp/recd-browser-tests.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o666)
        defer { if lock >= 0 { close(lock) } }
        if lock >= 0 { _ = flock(lock, LOCK_EX) }
        let eastServer = try PulseServer(), westServer = try PulseServer()
        try eastServer.tone()
        try westServer.tone()
        _ = try westServer.sine(frequency: 3000)
        let daemon = try Daemon(device: nil, config: """
            [listen]
            enabled = true
            \(sourceTables(["east": TestDevices.paced(eastServer), "west": TestDevices.paced(westServer)]))
            """)
        let web = try WebServer(daemon: daemon)
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let python = root + "/.build/web-venv/bin/python"
        try #require(FileManager.default.isExecutableFile(atPath: python), "no \(python): make deps makes it")
        let command = [python, root + "/Tests/web/sources_check.py", "--browser", browser, "--url", web.url, "--token", Self.ownerToken,
                       "--screenshots", root + "/.build/web-screenshots"]
        var result = try runBrowserScript(browser, command)
        result.detail += "\n" + web.log.suffix(2000)
        return result
    }

    @Test func twoSourcesInChromium() throws { try expectBrowserCheckPasses("chromium") { try sourcesCheck("chromium") } }

    @Test func twoSourcesInWebKit() throws { try expectBrowserCheckPasses("webkit") { try sourcesCheck("webkit") } }

    @Test func twoSourcesInFirefox() throws { try expectBrowserCheckPasses("firefox") { try sourcesCheck("firefox") } }

    /// A real Prometheus (Debian's) scrapes recd-web's /metrics every second with the observe
    /// token, and its query API follows a recording, a trigger event and a lost device.
    @Test func prometheusFollowsTheStation() throws {
        let server = try PulseServer()
        try server.tone()
        let daemon = try Daemon(device: TestDevices.paced(server), config: "[trigger]\nhigh_pass = 2000\nthreshold = -40\nhang = 0.5\n")
        let web = try WebServer(daemon: daemon, web: "observe = \"token\"\n")
        let directory = TemporaryDirectory()
        let port = try Self.freePort()
        try """
            global: { scrape_interval: 1s, scrape_timeout: 1s }
            scrape_configs:
              - job_name: recd
                metrics_path: /metrics
                authorization: { type: Bearer, credentials: \(Self.observeToken) }
                static_configs: [ { targets: ["127.0.0.1:\(web.port)"] } ]
            """.write(toFile: directory.file("prometheus.yml"), atomically: true, encoding: .utf8)
        let prometheus = try ChildProcess("/usr/bin/prometheus", ["--config.file", directory.file("prometheus.yml"),
                                                                  "--storage.tsdb.path", directory.file("data"),
                                                                  "--web.listen-address", "127.0.0.1:\(port)"],
                                          environment: ProcessInfo.processInfo.environment, output: directory.file("prometheus.log"))
        defer { prometheus.signal(SIGTERM); _ = prometheus.wait(timeout: 20) }
        /// The query's one value, once Prometheus has it.
        func value(_ query: String) -> Double? {
            let encoded = query.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? query
            guard let answer = try? run("/usr/bin/curl", ["-s", "--max-time", "5", "http://127.0.0.1:\(port)/api/v1/query?query=\(encoded)"]),
                  let json = try? JSONSerialization.jsonObject(with: Data(answer.stdout.utf8)) as? [String: Any],
                  let data = json["data"] as? [String: Any], let result = data["result"] as? [[String: Any]],
                  let pair = result.first?["value"] as? [Any], let text = pair.last as? String else { return nil }
            return Double(text)
        }
        /// What Prometheus answered, printed at the end (the closing notes quote it).
        var answered: [String] = []
        func waitFor(_ query: String, _ expected: Double, timeout: Double = 30) -> Bool {
            let met = waitUntil(timeout: timeout) { value(query) == expected }
            answered.append("\(query) = \(value(query).map { String($0) } ?? "nothing")")
            return met
        }
        defer { print("Prometheus answered, in order: " + answered.joined(separator: "; ")) }
        let log = { (try? String(contentsOfFile: directory.file("prometheus.log"), encoding: .utf8))?.suffix(2000) ?? "" }
        #expect(waitFor(#"up{job="recd"}"#, 1, timeout: 60), "Prometheus does not scrape recd-web: \(log())")
        #expect(waitFor("recd_files_total", 0), "\(String(describing: value("recd_files_total")))")
        #expect(waitFor(#"recd_state{state="idle"}"#, 1))

        // A recording: the state while it runs, then a file counted. It runs until stopped: with
        // a duration, a loaded machine (scrapes and queries late) could miss its state.
        let _: Recording = try daemon.connect().call(.start, StartParams(name: "scraped"))
        #expect(waitFor(#"recd_state{state="recording"}"#, 1), "the recording's state never scraped")
        let _: Recording = try daemon.connect().call(.stop)
        #expect(waitFor("recd_files_total", 1), "\(String(describing: value("recd_files_total")))")

        // A trigger event: a 3 kHz burst over the 2 kHz high-pass.
        let _: Recording = try daemon.connect().call(.start, StartParams(trigger: TriggerParams()))
        _ = try #require(daemon.waitForStatus { $0.trigger?.floor != nil })
        let burst = try server.sine(frequency: 3000)
        _ = daemon.waitForStatus { $0.trigger?.state == "open" }
        Thread.sleep(forTimeInterval: 1)
        try server.unload(burst)
        #expect(waitFor(#"recd_trigger_events_total{kind="closed"}"#, 1), "\(String(describing: value(#"recd_trigger_events_total{kind="closed"}"#)))")
        #expect(waitFor("recd_files_total", 2))

        // The device lost: recd waits for it, and says so.
        server.kill()
        #expect(waitFor("recd_device_waiting", 1), "\(String(describing: value("recd_device_waiting")))")
    }

    /// A TCP port nothing listens on now (the kernel's pick for port 0).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw TestFailure("no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    @Test func theStationInChromium() throws { try expectBrowserCheckPasses("chromium") { try browserCheck("chromium") } }

    @Test func theStationInWebKit() throws { try expectBrowserCheckPasses("webkit") { try browserCheck("webkit") } }

    @Test func theStationInFirefox() throws { try expectBrowserCheckPasses("firefox") { try browserCheck("firefox") } }
}

enum WebTestsRole { case observe, listen, control }
