import ALSA
import Testing

/// Stable device names: the card id in a PCM's name, and the cards present.
@Suite("device names")
struct DeviceNameTests {
    @Test(arguments: [
        ("hw:CARD=PCH,DEV=0", "PCH"), ("plughw:CARD=Device,DEV=0", "Device"), ("dsnoop:CARD=USB", "USB"),
        ("sysdefault:CARD=Microphone", "Microphone"), ("default", nil), ("hw:1,0", nil), ("pulse", nil),
    ] as [(String, String?)])
    func theCardIDIsReadFromThePCMName(name: String, id: String?) {
        #expect(DeviceHint.cardID(in: name) == id)
    }

    @Test func soundCardsListsWhatTheKernelHas() {
        // No sound card on a build machine: the list must match /proc/asound/cards either way.
        let cards = CapturePCM.soundCards()
        let proc = (try? String(contentsOfFile: "/proc/asound/cards", encoding: .utf8)) ?? ""
        let lines = proc.split(separator: "\n").filter { $0.first == " " && $0.contains("[") }
        #expect(cards.count == lines.count, "\(cards) vs \(proc)")
        for card in cards {
            #expect(proc.contains("\(card.index) [\(card.id)"), "\(card)")
        }
    }
}
