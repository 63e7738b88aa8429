/* runtime/data/video_io.c — decoding and encoding video with FFmpeg's
 * libraries, matching what OpenCV's FFmpeg backend does for Ultralytics:
 * frames converted by libswscale to BGR24 with SWS_BICUBIC (then reordered
 * to RGB, so the pixels are OpenCV's), the frame count and rate read as
 * OpenCV reads them; output as MJPEG in AVI. Must not letterbox or know
 * about models. FFmpeg's own log is silenced: every failure comes back as
 * one error message. */
#include "video_io.h"

#include <math.h>
#include <string.h>

#include "../../ir/diag.h"
#include "ffmpeg_load.h"

/* FFmpeg's functions, loaded by the first open (ffmpeg_load) */
static const FFmpeg *F;

/* Loads FFmpeg and silences its log; false with err when it is missing. */
static bool ffmpeg_ready(char *err, int errcap) {
    if (!(F = ffmpeg_load(err, errcap))) return false;
    F->av_log_set_level(AV_LOG_QUIET);
    return true;
}

static bool av_fail(char *err, int errcap, const char *path, const char *what, int code) {
    char why[AV_ERROR_MAX_STRING_SIZE] = "";
    F->av_strerror(code, why, sizeof why);
    return errf(err, errcap, "%s: %s: %s", path, what, why);
}

struct VideoReader {
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVFrame *frame;
    AVPacket *pkt;
    struct SwsContext *sws;
    int stream, w, h;
    bool flushed;
    char path[1024];
};

void video_close(VideoReader *v) {
    if (!v) return;
    F->sws_freeContext(v->sws);
    F->av_packet_free(&v->pkt);
    F->av_frame_free(&v->frame);
    F->avcodec_free_context(&v->dec);
    F->avformat_close_input(&v->fmt);
    free(v);
}

VideoReader *video_open(const char *path, int *w, int *h, int *fps, int *frames, char *err, int errcap) {
    if (!ffmpeg_ready(err, errcap)) return NULL;
    VideoReader *v = calloc(1, sizeof *v);
    if (!v) return errf(err, errcap, "out of memory"), NULL;
    snprintf(v->path, sizeof v->path, "%s", path);
    const AVCodec *codec = NULL;
    int rc = F->avformat_open_input(&v->fmt, path, NULL, NULL);
    if (rc < 0) goto fail_open;
    if ((rc = F->avformat_find_stream_info(v->fmt, NULL)) < 0) goto fail_open;
    if ((rc = v->stream = F->av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0)) < 0) {
        errf(err, errcap, "%s: no video stream that FFmpeg can decode", path);
        goto fail;
    }
    AVStream *st = v->fmt->streams[v->stream];
    if (!(v->dec = F->avcodec_alloc_context3(codec)) || !(v->frame = F->av_frame_alloc()) || !(v->pkt = F->av_packet_alloc())) {
        errf(err, errcap, "out of memory");
        goto fail;
    }
    if ((rc = F->avcodec_parameters_to_context(v->dec, st->codecpar)) < 0 || (rc = F->avcodec_open2(v->dec, codec, NULL)) < 0) {
        av_fail(err, errcap, path, "cannot open its video decoder", rc);
        goto fail;
    }
    v->w = v->dec->width, v->h = v->dec->height;
    if (v->w < 1 || v->h < 1 || v->w > 65500 || v->h > 65500) {
        errf(err, errcap, "%s: video frames of %dx%d", path, v->w, v->h);
        goto fail;
    }
    /* OpenCV: the rate av_guess_frame_rate gives; the count from the
     * container, else floor(duration x rate + 0.5) */
    double rate = av_q2d(F->av_guess_frame_rate(v->fmt, st, NULL));
    double sec = v->fmt->duration != AV_NOPTS_VALUE ? (double)v->fmt->duration / AV_TIME_BASE : 0;
    if (sec < 1e-6 && st->duration != AV_NOPTS_VALUE) sec = (double)st->duration * av_q2d(st->time_base);
    int64_t count = st->nb_frames > 0 ? st->nb_frames : (int64_t)floor(sec * rate + 0.5);
    *w = v->w, *h = v->h, *fps = (int)rate, *frames = count > 0 && count < (1 << 30) ? (int)count : 0;
    return v;
fail_open:
    av_fail(err, errcap, path, "cannot read it as a video", rc);
