/* runtime/cuda/cublaslt_gemm.c — cuBLASLt descriptors, heuristic choice and the enqueued product of one GemmDesc
 * (cublaslt_gemm.h); every cuBLASLt status is checked and named. Must not reinterpret the GemmDesc (gemm_desc.c owns its
 * meaning), allocate device memory, create handles or include CUDA headers (the values are cuda_abi.h's). */
#include "cublaslt_gemm.h"

#include <stdio.h>
#include <string.h>

#include "../../ir/diag.h"
#include "cuda_abi.h"

static const char *status_name(CublasStatus s) {
    switch (s) {
    case LT_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case LT_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case LT_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case LT_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case LT_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case LT_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case LT_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case LT_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case LT_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case LT_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "an unknown cublasStatus_t";
    }
}

static bool lt_ok(CublasStatus s, const char *call, const char *doing, const GemmDesc *g, char *err, int errcap) {
    if (s == LT_STATUS_SUCCESS) return true;
    char what[192];
    gemm_desc_describe(g, what, sizeof what);
    return errf(err, errcap, "%s failed with %s (%d) while %s of %s", call, status_name(s), s, doing, what);
}
#define LT(fn, args, doing) lt_ok(L->fn args, #fn, (doing), g, err, errcap)

/* cudaDataType_t of an operand; -1 for what cuBLASLt does not multiply here */
static int data_type(DType t) { return t == DT_F32 ? LT_R_32F : t == DT_BF16 ? LT_R_16BF : t == DT_F16 ? LT_R_16F : -1; }

/* One operand's layout: column-major (the default order) rows x cols with leading dimension ld, strided over the batch. */
static bool layout(const CudaLibs *L, CublasLtMatrixLayout *l, const char *name, const GemmMat *m, const GemmDesc *g, char *err, int errcap) {
    char doing[64];
    int type = data_type(m->type);
    if (type < 0) return errf(err, errcap, "cuBLASLt: %s of %s is not fp32, bf16 or fp16", name, dtype_name(m->type));
    snprintf(doing, sizeof doing, "creating %s's layout", name);
    if (!LT(cublasLtMatrixLayoutCreate, (l, type, (uint64_t)m->rows, (uint64_t)m->cols, m->ld), doing)) return false;
    if (g->batch == 1) return true;
    int32_t count = (int32_t)g->batch; /* CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: int32_t */
    int64_t stride = m->stride;        /* CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: int64_t, in elements */
    snprintf(doing, sizeof doing, "setting %s's batch count", name);
    if (!LT(cublasLtMatrixLayoutSetAttribute, (*l, LT_LAYOUT_BATCH_COUNT, &count, sizeof count), doing)) return false;
    snprintf(doing, sizeof doing, "setting %s's batch stride", name);
    return LT(cublasLtMatrixLayoutSetAttribute, (*l, LT_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride), doing);
}

bool cublas_gemm_describe(CublasGemm *cg, const CudaLibs *L, const GemmDesc *g, char *err, int errcap) {
    memset(cg, 0, sizeof *cg);
    if (g->batch < 1 || g->batch > INT32_MAX)
        return errf(err, errcap, "cuBLASLt: a batch of %lld products (its batch count is an int32_t)", (long long)g->batch);
    int32_t ta = g->a.trans ? LT_OP_T : LT_OP_N, tb = g->b.trans ? LT_OP_T : LT_OP_N; /* TRANSA, TRANSB: int32_t cublasOperation_t */
    /* compute and scale types are the create call's arguments: fp32 accumulation (not CUBLAS_COMPUTE_32F_FAST_TF32), float alpha and beta */
    bool ok = LT(cublasLtMatmulDescCreate, (&cg->op, LT_COMPUTE_32F, LT_R_32F), "creating the matmul descriptor") &&
              LT(cublasLtMatmulDescSetAttribute, (cg->op, LT_DESC_TRANSA, &ta, sizeof ta), "setting TRANSA") &&
              LT(cublasLtMatmulDescSetAttribute, (cg->op, LT_DESC_TRANSB, &tb, sizeof tb), "setting TRANSB") &&
              layout(L, &cg->a, "A", &g->a, g, err, errcap) && layout(L, &cg->b, "B", &g->b, g, err, errcap) &&
              layout(L, &cg->d, "D", &g->d, g, err, errcap);
    if (!ok) return cublas_gemm_destroy(cg, L), false;
    cg->described = true;
    return true;
}

