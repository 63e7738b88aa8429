/* runtime/cuda/cuda_attention.h — runs one attention / attention_bwd op on a device through
 * cuBLASLt: its work list (attention_gemm.h), each product with an algorithm chosen once for
 * the addresses it will see, the kernels around them from functions the caller loaded. Owns the
 * op's cuBLASLt descriptors; must not allocate device memory (the caller binds the scratch and
 * the cuBLASLt workspace) or decide whether an op takes this route (cuda_step.c does). */
#ifndef YOLOCC_CUDA_ATTENTION_H
#define YOLOCC_CUDA_ATTENTION_H
#include "attention_gemm.h"
#include "cublaslt_gemm.h"

typedef struct CudaAttOp {
    AttGemm ag;
    CublasGemm gemm[AG_ROLES];
    CuFunction fn[3];   /* LK_ATT_PARTIALS, LK_ATT_ROWS, LK_ATT_VCOPY */
    CuDevicePtr buf[AB_COUNT];  /* each buffer's device address, bound by prepare */
    bool chosen;
} CudaAttOp;

/* Binds the op's buffers (its tensors at ptr, by tensor id; the scratch's parts at scratch),
 * describes its products and chooses their algorithms for those addresses (each product's
 * alignment is the worst over the slices and the batch strides) with at most
 * CUBLAS_GEMM_WORKSPACE bytes of workspace. a->ag is built and a->fn set by the caller.
 * False with a message (the op then runs its library kernels, and the caller says so); a
 * stays to be freed. */
bool cuda_attention_prepare(CudaAttOp *a, const CudaLibs *L, CublasLtHandle h, const Op *op, const CuDevicePtr *ptr, CuDevicePtr scratch, char *err, int errcap);
/* Enqueues the op's work on stream s on the buffers prepare bound: the cuBLASLt workspace at
 * ws (CUBLAS_GEMM_WORKSPACE bytes), kernels in grids for sm_count multiprocessors. */
bool cuda_attention_run(const CudaAttOp *a, const CudaLibs *L, CublasLtHandle h, CuDevicePtr ws, int sm_count, CuStream s, char *err, int errcap);
void cuda_attention_free(CudaAttOp *a, const CudaLibs *L);

#endif
