/* tests/test_gradcheck.c — every differentiable op's gradient rule, executed
 * by the reference kernels, against central finite differences of
 * J = sum(r * y) with random r. Storage is fp32 and every kernel accumulates
 * in double, so differences with step 1e-3 are good to about 1e-3 relative;
 * the tolerance is 1e-2 of the largest gradient entry. */
#include <math.h>

#include "../runtime/interp.h"
#include "test_util.h"

typedef struct Case {
    Arena arena;
    Graph g;
    Interp it;
    int op;             /* the forward op under test */
    int dy[IR_MAX_SPLIT], dx[16];
    unsigned rng;
} Case;

static double urand(Case *c) {
    c->rng = c->rng * 1664525u + 1013904223u;
    return ((c->rng >> 8) & 0xFFFFFF) / (double)0x1000000;
}

static void case_init(Case *c, unsigned seed) {
    memset(c, 0, sizeof *c);
    arena_init(&c->arena, 0);
    graph_init(&c->g, &c->arena);
    c->rng = seed;
}

static int tensor(Case *c, TensorKind kind, Shape s) {
    char name[32];
    snprintf(name, sizeof name, "t%d", c->g.n_tensors);
    int t = kind == TK_INPUT ? graph_add_input(&c->g, arena_strdup(&c->arena, name), s, DT_F32)
                             : graph_add_state(&c->g, kind, arena_strdup(&c->arena, name), s, DT_F32);
    cr_assert(t >= 0, "%s", c->g.err);
    return t;
}

/* values in [lo, hi), kept away from the kinks of piecewise activations
 * (0 and +-3) so differences do not straddle them */
static void fill(Case *c, int t, double lo, double hi) {
    float *p = interp_tensor(&c->it, t);
    for (int64_t i = 0; i < shape_numel(&c->g.tensors[t].shape); i++) {
        double v;
        do v = lo + (hi - lo) * urand(c);
        while (fabs(v) < 0.05 || fabs(fabs(v) - 3) < 0.05);
        p[i] = (float)v;
    }
}

static double objective(Case *c) {
    char err[256];
    cr_assert(interp_run(&c->it, c->op, c->op + 1, err, sizeof err), "%s", err);
    const Op *op = &c->g.ops[c->op];
    double j = 0;
    for (int k = 0; k < op->n_out; k++) {
        if (c->dy[k] < 0) continue;
        const float *y = c->it.buf[op->out[k]], *r = c->it.buf[c->dy[k]];
        for (int64_t i = 0; i < shape_numel(&c->g.tensors[op->out[k]].shape); i++) j += (double)r[i] * y[i];
    }
    return j;
}

/* Adds the op, its dy inputs and its gradient ops; values must be filled
 * for inputs before check(). n_diff: how many leading outputs get a dy. */
static void add_op(Case *c, OpKind k, const int *in, int n_in, const OpAttrs *a, int n_out, int n_diff) {
    c->op = graph_add_op(&c->g, k, in, n_in, a, n_out, 0, "t");
    cr_assert(c->op >= 0, "%s", c->g.err);
    Op op = c->g.ops[c->op];
    for (int i = 0; i < op.n_out; i++) c->dy[i] = i < n_diff ? tensor(c, TK_INPUT, c->g.tensors[op.out[i]].shape) : -1;
    for (int i = 0; i < n_in; i++) c->dx[i] = c->g.tensors[in[i]].kind == TK_BUFFER ? -1 : 0;
    cr_assert(op_def(k)->grad(&c->g, &op, c->dy, c->dx), "%s", c->g.err);
    char err[256];
    cr_assert(interp_init(&c->it, &c->g));
    cr_assert(graph_verify(&c->g, err, sizeof err), "%s", err);
}

static void check(Case *c, const char *what) {
    char err[256];
    const Op op = c->g.ops[c->op];
    for (int k = 0; k < op.n_out; k++)
        if (c->dy[k] >= 0) fill(c, c->dy[k], -1, 1);
    cr_assert(interp_run(&c->it, 0, c->g.n_ops, err, sizeof err), "%s", err);
    for (int i = 0; i < op.n_in; i++) {
        if (c->dx[i] < 0) continue;
        int x = op.in[i];
        int64_t n = shape_numel(&c->g.tensors[x].shape);
        float *xv = c->it.buf[x];
        const float *an = c->it.buf[c->dx[i]];
        double amax = 1e-6;
        for (int64_t e = 0; e < n; e++) amax = fmax(amax, fabs(an[e]));
        int64_t step = n > 48 ? n / 48 : 1;
        for (int64_t e = 0; e < n; e += step) {
            float keep = xv[e];
            double h = 1e-3 * fmax(1.0, fabs(keep));
            xv[e] = (float)(keep + h);
            double jp = objective(c);
            xv[e] = (float)(keep - h);
            double jm = objective(c);
            xv[e] = keep;
            double fd = (jp - jm) / (2 * h);
            cr_expect(fabs(fd - an[e]) <= 1e-2 * amax, "%s: input %d element %lld: analytic %.6g, numeric %.6g (max |grad| %.3g)", what, i,
                      (long long)e, an[e], fd, amax);
        }
    }
    interp_free(&c->it);
    arena_free(&c->arena);
}

