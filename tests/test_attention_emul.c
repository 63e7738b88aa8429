/* tests/test_attention_emul.c — the attention library kernels (templates/cuda/lib/attention.cu)
 * without a GPU: their rendered source compiled as host C++ with tests/cuda_host_shim.h and run
 * as emulated grids on lib_attention_graph's odd shapes against runtime/ref_attention.c; their
 * entries and launch arguments. Owns no kernel code; test_cuda_emul.c is left alone. */
#include <math.h>
#include <stdint.h>

#include "../compiler/lib_kernels.h"
#include "../passes/views.h"
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/ref_kernels.h"
#include "test_emul.h"
#include "test_emul_operand.h"
#include "test_gpu.h"

enum { NT = 3, MIXED = NT, NSETS = NT + 1 };
static const DType TYPES[NT] = {DT_F32, DT_BF16, DT_F16};

/* Storage type of operand i of op o in type set ts: every operand in one
 * type (ts < NT), or each in another (MIXED: as plans mix fp32 inputs with
 * 16-bit activations). */
static DType type_of(int ts, int o, int i) { return ts < NT ? TYPES[ts] : TYPES[(o + i) % NT]; }

static const char *dtag(DType d) { return d == DT_BF16 ? "bf16" : d == DT_F16 ? "f16" : "f32"; }
/* The kernels of op o in type set ts: the op's own, and for attention_bwd
 * its statistics kernel, named as below. */
static int op_kernels(const Op *op, int o, int ts, LibKernel *ks) {
    int n = 0;
    for (int stats = op->kind == OP_ATTENTION_BWD; stats >= 0; stats--) {
        LibKernel *k = &ks[n++];
        memset(k, 0, sizeof *k);
        k->entry = stats ? LK_ATTENTION_STATS : (LibEntry)lib_entry_of(op->kind);
        k->n_operands = op->n_in + op->n_out;
        for (int i = 0; i < k->n_operands; i++) k->dt[i] = type_of(ts, o, i);
        snprintf(k->name, sizeof k->name, "yl_att%s_%d_%d", stats ? "s" : "", o, ts);
    }
    return n;
}

static void *emul_load(const Graph *g) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    int u = 0;
    for (int o = 0; o < g->n_ops; o++)
        for (int ts = 0; ts < NSETS; ts++) {
            LibKernel ks[2];
            int n = op_kernels(&g->ops[o], o, ts, ks);
            for (int i = 0; i < n; i++) {
                char *s = lib_kernel_render(&ks[i]);
                cr_assert_not_null(s, "%s", ks[i].name);
                cr_expect(!strstr(s, "@NAME@") && !strstr(s, "@T3@") && !strstr(s, "@TQ@"), "%s: every placeholder is filled", ks[i].name);
                /* each source carries the prelude and the argument block */
                fprintf(f, "namespace att_%d {\n%s\n}\n#undef YK_KERNEL_ABI_H\n#undef YL_LIB_ABI_H\n#undef YK_BLOCK\n", u++, s);
                free(s);
            }
        }
    cr_assert_eq(fclose(f), 0);
    void *h = emul_build(text, len, "the attention kernels");
    free(text);
    return h;
}

/* every emulated thread of the grid, one after another */
static void emul_run(void *h, const char *name, const YlArgs *a) {
    EmulKernel k = emul_kernel_in(h, name);
    emul_lib_run(&k, *a);
}

/* Worst difference of output b from the packed reference: fp32 storage
 * exact (0, else the relative difference), 16-bit storage in ulps after
 * rounding the reference to it; and whether every element outside the view
 * kept its poison. */
typedef struct Cmp {
    double worst;
    int64_t elements, inexact, failed, damaged; /* failed: fp32 not exact, 16-bit more than 1 ulp */
} Cmp;

static void compare(const Operand *b, const float *ref, Cmp *c, const char *what) {
    for (int64_t e = -RZ; e < b->span + RZ; e++) {
        const unsigned char *p = b->at + e * (int64_t)esz(b->dt);
        if (!in_view(b, e)) {
            c->damaged += !poisoned_at(b->dt, p);
            continue;
        }
        float want = ref[ref_index(b, e)], got;
        cuda_storage_to_f32(b->dt, p, &got, 1);
        double d;
        if (b->dt == DT_F32) {
            d = got == want || (isnan(got) && isnan(want)) ? 0 : fmax(fabs((double)got - want) / fmax(fabs((double)want), 1e-30), 1e-30);
        } else {
            uint16_t w16, g16;
            cuda_f32_to_storage(b->dt, &want, &w16, 1);
            memcpy(&g16, p, 2);
            int ow = w16 & 0x8000 ? -(int)(w16 & 0x7fff) : (int)w16, og = g16 & 0x8000 ? -(int)(g16 & 0x7fff) : (int)g16;
            d = fabs((double)(ow - og));
        }
        c->elements++;
        c->inexact += d > 0;
        if (d > c->worst) c->worst = d;
        bool fail = d > (b->dt == DT_F32 ? 0 : 1);
        if (fail && c->failed++ < 10)
            cr_log_error("%s element %lld (image %lld): emulated %.9g, reference %.9g", what, (long long)e, (long long)(e / b->bs), got, want);
    }
}

