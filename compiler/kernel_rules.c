/* compiler/kernel_rules.c — what each op becomes in the kernel IR: the one
 * table saying which ops are library calls and how the others are computed
 * (formulas as runtime/ref_*.c, the oracle, defines them). Knows no groups. */
#include <math.h>
#include <stdio.h>

#include "kernel_build.h"

void kernel_extents(const Tensor *t, int64_t *n, int64_t *c, int64_t *inner) {
    const Shape *s = &t->shape;
    if (t->channels_last) {
        /* (n, h, w) rows of c channels: per-channel loads stay KA_CHAN */
        *n = s->d[0] * s->d[2] * s->d[3];
        *c = s->d[1];
        *inner = 1;
        return;
    }
    if (s->nd < 2) {
        *n = *c = 1;
        *inner = s->nd ? s->d[0] : 1;
        return;
    }
    *n = s->d[0];
    *c = s->d[1];
    *inner = 1;
    for (int i = 2; i < s->nd; i++) *inner *= s->d[i];
}

#define IN(i) v->value(v->ctx, kb, op->in[i])
#define C(x) kb_const(kb, (x))
#define ADD(a, b) kb_bin(kb, KI_ADD, (a), (b))
#define SUB(a, b) kb_bin(kb, KI_SUB, (a), (b))
#define MUL(a, b) kb_bin(kb, KI_MUL, (a), (b))
#define DIV(a, b) kb_bin(kb, KI_DIV, (a), (b))

static int sigmoid(KBuild *kb, int x) { return kb_un(kb, KI_SIGMOID, x); }

static int act_forward(KBuild *kb, int kind, int x, double alpha) {
    switch (kind) {
    case OP_SILU: return MUL(x, sigmoid(kb, x));
    case OP_RELU: return kb_sel(kb, KI_SEL_GT, x, C(0), x, C(0));
    case OP_LEAKY_RELU: return kb_sel(kb, KI_SEL_GT, x, C(0), x, MUL(C(alpha), x));
    case OP_HARDSWISH: {
        int mid = DIV(MUL(x, ADD(x, C(3))), C(6));
        return kb_sel(kb, KI_SEL_GT, x, C(-3), kb_sel(kb, KI_SEL_GE, x, C(3), x, mid), C(0));
    }
    case OP_GELU: return MUL(MUL(C(0.5), x), ADD(C(1), kb_un(kb, KI_ERF, DIV(x, C(sqrt(2.0))))));
    default: return sigmoid(kb, x);
    }
}

/* d act / dx, as PyTorch's backward formulas define it */
static int act_derivative(KBuild *kb, int kind, int x, double alpha) {
    switch (kind) {
    case OP_SILU: {
        int s = sigmoid(kb, x);
        return MUL(s, ADD(C(1), MUL(x, SUB(C(1), s))));
    }
    case OP_RELU: return kb_sel(kb, KI_SEL_GT, x, C(0), C(1), C(0));
    case OP_LEAKY_RELU: return kb_sel(kb, KI_SEL_GT, x, C(0), C(1), C(alpha));
    case OP_HARDSWISH: {
        int mid = ADD(DIV(x, C(3)), C(0.5));
        return kb_sel(kb, KI_SEL_GE, x, C(-3), kb_sel(kb, KI_SEL_GT, x, C(3), C(1), mid), C(0));
    }
    case OP_GELU: {
        int cdf = MUL(C(0.5), ADD(C(1), kb_un(kb, KI_ERF, DIV(x, C(sqrt(2.0))))));
        int pdf = DIV(kb_un(kb, KI_EXP, MUL(C(-0.5), MUL(x, x))), C(sqrt(2 * M_PI)));
        return ADD(cdf, MUL(x, pdf));
    }
    default: {
        int s = sigmoid(kb, x);
        return MUL(s, SUB(C(1), s));
    }
    }
}

static bool ew_activation(KBuild *kb, const Graph *g, const Op *op, const KValues *v, int *out) {
    (void)g;
    out[0] = act_forward(kb, op->kind, IN(0), op->a.alpha);
    return true;
}

