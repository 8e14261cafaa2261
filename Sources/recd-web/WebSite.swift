import AudioGraph
import FoundationEssentials
import Glibc
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOConcurrencyHelpers
import NIOCore
import RecdClient
import RecdConfiguration
import RecdProtocol
import RecorderModel
import SignalProcessing

/// Every route of the page, and the role each needs (doc/web.md has the table).
struct WebSite: Sendable {
    typealias Context = BasicWebSocketRequestContext
    let access: WebAccess
    let socketPath: String
    let recordingsDirectory: String
    let schedule: ScheduledRecording?
    let latitude: Double?
    let longitude: Double?
    /// recd-rtsp's [rtsp], for the stream's URL on the page.
    let rtsp: RTSPSettings
    /// On a station of several sources, each one's schedule by name (the day's windows of the
    /// source the page shows); empty for a station of one.
    let sourceSchedules: [String: ScheduledRecording?]
    let viewers: ViewerCount
    let spectrograms: Spectrograms
    let pictures: Pictures

    init(access: WebAccess, socketPath: String, recordingsDirectory: String,
         schedule: ScheduledRecording?, latitude: Double?, longitude: Double?, rtsp: RTSPSettings = RTSPSettings(),
         sourceSchedules: [String: ScheduledRecording?] = [:], pictureDirectory: String? = nil, pictureCacheBytes: Int64 = 64 << 20) {
        self.access = access
        let spectrograms = Spectrograms()
        self.spectrograms = spectrograms
        pictures = Pictures(directory: pictureDirectory, limit: pictureCacheBytes, spectrograms: spectrograms)
        self.sourceSchedules = sourceSchedules
        self.rtsp = rtsp
        self.socketPath = socketPath
        self.recordingsDirectory = recordingsDirectory
        self.schedule = schedule
        self.latitude = latitude
        self.longitude = longitude
        viewers = ViewerCount(limit: access.settings.maxViewers)
    }

    var recd: RecdBridge { RecdBridge(socketPath: socketPath) }

    /// What a page may ask recd to do (control role); everything else on recd's socket stays there.
    static let controlMethods: [String: RecdProtocol.Method] = [
        "listen": .listen, "unlisten": .unlisten, "start": .start, "stop": .stop,
        "pause": .pause, "resume": .resume, "split": .split, "cancel": .cancel,
    ]

