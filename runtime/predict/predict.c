/* runtime/predict/predict.c — `yolort predict`: sources, letterbox, the
 * eval-mode model batch by batch (eval_model.c), NMS, boxes mapped back to the
 * original pixels, and the outputs Ultralytics' predictor writes. Must not
 * touch the training step or a dataset's labels. */
#include "predict.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../ir/diag.h"
#include "../data/augment.h"
#include "../data/dataset.h"
#include "../data/image_io.h"
#include "../data/video_io.h"
#include "../train/metrics.h"
#include "../train/report.h"
#include "../train/trainer.h"
#include "annotate.h"
#include "crop.h"
#include "eval_model.h"
#include "eval_shape.h"
#include "sources.h"

void predict_args_defaults(PredictArgs *a) {
    *a = (PredictArgs){.project = "runs/detect", .name = "predict", .conf = 0.25, .iou = 0.7, .max_det = 300, .vid_stride = 1, .save = true, .rect = true};
}

/* The image letterboxed to w x h as planar bytes for the model. */
static bool preprocess(const Image *orig, int h, int w, uint8_t *planar, char *err, int errcap) {
    Image lb;
    if (!letterbox(orig, NULL, w, h, true, &lb, NULL)) return errf(err, errcap, "out of memory letterboxing");
    size_t plane = (size_t)h * (size_t)w;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) planar[(size_t)c * plane + i] = lb.px[i * 3 + (size_t)c];
    image_free(&lb);
    return true;
}

/* Ultralytics' scale_boxes without ratio_pad: gain and padding computed from
 * the two shapes (the padding rounded from the unrounded scaled size, which
 * can differ by a pixel from the letterbox's), then clipped. */
static void to_original(Detection *d, int n, int h, int w, int w0, int h0) {
    double gain = fmin((double)h / h0, (double)w / w0);
    float pad_x = (float)nearbyint((w - w0 * gain) / 2 - 0.1), pad_y = (float)nearbyint((h - h0 * gain) / 2 - 0.1);
    metrics_dets_to_original(d, n, (float)gain, pad_x, pad_y, w0, h0);
}

/* predictor.write_results' txt_path (predict.h) */
void predict_output_stem(char *out, size_t cap, const char *src, int frame) {
    const char *b = dataset_file_name(src), *dot = strrchr(b, '.');
    int len = (int)(dot && dot != b ? dot - b : (long)strlen(b));
    if (frame > 0) snprintf(out, cap, "%.*s_%d", len, b, frame);
    else snprintf(out, cap, "%.*s", len, b);
}

bool predict_save_txt(const char *labels, const char *stem, const Detection *d, int n, int w0, int h0, bool save_conf, char *err, int errcap) {
    if (n == 0) return true;
    char path[2200];
    snprintf(path, sizeof path, "%s/%s.txt", labels, stem);
    FILE *f = fopen(path, "a");
    if (!f) return errf(err, errcap, "cannot write %s: %s", path, strerror(errno));
    for (int i = 0; i < n; i++) {
        /* xyxy2xywh, then divided by the original size, in float32 as torch does */
        float cx = (d[i].x1 + d[i].x2) / 2 / (float)w0, cy = (d[i].y1 + d[i].y2) / 2 / (float)h0;
        float w = (d[i].x2 - d[i].x1) / (float)w0, h = (d[i].y2 - d[i].y1) / (float)h0;
        fprintf(f, "%d %g %g %g %g", d[i].cls, (double)cx, (double)cy, (double)w, (double)h);
        if (save_conf) fprintf(f, " %g", (double)d[i].score);
        fputc('\n', f);
    }
    if (fclose(f) != 0) return errf(err, errcap, "cannot write %s: %s", path, strerror(errno));
    return true;
}

/* the annotated image as STEM.jpg, whatever the source's format (Ultralytics' save_predicted_images; cv2's quality 95) */
static bool save_image(const char *dir, const char *stem, const Image *im, char *err, int errcap) {
    char path[2600];
    snprintf(path, sizeof path, "%s/%s.jpg", dir, stem);
    return image_write_jpeg(path, im, 95, err, errcap);
}

/* Result.verbose(): "2 persons, 1 bus, " or "(no detections), " */
static void describe(const Detection *d, int n, int nc, char *const *names, char *out, size_t cap) {
    size_t len = 0;
    out[0] = 0;
    if (n == 0) {
        snprintf(out, cap, "(no detections), ");
        return;
    }
    for (int c = 0; c < nc; c++) {
        int k = 0;
        for (int i = 0; i < n; i++) k += d[i].cls == c;
        if (k && len < cap) len += (size_t)snprintf(out + len, cap - len, "%d %s%s, ", k, names[c], k > 1 ? "s" : "");
    }
}

