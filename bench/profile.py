"""Where recd's instructions go: callgrind on the daemon (and on recctl), in instruction counts
that do not drift with machine load.

- capture: recd under callgrind collecting only the capture thread (CaptureSession.run and
  what it calls), one short unpaced recording per case; the peers (arecord, sox) on the same
  device as whole processes, counted at two lengths so that their start-up cancels out;
- status: recd under callgrind, every thread, while CALLS `status` requests are answered on
  one connection;
- recctl: one cold `recctl status` under callgrind.

valgrind 3.19 cannot read the DWARF 5 debug info of Swift 6 binaries, so it runs stripped
copies (symbols kept); and it crashes when libdispatch passes sigsuspend a mask in read-only
memory, so a preloaded shim (sigsuspend_shim.c) copies the mask first.

usage: profile.py BINDIR WORKDIR DEVICE SHIM.so CAPTURE_SECONDS CALLS OUT.json
(ALSA_CONFIG_PATH in the environment defines DEVICE.)"""

import os
import re
import shutil
import subprocess
import sys
import time

from lib import Recd, RecdClient, record, save

bindir, workdir, device, shim, capture_seconds, calls, out = sys.argv[1:8]
capture_seconds = int(capture_seconds)
calls = int(calls)
cgdir = os.path.join(workdir, "callgrind")
os.makedirs(cgdir, exist_ok=True)
env = dict(os.environ)

for name in ("recd", "recctl"):
    subprocess.run(["objcopy", "--strip-debug", os.path.join(bindir, name), os.path.join(cgdir, name)], check=True)

config = os.path.join(cgdir, "recd.toml")
with open(config, "w") as f:
    f.write("[capture]\nsample_rate = 48000\n")

LINE = re.compile(r"^\s*([\d,]+) \(\s*([\d.]+)%\)\s+(.*)$")


def demangle(names):
    try:
        result = subprocess.run(["swift-demangle", "--simplified"], input="\n".join(names), capture_output=True,
                                text=True, check=True)
        return result.stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return names


def annotate(path, inclusive):
    """[(Ir, function, object)] from callgrind_annotate, demangled."""
    args = ["callgrind_annotate", "--threshold=100", "--auto=no"]
    if inclusive:
        args.append("--inclusive=yes")
    text = subprocess.run(args + [path], capture_output=True, text=True, check=True).stdout
    rows = []
    started = False
    for line in text.splitlines():
        if "file:function" in line:
            started = True
            continue
        match = LINE.match(line) if started else None
        if not match:
            continue
        ir = int(match.group(1).replace(",", ""))
        rest = match.group(3)
        obj = ""
        if rest.endswith("]") and " [" in rest:
            rest, obj = rest.rsplit(" [", 1)
            obj = os.path.basename(obj[:-1])
        function = rest.split(":", 1)[1] if ":" in rest else rest
        rows.append([ir, function, obj])
    if not rows:
        return []
    names = demangle([r[1] for r in rows])
    if len(names) == len(rows):
        for row, name in zip(rows, names):
            row[1] = re.sub(r"'\d+$", "", name)
    return rows


def total_ir(path):
    """The dump's totals (its summary line reads 0 in a dump written at exit after
    instrumentation was switched off)."""
    found = {}
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                key, value = line.split(":", 1)
                found[key] = int(value.split()[0])
    if found.get("totals") or found.get("summary"):
        return found.get("totals") or found["summary"]
    raise ValueError(f"{path}: no totals")


def digest(path, unit, key_patterns, top=12):
    total = total_ir(path)
    self_rows = annotate(path, inclusive=False)[:top]
    inclusive = annotate(path, inclusive=True)
    keys = []
    for label, pattern in key_patterns:
        matches = [r for r in inclusive if re.search(pattern, r[1]) and r[0] <= total]
        if matches:
            keys.append({"label": label, "ir": max(m[0] for m in matches)})
    return {
        "total_ir": total,
        "unit": unit,
        "self": [{"ir": r[0], "function": r[1], "object": r[2]} for r in self_rows],
        "inclusive": keys,
    }


class Callgrind:
    """recd under callgrind, controlled with callgrind_control."""

    def __init__(self, name, extra):
        self.socket = os.path.join(cgdir, f"{name}.sock")
        self.out = os.path.join(cgdir, f"{name}.out")
        self.log = open(os.path.join(cgdir, f"{name}.log"), "w")
        child_env = dict(env, LD_PRELOAD=shim)
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}", *extra,
             os.path.join(cgdir, "recd"), "--user", "--config", config, "--socket", self.socket,
             "--recordings-dir", os.path.join(cgdir, "recordings"), "--device", device],
            env=child_env, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 300
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"recd under callgrind did not start; see {self.log.name}")
            time.sleep(0.1)
        self.client = lambda timeout=None: RecdClient(self.socket, timeout=timeout or 3600)

    def control(self, *args):
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True, capture_output=True)

    def dump(self, label):
        """Dumps the counts since the last zeroing; returns the dump file."""
        before = set(os.listdir(cgdir))
        self.control(f"--dump={label}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = [f for f in set(os.listdir(cgdir)) - before if f.startswith(os.path.basename(self.out))]
            if new:
                time.sleep(0.5)
                return os.path.join(cgdir, new[0])
            time.sleep(0.1)
        raise RuntimeError("callgrind dump did not appear")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=300)
        self.log.close()