    func addRoutes(to router: Router<Context>) {
        router.middlewares.add(SecurityHeaders())
        let access = access, recd = recd, recordingsDirectory = recordingsDirectory
        let secure = access.settings.usesTLS ? "; Secure" : ""

        // The page itself needs no role: without one it asks for a token.
        router.get("/") { _, _ in Self.asset(PackageResources.index_html, "text/html; charset=utf-8") }
        router.get("/app.js") { _, _ in Self.asset(PackageResources.app_js, "text/javascript; charset=utf-8") }
        router.get("/app.css") { _, _ in Self.asset(PackageResources.app_css, "text/css; charset=utf-8") }

        router.get("/api/session") { request, _ in
            try Self.json(SessionAnswer(roles: access.roles(of: request).sorted().map(\.rawValue),
                                        open: access.openRoles.sorted().map(\.rawValue),
                                        tokenRoles: WebTokens.Role.allCases.filter { access.access($0) == .token }.map(\.rawValue)))
        }
        router.post("/api/login") { request, context in
            try access.requireSameOrigin(request)
            let login = try await request.decode(as: LoginRequest.self, context: context)
            guard let roles = access.roles(ofToken: login.token) else {
                throw HTTPError(.unauthorized, message: "this token is not known")
            }
            var response = try Self.json(SessionAnswer(roles: access.openRoles.union(roles).sorted().map(\.rawValue),
                                                       open: access.openRoles.sorted().map(\.rawValue),
                                                       tokenRoles: WebTokens.Role.allCases.filter { access.access($0) == .token }.map(\.rawValue)))
            // HttpOnly: no script reads it; SameSite=Strict: no other site's page sends it;
            // Secure over HTTPS: never sent in the clear.
            response.headers[.setCookie] = "\(WebAccess.cookieName)=\(login.token); Path=/; HttpOnly; SameSite=Strict; Max-Age=31536000\(secure)"
            return response
        }
        router.post("/api/logout") { request, _ in
            try access.requireSameOrigin(request)
            var response = Response(status: .noContent)
            response.headers[.setCookie] = "\(WebAccess.cookieName)=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0\(secure)"
            return response
        }

        // `?source=NAME`: the source a station of several shows (recd answers for it); none:
        // the station's status, or the only source's.
        router.get("/api/status") { request, _ in
            try access.require(.observe, request)
            return Self.json(line: try await recd.call(.status, paramsJSON: Self.sourceParams(try Self.source(of: request))))
        }
        router.get("/api/recordings") { request, _ in
            try access.require(.observe, request)
            return Self.json(line: try await recd.call(.recordingsList, paramsJSON: Self.sourceParams(try Self.source(of: request))))
        }
        let rtsp = rtsp
        router.get("/api/stream") { request, _ in
            try access.require(.observe, request)
            // recd-rtsp's path for a source of several is its name (doc/rtsp.md).
            let path = try Self.source(of: request).map { "/" + $0 } ?? "/" + rtsp.path
            return try Self.json(StreamAnswer(port: rtsp.port, path: path, codec: rtsp.codec.rawValue, access: rtsp.access.rawValue))
        }
        router.get("/api/devices") { request, _ in
            try access.require(.observe, request)
            return Self.json(line: try await recd.call(.devicesList))
        }
        let schedule = schedule, latitude = latitude, longitude = longitude, sourceSchedules = sourceSchedules
        router.get("/api/day") { request, _ in
            try access.require(.observe, request)
            let schedule = try Self.source(of: request).flatMap { sourceSchedules[$0] } ?? schedule
            let day: CalendarDay
            if let text = request.uri.queryParameters.get("date") {
                guard let parsed = Self.calendarDay(text) else {
                    throw HTTPError(.badRequest, message: "'date' must be a day as YYYY-MM-DD, not \(text)")
                }
                day = parsed
            } else {
                day = CalendarDay(containing: Date())
            }
            return try Self.json(DayAnswer(day: day, schedule: schedule, latitude: latitude, longitude: longitude))
        }
        router.get("/metrics") { request, _ in
            try access.require(.observe, request)
            let text = try await recd.metrics()
            return Response(status: .ok, headers: [.contentType: MetricsResult.contentType],
                            body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        router.post("/api/control/:method") { request, context in
            try access.require(.control, request)
            try access.requireSameOrigin(request)
            let name = context.parameters.get("method") ?? ""
            guard let method = Self.controlMethods[name] else {
                throw HTTPError(.notFound, message: "'\(name)' is not something the page can ask: one of \(Self.controlMethods.keys.sorted().joined(separator: ", "))")
            }
            // Only JSON: a cross-site form cannot send it without the browser asking first.
            let body = try await request.body.collect(upTo: 64 * 1024)
            if body.readableBytes > 0 {
                guard request.headers[.contentType]?.hasPrefix("application/json") == true else {
                    throw HTTPError(.unsupportedMediaType, message: "params must be sent as application/json")
                }
            }
            let params = body.readableBytes > 0 ? Array(buffer: body) : nil
            return Self.json(line: try await recd.call(method, paramsJSON: params))
        }

        let files = FileMiddleware<Context, LocalFileSystem>(recordingsDirectory, urlBasePath: "/recordings", searchForIndexHtml: false)
            .withAdditionalMediaTypes(forFileExtensions: [
                "wav": MediaType(type: .audio, subType: "wav"), "flac": MediaType(type: .audio, subType: "flac"),
                "opus": MediaType(type: .audio, subType: "ogg"), "ogg": MediaType(type: .audio, subType: "ogg"),
                "caf": MediaType(type: .audio, subType: "x-caf"), "m4a": MediaType(type: .audio, subType: "mp4"),
                "mp3": MediaType(type: .audio, subType: "mpeg"),
            ])
        router.get("/recordings/**") { request, context in
            try access.require(.listen, request)
            let path = context.parameters.getCatchAll().joined(separator: "/")
            guard Self.recordingPath(path, in: recordingsDirectory) != nil else {
                throw HTTPError(.notFound, message: "not a recording: \(path)")
            }
            return try await files.handle(request, context: context) { _, _ in
                throw HTTPError(.notFound, message: "no recording at \(path)")
            }
        }

        let spectrograms = spectrograms
        router.get("/api/spectrogram/**") { request, context in
            try access.require(.listen, request)
            let file = try Self.recording(context, in: recordingsDirectory)
            let columns = try Self.number("columns", of: request, in: 1...4000) ?? 600
            return try Self.json(try await spectrograms.spectrogram(of: file, columns: columns))
        }
        // The picture of a recording (Pictures): `range` full, log or a frequency up to which
        // (default 12000), `width` the plot's columns (default 800).
        let pictures = pictures
        router.get("/api/picture/**") { request, context in
            try access.require(.listen, request)
            let file = try Self.recording(context, in: recordingsDirectory)
            let rangeText = request.uri.queryParameters.get("range") ?? "12000"
            guard let range = SpectrogramPicture.Range(String(rangeText)) else {
                throw HTTPError(.badRequest, message: "'range' must be full, log or a frequency from 1000 to 96000 Hz, not \(rangeText)")
            }
            let width = try Self.number("width", of: request, in: 100...2000) ?? 800
            let picture = try await pictures.picture(of: file, range: range, width: width)
            let info = String(decoding: try JSONEncoder().encode(picture.info), as: UTF8.self)
            return Response(status: .ok, headers: [.contentType: "image/png", HTTPField.Name("Recd-Picture")!: info,
                                                   .cacheControl: "private, no-cache"],
                            body: .init(byteBuffer: ByteBuffer(bytes: picture.png)))
        }

        let viewers = viewers
        // A refused upgrade would be a bare 400 (Hummingbird answers every refused upgrade so):
        // access is checked once upgraded instead, and a refusal is a close with code 1008
        // and the reason, which the page shows.
        router.ws("/api/live", onUpgrade: { inbound, outbound, context in
            guard try await Self.admit(.observe, context.request, access: access, viewers: viewers, outbound) else { return }
            defer { viewers.leave() }
            // Meters redrawn ten times a second are as readable as twenty, and recd meters the
            // input only as often as its most demanding subscriber asks: half the work. The
            // spectrum, which the page asks for only while it draws one (recd computes it only
            // while someone subscribes), in a subscription of its own: every column, 0.05 s.
            // The spectrum first: a notification that comes before the next subscription's answer
            // is not passed on (RecdConnection keeps it aside), and a column may go where a state
            // change may not.
            // On a station of several sources the page names the one it shows: its spectrum
            // only, and every source's other topics (each line names its source), for the
            // switcher's state and meter per source.
            let topics = ["state", "currentTime", "error", "levels", "recording", "segment", "warning", "listening", "trigger", "redated"]
            let source = try Self.source(of: context.request)
            var subscriptions: [[UInt8]] = []
            if context.request.uri.queryParameters.get("spectrum") == "1" {
                subscriptions.append(Array(("{\"topics\":[\"spectrum\"],\"interval\":0.05" + (source.map { ",\"source\":\"\($0)\"" } ?? "") + "}").utf8))
            }
            subscriptions.append(Array(("{\"topics\":[" + topics.map { "\"\($0)\"" }.joined(separator: ",") + "],\"interval\":0.1}").utf8))
            let lines = recd.subscription(paramsJSON: subscriptions, batch: 0.1)
            try await Self.relay(until: inbound) {
                for try await line in lines { try await outbound.write(.text(String(decoding: line, as: UTF8.self))) }
            }
        })
        router.ws("/api/audio", shouldUpgrade: { request, _ in
            _ = try Self.number("rate", of: request, in: 8000...192_000, unit: " Hz")
            return .upgrade([:])
        }, onUpgrade: { inbound, outbound, context in
            guard try await Self.admit(.listen, context.request, access: access, viewers: viewers, outbound) else { return }
            defer { viewers.leave() }
            // One channel at the browser's own rate: the browser plays it without resampling.
            let rate = context.request.uri.queryParameters.get("rate").flatMap { Int($0) } ?? 48000
            let chunks = recd.tap(TapParams(rate: rate, channels: 1, encoding: .f32le), source: try Self.source(of: context.request))
            try await Self.relay(until: inbound) {
                var buffer = ByteBufferAllocator().buffer(capacity: 8192)
                for try await chunk in chunks {
                    switch chunk {
                    case .answer(let answer):
                        try await outbound.write(.text(String(decoding: try JSONEncoder().encode(answer), as: UTF8.self)))
                    case .audio(let header, let payload):
                        buffer.clear()
                        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: TapChunkHeader.size) { bytes in
                            header.write(to: bytes.baseAddress!)
                            return TapChunkHeader.size
                        }
                        buffer.writeBytes(payload)
                        try await outbound.write(.binary(buffer))
                    }
                }
            }
        })
    }

    /// The source a request names (`?source=`), checked as recd.toml checks a name (it goes
    /// into the JSON recd reads as it is); nil when it names none.
    static func source(of request: Request) throws -> String? {
        guard let name = request.uri.queryParameters.get("source") else { return nil }
        if let refusal = DaemonConfiguration.sourceNameRefusal(String(name)) { throw HTTPError(.badRequest, message: refusal) }
        return String(name)
    }

    /// `{"source":…}` for a method that takes one; nil without a source.
    static func sourceParams(_ name: String?) -> [UInt8]? { name.map { Array("{\"source\":\"\($0)\"}".utf8) } }

    /// Whether a WebSocket may go on: its role (with the same-origin check: a page on another
    /// site may open a WebSocket here, and the browser would send the cookie if it were not
    /// SameSite), and a free place among web.max_viewers. Refused, it is closed saying why.
    private static func admit(_ role: WebTokens.Role, _ request: Request, access: WebAccess, viewers: ViewerCount,
                              _ outbound: WebSocketOutboundWriter) async throws -> Bool {
        do {
            try access.require(role, request)
            try access.requireSameOrigin(request)
        } catch let error as HTTPError {
            try await outbound.close(.policyViolation, reason: error.body ?? "\(error.status)")
            return false
        }
        guard viewers.enter() else {
            try await outbound.close(.unexpectedServerError, reason: "too many pages open (web.max_viewers)")
            return false
        }
        return true
    }

    /// Runs `send` until it ends or the page closes its side.
    private static func relay(until inbound: WebSocketInboundStream, _ send: @escaping @Sendable () async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask(operation: send)
            group.addTask { for try await _ in inbound {} }
            try await group.next()
            group.cancelAll()
        }
    }

