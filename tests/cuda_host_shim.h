/* tests/cuda_host_shim.h — lets the rendered CUDA source of the generated
 * and library kernels compile as host C++ (g++ -x c++ -include this file),
 * so tests/test_cuda_emul.c can run them on the CPU. Only the CUDA pieces
 * the grid-stride kernels use exist here: the qualifiers, the launch
 * geometry (set per emulated thread by yk_emu_thread), the bit casts, and
 * the fp16 conversions templates/cuda/prelude.cu calls under
 * YK_HOST_EMULATION in place of its PTX `cvt` instructions (round to
 * nearest even, NaN stays NaN, overflow to infinity, subnormals exact: the
 * arithmetic of runtime/cuda/cuda_convert.c). __syncthreads is a no-op, so
 * kernels that need a real block (channel reduce, list norm) must not be
 * run through it. Test-only: never part of a plan or of NVRTC's input. */
#ifndef YK_CUDA_HOST_SHIM_H
#define YK_CUDA_HOST_SHIM_H
#define YK_HOST_EMULATION 1
#include <math.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct yk_emu_dim3 {
    unsigned int x, y, z;
};
static yk_emu_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

/* The emulated thread (block b of grid blocks, thread t of block threads)
 * that the next kernel call runs as. */
extern "C" __attribute__((visibility("default"))) void yk_emu_thread(unsigned int grid, unsigned int block, unsigned int b, unsigned int t) {
    gridDim.x = grid, blockDim.x = block, blockIdx.x = b, threadIdx.x = t;
}

static inline void __syncthreads(void) {}
static inline float __uint_as_float(unsigned int u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
static inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    memcpy(&u, &f, 4);
    return u;
}

/* cvt.rn.f16.f32 */
static inline unsigned short yk_host_f32_to_f16(float f) {
    unsigned int u = __float_as_uint(f);
    unsigned int sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* 65520 and up round to infinity */
    if (a <= 0x33000000u) return (unsigned short)sign;              /* 2^-25 and below round to zero */
    unsigned int e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
    if (e < 113) { /* an fp16 subnormal m * 2^-24 */
        unsigned int shift = 126 - e, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1), m = mant >> shift;
        if (rem > half || (rem == half && (m & 1u))) m++;
        return (unsigned short)(sign | m);
    }
    unsigned int h = ((e - 112) << 10) | ((a >> 13) & 0x3ffu), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (unsigned short)(sign | h);
}

/* cvt.f32.f16 (exact) */
static inline float yk_host_f16_to_f32(unsigned short v) {
    unsigned int sign = (unsigned int)(v & 0x8000u) << 16, e = (v >> 10) & 0x1fu, m = v & 0x3ffu, u;
    if (e == 0x1f) u = sign | 0x7f800000u | (m << 13);
    else if (e) u = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) u = sign;
    else {
        e = 113;
        while (!(m & 0x400u)) m <<= 1, e--;
        u = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    return __uint_as_float(u);
}

#endif
