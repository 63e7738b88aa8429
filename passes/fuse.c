/* passes/fuse.c — the fusion rules (few, each a contiguous op pattern over
 * the dataflow) and which tensors stay inside a group. Every op belongs to
 * exactly one group; `--fuse none` makes every op its own group. */
#include "fuse.h"

#include "views.h"

#include <stdio.h>
#include <string.h>

static const char *KIND_NAMES[GROUP_KINDS] = {"library", "pointwise", "reduction", "data", "loss", "optimizer", "other"};
static const char *PATTERN_NAMES[PATTERN_COUNT] = {"single", "conv_bn_act", "bn_act", "pointwise", "bn_act_bwd", "optimizer"};

const char *group_kind_name(GroupKind k) { return k < GROUP_KINDS ? KIND_NAMES[k] : "?"; }
const char *group_pattern_name(GroupPattern p) { return p < PATTERN_COUNT ? PATTERN_NAMES[p] : "?"; }
const char *fuse_policy_name(FusePolicy p) { return p == FUSE_FULL ? "full" : "none"; }

static bool is_activation(OpKind k) {
    return k == OP_SILU || k == OP_RELU || k == OP_LEAKY_RELU || k == OP_HARDSWISH || k == OP_GELU || k == OP_SIGMOID;
}

/* elementwise with at most per-channel parameters: one pass over the data */
static bool is_pointwise(const Op *op) {
    return is_activation(op->kind) || op->kind == OP_BN_APPLY || op->kind == OP_ADD || op->kind == OP_CHANNEL_SCALE ||
           (op->kind == OP_BATCHNORM && !op->a.training);
}

static bool reads(const Op *op, int t) {
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i] == t) return true;
    return false;
}

static GroupKind single_kind(const Op *op) {
    switch (op->kind) {
    case OP_CONV2D: case OP_CONV_TRANSPOSE2D: case OP_CONV2D_DGRAD: case OP_CONV2D_WGRAD: case OP_ATTENTION: case OP_ATTENTION_BWD: return GROUP_LIBRARY;
    case OP_BATCHNORM: return op->a.training ? GROUP_REDUCTION : GROUP_POINTWISE;
    case OP_BATCHNORM_BWD: case OP_BIAS_GRAD: case OP_CHANNEL_DOT: return GROUP_REDUCTION;
    case OP_CONCAT: case OP_SPLIT: case OP_RESHAPE: case OP_ZEROPAD2D: case OP_CROP2D: case OP_DETACH: case OP_ZEROS: return GROUP_DATA;
    case OP_DETECT_LOSS: case OP_DETECT_LOSS_BWD: return GROUP_LOSS;
    case OP_GRAD_CLIP: case OP_SGD_STEP: case OP_ADAMW_STEP: return GROUP_OPTIMIZER;
    default: return is_pointwise(op) ? GROUP_POINTWISE : GROUP_OTHER;
    }
}

/* The ops of a BN-activation backward starting at op o ([BN_APPLY]
 * ACTIVATION_BWD BATCHNORM_BWD), 0 if none starts there; *dy: the tensor
 * its activation gradient reads as the incoming gradient. */
static int bn_act_bwd_at(const Graph *g, int o, int *dy) {
    const Op *ops = g->ops;
    int n = g->n_ops, k = o;
    if (ops[o].kind != OP_BN_APPLY && ops[o].kind != OP_ACTIVATION_BWD) return 0;
    if (ops[o].kind == OP_BN_APPLY) k++;
    if (k + 1 < n && ops[k].kind == OP_ACTIVATION_BWD && (k == o || ops[k].in[1] == ops[o].out[0]) && ops[k + 1].kind == OP_BATCHNORM_BWD &&
        ops[k + 1].in[0] == ops[k].out[0]) {
        *dy = ops[k].in[0];
        return k + 1 - o + 1;
    }
    return 0;
}

/* The longest group the rules allow starting at op o (its pattern in *pat). */
static int match_at(const Graph *g, int o, GroupPattern *pat) {
    const Op *ops = g->ops;
    int n = g->n_ops, dy, len;
    const Op *op = &ops[o];
    *pat = PATTERN_SINGLE;
    if (op->kind == OP_CONV2D || (op->kind == OP_BATCHNORM && op->a.training)) {
        int k = o, y = op->out[0];
        if (op->kind == OP_CONV2D) {
            if (k + 1 >= n || ops[k + 1].kind != OP_BATCHNORM || ops[k + 1].in[0] != y) return 1;
            k++;
            y = ops[k].out[0];
        }
        if (k + 1 < n && is_activation(ops[k + 1].kind) && ops[k + 1].in[0] == y) {
            k++;
            if (k + 1 < n && ops[k + 1].kind == OP_ADD && reads(&ops[k + 1], ops[k].out[0])) k++;
        } else if (op->kind == OP_BATCHNORM) {
            return 1;
        }
        *pat = op->kind == OP_CONV2D ? PATTERN_CONV_BN_ACT : PATTERN_BN_ACT;
        return k - o + 1;
    }
    if ((len = bn_act_bwd_at(g, o, &dy)) > 0) {
        *pat = PATTERN_BN_ACT_BWD;
        return len;
    }
    /* a gradient's sum of two (autodiff's accumulation) right before the
     * BN-activation backward that reads it: added in that kernel's
     * registers, reading its two terms in both passes (4 tensor passes
     * instead of 3 for the add and 2 for the sum). A sum of more terms stays
     * a map: reading n terms twice saves nothing from n = 3 on. */
    if (op->kind == OP_ADD && o + 1 < n && (len = bn_act_bwd_at(g, o + 1, &dy)) > 0 && dy == op->out[0]) {
        *pat = PATTERN_BN_ACT_BWD;
        return 1 + len;
    }
    if (is_pointwise(op)) {
        int k = o;
        while (k + 1 < n && is_pointwise(&ops[k + 1]) && reads(&ops[k + 1], ops[k].out[0])) k++;
        if (k > o) *pat = PATTERN_POINTWISE;
        return k - o + 1;
    }
    if (op->kind == OP_GRAD_CLIP) {
        int k = o;
        while (k + 1 < n && (ops[k + 1].kind == OP_SGD_STEP || ops[k + 1].kind == OP_ADAMW_STEP)) k++;
        if (k > o) *pat = PATTERN_OPTIMIZER;
        return k - o + 1;
    }
    return 1;
}

