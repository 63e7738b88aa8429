/* tests/cuda_host_shim.h — lets the rendered CUDA source of the generated
 * and library kernels compile as host C++ (g++ -x c++ -include this file),
 * so tests/test_cuda_emul.c can run them on the CPU. Only the CUDA pieces
 * the grid-stride kernels use exist here: the qualifiers, the launch
 * geometry (set per emulated thread by yk_emu_thread), the bit casts, and
 * the fp16 conversions templates/cuda/prelude.cu calls under
 * YK_HOST_EMULATION in place of its PTX `cvt` instructions (round to
 * nearest even, NaN stays NaN, overflow to infinity, subnormals exact: the
 * arithmetic of runtime/cuda/cuda_convert.c). Grid-stride kernels run one
 * emulated thread at a time (yk_emu_thread); kernels that need a real block
 * (channel reduce, list norm: shared memory, __syncthreads, atomics) run
 * through yk_emu_grid, one POSIX thread per CUDA thread and a barrier for
 * __syncthreads. Test-only: never part of a plan or of NVRTC's input. */
#ifndef YK_CUDA_HOST_SHIM_H
#define YK_CUDA_HOST_SHIM_H
#define YK_HOST_EMULATION 1
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
/* each POSIX thread of yk_emu_grid is one CUDA thread: its own indices */
static thread_local yk_emu_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
static yk_emu_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
/* the running block's barrier (yk_emu_grid), else none: one thread at a time */
static pthread_barrier_t *yk_emu_barrier;

/* The emulated thread (block b of grid blocks, thread t of block threads)
 * that the next kernel call runs as. */
extern "C" __attribute__((visibility("default"))) void yk_emu_thread(unsigned int grid, unsigned int block, unsigned int b, unsigned int t) {
    gridDim.x = grid, blockDim.x = block, blockIdx.x = b, threadIdx.x = t;
}

/* The block row (blockIdx.y of gy) the next calls run as: a multi-tensor map's row. */
extern "C" __attribute__((visibility("default"))) void yk_emu_block_y(unsigned int gy, unsigned int by) { gridDim.y = gy, blockIdx.y = by; }

static inline void __syncthreads(void) {
    if (yk_emu_barrier) pthread_barrier_wait(yk_emu_barrier);
}
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline unsigned int atomicAdd(unsigned int *p, unsigned int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

/* A grid of gx x gy blocks of `block` threads: every thread calls
 * call(fn, args). The blocks run one after another, last first, so the
 * block that finishes a split reduction is the first of the grid, not the
 * last; a block's threads all run at once and meet at __syncthreads. */
typedef struct YkEmuGrid {
    void (*call)(void *fn, const void *args);
    void *fn;
    const void *args;
    unsigned int gx, gy;
    pthread_barrier_t bar;
} YkEmuGrid;

typedef struct YkEmuThread {
    YkEmuGrid *g;
    unsigned int t;
} YkEmuThread;

static void *yk_emu_grid_thread(void *p) {
    const YkEmuThread *me = (const YkEmuThread *)p;
    YkEmuGrid *g = me->g;
    for (unsigned int b = g->gx * g->gy; b-- > 0;) {
        blockIdx = {b % g->gx, b / g->gx, 0};
        threadIdx = {me->t, 0, 0};
        g->call(g->fn, g->args);
        pthread_barrier_wait(&g->bar);
    }
    return NULL;
}

extern "C" __attribute__((visibility("default"))) int yk_emu_grid(void (*call)(void *fn, const void *args), void *fn, const void *args, unsigned int gx, unsigned int gy,
                                                                unsigned int block) {
    YkEmuGrid g = {call, fn, args, gx, gy, {}};
    pthread_t *th = (pthread_t *)calloc(block, sizeof *th);
    YkEmuThread *me = (YkEmuThread *)calloc(block, sizeof *me);
    int rc = th && me ? pthread_barrier_init(&g.bar, NULL, block) : -1;
    if (rc != 0) {
        free(th), free(me);
        return -1;
    }
    gridDim = {gx, gy, 1}, blockDim = {block, 1, 1};
    yk_emu_barrier = &g.bar;
    unsigned int started = 0;
    for (; started < block; started++) {
        me[started] = {&g, started};
        if (pthread_create(&th[started], NULL, yk_emu_grid_thread, &me[started]) != 0) break;
    }
    /* a thread that cannot start would leave the others at the barrier for ever */
    if (started < block) {
        fprintf(stderr, "yk_emu_grid: could not start thread %u of %u\n", started, block);
        abort();
    }
    for (unsigned int t = 0; t < block; t++) pthread_join(th[t], NULL);
    yk_emu_barrier = NULL;
    pthread_barrier_destroy(&g.bar);
    free(th), free(me);
    return 0;
}
/* CUDA's built-in vector types that the copies move (16 and 8 bytes, aligned as on the device) */
struct __attribute__((aligned(16))) uint4 {
    unsigned int x, y, z, w;
};
struct __attribute__((aligned(8))) uint2 {
    unsigned int x, y;
};
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
/* the fast intrinsics of templates/cuda/prelude.cu's sigmoid: exact on the
 * host (a macro: glibc's math.h declares a __expf of its own) */
#define __expf(x) expf(x)
static inline float __fdividef(float x, float y) { return x / y; }
/* the high 32 bits of the 64-bit product */
static inline unsigned int __umulhi(unsigned int x, unsigned int y) { return (unsigned int)(((unsigned long long)x * y) >> 32); }

/* cvt.rn.f16.f32 and cvt.f32.f16: the host's conversions, bit for bit */
static inline unsigned short yk_host_f32_to_f16(float f) { return f16_bits_from_f32_bits(__float_as_uint(f)); }
static inline float yk_host_f16_to_f32(unsigned short v) { return __uint_as_float(f32_bits_from_f16_bits(v)); }

#endif
