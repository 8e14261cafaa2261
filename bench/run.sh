#!/usr/bin/env bash
# make bench: measures recd against arecord, sox and MPD on this machine. Writes the run's
# report (tables only) and raw figures into one directory, by default bench/out/RUN (ignored by
# git; bench/out/latest points at the last one): no tracked file changes. `make bench-publish`
# puts a run's tables into BENCHMARKS.md on purpose. No sound card and no root needed: every
# device and server is private to the run, in a temporary directory.
#
#   bash bench/run.sh BINDIR        (BINDIR holds release builds of recd and recctl)
#
# Devices (no sound card needed, see /work/shared/TESTING.md):
#   benchfile   ALSA `file` PCM over `null`: unpaced, bit-exact, reads a generated 610 s signal
#   benchlong   the same over a sparse file of zeros longer than 24 h (for the 24 h recording)
#   benchshort  the same over a 10 s file (reads past its end make libasound complain)
#   benchpaced  ALSA `pulse` PCM on a private PulseAudio null sink's monitor, real-time paced,
#               with pink noise played into the sink by speaker-test
#
# Knobs (environment): BENCH_CAPTURE_REPS (5), BENCH_CAPTURE_SECONDS (600), BENCH_CALLS (5000),
# BENCH_COLD_RUNS (200), BENCH_FANOUT_CLIENTS (1000), BENCH_FANOUT_SECONDS (30),
# BENCH_AAC_REPS (3), BENCH_AAC_SECONDS (120), BENCH_MEMORY_HOURS (24), BENCH_START_RUNS (15), BENCH_PROFILE (1: run callgrind),
# BENCH_KEEP (1: keep the work directory), BENCH_OUT (the run's directory: report.md and results/),
# BENCH_LISTEN_SECONDS (300), BENCH_LISTEN_RUNS (10), BENCH_LISTEN_SPECTRUM (1: a client follows the spectrum meanwhile),
# BENCH_STEPS (which steps, of: capture aac control memory start listening tap trigger fanout web sdcard replug rtsp sources pictures profile; default all).
# BENCH_PICTURES_REPS (3): runs per file in the pictures step.
# BENCH_SOURCES_SECONDS (60): each case's window in the sources step (one recd of 1, 2 and 4 sources; 2 and 4 recds of one).
# BENCH_RTSP_SECONDS (60): each case's window in the RTSP step (12 cases: recd + recd-rtsp and VLC, L16 and Opus, 0, 1 and 8 players);
# BENCH_RTSP_CODECS ("l16 opus") and BENCH_RTSP_CLIENTS ("0 1 8") narrow it.
# BENCH_REPLUG_ROUNDS (20): replugs per mode in the replug step (it runs the end-to-end test
# binary, RECD_TEST_XCTEST, against the release binaries).
# BENCH_TAP_SECONDS (120): each window of the taps step.
# BENCH_TRIGGER_SECONDS (120): the CPU window of the sound-activated step (trigger); BENCH_TRIGGER_BURSTS (20);
# BENCH_TRIGGER_PERIOD (0.01): recd's [capture] period_time in that step.
# BENCH_SDCARD_SECONDS (120): each case's window in the SD-card step (10 cases; root puts the
# recordings on an ext4 loop device of the step's own, else the disk's counters are shared).
set -euo pipefail

