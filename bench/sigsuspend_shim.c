/* Preloaded into recd when it runs under valgrind 3.19 (bench/profile.py).
 *
 * libdispatch's main thread parks in sigsuspend() with a signal mask that lives in read-only
 * memory; valgrind's sigsuspend wrapper writes to the mask it is given and dies with SIGSEGV
 * ("the 'impossible' happened"). Passing the kernel a copy on the stack avoids that.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, (long)(_NSIG / 8));
}
