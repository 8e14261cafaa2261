import NIOCore
import RTSP

/// One playing client: its RTP sequence, counters and sender reports, on its connection's
/// event loop. Packets go out while the connection keeps up (NIO's writability: the bytes
/// queued stay under the write buffer's high mark); what it cannot take is dropped, counted,
/// and shows as a jump in its timestamps, never as a shorter timeline.
final class RTPClient: @unchecked Sendable {
    struct Packet: Sendable {
        var timestamp: UInt32
        var payload: ByteBuffer
        /// When the packet's first frame was captured (seconds since 1970).
        var captureTime: Double
    }

    let channel: any Channel
    let rtpChannel: UInt8
    let ssrc: UInt32
    let cname: String
    /// Sender reports this often.
    static let reportInterval = TimeAmount.seconds(5)

    // On the event loop only.
    private(set) var sequence = UInt16.random(in: 0...UInt16.max)
    private var startTimestamp: UInt32?
    private var packets: UInt32 = 0
    private var octets: UInt32 = 0
    private(set) var dropped = 0
    private var last: Packet?
    private var reports: RepeatedTask?
    /// Runs when the stream ends under the client (recd gone).
    var onEnd: (() -> Void)?

    init(channel: any Channel, rtpChannel: UInt8, ssrc: UInt32, cname: String) {
        self.channel = channel
        self.rtpChannel = rtpChannel
        self.ssrc = ssrc
        self.cname = cname
    }

    /// Plays from the packet with `timestamp` on (RTP-Info's rtptime), on the event loop.
    func play(from timestamp: UInt32) {
        startTimestamp = timestamp
    }

    /// From the tap's thread.
    func deliver(_ batch: [Packet]) {
        channel.eventLoop.execute { [self] in
            guard let start = startTimestamp, channel.isActive else { return }
            var wrote = false
            // Until the first packet went out, those from before RTP-Info's rtptime are skipped
            // (a batch in flight as PLAY was answered); after it, every packet is the client's.
            for packet in batch where last != nil || Int32(bitPattern: packet.timestamp &- start) >= 0 {
                guard channel.isWritable else {
                    dropped += 1
                    continue
                }
                var buffer = channel.allocator.buffer(capacity: 16 + packet.payload.readableBytes)
                RTP.writePacket(channel: rtpChannel, sequence: sequence, timestamp: packet.timestamp, ssrc: ssrc,
                                payload: packet.payload.readableBytesView, into: &buffer)
                sequence &+= 1
                packets &+= 1
                octets &+= UInt32(packet.payload.readableBytes)
                channel.write(buffer, promise: nil)
                let first = last == nil
                last = packet
                wrote = true
                // The first sender report right after the first packet: a client maps RTP time
                // to the capture time from the start.
                if first {
                    sendReport()
                    reports = channel.eventLoop.scheduleRepeatedTask(initialDelay: Self.reportInterval, delay: Self.reportInterval) { [weak self] _ in
                        self?.sendReport()
                        self?.channel.flush()
                    }
                }
            }
            if wrote { channel.flush() }
        }
    }

    /// An RTCP sender report: the last packet's RTP time and the time its first frame was captured.
    private func sendReport() {
        // A chunk whose capture time the tap does not know (NaN) gives no report.
        guard let last, last.captureTime.isFinite, channel.isActive else { return }
        var buffer = channel.allocator.buffer(capacity: 80)
        RTP.writeSenderReport(channel: rtpChannel + 1, ssrc: ssrc, ntp: NTPTime(unixTime: last.captureTime),
                              rtpTimestamp: last.timestamp, packets: packets, octets: octets, cname: cname, into: &buffer)
        channel.write(buffer, promise: nil)
    }

    /// Stops sending (TEARDOWN, the connection's end).
    func stop() {
        channel.eventLoop.execute { [self] in
            reports?.cancel()
            reports = nil
            startTimestamp = nil
        }
    }

    /// The stream ended under the client: its connection closes.
    func end() {
        channel.eventLoop.execute { [self] in
            reports?.cancel()
            reports = nil
            onEnd?()
        }
    }
}
