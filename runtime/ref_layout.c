/* runtime/ref_layout.c — reference data-movement kernels: concat, split,
 * reshape/detach (copies), zeros, nearest resize, max/avg pooling, zero
 * padding, crop and their gradients; the eval-mode box decode (DFL, dist2bbox). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_kernels.h"

void ref_channels_last_copy(const Tensor *x, float *stored, float *packed, bool pack) {
    const int64_t *d = x->shape.d;
    int64_t st[4];
    tensor_strides4(x, st);
    for (int64_t n = 0, i = 0; n < d[0]; n++)
        for (int64_t c = 0; c < d[1]; c++)
            for (int64_t h = 0; h < d[2]; h++)
                for (int64_t w = 0; w < d[3]; w++, i++) {
                    float *s = stored + n * st[0] + c * st[1] + h * st[2] + w * st[3];
                    if (pack) packed[i] = *s;
                    else *s = packed[i];
                }
}

bool ref_channels_last_to_nchw(const Tensor *x, float *data) {
    size_t bytes = sizeof(float) * (size_t)shape_numel(&x->shape);
    float *stored = malloc(bytes + 1);
    if (!stored) return false;
    memcpy(stored, data, bytes);
    ref_channels_last_copy(x, stored, data, true);
    free(stored);
    return true;
}

/* outer x dim x inner split of a shape around an axis */
static void around(const Shape *s, int axis, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= s->d[i];
    for (int i = axis + 1; i < s->nd; i++) *inner *= s->d[i];
}

REF_KERNEL(ref_concat) {
    (void)err;
    (void)errcap;
    int ax = op->a.axis;
    int64_t outer, inner, total_ax = SH(op->out[0])->d[ax], off = 0;
    around(SH(op->out[0]), ax, &outer, &inner);
    for (int i = 0; i < op->n_in; i++) {
        int64_t len = SH(op->in[i])->d[ax] * inner;
        for (int64_t o = 0; o < outer; o++) memcpy(O(0) + (o * total_ax) * inner + off, T(i) + o * len, (size_t)len * sizeof(float));
        off += len;
    }
    return true;
}

REF_KERNEL(ref_split) {
    (void)err;
    (void)errcap;
    int ax = op->a.axis;
    int64_t outer, inner, total_ax = SH(op->in[0])->d[ax], off = 0;
    around(SH(op->in[0]), ax, &outer, &inner);
    for (int i = 0; i < op->n_out; i++) {
        int64_t len = SH(op->out[i])->d[ax] * inner;
        for (int64_t o = 0; o < outer; o++) memcpy(O(i) + o * len, T(0) + (o * total_ax) * inner + off, (size_t)len * sizeof(float));
        off += len;
    }
    return true;
}

/* reshape and detach: same elements, same order */
REF_KERNEL(ref_copy) {
    (void)err;
    (void)errcap;
    memcpy(O(0), T(0), (size_t)shape_numel(SH(op->out[0])) * sizeof(float));
    return true;
}

REF_KERNEL(ref_zeros) {
    (void)err;
    (void)errcap;
    memset(O(0), 0, (size_t)shape_numel(SH(op->out[0])) * sizeof(float));
    return true;
}

int64_t ref_nearest_src(int64_t i, int64_t in, int64_t out) {
    int64_t s = (int64_t)floor((double)i * ((double)in / (double)out));
    return s < in ? s : in - 1;
}

static void resize_map(const Shape *small, const Shape *big, const float *src, float *dst, bool backward) {
    int64_t nc = big->d[0] * big->d[1], h = small->d[2], w = small->d[3], oh = big->d[2], ow = big->d[3];
    for (int64_t p = 0; p < nc; p++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                int64_t s = (p * h + ref_nearest_src(y, h, oh)) * w + ref_nearest_src(x, w, ow), d = (p * oh + y) * ow + x;
                if (backward) dst[s] += src[d];
                else dst[d] = src[s];
            }
}

REF_KERNEL(ref_resize_nearest) {
    (void)err;
    (void)errcap;
    resize_map(SH(op->in[0]), SH(op->out[0]), T(0), O(0), false);
    return true;
}

/* Each output position passes its gradient back to the one input it copied. */
REF_KERNEL(ref_resize_nearest_bwd) {
    (void)err;
    (void)errcap;
    memset(O(0), 0, (size_t)shape_numel(SH(op->out[0])) * sizeof(float));
    resize_map(SH(op->out[0]), SH(op->in[0]), T(0), O(0), true);
    return true;
}

