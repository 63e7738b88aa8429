/* tests/test_gemm_host.h — a GemmDesc (runtime/cuda/gemm_desc.h) carried out on the host with
 * cuBLAS's meaning: column-major storage, op() transposes, batches `stride` apart, fp32
 * accumulation, D = alpha * sum + beta * D rounded to D's type. The oracle the GEMM suites run
 * descriptors through; test helper only. */
#ifndef YOLOCC_TEST_GEMM_HOST_H
#define YOLOCC_TEST_GEMM_HOST_H
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/cuda/gemm_desc.h"

static inline size_t gemm_host_esz(DType d) { return d == DT_F32 ? 4 : 2; }

static inline float gemm_host_load(const GemmMat *m, const void *p, int64_t b, int64_t r, int64_t c) {
    float x;
    cuda_storage_to_f32(m->type, (const unsigned char *)p + (size_t)(b * m->stride + r + c * m->ld) * gemm_host_esz(m->type), &x, 1);
    return x;
}

/* element (i, p) of op(X) */
static inline float gemm_host_op(const GemmMat *m, const void *p, int64_t b, int64_t i, int64_t q) {
    return m->trans ? gemm_host_load(m, p, b, q, i) : gemm_host_load(m, p, b, i, q);
}

/* a, b: the logical operands' addresses (swapped here when g->swapped, as cublas_gemm_run does) */
static inline void gemm_host_run(const GemmDesc *g, const void *a, const void *b, void *d) {
    if (g->swapped) {
        const void *t = a;
        a = b, b = t;
    }
    for (int64_t n = 0; n < g->batch; n++)
        for (int64_t j = 0; j < g->n; j++)
            for (int64_t i = 0; i < g->m; i++) {
                float acc = 0;
                for (int64_t q = 0; q < g->k; q++) acc += gemm_host_op(&g->a, a, n, i, q) * gemm_host_op(&g->b, b, n, q, j);
                float out = g->alpha * acc;
                if (g->beta != 0) out += g->beta * gemm_host_load(&g->d, d, n, i, j);
                cuda_f32_to_storage(g->d.type, &out, (unsigned char *)d + (size_t)(n * g->d.stride + i + j * g->d.ld) * gemm_host_esz(g->d.type), 1);
            }
}

#endif
