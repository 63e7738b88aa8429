/* Library kernels: nearest resize and its gradient, as runtime/ref_layout.c
 * computes them. Operands: input, then output; one thread per output
 * element (grid-stride); image n of operand s starts at n * a.bs[s]; both
 * NCHW or, when a.cl is set, channels last, pixels a.ps[s] apart. */
/* Source index of destination index i: floor(i * in / out) in double, as
 * PyTorch's nearest mode and the reference compute it. */
__device__ __forceinline__ long long yl_nearest(long long i, long long in, long long out) {
    const long long s = (long long)floor((double)i * ((double)in / (double)out));
    return s < in ? s : in - 1;
}
#ifdef YL_RESIZE_NEAREST
/* @NAME@: resize_nearest(x [h, w]) -> y [oh, ow] */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    yl_each_pix(a, a.cl, a.c, a.oh, a.ow, [&](const YlPix &o) {
        const long long src = o.n * a.bs[0] + yl_pos(a, 0, o.ch, yl_nearest(o.y, a.h, a.oh) * a.w + yl_nearest(o.x, a.w, a.ow), a.h * a.w);
        yk_st_@T1@(a.t[1], o.n * a.bs[1] + yl_pos(a, 1, o.ch, o.p, a.oh * a.ow), yk_ld_@T0@(a.t[0], src));
    });
}
#endif
#ifdef YL_RESIZE_NEAREST_BWD
/* The first destination index whose source may be i: the mapping is
 * monotonic and rounding moves it by less than one step. */
__device__ __forceinline__ long long yl_first(long long i, long long in, long long out) {
    const long long f = i * out / in - 1;
    return f > 0 ? f : 0;
}
/* @NAME@: resize_nearest_bwd(dy [oh, ow]) -> dx [h, w]: each input sums the
 * gradients of the outputs that copied it, in fp32 and row-major order */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    yl_each_pix(a, a.cl, a.c, a.h, a.w, [&](const YlPix &e) {
        const long long iy = e.y, ix = e.x, db = e.n * a.bs[0], x0 = yl_first(ix, a.w, a.ow);
        float acc = 0.0f;
        for (long long y = yl_first(iy, a.h, a.oh); y < a.oh; y++) {
            const long long sy = yl_nearest(y, a.h, a.oh);
            if (sy < iy) continue;
            if (sy > iy) break;
            for (long long x = x0; x < a.ow; x++) {
                const long long sx = yl_nearest(x, a.w, a.ow);
                if (sx < ix) continue;
                if (sx > ix) break;
                acc += yk_ld_@T0@(a.t[0], db + yl_pos(a, 0, e.ch, y * a.ow + x, a.oh * a.ow));
            }
        }
        yk_st_@T1@(a.t[1], e.n * a.bs[1] + yl_pos(a, 1, e.ch, e.p, a.h * a.w), acc);
    });
}
#endif
