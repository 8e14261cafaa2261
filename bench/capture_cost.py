"""1. Capture cost: CPU seconds per recorded hour, recd (the daemon's own CPU) against arecord
and sox reading the same unpaced ALSA `file` device.

usage: capture_cost.py BINDIR WORKDIR DEVICE INFILE REPS SECONDS OUT.json
(ALSA_CONFIG_PATH in the environment defines DEVICE.)"""

import hashlib
import os
import statistics
import sys
import time

from lib import Recd, cpu_clock, cpu_split, record, run_measured, save, summary

bindir, workdir, device, infile, reps, seconds, out = sys.argv[1:8]
reps = int(reps)
seconds = int(seconds)
env = dict(os.environ)
peerdir = os.path.join(workdir, "peer-out")
os.makedirs(peerdir, exist_ok=True)

# The device runs at 48 kHz whatever the file's rate, so that 16 kHz files go through soxr
# (without it, ALSA's file plugin over null would simply hand recd 16 kHz).
CONFIG = """\
[capture]
sample_rate = 48000
"""

# The FLAC level recd's `quality = high` maps to (RecordingSettings.flacCompressionLevel); sox
# is given the same, so that both run the same encoder at the same level.
FLAC_LEVEL = 5
SOX_IN = ["sox", "-q", "-t", "alsa", "-r", "48000", "-c", "2", "-b", "16", "-e", "signed-integer", device]
CASES = [
    {
        "id": "wav",
        "title": "WAV, 48 kHz/16-bit stereo",
        "recd": {"format": "wav", "sampleRate": 48000, "channels": 2, "bitDepth": 16},
        "peer_name": "arecord",
        "peer": lambda path: ["arecord", "-q", "-D", device, "-f", "S16_LE", "-r", "48000", "-c", "2",
                              "-d", str(seconds), path],
        "ext": "wav",
        "rate": 48000,
    },
    {
        "id": "flac16k",
        "title": "FLAC 16 kHz/16-bit stereo, converted from 48 kHz",
        "recd": {"format": "flac", "sampleRate": 16000, "channels": 2, "bitDepth": 16, "quality": "high"},
        "peer_name": "sox",
        "peer": lambda path: SOX_IN + ["-r", "16000", "-C", str(FLAC_LEVEL), path, "trim", "0", str(seconds)],
        "ext": "flac",
        "rate": 16000,
    },
    {
        "id": "flac48k",
        "title": "FLAC 48 kHz/16-bit stereo (no conversion)",
        "recd": {"format": "flac", "sampleRate": 48000, "channels": 2, "bitDepth": 16, "quality": "high"},
        "peer_name": "sox",
        "peer": lambda path: SOX_IN + ["-C", str(FLAC_LEVEL), path, "trim", "0", str(seconds)],
        "ext": "flac",
        "rate": 48000,
    },
]


def wav_data_digest(path):
    """sha256 of a WAV file's data chunk."""
    with open(path, "rb") as f:
        header = f.read(12)
        assert header[:4] in (b"RIFF", b"RF64") and header[8:12] == b"WAVE", header
        while True:
            chunk = f.read(8)
            if len(chunk) < 8:
                raise ValueError(f"{path}: no data chunk")
            size = int.from_bytes(chunk[4:8], "little")
            if chunk[:4] == b"data":
                digest = hashlib.sha256()
                remaining = size if size != 0xFFFFFFFF else None
                while True:
                    block = f.read(1 << 20 if remaining is None else min(1 << 20, remaining))
                    if not block:
                        break
                    digest.update(block)
                    if remaining is not None:
                        remaining -= len(block)
                        if remaining == 0:
                            break
                return digest.hexdigest()
            f.seek(size + (size & 1), 1)


def input_digest(frames):
    digest = hashlib.sha256()
    remaining = frames * 4
    with open(infile, "rb") as f:
        while remaining:
            block = f.read(min(1 << 20, remaining))
            digest.update(block)
            remaining -= len(block)
    return digest.hexdigest()


