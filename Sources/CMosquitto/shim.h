#ifndef RECD_CMOSQUITTO_SHIM_H
#define RECD_CMOSQUITTO_SHIM_H
#include <mosquitto.h>
#endif
