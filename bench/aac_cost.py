"""6. AAC capture cost: CPU seconds per recorded hour of AAC-LC 48 kHz stereo 128 kbit/s in
.m4a, recd (the daemon's own CPU: capture, metering, FFmpeg's native `aac` encoder, the
fragmented file, and the rewrite with `moov` first at stop) against the ffmpeg command-line tool
capturing from the same unpaced ALSA `file` device with the same encoder. A third figure,
ffmpeg encoding the same samples from the raw file (no ALSA), is the encoder's own cost.

usage: aac_cost.py BINDIR WORKDIR DEVICE INFILE REPS SECONDS OUT.json
(ALSA_CONFIG_PATH in the environment defines DEVICE.)"""

import os
import subprocess
import sys
import time

from lib import Recd, cpu_split, record, run_measured, save, summary

bindir, workdir, device, infile, reps, seconds, out = sys.argv[1:8]
reps = int(reps)
seconds = int(seconds)
env = dict(os.environ)
peerdir = os.path.join(workdir, "aac-peer-out")
os.makedirs(peerdir, exist_ok=True)

CONFIG = """\
[capture]
sample_rate = 48000
"""
PARAMS = {"format": "aac", "sampleRate": 48000, "channels": 2, "bitRate": 128000}
# ffmpeg's alsa input stamps packets with the wall clock, which an unpaced device outruns:
# asetpts renumbers them from the sample count so that -t counts audio, not wall time.
FFMPEG_ALSA = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "alsa", "-sample_rate", "48000",
               "-channels", "2", "-i", device, "-af", "asetpts=N/SR/TB", "-t", str(seconds),
               "-c:a", "aac", "-b:a", "128k", "-y"]
FFMPEG_RAW = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "s16le", "-ar", "48000", "-ac", "2",
              "-i", infile, "-t", str(seconds), "-c:a", "aac", "-b:a", "128k", "-y"]


def probe_seconds(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=duration", "-of", "csv=p=0", path],
                         capture_output=True, text=True, check=True).stdout
    return float(out.strip())


def top_level_boxes(path):
    boxes = []
    with open(path, "rb") as f:
        size_total = os.fstat(f.fileno()).st_size
        offset = 0
        while offset + 8 <= size_total:
            f.seek(offset)
            header = f.read(16)
            size = int.from_bytes(header[:4], "big")
            if size == 1:
                size = int.from_bytes(header[8:16], "big")
            elif size == 0:
                size = size_total - offset
            if size < 8:
                break
            boxes.append(header[4:8].decode("latin-1"))
            offset += size
    return boxes


per_hour = 3600 / seconds
runs = {"recd": [], "recd_sys": [], "recd_wall": [], "ffmpeg_alsa": [], "ffmpeg_alsa_sys": [], "ffmpeg_alsa_wall": [],
        "ffmpeg_raw": [], "sizes": {}, "durations": {}}
with Recd(bindir, workdir, device, CONFIG, env, name="recd-aac") as recd:
    for rep in range(reps):
        order = ("recd", "peer") if rep % 2 == 0 else ("peer", "recd")
        for who in order:
            if who == "recd":
                before, t0 = cpu_split(recd.pid), time.perf_counter()
                _, final = record(recd, dict(PARAMS, name=f"aac-{rep}", duration=seconds))
                wall = time.perf_counter() - t0
                after = cpu_split(recd.pid)
                path = final["recording"]["path"]
                runs["recd"].append(sum(after) - sum(before))
                runs["recd_sys"].append(after[1] - before[1])
                runs["recd_wall"].append(wall)
                runs["sizes"]["recd"] = os.path.getsize(path)
                runs["durations"]["recd"] = probe_seconds(path)
                runs["recd_boxes"] = top_level_boxes(path)
                os.unlink(path)
                print(f"  rep {rep}: recd {runs['recd'][-1]:.2f} s CPU, {wall:.2f} s wall", flush=True)
            else:
                path = os.path.join(peerdir, f"alsa-{rep}.m4a")
                wall, user, sys_cpu = run_measured(FFMPEG_ALSA + [path], env=env, split=True)
                runs["ffmpeg_alsa"].append(user + sys_cpu)
                runs["ffmpeg_alsa_sys"].append(sys_cpu)
                runs["ffmpeg_alsa_wall"].append(wall)
                runs["sizes"]["ffmpeg_alsa"] = os.path.getsize(path)
                runs["durations"]["ffmpeg_alsa"] = probe_seconds(path)
                os.unlink(path)
                path = os.path.join(peerdir, f"raw-{rep}.m4a")
                _, cpu = run_measured(FFMPEG_RAW + [path], env=env)
                runs["ffmpeg_raw"].append(cpu)
                os.unlink(path)
                print(f"  rep {rep}: ffmpeg (alsa) {runs['ffmpeg_alsa'][-1]:.2f} s CPU, {wall:.2f} s wall; "
                      f"ffmpeg (raw file) {cpu:.2f} s CPU", flush=True)

pairs = [a / b for a, b in zip(runs["recd"], runs["ffmpeg_alsa"])]
tree = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
                      capture_output=True, text=True).stdout.strip()
save(out, {
    "seconds": seconds,
    "reps": reps,
    "device": device,
    "tree": tree,
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "loadavg": open("/proc/loadavg").read().split()[:3],
    "recd_params": dict(PARAMS, duration=seconds),
    "ffmpeg_alsa_command": " ".join(FFMPEG_ALSA + ["OUT.m4a"]),
    "ffmpeg_raw_command": " ".join(FFMPEG_RAW + ["OUT.m4a"]),
    "recd_cpu_per_hour": summary([c * per_hour for c in runs["recd"]]),
    "recd_sys_per_hour": summary([c * per_hour for c in runs["recd_sys"]]),
    "ffmpeg_alsa_cpu_per_hour": summary([c * per_hour for c in runs["ffmpeg_alsa"]]),
    "ffmpeg_alsa_sys_per_hour": summary([c * per_hour for c in runs["ffmpeg_alsa_sys"]]),
    "ffmpeg_raw_cpu_per_hour": summary([c * per_hour for c in runs["ffmpeg_raw"]]),
    "recd_wall": summary(runs["recd_wall"]),
    "ffmpeg_alsa_wall": summary(runs["ffmpeg_alsa_wall"]),
    "ratio_pairs": summary(pairs),
    "sizes": runs["sizes"],
    "durations": runs["durations"],
    "recd_boxes": runs["recd_boxes"],
})
