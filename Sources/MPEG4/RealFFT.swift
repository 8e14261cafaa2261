import CFFmpeg

/// A forward real-to-complex FFT of a fixed length, FFmpeg's (libavutil's `av_tx`): what the
/// spectrum node transforms its windows with. One instance per thread (the context holds its
/// scratch memory); `transform` allocates nothing.
public final class RealFFT {
    public let length: Int
    private var context: OpaquePointer?
    private let function: av_tx_fn
    private let functions: UnsafePointer<recd_avutil_tx>
    /// FFmpeg wants aligned arrays; these are, and `transform` copies through them.
    private let input: UnsafeMutablePointer<Float>
    private let output: UnsafeMutablePointer<Float>

    /// `length`: a power of two, 16 or more.
    public init(length: Int) throws(RealFFTError) {
        var failure: UnsafePointer<CChar>?
        guard let functions = recd_avutil_tx_load(&failure) else {
            throw RealFFTError(message: "FFmpeg's libavutil cannot be loaded: " + (failure.map { String(cString: $0) } ?? "unknown error"))
        }
        guard length >= 16, length & (length - 1) == 0 else { throw RealFFTError(message: "an FFT's length must be a power of two (not \(length))") }
        var context: OpaquePointer?
        var function: av_tx_fn?
        var scale: Float = 1
        let code = functions.pointee.av_tx_init(&context, &function, AV_TX_FLOAT_RDFT, 0, Int32(length), &scale, 0)
        guard code >= 0, let context, let function else {
            throw RealFFTError(message: "FFmpeg's av_tx_init failed for a \(length)-point real FFT (\(code))")
        }
        self.length = length
        self.context = context
        self.function = function
        self.functions = functions
        // 64 bytes: what AVX-512 code may assume (FFmpeg's own av_malloc alignment).
        input = UnsafeMutableRawPointer.allocate(byteCount: length * 4, alignment: 64)
            .initializeMemory(as: Float.self, repeating: 0, count: length)
        output = UnsafeMutableRawPointer.allocate(byteCount: (length + 2) * 4, alignment: 64)
            .initializeMemory(as: Float.self, repeating: 0, count: length + 2)
    }

    deinit {
        functions.pointee.av_tx_uninit(&context)
        input.deallocate()
        output.deallocate()
    }

    /// The power (|X|², unnormalized) of bins 0...length/2 of `samples` (`length` of them),
    /// into `power` (length/2 + 1 of them).
    public func power(of samples: UnsafePointer<Float>, into power: UnsafeMutablePointer<Float>) {
        input.update(from: samples, count: length)
        function(context, output, input, MemoryLayout<Float>.stride)
        for bin in 0...(length / 2) {
            let re = output[2 * bin], im = output[2 * bin + 1]
            power[bin] = re * re + im * im
        }
    }
}

public struct RealFFTError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public var description: String { message }
}
