"""make soak: recd's memory, threads and descriptors over hours of wall-clock time, three loads
at once, each its own daemon on its own paced device (its own private PulseAudio server with a
null sink and a 440 Hz tone played into it):

  alone        one FLAC 48 kHz stereo recording, nothing else
  subscribers  the same, in 30 s segments, with 20 clients subscribed to state, currentTime,
               levels and recording at 20 Hz, listening with a 10 s pre-roll from the daemon's
               start ([listen]), two audio taps read all along (16 kHz mono and the device's
               format; a tap the device's loss ends is opened again); the PulseAudio server is stopped for 10 s every 20 minutes
               (the device is lost and comes back, for the recording and for listening)
  churn        start/pause/resume/stop/cancel/rename cycles, some with a duration; 50
               subscribers that come and go (random topics and intervals, some unsubscribe and
               subscribe again, some close with unread data); garbage clients (bad JSON, an
               overlong line, binary, unknown methods, pipelined requests left unread, a client
               that stops reading); every 5 minutes (SOAK_REST_MINUTES, --rest-minutes) a rest:
               the clients all leave and the cycles pause between two recordings, and once
               recd's descriptors are steady its memory is sampled at rest, fitted on its own:
               what the daemon keeps from the coming and going, without what the clients and
               the recording in flight hold at a busy moment (4-10 MiB of RssAnon, up and down)

Every minute it samples each daemon's VmRSS, RssAnon, RssFile, threads (by name) and open
descriptors from /proc; at the end it checks every file recorded (ffprobe reads it, ffmpeg
decodes it without an error, and it holds exactly the frames recd reported: a whole
recording's frames, a 30 s segment's round(30 x 48000), a recording with a duration
round(duration x 48000)), and prints the least-squares slope of RSS and RssAnon (MiB/h),
threads and descriptors (per hour) after the warm-up, against the target (RSS < 0.05 MiB/h,
threads and descriptors flat). While it runs, OUT/summary.json and OUT/soak.png are rewritten
every 10 minutes, so a run in progress can be read.

usage: soak.py BINDIR [--minutes 120] [--warmup 15] [--out DIR] [--churn-rate 1] [--churn-keep 300]
       soak.py --report DIR          (summary and plot again from DIR/samples.jsonl)
       soak.py --compare BEFORE AFTER OUT.png   (two runs' RssAnon in one plot)
Knobs also from the environment: SOAK_MINUTES, SOAK_WARMUP_MINUTES, SOAK_SAMPLE_SECONDS (60),
SOAK_LOSS_MINUTES (20), SOAK_LOSS_SECONDS (10), SOAK_OUT, SOAK_KEEP=1 (keep the work directory),
SOAK_CHURN_RATE (1): churn this many times faster (subscribers' lives, garbage clients and
recording cycles all shortened by it): 10 puts a month of a status bar's and Home Assistant's
coming and going into a few hours. SOAK_CHURN_KEEP (300), --churn-keep: the churn load keeps
its newest N recordings and deletes older ones through recd, as retention or an uploader keeps
a station's directory bounded (0 keeps all: then every lookup by name grows with the files).
SOAK_CLOCK (synchronized), --clock: what the kernel tells the daemons of the system clock
(synchronized: a station once NTP has spoken; unsynchronized: an offline station without a
real-time clock, whose closed files recd keeps in memory, 0.8 KiB each, until it can re-date them;
kernel: this machine's own answer, often unsynchronized in a container).
SIGINT or SIGTERM ends the run early; the files are still checked and the report written.
"""

import argparse
import collections
import json
import multiprocessing
import os
import random
import re
import resource
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import Recd, RecdClient, clock_environment  # noqa: E402

RATE = 48000
SEGMENT_SECONDS = 30
LOADS = ("alone", "subscribers", "churn")
TARGET_RSS_MIB_PER_H = 0.05
ALL_TOPICS = ["state", "currentTime", "error", "levels", "recording", "segment", "warning", "listening"]

CONFIG = {
    "alone": "",
    "subscribers": "[metering]\nlevels_interval = 0.05\ntime_interval = 0.05\n\n[listen]\nenabled = true\npre_roll = \"10 s\"\n",
    "churn": "[metering]\nlevels_interval = 0.05\ntime_interval = 0.05\n\n[server]\nmax_clients = 200\n",
}


def log(message):
    print(time.strftime("%H:%M:%S ") + message, flush=True)


# --- PulseAudio servers and tones -----------------------------------------------------------

