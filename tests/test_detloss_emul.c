/* tests/test_detloss_emul.c — the detection loss' CUDA kernels (templates/cuda/lib/detloss.cu,
 * runtime/cuda/cuda_detloss.c) without a GPU: their rendered source compiled as host C++ with
 * tests/cuda_host_shim.h and run phase by phase (thread by thread, or block by block where
 * threads cooperate) against the oracle (the reference kernels of detect_loss / detect_loss_bwd,
 * runtime/detloss*.c); NVRTC compiles of every phase; the plan-side bookkeeping. Owns no loss code; test_cuda_emul.c is left alone. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/wait.h>

#include "../compiler/lib_kernels.h"
#include "../compiler/nvrtc_build.h"
#include "../passes/memplan.h"
#include "../passes/views.h"
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/cuda/cuda_detloss.h"
#include "../runtime/detloss.h"
#include "../runtime/ref_kernels.h"
#include "test_emul.h"
#include "test_gpu.h"

/* ---- the host C++ build of the rendered kernels ---- */

static const char *dtag(DType d) { return d == DT_BF16 ? "bf16" : d == DT_F16 ? "f16" : "f32"; }

/* The phase kernels for levels and gradients stored as dt, d_total fp32, named as lib_program_build names them. */
static int phase_kernels(DType dt, LibKernel *ks) {
    int n = 0;
    for (int e = LK_DETLOSS_DECODE; e <= LK_DETLOSS_GRAD; e++) {
        LibKernel *k = &ks[n++];
        memset(k, 0, sizeof *k);
        k->entry = (LibEntry)e;
        k->n_operands = lib_detloss_types((LibEntry)e, dt, dt, DT_F32, k->dt);
        static const char *names[] = {"decode", "assign", "resolve", "normalise", "terms", "reduce", "finish", "grad"};
        int used = snprintf(k->name, sizeof k->name, "yl_detloss_%s", names[e - LK_DETLOSS_DECODE]);
        for (int i = 0; i < k->n_operands; i++) used += snprintf(k->name + used, sizeof k->name - (size_t)used, "_%s", dtag(k->dt[i]));
    }
    return n;
}

/* Compiles the phase kernels of dt into a shared object and loads it; skips without $CXX / c++. */
static void *emul_load(DType dt, const LibKernel *ks, int n) {
    char *text = NULL, what[64];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    for (int i = 0; i < n; i++) {
        char *s = lib_kernel_render(&ks[i]);
        cr_assert_not_null(s, "%s", ks[i].name);
        cr_expect(!strstr(s, "@NAME@") && !strstr(s, "@T0@") && !strstr(s, "@T1@") && !strstr(s, "@T2@"), "%s: every placeholder is filled", ks[i].name);
        /* each source carries the prelude and both argument blocks */
        fprintf(f, "namespace dl_%d {\n%s\n}\n#undef YK_KERNEL_ABI_H\n#undef YL_LIB_ABI_H\n#undef YK_BLOCK\n", i, s);
        free(s);
    }
    cr_assert_eq(fclose(f), 0);
    snprintf(what, sizeof what, "the %s loss kernels", dtag(dt));
    void *h = emul_build(text, len, what);
    free(text);
    return h;
}

typedef void (*DlFn)(YlDetLossArgs);

static void call_dl(void *fn, const void *args) { ((DlFn)fn)(*(const YlDetLossArgs *)args); }

/* Runs phase e (kernel `name`): a grid-stride phase as every thread of an
 * EMU_GRID x EMU_BLOCK grid in turn; a phase whose threads cooperate (a
 * block per GT row, the one-block finish) as blocks of the launch's own
 * size, one POSIX thread per CUDA thread, at most 3 blocks so that each
 * takes several rows. */
static void emul_run(void *h, const char *name, LibEntry e, const YlDetLossArgs *a) {
    void *fn = sym(h, name);
    if (e == LK_DETLOSS_ASSIGN || e == LK_DETLOSS_NORMALISE || e == LK_DETLOSS_FINISH) {
        CudaGeom g = cuda_detloss_geometry(a, e, 132);
        cr_assert_eq(((GridFn)sym(h, "yk_emu_grid"))(call_dl, fn, a, g.grid < 3 ? g.grid : 3, 1, g.block), 0, "%s: the emulated grid started", name);
        return;
    }
    run_grid(h, call_dl, fn, a, EMU_GRID, EMU_BLOCK);
}

/* ---- cases ---- */

typedef struct Case {
    const char *name;
    int batch, nc, reg_max, nl, max_boxes, topk;
    int hw[3][2];
    double stride[3];
    int counts[6];
    float d_total;
    int gap;        /* elements between images of the levels and gradients beyond their own (views) */
    uint64_t seed;
    bool points;    /* box logits that decode to points: every CIoU <= 0, every metric 0 */
    bool ties;      /* reg_max 1, every anchor predicts the GT box exactly: 20 equal nonzero metrics, two equal rows */
    bool cl;        /* levels and gradients channels last (an NHWC plan's head) */
} Case;

