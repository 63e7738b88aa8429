/* compiler/kernel_reuse.h — the C target's two-phase channel reductions
 * compute their costliest per-element value once (kernel_reuse.c). A
 * rewrite of kernel IR for rendering only: must not change a kernel's
 * results (its sums and its stores' bits), nor the kernels the CUDA target
 * renders. */
#ifndef YOLOCC_KERNEL_REUSE_H
#define YOLOCC_KERNEL_REUSE_H
#include "kernel_ir.h"

/* A second phase that stores one element per visit and recomputes, from
 * the same loads, a value its first phase already rounded to fp32 through
 * an exp, sigmoid, erf or pow: the BN-SiLU backward's activation gradient.
 * The rewrite has the first phase leave that value in the element the
 * second phase stores to (C stores fp32, so it is exact) and the second
 * phase read it back before overwriting it, so each element costs one
 * activation instead of two and the results keep their bits. True with
 * *out (its own code; kernel_reuse_free) where it applies; false, *out
 * untouched, where it does not. */
bool kernel_reuse_phase_value(const Kernel *k, Kernel *out);
void kernel_reuse_free(Kernel *k);

#endif
