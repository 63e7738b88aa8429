/* runtime/cuda/gemm_desc.h — one strided-batched matrix product in cuBLAS's column-major terms,
 * made from logical matrices with arbitrary row and column strides (so callers describe tensors
 * as they lie, NCHW or channels last). Pure: no device, no library calls; cublaslt_gemm.h turns a
 * GemmDesc into cuBLASLt descriptors, and the tests run one on the host with the same meaning. */
#ifndef YOLOCC_GEMM_DESC_H
#define YOLOCC_GEMM_DESC_H
#include <stdbool.h>
#include <stdint.h>

#include "../../ir/ir.h"

/* A logical matrix: element (r, c) of batch b at its base + r * rs + c * cs + b * bs elements. */
typedef struct GemmView {
    DType type;
    int64_t rs, cs, bs;
} GemmView;

/* A matrix as cuBLAS stores it: column-major, element (r, c) at r + c * ld,
 * batch b at b * stride; trans: the product reads its transpose (A and B). */
typedef struct GemmMat {
    DType type;
    int64_t rows, cols, ld, stride;
    bool trans;
} GemmMat;

/* D[b] (m x n) = alpha * op(A[b]) (m x k) * op(B[b]) (k x n) + beta * D[b],
 * for b < batch; C is D (in place), accumulated in fp32. swapped: the
 * logical product was made column-major by computing its transpose, so the
 * caller passes B's address as A's and A's as B's (gemm_desc_make says). */
typedef struct GemmDesc {
    int64_t m, n, k, batch;
    GemmMat a, b, d;
    float alpha, beta;
    bool swapped;
} GemmDesc;

/* Pure: the GemmDesc of logical D (m x n) = alpha * A (m x k) * B (k x n) +
 * beta * D over batch batches. False with a message when an operand has no
 * unit stride in either dimension, a leading dimension that overlaps its
 * rows, D batches that overlap, sizes past int32, or when cuBLASLt has no
 * such type combination (A and B one type; D of that type or fp32; fp32
 * inputs give fp32). */
bool gemm_desc_make(GemmDesc *g, int64_t m, int64_t n, int64_t k, int64_t batch, GemmView a, GemmView b, GemmView d, float alpha, float beta, char *err,
                    int errcap);
/* "[64x400] = [64x32]^T [32x400] x16 bf16 -> f32" */
void gemm_desc_describe(const GemmDesc *g, char *buf, int cap);

#endif