/* where element i of an image (NCHW order) of a level of `chans` channels and `plane` pixels is stored, and back */
static int64_t stored_of(const Case *c, int64_t i, int64_t chans, int64_t plane) { return c->cl ? i % plane * chans + i / plane : i; }
static int64_t nchw_of(const Case *c, int64_t e, int64_t chans, int64_t plane) { return c->cl ? e % chans * plane + e / chans : e; }

static const Case CASES[] = {
    {"mixed 3 levels nc 3", 4, 3, 16, 3, 6, 10, {{16, 16}, {8, 8}, {4, 4}}, {8, 16, 32}, {3, 0, 6, 2}, 1.0f, 0, 11, false, false, false},
    {"nc 80, fp16 loss scale", 3, 80, 16, 3, 6, 10, {{16, 16}, {8, 8}, {4, 4}}, {8, 16, 32}, {6, 1, 4}, 2048.0f, 0, 12, false, false, false},
    {"2 levels nc 1, views", 3, 1, 16, 2, 5, 10, {{8, 8}, {4, 4}}, {8, 16}, {5, 2, 0}, 0.5f, 7, 13, false, false, false},
    {"reg_max 1", 3, 4, 1, 3, 6, 10, {{8, 8}, {4, 4}, {2, 2}}, {8, 16, 32}, {6, 3, 1}, 1.0f, 0, 14, false, false, false},
    {"zero metrics everywhere", 3, 2, 16, 3, 6, 10, {{8, 8}, {4, 4}, {2, 2}}, {8, 16, 32}, {6, 2, 3}, 1.0f, 3, 15, true, false, false},
    {"topk 13, no boxes at all", 2, 5, 8, 3, 4, 13, {{8, 8}, {4, 4}, {2, 2}}, {8, 16, 32}, {0, 0}, 3.0f, 0, 16, false, false, false},
    {"exact ties, reg_max 1", 2, 2, 1, 3, 3, 10, {{8, 8}, {4, 4}, {2, 2}}, {8, 16, 32}, {2, 1}, 1.0f, 0, 17, false, true, false},
    {"channels last, 3 levels nc 3", 3, 3, 16, 3, 6, 10, {{16, 16}, {8, 8}, {4, 4}}, {8, 16, 32}, {4, 1, 5}, 1.0f, 0, 18, false, false, true},
};

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}
static double unit(uint64_t *s) { return (double)(rnd(s) >> 11) * (1.0 / 9007199254740992.0); }

/* GT rows by position: random, an overlapping near-copy of the first (the
 * same anchors claimed twice), tiny (fewer than topk cells inside; top-left
 * on even images, so zero-metric fill anchors lie inside), across the border,
 * a padding row inside the count, a large one. Rows past the count are zero. */
static void make_boxes(const Case *c, float *boxes, uint64_t *s) {
    memset(boxes, 0, sizeof(float) * (size_t)c->batch * c->max_boxes * 5);
    const float tie[5] = {0, 0.5f, 0.5f, 0.5f, 0.5f}; /* pixels 16..48 of 64 */
    for (int b = 0; c->ties && b < c->batch; b++)
        for (int g = 0; g < c->counts[b]; g++) memcpy(boxes + ((size_t)b * c->max_boxes + g) * 5, tie, sizeof tie);
    for (int b = 0; !c->ties && b < c->batch; b++)
        for (int g = 0; g < c->counts[b]; g++) {
            float *r = boxes + ((size_t)b * c->max_boxes + g) * 5;
            r[0] = (float)(rnd(s) % (uint64_t)c->nc);
            switch (g % 6) {
            case 0: r[1] = (float)(0.2 + 0.6 * unit(s)), r[2] = (float)(0.2 + 0.6 * unit(s)), r[3] = (float)(0.1 + 0.4 * unit(s)), r[4] = (float)(0.1 + 0.4 * unit(s)); break;
            case 1: memcpy(r + 1, r - 5 + 1, 4 * sizeof(float)), r[1] += 0.02f, r[3] *= 1.2f; break;
            case 2:
                r[1] = b % 2 ? (float)(0.3 + 0.4 * unit(s)) : 0.035f, r[2] = b % 2 ? (float)(0.3 + 0.4 * unit(s)) : 0.05f;
                r[3] = 0.02f, r[4] = 0.03f;
                break;
            case 3: r[1] = 0.97f, r[2] = 0.04f, r[3] = 0.25f, r[4] = 0.2f; break;
            case 4: r[0] = 0; break; /* padding: coordinates sum to 0 */
            default: r[1] = 0.5f, r[2] = 0.45f, r[3] = 0.9f, r[4] = 0.8f; break;
            }
        }
}

