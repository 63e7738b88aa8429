/* Library kernels: zero padding and its gradient, the crop, as
 * runtime/ref_layout.c computes them. The small plane is h x w, the padded
 * one oh x ow, a.ph rows above and a.pw columns left of it. One thread per
 * output element (grid-stride); image n of operand s starts at n * a.bs[s];
 * both NCHW or, when a.cl is set, channels last. */
#ifdef YL_ZEROPAD2D
/* @NAME@: zeropad2d(x [h, w]) -> y [oh, ow] */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    yl_each_pix(a, a.cl, a.c, a.oh, a.ow, [&](const YlPix &o) {
        const long long iy = o.y - a.ph, ix = o.x - a.pw;
        const float v = iy >= 0 && iy < a.h && ix >= 0 && ix < a.w ? yk_ld_@T0@(a.t[0], o.n * a.bs[0] + yl_at(a.cl, o.ch, iy * a.w + ix, a.c, a.h * a.w)) : 0.0f;
        yk_st_@T1@(a.t[1], o.n * a.bs[1] + o.r, v);
    });
}
#endif
#ifdef YL_CROP2D
/* @NAME@: crop2d(dy [oh, ow]) -> dx [h, w] */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    yl_each_pix(a, a.cl, a.c, a.h, a.w, [&](const YlPix &e) {
        yk_st_@T1@(a.t[1], e.n * a.bs[1] + e.r, yk_ld_@T0@(a.t[0], e.n * a.bs[0] + yl_at(a.cl, e.ch, (e.y + a.ph) * a.ow + e.x + a.pw, a.c, a.oh * a.ow)));
    });
}
#endif