static bool ew_activation_bwd(KBuild *kb, const Graph *g, const Op *op, const KValues *v, int *out) {
    (void)g;
    int dy = IN(0), x = IN(1);
    out[0] = MUL(dy, act_derivative(kb, op->a.act_op, x, op->a.alpha));
    return true;
}

static bool ew_add(KBuild *kb, const Graph *g, const Op *op, const KValues *v, int *out) {
    (void)g;
    out[0] = ADD(IN(0), IN(1));
    return true;
}

static bool ew_channel_scale(KBuild *kb, const Graph *g, const Op *op, const KValues *v, int *out) {
    (void)g;
    out[0] = MUL(IN(0), kb_load(kb, op->in[1], KA_CHAN, 0));
    return true;
}

/* (x - mean) * invstd * w + b with the statistics as stored */
static int bn_normalise(KBuild *kb, int x, int mean_t, int invstd_t, int w_t, int b_t) {
    int xhat = MUL(SUB(x, kb_load(kb, mean_t, KA_CHAN, 0)), kb_load(kb, invstd_t, KA_CHAN, 0));
    return ADD(MUL(xhat, kb_load(kb, w_t, KA_CHAN, 0)), kb_load(kb, b_t, KA_CHAN, 0));
}

/* bn_apply(x, w, b, mean, invstd) */
static bool ew_bn_apply(KBuild *kb, const Graph *g, const Op *op, const KValues *v, int *out) {
    (void)g;
    out[0] = bn_normalise(kb, IN(0), op->in[3], op->in[4], op->in[1], op->in[2]);
    return true;
}

/* batchnorm(x, w, b, running_mean, running_var, tracked) -> y, mean, invstd:
 * the statistics come from the reduce kernel, y is elementwise */
static bool ew_batchnorm(KBuild *kb, const Graph *g, const Op *op, const KValues *v, int *out) {
    (void)g;
    out[1] = out[2] = -1;
    if (op->a.training) {
        out[0] = bn_normalise(kb, IN(0), op->out[1], op->out[2], op->in[1], op->in[2]);
        return true;
    }
    int invstd = DIV(C(1), kb_un(kb, KI_SQRT, ADD(kb_load(kb, op->in[4], KA_CHAN, 0), C(op->a.eps))));
    int xhat = MUL(SUB(IN(0), kb_load(kb, op->in[3], KA_CHAN, 0)), kb_un(kb, KI_F32, invstd));
    out[0] = ADD(MUL(xhat, kb_load(kb, op->in[1], KA_CHAN, 0)), kb_load(kb, op->in[2], KA_CHAN, 0));
    return true;
}

/* One pass over x: per channel, the sums of d = x - K and of d * d, K the
 * channel's first element, then mean = K + S1/n and var = S2/n - (S1/n)^2
 * (the shifted-data form; sums fp64, in the fixed order of the reduce
 * skeleton). Shifting by a sample of the channel is what keeps this from
 * being E[x^2] - E[x]^2: the subtraction loses about eps64 * (1 + z^2) of
 * the variance, z = (mean - K) / std, the z-score of one sample, where the
 * unshifted form loses eps * mean^2 / var, without bound. The oracle's two
 * passes (the mean, then the centred squares) read x twice; var is kept
 * >= 0 against rounding, a NaN passes. */
