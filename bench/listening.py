"""7. Listening on the paced PulseAudio device (48 kHz stereo 16-bit, meter + 10 s pre-roll):
recd's CPU per hour against `arecord -D DEVICE -f S16_LE -r 48000 -c 2 -t raw > /dev/null` over
the same seconds (both at once, on the same device); recd's RSS listening, and recording with
the pre-roll; and the start → first file frame latency while listening (no device opening in
the path) against a start with the device closed.

usage: listening.py BINDIR WORKDIR DEVICE SECONDS RUNS OUT.json
(ALSA_CONFIG_PATH and PULSE_SERVER in the environment define the paced DEVICE.)"""

import os
import subprocess
import sys
import threading
import time

from lib import Recd, cpu_clock, memory_kib, save, summary, thread_clocks, thread_seconds_per_hour

bindir, workdir, device, seconds, runs, out = sys.argv[1:7]
seconds = float(seconds)
runs = int(runs)
env = dict(os.environ)

# [capture] period_time: recd's default (10 ms: level updates and first frames that soon), or
# BENCH_LISTEN_PERIOD seconds, to see what the wake-up rate costs against arecord's default.
PERIOD = os.environ.get("BENCH_LISTEN_PERIOD")
CONFIG = (f"[capture]\nperiod_time = {PERIOD}\n" if PERIOD else "") + """\
[recording]
format = "flac"
sample_rate = 48000
channels = 2
bit_depth = 16
[listen]
pre_roll = "10 s"
[metering]
time_interval = 0.005
"""
# BENCH_LISTEN_SPECTRUM=1: one client subscribed to the spectrum (every column) during the CPU
# window, as a web page showing a spectrogram would be: what a viewer costs.
SPECTRUM = os.environ.get("BENCH_LISTEN_SPECTRUM") == "1"
results = {"seconds": seconds, "runs": runs, "device": device, "period_time": float(PERIOD) if PERIOD else 0.01,
           "spectrum_viewer": SPECTRUM}


class SpectrumViewer:
    """A client that subscribes to every spectrum column and reads them until stopped."""

    def __init__(self, recd):
        self.client = recd.client()
        self.client.call("subscribe", {"topics": ["spectrum"], "interval": 0.05})
        self.columns = 0
        self.stopping = False
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        while not self.stopping:
            note = self.client.next_notification()
            if note["topic"] == "spectrum" and note["value"] is not None:
                self.columns += 1

    def stop(self):
        self.stopping = True
        self.thread.join(timeout=5)
        self.client.close()


def start_latency(recd, name, listening):
    """Seconds from sending `start` to its answer (which comes once the first frame is in the
    file), and to the first currentTime > 0 notification."""
    client = recd.client()
    try:
        client.call("subscribe", {"topics": ["currentTime"], "interval": 0.01})
        client.notifications.clear()
        sent = time.monotonic()
        result = client.call("start", {"name": name, "preRoll": 0} if listening else {"name": name})
        answered = time.monotonic() - sent
        while True:
            note = client.next_notification()
            if note["topic"] == "currentTime" and note["value"] > 0:
                first = time.monotonic() - sent
                break
        client.call("cancel")
        return answered, first, result
    finally:
        client.close()


