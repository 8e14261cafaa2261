/// A capture device as recd.toml (or `recd --device`) names it:
/// - `usb:VID:PID[:s=SERIAL|:p=PORT][:if=N]`: a USB card by what it is (serial) or where it is
///   plugged (port: controller and devpath), whatever number it got at this boot;
/// - `/dev/snd/by-id/…`, `/dev/snd/by-path/…`: udev's links to a card;
/// - an ALSA name as today (`plughw:CARD=Device,DEV=0`, `hw:1,0`, `default`, `pulse`).
public enum DeviceName: Sendable, Equatable {
    case usb(USBSelector)
    case link(String)
    case alsa(String)

    /// Which USB cards a `usb:` id names.
    public struct USBSelector: Sendable, Equatable {
        public var vendor: String
        public var product: String
        public var serial: String?
        public var port: String?
        public var interface: Int?

        public func matches(_ usb: SoundCardScan.USBIdentity) -> Bool {
            usb.vendor == vendor && usb.product == product && (serial == nil || usb.serial == serial)
                && (port == nil || usb.port == port) && (interface == nil || usb.interface == interface)
        }
    }

    /// A card an ALSA name refers to (`CARD=Device`, `hw:1`).
    public enum CardReference: Sendable, Equatable {
        case index(Int)
        case id(String)
    }

    /// Parses `text`; a `usb:` id that is not well formed is an error that says what is wrong.
    public init(parsing text: String) throws(SoundCardError) {
        if text.hasPrefix("usb:") {
            self = .usb(try Self.parseUSB(text))
        } else if text.hasPrefix("/dev/snd/") {
            self = .link(text)
        } else if text.hasPrefix("/") {
            throw .invalidName(text, "a device path must be one of udev's links under /dev/snd/by-id or /dev/snd/by-path")
        } else {
            self = .alsa(text)
        }
    }

    static func parseUSB(_ text: String) throws(SoundCardError) -> USBSelector {
        let usage = "write usb:VID:PID, usb:VID:PID:s=SERIAL or usb:VID:PID:p=PORT, optionally ending in :if=N (recctl devices lists them)"
        var rest = Substring(text.dropFirst(4))
        func hexWord() -> String? {
            let word = rest.prefix(4)
            guard word.count == 4, word.allSatisfy(\.isHexDigit) else { return nil }
            rest = rest.dropFirst(4)
            return word.lowercased()
        }
        guard let vendor = hexWord(), rest.first == ":" else { throw .invalidName(text, usage) }
        rest = rest.dropFirst()
        guard let product = hexWord() else { throw .invalidName(text, usage) }
        var selector = USBSelector(vendor: vendor, product: product)
        // The interface comes last: a serial or a port may hold colons of its own.
        if let range = rest.ranges(of: ":if=").last {
            let number = rest[range.upperBound...]
            guard let interface = Int(number), number.allSatisfy(\.isNumber), (0...255).contains(interface) else {
                throw .invalidName(text, "the interface (:if=N) must be a number from 0 to 255")
            }
            selector.interface = interface
            rest = rest[..<range.lowerBound]
        }
        if rest.hasPrefix(":s=") {
            let serial = String(rest.dropFirst(3))
            guard !serial.isEmpty else { throw .invalidName(text, "the serial (s=) is empty") }
            selector.serial = serial
        } else if rest.hasPrefix(":p=") {
            let port = String(rest.dropFirst(3))
            // controller-devpath: the devpath is digits and dots after the last '-'.
            guard let dash = port.lastIndex(of: "-"), dash != port.startIndex,
                  case let devpath = port[port.index(after: dash)...], !devpath.isEmpty,
                  devpath.allSatisfy({ $0.isNumber || $0 == "." }) else {
                throw .invalidName(text, "the port (p=) is the controller and the USB devpath, as in p=0000:00:14.0-1.2")
            }
            selector.port = port
        } else if !rest.isEmpty {
            throw .invalidName(text, usage)
        }
        return selector
    }

    /// The card an ALSA name is on, when it names one: `hw:1,0`, `plughw:CARD=Device,DEV=0`,
    /// `dsnoop:CARD=Device`, `sysdefault:Device`. nil for `default`, `pulse`, or a PCM of one's own.
    public var cardReference: CardReference? {
        guard case .alsa(let name) = self, let colon = name.firstIndex(of: ":") else { return nil }
        let arguments = name[name.index(after: colon)...]
        let value: Substring
        if let key = arguments.firstRange(of: "CARD=") {
            value = arguments[key.upperBound...].prefix { $0 != "," && $0 != " " }
        } else {
            value = arguments.prefix { $0 != "," && $0 != " " }
        }
        let plugin = name[..<colon]
        guard !value.isEmpty, Self.cardPlugins.contains(String(plugin)) else { return nil }
        if let index = Int(value) { return .index(index) }
        let id = value.trimmingCharacters(in: "\"'")
        return id.isEmpty ? nil : .id(id)
    }

    /// ALSA's PCMs whose first argument is a card.
    static let cardPlugins: Set<String> = ["hw", "plughw", "dsnoop", "sysdefault", "default", "front", "dmix", "iec958", "usbstream"]

    /// Whether the name follows the card whatever the probe order: not a number (`hw:1`), not
    /// the id the kernel gives a second identical card (`Device_1`). nil when the name has no card.
    public var isStable: Bool {
        switch self {
        case .usb, .link: return true
        case .alsa:
            switch cardReference {
            case nil: return true
            case .index: return false
            case .id(let id):
                guard let underscore = id.lastIndex(of: "_") else { return true }
                let suffix = id[id.index(after: underscore)...]
                return suffix.isEmpty || !suffix.allSatisfy(\.isNumber)
            }
        }
    }

    /// Whether a card (a node under /dev/snd) is behind the name, so that the wait for it can
    /// follow /dev/snd instead of trying again and again.
    public var isOnACard: Bool {
        switch self {
        case .usb, .link: true
        case .alsa: cardReference != nil
        }
    }
}

extension Substring {
    func trimmingCharacters(in characters: String) -> String {
        String(drop { characters.contains($0) }.reversed().drop { characters.contains($0) }.reversed())
    }
}

/// Why a device name does not lead to one card now.
public enum SoundCardError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not a device id recd can read.
    case invalidName(String, String)
    /// No card present matches (yet).
    case notPresent(String, String)
    /// Several cards match: the candidates, each with the id that names it alone.
    case ambiguous(String, [Candidate])
    /// The card that opened is not the one resolved (it changed in between).
    case changed(String, String)

    public struct Candidate: Sendable, Equatable {
        public var index: Int
        public var id: String
        public var stableID: String

        public init(index: Int, id: String, stableID: String) {
            self.index = index
            self.id = id
            self.stableID = stableID
        }
    }

    public var description: String {
        switch self {
        case .invalidName(let name, let why): "device '\(name)' is not a device id recd reads: \(why)"
        case .notPresent(let name, let why): "device '\(name)': \(why)"
        case .ambiguous(let name, let candidates):
            "device '\(name)' matches \(candidates.count) sound cards, and recd does not guess: "
                + candidates.map { "card \($0.index) '\($0.id)' is \($0.stableID)" }.joined(separator: ", ")
                + "; name one of them by that id"
        case .changed(let name, let why): "device '\(name)' changed while it was being opened: \(why)"
        }
    }
}
