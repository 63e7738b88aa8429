/* tests/test_attention_gemm.c — attention through cuBLASLt without a GPU: the work list of
 * runtime/cuda/attention_gemm.c walked on the host, its products through tests/test_gemm_host.h
 * (cuBLAS's meaning of each GemmDesc) and its kernels (templates/cuda/lib/attention_gemm.cu)
 * as emulated grids, on lib_attention_graph's odd shapes, NCHW and channels last, packed and as
 * views, against runtime/ref_attention.c. Owns no runtime code. */
#include <math.h>
#include <stdint.h>

#include "../compiler/lib_kernels.h"
#include "../passes/views.h"
#include "../runtime/cuda/attention_gemm.h"
#include "../runtime/ref_kernels.h"
#include "test_emul.h"
#include "test_emul_operand.h"
#include "test_gemm_host.h"
#include "test_gpu.h"

enum { NT = 3 };
static const DType TYPES[NT] = {DT_F32, DT_BF16, DT_F16};
static const char *dtag(DType d) { return d == DT_BF16 ? "bf16" : d == DT_F16 ? "f16" : "f32"; }
static const LibEntry KERNELS[3] = {LK_ATT_PARTIALS, LK_ATT_ROWS, LK_ATT_VCOPY};

/* "ag_<entry>_<type set>", every kernel of every type set in one object */
static void kernel_name(char *buf, size_t cap, LibEntry e, int ts) { snprintf(buf, cap, "ag_%d_%d", (int)e, ts); }

static void *load_kernels(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    for (int ts = 0; ts < NT; ts++)
        for (int e = 0; e < 3; e++) {
            LibKernel k = {.entry = KERNELS[e], .n_operands = 2};
            /* every operand in the set's type: scores fp32, P in it; vcopy both sides */
            DType dt[4] = {TYPES[ts], TYPES[ts], TYPES[ts], TYPES[ts]};
            lib_att_gemm_types(OP_ATTENTION, dt, KERNELS[e], k.dt);
            kernel_name(k.name, sizeof k.name, KERNELS[e], ts);
            char *s = lib_kernel_render(&k);
            cr_assert_not_null(s, "%s", k.name);
            cr_expect(!strstr(s, "@NAME@") && !strstr(s, "@T0@") && !strstr(s, "@T1@"), "%s: every placeholder is filled", k.name);
            fprintf(f, "namespace ag_%d_%d {\n%s\n}\n#undef YK_KERNEL_ABI_H\n#undef YL_LIB_ABI_H\n#undef YK_BLOCK\n#undef YL_ATT_CHUNK\n", e, ts, s);
            free(s);
        }
    cr_assert_eq(fclose(f), 0);
    void *h = emul_build(text, len, "the kernels around attention's products");
    free(text);
    return h;
}

static void run_kernel(void *h, LibEntry e, int ts, const YlArgs *a) {
    char name[32];
    kernel_name(name, sizeof name, e, ts);
    EmulKernel k = emul_kernel_in(h, name);
    emul_lib_run(&k, *a);
}

/* Worst error of an output against the reference, relative to the output's largest reference value. */
typedef struct Err {
    double worst;
    int64_t elements, damaged;
} Err;

static void compare(const Operand *b, const float *ref, int64_t n_ref, Err *c) {
    double mx = 0;
    for (int64_t i = 0; i < n_ref; i++) mx = fmax(mx, fabs((double)ref[i]));
    for (int64_t e = -RZ; e < b->span + RZ; e++) {
        const unsigned char *p = b->at + e * (int64_t)esz(b->dt);
        if (!in_view(b, e)) {
            c->damaged += !poisoned_at(b->dt, p);
            continue;
        }
        float got;
        cuda_storage_to_f32(b->dt, p, &got, 1);
        double d = isfinite(got) ? fabs((double)got - ref[ref_index(b, e)]) / fmax(mx, 1e-30) : INFINITY;
        c->worst = fmax(c->worst, d);
        c->elements++;
    }
}

/* Op o of g in type set ts, packed or as views, NCHW or channels last: the work list on
 * the host against the reference kernel on the same stored values. */
