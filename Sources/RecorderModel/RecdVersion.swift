/// The version recd and recctl report, and that every file recd writes names as its originator.
public enum RecdVersion {
    public static let current = "0.1.0"
}
