/* tests/test_cublaslt.c — runtime/cuda/gemm_desc.c and runtime/cuda/cublaslt_gemm.c without a GPU: the GemmDesc of
 * logical products worked out by hand (and the ones it refuses); the GemmDesc's meaning run on the host against the
 * logical product for random strided operands; and the real cuBLASLt building every descriptor cublas_gemm_describe
 * makes, with the toolkit's stub driver (the heuristic and the product need a device and are not run). Owns no runtime code. */
#include "../runtime/cuda/cublaslt_gemm.h"
#include "../runtime/cuda/cuda_abi.h"
#include "../runtime/cuda/gemm_desc.h"
#include "test_gemm_host.h"
#include "test_gpu.h"

static GemmView view(DType t, int64_t rs, int64_t cs, int64_t bs) { return (GemmView){t, rs, cs, bs}; }

static void expect_mat(const char *what, const char *name, const GemmMat *got, GemmMat want) {
    cr_assert(got->type == want.type && got->rows == want.rows && got->cols == want.cols && got->ld == want.ld && got->stride == want.stride &&
                  got->trans == want.trans,
              "%s: %s is %s %lldx%lld ld %lld stride %lld%s, expected %s %lldx%lld ld %lld stride %lld%s", what, name, dtype_name(got->type),
              (long long)got->rows, (long long)got->cols, (long long)got->ld, (long long)got->stride, got->trans ? " transposed" : "", dtype_name(want.type),
              (long long)want.rows, (long long)want.cols, (long long)want.ld, (long long)want.stride, want.trans ? " transposed" : "");
}

/* ---- gemm_desc_make, by hand ---- */

typedef struct DescCase {
    const char *what;
    int64_t m, n, k, batch;
    GemmView a, b, d;
    int64_t gm, gn;         /* the column-major product's m and n */
    bool swapped;
    GemmMat ga, gb, gd;     /* {type, rows, cols, ld, stride, trans} */
} DescCase;

