import Glibc
import NIOConcurrencyHelpers
import RecdProtocol

/// Who is on the other end of a connection, from SO_PEERCRED (the kernel's word, not the client's).
public struct PeerCredentials: Sendable, Equatable {
    public var pid: pid_t
    public var uid: uid_t
    public var gid: gid_t

    public init(pid: pid_t, uid: uid_t, gid: gid_t) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}

/// Decides what a peer may do: everyone who can connect may observe; control needs root, the
/// daemon's own uid, a listed uid, or membership (primary or supplementary) of a listed group.
/// Hearing the input (`tap`) is a permission of its own, as audio is more sensitive than state:
/// root, the daemon's uid, members of the daemon's group, and the uids and groups listed for it.
public struct AccessPolicy: Sendable, Equatable {
    public var controlUIDs: Set<uid_t>
    public var controlGIDs: Set<gid_t>
    public var tapUIDs: Set<uid_t>
    public var tapGIDs: Set<gid_t>
    public var daemonUID: uid_t
    public var daemonGID: gid_t

    public init(controlUIDs: Set<uid_t> = [], controlGIDs: Set<gid_t> = [], tapUIDs: Set<uid_t> = [],
                tapGIDs: Set<gid_t> = [], daemonUID: uid_t = getuid(), daemonGID: gid_t = getgid()) {
        self.controlUIDs = controlUIDs
        self.controlGIDs = controlGIDs
        self.tapUIDs = tapUIDs
        self.tapGIDs = tapGIDs
        self.daemonUID = daemonUID
        self.daemonGID = daemonGID
    }

    public func permissions(of peer: PeerCredentials) -> Set<Permission> {
        if peer.uid == 0 || peer.uid == daemonUID { return [.observe, .control, .tap] }
        var permissions: Set<Permission> = [.observe]
        // Groups are looked up (NSS) only when a group could grant something.
        let groups = Self.groups(of: peer)
        if controlUIDs.contains(peer.uid) || !controlGIDs.isDisjoint(with: groups) { permissions.insert(.control) }
        if tapUIDs.contains(peer.uid) || !tapGIDs.union([daemonGID]).isDisjoint(with: groups) { permissions.insert(.tap) }
        return permissions
    }

    /// The peer's primary group and the supplementary groups its user is listed in.
    static func groups(of peer: PeerCredentials) -> Set<gid_t> {
        var groups: Set<gid_t> = [peer.gid]
        // getpwuid_r is reentrant; getgrouplist walks NSS state that is not: one at a time.
        nssLock.withLockedValue { _ in
            var passwd = passwd()
            var result: UnsafeMutablePointer<passwd>?
            var storage = [CChar](repeating: 0, count: 16_384)
            // The user's name points into `storage`: used while that buffer is held, not after an
            // `&storage` call has returned (then it may be gone: Debian's Swift 6.2 build of recd
            // passed getgrouplist a dangling name, and every group but the primary was lost).
            storage.withUnsafeMutableBufferPointer { buffer in
                guard let base = buffer.baseAddress, getpwuid_r(peer.uid, &passwd, base, buffer.count, &result) == 0, result != nil,
                      let name = passwd.pw_name else { return }
                var count: Int32 = 64
                var list = [gid_t](repeating: 0, count: Int(count))
                if getgrouplist(name, peer.gid, &list, &count) < 0 {
                    list = [gid_t](repeating: 0, count: Int(count))
                    _ = getgrouplist(name, peer.gid, &list, &count)
                }
                groups.formUnion(list.prefix(Int(max(0, count))))
            }
        }
        return groups
    }

    private static let nssLock = NIOLockedValueBox(())
}
