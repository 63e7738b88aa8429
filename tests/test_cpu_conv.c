/* tests/test_cpu_conv.c — the fast CPU kernels (runtime/cpu_conv.c,
 * runtime/cpu_pointwise.c, cpu_pool.c, cpu_attention.c) against the reference oracle: convolutions over a
 * grid of shapes, BatchNorm and activations, and whole training steps of the
 * tiny model with Interp.fast off and on from the same initial state. */
#include <math.h>
#include <cblas.h>
#include <omp.h>

#include "../compiler/train_compile.h"
#include "../runtime/cpu_conv.h"
#include "../runtime/cpu_fold.h"
#include "../runtime/interp.h"
#include "../runtime/synthetic.h"
#include "../runtime/train_step.h"
#include "../runtime/weights.h"
#include "test_util.h"

typedef struct Bench {
    Arena arena;
    Graph g;
    Interp it;
    unsigned rng;
} Bench;

static void bench_init(Bench *b, unsigned seed) {
    memset(b, 0, sizeof *b);
    arena_init(&b->arena, 0);
    graph_init(&b->g, &b->arena);
    b->rng = seed;
}

static void bench_free(Bench *b) {
    interp_free(&b->it);
    arena_free(&b->arena);
}

static double urand(Bench *b) {
    b->rng = b->rng * 1664525u + 1013904223u;
    return ((b->rng >> 8) & 0xFFFFFF) / (double)0x1000000;
}

static int tensor(Bench *b, TensorKind kind, Shape s) {
    char name[32];
    snprintf(name, sizeof name, "t%d", b->g.n_tensors);
    int t = kind == TK_INPUT ? graph_add_input(&b->g, arena_strdup(&b->arena, name), s, DT_F32)
                             : graph_add_state(&b->g, kind, arena_strdup(&b->arena, name), s, DT_F32);
    cr_assert(t >= 0, "%s", b->g.err);
    return t;
}

static int op1(Bench *b, OpKind k, const int *in, int n_in, const OpAttrs *a) {
    int o = graph_add_op(&b->g, k, in, n_in, a, op_def(k)->n_out, 0, "t");
    cr_assert(o >= 0, "%s", b->g.err);
    return b->g.ops[o].out[0];
}

static void fill(Bench *b, int t, double lo, double hi) {
    float *p = interp_tensor(&b->it, t);
    for (int64_t i = 0; i < shape_numel(&b->g.tensors[t].shape); i++) p[i] = (float)(lo + (hi - lo) * urand(b));
}

static size_t bytes(const Graph *g, int t) { return (size_t)shape_numel(&g->tensors[t].shape) * dtype_size(g->tensors[t].dtype); }

/* Runs the whole graph with the oracle, restores the inputs (some ops update
 * state in place), runs it again with the fast kernels, and returns the worst
 * max|fast - ref| / max|ref| over the fp32 tensors. */
static double fast_vs_ref(Bench *b, double tol, const char *what) {
    const Graph *g = &b->g;
    char err[256];
    cr_assert(graph_verify(g, err, sizeof err), "%s: %s", what, err);
    void **saved = calloc((size_t)g->n_tensors, sizeof(void *)), **ref = calloc((size_t)g->n_tensors, sizeof(void *));
    cr_assert(saved && ref);
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].producer < 0 && b->it.buf[t]) {
            saved[t] = malloc(bytes(g, t) + 1);
            memcpy(saved[t], b->it.buf[t], bytes(g, t));
        }
    b->it.fast = false;
    cr_assert(interp_run(&b->it, 0, g->n_ops, err, sizeof err), "%s: %s", what, err);
    for (int t = 0; t < g->n_tensors; t++) {
        ref[t] = malloc(bytes(g, t) + 1);
        memcpy(ref[t], b->it.buf[t], bytes(g, t));
        if (saved[t]) memcpy(b->it.buf[t], saved[t], bytes(g, t));
    }
    b->it.fast = true;
    cr_assert(interp_run(&b->it, 0, g->n_ops, err, sizeof err), "%s: %s", what, err);
    double worst = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].dtype == DT_I64) {
            cr_expect(memcmp(ref[t], b->it.buf[t], bytes(g, t)) == 0, "%s: int64 tensor %d differs", what, t);
            continue;
        }
        const float *r = ref[t], *f = b->it.buf[t];
        double dmax = 0, rmax = 0;
        for (int64_t i = 0; i < shape_numel(&g->tensors[t].shape); i++) {
            dmax = fmax(dmax, fabs((double)f[i] - r[i]));
            rmax = fmax(rmax, fabs(r[i]));
            cr_assert(isfinite(f[i]), "%s: tensor %d element %lld is %g", what, t, (long long)i, f[i]);
        }
        double rel = dmax / fmax(rmax, 1e-30);
        const char *op = g->tensors[t].producer >= 0 ? op_def(g->ops[g->tensors[t].producer].kind)->name : "state";
        cr_expect(dmax <= tol * rmax, "%s: %s output %%%d: max |fast - ref| %.3g > %.0e x max |ref| %.3g", what, op, t, dmax, tol, rmax);
        worst = fmax(worst, rel);
    }
    for (int t = 0; t < g->n_tensors; t++) {
        free(saved[t]);
        free(ref[t]);
    }
    free(saved);
    free(ref);
    return worst;
}

