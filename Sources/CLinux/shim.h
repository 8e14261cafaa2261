// The Linux calls recd's Swift modules make beyond Swift's Glibc module: glibc calls that
// module hides behind _GNU_SOURCE, declared here as glibc declares them (the module's headers
// are built without _GNU_SOURCE), and wrappers for calls whose structures and flags are
// easier to fill in C (the system clock's: adjtimex, timerfd, inotify).
#ifndef RECD_CLINUX_SHIM_H
#define RECD_CLINUX_SHIM_H

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/timerfd.h>
#include <sys/timex.h>
#include <time.h>
#include <unistd.h>

// <stdio.h>, glibc 2.28 and later.
extern int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);

// <linux/fs.h>
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

/// rename(2) that fails with EEXIST instead of replacing `to`.
static inline int recd_rename_noreplace(const char *from, const char *to) {
    return renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
}

/// At most `count` malloc arenas in the process (mallopt's M_ARENA_MAX; 1 on success).
static inline int recd_limit_malloc_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}

/// No fastbins: small freed chunks merge with their neighbours at once (mallopt's M_MXFAST).
static inline int recd_disable_malloc_fastbins(void) {
    return mallopt(M_MXFAST, 0);
}

// <dlfcn.h>, a GNU extension.
#ifndef RTLD_DEFAULT
#define RTLD_DEFAULT ((void *) 0)
#endif

/// 1 when malloc is glibc's; 0 in a sanitizer's build (ThreadSanitizer, AddressSanitizer),
/// whose runtime replaces malloc: glibc's own heap is then never set up, and malloc_trim
/// called from two threads at once set it up twice and crashed (a unit test under TSan: 4 runs in 340, four at once).
static inline int recd_malloc_is_glibc(void) {
    return dlsym(RTLD_DEFAULT, "__tsan_init") == NULL && dlsym(RTLD_DEFAULT, "__asan_init") == NULL;
}

// <pthread.h>, a GNU extension.
extern int pthread_setname_np(pthread_t thread, const char *name);

/// A non-blocking, close-on-exec eventfd: a counter another thread writes to wake a poll.
static inline int recd_wake_descriptor(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

/// Names the calling thread as `top -H`, `ps -L` and /proc show it (at most 15 bytes).
static inline int recd_name_current_thread(const char *name) {
    return pthread_setname_np(pthread_self(), name);
}

// The system clock (RecorderCore's SystemClockMonitor).

/// The kernel's clock discipline, read without changing it (adjtimex with no mode bits):
/// whether the kernel considers the clock unsynchronized (STA_UNSYNC, which chrony, ntpd and
/// systemd-timesyncd clear while they discipline it, and the kernel sets again once its
/// maximum error passes 16 s) and its maximum and estimated error in microseconds. 0, or -1
/// with errno: EPERM where a seccomp filter refuses the call (glibc makes it the clock_adjtime
/// system call; systemd's ProtectClock= filters both out altogether, reading included, and a
/// container's default filter may refuse clock_adjtime without CAP_SYS_TIME).
static inline int recd_clock_discipline(int *unsynchronized, long *max_error_us, long *estimated_error_us) {
    struct timex state = {0};
    if (adjtimex(&state) < 0) return -1;
    *unsynchronized = (state.status & STA_UNSYNC) != 0;
    *max_error_us = state.maxerror;
    *estimated_error_us = state.esterror;
    return 0;
}

/// The wall clock (CLOCK_REALTIME, nanoseconds) and, from the same reading, its offset from the
/// boot clock (CLOCK_REALTIME minus CLOCK_BOOTTIME): what a step of the wall clock changes and
/// nothing else does (NTP's slewing and frequency corrections move both clocks alike, and a
/// suspend adds its length to both). The boot clock is read on both sides of the wall clock,
/// and the reading taken again if something came between them (a preemption). The capture
/// engine times each read with the first and follows a step with the second: the two must
/// never disagree (a step between two separate readings would time a read by the old clock and
/// the new offset).
static inline int64_t recd_wall_clock_now(int64_t *offset) {
    struct timespec before, wall, after;
    int64_t now = 0;
    for (int attempt = 0; attempt < 4; attempt++) {
        clock_gettime(CLOCK_BOOTTIME, &before);
        clock_gettime(CLOCK_REALTIME, &wall);
        clock_gettime(CLOCK_BOOTTIME, &after);
        int64_t boot_before = (int64_t)before.tv_sec * 1000000000 + before.tv_nsec;
        int64_t boot_after = (int64_t)after.tv_sec * 1000000000 + after.tv_nsec;
        now = (int64_t)wall.tv_sec * 1000000000 + wall.tv_nsec;
        *offset = now - (boot_before + (boot_after - boot_before) / 2);
        if (boot_after - boot_before < 100000) break;
    }
    return now;
}

/// CLOCK_REALTIME minus CLOCK_BOOTTIME, in nanoseconds (`recd_wall_clock_now`'s offset).
static inline int64_t recd_wall_clock_offset(void) {
    int64_t offset = 0;
    recd_wall_clock_now(&offset);
    return offset;
}

/// A CLOCK_REALTIME timer descriptor for `recd_arm_clock_set_alarm`: non-blocking,
/// close-on-exec. -1 with errno on failure.
static inline int recd_clock_set_alarm(void) {
    return timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
}

/// Arms `descriptor` to expire never (the kernel clamps the far future to 2262) but to be
/// cancelled when the wall clock is set: settimeofday, clock_settime, adjtimex's
/// ADJ_SETOFFSET (how chrony, ntpd and timesyncd step), a leap second, a resume from suspend.
/// It becomes readable then, and reports nothing more until armed again. 0, or -1 with errno.
static inline int recd_arm_clock_set_alarm(int descriptor) {
    struct itimerspec never = {0};
    never.it_value.tv_sec = (time_t)1 << 40;
    return timerfd_settime(descriptor, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &never, NULL);
}

/// Reads a clock-set alarm: 1 when the wall clock was set (the read fails with ECANCELED), 0
/// when there is nothing to read, -1 with errno on another failure.
static inline int recd_clock_was_set(int descriptor) {
    uint64_t expirations;
    if (read(descriptor, &expirations, sizeof expirations) >= 0) return 0;
    if (errno == ECANCELED) return 1;
    return errno == EAGAIN ? 0 : -1;
}

/// A non-blocking, close-on-exec inotify descriptor. -1 with errno on failure.
static inline int recd_directory_watch(void) {
    return inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
}

/// Watches `directory` on `descriptor` for entries appearing, changing or going (created,
/// moved in or out, touched, written, deleted) and for its own removal. The watch's number,
/// or -1 with errno (ENOENT: no such directory).
static inline int recd_watch_directory(int descriptor, const char *directory) {
    return inotify_add_watch(descriptor, directory,
                             IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE
                             | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
}

/// Stops watching `watch` on `descriptor`.
static inline int recd_unwatch_directory(int descriptor, int watch) {
    return inotify_rm_watch(descriptor, watch);
}

/// Reads and discards what `descriptor` (inotify) has to report: 1 if anything, 0 if nothing.
static inline int recd_drain_directory_watch(int descriptor) {
    char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int any = 0;
    while (read(descriptor, events, sizeof events) > 0) any = 1;
    return any;
}

#endif
