/* Time to first frame of a plain ALSA capture client, the way arecord does it: open the PCM,
 * set 48 kHz/S16_LE/stereo with the period and buffer recd uses, start, read one period.
 *
 * usage: first_frame DEVICE RUNS PERIOD_US BUFFER_US
 * Prints one JSON object per run (milliseconds after the moment before snd_pcm_open):
 *   open      snd_pcm_open + hw_params returned
 *   started   snd_pcm_start returned
 *   read      the first snd_pcm_readi that returned frames returned
 *   first     read - frames/rate: when the first frame it returned was captured, had it been
 *             delivered at once (the same estimate as recd's "notification time - currentTime")
 */
#include <alsa/asoundlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void check(int err, const char *what) {
    if (err < 0) {
        fprintf(stderr, "first_frame: %s: %s\n", what, snd_strerror(err));
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: first_frame DEVICE RUNS PERIOD_US BUFFER_US\n");
        return 64;
    }
    const char *device = argv[1];
    int runs = atoi(argv[2]);
    unsigned period_us = (unsigned)atoi(argv[3]);
    unsigned buffer_us = (unsigned)atoi(argv[4]);
    static short buffer[48000 * 2];
    for (int run = 0; run < runs; run++) {
        snd_pcm_t *pcm;
        snd_pcm_hw_params_t *params;
        unsigned rate = 48000;
        int dir = 0;
        double t0 = now();
        check(snd_pcm_open(&pcm, device, SND_PCM_STREAM_CAPTURE, 0), "snd_pcm_open");
        snd_pcm_hw_params_alloca(&params);
        check(snd_pcm_hw_params_any(pcm, params), "hw_params_any");
        check(snd_pcm_hw_params_set_access(pcm, params, SND_PCM_ACCESS_RW_INTERLEAVED), "set_access");
        check(snd_pcm_hw_params_set_format(pcm, params, SND_PCM_FORMAT_S16_LE), "set_format");
        check(snd_pcm_hw_params_set_channels(pcm, params, 2), "set_channels");
        check(snd_pcm_hw_params_set_rate_near(pcm, params, &rate, &dir), "set_rate");
        check(snd_pcm_hw_params_set_buffer_time_near(pcm, params, &buffer_us, &dir), "set_buffer_time");
        check(snd_pcm_hw_params_set_period_time_near(pcm, params, &period_us, &dir), "set_period_time");
        check(snd_pcm_hw_params(pcm, params), "hw_params");
        snd_pcm_uframes_t period;
        check(snd_pcm_hw_params_get_period_size(params, &period, &dir), "get_period_size");
        double t_open = now();
        check(snd_pcm_start(pcm), "snd_pcm_start");
        double t_start = now();
        snd_pcm_sframes_t got;
        do {
            got = snd_pcm_readi(pcm, buffer, period);
            if (got < 0) check(snd_pcm_recover(pcm, (int)got, 1), "snd_pcm_recover");
        } while (got <= 0);
        double t_read = now();
        printf("{\"open\":%.3f,\"started\":%.3f,\"read\":%.3f,\"first\":%.3f,\"frames\":%ld,\"period\":%lu}\n",
               (t_open - t0) * 1e3, (t_start - t0) * 1e3, (t_read - t0) * 1e3,
               (t_read - (double)got / rate - t0) * 1e3, (long)got, (unsigned long)period);
        fflush(stdout);
        snd_pcm_close(pcm);
    }
    return 0;
}