typedef struct Run {
    Arena ar;
    Graph g;
    Views views;
    int fwd, bwd, lv[IR_MAX_LEVELS], tb, tc, td;
    int64_t per[IR_MAX_LEVELS], span[IR_MAX_LEVELS];
    unsigned char *store[IR_MAX_LEVELS], *gstore[IR_MAX_LEVELS]; /* device layout (storage type, gaps) */
    float *packed[IR_MAX_LEVELS], *gref[IR_MAX_LEVELS];          /* the stored values, packed; the oracle's gradients */
    float *boxes, total[1], items[3], ref_total[1], ref_items[3], d_total[1];
    int64_t *counts;
    void *scratch;
    int64_t scratch_bytes;
} Run;

static const uint16_t POISON16 = 0x7fd5;
static const uint32_t POISON32 = 0x7fc0dead;

static size_t esz(DType d) { return d == DT_F32 ? 4 : 2; }
static void poison_at(DType d, unsigned char *p) { d == DT_F32 ? memcpy(p, &POISON32, 4) : memcpy(p, &POISON16, 2); }
static bool poisoned_at(DType d, const unsigned char *p) { return d == DT_F32 ? !memcmp(p, &POISON32, 4) : !memcmp(p, &POISON16, 2); }

static void build(Run *r, const Case *c, DType dt) {
    memset(r, 0, sizeof *r);
    arena_init(&r->ar, 0);
    graph_init(&r->g, &r->ar);
    OpAttrs at = {.nlevels = c->nl, .nc = c->nc, .reg_max = c->reg_max, .topk = c->topk == 10 ? 0 : c->topk, .gains = {7.5, 0.5, 1.5}};
    int in[IR_MAX_LEVELS + 3];
    uint64_t s = c->seed;
    for (int l = 0; l < c->nl; l++) {
        at.level_hw[l][0] = c->hw[l][0], at.level_hw[l][1] = c->hw[l][1], at.strides[l] = c->stride[l];
        char name[32];
        snprintf(name, sizeof name, "level%d", l);
        in[l] = r->lv[l] = graph_add_input(&r->g, name, shape4(c->batch, 4 * c->reg_max + c->nc, c->hw[l][0], c->hw[l][1]), DT_F32);
        r->g.tensors[in[l]].channels_last = c->cl;
        int64_t n = shape_numel(&r->g.tensors[in[l]].shape), bs;
        r->per[l] = n / c->batch, bs = r->per[l] + c->gap;
        r->span[l] = (c->batch - 1) * bs + r->per[l];
        r->store[l] = malloc((size_t)r->span[l] * esz(dt)), r->gstore[l] = malloc((size_t)r->span[l] * esz(dt));
        r->packed[l] = malloc(sizeof(float) * (size_t)n), r->gref[l] = malloc(sizeof(float) * (size_t)n);
        cr_assert(r->store[l] && r->gstore[l] && r->packed[l] && r->gref[l]);
        for (int64_t e = 0; e < r->span[l]; e++) poison_at(dt, r->store[l] + e * esz(dt)), poison_at(dt, r->gstore[l] + e * esz(dt));
        for (int64_t i = 0; i < n; i++) {
            int64_t b = i / r->per[l], ch = i % r->per[l] / (c->hw[l][0] * c->hw[l][1]);
            bool box = ch < 4 * c->reg_max;
            /* points: bin 0 dominates every side, so distances are ~0 */
            float x = c->points && box ? (ch % c->reg_max == 0 ? 12.0f : -12.0f) : box ? (float)(4 * unit(&s) - 2) : (float)(8 * unit(&s) - 5);
            if (c->reg_max == 1 && box && !c->points) x = (float)(0.2 + 3 * unit(&s));
            if (c->ties) {
                const int64_t cell = i % (c->hw[l][0] * c->hw[l][1]);
                const double cx = (double)(cell % c->hw[l][1]) + 0.5, cy = (double)(cell / c->hw[l][1]) + 0.5, lo = 16 / c->stride[l], hi = 48 / c->stride[l];
                x = ch == 0 ? (float)(cx - lo) : ch == 1 ? (float)(cy - lo) : ch == 2 ? (float)(hi - cx) : ch == 3 ? (float)(hi - cy) : 1.0f;
            }
            const int64_t plane = (int64_t)c->hw[l][0] * c->hw[l][1];
            unsigned char *at_e = r->store[l] + (b * bs + stored_of(c, i % r->per[l], r->per[l] / plane, plane)) * (int64_t)esz(dt);
            cuda_f32_to_storage(dt, &x, at_e, 1);
            cuda_storage_to_f32(dt, at_e, &r->packed[l][i], 1);
        }
    }
    Shape bsh = {.nd = 3, .d = {c->batch, c->max_boxes, 5}};
    in[c->nl] = r->tb = graph_add_input(&r->g, "boxes", bsh, DT_F32);
    in[c->nl + 1] = r->tc = graph_add_input(&r->g, "counts", shape1(c->batch), DT_I64);
    r->fwd = graph_add_op(&r->g, OP_DETECT_LOSS, in, c->nl + 2, &at, 2, 0, "loss");
    cr_assert_geq(r->fwd, 0, "%s", r->g.err);
    int bin[IR_MAX_LEVELS + 3];
    bin[0] = r->td = graph_add_input(&r->g, "d_total", shape1(1), DT_F32);
    memcpy(bin + 1, in, sizeof(int) * (size_t)(c->nl + 2));
    r->bwd = graph_add_op(&r->g, OP_DETECT_LOSS_BWD, bin, c->nl + 3, &at, c->nl, 0, "loss_bwd");
    cr_assert_geq(r->bwd, 0, "%s", r->g.err);
    for (int l = 0; l < c->nl; l++) r->g.tensors[r->g.ops[r->bwd].out[l]].channels_last = c->cl;
    char err[256];
    cr_assert(views_identity(&r->g, &r->ar, &r->views, err, sizeof err), "%s", err);
    r->boxes = malloc(sizeof(float) * (size_t)c->batch * c->max_boxes * 5 + 1);
    r->counts = malloc(sizeof(int64_t) * (size_t)c->batch);
    cr_assert(r->boxes && r->counts);
    make_boxes(c, r->boxes, &s);
    for (int b = 0; b < c->batch; b++) r->counts[b] = c->counts[b];
    r->d_total[0] = c->d_total;
    r->scratch_bytes = cuda_detloss_op_scratch_bytes(&r->g, &r->g.ops[r->bwd]);
    cr_assert_eq(r->scratch_bytes, cuda_detloss_op_scratch_bytes(&r->g, &r->g.ops[r->fwd]));
    r->scratch = aligned_alloc(256, (size_t)r->scratch_bytes);
    cr_assert_not_null(r->scratch);
    /* stale bytes: every part must be written before it is read */
    memset(r->scratch, 0xa5, (size_t)r->scratch_bytes);
}

