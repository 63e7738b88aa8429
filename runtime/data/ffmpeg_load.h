/* runtime/data/ffmpeg_load.h — FFmpeg's libraries (libavformat, libavcodec,
 * libavutil, libswscale) opened with dlopen on first use, so yolort runs
 * without them until a video is asked for (and the GPU bundle need not
 * carry them). Owns the loading and the function table only. */
#ifndef YOLOCC_FFMPEG_LOAD_H
#define YOLOCC_FFMPEG_LOAD_H
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>

/* every FFmpeg function video_io.c calls, by library */
#define FFMPEG_FUNCS(X)                                                                                                                                  \
    X(0, avformat_open_input) X(0, avformat_find_stream_info) X(0, av_find_best_stream) X(0, avformat_close_input) X(0, av_read_frame)                  \
    X(0, av_guess_frame_rate) X(0, avformat_alloc_output_context2) X(0, avformat_new_stream) X(0, avformat_write_header)                                \
    X(0, av_interleaved_write_frame) X(0, av_write_trailer) X(0, avio_open) X(0, avio_closep) X(0, avformat_free_context)                              \
    X(1, avcodec_alloc_context3) X(1, avcodec_parameters_to_context) X(1, avcodec_parameters_from_context) X(1, avcodec_open2)                        \
    X(1, avcodec_free_context) X(1, avcodec_send_packet) X(1, avcodec_receive_frame) X(1, avcodec_send_frame) X(1, avcodec_receive_packet)           \
    X(1, avcodec_find_encoder) X(1, av_packet_alloc) X(1, av_packet_free) X(1, av_packet_unref) X(1, av_packet_rescale_ts)                            \
    X(2, av_log_set_level) X(2, av_strerror) X(2, av_frame_alloc) X(2, av_frame_free) X(2, av_frame_unref) X(2, av_frame_get_buffer)                \
    X(2, av_frame_make_writable)                                                                                                                      \
    X(3, sws_getContext) X(3, sws_getCachedContext) X(3, sws_scale) X(3, sws_freeContext)

typedef struct FFmpeg {
#define FFMPEG_FIELD(lib, fn) __typeof__(fn) *fn;
    FFMPEG_FUNCS(FFMPEG_FIELD)
#undef FFMPEG_FIELD
} FFmpeg;

/* The table, loaded once (thread-safe); NULL with err naming the library
 * or symbol that is missing (install FFmpeg's runtime libraries). */
const FFmpeg *ffmpeg_load(char *err, int errcap);

#endif
