/* runtime/data/augment_warp.c — Mosaic and RandomPerspective of augment.h:
 * tile placement, the T S R P C matrix, an OpenCV-4.x-style fixed-point
 * bilinear warp with border 114, and the box transform and filter. Must not
 * touch files, threads, colour, or anything outside the image it is given. */
#include "augment.h"

#include <limits.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ mosaic */

bool mosaic4_at(const Image *const tiles[4], const Boxes *const boxes[4], int s, int xc, int yc, Image *dst, Boxes *out) {
    *dst = (Image){0};
    out->n = 0;
    int S2 = 2 * s;
    if (s < 1 || xc < 0 || xc > S2 || yc < 0 || yc > S2) return false;
    dst->px = malloc((size_t)S2 * S2 * 3);
    if (!dst->px) return false;
    dst->w = dst->h = S2;
    memset(dst->px, 114, (size_t)S2 * S2 * 3);
    for (int i = 0; i < 4; i++) {
        int w = tiles[i]->w, h = tiles[i]->h;
        int x1a, y1a, x2a, y2a, x1b, y1b;
        /* canvas rectangle (a) and the part of the tile it shows (b) */
        if (i == 0) {
            x1a = xc - w > 0 ? xc - w : 0, y1a = yc - h > 0 ? yc - h : 0, x2a = xc, y2a = yc;
            x1b = w - (x2a - x1a), y1b = h - (y2a - y1a);
        } else if (i == 1) {
            x1a = xc, y1a = yc - h > 0 ? yc - h : 0, x2a = xc + w < S2 ? xc + w : S2, y2a = yc;
            x1b = 0, y1b = h - (y2a - y1a);
        } else if (i == 2) {
            x1a = xc - w > 0 ? xc - w : 0, y1a = yc, x2a = xc, y2a = yc + h < S2 ? yc + h : S2;
            x1b = w - (x2a - x1a), y1b = 0;
        } else {
            x1a = xc, y1a = yc, x2a = xc + w < S2 ? xc + w : S2, y2a = yc + h < S2 ? yc + h : S2;
            x1b = 0, y1b = 0;
        }
        int cw = x2a - x1a, ch = y2a - y1a;
        for (int y = 0; y < ch; y++)
            memcpy(dst->px + ((size_t)(y1a + y) * S2 + (size_t)x1a) * 3, tiles[i]->px + ((size_t)(y1b + y) * w + (size_t)x1b) * 3, (size_t)cw * 3);
        float padw = (float)(x1a - x1b), padh = (float)(y1a - y1b);
        for (int k = 0; k < boxes[i]->n; k++) {
            Box b = boxes[i]->b[k];
            b.x1 += padw, b.x2 += padw, b.y1 += padh, b.y2 += padh;
            if (!boxes_push(out, b)) {
                image_free(dst);
                return false;
            }
        }
    }
    boxes_clip(out, (float)S2, (float)S2);
    boxes_drop_empty(out);
    return true;
}

bool mosaic4(Rng *r, const Image *const tiles[4], const Boxes *const boxes[4], int s, Image *dst, Boxes *out) {
    /* border = -s // 2 (Python floor division) gives U(-border, 2s + border) */
    double lo = (double)(s - s / 2), hi = 2.0 * s - lo;
    int yc = (int)rng_uniform(r, lo, hi);
    int xc = (int)rng_uniform(r, lo, hi);
    return mosaic4_at(tiles, boxes, s, xc, yc, dst, out);
}

/* ------------------------------------------------------------ matrix */

