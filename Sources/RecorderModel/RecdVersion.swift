/// The version recd and recctl report, and that every file recd writes names as its originator.
///
/// The project's one version: `make deb` names the Debian package after it (the Makefile reads
/// `current` from this file), so a release changes it here and nowhere else.
public enum RecdVersion {
    public static let current = "0.1.0"

    /// What `recd --version` and `recctl --version` print: the version and, when the build
    /// passed one in (CBuildInfo, written by `make`), the commit it was built from —
    /// "0.1.0 (commit 1a2b3c4d5e6f)", or "0.1.0" for a plain `swift build`.
    public static func withCommit(_ commit: String) -> String {
        commit.isEmpty ? current : "\(current) (commit \(commit))"
    }
}
