import CLinux
import Dispatch
import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore
import MPEG4
import RTSP
import RecdClient
import RecdConfiguration
import RecdProtocol
import RecorderModel

/// The station's input as RTP for every client playing it: one tap on recd's socket, opened
/// when the first client plays and closed `linger` seconds after the last leaves (an unwatched
/// station holds no tap and packetizes nothing), read by a thread of its own. Each chunk is
/// cut into packets once; each client's connection takes them on its event loop, or drops
/// them (counted) when it is not keeping up: a slow client costs only itself.
///
/// RTP timestamps are the tap's frame positions (plus a random base): a gap in capture is a
/// jump in the timestamps, never compressed, and so is what a slow client dropped.
final class LiveStream: @unchecked Sendable {
    struct Format: Equatable, Sendable {
        var codec: RTSPSettings.Codec
        var rate: Int
        var channels: Int
        /// Opus's bit rate.
        var bitRate: Int = 64000
        var bytesPerFrame: Int { 2 * channels }

        /// The SDP's rtpmap (RFC 3551's L16; RFC 7587's Opus, always 48000/2) and fmtp.
        var rtpmap: String { codec == .opus ? "opus/48000/2" : "L16/\(rate)/\(channels)" }
        var fmtp: String? { codec == .opus ? "sprop-stereo=\(channels == 2 ? 1 : 0); stereo=\(channels == 2 ? 1 : 0)" : nil }
    }

    let format: Format
    /// The station's source it plays (the tap's `source`).
    let source: String
    /// What the tap says it is, for `recctl status`: "recd-rtsp /default l16".
    let label: String
    let socketPath: String
    let linger: Double
    let logger: Logger
    let ssrc = UInt32.random(in: 1...UInt32.max)
    let timestampBase = UInt32.random(in: 0...UInt32.max)
    /// At most 1400 bytes of audio and 10 ms a packet: 480 frames of 48 kHz mono, 350 of stereo.
    let framesPerPacket: Int
    /// The tap's chunks carry 40 ms at least (`TapParams.chunk`): every 40 ms, not every device
    /// period, recd writes, this process wakes and each client's event loop sends a batch of
    /// packets. An analyser listens in seconds; 40 ms more on the way costs it nothing.
    static let tapChunkSeconds = 0.04

    private struct State {
        var clients: [ObjectIdentifier: RTPClient] = [:]
        var reader: TapReader?
        /// A tap is being opened (its `tap` call may take a while): no second one.
        var opening = false
        /// The next packet's RTP timestamp (the last one's plus its frames), once packets flow.
        var nextTimestamp: UInt32?
        /// Clients whose PLAY waits for the tap's first chunk.
        var waiting: [(RTPClient, EventLoopPromise<UInt32>)] = []
        /// Bumped at every open and close, so that a linger's close of an old tap is ignored.
        var generation = 0
    }
    private let state = NIOLockedValueBox(State())
    /// Where recd is told how many play (`reportListeners`), and what it was last told: the
    /// tap's id and the count (on `reports` only).
    private let reports = DispatchQueue(label: "recd-rtsp.listeners")
    private var reported: (tap: Int, listeners: Int)?

    init(format: Format, source: String, label: String, socketPath: String, linger: Double, logger: Logger) {
        self.format = format
        self.source = source
        self.label = label
        self.socketPath = socketPath
        self.linger = linger
        self.logger = logger
        framesPerPacket = max(1, min(1400 / format.bytesPerFrame, format.rate / 100))
    }

    var clientCount: Int { state.withLockedValue { $0.clients.count } }
    var isTapOpen: Bool { state.withLockedValue { $0.reader != nil } }

    /// `client` plays from the next packet: its RTP timestamp (for RTP-Info), once the tap runs.
    func join(_ client: RTPClient) -> EventLoopFuture<UInt32> {
        let promise = client.channel.eventLoop.makePromise(of: UInt32.self)
        let open = state.withLockedValue { state -> Bool in
            state.clients[ObjectIdentifier(client)] = client
            if let timestamp = state.nextTimestamp {
                promise.succeed(timestamp)
            } else {
                state.waiting.append((client, promise))
            }
            guard state.reader == nil, !state.opening else { return false }
            state.opening = true
            state.generation += 1
            return true
        }
        if open { openTap() }
        reportListeners()
        return promise.futureResult
    }