/* ---- convolutions ---- */

typedef struct ConvCase {
    int n, ci, co, h, w, k, stride, dil, groups;
    int pad[4];
    bool bias;
} ConvCase;

static void conv_desc(const ConvCase *c, char *s, size_t cap) {
    snprintf(s, cap, "conv n%d ci%d co%d %dx%d k%d s%d d%d g%d pad(%d,%d,%d,%d)%s", c->n, c->ci, c->co, c->h, c->w, c->k, c->stride, c->dil, c->groups,
             c->pad[0], c->pad[1], c->pad[2], c->pad[3], c->bias ? " bias" : "");
}

static bool conv_fits(const ConvCase *c) {
    int eff = c->dil * (c->k - 1) + 1;
    return c->h + c->pad[0] + c->pad[1] >= eff && c->w + c->pad[2] + c->pad[3] >= eff;
}

/* The graph of one conv's forward, dgrad, wgrad (and bias grad) with an
 * independent dy, its inputs filled in [-1, 1); outs: y, dx, dw. */
static void conv_graph(Bench *b, const ConvCase *cc, int outs[3]) {
    int x = tensor(b, TK_INPUT, shape4(cc->n, cc->ci, cc->h, cc->w));
    int w = tensor(b, TK_PARAM, shape4(cc->co, cc->ci / cc->groups, cc->k, cc->k));
    int in[3] = {x, w, cc->bias ? tensor(b, TK_PARAM, shape1(cc->co)) : -1};
    OpAttrs a = {.kernel = {cc->k, cc->k}, .stride = {cc->stride, cc->stride}, .dilation = {cc->dil, cc->dil}, .groups = cc->groups};
    memcpy(a.pad, cc->pad, sizeof a.pad);
    int y = op1(b, OP_CONV2D, in, cc->bias ? 3 : 2, &a);
    int dy = tensor(b, TK_INPUT, b->g.tensors[y].shape);
    OpAttrs ad = a, aw = a;
    ad.shape = b->g.tensors[x].shape;
    aw.shape = b->g.tensors[w].shape;
    outs[0] = y;
    outs[1] = op1(b, OP_CONV2D_DGRAD, (int[]){dy, w}, 2, &ad);
    outs[2] = op1(b, OP_CONV2D_WGRAD, (int[]){dy, x}, 2, &aw);
    if (cc->bias) op1(b, OP_BIAS_GRAD, &dy, 1, NULL);
    cr_assert(interp_init(&b->it, &b->g));
    for (int t = 0; t < b->g.n_tensors; t++)
        if (b->g.tensors[t].producer < 0) fill(b, t, -1, 1);
}

/* forward, dgrad, wgrad and bias grad of one conv against the oracle */
static double conv_check(const ConvCase *cc, unsigned seed) {
    Bench b;
    bench_init(&b, seed);
    int outs[3];
    conv_graph(&b, cc, outs);
    char what[160];
    conv_desc(cc, what, sizeof what);
    double worst = fast_vs_ref(&b, 1e-4, what);
    bench_free(&b);
    return worst;
}

Test(cpu_conv, grid_matches_reference, .timeout = 600) {
    static const int pads[][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {2, 1, 0, 2}};
    /* groups: 1, 2, depthwise (co = ci), depthwise with multiplier 2 */
    static const int group_modes[][2] = {{1, 6}, {2, 6}, {4, 4}, {4, 8}};
    static const int ks[] = {1, 3, 5};
    double worst = 0;
    int cases = 0;
    unsigned seed = 1;
    for (int ki = 0; ki < 3; ki++)
        for (int s = 1; s <= 2; s++)
            for (int pi = 0; pi < 3; pi++)
                for (int d = 1; d <= 2; d++)
                    for (int gi = 0; gi < 4; gi++)
                        for (int bias = 0; bias < 2; bias++)
                            for (int n = 1; n <= 3; n += 2) {
                                ConvCase c = {n, 4, group_modes[gi][1], 11, 9, ks[ki], s, d, group_modes[gi][0], {0}, bias};
                                memcpy(c.pad, pads[pi], sizeof c.pad);
                                if (!conv_fits(&c)) continue;
                                worst = fmax(worst, conv_check(&c, seed++));
                                cases++;
                            }
    cr_log_info("cpu_conv grid: %d cases, worst max|fast-ref|/max|ref| = %.3g", cases, worst);
    cr_expect_gt(cases, 500);
}