fail:
    video_close(v);
    return NULL;
}

/* The decoded frame as RGB: libswscale to BGR24 as OpenCV asks for it, then the channels swapped. */
static int frame_to_rgb(VideoReader *v, Image *im, char *err, int errcap) {
    const AVFrame *f = v->frame;
    if (f->width != v->w || f->height != v->h) return errf(err, errcap, "%s: a frame of %dx%d in a %dx%d video", v->path, f->width, f->height, v->w, v->h), -1;
    v->sws = F->sws_getCachedContext(v->sws, v->w, v->h, f->format, v->w, v->h, AV_PIX_FMT_BGR24, SWS_BICUBIC, NULL, NULL, NULL);
    if (!v->sws) return errf(err, errcap, "%s: no conversion from its pixel format to BGR", v->path), -1;
    im->w = v->w, im->h = v->h;
    if (!(im->px = malloc((size_t)v->w * (size_t)v->h * 3))) return errf(err, errcap, "out of memory for a %dx%d frame", v->w, v->h), -1;
    uint8_t *dst[4] = {im->px};
    int stride[4] = {v->w * 3};
    F->sws_scale(v->sws, (const uint8_t *const *)f->data, f->linesize, 0, v->h, dst, stride);
    for (size_t i = 0, n = (size_t)v->w * (size_t)v->h; i < n; i++) {
        uint8_t b = im->px[3 * i];
        im->px[3 * i] = im->px[3 * i + 2];
        im->px[3 * i + 2] = b;
    }
    return 1;
}

int video_read(VideoReader *v, Image *im, char *err, int errcap) {
    for (;;) {
        int rc = F->avcodec_receive_frame(v->dec, v->frame);
        if (rc == 0) {
            int r = frame_to_rgb(v, im, err, errcap);
            F->av_frame_unref(v->frame);
            return r;
        }
        if (rc == AVERROR_EOF) return 0;
        if (rc != AVERROR(EAGAIN)) return av_fail(err, errcap, v->path, "cannot decode a frame", rc), -1;
        if (v->flushed) return 0;
        /* feed the decoder the stream's next packet; at the end, flush it */
        for (;;) {
            rc = F->av_read_frame(v->fmt, v->pkt);
            if (rc < 0) {
                if (rc != AVERROR_EOF) return av_fail(err, errcap, v->path, "cannot read a packet", rc), -1;
                v->flushed = true;
                rc = F->avcodec_send_packet(v->dec, NULL);
                break;
            }
            bool ours = v->pkt->stream_index == v->stream;
            if (ours) rc = F->avcodec_send_packet(v->dec, v->pkt);
            F->av_packet_unref(v->pkt);
            if (ours) break;
        }
        if (rc < 0 && rc != AVERROR_EOF) return av_fail(err, errcap, v->path, "cannot decode a packet", rc), -1;
    }
}

struct VideoWriter {
    AVFormatContext *fmt;
    AVCodecContext *enc;
    AVStream *st;
    AVFrame *frame;
    AVPacket *pkt;
    struct SwsContext *sws;
    int64_t next_pts;
    bool header;
    char path[1024];
};

/* Sends frame (NULL: flush) and writes every packet the encoder returns. */
static bool encode(VideoWriter *v, AVFrame *frame, char *err, int errcap) {
    int rc = F->avcodec_send_frame(v->enc, frame);
    if (rc < 0) return av_fail(err, errcap, v->path, "cannot encode a frame", rc);
    for (;;) {
        rc = F->avcodec_receive_packet(v->enc, v->pkt);
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return true;
        if (rc < 0) return av_fail(err, errcap, v->path, "cannot encode a frame", rc);
        F->av_packet_rescale_ts(v->pkt, v->enc->time_base, v->st->time_base);
        v->pkt->stream_index = v->st->index;
        rc = F->av_interleaved_write_frame(v->fmt, v->pkt);
        if (rc < 0) return av_fail(err, errcap, v->path, "cannot write a frame", rc);
    }
}

static void writer_free(VideoWriter *v) {
    F->sws_freeContext(v->sws);
    F->av_packet_free(&v->pkt);
    F->av_frame_free(&v->frame);
    F->avcodec_free_context(&v->enc);
    if (v->fmt) {
        if (v->fmt->pb) F->avio_closep(&v->fmt->pb);
        F->avformat_free_context(v->fmt);
    }
    free(v);
}

