import ALSA
import Dispatch
import Foundation
import RecdTestSupport
@testable import RecorderCore
import RecorderModel
import SoundCards
import Testing

/// Stable identity for sound cards (issue 51): ids read from a sysfs tree built at test time
/// that stands for a station's cards — two identical serial-less microphones on ports 1-1.2 and
/// 1-1.3, two units that report the same serial, one with a serial of its own, and a card on
/// the PCI bus.
@Suite("sound card identity")
struct SoundCardTests {
    static let left = SoundCardFixture.USBDevice(devpath: "1.2")
    static let right = SoundCardFixture.USBDevice(devpath: "1.3")
    static let twinA = SoundCardFixture.USBDevice(vendor: "1b3f", product: "2008", serial: "0123456789", controller: "0000:00:14.0",
                                                  devpath: "1.4", name: "Generic USB Audio")
    static let twinB = SoundCardFixture.USBDevice(vendor: "1b3f", product: "2008", serial: "0123456789", controller: "0000:03:00.0",
                                                  bus: 3, devpath: "2", name: "Generic USB Audio")
    static let unique = SoundCardFixture.USBDevice(vendor: "17a0", product: "0305", serial: "ABC123", devpath: "1.1", name: "Yeti")

    /// The station after one boot: cards numbered in one probe order.
    static func station(order: [Int] = [1, 2, 3, 4, 5]) -> SoundCardFixture {
        let fixture = SoundCardFixture()
        fixture.plug(card: 0, id: "PCH")
        fixture.plug(card: order[0], id: order[0] < order[1] ? "Device" : "Device_1", usb: left)
        fixture.plug(card: order[1], id: order[0] < order[1] ? "Device_1" : "Device", usb: right)
        fixture.plug(card: order[2], id: order[2] < order[3] ? "Audio" : "Audio_1", usb: twinA)
        fixture.plug(card: order[3], id: order[2] < order[3] ? "Audio_1" : "Audio", usb: twinB)
        fixture.plug(card: order[4], id: "Yeti", usb: unique)
        return fixture
    }

    static func roots(_ fixture: SoundCardFixture) -> SystemRoots { SystemRoots.from(environment: fixture.environment) }

    static func resolve(_ name: String, _ fixture: SoundCardFixture) throws(SoundCardError) -> SoundCardScan.Card? {
        let roots = roots(fixture)
        return try SoundCardScan(roots: roots).resolve(name, roots: roots).card
    }

