/* runtime/cpu_fold.c — folded conv-BN(-activation) groups of an eval-mode
 * graph on the CPU (cpu_fold.h): which groups qualify, their folded
 * weights, and their run through cpu_conv_forward_act. Must not touch the
 * graph, its fusion or the generated kernels: a group that does not
 * qualify runs as it always did. */
#include "cpu_fold.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_conv.h"
#include "../passes/views.h"

void bn_fold(const float *w, const float *b, int64_t co, int64_t per, const float *gamma, const float *beta, const float *mean, const float *var, double eps,
             float *wf, float *bf) {
    /* in fp32, one rounding per operation in Ultralytics' order, so that the
     * folded weights are the bits its fused model holds */
    const float e = (float)eps;
    for (int64_t c = 0; c < co; c++) {
        const float root = sqrtf(var[c] + e), s = gamma[c] / root;
        for (int64_t k = 0; k < per; k++) wf[c * per + k] = s * w[c * per + k];
        const float shift = beta[c] - gamma[c] * mean[c] / root;
        bf[c] = b ? s * b[c] + shift : shift;
    }
}

static bool is_state(const Graph *g, int t) { return g->tensors[t].kind == TK_PARAM || g->tensors[t].kind == TK_BUFFER; }

static bool foldable_act(OpKind k) { return k == OP_SILU || k == OP_RELU || k == OP_LEAKY_RELU || k == OP_HARDSWISH || k == OP_GELU || k == OP_SIGMOID; }

/* NCHW where it sits: packed, or a view whose rows are its images. */
static bool nchw(const Graph *g, const Views *v, int t) {
    const Tensor *x = &g->tensors[t];
    if (!tensor_logical_order(x) || x->shape.nd != 4) return false;
    int64_t rows, row, stride;
    views_geometry(g, v, t, &rows, &row, &stride);
    return !stride || rows == x->shape.d[0];
}

/* Whether the group at fg folds; its ops into *fc. readers: per tensor, how many ops read it. */
static bool group_folds(const Graph *g, const FusionGroup *fg, const Views *v, const int *readers, const bool *is_output, FoldedConv *fc) {
    if (fg->pattern != PATTERN_CONV_BN_ACT || fg->n < 2 || fg->n > 3) return false;
    const Op *conv = &g->ops[fg->first], *bn = conv + 1, *act = fg->n == 3 ? conv + 2 : NULL;
    if (conv->kind != OP_CONV2D || bn->kind != OP_BATCHNORM || bn->a.training || bn->in[0] != conv->out[0]) return false;
    if (act && (!foldable_act(act->kind) || act->in[0] != bn->out[0])) return false;
    bool ok = is_state(g, conv->in[1]) && (conv->n_in < 3 || is_state(g, conv->in[2]));
    for (int k = 1; k <= 4; k++) ok = ok && is_state(g, bn->in[k]);
    /* the conv's output and the BN's are not needed by anything else */
    ok = ok && readers[conv->out[0]] == 1 && !is_output[conv->out[0]];
    ok = ok && (!act || (readers[bn->out[0]] == 1 && !is_output[bn->out[0]]));
    for (int k = 1; k < bn->n_out; k++) ok = ok && readers[bn->out[k]] == 0 && !is_output[bn->out[k]];
    const int out = act ? act->out[0] : bn->out[0];
    ok = ok && nchw(g, v, conv->in[0]) && nchw(g, v, out);
    *fc = (FoldedConv){fg->first, fg->first + 1, act ? fg->first + 2 : -1, out, 0, 0};
    return ok;
}

/* Every launch of kp over the group's BN and activation carries only those ops. */
static bool launches_stay_inside(const KProgram *kp, const FoldedConv *fc) {
    const int lo = fc->bn, hi = fc->act >= 0 ? fc->act : fc->bn;
    for (int l = 0; kp && l < kp->n_launches; l++) {
        const KLaunch *ln = &kp->launches[l];
        const bool overlaps = ln->op_lo <= hi && ln->op_hi >= lo;
        if (overlaps && (ln->op_lo < lo || ln->op_hi > hi)) return false;
        if (ln->op_lo <= fc->conv && ln->op_hi >= fc->conv && (ln->kernel >= 0 || ln->op_hi != fc->conv)) return false;
    }
    return true;
}

