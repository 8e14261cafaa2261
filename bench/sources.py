"""15. Sources: what a station's second (and fourth) microphone costs. One recd recording 1,
2 and 4 sources (`[[source]]`), and 2 and 4 recds of one source each (what a station of
several microphones ran before sources), every source recording FLAC 48 kHz/16-bit stereo
from a paced device of its own (a null sink per source on the bench's PulseAudio server,
each with a sine). For each case: CPU seconds per hour of all its recds, their resident and
anonymous memory, and the cost of each source beyond the first; every file is checked
(frames for the window, no frame lost, no gap).

usage: sources.py BINDIR WORKDIR SECONDS OUT.json
(ALSA_CONFIG_PATH defines `benchsource:SINK=…`; PULSE_SERVER is the bench's server.)"""

import os
import subprocess
import sys
import time

from lib import Recd, cpu_clock, memory_kib, save

bindir, workdir, seconds, out = sys.argv[1:5]
seconds = float(seconds)
env = dict(os.environ)
SINKS = 4
RECORDING = """\
[recording]
format = "flac"
sample_rate = 48000
channels = 2
bit_depth = 16
[autostart]
enabled = true
"""


def pactl(*arguments):
    return subprocess.run(["pactl", *arguments], env=env, check=True, capture_output=True, text=True).stdout.strip()


def device(index):
    return f"benchsource:SINK=src{index}.monitor"


def station(count):
    return RECORDING + "".join(f'[[source]]\nname = "s{i}"\ndevice = "{device(i)}"\n' for i in range(1, count + 1))


def frames(path):
    return int(subprocess.run(["soxi", "-s", path], check=True, capture_output=True, text=True).stdout)


def measure(recds, sources):
    """Warm, then the window: CPU of every recd, memory at its end; then the files."""
    clients = [recd.client() for recd in recds]
    deadline = time.monotonic() + 60
    statuses = []
    while time.monotonic() < deadline:
        statuses = [status for client in clients for status in per_source(client.call("status"))]
        if len(statuses) == sources and all(s["state"]["name"] == "recording" and s["currentTime"] > 1 for s in statuses):
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"not every source recording: {[s['state']['name'] for s in statuses]}")
    before = [cpu_clock(recd.pid) for recd in recds]
    times = [s["currentTime"] for client in clients for s in per_source(client.call("status"))]
    time.sleep(seconds)
    cpu = sum(cpu_clock(recd.pid) - b for recd, b in zip(recds, before))
    after = [s for client in clients for s in per_source(client.call("status"))]
    memory = [memory_kib(recd.pid) for recd in recds]
    for client in clients:
        client.close()
    recorded = [a["currentTime"] - t for a, t in zip(after, times)]
    lost = sum(s["statistics"]["framesLost"] + s["statistics"]["xruns"] + len(s["statistics"].get("gaps", [])) for s in after)
    paths = [s["recording"]["path"] for s in after]
    return {
        "cpu_s_per_hour": cpu / seconds * 3600,
        "rss_kib": sum(m["VmRSS"] for m in memory),
        "rss_anon_kib": sum(m["RssAnon"] for m in memory),
        "threads": sum(m["Threads"] for m in memory),
        "recorded_seconds": recorded,
        "lost": lost,
        "paths": paths,
    }


def per_source(status):
    return status["sources"] if "sources" in status else [status]


for index in range(1, SINKS + 1):
    pactl("load-module", "module-null-sink", f"sink_name=src{index}", "rate=48000", "channels=2")
    pactl("load-module", "module-sine", f"sink=src{index}", f"frequency={300 + 100 * index}")

results = {"seconds": seconds, "cases": {}}
for count in (1, 2, 4):
    with Recd(bindir, workdir, None, station(count), env, name=f"recd-sources-{count}") as recd:
        case = measure([recd], count)
    results["cases"][f"one recd, {count} source{'s' if count > 1 else ''}"] = case
for count in (2, 4):
    recds = [Recd(bindir, workdir, device(i), RECORDING, env, name=f"recd-single-{count}-{i}") for i in range(1, count + 1)]
    for recd in recds:
        recd.__enter__()
    try:
        case = measure(recds, count)
    finally:
        for recd in recds:
            recd.stop()
    results["cases"][f"{count} recds, one source each"] = case
# Every file whole: at least the window's frames, none lost.
for name, case in results["cases"].items():
    case["file_frames"] = [frames(path) for path in case.pop("paths")]
    short = [f for f in case["file_frames"] if f < seconds * 48000]
    case["files_ok"] = not short and case["lost"] == 0
one = results["cases"]["one recd, 1 source"]
for count in (2, 4):
    case = results["cases"][f"one recd, {count} sources"]
    case["cpu_each_further_source"] = (case["cpu_s_per_hour"] - one["cpu_s_per_hour"]) / (count - 1)
    case["rss_each_further_source_kib"] = (case["rss_kib"] - one["rss_kib"]) / (count - 1)
    case["rss_anon_each_further_source_kib"] = (case["rss_anon_kib"] - one["rss_anon_kib"]) / (count - 1)
    # The target: a further source costs no more than the first (the whole daemon of one).
    case["further_source_within_first"] = case["cpu_each_further_source"] <= one["cpu_s_per_hour"]
save(out, results)
for name, case in results["cases"].items():
    print(f"{name}: {case['cpu_s_per_hour']:.1f} CPU s/h, RSS {case['rss_kib'] / 1024:.1f} MiB "
          f"(anon {case['rss_anon_kib'] / 1024:.1f}), {case['threads']} threads, files ok: {case['files_ok']}"
          + (f"; each further source {case['cpu_each_further_source']:.1f} CPU s/h, "
             f"{case['rss_each_further_source_kib'] / 1024:.1f} MiB" if "cpu_each_further_source" in case else ""))