static void conv_case(int groups, int stride, int dil, bool bias, unsigned seed) {
    Case c;
    case_init(&c, seed);
    int x = tensor(&c, TK_INPUT, shape4(2, 4, 7, 6));
    int w = tensor(&c, TK_PARAM, shape4(6, 4 / groups, 3, 3));
    int in[3] = {x, w, bias ? tensor(&c, TK_PARAM, shape1(6)) : -1};
    OpAttrs a = {.stride = {stride, stride}, .pad = {1, 1, 2, 0}, .dilation = {dil, dil}, .groups = groups};
    add_op(&c, OP_CONV2D, in, bias ? 3 : 2, &a, 1, 1);
    for (int i = 0; i < (bias ? 3 : 2); i++) fill(&c, in[i], -1, 1);
    check(&c, "conv2d");
}

Test(gradcheck, conv2d) {
    conv_case(1, 1, 1, true, 1);
    conv_case(2, 2, 1, false, 2);
    conv_case(1, 1, 2, true, 3);
}

Test(gradcheck, conv_transpose2d) {
    Case c;
    case_init(&c, 4);
    int x = tensor(&c, TK_INPUT, shape4(2, 4, 3, 3));
    int in[3] = {x, tensor(&c, TK_PARAM, shape4(4, 3, 2, 2)), tensor(&c, TK_PARAM, shape1(3))};
    OpAttrs a = {.stride = {2, 2}, .dilation = {1, 1}, .groups = 1};
    add_op(&c, OP_CONV_TRANSPOSE2D, in, 3, &a, 1, 1);
    for (int i = 0; i < 3; i++) fill(&c, in[i], -1, 1);
    check(&c, "conv_transpose2d");
}

static void bn_case(bool training) {
    Case c;
    case_init(&c, training ? 5 : 6);
    Shape ch = shape1(3);
    int in[6] = {tensor(&c, TK_INPUT, shape4(2, 3, 4, 3)), tensor(&c, TK_PARAM, ch), tensor(&c, TK_PARAM, ch),
                 tensor(&c, TK_BUFFER, ch), tensor(&c, TK_BUFFER, ch), -1};
    in[5] = graph_add_state(&c.g, TK_BUFFER, "nbt", (Shape){0, {0}}, DT_I64);
    OpAttrs a = {.eps = 1e-3, .momentum = 0.03, .training = training};
    add_op(&c, OP_BATCHNORM, in, 6, &a, 3, 1);
    for (int i = 0; i < 5; i++) fill(&c, in[i], i == 4 ? 0.5 : -1, i == 4 ? 1.5 : 1);
    interp_tensor(&c.it, in[5]);
    check(&c, training ? "batchnorm (training)" : "batchnorm (eval)");
}

Test(gradcheck, batchnorm) {
    bn_case(true);
    bn_case(false);
}

Test(gradcheck, activations) {
    OpKind acts[] = {OP_SILU, OP_RELU, OP_LEAKY_RELU, OP_HARDSWISH, OP_GELU, OP_SIGMOID};
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
        Case c;
        case_init(&c, 10 + (unsigned)k);
        int x = tensor(&c, TK_INPUT, shape4(2, 3, 4, 4));
        OpAttrs a = {.alpha = 0.1};
        add_op(&c, acts[k], &x, 1, &a, 1, 1);
        fill(&c, x, -5, 5);
        check(&c, op_def(acts[k])->name);
    }
}

Test(gradcheck, add_and_channel_scale) {
    Case c;
    case_init(&c, 20);
    int in[2] = {tensor(&c, TK_INPUT, shape4(2, 3, 2, 2)), tensor(&c, TK_INPUT, shape4(2, 3, 2, 2))};
    add_op(&c, OP_ADD, in, 2, NULL, 1, 1);
    fill(&c, in[0], -1, 1);
    fill(&c, in[1], -1, 1);
    check(&c, "add");
    case_init(&c, 21);
    in[0] = tensor(&c, TK_INPUT, shape4(2, 3, 2, 2));
    in[1] = tensor(&c, TK_PARAM, shape1(3));
    add_op(&c, OP_CHANNEL_SCALE, in, 2, NULL, 1, 1);
    fill(&c, in[0], -1, 1);
    fill(&c, in[1], -1, 1);
    check(&c, "channel_scale");
}

