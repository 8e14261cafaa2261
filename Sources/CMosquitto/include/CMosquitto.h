#ifndef RECD_CMOSQUITTO_H
#define RECD_CMOSQUITTO_H
// libmosquitto, loaded on first use (dlopen) rather than linked: with libssl and libcrypto it
// would add about 2 MiB to the resident memory of every recd, also of those without [mqtt].
//
// Swift calls libmosquitto only through the table `recd_mosquitto_load()` returns; calling a
// function directly fails at link time, on purpose.
#include <mosquitto.h>

// Every libmosquitto function recd uses.
#define RECD_MOSQUITTO_FUNCTIONS(F) \
    F(mosquitto_connack_string) \
    F(mosquitto_connect_async) \
    F(mosquitto_connect_callback_set) \
    F(mosquitto_destroy) \
    F(mosquitto_disconnect) \
    F(mosquitto_lib_init) \
    F(mosquitto_loop) \
    F(mosquitto_message_callback_set) \
    F(mosquitto_new) \
    F(mosquitto_publish) \
    F(mosquitto_publish_callback_set) \
    F(mosquitto_strerror) \
    F(mosquitto_subscribe) \
    F(mosquitto_threaded_set) \
    F(mosquitto_tls_set) \
    F(mosquitto_user_data_set) \
    F(mosquitto_username_pw_set) \
    F(mosquitto_will_set)

#define RECD_MOSQUITTO_FIELD(name) __typeof__(name) *_Nonnull name;
/// The libmosquitto functions recd uses, each field named after its function.
typedef struct recd_mosquitto {
    RECD_MOSQUITTO_FUNCTIONS(RECD_MOSQUITTO_FIELD)
} recd_mosquitto;
#undef RECD_MOSQUITTO_FIELD

/// Loads libmosquitto.so.1 once, thread-safely, and calls mosquitto_lib_init. Returns the
/// table, or NULL with `*error` set to dlopen's or dlsym's message.
const recd_mosquitto *_Nullable recd_mosquitto_load(const char *_Nullable *_Nonnull error);
#endif
