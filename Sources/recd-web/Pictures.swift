import AudioGraph
import FoundationEssentials
import Glibc
import Hummingbird
import NIOConcurrencyHelpers
import RecorderModel
import SignalProcessing

/// Recorded files' spectrogram pictures (PNG, with their rulers), rendered once each and kept
/// in a cache directory of a bounded size: the page's list shows one per recording and per
/// trigger event, and a station's day of events is rendered once, not for every viewer.
///
/// A picture is named by its file's path, size and modification time and by how it is drawn
/// (range, width): a file rewritten, renamed or re-dated is rendered afresh, and the old picture
/// ages out. Beside each PNG, a few bytes of what it shows (`PictureInfo`: the file's peak,
/// where the plot is), sent as the `Recd-Picture` header. Rendering runs one at a time, on a
/// thread of its own (`Spectrograms.render`), niced: recd-web is not recd, and its rendering
/// takes no core from a recording's threads.
final class Pictures: Sendable {
    /// nil: no directory to keep them in; each is rendered on demand and not kept.
    let directory: String?
    /// Bytes the directory may hold; past it the pictures used longest ago go first.
    let limit: Int64
    private let spectrograms: Spectrograms

    struct Rendered: Sendable {
        var png: [UInt8]
        var info: PictureInfo
    }

    init(directory: String?, limit: Int64 = 64 << 20, spectrograms: Spectrograms) {
        self.directory = directory
        self.limit = limit
        self.spectrograms = spectrograms
        if let directory {
            try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                     attributes: [.posixPermissions: 0o700])
        }
    }

    func picture(of path: String, range: SpectrogramPicture.Range, width: Int) async throws -> Rendered {
        var status = stat()
        guard stat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            throw HTTPError(.notFound, message: "no recording at \(path)")
        }
        let key = Self.name("\(path)|\(status.st_size)|\(status.st_mtim.tv_sec).\(status.st_mtim.tv_nsec)|\(range.name)|\(width)")
        if let kept = kept(key) { return kept }
        // Decoding, drawing, encoding and keeping: all on the spectrograms' niced thread.
        let result = await spectrograms.render { [self] () throws(RecorderError) -> Rendered in
            let spectrogram = try FileSpectrogram.compute(path: path, columns: width)
            let picture = SpectrogramPicture(spectrogram, range: range)
            let rendered = Rendered(png: try picture.png(), info: PictureInfo(peak: spectrogram.peak, width: picture.width,
                                                                              height: picture.height, plot: picture.plot))
            keep(rendered, as: key)
            return rendered
        }
        switch result {
        case .success(let rendered): return rendered
        case .failure(let error): throw HTTPError(.unprocessableContent, message: error.message)
        }
    }

    // MARK: The cache directory

    private func kept(_ key: String) -> Rendered? {
        guard let directory,
              let png = try? Data(contentsOf: URL(fileURLWithPath: "\(directory)/\(key).png")),
              let json = try? Data(contentsOf: URL(fileURLWithPath: "\(directory)/\(key).json")),
              let info = try? JSONDecoder().decode(PictureInfo.self, from: json) else { return nil }
        // Used now: the last to go.
        utimes("\(directory)/\(key).png", nil)
        return Rendered(png: Array(png), info: info)
    }

    private func keep(_ rendered: Rendered, as key: String) {
        guard let directory, let json = try? JSONEncoder().encode(rendered.info) else { return }
        // Written aside and renamed: another recd-web (or this one's next request) never reads half.
        let temporary = "\(directory)/.\(key).\(getpid()).\(UInt32.random(in: 0...UInt32.max))"
        guard (try? Data(rendered.png).write(to: URL(fileURLWithPath: temporary + ".png"))) != nil,
              (try? json.write(to: URL(fileURLWithPath: temporary + ".json"))) != nil,
              rename(temporary + ".json", "\(directory)/\(key).json") == 0,
              rename(temporary + ".png", "\(directory)/\(key).png") == 0 else {
            unlink(temporary + ".png")
            unlink(temporary + ".json")
            return
        }
        trim(directory)
    }

    /// Deletes the pictures used longest ago until the directory holds three quarters of the limit.
    private func trim(_ directory: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        // When each was last used, to the nanosecond: pictures rendered within one second (a
        // day's list on a fast machine) are still told apart, and the newest stays.
        var pictures: [(key: String, used: Int, bytes: Int64)] = []
        var total: Int64 = 0
        let now = time(nil)
        for name in names where name.hasPrefix(".") {
            // What a recd-web that died while writing left.
            var status = stat()
            if stat("\(directory)/\(name)", &status) == 0, now - status.st_mtim.tv_sec > 600 { unlink("\(directory)/\(name)") }
        }
        for name in names where name.hasSuffix(".png") && !name.hasPrefix(".") {
            var status = stat()
            guard stat("\(directory)/\(name)", &status) == 0 else { continue }
            let key = String(name.dropLast(4))
            var info = stat()
            let infoBytes = stat("\(directory)/\(key).json", &info) == 0 ? Int64(info.st_size) : 0
            pictures.append((key, status.st_mtim.tv_sec * 1_000_000_000 + status.st_mtim.tv_nsec, Int64(status.st_size) + infoBytes))
            total += Int64(status.st_size) + infoBytes
        }
        guard total > limit else { return }
        for picture in pictures.sorted(by: { $0.used < $1.used }) where total > limit * 3 / 4 {
            unlink("\(directory)/\(picture.key).png")
            unlink("\(directory)/\(picture.key).json")
            total -= picture.bytes
        }
    }

    /// A file name for `text`: FNV-1a, 64 bits, in hex (a cache's name, not a secret).
    static func name(_ text: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

/// What a picture shows, beside it: the file's loudest sample and where the plot is.
struct PictureInfo: Codable, Sendable {
    var peak: Float
    var width: Int
    var height: Int
    var plot: SpectrogramPicture.Plot
}
