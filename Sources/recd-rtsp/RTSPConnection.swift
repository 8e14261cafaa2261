import Dispatch
import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RTSP
import RecdClient
import RecdConfiguration
import RecdProtocol
import RecorderModel

/// A stream: a source of the station in a codec.
struct StreamKey: Hashable, Sendable {
    var source: String
    var codec: RTSPSettings.Codec
}

/// What every connection shares: the settings, the streams, who may play, how many do.
final class RTSPService: @unchecked Sendable {
    let settings: RTSPSettings
    /// The station's sources by name (recd.toml's `[[source]]`, or `default`): each has its
    /// path, `/NAME`; `[rtsp] path` (`/live`) is the only source's.
    let sources: [String]
    let socketPath: String
    /// The listen tokens (empty: open access).
    let tokens: [String]
    let logger: Logger
    /// One stream per source and codec, made when first asked for (one encoding for all its clients).
    private let streams = NIOLockedValueBox<[StreamKey: LiveStream]>([:])
    let playing = NIOLockedValueBox(0)
    /// Answers the blocking calls to recd (status) off the event loops.
    private let recdQueue = DispatchQueue(label: "recd-rtsp.recd")

    init(settings: RTSPSettings, sources: [String], socketPath: String, tokens: [String], logger: Logger) {
        self.settings = settings
        self.sources = sources
        self.socketPath = socketPath
        self.tokens = tokens
        self.logger = logger
    }

    /// The stream of `key`, its format decided the first time: the settings', else the
    /// source's device's as recd says now, else recd's recording defaults (Opus: always
    /// 48 kHz, at most two channels). The tap converts to it.
    func liveStream(_ key: StreamKey, on loop: any EventLoop) -> EventLoopFuture<LiveStream> {
        if let stream = streams.withLockedValue({ $0[key] }) { return loop.makeSucceededFuture(stream) }
        let promise = loop.makePromise(of: LiveStream.self)
        recdQueue.async { [self] in
            if let stream = streams.withLockedValue({ $0[key] }) { return promise.succeed(stream) }
            let codec = key.codec
            do {
                let connection = try RecdConnection(path: socketPath)
                connection.source = key.source
                let status: StatusResult = try connection.call(.status)
                let device = status.recording?.deviceFormat ?? status.listening?.deviceFormat
                var format = LiveStream.Format(codec: codec, rate: settings.sampleRate ?? device?.sampleRate ?? status.settings.sampleRate ?? 48000,
                                               channels: settings.channels ?? device?.channels ?? status.settings.channels ?? 2,
                                               bitRate: settings.opusBitRate)
                if codec == .opus {
                    format.rate = 48000
                    format.channels = min(format.channels, 2)
                }
                let made = streams.withLockedValue { streams in
                    if streams[key] == nil {
                        // Named as a client asks for it: the implicit source by its path (/live).
                        let named = key.source == DaemonConfiguration.defaultSourceName && sources.count == 1 ? path : "/" + key.source
                        streams[key] = LiveStream(format: format, source: key.source, label: "recd-rtsp \(named) \(codec.rawValue)",
                                                  socketPath: socketPath, linger: settings.linger, logger: logger)
                    }
                    return streams[key]!
                }
                promise.succeed(made)
            } catch {
                promise.fail(error)
            }
        }
        return promise.futureResult
    }

    /// The stream a path names: `/SOURCE` (and `[rtsp] path`, `/live`, for the only source)
    /// in the configured codec, `/SOURCE/l16` and `/SOURCE/opus` each; nil: none.
    func stream(ofPath path: String) -> StreamKey? {
        for (prefix, source) in [(self.path, sources.count == 1 ? sources[0] : nil)] + sources.map({ ("/" + $0, Optional($0)) }) {
            guard let source else { continue }
            if path == prefix { return StreamKey(source: source, codec: settings.codec) }
            if path.hasPrefix(prefix + "/"), let codec = RTSPSettings.Codec(rawValue: String(path.dropFirst(prefix.count + 1))) {
                return StreamKey(source: source, codec: codec)
            }
        }
        return nil
    }

    /// What a request without a stream of its own (`OPTIONS *`) is about.
    var defaultStream: StreamKey { StreamKey(source: sources[0], codec: settings.codec) }

    var path: String { "/" + settings.path }
}