/* Op o of g in storage type dt, packed or as views, NCHW or channels last:
 * the emulated kernels (attention_bwd: its statistics kernel, then its own,
 * on a poisoned scratch) against the reference kernel on the same stored
 * values. */
static void check_op(void *h, const Graph *g, int o, int ts, bool gap, bool cl, uint64_t *seed, Cmp *c) {
    const Op *op = &g->ops[o];
    char err[512];
    Views views;
    cr_assert(views_identity(g, g->arena, &views, err, sizeof err), "%s", err);
    YlArgs a = lib_launch_args(g, &views, op);
    int n = op->n_in + op->n_out;
    if (cl) a.cl = (1 << n) - 1;
    Operand b[LIB_MAX_OPERANDS];
    void **ref = calloc((size_t)g->n_tensors, sizeof *ref);
    cr_assert_not_null(ref);
    for (int i = 0; i < n; i++) {
        int t = lib_operand_tensor(op, i);
        ref[t] = calloc((size_t)shape_numel(&g->tensors[t].shape), sizeof(float));
        cr_assert_not_null(ref[t]);
        operand_open(&b[i], type_of(ts, o, i), &g->tensors[t].shape, gap, cl, i < op->n_in, ref[t], seed);
        *lib_operand(&a, i) = b[i].at;
        *lib_operand_bs(&a, i) = b[i].bs;
    }
    cr_assert(ref_kernel(op->kind)(g, op, ref, err, sizeof err), "%s", err);
    LibKernel ks[2];
    int nk = op_kernels(op, o, ts, ks);
    int64_t ws_bytes = lib_scratch_bytes(g, op);
    cr_expect_eq(ws_bytes > 0, op->kind == OP_ATTENTION_BWD);
    unsigned char *ws = ws_bytes ? malloc((size_t)ws_bytes) : NULL;
    for (int64_t i = 0; i < ws_bytes / 4; i++) memcpy(ws + 4 * i, &POISON32, 4);
    a.ws = ws;
    /* the statistics kernel (listed first) runs to the end before the gradient's */
    for (int k = 0; k < nk; k++) emul_run(h, ks[k].name, &a);
    for (int i = 0; i < n; i++) {
        char what[96];
        DType dt = b[i].dt;
        snprintf(what, sizeof what, "op %d %s %s operand %d%s%s", o, op_def(op->kind)->name, dtag(dt), i, gap ? " (views)" : "", cl ? " (channels last)" : "");
        if (i >= op->n_in) compare(&b[i], ref[lib_operand_tensor(op, i)], c, what);
        else
            for (int64_t e = -RZ; e < b[i].span + RZ; e++) c->damaged += !in_view(&b[i], e) && !poisoned_at(dt, b[i].at + e * (int64_t)esz(dt));
        free(b[i].base);
    }
    for (int t = 0; t < g->n_tensors; t++) free(ref[t]);
    free(ref);
    free(ws);
}

/* Type set ts of every op: fp32 outputs must equal the reference, 16-bit
 * outputs be within 1 ulp of it rounded to their type. */
static void emul_all(int ts) {
    Arena ar;
    Graph g;
    lib_attention_graph(&g, &ar);
    void *h = emul_load(&g);
    uint64_t seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)ts;
    const char *set = ts < NT ? dtag(TYPES[ts]) : "mixed";
    for (int o = 0; o < g.n_ops; o++) {
        Cmp c = {0};
        for (int run = 0; run < 4; run++) check_op(h, &g, o, ts, run & 1, run >= 2, &seed, &c);
        const Op *op = &g.ops[o];
        cr_log_info("op %d %s (heads %d, key_dim %d, head_dim %d, area %d) %s: %lld elements, %lld not bit-exact, worst %.3g", o, op_def(op->kind)->name, op->a.heads,
                    op->a.key_dim, op->a.head_dim, op->a.area, set, (long long)c.elements, (long long)c.inexact, c.worst);
        printf("attention_emul %s op %d %s: %lld elements, %lld not bit-exact, worst %.3g %s\n", set, o, op_def(op->kind)->name, (long long)c.elements,
               (long long)c.inexact, c.worst, ts == 0 ? "(relative)" : "(ulps, or relative for fp32 outputs)");
        cr_expect_eq(c.failed, 0, "op %d %s in %s storage: %lld elements differ from the reference (worst %.3g)", o, op_def(op->kind)->name, set, (long long)c.failed, c.worst);
        cr_expect_eq(c.damaged, 0, "op %d %s: %lld elements outside the views changed", o, op_def(op->kind)->name, (long long)c.damaged);
        cr_expect_gt(c.elements, 0);
    }
    dlclose(h);
    arena_free(&ar);
}