with Recd(bindir, workdir, device, CONFIG, env, name="recd-listen") as recd:
    client = recd.client()
    client.call("listen")
    # Warm: the ring full, the device running steadily.
    deadline = time.monotonic() + 60
    while client.call("status")["listening"]["preRollHeld"] < 10 and time.monotonic() < deadline:
        time.sleep(0.2)
    status = client.call("status")["listening"]
    results["preRollBytes"] = status["preRollBytes"]
    arecord = subprocess.Popen(["arecord", "-q", "-D", device, "-f", "S16_LE", "-r", "48000", "-c", "2", "-t", "raw"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    viewer = SpectrumViewer(recd) if SPECTRUM else None
    time.sleep(1)  # arecord's own start-up (and the spectrum's first columns) are not part of the window
    columns_before = viewer.columns if viewer else 0
    recd_before, arecord_before = cpu_clock(recd.pid), cpu_clock(arecord.pid)
    recd_threads, arecord_threads = thread_clocks(recd.pid), thread_clocks(arecord.pid)
    time.sleep(seconds)
    recd_cpu, arecord_cpu = cpu_clock(recd.pid) - recd_before, cpu_clock(arecord.pid) - arecord_before
    # Per thread: the device plugin's (libpulse's `threaded-ml`) is the same code in both
    # processes; the rest is each program's own.
    recd_threads = thread_seconds_per_hour(recd_threads, thread_clocks(recd.pid), seconds)
    arecord_threads = thread_seconds_per_hour(arecord_threads, thread_clocks(arecord.pid), seconds)
    own = {name: sum(v for thread, v in threads.items() if thread != "threaded-ml")
           for name, threads in (("recd", recd_threads), ("arecord", arecord_threads))}
    results["threads_s_per_hour"] = {"recd": recd_threads, "arecord": arecord_threads}
    results["own_threads_s_per_hour"] = dict(own, ratio=own["recd"] / own["arecord"] if own["arecord"] > 0 else None)
    arecord.terminate()
    arecord.wait()
    if viewer:
        results["spectrum_columns_per_second"] = (viewer.columns - columns_before) / seconds
        viewer.stop()
    results["cpu"] = {
        "recd_s_per_hour": recd_cpu / seconds * 3600,
        "arecord_s_per_hour": arecord_cpu / seconds * 3600,
        "ratio": recd_cpu / arecord_cpu if arecord_cpu > 0 else None,
    }
    results["rss_listening_kib"] = memory_kib(recd.pid)

    # Recording with the pre-roll: the file begins 10 s back; RSS at its peak over 30 s.
    started = client.call("start", {"name": "with-pre-roll"})
    results["recording_pre_roll_seconds"] = started["preRoll"]["seconds"]
    peak = 0
    end = time.monotonic() + 30
    while time.monotonic() < end:
        peak = max(peak, memory_kib(recd.pid)["VmRSS"])
        time.sleep(0.25)
    results["rss_recording_kib"] = dict(memory_kib(recd.pid), peak=peak)
    client.call("stop")

    # Start latency while listening (the device is open) ...
    listening = [start_latency(recd, f"l{index}", True) for index in range(runs)]
    client.call("unlisten")
    client.close()
    # ... and with the device closed (opened by the start).
    closed = [start_latency(recd, f"c{index}", False) for index in range(runs)]
    results["start_listening"] = {"answer": summary([a for a, _, _ in listening]),
                                  "first_frame": summary([f for _, f, _ in listening])}
    results["start_closed"] = {"answer": summary([a for a, _, _ in closed]),
                               "first_frame": summary([f for _, f, _ in closed])}

save(out, results)
cpu = results["cpu"]
print(f"CPU listening: recd {cpu['recd_s_per_hour']:.2f} s/h, arecord {cpu['arecord_s_per_hour']:.2f} s/h, "
      f"ratio {cpu['ratio']:.2f} (target <= 1.0)")
if SPECTRUM:
    print(f"with a spectrum viewer: {results['spectrum_columns_per_second']:.1f} columns per second")
own = results["own_threads_s_per_hour"]
print(f"CPU listening, own threads (less libpulse's threaded-ml): recd {own['recd']:.2f} s/h, arecord {own['arecord']:.2f} s/h, "
      f"ratio {own['ratio']:.2f} (target <= 2.0)")
for name in ("recd", "arecord"):
    threads = results["threads_s_per_hour"][name]
    print(f"  {name}: " + ", ".join(f"{thread} {value:.2f}" for thread, value in sorted(threads.items(), key=lambda x: -x[1]) if value > 0.005))
print(f"RSS listening with 10 s pre-roll ({results['preRollBytes']} bytes): {results['rss_listening_kib']['VmRSS'] / 1024:.1f} MiB; "
      f"recording with the pre-roll: peak {results['rss_recording_kib']['peak'] / 1024:.1f} MiB (target < 24 MiB each)")
for key in ("start_listening", "start_closed"):
    print(f"{key}: answer median {results[key]['answer']['median'] * 1000:.1f} ms, "
          f"first frame median {results[key]['first_frame']['median'] * 1000:.1f} ms")