CAPTURE_KEYS = [
    ("CaptureSession.consume (meter + convert + write)", r"^CaptureSession\.consume"),
    ("LevelAccumulator.add (level meter)", r"^specialized LevelAccumulator\.add|^LevelAccumulator\.add"),
    ("FormatConverter.convert (to float, mix, resample)", r"^FormatConverter\.convert"),
    ("Resampler.process / soxr_process", r"^soxr_process$"),
    ("SoundFileWriter.write (libsndfile + encoder; its write(2) not counted)", r"^sf_writef_(short|int|float)$"),
    ("FLAC__stream_encoder_process (libFLAC)", r"^FLAC__stream_encoder_process$"),
    ("CapturePCM.read / snd_pcm_readi (libasound)", r"^snd_pcm_readi$"),
]
STATUS_KEYS = [
    ("ClientConnection.handle(line:)", r"ClientConnection\.handle\(line:\)$"),
    ("  JSONDecoder: request line to JSONValue", r"^JSONDecoder\.decode<A>"),
    ("  MethodExecutor.execute (builds StatusResult)", r"^MethodExecutor\.execute"),
    ("  JSONEncoder.encode (the answer)", r"^JSONEncoder\.encode<A>"),
    ("NIO channel read + write (syscalls not counted)", r"^ByteToMessageHandler\.channelRead|^BaseSocketChannel\.readable"),
]
RECCTL_KEYS = [
    ("dynamic loader: relocation (_dl_start)", r"^_dl_start$"),
    ("ParsableCommand.parseAsRoot (ArgumentParser)", r"ParsableCommand\.parseAsRoot"),
    ("  swift_conformsToProtocol (runtime conformance scans)", r"^swift_conformsToProtocolWithExecutionContext$"),
    ("Status.run (connect, call, decode, print)", r"^Status\.run\(\)$"),
]

results = {"capture_seconds": capture_seconds, "calls": calls, "capture": [], "notes": []}

# Capture thread only.
cg = Callgrind("capture", ["--instr-atstart=no", "--collect-atstart=no", "--toggle-collect=*CaptureSessionC3run*"])
try:
    cg.control("--instr=on")
    for case, params in [
        ("wav", {"format": "wav", "sampleRate": 48000, "channels": 2, "bitDepth": 16}),
        ("flac16k", {"format": "flac", "sampleRate": 16000, "channels": 2, "bitDepth": 16, "quality": "high"}),
        ("flac48k", {"format": "flac", "sampleRate": 48000, "channels": 2, "bitDepth": 16, "quality": "high"}),
    ]:
        cg.control("-z")
        _, final = record(cg, dict(params, name=f"cg-{case}", duration=capture_seconds))
        dump = cg.dump(case)
        os.unlink(final["recording"]["path"])
        entry = digest(dump, "recorded second", CAPTURE_KEYS)
        entry["case"] = case
        entry["per_unit"] = entry["total_ir"] / capture_seconds
        results["capture"].append(entry)
        print(f"  callgrind {case}: {entry['per_unit'] / 1e6:.1f} M instructions per recorded second", flush=True)
finally:
    cg.stop()

# The peers, whole processes: (Ir at the long length - Ir at the short one) / the difference.
SOX_IN = ["sox", "-q", "-t", "alsa", "-r", "48000", "-c", "2", "-b", "16", "-e", "signed-integer", device]
PEERS = [
    ("wav", "arecord", (60, 600), lambda s, o: ["arecord", "-q", "-D", device, "-f", "S16_LE", "-r", "48000", "-c", "2",
                                               "-d", str(s), o + ".wav"]),
    ("flac16k", "sox", (10, 40), lambda s, o: SOX_IN + ["-r", "16000", "-C", "5", o + ".flac", "trim", "0", str(s)]),
    ("flac48k", "sox", (10, 40), lambda s, o: SOX_IN + ["-C", "5", o + ".flac", "trim", "0", str(s)]),
]
results["peers"] = []
for case, name, lengths, argv in PEERS:
    counts = []
    for seconds in lengths:
        out_file = os.path.join(cgdir, f"peer-{case}-{seconds}.out")
        target = os.path.join(cgdir, f"peer-{case}-{seconds}")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", *argv(seconds, target)],
                       check=True, capture_output=True, env=env)
        for ext in (".wav", ".flac"):
            if os.path.exists(target + ext):
                os.unlink(target + ext)
        counts.append(total_ir(out_file))
    per_second = (counts[1] - counts[0]) / (lengths[1] - lengths[0])
    results["peers"].append({"case": case, "peer": name, "lengths": lengths, "total_ir": counts,
                             "per_unit": per_second})
    print(f"  callgrind {name} ({case}): {per_second / 1e6:.1f} M instructions per recorded second", flush=True)

# status requests, every thread; instrumentation only while they are answered, so that the
# dump written at exit holds just them.
cg = Callgrind("status", ["--instr-atstart=no"])
try:
    client = RecdClient(cg.socket)
    for _ in range(50):
        client.call("status")
    cg.control("--instr=on")
    for _ in range(calls):
        client.call("status")
    cg.control("--instr=off")
    client.close()
finally:
    cg.stop()
entry = digest(cg.out, "status call", STATUS_KEYS)
entry["per_unit"] = entry["total_ir"] / calls
results["status"] = entry
print(f"  callgrind status: {entry['per_unit'] / 1e3:.0f} k instructions per call", flush=True)

# A cold recctl status, whole process (against a native recd).
with Recd(bindir, workdir, device, "", env, name="recd-profile") as recd:
    out_file = os.path.join(cgdir, "recctl.out")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", os.path.join(cgdir, "recctl"),
                    "--socket", recd.socket, "status"], check=True, capture_output=True, env=env)
entry = digest(out_file, "process", RECCTL_KEYS)
entry["per_unit"] = entry["total_ir"]
results["recctl"] = entry
print(f"  callgrind recctl status: {entry['total_ir'] / 1e6:.1f} M instructions", flush=True)
save(out, results)
