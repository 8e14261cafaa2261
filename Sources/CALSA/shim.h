#ifndef RECD_CALSA_SHIM_H
#define RECD_CALSA_SHIM_H
#include <alsa/asoundlib.h>
#include <stdarg.h>
#include <stdio.h>

/// Defined in Swift (Sources/ALSA/LibraryMessages.swift): one of libasound's own error
/// messages ("Cannot get card index for 9"), formatted.
void recd_alsa_library_message(const char *message);

/// libasound's error handler is variadic, which Swift cannot define: format here, hand on.
static void recd_alsa_error_handler(const char *file, int line, const char *function, int err, const char *format, ...) {
    (void)file; (void)line; (void)function; (void)err;
    char message[512];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(message, sizeof message, format, arguments);
    va_end(arguments);
    recd_alsa_library_message(message);
}

/// Sends libasound's messages to recd_alsa_library_message instead of stderr.
static inline void recd_alsa_route_library_messages(void) {
    snd_lib_error_set_handler(recd_alsa_error_handler);
}
#endif
