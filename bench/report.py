"""Writes BENCHMARKS.md from the JSON files bench/run.sh's steps left in RESULTS.

usage: report.py RESULTS_DIR OUT.md"""

import json
import os
import platform
import re
import subprocess
import sys

results_dir, out = sys.argv[1:3]


def load(name):
    path = os.path.join(results_dir, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def env_file(name):
    values = {}
    with open(os.path.join(results_dir, name)) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            values[key] = value
    return values


def command_output(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"


capture = load("capture.json")
control = load("control.json")
fanout = load("fanout.json")
memory = load("memory.json")
start = load("start.json")
aac = load("aac.json")
profile = load("profile.json")
tree = env_file("tree.env")
default_tone = []
if os.path.exists(os.path.join(results_dir, "first_frame_default_tone.jsonl")):
    with open(os.path.join(results_dir, "first_frame_default_tone.jsonl")) as f:
        default_tone = [json.loads(line) for line in f if line.strip()]


# --- formatting -------------------------------------------------------------------------

def num(x, digits=2):
    if x is None:
        return "–"
    if abs(x) >= 100 and digits > 0:
        digits = 0 if abs(x) >= 1000 else 1
    return f"{x:,.{digits}f}".replace(",", " ") if abs(x) >= 10000 else f"{x:.{digits}f}"


def spread(s, digits=2, unit=""):
    """median (min–max)"""
    return f"{num(s['median'], digits)}{unit} ({num(s['min'], digits)}–{num(s['max'], digits)})"


def quartiles(s, digits=2, unit=""):
    """median (p25–p75)"""
    return f"{num(s['median'], digits)}{unit} (p25–p75 {num(s['p25'], digits)}–{num(s['p75'], digits)})"


def ratio(x, digits=2):
    return f"{x:.{digits}f}×"


def mib(kib):
    return kib / 1024


def yes(ok):
    return "**yes**" if ok else "**no**"


def pct(part, whole):
    return 100 * part / whole if whole else float("nan")


lines = []
w = lines.append


def clean_symbol(text):
    return re.split(r"\s{2,}", text.strip())[0]


def table(header, rows):
    w("| " + " | ".join(header) + " |")
    w("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        w("| " + " | ".join(str(c) for c in row) + " |")
    w("")


# --- figures the summary and the findings share -----------------------------------------

cases = {c["id"]: c for c in capture["cases"]} if capture else {}
targets = []  # (number, what, target, recd, peer, ratio, met)


def capture_row(number, case_id, what, limit):
    c = cases[case_id]
    r = c["recd_cpu_per_hour"]["median"] / c["peer_cpu_per_hour"]["median"]
    targets.append((number, what, f"≤ {limit}× {c['peer']}", spread(c["recd_cpu_per_hour"], 2, " s"),
                    f"{c['peer']} {spread(c['peer_cpu_per_hour'], 2, ' s')}",
                    f"{ratio(r)} (pairs {num(c['ratio_pairs']['min'])}–{num(c['ratio_pairs']['max'])})", r <= limit))
    return r


if capture:
    wav_ratio = capture_row("1a", "wav", "CPU s per recorded hour: WAV 48 kHz/16-bit stereo", 1.0)
    f16_ratio = capture_row("1b", "flac16k", "CPU s per recorded hour: 48 → 16 kHz + FLAC", 0.5)
    f48_ratio = capture_row("1c", "flac48k", "CPU s per recorded hour: FLAC 48 kHz", 0.5)

if aac:
    aac_ratio = aac["recd_cpu_per_hour"]["median"] / aac["ffmpeg_alsa_cpu_per_hour"]["median"]
    targets.append(("6", "CPU s per recorded hour: AAC 48 kHz stereo 128 kbit/s (.m4a)", "≤ 1.0× ffmpeg",
                    spread(aac["recd_cpu_per_hour"], 2, " s"), f"ffmpeg {spread(aac['ffmpeg_alsa_cpu_per_hour'], 2, ' s')}",
                    f"{ratio(aac_ratio)} (pairs {num(aac['ratio_pairs']['min'])}–{num(aac['ratio_pairs']['max'])})",
                    aac_ratio <= 1.0))

if control:
    r50 = control["recd_us"]["median"] / control["mpd_us"]["median"]
    targets.append(("2a", "`status` round trip, persistent connection, p50", "≤ MPD",
                    f"{num(control['recd_us']['median'], 1)} µs (p99 {num(control['recd_us']['p99'], 1)})",
                    f"MPD {num(control['mpd_us']['median'], 1)} µs (p99 {num(control['mpd_us']['p99'], 1)})",
                    f"{ratio(r50, 1)} (blocks {num(control['block_ratios']['min'], 1)}–{num(control['block_ratios']['max'], 1)})",
                    r50 <= 1.0))
    cold = control["cold_ms"]
    rcold = cold["recctl"]["median"] / cold["mpc"]["median"]
    targets.append(("2b", "cold `recctl status` (whole process)", "≤ 2× mpc",
                    quartiles(cold["recctl"], 1, " ms"), f"mpc {quartiles(cold['mpc'], 2, ' ms')}",
                    ratio(rcold, 1), rcold <= 2.0))

fan_main = fan_one = fan_one_tight = fan_main_tight = fan_perf = None
if fanout:
    for run in fanout["runs"]:
        if run.get("profiled") or run.get("perf"):
            fan_perf = run
        elif run["clients"] == 1 and run["interval"] == 0.05:
            fan_one = run
        elif run["clients"] == 1:
            fan_one_tight = run
        elif run["interval"] == 0.05:
            fan_main = run
        else:
            fan_main_tight = run
    if fan_main:
        lost = fan_main["statistics"]["framesLost"] + fan_main["statistics"]["xruns"]
        ok = fan_main["latency_ms"]["p99"] < 5 and lost == 0
        targets.append(("3", f"{fan_main['clients']} subscribers at 20 Hz: delivery latency p99; frames lost",
                        "p99 < 5 ms, 0 lost",
                        f"p99 {num(fan_main['latency_ms']['p99'], 1)} ms (p50 {num(fan_main['latency_ms']['p50'], 1)}); "
                        f"lost {fan_main['statistics']['framesLost']}, xruns {fan_main['statistics']['xruns']}",
                        f"1 subscriber: p99 {num(fan_one['latency_ms']['p99'], 1)} ms" if fan_one else "–",
                        ratio(fan_main["latency_ms"]["p99"] / fan_one["latency_ms"]["p99"], 1) if fan_one else "–", ok))

if memory:
    rec_max = mib(memory["max_rss_kib"])
    growth = mib(memory["last"]["rss_kib"] - memory["first"]["rss_kib"])
    targets.append(("4a", "RSS while recording (max VmRSS over the long run)", "< 20 MiB",
                    f"{num(rec_max, 1)} MiB (anonymous {num(mib(memory['recording_detail']['RssAnon']), 1)} MiB)"
                    if memory.get("recording_detail") else f"{num(rec_max, 1)} MiB",
                    f"idle {num(mib(memory['idle']['VmRSS']), 1)} MiB", "–", rec_max < 20))
    targets.append(("4b", f"RSS growth over {num(memory['hours'], 0)} recorded hours", "< 1 MiB",
                    f"{num(growth * 1024, 0)} KiB ({num(memory['first']['recorded_s'] / 3600, 2)} h → "
                    f"{num(memory['last']['recorded_s'] / 3600, 2)} h)", "–", "–", growth < 1))

if start:
    ff = start["recd"]["first_frame_ms"]
    fn = start["recd"]["first_notification_ms"]
    targets.append(("5", "start request → first frame (paced device); bound: → first currentTime > 0 notification",
                    "< 20 ms",
                    f"{quartiles(ff, 1, ' ms')}; bound {quartiles(fn, 1, ' ms')}",
                    f"plain ALSA client {quartiles(start['alsa']['first'], 1, ' ms')}",
                    f"recd − plain: {num(ff['median'] - start['alsa']['first']['median'], 1)} ms", fn["median"] < 20))


# --- the document ---------------------------------------------------------------------

cpu_model = "unknown"
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
debian = open("/etc/debian_version").read().strip() if os.path.exists("/etc/debian_version") else "?"
swift_version = command_output(["swift", "--version"]).splitlines()
swift_version = swift_version[0] if swift_version else "unknown"
mem_total = 0
with open("/proc/meminfo") as f:
    for line in f:
        if line.startswith("MemTotal:"):
            mem_total = int(line.split()[1])
hypervisor = "KVM guest" if "hypervisor" in open("/proc/cpuinfo").read() else "bare metal"


def version_of(argv):
    text = command_output(argv)
    line = text.splitlines()[0] if text else "unknown"
    match = re.search(r"\d+\.\d+(\.\d+)*", line)
    return match.group(0) if match else line


versions = {
    "arecord": version_of(["arecord", "--version"]),
    "sox": version_of(["sox", "--version"]),
    "MPD": version_of(["mpd", "--version"]),
    "mpc": command_output(["dpkg-query", "-W", "-f=${Version}", "mpc"]),
    "PulseAudio": open(os.path.join(results_dir, "pulseaudio.version")).read().strip().replace("pulseaudio ", "")
    if os.path.exists(os.path.join(results_dir, "pulseaudio.version")) else "?",
    "valgrind": version_of(["valgrind", "--version"]),
    "hyperfine": version_of(["hyperfine", "--version"]),
    "libasound": command_output(["dpkg-query", "-W", "-f=${Version}", "libasound2"]),
    "libsndfile": command_output(["dpkg-query", "-W", "-f=${Version}", "libsndfile1"]),
    "libFLAC": command_output(["dpkg-query", "-W", "-f=${Version}", "libflac12"]),
    "libsoxr": command_output(["dpkg-query", "-W", "-f=${Version}", "libsoxr0"]),
}

sections = []
if os.path.exists(os.path.join(results_dir, "sections.tsv")):
    with open(os.path.join(results_dir, "sections.tsv")) as f:
        sections = [line.rstrip("\n").split("\t") for line in f if line.strip()]

w("# recd benchmarks")
w("")
w(f"Written by `make bench` (`bench/run.sh`) on {tree.get('started', '?')}: tree `{tree.get('commit', '?')}`"
  + (f" with {tree['sources_modified']} uncommitted change(s) under Sources/" if tree.get("sources_modified", "0") != "0" else "")
  + f", recd {tree.get('recd_version', '?')} (release build). The whole run took "
  f"{int(tree.get('total', 0)) // 60} min {int(tree.get('total', 0)) % 60} s. Raw figures: `bench/results/`.")
w("")
w("The machine is shared and noisy (another engineer runs builds and tests on its 2 cores; the load "
  "average around each step is listed at the end). So every figure is a median with its spread, "
  "each peer is measured in the same run on the same input, interleaved with recd where it can be, "
  "and comparisons are ratios. Instruction counts from callgrind (last sections) do not depend on "
  "the load and back the explanations.")
w("")
w("## Summary")
w("")
w("Spread: median (min–max) unless marked p25–p75. *Ratio* is recd / peer, medians of the same run.")
w("")
table(["#", "what", "target", "recd", "peer", "ratio", "met"],
      [[t[0], t[1], t[2], t[3], t[4], t[5], yes(t[6])] for t in targets])

# Machine ---------------------------------------------------------------------------------
w("## Machine")
w("")
table(["", ""], [
    ["CPU", f"{cpu_model}, {os.cpu_count()} cores ({hypervisor})"],
    ["memory", f"{num(mem_total / 1024 / 1024, 1)} GiB"],
    ["kernel", platform.release()],
    ["Debian", debian],
    ["Swift", swift_version],
    ["peers and libraries", ", ".join(f"{k} {v}" for k, v in versions.items())],
    ["load average when the run started", tree.get("quiet_loadavg", "?")],
])

# How -------------------------------------------------------------------------------------
w("## How it is measured")
w("")
w("Everything runs from `bench/run.sh` in a temporary directory `$WORK`, on devices private to the run "
  "(`/work/shared/TESTING.md`); `$BIN` is `swift build -c release --show-bin-path`. "
  "`ALSA_CONFIG_PATH=/usr/share/alsa/alsa.conf:$WORK/alsa.conf` adds:")
w("")
w("```")
w(open(os.path.join(results_dir, "alsa.conf")).read().rstrip())
w("```")
w("")
w("- `input.raw`: 610 s of 48 kHz/16-bit stereo (`sox -n … synth 610 pinknoise sine 440 vol 0.5`: pink noise "
  "left, a sine right), so that FLAC and the resampler have real work. `silence.raw` is a sparse file of "
  "zeros longer than 24 h (no disk space, no end of file during the long run); `short.raw` is its first 10 s.")
w("- The paced device: `pulseaudio -n -F pa.conf --daemonize=no --exit-idle-time=-1 --system=false` with "
  "`module-native-protocol-unix` and `module-null-sink sink_name=benchsink rate=48000 channels=2`; "
  "`speaker-test -D pulse -c 2 -r 48000 -t pink -l 0 -b 40000 -p 10000` plays pink noise into the sink "
  "(levels change every 50 ms, so the `levels` topic really publishes at 20 Hz).")
w("- recd runs as `recd --user --config CONF --socket SOCK --recordings-dir DIR --device DEVICE`, one daemon "
  "per step, with these configuration files:")
w("  - capture cost, memory, profiles: `[capture] sample_rate = 48000` (the device runs at 48 kHz whatever "
  "the file's rate, so a 16 kHz file is converted by soxr in recd, not handed over at 16 kHz by ALSA's file plugin);")
w("  - control round trip: no file (defaults);")
w("  - fan-out: `[metering] levels_interval = 0.05`, `time_interval = 0.05` (both topics at 20 Hz), "
  "`[server] max_clients = 1100`; `ulimit -n` 8192;")
w("  - start latency: `[metering] time_interval = 0.005` (currentTime every 5 ms, for a close estimate).")
w("- recd's CPU is the daemon's: utime + stime from `/proc/PID/stat` before and after the recording "
  "(the process CPU-time clock, `clock_gettime` on the pid's CPU clock, agrees to the tick and is in `results/`). "
  "A recording is started with `start` {name, format, sampleRate, channels, bitDepth, quality, duration} over "
  "the socket by a client subscribed to `state`, which waits for `finished`. The peers' CPU is their "
  "rusage (`wait4`).")
w("")

# 1 ---------------------------------------------------------------------------------------
if capture:
    w(f"## 1. Capture cost: CPU seconds per recorded hour")
    w("")
    w(f"{capture['reps']} repetitions of each case, {capture['seconds']} s of audio each, recd and its peer "
      "alternating (recd first on even repetitions). CPU per recorded hour = CPU × 3600 / "
      f"{capture['seconds']}. *sys* is the kernel part (writes, recd's fsyncs).")
    w("")
    rows = []
    for c in capture["cases"]:
        rows.append([c["title"], spread(c["recd_cpu_per_hour"], 2, " s"), num(c["recd_sys_per_hour"]["median"]) + " s",
                     f"{c['peer']}: {spread(c['peer_cpu_per_hour'], 2, ' s')}", num(c["peer_sys_per_hour"]["median"]) + " s",
                     f"{ratio(c['recd_cpu_per_hour']['median'] / c['peer_cpu_per_hour']['median'])} "
                     f"({num(c['ratio_pairs']['min'])}–{num(c['ratio_pairs']['max'])})",
                     f"{num(c['recd_wall']['median'])} / {num(c['peer_wall']['median'])} s"])
    table(["case", "recd CPU/h", "of it sys", "peer CPU/h", "of it sys", "ratio (per-pair range)",
           f"wall per {capture['seconds']} s, recd / peer"], rows)
    w("Commands (OUT is a fresh file per run):")
    w("")
    for c in capture["cases"]:
        w(f"- {c['title']}: recd `start` {json.dumps(c['recd_params'])}; {c['peer']}: `{c['peer_command']}`")
    w("")
    checks = capture["checks"]
    w("Checks: every recd file has exactly the frames asked for "
      + ", ".join(f"({c['id']}: {c['recd_frames'][0]:,} = {c['expected_frames']:,})".replace(",", " ")
                  for c in capture["cases"])
      + f"; the device ran at {cases['flac16k']['device_rate']} Hz for the 16 kHz file (so soxr converted); "
      f"recd's WAV data is bit-exact with the input: {yes(checks['recd_wav_bit_exact'])} (arecord's: "
      f"{yes(checks['arecord_wav_bit_exact'])}). FLAC sizes, recd / sox: 16 kHz "
      f"{cases['flac16k']['sizes']['recd'] / 1e6:.2f} / {cases['flac16k']['sizes']['peer'] / 1e6:.2f} MB, 48 kHz "
      f"{cases['flac48k']['sizes']['recd'] / 1e6:.2f} / {cases['flac48k']['sizes']['peer'] / 1e6:.2f} MB: the same "
      "encoder at the same level (recd's `quality = high` is FLAC level 5; sox is given `-C 5`, because sox's own "
      "default is level 8). sox dithers when it reduces its 32-bit internal samples to 16 bits after `rate`; "
      "recd clips float to 16 bits without dither.")
    w("")
    if capture.get("flac_levels"):
        base = next(l for l in capture["flac_levels"] if l["level"] == 5)
        w("What FLAC's compression level costs, same libFLAC through sox, 48 kHz, median of 3 runs:")
        w("")
        table(["level", "CPU s per recorded hour", "vs level 5", "file size vs level 5"],
              [[l["level"], num(l["cpu_per_hour"]), ratio(l["cpu_per_hour"] / base["cpu_per_hour"]),
                f"{100 * (l['bytes'] / base['bytes'] - 1):+.1f} %"] for l in capture["flac_levels"]])

# 6 ---------------------------------------------------------------------------------------
if aac:
    w("## 6. AAC capture cost: CPU seconds per recorded hour")
    w("")
    w(f"{aac['reps']} repetitions, {aac['seconds']} s of audio each, recd and ffmpeg alternating, on the unpaced "
      f"`{aac['device']}` device (tree `{aac['tree']}`, {aac['date']}, load {' '.join(aac['loadavg'])}). Both encode "
      "with FFmpeg's native `aac` encoder (libavcodec); recd's figure includes capture, metering, the fragmented "
      "`.m4a.part` (a fragment per second of audio) and the rewrite with `moov` first when the recording ends. "
      "ffmpeg's own ALSA input is costly on this device; ffmpeg encoding the same samples from the raw file shows "
      "what the encoder alone costs.")
    w("")
    table(["", "CPU s per recorded hour", "of it sys", f"wall per {aac['seconds']} s"], [
        ["recd", spread(aac["recd_cpu_per_hour"], 2, " s"), num(aac["recd_sys_per_hour"]["median"]) + " s",
         num(aac["recd_wall"]["median"]) + " s"],
        ["ffmpeg, `-f alsa` (the peer)", spread(aac["ffmpeg_alsa_cpu_per_hour"], 2, " s"),
         num(aac["ffmpeg_alsa_sys_per_hour"]["median"]) + " s", num(aac["ffmpeg_alsa_wall"]["median"]) + " s"],
        ["ffmpeg from the raw file (encoder only)", spread(aac["ffmpeg_raw_cpu_per_hour"], 2, " s"), "", ""],
        ["ratio recd / ffmpeg `-f alsa`", f"{ratio(aac['recd_cpu_per_hour']['median'] / aac['ffmpeg_alsa_cpu_per_hour']['median'])} "
         f"(pairs {num(aac['ratio_pairs']['min'])}–{num(aac['ratio_pairs']['max'])})", "", ""],
    ])
    w(f"Commands: recd `start` {json.dumps(aac['recd_params'])}; peer `{aac['ffmpeg_alsa_command']}`; encoder only "
      f"`{aac['ffmpeg_raw_command']}`. Checks: durations by ffprobe, recd {aac['durations']['recd']} s, ffmpeg "
      f"{aac['durations']['ffmpeg_alsa']} s; sizes {aac['sizes']['recd'] / 1e6:.2f} / {aac['sizes']['ffmpeg_alsa'] / 1e6:.2f} MB; "
      f"recd's file's top-level boxes {' '.join(aac['recd_boxes'])}.")
    w("")

# 2 ---------------------------------------------------------------------------------------
if control:
    w("## 2. Control round trip")
    w("")
    w(f"`status` on one persistent connection, timed from before `send` to the end of the answer "
      f"(recd: one line, {control['response_bytes']['recd']} bytes idle; MPD: `status\\n` answered with "
      f"{control['response_bytes']['mpd']} bytes up to `OK\\n`), by the same Python client; "
      f"{control['calls']} calls each after 500 warm-up calls, in 10 alternating blocks. MPD: `mpd --no-daemon "
      "mpd.conf` with `bind_to_address \"$WORK/mpd/mpd.sock\"`, a null audio output, music and playlist "
      "directories in the work directory.")
    w("")
    table(["server", "p50", "p25–p75", "p99", "min", "max"],
          [[n, f"{num(s['median'], 1)} µs", f"{num(s['p25'], 1)}–{num(s['p75'], 1)} µs", f"{num(s['p99'], 1)} µs",
            f"{num(s['min'], 1)} µs", f"{num(s['max'], 1)} µs"]
           for n, s in (("recd", control["recd_us"]), ("MPD", control["mpd_us"]))])
    w(f"Ratio of the p50s {ratio(r50, 1)}; per block {num(control['block_ratios']['min'], 1)}–"
      f"{num(control['block_ratios']['max'], 1)}.")
    w("")
    w(f"Cold clients, whole processes: `hyperfine -N --warmup 20 --runs {control['cold_runs']}` over the three "
      "commands below (`recctl --version` starts the same binary without connecting: the start-up alone).")
    w("")
    rows = []
    for key, label in (("recctl", "recctl status"), ("mpc", "mpc status"), ("recctl_version", "recctl --version")):
        s = control["cold_ms"].get(key)
        if s:
            rows.append([f"`{control['cold_commands'][key]}`", f"{num(s['median'], 2)} ms",
                         f"{num(s['p25'], 2)}–{num(s['p75'], 2)} ms", f"{num(s['min'], 2)}–{num(s['max'], 2)} ms",
                         f"{num(s['user_ms'], 1)} / {num(s['system_ms'], 1)} ms"])
    table(["command", "median", "p25–p75", "min–max", "mean user / sys CPU"], rows)

# 3 ---------------------------------------------------------------------------------------
if fanout:
    w("## 3. Fan-out: subscribers while recording")
    w("")
    w("Each client connects, sends `subscribe` {topics: [currentTime, levels], interval} and reads; the clients "
      f"live in {fan_main['receiver_processes'] if fan_main else 2} Python processes (epoll, one `recv` per ready "
      "socket, the time of the `recv` taken as receipt time of every line in it). Then a control connection "
      f"starts a WAV recording on the paced device; after {fanout['warmup']} s of warm-up the window opens. "
      "Latency = receipt time − the notification's `timestamp` (when recd's hub published the value), both "
      "CLOCK_REALTIME on this machine; so it includes the clients' own scheduling (their CPU is listed: on "
      "2 cores they compete with recd). Frames lost and xruns come from `status.statistics` at the end of "
      "the window. Expected per client: 20 currentTime + 20 levels notifications per second.")
    w("")
    rows = []
    for run in fanout["runs"]:
        lat = run["latency_ms"]
        rows.append([run["clients"], run["interval"], run["seconds"], num(lat["p50"], 2), num(lat["p90"], 1),
                     num(lat["p99"], 1), num(lat["max"], 1), num(run["per_client_rate"]["median"], 1),
                     run["clients_closed"], num(run["daemon_cpu_percent"], 1), num(run["receiver_cpu_percent"], 1),
                     num(mib(run["daemon_rss_kib_max"]), 1),
                     f"{run['statistics']['framesLost']} / {run['statistics']['xruns']}",
                     "perf running" if run.get("profiled") or run.get("perf") else ""])
    table(["clients", "interval s", "window s", "p50 ms", "p90 ms", "p99 ms", "max ms", "notif./s per client",
           "disconnected", "recd CPU %", "clients' CPU %", "recd RSS MiB", "frames lost / xruns", ""], rows)
    w("CPU % is of one core, over the window (recd: `/proc/PID/stat` ticks and the CPU clock agree). "
      "The 0.04 s rows subscribe with an interval a little below the 50 ms publication period: see the "
      "findings for why that changes the latency so much.")
    w("")

# 4 ---------------------------------------------------------------------------------------
if memory:
    w("## 4. Memory")
    w("")
    w(f"One `start` {json.dumps(memory['params'])} on `benchlong` (unpaced): {memory['choice']}. "
      f"It took {num(memory['wall_seconds'], 0)} s of wall time and {num(memory['cpu_seconds'], 1)} s of recd CPU; "
      f"the file had {memory['frames']:,} frames ({memory['file_bytes'] / 1e9:.1f} GB) and was deleted afterwards. "
      f"VmRSS was sampled {memory['samples']} times (every 0.25 s, with a `status` call giving the recorded time).")
    w("")
    table(["moment", "recorded", "VmRSS", "notes"], [
        ["idle, after one `status`", "–", f"{num(mib(memory['idle']['VmRSS']), 1)} MiB",
         f"anonymous {num(mib(memory['idle']['RssAnon']), 1)} MiB, file-backed {num(mib(memory['idle']['RssFile']), 1)} MiB, "
         f"{memory['idle']['Threads']} threads"],
        ["first sample recording", f"{num(memory['first']['recorded_s'] / 3600, 2)} h", f"{num(mib(memory['first']['rss_kib']), 2)} MiB", ""],
        ["after 1 recorded hour", f"{num(memory['hour1']['recorded_s'] / 3600, 2)} h", f"{num(mib(memory['hour1']['rss_kib']), 2)} MiB",
         f"anonymous {num(mib(memory['recording_detail']['RssAnon']), 1)} MiB, file-backed "
         f"{num(mib(memory['recording_detail']['RssFile']), 1)} MiB, {memory['recording_detail']['Threads']} threads"
         if memory.get("recording_detail") else ""],
        ["last sample recording", f"{num(memory['last']['recorded_s'] / 3600, 2)} h", f"{num(mib(memory['last']['rss_kib']), 2)} MiB", ""],
        ["max while recording", "", f"{num(mib(memory['max_rss_kib']), 2)} MiB", f"min {num(mib(memory['min_rss_kib']), 2)} MiB"],
        ["after `finished`", "", f"{num(mib(memory['after']['VmRSS']), 1)} MiB", f"VmHWM {num(mib(memory['after']['VmHWM']), 1)} MiB"],
    ])
    if memory.get("recording_mappings"):
        idle_map = {m["mapping"]: m["rss_kib"] for m in memory["idle_mappings"]}
        w("Where the resident pages are (`/proc/PID/smaps`, largest mappings), idle and after 1 recorded hour:")
        w("")
        table(["mapping", "idle", "recording"],
              [[f"`{os.path.basename(m['mapping']) or m['mapping']}`",
                f"{num(mib(idle_map[m['mapping']]), 1)} MiB" if m["mapping"] in idle_map else "–",
                f"{num(mib(m['rss_kib']), 1)} MiB"] for m in memory["recording_mappings"]])
    if memory.get("eof"):
        w(f"Reads past the end of a file: {len(memory['eof'])} recordings of {memory['eof_seconds']} s in one fresh daemon "
          "from `benchshort`, whose 10 s infile ends at once; libasound's file plugin then reports `invalid frames 0` "
          "on every read, through whatever error handler the process installed (lines it leaves in recd's log, "
          "which is recd's stderr, are counted). The same work each time:")
        w("")
        rows = []
        for i, e in enumerate(memory["eof"]):
            rows.append([i + 1, f"{num(e['cpu_seconds'])} s", f"{e['messages_total']:,}".replace(",", " "),
                         f"{num(mib(e['rss_kib']), 1)} MiB"])
        table(["recording", "recd CPU", "libasound lines in the log so far", "VmRSS after"], rows)

# 5 ---------------------------------------------------------------------------------------
if start:
    w("## 5. Start latency")
    w("")
    w(f"{start['runs']} runs, alternating recd and a plain ALSA client, on the paced device. recd: a connection "
      "subscribed to `state` and `currentTime` (interval 0.01) sends `start` {format: wav, duration: 0.5}; "
      "the first `changed` with currentTime > 0 has timestamp T and value v, and T − v is when the file's "
      "first frame was captured had every frame been delivered at once; latency = T − v − the time the request "
      "was sent. The plain client (`bench/first_frame.c`, what arecord does: open, 48 kHz/S16_LE/stereo with "
      f"recd's 10 ms period and 500 ms buffer, `snd_pcm_start`, `snd_pcm_readi` of one period of "
      f"{start['alsa_period_frames']} frames) estimates the same way: time the read returned − frames/rate − "
      "time before `snd_pcm_open`. A negative value means PulseAudio handed over audio that was captured before "
      "the request (the monitor's buffer).")
    w("")
    rr = start["recd"]
    aa = start["alsa"]
    table(["", "median", "p25–p75", "min–max"], [
        ["recd: request → first frame", f"{num(rr['first_frame_ms']['median'], 1)} ms",
         f"{num(rr['first_frame_ms']['p25'], 1)}–{num(rr['first_frame_ms']['p75'], 1)} ms",
         f"{num(rr['first_frame_ms']['min'], 1)}–{num(rr['first_frame_ms']['max'], 1)} ms"],
        ["recd: request → `start` answer (open + configure + file + thread)", f"{num(rr['reply_ms']['median'], 1)} ms",
         f"{num(rr['reply_ms']['p25'], 1)}–{num(rr['reply_ms']['p75'], 1)} ms",
         f"{num(rr['reply_ms']['min'], 1)}–{num(rr['reply_ms']['max'], 1)} ms"],
        ["recd: request → first currentTime > 0 notification", f"{num(rr['first_notification_ms']['median'], 1)} ms",
         f"{num(rr['first_notification_ms']['p25'], 1)}–{num(rr['first_notification_ms']['p75'], 1)} ms",
         f"{num(rr['first_notification_ms']['min'], 1)}–{num(rr['first_notification_ms']['max'], 1)} ms"],
        ["plain ALSA: open + hw_params", f"{num(aa['open']['median'], 1)} ms",
         f"{num(aa['open']['p25'], 1)}–{num(aa['open']['p75'], 1)} ms", f"{num(aa['open']['min'], 1)}–{num(aa['open']['max'], 1)} ms"],
        ["plain ALSA: first read returned", f"{num(aa['read']['median'], 1)} ms",
         f"{num(aa['read']['p25'], 1)}–{num(aa['read']['p75'], 1)} ms", f"{num(aa['read']['min'], 1)}–{num(aa['read']['max'], 1)} ms"],
        ["plain ALSA: open → first frame", f"{num(aa['first']['median'], 1)} ms",
         f"{num(aa['first']['p25'], 1)}–{num(aa['first']['p75'], 1)} ms",
         f"{num(aa['first']['min'], 1)}–{num(aa['first']['max'], 1)} ms"],
    ])
    if default_tone:
        firsts = [d["first"] for d in default_tone]
        w(f"PulseAudio's own start-up depends on how the null sink renders. With speaker-test's default "
          f"buffer instead of `-b 40000 -p 10000`, the plain client's first frames came after "
          f"{', '.join(num(x, 0) for x in firsts)} ms ({len(firsts)} runs, the first with no capture stream before "
          "it): the sink renders in blocks as long as the latency its clients allow (up to 2 s for a null sink), and "
          "a new monitor stream gets data only at the next block. That is all PulseAudio's; recd cannot do "
          "better than the plain client on the same device. The low-latency tone is what the figures above use.")
        w("")

# Profiles --------------------------------------------------------------------------------
if profile:
    w("## Where the instructions go (callgrind)")
    w("")
    w("`valgrind --tool=callgrind` on stripped copies of the release binaries (valgrind 3.19 cannot read "
      "Swift 6's DWARF 5; symbols stay), with `bench/sigsuspend_shim.c` preloaded (valgrind 3.19 dies when "
      "libdispatch hands `sigsuspend` a mask in read-only memory). Capture: only the capture thread is "
      "counted (`--toggle-collect=*CaptureSessionC3run*`), one unpaced recording of "
      f"{profile['capture_seconds']} s per case; peers: whole processes on the same device, counted at two lengths "
      "and differenced so that their start-up cancels. `status`: every thread of recd while "
      f"{profile['calls']} requests are answered. recctl: one whole cold process. "
      "(`perf stat -e instructions` is not supported in this VM, so perf only samples by time; see fan-out.)")
    w("")
    peers = {p["case"]: p for p in profile.get("peers", [])}
    rows = []
    for c in profile["capture"]:
        p = peers.get(c["case"])
        rows.append([c["case"], f"{num(c['per_unit'] / 1e6, 2)} M",
                     f"{p['peer']} {num(p['per_unit'] / 1e6, 2)} M" if p else "–",
                     ratio(c["per_unit"] / p["per_unit"]) if p else "–"])
    table(["case", "recd capture thread, instructions per recorded second", "peer (whole process)", "ratio"], rows)
    for c in profile["capture"]:
        w(f"**{c['case']}**: capture thread {num(c['total_ir'] / 1e6, 1)} M instructions for "
          f"{profile['capture_seconds']} s of audio. Including callees:")
        w("")
        table(["function", "share"], [[k["label"], f"{num(pct(k['ir'], c['total_ir']), 1)} %"] for k in c["inclusive"]])
        w("Self cost, top functions (unnamed addresses are inside libraries without symbols):")
        w("")
        table(["function", "object", "share"],
              [[f"`{s['function'][:100]}`", s["object"], f"{num(pct(s['ir'], c['total_ir']), 1)} %"]
               for s in c["self"][:9] if 0.5 <= pct(s["ir"], c["total_ir"]) < 99.5])
    for key, title in (("status", "`status`, per call"), ("recctl", "cold `recctl status`, whole process")):
        e = profile.get(key)
        if not e:
            continue
        w(f"**{title}**: {num(e['per_unit'] / 1e3, 0)} k instructions"
          + (f" per call ({num(e['total_ir'] / 1e6, 0)} M for {profile['calls']} calls)" if key == "status" else "")
          + ". Including callees:")
        w("")
        table(["function", "share"], [[k["label"], f"{num(pct(k['ir'], e['total_ir']), 1)} %"] for k in e["inclusive"]])
        w("Self cost, top functions:")
        w("")
        table(["function", "object", "share"],
              [[f"`{s['function'][:100]}`", s["object"], f"{num(pct(s['ir'], e['total_ir']), 1)} %"]
               for s in e["self"][:11] if pct(s["ir"], e["total_ir"]) < 99.5])
    if fan_perf and fan_perf.get("perf"):
        w(f"**Fan-out** ({fan_perf['clients']} subscribers, {fan_perf['seconds']} s, `perf record -e cpu-clock -F 499 -g "
          "-p RECD`: time samples, kernel included). Self time, then time including callees:")
        w("")
        table(["self", "object", "symbol"],
              [[f"{num(x['percent'], 1)} %", x["object"], f"`{clean_symbol(x['symbol'])[:110]}`"]
               for x in fan_perf["perf"]["no-children"][:12]])
        interesting = [x for x in fan_perf["perf"]["children"]
                       if re.search(r"ClientConnection|TopicHub|writeAndFlush|flushNow|writeToSocket|SocketProtocol.write|"
                                    r"sys_write|JSONEncoder|Publication|SelectableEventLoop.run\(\)|epoll", x["symbol"])]
        table(["with callees", "object", "symbol"],
              [[f"{num(x['percent'], 1)} %", x["object"], f"`{clean_symbol(x['symbol'])[:110]}`"]
               for x in interesting[:14]])


# Findings ---------------------------------------------------------------------------------
w("## Why the misses, and what would fix them")
w("")
prof_cases = {c["case"]: c for c in profile["capture"]} if profile else {}


def key_share(entry, label_start):
    for k in entry["inclusive"]:
        if k["label"].startswith(label_start):
            return pct(k["ir"], entry["total_ir"])
    return float("nan")


findings = []
if capture and profile and "wav" in prof_cases:
    c = prof_cases["wav"]
    meter = key_share(c, "LevelAccumulator")
    per_sample = c["total_ir"] * meter / 100 / (profile["capture_seconds"] * 48000 * 2)
    wav = cases["wav"]
    findings.append(
        f"**WAV costs {ratio(wav_ratio, 1)} arecord's CPU.** The level meter, which the first run of this benchmark found "
        "at 87 % of the capture thread (27 instructions per sample: Int16 → Float → Double per sample, two clip tests), "
        "now sums the chunk in integer arithmetic (`LevelAccumulator.add(_:channels:)` for Int16, "
        f"`Sources/RecorderCore/LevelMeter.swift`) and is {num(meter, 1)} % of the capture thread's instructions, about "
        f"{num(per_sample, 0)} instructions per sample. arecord's whole process needs "
        f"{num(peers['wav']['per_unit'] / 1e6, 2)} M instructions per recorded second against recd's capture thread's "
        f"{num(c['per_unit'] / 1e6, 2)} M. The meter is still most of it: the loop walks each channel with a stride, "
        "so it does not vectorize. What it would take: one SIMD pass over interleaved frames (SIMD8<Int16> loads, "
        "widening multiply-add into per-lane Int64 sums, lane max for peaks), or metering only while a connection "
        "subscribes to `levels`; after that, libasound's copy out of the file plugin (`snd_pcm_areas_copy` → memcpy) "
        "and libsndfile's conversion buffer in `sf_writef_short` are what separate recd from arecord. "
        f"Nearly all of the gap is user time: recd {num(wav['recd_cpu_per_hour']['median'] - wav['recd_sys_per_hour']['median'])} s "
        f"against arecord's {num(wav['peer_cpu_per_hour']['median'] - wav['peer_sys_per_hour']['median'])} s per recorded hour "
        f"(kernel time {num(wav['recd_sys_per_hour']['median'])} s against {num(wav['peer_sys_per_hour']['median'])} s).")
if capture and profile and "flac48k" in prof_cases:
    c48 = prof_cases["flac48k"]
    c16 = prof_cases["flac16k"]
    flac48 = key_share(c48, "SoundFileWriter")
    meter48 = key_share(c48, "LevelAccumulator")
    sox48 = peers["flac48k"]["per_unit"]
    ladder = {l["level"]: l for l in capture.get("flac_levels", [])}
    ladder_text = ""
    if 1 in ladder and 5 in ladder:
        ladder_text = (f" With the same libFLAC, level 1 costs {ratio(ladder[1]['cpu_per_hour'] / ladder[5]['cpu_per_hour'])} "
                       f"of level 5's CPU for a {100 * (ladder[1]['bytes'] / ladder[5]['bytes'] - 1):+.1f} % larger file, level 0 "
                       f"{ratio(ladder[0]['cpu_per_hour'] / ladder[5]['cpu_per_hour'])} for "
                       f"{100 * (ladder[0]['bytes'] / ladder[5]['bytes'] - 1):+.1f} %; level 1 plus a free meter would put "
                       f"recd at ≈ {ratio((1 - meter48 / 100) * ladder[1]['cpu_per_hour'] / ladder[5]['cpu_per_hour'] * f48_ratio)} "
                       "of sox at level 5.")
    findings.append(
        f"**FLAC at 48 kHz: {ratio(f48_ratio)} sox, not 0.5×, because both are libFLAC at level 5.** The encoder "
        f"(`sf_writef_short` → libsndfile → `FLAC__stream_encoder_process_interleaved`) is {num(flac48, 1)} % of "
        f"recd's capture thread and the meter {num(meter48, 1)} %; recd needs {num(c48['per_unit'] / 1e6, 1)} M "
        f"instructions per recorded second, sox {num(sox48 / 1e6, 1)} M. Half of sox is out of reach at the same "
        f"level: even a free meter leaves recd at ≈ {ratio((1 - meter48 / 100) * c48['per_unit'] / sox48)} of sox "
        f"in instructions.{ladder_text} What it would take: map `quality = high` to a lower FLAC level (the "
        "target then compares different files), or drop the target for FLAC alone. Fixing the meter is still "
        f"worth its {num(meter48, 0)} %.")
    soxr = key_share(c16, "Resampler")
    flac16 = key_share(c16, "SoundFileWriter")
    consume_self = next((pct(s["ir"], c16["total_ir"]) for s in c16["self"]
                         if s["function"].startswith("CaptureSession.consume")), float("nan"))
    findings.append(
        f"**48 → 16 kHz + FLAC: {ratio(f16_ratio)} sox (target 0.5×).** In instructions recd is already at "
        f"{ratio(c16['per_unit'] / peers['flac16k']['per_unit'])} of sox ({num(c16['per_unit'] / 1e6, 1)} M vs "
        f"{num(peers['flac16k']['per_unit'] / 1e6, 1)} M per recorded second); the CPU-time ratio is higher because "
        f"the daemon's other threads and the kernel count too. Inside the capture thread: soxr {num(soxr, 1)} %, "
        f"FLAC through libsndfile {num(flac16, 1)} %, and {num(consume_self, 1)} % in `CaptureSession.consume` itself "
        "— the Int16 → Float loop and the Float level meter of `FormatConverter.convert`, inlined there. "
        "What would move it: feed soxr 16-bit integers and take 16-bit integers out (`soxr_io_spec(SOXR_INT16_I, "
        "SOXR_INT16_I)`), so that neither recd's conversion loop nor libsndfile's float → int conversion with "
        "clipping runs, then `sf_writef_short`; meter on the 16 kHz output (a third of the samples) with the "
        "integer meter above; consider `quality = high` → `SOXR_MQ` for speech-rate targets (HQ is 20-bit). "
        "The FLAC part stays as long as the level does.")
if control and profile and profile.get("status"):
    st = profile["status"]
    findings.append(
        f"**`status` takes {ratio(r50, 1)} MPD's time: {num(st['per_unit'] / 1e3, 0)} k instructions per request.** "
        f"Decoding the request line into a generic `JSONValue` tree with `JSONDecoder` is "
        f"{num(key_share(st, '  JSONDecoder'), 0)} % and encoding the answer with a fresh `JSONEncoder` "
        f"(`.sortedKeys`, through `OutgoingResponse`'s `any Encodable`) {num(key_share(st, '  JSONEncoder'), 0)} %; "
        f"building the `StatusResult` itself is {num(key_share(st, '  MethodExecutor'), 0)} %. The self costs are "
        "Swift runtime machinery: retain/release, generic metadata cache lookups, dynamic casts, malloc/free. "
        "MPD formats a dozen `key: value` lines with printf. Fix (`Sources/RecdServer/ClientConnection.swift`, "
        "`Sources/RecdProtocol`): scan the request line for its four allowed members with a small hand-written "
        "parser (ids and method names are short; only `params` needs real JSON, and `status` has none); keep one "
        "encoder per connection, or better, write `StatusResult` with a hand-written serializer — the hub already "
        "holds every topic's value pre-encoded (`Publication.members`), so `status` could be stitched together from "
        "cached fragments and re-encoded only when a topic changes. While recording, `status` also formats "
        "`startedAt` through `WireCoding.formatDate`, which builds a new ICU-backed `ISO8601DateFormatter` on every "
        "call (see memory).")
if control and profile and profile.get("recctl"):
    rc = profile["recctl"]
    cold = control["cold_ms"]
    findings.append(
        f"**Cold `recctl status` takes {ratio(rcold, 0)} mpc's time; the work is start-up.** `recctl --version` alone "
        f"takes {num(cold['recctl_version']['median'], 1)} ms of the {num(cold['recctl']['median'], 1)} ms. Of recctl's "
        f"{num(rc['total_ir'] / 1e6, 1)} M instructions, the dynamic loader's relocations are "
        f"{num(key_share(rc, 'dynamic loader'), 0)} % (≈ 20 shared libraries: the Swift runtime, Foundation, "
        f"FoundationEssentials, ICU, dispatch), ArgumentParser's `parseAsRoot` {num(key_share(rc, 'ParsableCommand'), 0)} % — "
        f"nearly all of it in `swift_conformsToProtocol`, which on first use scans every protocol conformance record "
        f"of every loaded image ({num(key_share(rc, '  swift_conformsToProtocol'), 0)} %) — and the request itself "
        f"(`Status.run`: connect, encode, decode, print) {num(key_share(rc, 'Status.run'), 0)} %. What would fix it "
        "(`Package.swift`, `Sources/recctl`): link the Swift runtime statically (`-static-stdlib`; a one-off "
        "hand test here: a Foundation hello-world starts in 1.3 ms static against 5.5 ms dynamic, and a "
        "`--static-swift-stdlib` recctl ran `status` about 30 % faster), import FoundationEssentials instead of "
        "Foundation so ICU and its conformances are not loaded, and keep ArgumentParser off the hot path (e.g. "
        "handle a bare `recctl status` before building the command tree, or avoid the `as?` protocol casts that "
        "trigger the conformance scan).")
if fanout and fan_main:
    per_notification = (fan_main["daemon_cpu_percent"] / 100) / max(1e-9, fan_main["notifications"] / fan_main["seconds"]) * 1e6
    expected = 40
    text = (
        f"**Fan-out: p99 {num(fan_main['latency_ms']['p99'], 0)} ms with {fan_main['clients']} subscribers — two causes.** ")
    if fan_one and fan_one_tight:
        text += (
            f"(1) The per-connection throttle: the first run of this benchmark found it holding values up to a whole "
            "interval when the interval equals the publication period (it compared against the previous *send*, which "
            "lags the previous publication). It now allows 10 % slack and sends a held value 0.9 interval after the "
            f"last one: 1 client at interval 0.05 sees p50 {num(fan_one['latency_ms']['p50'], 1)} ms and p99 "
            f"{num(fan_one['latency_ms']['p99'], 1)} ms, at 0.04 p50 {num(fan_one_tight['latency_ms']['p50'], 2)} ms and "
            f"p99 {num(fan_one_tight['latency_ms']['p99'], 2)} ms. ")
    if fan_main_tight:
        text += (
            f"(2) Load: without the throttle effect (interval 0.04) {fan_main_tight['clients']} subscribers still see "
            f"p50 {num(fan_main_tight['latency_ms']['p50'], 1)} ms and p99 {num(fan_main_tight['latency_ms']['p99'], 1)} ms. "
            f"Part of that is the measuring clients, which needed {num(fan_main_tight['receiver_cpu_percent'], 0)} % of a "
            f"core on a 2-core machine shared with recd ({num(fan_main_tight['daemon_cpu_percent'], 0)} %) and with "
            "another engineer's jobs; the rest is recd's cost per notification. ")
    else:
        text += "(2) Load. "
    text += (
        f"At interval 0.05 recd used {num(fan_main['daemon_cpu_percent'], 0)} % of a core for "
        f"{num(fan_main['notifications'] / fan_main['seconds'], 0)} notifications/s delivered, ≈ {num(per_notification, 1)} µs "
        f"each, and delivered {num(fan_main['per_client_rate']['median'], 1)} per client per second of the "
        f"{expected} published (the throttle coalesces what lags). ")
    if fan_perf and fan_perf.get("perf"):
        def share(entries, pattern):
            """The largest share of a matching symbol, as text; perf report lists only those over 1.5 %."""
            found = [x["percent"] for x in entries if re.search(pattern, clean_symbol(x["symbol"]))]
            return f"{num(max(found), 0)} %" if found else "under 1.5 %"

        def self_share(pattern):
            found = [x["percent"] for x in selfs if re.search(pattern, clean_symbol(x["symbol"]))]
            return max(found) if found else 0.0

        selfs = fan_perf["perf"]["no-children"]
        child = fan_perf["perf"]["children"]
        rr_share = sum(self_share(p) for p in (r"^swift_retain$", r"^swift_release$", r"^swift_retain_n$"))
        deliver_share = share(child, r"^(closure #1 in )?ClientConnection\.receive\(_:\)")
        flush_share = share(child, r"ClientConnection\.flush\(_:of:\)")
        write_share = share(child, r"writeAndFlush")
        text += (
            f"perf (with {fan_perf['clients']} subscribers) puts {deliver_share} of recd's time under "
            f"`ClientConnection.receive(_:)` → `deliver(_:)` (sent at once), {flush_share} under "
            "`ClientConnection.flush(_:of:)` (sent late by the task `deliver` schedules when the throttle holds a "
            f"value back: cause (1)), and {write_share} in `writeAndFlush` (one `write(2)` per "
            f"notification per client); swift_retain/release alone are {num(rr_share, 0)} % (self). `deliver` copies "
            "each `Subscription` out of the dictionary, mutates its four dictionaries (copy-on-write duplicates them, "
            "hence malloc/free) and writes it back; the hub schedules one `eventLoop.execute` closure per connection "
            "per publication (1000 × 40 a second). ")
    text += (
        "Fix (`Sources/RecdServer/ClientConnection.swift`, `TopicHub.swift`): make `Subscription` a final class or "
        "mutate it in place; hand each event loop one task per publication with its connections' list instead of "
        "one closure per connection; coalesce what a tick publishes (currentTime and levels arrive together) into "
        "one buffer and one `writeAndFlush` per connection; pre-render the notification bytes once per "
        "subscription id shape instead of concatenating Strings per client. "
        f"No frame was lost: framesLost {fan_main['statistics']['framesLost']}, xruns {fan_main['statistics']['xruns']} "
        "(the capture thread does not wait for clients).")
    findings.append(text)
if memory:
    idle_map = {m["mapping"]: m["rss_kib"] for m in memory["idle_mappings"]}
    rec_map = {m["mapping"]: m["rss_kib"] for m in memory.get("recording_mappings") or []}
    icu = [k for k in rec_map if "ICU" in k]
    icu_text = ""
    if icu:
        icu_text = (f" `{os.path.basename(icu[0])}` grows from {num(mib(idle_map.get(icu[0], 0)), 1)} to "
                    f"{num(mib(rec_map[icu[0]]), 1)} MiB once recording: `WireCoding.formatDate` "
                    "(`Sources/RecdProtocol/JSONRPC.swift`) creates an `ISO8601DateFormatter` (ICU calendar and "
                    "formatter) for every encoded date, and every `recording` value carries `startedAt`.")
    detail = memory.get("recording_detail") or {}
    findings.append(
        f"**RSS {num(mib(memory['max_rss_kib']), 1)} MiB while recording (target 20): it is code, not data.** Only "
        f"{num(mib(detail.get('RssAnon', 0)), 1)} MiB is anonymous memory; {num(mib(detail.get('RssFile', 0)), 1)} MiB "
        "are file-backed pages of the binary and the shared libraries (table in section 4: recd itself, "
        f"libswiftCore, Foundation, FoundationEssentials, ICU, libstdc++).{icu_text} Growth over the long run is "
        f"{num(memory['last']['rss_kib'] - memory['first']['rss_kib'], 0)} KiB, within its target. What would get "
        "under 20 MiB: FoundationEssentials instead of Foundation in recd (no ICU, no CoreFoundation), formatting "
        "RFC 3339 by hand (as `StandardErrorLogHandler` nearly does — though it uses `String(format:)`), and a "
        "statically linked, dead-stripped binary (a one-off `--static-swift-stdlib` build measured 34 MiB instead of "
        "39 MiB recording, not enough alone).")
if memory and memory.get("eof"):
    e = memory["eof"]
    growth = e[-1]["cpu_seconds"] / e[0]["cpu_seconds"]
    if growth > 1.5:
        findings.append(
            f"**A bug found on the way: every libasound message makes the next one slower, forever.** The same "
            f"{memory['eof_seconds']} s recording past the end of a file costs {', '.join(num(x['cpu_seconds']) + ' s' for x in e)} "
            f"of CPU in successive runs of one daemon, and VmRSS climbs {num(mib(e[0]['rss_kib']), 1)} → "
            f"{num(mib(e[-1]['rss_kib']), 1)} MiB. perf shows the time in an ever deeper chain of Swift reabstraction "
            "thunks of type `(String, Int32, String) -> ()` — `ALSALibraryMessages.Handler`. `recdALSAMessage` "
            "(`Sources/ALSA/CapturePCM.swift`) reads the handler with `ALSALibraryMessages.handler.withLock({ $0 })` on a "
            "`Mutex<Handler?>`: passing the stored closure `inout` through the generic `withLock` re-abstracts it and "
            "writes it back wrapped in two more thunks on every call (reproduced in a 15-line program: 5000 reads take "
            "0.4 s, the next 5000 1.3 s, then 2.6 s, 4.2 s). After N messages each message costs O(N) and the chain "
            "holds O(N) heap boxes; a device that keeps complaining would eventually overflow the capture thread's "
            "stack. Fix: keep the closure in a `final class HandlerBox: Sendable { let call: Handler }` inside "
            "`Mutex<HandlerBox?>` (same program: constant, under 0.1 µs per call) — a class reference is not "
            "re-abstracted; worth a Swift bug report too. Note for this benchmark: this is why the 24 h run reads a "
            "sparse file of zeros long enough never to reach its end.")
    else:
        findings.append(
            f"**Reads past the end of a file cost the same every time**: three identical {memory['eof_seconds']} s "
            "recordings from `benchshort`, whose file plugin complains on every read past the end of its 10 s "
            f"infile, cost {', '.join(num(x['cpu_seconds']) + ' s' for x in e)} of recd CPU "
            f"({e[-1]['messages_total']} libasound lines in recd's log). This check stays in the benchmark because an "
            "earlier recd "
            "routed them through a Swift closure kept in a `Mutex<Handler?>`: reading it with `withLock({ $0 })` "
            "re-abstracted the closure and stored it back wrapped in two more thunks on every call, so the n-th "
            "message cost O(n) and a flood of them (one per read here) slowed capture down quadratically and grew "
            "the heap and the stack without bound.")
if start and start["recd"]["first_frame_ms"]["median"] >= 20:
    findings.append(
        f"**Start latency {num(start['recd']['first_frame_ms']['median'], 1)} ms.** The plain ALSA client on the "
        f"same device needs {num(start['alsa']['first']['median'], 1)} ms; the difference is recd's part "
        "(request parsing, opening and configuring the PCM, creating the file, starting the capture thread).")
elif start:
    rr = start["recd"]
    findings.append(
        f"**Start latency is within target.** By the estimate asked for (T − v − request time) recd's first frame is "
        f"at {num(rr['first_frame_ms']['median'], 1)} ms (p25–p75 {num(rr['first_frame_ms']['p25'], 1)}–"
        f"{num(rr['first_frame_ms']['p75'], 1)}), the plain ALSA client's at {num(start['alsa']['first']['median'], 1)} ms. "
        "Values at or below zero are real: PulseAudio's monitor source hands a new stream audio it already holds, "
        "captured a few milliseconds before the request. The bound that cannot be negative — the request until the "
        f"first currentTime > 0 notification, i.e. audio in recd's file — is {num(rr['first_notification_ms']['median'], 1)} ms "
        f"(p25–p75 {num(rr['first_notification_ms']['p25'], 1)}–{num(rr['first_notification_ms']['p75'], 1)}), and it "
        "includes up to one 5 ms publication tick. recd's `start` answer (open and configure the pulse PCM, create "
        f"the file, start the thread) takes {num(rr['reply_ms']['median'], 1)} ms against "
        f"{num(start['alsa']['open']['median'], 1)} ms for the plain client's open + hw_params: recd adds a few "
        "milliseconds at most. Whether the target holds depends on PulseAudio: "
        "with a sink that renders in long blocks (speaker-test's default buffer) the first frame comes up to a "
        "second later for any client (section 5).")
for i, text in enumerate(findings, 1):
    w(f"{i}. {text}")
    w("")

# Timings ---------------------------------------------------------------------------------
if sections:
    w("## Run log")
    w("")
    table(["step", "wall s", "load average before", "after"], [[s[0], s[1], s[2], s[3]] for s in sections])
w("Reproduce: `make bench` (installs the Makefile's BENCH_PACKAGES, builds release binaries and runs "
  "`bench/run.sh`). Knobs such as `BENCH_CAPTURE_REPS` or `BENCH_MEMORY_HOURS` are listed at the top of "
  "`bench/run.sh`.")

document = "\n".join(lines).rstrip() + "\n"
# Paths of this run's temporary directory and build, as the text names them.
document = re.sub(r"/tmp/recd-bench\.[A-Za-z0-9]+", "$WORK", document)
if tree.get("bindir"):
    document = document.replace(tree["bindir"], "$BIN")
with open(out, "w") as f:
    f.write(document)
print(f"wrote {out}")