bool video_writer_close(VideoWriter *v, char *err, int errcap) {
    if (!v) return true;
    bool ok = !v->header || (encode(v, NULL, err, errcap) && (F->av_write_trailer(v->fmt) == 0 || errf(err, errcap, "%s: cannot finish the file", v->path)));
    writer_free(v);
    return ok;
}

VideoWriter *video_writer_open(const char *path, int w, int h, int fps, char *err, int errcap) {
    if (!ffmpeg_ready(err, errcap)) return NULL;
    VideoWriter *v = calloc(1, sizeof *v);
    if (!v) return errf(err, errcap, "out of memory"), NULL;
    snprintf(v->path, sizeof v->path, "%s", path);
    const AVCodec *codec = F->avcodec_find_encoder(AV_CODEC_ID_MJPEG);
    int rc;
    if (!codec) {
        errf(err, errcap, "%s: this FFmpeg has no MJPEG encoder", path);
        goto fail;
    }
    if ((rc = F->avformat_alloc_output_context2(&v->fmt, NULL, "avi", path)) < 0) {
        av_fail(err, errcap, path, "cannot make an AVI file", rc);
        goto fail;
    }
    if (!(v->st = F->avformat_new_stream(v->fmt, NULL)) || !(v->enc = F->avcodec_alloc_context3(codec)) || !(v->frame = F->av_frame_alloc()) ||
        !(v->pkt = F->av_packet_alloc())) {
        errf(err, errcap, "out of memory");
        goto fail;
    }
    if (fps < 1) fps = 30;
    v->enc->width = w, v->enc->height = h;
    v->enc->pix_fmt = AV_PIX_FMT_YUVJ420P;
    v->enc->time_base = (AVRational){1, fps};
    v->enc->framerate = (AVRational){fps, 1};
    v->enc->flags |= AV_CODEC_FLAG_QSCALE;
    v->enc->global_quality = FF_QP2LAMBDA * 3; /* high quality: q 3 of 2..31 */
    if (v->fmt->oformat->flags & AVFMT_GLOBALHEADER) v->enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if ((rc = F->avcodec_open2(v->enc, codec, NULL)) < 0 || (rc = F->avcodec_parameters_from_context(v->st->codecpar, v->enc)) < 0) {
        av_fail(err, errcap, path, "cannot open the MJPEG encoder", rc);
        goto fail;
    }
    v->st->time_base = v->enc->time_base;
    v->frame->format = v->enc->pix_fmt, v->frame->width = w, v->frame->height = h;
    if ((rc = F->av_frame_get_buffer(v->frame, 0)) < 0) {
        av_fail(err, errcap, path, "cannot allocate a frame", rc);
        goto fail;
    }
    if (!(v->sws = F->sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, AV_PIX_FMT_YUVJ420P, SWS_BICUBIC, NULL, NULL, NULL))) {
        errf(err, errcap, "%s: no conversion from RGB to YUV", path);
        goto fail;
    }
    if ((rc = F->avio_open(&v->fmt->pb, path, AVIO_FLAG_WRITE)) < 0) {
        av_fail(err, errcap, path, "cannot create it", rc);
        goto fail;
    }
    if ((rc = F->avformat_write_header(v->fmt, NULL)) < 0) {
        av_fail(err, errcap, path, "cannot write the AVI header", rc);
        goto fail;
    }
    v->header = true;
    return v;
fail:
    writer_free(v);
    return NULL;
}

bool video_writer_put(VideoWriter *v, const Image *im, char *err, int errcap) {
    if (im->w != v->enc->width || im->h != v->enc->height)
        return errf(err, errcap, "%s: a %dx%d frame for a %dx%d video", v->path, im->w, im->h, v->enc->width, v->enc->height);
    int rc = F->av_frame_make_writable(v->frame);
    if (rc < 0) return av_fail(err, errcap, v->path, "cannot reuse its frame", rc);
    const uint8_t *src[4] = {im->px};
    int stride[4] = {im->w * 3};
    F->sws_scale(v->sws, src, stride, 0, im->h, v->frame->data, v->frame->linesize);
    v->frame->pts = v->next_pts++;
    v->frame->quality = v->enc->global_quality;
    return encode(v, v->frame, err, errcap);
}
