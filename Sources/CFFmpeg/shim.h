#ifndef RECD_CFFMPEG_SHIM_H
#define RECD_CFFMPEG_SHIM_H
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/opt.h>

// Macros Swift cannot import.
static inline int recd_averror_eof(void) { return AVERROR_EOF; }
static inline int recd_averror(int errnum) { return AVERROR(errnum); }
static inline int64_t recd_av_nopts_value(void) { return AV_NOPTS_VALUE; }
static inline int recd_codec_flag_global_header(void) { return AV_CODEC_FLAG_GLOBAL_HEADER; }
#endif
