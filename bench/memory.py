"""4. Memory: recd's RSS idle, while recording, and its growth over HOURS hours of audio
recorded from the unpaced file device (one `start` with that duration).

usage: memory.py BINDIR WORKDIR DEVICE SHORT_DEVICE HOURS EOF_SECONDS EOF_RUNS OUT.json
DEVICE's infile must hold more than HOURS of audio (run.sh makes it a sparse file of zeros).
Records 48 kHz/16-bit stereo WAV when the recordings directory's filesystem has room for it
(plus 10 %), else 8 kHz mono FLAC; says which in the results.

Then, on SHORT_DEVICE (whose infile is only seconds long, so libasound complains "invalid
frames 0" on every read past its end), EOF_RUNS recordings of EOF_SECONDS each in one daemon:
the CPU each costs shows whether recd's cost per libasound message stays constant."""

import os
import sys
import threading
import time

from lib import Recd, cpu_clock, memory_kib, record, rss_by_mapping, save

bindir, workdir, device, short_device, hours, eof_seconds, eof_runs, out = sys.argv[1:9]
eof_seconds = int(eof_seconds)
eof_runs = int(eof_runs)
hours = float(hours)
seconds = hours * 3600
env = dict(os.environ)
SAMPLE_EVERY = 0.25

CONFIG = """\
[capture]
sample_rate = 48000
"""

stat = os.statvfs(workdir)
free = stat.f_bavail * stat.f_frsize
wav_bytes = int(seconds * 48000 * 4)
if free > wav_bytes * 1.1:
    params = {"format": "wav", "sampleRate": 48000, "channels": 2, "bitDepth": 16}
    choice = f"48 kHz/16-bit stereo WAV ({wav_bytes / 1e9:.1f} GB; {free / 1e9:.0f} GB free)"
else:
    params = {"format": "flac", "sampleRate": 8000, "channels": 1, "bitDepth": 16, "quality": "high"}
    choice = (f"8 kHz mono FLAC: a {wav_bytes / 1e9:.1f} GB WAV would not fit in the "
              f"{free / 1e9:.0f} GB free")

with Recd(bindir, workdir, device, CONFIG, env, name="recd-memory") as recd:
    time.sleep(1)
    probe = recd.client()
    probe.call("status")
    idle = memory_kib(recd.pid)
    idle_mappings, _ = rss_by_mapping(recd.pid)

    done = threading.Event()
    final = {}

    def wait_finished():
        watcher = recd.client(timeout=seconds + 3600)
        watcher.call("subscribe", {"topics": ["state"]})
        result = watcher.call("start", dict(params, name="memory-24h", duration=seconds))
        final["start"] = result
        final["state"] = watcher.wait_state({"finished", "failed"})
        final["at"] = time.monotonic()
        done.set()
        watcher.close()

    thread = threading.Thread(target=wait_finished)
    t0 = time.monotonic()
    cpu0 = cpu_clock(recd.pid)
    thread.start()
    samples = []  # (wall seconds, recorded seconds, VmRSS KiB, threads)
    recording_mappings = None
    recording_detail = None
    while not done.is_set():
        status = probe.call("status")
        mem = memory_kib(recd.pid)
        if status["state"]["name"] == "recording":
            samples.append((time.monotonic() - t0, status["currentTime"], mem["VmRSS"], mem["Threads"]))
            if recording_mappings is None and status["currentTime"] >= min(3600, seconds / 2):
                recording_mappings = rss_by_mapping(recd.pid)[0]
                recording_detail = mem
        done.wait(SAMPLE_EVERY)
    thread.join()
    wall = final["at"] - t0
    cpu = cpu_clock(recd.pid) - cpu0
    after = memory_kib(recd.pid)
    state = final["state"]
    if state["name"] != "finished":
        raise RuntimeError(f"the long recording failed: {state}")
    path = state["recording"]["path"]
    size = os.path.getsize(path)
    os.unlink(path)
    time.sleep(1)
    after_delete = memory_kib(recd.pid)
    probe.close()

# recd's cost per libasound message, as the messages accumulate (one per read past the end of
# the short device's infile: every 8192 frames).
eof = []
# log_level debug: versions of recd that route libasound's messages into their log do it at debug
# level, and the log (recd's stderr) is how they are counted.
with Recd(bindir, workdir, short_device, 'log_level = "debug"\n' + CONFIG, env, name="recd-eof") as recd:
    for run in range(eof_runs):
        eof_before = cpu_clock(recd.pid)
        t = time.monotonic()
        _, end = record(recd, {"format": "wav", "sampleRate": 48000, "channels": 2, "bitDepth": 16,
                               "name": f"eof-{run}", "duration": eof_seconds})
        eof_cpu = cpu_clock(recd.pid) - eof_before
        os.unlink(end["recording"]["path"])
        with open(recd.log) as f:
            # recd's own log lines for them, or libasound's own "ALSA lib …" lines on stderr.
            messages = sum(1 for line in f if "libasound" in line or line.startswith("ALSA lib"))
        eof.append({"cpu_seconds": eof_cpu, "wall_seconds": time.monotonic() - t, "messages_total": messages,
                    "rss_kib": memory_kib(recd.pid)["VmRSS"]})
        print(f"  past-the-end run {run}: {eof_cpu:.2f} s CPU, {messages} libasound messages so far", flush=True)


def rss_at(recorded):
    """The first sample at or after `recorded` seconds of audio."""
    for sample in samples:
        if sample[1] >= recorded:
            return sample
    return samples[-1]


rss = [s[2] for s in samples]
first, last = samples[0], samples[-1]
hour1 = rss_at(3600)
save(out, {
    "hours": hours,
    "params": dict(params, duration=seconds),
    "choice": choice,
    "wall_seconds": wall,
    "cpu_seconds": cpu,
    "file_bytes": size,
    "frames": state["recording"]["frames"],
    "idle": idle,
    "idle_mappings": idle_mappings,
    "recording_mappings": recording_mappings,
    "recording_detail": recording_detail,
    "eof_seconds": eof_seconds,
    "eof": eof,
    "samples": len(samples),
    "first": {"recorded_s": first[1], "rss_kib": first[2]},
    "hour1": {"recorded_s": hour1[1], "rss_kib": hour1[2]},
    "last": {"recorded_s": last[1], "rss_kib": last[2]},
    "max_rss_kib": max(rss),
    "min_rss_kib": min(rss),
    "threads_max": max(s[3] for s in samples),
    "after": after,
    "after_delete": after_delete,
    "series": [{"wall": round(s[0], 2), "recorded_h": round(s[1] / 3600, 3), "rss_kib": s[2]}
               for s in samples[:: max(1, len(samples) // 60)]],
})
