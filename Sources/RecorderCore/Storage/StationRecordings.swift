import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import RecorderModel

/// The recordings of a station's sources, for the limits that are the station's: retention
/// and the disk's free space are over every source's folder at once (doc/architecture.md, "A
/// station and its sources"). Each source's `StorageGuard` joins it; any source's pass lists
/// every folder, deletes what is due from whichever folder holds it (fairly:
/// `RetentionPlan.due(groups:…)`), and announces each deletion on the source whose file it was.
/// A station of one source has none.
public final class StationRecordings: Sendable {
    struct Member: Sendable {
        let directory: String
        /// The final path of the file the source is writing, if any (never listed).
        let active: @Sendable () -> String?
        /// Announces a deletion as the source's (its `retention` topic).
        let deleted: @Sendable (RetentionDeletion) -> Void
        /// The source's folder changed under it: it rescans for its totals.
        let changed: @Sendable () -> Void
        let logger: Logger

        func owns(_ path: String) -> Bool { path.hasPrefix(directory + "/") }
    }

    private let members = NIOLockedValueBox<[Member]>([])
    /// One retention pass at a time over the whole station.
    let passLock = NIOLock()

    public init() {}

    func join(_ member: Member) { members.withLockedValue { $0.append(member) } }

    var all: [Member] { members.withLockedValue { $0 } }
}
