/* Library kernel: ModelEMA's update of one fp32 state tensor in place,
 * t[0] (the EMA) from t[1] (the model): v = v * d, then v += e * m with
 * e = 1 - d, each product and sum rounded on its own as the host's
 * runtime/train/train_state.c computes it (no fused multiply-add), so an EMA
 * kept on the device equals the CPU trainer's bit for bit. */
#ifdef YK_HOST_EMULATION
__device__ __forceinline__ float yl_fmul(float x, float y) { return x * y; }
__device__ __forceinline__ float yl_fadd(float x, float y) { return x + y; }
#else
__device__ __forceinline__ float yl_fmul(float x, float y) { return __fmul_rn(x, y); }
__device__ __forceinline__ float yl_fadd(float x, float y) { return __fadd_rn(x, y); }
#endif
#ifdef YL_EMA
/* @NAME@: t[0][i] = t[0][i] * d + e * t[1][i] */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    YL_EACH(i) {
        const float v = yl_fmul(yk_ld_@T0@(a.t[0], i), a.ema_d);
        yk_st_@T0@(a.t[0], i, yl_fadd(v, yl_fmul(a.ema_e, yk_ld_@T1@(a.t[1], i))));
    }
}
#endif
