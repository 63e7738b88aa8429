/* runtime/cpu_pool.c — fast CPU max pooling and nearest resize, forward and
 * backward, for the interpreter's fast mode: planes split over the OpenMP
 * threads. Must not touch ref_layout.c, the oracle these equal bit for bit
 * (a backward adds into each input element in the oracle's order). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_conv.h"

/* Planes below this many output elements are not worth waking the team. */
enum { PARALLEL_MIN_ELEMS = 1 << 16 };

/* The window of output o along one axis of len inputs, line[i * step]
 * for i = o*s - pad + t*dil in [0, len), t < k, scanned in order with the
 * oracle's rule: a later value replaces the best only when strictly greater,
 * and a NaN always does. */
static inline int64_t window_arg(const float *line, int64_t step, int64_t len, int64_t o, int k, int s, int pad, int dil) {
    int64_t best = -1;
    for (int t = 0; t < k; t++) {
        int64_t i = o * s - pad + (int64_t)t * dil;
        if (i < 0 || i >= len) continue;
        float v = line[i * step];
        if (best < 0 || v > line[best * step] || isnan(v)) best = i;
    }
    return best;
}

static inline float window_max(const float *line, int64_t step, int64_t len, int64_t o, int k, int s, int pad, int dil) {
    int64_t i = window_arg(line, step, len, o, k, s, pad, dil);
    return i < 0 ? NAN : line[i * step];
}

/* Max pooling as two 1-D passes, rows then columns. Each pass keeps the
 * first strictly greatest value (and the last NaN) in its scan order, so the
 * pair picks the same element as the oracle's row-major scan of the whole
 * window: the first maximal element of the first row holding the maximum,
 * or the last NaN of the last row holding one. Same bits, zero signs and
 * NaN payloads included, at kh + kw compares an output instead of kh x kw. */
int64_t cpu_maxpool_scratch_floats(const Graph *g, const Op *op) {
    /* backward: x is its second input, and each row's winning column is kept too */
    return op->kind == OP_MAXPOOL2D_BWD ? 2 * SH(op->in[1])->d[2] * SH(op->in[0])->d[3] : SH(op->in[0])->d[2] * SH(op->out[0])->d[3];
}

REF_KERNEL(cpu_maxpool2d) {
    const Shape *xs = SH(op->in[0]), *ys = SH(op->out[0]);
    const OpAttrs *a = &op->a;
    const int64_t nc = xs->d[0] * xs->d[1], h = xs->d[2], w = xs->d[3], oh = ys->d[2], ow = ys->d[3];
    const float *x = T(0);
    float *y = O(0);
    bool ok = true;
#pragma omp parallel if (nc * oh * ow >= PARALLEL_MIN_ELEMS)
    {
        float *rowmax = cpu_thread_scratch(cpu_maxpool_scratch_floats(g, op), &ok); /* [h][ow]: each input row pooled along x */
#pragma omp for schedule(static)
        for (int64_t p = 0; p < nc; p++) {
            if (!rowmax) continue;
            const float *xp = x + p * h * w;
            for (int64_t iy = 0; iy < h; iy++)
                for (int64_t ox = 0; ox < ow; ox++)
                    rowmax[iy * ow + ox] = window_max(xp + iy * w, 1, w, ox, a->kernel[1], a->stride[1], a->pad[2], a->dilation[1]);
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++)
                    y[(p * oh + oy) * ow + ox] = window_max(rowmax + ox, ow, h, oy, a->kernel[0], a->stride[0], a->pad[0], a->dilation[0]);
        }
        free(rowmax);
    }
    if (!ok) snprintf(err, (size_t)errcap, "out of memory for a %lld-byte pooling row buffer", (long long)(cpu_maxpool_scratch_floats(g, op) * (int64_t)sizeof(float)));
    return ok;
}

/* maxpool2d_bwd(dy, x) -> dx: the same two passes, keeping the winning
 * column of each row's window and then the winning row, and each window's
 * gradient added to its winner in output order, as the oracle does. */
