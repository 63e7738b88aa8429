/* Library kernels: max and average pooling and their gradients, as
 * runtime/ref_layout.c computes them. Operands: inputs, then the output;
 * one thread per output element (grid-stride); image n of operand s starts
 * at n * a.bs[s]; every operand NCHW or, when a.cl is set, channels last,
 * pixels a.ps[s] apart.
 * Gradients gather over the windows covering each input element in the
 * reference's window order, so sums are reproducible and no atomics are
 * needed. */
#ifdef YL_MAXPOOL2D
/* Plane offset of the window maximum: the first in row-major order wins
 * ties, a later value must be strictly greater, a NaN always wins; padding
 * is skipped, which is -inf padding where some input lies in the window. */
__device__ __forceinline__ long long yl_argmax(const void *x, int xs, long long xb, long long ch, const YlArgs &a, long long oy, long long ox) {
    long long best = -1;
    float bv = __int_as_float(0xff800000);
    for (int ky = 0; ky < a.kh; ky++) {
        const long long iy = oy * a.sh - a.ph + (long long)ky * a.dh;
        if (iy < 0 || iy >= a.h) continue;
        for (int kx = 0; kx < a.kw; kx++) {
            const long long ix = ox * a.sw - a.pw + (long long)kx * a.dw;
            if (ix < 0 || ix >= a.w) continue;
            const float v = yk_ld_@X@(x, xb + yl_pos(a, xs, ch, iy * a.w + ix, a.h * a.w));
            if (best < 0 || v > bv || v != v) best = iy * a.w + ix, bv = v;
        }
    }
    return best;
}
#endif
#ifdef YL_MAXPOOL2D_BWD
/* Whether plane offset p, holding v, is the maximum of window (oy, ox) as
 * yl_argmax picks it: no NaN after it (a NaN wins, the last one), and when
 * v is a number no NaN at all, nothing before it at least v (the first of
 * equals wins) and nothing after it greater. The scan stops at the first
 * value that says no, a few loads in most windows where yl_argmax reads
 * them all; p off the window's taps (padding, dilation) is never its maximum. */
__device__ __forceinline__ bool yl_is_argmax(const void *x, int xs, long long xb, long long ch, const YlArgs &a, long long oy, long long ox, long long p, float v) {
    const bool v_nan = v != v;
    bool seen = false;
    for (int ky = 0; ky < a.kh; ky++) {
        const long long iy = oy * a.sh - a.ph + (long long)ky * a.dh;
        if (iy < 0 || iy >= a.h) continue;
        for (int kx = 0; kx < a.kw; kx++) {
            const long long ix = ox * a.sw - a.pw + (long long)kx * a.dw;
            if (ix < 0 || ix >= a.w) continue;
            const long long q = iy * a.w + ix;
            if (q == p) {
                seen = true;
                continue;
            }
            const float u = yk_ld_@X@(x, xb + yl_pos(a, xs, ch, q, a.h * a.w));
            if (u != u ? seen || !v_nan : !v_nan && (seen ? u > v : u >= v)) return false;
        }
    }
    return seen;
}
#endif
#if defined(YL_MAXPOOL2D_BWD) || defined(YL_AVGPOOL2D_BWD)
/* Output rows (columns) whose windows may cover input row i: the windows
 * start at o * s - p and reach (k - 1) * d further. */
