/* passes/autodiff.c — reverse-mode differentiation over the IR: the loss op,
 * then every op's gradient rule from last to first, summing the gradients of
 * tensors read by several ops. Only tensors that depend on a trainable
 * parameter get gradients. */
#include "autodiff.h"

#include <stdio.h>
#include <string.h>

/* Ops whose outputs backward may recompute from their inputs: cheap per
 * element, or pure data movement. */
bool autodiff_recomputable(OpKind k) {
    switch (k) {
    case OP_BATCHNORM:
    case OP_SILU:
    case OP_RELU:
    case OP_LEAKY_RELU:
    case OP_HARDSWISH:
    case OP_GELU:
    case OP_SIGMOID:
    case OP_ADD:
    case OP_CHANNEL_SCALE:
    case OP_CONCAT:
    case OP_SPLIT:
    case OP_RESHAPE:
    case OP_RESIZE_NEAREST:
    case OP_ZEROPAD2D: return true;
    default: return false;
    }
}

typedef struct Recompute {
    Graph *g;
    const bool *conv_too;   /* forward conv outputs also recomputed */
    bool per_rule;      /* pointwise twins not shared between rules (LossSpec.twins_per_rule) */
    int n_fwd_ops;      /* ops below this index are forward */
    int *copy;          /* per forward tensor: its recomputed twin, or -1 */
    int *copy_sweep;    /* per forward tensor: the backward sweep step that made the twin */
    int sweep;          /* the current backward sweep step */
    int n_tensors;      /* forward tensors (copy[] size) */
    TrainingGraph *tg;
} Recompute;

/* The tensor backward should read in place of forward tensor t: t itself if
 * it is kept (an input, state, a conv output, BN statistics, ...), else a
 * twin recomputed now, right before its first backward use, from kept
 * tensors, and shared by every later use: recomputing an activation (or a
 * concat or split of it) for each rule that reads it moved the same bytes
 * again each time (YOLOv8n 640 b64 bf16 NHWC: 36.5 GB a step in generated
 * kernels against 29.8 GB shared, for an arena 0.04% larger). The exception is
 * BN's output (the pre-activation): its twin is made again for each rule, as
 * that rule's kernel then computes it in registers from the conv output it
 * reads anyway (bn_act_bwd), where a shared twin is a tensor to read. Under
 * a memory budget (per_rule) only conv twins are shared: a pointwise twin
 * kept across the backward in between holds bytes the budget needs. */
static int recompute(Recompute *rc, int t) {
    Graph *g = rc->g;
    if (t >= rc->n_tensors || g->tensors[t].kind != TK_ACTIVATION) return t;
    int p = g->tensors[t].producer;
    if (p < 0 || p >= rc->n_fwd_ops) return t;
    bool conv = g->ops[p].kind == OP_CONV2D && rc->conv_too && rc->conv_too[t];
    bool shared = conv || (!rc->per_rule && g->ops[p].kind != OP_BATCHNORM);
    if (rc->copy[t] >= 0 && (shared || rc->copy_sweep[t] == rc->sweep)) return rc->copy[t];
    if (!conv && !autodiff_recomputable(g->ops[p].kind)) return t;
    Op op = g->ops[p];
    if (op.kind == OP_BATCHNORM && t != op.out[0]) return t; /* statistics are kept */
    int in[IR_MAX_SPLIT + 8], n_in = op.n_in, id;
    if (op.kind == OP_BATCHNORM) {
        /* normalise the kept input with the kept statistics; no running-stat update */
        int bn_in[5] = {recompute(rc, op.in[0]), op.in[1], op.in[2], op.out[1], op.out[2]};
        id = graph_add_op(g, OP_BN_APPLY, bn_in, 5, &op.a, 1, op.row, op.scope);
    } else {
        if (n_in > IR_MAX_SPLIT + 8) return t;
        for (int i = 0; i < n_in; i++) in[i] = recompute(rc, op.in[i]);
        id = graph_add_op(g, op.kind, in, n_in, &op.a, op.n_out, op.row, op.scope);
    }
    if (id < 0) return -1;
    const Op *made = &g->ops[id];
    rc->tg->n_recompute_ops++;
    rc->tg->recompute_flops += op_def(made->kind)->flops(g, made);
    if (op.kind == OP_BATCHNORM) rc->copy[t] = made->out[0], rc->copy_sweep[t] = rc->sweep;
    else
        for (int i = 0; i < op.n_out; i++) rc->copy[op.out[i]] = made->out[i], rc->copy_sweep[op.out[i]] = rc->sweep;
    return rc->copy[t];
}

