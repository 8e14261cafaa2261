import Logging
import NIOConcurrencyHelpers
import NIOCore
import RecdCommands
import RecdProtocol
import RecorderCore

/// A tap's chunks on their way into a connection's outbox: header and payload in one write.
/// A chunk is dropped (the tap counts it and the next header says so) when the client has left
/// more than its queue (`server.client_queue_bytes`) unread: a slow reader loses audio, never
/// delays the recording or the other clients. Chunks that come before `tap`'s answer is
/// queued wait for it (the answer line comes first on the wire).
final class TapStream: AudioTapSink {
    private let outbox: Outbox
    private let allocator: ByteBufferAllocator
    /// What may wait for the answer (a pre-roll arrives all at once).
    private let holding: Int
    private let ended: @Sendable (RecorderError?) -> Void
    /// A quarter of the client's queue: a joined chunk (`TapParams.chunk`) the queue can take.
    let largestJoinedPayload: Int
    private let state = NIOLockedValueBox<(answered: Bool, held: [ByteBuffer], heldBytes: Int)>((false, [], 0))

    init(outbox: Outbox, allocator: ByteBufferAllocator, holding: Int, queue: Int,
         ended: @escaping @Sendable (RecorderError?) -> Void) {
        largestJoinedPayload = queue / 4
        self.outbox = outbox
        self.allocator = allocator
        self.holding = holding
        self.ended = ended
    }

    func deliver(header: TapChunkHeader, payload: UnsafeRawBufferPointer) -> Bool {
        let count = TapChunkHeader.size + payload.count
        let write = { (buffer: inout ByteBuffer) in
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: TapChunkHeader.size) { bytes in
                header.write(to: bytes.baseAddress!)
                return TapChunkHeader.size
            }
            buffer.writeBytes(payload)
        }
        return state.withLockedValue { state in
            guard state.answered else {
                guard state.heldBytes + count <= holding else { return false }
                var buffer = allocator.buffer(capacity: count)
                write(&buffer)
                state.held.append(buffer)
                state.heldBytes += count
                return true
            }
            return outbox.send(count: count, limited: true, write: write)
        }
    }

    /// `tap`'s answer is queued: the chunks held for it follow.
    func answered() {
        state.withLockedValue { state in
            for buffer in state.held {
                _ = outbox.send(count: buffer.readableBytes, limited: false) { $0.writeImmutableBuffer(buffer) }
            }
            state = (true, [], 0)
        }
    }

    func tapEnded(_ error: RecorderError?) { ended(error) }
}
