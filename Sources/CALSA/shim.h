#ifndef RECD_CALSA_SHIM_H
#define RECD_CALSA_SHIM_H
#include <alsa/asoundlib.h>
#endif