static void run_free(Run *r, int nl) {
    for (int l = 0; l < nl; l++) free(r->store[l]), free(r->gstore[l]), free(r->packed[l]), free(r->gref[l]);
    free(r->boxes), free(r->counts), free(r->scratch);
    arena_free(&r->ar);
}

/* The worst differences over the cases of one storage type. */
typedef struct Worst {
    double items, sums, score, grad;
    int64_t grads, inexact;
    int fg, multi, zero_pos, short_rows;
} Worst;

/* Runs op (forward or backward) through the emulated phases. */
static YlDetLossArgs emulate(Run *r, const Case *c, DType dt, void *h, const LibKernel *ks, int n_ks, int op) {
    const Graph *g = &r->g;
    CuDevicePtr *ptr = calloc((size_t)g->n_tensors, sizeof *ptr);
    unsigned char *stype = calloc((size_t)g->n_tensors, 1);
    cr_assert(ptr && stype);
    for (int t = 0; t < g->n_tensors; t++) stype[t] = g->tensors[t].dtype == DT_I64 ? DT_I64 : DT_F32;
    for (int l = 0; l < c->nl; l++) {
        ptr[r->lv[l]] = (CuDevicePtr)(uintptr_t)r->store[l], stype[r->lv[l]] = (unsigned char)dt;
        ptr[g->ops[r->bwd].out[l]] = (CuDevicePtr)(uintptr_t)r->gstore[l], stype[g->ops[r->bwd].out[l]] = (unsigned char)dt;
    }
    ptr[r->tb] = (CuDevicePtr)(uintptr_t)r->boxes, ptr[r->tc] = (CuDevicePtr)(uintptr_t)r->counts, ptr[r->td] = (CuDevicePtr)(uintptr_t)r->d_total;
    ptr[g->ops[r->fwd].out[0]] = (CuDevicePtr)(uintptr_t)r->total, ptr[g->ops[r->fwd].out[1]] = (CuDevicePtr)(uintptr_t)r->items;
    LibProgram lp = {.kernels = (LibKernel *)ks, .n_kernels = n_ks};
    int idx[CUDA_DETLOSS_PHASES];
    char err[512];
    const Op *o = &g->ops[op];
    cr_assert(cuda_detloss_kernels(&lp, g, o, stype, idx, err, sizeof err), "%s", err);
    YlDetLossArgs a;
    cr_assert(cuda_detloss_args(g, &r->views, o, ptr, (CuDevicePtr)(uintptr_t)r->scratch, &a, err, sizeof err), "%s", err);
    for (int l = 0; l < c->nl; l++) {
        cr_expect_eq(a.level_bs[l], r->per[l], "identity views: packed levels");
        const int64_t plane = (int64_t)c->hw[l][0] * c->hw[l][1], chans = r->per[l] / plane;
        cr_expect(a.level_cs[l] == (c->cl ? 1 : plane) && a.level_ps[l] == (c->cl ? chans : 1), "level %d: channel and pixel steps", l);
        cr_expect(o->kind != OP_DETECT_LOSS_BWD || (a.grad_cs[l] == a.level_cs[l] && a.grad_ps[l] == a.level_ps[l]), "gradient %d: the level's steps", l);
        a.level_bs[l] = a.grad_bs[l] = r->per[l] + c->gap; /* as the plan's views would give them */
    }
    for (int i = 0; i < CUDA_DETLOSS_PHASES && idx[i] >= 0; i++) {
        cr_expect_gt(cuda_detloss_items(&a, ks[idx[i]].entry), 0);
        emul_run(h, ks[idx[i]].name, ks[idx[i]].entry, &a);
    }
    cr_expect_eq(idx[CUDA_DETLOSS_PHASES - 1] >= 0, o->kind == OP_DETECT_LOSS_BWD, "only the backward has a gradient phase");
    free(ptr), free(stype);
    return a;
}

