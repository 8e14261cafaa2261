import FoundationEssentials
import RecorderModel
import SoundCards

/// How the recorder captures, where it writes, and how often it publishes.
public struct RecorderConfiguration: Sendable, Equatable {
    /// The capture device: a stable id (`usb:VID:PID:s=SERIAL`, `usb:VID:PID:p=PORT`, a
    /// /dev/snd/by-id or by-path link) resolved to a card at every open, or an ALSA PCM name.
    public var device: String
    /// Where sysfs, /dev and udev's database are (tests build their own).
    public var systemRoots: SystemRoots = .live
    /// Where recordings are written; created if missing.
    public var recordingsDirectory: String
    /// What `record()` uses when no settings are given.
    public var defaultSettings: RecordingSettings
    /// Seconds between `currentTime` publications while recording.
    public var timeInterval: Double
    /// Seconds between `levels` publications while recording.
    public var levelsInterval: Double
    /// Whether levels are measured at all.
    public var meteringEnabled: Bool
    /// Levels, and the current time at its `timeInterval`, only while someone says it wants
    /// them (`Recorder.setLevelsWanted`, `setTimeWanted`): the daemon, whose clients subscribe
    /// through its socket and MQTT. false: always (a program that observes them itself).
    public var publishesOnDemand: Bool
    /// Seconds between header refresh + fsync: what a killed process can lose at most.
    public var syncInterval: Double
    /// The device period, seconds: the latency of the first frame and of level updates.
    public var periodTime: Double
    /// The device buffer, seconds: how long capture can stall before an overrun.
    public var bufferTime: Double
    /// The write buffer between the capture thread and the file's writer, seconds of the
    /// device's audio: how long the disk may stall with nothing lost (`Limits.writeBuffer`).
    public var writeBuffer: Double
    /// Capture at this rate whatever the file's rate, converting with soxr (nil: ask the
    /// device for the file's rate, converting only if it cannot deliver it).
    public var captureSampleRate: Int?
    /// Capture this many channels whatever the file's count, mixing in software.
    public var captureChannels: Int?
    /// Seconds `stop`, `cancel` and shutdown wait for the capture thread; one stuck in the
    /// driver longer is abandoned and the file finalized with what it wrote.
    public var stopTimeout: Double
    /// How recordings are cut into files when `start` does not say.
    public var segments: SegmentSettings
    /// When the device goes away (or is missing at `start`), wait for it and continue in a new
    /// segment instead of ending the recording with `deviceLost`.
    public var waitForDevice: Bool
    /// The longest pause between two attempts to open a lost device, seconds (the first
    /// attempts come sooner: 0.1 s, doubling).
    public var maximumRetryInterval: Double
    /// Seconds of exact digital silence after which `warning` says so; nil: never.
    public var silenceWarningAfter: Double?
    /// The space guard: what stays free on the recordings' filesystem.
    public var storage: StorageSettings
    /// Which finished recordings are deleted by themselves, oldest first.
    public var retention: RetentionSettings
    /// Seconds of input kept while listening, put at the beginning of a recording started
    /// then (`Limits.preRoll`).
    public var preRoll: Double
    /// What a triggered `start` detects with, unless it says otherwise (`[trigger]`).
    public var trigger: TriggerSettings
    /// The station's name for this recorder's source (recd.toml's `[[source]]`, or `default`):
    /// every file's metadata names it beside the start. Nil: none is named.
    public var sourceName: String? = nil

    public init(device: String = "default", recordingsDirectory: String,
                defaultSettings: RecordingSettings = RecordingSettings(),
                timeInterval: Double = 0.1, levelsInterval: Double = 0.05, meteringEnabled: Bool = true,
                publishesOnDemand: Bool = false,
                syncInterval: Double = 1.0, periodTime: Double = 0.01, bufferTime: Double = 0.5, writeBuffer: Double = 10,
                captureSampleRate: Int? = nil, captureChannels: Int? = nil, stopTimeout: Double = 5,
                segments: SegmentSettings = SegmentSettings(), waitForDevice: Bool = true,
                maximumRetryInterval: Double = 1.5, silenceWarningAfter: Double? = 60,
                storage: StorageSettings = StorageSettings(), retention: RetentionSettings = RetentionSettings(),
                preRoll: Double = 5, trigger: TriggerSettings = TriggerSettings(), systemRoots: SystemRoots = .live) {
        self.trigger = trigger
        self.systemRoots = systemRoots
        self.device = device
        self.recordingsDirectory = recordingsDirectory
        self.defaultSettings = defaultSettings
        self.timeInterval = timeInterval
        self.levelsInterval = levelsInterval
        self.meteringEnabled = meteringEnabled
        self.publishesOnDemand = publishesOnDemand
        self.syncInterval = syncInterval
        self.periodTime = periodTime
        self.bufferTime = bufferTime
        self.writeBuffer = writeBuffer
        self.captureSampleRate = captureSampleRate
        self.captureChannels = captureChannels
        self.stopTimeout = stopTimeout
        self.segments = segments
        self.waitForDevice = waitForDevice
        self.maximumRetryInterval = maximumRetryInterval
        self.silenceWarningAfter = silenceWarningAfter
        self.storage = storage
        self.retention = retention
        self.preRoll = preRoll
    }
}