/// One RTSP connection (RFC 2326 over TCP): OPTIONS, DESCRIBE, SETUP (interleaved TCP only:
/// UDP is answered 461, after which ffmpeg, libVLC and ExoPlayer retry over TCP), PLAY,
/// GET_PARAMETER (the keepalive), TEARDOWN. One session, one audio track.
final class RTSPConnection: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = RTSPInbound
    typealias OutboundOut = ByteBuffer

    let service: RTSPService
    private let sessionID = String(UInt64.random(in: 1...UInt64.max), radix: 16)
    private var interleaved: UInt8?
    /// The stream the session set up (from the URL's path).
    private lazy var selected = service.defaultStream
    private var client: RTPClient?
    private var counted = false
    private var idle: Scheduled<Void>?
    private var context: ChannelHandlerContext?

    /// Digest with a nonce of this connection's own; nil: open access.
    private let authentication: DigestAuthentication?
    /// A PLAY under way (its stream or tap not there yet): no second one meanwhile.
    private var playPending = false

    init(service: RTSPService) {
        self.service = service
        authentication = service.tokens.isEmpty ? nil : DigestAuthentication(tokens: service.tokens)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    // The context holds this handler: let go of it, or both stay.
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    /// A connection that never says anything is closed after the session timeout too.
    func channelActive(context: ChannelHandlerContext) {
        service.logger.debug("connection", metadata: ["peer": "\(context.channel.remoteAddress?.description ?? "?")"])
        resetIdle(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        service.logger.debug("connection closed", metadata: ["session": "\(sessionID)"])
        stopPlaying()
        idle?.cancel()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A client that goes away mid-read is ordinary; anything else is worth a line.
        let ordinary = (error as? IOError).map { [ECONNRESET, EPIPE].contains($0.errnoCode) } ?? false
        if ordinary {
            service.logger.debug("connection closed", metadata: ["error": "\(error)"])
        } else {
            service.logger.warning("connection closed on an error", metadata: ["error": "\(error)"])
        }
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .interleaved:
            // The client's RTCP receiver reports: it is alive.
            resetIdle(context)
        case .request(let request):
            service.logger.debug("request", metadata: ["method": "\(request.method)", "uri": "\(request.uri)"])
            resetIdle(context)
            handle(request, context: context)
        }
    }

    /// A session that hears nothing (no request, no receiver report) for the session timeout ends.
    private func resetIdle(_ context: ChannelHandlerContext) {
        idle?.cancel()
        let timeout = Int64(service.settings.sessionTimeout)
        idle = context.eventLoop.scheduleTask(in: .seconds(timeout)) { [weak self] in
            guard let self, let context = self.context else { return }
            self.service.logger.info("session timed out", metadata: ["session": "\(self.sessionID)"])
            context.close(promise: nil)
        }
    }

    private func handle(_ request: RTSPRequest, context: ChannelHandlerContext) {
        var respond = Responder(context: NIOLoopBound(context, eventLoop: context.eventLoop),
                                headers: [("CSeq", request.header("CSeq") ?? "0"), ("Server", "recd-rtsp")])
        guard request.version == "RTSP/1.0" else { return respond(505) }
        if request.method != "OPTIONS", let authentication, !authentication.accepts(request.header("Authorization"), method: request.method) {
            return respond(401, [("WWW-Authenticate", authentication.challenge)])
        }
        let (path, track) = request.path
        var pathStream: StreamKey?
        if request.method != "OPTIONS" || request.uri != "*" {
            pathStream = service.stream(ofPath: path)
            guard pathStream != nil || (request.method == "OPTIONS" && path.isEmpty) else { return respond(404) }
        }
        if interleaved != nil, request.method != "SETUP" {
            respond.headers.append(("Session", "\(sessionID);timeout=\(service.settings.sessionTimeout)"))
        }
        switch request.method {
        case "OPTIONS":
            respond(200, [("Public", "OPTIONS, DESCRIBE, SETUP, PLAY, GET_PARAMETER, TEARDOWN")])
        case "GET_PARAMETER":
            respond(200)
        case "DESCRIBE":
            let base = request.uri.hasSuffix("/") ? request.uri : request.uri + "/"
            let local = context.channel.localAddress
            service.liveStream(pathStream ?? service.defaultStream, on: context.eventLoop).whenComplete { [self, respond] result in
                switch result {
                case .success(let stream):
                    respond(200, [("Content-Type", "application/sdp"), ("Content-Base", base)],
                            body: Array(Self.sdp(stream, address: local).utf8))
                case .failure(let error):
                    service.logger.warning("DESCRIBE: recd does not answer", metadata: ["error": "\(error)"])
                    respond(503)
                }
            }
        case "SETUP":
            guard track == nil || track == "trackID=0" else { return respond(404) }
            let transport = request.header("Transport") ?? ""
            guard transport.contains("RTP/AVP/TCP") else {
                service.logger.info("SETUP over UDP answered 461: RTP goes over the RTSP connection (TCP) only", metadata: ["transport": "\(transport)"])
                return respond(461, [("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")])
            }
            var channel: UInt8 = 0
            if let range = transport.firstRange(of: "interleaved=") {
                let digits = transport[range.upperBound...].prefix { $0.isNumber }
                guard let first = UInt8(digits), first < 254, first % 2 == 0 else { return respond(461) }
                channel = first
            }
            let wanted = pathStream ?? service.defaultStream
            if client != nil || playPending { return respond(455) }
            respond.headers.append(("Session", "\(sessionID);timeout=\(service.settings.sessionTimeout)"))
            // The session exists once the stream does: a SETUP answered 503 leaves none.
            service.liveStream(wanted, on: context.eventLoop).whenComplete { [self, respond, channel] result in
                guard case .success(let stream) = result else { return respond(503) }
                interleaved = channel
                selected = wanted
                respond(200, [("Transport", "RTP/AVP/TCP;unicast;interleaved=\(channel)-\(channel + 1);ssrc=\(hex8(stream.ssrc))")])
            }
        case "PLAY":
            guard let channel = interleaved else { return respond(455) }
            guard request.header("Session")?.split(separator: ";").first.map(String.init) == sessionID else { return respond(454) }
            if client != nil || playPending { return respond(200, [("Range", "npt=now-")]) }
            let allowed = service.playing.withLockedValue { playing -> Bool in
                guard playing < service.settings.maxClients else { return false }
                playing += 1
                return true
            }
            guard allowed else {
                service.logger.warning("a client over the limit refused", metadata: ["max_clients": "\(service.settings.maxClients)"])
                return respond(453)
            }
            counted = true
            playPending = true
            let uri = request.uri
            let connection = context.channel
            service.liveStream(selected, on: context.eventLoop).flatMap { [self] stream -> EventLoopFuture<(LiveStream, RTPClient, UInt32)> in
                guard connection.isActive, playPending else {
                    return connection.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
                }
                let client = RTPClient(channel: connection, rtpChannel: channel, ssrc: stream.ssrc, cname: "recd-rtsp")
                client.onEnd = { [weak self] in self?.context?.close(promise: nil) }
                self.client = client
                return stream.join(client).map { (stream, client, $0) }
            }.whenComplete { [self, respond] result in
                switch result {
                case .success(let (_, client, timestamp)):
                    playPending = false
                    // Logged before the answer: a client that plays finds it in the journal.
                    service.logger.info("playing", metadata: ["session": "\(sessionID)", "peer": "\(connection.remoteAddress?.description ?? "?")"])
                    let track = uri.hasSuffix("/") ? uri + "trackID=0" : uri + "/trackID=0"
                    respond(200, [("Range", "npt=now-"), ("RTP-Info", "url=\(track);seq=\(client.sequence);rtptime=\(timestamp)")])
                    client.play(from: timestamp)
                case .failure(let error):
                    playPending = false
                    guard connection.isActive else { return }
                    service.logger.warning("PLAY: no tap from recd", metadata: ["error": "\(error)"])
                    stopPlaying()
                    respond(503)
                }
            }
        case "TEARDOWN":
            stopPlaying()
            interleaved = nil
            respond(200)
        case "ANNOUNCE", "RECORD", "PAUSE", "SET_PARAMETER", "REDIRECT":
            respond(405, [("Allow", "OPTIONS, DESCRIBE, SETUP, PLAY, GET_PARAMETER, TEARDOWN")])
        default:
            respond(501)
        }
    }

    private func stopPlaying() {
        playPending = false
        if let client {
            client.stop()
            service.liveStream(selected, on: client.channel.eventLoop).whenSuccess { $0.leave(client) }
            self.client = nil
        }
        if counted {
            counted = false
            service.playing.withLockedValue { $0 -= 1 }
        }
    }

    /// Writes a response with the request's CSeq (and the session's header once there is one).
    struct Responder: @unchecked Sendable {
        let context: NIOLoopBound<ChannelHandlerContext>
        var headers: [(name: String, value: String)]

        func callAsFunction(_ status: Int, _ extra: [(name: String, value: String)] = [], body: [UInt8] = []) {
            let context = context.value
            var buffer = context.channel.allocator.buffer(capacity: 256 + body.count)
            RTSPResponse(status: status, headers: headers + extra, body: body).write(into: &buffer)
            context.writeAndFlush(NIOAny(buffer), promise: nil)
        }
    }

    /// An audio-only SDP, one track: L16 at the stream's rate and channels (RFC 3551), or Opus
    /// (RFC 7587: always opus/48000/2, the channels sent in sprop-stereo).
    static func sdp(_ stream: LiveStream, address: SocketAddress?) -> String {
        let ip = address?.ipAddress ?? "0.0.0.0"
        let family = ip.contains(":") ? "IP6" : "IP4"
        return """
        v=0\r
        o=- \(stream.ssrc) 1 IN \(family) \(ip)\r
        s=recd\r
        c=IN \(family) \(ip)\r
        t=0 0\r
        a=tool:recd-rtsp\r
        a=control:*\r
        m=audio 0 RTP/AVP \(RTP.payloadType)\r
        a=rtpmap:\(RTP.payloadType) \(stream.format.rtpmap)\r
        \(stream.format.fmtp.map { "a=fmtp:\(RTP.payloadType) \($0)\r\n" } ?? "")a=control:trackID=0\r
        a=recvonly\r

        """
    }
}

/// Eight hex digits.
func hex8(_ value: UInt32) -> String {
    let text = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, 8 - text.count)) + text
}