static void check_case(const Case *c, DType dt, void *h, const LibKernel *ks, int n_ks, Worst *w) {
    Run r;
    build(&r, c, dt);
    const Graph *g = &r.g;
    char err[512];
    /* the oracle, on the stored values */
    void **buf = calloc((size_t)g->n_tensors, sizeof *buf);
    cr_assert_not_null(buf);
    for (int l = 0; l < c->nl; l++) buf[r.lv[l]] = r.packed[l], buf[g->ops[r.bwd].out[l]] = r.gref[l];
    buf[r.tb] = r.boxes, buf[r.tc] = r.counts, buf[r.td] = r.d_total;
    buf[g->ops[r.fwd].out[0]] = r.ref_total, buf[g->ops[r.fwd].out[1]] = r.ref_items;
    cr_assert(ref_kernel(OP_DETECT_LOSS)(g, &g->ops[r.fwd], buf, err, sizeof err), "%s", err);
    cr_assert(ref_kernel(OP_DETECT_LOSS_BWD)(g, &g->ops[r.bwd], buf, err, sizeof err), "%s", err);
    free(buf);
    DetLossConfig cfg;
    int lh[IR_MAX_LEVELS], lw[IR_MAX_LEVELS], counts[8];
    float strides[IR_MAX_LEVELS];
    for (int l = 0; l < c->nl; l++) lh[l] = c->hw[l][0], lw[l] = c->hw[l][1], strides[l] = (float)c->stride[l];
    detloss_config_default(&cfg, c->nc, c->nl, lh, lw, strides);
    cfg.reg_max = c->reg_max, cfg.topk = c->topk;
    for (int b = 0; b < c->batch; b++) counts[b] = c->counts[b];
    DetTargets t = {.batch = c->batch, .max_boxes = c->max_boxes, .count = counts, .boxes = r.boxes};
    const float *lv[IR_MAX_LEVELS];
    for (int l = 0; l < c->nl; l++) lv[l] = r.packed[l];
    DetAssignment as;
    DetLossResult res;
    cr_assert(detloss_assign(&cfg, lv, &t, &as, err, sizeof err), "%s", err);
    cr_assert(detloss_forward_backward(&cfg, lv, &t, &res, NULL, err, sizeof err), "%s", err);

    /* forward: items, total and the assignment */
    YlDetLossArgs a = emulate(&r, c, dt, h, ks, n_ks, r.fwd);
    const double *sum = (const double *)((char *)r.scratch + a.off_sum);
    const int *owner = (const int *)((char *)r.scratch + a.off_owner);
    const double *term = (const double *)((char *)r.scratch + a.off_term);
    int fg = 0, bad_fg = 0;
    double score_worst = 0;
    for (int64_t i = 0; i < (int64_t)c->batch * a.anchors; i++) {
        fg += owner[i] >= 0;
        bool same = (owner[i] >= 0) == (as.fg[i] != 0) && (owner[i] < 0 || owner[i] == as.gt_index[i]);
        if (!same && bad_fg++ < 5) cr_log_error("%s: anchor %lld: owner %d, oracle fg %d gt %d", c->name, (long long)i, owner[i], as.fg[i], as.gt_index[i]);
        score_worst = fmax(score_worst, fabs(term[i * 4] - as.score[i]) / fmax(fabs(as.score[i]), 1e-12));
    }
    cr_expect_eq(bad_fg, 0, "%s: %d anchors assigned otherwise than by the oracle", c->name, bad_fg);
    /* what the case exercised: anchors chosen by several rows, rows with fewer than k positives, zero-metric positives */
    const int *top = (const int *)((char *)r.scratch + a.off_top);
    const double *pair = (const double *)((char *)r.scratch + a.off_pair);
    for (int64_t i = 0; i < (int64_t)c->batch * a.anchors; i++) {
        int b = (int)(i / a.anchors), an = (int)(i % a.anchors), claims = 0;
        for (int gi = 0; gi < c->max_boxes * a.topk; gi++) claims += top[(int64_t)b * c->max_boxes * a.topk + gi] == an;
        w->multi += claims > 1;
        w->zero_pos += owner[i] >= 0 && pair[i * 2] == 0;
    }
    for (int64_t gi = 0; gi < (int64_t)c->batch * c->max_boxes; gi++)
        if (((const int *)((char *)r.scratch + a.off_row))[gi] == 1) {
            int pos = 0;
            for (int k = 0; k < a.topk; k++) pos += top[gi * a.topk + k] >= 0;
            w->short_rows += pos < a.topk;
        }
    cr_expect_eq(fg, res.n_fg, "%s: %d foreground anchors, the oracle %d", c->name, fg, res.n_fg);
    cr_expect_eq((int)sum[4], res.n_fg);
    cr_expect_eq(sum[6], 0, "%s: no bad rows", c->name);
    double norm = fmax(res.score_sum, 1.0), d_sum = fabs(sum[0] - res.score_sum) / fmax(res.score_sum, 1e-12);
    const double mine[3] = {cfg.gain_box * (sum[2] / sum[5]), cfg.gain_cls * (sum[1] / sum[5]), cfg.gain_dfl * (sum[3] / sum[5])}, want[3] = {res.box, res.cls, res.dfl};
    for (int k = 0; k < 3; k++) d_sum = fmax(d_sum, fabs(mine[k] - want[k]) / fmax(fabs(want[k]), 1e-12));
    cr_expect_leq(d_sum, 1e-9, "%s: score sum %.17g (oracle %.17g), items differ by %.3g relative", c->name, sum[0], res.score_sum, d_sum);
    cr_expect_leq(score_worst, 1e-9, "%s: a soft target differs by %.3g relative", c->name, score_worst);
    cr_expect_leq(fabs(sum[5] - norm) / norm, 1e-12, "%s: normaliser %.17g, oracle %.17g", c->name, sum[5], norm);
    double d_items = fabs(r.total[0] - r.ref_total[0]) / fmax(fabs(r.ref_total[0]), 1e-30);
    for (int k = 0; k < 3; k++) d_items = fmax(d_items, fabs(r.items[k] - r.ref_items[k]) / fmax(fabs(r.ref_items[k]), 1e-30));
    cr_expect_leq(d_items, 1e-6, "%s: total %.9g / %.9g, items differ by %.3g relative", c->name, r.total[0], r.ref_total[0], d_items);

    /* backward: every gradient element, the gaps between images untouched */
    memset(r.scratch, 0x5a, (size_t)r.scratch_bytes);
    emulate(&r, c, dt, h, ks, n_ks, r.bwd);
    int64_t bad = 0, gaps = 0, inexact = 0, n = 0;
    double worst = 0, rel = 0; /* worst over the tolerance; worst relative difference (fp32) or ulps */
    for (int l = 0; l < c->nl; l++) {
        const int64_t bs = r.per[l] + c->gap, plane = (int64_t)c->hw[l][0] * c->hw[l][1];
        for (int64_t e = 0; e < r.span[l]; e++) {
            const unsigned char *p = r.gstore[l] + e * (int64_t)esz(dt);
            if (e % bs >= r.per[l]) {
                gaps += !poisoned_at(dt, p);
                continue;
            }
            float got, wv = r.gref[l][e / bs * r.per[l] + nchw_of(c, e % bs, r.per[l] / plane, plane)];
            cuda_storage_to_f32(dt, p, &got, 1);
            double d; /* over the tolerance when > 1 */
            if (dt == DT_F32) {
                /* relative 1e-5, absolute 1e-7 (times the seed) for tiny values */
                d = fabs((double)got - wv) / fmax(1e-5 * fabs(wv), 1e-7 * fabs(c->d_total));
                if (fabs(wv) > 1e-7 * fabs(c->d_total)) rel = fmax(rel, fabs((double)got - wv) / fabs(wv));
                inexact += got != wv;
            } else {
                uint16_t hw, hg;
                cuda_f32_to_storage(dt, &wv, &hw, 1);
                memcpy(&hg, p, 2);
                int ow = hw & 0x8000 ? -(int)(hw & 0x7fff) : (int)hw, og = hg & 0x8000 ? -(int)(hg & 0x7fff) : (int)hg;
                d = fabs((double)(ow - og));
                rel = fmax(rel, d);
                inexact += d > 0;
            }
            if (d > 1 && bad++ < 5) cr_log_error("%s %s level %d element %lld: %.9g, oracle %.9g", c->name, dtag(dt), l, (long long)e, got, wv);
            worst = fmax(worst, d);
            n++;
        }
    }
    cr_expect_eq(bad, 0, "%s (%s): %lld of %lld gradient elements differ (worst %.3g)", c->name, dtag(dt), (long long)bad, (long long)n, worst);
    cr_expect_eq(gaps, 0, "%s: the kernels wrote between images", c->name);
    printf("detloss_emul %s %-28s fg %3d (oracle %3d), score sum %.6f, total %.6g (oracle %.6g), sums %.2g, items %.2g, grads %lld, %lld inexact, worst %.3g%s\n",
           dtag(dt), c->name, fg, res.n_fg, sum[0], r.total[0], r.ref_total[0], d_sum, d_items, (long long)n, (long long)inexact, rel,
           dt == DT_F32 ? " relative" : " ulp");
    w->items = fmax(w->items, d_items), w->sums = fmax(w->sums, d_sum), w->score = fmax(w->score, score_worst), w->grad = fmax(w->grad, rel);
    w->grads += n, w->inexact += inexact, w->fg += fg;
    detloss_assignment_free(&as);
    run_free(&r, c->nl);
}