static GroupKind pattern_kind(const Graph *g, const FusionGroup *gr) {
    switch (gr->pattern) {
    case PATTERN_CONV_BN_ACT: return GROUP_LIBRARY;
    case PATTERN_BN_ACT: case PATTERN_BN_ACT_BWD: return GROUP_REDUCTION;
    case PATTERN_POINTWISE: return GROUP_POINTWISE;
    case PATTERN_OPTIMIZER: return GROUP_OPTIMIZER;
    default: return single_kind(&g->ops[gr->first]);
    }
}

/* internal: activation tensors made inside a group, read there, and read
 * nowhere else (a tensor nobody reads is an output the runtime may look at) */
static bool mark_internal(const Graph *g, Arena *a, Fusion *f, char *err, int errcap) {
    f->internal = arena_array(a, (size_t)g->n_tensors + 1, sizeof(bool));
    int *group_of = arena_array(a, (size_t)g->n_ops + 1, sizeof(int));
    bool *outside = arena_array(a, (size_t)g->n_tensors + 1, sizeof(bool));
    if (!f->internal || !group_of || !outside) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int i = 0; i < f->n_groups; i++)
        for (int o = f->groups[i].first; o < f->groups[i].first + f->groups[i].n; o++) group_of[o] = i;
    for (int i = 0; i < g->n_outputs; i++) outside[g->outputs[i]] = true;
    for (int o = 0; o < g->n_ops; o++)
        for (int i = 0; i < g->ops[o].n_in; i++) {
            int t = g->ops[o].in[i], p = g->tensors[t].producer;
            /* in memory as well: what a library call (convolution) writes,
             * and the clip coefficient, which every update kernel reads after
             * a grid-wide reduction */
            if (p < 0 || group_of[p] != group_of[o] || single_kind(&g->ops[p]) == GROUP_LIBRARY || g->ops[p].kind == OP_GRAD_CLIP) outside[t] = true;
            else f->internal[t] = g->tensors[t].kind == TK_ACTIVATION;
        }
    for (int t = 0; t < g->n_tensors; t++) f->internal[t] &= !outside[t];
    return true;
}

bool fuse_build(const Graph *g, FusePolicy p, Arena *a, Fusion *f, char *err, int errcap) {
    memset(f, 0, sizeof *f);
    f->policy = p;
    f->groups = arena_array(a, (size_t)g->n_ops + 1, sizeof(FusionGroup));
    if (!f->groups) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int o = 0; o < g->n_ops;) {
        GroupPattern pat = PATTERN_SINGLE;
        int len = p == FUSE_FULL ? match_at(g, o, &pat) : 1;
        FusionGroup *gr = &f->groups[f->n_groups++];
        *gr = (FusionGroup){.pattern = pat, .first = o, .n = len};
        gr->kind = pattern_kind(g, gr);
        o += len;
    }
    /* views_build (train_compile) replaces these once the precision is known */
    return mark_internal(g, a, f, err, errcap) && views_identity(g, a, &f->views, err, errcap);
}

bool fuse_check(const Graph *g, Arena *a, Fusion *f, char *err, int errcap) {
    int next = 0;
    for (int i = 0; i < f->n_groups; i++) {
        FusionGroup *gr = &f->groups[i];
        if (gr->first != next || gr->n < 1 || gr->n > g->n_ops - next || gr->pattern >= PATTERN_COUNT)
            return snprintf(err, (size_t)errcap, "group %d does not continue the partition of the ops at op %d", i, next), false;
        GroupPattern pat;
        int len = match_at(g, gr->first, &pat);
        bool ok = gr->pattern == PATTERN_SINGLE ? gr->n == 1 : pat == gr->pattern && len == gr->n;
        if (!ok) return snprintf(err, (size_t)errcap, "group %d (ops %d..%d) does not match the %s rule", i, gr->first, gr->first + gr->n - 1, group_pattern_name(gr->pattern)), false;
        if (gr->kind != pattern_kind(g, gr)) return snprintf(err, (size_t)errcap, "group %d has kind %d, its ops make it %s", i, (int)gr->kind, group_kind_name(pattern_kind(g, gr))), false;
        next += gr->n;
    }
    if (next != g->n_ops) return snprintf(err, (size_t)errcap, "the groups cover %d of %d ops", next, g->n_ops), false;
    return mark_internal(g, a, f, err, errcap) && views_identity(g, a, &f->views, err, errcap);
}
