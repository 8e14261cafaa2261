"""The machine a benchmark run measures on: CPU, memory, kernel, Debian, Swift, and the versions
of the peers and libraries. Recorded when the run starts, so that the report describes the run's
machine, not the one it is rendered on.

usage: machine.py OUT.json"""

import json
import os
import platform
import re
import subprocess
import sys


def command_output(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"


def version_of(argv):
    text = command_output(argv)
    line = text.splitlines()[0] if text else "unknown"
    match = re.search(r"\d+\.\d+(\.\d+)*", line)
    return match.group(0) if match else line


def package_version(name):
    return command_output(["dpkg-query", "-W", "-f=${Version}", name])


cpuinfo = open("/proc/cpuinfo").read()
model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
memory_kib = int(re.search(r"^MemTotal:\s*(\d+)", open("/proc/meminfo").read(), re.M).group(1))
swift = command_output(["swift", "--version"]).splitlines()
machine = {
    "cpu": f"{model.group(1).strip() if model else 'unknown'}, {os.cpu_count()} cores "
           f"({'KVM guest' if 'hypervisor' in cpuinfo else 'bare metal'})",
    "memory": f"{memory_kib / 1024 / 1024:.1f} GiB",
    "kernel": platform.release(),
    "debian": open("/etc/debian_version").read().strip() if os.path.exists("/etc/debian_version") else "?",
    "swift": swift[0] if swift else "unknown",
    "versions": {
        "arecord": version_of(["arecord", "--version"]),
        "sox": version_of(["sox", "--version"]),
        "ffmpeg": version_of(["ffmpeg", "-version"]),
        "MPD": version_of(["mpd", "--version"]),
        "mpc": package_version("mpc"),
        "PulseAudio": version_of(["pulseaudio", "--version"]),
        "valgrind": version_of(["valgrind", "--version"]),
        "hyperfine": version_of(["hyperfine", "--version"]),
        "libasound": package_version("libasound2"),
        "libsndfile": package_version("libsndfile1"),
        "libFLAC": package_version("libflac12"),
        "libsoxr": package_version("libsoxr0"),
    },
}
with open(sys.argv[1], "w") as f:
    json.dump(machine, f, indent=1)