Test(cublaslt, gemm_desc_make_gives_the_column_major_product_of_logical_strided_matrices) {
    const DescCase cases[] = {
        /* A 4x3 with ld 6, B 3x5 packed, D 4x5 packed: as they lie */
        {"column-major D, A and B as they lie, batch 2", 4, 5, 3, 2, view(DT_F32, 1, 6, 30), view(DT_F32, 1, 3, 15), view(DT_F32, 1, 4, 20), 4, 5, false,
         {DT_F32, 4, 3, 6, 30, false}, {DT_F32, 3, 5, 3, 15, false}, {DT_F32, 4, 5, 4, 20, false}},
        /* Y[b] (8 x 6 pixels) = W (8 x 3, shared) X[b] (3 x 6), all NCHW (row-major): Y^T = X^T W^T, whose operands are column-major */
        {"NCHW: weights times images into row-major D, which swaps", 8, 6, 3, 2, view(DT_BF16, 3, 1, 0), view(DT_BF16, 6, 1, 18), view(DT_F32, 6, 1, 48), 6,
         8, true, {DT_BF16, 6, 3, 6, 18, false}, {DT_BF16, 3, 8, 3, 0, false}, {DT_F32, 6, 8, 6, 48, false}},
        /* A row-major 4x3 with row stride 5, B row-major 3x5 with row stride 7: read as transposes of 3x4 and 5x3 (one product: no stride) */
        {"row-major A and B into column-major D: both transposed", 4, 5, 3, 1, view(DT_F16, 5, 1, 20), view(DT_F16, 7, 1, 21), view(DT_F16, 1, 4, 0), 4, 5,
         false, {DT_F16, 3, 4, 5, 0, true}, {DT_F16, 5, 3, 7, 0, true}, {DT_F16, 4, 5, 4, 0, false}},
        /* m = 1: a row's row stride (99, 7) does not matter, so A (1x3) and D (1x5) are column-major with ld 1 */
        {"a unit m: one row of a bigger matrix", 1, 5, 3, 1, view(DT_F32, 99, 1, 0), view(DT_F32, 1, 3, 0), view(DT_F32, 7, 1, 0), 1, 5, false,
         {DT_F32, 1, 3, 1, 0, false}, {DT_F32, 3, 5, 3, 0, false}, {DT_F32, 1, 5, 1, 0, false}},
        /* n = 1 with D's rows 4 apart: D^T (1x3, ld 4) = B^T (1x2, ld 1) A^T (A stored 3x2 with ld 3, transposed) */
        {"a unit n: a strided column D becomes a row", 3, 1, 2, 1, view(DT_F32, 1, 3, 0), view(DT_F32, 1, 0, 0), view(DT_F32, 4, 100, 0), 1, 3, true,
         {DT_F32, 1, 2, 1, 0, false}, {DT_F32, 3, 2, 3, 0, true}, {DT_F32, 1, 3, 4, 0, false}},
    };
    char err[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const DescCase *c = &cases[i];
        GemmDesc g;
        cr_assert(gemm_desc_make(&g, c->m, c->n, c->k, c->batch, c->a, c->b, c->d, 1.5f, 0.25f, err, sizeof err), "%s: %s", c->what, err);
        cr_assert(g.m == c->gm && g.n == c->gn && g.k == c->k && g.batch == c->batch && g.swapped == c->swapped,
                  "%s: %lldx%lldx%lld x%lld%s, expected %lldx%lldx%lld x%lld%s", c->what, (long long)g.m, (long long)g.n, (long long)g.k, (long long)g.batch,
                  g.swapped ? " swapped" : "", (long long)c->gm, (long long)c->gn, (long long)c->k, (long long)c->batch, c->swapped ? " swapped" : "");
        cr_assert(g.alpha == 1.5f && g.beta == 0.25f, "%s: alpha and beta are kept", c->what);
        expect_mat(c->what, "A", &g.a, c->ga);
        expect_mat(c->what, "B", &g.b, c->gb);
        expect_mat(c->what, "D", &g.d, c->gd);
    }

    /* refusals: 4x5 = 4x3 * 3x5, B and D column-major unless named */
    const struct {
        const char *what;
        GemmView a, b, d;
        const char *says;
    } bad[] = {
        {"A with no unit stride", view(DT_F32, 2, 10, 0), view(DT_F32, 1, 3, 0), view(DT_F32, 1, 4, 0), "A (4 x 3, strides 2, 10) has no unit stride in either dimension"},
        {"D with no unit stride along its rows", view(DT_F32, 1, 4, 0), view(DT_F32, 1, 3, 0), view(DT_F32, 2, 10, 0),
         "D (4 x 5, strides 2, 10) has no unit stride along its rows"},
        {"A's columns overlapping", view(DT_F32, 1, 2, 0), view(DT_F32, 1, 3, 0), view(DT_F32, 1, 4, 0), "A: leading dimension 2 is smaller than its 4 stored rows"},
        {"mixed input types", view(DT_F32, 1, 4, 0), view(DT_BF16, 1, 3, 0), view(DT_F32, 1, 4, 0), "A is f32 and B bf16"},
        {"fp32 inputs into bf16 D", view(DT_F32, 1, 4, 0), view(DT_F32, 1, 3, 0), view(DT_BF16, 1, 4, 0), "no cuBLASLt product of f32 inputs into bf16"},
        {"bf16 inputs into fp16 D", view(DT_BF16, 1, 4, 0), view(DT_BF16, 1, 3, 0), view(DT_F16, 1, 4, 0), "no cuBLASLt product of bf16 inputs into f16"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        GemmDesc g;
        err[0] = 0;
        cr_assert_not(gemm_desc_make(&g, 4, 5, 3, 1, bad[i].a, bad[i].b, bad[i].d, 1, 0, err, sizeof err), "%s is refused", bad[i].what);
        cr_assert(strstr(err, bad[i].says), "%s: the message says \"%s\": %s", bad[i].what, bad[i].says, err);
    }
}

/* ---- the GemmDesc's meaning, on the host ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static int64_t rnd_in(int64_t lo, int64_t hi) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (int64_t)((rng >> 33) % (uint64_t)(hi - lo + 1));
}

/* A logical rows x cols fp32 operand over batch matrices, alone in its buffer (ASan sees any
 * read or write outside it): column-major or row-major with a padded leading dimension,
 * batches apart by its extent and some padding (0: one matrix shared by every batch). */
typedef struct Operand {
    GemmView v;
    int64_t len;
    float *x;
} Operand;

static Operand operand(int64_t rows, int64_t cols, int64_t batch, bool col_major, bool shared) {
    int64_t ld = (col_major ? rows : cols) + rnd_in(0, 3);
    Operand o = {.v = view(DT_F32, col_major ? 1 : ld, col_major ? ld : 1, 0)};
    int64_t extent = (rows - 1) * o.v.rs + (cols - 1) * o.v.cs + 1;
    o.v.bs = shared ? 0 : extent + rnd_in(0, 5);
    o.len = (batch - 1) * o.v.bs + extent;
    o.x = malloc(sizeof *o.x * (size_t)o.len);
    cr_assert(o.x);
    for (int64_t i = 0; i < o.len; i++) o.x[i] = (float)rnd_in(-1000, 1000) / 256;
    return o;
}

static float *logical(const Operand *o, int64_t b, int64_t r, int64_t c) { return &o->x[b * o->v.bs + r * o->v.rs + c * o->v.cs]; }

Test(cublaslt, executing_the_gemm_desc_on_the_host_computes_the_logical_product) {
    enum { TRIALS = 400, BATCH = 3 };
    int swapped = 0, transposed = 0, units = 0;
    char err[256];
    for (int trial = 0; trial < TRIALS; trial++) {
        int64_t m = rnd_in(1, 6), n = rnd_in(1, 6), k = rnd_in(1, 5);
        bool d_col = trial % 2; /* every other D is NCHW-like: row-major */
        Operand a = operand(m, k, BATCH, rnd_in(0, 1), rnd_in(0, 3) == 0), b = operand(k, n, BATCH, rnd_in(0, 1), rnd_in(0, 3) == 0);
        Operand d = operand(m, n, BATCH, d_col, false);
        float alpha = (float)rnd_in(-8, 8) / 4, beta = (float)rnd_in(-4, 4) / 4;
        /* the logical product by the views' strides, in the host GEMM's fp32 operations and order;
         * what lies between D's elements stays as it was */
        float *want = malloc(sizeof *want * (size_t)d.len);
        cr_assert(want);
        memcpy(want, d.x, sizeof *want * (size_t)d.len);
        for (int64_t t = 0; t < BATCH; t++)
            for (int64_t r = 0; r < m; r++)
                for (int64_t c = 0; c < n; c++) {
                    float s = 0;
                    for (int64_t p = 0; p < k; p++) s += *logical(&a, t, r, p) * *logical(&b, t, p, c);
                    float out = alpha * s;
                    if (beta != 0) out += beta * *logical(&d, t, r, c);
                    want[logical(&d, t, r, c) - d.x] = out;
                }
        GemmDesc g;
        cr_assert(gemm_desc_make(&g, m, n, k, BATCH, a.v, b.v, d.v, alpha, beta, err, sizeof err), "trial %d: %s", trial, err);
        char what[192];
        gemm_desc_describe(&g, what, sizeof what);
        gemm_host_run(&g, a.x, b.x, d.x);
        for (int64_t i = 0; i < d.len; i++)
            cr_assert(d.x[i] == want[i], "trial %d, %s (m %lld n %lld k %lld; A %lld,%lld,%lld B %lld,%lld,%lld D %lld,%lld,%lld): D[%lld] is %g, not %g", trial,
                      what, (long long)m, (long long)n, (long long)k, (long long)a.v.rs, (long long)a.v.cs, (long long)a.v.bs, (long long)b.v.rs,
                      (long long)b.v.cs, (long long)b.v.bs, (long long)d.v.rs, (long long)d.v.cs, (long long)d.v.bs, (long long)i, d.x[i], want[i]);
        swapped += g.swapped, transposed += g.a.trans || g.b.trans, units += m == 1 || n == 1 || k == 1;
        free(want);
        free(a.x), free(b.x), free(d.x);
    }
    cr_log_info("%d products: %d swapped, %d with a transposed operand, %d with a unit dimension", TRIALS, swapped, transposed, units);
    cr_assert(swapped > TRIALS / 4 && swapped < TRIALS * 3 / 4, "both column-major and row-major D were tried (%d of %d swapped)", swapped, TRIALS);
    cr_assert(transposed > 0 && transposed < TRIALS && units > 0, "transposed and plain operands, unit dimensions (%d, %d)", transposed, units);
}

/* ---- the real cuBLASLt, without a GPU ---- */

/* The alignment cublas_gemm_choose is told for a logical operand: its address's, and over
 * several batches its batch stride's in bytes too; a transposed product's stored A is the
 * logical B. */
Test(cublaslt, operand_alignment_covers_every_batch_of_the_logical_operand) {
    char err[256];
    GemmDesc g;
    /* NCHW 1x1: W (8 x 3, shared) times X[b] (3 x 6, 18 apart) into Y[b] (8 x 6, 48 apart) in bf16: swapped */
    cr_assert(gemm_desc_make(&g, 8, 6, 3, 2, view(DT_BF16, 3, 1, 0), view(DT_BF16, 6, 1, 18), view(DT_BF16, 6, 1, 48), 1, 0, err, sizeof err), "%s", err);
    cr_assert(g.swapped);
    cr_expect_eq(cublas_gemm_operand_alignment(&g, 0, 0x1000), 16, "A is shared: stride 0 costs nothing");
    cr_expect_eq(cublas_gemm_operand_alignment(&g, 1, 0x1000), 4, "B's batches are 18 bf16 = 36 bytes apart");
    cr_expect_eq(cublas_gemm_operand_alignment(&g, 2, 0x1000), 16, "D's batches are 96 bytes apart");
    cr_expect_eq(cublas_gemm_operand_alignment(&g, 2, 0x1002), 2, "the address counts too");
    /* one product: strides do not matter */
    cr_assert(gemm_desc_make(&g, 4, 5, 3, 1, view(DT_F32, 1, 6, 30), view(DT_F32, 1, 3, 15), view(DT_F32, 1, 4, 20), 1, 0, err, sizeof err), "%s", err);
    cr_expect_eq(cublas_gemm_operand_alignment(&g, 0, 0x1008), 8);
    cr_expect_eq(cublas_gemm_operand_alignment(&g, 1, 0x1000), 16);
}

/* Descriptors, layouts and preferences are host objects in cuBLASLt, which
 * checks each attribute value's size (a wrong one is CUBLAS_STATUS_INVALID_VALUE):
 * every GemmDesc below must be described, and the heuristic must get as far
 * as asking for a handle (cublasLtCreate needs a device, so there is none). */
Test(cublaslt, the_real_cublaslt_accepts_every_descriptor_without_a_device) {
    if (!tu_cuda_host_libs())
        cr_skip_test("no CUDA toolkit stub, cuDNN 9 or cuBLASLt here");
    CudaLibs L;
    char err[1024];
    CudaLibNames names = {.cuda = CUDA_TOOLKIT_STUB};
    cr_assert(cuda_libs_open(&L, &names, false, err, sizeof err), "%s", err);
    const struct {
        const char *what;
        int64_t m, n, k, batch;
        GemmView a, b, d;
    } cases[] = {
        {"fp32, column-major, one product", 64, 400, 32, 1, view(DT_F32, 1, 64, 0), view(DT_F32, 1, 32, 0), view(DT_F32, 1, 64, 0)},
        {"fp32, row-major A and B (transposed), batch 4", 64, 400, 32, 4, view(DT_F32, 32, 1, 2048), view(DT_F32, 400, 1, 12800), view(DT_F32, 1, 64, 25600)},
        {"bf16 -> fp32, NCHW 1x1 convolution, batch 16 (swapped)", 64, 400, 32, 16, view(DT_BF16, 32, 1, 0), view(DT_BF16, 400, 1, 12800),
         view(DT_F32, 400, 1, 25600)},
        {"bf16 -> bf16, channels last, batch 16 (swapped, transposed)", 400, 64, 32, 16, view(DT_BF16, 32, 1, 12800), view(DT_BF16, 1, 32, 0),
         view(DT_BF16, 64, 1, 25600)},
        {"bf16 -> bf16, one product", 64, 64, 64, 1, view(DT_BF16, 64, 1, 0), view(DT_BF16, 1, 64, 0), view(DT_BF16, 1, 64, 0)},
        {"fp16 -> fp16, matrix times vector", 64, 1, 32, 1, view(DT_F16, 1, 64, 0), view(DT_F16, 1, 32, 0), view(DT_F16, 1, 64, 0)},
        {"fp16 -> fp32, batch 3, transposed B", 48, 40, 24, 3, view(DT_F16, 1, 48, 1152), view(DT_F16, 40, 1, 960), view(DT_F32, 1, 48, 1920)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *what = cases[i].what;
        GemmDesc g;
        cr_assert(gemm_desc_make(&g, cases[i].m, cases[i].n, cases[i].k, cases[i].batch, cases[i].a, cases[i].b, cases[i].d, 1, 0, err, sizeof err), "%s: %s",
                  what, err);
        CublasGemm cg;
        cr_assert(cublas_gemm_describe(&cg, &L, &g, err, sizeof err), "%s: %s", what, err);
        cr_assert(cg.described && !cg.chosen && cg.op && cg.a && cg.b && cg.d, "%s: every descriptor made", what);
        /* the preference's workspace limit and alignments are set in the real library; the heuristic then refuses the missing handle */
        cr_assert_not(cublas_gemm_choose(&cg, &L, NULL, &g, 16, 4, 2, 1 << 22, err, sizeof err), "%s: no algorithm without a handle", what);
        cr_assert(strstr(err, "cublasLtMatmulAlgoGetHeuristic failed with CUBLAS_STATUS_NOT_INITIALIZED (1) while choosing an algorithm"),
                  "%s: only the heuristic fails: %s", what, err);
        cr_assert(!cg.chosen, "%s: nothing chosen", what);
        cr_assert_not(cublas_gemm_run(&cg, &L, NULL, &g, 0x1000, 0x2000, 0x3000, 0, 0, NULL, err, sizeof err), "%s: no run without an algorithm", what);
        cr_assert(strstr(err, "before an algorithm was chosen"), "%s: %s", what, err);
        cublas_gemm_destroy(&cg, &L);
        cr_assert(!cg.described && !cg.op && !cg.a && !cg.b && !cg.d, "%s: destroyed and zeroed", what);
    }

    /* The library refuses attribute values of the wrong size: what makes the successes above check each type against cublasLt.h.
     * (A layout whose ld is below its rows, or of an unknown type, is accepted at creation by cuBLASLt 13.0: not asserted.) */
    CublasLtMatrixLayout l = NULL;
    CublasLtMatmulDesc op = NULL;
    CublasLtMatmulPreference pref = NULL;
    int64_t i64 = 2;
    uint32_t u32 = 16;
    cr_assert_eq(L.cublasLtMatrixLayoutCreate(&l, LT_R_32F, 8, 4, 8), LT_STATUS_SUCCESS);
    cr_assert_eq(L.cublasLtMatrixLayoutSetAttribute(l, LT_LAYOUT_BATCH_COUNT, &i64, sizeof i64), LT_STATUS_INVALID_VALUE, "BATCH_COUNT is no int64_t");
    cr_assert_eq(L.cublasLtMatrixLayoutSetAttribute(l, LT_LAYOUT_STRIDED_BATCH_OFFSET, &u32, sizeof u32), LT_STATUS_INVALID_VALUE,
                 "STRIDED_BATCH_OFFSET is no 32-bit value");
    cr_assert_eq(L.cublasLtMatmulDescCreate(&op, LT_COMPUTE_32F, LT_R_32F), LT_STATUS_SUCCESS);
    cr_assert_eq(L.cublasLtMatmulDescSetAttribute(op, LT_DESC_TRANSA, &i64, sizeof i64), LT_STATUS_INVALID_VALUE, "TRANSA is no int64_t");
    cr_assert_eq(L.cublasLtMatmulPreferenceCreate(&pref), LT_STATUS_SUCCESS);
    cr_assert_eq(L.cublasLtMatmulPreferenceSetAttribute(pref, LT_PREF_MAX_WORKSPACE_BYTES, &u32, sizeof u32), LT_STATUS_INVALID_VALUE,
                 "MAX_WORKSPACE_BYTES is no uint32_t");
    cr_assert_eq(L.cublasLtMatmulPreferenceSetAttribute(pref, LT_PREF_MIN_ALIGNMENT_A_BYTES, &i64, sizeof i64), LT_STATUS_INVALID_VALUE,
                 "MIN_ALIGNMENT_A_BYTES is no 64-bit value");
    (void)L.cublasLtMatmulPreferenceDestroy(pref);
    (void)L.cublasLtMatmulDescDestroy(op);
    (void)L.cublasLtMatrixLayoutDestroy(l);
    cr_log_info("%zu products described with cuBLASLt %zu (%s)", sizeof cases / sizeof cases[0], L.cublasLtGetVersion(), L.cublaslt_name);
    cuda_libs_close(&L);
}
