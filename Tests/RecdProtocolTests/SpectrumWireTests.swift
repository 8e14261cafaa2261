import FoundationEssentials
import RecdProtocol
import Testing

/// A spectrum column's hand-written JSON (`Spectrum.wireJSON`, what the hub sends) reads back
/// as the same column, as what the generic encoder writes does.
@Suite("spectrum on the wire")
struct SpectrumWireTests {
    @Test(arguments: [8000, 44100, 48000, 96000])
    func aHandWrittenColumnReadsAsTheEncodersDoes(rate: Int) throws {
        var generator = SystemRandomNumberGenerator()
        let decoder = WireCoding.decoder()
        for round in 0..<200 {
            // Levels as the node makes them: tenths of a dB, from the floor to 0 (and beyond
            // 0 for a sine between bins summed over channels), the extremes included.
            var levels = (0..<513).map { _ in Float(Int.random(in: -1600...30, using: &generator)) / 10 }
            levels[0] = Spectrum.floor
            levels[1] = 0
            levels[2] = -0.1
            let column = Spectrum(time: 1_795_295_991 + Double(round) * 0.05 + Double.random(in: 0..<1, using: &generator),
                                  sampleRate: rate, size: 1024, period: Double((Double(rate) * 0.05).rounded()) / Double(rate),
                                  dBFS: levels)
            let written = try decoder.decode(Spectrum.self, from: Data(column.wireJSON))
            let encoded = try decoder.decode(Spectrum.self, from: WireCoding.encoder().encode(column))
            #expect(written == column, "round \(round)")
            #expect(encoded == written)
        }
        let text = String(decoding: Spectrum(time: 1.5, sampleRate: 48000, size: 1024, period: 0.05, dBFS: [-160, -78.1, 0, 12.3]).wireJSON, as: UTF8.self)
        #expect(text == #"{"dBFS":[-160.0,-78.1,0.0,12.3],"period":0.05,"sampleRate":48000,"size":1024,"time":1.5}"#)
    }
}