/* The detections of the kept classes, in order; returns how many. */
static int keep_classes(Detection *d, int n, const unsigned char *keep) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (keep[d[i].cls]) d[k++] = d[i];
    return k;
}

/* --classes "0,2" into one flag per class; false with err on a bad list */
static bool parse_classes(const char *list, int nc, unsigned char *keep, char *err, int errcap) {
    const char *p = list;
    for (;;) {
        char *end;
        errno = 0;
        long c = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ','))
            return errf(err, errcap, "--classes must be class indices separated by commas (e.g. 0,2), got '%s'", list);
        if (c < 0 || c >= nc) return errf(err, errcap, "--classes: %ld is not a class of the model (0..%d)", c, nc - 1);
        keep[c] = 1;
        if (!*end) return true;
        p = end + 1;
    }
}

/* One picture the model sees: an image file, or frame `frame` (from 1) of a video. */
typedef struct Item {
    int src, frame, frames, fps; /* frames, fps: the video's count and rate as reported */
    Image im;
} Item;

typedef struct Run {
    const PredictArgs *a;
    NmsOptions nms;
    unsigned char *keep;    /* per class: --classes keeps it (NULL: all kept) */
    EvalModel m;
    int batch, square, stride;  /* pictures per inference; the plan's image size; the letterbox's stride multiple (rect) */
    bool rect;              /* rect letterboxes (unless --no-rect) */
    Sources src;
    char dir[1100], labels[1200], crops[1200];   /* the run directory, its labels/ and crops/ */
    uint8_t *pixels;
    Detection *dets;
    Item *items;            /* a batch */
    double t_pre, t_inf, t_post;
    int labels_written, seen;
    /* LoadImagesAndVideos' cursor: the file it is at, and the open video's state */
    int count;
    VideoReader *cap;
    int frame, frames, fps;   /* frames read, and the count and rate it reports */
    /* the annotated video being written and its path */
    VideoWriter *out;
    char out_path[1800];
    char frames_dir[1800];  /* --save-frames: the open video's NAME_frames */
} Run;

/* LoadImagesAndVideos.__next__: up to a batch of pictures; images and
 * videos never share one (a batch of images ends with the last image), the
 * frames of consecutive videos do. A video gives every vid_stride-th frame
 * and ends when its reported frame count (over vid_stride) is reached or
 * its stream ends. -1 with err (and nothing held) on a failure. */
static int next_batch(Run *r, double *t_decode, char *err, int errcap) {
    int n = 0;
    const int bs = r->batch, stride = r->a->vid_stride > 0 ? r->a->vid_stride : 1;
    double t0 = monotonic_seconds();
    while (n < bs && r->count < r->src.n) {
        const char *path = r->src.path[r->count];
        Item *it = &r->items[n];
        if (r->count >= r->src.n_images) {
            int w, h;
            if (!r->cap) {
                if (!(r->cap = video_open(path, &w, &h, &r->fps, &r->frames, err, errcap))) goto fail;
                r->frames /= stride; /* int(CAP_PROP_FRAME_COUNT / vid_stride) */
            }
            /* vid_stride frames read, the last kept; a stream that ends within them ends the video */
            int got = 1;
            for (int k = 0; k < stride && got == 1; k++) {
                if (k) image_free(&it->im);
                if ((got = video_read(r->cap, &it->im, err, errcap)) < 0) goto fail;
            }
            if (got == 1) {
                it->src = r->count, it->frame = ++r->frame, it->frames = r->frames, it->fps = r->fps;
                n++;
            } else {
                image_free(&it->im);
            }
            if (got == 0 || r->frame == r->frames) {
                video_close(r->cap);
                r->cap = NULL;
                r->frame = 0;
                r->count++;
            }
        } else {
            if (!image_load(path, &it->im, err, errcap)) goto fail;
            it->src = r->count++, it->frame = it->frames = it->fps = 0;
            n++;
            if (r->count >= r->src.n_images) break;
        }
    }
    *t_decode = monotonic_seconds() - t0;
    return n;
fail:
    for (int j = 0; j < n; j++) image_free(&r->items[j].im);
    return -1;
}

/* The annotated frame appended to SAVE_DIR/NAME.avi (the source's name,
 * its extension replaced), a Motion JPEG AVI at the video's rate, as
 * Ultralytics writes videos on Linux; a new path closes the last file.
 * --save-frames: also SAVE_DIR/NAME_frames/FRAME_STEM.jpg (its save_frames). */