static void check_op(void *h, const Graph *g, int o, int ts, bool gap, bool cl, uint64_t *seed, Err *c) {
    const Op *op = &g->ops[o];
    char err[512];
    Views views;
    cr_assert(views_identity(g, g->arena, &views, err, sizeof err), "%s", err);
    YlArgs la = lib_launch_args(g, &views, op);
    const int n = op->n_in + op->n_out;
    Operand b[LIB_MAX_OPERANDS];
    DType dt[LIB_MAX_OPERANDS];
    void **ref = calloc((size_t)g->n_tensors, sizeof *ref);
    cr_assert_not_null(ref);
    for (int i = 0; i < n; i++) {
        int t = lib_operand_tensor(op, i);
        dt[i] = TYPES[ts];
        ref[t] = calloc((size_t)shape_numel(&g->tensors[t].shape), sizeof(float));
        cr_assert_not_null(ref[t]);
        operand_open(&b[i], dt[i], &g->tensors[t].shape, gap, cl, i < op->n_in, ref[t], seed);
        *lib_operand_bs(&la, i) = b[i].bs;
    }
    la.cl = cl ? (1 << n) - 1 : 0;
    /* operand_open keeps the reference packed NCHW, whatever the stored layout */
    cr_assert(ref_kernel(op->kind)(g, op, ref, err, sizeof err), "%s", err);
    AttGemm ag;
    cr_assert(attention_gemm_build(&ag, g, op, &la, dt, err, sizeof err), "%s", err);
    unsigned char *scratch = malloc((size_t)ag.scratch_bytes);
    cr_assert_not_null(scratch);
    for (int64_t i = 0; i < ag.scratch_bytes / 4; i++) memcpy(scratch + 4 * i, &POISON32, 4);
    unsigned char *buf[AB_COUNT] = {0};
    for (int bb = 0; bb < AB_COUNT; bb++) {
        int t = attention_gemm_tensor(op, (AttBuf)bb);
        for (int i = 0; i < n && t >= 0; i++)
            if (lib_operand_tensor(op, i) == t) buf[bb] = b[i].at;
        if (bb >= AB_S) buf[bb] = scratch + ag.scratch_off[bb];
    }
    for (int s = 0; s < ag.n_steps; s++) {
        const AttStep *st = &ag.steps[s];
#define AT(r) (buf[(r).buf] + (r).off * (int64_t)esz(ag.type[(r).buf]))
        if (st->gemm) {
            gemm_host_run(&ag.gemm[st->role], AT(st->a), AT(st->b), AT(st->d));
            continue;
        }
        YlArgs a = st->args;
        a.t[0] = AT(st->t0), a.t[1] = AT(st->t1), a.ws = buf[AB_PARTIALS];
#undef AT
        run_kernel(h, st->entry, ts, &a);
    }
    for (int i = op->n_in; i < n; i++) {
        int t = lib_operand_tensor(op, i);
        compare(&b[i], ref[t], shape_numel(&g->tensors[t].shape), c);
    }
    for (int i = 0; i < n; i++) {
        for (int64_t e = -RZ; e < b[i].span + RZ && i < op->n_in; e++) c->damaged += !in_view(&b[i], e) && !poisoned_at(dt[i], b[i].at + e * (int64_t)esz(dt[i]));
        free(b[i].base);
    }
    attention_gemm_free(&ag);
    free(scratch);
    for (int t = 0; t < g->n_tensors; t++) free(ref[t]);
    free(ref);
}

/* Every op in type set ts: each output within tol of its largest reference value. */
static void emul_all(int ts, double tol) {
    Arena ar;
    Graph g;
    lib_attention_graph(&g, &ar);
    void *h = load_kernels();
    uint64_t seed = 0x51ed270b27a3c0d5ULL ^ (uint64_t)ts;
    for (int o = 0; o < g.n_ops; o++) {
        Err c = {0};
        for (int run = 0; run < 4; run++) check_op(h, &g, o, ts, run & 1, run >= 2, &seed, &c);
        const Op *op = &g.ops[o];
        printf("attention_gemm %s op %d %s (heads %d, key_dim %d, head_dim %d, area %d): %lld elements, worst error %.3g of the largest\n", dtag(TYPES[ts]), o,
               op_def(op->kind)->name, op->a.heads, op->a.key_dim, op->a.head_dim, op->a.area, (long long)c.elements, c.worst);
        cr_expect_leq(c.worst, tol, "op %d %s in %s: worst error %.3g of the largest value (tolerance %.3g)", o, op_def(op->kind)->name, dtag(TYPES[ts]), c.worst, tol);
        cr_expect_eq(c.damaged, 0, "op %d %s: %lld elements outside the views changed", o, op_def(op->kind)->name, (long long)c.damaged);
        cr_expect_gt(c.elements, 0);
    }
    dlclose(h);
    arena_free(&ar);
}

