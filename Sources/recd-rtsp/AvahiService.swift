import FoundationEssentials
import RecdConfiguration

/// The mDNS announcement of the stream: an Avahi service file (avahi.service(5)) for
/// `_rtsp._tcp`, with what a client needs in its TXT record before it connects. recd-rtsp.socket
/// writes it to /etc/avahi/services when it starts listening and removes it when it stops, so a
/// station announces exactly while its port is open (recd-rtsp itself exits when idle).
enum AvahiService {
    /// The file for `configuration`: the port is rtsp.port (recd-rtsp.socket's ListenStream=
    /// is 8554, rtsp.port's default; whoever moves one moves the other, doc/rtsp.md).
    static func file(for configuration: DaemonConfiguration) -> String {
        let rtsp = configuration.rtsp
        let path = "/" + rtsp.path
        // The stream's format where the configuration fixes it; else the device's, unknown here.
        var rate = rtsp.sampleRate ?? configuration.recording.sampleRate ?? configuration.captureSampleRate
        var channels = rtsp.channels ?? configuration.recording.channels ?? configuration.captureChannels
        if rtsp.codec == .opus {
            rate = 48000
            channels = channels.map { min($0, 2) }
        }
        var txt = [
            "path=\(path)",
            "codec=\(rtsp.codec == .opus ? "opus" : "L16")",
            "auth=\(rtsp.access == .token ? "digest" : "none")",
            "transport=tcp",
            "paths=\(path)/l16,\(path)/opus",
            // Each source's path is /NAME (and /NAME/l16, /NAME/opus).
            "sources=\(configuration.sources.map(\.name).joined(separator: ","))",
        ]
        if let rate { txt.append("rate=\(rate)") }
        if let channels { txt.append("channels=\(channels)") }
        return """
            <?xml version="1.0" standalone='no'?>
            <!DOCTYPE service-group SYSTEM "avahi-service.dtd">
            <!-- Written by recd-rtsp.socket from recd.toml's [rtsp] (recd-rtsp(1), its avahi-service option); removed when it stops. -->
            <service-group>
              <name replace-wildcards="yes">recd on %h</name>
              <service>
                <type>_rtsp._tcp</type>
                <port>\(rtsp.port)</port>
            \(txt.map { "    <txt-record>\(escaped($0))</txt-record>" }.joined(separator: "\n"))
              </service>
            </service-group>

            """
    }

    /// XML's five characters: a path is the user's to choose.
    static func escaped(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&apos;"
            default: result.append(character)
            }
        }
        return result
    }
}
