#!/bin/bash
# Counts the concurrency mechanisms' sites in a tree (issue 36's measure: its review counted
# DispatchQueues, semaphores, sources, lock uses, atomics, eventfds, await and @unchecked
# Sendable), from git, without comment lines. Sites, not mechanisms: a count says where to look.
#
#   bash bench/concurrency_count.sh REV PATH...     e.g. bash bench/concurrency_count.sh HEAD Sources
set -euo pipefail
rev=${1:?usage: concurrency_count.sh REV PATH...}; shift
count() { local pattern=$1; shift; git grep -E "$pattern" "$rev" -- "$@" | grep -cv '^\S*:\s*//' || true; }
for path in "$@"; do
    printf '%s %s:\n' "$rev" "$path"
    printf '  %-48s %s\n' \
        'DispatchQueue(label:)' "$(count 'DispatchQueue\(label' "$path")" \
        'DispatchSemaphore(' "$(count 'DispatchSemaphore\(' "$path")" \
        'DispatchSource.make… / user-data sources' "$(count 'DispatchSource\.make|DispatchSourceUserData' "$path")" \
        'lock uses (withLock, withLockedValue, .lock())' "$(count 'withLock|withLockedValue|\.lock\(\)' "$path")" \
        'Atomic<…> declarations' "$(count 'Atomic<|ManagedAtomic<|UnsafeAtomic<' "$path")" \
        'eventfd sites' "$(count 'eventfd|wake_descriptor' "$path")" \
        'await' "$(count '\bawait\b' "$path")" \
        '@unchecked Sendable' "$(count '@unchecked Sendable' "$path")" \
        'threads of their own (DedicatedThread, pthread)' "$(count 'DedicatedThread\.spawn|pthread_create' "$path")"
done
