/* runtime/cuda/cuda_attention.h — runs one attention / attention_bwd op on a device through
 * cuBLASLt: its work list (attention_gemm.h), each product with an algorithm chosen once for
 * the addresses it will see, the kernels around them from functions the caller loaded. Owns the
 * op's cuBLASLt descriptors; must not allocate device memory (the caller binds the scratch and
 * the cuBLASLt workspace) or decide whether an op takes this route (cuda_step.c does). */
#ifndef YOLOCC_CUDA_ATTENTION_H
#define YOLOCC_CUDA_ATTENTION_H
#include "attention_gemm.h"
#include "cublaslt_gemm.h"

/* the cuBLASLt workspace every product may use, after the op's scratch: what
 * NVIDIA recommends for Hopper, and enough for every earlier architecture */
enum { CUDA_ATT_GEMM_WORKSPACE = 32 << 20 };

typedef struct CudaAttOp {
    AttGemm ag;
    CublasGemm gemm[AG_ROLES];
    CuFunction fn[3];   /* LK_ATT_PARTIALS, LK_ATT_ROWS, LK_ATT_VCOPY */
    bool chosen;
} CudaAttOp;

/* Pure: the device address of each buffer: the op's tensors from ptr (by tensor id), the
 * scratch's parts from scratch. */
void cuda_attention_buffers(const CudaAttOp *a, const Op *op, const CuDevicePtr *ptr, CuDevicePtr scratch, CuDevicePtr buf[AB_COUNT]);
/* Describes the op's products and chooses their algorithms for the addresses buf holds (each
 * product's alignment is the worst over the slices) with at most CUDA_ATT_GEMM_WORKSPACE
 * bytes of workspace. a->ag is built and a->fn set by the caller. False with a message (the op
 * then runs its library kernels, and the caller says so); a stays to be freed. */
bool cuda_attention_prepare(CudaAttOp *a, const CudaLibs *L, CublasLtHandle h, const CuDevicePtr buf[AB_COUNT], char *err, int errcap);
/* Enqueues the op's work on stream s: buf as prepared, the cuBLASLt workspace at ws
 * (CUDA_ATT_GEMM_WORKSPACE bytes), kernels in grids for sm_count multiprocessors. */
bool cuda_attention_run(const CudaAttOp *a, const CudaLibs *L, CublasLtHandle h, const CuDevicePtr buf[AB_COUNT], CuDevicePtr ws, int sm_count, CuStream s,
                        char *err, int errcap);
/* Destroys the descriptors and frees a->ag (safe on a zeroed or failed one). */
void cuda_attention_free(CudaAttOp *a, const CudaLibs *L);

#endif
