/// `[rtsp]`: recd-rtsp, the live input served as RTSP (doc/rtsp.md). recd itself reads and
/// checks these keys but uses none of them: it stays off the network.
public struct RTSPSettings: Equatable, Sendable {
    /// Who may play: anyone who reaches the port (a trusted LAN), or holders of a token with the
    /// `listen` role in the web's tokens file (web.tokens_file), by RTSP's Digest authentication.
    public enum Access: String, Equatable, Sendable, CaseIterable { case open, token }
    /// L16: 16-bit PCM as captured (1.5 Mbit/s for 48 kHz stereo). Opus: RFC 7587 (48 kHz).
    public enum Codec: String, Equatable, Sendable, CaseIterable { case l16, opus }

    public var address = "0.0.0.0"
    public var port = 8554
    /// rtsp://HOST:PORT/PATH: the station's input.
    public var path = "live"
    public var access = Access.token
    /// What rtsp://HOST:PORT/PATH serves; PATH/l16 and PATH/opus serve each.
    public var codec = Codec.l16
    /// Opus's bit rate, bits per second.
    public var opusBitRate = 64000
    /// Clients playing at once; one more is answered 453.
    public var maxClients = 8
    /// Seconds a session lives without a request (RTSP's keepalive: GET_PARAMETER, OPTIONS).
    public var sessionTimeout = 60
    /// The stream's rate and channels; nil: the device's.
    public var sampleRate: Int?
    public var channels: Int?
    /// Seconds the tap stays open after the last client leaves (a client that reconnects at once
    /// finds it running).
    public var linger = 5.0

    public init() {}
}

extension DaemonConfiguration {
    mutating func applyRTSP(_ reader: KeyReader) throws(ConfigurationError) {
        try reader.read("rtsp.address") { (value: String) throws(ConfigurationError) in
            guard !value.isEmpty, !value.contains(" ") else { throw reader.invalid("rtsp.address", "must be an address such as \"0.0.0.0\", \"::\" or \"127.0.0.1\"") }
            rtsp.address = value
        }
        try reader.read("rtsp.port", in: 1...65535) { (value: Int) in rtsp.port = value }
        try reader.read("rtsp.path") { (value: String) throws(ConfigurationError) in
            let allowed = value.utf8.allSatisfy { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") }
            guard !value.isEmpty, value.utf8.count <= 64, allowed else {
                throw reader.invalid("rtsp.path", "must be 1 to 64 letters, digits, '-', '_' or '.' (the URL's path: rtsp://HOST:8554/live)")
            }
            rtsp.path = value
        }
        try reader.read("rtsp.access") { (value: RTSPSettings.Access) in rtsp.access = value }
        try reader.read("rtsp.codec") { (value: RTSPSettings.Codec) in rtsp.codec = value }
        try reader.read("rtsp.opus_bitrate", in: 6000...510000, "bits per second") { (value: Int) in rtsp.opusBitRate = value }
        try reader.read("rtsp.max_clients", in: 1...64) { (value: Int) in rtsp.maxClients = value }
        try reader.read("rtsp.session_timeout", in: 5...3600, "seconds") { (value: Int) in rtsp.sessionTimeout = value }
        try reader.read("rtsp.sample_rate", in: 8000...192000, "Hz") { (value: Int) in rtsp.sampleRate = value }
        try reader.read("rtsp.channels", in: 1...8) { (value: Int) in rtsp.channels = value }
    }
}
