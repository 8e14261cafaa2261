#!/usr/bin/env bash
# recd's anonymous memory with a directory of many recordings (BENCHMARKS.md, "Churn ten times
# faster with the directory kept bounded"): a daemon on DIR makes ten 0.5 s recordings from
# the unpaced ALSA file device; RssAnon is read 1.5 s after each (the scan after every closed
# file has run). Compare an empty directory with one of FILES copies of a 0.5 s FLAC.
#
# Usage: bench/directory-scan-memory.sh BINDIR [FILES]   (default 20000)
set -euo pipefail
bin=$1 files=${2:-20000}
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
printf 'pcm.scanfile { type file slave.pcm "null" file "/dev/null" infile "%s/in.raw" format "raw" }\n' "$work" >"$work/alsa.conf"
head -c 960000 /dev/urandom >"$work/in.raw"
sox -n -r 48000 -c 2 -b 16 "$work/one.flac" synth 0.5 sine 440 2>/dev/null
for label in empty full; do
    mkdir -p "$work/$label"
    if [[ $label == full ]]; then
        for ((i = 0; i < files; i++)); do cp "$work/one.flac" "$work/full/churn-$i.flac"; done
    fi
    ALSA_CONFIG_PATH=/usr/share/alsa/alsa.conf:$work/alsa.conf "$bin/recd" --user --config /dev/null \
        --socket "$work/$label.sock" --recordings-dir "$work/$label" --device scanfile >"$work/$label.log" 2>&1 &
    pid=$!
    sleep 3
    readings=()
    for i in $(seq 1 10); do
        "$bin/recctl" --socket "$work/$label.sock" start "t$i" --format flac --rate 48000 --channels 2 --duration 0.5 --wait >/dev/null
        sleep 1.5
        readings+=("$(awk '/^RssAnon:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")")
    done
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$label ($(ls "$work/$label" | wc -l) files): RssAnon MiB after each recording: ${readings[*]}"
done
