#include "CFFmpeg.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define RECD_STRING(x) #x
#define RECD_SONAME(library, major) "lib" library ".so." RECD_STRING(major)

static recd_ffmpeg table;
static char failure[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *open_library(const char *soname) {
    void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL && failure[0] == 0) snprintf(failure, sizeof failure, "%s", dlerror());
    return handle;
}

// Sets `table.name` to `library`'s symbol `name`, or `failure` to why not and returns.
#define RECD_RESOLVE(table, failure, library, name) \
    if (((table).name = dlsym(library, #name)) == NULL) { \
        snprintf(failure, sizeof failure, "%s", dlerror()); \
        return; \
    }

static void load(void) {
    // Never closed: the functions stay valid for the life of the process.
    void *avutil = open_library(RECD_SONAME("avutil", LIBAVUTIL_VERSION_MAJOR));
    void *avcodec = open_library(RECD_SONAME("avcodec", LIBAVCODEC_VERSION_MAJOR));
    void *avformat = open_library(RECD_SONAME("avformat", LIBAVFORMAT_VERSION_MAJOR));
    if (failure[0] != 0) return;
#define RECD_FFMPEG_RESOLVE(library, name) RECD_RESOLVE(table, failure, library, name)
    RECD_FFMPEG_FUNCTIONS(RECD_FFMPEG_RESOLVE)
#undef RECD_FFMPEG_RESOLVE
    // FFmpeg logs to stderr by itself; recd reports failures through its own errors, so only
    // FFmpeg's errors get through (its warnings, e.g. about the `.part` extension, do not).
    table.av_log_set_level(AV_LOG_ERROR);
}

const recd_ffmpeg *recd_ffmpeg_load(const char **error) {
    pthread_once(&once, load);
    if (failure[0] != 0) {
        *error = failure;
        return NULL;
    }
    return &table;
}

static recd_avutil_tx tx_table;
static char tx_failure[512];
static pthread_once_t tx_once = PTHREAD_ONCE_INIT;

static void load_tx(void) {
    // Apart from `load`: libavutil alone, with a failure of its own (the codecs may be missing
    // while libavutil is there).
    void *avutil = dlopen(RECD_SONAME("avutil", LIBAVUTIL_VERSION_MAJOR), RTLD_NOW | RTLD_LOCAL);
    if (avutil == NULL) {
        snprintf(tx_failure, sizeof tx_failure, "%s", dlerror());
        return;
    }
#define RECD_TX_RESOLVE(library, name) RECD_RESOLVE(tx_table, tx_failure, library, name)
    RECD_AVUTIL_TX_FUNCTIONS(RECD_TX_RESOLVE)
#undef RECD_TX_RESOLVE
}

const recd_avutil_tx *recd_avutil_tx_load(const char **error) {
    pthread_once(&tx_once, load_tx);
    if (tx_failure[0] != 0) {
        *error = tx_failure;
        return NULL;
    }
    return &tx_table;
}