/* big enough for several weight-gradient tiles; odd sizes and stride 2 */
Test(cpu_conv, chunked_and_wide, .timeout = 600) {
    ConvCase cases[] = {
        {1, 32, 16, 96, 96, 3, 1, 1, 1, {1, 1, 1, 1}, true},
        {2, 24, 8, 97, 101, 3, 2, 1, 1, {1, 0, 1, 0}, false},
        {1, 64, 16, 40, 40, 5, 1, 2, 2, {4, 4, 4, 4}, true},
        {2, 48, 48, 33, 35, 5, 2, 1, 48, {2, 2, 2, 2}, true},
        {2, 64, 32, 20, 20, 1, 1, 1, 1, {0, 0, 0, 0}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double r = conv_check(&cases[i], 100 + (unsigned)i);
        char what[160];
        conv_desc(&cases[i], what, sizeof what);
        cr_log_info("%s: worst relative difference %.3g", what, r);
    }
}

/* Runs b's graph fast with 1 thread, then with 3, and expects the same bits
 * in outs; the outputs are filled with NaNs in between so a tile left
 * unwritten shows. */
static void same_bits_for_1_and_3_threads(Bench *b, const int *outs, int n_outs, const char *what) {
    int saved = omp_get_max_threads();
    b->it.fast = true;
    char err[256];
    void *one[4];
    cr_assert(n_outs <= 4);
    omp_set_num_threads(1);
    cr_assert(interp_run(&b->it, 0, b->g.n_ops, err, sizeof err), "%s: %s", what, err);
    for (int k = 0; k < n_outs; k++) {
        one[k] = malloc(bytes(&b->g, outs[k]));
        memcpy(one[k], b->it.buf[outs[k]], bytes(&b->g, outs[k]));
        memset(b->it.buf[outs[k]], 0xff, bytes(&b->g, outs[k]));
    }
    omp_set_num_threads(3);
    cr_assert(interp_run(&b->it, 0, b->g.n_ops, err, sizeof err), "%s: %s", what, err);
    for (int k = 0; k < n_outs; k++) {
        cr_expect(memcmp(one[k], b->it.buf[outs[k]], bytes(&b->g, outs[k])) == 0, "%s: %s output %d differs between 1 and 3 threads", what,
                  op_def(b->g.ops[b->g.tensors[outs[k]].producer].kind)->name, k);
        free(one[k]);
    }
    omp_set_num_threads(saved);
}

/* oneDNN's forward and dgrad sum each output element in one thread, and a
 * weight gradient's tiles (output-channel blocks x image chunks, partial
 * sums added in chunk order) are cut from the shape alone, so 1 and 3
 * threads must give the same bits (forward, dgrad, wgrad; 3x3, 1x1,
 * depthwise with multiplier 2, 5x5 dilated; one to three channel blocks,
 * uneven last blocks and chunks; every conv above the size that runs in
 * parallel). */
Test(cpu_conv, results_do_not_depend_on_the_thread_count, .timeout = 600) {
    ConvCase cases[] = {
        {2, 32, 16, 64, 48, 3, 1, 1, 1, {1, 1, 1, 1}, true},
        {2, 64, 64, 50, 50, 1, 1, 1, 1, {0, 0, 0, 0}, false},
        {2, 64, 128, 64, 64, 3, 1, 1, 64, {1, 1, 1, 1}, true},
        {3, 16, 8, 33, 35, 5, 1, 2, 2, {4, 4, 4, 4}, false},
        {5, 16, 100, 24, 20, 3, 1, 1, 1, {1, 1, 1, 1}, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const ConvCase *cc = &cases[i];
        Bench b;
        bench_init(&b, 300 + (unsigned)i);
        int outs[3];
        conv_graph(&b, cc, outs);
        char what[160];
        conv_desc(cc, what, sizeof what);
        same_bits_for_1_and_3_threads(&b, outs, 3, what);
        bench_free(&b);
    }
}

/* Set-up makes every oneDNN primitive a graph's convolutions need
 * (cpu_conv_prepare, before a training run's memory line): running the
 * graph then makes none, so the layout scratch set-up counted is all it
 * holds. The graph: a conv's forward (with bias), dgrad and wgrad, and a
 * transposed conv (a dgrad of another shape). */
Test(cpu_conv, set_up_makes_every_primitive_a_run_uses) {
    Bench b;
    bench_init(&b, 77);
    int x = tensor(&b, TK_INPUT, shape4(2, 32, 40, 36)), w = tensor(&b, TK_PARAM, shape4(24, 32, 3, 3)), bias = tensor(&b, TK_PARAM, shape1(24));
    OpAttrs a = {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1, 1, 1}, .dilation = {1, 1}, .groups = 1}, ad = a, aw = a;
    int y = op1(&b, OP_CONV2D, (int[]){x, w, bias}, 3, &a);
    int dy = tensor(&b, TK_INPUT, b.g.tensors[y].shape);
    ad.shape = b.g.tensors[x].shape;
    aw.shape = b.g.tensors[w].shape;
    op1(&b, OP_CONV2D_DGRAD, (int[]){dy, w}, 2, &ad);
    op1(&b, OP_CONV2D_WGRAD, (int[]){dy, x}, 2, &aw);
    OpAttrs at = {.kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}, .groups = 1};
    op1(&b, OP_CONV_TRANSPOSE2D, (int[]){tensor(&b, TK_INPUT, shape4(2, 16, 9, 11)), tensor(&b, TK_PARAM, shape4(16, 8, 2, 2))}, 2, &at);
    cr_assert(interp_init(&b.it, &b.g));
    for (int t = 0; t < b.g.n_tensors; t++)
        if (b.g.tensors[t].producer < 0) fill(&b, t, -1, 1);
    char err[256];
    cr_assert_eq(cpu_conv_primitives(), 0, "no convolution has run in this test's process yet");
    cr_assert(cpu_conv_prepare(&b.g, err, sizeof err), "%s", err);
    /* the wgrad's two image chunks of one image each share one tile primitive */
    cr_expect_eq(cpu_conv_primitives(), 4, "forward, dgrad, the wgrad's tile, the transposed conv's dgrad");
    const int64_t made = cpu_conv_layout_scratch_bytes();
    cr_log_info("layout scratch after set-up: %lld bytes", (long long)made);
    b.it.fast = true;
    cr_assert(interp_run(&b.it, 0, b.g.n_ops, err, sizeof err), "%s", err);
    cr_expect_eq(cpu_conv_primitives(), 4, "running the graph made primitives set-up had not");
    cr_expect_eq(cpu_conv_layout_scratch_bytes(), made);
    /* a second set-up finds them all made */
    cr_assert(cpu_conv_prepare(&b.g, err, sizeof err), "%s", err);
    cr_expect_eq(cpu_conv_primitives(), 4);
    bench_free(&b);
}