/* fp32: the products accumulate in fp32 where the reference sums in fp64;
 * 16-bit: P (and dS) are rounded to the storage type before their products,
 * as PyTorch's autocast rounds the softmax before v @ attn^T. */
Test(attention_gemm, work_list_matches_the_reference_fp32) { emul_all(0, 2e-6); }
Test(attention_gemm, work_list_matches_the_reference_bf16) { emul_all(1, 1e-2); }
Test(attention_gemm, work_list_matches_the_reference_fp16) { emul_all(2, 2e-3); }

/* The kernels around the products compile with NVRTC in every storage type
 * and in mixed ones (vcopy converts between its two). */
Test(attention_gemm, kernels_compile_with_nvrtc) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    for (int e = 0; e < 3; e++)
        for (int ts = 0; ts < NT; ts++) {
            LibKernel k = {.entry = KERNELS[e], .n_operands = 2};
            DType dt[4] = {TYPES[ts], TYPES[(ts + 1) % NT], TYPES[ts], TYPES[(ts + 2) % NT]};
            lib_att_gemm_types(e == 2 && ts == 2 ? OP_ATTENTION_BWD : OP_ATTENTION, dt, KERNELS[e], k.dt);
            snprintf(k.name, sizeof k.name, "yl_ag%d_%d", e, ts);
            expect_lib_kernel_compiles(&k);
        }
}

/* cuBLASLt multiplies two inputs of one type: a gradient d_o stored in
 * another type than qkv leaves the op to its library kernels, with the
 * product named; in-type operands give the list: the d_v copy, then per
 * (head, area) slice the scores, the softmax's two kernels, dP, dV, the
 * gradient's two kernels, dQ and dK. */
Test(attention_gemm, work_list_and_refusal) {
    Arena ar;
    Graph g;
    lib_attention_graph(&g, &ar);
    Views views;
    char err[512];
    cr_assert(views_identity(&g, &ar, &views, err, sizeof err), "%s", err);
    const Op *bwd = &g.ops[3]; /* 2 heads, area 4 */
    YlArgs la = lib_launch_args(&g, &views, bwd);
    AttGemm ag;
    DType mixed[4] = {DT_F32, DT_BF16, DT_BF16, DT_BF16};
    cr_assert_not(attention_gemm_build(&ag, &g, bwd, &la, mixed, err, sizeof err));
    cr_expect(strstr(err, "AG_DPROBS") && strstr(err, "one input type"), "%s", err);
    DType same[4] = {DT_BF16, DT_BF16, DT_BF16, DT_BF16};
    cr_assert(attention_gemm_build(&ag, &g, bwd, &la, same, err, sizeof err), "%s", err);
    cr_assert_eq(ag.n_steps, 1 + 2 * 4 * 9);
    cr_expect(ag.steps[0].entry == LK_ATT_VCOPY && !ag.steps[0].gemm && ag.steps[0].args.att_bwd);
    const int roles[9] = {AG_SCORES, -1, -1, AG_DPROBS, AG_DV, -1, -1, AG_DQ, AG_DK};
    for (int s = 1; s < ag.n_steps; s++) {
        const AttStep *st = &ag.steps[s];
        int r = roles[(s - 1) % 9];
        cr_expect_eq(st->gemm, r >= 0, "step %d", s);
        if (r >= 0) cr_expect_eq(st->role, (AttRole)r, "step %d", s);
    }
    /* 2 images x 6 x 6 scores: S fp32 (288 bytes), P bf16 (144), then [2][1 chunk][12 rows] fp32 partials (96), each 256-aligned */
    cr_expect(ag.scratch_off[AB_P] == 512 && ag.scratch_off[AB_PARTIALS] == 768 && ag.scratch_bytes == 1024, "%lld %lld %lld", (long long)ag.scratch_off[AB_P],
              (long long)ag.scratch_off[AB_PARTIALS], (long long)ag.scratch_bytes);
    attention_gemm_free(&ag);
    arena_free(&ar);
}
