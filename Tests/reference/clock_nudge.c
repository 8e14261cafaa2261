// Sets the machine's clock twice without moving it, for EndToEndTests.ClockTests: forward by a
// microsecond, then back by a microsecond, with adjtimex's ADJ_SETOFFSET (how chrony and
// systemd-timesyncd step the clock). The kernel announces each set to every CLOCK_REALTIME
// timerfd armed with TFD_TIMER_CANCEL_ON_SET (a set by zero it does not announce: the offset
// of the wall clock from the monotonic one must change). The clock is a microsecond ahead for
// the few microseconds between the two calls, then exactly where it was. Needs CAP_SYS_TIME.
//
// A set also resets the kernel's NTP state (ntp_clear: STA_UNSYNC, the error bounds at 16 s,
// a slew in progress dropped), so it refuses, exit status 3, unless that state is already
// what a reset leaves: STA_UNSYNC and neither PLL nor FLL on (no daemon disciplines the
// clock, as on a machine without NTP). `--check` says whether it would, without setting.
//
//   cc -O2 -o clock_nudge clock_nudge.c && ./clock_nudge
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/timex.h>

static int step(long seconds, long microseconds) {
    struct timex change;
    memset(&change, 0, sizeof change);
    change.modes = ADJ_SETOFFSET;
    change.time.tv_sec = seconds;
    change.time.tv_usec = microseconds;
    if (adjtimex(&change) < 0) {
        fprintf(stderr, "clock_nudge: adjtimex(ADJ_SETOFFSET, %ld s %ld us): %s\n", seconds, microseconds, strerror(errno));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    struct timex state;
    memset(&state, 0, sizeof state);
    if (adjtimex(&state) < 0) {
        fprintf(stderr, "clock_nudge: adjtimex: %s\n", strerror(errno));
        return 1;
    }
    if (!(state.status & STA_UNSYNC) || (state.status & (STA_PLL | STA_FLL))) {
        fprintf(stderr, "clock_nudge: the clock is disciplined (status 0x%x): a set would reset the kernel's NTP state\n", state.status);
        return 3;
    }
    if (argc > 1 && strcmp(argv[1], "--check") == 0) return 0;
    if (step(0, 1) != 0) return 1;
    // -1 µs: tv_usec must lie in [0, 1e6).
    return step(-1, 999999);
}
