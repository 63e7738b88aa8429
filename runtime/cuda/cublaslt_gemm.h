/* runtime/cuda/cublaslt_gemm.h — one GemmDesc (gemm_desc.h) as cuBLASLt descriptors: describes them, chooses an algorithm
 * by heuristic and enqueues the product. Owns those descriptors only; must not create handles or streams, allocate device
 * memory, change what a GemmDesc means (gemm_desc.c owns that) or include CUDA headers (cuda_abi.h mirrors the values). */
#ifndef YOLOCC_CUBLASLT_GEMM_H
#define YOLOCC_CUBLASLT_GEMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dynload.h"
#include "gemm_desc.h"

/* the cuBLASLt workspace every product may use: what NVIDIA recommends for
 * Hopper, and enough for every earlier architecture */
enum { CUBLAS_GEMM_WORKSPACE = 32 << 20 };

typedef struct CublasGemm {
    CublasLtMatmulDesc op;
    CublasLtMatrixLayout a, b, d;   /* d also serves as C (in place) */
    CublasLtMatmulAlgo algo;
    size_t workspace;               /* bytes the chosen algorithm needs */
    bool described, chosen;
} CublasGemm;

/* Creates the descriptors of g (cg need not be initialised; destroy a described one first): compute CUBLAS_COMPUTE_32F
 * (fp32 accumulation, never TF32), scale type CUDA_R_32F, TRANSA/TRANSB from g->a.trans / g->b.trans, layouts (type, rows,
 * cols, ld) with BATCH_COUNT and STRIDED_BATCH_OFFSET when g->batch > 1. Host-only calls: needs no device or handle.
 * False with a message naming the failing call and its cublasStatus; nothing stays created then. */
bool cublas_gemm_describe(CublasGemm *cg, const CudaLibs *L, const GemmDesc *g, char *err, int errcap);
/* Asks the heuristic for the best algorithm given the byte alignment of the LOGICAL A, B and D addresses the caller will
 * pass (swapped internally when g->swapped) and at most max_workspace bytes of workspace; false with a message when no
 * algorithm exists ("cuBLASLt has no algorithm for <gemm_desc_describe text> ..."). */
bool cublas_gemm_choose(CublasGemm *cg, const CudaLibs *L, CublasLtHandle h, const GemmDesc *g, unsigned align_a, unsigned align_b, unsigned align_d,
                        size_t max_workspace, char *err, int errcap);
/* Enqueues D = alpha op(A) op(B) + beta D on stream s with the chosen algorithm; a, b: the LOGICAL operands' device
 * addresses (swapped internally when g->swapped); ws: workspace of ws_bytes >= cg->workspace. */
bool cublas_gemm_run(const CublasGemm *cg, const CudaLibs *L, CublasLtHandle h, const GemmDesc *g, CuDevicePtr a, CuDevicePtr b, CuDevicePtr d,
                     CuDevicePtr ws, size_t ws_bytes, CuStream s, char *err, int errcap);
/* Destroys what cublas_gemm_describe created and zeroes cg (safe on a zeroed or failed one). */
void cublas_gemm_destroy(CublasGemm *cg, const CudaLibs *L);
/* Pure: the largest power of two <= 16 dividing the byte address addr (16 for 0). */
unsigned cublas_gemm_alignment(uint64_t addr);
/* Pure: the byte alignment every batch of LOGICAL operand which (0: A, 1: B, 2: D) of g keeps when its first batch is at
 * addr: the address's, and over several batches also the batch stride's (what cublas_gemm_choose must be told). */
unsigned cublas_gemm_operand_alignment(const GemmDesc *g, int which, uint64_t addr);

#endif