Test(cpu_conv, transposed_conv_matches_reference) {
    static const int shapes[][6] = {/* ci, co/g, k, stride, pad, groups */ {4, 3, 2, 2, 0, 1}, {4, 2, 3, 2, 1, 2}, {6, 1, 3, 1, 1, 6}, {4, 5, 1, 1, 0, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *s = shapes[i];
        Bench b;
        bench_init(&b, 40 + (unsigned)i);
        int in[3] = {tensor(&b, TK_INPUT, shape4(2, s[0], 5, 7)), tensor(&b, TK_PARAM, shape4(s[0], s[1], s[2], s[2])),
                     tensor(&b, TK_PARAM, shape1(s[1] * s[5]))};
        OpAttrs a = {.kernel = {s[2], s[2]}, .stride = {s[3], s[3]}, .pad = {s[4], s[4], s[4], s[4]}, .dilation = {1, 1}, .groups = s[5]};
        op1(&b, OP_CONV_TRANSPOSE2D, in, 3, &a);
        cr_assert(interp_init(&b.it, &b.g));
        for (int t = 0; t < 3; t++) fill(&b, in[t], -1, 1);
        fast_vs_ref(&b, 1e-4, "conv_transpose2d");
        bench_free(&b);
    }
}

/* ---- max pooling and nearest resize: the oracle's bits ---- */

/* Runs b's one op with the oracle, then fast, and compares output t bit
 * for bit (NaN payloads and zero signs included). */
static void fast_equals_ref_bits(Bench *b, int t, const char *what) {
    char err[256];
    size_t n = bytes(&b->g, t);
    void *ref = malloc(n);
    cr_assert(ref);
    b->it.fast = false;
    cr_assert(interp_run(&b->it, 0, b->g.n_ops, err, sizeof err), "%s: %s", what, err);
    memcpy(ref, b->it.buf[t], n);
    memset(b->it.buf[t], 0x55, n);
    b->it.fast = true;
    cr_assert(interp_run(&b->it, 0, b->g.n_ops, err, sizeof err), "%s: %s", what, err);
    cr_expect(memcmp(ref, b->it.buf[t], n) == 0, "%s: the fast output differs from the oracle's", what);
    free(ref);
}

/* Values from a small set, so windows hold ties; +0 and -0 among them, and
 * a few NaNs with distinct payloads: which tied element and which NaN a
 * window keeps shows in the bits. */
static void fill_ties(Bench *b, int t) {
    float *p = interp_tensor(&b->it, t);
    static const float vals[] = {-1.5f, -0.0f, 0.0f, 0.5f, 2.0f};
    for (int64_t i = 0; i < shape_numel(&b->g.tensors[t].shape); i++) {
        unsigned r = (unsigned)(urand(b) * 1000);
        if (r < 3) {
            uint32_t bits = 0x7fc00000u | (uint32_t)i; /* quiet NaN, payload i */
            memcpy(&p[i], &bits, 4);
        } else p[i] = vals[r % 5];
    }
}

Test(cpu_conv, maxpool_and_resize_and_their_gradients_equal_the_reference_bits) {
    /* kernel, stride, pad, dilation: SPPF's 5/1/2, the 2/2 downsample, a padded strided 3, a dilated 3 */
    static const int pools[][4] = {{5, 1, 2, 1}, {2, 2, 0, 1}, {3, 2, 1, 1}, {3, 1, 2, 2}};
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++)
        for (int big = 0; big < 2; big++) { /* big: enough planes to run in parallel */
            Bench b;
            bench_init(&b, 60 + (unsigned)i);
            int x = tensor(&b, TK_INPUT, big ? shape4(2, 24, 41, 37) : shape4(1, 3, 9, 7));
            const int *q = pools[i];
            OpAttrs a = {.kernel = {q[0], q[0]}, .stride = {q[1], q[1]}, .pad = {q[2], q[2], q[2], q[2]}, .dilation = {q[3], q[3]}};
            int y = op1(&b, OP_MAXPOOL2D, &x, 1, &a);
            /* the backward: each window's gradient to its winner, added in the oracle's order */
            int bwd_in[2] = {tensor(&b, TK_INPUT, b.g.tensors[y].shape), x};
            int dx = op1(&b, OP_MAXPOOL2D_BWD, bwd_in, 2, &a);
            cr_assert(interp_init(&b.it, &b.g));
            fill_ties(&b, x);
            fill(&b, bwd_in[0], -1, 1);
            char what[96];
            snprintf(what, sizeof what, "maxpool k%d s%d p%d d%d %s", q[0], q[1], q[2], q[3], big ? "big" : "small");
            fast_equals_ref_bits(&b, y, what);
            snprintf(what, sizeof what, "maxpool2d_bwd k%d s%d p%d d%d %s", q[0], q[1], q[2], q[3], big ? "big" : "small");
            fast_equals_ref_bits(&b, dx, what);
            bench_free(&b);
        }
    /* 2x (the upsample), 3x, and non-integer ratios both ways */
    static const int sizes[][4] = {{20, 20, 40, 40}, {7, 5, 21, 15}, {5, 8, 8, 5}, {9, 9, 4, 6}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        Bench b;
        bench_init(&b, 70 + (unsigned)i);
        const int *z = sizes[i];
        int x = tensor(&b, TK_INPUT, shape4(2, 48, z[0], z[1]));
        OpAttrs a = {.out_hw = {z[2], z[3]}};
        int y = op1(&b, OP_RESIZE_NEAREST, &x, 1, &a);
        /* the backward sums several outputs into one input: in the oracle's order */
        OpAttrs back = {.out_hw = {z[0], z[1]}};
        int dy = tensor(&b, TK_INPUT, b.g.tensors[y].shape), dx = op1(&b, OP_RESIZE_NEAREST_BWD, &dy, 1, &back);
        cr_assert(interp_init(&b.it, &b.g));
        fill_ties(&b, x);
        fill(&b, dy, -1, 1);
        char what[96];
        snprintf(what, sizeof what, "resize %dx%d -> %dx%d", z[0], z[1], z[2], z[3]);
        fast_equals_ref_bits(&b, y, what);
        snprintf(what, sizeof what, "resize_nearest_bwd %dx%d -> %dx%d", z[2], z[3], z[0], z[1]);
        fast_equals_ref_bits(&b, dx, what);
        bench_free(&b);
    }
}