/* fp32 storage: bit for bit (the kernels repeat the reference's fp64
 * operations in its order, products never fused); 16-bit: at most one
 * rounding apart (in practice the same bits). */
Test(attention_emul, kernels_match_the_reference_fp32, .timeout = 600) { emul_all(0); }
Test(attention_emul, kernels_match_the_reference_bf16, .timeout = 600) { emul_all(1); }
Test(attention_emul, kernels_match_the_reference_fp16, .timeout = 600) { emul_all(2); }
Test(attention_emul, kernels_match_the_reference_mixed_types, .timeout = 600) { emul_all(MIXED); }

/* attention and attention_bwd are library ops with their shapes and
 * attributes in YlArgs; the gradient runs its statistics kernel first and
 * needs scratch for 3 doubles per (image, head, token). */
Test(attention_emul, entries_and_arguments) {
    cr_expect_eq(lib_entry_of(OP_ATTENTION), LK_ATTENTION);
    cr_expect_eq(lib_entry_of(OP_ATTENTION_BWD), LK_ATTENTION_BWD);
    Arena ar;
    Graph g;
    lib_attention_graph(&g, &ar);
    Views views;
    char err[256];
    cr_assert(views_identity(&g, &ar, &views, err, sizeof err), "%s", err);
    /* case 1: 2 heads, key_dim 9, head_dim 10, area 4 on a 4 x 6 plane */
    const Op *f = &g.ops[2], *b = &g.ops[3];
    YlArgs a = lib_launch_args(&g, &views, f);
    cr_expect(a.heads == 2 && a.key_dim == 9 && a.head_dim == 10 && a.area == 4 && a.h == 4 && a.w == 6 && a.c == 56, "attention attributes and qkv plane");
    cr_expect_eq(a.scale, 1.0 / 3.0);
    cr_expect_eq(a.total, 2 * 2 * 2 * 24, "images x heads x 2 groups of v channels x tokens");
    cr_expect(a.bs[0] == 56 * 24 && a.bs[1] == 20 * 24 && a.bs[2] == 20 * 24, "qkv, o, v");
    a = lib_launch_args(&g, &views, b);
    cr_expect_eq(a.total, 2 * 2 * (2 + 2 + 2) * 24, "images x heads x (q, k, v groups) x tokens");
    cr_expect(a.bs[0] == 20 * 24 && a.bs[1] == 20 * 24 && a.bs[2] == 56 * 24 && a.bs3 == 56 * 24, "d_o, d_v, qkv, then d_qkv at the end of the block");
    cr_expect_eq(lib_scratch_bytes(&g, b), 2 * 2 * 24 * 3 * 8);
    cr_expect_eq(lib_scratch_bytes(&g, f), 0);
    /* a plan's program: the statistics kernel just before the gradient's, both on the same operand types */
    KProgram kp = {0};
    KLaunch ln[2] = {{.kernel = -1, .op_lo = 2, .op_hi = 2}, {.kernel = -1, .op_lo = 3, .op_hi = 3}};
    kp.launches = ln, kp.n_launches = 2;
    LibProgram lp;
    cr_assert(lib_program_build(&g, PREC_BF16, &kp, &lp, err, sizeof err), "%s", err);
    cr_assert_eq(lp.n_kernels, 7, "attention, its gradient's two kernels, the three around the cuBLASLt products (shared by both ops), the cast");
    /* the graph's inputs are fp32, the ops' outputs bf16 activations */
    cr_expect_str_eq(lp.kernels[lp.launch_kernel[0]].name, "yl_attention_f32_bf16_bf16");
    cr_expect_str_eq(lp.kernels[lp.launch_kernel[1]].name, "yl_attention_bwd_f32_f32_f32_bf16");
    cr_expect_str_eq(lp.kernels[lp.launch_kernel[1] - 1].name, "yl_attention_stats_f32_f32_f32_bf16");
    /* the cuBLASLt route's: scores fp32 and P in qkv's type (here the fp32 input), v from qkv into o's type, d_v into d_qkv's */
    const char *route[] = {"yl_att_partials_f32_f32", "yl_att_rows_f32_f32", "yl_att_vcopy_f32_bf16"};
    for (int i = 0; i < 3; i++) cr_expect_eq(lp.kernels[lp.launch_kernel[0] + 1 + i].name[0] ? strcmp(lp.kernels[lp.launch_kernel[0] + 1 + i].name, route[i]) : -1, 0, "%s", route[i]);
    lib_program_free(&lp);
    arena_free(&ar);
}
