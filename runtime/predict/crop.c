/* runtime/predict/crop.c — Ultralytics' save_one_box (gain 1.02, pad 10,
 * not square) and its file names under RUN/crops. Must not change the
 * detections or the image it cuts from. */
#include "crop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../ir/diag.h"
#include "../data/image_io.h"
#include "../train/report.h"

static int clamp_int(long v, int hi) { return v < 0 ? 0 : v > hi ? hi : (int)v; }

void crop_rect(const Detection *d, int w, int h, int r[4]) {
    /* xyxy2xywh, wh * 1.02 + 10, xywh2xyxy: float32 tensor arithmetic with
     * the Python scalars rounded to float32 */
    float cx = (d->x1 + d->x2) / 2, cy = (d->y1 + d->y2) / 2;
    float bw = (d->x2 - d->x1) * 1.02f + 10.0f, bh = (d->y2 - d->y1) * 1.02f + 10.0f;
    float hw = bw / 2, hh = bh / 2;
    /* .long() truncates toward zero; clip_boxes clamps to [0, w] and [0, h] */
    r[0] = clamp_int((long)(cx - hw), w);
    r[1] = clamp_int((long)(cy - hh), h);
    r[2] = clamp_int((long)(cx + hw), w);
    r[3] = clamp_int((long)(cy + hh), h);
}

/* save_crop's file name is Path(txt_path.stem).with_suffix(".jpg"): the
 * label file's stem cut once more at its last dot (pathlib: a leading dot
 * starts no suffix) */
static void crop_stem(const char *label_stem, char *out, size_t cap) {
    snprintf(out, cap, "%s", label_stem);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

bool crop_save(const char *crops, const char *name, const char *label_stem, const Image *im, const Detection *d, char *err, int errcap) {
    int r[4];
    crop_rect(d, im->w, im->h, r);
    if (r[2] <= r[0] || r[3] <= r[1]) return true;
    char dir[1400], stem[512], path[2000];
    snprintf(dir, sizeof dir, "%s/%s", crops, name);
    if (!report_make_dir(dir, err, errcap)) return false;
    crop_stem(label_stem, stem, sizeof stem);
    snprintf(path, sizeof path, "%s/%s.jpg", dir, stem);
    for (int n = 2; exists(path); n++) {
        if (n >= 9999) return errf(err, errcap, "%s: no free name %s/%s2.jpg ... %s9998.jpg", dir, dir, stem, stem);
        snprintf(path, sizeof path, "%s/%s%d.jpg", dir, stem, n);
    }
    Image c = {.w = r[2] - r[0], .h = r[3] - r[1]};
    if (!(c.px = malloc((size_t)c.w * (size_t)c.h * 3))) return errf(err, errcap, "out of memory for a %dx%d crop", c.w, c.h);
    for (int y = 0; y < c.h; y++) memcpy(c.px + (size_t)y * (size_t)c.w * 3, im->px + ((size_t)(r[1] + y) * (size_t)im->w + (size_t)r[0]) * 3, (size_t)c.w * 3);
    bool ok = image_write_jpeg_444(path, &c, 95, err, errcap);
    free(c.px);
    return ok;
}
