/* runtime/train/report_batches.c — Ultralytics' plot_images for a loader
 * batch (see report_batches.h). Owns the mosaic only; the drawing of boxes
 * is annotate.c's, the JPEG writing image_io.c's. */
#include "report_batches.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../data/augment.h"
#include "../data/image_io.h"
#include "../predict/annotate.h"

static uint8_t pixel(const Batch *b, int img, int c, size_t at, size_t plane) {
    const size_t off = ((size_t)img * 3 + (size_t)c) * plane + at;
    if (b->bytes) return b->bytes[off];
    const float v = b->images[off] * 255.0f;   /* value / 255 exactly undone */
    return (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : lrintf(v));
}

bool report_batch_jpeg(const char *path, const BatchPlot *p, char *err, int errcap) {
    const int bs = p->n < BATCH_PLOT_MAX_IMAGES ? p->n : BATCH_PLOT_MAX_IMAGES;
    /* a batch without its shape (h 0) is imgsz square */
    const int H = p->b->h > 0 ? p->b->h : p->imgsz, W = p->b->w > 0 ? p->b->w : p->imgsz;
    if (bs < 1) return true;
    const int ns = (int)ceil(sqrt((double)bs));
    Image big = {ns * W, ns * H, malloc((size_t)ns * W * (size_t)ns * H * 3)};
    if (!big.px) return errf(err, errcap, "out of memory drawing %s", path);
    memset(big.px, 255, (size_t)big.w * (size_t)big.h * 3);
    for (int i = 0; i < bs; i++) {
        const int x0 = W * (i / ns), y0 = H * (i % ns);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                uint8_t *d = big.px + ((size_t)(y0 + y) * (size_t)big.w + (size_t)(x0 + x)) * 3;
                for (int c = 0; c < 3; c++) d[c] = pixel(p->b, i, c, (size_t)y * (size_t)W + (size_t)x, (size_t)H * (size_t)W);
            }
    }
    /* scaled so the mosaic fits max_size: each tile becomes ceil(scale * h) x ceil(scale * w) */
    const double scale = (double)BATCH_PLOT_MAX_SIZE / ns / (H > W ? H : W);
    int TH = H, TW = W;
    Image im = big;
    if (scale < 1) {
        TH = (int)ceil(scale * H), TW = (int)ceil(scale * W);
        Image small;
        if (!image_resize_linear(&big, TW * ns, TH * ns, &small)) {
            image_free(&big);
            return errf(err, errcap, "out of memory drawing %s", path);
        }
        image_free(&big);
        im = small;
    }
    const int fs = (int)((double)(TH + TW) * ns * 0.01);
    int nboxes = 0;
    for (int i = 0; i < bs; i++) nboxes += p->dets ? p->n_dets[i] : (int)p->b->counts[i];
    Detection *boxes = malloc(sizeof *boxes * (size_t)(nboxes + 1));
    AnnotateText *texts = malloc(sizeof *texts * (size_t)bs);
    char(*labels)[41] = malloc(sizeof *labels * (size_t)bs);
    if (!boxes || !texts || !labels) {
        free(boxes), free(texts), free(labels), image_free(&im);
        return errf(err, errcap, "out of memory drawing %s", path);
    }
    int nb = 0, nt = 0;
    for (int i = 0; i < bs; i++) {
        const int x0 = TW * (i / ns), y0 = TH * (i % ns);
        /* the tile's border, white, 2 px */
        for (int y = y0; y < y0 + TH && y < im.h; y++)
            for (int x = x0; x < x0 + TW && x < im.w; x++)
                if (x < x0 + 2 || y < y0 + 2 || x >= x0 + TW - 2 || y >= y0 + TH - 2) memset(im.px + ((size_t)y * (size_t)im.w + (size_t)x) * 3, 255, 3);
        const int idx = p->b->info[i].index;
        if (p->split && idx >= 0 && idx < p->split->n) {
            snprintf(labels[nt], sizeof labels[nt], "%s", dataset_file_name(p->split->samples[idx].image));
            texts[nt] = (AnnotateText){x0 + 5, y0 + 5, labels[nt], 0xDCDCDC};
            nt++;
        }
        /* corners truncated to integers, as plot_images' astype(np.int64) */
        if (p->dets) {
            /* network pixels, scaled with the mosaic */
            const double f = scale < 1 ? scale : 1.0;
            for (int k = 0; k < p->n_dets[i]; k++) {
                Detection d = p->dets[i][k];
                if (!(d.score > BATCH_PLOT_CONF)) continue;
                d.x1 = (float)(long)(d.x1 * f + x0), d.y1 = (float)(long)(d.y1 * f + y0);
                d.x2 = (float)(long)(d.x2 * f + x0), d.y2 = (float)(long)(d.y2 * f + y0);
                boxes[nb++] = d;
            }
        } else {
            /* labels: cls, cx, cy, w, h normalised, so times the tile's side */
            const float *l = p->b->boxes + (size_t)i * (size_t)p->max_boxes * 5;
            for (int k = 0; k < (int)p->b->counts[i]; k++, l += 5) {
                const float cx = l[1] * (float)TW + (float)x0, cy = l[2] * (float)TH + (float)y0, w = l[3] * (float)TW, h = l[4] * (float)TH;
                boxes[nb++] = (Detection){(float)(long)(cx - w / 2), (float)(long)(cy - h / 2), (float)(long)(cx + w / 2), (float)(long)(cy + h / 2), 1.0f, (int)l[0]};
            }
        }
    }
    const AnnotateStyle style = {.conf_digits = p->dets ? 1 : -1, .line_width = (int)nearbyint(fs / 10.0), .class_ids = true, .texts = texts, .n_texts = nt};
    bool ok = annotate_detections(&im, boxes, nb, p->names, &style, err, errcap) && image_write_jpeg(path, &im, 75, err, errcap);
    free(boxes), free(texts), free(labels);
    image_free(&im);
    return ok;
}