static void emul_all(DType dt) {
    LibKernel ks[CUDA_DETLOSS_PHASES];
    int n = phase_kernels(dt, ks);
    void *h = emul_load(dt, ks, n);
    Worst w = {0};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(&CASES[i], dt, h, ks, n, &w);
    printf("detloss_emul %s: %zu cases, %d fg anchors, %lld gradient elements (%lld not bit-exact); worst: items %.3g, sums %.3g, soft targets %.3g, gradient %.3g %s\n",
           dtag(dt), sizeof CASES / sizeof CASES[0], w.fg, (long long)w.grads, (long long)w.inexact, w.items, w.sums, w.score, w.grad,
           dt == DT_F32 ? "relative" : "ulp");
    printf("detloss_emul %s: %d anchors chosen by several rows, %d GT rows with fewer than topk positives, %d positives of metric 0\n", dtag(dt), w.multi,
           w.short_rows, w.zero_pos);
    cr_expect(w.fg > 0 && w.multi > 0 && w.short_rows > 0 && w.zero_pos > 0, "the cases cover multi-GT anchors, short rows and zero-metric positives");
    dlclose(h);
}

Test(detloss_emul, phases_match_the_oracle_fp32) { emul_all(DT_F32); }
Test(detloss_emul, phases_match_the_oracle_bf16) { emul_all(DT_BF16); }
Test(detloss_emul, phases_match_the_oracle_fp16) { emul_all(DT_F16); }

