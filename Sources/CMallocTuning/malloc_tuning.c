// Turns glibc's per-thread caches (tcache) and fastbins off for recd, before any of its code runs.
//
// Why: `make soak`'s client churn (a status bar, Home Assistant and scripts connecting all day)
// grew recd's resident memory at rest by about 0.24 MiB/h with glibc as shipped, and not at all
// with `GLIBC_TUNABLES=glibc.malloc.tcache_count=0:glibc.malloc.mxfast=0` (BENCHMARKS.md,
// "Churn ten times faster, memory at rest"). Chunks parked in a thread's cache or a fastbin are
// never merged with their free neighbours, so the heap fragments and malloc_trim cannot return
// what lies around them. recd allocates nothing per audio period (issue 36), so the caches buy
// it nothing.
//
// How: glibc reads GLIBC_TUNABLES once, when the process starts, and mallopt() has no setting
// for the thread cache. So this constructor (it runs before main, while the process has one
// thread) sets the variable and executes recd's own binary again: same PID, same arguments,
// same descriptors (systemd's socket activation and NOTIFY_SOCKET keep working). The second
// start restores the environment as it was, so hooks and other children get the user's.
#define _GNU_SOURCE
#include "CMallocTuning.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#ifndef __has_feature
#define __has_feature(x) 0
#endif

static const char tcache_off[] = "glibc.malloc.tcache_count=0";
static const char fastbins_off[] = "glibc.malloc.mxfast=0";
// Set only across the re-execution: "" when GLIBC_TUNABLES was unset, "=VALUE" when it was VALUE.
static const char before_variable[] = "RECD_GLIBC_TUNABLES_BEFORE";

static int tuning;

int recd_malloc_tuning(void) { return tuning; }

__attribute__((constructor)) static void recd_tune_malloc(int argc, char **argv, char **envp) {
    (void)argc;
    (void)envp;
    const char *before = getenv(before_variable);
    if (before != NULL) {  // the second start: glibc has read the tunables
        if (before[0] == '=') {
            setenv("GLIBC_TUNABLES", before + 1, 1);
        } else {
            unsetenv("GLIBC_TUNABLES");
        }
        unsetenv(before_variable);
        tuning = RECD_MALLOC_TUNED;
        return;
    }
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__) || __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
    tuning = RECD_MALLOC_NOT_APPLICABLE;
    return;
#endif
    if (getauxval(AT_SECURE)) {
        tuning = RECD_MALLOC_NOT_APPLICABLE;
        return;
    }
    // The user's own tunables are kept; a thread cache setting of theirs means no restart, a
    // fastbin setting of theirs is not overridden.
    const char *current = getenv("GLIBC_TUNABLES");
    if (current != NULL && strstr(current, "glibc.malloc.tcache_count") != NULL) {
        tuning = RECD_MALLOC_USER;
        return;
    }
    if (getenv("LD_PRELOAD") != NULL) {
        tuning = RECD_MALLOC_PRELOAD;
        return;
    }
    // The binary's path, not /proc/self/exe itself: under a wrapper such as valgrind the link
    // names the program, the file the wrapper's own.
    char path[PATH_MAX];
    ssize_t length = readlink("/proc/self/exe", path, sizeof path - 1);
    if (length <= 0) {
        tuning = RECD_MALLOC_FAILED;
        return;
    }
    int user_fastbins = current != NULL && strstr(current, "glibc.malloc.mxfast") != NULL;
    char value[4096];
    int written = snprintf(value, sizeof value, "%s%s%s%s%s", current != NULL ? current : "",
                           current != NULL && current[0] != '\0' ? ":" : "", tcache_off,
                           user_fastbins ? "" : ":", user_fastbins ? "" : fastbins_off);
    char saved[4096];
    int saved_length = snprintf(saved, sizeof saved, "%s%s", current != NULL ? "=" : "", current != NULL ? current : "");
    if (written < 0 || (size_t)written >= sizeof value || saved_length < 0 || (size_t)saved_length >= sizeof saved) {
        tuning = RECD_MALLOC_TOO_LONG;
        return;
    }
    path[length] = '\0';
    setenv(before_variable, saved, 1);
    setenv("GLIBC_TUNABLES", value, 1);
    execv(path, argv);
    // Still here: run with glibc's defaults (ProcessMemory turns fastbins off with mallopt).
    if (current != NULL) {
        setenv("GLIBC_TUNABLES", current, 1);
    } else {
        unsetenv("GLIBC_TUNABLES");
    }
    unsetenv(before_variable);
    tuning = RECD_MALLOC_FAILED;
}
