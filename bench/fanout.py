"""3. Fan-out: N clients subscribed to currentTime and levels at 20 Hz while recd records from
the paced PulseAudio device. Measures delivery latency (receipt - the notification's
`timestamp`), the daemon's CPU over the window, notifications received, and frames lost.

usage: fanout.py BINDIR WORKDIR DEVICE PLAN PROCESSES OUT.json [RECEIVER]
PLAN: comma-separated runs CLIENTS:SECONDS:INTERVAL[:perf][:c] (":perf" samples the daemon with
`perf record -e cpu-clock` during that run's window instead of measuring it cleanly; ":c" receives
with RECEIVER, bench/fanout_receiver.c compiled, instead of Python workers: the same measurement
at a fraction of the receivers' CPU, which shares the machine with recd).
(ALSA_CONFIG_PATH and PULSE_SERVER in the environment define the paced DEVICE.)"""

import array
import json
import multiprocessing
import os
import re
import resource
import selectors
import socket
import subprocess
import sys
import time

from lib import Recd, cpu_clock, cpu_seconds, memory_kib, percentile, save, summary

bindir, workdir, device, plan, processes, out = sys.argv[1:7]
receiver = sys.argv[7] if len(sys.argv) > 7 else None
processes = int(processes)
plan = [item.split(":") for item in plan.split(",")]
env = dict(os.environ)
WARMUP = 3.0

CONFIG = """\
[metering]
levels_interval = 0.05
time_interval = 0.05

[server]
max_clients = 1100
"""

SUBSCRIBE = '{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topics":["currentTime","levels"],"interval":%s}}\n'
TS_KEY = b'"timestamp":'


def worker(path, count, interval, conn):
    """Connects `count` clients, subscribes them, then reads until told the window; sends back
    the latencies (ms) seen inside it and per-client counts."""
    selector = selectors.EpollSelector()
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall((SUBSCRIBE % interval).encode())
        socks.append(s)
    # Each client's subscribe answer.
    for s in socks:
        data = b""
        while b"\n" not in data:
            data += s.recv(65536)
        if b'"result"' not in data.split(b"\n")[0]:
            raise RuntimeError(f"subscribe failed: {data[:200]!r}")
        s.setblocking(False)
    for i, s in enumerate(socks):
        selector.register(s, selectors.EVENT_READ, i)
    selector.register(conn, selectors.EVENT_READ, -1)
    conn.send("ready")

    window = None
    latencies = array.array("d")
    counts = [0] * count
    partial = [b""] * count
    closed = 0
    cpu0 = time.process_time()
    now = time.time
    # One receive buffer for every read: `recv(262144)` would allocate 256 KiB each time,
    # above glibc's mmap threshold, so every read cost an mmap, an mremap and an munmap (the
    # workers of the first run; later ones inherit a threshold the parent had raised).
    buffer = bytearray(262144)
    view = memoryview(buffer)
    while True:
        for key, _ in selector.select(timeout=0.5):
            index = key.data
            if index == -1:
                message = conn.recv()
                if message == "stop":
                    selector.close()
                    conn.send({"latencies": latencies.tobytes(), "counts": counts, "closed": closed,
                               "cpu": time.process_time() - cpu0})
                    return
                window = message
                cpu0 = time.process_time()
                continue
            try:
                size = key.fileobj.recv_into(buffer)
            except BlockingIOError:
                continue
            received = now()
            if not size:
                selector.unregister(key.fileobj)
                closed += 1
                continue
            data = partial[index] + view[:size]
            end = data.rfind(b"\n")
            partial[index] = data[end + 1:]
            if window is None or not (window[0] <= received < window[1]):
                continue
            position = 0
            while True:
                position = data.find(TS_KEY, position, end)
                if position < 0:
                    break
                position += len(TS_KEY)
                stop = position
                while data[stop] not in b",}":
                    stop += 1
                latencies.append((received - float(data[position:stop])) * 1000)
                counts[index] += 1


def perf_profile(pid, seconds, path):
    """Samples `pid` for `seconds` with perf's cpu-clock; returns the top symbols by self time
    and by time including callees."""
    recorded = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "-g", "-p", str(pid), "-o", path,
                               "--", "sleep", str(seconds)], capture_output=True, text=True)
    if recorded.returncode != 0:  # e.g. kernel.perf_event_paranoid too strict for a non-root user
        print(f"    perf record failed: {recorded.stderr.strip()[:200]}", flush=True)
        time.sleep(seconds)
        return None
    tables = {}
    for mode in ("--no-children", "--children"):
        text = subprocess.run(["perf", "report", "-i", path, "--stdio", mode, "--sort", "dso,symbol", "-g", "none",
                               "--percent-limit", "1.5"], capture_output=True, text=True).stdout
        rows = []
        for line in text.splitlines():
            match = re.match(r"^\s+([\d.]+)%\s+(?:([\d.]+)%\s+)?(\S+)\s+\[[.k]\]\s+(.*)$", line)
            if match:
                # The symbol, without the padding and empty columns perf prints after it.
                rows.append([float(match.group(1)), match.group(3), re.split(r"\s{2,}", match.group(4).strip())[0]])
        names = [r[2] for r in rows]
        try:
            names = subprocess.run(["swift-demangle", "--simplified"], input="\n".join(names), capture_output=True,
                                   text=True, check=True).stdout.splitlines()
        except (OSError, subprocess.CalledProcessError):
            pass
        for row, name in zip(rows, names):
            row[2] = name.strip()
        tables[mode.strip("-")] = [{"percent": r[0], "object": r[1], "symbol": r[2]} for r in rows[:25]]
    return tables