bin=$(cd "${1:?usage: run.sh BINDIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
run_id=$(date -u +%Y%m%dT%H%M%SZ)-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
out=${BENCH_OUT:-$root/bench/out/$run_id}
steps=" ${BENCH_STEPS:-capture aac control memory start listening tap trigger fanout web sdcard replug rtsp sources pictures profile} "
step() { [[ $steps == *" $1 "* ]]; }
capture_reps=${BENCH_CAPTURE_REPS:-5}
capture_seconds=${BENCH_CAPTURE_SECONDS:-600}
calls=${BENCH_CALLS:-5000}
cold_runs=${BENCH_COLD_RUNS:-200}
fanout_clients=${BENCH_FANOUT_CLIENTS:-1000}
fanout_seconds=${BENCH_FANOUT_SECONDS:-30}
memory_hours=${BENCH_MEMORY_HOURS:-24}
aac_reps=${BENCH_AAC_REPS:-3}
aac_seconds=${BENCH_AAC_SECONDS:-120}
start_runs=${BENCH_START_RUNS:-15}
listen_seconds=${BENCH_LISTEN_SECONDS:-300}
listen_runs=${BENCH_LISTEN_RUNS:-10}
tap_seconds=${BENCH_TAP_SECONDS:-120}
web_seconds=${BENCH_WEB_SECONDS:-120}
trigger_seconds=${BENCH_TRIGGER_SECONDS:-120}
sdcard_seconds=${BENCH_SDCARD_SECONDS:-120}
profile=${BENCH_PROFILE:-1}

for tool in python3 sox pacat ffmpeg ffprobe arecord speaker-test pulseaudio mpd mpc hyperfine gcc valgrind perf cvlc setpriv; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing (make deps-bench)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/recd-bench.XXXXXX)
results=$out/results
if [ -e "$results" ]; then echo "run.sh: $results exists already; choose another BENCH_OUT" >&2; exit 1; fi
mkdir -p "$results"
out=$(cd "$out" && pwd)
results=$out/results
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ "${BENCH_KEEP:-0}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
started=$(date +%s)
section() {  # section NAME COMMAND...: runs a step, records its wall time and the load around it
    local name=$1 t0 load0
    shift
    say "$name"
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    t0=$(date +%s%N)
    "$@"
    printf '%s\t%d\t%s\t%s\n' "$name" $(( ($(date +%s%N) - t0) / 1000000000 )) "$load0" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$results/sections.tsv"
}

# What was measured: the tree and the binaries.
{
    echo "commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "sources_modified=$(git -C "$root" status --porcelain -- Sources Package.swift 2>/dev/null | wc -l)"
    echo "recd_version=$("$bin/recd" --version)"
    echo "bindir=$bin"
    echo "workdir=$work"
    echo "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "quiet_loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "steps=$(echo $steps)"
} >"$results/tree.env"
python3 "$here/machine.py" "$results/machine.json"