/* ---- BatchNorm and activations: within 1e-5 of the oracle ---- */

Test(cpu_conv, batchnorm_matches_reference) {
    for (int training = 0; training < 2; training++) {
        Bench b;
        bench_init(&b, 7 + (unsigned)training);
        int x = tensor(&b, TK_INPUT, shape4(3, 5, 7, 9));
        int in[6] = {x, tensor(&b, TK_PARAM, shape1(5)), tensor(&b, TK_PARAM, shape1(5)), tensor(&b, TK_BUFFER, shape1(5)),
                     tensor(&b, TK_BUFFER, shape1(5)), graph_add_state(&b.g, TK_BUFFER, "nbt", (Shape){0, {0}}, DT_I64)};
        OpAttrs a = {.eps = 1e-3, .momentum = 0.03, .training = training};
        int o = graph_add_op(&b.g, OP_BATCHNORM, in, 6, &a, 3, 0, "bn");
        cr_assert(o >= 0, "%s", b.g.err);
        int dy = tensor(&b, TK_INPUT, shape4(3, 5, 7, 9));
        int bin[5] = {dy, x, in[1], b.g.ops[o].out[1], b.g.ops[o].out[2]};
        cr_assert(graph_add_op(&b.g, OP_BATCHNORM_BWD, bin, 5, &a, 3, 0, "bn") >= 0, "%s", b.g.err);
        cr_assert(interp_init(&b.it, &b.g));
        fill(&b, x, 2, 5); /* an offset mean, as after a conv */
        fill(&b, in[1], 0.5, 1.5);
        fill(&b, in[2], -1, 1);
        fill(&b, in[3], -0.5, 0.5);
        fill(&b, in[4], 0.5, 2);
        fill(&b, dy, -1, 1);
        *(int64_t *)interp_tensor(&b.it, in[5]) = 4;
        double r = fast_vs_ref(&b, 1e-5, training ? "batchnorm (training)" : "batchnorm (eval)");
        cr_log_info("batchnorm %s: worst relative difference %.3g", training ? "training" : "eval", r);
        bench_free(&b);
    }
}

