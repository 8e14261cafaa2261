/// The sound cards present, as sysfs describes them: each card's number now, its ALSA id, and
/// for a USB card what stays the same across reboots and replugs (vendor, product, serial, the
/// physical port). Read from `/sys/class/sound`, never `/proc/asound` (recd.service's
/// `ProcSubset=pid` hides it).
public struct SoundCardScan: Sendable, Equatable {
    public var cards: [Card]

    /// A card as sysfs shows it now.
    public struct Card: Sendable, Equatable {
        /// Its number now (`hw:1`): follows probe order.
        public var index: Int
        /// ALSA's id (`CARD=Device`): the second of two identical cards gets `Device_1`.
        public var id: String
        /// The USB device and interface it is, for a USB card.
        public var usb: USBIdentity?
        /// The numbers of its capture PCMs (`pcmC1D0c` → 0), lowest first.
        public var capturePCMs: [Int]
        /// udev's links to it (`/dev/snd/by-id/…`, `/dev/snd/by-path/…`), as a user writes them.
        public var links: [String]
        /// The product's name as the device reports it (USB `product`), when sysfs has one.
        public var productName: String?

        public init(index: Int, id: String, usb: USBIdentity? = nil, capturePCMs: [Int] = [0], links: [String] = [],
                    productName: String? = nil) {
            self.index = index
            self.id = id
            self.usb = usb
            self.capturePCMs = capturePCMs
            self.links = links
            self.productName = productName
        }

        /// The ALSA name recd opens for it: its first capture PCM through ALSA's format
        /// conversion (recd asks for no rate conversion: soxr does that).
        public var pcmName: String { "plughw:\(index),\(capturePCMs.first ?? 0)" }
    }

    /// What identifies a USB sound card whatever its number.
    public struct USBIdentity: Sendable, Equatable {
        /// `idVendor`, `idProduct`: four lowercase hex digits each.
        public var vendor: String
        public var product: String
        /// The serial number, when the device reports one.
        public var serial: String?
        /// The host controller (the parent of the root hub `usbN`: `0000:00:14.0`,
        /// `3f980000.usb`) and the devpath under it (`1.2`): the port, independent of bus numbers.
        public var controller: String
        public var devpath: String
        /// `bInterfaceNumber` of the audio interface the card is on.
        public var interface: Int
        public var manufacturer: String?

        public init(vendor: String, product: String, serial: String?, controller: String, devpath: String, interface: Int,
                    manufacturer: String? = nil) {
            self.vendor = vendor
            self.product = product
            self.serial = serial
            self.controller = controller
            self.devpath = devpath
            self.interface = interface
            self.manufacturer = manufacturer
        }

        /// The port as the `p=` of a device id: `0000:00:14.0-1.2`.
        public var port: String { controller + "-" + devpath }

        /// A serial worth naming a device by: some devices report none, an empty one, or zeros.
        public var usableSerial: String? {
            guard let serial, serial.contains(where: { $0 != "0" && $0 != " " }) else { return nil }
            return serial
        }
    }

    public init(cards: [Card]) { self.cards = cards }

    /// Reads the cards present under `roots` now.
    public init(roots: SystemRoots) {
        let classDirectory = roots.sys + "/class/sound"
        var cards: [Card] = []
        for name in FileSystem.entries(classDirectory) {
            guard name.hasPrefix("card"), let index = Int(name.dropFirst(4)) else { continue }
            if let card = Self.card(index: index, directory: classDirectory + "/" + name) { cards.append(card) }
        }
        let links = Self.links(roots: roots)
        for i in cards.indices { cards[i].links = links[cards[i].index] ?? [] }
        self.cards = cards.sorted { $0.index < $1.index }
    }

    public func card(index: Int) -> Card? { cards.first { $0.index == index } }
    public func card(id: String) -> Card? { cards.first { $0.id == id } }

    static func card(index: Int, directory: String) -> Card? {
        guard let id = FileSystem.attribute(directory + "/id") else { return nil }
        let pcms = FileSystem.entries(directory).compactMap { name -> Int? in
            // pcmC1D0c: card 1, device 0, capture.
            guard name.hasPrefix("pcmC\(index)D"), name.hasSuffix("c") else { return nil }
            return Int(name.dropFirst("pcmC\(index)D".count).dropLast())
        }.sorted()
        var card = Card(index: index, id: id, capturePCMs: pcms)
        guard let device = FileSystem.realPath(directory + "/device") else { return card }
        // A USB card's device is the audio interface (1-1.2:1.0), whose parent is the USB device.
        if let interfaceText = FileSystem.attribute(device + "/bInterfaceNumber"), let interface = Int(interfaceText, radix: 16) {
            let usbDevice = device.parentPath
            if let vendor = FileSystem.attribute(usbDevice + "/idVendor"), let product = FileSystem.attribute(usbDevice + "/idProduct"),
               let devpath = FileSystem.attribute(usbDevice + "/devpath"), let controller = Self.controller(above: usbDevice) {
                card.usb = USBIdentity(vendor: vendor.lowercased(), product: product.lowercased(),
                                       serial: FileSystem.attribute(usbDevice + "/serial"), controller: controller,
                                       devpath: devpath, interface: interface,
                                       manufacturer: FileSystem.attribute(usbDevice + "/manufacturer"))
                card.productName = FileSystem.attribute(usbDevice + "/product")
            }
        }
        return card
    }

    /// The host controller a USB device hangs under: the parent of its root hub (`usbN`).
    static func controller(above usbDevice: String) -> String? {
        var path = usbDevice
        while path != "/" {
            let name = path.lastComponent
            if name.hasPrefix("usb"), Int(name.dropFirst(3)) != nil { return path.parentPath.lastComponent }
            path = path.parentPath
        }
        return nil
    }

    /// udev's links in /dev/snd/by-id and /dev/snd/by-path, by the card they lead to (their
    /// target is the card's control device, `../controlC1`).
    static func links(roots: SystemRoots) -> [Int: [String]] {
        var links: [Int: [String]] = [:]
        for kind in ["by-id", "by-path"] {
            let directory = roots.dev + "/snd/" + kind
            for name in FileSystem.entries(directory) {
                guard let index = controlCard(FileSystem.linkTarget(directory + "/" + name)) else { continue }
                links[index, default: []].append("/dev/snd/\(kind)/\(name)")
            }
        }
        return links
    }

    /// `../controlC1` → 1.
    static func controlCard(_ target: String?) -> Int? {
        guard let name = target?.lastComponent, name.hasPrefix("controlC") else { return nil }
        return Int(name.dropFirst("controlC".count))
    }

    /// Whether udev has finished setting up the card (its database entry says
    /// `SOUND_INITIALIZED`), or there is no udev to ask. A card udev is still working on may
    /// refuse to open (its node's group not yet set).
    public static func isInitialized(card index: Int, roots: SystemRoots) -> Bool {
        guard FileSystem.exists(roots.udevData) else { return true }
        guard let entry = FileSystem.attribute(roots.udevData + "/+sound:card\(index)") else { return true }
        return entry.split(separator: "\n").contains { $0.hasPrefix("E:SOUND_INITIALIZED=") }
    }
}
