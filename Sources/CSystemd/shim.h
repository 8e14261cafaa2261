#ifndef RECD_CSYSTEMD_SHIM_H
#define RECD_CSYSTEMD_SHIM_H
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#include <systemd/sd-bus.h>
#endif
