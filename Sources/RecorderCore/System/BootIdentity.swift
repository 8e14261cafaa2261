import FoundationEssentials
import Glibc

/// Which boot this is: what lets a file's place on the boot clock (`UnsynchronizedStart`)
/// be trusted after recd restarts, and never across a reboot, when the boot clock starts over.
enum BootIdentity {
    /// The kernel's boot id where it can be read; under recd.service (`ProcSubset=pid` hides
    /// /proc/sys) an id of recd's own in its runtime directory (`RUNTIME_DIRECTORY`, /run/recd:
    /// a tmpfs, kept across recd's restarts by `RuntimeDirectoryPreserve=yes`, gone at a
    /// reboot). Nil when neither is there: files are then re-dated by the run that made them only.
    static let current: String? = kernelBootId() ?? runtimeBootId(environment: ProcessInfo.processInfo.environment)

    static func kernelBootId() -> String? {
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else { return nil }
        let id = text.filter { !$0.isWhitespace }
        return id.isEmpty ? nil : id
    }

    /// `RUNTIME_DIRECTORY/boot-id`, made (exclusively: two starts at once agree) if it is not there.
    static func runtimeBootId(environment: [String: String]) -> String? {
        guard let directory = environment["RUNTIME_DIRECTORY"]?.split(separator: ":").first.map(String.init),
              !directory.isEmpty else { return nil }
        let path = directory + "/boot-id"
        let fresh = "recd-" + UUID().uuidString.lowercased()
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        if descriptor >= 0 {
            let bytes = Array((fresh + "\n").utf8)
            let wrote = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            close(descriptor)
            if wrote == bytes.count { return fresh }
            unlink(path)
            return nil
        }
        guard errno == EEXIST, let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let id = text.filter { !$0.isWhitespace }
        return id.isEmpty ? nil : id
    }
}
