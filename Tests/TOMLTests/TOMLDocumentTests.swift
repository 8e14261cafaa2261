import Testing
import TOML

/// The configuration's TOML reader on its own.
@Suite("TOML document")
struct TOMLDocumentTests {
    func failure(_ text: String) -> TOMLError? {
        do {
            _ = try TOMLDocument(parsing: text)
            return nil
        } catch {
            return error
        }
    }

    @Test func readsEveryKindOfValueWithItsLine() throws {
        let document = try TOMLDocument(parsing: """
            \u{FEFF}# recd
            device = "hw:CARD=USB,DEV=0"   # a comment
            path = 'C:\\no\\escapes'
            [recording]
            sample_rate = 48_000
            mode = 0o660
            gain = -1.5e-3
            huge = inf
            enabled = true
            users = [
              "alice", # first
              "b\\u00f6b",
            ]
            """)
        #expect(document.entry("device") == .init(value: .string("hw:CARD=USB,DEV=0"), line: 2))
        #expect(document.entry("path")?.value == .string("C:\\no\\escapes"))
        #expect(document.tables["recording"]?.line == 4)
        #expect(document.entry("recording.sample_rate") == .init(value: .integer(48000), line: 5))
        #expect(document.entry("recording.mode")?.value == .integer(0o660))
        #expect(document.entry("recording.gain")?.value == .float(-1.5e-3))
        #expect(document.entry("recording.huge")?.value == .float(.infinity))
        #expect(document.entry("recording.enabled")?.value == .bool(true))
        #expect(document.entry("recording.users") == .init(value: .array([.string("alice"), .string("böb")]), line: 10))
    }

    @Test func refusesWhatRecdDoesNotUseWithTheLine() {
        #expect(failure("a = 1\n[t]\nb = {x = 1}\n") == TOMLError(line: 3, message: "inline tables ({ … }) are not used in recd's configuration"))
        #expect(failure("x = 1979-05-27T07:32:00Z")?.message == "dates and times are not used in recd's configuration")
        #expect(failure("[[a.b]]")?.message == "nested arrays of tables ([[a.b]]) are not used in recd's configuration")
        #expect(failure("[a.b]")?.message == "[a.b] must follow a [[a]] (nested tables are used only under an array of tables)")
        #expect(failure("[[a]]\n[a.b.c]")?.message == "tables nested deeper than [a.b] are not used in recd's configuration")
        #expect(failure("a.b = 1")?.message == "dotted keys (a.b = …) are not used in recd's configuration")
        #expect(failure("s = \"\"\"x\"\"\"")?.message == "multi-line strings are not used in recd's configuration")
    }

    /// `[[source]]`: each element a document of its own, its sub-tables those after its header,
    /// with the file's lines; a table after the elements is the top level's again.
    @Test func arraysOfTablesHoldTheirKeysAndSubTablesInOrder() throws {
        let document = try TOMLDocument(parsing: """
            [recording]
            format = "flac"
            [[source]]
            name = "east"
            device = "usb:0d8c:0014:p=0000:00:14.0-1.2"
            [[source]]
            name = "west"
            [source.recording]
            format = "wav"
            [source.trigger]
            enabled = true
            [[source]]
            name = "north"
            [mqtt]
            enabled = false
            """)
        #expect(document.entry("recording.format")?.value == .string("flac"))
        #expect(document.entry("mqtt.enabled") == .init(value: .bool(false), line: 15))
        let sources = try #require(document.arrays["source"])
        #expect(sources.map(\.line) == [3, 6, 12])
        #expect(sources.map { $0.element.entry("name")?.value } == [.string("east"), .string("west"), .string("north")])
        #expect(sources[0].element.entry("device")?.line == 5)
        #expect(sources[0].element.tables.isEmpty)
        #expect(sources[1].element.entry("recording.format") == .init(value: .string("wav"), line: 9))
        #expect(sources[1].element.tables["trigger"]?.line == 10)
        #expect(sources[1].element.entry("trigger.enabled")?.value == .bool(true))
        #expect(sources[2].element.tables.isEmpty && sources[2].element.root.count == 1)
        #expect(document.tables.keys.sorted() == ["mqtt", "recording"])
        #expect(try TOMLDocument(parsing: "[[ source ]] # one\nname = 'a'\n").arrays["source"]?.first?.element.entry("name")?.value == .string("a"))
    }

    @Test func anArrayOfTablesIsNotAlsoATableOrAKey() {
        #expect(failure("[source]\n[[source]]\n") == TOMLError(line: 2, message: "'source' is already a table: [source]"))
        #expect(failure("[[source]]\n[source]\n") == TOMLError(line: 2, message: "'source' is an array of tables: [[source]]"))
        #expect(failure("source = 1\n[[source]]\n") == TOMLError(line: 2, message: "'source' is already set as a key"))
        #expect(failure("[[source]]\nname = 'a'\nname = 'b'\n") == TOMLError(line: 3, message: "'name' is set twice"))
        #expect(failure("[[source]]\n[source.recording]\n[source.recording]\n")
                == TOMLError(line: 3, message: "[source.recording] appears twice in one [[source]]"))
        #expect(failure("[[source]]\n[source.recording]\na = 1\na = 2\n") == TOMLError(line: 4, message: "'source.recording.a' is set twice"))
        #expect(failure("[[source]\n")?.message == "an array of tables' header ends with ]]")
        #expect(failure("[[source]]\nrecording = 1\n[source.recording]\n") == TOMLError(line: 3, message: "'recording' is already set as a key"))
        // Two elements may each have a table of one name.
        #expect(failure("[[source]]\n[source.recording]\n[[source]]\n[source.recording]\n") == nil)
    }

    @Test func malformedInputIsAnErrorOnItsLine() {
        #expect(failure("\n\n[recording\n")?.line == 3)
        #expect(failure("a = 1\na = 2\n") == TOMLError(line: 2, message: "'a' is set twice"))
        #expect(failure("[a]\n[a]\n")?.message == "table [a] appears twice")
        #expect(failure("a = \"open\n")?.message == "a string is not closed on its line")
        #expect(failure("a = [1, 2\n")?.message == "an array is not closed with ']'")
        #expect(failure("a = \n")?.message == "a value is missing")
        #expect(failure("a = 1 2\n")?.message == "unexpected text after the value; one setting per line")
        #expect(failure("a = 01\n")?.message == "'01' is not a value (strings need quotes)")
        #expect(failure("a = 1__0\n") != nil)
        #expect(failure("a = \"\\q\"\n") != nil)
        #expect(failure("'' = 1\n")?.message == "an empty key ('' = …) is not a setting")
        #expect(failure("'.'='='\n")?.message == "a name with a dot in it ('.') is not a setting")
        #expect(failure("[\"a.b\"]\n") != nil)
        #expect(failure("a = " + String(repeating: "[", count: 40) + String(repeating: "]", count: 40))?.message
                == "arrays nested more than 32 deep")
        // Inputs that made toml++ abort (found by fuzzing).
        for text in ["[{", "[\n", "\u{FEFF}    [\\", "[\u{0367}", "Y=[}\u{7f}\0\0", "sa = 8000-11-22T[tt10:YY", "y_sn =0998-11-)2 0 c\r"] {
            #expect(failure(text) != nil, "\(text)")
        }
    }
}
