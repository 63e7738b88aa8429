/* Double-precision helpers of the library kernels that follow a reference's
 * fp64 arithmetic (attention, the box decode); emitted before their family
 * template by compiler/lib_kernels.c. */
#ifdef YK_HOST_EMULATION
__device__ __forceinline__ double yl_dmul(double x, double y) { return x * y; }
__device__ __forceinline__ double yl_neg_inf() { return -HUGE_VAL; }
#else
/* a product never contracted into an fma with the following sum: the
 * reference rounds the product and the sum separately */
__device__ __forceinline__ double yl_dmul(double x, double y) { return __dmul_rn(x, y); }
/* NVRTC has no math.h: the bits of -infinity */
__device__ __forceinline__ double yl_neg_inf() { return __longlong_as_double((long long)0xfff0000000000000ULL); }
#endif