static bool red_batchnorm(KBuild *kb, const Graph *g, const Op *op, const KValues *v) {
    (void)g;
    double eps = op->a.eps, mom = op->a.momentum;
    int rm = op->in[3], rv = op->in[4];
    if (!op->a.training) {
        kb_end_body(kb, 0);
        kb_section(kb);
        int invstd = DIV(C(1), kb_un(kb, KI_SQRT, ADD(kb_load(kb, rv, KA_CHAN, 0), C(eps))));
        kb_store(kb, op->out[1], KA_CHAN, 0, kb_load(kb, rm, KA_CHAN, 0));
        kb_store(kb, op->out[2], KA_CHAN, 0, invstd);
        kb_end_finalize(kb, 0);
        return true;
    }
    kb->k.n_accs[0] = 2;
    int d = SUB(IN(0), kb_load(kb, op->in[0], KA_FIRST, 0));
    kb_emit(kb, (KInstr){.op = KI_ACCUM, .a = d, .b = 0});
    kb_emit(kb, (KInstr){.op = KI_ACCUM, .a = MUL(d, d), .b = 1});
    kb_end_body(kb, 0);
    kb_section(kb);
    int count = kb_emit(kb, (KInstr){.op = KI_COUNT});
    int shift = DIV(kb_emit(kb, (KInstr){.op = KI_ACC, .b = 0}), count);
    int mean = ADD(kb_load(kb, op->in[0], KA_FIRST, 0), shift);
    int var = SUB(DIV(kb_emit(kb, (KInstr){.op = KI_ACC, .b = 1}), count), MUL(shift, shift));
    int zero = C(0);
    var = kb_sel(kb, KI_SEL_GT, zero, var, zero, var);
    kb_store(kb, op->out[1], KA_CHAN, 0, mean);
    kb_store(kb, op->out[2], KA_CHAN, 0, DIV(C(1), kb_un(kb, KI_SQRT, ADD(var, C(eps)))));
    kb_store(kb, rm, KA_CHAN, 0, ADD(MUL(C(1 - mom), kb_load(kb, rm, KA_CHAN, 0)), MUL(C(mom), mean)));
    int unbiased = DIV(MUL(var, count), SUB(count, C(1)));
    kb_store(kb, rv, KA_CHAN, 0, ADD(MUL(C(1 - mom), kb_load(kb, rv, KA_CHAN, 0)), MUL(C(mom), unbiased)));
    kb->k.buf_written[kb_slot(kb, op->in[5])] = true;
    kb_emit(kb, (KInstr){.op = KI_INC_I64, .buf = kb_slot(kb, op->in[5])});
    kb_end_finalize(kb, 0);
    return true;
}

/* batchnorm_bwd(dy, x, w, mean, invstd) -> dx, dw, db in one kernel: the
 * sums of dy and dy * xhat per channel (stored as db, dw and kept unrounded),
 * then a second pass writing dx from them, as the oracle does */
static bool red_batchnorm_bwd(KBuild *kb, const Graph *g, const Op *op, const KValues *v) {
    (void)g;
    kb->k.n_phases = 2;
    kb->k.n_vars = 2;
    kb->k.n_accs[0] = 2;
    int dy = IN(0);
    int xhat = MUL(SUB(IN(1), kb_load(kb, op->in[3], KA_CHAN, 0)), kb_load(kb, op->in[4], KA_CHAN, 0));
    kb_emit(kb, (KInstr){.op = KI_ACCUM, .a = dy, .b = 0});
    kb_emit(kb, (KInstr){.op = KI_ACCUM, .a = MUL(dy, xhat), .b = 1});
    kb_end_body(kb, 0);
    kb_section(kb);
    int sdy = kb_emit(kb, (KInstr){.op = KI_ACC, .b = 0}), sdyx = kb_emit(kb, (KInstr){.op = KI_ACC, .b = 1});
    kb_store(kb, op->out[2], KA_CHAN, 0, sdy);
    kb_store(kb, op->out[1], KA_CHAN, 0, sdyx);
    kb_emit(kb, (KInstr){.op = KI_SETVAR, .a = sdy, .b = 0});
    kb_emit(kb, (KInstr){.op = KI_SETVAR, .a = sdyx, .b = 1});
    kb_end_finalize(kb, 0);
    v->begin_body(v->ctx, kb);
    dy = IN(0);
    int invstd = kb_load(kb, op->in[4], KA_CHAN, 0), grad = dy;
    if (op->a.training) {
        xhat = MUL(SUB(IN(1), kb_load(kb, op->in[3], KA_CHAN, 0)), invstd);
        /* the sums' means depend on the channel alone, so the kernel divides
         * once per channel instead of once per element */
        int count = kb_emit(kb, (KInstr){.op = KI_COUNT});
        int mean_dy = DIV(kb_emit(kb, (KInstr){.op = KI_VAR, .b = 0}), count), mean_dyx = DIV(kb_emit(kb, (KInstr){.op = KI_VAR, .b = 1}), count);
        grad = SUB(dy, ADD(mean_dy, MUL(xhat, mean_dyx)));
    }
    kb_store(kb, op->out[0], KA_ELEM, 0, MUL(MUL(kb_load(kb, op->in[2], KA_CHAN, 0), invstd), grad));
    kb_end_body(kb, 1);
    kb_section(kb);
    kb_end_finalize(kb, 1);
    return true;
}

