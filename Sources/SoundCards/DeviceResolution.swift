/// A device name resolved against the cards present: the ALSA name to open now, and the card.
/// Done on every open and reopen (a card's number is only good until the next replug), and
/// checked again once the PCM is open.
public struct DeviceResolution: Sendable, Equatable {
    /// The name as configured.
    public var name: DeviceName
    public var text: String
    /// What to hand `snd_pcm_open`.
    public var pcmName: String
    /// The card it is on, when the name leads to one that is present.
    public var card: SoundCardScan.Card?
}

/// The ids that name one card, for `recctl devices` and for messages that say what to write.
public struct StableIDs: Sendable, Equatable {
    /// `usb:VID:PID:s=SERIAL`: when the card has a serial no other present card shares.
    public var serial: String?
    /// `usb:VID:PID:p=PORT`: the port it is plugged into.
    public var port: String?
    /// udev's links.
    public var links: [String]
    /// What to write in recd.toml: the serial form, else the port form, else the card's id
    /// (a card that is not USB keeps its id), else a udev link.
    public var recommended: String
}

extension SoundCardScan {
    /// The ids that name `card` alone among the cards present.
    public func stableIDs(of card: Card) -> StableIDs {
        guard let usb = card.usb else {
            let byID = "plughw:CARD=\(card.id),DEV=\(card.capturePCMs.first ?? 0)"
            let stable = (try? DeviceName(parsing: byID))?.isStable ?? false
            return StableIDs(serial: nil, port: nil, links: card.links,
                             recommended: stable ? byID : (card.links.first { $0.contains("/by-path/") } ?? byID))
        }
        // Two cards on one USB device (two audio functions) need the interface too.
        let sameDevice = cards.filter { $0.usb?.port == usb.port }.count > 1
        let interface = sameDevice ? ":if=\(usb.interface)" : ""
        let base = "usb:\(usb.vendor):\(usb.product)"
        let port = base + ":p=" + usb.port + interface
        var serial: String?
        if let value = usb.usableSerial {
            let sharing = cards.filter { other in
                guard let o = other.usb else { return false }
                return o.vendor == usb.vendor && o.product == usb.product && o.serial == value && o.port != usb.port
            }
            if sharing.isEmpty { serial = base + ":s=" + value + interface }
        }
        return StableIDs(serial: serial, port: port, links: card.links, recommended: serial ?? port)
    }

    /// The card and PCM `text` names now. Throws when it names no card present (yet), several
    /// (never a guess), or is not a device id at all.
    public func resolve(_ text: String, roots: SystemRoots) throws(SoundCardError) -> DeviceResolution {
        let name = try DeviceName(parsing: text)
        switch name {
        case .alsa(let pcm):
            let card: Card? = switch name.cardReference {
            case .index(let index): self.card(index: index)
            case .id(let id): self.card(id: id)
            case nil: nil
            }
            return DeviceResolution(name: name, text: text, pcmName: pcm, card: card)
        case .link(let path):
            guard let target = FileSystem.linkTarget(roots.devicePath(path)) else {
                throw .notPresent(text, "no such link: the card is not plugged in, or udev has not named it yet")
            }
            guard let index = Self.controlCard(target), let card = card(index: index) else {
                throw .notPresent(text, "the link leads to \(target), which is not a sound card present")
            }
            return DeviceResolution(name: name, text: text, pcmName: card.pcmName, card: card)
        case .usb(let selector):
            let matching = cards.filter { $0.usb.map(selector.matches) ?? false }
            guard let card = matching.first else {
                var what = "no USB sound card \(selector.vendor):\(selector.product)"
                if let serial = selector.serial { what += " with serial \(serial)" }
                if let port = selector.port { what += " on port \(port)" }
                if let interface = selector.interface { what += " interface \(interface)" }
                throw .notPresent(text, what + " is plugged in")
            }
            guard matching.count == 1 else {
                throw .ambiguous(text, matching.map { card in
                    let ids = stableIDs(of: card)
                    return SoundCardError.Candidate(index: card.index, id: card.id, stableID: ids.port ?? ids.recommended)
                })
            }
            return DeviceResolution(name: name, text: text, pcmName: card.pcmName, card: card)
        }
    }

    /// Once the PCM is open: the card that opened is the card that was meant. `openedCard` is
    /// the PCM's own card number (nil when the PCM does not say: a sound server's); the card
    /// the name resolved to must still be what the name says, now.
    public static func verify(_ resolution: DeviceResolution, openedCard: Int?, roots: SystemRoots) throws(SoundCardError) {
        guard let expected = resolution.card else { return }
        if let openedCard, openedCard != expected.index {
            throw .changed(resolution.text, "card \(openedCard) opened, card \(expected.index) was meant")
        }
        switch resolution.name {
        case .alsa:
            return
        case .link(let path):
            let now = controlCard(FileSystem.linkTarget(roots.devicePath(path)))
            guard now == expected.index else {
                throw .changed(resolution.text, "the link now leads to \(now.map { "card \($0)" } ?? "nothing"), not card \(expected.index)")
            }
        case .usb(let selector):
            let now = SoundCardScan(roots: roots).card(index: expected.index)
            guard let usb = now?.usb, selector.matches(usb), usb.port == expected.usb?.port else {
                throw .changed(resolution.text, "card \(expected.index) is no longer that device")
            }
        }
    }
}