    /// A finished recording's path below the recordings directory: one of recd's formats, no
    /// .part file being written, nothing hidden, no way out of the directory.
    /// The recording a `/…/**` route names, or 404.
    static func recording(_ context: some RequestContext, in directory: String) throws -> String {
        let path = context.parameters.getCatchAll().joined(separator: "/")
        guard let file = recordingPath(path, in: directory) else { throw HTTPError(.notFound, message: "not a recording: \(path)") }
        return file
    }

    /// A whole-number query parameter within `range` (nil when absent), or 400 saying the rule.
    static func number(_ name: String, of request: Request, in range: ClosedRange<Int>, unit: String = "") throws -> Int? {
        guard let text = request.uri.queryParameters.get(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw HTTPError(.badRequest, message: "'\(name)' must be between \(range.lowerBound) and \(range.upperBound)\(unit), not \(text)")
        }
        return value
    }

    static func recordingPath(_ path: String, in directory: String) -> String? {
        let suffix = path.split(separator: ".").last.map(String.init) ?? ""
        let parts = path.split(separator: "/")
        guard ["wav", "flac", "opus", "ogg", "caf", "m4a", "mp3"].contains(suffix), !parts.isEmpty,
              !parts.contains(where: { $0.hasPrefix(".") }) else { return nil }
        return directory + "/" + parts.joined(separator: "/")
    }