static bool save_frame(Run *r, const char *src, const char *frame_stem, const Image *im, int fps, char *err, int errcap) {
    char stem[600], path[1800];
    predict_output_stem(stem, sizeof stem, src, 0);
    snprintf(path, sizeof path, "%s/%s.avi", r->dir, stem);
    if (!r->out || strcmp(path, r->out_path) != 0) {
        if (!video_writer_close(r->out, err, errcap)) return r->out = NULL, false;
        if (!(r->out = video_writer_open(path, im->w, im->h, fps, err, errcap))) return false;
        snprintf(r->out_path, sizeof r->out_path, "%s", path);
        snprintf(r->frames_dir, sizeof r->frames_dir, "%s/%s_frames", r->dir, stem);
        if (r->a->save_frames && !report_make_dir(r->frames_dir, err, errcap)) return false;
    }
    return video_writer_put(r->out, im, err, errcap) && (!r->a->save_frames || save_image(r->frames_dir, frame_stem, im, err, errcap));
}

/* The input shape of a batch: Ultralytics' LetterBox(auto) size when rect is
 * on and every picture has one size (its same_shapes), else the square plan size. */
static void batch_shape(const Run *r, int count, int *h, int *w) {
    const int S = r->square;
    *h = *w = S;
    bool same = r->rect;
    for (int j = 1; same && j < count; j++) same = r->items[j].im.w == r->items[0].im.w && r->items[j].im.h == r->items[0].im.h;
    if (!same) return;
    /* LetterBox(auto=True): the scaled size rounded up to the stride */
    const LetterboxGeom g = letterbox_geom(r->items[0].im.w, r->items[0].im.h, S, S, true);
    *w = (g.new_w + r->stride - 1) / r->stride * r->stride;
    *h = (g.new_h + r->stride - 1) / r->stride * r->stride;
}

static bool predict_batch(Run *r, int count, double t_decode, char *err, int errcap) {
    const EvalModel *m = &r->m;
    int H, W;
    batch_shape(r, count, &H, &W);
    /* a shape's first batch builds its graph: set-up, like the predictor's warm-up, not preprocessing */
    if (!eval_model_shape(&r->m, r->batch, H, W, err, errcap)) return false;
    double t0 = monotonic_seconds();
    const int rows = 4 + m->io.nc;
    const size_t img_bytes = 3 * (size_t)H * (size_t)W;
    memset(r->pixels, 114, img_bytes * (size_t)m->io.batch);
    for (int j = 0; j < count; j++)
        if (!preprocess(&r->items[j].im, H, W, r->pixels + (size_t)j * img_bytes, err, errcap)) return false;
    double t1 = monotonic_seconds();
    if (!eval_model_run(&r->m, r->pixels, NULL, NULL, err, errcap)) return false;
    double t2 = monotonic_seconds(), post = 0;
    for (int j = 0; j < count; j++) {
        double p0 = monotonic_seconds();
        const float *p = m->pred + (size_t)j * (size_t)rows * (size_t)m->io.anchors;
        int n = m->io.end2end ? e2e_image(p, m->io.anchors, m->io.nc, r->a->conf, r->a->max_det, r->dets) : nms_image(p, m->io.anchors, m->io.nc, &r->nms, r->dets);
        if (n < 0) return errf(err, errcap, "selecting detections failed (out of memory)");
        if (m->io.end2end && r->keep) n = keep_classes(r->dets, n, r->keep); /* after conf and max_det, as Ultralytics' end-to-end branch */
        const Item *it = &r->items[j];
        const char *path = r->src.path[it->src];
        Image *im = &r->items[j].im;
        to_original(r->dets, n, H, W, im->w, im->h);
        post += monotonic_seconds() - p0;
        char line[4096], stem[600];
        describe(r->dets, n, m->io.nc, r->m.names, line, sizeof line);
        if (it->frame) printf("video %d/%d (frame %d/%d) %s: %dx%d %s%.1fms\n", it->src + 1, r->src.n, it->frame, it->frames, path, H, W, line, (t2 - t1) * 1e3 / count);
        else printf("image %d/%d %s: %dx%d %s%.1fms\n", it->src + 1, r->src.n, path, H, W, line, (t2 - t1) * 1e3 / count);
        predict_output_stem(stem, sizeof stem, path, it->frame);
        if (r->a->save_txt) {
            if (!predict_save_txt(r->labels, stem, r->dets, n, im->w, im->h, r->a->save_conf, err, errcap)) return false;
            r->labels_written += n > 0;
        }
        /* crops from the unannotated image, as Results.save_crop copies orig_img */
        for (int q = 0; r->a->save_crop && q < n; q++)
            if (!crop_save(r->crops, r->m.names[r->dets[q].cls], stem, im, &r->dets[q], err, errcap)) return false;
        if (r->a->save) {
            if (!annotate_detections(im, r->dets, n, (const char *const *)r->m.names, &(AnnotateStyle){.conf_digits = 2}, err, errcap)) return false;
            if (!(it->frame ? save_frame(r, path, stem, im, it->fps, err, errcap) : save_image(r->dir, stem, im, err, errcap))) return false;
        }
    }
    fflush(stdout);
    r->t_pre += t_decode + t1 - t0, r->t_inf += t2 - t1, r->t_post += post;
    r->seen += count;
    return true;
}

