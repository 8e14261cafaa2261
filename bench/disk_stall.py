#!/usr/bin/env python3
"""Audio lost to a disk stall, recd against arecord and jack_capture (issue 36's table).

The device is JACK's dummy backend read through ALSA's jack plugin: paced like a sound card and
overrunning like one (../shared/TESTING.md, 2b). A JACK client plays the server's frame clock
(Tests/reference/jack_frameclock.c), so every recorded frame says which device frame it is and
the audio lost is exactly the jumps between consecutive frames, over all of a tool's files.
Each tool records stereo WAV (16-bit; jack_capture float); after 2 s, strace delays one write(2) to the output file by
the stall (`-P FILE -e inject=write:delay_enter=US:when=3`: the third write to that file,
whichever thread makes it), then the recording goes on for 3 s.

  bench/disk_stall.py BINDIR [--stalls 0.3,1,3,8,12] [--tools recd,arecord,jack_capture] [--out FILE]
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RATE = 48000
ALSA = """
pcm.clock_raw { type jack capture_ports { 0 "frameclock:hi" 1 "frameclock:lo" } }
pcm.clock { type plug slave.pcm "clock_raw" }
"""


def frame_numbers(path):
    """The frame numbers a WAV of the frame clock holds (16-bit stereo)."""
    import numpy
    # As floats (no dither; a 16-bit sample k reads as k/32768 exactly), for 16-bit and float files alike.
    raw = subprocess.run(["sox", "-D", path, "-t", "raw", "-e", "floating-point", "-b", "32", "-c", "2", "-"],
                         check=True, capture_output=True).stdout
    floats = numpy.frombuffer(raw, dtype="<f4").reshape(-1, 2)
    samples = numpy.rint(floats.astype(numpy.float64) * 32768).astype(numpy.int64) + 32768
    return (samples[:, 0] << 16) | samples[:, 1]


def lost_frames(paths):
    """Frames missing between the first and last frame over `paths` (in order), and the files."""
    import numpy
    numbers = [frame_numbers(p) for p in paths]
    numbers = [n for n in numbers if len(n)]
    joined = numpy.concatenate(numbers)
    steps = numpy.diff(joined)
    return int(numpy.sum(steps[steps > 1] - 1)), int(numpy.sum(steps < 1)), len(numbers)


class Jack:
    def __init__(self, work):
        self.name = f"bench-stall-{os.getpid()}"
        self.env = dict(os.environ, JACK_NO_AUDIO_RESERVATION="1", JACK_DEFAULT_SERVER=self.name,
                        JACK_NO_START_SERVER="1")
        self.work = work
        self.binary = os.path.join(work, "jack_frameclock")
        subprocess.run(["cc", "-O2", "-o", self.binary, os.path.join(ROOT, "Tests/reference/jack_frameclock.c"), "-ljack"],
                       check=True)
        config = os.path.join(work, "asound.conf")
        with open(config, "w") as f:
            f.write(ALSA)
        self.env["ALSA_CONFIG_PATH"] = "/usr/share/alsa/alsa.conf:" + config

    def __enter__(self):
        self.server = subprocess.Popen(["jackd", "-n", self.name, "--no-realtime", "-S", "-d", "dummy", "-r", str(RATE),
                                        "-p", "480", "-C", "2", "-P", "2"], env=self.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while subprocess.run(["jack_lsp"], env=self.env, capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("jackd did not start")
            time.sleep(0.1)
        os.makedirs(f"/dev/shm/jack_db-{os.getuid()}", exist_ok=True)
        self.clock = subprocess.Popen([self.binary, "frameclock"], env=self.env, stdout=subprocess.PIPE, text=True)
        if self.clock.stdout.readline().strip() != "ready":
            raise RuntimeError("jack_frameclock did not start")
        return self

    def __exit__(self, *exc):
        for process in (self.clock, self.server):
            process.terminate()
            process.wait(timeout=10)


def stall(pid, path, seconds):
    return subprocess.Popen(["strace", "-qq", "-f", "-p", str(pid), "-P", path, "-e", "trace=write",
                             "-e", f"inject=write:delay_enter={int(seconds * 1e6)}:when=3"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_recd(bindir, jack, work, seconds):
    directory = os.path.join(work, f"recd-{seconds}")
    os.makedirs(directory)
    config = "[recording]\nformat = \"wav\"\nsample_rate = 48000\nchannels = 2\n"
    with lib.Recd(bindir, directory, "clock", config, jack.env) as recd:
        client = recd.client()
        started = client.call("start", {"name": "stall"})
        time.sleep(2)
        tracer = stall(recd.pid, started["path"] + ".part", seconds)
        time.sleep(seconds + 3)
        tracer.terminate()
        tracer.wait()
        client.call("stop")
        client.close()
        status = recd.client().call("status")
        paths = sorted(glob.glob(os.path.join(recd.recordings, "stall*.wav")), key=lambda p: (len(p), p))
    extra = {"gaps": len(status["statistics"]["gaps"]), "counted": status["statistics"]["framesLost"]}
    return paths, extra


def run_peer(argv, path, env, seconds):
    """A peer recording into `path` from its start: the stall after 2 s, then 3 s more."""
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    tracer = stall(process.pid, path, seconds)
    time.sleep(seconds + 3)
    tracer.terminate()
    tracer.wait()
    process.terminate()
    process.wait(timeout=30)
    return [path], {}


def run_arecord(jack, work, seconds):
    path = os.path.join(work, f"arecord-{seconds}.wav")
    return run_peer(["arecord", "-q", "-D", "clock", "-f", "S16_LE", "-r", str(RATE), "-c", "2", path], path, jack.env, seconds)


def run_jack_capture(jack, work, seconds):
    path = os.path.join(work, f"jack_capture-{seconds}.wav")
    # Float (its default): its 16-bit conversion scales by 32767, which the frame numbers do not survive.
    return run_peer(["jack_capture", "-f", "wav", "-c", "2", "-p", "frameclock:hi", "-p", "frameclock:lo", "--daemon", path],
                    path, jack.env, seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bindir")
    parser.add_argument("--stalls", default="0.3,1,3,8,12")
    parser.add_argument("--tools", default="recd,arecord,jack_capture")
    parser.add_argument("--out")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as work:
        jack = Jack(work)
        with jack:
            for seconds in [float(s) for s in args.stalls.split(",")]:
                for tool in args.tools.split(","):
                    if tool == "recd":
                        paths, extra = run_recd(args.bindir, jack, work, seconds)
                    elif tool == "arecord":
                        paths, extra = run_arecord(jack, work, seconds)
                    else:
                        paths, extra = run_jack_capture(jack, work, seconds)
                    lost, repeated, files = lost_frames(paths)
                    row = dict(tool=tool, stall=seconds, lost_ms=round(lost / RATE * 1000, 1), repeated=repeated,
                               files=files, **extra)
                    results.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        lib.save(args.out, results)


if __name__ == "__main__":
    main()
