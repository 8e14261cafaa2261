import RecdProtocol
import RecorderCore

/// The station's sources, each a name and its Recorder (doc/architecture.md, "A station and
/// its sources"), in the configuration's order. A request that acts on a source names it in
/// `source`, or means the only one; this is where the name becomes the recorder.
public struct Station: Sendable {
    public struct Source: Sendable {
        public let name: String
        public let recorder: Recorder

        public init(name: String, recorder: Recorder) {
            self.name = name
            self.recorder = recorder
        }
    }

    /// Never empty.
    public let sources: [Source]

    public init(sources: [Source]) {
        precondition(!sources.isEmpty, "a station has a source")
        self.sources = sources
    }

    /// A station of one recorder, the implicit source (`default`).
    public init(recorder: Recorder, name: String = "default") {
        self.init(sources: [Source(name: name, recorder: recorder)])
    }

    public var names: [String] { sources.map(\.name) }

    /// The source `name` names; without a name, the only one.
    public func source(named name: String?) throws(RPCError) -> Source {
        guard let name else {
            guard sources.count == 1 else { throw .ambiguousSource(sources: names) }
            return sources[0]
        }
        guard let source = sources.first(where: { $0.name == name }) else { throw .unknownSource(name, sources: names) }
        return source
    }
}
