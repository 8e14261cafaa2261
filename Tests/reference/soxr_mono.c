/* The reference a 16 kHz mono tap is checked against: 16-bit stereo input mixed to mono in
 * float (the two channels' average, as recd mixes) and converted by libsoxr in one call, with
 * the quality recd uses for `high` (SOXR_HQ, no dither), float out.
 *
 *     soxr_mono IN.raw RATE_IN RATE_OUT > OUT.f32            cc -O2 soxr_mono.c -lsoxr */
#include <soxr.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    FILE *in = fopen(argv[1], "rb");
    if (!in) return 1;
    fseek(in, 0, SEEK_END);
    long bytes = ftell(in);
    fseek(in, 0, SEEK_SET);
    size_t frames = (size_t)bytes / 4;
    int16_t *stereo = malloc((size_t)bytes);
    float *mono = malloc(frames * sizeof(float));
    if (!stereo || !mono || fread(stereo, 1, (size_t)bytes, in) != (size_t)bytes) return 1;
    for (size_t i = 0; i < frames; i++) {
        float sum = 0;
        sum += (float)stereo[2 * i] * (1.0f / 32768);
        sum += (float)stereo[2 * i + 1] * (1.0f / 32768);
        mono[i] = sum / 2;
    }
    double in_rate = atof(argv[2]), out_rate = atof(argv[3]);
    size_t capacity = (size_t)((double)frames * out_rate / in_rate) + 1024, done = 0;
    float *out = malloc(capacity * sizeof(float));
    soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    io.flags |= SOXR_NO_DITHER;
    soxr_error_t error = soxr_oneshot(in_rate, out_rate, 1, mono, frames, NULL, out, capacity, &done, &io, &quality, NULL);
    if (error) {
        fprintf(stderr, "soxr: %s\n", error);
        return 1;
    }
    fwrite(out, sizeof(float), done, stdout);
    return 0;
}
