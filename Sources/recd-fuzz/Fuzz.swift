// The readers of untrusted input, under libFuzzer: the request parser (every line a client
// sends) and the configuration reader (the TOML file), the RecdConfiguration library recd
// itself reads its file with. `make fuzz` builds this with
// -DFUZZING and libFuzzer; built plainly it replays inputs given as arguments (the corpus,
// or a crash file), which `make test` does too.
import FoundationEssentials
import RecdConfiguration
import RecdProtocol
import RecorderModel

/// Which readers run: RECD_FUZZ=parser or config, both when unset.
let fuzzedReaders = ProcessInfo.processInfo.environment["RECD_FUZZ"].map { Set($0.split(separator: ",").map(String.init)) }
    ?? ["parser", "config"]

/// Runs one input through the readers. Any crash, trap or hang here is a bug.
func readUntrusted(_ bytes: UnsafeRawBufferPointer) {
    if fuzzedReaders.contains("parser") {
        switch RequestParser.parse(bytes) {
        case .single(.request(let request)): readParams(request)
        case .batch(let items):
            _ = items.compactMap(\.errorResponse)
            for case .request(let request) in items { readParams(request) }
        default: break
        }
    }
    if fuzzedReaders.contains("config"), let text = String(validating: bytes, as: UTF8.self) {
        var configuration = DaemonConfiguration.defaults(for: .user, environment: ["HOME": "/nonexistent"])
        try? configuration.apply(toml: text, file: "fuzz.toml")
    }
}

/// The typed params of the methods that take numbers, decoded and checked as recd does before
/// it opens a device (`decodeParams`, `rangeRefusal`, the settings' own checks): the
/// dictionary's extreme numbers reach past the parser.
func readParams(_ request: ParsedRequest) {
    _ = request.method.permission
    switch request.method {
    case .start:
        guard let start = try? decodeParams(StartParams.self, request.params) else { return }
        guard start.rangeRefusal() == nil else { return }
        try? start.settings(over: RecordingSettings()).validate()
        try? start.segments(over: SegmentSettings()).validate()
    case .subscribe:
        _ = try? decodeParams(SubscribeParams.self, request.params)
    default:
        _ = try? decodeParams(JSONValue.self, request.params)
    }
}

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    readUntrusted(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
#else
@main
struct ReplayInputs {
    static func main() throws {
        var count = 0
        for path in CommandLine.arguments.dropFirst() {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: path)).map { $0.map { path + "/" + $0 } } ?? [path]
            for file in files {
                let data = try Data(contentsOf: URL(fileURLWithPath: file))
                data.withUnsafeBytes(readUntrusted)
                count += 1
            }
        }
        print("recd-fuzz: \(count) inputs replayed, none crashed")
    }
}
#endif