__device__ __forceinline__ void yl_cover(long long i, int k, int s, int p, int d, long long out, long long *lo, long long *hi) {
    const long long first = i + p - (long long)(k - 1) * d, last = (i + p) / s;
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = last < out - 1 ? last : out - 1;
}
#endif
#ifdef YL_MAXPOOL2D
/* @NAME@: maxpool2d(x) -> y */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    yl_each_pix(a, a.cl, a.c, a.oh, a.ow, [&](const YlPix &o) {
        const long long xb = o.n * a.bs[0], best = yl_argmax(a.t[0], 0, xb, o.ch, a, o.y, o.x);
        yk_st_@T1@(a.t[1], o.n * a.bs[1] + yl_pos(a, 1, o.ch, o.p, a.oh * a.ow), yk_ld_@T0@(a.t[0], xb + yl_pos(a, 0, o.ch, best, a.h * a.w)));
    });
}
#endif
#ifdef YL_MAXPOOL2D_BWD
/* @NAME@: maxpool2d_bwd(dy, x) -> dx; each window's gradient goes to its
 * argmax, summed in fp32 over the windows in row-major order */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    yl_each_pix(a, a.cl, a.c, a.h, a.w, [&](const YlPix &e) {
        const long long xb = e.n * a.bs[1], db = e.n * a.bs[0];
        long long y0, y1, x0, x1;
        yl_cover(e.y, a.kh, a.sh, a.ph, a.dh, a.oh, &y0, &y1);
        yl_cover(e.x, a.kw, a.sw, a.pw, a.dw, a.ow, &x0, &x1);
        const float v = yk_ld_@X@(a.t[1], xb + yl_pos(a, 1, e.ch, e.p, a.h * a.w));
        float acc = 0.0f;
        for (long long oy = y0; oy <= y1; oy++)
            for (long long ox = x0; ox <= x1; ox++)
                if (yl_is_argmax(a.t[1], 1, xb, e.ch, a, oy, ox, e.p, v)) acc += yk_ld_@T0@(a.t[0], db + yl_pos(a, 0, e.ch, oy * a.ow + ox, a.oh * a.ow));
        yk_st_@T2@(a.t[2], e.n * a.bs[2] + yl_pos(a, 2, e.ch, e.p, a.h * a.w), acc);
    });
}
#endif
#ifdef YL_AVGPOOL2D
/* @NAME@: avgpool2d(x) -> y; count_include_pad, an fp64 sum (no dilation, as the reference) */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    yl_each_pix(a, a.cl, a.c, a.oh, a.ow, [&](const YlPix &o) {
        const long long xb = o.n * a.bs[0];
        double acc = 0;
        for (int ky = 0; ky < a.kh; ky++)
            for (int kx = 0; kx < a.kw; kx++) {
                const long long iy = o.y * a.sh - a.ph + ky, ix = o.x * a.sw - a.pw + kx;
                if (iy >= 0 && iy < a.h && ix >= 0 && ix < a.w) acc += yk_ld_@T0@(a.t[0], xb + yl_pos(a, 0, o.ch, iy * a.w + ix, a.h * a.w));
            }
        yk_st_@T1@(a.t[1], o.n * a.bs[1] + yl_pos(a, 1, o.ch, o.p, a.oh * a.ow), (float)(acc / (double)(a.kh * a.kw)));
    });
}
#endif
#ifdef YL_AVGPOOL2D_BWD
/* @NAME@: avgpool2d_bwd(dy) -> dx; fp64 sums of dy / (kh * kw) over the covering windows */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    yl_each_pix(a, a.cl, a.c, a.h, a.w, [&](const YlPix &e) {
        const long long db = e.n * a.bs[0];
        long long y0, y1, x0, x1;
        yl_cover(e.y, a.kh, a.sh, a.ph, 1, a.oh, &y0, &y1);
        yl_cover(e.x, a.kw, a.sw, a.pw, 1, a.ow, &x0, &x1);
        double acc = 0;
        for (long long oy = y0; oy <= y1; oy++)
            for (long long ox = x0; ox <= x1; ox++) {
                const long long ky = e.y - (oy * a.sh - a.ph), kx = e.x - (ox * a.sw - a.pw);
                if (ky >= 0 && ky < a.kh && kx >= 0 && kx < a.kw) acc += yk_ld_@T0@(a.t[0], db + yl_pos(a, 0, e.ch, oy * a.ow + ox, a.oh * a.ow)) / (double)(a.kh * a.kw);
            }
        yk_st_@T1@(a.t[1], e.n * a.bs[1] + yl_pos(a, 1, e.ch, e.p, a.h * a.w), (float)acc);
    });
}
#endif
