"""Helpers shared by the benchmark scripts: a minimal JSON-RPC client for recd, recd as a
child process, /proc readers, and statistics. Standard library only."""

import json
import os
import signal
import socket
import statistics
import subprocess
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# --- statistics ---------------------------------------------------------------------------

def percentile(values, p):
    """Linear-interpolated percentile, p in 0..100."""
    data = sorted(values)
    if not data:
        return float("nan")
    k = (len(data) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def summary(values):
    """Median, spread and count of a sample."""
    return {
        "n": len(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "p25": percentile(values, 25),
        "p75": percentile(values, 75),
        "p99": percentile(values, 99),
        "values": list(values) if len(values) <= 50 else None,
    }


# --- /proc --------------------------------------------------------------------------------

def cpu_split(pid):
    """(utime, stime) of the whole process (every thread, live or exited), /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(pid):
    """utime + stime of the whole process, /proc/PID/stat (10 ms ticks)."""
    return sum(cpu_split(pid))


def cpu_clock(pid):
    """The process's CPU-time clock (ns resolution; the same accounting /proc rounds to ticks)."""
    return time.clock_gettime((~pid << 3) | 2)


def thread_clocks(pid):
    """Each thread's CPU-time clock (seconds), by thread name (threads of one name summed)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            # schedstat's first field: nanoseconds on a CPU (another process's thread
            # CPU-time clock is not ours to read).
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[name] = out.get(name, 0.0) + int(f.read().split()[0]) / 1e9
        except OSError:
            pass  # the thread ended meanwhile
    return out


def thread_seconds_per_hour(before, after, seconds):
    """CPU seconds per hour of each thread name between two `thread_clocks`; a thread that
    began meanwhile counts from zero, one that ended is not there."""
    return {name: (value - before.get(name, 0.0)) / seconds * 3600 for name, value in after.items()}


def memory_kib(pid):
    """VmRSS, VmHWM and thread count from /proc/PID/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0])
            elif key == "Threads":
                out[key] = int(value)
    return out


def rss_by_mapping(pid, top=8):
    """Resident KiB per mapped file (anonymous memory as [anon], heap and stacks by name),
    largest first, from /proc/PID/smaps."""
    totals = {}
    name = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):
                parts = line.split(None, 5)
                name = parts[5].strip() if len(parts) > 5 else "[anon]"
            elif first == "Rss:":
                totals[name] = totals.get(name, 0) + int(line.split()[1])
    ranked = sorted(totals.items(), key=lambda item: -item[1])
    return [{"mapping": k, "rss_kib": v} for k, v in ranked[:top]], sum(totals.values())


def run_measured(argv, env=None, stdout=subprocess.DEVNULL, split=False):
    """Runs a command to completion; returns (wall seconds, user+system CPU seconds), or
    (wall, user, system) with `split`."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited with {proc.returncode}: {err.strip()}")
    if split:
        return wall, usage.ru_utime, usage.ru_stime
    return wall, usage.ru_utime + usage.ru_stime


# --- recd ---------------------------------------------------------------------------------

class RecdClient:
    """One persistent connection: requests with ids, notifications kept in order."""

    def __init__(self, path, timeout=60):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buffer = b""
        self.next_id = 1
        self.notifications = []

    def close(self):
        self.sock.close()

    def send(self, method, params=None):
        """Sends a request; returns its id."""
        rid = self.next_id
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        return rid

    def read_line(self):
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("recd closed the connection")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def wait_response(self, rid):
        while True:
            message = json.loads(self.read_line())
            if message.get("method") == "changed":
                message["params"]["_received"] = time.time()
                self.notifications.append(message["params"])
                continue
            if message.get("id") == rid:
                if "error" in message:
                    raise RuntimeError(f"recd: {message['error']}")
                return message["result"]

    def call(self, method, params=None):
        return self.wait_response(self.send(method, params))

    def next_notification(self):
        if self.notifications:
            return self.notifications.pop(0)
        message = json.loads(self.read_line())
        while message.get("method") != "changed":
            message = json.loads(self.read_line())
        message["params"]["_received"] = time.time()
        return message["params"]

    def wait_state(self, names, timeout=None):
        """Waits (subscribed to `state`) for one of `names`; returns the state value."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is not None:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            note = self.next_notification()
            if note["topic"] == "state" and note["value"]["name"] in names:
                return note["value"]


class Recd:
    """recd as a child process with its own config, socket and recordings directory. A None
    `device`: the configuration names the devices ([[source]])."""

    def __init__(self, bindir, workdir, device, config_text, env, name="recd", wrapper=()):
        self.bindir = bindir
        self.socket = os.path.join(workdir, f"{name}.sock")
        self.recordings = os.path.join(workdir, f"{name}-recordings")
        self.config = os.path.join(workdir, f"{name}.toml")
        self.log = os.path.join(workdir, f"{name}.log")
        with open(self.config, "w") as f:
            f.write(config_text)
        self.argv = list(wrapper) + [
            os.path.join(bindir, "recd"), "--user", "--config", self.config, "--socket", self.socket,
            "--recordings-dir", self.recordings] + (["--device", device] if device else [])
        self.env = env
        self.proc = None

    def __enter__(self):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.logfile = open(self.log, "w")
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self.logfile, stderr=self.logfile)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"recd exited with {self.proc.returncode}; see {self.log}")
            if os.path.exists(self.socket):
                try:
                    RecdClient(self.socket, timeout=5).close()
                    return self
                except OSError:
                    pass
            time.sleep(0.02)
        raise RuntimeError(f"recd did not start; see {self.log}")

    def __exit__(self, *exc):
        self.stop()

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc:
            terminate(self.proc, timeout=120)
            self.logfile.close()

    def client(self, timeout=60):
        return RecdClient(self.socket, timeout=timeout)


def terminate(proc, timeout):
    """SIGTERM (recd finalizes its recording on it), then SIGKILL if it is still there after
    `timeout` seconds; waits for the process either way."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def record(recd, params, timeout=None):
    """Starts a recording with `params` over a fresh connection and waits until it ends.
    Returns (the start result, the final state value)."""
    client = recd.client(timeout=timeout or 3600)
    try:
        client.call("subscribe", {"topics": ["state"]})
        result = client.call("start", params)
        final = client.wait_state({"finished", "failed"})
        if final["name"] != "finished":
            raise RuntimeError(f"recording failed: {final}")
        return result, final
    finally:
        client.close()


def save(path, data):
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def clock_environment(word, work):
    """The environment that makes recd's reads of the kernel's clock state answer `word`
    (synchronized, unsynchronized; kernel: this machine's own answer), through
    Tests/reference/clock_discipline.c as an LD_PRELOAD of adjtimex, compiled into `work`."""
    if word == "kernel":
        return {}
    library = os.path.join(work, "clock_discipline.so")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "reference", "clock_discipline.c")
    subprocess.run(["cc", "-O2", "-Wall", "-shared", "-fPIC", "-o", library, source, "-ldl"], check=True)
    with open(os.path.join(work, "clock-discipline"), "w") as f:
        f.write(word + "\n")
    preload = " ".join(p for p in [os.environ.get("LD_PRELOAD"), library] if p)
    return {"LD_PRELOAD": preload, "RECD_TEST_CLOCK_DISCIPLINE": os.path.join(work, "clock-discipline")}