Test(cpu_conv, activations_match_reference) {
    static const OpKind kinds[] = {OP_SILU, OP_RELU, OP_LEAKY_RELU, OP_HARDSWISH, OP_GELU, OP_SIGMOID};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        Bench b;
        bench_init(&b, 20 + (unsigned)i);
        int x = tensor(&b, TK_INPUT, shape4(2, 3, 31, 33)), dy = tensor(&b, TK_INPUT, shape4(2, 3, 31, 33));
        OpAttrs a = {.alpha = 0.1, .act_op = kinds[i]};
        op1(&b, kinds[i], &x, 1, &a);
        op1(&b, OP_ACTIVATION_BWD, (int[]){dy, x}, 2, &a);
        cr_assert(interp_init(&b.it, &b.g));
        fill(&b, x, -12, 12);
        fill(&b, dy, -1, 1);
        double r = fast_vs_ref(&b, 1e-5, op_def(kinds[i])->name);
        cr_log_info("%s: worst relative difference %.3g", op_def(kinds[i])->name, r);
        bench_free(&b);
    }
}

/* A conv-BN(-activation) group of an eval graph folded into one oneDNN
 * convolution (cpu_fold.c: BN in the weights and bias, the activation as a
 * post-op) against the oracle running its ops one by one: every activation
 * oneDNN takes as a post-op, and a conv with a bias of its own and no
 * activation; random BN statistics and affine parameters. Within 1e-5 of
 * the largest |output| (the folded weights are rounded to fp32, and oneDNN's
 * exp and erf are its own); the conv's and the BN's outputs are poisoned
 * first, so the group's output cannot come from them. */
Test(cpu_conv, folded_conv_bn_activation_matches_reference) {
    static const int kinds[] = {OP_SILU, OP_RELU, OP_LEAKY_RELU, OP_HARDSWISH, OP_GELU, OP_SIGMOID, -1};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        Bench b;
        bench_init(&b, 40 + (unsigned)i);
        const bool bias = kinds[i] < 0;
        int x = tensor(&b, TK_INPUT, shape4(2, 6, 13, 11)), w = tensor(&b, TK_PARAM, shape4(10, 6, 3, 3)), cb = bias ? tensor(&b, TK_PARAM, shape1(10)) : -1;
        OpAttrs ca = {.kernel = {3, 3}, .stride = {1, 1}, .pad = {1, 1, 1, 1}, .dilation = {1, 1}, .groups = 1};
        int y = op1(&b, OP_CONV2D, (int[]){x, w, cb}, bias ? 3 : 2, &ca);
        int bn[6] = {y, tensor(&b, TK_PARAM, shape1(10)), tensor(&b, TK_PARAM, shape1(10)), tensor(&b, TK_BUFFER, shape1(10)),
                     tensor(&b, TK_BUFFER, shape1(10)), graph_add_state(&b.g, TK_BUFFER, "nbt", (Shape){0, {0}}, DT_I64)};
        OpAttrs ba = {.eps = 1e-3, .momentum = 0.03};
        const int z = op1(&b, OP_BATCHNORM, bn, 6, &ba);
        OpAttrs aa = {.alpha = 0.1, .act_op = kinds[i]};
        const int out = bias ? z : op1(&b, (OpKind)kinds[i], &z, 1, &aa);
        cr_assert(interp_init(&b.it, &b.g));
        fill(&b, x, -1, 1);
        fill(&b, w, -0.3, 0.3);
        if (bias) fill(&b, cb, -1, 1);
        fill(&b, bn[1], 0.5, 1.5);
        fill(&b, bn[2], -1, 1);
        fill(&b, bn[3], -0.5, 0.5);
        fill(&b, bn[4], 0.5, 2);
        *(int64_t *)interp_tensor(&b.it, bn[5]) = 4;
        char err[256];
        cr_assert(interp_run(&b.it, 0, b.g.n_ops, err, sizeof err), "%s", err);
        const int64_t n = shape_numel(&b.g.tensors[out].shape);
        float *ref = malloc(bytes(&b.g, out));
        memcpy(ref, b.it.buf[out], bytes(&b.g, out));
        Fusion fu;
        cr_assert(fuse_build(&b.g, FUSE_FULL, &b.arena, &fu, err, sizeof err), "%s", err);
        CpuFold f;
        cr_assert(cpu_fold_build(&f, &b.g, &fu, NULL, NULL, b.it.buf, err, sizeof err), "%s", err);
        cr_expect_eq(f.n, 1, "case %zu: the group did not fold", i);
        memset(b.it.buf[y], 0xFF, bytes(&b.g, y));
        memset(b.it.buf[z], 0xFF, bytes(&b.g, z));
        if (out != z) memset(b.it.buf[out], 0xFF, bytes(&b.g, out));
        b.it.fast = true;
        b.it.fold = &f;
        cr_assert(interp_run(&b.it, 0, b.g.n_ops, err, sizeof err), "%s", err);
        double dmax = 0, rmax = 0;
        for (int64_t k = 0; k < n; k++) {
            dmax = fmax(dmax, fabs((double)((float *)b.it.buf[out])[k] - ref[k]));
            rmax = fmax(rmax, fabs((double)ref[k]));
        }
        const char *name = bias ? "none (conv bias)" : op_def((OpKind)kinds[i])->name;
        cr_expect(dmax <= 1e-5 * rmax, "%s: max |folded - ref| %.3g > 1e-5 x %.3g", name, dmax, rmax);
        cr_log_info("folded conv-BN-%s: max |folded - ref| / max |ref| = %.3g", name, dmax / rmax);
        cpu_fold_free(&f);
        free(ref);
        bench_free(&b);
    }
}

