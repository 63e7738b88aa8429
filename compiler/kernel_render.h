/* compiler/kernel_render.h — kernel IR to source text: C for the CPU target
 * (all kernels of a plan in one translation unit) and CUDA C++ for NVRTC (one
 * self-contained program per kernel). The skeletons come from templates/.
 * Knows nothing of compilers or plans. */
#ifndef YOLOCC_KERNEL_RENDER_H
#define YOLOCC_KERNEL_RENDER_H
#include "kernel_ir.h"

typedef enum { KT_C, KT_CUDA } KTarget;

/* malloc'd NUL-terminated source, or NULL (a missing template, out of memory).
 * reuse_phase_values: two-phase reductions compute their costliest element
 * value once (kernel_reuse.h); plans are built with it, the tests compare
 * the two. */
char *kernel_render_c_unit(const KProgram *kp, bool reuse_phase_values);
char *kernel_render_cuda(const Kernel *k);

#endif
