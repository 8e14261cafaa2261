/* Fan-out receivers in C: the same measurement as fanout.py's Python workers (receipt time of
 * the read that brought a notification minus its "timestamp"), at a fraction of their CPU, so
 * that the clients compete less with recd for the machine's two cores.
 *
 * usage: fanout_receiver SOCKET COUNT INTERVAL LATENCIES.bin
 * Connects COUNT clients and subscribes each to currentTime and levels at INTERVAL, then says
 * "ready" on stdout. Reads commands on stdin: "window START END" (seconds since 1970: count what
 * arrives inside it), "stop" (write the latencies, in ms, as native doubles to LATENCIES.bin,
 * print {"counts":[...],"closed":N,"cpu":SECONDS} on stdout and exit). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define BUFFER 65536

struct client {
    int fd;
    size_t used;
    long count;
    char *buffer;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: fanout_receiver SOCKET COUNT INTERVAL LATENCIES.bin\n");
        return 2;
    }
    int count = atoi(argv[2]);
    char subscribe[256];
    int subscribe_length = snprintf(subscribe, sizeof subscribe,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"subscribe\",\"params\":{\"topics\":[\"currentTime\",\"levels\"],\"interval\":%s}}\n",
        argv[3]);
    struct client *clients = calloc(count, sizeof *clients);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    for (int i = 0; i < count; i++) {
        struct client *c = &clients[i];
        c->buffer = malloc(BUFFER);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0) die("socket");
        if (connect(c->fd, (struct sockaddr *)&address, sizeof address) != 0) die("connect");
        if (write(c->fd, subscribe, subscribe_length) != subscribe_length) die("write");
    }
    /* Each client's subscribe answer (the first line); what follows it stays buffered. */
    for (int i = 0; i < count; i++) {
        struct client *c = &clients[i];
        char *end = NULL;
        while (!end) {
            ssize_t n = read(c->fd, c->buffer + c->used, BUFFER - c->used);
            if (n <= 0) die("read subscribe answer");
            c->used += n;
            end = memchr(c->buffer, '\n', c->used);
        }
        if (!memmem(c->buffer, end - c->buffer, "\"result\"", 8)) {
            fprintf(stderr, "subscribe failed: %.200s\n", c->buffer);
            return 1;
        }
        size_t rest = c->used - (end + 1 - c->buffer);
        memmove(c->buffer, end + 1, rest);
        c->used = rest;
    }
    int epoll = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLIN};
    event.data.u64 = (uint64_t)-1;
    if (epoll_ctl(epoll, EPOLL_CTL_ADD, 0, &event) != 0) die("epoll_ctl stdin");
    for (int i = 0; i < count; i++) {
        event.data.u64 = i;
        if (epoll_ctl(epoll, EPOLL_CTL_ADD, clients[i].fd, &event) != 0) die("epoll_ctl");
    }
    printf("ready\n");
    fflush(stdout);

    double window_start = 0, window_end = 0;
    int in_window_known = 0, closed = 0;
    size_t latency_count = 0, latency_capacity = 1 << 20;
    double *latencies = malloc(latency_capacity * sizeof *latencies);
    double cpu0 = cpu_seconds();
    static const char key[] = "\"timestamp\":";
    struct epoll_event events[256];
    for (;;) {
        int ready = epoll_wait(epoll, events, 256, 500);
        if (ready < 0 && errno != EINTR) die("epoll_wait");
        for (int e = 0; e < ready; e++) {
            if (events[e].data.u64 == (uint64_t)-1) {
                char command[256];
                ssize_t n = read(0, command, sizeof command - 1);
                if (n <= 0) return 1;
                command[n] = 0;
                if (strncmp(command, "window", 6) == 0) {
                    sscanf(command + 6, "%lf %lf", &window_start, &window_end);
                    in_window_known = 1;
                    cpu0 = cpu_seconds();
                    continue;
                }
                /* stop */
                FILE *out = fopen(argv[4], "wb");
                if (!out || fwrite(latencies, sizeof *latencies, latency_count, out) != latency_count || fclose(out) != 0)
                    die(argv[4]);
                printf("{\"counts\":[");
                for (int i = 0; i < count; i++) printf("%s%ld", i ? "," : "", clients[i].count);
                printf("],\"closed\":%d,\"cpu\":%f}\n", closed, cpu_seconds() - cpu0);
                return 0;
            }
            struct client *c = &clients[events[e].data.u64];
            ssize_t n = read(c->fd, c->buffer + c->used, BUFFER - c->used);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            double received = now();
            if (n <= 0) {
                epoll_ctl(epoll, EPOLL_CTL_DEL, c->fd, NULL);
                closed++;
                continue;
            }
            c->used += n;
            char *last = memrchr(c->buffer, '\n', c->used);
            if (!last) continue;
            if (in_window_known && received >= window_start && received < window_end) {
                char *position = c->buffer;
                while ((position = memmem(position, last - position, key, sizeof key - 1))) {
                    position += sizeof key - 1;
                    char *stop;
                    double timestamp = strtod(position, &stop);
                    position = stop;
                    if (latency_count == latency_capacity) {
                        latency_capacity *= 2;
                        latencies = realloc(latencies, latency_capacity * sizeof *latencies);
                    }
                    latencies[latency_count++] = (received - timestamp) * 1000;
                    c->count++;
                }
            }
            size_t rest = c->used - (last + 1 - c->buffer);
            memmove(c->buffer, last + 1, rest);
            c->used = rest;
        }
    }
}
