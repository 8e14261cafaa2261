#include "CMosquitto.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static recd_mosquitto table;
static char failure[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    // libmosquitto 2.x keeps soname 1 (Debian's libmosquitto1). Never closed.
    void *library = dlopen("libmosquitto.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(failure, sizeof failure, "%s", dlerror());
        return;
    }
#define RECD_MOSQUITTO_RESOLVE(name) \
    if ((table.name = dlsym(library, #name)) == NULL) { \
        snprintf(failure, sizeof failure, "%s", dlerror()); \
        return; \
    }
    RECD_MOSQUITTO_FUNCTIONS(RECD_MOSQUITTO_RESOLVE)
#undef RECD_MOSQUITTO_RESOLVE
    table.mosquitto_lib_init();
}

const recd_mosquitto *recd_mosquitto_load(const char **error) {
    pthread_once(&once, load);
    if (failure[0] != 0) {
        *error = failure;
        return NULL;
    }
    return &table;
}
