import FoundationEssentials
import Glibc
import RecdProtocol
import Testing

/// recd's one spelling of durations and the ranges every way in checks numbers against.
@Suite("durations and ranges")
struct LimitsTests {
    @Test(arguments: [
        ("90", 90.0), ("1.5", 1.5), ("500ms", 0.5), ("90s", 90), ("30m", 1800), ("30min", 1800), ("1h", 3600),
        ("1h30m", 5400), ("1.5 h", 5400), ("30d", 2_592_000), ("2w", 1_209_600), ("1:30", 90), ("01:02:03.5", 3723.5),
        ("100:00:00", 360_000), (" 5 s ", 5),
    ])
    func aDurationIsReadTheSameWayEverywhere(text: String, seconds: Double) {
        #expect(DurationText.seconds(text) == seconds)
    }

    @Test(arguments: ["", "0", "0s", "-5", "-1h", "1e3", "inf", "nan", "1x", "h", "1:60", "99:99:99", "1:2:3:4", "1.5:00",
                      ":30", "1h-5m", "..5", "1..5s", "0x10"])
    func whatIsNotADurationIsRefused(text: String) {
        #expect(DurationText.seconds(text) == nil)
    }

    @Test func aStartOutOfRangeIsRefusedNamingTheParameterAndTheRange() {
        #expect(StartParams(duration: 2e14).rangeRefusal() == "'duration' must be between 0.001 and 31622400 seconds, not 200000000000000")
        #expect(StartParams(duration: .infinity).rangeRefusal()?.hasPrefix("'duration' must be a finite number") == true)
        #expect(StartParams(sampleRate: 0).rangeRefusal() == "'sampleRate' must be between 1000 and 768000 Hz, not 0")
        #expect(StartParams(channels: 9).rangeRefusal() == "'channels' must be between 1 and 8, not 9")
        #expect(StartParams(bitDepth: 8).rangeRefusal() == "'bitDepth' must be 16, 24 or 32, not 8")
        #expect(StartParams(segmentLength: 0.5).rangeRefusal()
                == "'segmentLength' must be 0 (one file) or between 1 and 86400 seconds, not 0.5")
        #expect(StartParams(at: Date(timeIntervalSince1970: 1e308)).rangeRefusal()?.hasPrefix("'at' must be") == true)
        #expect(StartParams(at: Date(timeIntervalSince1970: -1)).rangeRefusal()?.hasPrefix("'at' must be") == true)
        // The edges themselves are in range.
        #expect(StartParams(sampleRate: 1000, channels: 8, bitDepth: 24, bitRate: 6000, duration: 31_622_400,
                            at: Date().addingTimeInterval(86400), segmentLength: 0).rangeRefusal() == nil)
        #expect(StartParams(duration: 0.001, segmentLength: 86400).rangeRefusal() == nil)
    }

    @Test func m4aIsAFormatName() throws {
        #expect(AudioFileFormat(name: "m4a") == .aac)
        #expect(AudioFileFormat(name: "FLAC") == .flac)
        #expect(AudioFileFormat(name: "mp4") == nil)
        let params = try WireCoding.decoder().decode(StartParams.self, from: Data(#"{"format":"m4a"}"#.utf8))
        #expect(params.format == .aac)
        // It is written back by its own name.
        #expect(String(decoding: try WireCoding.encoder().encode(AudioFileFormat.aac), as: UTF8.self) == #""aac""#)
    }
}

/// Where clients look for the user instance's socket without XDG_RUNTIME_DIR: only in a
/// `/tmp/recd-<uid>` that is the user's own and private.
@Suite("socket location")
struct SocketLocationTests {
    @Test func theTmpFallbackIsTrustedOnlyWhenItIsTheUsersOwnPrivateDirectory() throws {
        let uid = uid_t(40000 + UInt32.random(in: 0..<20000))
        let directory = "/tmp/recd-\(uid)"
        defer { rmdir(directory) }
        let everyone = { (_: String) in true }
        // Absent: the system socket.
        #expect(SocketLocation.forClient(environment: [:], uid: uid, exists: everyone) == SocketLocation.system)
        // Made by someone else (here root, as any local user could): not trusted.
        #expect(mkdir(directory, 0o700) == 0)
        #expect(SocketLocation.forClient(environment: [:], uid: uid, exists: everyone) == SocketLocation.system)
        #expect(SocketLocation.prepareFallback(for: directory + "/recd/recd.sock", uid: uid)?.contains("not a private directory") == true)
        // The user's own, mode 0700: trusted; writable by others: not.
        #expect(chown(directory, uid, gid_t(uid)) == 0)
        #expect(SocketLocation.forClient(environment: [:], uid: uid, exists: everyone) == directory + "/recd/recd.sock")
        #expect(chmod(directory, 0o777) == 0)
        #expect(SocketLocation.forClient(environment: [:], uid: uid, exists: everyone) == SocketLocation.system)
        // XDG_RUNTIME_DIR (made by the login manager) is taken as it is.
        #expect(SocketLocation.forClient(environment: ["XDG_RUNTIME_DIR": "/run/user/7"], uid: uid, exists: everyone)
                == "/run/user/7/recd/recd.sock")
    }
}
