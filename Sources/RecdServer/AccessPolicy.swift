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
public struct AccessPolicy: Sendable, Equatable {
    public var controlUIDs: Set<uid_t>
    public var controlGIDs: Set<gid_t>
    public var daemonUID: uid_t

    public init(controlUIDs: Set<uid_t> = [], controlGIDs: Set<gid_t> = [], daemonUID: uid_t = getuid()) {
        self.controlUIDs = controlUIDs
        self.controlGIDs = controlGIDs
        self.daemonUID = daemonUID
    }

    public func permissions(of peer: PeerCredentials) -> Set<Permission> {
        if peer.uid == 0 || peer.uid == daemonUID || controlUIDs.contains(peer.uid) { return [.observe, .control] }
        if !controlGIDs.isEmpty, !controlGIDs.isDisjoint(with: Self.groups(of: peer)) { return [.observe, .control] }
        return [.observe]
    }

    /// The peer's primary group and the supplementary groups its user is listed in.
    static func groups(of peer: PeerCredentials) -> Set<gid_t> {
        var groups: Set<gid_t> = [peer.gid]
        // getpwuid_r is reentrant; getgrouplist walks NSS state that is not: one at a time.
        nssLock.withLockedValue { _ in
            var passwd = passwd()
            var result: UnsafeMutablePointer<passwd>?
            var storage = [CChar](repeating: 0, count: 16_384)
            guard getpwuid_r(peer.uid, &passwd, &storage, storage.count, &result) == 0, result != nil,
                  let name = passwd.pw_name else { return }
            var count: Int32 = 64
            var list = [gid_t](repeating: 0, count: Int(count))
            if getgrouplist(name, peer.gid, &list, &count) < 0 {
                list = [gid_t](repeating: 0, count: Int(count))
                _ = getgrouplist(name, peer.gid, &list, &count)
            }
            groups.formUnion(list.prefix(Int(max(0, count))))
        }
        return groups
    }

    private static let nssLock = NIOLockedValueBox(())
}