/* per-channel sum of one tensor (bias grad) or of a product (channel_dot) */
static bool red_channel_sum(KBuild *kb, const Graph *g, const Op *op, const KValues *v) {
    (void)g;
    kb->k.n_accs[0] = 1;
    int x = op->kind == OP_CHANNEL_DOT ? MUL(IN(0), IN(1)) : IN(0);
    kb_emit(kb, (KInstr){.op = KI_ACCUM, .a = x, .b = 0});
    kb_end_body(kb, 0);
    kb_section(kb);
    kb_store(kb, op->out[0], KA_CHAN, 0, kb_emit(kb, (KInstr){.op = KI_ACC, .b = 0}));
    kb_end_finalize(kb, 0);
    return true;
}

static bool map_zeros(KBuild *kb, const Graph *g, const Op *op) {
    (void)g;
    kb_store(kb, op->out[0], KA_ELEM, 0, C(0));
    kb_end_body(kb, 0);
    return true;
}

#define F32(x) kb_un(kb, KI_F32, (x))

/* d = g*coef (+ wd*p);  buf = mu*buf + d;  d = d + mu*buf (Nesterov) or buf;
 * p -= lr*d; rounded to fp32 wherever PyTorch stores a tensor */
static bool map_sgd(KBuild *kb, const Graph *g, const Op *op) {
    (void)g;
    int p = kb_load(kb, op->in[0], KA_ELEM, 0), grad = kb_load(kb, op->in[1], KA_ELEM, 0), mbuf = kb_load(kb, op->in[2], KA_ELEM, 0);
    int lr = kb_load(kb, op->in[3], KA_FIXED, op->a.group), mu = kb_load(kb, op->in[4], KA_FIXED, 0), coef = kb_load(kb, op->in[5], KA_FIXED, 0);
    int d = F32(MUL(grad, coef));
    if (op->a.weight_decay != 0) d = F32(ADD(d, MUL(C(op->a.weight_decay), p)));
    int m = F32(ADD(MUL(mu, mbuf), d));
    kb_store(kb, op->in[2], KA_ELEM, 0, m);
    d = op->a.nesterov ? F32(ADD(d, MUL(mu, m))) : m;
    kb_store(kb, op->in[0], KA_ELEM, 0, SUB(p, MUL(lr, d)));
    kb_end_body(kb, 0);
    return true;
}

/* p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps) */
static bool map_adamw(KBuild *kb, const Graph *g, const Op *op) {
    (void)g;
    double b2 = op->a.beta2;
    int p = kb_load(kb, op->in[0], KA_ELEM, 0), grad = kb_load(kb, op->in[1], KA_ELEM, 0);
    int m = kb_load(kb, op->in[2], KA_ELEM, 0), vv = kb_load(kb, op->in[3], KA_ELEM, 0);
    int lr = kb_load(kb, op->in[4], KA_FIXED, op->a.group), b1 = kb_load(kb, op->in[5], KA_FIXED, 0);
    int t = kb_load(kb, op->in[6], KA_FIXED, 0), coef = kb_load(kb, op->in[7], KA_FIXED, 0);
    int step_size = DIV(lr, SUB(C(1), kb_bin(kb, KI_POW, b1, t)));
    int bc2_sqrt = kb_un(kb, KI_SQRT, SUB(C(1), kb_bin(kb, KI_POW, C(b2), t)));
    int gk = F32(MUL(grad, coef));
    p = F32(MUL(p, SUB(C(1), MUL(lr, C(op->a.weight_decay)))));
    m = F32(ADD(MUL(b1, m), MUL(SUB(C(1), b1), gk)));
    vv = F32(ADD(MUL(C(b2), vv), MUL(C(1 - b2), MUL(gk, gk))));
    kb_store(kb, op->in[2], KA_ELEM, 0, m);
    kb_store(kb, op->in[3], KA_ELEM, 0, vv);
    int denom = F32(ADD(DIV(kb_un(kb, KI_SQRT, vv), bc2_sqrt), C(op->a.eps)));
    kb_store(kb, op->in[0], KA_ELEM, 0, SUB(p, DIV(MUL(step_size, m), denom)));
    kb_end_body(kb, 0);
    return true;
}

