import ALSA
import Glibc
import SoundCards

/// The capture devices and sound cards ALSA knows (`devices.list`, `recctl devices`), and the
/// one way a configured device name becomes an open PCM. Here because RecorderCore is the
/// module that talks to ALSA: the server and the other ways in learn about devices through it,
/// never from ALSA themselves.
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

    /// A sound card present now, with the ids that keep naming it after a reboot or a replug.
    public struct Card: Sendable, Equatable {
        public var index: Int
        public var id: String
        /// ALSA's name for it (`USB Audio Device`), or the USB product's.
        public var name: String
        /// `VID:PID` for a USB card.
        public var usb: String?
        public var serial: String?
        public var port: String?
        public var stableIDs: StableIDs
        /// ALSA names for its first capture PCM: by the card's id (stable unless it ends in `_N`)
        /// and by its number (not stable).
        public var alsaNames: [String]
        /// The configured device resolves to this card.
        public var configured: Bool
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

    /// The sound cards present now (sysfs, with ALSA's names where its control device opens).
    /// `configured` is the configured device. Nothing is opened: another program opening a card
    /// at that moment would find it busy.
    public static func cards(configured: String, roots: SystemRoots) -> [Card] {
        let scan = SoundCardScan(roots: roots)
        let alsaNames = Dictionary(CapturePCM.soundCards().map { ($0.index, $0.name) }, uniquingKeysWith: { a, _ in a })
        let configuredCard = (try? scan.resolve(configured, roots: roots))?.card?.index
        return scan.cards.map { card in
            let pcm = card.capturePCMs.first ?? 0
            return Card(index: card.index, id: card.id,
                        name: alsaNames[card.index] ?? card.productName ?? card.id,
                        usb: card.usb.map { "\($0.vendor):\($0.product)" }, serial: card.usb?.serial, port: card.usb?.port,
                        stableIDs: scan.stableIDs(of: card),
                        alsaNames: ["plughw:CARD=\(card.id),DEV=\(pcm)", "hw:\(card.index),\(pcm)"],
                        configured: configuredCard == card.index)
        }
    }

    /// When `device` names a card by something that changes with probe order (`hw:1`, a
    /// `_1` id), the sentence that says so and what to write instead; nil when it is stable.
    public static func unstableNameWarning(_ device: String, roots: SystemRoots) -> String? {
        guard let name = try? DeviceName(parsing: device), !name.isStable else { return nil }
        let scan = SoundCardScan(roots: roots)
        var advice = ""
        if let card = (try? scan.resolve(device, roots: roots))?.card {
            advice = "; it is card \(card.index) '\(card.id)' now: write device = \"\(scan.stableIDs(of: card).recommended)\""
        }
        return "device '\(device)' names a card by its place in the probe order, which can change at the next boot or replug\(advice)"
    }

    /// What `devices.list` warns of: a name by probe order, or a name that matches several cards now.
    public static func deviceWarning(_ device: String, roots: SystemRoots) -> String? {
        do throws(SoundCardError) {
            _ = try SoundCardScan(roots: roots).resolve(device, roots: roots)
        } catch {
            if case .ambiguous = error { return "\(error)" }
        }
        return unstableNameWarning(device, roots: roots)
    }

    /// Resolves `device` to the card it names now, opens it, and checks that what opened is
    /// what was meant: a replug between the two can give the number to another card. Tries
    /// again (resolving anew) twice before it says the device changed.
    static func open(_ device: String, roots: SystemRoots,
                     open: (String) throws(ALSAError) -> CapturePCM = { name throws(ALSAError) in try CapturePCM(name: name) })
        throws(ALSAError) -> (CapturePCM, DeviceResolution) {
        var attempt = 0
        while true {
            attempt += 1
            let resolution: DeviceResolution
            do throws(SoundCardError) {
                resolution = try SoundCardScan(roots: roots).resolve(device, roots: roots)
            } catch {
                throw ALSAError(error)
            }
            let pcm = try open(resolution.pcmName)
            do throws(SoundCardError) {
                try SoundCardScan.verify(resolution, openedCard: pcm.cardIndex, roots: roots)
            } catch {
                if attempt < 3 { continue }
                throw ALSAError(error)
            }
            return (pcm, resolution)
        }
    }
}

extension ALSAError {
    /// A device name that does not lead to one card now, as an error of opening it: the
    /// function is `resolve`, the detail says why.
    init(_ error: SoundCardError) {
        let (code, device): (Int32, String) = switch error {
        case .invalidName(let name, _): (EINVAL, name)
        case .notPresent(let name, _): (ENODEV, name)
        case .ambiguous(let name, _): (ENOTUNIQ, name)
        case .changed(let name, _): (EAGAIN, name)
        }
        self.init(code: -code, function: "resolve", device: device, detail: error.description)
    }
}
