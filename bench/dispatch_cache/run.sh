#!/usr/bin/env bash
# libdispatch's per-thread continuation cache, alone: a pthread hands blocks to serial queues
# (as recd's capture thread hands each fsync to its sync queue) while a 20 Hz timer keeps the
# workers awake. malloc's in-use bytes rise to about 64 KiB per worker (1024 cached 64-byte
# continuations each) and stay there until the pool gains a worker. doc/architecture.md.
#   bash bench/dispatch_cache/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
swiftc -O -import-objc-header "$here/shim.h" "$here/main.swift" -o "$out/dispatch_cache"
"$out/dispatch_cache"
