import RecorderCore
import RecorderModel
import TOML

/// One of the station's sources (doc/architecture.md, "A station and its sources"): a name,
/// and the station's configuration with the source's own `[[source]]` keys read over it.
public struct SourceConfiguration: Equatable, Sendable {
    public var name: String
    /// The file and line of its `[[source]]` header; nil for the implicit source.
    public var file: String?
    public var line: Int?
    /// The station's configuration as the file set it before this `[[source]]`, with the
    /// source's own keys (device, `[capture]`, `[recording]`, `[segments]`, `[autostart]`,
    /// `[listen]`, `[trigger]`, `[schedule]`) read over it: what its recorder runs with
    /// (`DaemonConfiguration.recorderConfiguration(for:)`).
    public var configuration: DaemonConfiguration
}

extension DaemonConfiguration {
    /// The implicit source's name: a configuration without `[[source]]` tables.
    public static let defaultSourceName = "default"

    /// The station's sources: the `[[source]]` tables in the file's order, or the implicit
    /// source (`default`) that a configuration without them describes.
    public var sources: [SourceConfiguration] {
        declaredSources.isEmpty ? [SourceConfiguration(name: Self.defaultSourceName, file: nil, line: nil, configuration: self)] : declaredSources
    }

    /// A source's name is a folder, an MQTT topic level, a URL path segment and a metrics label
    /// as it is: 1 to 32 of a-z, 0-9, `_` and `-`, beginning with a letter or a digit.
    public static func sourceNameRefusal(_ name: String) -> String? {
        let bytes = Array(name.utf8)
        let allowed = { (byte: UInt8) in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        }
        guard (1...32).contains(bytes.count), allowed(bytes[0]),
              bytes.allSatisfy({ allowed($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }) else {
            return "'\(name)' is not a source name: 1 to 32 of a-z, 0-9, _ and -, beginning with a letter or a digit"
        }
        return nil
    }

    /// `[[source]]`: each element's keys over a copy of the station's source keys (the top
    /// level's are every source's defaults). A bad key is named `source "east": recording.format`
    /// at its line.
    mutating func applySources(_ elements: [(line: Int, element: TOMLDocument)], file: String,
                               topLevelDevice: Int?) throws(ConfigurationError) {
        guard !elements.isEmpty else { return }
        if let topLevelDevice {
            throw ConfigurationError(file: file, line: topLevelDevice, key: "device",
                                     message: "with [[source]] tables each source names its own device; a top-level device is for a station of one")
        }
        var sources: [SourceConfiguration] = []
        for (line, element) in elements {
            let reader = KeyReader(document: element, file: file)
            var name = ""
            try reader.read("name") { (value: String) throws(ConfigurationError) in
                if let refusal = Self.sourceNameRefusal(value) { throw reader.invalid("name", refusal) }
                name = value
            }
            guard !name.isEmpty else {
                throw ConfigurationError(file: file, line: line, key: "source", message: "each [[source]] needs a name (name = \"east\")")
            }
            if let other = sources.first(where: { $0.name == name }) {
                throw ConfigurationError(file: file, line: reader.line(of: "name"), key: "source \"\(name)\"",
                                         message: "another [[source]] (line \(other.line ?? 0)) has this name")
            }
            var source = self
            source.declaredSources = []
            source.device = "default"
            source.deviceFile = nil
            source.deviceLine = nil
            do throws(ConfigurationError) {
                try source.applySourceKeys(reader)
                try reader.rejectUnknownKeys(arrays: [], stationTables: Self.stationTables, stationKeys: ["recordings_dir", "socket", "log_level"])
            } catch {
                var error = error
                error.key = "source \"\(name)\"" + (error.key.map { ": " + $0 } ?? "")
                throw error
            }
            if source.deviceFile == nil {
                throw ConfigurationError(file: file, line: line, key: "source \"\(name)\"",
                                         message: "needs a device (device = \"usb:…\", a /dev/snd/by-id name or an ALSA name)")
            }
            if let other = sources.first(where: { $0.configuration.device == source.device }) {
                throw ConfigurationError(file: file, line: source.deviceLine, key: "source \"\(name)\": device",
                                         message: "source \"\(other.name)\" records '\(source.device)' already; a device is one source")
            }
            sources.append(SourceConfiguration(name: name, file: file, line: line, configuration: source))
        }
        declaredSources = sources
    }

    /// Tables that are the station's: named in a `[[source]]`, they are an error that says so.
    static let stationTables: Set<String> = ["server", "metering", "storage", "retention", "mqtt", "hooks", "web", "rtsp"]

    /// The recorder of `source`: its configuration (the station's, read before its
    /// `[[source]]`, with its own keys over them), in its folder of the station's recordings
    /// directory as it stands now (the command line's `--recordings-dir` sets it after the
    /// file is read).
    public func recorderConfiguration(for source: SourceConfiguration) -> RecorderConfiguration {
        var configuration = source.configuration
        configuration.recordingsDirectory = recordingsDirectory(for: source.name)
        return configuration.recorderConfiguration.named(source.name)
    }

    /// A station of one `[[source]]` runs it as the implicit source would be run: its keys
    /// become the configuration's own. Several stay as they are: each runs with
    /// `recorderConfiguration(for:)`, in a folder of its own.
    public mutating func adoptTheOnlySource() {
        guard declaredSources.count == 1, case let only = declaredSources[0] else { return }
        self = only.configuration
        declaredSources = [only]
    }

    /// Where `source` writes: the recordings directory for a station of one, else its folder in it.
    public func recordingsDirectory(for source: String) -> String {
        declaredSources.count > 1 ? recordingsDirectory + "/" + source : recordingsDirectory
    }
}

extension RecorderConfiguration {
    /// This configuration for the source `name`.
    func named(_ name: String) -> RecorderConfiguration {
        var configuration = self
        configuration.sourceName = name
        return configuration
    }
}
