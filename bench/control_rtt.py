"""2. Control round trip: `status` on a persistent connection, recd against MPD, and the cold
client commands `recctl status` against `mpc status` (whole processes, with hyperfine).

usage: control_rtt.py BINDIR WORKDIR DEVICE CALLS COLD_RUNS OUT.json"""

import json
import os
import socket
import subprocess
import sys
import time

from lib import Recd, RecdClient, save, summary

bindir, workdir, device, calls, cold_runs, out = sys.argv[1:7]
calls = int(calls)
cold_runs = int(cold_runs)
env = dict(os.environ)
BLOCKS = 10

mpddir = os.path.join(workdir, "mpd")
for sub in ("music", "playlists"):
    os.makedirs(os.path.join(mpddir, sub), exist_ok=True)
mpd_socket = os.path.join(mpddir, "mpd.sock")
mpd_conf = os.path.join(mpddir, "mpd.conf")
with open(mpd_conf, "w") as f:
    f.write(f"""\
music_directory    "{mpddir}/music"
playlist_directory "{mpddir}/playlists"
db_file            "{mpddir}/database"
state_file         "{mpddir}/state"
log_file           "{mpddir}/log"
bind_to_address    "{mpd_socket}"
zeroconf_enabled   "no"
audio_output {{
    type "null"
    name "null"
}}
""")


class MPDClient:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buffer = b""
        banner = self.read_until(b"\n")
        assert banner.startswith(b"OK MPD"), banner

    def read_until(self, end):
        while True:
            index = self.buffer.find(end)
            if index >= 0 and (end != b"OK\n" or index == 0 or self.buffer[index - 1:index] == b"\n"):
                cut = index + len(end)
                data, self.buffer = self.buffer[:cut], self.buffer[cut:]
                return data
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("MPD closed the connection")
            self.buffer += chunk

    def status(self):
        self.sock.sendall(b"status\n")
        return self.read_until(b"OK\n")


class RecdRaw(RecdClient):
    """status over a persistent connection: one pre-formatted line out, one line back (no JSON
    work on the client side, so the round trip is the daemon's)."""

    def status(self):
        rid = self.next_id
        self.next_id += 1
        self.sock.sendall(b'{"jsonrpc":"2.0","id":%d,"method":"status"}\n' % rid)
        return self.read_line()


def timed(client, n):
    samples = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        client.status()
        samples.append((clock() - t0) / 1000)
    return samples


mpd = subprocess.Popen(["mpd", "--no-daemon", mpd_conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    deadline = time.monotonic() + 30
    while not os.path.exists(mpd_socket):
        if time.monotonic() > deadline or mpd.poll() is not None:
            raise RuntimeError("MPD did not start; see " + os.path.join(mpddir, "log"))
        time.sleep(0.02)
    mpd_version = subprocess.run(["mpd", "--version"], capture_output=True, text=True).stdout.splitlines()[0]

    with Recd(bindir, workdir, device, "", env, name="recd-control") as recd:
        r = RecdRaw(recd.socket)
        m = MPDClient(mpd_socket)
        sizes = {"recd": len(r.status()) + 1, "mpd": len(m.status())}
        timed(r, 500)
        timed(m, 500)
        recd_us, mpd_us = [], []
        for block in range(BLOCKS):
            first, second = (r, m) if block % 2 == 0 else (m, r)
            a = timed(first, calls // BLOCKS)
            b = timed(second, calls // BLOCKS)
            (recd_us if first is r else mpd_us).extend(a)
            (mpd_us if first is r else recd_us).extend(b)
        block_ratios = []
        per_block = calls // BLOCKS
        for i in range(BLOCKS):
            rs = sorted(recd_us[i * per_block:(i + 1) * per_block])
            ms = sorted(mpd_us[i * per_block:(i + 1) * per_block])
            block_ratios.append(rs[len(rs) // 2] / ms[len(ms) // 2])

        recctl_cmd = f"{bindir}/recctl --socket {recd.socket} status"
        mpc_cmd = f"mpc --host {mpd_socket} status"
        hf_json = os.path.join(workdir, "hyperfine-status.json")
        version_cmd = f"{bindir}/recctl --version"
        subprocess.run(["hyperfine", "-N", "--style", "none", "--warmup", "20", "--runs", str(cold_runs),
                        "--export-json", hf_json, "-n", "recctl status", recctl_cmd, "-n", "mpc status", mpc_cmd,
                        "-n", "recctl --version", version_cmd],
                       check=True, stdout=subprocess.DEVNULL)
        with open(hf_json) as f:
            hf = json.load(f)
        cold = {}
        for result in hf["results"]:
            cold[result["command"]] = summary([t * 1000 for t in result["times"]])
            cold[result["command"]]["user_ms"] = result["user"] * 1000
            cold[result["command"]]["system_ms"] = result["system"] * 1000
        save(out, {
            "calls": calls,
            "mpd_version": mpd_version,
            "response_bytes": sizes,
            "recd_us": summary(recd_us),
            "mpd_us": summary(mpd_us),
            "block_ratios": summary(block_ratios),
            "cold_runs": cold_runs,
            "cold_commands": {"recctl": recctl_cmd, "mpc": mpc_cmd, "recctl_version": version_cmd},
            "cold_ms": {"recctl": cold["recctl status"], "mpc": cold["mpc status"],
                        "recctl_version": cold["recctl --version"]},
        })
finally:
    mpd.terminate()
    mpd.wait(timeout=30)
