"""9. Sound-activated recording on the paced PulseAudio device (48 kHz stereo 16-bit, 10 ms
periods), with the signal this script plays into the sink itself (`pacat --latency-msec=10`;
run.sh stops its pink noise for this step):

- CPU per hour **armed**: a `start` with a `trigger` (highPass 300, lowPass 3400, aboveFloor 12)
  on a quiet signal (white noise at -50 dBFS, below the threshold: nothing written), against,
  at the same time on the same device and signal, recd merely listening (`listen`, no trigger:
  what the trigger itself costs shows as the difference), the sox VOX pipeline users run,
  `sox -t alsa DEVICE out.wav silence 1 0.1 1% -1 2.0 1%` (target recd ≤ 0.5×), and
  `arecord -D DEVICE -f S16_LE -r 48000 -c 2 -t raw > /dev/null` (target recd ≤ 1.5×). CPU from
  each process's CPU-time clock over the window, cut into slices (median and spread).
- Detection latency: 1 kHz bursts at -10 dBFS (0.5 s on, 2 s off) over the noise, the onset
  known as the wall-clock time the player wrote the burst's first 10 ms chunk to pacat; per
  event, the arrival of the `opened` notification on the `trigger` topic less (a) that write
  time (includes the player: pipe, pacat's 10 ms buffer, the null sink's render, the monitor)
  and (b) the event's `onset` capture time from the notification (recd alone: attack, one
  block, the device period, the publication). With attack 0.05 s the floor of (b) is about
  attack + one block + one period = 70 ms.

usage: trigger.py BINDIR WORKDIR DEVICE SECONDS OUT.json
(ALSA_CONFIG_PATH and PULSE_SERVER in the environment define the paced DEVICE; the sink is
PULSE_SINK, default benchsink. BENCH_TRIGGER_BURSTS: how many bursts (20); BENCH_TRIGGER_PERIOD:
recd's period_time (0.01).)"""

import datetime
import fcntl
import math
import os
import random
import struct
import subprocess
import sys
import termios
import threading
import time

from lib import Recd, cpu_clock, percentile, save, summary, thread_clocks, thread_seconds_per_hour

bindir, workdir, device, seconds, out = sys.argv[1:6]
seconds = float(seconds)
env = dict(os.environ)
SINK = os.environ.get("PULSE_SINK", "benchsink")
RATE = 48000
CHUNK = 480  # frames: 10 ms
LEAD = 0.02  # the player writes this far ahead of its schedule
# recd's [capture] period_time: 10 ms (its default), or BENCH_TRIGGER_PERIOD seconds.
PERIOD = float(os.environ.get("BENCH_TRIGGER_PERIOD", "0.01"))
SLICES = 4
BURSTS = int(os.environ.get("BENCH_TRIGGER_BURSTS", "20"))
CPU_TRIGGER = {"highPass": 300, "lowPass": 3400, "aboveFloor": 12}
LATENCY_TRIGGER = dict(CPU_TRIGGER, attack=0.05, hang=0.5, preRoll=0.5)
CONFIG = f"""\
[capture]
period_time = {PERIOD}
[recording]
format = "wav"
sample_rate = 48000
channels = 2
bit_depth = 16
"""


def dbfs(level):
    return 32767 * 10 ** (level / 20)


