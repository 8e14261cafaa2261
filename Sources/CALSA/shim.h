#ifndef RECD_CALSA_SHIM_H
#define RECD_CALSA_SHIM_H
#include <alsa/asoundlib.h>
#include <stdarg.h>
#include <stdio.h>

/// libasound reports through a variadic callback, which Swift cannot implement: this one
/// formats the message and hands it to `recd_alsa_message`, defined in Swift (ALSA module).
extern void recd_alsa_message(const char *function, int err, const char *message);

static void recd_alsa_error_handler(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line;
    char message[512];
    va_list arguments;
    va_start(arguments, fmt);
    vsnprintf(message, sizeof message, fmt, arguments);
    va_end(arguments);
    recd_alsa_message(function, err, message);
}

static inline void recd_alsa_route_messages(int enabled) {
    snd_lib_error_set_handler(enabled ? recd_alsa_error_handler : NULL);
}
#endif
