"""Capture cost of two or more recd builds, side by side: CPU seconds per recorded hour of
each build's daemon recording the same 600 s from ALSA's unpaced `file` device, the builds'
recordings interleaved (the order reversed every other repetition), so that a busy machine
or its writeback weighs on every build alike. For a change on the capture path, against the
tree before it (build that tree's release into another directory first).

usage: capture_ab.py BINDIR[,BINDIR...] CASE REPS [--pin CPU]
CASE: wav (48 kHz/16-bit stereo), flac48 (FLAC level 5, no conversion), flac16 (FLAC 16 kHz
from the 48 kHz device, soxr). --pin runs every daemon on one CPU (taskset): what is left
then is not the cost of waking a thread on the other CPU.

The same input as `make bench`'s capture step (610 s: pink noise left, a 440 Hz sine right,
made with sox into a temporary directory)."""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack

from lib import Recd, cpu_clock, record

CASES = {
    "wav": {"format": "wav", "sampleRate": 48000},
    "flac48": {"format": "flac", "sampleRate": 48000, "quality": "high"},
    "flac16": {"format": "flac", "sampleRate": 16000, "quality": "high"},
}

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("bindirs")
parser.add_argument("case", choices=sorted(CASES))
parser.add_argument("reps", type=int)
parser.add_argument("--pin", type=int, help="run the daemons on this CPU only")
args = parser.parse_args()

if args.pin is not None:
    os.sched_setaffinity(0, {args.pin})
work = tempfile.mkdtemp(prefix="recd-capture-ab.")
try:
    infile = os.path.join(work, "input.raw")
    subprocess.run(["sox", "-n", "-r", "48000", "-c", "2", "-b", "16", "-e", "signed-integer", "-t", "raw", infile,
                    "synth", "610", "pinknoise", "sine", "440", "vol", "0.5"], check=True)
    with open(os.path.join(work, "alsa.conf"), "w") as f:
        f.write(f'pcm.benchfile {{ type file slave.pcm "null" file "/dev/null" infile "{infile}" format "raw" }}\n')
    env = dict(os.environ, ALSA_CONFIG_PATH=f"/usr/share/alsa/alsa.conf:{work}/alsa.conf")
    bindirs = args.bindirs.split(",")
    seconds = 600
    with ExitStack() as stack:
        daemons = []
        for index, bindir in enumerate(bindirs):
            directory = os.path.join(work, f"d{index}")
            os.makedirs(directory)
            daemons.append(stack.enter_context(Recd(bindir, directory, "benchfile", "[capture]\nsample_rate = 48000\n",
                                                    env, name=f"recd-{index}")))
        costs = [[] for _ in bindirs]
        for rep in range(args.reps):
            order = range(len(daemons)) if rep % 2 == 0 else reversed(range(len(daemons)))
            for index in order:
                before = cpu_clock(daemons[index].pid)
                params = dict(CASES[args.case], channels=2, bitDepth=16, name=f"r{rep}", duration=seconds)
                _, final = record(daemons[index], params)
                costs[index].append((cpu_clock(daemons[index].pid) - before) * 3600 / seconds)
                os.unlink(final["recording"]["path"])
    for bindir, values in zip(bindirs, costs):
        print(f"{bindir}: median {statistics.median(values):.3f} s per recorded hour, min {min(values):.3f} "
              f"({' '.join(f'{v:.2f}' for v in values)})")
finally:
    shutil.rmtree(work, ignore_errors=True)