typedef struct PoolGeom {
    int64_t nc, h, w, oh, ow;
    int kh, kw, sh, sw, ph, pw, dh, dw;
} PoolGeom;

static PoolGeom pool_geom(const Shape *x, const Shape *y, const OpAttrs *a) {
    return (PoolGeom){x->d[0] * x->d[1], x->d[2], x->d[3], y->d[2], y->d[3], a->kernel[0], a->kernel[1], a->stride[0], a->stride[1],
                      a->pad[0], a->pad[2], a->dilation[0], a->dilation[1]};
}

/* Index of the window maximum; the first one scanning row-major wins ties
 * (PyTorch's CPU rule: a later value must be strictly greater, NaN wins). */
static int64_t window_argmax(const PoolGeom *p, const float *x, int64_t plane, int64_t oy, int64_t ox) {
    int64_t best = -1;
    float bv = -INFINITY;
    for (int ky = 0; ky < p->kh; ky++) {
        int64_t iy = oy * p->sh - p->ph + (int64_t)ky * p->dh;
        if (iy < 0 || iy >= p->h) continue;
        for (int kx = 0; kx < p->kw; kx++) {
            int64_t ix = ox * p->sw - p->pw + (int64_t)kx * p->dw;
            if (ix < 0 || ix >= p->w) continue;
            int64_t at = (plane * p->h + iy) * p->w + ix;
            if (best < 0 || x[at] > bv || isnan(x[at])) {
                best = at;
                bv = x[at];
            }
        }
    }
    return best;
}

REF_KERNEL(ref_maxpool2d) {
    (void)err;
    (void)errcap;
    PoolGeom p = pool_geom(SH(op->in[0]), SH(op->out[0]), &op->a);
    for (int64_t c = 0; c < p.nc; c++)
        for (int64_t y = 0; y < p.oh; y++)
            for (int64_t x = 0; x < p.ow; x++) O(0)[(c * p.oh + y) * p.ow + x] = T(0)[window_argmax(&p, T(0), c, y, x)];
    return true;
}

/* maxpool2d_bwd(dy, x) -> dx: each window's gradient goes to its argmax */
REF_KERNEL(ref_maxpool2d_bwd) {
    (void)err;
    (void)errcap;
    PoolGeom p = pool_geom(SH(op->in[1]), SH(op->in[0]), &op->a);
    memset(O(0), 0, (size_t)shape_numel(SH(op->out[0])) * sizeof(float));
    for (int64_t c = 0; c < p.nc; c++)
        for (int64_t y = 0; y < p.oh; y++)
            for (int64_t x = 0; x < p.ow; x++) O(0)[window_argmax(&p, T(1), c, y, x)] += T(0)[(c * p.oh + y) * p.ow + x];
    return true;
}

/* count_include_pad: every window divides by kh*kw (F.avg_pool2d's default) */
REF_KERNEL(ref_avgpool2d) {
    (void)err;
    (void)errcap;
    PoolGeom p = pool_geom(SH(op->in[0]), SH(op->out[0]), &op->a);
    for (int64_t c = 0; c < p.nc; c++)
        for (int64_t y = 0; y < p.oh; y++)
            for (int64_t x = 0; x < p.ow; x++) {
                double acc = 0;
                for (int ky = 0; ky < p.kh; ky++)
                    for (int kx = 0; kx < p.kw; kx++) {
                        int64_t iy = y * p.sh - p.ph + ky, ix = x * p.sw - p.pw + kx;
                        if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w) acc += T(0)[(c * p.h + iy) * p.w + ix];
                    }
                O(0)[(c * p.oh + y) * p.ow + x] = (float)(acc / (p.kh * p.kw));
            }
    return true;
}

REF_KERNEL(ref_avgpool2d_bwd) {
    PoolGeom p = pool_geom(&op->a.shape, SH(op->in[0]), &op->a);
    int64_t total = shape_numel(SH(op->out[0]));
    double *acc = calloc((size_t)total, sizeof(double));
    if (!acc) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int64_t c = 0; c < p.nc; c++)
        for (int64_t y = 0; y < p.oh; y++)
            for (int64_t x = 0; x < p.ow; x++) {
                double d = T(0)[(c * p.oh + y) * p.ow + x] / (double)(p.kh * p.kw);
                for (int ky = 0; ky < p.kh; ky++)
                    for (int kx = 0; kx < p.kw; kx++) {
                        int64_t iy = y * p.sh - p.ph + ky, ix = x * p.sw - p.pw + kx;
                        if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w) acc[(c * p.h + iy) * p.w + ix] += d;
                    }
            }
    for (int64_t i = 0; i < total; i++) O(0)[i] = (float)acc[i];
    free(acc);
    return true;
}