    @Test func theScanReadsWhatEachCardIsAndWhereItIsPlugged() throws {
        let fixture = Self.station()
        let scan = SoundCardScan(roots: Self.roots(fixture))
        #expect(scan.cards.map(\.index) == [0, 1, 2, 3, 4, 5])
        #expect(scan.card(index: 0)?.usb == nil)
        let left = try #require(scan.card(index: 1)?.usb)
        #expect(left == SoundCardScan.USBIdentity(vendor: "0d8c", product: "0014", serial: nil, controller: "0000:00:14.0",
                                                  devpath: "1.2", interface: 0, manufacturer: "C-Media Electronics Inc."))
        #expect(scan.card(index: 4)?.usb?.port == "0000:03:00.0-2", "a device on a root port has no hub")
        #expect(scan.card(index: 1)?.capturePCMs == [0])
        #expect(scan.card(index: 1)?.pcmName == "plughw:1,0")
        #expect(scan.card(index: 5)?.links.contains { $0.hasPrefix("/dev/snd/by-id/") } == true)
        #expect(scan.card(index: 0)?.links == ["/dev/snd/by-path/pci-0000:00:1f.3"])
    }

    @Test func eachIDNamesItsCardWhateverTheProbeOrder() throws {
        let boots = [[1, 2, 3, 4, 5], [2, 1, 4, 3, 5], [5, 4, 1, 2, 3]]
        for order in boots {
            let fixture = Self.station(order: order)
            #expect(try Self.resolve(Self.left.portID, fixture)?.index == order[0], "boot \(order)")
            #expect(try Self.resolve(Self.right.portID, fixture)?.index == order[1], "boot \(order)")
            #expect(try Self.resolve("usb:1b3f:2008:p=0000:00:14.0-1.4", fixture)?.index == order[2])
            #expect(try Self.resolve("usb:1b3f:2008:p=0000:03:00.0-2", fixture)?.index == order[3])
            #expect(try Self.resolve("usb:17a0:0305:s=ABC123", fixture)?.index == order[4])
            #expect(try Self.resolve("usb:17a0:0305", fixture)?.index == order[4], "one unit of a model: its vendor and product suffice")
            #expect(try Self.resolve("usb:17A0:0305:s=ABC123:if=0", fixture)?.index == order[4], "hex in either case; the interface")
            #expect(try Self.resolve("/dev/snd/by-path/pci-0000:00:14.0-usb-0:1.3:1.0", fixture)?.index == order[1])
            #expect(try Self.resolve("plughw:CARD=PCH,DEV=0", fixture)?.index == 0)
        }
    }

    @Test func aNameThatMatchesSeveralCardsIsRefusedNamingEachPort() throws {
        let fixture = Self.station()
        #expect(throws: SoundCardError.ambiguous("usb:0d8c:0014", [
            .init(index: 1, id: "Device", stableID: "usb:0d8c:0014:p=0000:00:14.0-1.2"),
            .init(index: 2, id: "Device_1", stableID: "usb:0d8c:0014:p=0000:00:14.0-1.3"),
        ])) { try Self.resolve("usb:0d8c:0014", fixture) }
        do {
            _ = try Self.resolve("usb:1b3f:2008:s=0123456789", fixture)
            Issue.record("two units with one serial resolved")
        } catch {
            let text = "\(error)"
            #expect(text.contains("matches 2 sound cards"), "\(text)")
            #expect(text.contains("usb:1b3f:2008:p=0000:00:14.0-1.4") && text.contains("usb:1b3f:2008:p=0000:03:00.0-2"), "\(text)")
        }
        // And through the recorder: a start refused with ambiguousDevice, not a guess.
        let recordings = TemporaryDirectory()
        let recorder = Recorder(configuration: RecorderConfiguration(device: "usb:0d8c:0014", recordingsDirectory: recordings.path,
                                                                     systemRoots: Self.roots(fixture)))
        #expect(throws: RecorderError.self) { try recorder.record() }
        #expect(recorder.state.value.name == .failed)
        #expect(recorder.error.value?.code == .ambiguousDevice)
        #expect(recorder.error.value?.message.contains("p=0000:00:14.0-1.3") == true, "\(recorder.error.value?.message ?? "")")
    }

    @Test func theRecommendedIDIsTheSerialWhenItIsTheCardsAloneElseThePort() throws {
        let fixture = Self.station()
        let scan = SoundCardScan(roots: Self.roots(fixture))
        func ids(_ index: Int) -> StableIDs { scan.stableIDs(of: scan.card(index: index)!) }
        #expect(ids(1).serial == nil)
        #expect(ids(1).recommended == "usb:0d8c:0014:p=0000:00:14.0-1.2")
        #expect(ids(3).serial == nil, "a serial another unit reports too names neither")
        #expect(ids(3).recommended == "usb:1b3f:2008:p=0000:00:14.0-1.4")
        #expect(ids(5).serial == "usb:17a0:0305:s=ABC123")
        #expect(ids(5).port == "usb:17a0:0305:p=0000:00:14.0-1.1")
        #expect(ids(5).recommended == "usb:17a0:0305:s=ABC123")
        #expect(ids(0).recommended == "plughw:CARD=PCH,DEV=0")
        // Every recommended id resolves to its own card.
        for card in scan.cards {
            #expect(try Self.resolve(scan.stableIDs(of: card).recommended, fixture)?.index == card.index)
        }
    }

    @Test(arguments: [
        ("usb:0d8c", "write usb:VID:PID"), ("usb:0d8c:00x4", "write usb:VID:PID"), ("usb:0d8c:0014:serial=1", "write usb:VID:PID"),
        ("usb:0d8c:0014:s=", "serial (s=) is empty"), ("usb:0d8c:0014:p=1.2", "the port (p=)"),
        ("usb:0d8c:0014:p=0000:00:14.0-1.x", "the port (p=)"), ("usb:0d8c:0014:if=300", "from 0 to 255"),
        ("/dev/dsp", "udev's links"),
    ])
    func malformedIDsAreRefusedSayingWhatIsWrong(name: String, says: String) {
        do {
            _ = try DeviceName(parsing: name)
            Issue.record("\(name) parsed")
        } catch {
            #expect("\(error)".contains(says), "\(error)")
        }
    }

    @Test func namesByProbeOrderAreNotStable() {
        let stable = ["usb:0d8c:0014:p=0000:00:14.0-1.2", "/dev/snd/by-id/x", "plughw:CARD=Device,DEV=0", "default", "pulse", "dsnoop:CARD=PCH"]
        let unstable = ["hw:1,0", "plughw:1", "plughw:CARD=Device_1,DEV=0", "hw:CARD=2,DEV=0", "sysdefault:Device_2"]
        for name in stable { #expect((try? DeviceName(parsing: name))?.isStable == true, "\(name)") }
        for name in unstable { #expect((try? DeviceName(parsing: name))?.isStable == false, "\(name)") }
        let fixture = Self.station()
        let warning = SoundDevices.unstableNameWarning("plughw:CARD=Device_1,DEV=0", roots: Self.roots(fixture))
        #expect(warning?.contains("write device = \"usb:0d8c:0014:p=0000:00:14.0-1.3\"") == true, "\(warning ?? "")")
        #expect(SoundDevices.unstableNameWarning(Self.left.portID, roots: Self.roots(fixture)) == nil)
    }

    /// The card that opened is the card that was meant: a replug between the resolution and the
    /// open gives the number to another card, which the check after the open catches; the next
    /// resolution finds the card at its new number.
    @Test func aCardThatChangesBetweenResolutionAndOpenIsCaught() throws {
        let fixture = SoundCardFixture()
        fixture.plug(card: 1, id: "Device", usb: Self.left)
        fixture.plug(card: 2, id: "Device_1", usb: Self.right)
        var opened: [String] = []
        let (pcm, resolution) = try SoundDevices.open(Self.right.portID, roots: Self.roots(fixture)) { name throws(ALSAError) in
            opened.append(name)
            if opened.count == 1 {
                // The two microphones replugged the other way round while recd was opening card 2.
                fixture.unplug(card: 1)
                fixture.unplug(card: 2)
                fixture.plug(card: 1, id: "Device", usb: Self.right)
                fixture.plug(card: 2, id: "Device_1", usb: Self.left)
            }
            return try CapturePCM(name: "null")
        }
        #expect(opened == ["plughw:2,0", "plughw:1,0"])
        #expect(resolution.card?.index == 1)
        #expect(pcm.name == "null")

        // Swapped on every open: after three tries, an error that says so.
        var flips = 0
        do {
            _ = try SoundDevices.open(Self.left.portID, roots: Self.roots(fixture)) { _ throws(ALSAError) in
                flips += 1
                let (a, b) = flips % 2 == 1 ? (Self.left, Self.right) : (Self.right, Self.left)
                fixture.unplug(card: 1)
                fixture.unplug(card: 2)
                fixture.plug(card: 1, id: "Device", usb: a)
                fixture.plug(card: 2, id: "Device_1", usb: b)
                return try CapturePCM(name: "null")
            }
            Issue.record("a card that changed at every open was taken")
        } catch {
            #expect(flips == 3)
            #expect(error.function == "resolve")
            #expect(error.detail?.contains("changed while it was being opened") == true, "\(error)")
        }
    }

    /// The watch sees a card plugged in (its node created), its group set (an attribute
    /// change), udev's database written, and /dev/snd itself appearing; nothing when nothing changes.
    @Test func theWatchSeesCardsComeAndGo() throws {
        let fixture = SoundCardFixture()
        try FileManager.default.removeItem(atPath: fixture.directory.file("dev/snd"))
        let queue = DispatchQueue(label: "watch")
        let count = LockedCounter()
        let watch = try #require(SoundCardWatch(roots: Self.roots(fixture), queue: queue) { count.increment() })
        defer { watch.cancel() }
        fixture.plug(card: 1, id: "Device", usb: Self.left)  // creates /dev/snd, then its nodes
        #expect(waitUntil(timeout: 5) { count.value >= 1 })
        var before = count.value
        chmod(fixture.directory.file("dev/snd/pcmC1D0c"), 0o660)
        #expect(waitUntil(timeout: 5) { count.value > before }, "the node's attributes changed")
        before = count.value
        fixture.unplug(card: 1)
        #expect(waitUntil(timeout: 5) { count.value > before }, "the card went")
        before = count.value
        try "E:SOUND_INITIALIZED=1\n".write(toFile: fixture.directory.file("run/udev/data/+sound:card7"), atomically: true, encoding: .utf8)
        #expect(waitUntil(timeout: 5) { count.value > before }, "udev's database: written by rename")
        // A node created by one call (one event, IN_CREATE), and waited for from the count
        // before it: a late callback of the step before must not stand in for it.
        before = count.value
        close(open(fixture.directory.file("dev/snd/seq"), O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
        #expect(waitUntil(timeout: 5) { count.value > before })
        before = count.value
        try "x".write(toFile: fixture.directory.file("run/udev/data/c189:1"), atomically: true, encoding: .utf8)
        try "x".write(toFile: fixture.directory.file("dev/ttyUSB0"), atomically: true, encoding: .utf8)
        // One sound change after them (a single event): once it is seen, they were read before it.
        chmod(fixture.directory.file("dev/snd/seq"), 0o660)
        #expect(waitUntil(timeout: 5) { count.value > before })
        #expect(count.value == before + 1, "what is not a sound card is not a change")
    }

    @Test func udevsDatabaseSaysWhenACardIsReady() throws {
        let fixture = SoundCardFixture()
        let roots = Self.roots(fixture)
        fixture.plug(card: 1, id: "Device", usb: Self.left)
        #expect(SoundCardScan.isInitialized(card: 1, roots: roots))
        try "I:1\nE:ID_BUS=usb\n".write(toFile: fixture.directory.file("run/udev/data/+sound:card1"), atomically: true, encoding: .utf8)
        #expect(!SoundCardScan.isInitialized(card: 1, roots: roots), "udev is not done with it")
        #expect(SoundCardScan.isInitialized(card: 9, roots: roots), "no entry: nothing to wait for")
    }
}

final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