    func leave(_ client: RTPClient) {
        let (generation, abandoned) = state.withLockedValue { state -> (Int?, [EventLoopPromise<UInt32>]) in
            guard state.clients.removeValue(forKey: ObjectIdentifier(client)) != nil else { return (nil, []) }
            let abandoned = state.waiting.filter { $0.0 === client }.map(\.1)
            state.waiting.removeAll { $0.0 === client }
            return (state.clients.isEmpty ? state.generation : nil, abandoned)
        }
        // Outside the lock: a promise's callbacks may run here, and come back.
        for promise in abandoned { promise.fail(TapEnded()) }
        reportListeners()
        guard let generation else { return }
        client.channel.eventLoop.scheduleTask(in: .milliseconds(Int64(linger * 1000))) { [self] in
            closeTap(ifStill: generation)
        }
    }

    private func openTap() {
        let format = format
        let thread = PThread(name: "recd-rtsp-tap") { [self] in
            let reader: TapReader
            do {
                reader = try TapReader(path: socketPath, params: TapParams(rate: format.rate, channels: format.channels, encoding: .s16le,
                                                                           client: label, chunk: Self.tapChunkSeconds),
                                     source: source)
            } catch {
                logger.error("cannot open a tap on recd", metadata: ["error": "\(error)", "socket": "\(socketPath)"])
                state.withLockedValue { $0.opening = false }
                fail(error)
                return
            }
            let keep = state.withLockedValue { state -> Bool in
                state.opening = false
                guard !state.clients.isEmpty, state.reader == nil else { return false }
                state.reader = reader
                return true
            }
            guard keep else {
                reader.connection.shutdownWriting()
                return
            }
            logger.info("tap opened", metadata: ["tap": "\(reader.result.tap)", "rate": "\(format.rate)", "channels": "\(format.channels)"])
            reportListeners()
            read(reader)
        }
        thread.start()
    }

    /// Tells recd how many play this stream (`tap.update`: `recctl status` and the metrics
    /// show it), once it changed: the latest count, on a connection of its own (the tap's
    /// carries only audio; recd takes it from the process that opened the tap). Best effort: a
    /// recd that went away took the tap with it.
    private func reportListeners() {
        reports.async { [self] in
            let now = state.withLockedValue { state in state.reader.map { (tap: $0.result.tap, listeners: state.clients.count) } }
            guard let now, reported.map({ $0 != now }) ?? true else { return }
            do {
                let _: TapStatus = try RecdConnection(path: socketPath).call(.tapUpdate, TapUpdateParams(tap: now.tap, listeners: now.listeners),
                                                                             timeout: 5)
                reported = now
            } catch {
                logger.debug("cannot tell recd how many play", metadata: ["error": "\(error)"])
            }
        }
    }

    private func fail(_ error: any Error) {
        let waiting = state.withLockedValue { state -> [(RTPClient, EventLoopPromise<UInt32>)] in
            defer { state.waiting = [] }
            for (client, _) in state.waiting { state.clients[ObjectIdentifier(client)] = nil }
            return state.waiting
        }
        for (_, promise) in waiting { promise.fail(error) }
    }

    struct TapEnded: Error, CustomStringConvertible {
        var description: String { "the tap ended (recd stopped, or the device is gone for good)" }
    }

    /// Ends the tap if nobody has played since `generation` began.
    private func closeTap(ifStill generation: Int) {
        let reader = state.withLockedValue { state -> TapReader? in
            guard state.clients.isEmpty, state.generation == generation, let reader = state.reader else { return nil }
            state.reader = nil
            state.nextTimestamp = nil
            state.generation += 1
            return reader
        }
        guard let reader else { return }
        logger.info("tap closed: nobody plays")
        // recd ends the tap when the connection's writing side closes; the thread's read then ends.
        reader.connection.shutdownWriting()
    }