    private static func asset(_ bytes: [UInt8], _ type: String) -> Response {
        Response(status: .ok, headers: [.contentType: type, .cacheControl: "no-cache"],
                 body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// recd's response line as it is: `result` is what the page reads.
    private static func json(line: Data) -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: line)))
    }

    private static func json(_ value: some Encodable) throws -> Response {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = .sortedKeys
        return Response(status: .ok, headers: [.contentType: "application/json"],
                        body: .init(byteBuffer: ByteBuffer(bytes: try encoder.encode(value))))
    }

    static func calendarDay(_ text: String) -> CalendarDay? {
        let parts = text.split(separator: "-")
        guard text.count == 10, parts.count == 3, let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]),
              (1970...9999).contains(year), (1...12).contains(month), (1...31).contains(day) else { return nil }
        let result = CalendarDay(year: year, month: month, day: day)
        return result.description == text ? result : nil
    }
}

struct SessionAnswer: Encodable {
    /// What this browser may do now.
    var roles: [String]
    /// What everyone may do.
    var open: [String]
    /// Roles a token would add.
    var tokenRoles: [String]
    /// The station's host name, for the page's title (several stations' tabs side by side).
    var station = SessionAnswer.hostName

    static let hostName: String = {
        var name = [CChar](repeating: 0, count: 256)
        guard gethostname(&name, name.count - 1) == 0 else { return "" }
        return String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }()
}