bool cpu_fold_build(CpuFold *f, const Graph *g, const Fusion *fu, const Views *v, const KProgram *kp, void *const *buf, char *err, int errcap) {
    memset(f, 0, sizeof *f);
    int *readers = calloc((size_t)g->n_tensors + 1, sizeof *readers);
    bool *is_output = calloc((size_t)g->n_tensors + 1, sizeof *is_output);
    f->fc = calloc((size_t)fu->n_groups + 1, sizeof *f->fc);
    f->head = malloc(((size_t)g->n_ops + 1) * sizeof *f->head);
    f->gone = calloc((size_t)g->n_ops + 1, sizeof *f->gone);
    if (!readers || !is_output || !f->fc || !f->head || !f->gone) {
        free(readers);
        free(is_output);
        cpu_fold_free(f);
        return snprintf(err, (size_t)errcap, "out of memory"), false;
    }
    for (int o = 0; o < g->n_ops; o++) {
        f->head[o] = -1;
        for (int i = 0; i < g->ops[o].n_in; i++) readers[g->ops[o].in[i]]++;
    }
    for (int i = 0; i < g->n_outputs; i++) is_output[g->outputs[i]] = true;
    for (int i = 0; i < fu->n_groups; i++) {
        FoldedConv fc;
        if (!group_folds(g, &fu->groups[i], v, readers, is_output, &fc) || !launches_stay_inside(kp, &fc)) continue;
        const Shape *ws = &g->tensors[g->ops[fc.conv].in[1]].shape;
        fc.w = f->floats, fc.b = f->floats + shape_numel(ws);
        f->floats = fc.b + ws->d[0];
        f->head[fc.conv] = f->n;
        f->gone[fc.bn] = true;
        if (fc.act >= 0) f->gone[fc.act] = true;
        f->fc[f->n++] = fc;
    }
    free(readers);
    free(is_output);
    if (f->floats && !(f->weights = malloc((size_t)f->floats * sizeof *f->weights))) {
        cpu_fold_free(f);
        return snprintf(err, (size_t)errcap, "out of memory for the folded convolutions' weights"), false;
    }
    for (int i = 0; i < f->n; i++) {
        const Op *conv = &g->ops[f->fc[i].conv], *bn = &g->ops[f->fc[i].bn];
        const Shape *ws = &g->tensors[conv->in[1]].shape;
        bn_fold(buf[conv->in[1]], conv->n_in > 2 ? buf[conv->in[2]] : NULL, ws->d[0], shape_numel(ws) / ws->d[0], buf[bn->in[1]], buf[bn->in[2]], buf[bn->in[3]],
                buf[bn->in[4]], bn->a.eps, f->weights + f->fc[i].w, f->weights + f->fc[i].b);
    }
    return true;
}

bool cpu_fold_run(const CpuFold *f, const Graph *g, const Views *v, int op, void **buf, char *err, int errcap) {
    const FoldedConv *fc = &f->fc[f->head[op]];
    const Op *act = fc->act >= 0 ? &g->ops[fc->act] : NULL;
    return cpu_conv_forward_act(g, v, &g->ops[fc->conv], f->weights + fc->w, f->weights + fc->b, act ? (int)act->kind : -1, act ? (float)act->a.alpha : 0.0f,
                                fc->out, buf, err, errcap);
}

bool cpu_fold_covers(const CpuFold *f, int lo, int hi) {
    for (int o = lo; o <= hi; o++)
        if (!f->gone[o]) return false;
    return true;
}

void cpu_fold_free(CpuFold *f) {
    free(f->fc);
    free(f->head);
    free(f->gone);
    free(f->weights);
    memset(f, 0, sizeof *f);
}