REF_KERNEL(cpu_maxpool2d_bwd) {
    const Shape *ys = SH(op->in[0]), *xs = SH(op->in[1]);
    const OpAttrs *a = &op->a;
    const int64_t nc = xs->d[0] * xs->d[1], h = xs->d[2], w = xs->d[3], oh = ys->d[2], ow = ys->d[3];
    const float *dy = T(0), *x = T(1);
    float *dx = O(0);
    bool ok = true;
#pragma omp parallel if (nc * oh * ow >= PARALLEL_MIN_ELEMS)
    {
        /* [h][ow] each input row's winner along x: its value, then its column */
        float *rowmax = cpu_thread_scratch(cpu_maxpool_scratch_floats(g, op), &ok);
        int32_t *rowarg = rowmax ? (int32_t *)(rowmax + h * ow) : NULL;
#pragma omp for schedule(static)
        for (int64_t p = 0; p < nc; p++) {
            if (!rowmax) continue;
            const float *xp = x + p * h * w, *dyp = dy + p * oh * ow;
            float *dxp = dx + p * h * w;
            memset(dxp, 0, (size_t)(h * w) * sizeof *dxp);
            for (int64_t iy = 0; iy < h; iy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    const int64_t ix = window_arg(xp + iy * w, 1, w, ox, a->kernel[1], a->stride[1], a->pad[2], a->dilation[1]);
                    rowarg[iy * ow + ox] = (int32_t)ix;
                    rowmax[iy * ow + ox] = ix < 0 ? NAN : xp[iy * w + ix];
                }
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    const int64_t iy = window_arg(rowmax + ox, ow, h, oy, a->kernel[0], a->stride[0], a->pad[0], a->dilation[0]);
                    if (iy >= 0 && rowarg[iy * ow + ox] >= 0) dxp[iy * w + rowarg[iy * ow + ox]] += dyp[oy * ow + ox];
                }
        }
        free(rowmax);
    }
    if (!ok) snprintf(err, (size_t)errcap, "out of memory for a %lld-byte pooling row buffer", (long long)(cpu_maxpool_scratch_floats(g, op) * (int64_t)sizeof(float)));
    return ok;
}

/* Nearest resize with the oracle's source index (ref_nearest_src) worked
 * out once per row and column instead of per element: forward, big[d] =
 * small[s]; backward, small[s] += big[d] in output order, as the oracle adds
 * them (each plane zeroed first). */
static bool resize_planes(const Shape *small, const Shape *big, const float *src, float *dst, bool backward, char *err, int errcap) {
    const int64_t nc = big->d[0] * big->d[1], h = small->d[2], w = small->d[3], oh = big->d[2], ow = big->d[3];
    int64_t *src_x = malloc((size_t)ow * sizeof(int64_t));
    if (!src_x) return snprintf(err, (size_t)errcap, "out of memory for a resize index"), false;
    for (int64_t ox = 0; ox < ow; ox++) src_x[ox] = ref_nearest_src(ox, w, ow);
#pragma omp parallel for schedule(static) if (nc * oh * ow >= PARALLEL_MIN_ELEMS)
    for (int64_t p = 0; p < nc; p++) {
        if (backward) memset(dst + p * h * w, 0, (size_t)(h * w) * sizeof *dst);
        for (int64_t oy = 0; oy < oh; oy++) {
            const int64_t s = (p * h + ref_nearest_src(oy, h, oh)) * w, d = (p * oh + oy) * ow;
            if (backward)
                for (int64_t ox = 0; ox < ow; ox++) dst[s + src_x[ox]] += src[d + ox];
            else
                for (int64_t ox = 0; ox < ow; ox++) dst[d + ox] = src[s + src_x[ox]];
        }
    }
    free(src_x);
    return true;
}

REF_KERNEL(cpu_resize_nearest) { return resize_planes(SH(op->in[0]), SH(op->out[0]), T(0), O(0), false, err, errcap); }

/* resize_nearest_bwd(dy) -> dx: each output's gradient added to the input it copied */
REF_KERNEL(cpu_resize_nearest_bwd) { return resize_planes(SH(op->out[0]), SH(op->in[0]), T(0), O(0), true, err, errcap); }
