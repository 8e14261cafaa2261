#!/usr/bin/env python3
"""A recd client in Python's standard library only (see doc/protocol.md).

    recd_client.py status                 the state, as JSON
    recd_client.py start NAME [SECONDS]   start a recording (optionally of exactly SECONDS)
    recd_client.py stop                   stop it
    recd_client.py watch [--until STATE]  one line per state change and per second recorded

The socket: $RECD_SOCKET, else the user instance's, else the system's.
"""
import json
import os
import socket
import sys


def socket_path():
    if os.environ.get("RECD_SOCKET"):
        return os.environ["RECD_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.exists(os.path.join(runtime, "recd/recd.sock")):
        return os.path.join(runtime, "recd/recd.sock")
    return "/run/recd/recd.sock"


class Recd:
    """One connection: requests out, one JSON object per line in."""

    def __init__(self, path=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path or socket_path())
        self.lines = self.sock.makefile("r", encoding="utf-8")
        self.next_id = 1
        self.pending = []  # notifications that arrived while waiting for an answer

    def call(self, method, params=None):
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            request["params"] = params
        self.next_id += 1
        self.sock.sendall((json.dumps(request) + "\n").encode())
        while True:
            message = self.read()
            if message.get("method") == "changed":
                self.pending.append(message["params"])
            elif message.get("id") == request["id"]:
                if "error" in message:
                    error = message["error"]
                    raise RuntimeError(error.get("data", {}).get("code", error["code"]), error["message"])
                return message["result"]

    def notifications(self):
        """Every `changed` notification, as it arrives."""
        while True:
            while self.pending:
                yield self.pending.pop(0)
            message = self.read()
            if message.get("method") == "changed":
                yield message["params"]

    def read(self):
        line = self.lines.readline()
        if not line:
            raise ConnectionError("recd closed the connection")
        return json.loads(line)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 64
    recd = Recd()
    command = argv[1]
    try:
        if command == "status":
            print(json.dumps(recd.call("status")["state"]))
        elif command == "start":
            params = {"name": argv[2]}
            if len(argv) > 3:
                params["duration"] = float(argv[3])
            print("recording", recd.call("start", params)["path"])
        elif command == "stop":
            print("stopped", recd.call("stop")["path"])
        elif command == "watch":
            until = argv[3] if len(argv) > 3 and argv[2] == "--until" else None
            subscription = recd.call("subscribe", {"topics": ["state", "currentTime"], "interval": 1})
            # The snapshot first, then the changes: together, the complete history from now on.
            for update in _chain(subscription["snapshot"], recd.notifications()):
                if update["topic"] == "state":
                    print("state", update["value"]["name"], flush=True)
                    if update["value"]["name"] == until:
                        return 0
                else:
                    print("time %.1f" % update["value"], flush=True)
        else:
            print(__doc__, file=sys.stderr)
            return 64
    except RuntimeError as error:
        print("recd: %s: %s" % error.args, file=sys.stderr)
        return 1
    return 0


def _chain(first, second):
    yield from first
    yield from second


if __name__ == "__main__":
    sys.exit(main(sys.argv))
