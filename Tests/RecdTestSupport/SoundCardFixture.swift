import Foundation
import Glibc

/// A machine's sound cards without sound hardware (../shared/TESTING.md, 3d): a directory that
/// holds what the kernel and udev would show for them — sysfs (`sys/class/sound/cardN` up to
/// its USB device and controller), device nodes and udev's links (`dev/snd`), udev's database
/// (`run/udev/data`). recd reads it under `RECD_SYSTEM_ROOT`. A card's audio comes from a
/// paced PulseAudio server: the test ALSA configuration maps `plughw:N` to the server linked
/// as `cards/cardN` (`route(card:to:)`), so event, resolution, open and recording all run.
public final class SoundCardFixture {
    public let directory = TemporaryDirectory()
    public var root: String { directory.path }
    /// Where `plughw:N` finds card N's server (`cardN/native`).
    public var cardsDirectory: String { directory.file("cards") }
    /// The environment recd reads this machine with.
    public var environment: [String: String] { ["RECD_SYSTEM_ROOT": root, "RECD_TEST_CARDS": cardsDirectory] }

    /// A USB audio device: what it says it is, and where it is plugged.
    public struct USBDevice: Sendable {
        public var vendor: String
        public var product: String
        public var serial: String?
        /// The host controller's PCI address, the bus number (probe order) and the devpath.
        public var controller: String
        public var bus: Int
        public var devpath: String
        public var interface: Int
        public var name: String

        public init(vendor: String = "0d8c", product: String = "0014", serial: String? = nil,
                    controller: String = "0000:00:14.0", bus: Int = 1, devpath: String, interface: Int = 0,
                    name: String = "USB Audio Device") {
            self.vendor = vendor
            self.product = product
            self.serial = serial
            self.controller = controller
            self.bus = bus
            self.devpath = devpath
            self.interface = interface
            self.name = name
        }

        /// The kernel's name for the device (`1-1.2`): with the bus number, so not an id.
        var kernelName: String { "\(bus)-\(devpath)" }
        public var portID: String { "usb:\(vendor):\(product):p=\(controller)-\(devpath)" }
        public var serialID: String? { serial.map { "usb:\(vendor):\(product):s=\($0)" } }
    }

    public init() {
        for path in ["sys/class/sound", "sys/devices", "dev/snd", "run/udev/data", "cards"] {
            try! FileManager.default.createDirectory(atPath: directory.file(path), withIntermediateDirectories: true)
        }
    }

    /// sysfs for card `index`: a USB card (its interface, device, hub and controller), or one on
    /// a PCI slot. Then, unless `nodes` is false, its device nodes, udev's links and database.
    public func plug(card index: Int, id: String, usb: USBDevice? = nil, pci: String = "0000:00:1f.3", nodes: Bool = true) {
        let parent: String
        if let usb {
            let hub = "\(usb.bus)-\(usb.devpath.split(separator: ".").first!)"
            var device = "sys/devices/pci0000:00/\(usb.controller)/usb\(usb.bus)"
            if hub != usb.kernelName { device += "/" + hub }
            device += "/" + usb.kernelName
            write(device + "/idVendor", usb.vendor)
            write(device + "/idProduct", usb.product)
            write(device + "/devpath", usb.devpath)
            write(device + "/busnum", "\(usb.bus)")
            write(device + "/product", usb.name)
            write(device + "/manufacturer", "C-Media Electronics Inc.")
            if let serial = usb.serial { write(device + "/serial", serial) }
            parent = device + "/\(usb.kernelName):1.\(usb.interface)"
            write(parent + "/bInterfaceNumber", String(format: "%02x", usb.interface))
        } else {
            parent = "sys/devices/pci0000:00/\(pci)"
            write(parent + "/vendor", "0x8086")
        }
        let card = parent + "/sound/card\(index)"
        write(card + "/id", id)
        write(card + "/number", "\(index)")
        try! FileManager.default.createDirectory(atPath: directory.file(card + "/pcmC\(index)D0c"), withIntermediateDirectories: true)
        try! FileManager.default.createDirectory(atPath: directory.file(card + "/controlC\(index)"), withIntermediateDirectories: true)
        try! FileManager.default.createSymbolicLink(atPath: directory.file(card + "/device"), withDestinationPath: "../..")
        try! FileManager.default.createSymbolicLink(atPath: directory.file("sys/class/sound/card\(index)"),
                                                    withDestinationPath: "../../devices/" + card.dropFirst("sys/devices/".count))
        if nodes { createNodes(card: index, usb: usb, pci: pci) }
    }

    /// What udev makes of a card that appeared: its device nodes, then its links and its
    /// database entry. Returns the time the capture node was created.
    @discardableResult
    public func createNodes(card index: Int, usb: USBDevice? = nil, pci: String = "0000:00:1f.3") -> Date {
        write("dev/snd/controlC\(index)", "")
        write("dev/snd/pcmC\(index)D0c", "")
        let created = Date()
        if let usb {
            link("dev/snd/by-path/pci-\(usb.controller)-usb-0:\(usb.devpath):1.\(usb.interface)", to: "../controlC\(index)")
            // udev's by-id name has no port: two serial-less units of one model share it, the last one wins.
            let serial = usb.serial ?? "00"
            link("dev/snd/by-id/usb-C-Media_Electronics_Inc._\(usb.name.replacingOccurrences(of: " ", with: "_"))-\(serial)-00",
                 to: "../controlC\(index)")
        } else {
            link("dev/snd/by-path/pci-\(pci)", to: "../controlC\(index)")
        }
        write("run/udev/data/+sound:card\(index)", "I:1\nE:ID_BUS=usb\nE:SOUND_INITIALIZED=1\n")
        return created
    }

    /// The card unplugged: its nodes, links, database entry and sysfs go.
    public func unplug(card index: Int) {
        for kind in ["dev/snd/by-id", "dev/snd/by-path"] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: directory.file(kind))) ?? [] {
                let path = directory.file(kind + "/" + name)
                if (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) == "../controlC\(index)" { unlink(path) }
            }
        }
        unlink(directory.file("dev/snd/pcmC\(index)D0c"))
        unlink(directory.file("dev/snd/controlC\(index)"))
        unlink(directory.file("run/udev/data/+sound:card\(index)"))
        let classLink = directory.file("sys/class/sound/card\(index)")
        if let card = try? FileManager.default.destinationOfSymbolicLink(atPath: classLink) {
            let cardDirectory = directory.file("sys/class/sound/" + card)
            try? FileManager.default.removeItem(atPath: cardDirectory)
        }
        unlink(classLink)
    }

    /// Where card N's audio comes from: `server`'s sink (through the test ALSA configuration's `plughw`).
    public func route(card index: Int, to server: PulseServer) {
        let path = directory.file("cards/card\(index)")
        unlink(path)
        try! FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: server.directory.path)
    }

    private func write(_ relative: String, _ text: String) {
        let path = directory.file(relative)
        try! FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try! (text.isEmpty ? text : text + "\n").write(toFile: path, atomically: false, encoding: .utf8)
    }

    private func link(_ relative: String, to target: String) {
        let path = directory.file(relative)
        try! FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        unlink(path)
        try! FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
    }
}