static const KRule R_LIBRARY = {KR_LIBRARY, NULL, NULL, NULL};
static const KRule R_ACT = {KR_ELEMENTWISE, ew_activation, NULL, NULL};
static const KRule R_ACT_BWD = {KR_ELEMENTWISE, ew_activation_bwd, NULL, NULL};
static const KRule R_ADD = {KR_ELEMENTWISE, ew_add, NULL, NULL};
static const KRule R_CHANNEL_SCALE = {KR_ELEMENTWISE, ew_channel_scale, NULL, NULL};
static const KRule R_BN_APPLY = {KR_ELEMENTWISE, ew_bn_apply, NULL, NULL};
static const KRule R_BN = {KR_REDUCE, ew_batchnorm, red_batchnorm, NULL};
static const KRule R_BN_BWD = {KR_REDUCE, NULL, red_batchnorm_bwd, NULL};
static const KRule R_CHANNEL_SUM = {KR_REDUCE, NULL, red_channel_sum, NULL};
static const KRule R_ZEROS = {KR_ALONE_MAP, NULL, NULL, map_zeros};
static const KRule R_SGD = {KR_ALONE_MAP, NULL, NULL, map_sgd};
static const KRule R_ADAMW = {KR_ALONE_MAP, NULL, NULL, map_adamw};
static const KRule R_NORM = {KR_NORM, NULL, NULL, NULL};
static const KRule R_COPY = {KR_COPY, NULL, NULL, NULL};

/* Ops absent here are library routines: convolutions (cuDNN / OpenBLAS),
 * attention, the detection loss, pooling, resize, pad, crop and the
 * inference-time box decode. */
static const KRule *const RULES[OP_COUNT] = {
    [OP_SILU] = &R_ACT, [OP_RELU] = &R_ACT, [OP_LEAKY_RELU] = &R_ACT, [OP_HARDSWISH] = &R_ACT, [OP_GELU] = &R_ACT, [OP_SIGMOID] = &R_ACT,
    [OP_ACTIVATION_BWD] = &R_ACT_BWD,
    [OP_ADD] = &R_ADD,
    [OP_CHANNEL_SCALE] = &R_CHANNEL_SCALE,
    [OP_BN_APPLY] = &R_BN_APPLY,
    [OP_BATCHNORM] = &R_BN,
    [OP_BATCHNORM_BWD] = &R_BN_BWD,
    [OP_BIAS_GRAD] = &R_CHANNEL_SUM, [OP_CHANNEL_DOT] = &R_CHANNEL_SUM,
    [OP_ZEROS] = &R_ZEROS,
    [OP_SGD_STEP] = &R_SGD, [OP_ADAMW_STEP] = &R_ADAMW,
    [OP_GRAD_CLIP] = &R_NORM,
    [OP_CONCAT] = &R_COPY, [OP_SPLIT] = &R_COPY, [OP_RESHAPE] = &R_COPY, [OP_DETACH] = &R_COPY,
};

const KRule *kernel_rule(OpKind k) { return k >= 0 && k < OP_COUNT && RULES[k] ? RULES[k] : &R_LIBRARY; }

bool kernel_op_generated(OpKind k) { return kernel_rule(k)->cls != KR_LIBRARY; }