static void matmul3(const double a[9], const double b[9], double o[9]) {
    double t[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) t[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
    memcpy(o, t, sizeof t);
}

void perspective_matrix(Rng *r, const Hyp *h, int in_w, int in_h, int out_w, int out_h, double M[9], double *scale) {
    const double deg = 3.14159265358979323846 / 180.0;
    double C[9] = {1, 0, -in_w / 2.0, 0, 1, -in_h / 2.0, 0, 0, 1};
    double P[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    P[6] = rng_uniform(r, -h->perspective, h->perspective);
    P[7] = rng_uniform(r, -h->perspective, h->perspective);
    double a = rng_uniform(r, -h->degrees, h->degrees) * deg;
    double sc = rng_uniform(r, 1.0 - h->scale, 1.0 + h->scale);
    /* getRotationMatrix2D about the origin: [[al, be], [-be, al]] */
    double R[9] = {sc * cos(a), sc * sin(a), 0, -sc * sin(a), sc * cos(a), 0, 0, 0, 1};
    double S[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    S[1] = tan(rng_uniform(r, -h->shear, h->shear) * deg);
    S[3] = tan(rng_uniform(r, -h->shear, h->shear) * deg);
    double T[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    T[2] = rng_uniform(r, 0.5 - h->translate, 0.5 + h->translate) * out_w;
    T[5] = rng_uniform(r, 0.5 - h->translate, 0.5 + h->translate) * out_h;
    matmul3(T, S, M);
    matmul3(M, R, M);
    matmul3(M, P, M);
    matmul3(M, C, M);
    /* upstream's matrices are float32: warp with the same rounded entries */
    for (int i = 0; i < 9; i++) M[i] = (double)(float)M[i];
    *scale = sc;
}

/* Inverse of a 3x3 matrix by Gauss-Jordan with partial pivoting; false when
 * singular. */
static bool invert3(const double m[9], double inv[9]) {
    double a[3][6];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 6; j++) a[i][j] = j < 3 ? m[3 * i + j] : (j - 3 == i);
    for (int c = 0; c < 3; c++) {
        int p = c;
        for (int i = c + 1; i < 3; i++)
            if (fabs(a[i][c]) > fabs(a[p][c])) p = i;
        if (a[p][c] == 0) return false;
        for (int j = 0; j < 6; j++) {
            double t = a[c][j];
            a[c][j] = a[p][j];
            a[p][j] = t;
        }
        double d = a[c][c];
        for (int j = 0; j < 6; j++) a[c][j] /= d;
        for (int i = 0; i < 3; i++) {
            if (i == c) continue;
            double f = a[i][c];
            for (int j = 0; j < 6; j++) a[i][j] -= f * a[c][j];
        }
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) inv[3 * i + j] = a[i][j + 3];
    return true;
}

/* ------------------------------------------------------------ warp */

/* 32 x 32 sub-pixel positions, 4 weights each summing to 2^15 (int: the
 * whole-pixel weight 2^15 does not fit a short) */
typedef struct WarpTab {
    int32_t w[32 * 32][4];
} WarpTab;

static void warp_tab(WarpTab *t) {
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 32; j++) {
            float fy = (float)i / 32.0f, fx = (float)j / 32.0f;
            float cy[2] = {1.0f - fy, fy}, cx[2] = {1.0f - fx, fx};
            int32_t *w = t->w[i * 32 + j];
            int sum = 0, big = 0, small = 0;
            for (int k = 0; k < 4; k++) {
                w[k] = (int32_t)nearbyintf(cy[k >> 1] * cx[k & 1] * 32768.0f);
                sum += w[k];
                if (w[k] > w[big]) big = k;
                if (w[k] < w[small]) small = k;
            }
            /* the rounding error goes to one tap so the weights sum to 1 */
            if (sum < 32768) w[big] += 32768 - sum;
            else if (sum > 32768) w[small] -= sum - 32768;
        }
}

static int sat_int(double v) {
    if (!(v > (double)INT_MIN)) return INT_MIN;   /* NaN lands here too */
    if (v >= (double)INT_MAX) return INT_MAX;
    return (int)nearbyint(v);
}

/* Floor division by 2^k that is defined for negative values. */
static int asr(int v, int k) { return v >= 0 ? v >> k : ~(~v >> k); }

/* The slow path of sample(): some taps outside the source read 114. */
static void sample_border(const Image *src, const int32_t *w, int sx, int sy, uint8_t *o) {
    if (sx >= src->w || sx + 1 < 0 || sy >= src->h || sy + 1 < 0) {
        o[0] = o[1] = o[2] = 114;
        return;
    }
    for (int c = 0; c < 3; c++) {
        int acc = 0;
        for (int k = 0; k < 4; k++) {
            int x = sx + (k & 1), y = sy + (k >> 1);
            int v = x >= 0 && y >= 0 && x < src->w && y < src->h ? src->px[((size_t)y * src->w + x) * 3 + c] : 114;
            acc += v * w[k];
        }
        int v = (acc + (1 << 14)) >> 15;
        o[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* One output pixel from a 1/32-pixel source position; inlined into the
 * warp loops, where nearly all of a warp's time goes. */
__attribute__((always_inline)) static inline void sample(const Image *src, const WarpTab *t, int X, int Y, uint8_t *o) {
    int sx = asr(X, 5), sy = asr(Y, 5);
    const int32_t *w = t->w[(Y & 31) * 32 + (X & 31)];
    if ((unsigned)sx < (unsigned)(src->w - 1) && (unsigned)sy < (unsigned)(src->h - 1)) {
        const uint8_t *p = src->px + ((size_t)sy * src->w + sx) * 3, *q = p + (size_t)src->w * 3;
        o[0] = (uint8_t)((p[0] * w[0] + p[3] * w[1] + q[0] * w[2] + q[3] * w[3] + (1 << 14)) >> 15);
        o[1] = (uint8_t)((p[1] * w[0] + p[4] * w[1] + q[1] * w[2] + q[4] * w[3] + (1 << 14)) >> 15);
        o[2] = (uint8_t)((p[2] * w[0] + p[5] * w[1] + q[2] * w[2] + q[5] * w[3] + (1 << 14)) >> 15);
        return;
    }
    sample_border(src, w, sx, sy, o);
}

bool warp_image(const Image *src, const double M[9], bool perspective, int out_w, int out_h, Image *dst) {
    *dst = (Image){0};
    double Mi[9];
    if (out_w < 1 || out_h < 1) return false;
    /* a singular map inverts to zeros, as in OpenCV: every pixel reads the
     * source's corner instead of failing the sample */
    if (perspective) {
        if (!invert3(M, Mi)) memset(Mi, 0, sizeof Mi);
    } else {
        /* cv::invertAffineTransform's closed form, so positions round alike */
        double D = M[0] * M[4] - M[1] * M[3];
        D = D != 0 ? 1.0 / D : 0;
        Mi[0] = M[4] * D, Mi[1] = -M[1] * D, Mi[3] = -M[3] * D, Mi[4] = M[0] * D;
        Mi[2] = -Mi[0] * M[2] - Mi[1] * M[5];
        Mi[5] = -Mi[3] * M[2] - Mi[4] * M[5];
    }
    WarpTab *t = malloc(sizeof *t);
    int *delta = malloc((size_t)out_w * 2 * sizeof *delta);
    dst->px = malloc((size_t)out_w * out_h * 3);
    if (!t || !delta || !dst->px) {
        free(t);
        free(delta);
        image_free(dst);
        return false;
    }
    dst->w = out_w;
    dst->h = out_h;
    warp_tab(t);
    if (!perspective) {
        /* OpenCV's affine path: 10-bit fixed-point positions, 1/32 rounding */
        for (int x = 0; x < out_w; x++) {
            delta[2 * x] = sat_int(Mi[0] * x * 1024);
            delta[2 * x + 1] = sat_int(Mi[3] * x * 1024);
        }
        for (int y = 0; y < out_h; y++) {
            int X0 = sat_int((Mi[1] * y + Mi[2]) * 1024) + 16, Y0 = sat_int((Mi[4] * y + Mi[5]) * 1024) + 16;
            uint8_t *o = dst->px + (size_t)y * out_w * 3;
            for (int x = 0; x < out_w; x++) {
                /* 64-bit sums: a hostile matrix must not overflow int */
                long long X = ((long long)X0 + delta[2 * x]) >> 5, Y = ((long long)Y0 + delta[2 * x + 1]) >> 5;
                X = X < INT_MIN / 2 ? INT_MIN / 2 : X > INT_MAX / 2 ? INT_MAX / 2 : X;
                Y = Y < INT_MIN / 2 ? INT_MIN / 2 : Y > INT_MAX / 2 ? INT_MAX / 2 : Y;
                sample(src, t, (int)X, (int)Y, o + 3 * x);
            }
        }
    } else {
        for (int y = 0; y < out_h; y++) {
            uint8_t *o = dst->px + (size_t)y * out_w * 3;
            for (int x = 0; x < out_w; x++) {
                double W = Mi[6] * x + Mi[7] * y + Mi[8];
                W = W != 0 ? 32.0 / W : 0;
                int X = sat_int((Mi[0] * x + Mi[1] * y + Mi[2]) * W), Y = sat_int((Mi[3] * x + Mi[4] * y + Mi[5]) * W);
                X = X < INT_MIN / 2 ? INT_MIN / 2 : X > INT_MAX / 2 ? INT_MAX / 2 : X;
                Y = Y < INT_MIN / 2 ? INT_MIN / 2 : Y > INT_MAX / 2 ? INT_MAX / 2 : Y;
                sample(src, t, X, Y, o + 3 * x);
            }
        }
    }
    free(t);
    free(delta);
    return true;
}

/* ------------------------------------------------------------ boxes */

bool box_candidate(const Box *before, const Box *after) {
    const double eps = 1e-16;
    double w1 = (double)before->x2 - before->x1, h1 = (double)before->y2 - before->y1;
    double w2 = (double)after->x2 - after->x1, h2 = (double)after->y2 - after->y1;
    double ar = fmax(w2 / (h2 + eps), h2 / (w2 + eps));
    return w2 > 2 && h2 > 2 && w2 * h2 / (w1 * h1 + eps) > 0.1 && ar < 100;
}

bool boxes_warp(Boxes *bx, const double M[9], bool perspective, int out_w, int out_h, double scale) {
    int k = 0;
    for (int i = 0; i < bx->n; i++) {
        Box b = bx->b[i];
        double cx[4] = {b.x1, b.x2, b.x1, b.x2}, cy[4] = {b.y1, b.y2, b.y2, b.y1};
        double lo_x = INFINITY, lo_y = INFINITY, hi_x = -INFINITY, hi_y = -INFINITY;
        for (int c = 0; c < 4; c++) {
            double x = M[0] * cx[c] + M[1] * cy[c] + M[2], y = M[3] * cx[c] + M[4] * cy[c] + M[5];
            if (perspective) {
                double w = M[6] * cx[c] + M[7] * cy[c] + M[8];
                x /= w;
                y /= w;
            }
            lo_x = fmin(lo_x, x), hi_x = fmax(hi_x, x), lo_y = fmin(lo_y, y), hi_y = fmax(hi_y, y);
        }
        Box nb = {b.cls, (float)lo_x, (float)lo_y, (float)hi_x, (float)hi_y};
        Boxes one = {&nb, 1, 1};
        boxes_clip(&one, (float)out_w, (float)out_h);
        Box before = {b.cls, (float)(b.x1 * scale), (float)(b.y1 * scale), (float)(b.x2 * scale), (float)(b.y2 * scale)};
        if (box_candidate(&before, &nb)) bx->b[k++] = nb;
    }
    bx->n = k;
    return true;
}

bool random_perspective(Rng *r, const Hyp *h, const Image *src, Boxes *bx, int out_w, int out_h, Image *dst) {
    double M[9], scale;
    perspective_matrix(r, h, src->w, src->h, out_w, out_h, M, &scale);
    bool identity = true;
    for (int i = 0; i < 9; i++) identity = identity && M[i] == (i % 4 == 0);
    if (identity && out_w == src->w && out_h == src->h) {
        *dst = (Image){0};
        dst->px = malloc((size_t)out_w * out_h * 3);
        if (!dst->px) return false;
        dst->w = out_w;
        dst->h = out_h;
        memcpy(dst->px, src->px, (size_t)out_w * out_h * 3);
    } else if (!warp_image(src, M, h->perspective != 0, out_w, out_h, dst)) {
        return false;
    }
    return boxes_warp(bx, M, h->perspective != 0, out_w, out_h, scale);
}
