import ALSA

/// The capture devices and sound cards ALSA knows (`devices.list`, `recctl devices`). Listed
/// here because RecorderCore is the module that talks to ALSA: the server and the other ways
/// in learn about devices through it, never from ALSA themselves.
public enum SoundDevices {
    /// A PCM usable for capture, as `arecord -L` lists it.
    public struct CaptureDevice: Sendable, Equatable {
        /// The name to open: `default`, `hw:CARD=PCH,DEV=0`, `pulse`.
        public var name: String
        /// ALSA's description, possibly several lines.
        public var description: String?
        /// `Input`, or nil when the PCM does both.
        public var direction: String?
        /// The id of the card the name is on (`CARD=` in it), if it names one.
        public var card: String?
    }

    /// A sound card present now.
    public struct Card: Sendable, Equatable {
        public var index: Int
        public var id: String
        public var name: String
    }

    /// The PCMs usable for capture that ALSA's configuration lists. May block briefly (it
    /// reads ALSA's configuration and asks the sound server).
    public static func captureDevices() -> [CaptureDevice] {
        CapturePCM.captureDevices().filter { !notForCapture.contains($0.name) }.map {
            CaptureDevice(name: $0.name, description: $0.description, direction: $0.direction, card: $0.cardID)
        }
    }

    /// alsa-plugins' PCMs that ALSA's hints list as both ways but that are not something to
    /// record from: rate converters (the `rate_converter` of a `plug`, not devices) and the
    /// channel mixers for playback.
    static let notForCapture: Set<String> = ["lavrate", "samplerate", "speexrate", "upmix", "vdownmix"]

    /// The sound cards present now.
    public static func cards() -> [Card] {
        CapturePCM.soundCards().map { Card(index: $0.index, id: $0.id, name: $0.name) }
    }
}
