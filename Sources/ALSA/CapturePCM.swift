import CALSA
import Glibc

/// The sample formats recd captures in: interleaved, native endian.
/// 24-bit audio arrives as `int32` (left-justified, as ALSA's S32 carries it).
public enum SampleFormat: String, Sendable, CaseIterable, Codable {
    case int16
    case int32
    case float32

    public var bytesPerSample: Int {
        switch self {
        case .int16: 2
        case .int32, .float32: 4
        }
    }

    var alsaFormat: snd_pcm_format_t {
        switch self {
        case .int16: SND_PCM_FORMAT_S16_LE
        case .int32: SND_PCM_FORMAT_S32_LE
        case .float32: SND_PCM_FORMAT_FLOAT_LE
        }
    }

    /// The formats to try, best first, when `self` is what we would like.
    var negotiationOrder: [SampleFormat] {
        switch self {
        case .int16: [.int16, .int32, .float32]
        case .int32: [.int32, .float32, .int16]
        case .float32: [.float32, .int32, .int16]
        }
    }
}

/// What a PCM was opened with after negotiation.
public struct PCMConfiguration: Sendable, Equatable {
    public var sampleFormat: SampleFormat
    public var sampleRate: Int
    public var channels: Int
    /// Frames per period: how much the device hands over per wakeup.
    public var periodFrames: Int
    /// Frames the device buffers before an overrun.
    public var bufferFrames: Int

    public var bytesPerFrame: Int { sampleFormat.bytesPerSample * channels }
}

/// An open ALSA capture PCM. Closed when released.
///
/// Not thread-safe: one thread (the capture thread) uses it at a time.
public final class CapturePCM {
    public let name: String
    private let handle: OpaquePointer
    /// Frames per period once configured: what `wait(timeoutMilliseconds:orReadable:)` waits for.
    private var periodFrames = 1
    /// The PCM's poll descriptors and one more (the caller's), kept between waits.
    private var pollDescriptors: [pollfd] = []

    /// Opens `name` (`default`, `hw:1,0`, `plughw:…`, `pulse`, `dsnoop:…`) for capture.
    public init(name: String) throws(ALSAError) {
        var pcm: OpaquePointer?
        LibraryMessages.routed
        LibraryMessages.clear()
        let result = snd_pcm_open(&pcm, name, SND_PCM_STREAM_CAPTURE, 0)
        if result < 0 { throw ALSAError(code: result, function: "snd_pcm_open", device: name, detail: LibraryMessages.last) }
        guard let pcm else { throw ALSAError(code: -ENODEV, function: "snd_pcm_open", device: name) }
        self.name = name
        self.handle = pcm
    }

    deinit { snd_pcm_close(handle) }

    /// The number of the sound card the PCM opened on; nil when it is not on a card (a sound
    /// server's PCM, a file).
    public var cardIndex: Int? {
        var info: OpaquePointer?
        guard snd_pcm_info_malloc(&info) == 0, let info else { return nil }
        defer { snd_pcm_info_free(info) }
        guard snd_pcm_info(handle, info) == 0 else { return nil }
        let card = snd_pcm_info_get_card(info)
        return card >= 0 ? Int(card) : nil
    }

    /// Negotiates hardware parameters as close to the request as the device allows.
    ///
    /// ALSA's own resampler is switched off: a rate the device does not offer is converted by
    /// soxr in the pipeline, at the quality the recording asks for.
    public func configure(
        sampleFormat: SampleFormat,
        sampleRate: Int?,
        channels: Int?,
        periodMicroseconds: Int,
        bufferMicroseconds: Int
    ) throws(ALSAError) -> PCMConfiguration {
        var params: OpaquePointer?
        try check(snd_pcm_hw_params_malloc(&params), "snd_pcm_hw_params_malloc", name)
        defer { snd_pcm_hw_params_free(params) }
        try check(snd_pcm_hw_params_any(handle, params), "snd_pcm_hw_params_any", name)
        try check(snd_pcm_hw_params_set_rate_resample(handle, params, 0), "snd_pcm_hw_params_set_rate_resample", name)
        try check(snd_pcm_hw_params_set_access(handle, params, SND_PCM_ACCESS_RW_INTERLEAVED),
                  "snd_pcm_hw_params_set_access", name)

        guard let format = sampleFormat.negotiationOrder.first(where: {
            snd_pcm_hw_params_test_format(handle, params, $0.alsaFormat) == 0
        }) else {
            throw ALSAError(code: -EINVAL, function: "snd_pcm_hw_params_set_format (S16_LE, S32_LE, FLOAT_LE)", device: name)
        }
        try check(snd_pcm_hw_params_set_format(handle, params, format.alsaFormat), "snd_pcm_hw_params_set_format", name)

        var channelCount = UInt32(channels ?? 2)
        try check(snd_pcm_hw_params_set_channels_near(handle, params, &channelCount), "snd_pcm_hw_params_set_channels_near", name)

        var rate = UInt32(sampleRate ?? 48000)
        var dir: Int32 = 0
        try check(snd_pcm_hw_params_set_rate_near(handle, params, &rate, &dir), "snd_pcm_hw_params_set_rate_near", name)

        var bufferTime = UInt32(bufferMicroseconds)
        dir = 0
        try check(snd_pcm_hw_params_set_buffer_time_near(handle, params, &bufferTime, &dir),
                  "snd_pcm_hw_params_set_buffer_time_near", name)
        var periodTime = UInt32(periodMicroseconds)
        dir = 0
        try check(snd_pcm_hw_params_set_period_time_near(handle, params, &periodTime, &dir),
                  "snd_pcm_hw_params_set_period_time_near", name)

        try check(snd_pcm_hw_params(handle, params), "snd_pcm_hw_params", name)

        var period: snd_pcm_uframes_t = 0
        var buffer: snd_pcm_uframes_t = 0
        dir = 0
        try check(snd_pcm_hw_params_get_period_size(params, &period, &dir), "snd_pcm_hw_params_get_period_size", name)
        try check(snd_pcm_hw_params_get_buffer_size(params, &buffer), "snd_pcm_hw_params_get_buffer_size", name)
        periodFrames = max(1, Int(period))
        return PCMConfiguration(
            sampleFormat: format, sampleRate: Int(rate), channels: Int(channelCount),
            periodFrames: Int(period), bufferFrames: Int(buffer))
    }

