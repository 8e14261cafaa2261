import CALSA
import Glibc

/// libasound's own error messages ("ALSA lib confmisc.c:165:(snd_config_get_card) Cannot get
/// card index for 9"), which it would print to stderr on every failed open: a daemon retrying
/// a missing device every second or so would fill its log with them. They are kept instead,
/// per thread, and the one a failed call left becomes part of its `ALSAError` (`detail`).
enum LibraryMessages {
    /// Routes libasound's messages here; done once, before the first open.
    static let routed: Void = recd_alsa_route_library_messages()

    /// The last message libasound reported on this thread since `clear()`.
    static var last: String? { slot().message }

    static func clear() { slot().message = nil }

    static func record(_ message: String) {
        let slot = slot()
        // The first message says what went wrong; later ones are its consequences. Some end
        // with a newline of their own (the pulse plugin's "Connection refused\n").
        if slot.message == nil {
            var message = Substring(message)
            while let last = message.last, last.isNewline || last == " " { message.removeLast() }
            slot.message = String(message)
        }
    }

    /// One per thread: libasound reports on the thread whose call failed.
    private final class Slot {
        var message: String?
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { pointer in
            if let pointer { Unmanaged<Slot>.fromOpaque(pointer).release() }
        }
        return key
    }()

    private static func slot() -> Slot {
        if let pointer = pthread_getspecific(key) { return Unmanaged<Slot>.fromOpaque(pointer).takeUnretainedValue() }
        let slot = Slot()
        pthread_setspecific(key, Unmanaged.passRetained(slot).toOpaque())
        return slot
    }
}

@_cdecl("recd_alsa_library_message")
func receiveLibraryMessage(_ message: UnsafePointer<CChar>?) {
    guard let message else { return }
    LibraryMessages.record(String(cString: message))
}