/* ---- NVRTC and the plan ---- */

/* Every phase in every storage type compiles for sm_80 and sm_90 (no GPU needed). */
Test(detloss_emul, every_phase_compiles_with_nvrtc) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    const DType types[] = {DT_F32, DT_BF16, DT_F16};
    int compiled = 0;
    for (int ti = 0; ti < 3; ti++) {
        LibKernel ks[CUDA_DETLOSS_PHASES];
        int n = phase_kernels(types[ti], ks);
        for (int i = 0; i < n; i++) {
            /* the type-free phases are the same kernel in every storage type */
            if (ti > 0 && ks[i].n_operands == 0) continue;
            char *src = lib_kernel_render(&ks[i]), err[4096];
            cr_assert_not_null(src);
            const char *archs[] = {"sm_80", "sm_90"};
            for (int ai = 0; ai < 2; ai++) {
                unsigned char *bin = NULL;
                size_t len = 0;
                cr_expect(nvrtc_compile(ks[i].name, src, archs[ai], false, &bin, &len, err, sizeof err), "%s %s: %s", ks[i].name, archs[ai], err);
                cr_expect_gt(len, 100, "%s %s", ks[i].name, archs[ai]);
                free(bin);
                compiled++;
            }
            free(src);
        }
    }
    printf("detloss_emul: %d NVRTC compiles of the loss phases\n", compiled);
    cr_expect_eq(compiled, 2 * (3 * 5 + 3));
}

/* The tiny model's CUDA steps in each precision: the plan's library kernels
 * hold every phase its two loss ops need (named by their storage types, the
 * cast still last), the loss ops keep no YlArgs launch, and their argument
 * blocks follow the ops' attributes. */
