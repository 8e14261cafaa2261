import FoundationEssentials
import Glibc
import MPEG4
import RecorderModel

/// A recorded file's spectrogram as a picture to keep: the plot (a column per spectrogram
/// column, frequency up over the chosen range, in the page's colour scale), a kHz ruler on its
/// left and a time ruler (from the file's first frame) under it, on a dark ground that reads
/// in a light page and a dark one. RGB pixels, for a PNG (MPEG4's PNGEncoder).
public struct SpectrogramPicture: Sendable {
    /// The frequency range drawn: the whole band, up to a frequency, or a log scale from 50 Hz.
    public enum Range: Sendable, Equatable, Hashable {
        case full
        case upTo(Int)
        case log

        /// `full`, `log` or a frequency in Hz (what the page's range picker sends).
        public init?(_ text: String) {
            switch text {
            case "full": self = .full
            case "log": self = .log
            default:
                guard let hz = Int(text), (1000...96000).contains(hz) else { return nil }
                self = .upTo(hz)
            }
        }

        public var name: String {
            switch self {
            case .full: "full"
            case .log: "log"
            case .upTo(let hz): String(hz)
            }
        }
    }

    /// Where the plot is in the picture and what it shows: for a reader of the picture.
    public struct Plot: Sendable, Equatable, Codable {
        public var x: Int
        public var y: Int
        public var width: Int
        public var height: Int
        public var lowFrequency: Double
        public var highFrequency: Double
        public var logarithmic: Bool
        public var seconds: Double
    }

    public let width: Int
    public let height: Int
    public let plot: Plot
    /// `height` rows of `width` RGB triples, top row first.
    public private(set) var rgb: [UInt8]

    static let ground: (UInt8, UInt8, UInt8) = (0x12, 0x15, 0x18)
    static let ink: (UInt8, UInt8, UInt8) = (0xc8, 0xd0, 0xd8)
    /// The font's pixels are drawn this many times larger.
    static let glyphScale = 2
    static let left = 84, bottom = 26, top = 8, right = 12
    static let minimumPlotWidth = 400

    /// `spectrogram` drawn `plotHeight` rows high over `range`.
    public init(_ spectrogram: FileSpectrogram, range: Range, plotHeight: Int = 256) {
        let scale = FrequencyScale(range: range, sampleRate: spectrogram.sampleRate, height: plotHeight)
        // A short event has few columns: each drawn wider, so that every picture is readable.
        let plotWidth = Swift.max(spectrogram.columns, Self.minimumPlotWidth)
        width = Self.left + plotWidth + Self.right
        height = Self.top + plotHeight + Self.bottom
        let seconds = Double(spectrogram.frames) / Double(spectrogram.sampleRate)
        plot = Plot(x: Self.left, y: Self.top, width: plotWidth, height: plotHeight, lowFrequency: scale.low,
                    highFrequency: scale.high, logarithmic: scale.logarithmic, seconds: seconds)
        rgb = [UInt8](repeating: 0, count: width * height * 3)
        fill(0, 0, width, height, Self.ground)
        // The plot: each row the loudest bin under it, as the page's live view draws.
        let binHz = Double(spectrogram.sampleRate) / Double(spectrogram.size)
        let bins = spectrogram.bins
        let rowBins: [(Int, Int)] = (0..<plotHeight).map { row in
            let from = scale.hz(Double(plotHeight - 1 - row)), to = scale.hz(Double(plotHeight - row))
            let low = Swift.max(0, Swift.min(bins - 1, Int((from / binHz + 0.5).rounded(.down))))
            let high = Swift.max(low + 1, Swift.min(bins, Int((to / binHz + 0.5).rounded(.down))))
            return (low, high)
        }
        let levels = [UInt8](spectrogram.levels)
        for column in 0..<plotWidth {
            let base = column * spectrogram.columns / plotWidth * bins
            for (row, (low, high)) in rowBins.enumerated() {
                var level: UInt8 = 0
                for bin in low..<high { level = Swift.max(level, levels[base + bin]) }
                let dB = Double(spectrogram.floor) + Double(level) * Double(spectrogram.step)
                set(Self.left + column, Self.top + row, Self.shade((dB + 100) / 80))
            }
        }
        // The kHz ruler.
        for hz in Self.frequencyTicks(scale) {
            let y = Self.top + plotHeight - Int(scale.y(hz).rounded())
            fill(Self.left - 5, Swift.min(y, Self.top + plotHeight - 1), 4, 1, Self.ink)
            let label = hz >= 1000 ? Self.number(hz / 1000) + " kHz" : Self.number(hz) + " Hz"
            text(label, rightEdge: Self.left - 8, centreY: y)
        }
        // The time ruler.
        let step = Self.timeStep(seconds: seconds, width: plotWidth)
        var time = 0.0
        while time <= seconds + 1e-9 {
            let x = Self.left + Swift.min(plotWidth - 1, Int((time / Swift.max(seconds, 1e-9) * Double(plotWidth)).rounded()))
            fill(x, Self.top + plotHeight + 1, 1, 4, Self.ink)
            let label = Self.timeLabel(time, step: step, total: seconds)
            let labelWidth = Self.textWidth(label)
            text(label, x: Swift.max(0, Swift.min(width - labelWidth, x - labelWidth / 2)), y: Self.top + plotHeight + 7)
            time += step
        }
    }

    /// The picture as a PNG file.
    public func png() throws(RecorderError) -> [UInt8] {
        do throws(MPEG4Error) {
            return try PNGEncoder.encode(rgb: rgb, width: width, height: height)
        } catch {
            throw RecorderError(.unknown, "cannot make the picture: \(error.message)")
        }
    }

