#!/usr/bin/env python3
"""What a station writes to its SD card (issue 49, item 5): bytes and fsyncs per hour of
recorded audio for WAV, FLAC and AAC (.m4a) at `[capture] sync_interval` 1, 5 and 10 s, and for
a sound-activated station between events (`[trigger]` armed, nothing above the threshold, no
file open).

Each case is a real recd, as a station runs it (`[autostart]`, `[segments] length = 3600`,
48 kHz stereo, the default quality: FLAC level 5, AAC 192 kbit/s), recording from a paced
PulseAudio device (../shared/TESTING.md, 2: a private server, module-null-sink, module-sine at
440 Hz, pink noise from `sox | pacat --latency-msec=20`, and a `parec --latency-msec=20` reader
of the monitor, so that the sink renders in 20 ms blocks). After a warm-up (2 × (dirty_expire +
dirty_writeback) + 5 s: 75 s by default, so that the writeback of what recd's start dirtied is
not in the window), a window of SECONDS of real time is measured. The per-hour figures come from
its part between the first and the last fsync of the file that return in it (a whole number of
sync intervals; the whole window when nothing is synced), extrapolated to an hour (× 3600 / span):

- recd's own figures: `/proc/PID/io` (wchar, syscw, write_bytes, cancelled_write_bytes) and a
  system-call trace over the window (`strace -f -qq -ttt -T -y -e trace=… -p PID`; its counts are
  what `strace -f -c` counts, restricted to the window, and -y names each descriptor, so that the
  bytes written to the recording are told from those written to sockets and pipes);
- the filesystem's and the device's own view: the recordings directory is an ext4 filesystem of
  its own on a loop device (`mkfs.ext4 -E lazy_itable_init=0,lazy_journal_init=0`, mounted
  `noatime` as Raspberry Pi OS mounts its root, default `commit=5`), so that
  `/sys/block/loopN/stat` (write requests, sectors written, cache flushes) and
  `/sys/fs/ext4/loopN/lifetime_write_kbytes` count this recd's writes and nothing else's:
  data, metadata and the journal, as they reach the card. Without root (no loop device), the
  directory is on the work directory's filesystem and those figures are the whole disk's
  (shared with everything else running), marked so;
- the file itself: its size at the end (the audio), and what closing it costs (a WAV's header,
  an .m4a's rewrite with the index first): `stop`, then `sync -f`, measured apart;
- journald's share: recd's stderr (what systemd hands to journald; here a pipe read by this
  script) in lines and bytes, at the default log level, over the window and at start and stop.

usage: sdcard.py BINDIR [--out FILE.json] [--seconds SECONDS] [--cases wav:1,flac:10,trigger,…]
       (environment: BENCH_SDCARD_SECONDS, default 120; BENCH_SDCARD_TMP, where the work
       directory goes, default /tmp: a real filesystem, not tmpfs)

Prints the table; `bench/report.py` renders the same from the JSON (step 11 of bench/run.sh)."""

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RATE = 48000
CHANNELS = 2


def sysctl(name):
    with open(f"/proc/sys/vm/{name}") as f:
        return int(f.read())


# After the recording (or the trigger) is under way, before the window: past the first 10 s sync,
# and past the writeback of what recd's start dirtied (the recordings directory, its lock file),
# which would otherwise land in the window: an armed recd's filesystem took writes about 6, 31,
# 37 and 68 s after its start (ext4's journal commit, then two rounds of writeback each after
# dirty_expire_centisecs at the flusher's next wake-up), none in the 3 minutes after. 75 s here.
WARMUP = 2 * (sysctl("dirty_expire_centisecs") + sysctl("dirty_writeback_centisecs")) / 100 + 5
DEFAULT_CASES = ["wav:1", "wav:5", "wav:10", "flac:1", "flac:5", "flac:10", "aac:1", "aac:5", "aac:10", "trigger"]
TRACED = ("write,pwrite64,writev,pwritev,pwritev2,fsync,fdatasync,sync_file_range,syncfs,sync,msync,"
          "ftruncate,fallocate,openat,creat,rename,renameat,renameat2,unlink,unlinkat,copy_file_range,sendfile")
