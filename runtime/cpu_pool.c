/* runtime/cpu_pool.c — fast CPU max pooling and nearest resize for the
 * interpreter's fast mode: planes split over the OpenMP threads. Must not
 * touch ref_layout.c, the oracle these equal bit for bit. */
#include <math.h>
#include <stdlib.h>

#include "cpu_conv.h"

/* Planes below this many output elements are not worth waking the team. */
enum { PARALLEL_MIN_ELEMS = 1 << 16 };

/* The window of output o along one axis of len inputs, line[i * step]
 * for i = o*s - pad + t*dil in [0, len), t < k, scanned in order with the
 * oracle's rule: a later value replaces the best only when strictly greater,
 * and a NaN always does. */
static inline float window_max(const float *line, int64_t step, int64_t len, int64_t o, int k, int s, int pad, int dil) {
    float best = NAN;
    bool have = false;
    for (int t = 0; t < k; t++) {
        int64_t i = o * s - pad + (int64_t)t * dil;
        if (i < 0 || i >= len) continue;
        float v = line[i * step];
        if (!have || v > best || isnan(v)) best = v, have = true;
    }
    return best;
}

/* Max pooling as two 1-D passes, rows then columns. Each pass keeps the
 * first strictly greatest value (and the last NaN) in its scan order, so the
 * pair picks the same element as the oracle's row-major scan of the whole
 * window: the first maximal element of the first row holding the maximum,
 * or the last NaN of the last row holding one. Same bits, zero signs and
 * NaN payloads included, at kh + kw compares an output instead of kh x kw. */
int64_t cpu_maxpool_scratch_floats(const Graph *g, const Op *op) { return SH(op->in[0])->d[2] * SH(op->out[0])->d[3]; }

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
    if (!ok) snprintf(err, (size_t)errcap, "out of memory for a %lld-byte pooling row buffer", (long long)(h * ow * (int64_t)sizeof(float)));
    return ok;
}

/* Nearest resize with the oracle's source index (ref_nearest_src) worked
 * out once per row and column instead of per element. */
REF_KERNEL(cpu_resize_nearest) {
    const Shape *xs = SH(op->in[0]), *ys = SH(op->out[0]);
    const int64_t nc = ys->d[0] * ys->d[1], h = xs->d[2], w = xs->d[3], oh = ys->d[2], ow = ys->d[3];
    int64_t *src_x = malloc((size_t)ow * sizeof(int64_t));
    if (!src_x) return snprintf(err, (size_t)errcap, "out of memory for a resize index"), false;
    for (int64_t ox = 0; ox < ow; ox++) src_x[ox] = ref_nearest_src(ox, w, ow);
    const float *x = T(0);
    float *y = O(0);
#pragma omp parallel for schedule(static) if (nc * oh * ow >= PARALLEL_MIN_ELEMS)
    for (int64_t p = 0; p < nc; p++)
        for (int64_t oy = 0; oy < oh; oy++) {
            const float *row = x + (p * h + ref_nearest_src(oy, h, oh)) * w;
            float *out = y + (p * oh + oy) * ow;
            for (int64_t ox = 0; ox < ow; ox++) out[ox] = row[src_x[ox]];
        }
    free(src_x);
    return true;
}
