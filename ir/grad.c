/* ir/grad.c — the gradient rule of every differentiable op: which backward
 * ops compute the input gradients from the output gradients. Registered in
 * ops.c. On entry dx[i] is -1 for inputs that need no gradient (the autodiff
 * pass decides); rules emit nothing for those. Knows no kernels. */
#include <string.h>

#include "ops_impl.h"

/* Appends a backward op labelled with the forward op's row and scope. */
static bool emit(Graph *g, const Op *fwd, OpKind k, const int *in, int n_in, const OpAttrs *a, int n_out, int *outs) {
    int id = graph_add_op(g, k, in, n_in, a, n_out, fwd->row, fwd->scope);
    if (id < 0) return false;
    for (int i = 0; i < g->ops[id].n_out; i++) outs[i] = g->ops[id].out[i];
    return true;
}

static int emit1(Graph *g, const Op *fwd, OpKind k, const int *in, int n_in, const OpAttrs *a) {
    int out = -1;
    return emit(g, fwd, k, in, n_in, a, 1, &out) ? out : -1;
}

static int zeros_like(Graph *g, const Op *fwd, int t) {
    OpAttrs a = {.shape = g->tensors[t].shape, .channels_last = g->tensors[t].channels_last};
    return emit1(g, fwd, OP_ZEROS, NULL, 0, &a);
}

static bool none(const Op *op, int *dx) {
    for (int i = 0; i < op->n_in; i++) dx[i] = -1;
    return true;
}

#define WANT(i) (dx[i] != -1)
#define SHAPE(t) (g->tensors[t].shape)

/* y = conv(x, w) + b:  dx = dgrad(dy, w), dw = wgrad(dy, x), db = sum(dy) */
GRAD_FN(conv2d_grad) {
    int d = dy[0], x = op->in[0], w = op->in[1];
    if (d < 0) return none(op, dx);
    OpAttrs a = op->a;
    if (WANT(0)) {
        a.shape = SHAPE(x);
        int in[2] = {d, w};
        if ((dx[0] = emit1(g, op, OP_CONV2D_DGRAD, in, 2, &a)) < 0) return false;
    }
    if (WANT(1)) {
        a.shape = SHAPE(w);
        int in[2] = {d, x};
        if ((dx[1] = emit1(g, op, OP_CONV2D_WGRAD, in, 2, &a)) < 0) return false;
    }
    if (op->n_in == 3 && WANT(2) && (dx[2] = emit1(g, op, OP_BIAS_GRAD, &d, 1, NULL)) < 0) return false;
    return true;
}

/* A transposed conv is the dgrad of a conv with the same weight, so its input
 * gradient is that conv's forward and its weight gradient that conv's wgrad
 * with the roles of input and output swapped. */
GRAD_FN(conv_transpose2d_grad) {
    int d = dy[0], x = op->in[0], w = op->in[1];
    if (d < 0) return none(op, dx);
    OpAttrs a = op->a;
    if (WANT(0)) {
        int in[2] = {d, w};
        if ((dx[0] = emit1(g, op, OP_CONV2D, in, 2, &a)) < 0) return false;
    }
    if (WANT(1)) {
        a.shape = SHAPE(w);
        int in[2] = {x, d};
        if ((dx[1] = emit1(g, op, OP_CONV2D_WGRAD, in, 2, &a)) < 0) return false;
    }
    if (op->n_in == 3 && WANT(2) && (dx[2] = emit1(g, op, OP_BIAS_GRAD, &d, 1, NULL)) < 0) return false;
    return true;
}

/* Only y carries a gradient: mean and invstd are saved statistics whose
 * dependence on x is inside batchnorm_bwd. Running statistics get none. */
GRAD_FN(batchnorm_grad) {
    if (dy[0] < 0) return none(op, dx);
    int in[5] = {dy[0], op->in[0], op->in[1], op->out[1], op->out[2]}, outs[3];
    if (!emit(g, op, OP_BATCHNORM_BWD, in, 5, &op->a, 3, outs)) return false;
    for (int i = 0; i < 3; i++) dx[i] = WANT(i) ? outs[i] : -1;
    dx[3] = dx[4] = dx[5] = -1;
    return true;
}

GRAD_FN(activation_grad) {
    if (dy[0] < 0 || !WANT(0)) return none(op, dx);
    OpAttrs a = op->a;
    a.act_op = op->kind;
    int in[2] = {dy[0], op->in[0]};
    return (dx[0] = emit1(g, op, OP_ACTIVATION_BWD, in, 2, &a)) >= 0;
}

GRAD_FN(add_grad) {
    (void)g;
    (void)op;
    dx[0] = WANT(0) ? dy[0] : -1;
    dx[1] = WANT(1) ? dy[0] : -1;
    return true;
}