bool cublas_gemm_choose(CublasGemm *cg, const CudaLibs *L, CublasLtHandle h, const GemmDesc *g, unsigned align_a, unsigned align_b, unsigned align_d,
                        size_t max_workspace, char *err, int errcap) {
    if (!cg->described) return errf(err, errcap, "cuBLASLt: an algorithm asked for a product that was not described");
    cg->chosen = false;
    /* cuBLAS's A is the logical B when the product was transposed (gemm_desc.h); C is D */
    uint32_t align[4] = {g->swapped ? align_b : align_a, g->swapped ? align_a : align_b, align_d, align_d}; /* MIN_ALIGNMENT_*_BYTES: uint32_t */
    static const int attr[4] = {LT_PREF_MIN_ALIGNMENT_A_BYTES, LT_PREF_MIN_ALIGNMENT_B_BYTES, LT_PREF_MIN_ALIGNMENT_C_BYTES, LT_PREF_MIN_ALIGNMENT_D_BYTES};
    static const char *const doing[4] = {"setting A's minimum alignment", "setting B's minimum alignment", "setting C's minimum alignment",
                                         "setting D's minimum alignment"};
    uint64_t ws = max_workspace; /* MAX_WORKSPACE_BYTES: uint64_t */
    CublasLtMatmulPreference pref = NULL;
    bool ok = LT(cublasLtMatmulPreferenceCreate, (&pref), "creating the matmul preference") &&
              LT(cublasLtMatmulPreferenceSetAttribute, (pref, LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "setting the workspace limit");
    for (int i = 0; i < 4 && ok; i++) ok = LT(cublasLtMatmulPreferenceSetAttribute, (pref, attr[i], &align[i], sizeof align[i]), doing[i]);
    CublasLtMatmulHeuristicResult r;
    memset(&r, 0, sizeof r);
    int returned = 0;
    CublasStatus s = ok ? L->cublasLtMatmulAlgoGetHeuristic(h, cg->op, cg->a, cg->b, cg->d, cg->d, pref, 1, &r, &returned) : LT_STATUS_SUCCESS;
    if (pref) (void)L->cublasLtMatmulPreferenceDestroy(pref); /* releasing a host-side descriptor cannot leave anything behind */
    if (!ok) return false;
    if (s == LT_STATUS_NOT_SUPPORTED || (s == LT_STATUS_SUCCESS && (returned < 1 || r.state != LT_STATUS_SUCCESS))) {
        char what[192];
        gemm_desc_describe(g, what, sizeof what);
        return errf(err, errcap, "cuBLASLt has no algorithm for %s (A, B, D aligned to %u, %u, %u bytes; at most %zu bytes of workspace)", what, align_a,
                    align_b, align_d, max_workspace);
    }
    if (!lt_ok(s, "cublasLtMatmulAlgoGetHeuristic", "choosing an algorithm", g, err, errcap)) return false;
    cg->algo = r.algo, cg->workspace = r.workspace_size, cg->chosen = true;
    return true;
}

static void *dev(CuDevicePtr p) { return (void *)(uintptr_t)p; }

bool cublas_gemm_run(const CublasGemm *cg, const CudaLibs *L, CublasLtHandle h, const GemmDesc *g, CuDevicePtr a, CuDevicePtr b, CuDevicePtr d,
                     CuDevicePtr ws, size_t ws_bytes, CuStream s, char *err, int errcap) {
    if (!cg->chosen || ws_bytes < cg->workspace) {
        /* described only for the message: a run is on every step's path */
        char what[192];
        gemm_desc_describe(g, what, sizeof what);
        if (!cg->chosen) return errf(err, errcap, "cuBLASLt: %s runs before an algorithm was chosen", what);
        return errf(err, errcap, "cuBLASLt: the algorithm for %s needs %zu bytes of workspace, %zu given", what, cg->workspace, ws_bytes);
    }
    CuDevicePtr pa = g->swapped ? b : a, pb = g->swapped ? a : b;
    return LT(cublasLtMatmul, (h, cg->op, &g->alpha, dev(pa), cg->a, dev(pb), cg->b, &g->beta, dev(d), cg->d, dev(d), cg->d, &cg->algo, dev(ws), ws_bytes, s),
              "enqueueing the product");
}

void cublas_gemm_destroy(CublasGemm *cg, const CudaLibs *L) {
    /* releasing host-side descriptors cannot leave anything behind */
    if (cg->d) (void)L->cublasLtMatrixLayoutDestroy(cg->d);
    if (cg->b) (void)L->cublasLtMatrixLayoutDestroy(cg->b);
    if (cg->a) (void)L->cublasLtMatrixLayoutDestroy(cg->a);
    if (cg->op) (void)L->cublasLtMatmulDescDestroy(cg->op);
    memset(cg, 0, sizeof *cg);
}

unsigned cublas_gemm_alignment(uint64_t addr) {
    unsigned a = 16;
    while (a > 1 && addr % a) a /= 2;
    return a;
}

unsigned cublas_gemm_operand_alignment(const GemmDesc *g, int which, uint64_t addr) {
    /* the stored A is the logical B when the product was transposed */
    const GemmMat *m = which == 2 ? &g->d : (which == 0) != g->swapped ? &g->a : &g->b;
    unsigned a = cublas_gemm_alignment(addr);
    if (g->batch > 1) {
        unsigned s = cublas_gemm_alignment((uint64_t)m->stride * (m->type == DT_F32 ? 4 : 2));
        if (s < a) a = s;
    }
    return a;
}
