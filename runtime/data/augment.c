/* runtime/data/augment.c — the size-changing basics of augment.h: box lists,
 * OpenCV-style bilinear resize, load-time resize, LetterBox, flips, mixup and
 * the default hyperparameters. Mosaic and the perspective warp live in
 * augment_warp.c, HSV in augment_color.c. Must not touch files or threads. */
#include "augment.h"

#include <math.h>
#include <string.h>

Hyp hyp_defaults(void) {
    return (Hyp){.hsv_h = 0.015f, .hsv_s = 0.7f, .hsv_v = 0.4f, .degrees = 0, .translate = 0.1f, .scale = 0.5f,
                 .shear = 0, .perspective = 0, .flipud = 0, .fliplr = 0.5f, .mosaic = 1, .mixup = 0};
}

/* ------------------------------------------------------------ boxes */

bool boxes_push(Boxes *bs, Box b) {
    if (bs->n == bs->cap) {
        int cap = bs->cap ? bs->cap * 2 : 16;
        Box *nb = realloc(bs->b, (size_t)cap * sizeof *nb);
        if (!nb) return false;
        bs->b = nb;
        bs->cap = cap;
    }
    bs->b[bs->n++] = b;
    return true;
}

void boxes_free(Boxes *bs) {
    free(bs->b);
    *bs = (Boxes){0};
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

void boxes_clip(Boxes *bs, float w, float h) {
    for (int i = 0; i < bs->n; i++) {
        Box *b = &bs->b[i];
        b->x1 = clampf(b->x1, 0, w);
        b->x2 = clampf(b->x2, 0, w);
        b->y1 = clampf(b->y1, 0, h);
        b->y2 = clampf(b->y2, 0, h);
    }
}

void boxes_drop_empty(Boxes *bs) {
    int k = 0;
    for (int i = 0; i < bs->n; i++) {
        const Box *b = &bs->b[i];
        if ((b->x2 - b->x1) * (b->y2 - b->y1) > 0) bs->b[k++] = *b;
    }
    bs->n = k;
}

/* ------------------------------------------------------------ resize */

static bool image_alloc(Image *im, int w, int h) {
    im->px = malloc((size_t)w * (size_t)h * 3);
    if (!im->px) return false;
    im->w = w;
    im->h = h;
    return true;
}

/* OpenCV's saturate_cast<short>(float): round half to even. */
static int round_even(double v) { return (int)nearbyint(v); }

/* Per output coordinate: first source index and the two 11-bit weights. */
static void linear_taps(int sn, int dn, int *ofs, int *w0, int *w1, bool clamp_low) {
    double scale = 1.0 / ((double)dn / sn);
    for (int d = 0; d < dn; d++) {
        float f = (float)((d + 0.5) * scale - 0.5);
        int s = (int)floorf(f);
        f -= (float)s;
        /* columns clamp the position itself; rows keep the weights and only
         * clamp which rows are read (OpenCV does exactly this) */
        if (clamp_low && s < 0) f = 0, s = 0;
        if (clamp_low && s >= sn - 1) f = 0, s = sn - 1;
        ofs[d] = s;
        w0[d] = round_even((1.0f - f) * 2048.0f);
        w1[d] = round_even(f * 2048.0f);
    }
}

static bool resize_area2(const Image *src, Image *dst) {
    if (!image_alloc(dst, src->w / 2, src->h / 2)) return false;
    size_t sst = (size_t)src->w * 3;
    for (int y = 0; y < dst->h; y++) {
        const uint8_t *a = src->px + (size_t)(2 * y) * sst, *b = a + sst;
        uint8_t *o = dst->px + (size_t)y * dst->w * 3;
        for (int x = 0; x < dst->w; x++)
            for (int c = 0; c < 3; c++) {
                int i = 6 * x + c;
                o[3 * x + c] = (uint8_t)((a[i] + a[i + 3] + b[i] + b[i + 3] + 2) >> 2);
            }
    }
    return true;
}

static void hresize_row(const uint8_t *s, int dw, const int *xo, const int *xa, const int *xb, int sw, int *out) {
    for (int x = 0; x < dw; x++) {
        const uint8_t *p = s + xo[x] * 3;
        if (xo[x] + 1 < sw)
            for (int c = 0; c < 3; c++) out[3 * x + c] = p[c] * xa[x] + p[c + 3] * xb[x];
        else
            for (int c = 0; c < 3; c++) out[3 * x + c] = p[c] * xa[x];
    }
}

bool image_resize_linear(const Image *src, int w, int h, Image *dst) {
    *dst = (Image){0};
    if (w < 1 || h < 1 || src->w < 1 || src->h < 1) return false;
    if (w == src->w && h == src->h) {
        if (!image_alloc(dst, w, h)) return false;
        memcpy(dst->px, src->px, (size_t)w * h * 3);
        return true;
    }
    if (2 * w == src->w && 2 * h == src->h) return resize_area2(src, dst);
    int *tab = malloc(((size_t)w * 3 + (size_t)h * 3 + (size_t)w * 6) * sizeof *tab);
    if (!tab || !image_alloc(dst, w, h)) {
        free(tab);
        image_free(dst);
        return false;
    }
    int *xo = tab, *xa = xo + w, *xb = xa + w, *yo = xb + w, *ya = yo + h, *yb = ya + h;
    int *r0 = yb + h, *r1 = r0 + (size_t)w * 3;
    linear_taps(src->w, w, xo, xa, xb, true);
    linear_taps(src->h, h, yo, ya, yb, false);
    int have0 = -2, have1 = -2;   /* source rows held in r0, r1 */
    size_t sst = (size_t)src->w * 3;
    for (int y = 0; y < h; y++) {
        int sy0 = yo[y] < 0 ? 0 : yo[y] >= src->h ? src->h - 1 : yo[y];
        int sy1 = yo[y] + 1 < 0 ? 0 : yo[y] + 1 >= src->h ? src->h - 1 : yo[y] + 1;
        if (sy0 == have1) {
            int *t = r0;
            r0 = r1;
            r1 = t;
            have0 = have1;
            have1 = -2;
        }
        if (sy0 != have0) hresize_row(src->px + sy0 * sst, w, xo, xa, xb, src->w, r0), have0 = sy0;
        if (sy1 != have1) hresize_row(src->px + sy1 * sst, w, xo, xa, xb, src->w, r1), have1 = sy1;
        uint8_t *o = dst->px + (size_t)y * w * 3;
        int b0 = ya[y], b1 = yb[y];
        /* the vector path of OpenCV's vertical pass: (S >> 4) * b >> 16, +2 >> 2 */
        for (int i = 0; i < w * 3; i++) {
            int v = (((b0 * (r0[i] >> 4)) >> 16) + ((b1 * (r1[i] >> 4)) >> 16) + 2) >> 2;
            o[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
    free(tab);
    return true;
}

void load_size(int w0, int h0, int imgsz, int *w, int *h) {
    double r = (double)imgsz / (w0 > h0 ? w0 : h0);
    *w = w0;
    *h = h0;
    if (r != 1.0) {
        double cw = ceil(w0 * r), ch = ceil(h0 * r);
        *w = cw < imgsz ? (int)cw : imgsz;
        *h = ch < imgsz ? (int)ch : imgsz;
    }
}

bool load_resize(Image *im, int imgsz) {
    int w, h;
    load_size(im->w, im->h, imgsz, &w, &h);
    if (w == im->w && h == im->h) return true;
    Image out;
    if (!image_resize_linear(im, w, h, &out)) return false;
    image_free(im);
    *im = out;
    return true;
}

/* ------------------------------------------------------------ letterbox */

LetterboxGeom letterbox_geom(int w, int h, int out_w, int out_h, bool scaleup) {
    LetterboxGeom g;
    double rh = (double)out_h / h, rw = (double)out_w / w;
    g.r = rh < rw ? rh : rw;
    if (!scaleup && g.r > 1.0) g.r = 1.0;
    /* Python's round(): half to even, which nearbyint gives in the default mode */
    g.new_w = (int)nearbyint(w * g.r);
    g.new_h = (int)nearbyint(h * g.r);
    double dw = (out_w - g.new_w) / 2.0, dh = (out_h - g.new_h) / 2.0;
    g.top = (int)nearbyint(dh - 0.1);
    g.bottom = (int)nearbyint(dh + 0.1);
    g.left = (int)nearbyint(dw - 0.1);
    g.right = (int)nearbyint(dw + 0.1);
    return g;
}

bool letterbox(const Image *src, Boxes *bx, int out_w, int out_h, bool scaleup, Image *dst, LetterboxGeom *gout) {
    *dst = (Image){0};
    LetterboxGeom g = letterbox_geom(src->w, src->h, out_w, out_h, scaleup);
    if (g.new_w < 1 || g.new_h < 1) return false;
    Image scaled = {0};
    const Image *in = src;
    if (g.new_w != src->w || g.new_h != src->h) {
        if (!image_resize_linear(src, g.new_w, g.new_h, &scaled)) return false;
        in = &scaled;
    }
    int W = g.new_w + g.left + g.right, H = g.new_h + g.top + g.bottom;
    if (W < 1 || H < 1 || !image_alloc(dst, W, H)) {
        image_free(&scaled);
        return false;
    }
    memset(dst->px, 114, (size_t)W * H * 3);
    for (int y = 0; y < in->h; y++) {
        int oy = y + g.top;
        if (oy < 0 || oy >= H) continue;
        int x0 = g.left < 0 ? -g.left : 0, x1 = in->w < W - g.left ? in->w : W - g.left;
        if (x1 > x0) memcpy(dst->px + ((size_t)oy * W + (size_t)(x0 + g.left)) * 3, in->px + ((size_t)y * in->w + (size_t)x0) * 3, (size_t)(x1 - x0) * 3);
    }
    image_free(&scaled);
    if (bx) {
        float r = (float)g.r;
        for (int i = 0; i < bx->n; i++) {
            Box *b = &bx->b[i];
            b->x1 = b->x1 * r + (float)g.left;
            b->x2 = b->x2 * r + (float)g.left;
            b->y1 = b->y1 * r + (float)g.top;
            b->y2 = b->y2 * r + (float)g.top;
        }
    }
    if (gout) *gout = g;
    return true;
}

/* ------------------------------------------------------------ flips, mixup */

void flip_lr(Image *im, Boxes *bx) {
    for (int y = 0; y < im->h; y++) {
        uint8_t *row = im->px + (size_t)y * im->w * 3;
        for (int a = 0, b = im->w - 1; a < b; a++, b--)
            for (int c = 0; c < 3; c++) {
                uint8_t t = row[3 * a + c];
                row[3 * a + c] = row[3 * b + c];
                row[3 * b + c] = t;
            }
    }
    if (!bx) return;
    for (int i = 0; i < bx->n; i++) {
        float x1 = bx->b[i].x1;
        bx->b[i].x1 = (float)im->w - bx->b[i].x2;
        bx->b[i].x2 = (float)im->w - x1;
    }
}

void flip_ud(Image *im, Boxes *bx) {
    size_t st = (size_t)im->w * 3;
    for (int a = 0, b = im->h - 1; a < b; a++, b--) {
        uint8_t *ra = im->px + a * st, *rb = im->px + b * st;
        for (size_t i = 0; i < st; i++) {
            uint8_t t = ra[i];
            ra[i] = rb[i];
            rb[i] = t;
        }
    }
    if (!bx) return;
    for (int i = 0; i < bx->n; i++) {
        float y1 = bx->b[i].y1;
        bx->b[i].y1 = (float)im->h - bx->b[i].y2;
        bx->b[i].y2 = (float)im->h - y1;
    }
}

bool mixup(Image *a, Boxes *abx, const Image *b, const Boxes *bbx, double r) {
    if (a->w != b->w || a->h != b->h) return false;
    for (int i = 0; i < bbx->n; i++)
        if (!boxes_push(abx, bbx->b[i])) return false;
    size_t n = (size_t)a->w * a->h * 3;
    /* numpy: float64 blend, astype(uint8) truncates */
    for (size_t i = 0; i < n; i++) a->px[i] = (uint8_t)(a->px[i] * r + b->px[i] * (1.0 - r));
    return true;
}