    // MARK: The colour scale and the rulers

    /// The colour of a level: `value` 0 at −100 dBFS, 1 at −20 dBFS. The page's `shade` (app.js)
    /// is the same function, so that a picture and the live view say the same.
    public static func shade(_ value: Double) -> (UInt8, UInt8, UInt8) {
        let v = Swift.max(0, Swift.min(1, value))
        // JavaScript's Math.round: halves up.
        func byte(_ x: Double) -> UInt8 { UInt8((255 * x + 0.5).rounded(.down)) }
        return (byte(Swift.min(1, v * 1.6)), byte(Swift.max(0, v * 1.6 - 0.6)),
                byte(v < 0.4 ? v * 2 : Swift.max(0, 1.6 - v * 2) + Swift.max(0, v * 2.5 - 1.5)))
    }

    static func frequencyTicks(_ scale: FrequencyScale) -> [Double] {
        if scale.logarithmic { return [100, 200, 500, 1000, 2000, 5000, 10000, 20000].filter { $0 >= scale.low && $0 <= scale.high } }
        let step: Double = scale.high <= 12000 ? 1000 : scale.high <= 24000 ? 2000 : 4000
        return stride(from: 0, through: scale.high + 1, by: step).map { $0 }
    }

    static func timeStep(seconds: Double, width: Int) -> Double {
        let most = Swift.max(2, width / 90)
        return [0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200].first { seconds / $0 <= Double(most) } ?? 14400
    }

    static func timeLabel(_ time: Double, step: Double, total: Double) -> String {
        if total < 60 { return (step < 1 ? String(printf: "%.1f", time) : String(Int(time.rounded()))) + " s" }
        let whole = Int(time.rounded())
        let pad = { (value: Int) in value < 10 ? "0\(value)" : "\(value)" }
        return total < 3600 ? "\(whole / 60):\(pad(whole % 60))" : "\(whole / 3600):\(pad(whole / 60 % 60)):\(pad(whole % 60))"
    }

    static func number(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(printf: "%.1f", value)
    }

    // MARK: Pixels

    private mutating func set(_ x: Int, _ y: Int, _ colour: (UInt8, UInt8, UInt8)) {
        guard x >= 0, x < width, y >= 0, y < height else { return }
        let index = (y * width + x) * 3
        rgb[index] = colour.0
        rgb[index + 1] = colour.1
        rgb[index + 2] = colour.2
    }

    private mutating func fill(_ x: Int, _ y: Int, _ w: Int, _ h: Int, _ colour: (UInt8, UInt8, UInt8)) {
        for row in y..<(y + h) { for column in x..<(x + w) { set(column, row, colour) } }
    }

    static func textWidth(_ text: String) -> Int { text.count * 6 * glyphScale - glyphScale }

    private mutating func text(_ text: String, rightEdge: Int, centreY: Int) {
        self.text(text, x: rightEdge - Self.textWidth(text), y: centreY - 7 * Self.glyphScale / 2)
    }

    private mutating func text(_ text: String, x: Int, y: Int) {
        var left = x
        for character in text {
            let rows = Self.font[character] ?? Self.font[" "]!
            for (row, bits) in rows.enumerated() {
                for column in 0..<5 where bits & (0b10000 >> column) != 0 {
                    fill(left + column * Self.glyphScale, y + row * Self.glyphScale, Self.glyphScale, Self.glyphScale, Self.ink)
                }
            }
            left += 6 * Self.glyphScale
        }
    }

    /// A 5×7 font of what the rulers say: seven rows of five pixels each, the top row first.
    static let font: [Character: [UInt8]] = [
        "0": [0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110],
        "1": [0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110],
        "2": [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111],
        "3": [0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110],
        "4": [0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010],
        "5": [0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110],
        "6": [0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110],
        "7": [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000],
        "8": [0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110],
        "9": [0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100],
        ".": [0, 0, 0, 0, 0, 0b01100, 0b01100],
        ":": [0, 0b01100, 0b01100, 0, 0b01100, 0b01100, 0],
        "-": [0, 0, 0, 0b11111, 0, 0, 0],
        " ": [0, 0, 0, 0, 0, 0, 0],
        "k": [0b10000, 0b10000, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010],
        "H": [0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001],
        "z": [0, 0, 0b11111, 0b00010, 0b00100, 0b01000, 0b11111],
        "s": [0, 0, 0b01110, 0b10000, 0b01110, 0b00001, 0b11110],
    ]
}

/// A frequency scale `height` rows high: `hz(y)` is the frequency at height y (0 the bottom edge,
/// `height` the top), `y(hz)` its inverse. The page's `frequencyScale` (app.js) is the same.
public struct FrequencyScale: Sendable {
    public let low: Double
    public let high: Double
    public let logarithmic: Bool
    let height: Double

    public init(range: SpectrogramPicture.Range, sampleRate: Int, height: Int) {
        let nyquist = Double(sampleRate) / 2
        self.height = Double(height)
        switch range {
        case .log: (low, high, logarithmic) = (50, nyquist, true)
        case .full: (low, high, logarithmic) = (0, nyquist, false)
        case .upTo(let hz): (low, high, logarithmic) = (0, Swift.min(nyquist, Double(hz)), false)
        }
    }

    public func hz(_ y: Double) -> Double {
        logarithmic ? low * pow(high / low, y / height) : high * y / height
    }

    public func y(_ hz: Double) -> Double {
        logarithmic ? log(Swift.max(hz, low) / low) / log(high / low) * height : hz / high * height
    }
}
