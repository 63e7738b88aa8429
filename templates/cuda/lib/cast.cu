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