Test(gradcheck, layout_ops) {
    Case c;
    case_init(&c, 30);
    int in[3] = {tensor(&c, TK_INPUT, shape4(2, 3, 4, 4)), tensor(&c, TK_INPUT, shape4(2, 5, 4, 4))};
    OpAttrs cat = {.axis = 1};
    add_op(&c, OP_CONCAT, in, 2, &cat, 1, 1);
    fill(&c, in[0], -1, 1);
    fill(&c, in[1], -1, 1);
    check(&c, "concat");

    case_init(&c, 31);
    in[0] = tensor(&c, TK_INPUT, shape4(2, 8, 3, 3));
    OpAttrs sp = {.axis = 1, .nsplit = 3, .split = {2, 5, 1}};
    add_op(&c, OP_SPLIT, in, 1, &sp, 3, 2); /* the last part gets no gradient */
    fill(&c, in[0], -1, 1);
    check(&c, "split");

    case_init(&c, 32);
    in[0] = tensor(&c, TK_INPUT, shape4(2, 6, 3, 3));
    OpAttrs rs = {.shape = {3, {2, 6, 9}}};
    add_op(&c, OP_RESHAPE, in, 1, &rs, 1, 1);
    fill(&c, in[0], -1, 1);
    check(&c, "reshape");

    for (int k = 0; k < 2; k++) {
        case_init(&c, 33 + (unsigned)k);
        in[0] = tensor(&c, TK_INPUT, shape4(2, 3, 5, 5));
        OpAttrs up = {.out_hw = {k ? 3 : 10, k ? 3 : 10}}; /* upsample x2, and a downsizing map */
        add_op(&c, OP_RESIZE_NEAREST, in, 1, &up, 1, 1);
        fill(&c, in[0], -1, 1);
        check(&c, "resize_nearest");
    }

    case_init(&c, 35);
    in[0] = tensor(&c, TK_INPUT, shape4(2, 3, 4, 5));
    OpAttrs zp = {.pad = {0, 1, 2, 1}};
    add_op(&c, OP_ZEROPAD2D, in, 1, &zp, 1, 1);
    fill(&c, in[0], -1, 1);
    check(&c, "zeropad2d");
}

Test(gradcheck, pooling) {
    Case c;
    OpAttrs pools[2] = {{.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1, 1, 1}, .dilation = {1, 1}},
                        {.kernel = {5, 5}, .stride = {1, 1}, .pad = {2, 2, 2, 2}, .dilation = {1, 1}}};
    for (int k = 0; k < 2; k++) {
        case_init(&c, 40 + (unsigned)k);
        int x = tensor(&c, TK_INPUT, shape4(2, 2, 6, 6));
        add_op(&c, OP_MAXPOOL2D, &x, 1, &pools[k], 1, 1);
        /* distinct values: a perturbation never changes a window's argmax */
        float *p = interp_tensor(&c.it, x);
        for (int i = 0; i < 144; i++) p[i] = (float)(((i * 37) % 144) * 0.01 - 0.7);
        const Op op = c.g.ops[c.op];
        fill(&c, c.dy[0], -1, 1);
        (void)op;
        check(&c, "maxpool2d");
    }
    case_init(&c, 42);
    int x = tensor(&c, TK_INPUT, shape4(2, 3, 5, 5));
    OpAttrs avg = {.kernel = {2, 2}, .stride = {1, 1}, .dilation = {1, 1}};
    add_op(&c, OP_AVGPOOL2D, &x, 1, &avg, 1, 1);
    fill(&c, x, -1, 1);
    check(&c, "avgpool2d");
}

Test(gradcheck, attention) {
    /* Attention (key_dim < head_dim) and AAttn-style area attention */
    OpAttrs cfgs[2] = {{.heads = 2, .key_dim = 2, .head_dim = 4, .area = 1, .scale = 0.7071},
                       {.heads = 1, .key_dim = 4, .head_dim = 4, .area = 2, .scale = 0.5}};
    for (int k = 0; k < 2; k++) {
        Case c;
        case_init(&c, 50 + (unsigned)k);
        int ch = cfgs[k].heads * (2 * cfgs[k].key_dim + cfgs[k].head_dim);
        int x = tensor(&c, TK_INPUT, shape4(2, ch, 2, 3));
        add_op(&c, OP_ATTENTION, &x, 1, &cfgs[k], 2, 2);
        fill(&c, x, -1, 1);
        check(&c, k ? "attention (area)" : "attention");
    }
}
