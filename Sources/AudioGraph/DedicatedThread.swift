import CLinux
import Dispatch
import Glibc

/// A thread of its own, for work that blocks for as long as it runs (the capture loop in the
/// driver, a writer, recd-web's readers of recd's socket): on Linux, Dispatch's pool does not
/// grow for workers blocked in a system call, so each would keep one of its few threads (eight
/// of recd-web's open pages delayed every other request by seconds).
public enum DedicatedThread {
    public static func spawn(name: String, _ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Body {
            _ = name.withCString { recd_name_current_thread($0) }
            body()
        })
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { argument in
            let body = Unmanaged<Body>.fromOpaque(argument!).takeRetainedValue()
            body.run()
            return nil
        }, box.toOpaque())
        guard created == 0 else {
            // No thread of its own (the system is out of them): a Dispatch worker, as before.
            let body = box.takeRetainedValue()
            DispatchQueue(label: name).async { body.run() }
            return
        }
        pthread_detach(thread)
    }

    private final class Body: @unchecked Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
}
