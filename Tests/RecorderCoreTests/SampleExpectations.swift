import Testing

/// Compares sample arrays, reporting the first difference instead of both arrays.
func expectSamples<T: Equatable>(_ actual: [T], _ expected: ArraySlice<T>, sourceLocation: SourceLocation = #_sourceLocation) {
    guard actual.count == expected.count else {
        Issue.record("\(actual.count) samples, expected \(expected.count)", sourceLocation: sourceLocation)
        return
    }
    if let index = actual.indices.first(where: { actual[$0] != expected[expected.startIndex + $0] }) {
        let offset = expected.startIndex + index
        Issue.record("sample \(index) is \(actual[index]), expected \(expected[offset])", sourceLocation: sourceLocation)
    }
}