results = {"seconds": seconds, "reps": reps, "device": device, "flac_level": FLAC_LEVEL, "cases": []}
with Recd(bindir, workdir, device, CONFIG, env, name="recd-capture") as recd:
    runs = {case["id"]: {"recd_cpu": [], "recd_sys": [], "recd_clock": [], "recd_wall": [], "peer_cpu": [],
                         "peer_sys": [], "peer_wall": [], "recd_frames": [], "device_rate": None, "sizes": {}}
            for case in CASES}
    checks = {}
    for rep in range(reps):
        for case in CASES:
            r = runs[case["id"]]
            order = ("recd", "peer") if rep % 2 == 0 else ("peer", "recd")
            for who in order:
                if who == "recd":
                    params = dict(case["recd"], name=f"{case['id']}-{rep}", duration=seconds)
                    before, clock_before, t0 = cpu_split(recd.pid), cpu_clock(recd.pid), time.perf_counter()
                    result, final = record(recd, params)
                    wall = time.perf_counter() - t0
                    after, clock = cpu_split(recd.pid), cpu_clock(recd.pid) - clock_before
                    cpu, sys_cpu = sum(after) - sum(before), after[1] - before[1]
                    path = final["recording"]["path"]
                    r["recd_cpu"].append(cpu)
                    r["recd_sys"].append(sys_cpu)
                    r["recd_clock"].append(clock)
                    r["recd_wall"].append(wall)
                    r["recd_frames"].append(final["recording"]["frames"])
                    r["device_rate"] = result["deviceFormat"]["sampleRate"]
                    r["sizes"]["recd"] = os.path.getsize(path)
                    if rep == 0 and case["id"] == "wav":
                        checks["recd_wav"] = wav_data_digest(path)
                    os.unlink(path)
                    print(f"  {case['id']} rep {rep}: recd {cpu:.2f} s CPU ({clock:.3f} by the CPU clock), "
                          f"{wall:.2f} s wall", flush=True)
                else:
                    path = os.path.join(peerdir, f"{case['id']}-{rep}.{case['ext']}")
                    wall, user, sys_cpu = run_measured(case["peer"](path), env=env, split=True)
                    cpu = user + sys_cpu
                    r["peer_cpu"].append(cpu)
                    r["peer_sys"].append(sys_cpu)
                    r["peer_wall"].append(wall)
                    r["sizes"]["peer"] = os.path.getsize(path)
                    if rep == 0 and case["id"] == "wav":
                        checks["arecord_wav"] = wav_data_digest(path)
                    os.unlink(path)
                    print(f"  {case['id']} rep {rep}: {case['peer_name']} {cpu:.2f} s CPU, {wall:.2f} s wall", flush=True)
    checks["input"] = input_digest(seconds * 48000)

    for case in CASES:
        r = runs[case["id"]]
        per_hour = 3600 / seconds
        # recd's CPU by its process CPU-time clock (nanoseconds): /proc/PID/stat counts 10 ms
        # ticks, coarse next to the 0.1 s a 600 s WAV recording costs.
        pairs = [a / b for a, b in zip(r["recd_clock"], r["peer_cpu"])]
        results["cases"].append({
            "id": case["id"],
            "title": case["title"],
            "peer": case["peer_name"],
            "recd_params": dict(case["recd"], duration=seconds),
            "peer_command": " ".join(case["peer"]("OUT." + case["ext"])),
            "device_rate": r["device_rate"],
            "expected_frames": seconds * case["rate"],
            "recd_frames": r["recd_frames"],
            "sizes": r["sizes"],
            "recd_cpu_per_hour": summary([c * per_hour for c in r["recd_clock"]]),
            "recd_ticks_per_hour": summary([c * per_hour for c in r["recd_cpu"]]),
            "recd_sys_per_hour": summary([c * per_hour for c in r["recd_sys"]]),
            "peer_sys_per_hour": summary([c * per_hour for c in r["peer_sys"]]),
            "peer_cpu_per_hour": summary([c * per_hour for c in r["peer_cpu"]]),
            "recd_wall": summary(r["recd_wall"]),
            "peer_wall": summary(r["peer_wall"]),
            "ratio_pairs": summary(pairs),
        })
    # What FLAC's compression level costs, with the same libFLAC (sox, 48 kHz, median of 3).
    ladder = {level: [] for level in (0, 1, 2, 3, 5)}
    sizes = {}
    for _ in range(3):
        for level in ladder:
            path = os.path.join(peerdir, f"ladder-{level}.flac")
            wall, cpu = run_measured(SOX_IN + ["-C", str(level), path, "trim", "0", str(seconds)], env=env)
            ladder[level].append(cpu * 3600 / seconds)
            sizes[level] = os.path.getsize(path)
            os.unlink(path)
    results["flac_levels"] = [{"level": level, "cpu_per_hour": statistics.median(cpus), "bytes": sizes[level]}
                              for level, cpus in ladder.items()]
    results["checks"] = {
        "recd_wav_bit_exact": checks["recd_wav"] == checks["input"],
        "arecord_wav_bit_exact": checks["arecord_wav"] == checks["input"],
    }
save(out, results)
