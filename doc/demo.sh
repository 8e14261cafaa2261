#!/usr/bin/env bash
# make demo: record a few seconds with recd + recctl on a machine without a sound card.
#
# The test device is set up here: a private PulseAudio server with a null sink (a real-time
# clock, no hardware), a 440 Hz tone played into it by speaker-test, and an ALSA PCM "demo"
# that captures the sink's monitor through ALSA's pulse plugin — the path a desktop's
# `default` device takes. recd records from it; recctl drives recd over its socket.
#
# With --shell (make demo-shell), recd keeps running afterwards and an interactive shell starts
# with recctl pointed at it (RECD_SOCKET, ALSA_CONFIG_PATH, PATH); leaving the shell stops recd
# and the device. The same lines are in the demo's `env` file, for another terminal.
set -euo pipefail

bin=${1:?usage: demo.sh BINDIR [--shell]}
shell=false
[ "${2:-}" = --shell ] && shell=true
seconds=${DEMO_SECONDS:-5}
work=$(mktemp -d /tmp/recd-demo.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "A private PulseAudio server with a null sink (no sound card needed)"
cat > "$work/pa.conf" <<EOF
load-module module-native-protocol-unix auth-anonymous=1 socket=$work/native
load-module module-null-sink sink_name=demosink rate=48000 channels=2
EOF
HOME=$work XDG_RUNTIME_DIR=$work pulseaudio -n -F "$work/pa.conf" --daemonize=no --exit-idle-time=-1 \
    --system=false --log-target=file:"$work/pulseaudio.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$work/native" ] && break; sleep 0.05; done
[ -S "$work/native" ] || { echo "PulseAudio did not start; see $work/pulseaudio.log" >&2; exit 1; }

say "A 440 Hz tone played into it (speaker-test, through ALSA's pulse plugin)"
PULSE_SERVER=unix:$work/native speaker-test -D pulse -c 2 -r 48000 -t sine -f 440 -l 0 >/dev/null 2>&1 &
pids+=($!)

cat > "$work/alsa.conf" <<EOF
# The capture device recd records from: the null sink's monitor.
pcm.demo {
    type pulse
    server "unix:$work/native"
    device "demosink.monitor"
}
EOF
export ALSA_CONFIG_PATH=/usr/share/alsa/alsa.conf:$work/alsa.conf
export RECD_SOCKET=$work/recd.sock

say "recd, the daemon, capturing from ALSA PCM 'demo'"
echo "\$ recd --user --socket $RECD_SOCKET --recordings-dir $work/recordings --device demo &"
"$bin/recd" --user --socket "$RECD_SOCKET" --recordings-dir "$work/recordings" --device demo 2>"$work/recd.log" &
recd_pid=$!
pids+=("$recd_pid")
for _ in $(seq 100); do [ -S "$RECD_SOCKET" ] && break; sleep 0.05; done

say "recctl status"
"$bin/recctl" status

say "recctl start demo --format flac --duration $seconds --wait"
"$bin/recctl" start demo --format flac --duration "$seconds" --wait

say "recctl ls"
"$bin/recctl" ls

say "recctl info demo"
"$bin/recctl" info demo

say "recctl listen --pre-roll 5: the device open without a file (levels, and the last 5 s kept)"
# Not a terminal here: its events go to a file, one JSON line each. Ctrl-C (SIGINT) ends it.
"$bin/recctl" listen --pre-roll 5 >"$work/listen.jsonl" &
listen_pid=$!
# Until the 5 s are held (the sound server takes a moment to start delivering).
for _ in $(seq 100); do "$bin/recctl" status | grep -q '5.0 s of 5.0 s held' && break; sleep 0.1; done
"$bin/recctl" status

say "recctl start take --format flac --pre-roll 5: the file begins 5 s before the start"
"$bin/recctl" start take --format flac --pre-roll 5
sleep 2
"$bin/recctl" stop
kill -INT "$listen_pid"
wait "$listen_pid" && echo "recctl listen ended; $(grep -c '"levels"' "$work/listen.jsonl") level events in $work/listen.jsonl"

say "recctl info take: its start is the first pre-rolled frame's"
"$bin/recctl" info take

if command -v sndfile-info >/dev/null; then
    say "The file, as libsndfile reads it"
    # Its summary only (unindented lines): the FLAC header above it repeats Channels and Frames.
    sndfile-info "$work/recordings/demo.flac" | grep -E '^(Sample Rate|Frames|Channels|Duration) ' || true
fi

bin=$(cd "$bin" && pwd)
printf 'export RECD_SOCKET=%s\nexport ALSA_CONFIG_PATH=%s\nexport PULSE_SERVER=%s\nexport PATH=%s:$PATH\n' \
    "$RECD_SOCKET" "$ALSA_CONFIG_PATH" "unix:$work/native" "$bin" >"$work/env"
if $shell; then
    say "Your turn: recd keeps running on the device 'demo'"
    echo "In this shell, recctl talks to the demo's recd (pid $recd_pid). In another terminal:"
    sed 's/^/    /' "$work/env"
    echo "(or: . $work/env). Try: recctl start mine --format flac; recctl status; recctl stop; recctl ls"
    echo "The device hears the 440 Hz tone. To make a sound over it (to try the trigger:"
    echo "recctl start birds --threshold=-20 --high-pass 1000), play into the demo's sink:"
    echo "    paplay --device=demosink /usr/share/sounds/alsa/Front_Center.wav"
    echo "Leave the shell (exit) to stop recd and the test device."
    # A shell's startup files may set PATH again: bash reads the lines after its own.
    if [ "$(basename "${SHELL:-/bin/bash}")" = bash ]; then
        printf '[ -f ~/.bashrc ] && . ~/.bashrc\n. %s\nPS1="(recd demo) $PS1"\n' "$work/env" >"$work/bashrc"
        bash --rcfile "$work/bashrc" -i || true
    else
        (. "$work/env" && "$SHELL" -i) || true
    fi
fi

say "Stopping recd (SIGTERM finalizes any recording in progress)"
kill -TERM "$recd_pid"
wait "$recd_pid" && echo "recd exited with status 0"

echo
echo "The recording: $work/recordings/demo.flac"
echo "recd's log:    $work/recd.log"
$shell || echo "To go on with the demo's recd and device: make demo-shell"
