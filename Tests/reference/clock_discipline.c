// The kernel's clock discipline as a test wants it (EndToEndTests.ClockTests): an LD_PRELOAD
// interposer of the calls that read it, adjtimex, ntp_adjtime and clock_adjtime(CLOCK_REALTIME)
// with no mode bits. The file named by RECD_TEST_CLOCK_DISCIPLINE says what they answer, read
// again at every call:
//   synchronized     STA_PLL (no STA_UNSYNC), maxerror 12 ms, esterror 3 ms, TIME_OK
//   unsynchronized   STA_UNSYNC, maxerror and esterror 16 s (the kernel's at boot), TIME_ERROR
//   refused          -1 with EPERM, as under systemd's ProtectClock=
// Anything else (no variable, no file, another word, a call that sets something) goes to the
// real call: the kernel is the boundary, and only what it would answer is replaced.
//
//   cc -O2 -shared -fPIC -o clock_discipline.so clock_discipline.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timex.h>
#include <time.h>

// What to answer for a read: 1 (answered in *state, *result), 0 (ask the kernel).
static int answer(struct timex *state, int *result) {
    const char *path = getenv("RECD_TEST_CLOCK_DISCIPLINE");
    if (path == NULL || state == NULL || state->modes != 0) return 0;
    FILE *file = fopen(path, "r");
    if (file == NULL) return 0;
    char word[32] = {0};
    int read = fscanf(file, "%31s", word);
    fclose(file);
    if (read != 1) return 0;
    if (strcmp(word, "refused") == 0) {
        errno = EPERM;
        *result = -1;
        return 1;
    }
    int synchronized = strcmp(word, "synchronized") == 0;
    if (!synchronized && strcmp(word, "unsynchronized") != 0) return 0;
    memset(state, 0, sizeof *state);
    state->status = synchronized ? STA_PLL : STA_UNSYNC;
    state->maxerror = synchronized ? 12000 : 16000000;
    state->esterror = synchronized ? 3000 : 16000000;
    state->constant = 2;
    state->precision = 1;
    state->tolerance = 32768000;
    *result = synchronized ? TIME_OK : TIME_ERROR;
    return 1;
}

int adjtimex(struct timex *state) {
    int result;
    if (answer(state, &result)) return result;
    int (*real)(struct timex *) = (int (*)(struct timex *))dlsym(RTLD_NEXT, "adjtimex");
    return real(state);
}

int ntp_adjtime(struct timex *state) {
    int result;
    if (answer(state, &result)) return result;
    int (*real)(struct timex *) = (int (*)(struct timex *))dlsym(RTLD_NEXT, "ntp_adjtime");
    return real(state);
}

int clock_adjtime(clockid_t clock, struct timex *state) {
    int result;
    if (clock == CLOCK_REALTIME && answer(state, &result)) return result;
    int (*real)(clockid_t, struct timex *) = (int (*)(clockid_t, struct timex *))dlsym(RTLD_NEXT, "clock_adjtime");
    return real(clock, state);
}
