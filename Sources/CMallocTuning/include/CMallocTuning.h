#ifndef RECD_CMALLOCTUNING_H
#define RECD_CMALLOCTUNING_H

/// What became of glibc's malloc tunables for this process (see malloc_tuning.c).
enum recd_malloc_tuning {
    /// Thread caches and fastbins off: recd re-executed itself with GLIBC_TUNABLES set.
    RECD_MALLOC_TUNED = 1,
    /// GLIBC_TUNABLES already set glibc.malloc.tcache_count: the user's choice stands.
    RECD_MALLOC_USER = 2,
    /// Not re-executed: LD_PRELOAD is set (a profiler or another allocator sees recd as started).
    RECD_MALLOC_PRELOAD = 3,
    /// Not re-executed: a set-user-ID start (glibc ignores the tunables) or a sanitizer's allocator.
    RECD_MALLOC_NOT_APPLICABLE = 4,
    /// The re-execution failed (e.g. /proc is not mounted): glibc's defaults, fastbins off by mallopt.
    RECD_MALLOC_FAILED = 5,
    /// Not re-executed: GLIBC_TUNABLES is longer than recd appends to (4 KiB).
    RECD_MALLOC_TOO_LONG = 6,
};

/// This process's `enum recd_malloc_tuning`.
int recd_malloc_tuning(void);

#endif
