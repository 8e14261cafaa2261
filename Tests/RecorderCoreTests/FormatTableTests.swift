import Foundation
import RecdTestSupport
@testable import RecorderCore
import RecorderModel
import Testing

/// The format table: every entry has a writer, and what it writes reads back as the same format.
@Suite("formats: one table")
struct FormatTableTests {
    @Test(arguments: AudioFileFormat.allCases)
    func everyFormatIsWrittenByItsLibraryAndListedAsItself(format: AudioFileFormat) throws {
        let directory = TemporaryDirectory()
        let settings = RecordingSettings(format: format)
        let path = directory.file("take." + format.fileExtension)
        let writer = try settings.makeFileWriter(path: path, sampleRate: 48000, channels: 2)
        let samples = Signal.toInt16(Signal.sine(frequency: 440, rate: 48000, frames: 48000, channels: 2, amplitude: 0.3))
        try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: 48000) }
        try writer.close()
        let entry = try #require(RecordingLibrary(directory: directory.path).list().first)
        #expect(entry.format == format)
        #expect(entry.info.sampleRate == 48000 && entry.info.channels == 2)
        #expect(format.properties.library == (format.properties.container == .mpeg4 ? .ffmpeg : .libsndfile))
    }

    @Test func namesAndExtensionsFindTheirFormat() {
        for format in AudioFileFormat.allCases {
            #expect(AudioFileFormat(name: format.rawValue) == format)
            #expect(AudioFileFormat(name: format.rawValue.uppercased()) == format)
            if !AudioFileFormat.isMPEG4(fileExtension: format.fileExtension) {
                #expect(AudioFileFormat(fileExtension: format.fileExtension) == format)
            }
        }
        #expect(AudioFileFormat(fileExtension: "m4a") == nil, ".m4a holds aac or alac: the file says which")
        #expect(AudioFileFormat(mpeg4Codec: "alac") == .alac && AudioFileFormat(mpeg4Codec: "aac") == .aac)
    }
}