    /// Starts capturing (a prepared capture PCM starts on the first read too; this starts the clock now).
    public func start() throws(ALSAError) {
        try check(snd_pcm_start(handle), "snd_pcm_start", name)
    }

    /// Waits until at least a period can be read. `false` on timeout.
    public func wait(timeoutMilliseconds: Int32) throws(ALSAError) -> Bool {
        let result = snd_pcm_wait(handle, timeoutMilliseconds)
        try check(result, "snd_pcm_wait", name)
        return result > 0
    }

    /// `wait(timeoutMilliseconds:)` that also returns when `descriptor` (an eventfd another
    /// thread writes to) is readable, so that the capture thread can be woken between two
    /// periods. Returns the frames ready to be read once the device says so (`available()`
    /// then, usually a period or more); 0 on timeout or when woken. Errors as `snd_pcm_wait`
    /// reports them (overrun, suspend, the device gone).
    public func wait(timeoutMilliseconds: Int32, orReadable descriptor: Int32) throws(ALSAError) -> Int {
        // As snd_pcm_wait: no poll when a period is there already.
        let available = snd_pcm_avail_update(handle)
        if available < 0 { throw ALSAError(code: Int32(available), function: "snd_pcm_avail_update", device: name) }
        if available >= periodFrames { return Int(available) }
        let count = Int(snd_pcm_poll_descriptors_count(handle))
        guard count > 0 else { return try wait(timeoutMilliseconds: timeoutMilliseconds) ? Swift.max(1, try self.available()) : 0 }
        if pollDescriptors.count != count + 1 { pollDescriptors = Array(repeating: pollfd(), count: count + 1) }
        let filled = pollDescriptors.withUnsafeMutableBufferPointer { fds in
            Int(snd_pcm_poll_descriptors(handle, fds.baseAddress, UInt32(count)))
        }
        if filled < 0 { throw ALSAError(code: Int32(filled), function: "snd_pcm_poll_descriptors", device: name) }
        pollDescriptors[filled] = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let ready = pollDescriptors.withUnsafeMutableBufferPointer { fds in poll(fds.baseAddress, nfds_t(filled + 1), timeoutMilliseconds) }
        if ready < 0 {
            if errno == EINTR { return 0 }
            throw ALSAError(code: -errno, function: "poll", device: name)
        }
        if ready == 0 { return 0 }
        var events: UInt16 = 0
        let demangled = pollDescriptors.withUnsafeMutableBufferPointer { fds in
            snd_pcm_poll_descriptors_revents(handle, fds.baseAddress, UInt32(filled), &events)
        }
        try check(demangled, "snd_pcm_poll_descriptors_revents", name)
        if events & UInt16(POLLERR | POLLNVAL) != 0 {
            // snd_pcm_wait tells which error from the PCM's state (overrun, suspend, gone).
            try check(snd_pcm_wait(handle, 0), "snd_pcm_wait", name)
            throw ALSAError(code: -EIO, function: "poll", device: name)
        }
        // Ready: at least one frame, so that the caller reads (a period, waiting in the read
        // for what is not there yet), as after snd_pcm_wait.
        return events & UInt16(POLLIN) != 0 ? Swift.max(1, try self.available()) : 0
    }