WRITES = {"write", "pwrite64", "writev", "pwritev", "pwritev2", "copy_file_range", "sendfile"}
SYNCS = {"fsync", "fdatasync", "sync_file_range", "syncfs", "sync", "msync"}
EXTENSIONS = {"wav": "wav", "flac": "flac", "aac": "m4a"}


# --- the machine's counters ---------------------------------------------------------------

def proc_io(pid):
    out = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = int(value)
    return out


def block_stat(name):
    """Write requests, sectors written and flushes of a block device (Documentation/block/stat)."""
    with open(f"/sys/block/{name}/stat") as f:
        fields = [int(x) for x in f.read().split()]
    return {"writes": fields[4], "sectors": fields[6], "flushes": fields[15] if len(fields) > 15 else None,
            "discards": fields[11] if len(fields) > 11 else None}


def ext4_kbytes(name):
    try:
        with open(f"/sys/fs/ext4/{name}/lifetime_write_kbytes") as f:
            return int(f.read())
    except OSError:
        return None


def block_device_of(path):
    """The /sys/block name of the disk that holds `path` (a partition's parent disk)."""
    st = os.stat(path)
    link = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if os.path.exists(os.path.join(link, "partition")):
        link = os.path.dirname(link)
    return os.path.basename(link), os.path.basename(os.path.realpath(
        f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"))


# --- the filesystem -----------------------------------------------------------------------

class Filesystem:
    """An ext4 filesystem of its own on a loop device (root), else a directory on the work
    directory's filesystem (its counters are then the whole disk's)."""

    def __init__(self, work):
        self.work = work
        self.mount = os.path.join(work, "sd")
        os.makedirs(self.mount)
        self.loop = None
        self.private = False
        self.why = None
        if os.geteuid() == 0 and shutil.which("losetup") and shutil.which("mkfs.ext4"):
            image = os.path.join(work, "sd.img")
            try:
                subprocess.run(["truncate", "-s", "2G", image], check=True)
                subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", image],
                               check=True, capture_output=True)
                self.loop = subprocess.run(["losetup", "-f", "--show", image], check=True, capture_output=True,
                                           text=True).stdout.strip()
                subprocess.run(["mount", "-o", "noatime", self.loop, self.mount], check=True, capture_output=True)
                self.private = True
            except (subprocess.CalledProcessError, OSError) as error:
                self.why = f"loop device: {getattr(error, 'stderr', '') or error}"
                self.cleanup()
                os.makedirs(self.mount, exist_ok=True)
        else:
            self.why = "not root: no loop device"
        if self.private:
            self.disk = self.fs = os.path.basename(self.loop)
        else:
            self.disk, self.fs = block_device_of(self.mount)
        # The filesystem that holds the directory: the last mount whose point is a prefix of it.
        self.type, self.options = None, None
        best = ""
        with open("/proc/mounts") as f:
            for line in f:
                _, point, kind, options = line.split()[:4]
                if (self.mount == point or self.mount.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                    best, self.type, self.options = point, kind, options

    def sync(self):
        subprocess.run(["sync", "-f", self.mount], check=False)

    def counters(self):
        return {"block": block_stat(self.disk), "ext4_kbytes": ext4_kbytes(self.fs)}

    def cleanup(self):
        if self.loop:
            subprocess.run(["umount", self.mount], check=False, capture_output=True)
            subprocess.run(["losetup", "-d", self.loop], check=False, capture_output=True)
            self.loop = None


# --- the paced device ---------------------------------------------------------------------

class PacedDevice:
    """A private PulseAudio server: null sink, module-sine, pink noise from sox | pacat and a
    low-latency parec reader of the monitor (TESTING.md, 2)."""

    def __init__(self, work):
        self.dir = os.path.join(work, "pulse")
        os.makedirs(self.dir)
        self.socket = os.path.join(self.dir, "native")
        with open(os.path.join(self.dir, "pa.conf"), "w") as f:
            f.write(f"load-module module-native-protocol-unix auth-anonymous=1 socket={self.socket}\n"
                    f"load-module module-null-sink sink_name=sdsink rate={RATE} channels={CHANNELS}\n"
                    "load-module module-sine sink=sdsink frequency=440\n"
                    "set-default-source sdsink.monitor\n")
        self.alsa_conf = os.path.join(work, "alsa.conf")
        with open(self.alsa_conf, "w") as f:
            f.write(f'pcm.sdpaced {{ type pulse  server "unix:{self.socket}"  device "sdsink.monitor" }}\n')
        self.env = dict(os.environ, PULSE_SERVER=f"unix:{self.socket}", HOME=self.dir, XDG_RUNTIME_DIR=self.dir,
                        ALSA_CONFIG_PATH=f"/usr/share/alsa/alsa.conf:{self.alsa_conf}")
        self.procs = []

    def start(self):
        server = subprocess.Popen(["pulseaudio", "-n", "-F", os.path.join(self.dir, "pa.conf"), "--daemonize=no",
                                   "--exit-idle-time=-1", "--system=false", f"--log-target=file:{self.dir}/log"],
                                  env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(server)
        for _ in range(200):
            if os.path.exists(self.socket):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"PulseAudio did not start; see {self.dir}/log")
        # Pink noise (vol 0.05) beside the sine: FLAC gets a microphone's noise to encode.
        sox = subprocess.Popen(["sox", "-q", "-n", "-t", "raw", "-r", str(RATE), "-c", str(CHANNELS), "-b", "16",
                                "-e", "signed-integer", "-", "synth", "86400", "pinknoise", "vol", "0.05"],
                               stdout=subprocess.PIPE, env=self.env)
        pacat = subprocess.Popen(["pacat", "--playback", "--raw", "--device=sdsink", f"--rate={RATE}",
                                  f"--channels={CHANNELS}", "--format=s16le", "--latency-msec=20"],
                                 stdin=sox.stdout, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sox.stdout.close()
        parec = subprocess.Popen(["parec", "--device=sdsink.monitor", "--latency-msec=20", "--raw"],
                                 env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs += [sox, pacat, parec]
        time.sleep(2)
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")

    def stop(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- recd ---------------------------------------------------------------------------------

class Daemon:
    """recd with its stderr on a pipe (as systemd hands it to journald), each line timestamped."""

    def __init__(self, bindir, work, device, config, env, recordings):
        from lib import RecdClient
        self.client_class = RecdClient
        self.socket = os.path.join(work, "recd.sock")
        self.config = os.path.join(work, "recd.toml")
        with open(self.config, "w") as f:
            f.write(config)
        state = os.path.join(work, "state")
        for sub in ("config", "state", "run", "cache"):
            os.makedirs(os.path.join(state, sub), exist_ok=True)
        self.env = dict(env, XDG_CONFIG_HOME=os.path.join(state, "config"), XDG_STATE_HOME=os.path.join(state, "state"),
                        XDG_RUNTIME_DIR=os.path.join(state, "run"), XDG_CACHE_HOME=os.path.join(state, "cache"))
        self.argv = [os.path.join(bindir, "recd"), "--user", "--config", self.config, "--socket", self.socket,
                     "--recordings-dir", recordings, "--device", device]
        self.lines = []  # (time.time(), bytes)
        self.proc = None

    def start(self):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"recd exited with {self.proc.returncode}: {self.log_text()}")
            if os.path.exists(self.socket):
                try:
                    self.client_class(self.socket, timeout=5).close()
                    return
                except OSError:
                    pass
            time.sleep(0.02)
        raise RuntimeError("recd did not start")

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.time(), line))

    def log_text(self):
        return b"".join(line for _, line in self.lines).decode(errors="replace")

    def call(self, method, params=None):
        client = self.client_class(self.socket, timeout=30)
        try:
            return client.call(method, params)
        finally:
            client.close()

    def stop(self):
        if self.proc:
            from lib import terminate
            terminate(self.proc, timeout=60)
            self.reader.join(5)


# --- strace -------------------------------------------------------------------------------

LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
CALL = re.compile(r"^(\w+)\((.*)$")
RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
RESULT = re.compile(r"\)\s+=\s+(-?\d+)")
DURATION = re.compile(r"<(\d+\.\d+)>\s*$")
FD = re.compile(r"^(-?\d+)<([^>]*)>")


def parse_trace(path, recordings):
    """Calls (time, end, name, target, result): each system call once, at its entry time, with
    its result and duration (-T) from the `resumed` line when strace split it."""
    calls, pending = [], {}
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(raw.rstrip("\n"))
            if not m:
                continue
            pid, stamp, rest = m.group(1), float(m.group(2)), m.group(3)
            r = RESUMED.match(rest)
            if r:
                entry = pending.pop(pid, None)
                if entry:
                    res = RESULT.search(r.group(2))
                    entry["result"] = int(res.group(1)) if res else None
                    took = DURATION.search(r.group(2))
                    entry["end"] = entry["time"] + float(took.group(1)) if took else stamp
                continue
            c = CALL.match(rest)
            if not c:
                continue
            name, args = c.group(1), c.group(2)
            entry = {"time": stamp, "name": name, "target": None, "result": None}
            fd = FD.match(args)
            if fd:
                entry["target"] = fd.group(2)
            elif name in ("openat", "creat", "rename", "renameat", "renameat2", "unlink", "unlinkat"):
                paths = re.findall(r'"([^"]*)"', args)
                entry["target"] = paths[-1] if paths else None
                if name == "openat":
                    entry["flags"] = args
            calls.append(entry)
            if args.rstrip().endswith("<unfinished ...>"):
                pending[pid] = entry
            else:
                res = RESULT.search(args)
                entry["result"] = int(res.group(1)) if res else None
                took = DURATION.search(args)
                entry["end"] = stamp + float(took.group(1)) if took else stamp
    for entry in calls:
        entry["kind"] = classify(entry["target"], recordings)
    return calls


def classify(target, recordings):
    if target is None:
        return "none"
    if target.startswith(recordings):
        return "directory" if os.path.isdir(target) or not os.path.splitext(target)[1] else "recording"
    if target.startswith("socket:") or target.startswith("UNIX"):
        return "socket"
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("anon_inode:"):
        return "anon"
    if target.startswith("/dev/"):
        return "device"
    return "other file"


def summarize_calls(calls, t0, t1):
    """What `strace -c` counts (calls per system call), and bytes written per kind of target."""
    counts, by_kind, written, others = {}, {}, {}, {}
    for c in calls:
        if not t0 <= c["time"] < t1:
            continue
        key = c["name"]
        counts[key] = counts.get(key, 0) + 1
        kind_key = f"{key} {c['kind']}"
        by_kind[kind_key] = by_kind.get(kind_key, 0) + 1
        if key in WRITES and c["result"] is not None and c["result"] > 0:
            written[c["kind"]] = written.get(c["kind"], 0) + c["result"]
        if c["kind"] == "other file" and key not in ("openat",):
            others[c["target"]] = others.get(c["target"], 0) + 1
    file_syncs = sum(v for k, v in by_kind.items() if k.split()[0] in ("fsync", "fdatasync") and k.endswith(" recording"))
    dir_syncs = sum(v for k, v in by_kind.items() if k.split()[0] in ("fsync", "fdatasync") and k.endswith(" directory"))
    return {"calls": counts, "calls_by_target": by_kind, "bytes_written_by_target": written,
            "fsync": counts.get("fsync", 0), "fdatasync": counts.get("fdatasync", 0),
            "syncs_on_recordings": file_syncs, "syncs_on_directories": dir_syncs,
            "writes_to_recordings": sum(v for k, v in by_kind.items() if k.split()[0] in WRITES and k.endswith(" recording")),
            "other_files_touched": others}


def attach_strace(pid, log):
    proc = subprocess.Popen(["strace", "-f", "-qq", "-ttt", "-T", "-y", "-e", f"trace={TRACED}", "-o", log, "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"strace: {proc.stderr.read().decode(errors='replace')}")
        traced = []
        for task in glob.glob(f"/proc/{pid}/task/*/status"):
            try:
                with open(task) as f:
                    tracer = next(int(line.split()[1]) for line in f if line.startswith("TracerPid:"))
                traced.append(tracer == proc.pid)
            except (OSError, StopIteration):
                pass
        if traced and all(traced):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("strace did not attach to every thread")


def detach_strace(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- one case -----------------------------------------------------------------------------

def config_for(case):
    fmt, interval = case["format"], case["sync_interval"]
    text = f"""\
[recording]
format = "{fmt}"
[capture]
sync_interval = {interval}
[segments]
length = 3600
[autostart]
enabled = true
name = "station"
"""
    if case["trigger"]:
        text += """\
[trigger]
enabled = true
high_pass = 1000
low_pass = 10000
above_floor = 12
"""
    return text


def files_under(directory):
    out = {}
    for base, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(base, name)
            try:
                out[os.path.relpath(path, directory)] = os.path.getsize(path)
            except OSError:
                pass
    return out


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


class Sampler(threading.Thread):
    """recd's /proc/PID/io, the device's and ext4's counters and the files' sizes every 50 ms."""

    def __init__(self, pid, fs, recordings):
        super().__init__(daemon=True)
        self.pid, self.fs, self.recordings = pid, fs, recordings
        self.samples = []
        self.stopping = threading.Event()

    def sample(self):
        self.samples.append({"time": time.time(), "io": proc_io(self.pid), "counters": self.fs.counters(),
                             "files": files_under(self.recordings)})

    def run(self):
        self.sample()
        while not self.stopping.wait(0.05):
            self.sample()

    def stop(self):
        self.stopping.set()
        self.join()
        self.sample()


def span(a, b, calls, log_lines, intervals):
    """Everything counted between two samples."""
    ca, cb = a["counters"], b["counters"]
    return {
        "start": a["time"], "seconds": b["time"] - a["time"], "sync_intervals": intervals,
        "io": {k: b["io"][k] - a["io"][k] for k in a["io"]},
        "device": {k: (cb["block"][k] - ca["block"][k]) if ca["block"][k] is not None else None for k in ca["block"]},
        "ext4_kbytes": (cb["ext4_kbytes"] - ca["ext4_kbytes"]) if ca["ext4_kbytes"] is not None else None,
        "syscalls": summarize_calls(calls, a["time"], b["time"]),
        "file_growth_bytes": sum(b["files"].values()) - sum(a["files"].values()),
        "log": {"lines": sum(1 for t, _ in log_lines if a["time"] <= t < b["time"]),
                "bytes": sum(len(line) for t, line in log_lines if a["time"] <= t < b["time"])},
    }


def run_case(case, bindir, work, fs, device, seconds):
    label = case["label"]
    case_dir = os.path.join(work, label.replace(" ", "_").replace("=", ""))
    os.makedirs(case_dir)
    recordings = os.path.join(fs.mount, "recordings")
    fs.sync()
    time.sleep(1)
    daemon = Daemon(bindir, case_dir, "sdpaced", config_for(case), device.env, recordings)
    daemon.start()
    result = {"label": label, "format": case["format"], "sync_interval": case["sync_interval"], "trigger": case["trigger"],
              "config": config_for(case)}
    trace = None
    try:
        last = {}

        def under_way():
            status = daemon.call("status")
            last["status"] = status
            if status["state"]["name"] != "recording":
                return None
            if case["trigger"]:
                return status if (status.get("trigger") or {}).get("state") == "armed" else None
            path = status["state"].get("recording", {}).get("path")
            return status if path and (os.path.exists(path) or os.path.exists(path + ".part")) else None
        try:
            wait_for(under_way, 30, "the recording")
        except RuntimeError:
            raise RuntimeError(f"the recording did not begin: {json.dumps(last.get('status'))}\n{daemon.log_text()}")
        time.sleep(WARMUP)
        trace_log = os.path.join(case_dir, "strace.log")
        trace = attach_strace(daemon.proc.pid, trace_log)
        status0 = daemon.call("status")
        sampler = Sampler(daemon.proc.pid, fs, recordings)
        sampler.start()
        time.sleep(seconds)
        sampler.stop()
        status1 = daemon.call("status")
        samples = sampler.samples
        first, last_sample = samples[0], samples[-1]
        io0, c0, t0, files0 = first["io"], first["counters"], first["time"], first["files"]
        io1, c1, t1, files1 = last_sample["io"], last_sample["counters"], last_sample["time"], last_sample["files"]
        # Closing the file: stop, the file finalized (an .m4a rewritten), everything on the device.
        if not case["trigger"]:
            daemon.call("stop")
            wait_for(lambda: daemon.call("status")["state"]["name"] in ("idle", "finished", "failed"), 120, "the stop")
        else:
            daemon.call("stop")
            wait_for(lambda: daemon.call("status")["state"]["name"] in ("idle", "finished", "failed"), 60, "the stop")
        time.sleep(0.5)
        io2, t2 = proc_io(daemon.proc.pid), time.time()
        fs.sync()
        c2 = fs.counters()
        detach_strace(trace)
        trace = None
        calls = parse_trace(trace_log, recordings)
    finally:
        if trace:
            detach_strace(trace)
        daemon.stop()
    files2 = files_under(recordings)
    frames = status1["statistics"]["framesCaptured"] - status0["statistics"]["framesCaptured"]
    # The span the per-hour figures come from: from just after one fsync of the file returned to
    # just after the last one in the window returned, a whole number of sync intervals (its data,
    # header and journal commit are on the device when fsync returns); a window cut anywhere else
    # is off by up to one interval's data (measured: WAV at 5 s, 685 MB/h for 691 MB/h of audio).
    # Between events nothing is synced: the whole window.
    ends = sorted(c["end"] for c in calls if c["name"] in ("fsync", "fdatasync") and c["kind"] == "recording"
                  and t0 <= c["end"] <= t1)
    spans = {"window": span(first, last_sample, calls, daemon.lines, None)}
    if len(ends) >= 2:
        a = next(x for x in samples if x["time"] >= ends[0])
        b = next(x for x in samples if x["time"] >= ends[-1])
        spans["aligned"] = span(a, b, calls, daemon.lines, len(ends) - 1)
    result.update({
        "window_s": t1 - t0, "recorded_s": frames / RATE, "samples": len(samples),
        "xruns": status1["statistics"]["xruns"], "frames_lost": status1["statistics"]["framesLost"],
        "trigger_status": status1.get("trigger"),
        "spans": spans, "per_hour_from": "aligned" if "aligned" in spans else "window",
        "io_close": {k: io2[k] - io1[k] for k in io1},
        "device_close": {k: (c2["block"][k] - c1["block"][k]) if c1["block"][k] is not None else None for k in c1["block"]},
        "ext4_kbytes_close": (c2["ext4_kbytes"] - c1["ext4_kbytes"]) if c1["ext4_kbytes"] is not None else None,
        "syscalls_close": summarize_calls(calls, t1, t2 + 5),
        "files_at_window_start": files0, "files_at_window_end": files1, "files_final": files2,
        "final_bytes": sum(files2.values()),
        "log_total": {"lines": len(daemon.lines), "bytes": sum(len(line) for _, line in daemon.lines)},
        "log": daemon.log_text()[-4000:],
    })
    if files2 and not case["trigger"]:
        final = os.path.join(recordings, max(files2, key=files2.get))
        probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", final],
                               capture_output=True, text=True)
        result["final_duration_s"] = float(probe.stdout.strip()) if probe.stdout.strip() else None
    shutil.rmtree(recordings, ignore_errors=True)
    fs.sync()
    return result


# --- figures ------------------------------------------------------------------------------

def per_hour(result):
    """The figures a row shows, per hour of recorded audio (wall-clock hour: the device is paced)."""
    sp = result["spans"][result["per_hour_from"]]
    k = 3600 / sp["seconds"]
    sw, dw, io = sp["syscalls"], sp["device"], sp["io"]
    row = {
        "audio_mb": sp["file_growth_bytes"] * k / 1e6,
        "recording_write_mb": sw["bytes_written_by_target"].get("recording", 0) * k / 1e6,
        "writes_to_recordings": sw["writes_to_recordings"] * k,
        "fsync": (sw["fsync"] + sw["fdatasync"]) * k,
        "fdatasync": sw["fdatasync"] * k,
        "wchar_mb": io["wchar"] * k / 1e6, "syscw": io["syscw"] * k,
        "write_bytes_mb": io["write_bytes"] * k / 1e6,
        "device_mb": dw["sectors"] * 512 * k / 1e6, "device_writes": dw["writes"] * k,
        "device_flushes": dw["flushes"] * k if dw["flushes"] is not None else None,
        "ext4_mb": sp["ext4_kbytes"] * 1024 * k / 1e6 if sp["ext4_kbytes"] is not None else None,
        "log_lines": sp["log"]["lines"] * k, "log_bytes": sp["log"]["bytes"] * k,
    }
    close = result["device_close"]
    row["close_device_mb"] = close["sectors"] * 512 / 1e6
    row["close_fsync"] = result["syscalls_close"]["fsync"] + result["syscalls_close"]["fdatasync"]
    # A station's hour: one hourly file's worth of steady writing and one close. An .m4a's close
    # rewrites the file, so its cost scales with the file's size: measured here as a ratio.
    if result["final_bytes"] and not result["trigger"]:
        ratio = close["sectors"] * 512 / result["final_bytes"]
        row["close_ratio"] = ratio
        row["station_hour_mb"] = row["device_mb"] + (ratio * row["audio_mb"] if result["format"] == "aac"
                                                     else row["close_device_mb"])
    return row


def fmt(x, digits=1):
    if x is None:
        return "–"
    if abs(x) >= 100:
        return f"{x:,.0f}".replace(",", " ")
    return f"{x:.{digits}f}"


def tables(results):
    """Markdown lines: the per-hour table and the details (shared with bench/report.py)."""
    lines = []
    w = lines.append
    shared = "" if results["filesystem"]["private"] else " (**whole disk, shared with other processes**)"
    w(f"{len(results['cases'])} cases, each a fresh recd recording {results['seconds']:.0f} s of real time on the paced "
      f"device after a {results.get('warmup', WARMUP):.0f} s warm-up, extrapolated to an hour (× 3600 / the span below). "
      "The card's view: "
      f"`/sys/block/{results['filesystem']['disk']}/stat`{shared}, {results['filesystem']['type']} "
      f"mounted `{results['filesystem']['options']}`.")
    w("")
    w("| case | audio MB/h (file growth) | written to the file MB/h (syscalls) | fsync/h | write calls/h to the file "
      "| reaches the device MB/h | device write requests/h | cache flushes/h | write_bytes MB/h | wchar MB/h "
      "| closing the file | station hour (1 h files) MB | log lines/h |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results["cases"]:
        h = per_hour(r)
        close = "–" if r["trigger"] else (
            f"{fmt(h['close_device_mb'], 2)} MB, {h['close_fsync']} fsync"
            + (f" ({fmt(100 * h['close_ratio'], 0)} % of the file)" if r["format"] == "aac" else ""))
        w(f"| {r['label']} | {fmt(h['audio_mb'])} | {fmt(h['recording_write_mb'])} | {fmt(h['fsync'], 0)} "
          f"| {fmt(h['writes_to_recordings'], 0)} | {fmt(h['device_mb'])} | {fmt(h['device_writes'], 0)} "
          f"| {fmt(h['device_flushes'], 0)} | {fmt(h['write_bytes_mb'])} | {fmt(h['wchar_mb'])} | {close} "
          f"| {fmt(h.get('station_hour_mb'))} | {fmt(h['log_lines'], 0)} |")
    w("")
    w("Per case: the span the figures above come from (from just after one fsync of the file returned to just "
      "after the last one in the window did, a whole number of sync intervals; between events the whole window), "
      "the device's MB/h over the plain window for comparison, xruns / frames lost, ext4's own count "
      "(`lifetime_write_kbytes`), fsyncs on the file / on directories, bytes written by target over the span, "
      "and the final file:")
    w("")
    w("| case | span | device MB/h, plain window | xruns / lost | ext4 MB/h | syncs file / dir | bytes written by target | final file |")
    w("|---|---|---|---|---|---|---|---|")
    for r in results["cases"]:
        h = per_hour(r)
        sp = r["spans"][r["per_hour_from"]]
        plain = r["spans"]["window"]
        sw = sp["syscalls"]
        targets = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sorted(sw["bytes_written_by_target"].items()))
        final = "none" if not r["files_final"] else (
            f"{r['final_bytes'] / 1e6:.2f} MB" + (f", {r['final_duration_s']:.1f} s" if r.get("final_duration_s") else ""))
        what = (f"{sp['seconds']:.1f} s, {sp['sync_intervals']} intervals" if sp["sync_intervals"]
                else f"{sp['seconds']:.1f} s window")
        w(f"| {r['label']} | {what} | {fmt(plain['device']['sectors'] * 512 * 3600 / plain['seconds'] / 1e6)} "
          f"| {r['xruns']} / {r['frames_lost']} | {fmt(h['ext4_mb'])} "
          f"| {sw['syncs_on_recordings']} / {sw['syncs_on_directories']} | {targets or '–'} | {final} |")
    w("")
    return lines


# --- main ---------------------------------------------------------------------------------

def parse_cases(text):
    cases = []
    for item in text.split(","):
        item = item.strip()
        if item == "trigger":
            cases.append({"label": "armed, between events", "format": "flac", "sync_interval": 1, "trigger": True})
        else:
            fmt_name, _, interval = item.partition(":")
            interval = float(interval or 1)
            interval = int(interval) if interval == int(interval) else interval
            cases.append({"label": f"{fmt_name.upper()} sync_interval={interval}", "format": fmt_name,
                          "sync_interval": interval, "trigger": False})
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bindir")
    parser.add_argument("--out")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("BENCH_SDCARD_SECONDS", "120")))
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES))
    args = parser.parse_args()
    # A stop by signal still unmounts, detaches the loop device and ends the servers (finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    bindir = os.path.abspath(args.bindir)
    for tool in ("strace", "pulseaudio", "pacat", "parec", "sox", "ffprobe"):
        if not shutil.which(tool):
            sys.exit(f"sdcard.py: {tool} is missing (make deps-bench)")
    out = args.out or os.path.join(ROOT, "bench", "out",
                                   "sdcard-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ".json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    work = tempfile.mkdtemp(prefix="recd-sdcard.", dir=os.environ.get("BENCH_SDCARD_TMP", "/tmp"))
    fs = device = None
    results = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "command": " ".join(["python3", "bench/sdcard.py"] + sys.argv[1:]),
               "recd_version": subprocess.run([os.path.join(bindir, "recd"), "--version"], capture_output=True,
                                              text=True).stdout.strip(),
               "tree": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                      text=True).stdout.strip(),
               "kernel": os.uname().release, "seconds": args.seconds, "warmup": WARMUP,
               "loadavg_start": open("/proc/loadavg").read().split()[:3],
               "dirty_expire_centisecs": int(open("/proc/sys/vm/dirty_expire_centisecs").read()),
               "dirty_writeback_centisecs": int(open("/proc/sys/vm/dirty_writeback_centisecs").read()),
               "signal": "module-sine 440 Hz + pink noise (sox synth pinknoise vol 0.05) into a null sink, 48 kHz stereo",
               "cases": []}
    try:
        fs = Filesystem(work)
        results["filesystem"] = {"private": fs.private, "disk": fs.disk, "type": fs.type,
                                 "options": fs.options, "why_not_private": fs.why}
        if fs.type in ("tmpfs", "ramfs"):
            print("sdcard.py: the work directory is on tmpfs: nothing reaches a device (set BENCH_SDCARD_TMP)",
                  file=sys.stderr)
        device = PacedDevice(work)
        device.start()
        for case in parse_cases(args.cases):
            print(f"sdcard: {case['label']} ({args.seconds:.0f} s)", flush=True)
            r = run_case(case, bindir, work, fs, device, args.seconds)
            results["cases"].append(r)
            h = per_hour(r)
            print(f"  device {h['device_mb']:.1f} MB/h, fsync {h['fsync']:.0f}/h, audio {h['audio_mb']:.1f} MB/h, "
                  f"log {h['log_lines']:.0f} lines/h", flush=True)
    finally:
        if device:
            device.stop()
        if fs:
            fs.cleanup()
        if os.environ.get("BENCH_KEEP") == "1":
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    results["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print("\n".join(tables(results)))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
