import Foundation
@testable import AudioGraph
@testable import RecorderCore
import RecorderModel
import Sndfile
import Testing

/// The pieces of the start time and the drift figure that need no device: RFC 3339 text,
/// the `bext` fields for a start, and the drift estimator on made-up reads.
@Suite("start time and drift, offline")
struct StartTimeUnitTests {
    @Test func utcTimestampsRoundTripToTheMillisecond() throws {
        let date = Date(timeIntervalSince1970: 1_795_368_759.4949)
        #expect(UTCTimestamp.text(date) == "2026-11-22T17:32:39.495Z")
        #expect(UTCTimestamp.text(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        // A leap day, and a millisecond rounding up into the next day.
        #expect(UTCTimestamp.text(Date(timeIntervalSince1970: 951_868_799.25)) == "2000-02-29T23:59:59.250Z")
        #expect(UTCTimestamp.text(Date(timeIntervalSince1970: 951_868_799.9996)) == "2000-03-01T00:00:00.000Z")
        #expect(UTCTimestamp.text(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500Z")
        let parsed = try #require(UTCTimestamp.date("2026-11-22T17:32:39.495Z"))
        #expect(abs(parsed.timeIntervalSince1970 - 1_795_368_759.495) < 1e-6)
        #expect(UTCTimestamp.date("2026-11-22T18:32:39.495+01:00") == parsed)
        #expect(UTCTimestamp.date("2026-11-22")?.timeIntervalSince1970 == 1_795_305_600)
        for bad in ["", "2026-11-22T17:32", "2026-13-01T00:00:00Z", "2026-11-22T17:32:39", "2026-11-22T17:32:39.Z", "yesterday"] {
            #expect(UTCTimestamp.date(bad) == nil, "\(bad)")
        }
    }

    @Test func aBextChunkPlacesTheFirstFrameFromMidnightUTCAndReadsBack() throws {
        let start = Date(timeIntervalSince1970: 1_795_368_759.4949)  // 17:32:39.4949 UTC
        let origin = FileOrigin(startedAt: start, recordingName: "näme", recordingId: "0af64390-4ab7-452d-ad54-749aff694983",
                                device: "hw:CARD=PCH,DEV=0")
        let bext = BroadcastInfo(origin: origin, sampleRate: 48000)
        #expect(bext.originationDate == "2026-11-22" && bext.originationTime == "17:32:39")
        let secondsSinceMidnight: Double = 17 * 3600 + 32 * 60 + 39.4949
        #expect(bext.timeReference == UInt64((secondsSinceMidnight * 48000).rounded()))
        #expect(bext.originator == "recd \(RecdVersion.current)")
        #expect(bext.originatorReference == "0af643904ab7452dad54749aff694983")
        #expect(bext.description.hasPrefix("näme; recorded by recd"))
        let back = try #require(bext.startTime(sampleRate: 48000))
        #expect(abs(back.timeIntervalSince(start)) < 1.0 / 48000)
        // A writer that counts TimeReference from elsewhere: the date and time fields win.
        var foreign = bext
        foreign.timeReference = 0
        #expect(foreign.startTime(sampleRate: 48000) == Date(timeIntervalSince1970: 1_795_368_759))
        #expect(BroadcastInfo.truncated("aé" + String(repeating: "x", count: 40), bytes: 3) == "aé")
    }

    /// Reads every 10 ms, each late by a pseudo-random 0...8 ms, from a device running fast
    /// by `ppm`: the estimate lands within a few ppm of it once the baseline is long.
    func estimate(ppm: Double, seconds: Double) -> Double? {
        var estimator = ClockDriftEstimator(rate: 48000)
        var state: UInt64 = 0x2545F4914F6CDD1D
        var result: Double?
        for step in 0..<Int(seconds * 100) {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            let lateness = Double(state % 8000) / 1e6
            let time = Double(step) * 0.01 + lateness
            let frames = Int64((time * 48000 * (1 + ppm / 1e6)).rounded(.down))
            if estimator.add(uptimeNanoseconds: UInt64(1_000_000_000 + time * 1e9), frames: frames) {
                result = estimator.partsPerMillion
            }
        }
        return result
    }

    @Test func theDriftEstimateFollowsTheDeviceClockDespiteLateReads() throws {
        #expect(estimate(ppm: 0, seconds: 3) == nil, "no figure before a 4 s baseline")
        for ppm in [0.0, 50, -120, 2000] {
            let measured = try #require(estimate(ppm: ppm, seconds: 60))
            #expect(abs(measured - ppm) < 5, "\(ppm) ppm measured as \(measured)")
        }
        // 44.1 kHz delivered by a device that says 48 kHz.
        let wrongRate = try #require(estimate(ppm: (44100.0 / 48000 - 1) * 1e6, seconds: 10))
        #expect(abs(wrongRate + 81_250) < 100)
    }
}
