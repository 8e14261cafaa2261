/* Read a tap from recd in C: connect, ask for the audio, then a plain read loop over
 * 40-byte headers and their samples. cc -O2 -o recd_tap recd_tap.c
 *
 *     recd_tap SOCKET RATE CHANNELS SECONDS > out.raw     (16-bit little-endian PCM)
 *
 * One line per chunk (position, capture time, frames, lost, flags) goes to standard error.
 * The header is little-endian; this reads it field by field, so it runs on any host. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int read_exactly(int fd, void *buffer, size_t count) {
    size_t done = 0;
    while (done < count) {
        ssize_t n = read(fd, (char *)buffer + done, count - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0; /* recd ended the stream */
        done += (size_t)n;
    }
    return 1;
}

static uint64_t le(const unsigned char *bytes, int size) {
    uint64_t value = 0;
    for (int i = size - 1; i >= 0; i--) value = value << 8 | bytes[i];
    return value;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s SOCKET RATE CHANNELS SECONDS\n", argv[0]);
        return 2;
    }
    int rate = atoi(argv[2]), channels = atoi(argv[3]);
    long wanted = (long)(atof(argv[4]) * rate + 0.5);

    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) < 0) {
        perror("connect");
        return 1;
    }
    char request[256];
    int length = snprintf(request, sizeof request,
                          "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tap\",\"params\":{\"rate\":%d,\"channels\":%d}}\n",
                          rate, channels);
    if (write(fd, request, (size_t)length) != length) return 1;

    /* The answer: one line of JSON. */
    char line[4096];
    size_t used = 0;
    for (;;) {
        if (used == sizeof line - 1 || !read_exactly(fd, line + used, 1)) return 1;
        if (line[used++] == '\n') break;
    }
    line[used] = 0;
    if (strstr(line, "\"error\"")) {
        fprintf(stderr, "recd refused: %s", line);
        return 1;
    }

    unsigned char header[40];
    static unsigned char payload[1 << 22];
    long written = 0;
    while (written < wanted && read_exactly(fd, header, sizeof header)) {
        if (memcmp(header, "RCDT", 4) != 0) return 1;
        uint64_t position = le(header + 8, 8);
        uint64_t bits = le(header + 16, 8);
        double captured;
        memcpy(&captured, &bits, sizeof captured);
        uint32_t frames = (uint32_t)le(header + 24, 4), lost = (uint32_t)le(header + 28, 4);
        uint32_t flags = (uint32_t)le(header + 32, 4), bytes = (uint32_t)le(header + 36, 4);
        if (bytes > sizeof payload || !read_exactly(fd, payload, bytes)) return 1;
        long take = frames < wanted - written ? (long)frames : wanted - written;
        fwrite(payload, (size_t)(take * channels * 2), 1, stdout);
        written += take;
        fprintf(stderr, "chunk %llu %.6f %u lost=%u flags=%u\n", (unsigned long long)position, captured, frames, lost, flags);
    }
    close(fd); /* recd ends the tap */
    return written == wanted ? 0 : 1;
}
