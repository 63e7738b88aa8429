/* Library kernel: fp16 loss scaling's unscale, in place over one fp32
 * gradient: t[0][i] /= t[1][0], a.total elements, grid-stride. The scale is
 * read from device memory (the plan's grad_seed input), so a captured CUDA
 * graph replays with whatever scale the step uploaded; it is a power of two,
 * so the division is exact and inf / NaN stay non-finite for the norm. */
#ifdef YL_UNSCALE
/* @NAME@: t[0][i] = t[0][i] / t[1][0] */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const float s = yk_ld_@T1@(a.t[1], 0);
    YL_EACH(i)
        yk_st_@T0@(a.t[0], i, yk_ld_@T0@(a.t[0], i) / s);
}
#endif