class CReceiver:
    """A fanout_receiver process, driven like a Python worker's pipe."""

    def __init__(self, path, count, interval, index):
        self.latencies_path = os.path.join(workdir, f"fanout-latencies-{index}.bin")
        self.proc = subprocess.Popen([receiver, path, str(count), str(interval), self.latencies_path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def poll(self, timeout):
        return True

    def recv(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("fanout_receiver failed")
        if line.strip() == "ready":
            return "ready"
        part = json.loads(line)
        with open(self.latencies_path, "rb") as f:
            part["latencies"] = f.read()
        os.unlink(self.latencies_path)
        return part

    def send(self, message):
        self.proc.stdin.write("stop\n" if message == "stop" else f"window {message[0]!r} {message[1]!r}\n")
        self.proc.stdin.flush()

    def join(self):
        self.proc.wait()


def run(recd, clients, seconds, interval, profile=False, native=False):
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    per = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    for index, count in enumerate(per):
        if count == 0:
            continue
        if native:
            proc = CReceiver(recd.socket, count, interval, index)
            pipes.append(proc)
            procs.append(proc)
            continue
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker, args=(recd.socket, count, interval, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    for pipe in pipes:
        if not pipe.poll(120):
            raise RuntimeError("fan-out clients did not connect")
        assert pipe.recv() == "ready"

    control = recd.client()
    control.call("subscribe", {"topics": ["state"]})
    duration = WARMUP + seconds + 2
    control.call("start", {"name": f"fanout-{clients}", "format": "wav", "duration": duration})
    time.sleep(WARMUP)
    window = (time.time(), time.time() + seconds)
    for pipe in pipes:
        pipe.send(window)
    cpu_a, ticks_a, wall_a = cpu_clock(recd.pid), cpu_seconds(recd.pid), time.monotonic()
    rss = [memory_kib(recd.pid)["VmRSS"]]
    perf = None
    if profile:
        perf = perf_profile(recd.pid, seconds, os.path.join(workdir, f"perf-fanout-{clients}.data"))
    while time.time() < window[1]:
        rss.append(memory_kib(recd.pid)["VmRSS"])
        time.sleep(0.5)
    cpu_b, ticks_b, wall_b = cpu_clock(recd.pid), cpu_seconds(recd.pid), time.monotonic()
    status = control.call("status")
    for pipe in pipes:
        pipe.send("stop")
    parts = [pipe.recv() for pipe in pipes]
    for proc in procs:
        proc.join()
    final = control.wait_state({"finished", "failed"}, timeout=duration + 30)
    path = final["recording"]["path"]
    frames = final["recording"]["frames"]
    if os.path.exists(path):
        os.unlink(path)
    control.close()

    latencies = array.array("d")
    counts = []
    for part in parts:
        chunk = array.array("d")
        chunk.frombytes(part["latencies"])
        latencies.extend(chunk)
        counts.extend(part["counts"])
    lat = sorted(latencies)
    wall = wall_b - wall_a
    return {
        "clients": clients,
        "receivers": "c" if native else "python",
        "seconds": seconds,
        "interval": float(interval),
        "profiled": profile,
        "perf": perf,
        "receiver_processes": len(procs),
        "notifications": len(lat),
        "latency_ms": {"p50": percentile(lat, 50), "p90": percentile(lat, 90), "p99": percentile(lat, 99),
                       "p999": percentile(lat, 99.9), "max": lat[-1] if lat else float("nan"),
                       "min": lat[0] if lat else float("nan")},
        "per_client_rate": summary([c / seconds for c in counts]),
        "clients_closed": sum(part["closed"] for part in parts),
        "daemon_cpu_percent": 100 * (cpu_b - cpu_a) / wall,
        "daemon_cpu_percent_ticks": 100 * (ticks_b - ticks_a) / wall,
        "receiver_cpu_percent": 100 * sum(part["cpu"] for part in parts) / wall,
        "daemon_rss_kib_max": max(rss),
        "statistics": status["statistics"],
        "state": final["name"],
        "frames": frames,
        "expected_frames": round(duration * 48000),
    }


resource.setrlimit(resource.RLIMIT_NOFILE, (8192, max(8192, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
results = {"warmup": WARMUP, "runs": []}
with Recd(bindir, workdir, device, CONFIG, env, name="recd-fanout") as recd:
    for item in plan:
        clients, seconds, interval = int(item[0]), int(item[1]), item[2]
        profile = "perf" in item[3:]
        native = "c" in item[3:]
        if native and not receiver:
            raise SystemExit("fanout.py: a ':c' run needs the RECEIVER argument")
        print(f"  {clients} subscriber(s) at interval {interval}, {seconds} s{' under perf' if profile else ''}"
              f"{', C receivers' if native else ''} ...", flush=True)
        result = run(recd, clients, seconds, interval, profile, native)
        print(f"    p50 {result['latency_ms']['p50']:.2f} ms, p99 {result['latency_ms']['p99']:.2f} ms, "
              f"daemon CPU {result['daemon_cpu_percent']:.1f} %, receivers {result['receiver_cpu_percent']:.1f} %, "
              f"lost {result['statistics']}", flush=True)
        results["runs"].append(result)
save(out, results)
