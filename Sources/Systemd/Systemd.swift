import CSystemd
import Glibc

/// The parts of libsystemd recd uses: sd_notify, the watchdog setting, socket activation,
/// systemd-timedated's word on the clock. All of them are harmless no-ops when the process
/// does not run under systemd.
public enum Systemd {
    /// Sends a state string (`READY=1`, `STATUS=…`, `WATCHDOG=1`, `STOPPING=1`) to the service
    /// manager. Returns false when there is no manager to tell (NOTIFY_SOCKET unset).
    @discardableResult
    public static func notify(_ state: String) -> Bool {
        sd_notify(0, state) > 0
    }

    /// The watchdog timeout systemd expects pings within, if it set one for this process.
    public static func watchdogTimeout() -> Duration? {
        var usec: UInt64 = 0
        guard sd_watchdog_enabled(0, &usec) > 0, usec > 0 else { return nil }
        return .microseconds(Int64(usec))
    }

    /// A socket passed by systemd socket activation.
    public struct ListenDescriptor: Sendable, Equatable {
        public var fd: Int32
        /// FileDescriptorName= from the .socket unit (systemd names it after the unit when unset).
        public var name: String
    }

    /// The sockets systemd passed (LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES), and unsets those
    /// variables so children do not inherit them.
    public static func listenDescriptors() -> [ListenDescriptor] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return [] }
        defer {
            if let names {
                for index in 0..<Int(count) { free(names[index]) }
                free(names)
            }
        }
        return (0..<Int(count)).map { index in
            let name = names?[index].map { String(cString: $0) } ?? "unknown"
            return ListenDescriptor(fd: SD_LISTEN_FDS_START + Int32(index), name: name)
        }
    }

    /// systemd-timedated's `NTPSynchronized` (org.freedesktop.timedate1 on the system bus; the
    /// bus starts timedated on demand): whether the kernel considers the clock synchronized, as
    /// timedated reads it outside recd's sandbox (adjtimex's STA_UNSYNC, whoever disciplines the
    /// clock: chrony, ntpd, timesyncd). Nil when there is no system bus or no timedated, or
    /// neither answered within `timeout` seconds. Blocks: call it off any event loop.
    public static func timedatedSaysNTPSynchronized(timeout: Double = 2) -> Bool? {
        var bus: OpaquePointer?
        guard sd_bus_open_system(&bus) >= 0, let bus else { return nil }
        defer { _ = sd_bus_flush_close_unref(bus) }
        _ = sd_bus_set_method_call_timeout(bus, UInt64(timeout * 1_000_000))
        var error = sd_bus_error()
        defer { sd_bus_error_free(&error) }
        var value: Int32 = 0
        let result = sd_bus_get_property_trivial(bus, "org.freedesktop.timedate1", "/org/freedesktop/timedate1",
                                                 "org.freedesktop.timedate1", "NTPSynchronized", &error,
                                                 CChar(UInt8(ascii: "b")), &value)
        return result >= 0 ? value != 0 : nil
    }

    /// Whether `fd` is a listening Unix stream socket, as socket activation for recd must pass.
    public static func isListeningUnixSocket(_ fd: Int32) -> Bool {
        sd_is_socket_unix(fd, SOCK_STREAM.rawValue.signedInt, 1, nil, 0) > 0
    }
}

private extension UInt32 {
    var signedInt: Int32 { Int32(bitPattern: self) }
}
