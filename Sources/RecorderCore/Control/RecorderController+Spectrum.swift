import AudioGraph
import FoundationEssentials
import MPEG4
import RecorderModel

/// The spectrum: a `SpectrumNode` on the engine while the device is open and someone wants
/// the `spectrum` topic (a socket subscriber, the web page), none otherwise. On the
/// recorder's control queue.
extension RecorderController {
    /// `source` wants the spectrum, or no longer does. Any thread. Wanting it does not open
    /// the device: columns come while recd listens or records.
    func setSpectrumWanted(_ wanted: Bool, by source: String) {
        let changed = spectrumWanted.withLock { sources -> Bool in
            let before = !sources.isEmpty
            if wanted { sources.insert(source) } else { sources.remove(source) }
            return before != !sources.isEmpty
        }
        guard changed else { return }
        control.async { [self] in
            if let engine = state.engine { attachSpectrum(to: engine) } else { endSpectrum() }
        }
    }

    /// Attaches the node to `engine` when someone wants it (replacing one on an engine that
    /// is gone), detaches it when nobody does.
    func attachSpectrum(to engine: CaptureEngine) {
        let wanted = spectrumWanted.withLock { !$0.isEmpty }
        if let current = state.spectrumNode, current.engine == engine.serial, wanted { return }
        endSpectrum(detachingFrom: engine)
        guard wanted else { return }
        let spectrum = published.spectrum
        let node: SpectrumNode
        do throws(RealFFTError) {
            // Sent together: the hub hands both columns to each client in one write.
            node = try SpectrumNode(configuration: engine.configuration) { columns in
                Observations.together { for column in columns { spectrum.send(column) } }
            }
        } catch {
            return logger.error("no spectrum", metadata: ["error.message": "\(error.message)"])
        }
        state.spectrumNode = (node, engine.serial)
        do throws(RecorderError) {
            try engine.attach(node, timeout: configuration.stopTimeout)
        } catch {
            // The engine ended meanwhile: its end is on its way, and the next engine attaches a node.
            endSpectrum(detachingFrom: engine)
        }
    }

    /// Stops the node (detached from `engine` first when it is on it) and publishes nil.
    func endSpectrum(detachingFrom engine: CaptureEngine? = nil) {
        guard let current = state.spectrumNode else { return }
        state.spectrumNode = nil
        if let engine, engine.serial == current.engine { engine.detach(current.node, timeout: configuration.stopTimeout) }
        current.node.stop()
        published.spectrum.send(nil)
    }
}
