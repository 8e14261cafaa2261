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

static void load(void) {
    // Never closed: the functions stay valid for the life of the process.
    void *avutil = open_library(RECD_SONAME("avutil", LIBAVUTIL_VERSION_MAJOR));
    void *avcodec = open_library(RECD_SONAME("avcodec", LIBAVCODEC_VERSION_MAJOR));
    void *avformat = open_library(RECD_SONAME("avformat", LIBAVFORMAT_VERSION_MAJOR));
    if (failure[0] != 0) return;
#define RECD_FFMPEG_RESOLVE(library, name) \
    if ((table.name = dlsym(library, #name)) == NULL) { \
        snprintf(failure, sizeof failure, "%s", dlerror()); \
        return; \
    }
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