/* pad (top, bottom, left, right) between a small and a big plane */
static void pad_map(const Shape *small, const Shape *big, const int *pad, const float *src, float *dst, bool to_big) {
    int64_t nc = small->d[0] * small->d[1], h = small->d[2], w = small->d[3], bh = big->d[2], bw = big->d[3];
    if (to_big) memset(dst, 0, (size_t)(nc * bh * bw) * sizeof(float));
    for (int64_t p = 0; p < nc; p++)
        for (int64_t y = 0; y < h; y++) {
            const float *s = to_big ? src + (p * h + y) * w : src + (p * bh + y + pad[0]) * bw + pad[2];
            float *d = to_big ? dst + (p * bh + y + pad[0]) * bw + pad[2] : dst + (p * h + y) * w;
            memcpy(d, s, (size_t)w * sizeof(float));
        }
}

REF_KERNEL(ref_zeropad2d) {
    (void)err;
    (void)errcap;
    pad_map(SH(op->in[0]), SH(op->out[0]), op->a.pad, T(0), O(0), true);
    return true;
}

REF_KERNEL(ref_crop2d) {
    (void)err;
    (void)errcap;
    pad_map(SH(op->out[0]), SH(op->in[0]), op->a.pad, T(0), O(0), false);
    return true;
}

/* dfl(x [N, 4R, A], w [1, R, 1, 1]) -> [N, 4, A]: per side, softmax over R
 * bins, then the 1x1 conv with the (frozen) bin weights */
REF_KERNEL(ref_dfl) {
    (void)err;
    (void)errcap;
    const Shape *x = SH(op->in[0]);
    int r = op->a.reg_max;
    int64_t anchors = x->d[2];
    for (int64_t n = 0; n < x->d[0]; n++)
        for (int side = 0; side < 4; side++)
            for (int64_t a = 0; a < anchors; a++) {
                const float *logit = T(0) + (n * 4 * r + side * r) * anchors + a;
                double mx = -INFINITY, sum = 0, dot = 0;
                for (int j = 0; j < r; j++) mx = fmax(mx, logit[j * anchors]);
                for (int j = 0; j < r; j++) {
                    double e = exp(logit[j * anchors] - mx);
                    sum += e;
                    dot += e * T(1)[j];
                }
                O(0)[(n * 4 + side) * anchors + a] = (float)(dot / sum);
            }
    return true;
}

/* distances (l, t, r, b) from cell centres -> boxes in pixels (xywh or xyxy) */
REF_KERNEL(ref_dist2bbox) {
    (void)err;
    (void)errcap;
    const OpAttrs *at = &op->a;
    int64_t anchors = SH(op->in[0])->d[2];
    for (int64_t n = 0; n < SH(op->in[0])->d[0]; n++) {
        int64_t a = 0;
        for (int lv = 0; lv < at->nlevels; lv++)
            for (int y = 0; y < at->level_hw[lv][0]; y++)
                for (int x = 0; x < at->level_hw[lv][1]; x++, a++) {
                    const float *d = T(0) + n * 4 * anchors + a;
                    double ax = x + 0.5, ay = y + 0.5, s = at->strides[lv];
                    double x1 = ax - d[0], y1 = ay - d[anchors], x2 = ax + d[2 * anchors], y2 = ay + d[3 * anchors];
                    float *o = O(0) + n * 4 * anchors + a;
                    if (at->xywh) {
                        o[0] = (float)((x1 + x2) / 2 * s);
                        o[anchors] = (float)((y1 + y2) / 2 * s);
                        o[2 * anchors] = (float)((x2 - x1) * s);
                        o[3 * anchors] = (float)((y2 - y1) * s);
                    } else {
                        o[0] = (float)(x1 * s);
                        o[anchors] = (float)(y1 * s);
                        o[2 * anchors] = (float)(x2 * s);
                        o[3 * anchors] = (float)(y2 * s);
                    }
                }
    }
    return true;
}