class Player(threading.Thread):
    """Writes 10 ms chunks of raw PCM to pacat on a wall-clock schedule, LEAD ahead: -50 dBFS
    white noise, with a -10 dBFS 1 kHz tone added while `burst_until` is in the future. Notes
    time.time() at the write of each burst's first chunk."""

    def __init__(self):
        super().__init__(daemon=True)
        self.proc = subprocess.Popen(
            ["pacat", "--playback", "--raw", f"--device={SINK}", "--format=s16le", f"--rate={RATE}", "--channels=2",
             "--latency-msec=10", "--client-name=trigger-bench"], stdin=subprocess.PIPE, env=env)
        rng = random.Random(9)
        noise_amp = dbfs(-50) * math.sqrt(3)  # uniform noise: RMS = amp / √3
        self.noise = []
        for _ in range(100):  # 1 s of noise, cycled
            samples = [int(rng.uniform(-noise_amp, noise_amp)) for _ in range(2 * CHUNK)]
            self.noise.append(samples)
        tone_amp = dbfs(-10) * math.sqrt(2)  # a sine at -10 dBFS RMS
        self.tone = [int(tone_amp * math.sin(2 * math.pi * 1000 * i / RATE)) for i in range(CHUNK)]  # 1 kHz: whole cycles per chunk
        self.pack = struct.Struct(f"<{2 * CHUNK}h")
        self.quiet = [self.pack.pack(*n) for n in self.noise]
        self.loud = [self.pack.pack(*[max(-32768, min(32767, n[i] + self.tone[i // 2])) for i in range(2 * CHUNK)])
                     for n in self.noise]
        self.lock = threading.Lock()
        self.burst_chunks = 0  # chunks of tone still to write
        self.burst_written = None  # time.time() of the current burst's first chunk
        self.onsets = []
        self.late = 0
        self.dropped = 0
        self.queued_at_burst = []
        self.stopping = False

    def burst(self, length):
        """Starts a burst of `length` seconds at the next chunk; returns at once."""
        with self.lock:
            self.burst_chunks = round(length / (CHUNK / RATE))
            self.burst_written = None

    def run(self):
        start = time.monotonic() + 0.1
        index = 0
        while not self.stopping:
            due = start + index * CHUNK / RATE - LEAD
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -0.05:
                self.late += 1
            # What the pipe still holds for pacat: above LEAD (pacat not yet playing, or behind),
            # this chunk is dropped, so that a chunk written now is played LEAD + pacat's buffer later.
            queued = struct.unpack("i", fcntl.ioctl(self.proc.stdin.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
            if queued > LEAD * RATE * 4:
                self.dropped += 1
                index += 1
                continue
            with self.lock:
                loud = self.burst_chunks > 0
                if loud:
                    first = self.burst_written is None
                    self.burst_chunks -= 1
            data = (self.loud if loud else self.quiet)[index % 100]
            written = time.time()
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                return
            if loud and first:
                with self.lock:
                    self.burst_written = written
                    self.onsets.append(written)
                    self.queued_at_burst.append(queued)
            index += 1

    def stop(self):
        self.stopping = True
        self.join(5)
        self.proc.stdin.close()
        self.proc.terminate()
        self.proc.wait()


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def ms(values):
    values = sorted(values)
    return {"count": len(values), "p50": percentile(values, 50) * 1000, "p99": percentile(values, 99) * 1000,
            "min": values[0] * 1000 if values else None, "max": values[-1] * 1000 if values else None,
            "values": [round(v * 1000, 2) for v in values]}


results = {"seconds": seconds, "device": device, "period_time": PERIOD, "signal": "white noise -50 dBFS (pacat --latency-msec=10)",
           "cpu_trigger": CPU_TRIGGER, "latency_trigger": LATENCY_TRIGGER, "slices": SLICES}

player = Player()
player.start()
time.sleep(1)

# sox VOX: its alsa driver on the paced device, else arecord piped to it.
sox_out = os.path.join(workdir, "trigger-sox-vox.wav")
vox = ["silence", "1", "0.1", "1%", "-1", "2.0", "1%"]
sox_direct = ["sox", "-q", "-r", "48000", "-c", "2", "-b", "16", "-e", "signed-integer", "-t", "alsa", device, sox_out] + vox
arecord_argv = ["arecord", "-q", "-D", device, "-f", "S16_LE", "-r", "48000", "-c", "2", "-t", "raw"]

with Recd(bindir, workdir, device, CONFIG, env, name="recd-armed") as armed, \
        Recd(bindir, workdir, device, CONFIG, env, name="recd-plainlisten") as listening:
    armed_client = armed.client()
    armed_client.call("start", {"name": "armed", "trigger": CPU_TRIGGER})
    listen_client = listening.client()
    listen_client.call("listen")

    sox_procs = [subprocess.Popen(sox_direct, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)]
    time.sleep(2)
    if sox_procs[0].poll() is not None:
        err = sox_procs[0].stderr.read().decode(errors="replace").strip()
        results["sox_alsa_failed"] = err
        print(f"sox -t alsa {device} failed ({err}); using arecord | sox", file=sys.stderr)
        feeder = subprocess.Popen(arecord_argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        sox = subprocess.Popen(["sox", "-q", "-t", "raw", "-r", "48000", "-c", "2", "-b", "16", "-e", "signed-integer", "-",
                                sox_out] + vox, stdin=feeder.stdout, stdout=subprocess.DEVNULL, env=env)
        feeder.stdout.close()
        sox_procs = [feeder, sox]
        results["sox_command"] = " ".join(arecord_argv) + " | sox -t raw -r 48000 -c 2 -b 16 -e signed-integer - out.wav " + " ".join(vox)
    else:
        results["sox_command"] = " ".join(sox_direct[:1] + sox_direct[2:]).replace(sox_out, "out.wav")
    arecord = subprocess.Popen(arecord_argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(3)  # every reader running steadily; the trigger's floor measured

    def clocks():
        return {"recd_armed": cpu_clock(armed.pid), "recd_listening": cpu_clock(listening.pid),
                "sox_vox": sum(cpu_clock(p.pid) for p in sox_procs), "arecord": cpu_clock(arecord.pid)}

    def thread_sets():
        # Each process's threads by name: recd armed, and sox's (one process when its alsa driver
        # opened the device; a pipe's two otherwise, then the feeder's threads are counted too).
        sox_threads = {}
        for process in sox_procs:
            for name, value in thread_clocks(process.pid).items():
                sox_threads[name] = sox_threads.get(name, 0.0) + value
        return {"recd_armed": thread_clocks(armed.pid), "sox_vox": sox_threads}

    slices = {key: [] for key in ("recd_armed", "recd_listening", "sox_vox", "arecord")}
    totals = dict.fromkeys(slices, 0.0)
    wall_total = 0.0
    threads_before = thread_sets()
    for _ in range(SLICES):
        before, t0 = clocks(), time.monotonic()
        time.sleep(seconds / SLICES)
        after, wall = clocks(), time.monotonic() - t0
        wall_total += wall
        for key in slices:
            slices[key].append((after[key] - before[key]) / wall * 3600)
            totals[key] += after[key] - before[key]
    threads_after = thread_sets()
    cpu = {key: dict(summary(values), total_s_per_hour=totals[key] / wall_total * 3600) for key, values in slices.items()}
    results["cpu"] = cpu
    # Own threads: the process less libpulse's client thread (`threaded-ml`), the same in every
    # client of the paced device (issue 36's measure).
    threads = {key: thread_seconds_per_hour(threads_before[key], threads_after[key], wall_total) for key in threads_before}
    own = {key: sum(v for name, v in value.items() if name != "threaded-ml") for key, value in threads.items()}
    results["threads_s_per_hour"] = threads
    results["own_threads_s_per_hour"] = dict(own, ratio=own["recd_armed"] / own["sox_vox"] if own["sox_vox"] > 0 else None)
    results["ratio_sox"] = cpu["recd_armed"]["total_s_per_hour"] / cpu["sox_vox"]["total_s_per_hour"]
    results["ratio_arecord"] = cpu["recd_armed"]["total_s_per_hour"] / cpu["arecord"]["total_s_per_hour"]
    results["ratio_listening"] = cpu["recd_armed"]["total_s_per_hour"] / cpu["recd_listening"]["total_s_per_hour"]
    results["slice_ratios"] = {
        "sox": [a / b for a, b in zip(slices["recd_armed"], slices["sox_vox"])],
        "arecord": [a / b for a, b in zip(slices["recd_armed"], slices["arecord"])]}
    for process in [arecord] + sox_procs[::-1]:
        process.terminate()
        process.wait()
    results["sox_vox_bytes"] = os.path.getsize(sox_out) if os.path.exists(sox_out) else None
    status = armed_client.call("status")
    results["armed_status"] = status.get("trigger")
    results["armed_xruns"] = status.get("statistics", {}).get("xruns")
    results["armed_files"] = sum(1 for _, _, names in os.walk(armed.recordings) for n in names if ".wav" in n)
    listen_client.call("unlisten")
    listen_client.close()
    listening.stop()

    # Detection latency: a new armed recording with attack 0.05, hang 0.5.
    armed_client.call("stop")
    armed_client.close()
    client = armed.client(timeout=30)
    client.call("subscribe", {"topics": ["trigger"]})
    client.call("start", {"name": "bursts", "trigger": LATENCY_TRIGGER})
    time.sleep(3)  # the floor measured (a second at least), the device steady
    client.notifications.clear()
    events = []
    for burst in range(BURSTS):
        player.burst(0.5)
        deadline = time.monotonic() + 2.5
        opened = None
        while time.monotonic() < deadline:
            client.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                note = client.next_notification()
            except (TimeoutError, OSError):
                break
            if note["topic"] == "trigger" and note["value"] and note["value"]["kind"] == "opened" and opened is None:
                opened = note
        with player.lock:
            written = player.burst_written
        if opened is None or written is None:
            events.append({"burst": burst, "opened": None})
            continue
        value = opened["value"]
        arrived = opened["_received"]
        onset = parse_time(value["onset"])
        events.append({"burst": burst, "written": written, "arrived": arrived, "onset": onset,
                       "from_write": arrived - written, "from_onset": arrived - onset, "onset_after_write": onset - written})
    client.call("stop")
    final = client.call("status").get("trigger")
    client.close()

player.stop()
seen = [e for e in events if e.get("opened", True) is not None and "from_write" in e]
results["latency"] = {
    "bursts": BURSTS, "detected": len(seen), "events": events,
    "from_write": ms([e["from_write"] for e in seen]),
    "from_onset": ms([e["from_onset"] for e in seen]),
    "onset_after_write": ms([e["onset_after_write"] for e in seen]),
    "player_late_chunks": player.late, "player_dropped_chunks": player.dropped,
    "pipe_bytes_at_burst": player.queued_at_burst,
}
save(out, results)

c = results["cpu"]
for key in ("recd_armed", "recd_listening", "sox_vox", "arecord"):
    print(f"CPU {key}: {c[key]['total_s_per_hour']:.2f} s/h (slices median {c[key]['median']:.2f}, "
          f"{c[key]['min']:.2f}–{c[key]['max']:.2f})")
print(f"recd armed / sox VOX: {results['ratio_sox']:.2f} (target <= 0.5: {'met' if results['ratio_sox'] <= 0.5 else 'NOT met'}); "
      f"/ arecord: {results['ratio_arecord']:.2f} (target <= 1.5: {'met' if results['ratio_arecord'] <= 1.5 else 'NOT met'}); "
      f"/ recd listening: {results['ratio_listening']:.2f}")
print(f"armed: {results['armed_status']['events']} events, {results['armed_files']} files written, xruns {results['armed_xruns']}; sox: {results['sox_command']}")
own = results["own_threads_s_per_hour"]
print(f"CPU armed, own threads (less libpulse's threaded-ml): recd {own['recd_armed']:.2f} s/h, sox VOX {own['sox_vox']:.2f} s/h, "
      f"ratio {own['ratio']:.2f} (issue 36's target <= 1.0: {'met' if own['ratio'] is not None and own['ratio'] <= 1.0 else 'NOT met'}); "
      f"whole process {results['ratio_sox']:.2f} (issue 36's target <= 1.0: {'met' if results['ratio_sox'] <= 1.0 else 'NOT met'})")
for key, value in results["threads_s_per_hour"].items():
    print(f"  {key}: " + ", ".join(f"{name} {v:.2f}" for name, v in sorted(value.items(), key=lambda x: -x[1]) if v > 0.005))
lat = results["latency"]
print(f"latency over {lat['detected']}/{BURSTS} bursts: opened − burst written p50 {lat['from_write']['p50']:.1f} ms, "
      f"p99 {lat['from_write']['p99']:.1f} ms; opened − onset p50 {lat['from_onset']['p50']:.1f} ms, "
      f"p99 {lat['from_onset']['p99']:.1f} ms; onset − written p50 {lat['onset_after_write']['p50']:.1f} ms")
