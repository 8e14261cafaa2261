// glibc calls that Swift's Glibc module hides behind _GNU_SOURCE, declared here as glibc
// declares them (the module's headers are built without _GNU_SOURCE).
#ifndef RECD_CLINUX_SHIM_H
#define RECD_CLINUX_SHIM_H

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/eventfd.h>

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

#endif