int loss_spec_levels(const LossSpec *ls) { return ls->nlevels * (ls->end2end ? 2 : 1); }

/* One detect loss over nlevels levels at topk: its total and items. */
static bool detect_loss_op(Graph *g, const LossSpec *ls, const int *levels, int topk, int boxes, int counts, int *total, int *items) {
    OpAttrs la = {.nc = ls->nc, .reg_max = ls->reg_max, .nlevels = ls->nlevels, .topk = topk};
    memcpy(la.gains, ls->gains, sizeof la.gains);
    int in[IR_MAX_LEVELS + 2];
    for (int i = 0; i < ls->nlevels; i++) {
        const Shape *s = &g->tensors[levels[i]].shape;
        in[i] = levels[i];
        la.level_hw[i][0] = (int)s->d[2];
        la.level_hw[i][1] = (int)s->d[3];
        la.strides[i] = ls->strides[i];
    }
    in[ls->nlevels] = boxes;
    in[ls->nlevels + 1] = counts;
    int op = graph_add_op(g, OP_DETECT_LOSS, in, ls->nlevels + 2, &la, 2, -1, "loss");
    if (op < 0) return false;
    *total = g->ops[op].out[0];
    *items = g->ops[op].out[1];
    return true;
}

bool loss_build(Graph *g, const LossSpec *ls, const int *levels, TrainingGraph *tg) {
    memset(tg, 0, sizeof *tg);
    if (ls->nlevels < 1 || ls->nlevels > IR_MAX_LEVELS) return snprintf(g->err, sizeof g->err, "the loss needs 1 to %d head levels", IR_MAX_LEVELS), false;
    if (g->n_inputs < 1) return snprintf(g->err, sizeof g->err, "no image input"), false;
    tg->images = g->inputs[0];
    int64_t batch = g->tensors[tg->images].shape.d[0];
    tg->boxes = graph_add_input(g, "boxes", (Shape){3, {batch, ls->max_boxes, 5}}, DT_F32);
    tg->counts = graph_add_input(g, "counts", shape1(batch), DT_I64);
    if (tg->boxes < 0 || tg->counts < 0) return false;
    tg->n_forward_ops = g->n_ops;
    tg->n_levels = loss_spec_levels(ls);
    memcpy(tg->levels, levels, sizeof(int) * (size_t)tg->n_levels);
    if (!detect_loss_op(g, ls, levels, ls->topk, tg->boxes, tg->counts, &tg->loss, &tg->items)) return false;
    if (ls->end2end) {
        /* E2EDetectLoss: one2many at topk plus one2one at topk 1, items added */
        int total2, items2;
        if (!detect_loss_op(g, ls, levels + ls->nlevels, 1, tg->boxes, tg->counts, &total2, &items2)) return false;
        int sum_items[2] = {tg->items, items2}, sum_total[2] = {tg->loss, total2};
        int it = graph_add_op(g, OP_ADD, sum_items, 2, NULL, 1, -1, "loss");
        int tt = it < 0 ? -1 : graph_add_op(g, OP_ADD, sum_total, 2, NULL, 1, -1, "loss");
        if (tt < 0) return false;
        tg->items = g->ops[it].out[0];
        tg->loss = g->ops[tt].out[0];
    }
    return graph_mark_output(g, tg->loss) && graph_mark_output(g, tg->items);
}

/* Gradient contributions not yet summed: a tensor's first is in acc[], the
 * later ones wait in a list in arrival order, and are added only when the
 * tensor's own gradient rule needs their sum. The adds then sit together
 * right before that rule, where fusion takes a chain of them as one kernel
 * and the sum straight into the rule's BN-activation backward, instead of
 * each partial sum going through memory as it arrived. */