struct LoginRequest: Decodable { var token: String }

/// Where recd-rtsp serves the input ([rtsp]): the page makes the URL with its own host name.
struct StreamAnswer: Encodable {
    var port: Int
    var path: String
    var codec: String
    /// "token": the URL needs a listen token as its password.
    var access: String
}

/// One day of the station's (local) calendar: its bounds, the sun, and the schedule's windows
/// in it, for the page's timeline.
struct DayAnswer: Encodable {
    var day: String
    var start: Date
    var end: Date
    var dawn: Date?, sunrise: Date?, sunset: Date?, dusk: Date?
    var windows: [ScheduleInterval]

    init(day: CalendarDay, schedule: ScheduledRecording?, latitude: Double?, longitude: Double?) {
        self.day = day.description
        start = CalendarZone.system.start(of: day)
        end = CalendarZone.system.start(of: day.adding(days: 1))
        if let latitude, let longitude {
            let sun = SolarTimes(day: day, latitude: latitude, longitude: longitude)
            dawn = sun.dawn.date
            sunrise = sun.sunrise.date
            sunset = sun.sunset.date
            dusk = sun.dusk.date
        }
        let (start, end) = (start, end)
        windows = schedule?.schedule.occurrences(around: start.addingTimeInterval(43200))
            .filter { $0.end > start && $0.start < end } ?? []
    }
}

/// Recorded files' spectrograms, computed one at a time, each on a thread of its own (decoding
/// a long file takes seconds, which on Dispatch's pool would hold one of its few threads) and kept for the last few files asked for (a file's path, size
/// and modification time name it: a file rewritten is computed afresh).
final class Spectrograms: Sendable {
    /// One computation at a time.
    private let computing = NIOLock()
    private let cache = NIOLockedValueBox<[String: FileSpectrogram]>([:])
    private static let kept = 32

    func spectrogram(of path: String, columns: Int) async throws -> FileSpectrogram {
        var status = stat()
        guard stat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            throw HTTPError(.notFound, message: "no recording at \(path)")
        }
        let key = "\(path)|\(status.st_size)|\(status.st_mtim.tv_sec).\(status.st_mtim.tv_nsec)|\(columns)"
        if let kept = cache.withLockedValue({ $0[key] }) { return kept }
        let result = await render { () throws(RecorderError) in try FileSpectrogram.compute(path: path, columns: columns) }
        switch result {
        case .success(let spectrogram):
            cache.withLockedValue { cache in
                if cache.count >= Self.kept { cache.removeAll() }
                cache[key] = spectrogram
            }
            return spectrogram
        case .failure(let error):
            throw HTTPError(.unprocessableContent, message: error.message)
        }
    }

    /// Runs `body` on a thread of its own, niced, one at a time with every other spectrogram
    /// and picture: a long file's decoding takes no core from recd's capture and disk threads.
    func render<T: Sendable>(_ body: @escaping @Sendable () throws(RecorderError) -> T) async -> Result<T, RecorderError> {
        await withCheckedContinuation { continuation in
            let computing = computing
            DedicatedThread.spawn(name: "recd-web-spectrogram") {
                _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 10)  // 0: this thread (Linux: nice is per thread)
                computing.withLock { continuation.resume(returning: Result { () throws(RecorderError) in try body() }) }
            }
        }
    }
}

/// Pages open at once (web.max_viewers).
final class ViewerCount: Sendable {
    private let count = NIOLockedValueBox(0)
    let limit: Int
    init(limit: Int) { self.limit = limit }
    func enter() -> Bool { count.withLockedValue { if $0 >= limit { return false }; $0 += 1; return true } }
    func leave() { count.withLockedValue { $0 -= 1 } }
}

/// Headers every answer carries: the page runs only its own script and may not be framed
/// (a control clicked through another site's frame).
struct SecurityHeaders<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        response.headers[.contentSecurityPolicy] = "default-src 'self'; connect-src 'self' ws: wss:; media-src 'self' blob:; img-src 'self' data: blob:; frame-ancestors 'none'"
        response.headers[.xContentTypeOptions] = "nosniff"
        response.headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        return response
    }
}