    /// Frames ready to be read now.
    public func available() throws(ALSAError) -> Int {
        let result = snd_pcm_avail_update(handle)
        if result < 0 { throw ALSAError(code: Int32(result), function: "snd_pcm_avail_update", device: name) }
        return Int(result)
    }

    /// Reads up to `frames` interleaved frames into `buffer`; returns how many arrived.
    public func read(into buffer: UnsafeMutableRawPointer, frames: Int) throws(ALSAError) -> Int {
        let result = snd_pcm_readi(handle, buffer, snd_pcm_uframes_t(frames))
        if result < 0 { throw ALSAError(code: Int32(result), function: "snd_pcm_readi", device: name) }
        return Int(result)
    }

    /// Recovers from an overrun (-EPIPE) or a suspend (-ESTRPIPE) and restarts capture.
    /// Throws the original error for anything else: the device is gone or broken.
    public func recover(from error: ALSAError) throws(ALSAError) {
        guard error.code == -EPIPE || error.code == -ESTRPIPE || error.code == -EINTR else { throw error }
        try check(snd_pcm_recover(handle, error.code, 1), "snd_pcm_recover", name)
        if error.code != -EINTR { try start() }
    }

    /// Stops capture and discards what the device buffered (used for pause).
    public func drop() {
        _ = snd_pcm_drop(handle)
    }

    /// Makes a dropped PCM ready to start again (used for resume).
    public func prepare() throws(ALSAError) {
        try check(snd_pcm_prepare(handle), "snd_pcm_prepare", name)
    }
}

/// A PCM that ALSA's configuration knows, as `aplay -L` / `arecord -L` list them.
public struct DeviceHint: Sendable, Equatable, Codable {
    /// The name to open, e.g. `default`, `hw:CARD=PCH,DEV=0`, `pulse`.
    public var name: String
    /// ALSA's description, possibly several lines.
    public var description: String?
    /// `Input`, `Output`, or nil when the PCM does both.
    public var direction: String?

    /// The card id in the name (`hw:CARD=PCH,DEV=0` → `PCH`), if it names one.
    public var cardID: String? { Self.cardID(in: name) }

    public static func cardID(in name: String) -> String? {
        // No Foundation here: find "CARD=" by hand.
        let characters = Array(name)
        let key: [Character] = ["C", "A", "R", "D", "="]
        guard characters.count > key.count,
              let start = (0...(characters.count - key.count)).first(where: { Array(characters[$0..<($0 + key.count)]) == key })
        else { return nil }
        let terminators: Set<Character> = [",", " ", "'", "\""]
        let id = characters[(start + key.count)...].prefix { !terminators.contains($0) }
        return id.isEmpty ? nil : String(id)
    }
}

/// A sound card: its number now, its stable id, its name.
public struct SoundCard: Sendable, Equatable {
    public var index: Int
    public var id: String
    public var name: String
}

extension CapturePCM {
    /// The sound cards present (`/proc/asound/cards`, through the control interface).
    public static func soundCards() -> [SoundCard] {
        LibraryMessages.routed
        var cards: [SoundCard] = []
        var index: Int32 = -1
        while snd_card_next(&index) == 0, index >= 0 {
            var control: OpaquePointer?
            guard snd_ctl_open(&control, "hw:\(index)", 0) == 0, let control else { continue }
            defer { snd_ctl_close(control) }
            var info: OpaquePointer?
            guard snd_ctl_card_info_malloc(&info) == 0, let info else { continue }
            defer { snd_ctl_card_info_free(info) }
            guard snd_ctl_card_info(control, info) == 0 else { continue }
            cards.append(SoundCard(index: Int(index), id: String(cString: snd_ctl_card_info_get_id(info)),
                                   name: String(cString: snd_ctl_card_info_get_name(info))))
        }
        return cards
    }

    /// The PCMs usable for capture that ALSA's configuration lists (its name hints).
    public static func captureDevices() -> [DeviceHint] {
        LibraryMessages.routed
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        guard snd_device_name_hint(-1, "pcm", &hints) == 0, let hints else { return [] }
        defer { snd_device_name_free_hint(hints) }
        func hint(_ entry: UnsafeMutableRawPointer, _ id: String) -> String? {
            guard let value = snd_device_name_get_hint(entry, id) else { return nil }
            defer { free(value) }
            return String(cString: value)
        }
        var devices: [DeviceHint] = []
        var cursor = hints
        while let entry = cursor.pointee {
            defer { cursor += 1 }
            guard let name = hint(entry, "NAME") else { continue }
            let direction = hint(entry, "IOID")
            guard direction == nil || direction == "Input" else { continue }
            devices.append(DeviceHint(name: name, description: hint(entry, "DESC"), direction: direction))
        }
        return devices
    }
}
