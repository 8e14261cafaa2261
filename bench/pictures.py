"""16. A recording's picture (issue 54): what recd-web's spectrogram PNG costs to render, per
minute of audio, against sox's `spectrogram` effect on the same file at the same size, and what
a picture already rendered costs to serve again (the cache). Files of 1, 10 and 60 minutes
(48 kHz stereo: pink noise with a 3 kHz tone, FLAC; the 10 minutes also as WAV and AAC .m4a).
recd-web renders the first request of each file with an empty cache; recd is not needed (the
route reads the file itself).

usage: pictures.py BINDIR WORKDIR REPS OUT.json"""

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request

from lib import cpu_clock, save

bindir, workdir, reps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
recordings = os.path.join(workdir, "pictures-recordings")
cache = os.path.join(workdir, "pictures-cache")
os.makedirs(recordings, exist_ok=True)
config = os.path.join(workdir, "pictures.toml")
with open(config, "w") as file:
    file.write('[web]\naddress = "127.0.0.1"\nobserve = "open"\nlisten = "open"\n')

FILES = [("1min.flac", 60), ("10min.flac", 600), ("10min.wav", 600), ("10min.m4a", 600), ("60min.flac", 3600)]
for name, seconds in FILES:
    path = os.path.join(recordings, name)
    if os.path.exists(path):
        continue
    if name.endswith(".m4a"):
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", os.path.join(recordings, "10min.wav"), "-c:a", "aac", "-b:a", "128k", path],
                       check=True)
        continue
    subprocess.run(["sox", "-n", "-r", "48000", "-c", "2", "-b", "16", path, "synth", str(seconds), "pinknoise", "sine", "3000",
                    "remix", "1,2", "1,2", "gain", "-12"], check=True)

log = open(os.path.join(workdir, "pictures-web.log"), "w")
web = subprocess.Popen([os.path.join(bindir, "recd-web"), "--user", "--config", config, "--socket", os.path.join(workdir, "none.sock"),
                        "--recordings-dir", recordings, "--port", "0", "--cache-dir", cache], stdout=log, stderr=log)
port = None
deadline = time.monotonic() + 60
while port is None and time.monotonic() < deadline:
    match = re.search(r"port=(\d+)", open(log.name).read())
    port = int(match.group(1)) if match else None
    time.sleep(0.05)
if port is None:
    raise RuntimeError(f"recd-web did not start; see {log.name}")


def get(name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/picture/{name}?width=800", timeout=600) as answer:
        return answer.read()


results = {"reps": reps, "files": {}}
try:
    for name, seconds in FILES:
        path = os.path.join(recordings, name)
        cold, cold_cpu, warm, sox = [], [], [], []
        for _ in range(reps):
            shutil.rmtree(cache, ignore_errors=True)
            os.makedirs(cache)
            before, start = cpu_clock(web.pid), time.monotonic()
            png = get(name)
            cold.append(time.monotonic() - start)
            cold_cpu.append(cpu_clock(web.pid) - before)
            start = time.monotonic()
            get(name)
            warm.append(time.monotonic() - start)
            if name.endswith(".m4a"):
                continue  # Debian's sox reads no AAC
            start = time.monotonic()
            # sox's spectrogram of the same size: 800 columns, 257 rows (its -y is rows + 1 a power of two).
            subprocess.run(["sox", path, "-n", "spectrogram", "-x", "800", "-y", "257", "-o", os.path.join(workdir, "sox.png")],
                           check=True, capture_output=True)
            sox.append(time.monotonic() - start)
        minutes = seconds / 60
        results["files"][name] = {
            "minutes": minutes, "png_bytes": len(png),
            "recd_web_ms_per_minute": statistics.median(cold) * 1000 / minutes,
            "recd_web_cpu_ms_per_minute": statistics.median(cold_cpu) * 1000 / minutes,
            "cached_ms": statistics.median(warm) * 1000,
            "sox_ms_per_minute": statistics.median(sox) * 1000 / minutes if sox else None,
        }
finally:
    web.terminate()
    web.wait(timeout=30)
save(out, results)
for name, case in results["files"].items():
    print(f"{name}: recd-web {case['recd_web_ms_per_minute']:.0f} ms per minute of audio "
          f"(CPU {case['recd_web_cpu_ms_per_minute']:.0f}), cached {case['cached_ms']:.1f} ms, "
          + (f"sox {case['sox_ms_per_minute']:.0f} ms per minute, " if case["sox_ms_per_minute"] else "sox cannot read it, ")
          + f"PNG {case['png_bytes'] // 1024} KiB")