/* ---- attention: within 1e-5 of the oracle, the same bits on any thread count ---- */

typedef struct AttnCase {
    int n, heads, kd, hd, area, h, w;
} AttnCase;

/* qkv -> attention -> (o, v) and attention_bwd(d_o, d_v, qkv) -> d_qkv with
 * independent d_o, d_v; qkv in [-2, 2) so the softmax rows are peaked enough
 * to show a wrong scale. outs: o, v, d_qkv. */
static void attn_graph(Bench *b, const AttnCase *ac, int outs[3]) {
    int qkv = tensor(b, TK_INPUT, shape4(ac->n, ac->heads * (2 * ac->kd + ac->hd), ac->h, ac->w));
    OpAttrs a = {.heads = ac->heads, .key_dim = ac->kd, .head_dim = ac->hd, .area = ac->area, .scale = pow(ac->kd, -0.5)};
    int o = graph_add_op(&b->g, OP_ATTENTION, &qkv, 1, &a, 2, 0, "attn");
    cr_assert(o >= 0, "%s", b->g.err);
    outs[0] = b->g.ops[o].out[0];
    outs[1] = b->g.ops[o].out[1];
    Shape os = b->g.tensors[outs[0]].shape;
    int d_o = tensor(b, TK_INPUT, os), d_v = tensor(b, TK_INPUT, os);
    outs[2] = op1(b, OP_ATTENTION_BWD, (int[]){d_o, d_v, qkv}, 3, &a);
    cr_assert(interp_init(&b->it, &b->g));
    fill(b, qkv, -2, 2);
    fill(b, d_o, -1, 1);
    fill(b, d_v, -1, 1);
}

static void attn_desc(const AttnCase *c, char *s, size_t cap) {
    snprintf(s, cap, "attention n%d heads%d kd%d hd%d area%d %dx%d", c->n, c->heads, c->kd, c->hd, c->area, c->h, c->w);
}

/* YOLO11's C2PSA (kd = hd/2), YOLO12's area attention (area 4, kd = hd),
 * a query count that leaves a partial row block, and sizes on both sides of
 * the parallel threshold; those above it (par) also run on 1 and 3 threads. */
Test(cpu_conv, attention_matches_reference, .timeout = 600) {
    static const struct {
        AttnCase c;
        bool par;
    } cases[] = {
        {{2, 2, 8, 16, 1, 5, 6}, false},   {{1, 1, 16, 32, 4, 16, 20}, false}, {{2, 4, 16, 32, 1, 20, 20}, true},
        {{1, 2, 32, 32, 4, 24, 20}, false}, {{3, 1, 4, 4, 2, 9, 10}, false},   {{1, 2, 32, 32, 4, 40, 40}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Bench b;
        bench_init(&b, 80 + (unsigned)i);
        int outs[3];
        attn_graph(&b, &cases[i].c, outs);
        char what[128];
        attn_desc(&cases[i].c, what, sizeof what);
        double r = fast_vs_ref(&b, 1e-5, what);
        cr_log_info("%s: worst relative difference %.3g", what, r);
        if (cases[i].par) {
            /* OpenBLAS left free to use 3 threads of its own: the kernels keep each sgemm on its tile's thread */
            openblas_set_num_threads(3);
            same_bits_for_1_and_3_threads(&b, outs, 3, what);
            cr_expect_eq(openblas_get_num_threads(), 1, "%s: OpenBLAS still runs its own threads", what);
        }
        bench_free(&b);
    }
}

Test(cpu_conv, table_and_defaults) {
    static const OpKind fast[] = {OP_CONV2D,    OP_CONV_TRANSPOSE2D, OP_CONV2D_DGRAD,  OP_CONV2D_WGRAD,  OP_BIAS_GRAD,
                                  OP_BATCHNORM, OP_BATCHNORM_BWD,    OP_SILU,          OP_ACTIVATION_BWD, OP_MAXPOOL2D, OP_RESIZE_NEAREST,
                                  OP_ATTENTION, OP_ATTENTION_BWD};
    for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++) cr_expect(cpu_kernel(fast[i]) != NULL, "%s has no fast kernel", op_def(fast[i])->name);
    cr_expect_null(cpu_kernel(OP_DETECT_LOSS));
    cr_expect_null(cpu_kernel(OP_COUNT));
    Bench b;
    bench_init(&b, 1);
    cr_assert(interp_init(&b.it, &b.g));
    cr_expect_not(b.it.fast, "the interpreter must default to the oracle");
    bench_free(&b);
}