typedef struct Contribution {
    int grad, row, next; /* next: the tensor's later contribution, or -1 */
    const char *scope;   /* the reading op's, for the add */
} Contribution;

typedef struct Pending {
    int *acc;            /* per forward tensor: its gradient so far (the first contribution), or -1 */
    int *head, *tail;    /* per forward tensor: its waiting contributions, or -1 */
    Contribution *c;
    int n, cap;
} Pending;

static bool pending_add(Pending *p, Graph *g, int t, int grad, const Op *reader) {
    if (p->acc[t] < 0) return p->acc[t] = grad, true;
    if (p->n == p->cap) return snprintf(g->err, sizeof g->err, "internal error: more gradient contributions than op inputs"), false;
    p->c[p->n] = (Contribution){.grad = grad, .row = reader->row, .next = -1, .scope = reader->scope};
    if (p->tail[t] >= 0) p->c[p->tail[t]].next = p->n;
    else p->head[t] = p->n;
    p->tail[t] = p->n++;
    return true;
}

/* t's whole gradient into acc[t]: the waiting contributions added in arrival order */
static bool pending_sum(Pending *p, Graph *g, int t) {
    for (int k = p->head[t]; k >= 0; k = p->c[k].next) {
        int sum_in[2] = {p->acc[t], p->c[k].grad};
        int id = graph_add_op(g, OP_ADD, sum_in, 2, NULL, 1, p->c[k].row, p->c[k].scope);
        if (id < 0) return false;
        p->acc[t] = g->ops[id].out[0];
    }
    p->head[t] = p->tail[t] = -1;
    return true;
}