    /// The tap thread: every chunk cut into packets (or encoded, once for every client), handed
    /// to every client.
    private func read(_ reader: TapReader) {
        let bytesPerPacket = framesPerPacket * format.bytesPerFrame
        let allocator = ByteBufferAllocator()
        var opus: OpusPacketEncoder?
        if format.codec == .opus {
            do {
                opus = try OpusPacketEncoder(channels: format.channels, bitRate: format.bitRate)
            } catch {
                logger.error("cannot encode Opus", metadata: ["error": "\(error)"])
                reader.connection.shutdownWriting()
                fail(error)
                return
            }
        }
        while true {
            let chunk: (header: TapChunkHeader, payload: [UInt8])?
            do { chunk = try reader.next() } catch {
                logger.warning("the tap ended", metadata: ["error": "\(error)"])
                break
            }
            guard let (header, payload) = chunk else { break }
            let frames = Int(header.frames)
            guard frames > 0 else { continue }
            var packets: [RTPClient.Packet] = []
            if let opus {
                do {
                    let encoded = try payload.withUnsafeBytes { bytes in
                        try opus.encode(bytes.bindMemory(to: Int16.self), position: header.position)
                    }
                    for packet in encoded {
                        var buffer = allocator.buffer(capacity: packet.bytes.count)
                        buffer.writeBytes(packet.bytes)
                        let offset = Double(Int64(bitPattern: packet.position &- header.position)) / Double(format.rate)
                        packets.append(RTPClient.Packet(timestamp: timestampBase &+ UInt32(truncatingIfNeeded: packet.position), payload: buffer,
                                                        captureTime: header.captureTime + offset))
                    }
                } catch {
                    logger.error("the Opus encoder failed", metadata: ["error": "\(error)"])
                    break
                }
            }
            var offset = opus == nil ? 0 : frames
            while offset < frames {
                let count = min(framesPerPacket, frames - offset)
                var buffer = allocator.buffer(capacity: bytesPerPacket)
                // L16 is big-endian (RFC 3551); the tap's s16le. One pass over the bytes.
                let byteCount = count * format.bytesPerFrame
                let start = offset * format.bytesPerFrame
                buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: byteCount) { out in
                    payload.withUnsafeBytes { input in
                        for index in stride(from: 0, to: byteCount, by: 2) {
                            let sample = input.loadUnaligned(fromByteOffset: start + index, as: UInt16.self)
                            out.storeBytes(of: UInt16(littleEndian: sample).bigEndian, toByteOffset: index, as: UInt16.self)
                        }
                    }
                    return byteCount
                }
                let position = header.position + UInt64(offset)
                packets.append(RTPClient.Packet(
                    timestamp: timestampBase &+ UInt32(truncatingIfNeeded: position), payload: buffer,
                    captureTime: header.captureTime + Double(offset) / Double(format.rate)))
                offset += count
            }
            guard let first = packets.first, let last = packets.last else { continue }
            let lastFrames = opus?.frameSize ?? (last.payload.readableBytes / format.bytesPerFrame)
            let (open, clients, waiting) = state.withLockedValue { state -> (Bool, [RTPClient], [(RTPClient, EventLoopPromise<UInt32>)]) in
                guard state.reader === reader else { return (false, [], []) }
                state.nextTimestamp = last.timestamp &+ UInt32(lastFrames)
                defer { state.waiting = [] }
                return (true, Array(state.clients.values), state.waiting)
            }
            guard open else { break }
            // Those who waited play from this batch's first packet: told before the batch goes
            // out (on their event loop, the answer's write comes first).
            for (_, promise) in waiting { promise.succeed(first.timestamp) }
            for client in clients { client.deliver(packets) }
        }
        // recd stopped, or the device is gone for good: the clients' sessions end, and a PLAY
        // waiting for this tap is answered with the failure. In one step, so that a client
        // joining now starts a new tap rather than being ended by this one.
        let (clients, waiting) = state.withLockedValue { state -> ([RTPClient], [(RTPClient, EventLoopPromise<UInt32>)]) in
            guard state.reader === reader else { return ([], []) }
            state.reader = nil
            state.nextTimestamp = nil
            state.generation += 1
            defer { state.clients = [:]; state.waiting = [] }
            return (Array(state.clients.values), state.waiting)
        }
        for (_, promise) in waiting { promise.fail(TapEnded()) }
        for client in clients { client.end() }
    }
}

/// A thread of recd-rtsp's own (the tap's read blocks).
final class PThread: @unchecked Sendable {
    private let body: () -> Void
    private let name: String

    init(name: String, _ body: @escaping () -> Void) {
        self.name = name
        self.body = body
    }

    func start() {
        let box = Unmanaged.passRetained(self)
        var thread = pthread_t()
        pthread_create(&thread, nil, { argument in
            let this = Unmanaged<PThread>.fromOpaque(argument!).takeRetainedValue()
            _ = recd_name_current_thread(this.name)
            this.body()
            return nil
        }, box.toOpaque())
        pthread_detach(thread)
    }
}
