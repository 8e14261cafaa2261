#!/usr/bin/env bash
# Writes glibc's malloc_info (every arena: its free chunks by size, what the system gave it and
# what is in use) of a running process to a file, through gdb. The process stops for the
# second or two gdb takes to attach; use it on a daemon under a profiling load, not on a soak's.
#   bash bench/malloc_info.sh PID OUT.xml
set -euo pipefail
pid=${1:?usage: malloc_info.sh PID OUT.xml}
out=$(realpath -m "${2:?usage: malloc_info.sh PID OUT.xml}")
gdb -n -batch -iex "set auto-solib-add off" -p "$pid" \
    -ex "sharedlibrary libc.so" \
    -ex "set \$f = (void *) fopen(\"$out\", \"w\")" \
    -ex "call (int) malloc_info(0, \$f)" \
    -ex "call (int) fclose(\$f)" \
    -ex "detach" >/dev/null 2>&1
test -s "$out" || { echo "malloc_info.sh: nothing written to $out" >&2; exit 1; }
