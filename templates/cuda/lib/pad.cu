/* Library kernels: zero padding and its gradient, the crop, as
 * runtime/ref_layout.c computes them. The small plane is h x w, the padded
 * one oh x ow, a.ph rows above and a.pw columns left of it. One thread per
 * output element (grid-stride); image n of operand s starts at n * a.bs[s]. */
#define YL_EACH(i) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.total; i += (long long)gridDim.x * blockDim.x)
#ifdef YL_ZEROPAD2D
/* @NAME@: zeropad2d(x [h, w]) -> y [oh, ow] */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const long long plane = a.oh * a.ow, per = a.c * plane;
    YL_EACH(i) {
        const long long n = i / per, r = i - n * per, c = r / plane, p = r - c * plane, oy = p / a.ow, ox = p - oy * a.ow;
        const long long iy = oy - a.ph, ix = ox - a.pw;
        const float v = iy >= 0 && iy < a.h && ix >= 0 && ix < a.w ? yk_ld_@T0@(a.t[0], n * a.bs[0] + (c * a.h + iy) * a.w + ix) : 0.0f;
        yk_st_@T1@(a.t[1], n * a.bs[1] + r, v);
    }
}
#endif
#ifdef YL_CROP2D
/* @NAME@: crop2d(dy [oh, ow]) -> dx [h, w] */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const long long plane = a.h * a.w, per = a.c * plane;
    YL_EACH(i) {
        const long long n = i / per, r = i - n * per, c = r / plane, p = r - c * plane, y = p / a.w, x = p - y * a.w;
        yk_st_@T1@(a.t[1], n * a.bs[1] + r, yk_ld_@T0@(a.t[0], n * a.bs[0] + (c * a.oh + y + a.ph) * a.ow + x + a.pw));
    }
}
#endif