/* ---- whole training steps ---- */

Test(cpu_conv, tiny_training_steps_match_reference, .timeout = 600) {
    Arena arena;
    ModelConfig cfg;
    TrainCompiled tc;
    Diag d;
    arena_init(&arena, 0);
    diag_init(&d, "models/tiny.yaml");
    ModelOptions mo = {0};
    TrainOptions to = {.imgsz = 64, .batch = 2, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4};
    cr_assert(model_cfg_load(&arena, "models/tiny.yaml", &mo, &cfg, &d) && compile_training(&arena, &cfg, &to, &tc, &d), "%s", d.msg);
    Plan plan = {.g = tc.m.g, .meta = cJSON_Parse(tc.meta_json)};
    char err[512];
    TrainStep ts[2];
    StepResult r[2][2];
    for (int k = 0; k < 2; k++) {
        cr_assert(train_step_init(&ts[k], &plan, err, sizeof err), "%s", err);
        cr_expect_not(train_step_set_fast(&ts[k], k == 1), "a fresh step must default to the oracle");
        cr_assert(weights_init(&plan.g, ts[k].it.buf, 11, err, sizeof err), "%s", err);
        synthetic_batch(5, ts[k].batch, ts[k].imgsz, ts[k].nc, ts[k].max_boxes, train_step_images(&ts[k]), train_step_boxes(&ts[k]), train_step_counts(&ts[k]));
        double lr[3] = {0.01, 0.01, 0.01};
        for (int s = 0; s < 2; s++) cr_assert(train_step_run(&ts[k], lr, 0.937, &r[k][s], err, sizeof err), "%s", err);
    }
    double worst_loss = 0;
    for (int s = 0; s < 2; s++) {
        double ref[4] = {r[0][s].total, r[0][s].box, r[0][s].cls, r[0][s].dfl}, got[4] = {r[1][s].total, r[1][s].box, r[1][s].cls, r[1][s].dfl};
        for (int i = 0; i < 4; i++) {
            double rel = fabs(got[i] - ref[i]) / fabs(ref[i]);
            worst_loss = fmax(worst_loss, rel);
            cr_expect_leq(rel, 1e-4, "step %d loss item %d: fast %.9g, reference %.9g", s + 1, i, got[i], ref[i]);
        }
    }
    double worst_param = 0, worst_elem = 0;
    for (int t = 0; t < plan.g.n_tensors; t++) {
        const Tensor *x = &plan.g.tensors[t];
        if (x->kind != TK_PARAM && x->kind != TK_BUFFER) continue;
        if (x->dtype != DT_F32) continue;
        const float *a = ts[0].it.buf[t], *f = ts[1].it.buf[t];
        double dmax = 0, rmax = 0;
        for (int64_t i = 0; i < shape_numel(&x->shape); i++) {
            dmax = fmax(dmax, fabs((double)f[i] - a[i]));
            rmax = fmax(rmax, fabs(a[i]));
            if (fabs(a[i]) > 1e-2) worst_elem = fmax(worst_elem, fabs((double)f[i] - a[i]) / fabs(a[i]));
        }
        double rel = dmax / fmax(rmax, 1e-30);
        worst_param = fmax(worst_param, rel);
        cr_expect_leq(rel, 1e-4, "%s: max |fast - ref| %.3g, max |ref| %.3g", x->name, dmax, rmax);
    }
    cr_log_info("tiny 64px b2, 2 SGD steps: worst loss relative difference %.3g; worst parameter/buffer max|diff|/max|ref| %.3g, worst element "
                "relative difference (|ref| > 1e-2) %.3g",
                worst_loss, worst_param, worst_elem);
    for (int k = 0; k < 2; k++) train_step_free(&ts[k]);
    cJSON_Delete(plan.meta);
    train_compiled_free(&tc);
    arena_free(&arena);
}