/* y = x * s[c]: dx = dy * s[c], ds[c] = sum(dy * x) */
GRAD_FN(channel_scale_grad) {
    int d = dy[0];
    if (d < 0) return none(op, dx);
    if (WANT(0)) {
        int in[2] = {d, op->in[1]};
        if ((dx[0] = emit1(g, op, OP_CHANNEL_SCALE, in, 2, NULL)) < 0) return false;
    }
    if (WANT(1)) {
        int in[2] = {d, op->in[0]};
        if ((dx[1] = emit1(g, op, OP_CHANNEL_DOT, in, 2, NULL)) < 0) return false;
    }
    return true;
}

GRAD_FN(concat_grad) {
    if (dy[0] < 0) return none(op, dx);
    OpAttrs a = {.axis = op->a.axis, .nsplit = op->n_in};
    for (int i = 0; i < op->n_in; i++) a.split[i] = (int)SHAPE(op->in[i]).d[op->a.axis];
    int outs[IR_MAX_SPLIT];
    if (op->n_in > IR_MAX_SPLIT) return false;
    if (op->n_in == 1) outs[0] = dy[0];
    else if (!emit(g, op, OP_SPLIT, &dy[0], 1, &a, op->n_in, outs)) return false;
    for (int i = 0; i < op->n_in; i++) dx[i] = WANT(i) ? outs[i] : -1;
    return true;
}

GRAD_FN(split_grad) {
    bool any = false;
    for (int i = 0; i < op->n_out; i++) any |= dy[i] >= 0;
    if (!any || !WANT(0)) return none(op, dx);
    int parts[IR_MAX_SPLIT];
    for (int i = 0; i < op->n_out; i++)
        if ((parts[i] = dy[i] >= 0 ? dy[i] : zeros_like(g, op, op->out[i])) < 0) return false;
    OpAttrs a = {.axis = op->a.axis};
    return (dx[0] = emit1(g, op, OP_CONCAT, parts, op->n_out, &a)) >= 0;
}

GRAD_FN(reshape_grad) {
    if (dy[0] < 0 || !WANT(0)) return none(op, dx);
    OpAttrs a = {.shape = SHAPE(op->in[0]), .channels_last = g->tensors[op->in[0]].channels_last};
    return (dx[0] = emit1(g, op, OP_RESHAPE, &dy[0], 1, &a)) >= 0;
}

GRAD_FN(resize_nearest_grad) {
    if (dy[0] < 0 || !WANT(0)) return none(op, dx);
    OpAttrs a = {.out_hw = {(int)SHAPE(op->in[0]).d[2], (int)SHAPE(op->in[0]).d[3]}};
    return (dx[0] = emit1(g, op, OP_RESIZE_NEAREST_BWD, &dy[0], 1, &a)) >= 0;
}

GRAD_FN(maxpool2d_grad) {
    if (dy[0] < 0 || !WANT(0)) return none(op, dx);
    int in[2] = {dy[0], op->in[0]};
    return (dx[0] = emit1(g, op, OP_MAXPOOL2D_BWD, in, 2, &op->a)) >= 0;
}

GRAD_FN(avgpool2d_grad) {
    if (dy[0] < 0 || !WANT(0)) return none(op, dx);
    OpAttrs a = op->a;
    a.shape = SHAPE(op->in[0]);
    return (dx[0] = emit1(g, op, OP_AVGPOOL2D_BWD, &dy[0], 1, &a)) >= 0;
}

GRAD_FN(zeropad2d_grad) {
    if (dy[0] < 0 || !WANT(0)) return none(op, dx);
    return (dx[0] = emit1(g, op, OP_CROP2D, &dy[0], 1, &op->a)) >= 0;
}

GRAD_FN(attention_grad) {
    if ((dy[0] < 0 && dy[1] < 0) || !WANT(0)) return none(op, dx);
    int in[3] = {dy[0] >= 0 ? dy[0] : zeros_like(g, op, op->out[0]), dy[1] >= 0 ? dy[1] : -1, op->in[0]};
    if (in[1] < 0) in[1] = zeros_like(g, op, op->out[1]);
    if (in[0] < 0 || in[1] < 0) return false;
    return (dx[0] = emit1(g, op, OP_ATTENTION_BWD, in, 3, &op->a)) >= 0;
}

/* Only the total is differentiated; the logged items are not. */
GRAD_FN(detect_loss_grad) {
    int nl = op->a.nlevels;
    if (dy[0] < 0) return none(op, dx);
    int in[IR_MAX_LEVELS + 3] = {dy[0]};
    memcpy(in + 1, op->in, sizeof(int) * (size_t)op->n_in);
    int outs[IR_MAX_LEVELS];
    if (!emit(g, op, OP_DETECT_LOSS_BWD, in, op->n_in + 1, &op->a, nl, outs)) return false;
    for (int i = 0; i < op->n_in; i++) dx[i] = i < nl && WANT(i) ? outs[i] : -1;
    return true;
}
