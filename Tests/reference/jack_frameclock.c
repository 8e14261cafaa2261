/* A JACK client that plays its server's frame clock: on port `hi` the upper and on port `lo`
 * the lower 16 bits of each frame's number (jack_last_frame_time() + i), as floats k/32768
 * that a 16-bit capture holds exactly. A recording of these two ports says for every frame
 * which device frame it is: a jump is exactly the audio lost (../shared/TESTING.md, 2b).
 *
 *   jack_frameclock NAME   (JACK_DEFAULT_SERVER selects the server; runs until killed)
 *
 * Prints "ready" once its ports exist and are active. */
#include <jack/jack.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

static jack_client_t *client;
static jack_port_t *hi, *lo;

static float half(uint32_t bits) { return (float)((int32_t)bits - 32768) / 32768.0f; }

static int process(jack_nframes_t frames, void *argument) {
    (void)argument;
    jack_default_audio_sample_t *high = jack_port_get_buffer(hi, frames);
    jack_default_audio_sample_t *low = jack_port_get_buffer(lo, frames);
    uint32_t first = jack_last_frame_time(client);
    for (jack_nframes_t i = 0; i < frames; i++) {
        uint32_t frame = first + i;
        high[i] = half(frame >> 16);
        low[i] = half(frame & 0xffff);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "frameclock";
    jack_status_t status;
    client = jack_client_open(name, JackNoStartServer, &status);
    if (!client) {
        fprintf(stderr, "jack_frameclock: cannot connect to the JACK server (status 0x%x)\n", status);
        return 1;
    }
    hi = jack_port_register(client, "hi", JACK_DEFAULT_AUDIO_TYPE, JackPortIsOutput, 0);
    lo = jack_port_register(client, "lo", JACK_DEFAULT_AUDIO_TYPE, JackPortIsOutput, 0);
    if (!hi || !lo || jack_set_process_callback(client, process, NULL) || jack_activate(client)) {
        fprintf(stderr, "jack_frameclock: cannot register or activate its ports\n");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int signal;
    sigwait(&set, &signal);
    jack_client_close(client);
    return 0;
}