/* Every source must be a readable image or video before anything is written. */
static bool probe_sources(const Sources *s, char *err, int errcap) {
    for (int i = 0; i < s->n; i++) {
        int w, h, fps, frames;
        if (i < s->n_images) {
            if (!image_probe(s->path[i], &w, &h, err, errcap)) return false;
            continue;
        }
        VideoReader *v = video_open(s->path[i], &w, &h, &fps, &frames, err, errcap);
        if (!v) return false;
        video_close(v);
    }
    return true;
}

int predict_main(const PredictArgs *a) {
    Run r = {.a = a};
    char err[2048], report[512];
    int rc = 2;
    if (!sources_list(a->source, &r.src, err, sizeof err) || !probe_sources(&r.src, err, sizeof err)) goto fail;
    if (!eval_model_open(&r.m, a->plan, a->weights, a->reference, report, sizeof report, err, sizeof err)) goto fail;
    printf("%s\n", report);
    /* as `yolo predict` runs a .pt model, on the CPU and on a GPU: rect letterboxes, batch 1 unless asked */
    r.square = r.m.io.imgsz, r.stride = eval_plan_stride(&r.m.plan);
    r.rect = a->rect;
    r.batch = a->batch > 0 ? a->batch : 1;
    if (!(r.pixels = malloc(3 * (size_t)r.square * (size_t)r.square * (size_t)r.batch)) ||
        !(r.dets = malloc(sizeof(Detection) * (size_t)(a->max_det > 0 ? a->max_det : 1))) || !(r.items = calloc((size_t)r.batch, sizeof *r.items))) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    r.nms = (NmsOptions){.conf = a->conf, .iou = a->iou, .max_det = a->max_det, .agnostic = a->agnostic_nms};
    if (a->classes) {
        if (!(r.keep = calloc((size_t)r.m.io.nc, 1))) {
            snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
        if (!parse_classes(a->classes, r.m.io.nc, r.keep, err, sizeof err)) goto fail;
        r.nms.classes = r.keep;
    }
    rc = 1;
    const bool any_files = a->save || a->save_txt || a->save_crop;
    if (any_files) {
        if (!report_run_dir(a->project, a->name, a->exist_ok, r.dir, sizeof r.dir, err, sizeof err)) goto fail;
        snprintf(r.labels, sizeof r.labels, "%s/labels", r.dir);
        snprintf(r.crops, sizeof r.crops, "%s/crops", r.dir);
        if (a->save_txt && !report_make_dir(r.labels, err, sizeof err)) goto fail;
        if (a->save_crop && !report_make_dir(r.crops, err, sizeof err)) goto fail;
    }
    for (;;) {
        double t_decode = 0;
        int count = next_batch(&r, &t_decode, err, sizeof err);
        bool ok = count >= 0 && (count == 0 || predict_batch(&r, count, t_decode, err, sizeof err));
        for (int j = 0; j < count; j++) image_free(&r.items[j].im);
        if (!ok) goto fail;
        if (count == 0) break;
    }
    VideoWriter *out = r.out;
    r.out = NULL;
    if (!video_writer_close(out, err, sizeof err)) goto fail;
    const int seen = r.seen > 0 ? r.seen : 1;
    printf("Speed: %.1fms preprocess, %.1fms inference, %.1fms postprocess per image at shape (%d, 3, %d, %d)\n", r.t_pre * 1e3 / seen,
           r.t_inf * 1e3 / seen, r.t_post * 1e3 / seen, r.batch < seen ? r.batch : seen, r.m.io.h, r.m.io.w);
    if (any_files) {
        printf("Results saved to %s\n", r.dir);
        if (a->save_txt) printf("%d label%s saved to %s\n", r.labels_written, r.labels_written > 1 ? "s" : "", r.labels);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "yolort: error: %s\n", err);
    char ignored[256]; /* after a failure: the file keeps what was written; err keeps the failure */
    video_writer_close(r.out, ignored, sizeof ignored);
    video_close(r.cap);
    free(r.items);
    free(r.pixels);
    free(r.dets);
    free(r.keep);
    eval_model_close(&r.m);
    sources_free(&r.src);
    return rc;
}
