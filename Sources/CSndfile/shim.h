#ifndef RECD_CSNDFILE_SHIM_H
#define RECD_CSNDFILE_SHIM_H
#include <sndfile.h>
#include <string.h>

/* SF_BROADCAST_INFO's fields are fixed-width char arrays (imported into Swift as tuples):
 * filled here. A field that fills its width has no terminating NUL, as BWF allows. */
static inline int recd_sf_set_broadcast_info(SNDFILE *file, const char *description, const char *originator,
                                             const char *originator_reference, const char *date, const char *time,
                                             unsigned long long time_reference) {
    SF_BROADCAST_INFO info;
    memset(&info, 0, sizeof info);
    strncpy(info.description, description, sizeof info.description);
    strncpy(info.originator, originator, sizeof info.originator);
    strncpy(info.originator_reference, originator_reference, sizeof info.originator_reference);
    strncpy(info.origination_date, date, sizeof info.origination_date);
    strncpy(info.origination_time, time, sizeof info.origination_time);
    info.time_reference_low = (uint32_t)(time_reference & 0xFFFFFFFFu);
    info.time_reference_high = (uint32_t)(time_reference >> 32);
    info.version = 2;
    return sf_command(file, SFC_SET_BROADCAST_INFO, &info, sizeof info);
}

/* The fields recd reads back; strings are NUL-terminated copies. */
typedef struct {
    char description[257];
    char originator[33];
    char originator_reference[33];
    char origination_date[11];
    char origination_time[9];
    unsigned long long time_reference;
} recd_broadcast_fields;

static inline int recd_sf_get_broadcast_info(SNDFILE *file, recd_broadcast_fields *fields) {
    SF_BROADCAST_INFO info;
    memset(&info, 0, sizeof info);
    memset(fields, 0, sizeof *fields);
    if (sf_command(file, SFC_GET_BROADCAST_INFO, &info, sizeof info) != SF_TRUE) return 0;
    memcpy(fields->description, info.description, sizeof info.description);
    memcpy(fields->originator, info.originator, sizeof info.originator);
    memcpy(fields->originator_reference, info.originator_reference, sizeof info.originator_reference);
    memcpy(fields->origination_date, info.origination_date, sizeof info.origination_date);
    memcpy(fields->origination_time, info.origination_time, sizeof info.origination_time);
    fields->time_reference = ((unsigned long long)info.time_reference_high << 32) | info.time_reference_low;
    return 1;
}
#endif
