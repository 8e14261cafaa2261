import CFFmpeg
import Glibc

/// An FFmpeg (libavcodec/libavformat) or file-system failure while writing or reading an
/// MPEG-4 audio file: the file, what failed, and FFmpeg's text for the error code.
public struct MPEG4Error: Error, CustomStringConvertible, Sendable {
    public let path: String
    public let message: String
    /// The errno behind the failure when a system call failed (ENOSPC, EACCES...): FFmpeg
    /// reports those as AVERROR(errno), the negated value.
    public let errno: Int32?
    /// FFmpeg's (or strerror's) text for the error code, if there was one.
    public let reason: String?

    public var description: String {
        if let reason { return "\(path): \(message) (\(reason))" }
        return "\(path): \(message)"
    }

    init(path: String, message: String, errno: Int32? = nil, reason: String? = nil) {
        self.path = path
        self.message = message
        self.errno = errno
        self.reason = reason
    }

    /// From a negative FFmpeg return value.
    init(path: String, message: String, code: Int32) {
        // AVERROR(e) is -e for system errors; FFmpeg's own codes are large negative tags.
        let systemErrno: Int32? = (1..<4096).contains(-code) ? -code : nil
        self.init(path: path, message: message, errno: systemErrno, reason: Self.text(of: code))
    }

    /// From errno after a failed system call.
    static func system(path: String, message: String, errno value: Int32 = Glibc.errno) -> MPEG4Error {
        MPEG4Error(path: path, message: message, errno: value, reason: String(cString: strerror(value)))
    }

    static func text(of code: Int32) -> String {
        var failure: UnsafePointer<CChar>?
        guard let av = recd_ffmpeg_load(&failure)?.pointee else { return "FFmpeg error \(code)" }
        var buffer = [CChar](repeating: 0, count: 256)
        if av.av_strerror(code, &buffer, buffer.count) != 0 { return "FFmpeg error \(code)" }
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Throws unless an FFmpeg call returned a non-negative value; returns it.
@discardableResult
func check(_ result: Int32, _ message: @autoclosure () -> String, path: String) throws(MPEG4Error) -> Int32 {
    guard result >= 0 else { throw MPEG4Error(path: path, message: message(), code: result) }
    return result
}

/// FFmpeg's functions (Sources/CFFmpeg/include/CFFmpeg.h): its libraries are loaded the first
/// time an `.m4a` file is written or read, not when recd starts.
func loadFFmpeg(for path: String) throws(MPEG4Error) -> recd_ffmpeg {
    var failure: UnsafePointer<CChar>?
    guard let functions = recd_ffmpeg_load(&failure) else {
        throw MPEG4Error(path: path, message: "cannot load FFmpeg's libraries (libavformat, libavcodec, libavutil)",
                         reason: failure.map { String(cString: $0) })
    }
    return functions.pointee
}
