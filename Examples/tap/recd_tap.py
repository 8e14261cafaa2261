#!/usr/bin/env python3
"""Read a tap from recd: the input's audio as 16-bit (or float) PCM, chunk by chunk, with the
capture time of every chunk's first frame. Standard library only.

    recd_tap.py [--rate 16000] [--channels 1] [--float] [--seconds 5] [--out file.raw]

Prints one line per chunk (position, capture time, frames, lost, flags) on standard error and
writes the samples to --out (or nowhere). The socket: RECD_SOCKET, else the user instance's,
else /run/recd/recd.sock.
"""
import argparse
import json
import os
import socket
import struct
import sys

HEADER = struct.Struct("<4sIQdIIII")  # magic, header size, position, capture time, frames, lost, flags, bytes


def socket_path():
    if "RECD_SOCKET" in os.environ:
        return os.environ["RECD_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR", "/tmp/recd-%d" % os.getuid())
    user = os.path.join(runtime, "recd", "recd.sock")
    return user if os.path.exists(user) else "/run/recd/recd.sock"


def read_exactly(stream, count):
    data = stream.read(count)
    if data is None or len(data) < count:
        return None  # recd ended the stream
    return data


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int)
    parser.add_argument("--channels", type=int)
    parser.add_argument("--float", action="store_true")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--out")
    args = parser.parse_args()

    params = {"encoding": "f32le" if args.float else "s16le"}
    if args.rate:
        params["rate"] = args.rate
    if args.channels:
        params["channels"] = args.channels
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(socket_path())
    stream = connection.makefile("rb")
    request = {"jsonrpc": "2.0", "id": 1, "method": "tap", "params": params}
    connection.sendall((json.dumps(request) + "\n").encode())
    answer = json.loads(stream.readline())
    if "error" in answer:
        print("recd: %s" % answer["error"]["message"], file=sys.stderr)
        return 1
    result = answer["result"]
    fmt = result["format"]
    bytes_per_frame = fmt["channels"] * (2 if fmt["encoding"] == "s16le" else 4)
    wanted = int(round(args.seconds * fmt["sampleRate"]))
    print("tap %d: %d Hz, %d ch, %s" % (result["tap"], fmt["sampleRate"], fmt["channels"], fmt["encoding"]), file=sys.stderr)

    out = open(args.out, "wb") if args.out else None
    written = 0
    while written < wanted:
        header = read_exactly(stream, result["headerBytes"])
        if header is None:
            break
        magic, size, position, captured, frames, lost, flags, length = HEADER.unpack_from(header)
        if magic != b"RCDT":
            print("not a tap chunk", file=sys.stderr)
            return 1
        payload = read_exactly(stream, length)
        if payload is None:
            break
        take = min(frames, wanted - written)
        if out:
            out.write(payload[: take * bytes_per_frame])
        written += take
        print("chunk %d %.6f %d lost=%d flags=%d" % (position, captured, frames, lost, flags), file=sys.stderr)
    connection.close()  # recd ends the tap
    if out:
        out.close()
    return 0 if written == wanted else 1


if __name__ == "__main__":
    sys.exit(main())