class PulseServer:
    """A private PulseAudio server with one null sink, and a tone played into it (a live
    microphone keeps a real device running; an idle null sink renders in 2 s blocks)."""

    def __init__(self, workdir, name):
        self.dir = os.path.join(workdir, f"pulse-{name}")
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "native")
        self.sink = f"{name}sink"
        self.conf = os.path.join(self.dir, "pa.conf")
        with open(self.conf, "w") as f:
            f.write(f"load-module module-native-protocol-unix auth-anonymous=1 socket={self.socket}\n"
                    f"load-module module-null-sink sink_name={self.sink} rate={RATE} channels=2\n"
                    f"set-default-source {self.sink}.monitor\n")
        self.server = None
        self.tone = None
        self.env = dict(os.environ, HOME=self.dir, XDG_RUNTIME_DIR=self.dir, PULSE_SERVER=f"unix:{self.socket}")

    def start(self):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.server = subprocess.Popen(
            ["pulseaudio", "-n", "-F", self.conf, "--daemonize=no", "--exit-idle-time=-1", "--system=false",
             f"--log-target=file:{self.dir}/log"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not os.path.exists(self.socket):
            if time.monotonic() > deadline or self.server.poll() is not None:
                raise RuntimeError(f"PulseAudio did not start; see {self.dir}/log")
            time.sleep(0.05)
        # A 40 ms buffer keeps the sink rendering every 10 ms.
        self.tone = subprocess.Popen(
            ["speaker-test", "-D", "pulse", "-c", "2", "-r", str(RATE), "-t", "sine", "-f", "440", "-l", "0",
             "-b", "40000", "-p", "10000"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)

    def stop(self):
        for proc in (self.tone, self.server):
            if proc and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.tone = self.server = None


# --- /proc ----------------------------------------------------------------------------------

def sample(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                out[key] = int(value.split()[0])
            elif key == "Threads":
                out[key] = int(value)
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    names = collections.Counter()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                names[f.read().strip()] += 1
        except OSError:
            pass
    out["threadNames"] = dict(sorted(names.items()))
    return out


def recd_pid(pid):
    """recd's pid: `pid` itself, or its descendant named recd when it runs under a wrapper."""
    todo = [pid]
    while todo:
        current = todo.pop(0)
        try:
            with open(f"/proc/{current}/comm") as f:
                if f.read().strip() == "recd":
                    return current
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return pid


# --- clients --------------------------------------------------------------------------------

def request(method, params=None, rid=1):
    message = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


class Follower(threading.Thread):
    """One connection subscribed to `topics`, reading every notification; keeps the segment
    announcements and the states seen."""

    def __init__(self, path, topics):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.sendall(request("subscribe", {"topics": topics}))
        self.segments = []
        self.states = collections.Counter()
        self.closed = False

    def run(self):
        buffer = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    message = json.loads(line)
                    if message.get("method") != "changed":
                        continue
                    params = message["params"]
                    if params["topic"] == "segment" and params["value"]:
                        self.segments.append(params["value"])
                    elif params["topic"] == "state":
                        self.states[params["value"]["name"]] += 1
        except OSError:
            pass
        self.closed = True

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.join(10)
        self.sock.close()


def subscribers_worker(path, count, topics, interval, conn):
    """`count` clients subscribed to `topics` at `interval`, reading everything until told to
    stop; reconnects a client recd closed. Sends back the notifications and reconnections."""
    selector = selectors.EpollSelector()
    sub = request("subscribe", {"topics": topics, "interval": interval})
    reconnects = 0

    def connect():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(sub)
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)

    for _ in range(count):
        connect()
    selector.register(conn, selectors.EVENT_READ)
    received = 0
    buffer = bytearray(262144)
    while True:
        for key, _ in selector.select(timeout=1):
            if key.fileobj is conn:
                conn.recv()
                conn.send({"notifications": received, "reconnects": reconnects})
                return
            try:
                size = key.fileobj.recv_into(buffer)
            except BlockingIOError:
                continue
            except OSError:
                size = 0
            if not size:
                selector.unregister(key.fileobj)
                key.fileobj.close()
                reconnects += 1
                connect()
                continue
            received += buffer.count(b"\n", 0, size)


TAP_HEADER = struct.Struct("<4sIQdIIII")  # doc/protocol.md, `tap`: the chunk header
TAP_FORMATS = [{"rate": 16000, "channels": 1}, {}]  # a detector's 16 kHz mono; the device's own


def tap_worker(path, formats, conn):
    """One tap client per format in `formats`, reading the audio until told to stop; a tap
    that ends (the device lost) is opened again once recd takes it. Sends back the frames
    read, the chunks' lost frames and the reopenings."""
    stats = {"frames": 0, "lost": 0, "reopened": 0, "refused": 0}
    lock = threading.Lock()
    stopping = threading.Event()
    sockets = []

    def client(params):
        first = True
        while not stopping.is_set():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                with lock:
                    sockets.append(s)
                s.sendall(request("tap", params))
                stream = s.makefile("rb")
                answer = json.loads(stream.readline() or b"{}")
                if "result" not in answer:
                    with lock:
                        stats["refused"] += 1
                    stopping.wait(1)
                    continue
                if not first:
                    with lock:
                        stats["reopened"] += 1
                first = False
                while True:
                    header = stream.read(TAP_HEADER.size)
                    if len(header) < TAP_HEADER.size:
                        break
                    _, _, _, _, frames, lost, _, length = TAP_HEADER.unpack(header)
                    if len(stream.read(length)) < length:
                        break
                    with lock:
                        stats["frames"] += frames
                        stats["lost"] += lost
            except OSError:
                stopping.wait(1)
            finally:
                with lock:
                    if s in sockets:
                        sockets.remove(s)
                s.close()

    threads = [threading.Thread(target=client, args=(params,), daemon=True) for params in formats]
    for thread in threads:
        thread.start()
    conn.recv()
    stopping.set()
    with lock:
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    for thread in threads:
        thread.join(10)
    with lock:
        conn.send(dict(stats))


SUBSCRIPTION_ID = re.compile(rb'"subscription":"(\d+)"')


def churn_subscribers_worker(path, count, seed, rate, conn):
    """`count` slots, each a client that lives 2-40 s (divided by `rate`): random topics and interval; a third
    unsubscribe and subscribe again half-way; a fifth close with unread data (the kernel resets
    the connection). Then the slot connects again."""
    rng = random.Random(seed)
    selector = selectors.EpollSelector()
    slots = {}
    stats = collections.Counter()
    buffer = bytearray(262144)

    def open_slot(index):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            topics = rng.sample(ALL_TOPICS, rng.randint(1, len(ALL_TOPICS)))
            interval = rng.choice([0.05, 0.05, 0.1, 0.25, 1])
            s.sendall(request("subscribe", {"topics": topics, "interval": interval}))
        except OSError:
            stats["connectFailures"] += 1
            s.close()
            slots[index] = {"sock": None, "until": time.monotonic() + 1}
            return
        s.setblocking(False)
        life = rng.uniform(2, 40) / rate
        now = time.monotonic()
        mode = rng.choices(["read", "resubscribe", "abrupt"], [7, 5, 3])[0]
        slots[index] = {"sock": s, "until": now + life, "mode": mode, "topics": topics, "interval": interval,
                        "half": now + life / 2 if mode == "resubscribe" else None, "id": None, "rid": 2}
        selector.register(s, selectors.EVENT_READ, index)
        stats["connections"] += 1

    def close_slot(index):
        slot = slots[index]
        s = slot["sock"]
        if s is not None:
            selector.unregister(s)
            if slot["mode"] == "abrupt":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()

    for i in range(count):
        open_slot(i)
    selector.register(conn, selectors.EVENT_READ, -1)
    while True:
        for key, _ in selector.select(timeout=0.2):
            if key.data == -1:
                message = conn.recv()
                for i in list(slots):
                    close_slot(i)
                if message == "pause":  # a rest: every client gone until "resume"
                    conn.send("paused")
                    message = conn.recv()
                if message != "resume":
                    conn.send(dict(stats))
                    return
                for i in list(slots):
                    open_slot(i)
                break
            slot = slots[key.data]
            if slot["mode"] == "abrupt" and time.monotonic() > slot["until"] - 1:
                continue  # stops reading in its last second: data left unread when it closes
            try:
                size = key.fileobj.recv_into(buffer)
            except BlockingIOError:
                continue
            except OSError:
                size = 0
            if not size:
                stats["closedByRecd"] += 1
                selector.unregister(key.fileobj)
                key.fileobj.close()
                slot["sock"] = None
                slot["until"] = time.monotonic()
                continue
            stats["notifications"] += buffer.count(b"\n", 0, size)
            if slot["id"] is None:
                match = SUBSCRIPTION_ID.search(bytes(buffer[:size]))
                if match:
                    slot["id"] = match.group(1).decode()
        now = time.monotonic()
        for i, slot in list(slots.items()):
            if slot["sock"] is not None and slot["half"] is not None and now >= slot["half"] and slot["id"]:
                slot["half"] = None
                try:
                    slot["sock"].sendall(request("unsubscribe", {"subscription": slot["id"]}, rid=slot["rid"]) +
                                         request("subscribe", {"topics": slot["topics"], "interval": slot["interval"]},
                                                 rid=slot["rid"] + 1))
                    stats["resubscribes"] += 1
                except OSError:
                    pass
            if now >= slot["until"]:
                close_slot(i)
                open_slot(i)


def garbage_worker(path, seed, rate, conn):
    """A client every half second (divided by `rate`) that does something a well-behaved client does not."""
    rng = random.Random(seed)
    stats = collections.Counter()
    stalled = []  # (socket, until): subscribed at 100 Hz to everything, never reading

    def talk(payload, read=True, linger_reset=False):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(path)
            if payload:
                s.sendall(payload)
            if read:
                s.recv(65536)
        except OSError:
            stats["errors"] += 1
        if linger_reset:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()

    kinds = {
        "notJSON": lambda: talk(b"this is not json\n"),
        "overlongLine": lambda: talk(b"{" + b"x" * 70000),
        "binary": lambda: talk(bytes(rng.getrandbits(8) for _ in range(2000)) + b"\n", read=False),
        "unknownMethod": lambda: talk(request("nosuch.method")),
        "badParams": lambda: talk(request("start", {"format": "wma", "sampleRate": -1})),
        "badName": lambda: talk(request("recordings.info", {"name": "../../etc/passwd"})),
        "connectClose": lambda: talk(b"", read=False),
        "pipelinedUnread": lambda: talk(b"".join(request("status", rid=i) for i in range(200)), read=False,
                                        linger_reset=True),
        "halfRequest": lambda: talk(b'{"jsonrpc":"2.0","id":1,"meth', read=False),
    }
    names = list(kinds)
    while True:
        if conn.poll(0.5 / rate):
            message = conn.recv()
            for s, _ in stalled:
                s.close()
            stalled.clear()
            if message == "pause":  # a rest: nothing connected until "resume"
                conn.send("paused")
                message = conn.recv()
            if message != "resume":
                conn.send(dict(stats))
                return
            continue
        now = time.monotonic()
        for s, until in list(stalled):
            if now >= until:
                s.close()
                stalled.remove((s, until))
        if rng.random() < 0.05 and len(stalled) < 3:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                s.sendall(request("subscribe", {"interval": 0.01}))
                stalled.append((s, now + rng.uniform(10, 60)))
                stats["stalled"] += 1
            except OSError:
                s.close()
                stats["errors"] += 1
            continue
        kind = rng.choice(names)
        kinds[kind]()
        stats[kind] += 1


class ChurnCycles(threading.Thread):
    """Recording cycles over one control connection until `stop_event`."""

    def __init__(self, recd, stop_event, seed, rate=1.0, keep=300):
        super().__init__(daemon=True)
        self.rate = rate
        self.keep = keep      # files kept; older ones are deleted through recd (0: keep all)
        self.checked = []     # the deleted files checked before deletion
        self.checkedResults = []
        self.recd = recd
        self.stop_event = stop_event
        self.rng = random.Random(seed)
        self.files = []       # {"path", "frames", "promised"}: files that must exist at the end
        self.cancelled = []   # paths that must not exist
        self.errors = []
        self.counts = collections.Counter()
        # A rest (see `rest`): asked for, reached (between two cycles: nothing recording), ended.
        self.rest_asked = threading.Event()
        self.resting = threading.Event()
        self.rest_over = threading.Event()

    def rest(self):
        """Between two cycles, while a rest is asked for: recd idle, its last file closed."""
        self.resting.set()
        while not self.rest_over.wait(0.2) and not self.stop_event.is_set():
            pass
        self.rest_asked.clear()
        self.rest_over.clear()
        self.resting.clear()

    def nap(self, low, high):
        self.stop_event.wait(self.rng.uniform(low, high) / self.rate)

    def cycle(self, client, i):
        rng = self.rng
        name = f"churn-{i}"
        if i % 7 == 3:
            # With a duration: ends by itself with exactly round(duration x rate) frames.
            duration = rng.choice([0.5, 1.25, 2])
            client.call("start", {"name": name, "format": "flac", "sampleRate": RATE, "channels": 2,
                                  "duration": duration})
            deadline = time.monotonic() + duration + 30
            while True:
                state = client.call("status")["state"]
                if state["name"] in ("finished", "failed") or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if state["name"] != "finished":
                raise RuntimeError(f"a recording with a duration ended {state['name']}")
            recording = state["recording"]
            self.files.append({"path": recording["path"], "frames": recording["frames"],
                               "promised": round(duration * RATE)})
            self.counts["duration"] += 1
            self.prune(client)
            return
        started = client.call("start", {"name": name, "format": "flac", "sampleRate": RATE, "channels": 2})
        self.counts["start"] += 1
        self.nap(0.2, 1.5)
        for _ in range(rng.choice([0, 1, 1, 2])):
            client.call("pause")
            self.counts["pause"] += 1
            self.nap(0.1, 0.6)
            client.call("resume")
            self.counts["resume"] += 1
            self.nap(0.2, 1.0)
        if i % 5 == 4:
            client.call("cancel")
            self.counts["cancel"] += 1
            self.cancelled.append(started["path"])
            return
        ended = client.call("stop")
        self.counts["stop"] += 1
        path, frames = ended["path"], ended["frames"]
        if i % 2 == 0:
            renamed = client.call("recordings.rename", {"from": os.path.basename(path), "to": f"{name}-renamed"})
            self.counts["rename"] += 1
            path = renamed["path"]
            if renamed["frames"] != frames:
                self.errors.append(f"{name}: recordings.rename says {renamed['frames']} frames, stop said {frames}")
        if i % 25 == 0:
            client.call("recordings.info", {"name": os.path.basename(path)})
            client.call("recordings.list")
            self.counts["list"] += 1
        self.files.append({"path": path, "frames": frames, "promised": None})
        self.prune(client)

    def prune(self, client):
        """A station's directory is bounded (retention, or an uploader that moves files away):
        beyond `keep` files, the oldest is deleted through recd (`recordings.delete`), one in
        ten of them read back by FFmpeg first. Otherwise every request that looks files up
        (rename, info, list) costs more with every file, and a run at ten times the rate makes
        tens of thousands."""
        while self.keep and len(self.files) > self.keep:
            oldest = self.files.pop(0)
            self.counts["deleted"] += 1
            if self.counts["deleted"] % 10 == 1:
                self.checked.append(oldest)
                self.checkedResults.append(check_files([oldest]))
            client.call("recordings.delete", {"name": os.path.basename(oldest["path"])})
            if os.path.exists(oldest["path"]):
                self.errors.append(f"{oldest['path']}: still there after recordings.delete")

    def run(self):
        client = self.recd.client(timeout=120)
        i = 0
        while not self.stop_event.is_set():
            if self.rest_asked.is_set():
                self.rest()
                continue
            i += 1
            try:
                self.cycle(client, i)
                self.counts["cycles"] += 1
            except Exception as error:  # noqa: BLE001 (reported, and the soak goes on)
                self.errors.append(f"cycle {i}: {error}")
                self.counts["failedCycles"] += 1
                try:
                    state = client.call("status")["state"]["name"]
                    if state in ("recording", "paused", "preparing"):
                        client.call("stop")
                except Exception:  # noqa: BLE001
                    client.close()
                    client = self.recd.client(timeout=120)
                self.stop_event.wait(1)
        client.close()


# --- checks ---------------------------------------------------------------------------------

def decoded_frames(path):
    """(frames, problem): ffprobe's stream, then a full decode by ffmpeg."""
    probe = subprocess.run(["ffprobe", "-v", "error", "-of", "json", "-show_streams", path],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"ffprobe: {probe.stderr.strip()[:200]}"
    streams = json.loads(probe.stdout).get("streams", [])
    if not streams or streams[0].get("codec_name") != "flac" or int(streams[0].get("sample_rate", 0)) != RATE \
            or streams[0].get("channels") != 2:
        return None, f"ffprobe: unexpected stream {streams[:1]}"
    decode = subprocess.Popen(["ffmpeg", "-nostdin", "-v", "error", "-i", path, "-f", "s16le", "-"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    size = 0
    while True:
        chunk = decode.stdout.read(1 << 20)
        if not chunk:
            break
        size += len(chunk)
    err = decode.stderr.read().decode(errors="replace").strip()
    decode.wait()
    if decode.returncode != 0 or err:
        return size // 4, f"ffmpeg: {err[:200] or decode.returncode}"
    return size // 4, None


def check_files(files):
    """files: [{"path", "frames", "promised"}]. Returns a summary and the problems."""
    problems = []
    total = 0
    for entry in files:
        if not os.path.exists(entry["path"]):
            problems.append(f"{entry['path']}: missing")
            continue
        frames, problem = decoded_frames(entry["path"])
        total += frames or 0
        if problem:
            problems.append(f"{entry['path']}: {problem}")
        elif frames != entry["frames"]:
            problems.append(f"{entry['path']}: {frames} frames decoded, recd reported {entry['frames']}")
        elif entry["promised"] is not None and frames != entry["promised"]:
            problems.append(f"{entry['path']}: {frames} frames, {entry['promised']} promised")
    return {"files": len(files), "framesDecoded": total, "problems": problems[:50], "problemCount": len(problems)}


# --- report ---------------------------------------------------------------------------------

def slope(points):
    """Least-squares slope of (x, y) points, and the fit's intercept."""
    n = len(points)
    if n < 2:
        return float("nan"), float("nan")
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return float("nan"), float("nan")
    b = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    return b, my - b * mx


def robust_slope(points):
    """Theil-Sen: the median of the slopes between every two points. A rest sample is now and
    then high (free pages between live blocks that malloc has not trimmed yet); one such sample
    tilts a least-squares fit over a dozen points, not the median."""
    slopes = sorted((b[1] - a[1]) / (b[0] - a[0]) for i, a in enumerate(points) for b in points[i + 1:] if b[0] != a[0])
    if not slopes:
        return float("nan")
    middle = len(slopes) // 2
    return slopes[middle] if len(slopes) % 2 else (slopes[middle - 1] + slopes[middle]) / 2


def busy(rows):
    """The samples fitted as the load runs: not the one after the recordings stopped, not those
    taken at a rest (fitted on their own)."""
    return [r for r in rows if not r.get("final") and not r.get("rest")]


def read_samples(out):
    samples = collections.defaultdict(list)
    with open(os.path.join(out, "samples.jsonl")) as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                samples[record["load"]].append(record)
    return samples


def report(out, warmup_minutes, final=None, quiet=False):
    samples = read_samples(out)
    summary = {"warmupMinutes": warmup_minutes, "targetRssMiBPerHour": TARGET_RSS_MIB_PER_H, "loads": {}}
    meta_path = os.path.join(out, "run.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            summary["run"] = json.load(f)
    for load in LOADS:
        rows = busy(samples.get(load, []))
        if not rows:
            continue
        after = [r for r in rows if r["t"] >= warmup_minutes * 60]
        rests = [r for r in samples.get(load, []) if r.get("rest") and r["t"] >= warmup_minutes * 60]
        entry = {"samples": len(rows), "samplesAfterWarmup": len(after),
                 "hours": round(rows[-1]["t"] / 3600, 3),
                 "first": {k: rows[0][k] for k in ("VmRSS", "RssAnon", "RssFile", "Threads", "fds")},
                 "last": {k: rows[-1][k] for k in ("VmRSS", "RssAnon", "RssFile", "Threads", "fds")},
                 "lastThreadNames": rows[-1].get("threadNames")}
        if after:
            entry["atWarmup"] = {k: after[0][k] for k in ("VmRSS", "RssAnon", "RssFile", "Threads", "fds")}
            for key, unit in (("VmRSS", "rssMiBPerHour"), ("RssAnon", "rssAnonMiBPerHour"),
                              ("RssFile", "rssFileMiBPerHour")):
                entry[unit] = round(slope([(r["t"] / 3600, r[key] / 1024) for r in after])[0], 4)
            # The busy samples swing by several MiB with what is in flight: a median of slopes
            # beside the least-squares one shows how much a few high samples tilt it.
            entry["rssAnonTheilSenMiBPerHour"] = round(robust_slope([(r["t"] / 3600, r["RssAnon"] / 1024) for r in after]), 4)
            for key, unit in (("Threads", "threadsPerHour"), ("fds", "fdsPerHour")):
                entry[unit] = round(slope([(r["t"] / 3600, r[key]) for r in after])[0], 3)
                entry[key + "Range"] = [min(r[key] for r in after), max(r[key] for r in after)]
            if len(rests) >= 2:
                entry["rests"] = len(rests)
                points = [(r["t"] / 3600, r["RssAnon"] / 1024) for r in rests]
                entry["restRssAnonMiBPerHour"] = round(slope(points)[0], 4)
                entry["restRssAnonTheilSenMiBPerHour"] = round(robust_slope(points), 4)
                entry["restRssAnonRange"] = [min(r["RssAnon"] for r in rests), max(r["RssAnon"] for r in rests)]
                entry["restVerdict"] = "met" if entry["restRssAnonMiBPerHour"] < TARGET_RSS_MIB_PER_H else "not met"
            rss_ok = entry["rssMiBPerHour"] < TARGET_RSS_MIB_PER_H
            flat = lambda key: after[-1][key] <= after[0][key]  # noqa: E731
            entry["verdict"] = {"rss": "met" if rss_ok else "not met",
                                "threads": "flat" if flat("Threads") else "grew",
                                "fds": "flat" if flat("fds") else "grew"}
        summary["loads"][load] = entry
    if final:
        summary.update(final)
    elif os.path.exists(os.path.join(out, "summary.json")):
        # Written again (--report, --markdown): the end of the run's checks stay.
        with open(os.path.join(out, "summary.json")) as f:
            earlier = json.load(f)
        summary.update({key: earlier[key] for key in ("elapsedMinutes", "deviceLosses", "checks", "workers",
                                                        "followerStates") if key in earlier})
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    plot(out, samples, warmup_minutes)
    if not quiet:
        for load, entry in summary["loads"].items():
            if "rssMiBPerHour" not in entry:
                print(f"  {load:12s} {entry['samples']} samples, none after the warm-up yet")
                continue
            print(f"  {load:12s} {entry['hours']:.2f} h: RSS {entry['first']['VmRSS'] / 1024:.1f} -> "
                  f"{entry['last']['VmRSS'] / 1024:.1f} MiB, slope {entry['rssMiBPerHour']:+.3f} MiB/h "
                  f"({entry['verdict']['rss']}, target < {TARGET_RSS_MIB_PER_H}); RssAnon "
                  f"{entry['rssAnonMiBPerHour']:+.3f} MiB/h (Theil-Sen {entry['rssAnonTheilSenMiBPerHour']:+.3f}), RssFile {entry['rssFileMiBPerHour']:+.3f} MiB/h; "
                  f"threads {entry['ThreadsRange'][0]}-{entry['ThreadsRange'][1]} "
                  f"({entry['threadsPerHour']:+.2f}/h), fds {entry['fdsRange'][0]}-{entry['fdsRange'][1]} "
                  f"({entry['fdsPerHour']:+.2f}/h)"
                  + (f"; at rest ({entry['rests']} samples) RssAnon {entry['restRssAnonRange'][0] / 1024:.2f}-"
                     f"{entry['restRssAnonRange'][1] / 1024:.2f} MiB, slope {entry['restRssAnonMiBPerHour']:+.3f} MiB/h "
                     f"({entry['restVerdict']}; Theil-Sen {entry['restRssAnonTheilSenMiBPerHour']:+.3f})"
                     if "rests" in entry else ""), flush=True)
    return summary


def markdown(out, warmup_minutes):
    """The figures of a run, as BENCHMARKS.md shows them."""
    summary = report(out, warmup_minutes, quiet=True)
    mib = lambda kib: f"{kib / 1024:.1f}"  # noqa: E731
    print(f"| load | hours | RSS start → warm-up end → last (MiB) | RSS slope (MiB/h) | target < {TARGET_RSS_MIB_PER_H} "
          "| RssAnon slope | RssFile slope | RssAnon start → last | threads after warm-up (slope/h) "
          "| fds after warm-up (slope/h) | RssAnon at rest: range (MiB), slope (MiB/h), samples |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for load, e in summary["loads"].items():
        if "rssMiBPerHour" not in e:
            continue
        print(f"| {load} | {e['hours']:.2f} | {mib(e['first']['VmRSS'])} → {mib(e['atWarmup']['VmRSS'])} → "
              f"{mib(e['last']['VmRSS'])} | {e['rssMiBPerHour']:+.3f} | {e['verdict']['rss']} "
              f"| {e['rssAnonMiBPerHour']:+.3f} (Theil–Sen {e.get('rssAnonTheilSenMiBPerHour', float('nan')):+.3f}) | {e['rssFileMiBPerHour']:+.3f} "
              f"| {mib(e['first']['RssAnon'])} → {mib(e['last']['RssAnon'])} "
              f"| {e['ThreadsRange'][0]}–{e['ThreadsRange'][1]} ({e['threadsPerHour']:+.2f}) "
              f"| {e['fdsRange'][0]}–{e['fdsRange'][1]} ({e['fdsPerHour']:+.2f}) "
              + (f"| {mib(e['restRssAnonRange'][0])}–{mib(e['restRssAnonRange'][1])}, "
                 f"{e['restRssAnonMiBPerHour']:+.3f} ({e['restVerdict']}; Theil-Sen {e['restRssAnonTheilSenMiBPerHour']:+.3f}), "
                 f"{e['rests']} |" if "rests" in e else "| – |"))


def plot(out, samples, warmup_minutes):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  (no matplotlib: no plot; make soak installs python3-matplotlib)", flush=True)
        return
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True, height_ratios=[2, 1])
    colors = {"alone": "tab:blue", "subscribers": "tab:orange", "churn": "tab:green"}
    for load in LOADS:
        rows = busy(samples.get(load, []))
        if not rows:
            continue
        rests = [r for r in samples.get(load, []) if r.get("rest")]
        if rests:
            top.plot([r["t"] / 3600 for r in rests], [r["RssAnon"] / 1024 for r in rests], color=colors[load],
                     marker="o", markersize=3, linestyle="none", label=f"{load}: RssAnon at rest")
        hours = [r["t"] / 3600 for r in rows]
        top.plot(hours, [r["VmRSS"] / 1024 for r in rows], color=colors[load], label=f"{load}: RSS")
        top.plot(hours, [r["RssAnon"] / 1024 for r in rows], color=colors[load], linestyle="--",
                 label=f"{load}: RssAnon")
        bottom.plot(hours, [r["Threads"] for r in rows], color=colors[load], label=f"{load}: threads")
        bottom.plot(hours, [r["fds"] for r in rows], color=colors[load], linestyle=":", label=f"{load}: fds")
    for axis in (top, bottom):
        axis.axvline(warmup_minutes / 60, color="grey", linewidth=0.8)
        axis.grid(alpha=0.3)
    top.set_ylabel("MiB")
    top.set_title("recd soak: resident memory (solid), anonymous part (dashed)")
    top.legend(fontsize=7, ncol=3, loc="center right")
    bottom.set_ylabel("count")
    bottom.set_xlabel("hours (grey line: end of warm-up)")
    bottom.legend(fontsize=7, ncol=3, loc="center right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "soak.png"), dpi=72)
    plt.close(fig)


def compare(before, after, png):
    """One plot of two runs' RssAnon, load by load: before dashed, after solid."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axis = plt.subplots(figsize=(8, 4.5))
    colors = {"alone": "tab:blue", "subscribers": "tab:orange", "churn": "tab:green"}
    for run, style in ((before, "--"), (after, "-")):
        samples = read_samples(run)
        for load in LOADS:
            rows = busy(samples.get(load, []))
            if rows:
                axis.plot([r["t"] / 3600 for r in rows], [r["RssAnon"] / 1024 for r in rows], color=colors[load],
                          linestyle=style, label=f"{load}: {'before' if run == before else 'after'}")
    axis.grid(alpha=0.3)
    axis.set_ylabel("RssAnon (MiB)")
    axis.set_xlabel("hours")
    axis.set_title("recd soak: anonymous resident memory, before (dashed) and after (solid)")
    axis.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(png, dpi=72)
    plt.close(fig)


# --- the run --------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bindir", nargs="?")
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 120)))
    parser.add_argument("--warmup", type=float, default=float(os.environ.get("SOAK_WARMUP_MINUTES", 15)))
    parser.add_argument("--sample-seconds", type=float, default=float(os.environ.get("SOAK_SAMPLE_SECONDS", 60)))
    parser.add_argument("--loss-minutes", type=float, default=float(os.environ.get("SOAK_LOSS_MINUTES", 20)))
    parser.add_argument("--loss-seconds", type=float, default=float(os.environ.get("SOAK_LOSS_SECONDS", 10)))
    parser.add_argument("--out", default=os.environ.get("SOAK_OUT"))
    parser.add_argument("--churn-keep", type=int, default=int(os.environ.get("SOAK_CHURN_KEEP", 300)),
                        help="the churn load keeps its newest N files and deletes older ones through recd (0: all)")
    parser.add_argument("--churn-rate", type=float, default=float(os.environ.get("SOAK_CHURN_RATE", 1)),
                        help="churn this many times faster")
    parser.add_argument("--rest-minutes", type=float, default=float(os.environ.get("SOAK_REST_MINUTES", 5)),
                        help="every N minutes the churn load rests (0: never): its clients leave, its recording "
                             "cycle ends, and the daemon's memory at rest is sampled (what it kept)")
    parser.add_argument("--clock", choices=["synchronized", "unsynchronized", "kernel"],
                        default=os.environ.get("SOAK_CLOCK", "synchronized"),
                        help="what the kernel tells recd of the system clock (see above)")
    parser.add_argument("--report", metavar="DIR", help="only write DIR's summary and plot again")
    parser.add_argument("--markdown", metavar="DIR", help="print DIR's figures as a Markdown table (BENCHMARKS.md)")
    parser.add_argument("--compare", nargs=3, metavar=("BEFORE", "AFTER", "PNG"),
                        help="plot two runs' RssAnon in one picture (a change's before and after)")
    parser.add_argument("--loads", default=",".join(LOADS), help="which loads (for profiling one alone)")
    parser.add_argument("--wrapper", default="", help="a command recd runs under (heaptrack, valgrind ...)")
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if args.report:
        report(args.report, args.warmup)
        return
    if args.markdown:
        markdown(args.markdown, args.warmup)
        return
    if not args.bindir:
        parser.error("BINDIR is required")
    for tool in ("pulseaudio", "speaker-test", "ffprobe", "ffmpeg"):
        if shutil.which(tool) is None:
            sys.exit(f"soak.py: {tool} is missing (make deps-bench)")

    bindir = os.path.abspath(args.bindir)
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + commit
    out = os.path.abspath(args.out or os.path.join(root, "bench", "out", "soak-" + run_id))
    os.makedirs(out, exist_ok=True)
    if not args.out:
        latest = os.path.join(root, "bench", "out", "soak-latest")
        if os.path.islink(latest):
            os.unlink(latest)
        os.symlink(os.path.basename(out), latest)
    work = tempfile.mkdtemp(prefix="recd-soak.")
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, max(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
    meta = {"commit": commit,
            "sourcesModified": len(subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "Sources",
                                                   "Package.swift"], capture_output=True, text=True)
                                   .stdout.splitlines()),
            "recdVersion": subprocess.run([os.path.join(bindir, "recd"), "--version"], capture_output=True,
                                          text=True).stdout.strip(),
            "bindir": bindir, "workdir": work, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "minutes": args.minutes, "churnRate": args.churn_rate, "churnKeep": args.churn_keep, "warmupMinutes": args.warmup, "sampleSeconds": args.sample_seconds,
            "lossEveryMinutes": args.loss_minutes, "lossSeconds": args.loss_seconds, "clock": args.clock,
            "cores": os.cpu_count(), "mallocEnv": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}}
    with open(os.path.join(out, "run.json"), "w") as f:
        json.dump(meta, f, indent=1)
    log(f"soak of {args.minutes:g} min (warm-up {args.warmup:g}) into {out}; work directory {work}")

    stop_event = threading.Event()

    def on_signal(signum, _frame):
        log(f"signal {signum}: ending the run early")
        stop_event.set()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    loads = [load for load in LOADS if load in args.loads.split(",")]
    wrapper = args.wrapper.split() if args.wrapper else []
    servers = {load: PulseServer(work, load) for load in loads}
    alsa_conf = os.path.join(work, "alsa.conf")
    clock_env = clock_environment(args.clock, work)
    with open(alsa_conf, "w") as f:
        for load, server in servers.items():
            f.write(f'pcm.soak_{load} {{ type pulse  server "unix:{server.socket}"  device "{server.sink}.monitor" }}\n')
    daemons = {}
    pids = {}
    workers = []
    problems = []
    try:
        for server in servers.values():
            server.start()
        for load in loads:
            env = dict(os.environ, ALSA_CONFIG_PATH=f"/usr/share/alsa/alsa.conf:{alsa_conf}",
                       PULSE_SERVER=f"unix:{servers[load].socket}", **clock_env)
            daemons[load] = Recd(bindir, work, f"soak_{load}", CONFIG[load], env, name=f"recd-{load}",
                                 wrapper=wrapper).__enter__()
            pids[load] = recd_pid(daemons[load].pid)
        meta["pids"] = pids
        meta["loads"] = loads
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump(meta, f, indent=1)
        log("recd pids: " + ", ".join(f"{load} {pid}" for load, pid in pids.items()))
        ctx = multiprocessing.get_context("fork")

        def spawn(target, *args_):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=target, args=args_ + (child,), daemon=True)
            proc.start()
            workers.append((target.__name__, proc, parent))

        controls = {}
        if "alone" in daemons:  # one recording
            controls["alone"] = daemons["alone"].client(timeout=120)
            controls["alone"].call("start", {"name": "alone", "format": "flac", "sampleRate": RATE, "channels": 2})
        follower = None
        if "subscribers" in daemons:  # segments, 20 clients at 20 Hz, a follower of the segments
            follower = Follower(daemons["subscribers"].socket, ["state", "segment"])
            follower.start()
            spawn(subscribers_worker, daemons["subscribers"].socket, 20,
                  ["state", "currentTime", "levels", "recording"], 0.05)
            spawn(tap_worker, daemons["subscribers"].socket, TAP_FORMATS)
            controls["subscribers"] = daemons["subscribers"].client(timeout=120)
            controls["subscribers"].call("start", {"name": "subscribers", "format": "flac", "sampleRate": RATE,
                                                   "channels": 2, "segmentLength": SEGMENT_SECONDS})
        cycles = None
        if "churn" in daemons:  # cycles, coming and going subscribers, garbage
            spawn(churn_subscribers_worker, daemons["churn"].socket, 50, 1, args.churn_rate)
            spawn(garbage_worker, daemons["churn"].socket, 2, args.churn_rate)
            cycles = ChurnCycles(daemons["churn"], stop_event, 3, args.churn_rate, args.churn_keep)
            cycles.start()

        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        next_sample = t0
        next_report = t0 + 600
        next_loss = t0 + args.loss_minutes * 60 if "subscribers" in servers else float("inf")
        losses = []
        samples_path = os.path.join(out, "samples.jsonl")

        def take_samples(now, only=None, **extra):
            with open(samples_path, "a") as f:
                for load, daemon in daemons.items():
                    if only and load != only:
                        continue
                    if daemon.proc.poll() is not None:
                        raise RuntimeError(f"recd ({load}) exited with {daemon.proc.returncode}; see {daemon.log}")
                    record = {"load": load, "t": round(now - t0, 1), "wall": time.time(), **extra}
                    record.update(sample(pids[load]))
                    f.write(json.dumps(record) + "\n")

        next_rest = t0 + args.rest_minutes * 60 if cycles and args.rest_minutes > 0 else float("inf")
        churn_pipes = [pipe for name, _, pipe in workers
                       if name in ("churn_subscribers_worker", "garbage_worker")]

        def rest():
            """The churn load's clients all leave and its cycle ends between two recordings; once
            recd's descriptors have stopped changing for 2 s, its memory is sampled (`rest`): what
            a daemon keeps after the coming and going, without what the clients and the recording
            in flight hold at a busy sample. Then the churn goes on."""
            began = time.monotonic()
            cycles.rest_asked.set()
            for pipe in churn_pipes:
                pipe.send("pause")
            # Every worker's answer read, so that none is left for the final exchange.
            paused = all([pipe.poll(60) and pipe.recv() == "paused" for pipe in churn_pipes])
            idle = cycles.resting.wait(180)
            fds, steady_since, deadline = None, time.monotonic(), time.monotonic() + 30
            while time.monotonic() < deadline and time.monotonic() - steady_since < 2:
                now_fds = len(os.listdir(f"/proc/{pids['churn']}/fd"))
                if now_fds != fds:
                    fds, steady_since = now_fds, time.monotonic()
                time.sleep(0.25)
            if paused and idle:
                take_samples(time.monotonic(), only="churn", rest=True,
                             restSeconds=round(time.monotonic() - began, 1))
            else:
                log(f"a rest not reached (clients left: {paused}, cycle ended: {idle}): no sample")
            cycles.rest_over.set()
            for pipe in churn_pipes:
                pipe.send("resume")

        while not stop_event.is_set():
            now = time.monotonic()
            if now >= next_rest and now < end:
                rest()
                while next_rest <= now:
                    next_rest += args.rest_minutes * 60
                continue
            if now >= next_sample:
                take_samples(now)
                while next_sample <= now:
                    next_sample += args.sample_seconds
            if now >= next_report:
                next_report += 600
                if cycles:
                    log(f"{(now - t0) / 60:.0f} min: churn {dict(cycles.counts)}; {len(cycles.errors)} errors")
                report(out, args.warmup)
            if now >= next_loss and now + args.loss_seconds < end:
                next_loss += args.loss_minutes * 60
                log("device loss: stopping the subscribers load's PulseAudio server")
                servers["subscribers"].stop()
                stop_event.wait(args.loss_seconds)
                servers["subscribers"].start()
                losses.append(round(now - t0, 1))
                log("device back")
                continue
            if now >= end:
                break
            stop_event.wait(max(0, min(next_sample, end, next_loss, next_report, next_rest) - now))
        stop_event.set()
        elapsed = time.monotonic() - t0
        log(f"ending after {elapsed / 60:.1f} min")

        if cycles:
            cycles.join(120)
        worker_stats = {}
        for name, proc, pipe in workers:
            pipe.send("stop")
            worker_stats[name] = pipe.recv() if pipe.poll(60) else "no answer"
            proc.join(10)
        ended = {load: control.call("stop") for load, control in controls.items()}
        time.sleep(3)  # the last segment's announcement
        if follower:
            follower.close()
        for control in controls.values():
            control.close()
        take_samples(time.monotonic(), final=True)

        log("checking the files")
        checks = {}
        if "alone" in ended:
            checks["alone"] = check_files([{"path": ended["alone"]["path"], "frames": ended["alone"]["frames"],
                                            "promised": None}])
        if follower:
            segment_files = []
            for segment in follower.segments:
                promised = round(SEGMENT_SECONDS * RATE) if segment.get("endReason") == "length" else None
                segment_files.append({"path": segment["path"], "frames": segment["frames"], "promised": promised})
            check = checks["subscribers"] = check_files(segment_files)
            announced = sum(s["frames"] for s in follower.segments)
            check["endReasons"] = dict(collections.Counter(s.get("endReason") for s in follower.segments))
            if announced != ended["subscribers"]["frames"]:
                check["problems"].append(f"segments hold {announced} frames, the recording "
                                         f"{ended['subscribers']['frames']}")
                check["problemCount"] += 1
            on_disk = sum(len([n for n in names if n.endswith(".flac")])
                          for _, _, names in os.walk(daemons["subscribers"].recordings))
            check["filesOnDisk"] = on_disk
            if on_disk != len(follower.segments):
                check["problems"].append(f"{on_disk} files on disk, {len(follower.segments)} announced")
                check["problemCount"] += 1
        if cycles:
            check = checks["churn"] = check_files(cycles.files)
            for early in cycles.checkedResults:  # the deleted files read back before deletion
                check["files"] += early["files"]
                check["framesDecoded"] += early["framesDecoded"]
                check["problems"].extend(early["problems"])
                check["problemCount"] += early["problemCount"]
            check["deletedAlongTheWay"] = cycles.counts["deleted"]
            leftovers = [p for p in cycles.cancelled if os.path.exists(p) or os.path.exists(p + ".part")]
            if leftovers:
                check["problems"].append(f"cancelled recordings left files: {leftovers[:5]}")
                check["problemCount"] += 1
            check["cycles"] = dict(cycles.counts)
            check["cycleErrors"] = cycles.errors[:50]
            problems.extend(cycles.errors)
        for load, check in checks.items():
            log(f"{load}: {check['files']} files, {check['problemCount']} problems"
                + "".join(f"\n    {p}" for p in check["problems"][:10]))
            problems.extend(check["problems"])
        final = {"elapsedMinutes": round(elapsed / 60, 2), "deviceLosses": losses, "checks": checks,
                 "workers": worker_stats, "followerStates": dict(follower.states) if follower else None}
        log("slopes after the warm-up:")
        report(out, args.warmup, final=final)
        log(f"report: {out}/summary.json, plot: {out}/soak.png")
    finally:
        for _, proc, _ in workers:
            if proc.is_alive():
                proc.terminate()
        for load, daemon in daemons.items():
            if wrapper and pids.get(load, daemon.pid) != daemon.pid:
                try:
                    os.kill(pids[load], signal.SIGTERM)  # the wrapper may not pass it on
                except OSError:
                    pass
            daemon.stop()
        for server in servers.values():
            server.stop()
        if os.environ.get("SOAK_KEEP") == "1":
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
