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

#include "../runtime/cuda/f16_bits.h"

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

/* cvt.rn.f16.f32 and cvt.f32.f16: the host's conversions, bit for bit */
static inline unsigned short yk_host_f32_to_f16(float f) { return f16_bits_from_f32_bits(__float_as_uint(f)); }
static inline float yk_host_f16_to_f32(unsigned short v) { return __uint_as_float(f32_bits_from_f16_bits(v)); }

#endif