bool autodiff_build(Graph *g, const LossSpec *ls, TrainingGraph *tg) {
    const int n_levels = loss_spec_levels(ls);
    if (g->n_outputs != n_levels)
        return snprintf(g->err, sizeof g->err, "the loss needs the %d head levels as graph outputs, found %d", n_levels, g->n_outputs), false;
    if (!loss_build(g, ls, g->outputs, tg)) return false;
    /* the levels stop being outputs; loss and items (loss_build's) stay */
    memmove(g->outputs, g->outputs + n_levels, sizeof(int) * (size_t)(g->n_outputs - n_levels));
    g->n_outputs -= n_levels;
    tg->grad_seed = graph_add_input(g, "grad_seed", shape1(1), DT_F32);
    if (tg->grad_seed < 0) return false;
    int loss_op = g->tensors[tg->loss].producer;

    /* which tensors depend on a trainable parameter */
    int n_fwd_tensors = g->n_tensors;
    Arena *a = g->arena;
    bool *needs = arena_array(a, (size_t)n_fwd_tensors, sizeof(bool));
    Pending pend = {.acc = arena_array(a, (size_t)n_fwd_tensors, sizeof(int)), .head = arena_array(a, (size_t)n_fwd_tensors, sizeof(int)),
                    .tail = arena_array(a, (size_t)n_fwd_tensors, sizeof(int))};
    for (int o = 0; o <= loss_op; o++) pend.cap += g->ops[o].n_in;
    pend.c = arena_array(a, (size_t)pend.cap + 1, sizeof(Contribution));
    int *acc = pend.acc;
    if (!needs || !acc || !pend.head || !pend.tail || !pend.c) return snprintf(g->err, sizeof g->err, "out of memory"), false;
    for (int t = 0; t < n_fwd_tensors; t++) {
        needs[t] = g->tensors[t].kind == TK_PARAM && !g->tensors[t].frozen;
        acc[t] = pend.head[t] = pend.tail[t] = -1;
    }
    for (int o = 0; o <= loss_op; o++) {
        const Op *op = &g->ops[o];
        bool any = false;
        for (int i = 0; i < op->n_in; i++) any |= needs[op->in[i]];
        any &= op_def(op->kind)->grad != NULL;
        for (int i = 0; i < op->n_out; i++) needs[op->out[i]] = any;
    }
    acc[tg->loss] = tg->grad_seed;
    Recompute rc = {.g = g, .n_fwd_ops = tg->n_forward_ops, .n_tensors = n_fwd_tensors, .tg = tg, .conv_too = ls->recompute_conv,
                   .per_rule = ls->twins_per_rule};
    if (ls->recompute == RECOMPUTE_POINTWISE) {
        rc.copy = arena_array(a, (size_t)n_fwd_tensors, sizeof(int));
        rc.copy_sweep = arena_array(a, (size_t)n_fwd_tensors, sizeof(int));
        if (!rc.copy || !rc.copy_sweep) return snprintf(g->err, sizeof g->err, "out of memory"), false;
        for (int t = 0; t < n_fwd_tensors; t++) rc.copy[t] = -1;
    }

    /* reverse sweep: when an op is reached, every reader of its outputs has
     * already added its contribution to acc[] */
    for (int o = loss_op; o >= 0; o--) {
        Op op = g->ops[o]; /* copy: emitting ops may move g->ops */
        rc.sweep = o;
        const OpDef *def = op_def(op.kind);
        int dy[IR_MAX_SPLIT], dx[IR_MAX_SPLIT + IR_MAX_LEVELS];
        bool any = false;
        for (int i = 0; i < op.n_out; i++) any |= acc[op.out[i]] >= 0;
        if (!any || !def->grad) continue;
        for (int i = 0; i < op.n_out; i++) {
            if (!pending_sum(&pend, g, op.out[i])) return false;
            dy[i] = acc[op.out[i]];
        }
        for (int i = 0; i < op.n_in; i++) dx[i] = needs[op.in[i]] ? 0 : -1;
        /* the rule reads recomputed twins of forward tensors; gradients are
         * still accumulated for the original tensors (op.in). Not the loss's:
         * its inputs are alive when its gradient runs right after it, so a
         * twin would free no byte and only copy them again (YOLOv8n b64: the
         * head's concats of its convs' outputs, 0.31 GB a step) */
        Op rule_op = op;
        if (rc.copy && op.kind != OP_DETECT_LOSS) {
            rule_op.in = arena_array(a, (size_t)op.n_in + 1, sizeof(int));
            if (!rule_op.in) return snprintf(g->err, sizeof g->err, "out of memory"), false;
            for (int i = 0; i < op.n_in; i++)
                if ((rule_op.in[i] = recompute(&rc, op.in[i])) < 0) return false;
        }
        if (!def->grad(g, &rule_op, dy, dx)) {
            char why[sizeof g->err];
            memcpy(why, g->err, sizeof why);
            return snprintf(g->err, sizeof g->err, "gradient of %s (%.60s): %.150s", def->name, op.scope ? op.scope : "", why), false;
        }
        for (int i = 0; i < op.n_in; i++)
            if (dx[i] >= 0 && needs[op.in[i]] && !pending_add(&pend, g, op.in[i], dx[i], &op)) return false;
    }
    /* parameters read by several ops: their sums, which no rule asked for */
    for (int t = 0; t < n_fwd_tensors; t++)
        if (g->tensors[t].kind == TK_PARAM && !pending_sum(&pend, g, t)) return false;

    tg->n_grad_of = n_fwd_tensors;
    tg->grad_of = acc;
    /* a trainable parameter no path reaches still gets an (all-zero) gradient */
    for (int t = 0; t < n_fwd_tensors; t++) {
        if (g->tensors[t].kind != TK_PARAM || g->tensors[t].frozen || acc[t] >= 0) continue;
        OpAttrs z = {.shape = g->tensors[t].shape};
        int id = graph_add_op(g, OP_ZEROS, NULL, 0, &z, 1, -1, g->tensors[t].name);
        if (id < 0) return false;
        acc[t] = g->ops[id].out[0];
    }
    /* keep only parameter gradients: grad_of answers "where is dL/dp" */
    for (int t = 0; t < n_fwd_tensors; t++)
        if (g->tensors[t].kind != TK_PARAM) acc[t] = -1;
    return true;
}
