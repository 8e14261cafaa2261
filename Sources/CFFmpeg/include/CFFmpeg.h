#ifndef RECD_CFFMPEG_H
#define RECD_CFFMPEG_H
// FFmpeg's libavformat, libavcodec and libavutil, loaded on first use (dlopen) rather than
// linked: with their ~130 dependencies (x264, x265, gnutls, librsvg, ...) they would add about
// 20 MiB to the resident memory of every recd, also of the many that never write an .m4a file.
//
// Swift calls FFmpeg only through the table `recd_ffmpeg_load()` returns; calling a function
// directly fails at link time, on purpose.
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/opt.h>
#include <libavutil/tx.h>

// Every FFmpeg function recd uses: F(library, name).
#define RECD_FFMPEG_FUNCTIONS(F) \
    F(avutil, av_channel_layout_copy) \
    F(avutil, av_channel_layout_default) \
    F(avutil, av_dict_copy) \
    F(avutil, av_dict_free) \
    F(avutil, av_dict_get) \
    F(avutil, av_dict_set) \
    F(avutil, av_frame_alloc) \
    F(avutil, av_frame_free) \
    F(avutil, av_frame_get_buffer) \
    F(avutil, av_frame_make_writable) \
    F(avutil, av_log_set_level) \
    F(avutil, av_strerror) \
    F(avcodec, av_packet_alloc) \
    F(avcodec, av_packet_free) \
    F(avcodec, av_packet_move_ref) \
    F(avcodec, av_packet_rescale_ts) \
    F(avcodec, av_packet_unref) \
    F(avcodec, avcodec_alloc_context3) \
    F(avcodec, avcodec_find_encoder_by_name) \
    F(avcodec, avcodec_free_context) \
    F(avcodec, avcodec_get_name) \
    F(avcodec, avcodec_open2) \
    F(avcodec, avcodec_parameters_copy) \
    F(avcodec, avcodec_parameters_from_context) \
    F(avcodec, avcodec_parameters_to_context) \
    F(avcodec, avcodec_receive_frame) \
    F(avcodec, avcodec_receive_packet) \
    F(avcodec, avcodec_send_frame) \
    F(avcodec, avcodec_send_packet) \
    F(avformat, av_find_best_stream) \
    F(avformat, av_read_frame) \
    F(avformat, av_write_frame) \
    F(avformat, av_write_trailer) \
    F(avformat, avformat_alloc_output_context2) \
    F(avformat, avformat_close_input) \
    F(avformat, avformat_find_stream_info) \
    F(avformat, avformat_free_context) \
    F(avformat, avformat_new_stream) \
    F(avformat, avformat_open_input) \
    F(avformat, avformat_write_header) \
    F(avformat, avio_closep) \
    F(avformat, avio_flush) \
    F(avformat, avio_open) \
    F(avformat, avio_seek)

#define RECD_FFMPEG_FIELD(library, name) __typeof__(name) *_Nonnull name;
/// The FFmpeg functions recd uses, each field named after its function.
typedef struct recd_ffmpeg {
    RECD_FFMPEG_FUNCTIONS(RECD_FFMPEG_FIELD)
} recd_ffmpeg;
#undef RECD_FFMPEG_FIELD

/// Loads the three libraries (the sonames of the headers recd was built with) once, thread-safely.
/// Returns the table, or NULL with `*error` set to dlopen's or dlsym's message.
const recd_ffmpeg *_Nullable recd_ffmpeg_load(const char *_Nullable *_Nonnull error);

// libavutil's transforms (the spectrum's FFT), loaded apart from the rest: a daemon that draws a
// spectrum and never writes .m4a loads libavutil alone (about 3 MiB, mostly shared pages), not
// the codecs.
#define RECD_AVUTIL_TX_FUNCTIONS(F) \
    F(avutil, av_tx_init) \
    F(avutil, av_tx_uninit)

#define RECD_AVUTIL_TX_FIELD(library, name) __typeof__(name) *_Nonnull name;
/// The transform functions, each field named after its function.
typedef struct recd_avutil_tx {
    RECD_AVUTIL_TX_FUNCTIONS(RECD_AVUTIL_TX_FIELD)
} recd_avutil_tx;
#undef RECD_AVUTIL_TX_FIELD

/// Loads libavutil alone (once, thread-safely) and returns its transform functions, or NULL
/// with `*error` set to dlopen's or dlsym's message.
const recd_avutil_tx *_Nullable recd_avutil_tx_load(const char *_Nullable *_Nonnull error);

// Macros Swift cannot import.
static inline int recd_averror_eof(void) { return AVERROR_EOF; }
static inline int recd_averror(int errnum) { return AVERROR(errnum); }
static inline int64_t recd_av_nopts_value(void) { return AV_NOPTS_VALUE; }
static inline int recd_codec_flag_global_header(void) { return AV_CODEC_FLAG_GLOBAL_HEADER; }
#endif