Test(detloss_emul, tiny_plans_carry_the_loss_kernels) {
    const char *precs[] = {"fp32", "bf16", "fp16"};
    for (int pi = 0; pi < 3; pi++) {
        char extra[160], err[1024];
        snprintf(extra, sizeof extra, "--imgsz 64 --batch 2 --precision %s --target cpu", precs[pi]);
        Plan p;
        tiny_plan(extra, &p);
        const Graph *g = &p.g;
        KProgram kp;
        LibProgram lp;
        cr_assert(kernel_lower(g, &p.fusion, p.precision, &kp, err, sizeof err), "%s", err);
        cr_assert(lib_program_build(g, p.precision, &kp, &lp, err, sizeof err), "%s", err);
        bool *persistent = calloc((size_t)g->n_tensors, sizeof *persistent);
        unsigned char *stype = calloc((size_t)g->n_tensors, 1);
        cr_assert(persistent && stype);
        memplan_mark_persistent(g, persistent);
        for (int t = 0; t < g->n_tensors; t++) stype[t] = (unsigned char)memplan_storage_dtype(g, t, persistent[t], p.precision);
        int losses = 0, n_dl = 0;
        for (int k = 0; k < lp.n_kernels; k++) n_dl += lp.kernels[k].entry >= LK_DETLOSS_DECODE && lp.kernels[k].entry <= LK_DETLOSS_GRAD;
        for (int l = 0; l < kp.n_launches; l++) {
            const Op *op = &g->ops[kp.launches[l].op_lo];
            if (op->kind != OP_DETECT_LOSS && op->kind != OP_DETECT_LOSS_BWD) continue;
            losses++;
            cr_expect_eq(lp.launch_kernel[l], -1, "the loss takes YlDetLossArgs, not a YlArgs launch");
            int idx[CUDA_DETLOSS_PHASES];
            cr_assert(cuda_detloss_kernels(&lp, g, op, stype, idx, err, sizeof err), "%s: %s", precs[pi], err);
            const LibKernel *first = &lp.kernels[idx[0]];
            char want[64];
            snprintf(want, sizeof want, "yl_detloss_decode_%s", p.precision == PREC_FP32 ? "f32" : p.precision == PREC_BF16 ? "bf16" : "f16");
            cr_expect_str_eq(first->name, want, "%s: the levels are stored as activations", precs[pi]);
            if (op->kind == OP_DETECT_LOSS_BWD) cr_expect(idx[CUDA_DETLOSS_PHASES - 1] >= 0 && lp.kernels[idx[CUDA_DETLOSS_PHASES - 1]].n_operands == 3);
            CuDevicePtr *ptr = calloc((size_t)g->n_tensors, sizeof *ptr);
            cr_assert_not_null(ptr);
            YlDetLossArgs a;
            cr_assert(cuda_detloss_args(g, &p.fusion.views, op, ptr, 0, &a, err, sizeof err), "%s", err);
            cr_expect(a.nl == op->a.nlevels && a.nc == op->a.nc && a.reg_max == op->a.reg_max && a.topk == (op->a.topk > 0 ? op->a.topk : 10));
            cr_expect_eq(a.anchor_off[a.nl], a.anchors);
            cr_expect_eq(a.img_w, a.w[0] * a.stride[0]);
            cr_expect_eq(a.batch, 2);
            int64_t bytes = cuda_detloss_op_scratch_bytes(g, op);
            cr_expect(bytes > a.off_sum && bytes % 256 == 0 && a.off_part % 256 == 0);
            free(ptr);
        }
        cr_expect_eq(losses, 2, "%s: the step's detect_loss and detect_loss_bwd", precs[pi]);
        cr_expect_eq(n_dl, 8, "%s: seven forward phases and the gradient", precs[pi]);
        if (lp.cast >= 0) cr_expect_eq(lp.cast, lp.n_kernels - 1, "the cast stays last");
        free(persistent), free(stype);
        lib_program_free(&lp);
        kernel_program_free(&kp);
        plan_free(&p);
    }
    /* the scratch at the size of the issue: 640x640, batch 64, 300 boxes */
    int64_t big = cuda_detloss_scratch_bytes(64, 8400, 300, 10);
    printf("detloss_emul: scratch for batch 64, 8400 anchors, 300 boxes: %.1f MB\n", big / 1e6);
    cr_expect(big >= 64LL * 8400 * 84 && big < 64LL * 8400 * 96, "84 bytes per anchor and image, and the per-row parts");
}

/* A target row the oracle refuses (a class id past nc) makes the device's
 * loss and items NaN, so the trainer's not-finite check stops the run
 * instead of training on it; the scratch counts the row. */
Test(detloss_emul, a_bad_target_row_makes_the_loss_nan) {
    LibKernel ks[CUDA_DETLOSS_PHASES];
    int n = phase_kernels(DT_F32, ks);
    void *h = emul_load(DT_F32, ks, n);
    const Case *c = &CASES[0];
    Run r;
    build(&r, c, DT_F32);
    cr_assert_gt(c->counts[0], 0);
    r.boxes[0] = (float)(c->nc + 5); /* image 0, row 0: its class */
    char err[512] = "";
    void **buf = calloc((size_t)r.g.n_tensors, sizeof *buf);
    for (int l = 0; l < c->nl; l++) buf[r.lv[l]] = r.packed[l];
    buf[r.tb] = r.boxes, buf[r.tc] = r.counts, buf[r.g.ops[r.fwd].out[0]] = r.ref_total, buf[r.g.ops[r.fwd].out[1]] = r.ref_items;
    cr_expect(!ref_kernel(OP_DETECT_LOSS)(&r.g, &r.g.ops[r.fwd], buf, err, sizeof err), "the oracle refuses the row");
    free(buf);
    YlDetLossArgs a = emulate(&r, c, DT_F32, h, ks, n, r.fwd);
    const double *sum = (const double *)((char *)r.scratch + a.off_sum);
    cr_expect_eq(sum[6], 1, "one bad row counted");
    cr_expect(isnan(r.total[0]) && isnan(r.items[0]) && isnan(r.items[1]) && isnan(r.items[2]), "total %g, items %g %g %g", r.total[0], r.items[0], r.items[1],
              r.items[2]);
    run_free(&r, c->nl);
    dlclose(h);
}
