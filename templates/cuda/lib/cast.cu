/* Library kernel: the parameters' compute copies, fp32 master -> bf16 or
 * fp16 with round to nearest even (the prelude's stores), a.total elements,
 * grid-stride. */
#ifdef YL_CAST
/* @NAME@: t[1][i] = t[0][i] */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    YL_EACH(i)
        yk_st_@T1@(a.t[1], i, yk_ld_@T0@(a.t[0], i));
}
#endif
/* Library kernel: a batch's pixels as bytes (t[1], what the loader decoded)
 * into the images input (t[0], its storage type): value / 255 rounded once
 * in fp32 as the loader's table holds it on the host, then stored with round
 * to nearest even. A quarter of fp32's bytes cross the bus. */
#ifdef YK_HOST_EMULATION
__device__ __forceinline__ float yl_div255(unsigned char v) { return (float)v / 255.0f; }
#else
__device__ __forceinline__ float yl_div255(unsigned char v) { return __fdiv_rn((float)v, 255.0f); }
#endif
#ifdef YL_IMAGES_U8
/* @NAME@: t[0][i] = t[1][i] / 255 */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const unsigned char *px = (const unsigned char *)a.t[1];
    YL_EACH(i)
        yk_st_@T0@(a.t[0], i, yl_div255(px[i]));
}
#endif
