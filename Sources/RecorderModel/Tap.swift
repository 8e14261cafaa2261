import FoundationEssentials

/// How a tap's samples are encoded on the wire: interleaved, little-endian.
public enum TapEncoding: String, Sendable, Codable, CaseIterable {
    /// 16-bit signed integers.
    case s16le
    /// 32-bit IEEE floats, full scale ±1.
    case f32le

    public var bytesPerSample: Int { self == .s16le ? 2 : 4 }
}

/// The audio a tap delivers.
public struct TapFormat: Sendable, Equatable, Hashable, Codable {
    public var sampleRate: Int
    public var channels: Int
    public var encoding: TapEncoding

    public init(sampleRate: Int, channels: Int, encoding: TapEncoding) {
        self.sampleRate = sampleRate
        self.channels = channels
        self.encoding = encoding
    }

    public var bytesPerFrame: Int { channels * encoding.bytesPerSample }
}

/// The fixed header before each chunk of a tap stream: 40 bytes, little-endian.
///
///     offset size  field
///      0     4     magic "RCDT"
///      4     4     header size (40): skip what a later revision adds
///      8     8     position: the chunk's first frame, counted from the tap's first frame
///                  (frames lost before the chunk are counted: position jumps over them)
///     16     8     capture time of the first frame, seconds since 1970 (float64; NaN: unknown)
///     24     4     frames in the chunk
///     28     4     frames lost just before the chunk (dropped or not captured)
///     32     4     flags: 1 pre-roll (captured before the tap began), 2 gap (the device was
///                  lost or overran: time does not follow on from the chunk before)
///     36     4     payload bytes that follow (frames × channels × bytes per sample)
///
/// Python: `struct.unpack("<4sIQdIIII", header)`.
public struct TapChunkHeader: Sendable, Equatable {
    public static let size = 40
    public static let magic: [UInt8] = Array("RCDT".utf8)
    public static let preRollFlag: UInt32 = 1
    public static let gapFlag: UInt32 = 2

    public var position: UInt64
    public var captureTime: Double
    public var frames: UInt32
    public var lostFrames: UInt32
    public var flags: UInt32
    public var payloadBytes: UInt32

    public init(position: UInt64, captureTime: Double, frames: UInt32, lostFrames: UInt32, flags: UInt32, payloadBytes: UInt32) {
        self.position = position
        self.captureTime = captureTime
        self.frames = frames
        self.lostFrames = lostFrames
        self.flags = flags
        self.payloadBytes = payloadBytes
    }

    /// Writes the 40 bytes at `destination`.
    public func write(to destination: UnsafeMutableRawPointer) {
        destination.copyMemory(from: Self.magic, byteCount: 4)
        destination.storeBytes(of: UInt32(Self.size).littleEndian, toByteOffset: 4, as: UInt32.self)
        destination.storeBytes(of: position.littleEndian, toByteOffset: 8, as: UInt64.self)
        destination.storeBytes(of: captureTime.bitPattern.littleEndian, toByteOffset: 16, as: UInt64.self)
        destination.storeBytes(of: frames.littleEndian, toByteOffset: 24, as: UInt32.self)
        destination.storeBytes(of: lostFrames.littleEndian, toByteOffset: 28, as: UInt32.self)
        destination.storeBytes(of: flags.littleEndian, toByteOffset: 32, as: UInt32.self)
        destination.storeBytes(of: payloadBytes.littleEndian, toByteOffset: 36, as: UInt32.self)
    }

    /// Reads a header (nil if `bytes` does not begin with one).
    public init?(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count >= Self.size, Array(bytes.prefix(4)) == Self.magic else { return nil }
        func load<T: FixedWidthInteger>(_ offset: Int, _: T.Type) -> T { T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self)) }
        guard load(4, UInt32.self) >= UInt32(Self.size) else { return nil }
        position = load(8, UInt64.self)
        captureTime = Double(bitPattern: load(16, UInt64.self))
        frames = load(24, UInt32.self)
        lostFrames = load(28, UInt32.self)
        flags = load(32, UInt32.self)
        payloadBytes = load(36, UInt32.self)
    }
}

/// One tap as `status` lists it.
public struct TapStatus: Sendable, Equatable, Codable {
    public var id: Int
    public var format: TapFormat
    /// The client's process (from the socket's credentials), when known.
    public var pid: Int32?
    /// What the client says it is (`tap`'s `client`: "recd-rtsp /live l16"), when it says.
    public var client: String?
    /// How many the client serves the audio on to, as it last said (`tap.update`): recd-rtsp's
    /// RTSP clients of this stream. nil: it has not said.
    public var listeners: Int?
    public var since: Date
    public var framesSent: Int64
    /// Chunks the client did not read in time, and their frames: dropped, and said so in the stream.
    public var chunksDropped: Int
    public var framesDropped: Int64

    public init(id: Int, format: TapFormat, pid: Int32?, client: String? = nil, listeners: Int? = nil, since: Date, framesSent: Int64,
                chunksDropped: Int, framesDropped: Int64) {
        self.id = id
        self.format = format
        self.pid = pid
        self.client = client
        self.listeners = listeners
        self.since = since
        self.framesSent = framesSent
        self.chunksDropped = chunksDropped
        self.framesDropped = framesDropped
    }
}
