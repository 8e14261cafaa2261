"""8. Taps on the paced PulseAudio device (48 kHz stereo 16-bit, 10 ms periods):
- latency from capture to a client's read: for every chunk, the time it was read less the
  capture time of its last frame (capture time + (frames - 1) / rate), p50/p99, for a tap in
  the device's format and one at 16 kHz mono (soxr); target p99 < 2 periods + 5 ms;
- recd's CPU per hour recording 48 kHz stereo FLAC with 20 taps at 16 kHz mono read by 20
  clients, against the same recording without taps (the recordings exact: frames = duration ×
  rate, no overrun);
- what users do instead, per consumer: `arecord -D DEVICE -f S16_LE -r 48000 -c 2 -t raw |
  sox -t raw … - -t raw -r 16000 -c 1 -` (CPU of both per consumer-hour), against recd's CPU
  per tap-hour (the difference above / 20).

usage: tap.py BINDIR WORKDIR DEVICE SECONDS OUT.json
(ALSA_CONFIG_PATH and PULSE_SERVER in the environment define the paced DEVICE.)"""

import json
import math
import os
import socket
import struct
import subprocess
import sys
import threading
import time

from lib import Recd, cpu_clock, percentile, record, save

bindir, workdir, device, seconds, out = sys.argv[1:6]
seconds = float(seconds)
env = dict(os.environ)
PERIOD = 0.01
TAPS = 20
CONFIG = f"""\
[capture]
period_time = {PERIOD}
[recording]
format = "flac"
sample_rate = 48000
channels = 2
bit_depth = 16
"""
HEADER = struct.Struct("<4sIQdIIII")


class TapReader(threading.Thread):
    """One tap's client: reads until told to stop, noting each chunk's latency and losses."""

    def __init__(self, path, params, latencies=False):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tap", "params": params}) + "\n").encode())
        self.stream = self.sock.makefile("rb")
        answer = json.loads(self.stream.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        self.format = answer["result"]["format"]
        self.keep = latencies
        self.latencies = []
        self.frames = 0
        self.lost = 0
        self.stopping = False

    def run(self):
        rate = self.format["sampleRate"]
        while not self.stopping:
            header = self.stream.read(40)
            if len(header) < 40:
                return
            _, _, _, captured, frames, lost, _, length = HEADER.unpack(header)
            payload = self.stream.read(length)
            now = time.time()
            if len(payload) < length:
                return
            self.frames += frames
            self.lost += lost
            if self.keep:
                self.latencies.append(now - (captured + (frames - 1) / rate))

    def stop(self):
        self.stopping = True
        self.sock.shutdown(socket.SHUT_RDWR)
        self.join(5)
        self.sock.close()


def summary_ms(values):
    values = sorted(values)
    return {"count": len(values), "p50": percentile(values, 50) * 1000, "p99": percentile(values, 99) * 1000,
            "max": values[-1] * 1000 if values else None}


results = {"seconds": seconds, "device": device, "period_time": PERIOD, "taps": TAPS}

with Recd(bindir, workdir, device, CONFIG, env, name="recd-tap") as recd:
    # Latency: two taps on a listening daemon, read as fast as they come.
    same = TapReader(recd.socket, {}, latencies=True)
    small = TapReader(recd.socket, {"rate": 16000, "channels": 1}, latencies=True)
    for reader in (same, small):
        reader.start()
    time.sleep(2)  # the device running steadily
    for reader in (same, small):
        reader.latencies.clear()
    time.sleep(min(seconds, 60))
    for reader in (same, small):
        reader.stop()
    results["latency"] = {"device_format": summary_ms(same.latencies), "16k_mono": summary_ms(small.latencies)}

    # CPU: the same recording without taps, then with 20 (the device closed in between).
    def recording_cpu(name, taps):
        readers = [TapReader(recd.socket, {"rate": 16000, "channels": 1}) for _ in range(taps)]
        for reader in readers:
            reader.start()
        time.sleep(1)
        before = cpu_clock(recd.pid)
        started = time.monotonic()
        result, final = record(recd, {"name": name, "duration": seconds, "preRoll": 0})
        wall = time.monotonic() - started
        cpu = cpu_clock(recd.pid) - before
        for reader in readers:
            reader.stop()
        recording = final["recording"]
        return {"cpu_s_per_hour": cpu / wall * 3600, "frames": recording["frames"],
                "exact": recording["frames"] == round(seconds * 48000),
                "tap_frames": [r.frames for r in readers], "tap_lost": sum(r.lost for r in readers)}

    results["without_taps"] = recording_cpu("plain", 0)
    results["with_taps"] = recording_cpu("tapped", TAPS)
    status = recd.client().call("status")
    results["xruns"] = status["statistics"]["xruns"]

# What users do instead: one arecord | sox pipeline per consumer.
arecord = subprocess.Popen(["arecord", "-q", "-D", device, "-f", "S16_LE", "-r", "48000", "-c", "2", "-t", "raw"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
sox = subprocess.Popen(["sox", "-q", "-t", "raw", "-r", "48000", "-e", "signed-integer", "-b", "16", "-c", "2", "-",
                        "-t", "raw", "-r", "16000", "-c", "1", "-"], stdin=arecord.stdout, stdout=subprocess.DEVNULL, env=env)
arecord.stdout.close()
time.sleep(1)
before = cpu_clock(arecord.pid) + cpu_clock(sox.pid)
time.sleep(seconds)
pipeline = cpu_clock(arecord.pid) + cpu_clock(sox.pid) - before
for process in (arecord, sox):
    process.terminate()
    process.wait()
results["pipeline_s_per_consumer_hour"] = pipeline / seconds * 3600
results["recd_s_per_tap_hour"] = (results["with_taps"]["cpu_s_per_hour"] - results["without_taps"]["cpu_s_per_hour"]) / TAPS

save(out, results)
lat = results["latency"]
target = (2 * PERIOD + 0.005) * 1000
for key, value in lat.items():
    print(f"latency {key}: p50 {value['p50']:.1f} ms, p99 {value['p99']:.1f} ms over {value['count']} chunks "
          f"(target p99 < {target:.0f} ms: {'met' if value['p99'] < target else 'NOT met'})")
w, wo = results["with_taps"], results["without_taps"]
print(f"recording FLAC: {wo['cpu_s_per_hour']:.1f} s/h without taps, {w['cpu_s_per_hour']:.1f} s/h with {TAPS} taps at 16 kHz mono "
      f"(exact: {wo['exact']} / {w['exact']}; taps lost {w['tap_lost']} frames; xruns {results['xruns']})")
print(f"per consumer-hour: recd {results['recd_s_per_tap_hour']:.2f} s, arecord | sox {results['pipeline_s_per_consumer_hour']:.2f} s")
