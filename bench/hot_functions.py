"""Writes the functions recd and recctl run, for the linker to put first in each executable
(`--symbol-ordering-file`, Makefile's RELEASE_FLAGS). The kernel maps an executable's code 64 KiB
around every page it faults in, so code that runs scattered among code that never does keeps
far more resident than it uses: recd ran 1.6 MB of its 13 MB of code and had 10 MiB of it
resident. Clustered, what runs shares pages.

Runs stripped copies of release builds under callgrind (as profile.py does) through what a
recorder does: start-up, status, subscriptions, a WAV and a FLAC recording from the unpaced ALSA
file device, recordings.list, shutdown; and recctl's status, ls and --help. A name defined more
than once in either executable (local helpers such as `objectdestroy.2Tm`) is left out: the
linker would move every copy. Functions missing from the list only lose the clustering, so a
list older than the code is still correct; regenerate it when the code changed much.

usage: hot_functions.py BINDIR OUT   (`make hot-functions`)"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

from lib import Recd, record

bindir, out = sys.argv[1:3]
here = os.path.dirname(os.path.abspath(__file__))
work = tempfile.mkdtemp(prefix="recd-hot-")
try:
    for name in ("recd", "recctl"):
        subprocess.run(["objcopy", "--strip-debug", os.path.join(bindir, name), os.path.join(work, name)], check=True)
    shim = os.path.join(work, "sigsuspend_shim.so")
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", shim, os.path.join(here, "sigsuspend_shim.c")], check=True)
    # An hour of zeros, sparse: read at memory speed.
    silence = os.path.join(work, "silence.raw")
    with open(silence, "wb") as f:
        f.truncate(3600 * 48000 * 4)
    with open(os.path.join(work, "alsa.conf"), "w") as f:
        f.write(f'pcm.hotfile {{ type file slave.pcm "null" file "/dev/null" infile "{silence}" format "raw" }}\n')
    env = dict(os.environ, ALSA_CONFIG_PATH=f"/usr/share/alsa/alsa.conf:{work}/alsa.conf", LD_PRELOAD=shim)

    def callgrind(tag):
        return ["valgrind", "--tool=callgrind", "--dump-instr=no", "--demangle=no", "--compress-strings=no",
                "--compress-pos=no", f"--callgrind-out-file={work}/{tag}.out"]

    with Recd(work, work, "hotfile", "[capture]\nsample_rate = 48000\n", env, name="hot",
              wrapper=callgrind("recd")) as recd:
        control = recd.client(timeout=600)
        watcher = recd.client(timeout=600)
        watcher.call("subscribe", {"topics": ["state", "currentTime", "levels", "recording", "warning", "error",
                                              "segment", "retention"]})
        for _ in range(3):
            control.call("status")
        for fmt in ("wav", "flac"):
            record(recd, {"format": fmt, "sampleRate": 48000, "channels": 2, "bitDepth": 16, "name": f"hot-{fmt}",
                          "duration": 4}, timeout=600)
            control.call("status")
        control.call("recordings.list")
        for args in (["status"], ["ls"], ["--help"]):
            subprocess.run(callgrind(f"recctl-{args[0].strip('-')}") + [os.path.join(work, "recctl"), "--socket",
                           recd.socket] + args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True)
        watcher.close()
        control.close()

    def defined_twice(binary):
        names = subprocess.run(["nm", "--defined-only", "--format=posix", binary], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        seen, twice = set(), set()
        for line in names:
            name = line.split(" ", 1)[0]
            (twice if name in seen else seen).add(name)
        return twice

    ambiguous = defined_twice(os.path.join(work, "recd")) | defined_twice(os.path.join(work, "recctl"))
    ordered, listed = [], set()
    for profile in sorted(p for p in os.listdir(work) if p.endswith(".out")):
        binary = None
        for line in open(os.path.join(work, profile)):
            if line.startswith("ob="):
                binary = os.path.basename(line[3:].strip())
            elif line.startswith("fn=") and binary in ("recd", "recctl"):
                name = re.sub(r"'\d+$", "", line[3:].strip())  # callgrind's recursion depth suffix
                if name not in listed and name not in ambiguous:
                    listed.add(name)
                    ordered.append(name)
    with open(out, "w") as f:
        f.write("\n".join(ordered) + "\n")
    print(f"{out}: {len(ordered)} functions ({len(ambiguous)} ambiguous names left out)")
finally:
    shutil.rmtree(work, ignore_errors=True)