say "Inputs in $work"
# 610 s of 48 kHz/16-bit stereo: pink noise left, a 440 Hz sine right (FLAC sees real work).
sox -n -r 48000 -c 2 -b 16 -e signed-integer -t raw "$work/input.raw" synth 610 pinknoise sine 440 vol 0.5
head -c $((10 * 48000 * 4)) "$work/input.raw" >"$work/short.raw"
# Zeros for the long recording: sparse, so it takes no disk and is read at memory speed.
truncate -s $(( (memory_hours * 3600 + 600) * 48000 * 4 )) "$work/silence.raw"
ls -ls "$work"/*.raw

cat >"$work/alsa.conf" <<EOF
pcm.benchfile  { type file  slave.pcm "null"  file "/dev/null"  infile "$work/input.raw"  format "raw" }
pcm.benchlong  { type file  slave.pcm "null"  file "/dev/null"  infile "$work/silence.raw"  format "raw" }
pcm.benchshort { type file  slave.pcm "null"  file "/dev/null"  infile "$work/short.raw"  format "raw" }
pcm.benchpaced { type pulse  server "unix:$work/pulse/native"  device "benchsink.monitor" }
pcm.benchsource { @args [ SINK ]  @args.SINK { type string }  type pulse  server "unix:$work/pulse/native"  device \$SINK }
EOF
cp "$work/alsa.conf" "$results/alsa.conf"
export ALSA_CONFIG_PATH=/usr/share/alsa/alsa.conf:$work/alsa.conf
export PULSE_SERVER=unix:$work/pulse/native

gcc -O2 -Wall -o "$work/first_frame" "$here/first_frame.c" -lasound
gcc -O2 -Wall -o "$work/fanout_receiver" "$here/fanout_receiver.c"
gcc -O2 -Wall -shared -fPIC -o "$work/sigsuspend_shim.so" "$here/sigsuspend_shim.c"

# 1000 clients need 1000 descriptors in recd and in the client processes.
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 8192 ]; then ulimit -n 8192; fi

cd "$here"
step capture && section "1. Capture cost ($capture_reps x $capture_seconds s per case)" \
    python3 capture_cost.py "$bin" "$work" benchfile "$work/input.raw" "$capture_reps" "$capture_seconds" \
    "$results/capture.json"

step aac && section "6. AAC capture cost ($aac_reps x $aac_seconds s)" \
    python3 aac_cost.py "$bin" "$work" benchfile "$work/input.raw" "$aac_reps" "$aac_seconds" "$results/aac.json"

step control && section "2. Control round trip ($calls status calls; $cold_runs cold runs)" \
    python3 control_rtt.py "$bin" "$work" benchfile "$calls" "$cold_runs" "$results/control.json"

step memory && section "4. Memory ($memory_hours h of audio from the unpaced device)" \
    python3 memory.py "$bin" "$work" benchlong benchshort "$memory_hours" 900 3 "$results/memory.json"

if step start || step listening || step tap || step trigger || step fanout || step web || step rtsp || step sources; then
say "A private PulseAudio server with a null sink"
mkdir -p "$work/pulse"
cat >"$work/pulse/pa.conf" <<EOF
load-module module-native-protocol-unix auth-anonymous=1 socket=$work/pulse/native
load-module module-null-sink sink_name=benchsink rate=48000 channels=2
EOF
HOME=$work/pulse XDG_RUNTIME_DIR=$work/pulse pulseaudio -n -F "$work/pulse/pa.conf" --daemonize=no \
    --exit-idle-time=-1 --system=false --log-target=file:"$work/pulse/log" &
pids+=($!)
for _ in $(seq 200); do [ -S "$work/pulse/native" ] && break; sleep 0.05; done
[ -S "$work/pulse/native" ] || { echo "PulseAudio did not start; see $work/pulse/log" >&2; exit 1; }
pulseaudio --version >"$results/pulseaudio.version"

tone() {  # tone [speaker-test options]: (re)starts the pink noise played into the sink
    if [ -n "${tone_pid:-}" ]; then kill "$tone_pid"; wait "$tone_pid" 2>/dev/null || true; fi
    speaker-test -D pulse -c 2 -r 48000 -t pink -l 0 "$@" >/dev/null 2>&1 &
    tone_pid=$!
    pids+=("$tone_pid")
    sleep 1
}

# speaker-test's own default buffer makes the null sink render in blocks of up to 2 s, and a
# new capture stream then waits for the next block: PulseAudio's start-up, not the client's.
tone
step start && section "5a. PulseAudio's first frame with speaker-test's default buffer (plain ALSA client)" \
    bash -c "'$work/first_frame' benchpaced 6 10000 500000 >'$results/first_frame_default_tone.jsonl'"
# A 40 ms playback buffer keeps the sink rendering every 10 ms: what a live desktop does.
tone -b 40000 -p 10000
step start && section "5. Start latency ($start_runs runs each)" \
    python3 start_latency.py "$bin" "$work" benchpaced "$work/first_frame" "$start_runs" "$results/start.json"

step listening && section "7. Listening: CPU against arecord ($listen_seconds s), RSS, start latency ($listen_runs runs)" \
    python3 listening.py "$bin" "$work" benchpaced "$listen_seconds" "$listen_runs" "$results/listening.json"

step tap && section "8. Taps: latency, 20 taps while recording, against arecord | sox ($tap_seconds s)" \
    python3 tap.py "$bin" "$work" benchpaced "$tap_seconds" "$results/tap.json"

if step trigger; then
    # The step plays its own signal (quiet noise, then tone bursts, through pacat with a 10 ms
    # buffer): the pink noise would be above any threshold.
    kill "$tone_pid"; wait "$tone_pid" 2>/dev/null || true; tone_pid=
    section "9. Sound-activated recording: CPU armed against sox VOX and arecord ($trigger_seconds s), detection latency" \
        python3 trigger.py "$bin" "$work" benchpaced "$trigger_seconds" "$results/trigger.json"
    tone -b 40000 -p 10000
fi

step fanout && section "3. Fan-out ($fanout_clients subscribers, $fanout_seconds s)" \
    python3 fanout.py "$bin" "$work" benchpaced \
    "1:10:0.05,1:10:0.04,$fanout_clients:$fanout_seconds:0.05,$fanout_clients:$fanout_seconds:0.04,$fanout_clients:$fanout_seconds:0.05:c,$fanout_clients:10:0.05:perf" \
    2 "$results/fanout.json" "$work/fanout_receiver"
fi

# Debian's python3: Debian's Selenium drives Debian's Chromium.
step web && section "10. The web page: recd + recd-web CPU with no page and with one ($web_seconds s each)" \
    /usr/bin/python3 web.py "$bin" "$work" benchpaced "$web_seconds" "$results/web.json"

# Its own PulseAudio server (module-sine, pink noise, a 20 ms parec reader) and its own
# filesystem: bytes and fsyncs per recorded hour, per format and sync_interval, and armed.
step sdcard && section "11. What a station writes to its SD card ($sdcard_seconds s per case)" \
    python3 sdcard.py "$bin" --seconds "$sdcard_seconds" --out "$results/sdcard.json"

# A USB microphone replugged: its card followed by inotify (a port id) against today's attempts on
# a timer (a sound server's PCM), on SoundCardFixture's sysfs tree and paced PulseAudio servers.
step replug && section "12. Replug: the device open again after a USB microphone comes back (${BENCH_REPLUG_ROUNDS:-20} replugs per mode)" \
    bash -c 'RECD_TEST_BINARIES="$1" RECD_REPLUG_ROUNDS="$2" "$3" --testing-library swift-testing --filter replugLatency \
               | grep "^replug " | tee "$4"' replug "$bin" "${BENCH_REPLUG_ROUNDS:-20}" "$RECD_TEST_XCTEST" "$results/replug.txt"

# The live input as RTSP: recd + recd-rtsp against VLC's RTSP server on the same device.
step rtsp && section "13. RTSP: serving the input with 0, 1 and 8 players, L16 and Opus, against VLC (${BENCH_RTSP_SECONDS:-60} s per case)" \
    python3 rtsp.py "$bin" "$work" benchpaced "${BENCH_RTSP_SECONDS:-60}" "$results/rtsp.json"

# Several microphones in one station: what each source beyond the first costs, against a recd
# per microphone.
step sources && section "15. Sources: one recd of 1, 2 and 4 sources against 2 and 4 recds of one (${BENCH_SOURCES_SECONDS:-60} s per case)" \
    python3 sources.py "$bin" "$work" "${BENCH_SOURCES_SECONDS:-60}" "$results/sources.json"

# A recording's picture (the page's list): recd-web's PNG against sox's spectrogram, per minute of audio.
step pictures && section "16. Pictures: a recording's spectrogram PNG by recd-web against sox, per minute of audio (${BENCH_PICTURES_REPS:-3} runs each)" \
    python3 pictures.py "$bin" "$work" "${BENCH_PICTURES_REPS:-3}" "$results/pictures.json"

if [ "$profile" = 1 ] && step profile; then
    section "Profiles (callgrind)" \
        python3 profile.py "$bin" "$work" benchfile "$work/sigsuspend_shim.so" 30 1000 "$results/profile.json"
fi

echo "total=$(( $(date +%s) - started ))" >>"$results/tree.env"
say "Writing $out/report.md"
python3 report.py "$results" "$out/report.md"
if [ -z "${BENCH_OUT:-}" ]; then ln -sfn "$run_id" "$root/bench/out/latest"; fi
echo "done in $(( $(date +%s) - started )) s: $out/report.md (make bench-publish BENCH_RUN=$out puts its tables into BENCHMARKS.md)"
