/* ir/ops_bwd.c — shape and FLOP rules of the backward ops that gradient rules
 * emit (conv dgrad/wgrad, BN backward, activation backward, ...), of the
 * detection-loss op and of the optimizer ops. Registered in ops.c; kernels live in runtime/. */
#include "ops_impl.h"

/* Backward ops that recreate a forward input's shape carry it in a.shape. */
INFER_FN(restore_shape_infer) {
    (void)g;
    if (op->a.shape.nd < 1) FAIL("missing the shape to restore");
    out[0] = op->a.shape;
    return true;
}

/* per-channel reductions of an [N, C, ...] tensor: bias grad, channel dot */
INFER_FN(per_channel_infer) {
    if (IN(0)->nd < 2) FAIL("needs a channel dimension");
    for (int i = 1; i < op->n_in; i++)
        if (!shape_eq(IN(0), IN(i))) FAIL("operand shapes differ");
    out[0] = shape1(IN(0)->d[1]);
    return true;
}

/* batchnorm_bwd(dy, x, weight, mean, invstd) -> dx, dweight, dbias */
INFER_FN(bn_bwd_infer) {
    if (!shape_eq(IN(0), IN(1)) || IN(0)->nd < 2) FAIL("dy and x must match");
    for (int i = 2; i < 5; i++)
        if (IN(i)->nd != 1 || IN(i)->d[0] != IN(1)->d[1]) FAIL("per-channel operand %d has the wrong size", i);
    out[0] = *IN(1);
    out[1] = out[2] = shape1(IN(1)->d[1]);
    return true;
}

/* (dy, x) -> dx shaped like x */
INFER_FN(like_second_infer) {
    if (op->kind == OP_ACTIVATION_BWD && !shape_eq(IN(0), IN(1))) FAIL("dy and x must match");
    out[0] = *IN(1);
    return true;
}

INFER_FN(zeros_infer) {
    (void)g;
    if (op->a.shape.nd < 0) FAIL("bad shape");
    out[0] = op->a.shape;
    return true;
}

INFER_FN(resize_bwd_infer) {
    if (IN(0)->nd != 4 || op->a.out_hw[0] < 1 || op->a.out_hw[1] < 1) FAIL("needs [N, C, H, W] and the input size");
    out[0] = shape4(IN(0)->d[0], IN(0)->d[1], op->a.out_hw[0], op->a.out_hw[1]);
    return true;
}

/* zeropad2d's backward: drop the padded border (pad = top, bottom, left, right) */
INFER_FN(crop_infer) {
    const Shape *x = IN(0);
    if (x->nd != 4) FAIL("needs [N, C, H, W]");
    int64_t h = x->d[2] - op->a.pad[0] - op->a.pad[1], w = x->d[3] - op->a.pad[2] - op->a.pad[3];
    if (h < 1 || w < 1) FAIL("crop leaves nothing");
    out[0] = shape4(x->d[0], x->d[1], h, w);
    return true;
}

/* attention_bwd(d_out, d_v, qkv) -> d_qkv */
INFER_FN(attention_bwd_infer) {
    if (!shape_eq(IN(0), IN(1)) || IN(2)->nd != 4) FAIL("operand shapes differ");
    out[0] = *IN(2);
    return true;
}

/* detect_loss(level_0..level_{nl-1}, boxes [B, M, 5], counts [B]) -> total [1], items [3] */
INFER_FN(detect_loss_infer) {
    const OpAttrs *a = &op->a;
    int nl = op->n_in - 2;
    if (nl != a->nlevels || nl < 1) FAIL("needs one input per level plus boxes and counts");
    int64_t b = IN(0)->d[0];
    for (int i = 0; i < nl; i++) {
        const Shape *s = IN(i);
        if (s->nd != 4 || s->d[0] != b || s->d[1] != 4LL * a->reg_max + a->nc || s->d[2] != a->level_hw[i][0] || s->d[3] != a->level_hw[i][1])
            FAIL("level %d must be [%lld, %d, %d, %d]", i, (long long)b, 4 * a->reg_max + a->nc, a->level_hw[i][0], a->level_hw[i][1]);
    }
    const Shape *bx = IN(nl), *ct = IN(nl + 1);
    if (bx->nd != 3 || bx->d[0] != b || bx->d[2] != 5) FAIL("boxes must be [B, max_boxes, 5]");
    if (ct->nd != 1 || ct->d[0] != b) FAIL("counts must be [B]");
    if (op->n_out == 2) {
        out[0] = shape1(1);
        out[1] = shape1(3);
    }
    return true;
}

/* detect_loss_bwd(d_total, levels..., boxes, counts) -> d_levels */
INFER_FN(detect_loss_bwd_infer) {
    if (IN(0)->nd != 1 || IN(0)->d[0] != 1) FAIL("d_total must be [1]");
    Op inner = *op;
    inner.in = op->in + 1;
    inner.n_in = op->n_in - 1;
    inner.n_out = 0;
    if (!detect_loss_infer(g, &inner, out, err, errcap)) return false;
    if (op->n_out != op->a.nlevels) FAIL("one gradient per level");
    for (int i = 0; i < op->n_out; i++) out[i] = g->tensors[op->in[1 + i]].shape;
    return true;
}

/* dgrad and wgrad cost what the forward conv costs */
COST_FN(dgrad_flops) {
    const Shape *dy = IN(0), *w = IN(1);
    return 2.0 * (double)shape_numel(dy) * (double)(w->d[1] * w->d[2] * w->d[3]);
}

COST_FN(wgrad_flops) {
    const Shape *dy = IN(0), *w = &op->a.shape;
    return 2.0 * (double)shape_numel(dy) * (double)(w->d[1] * w->d[2] * w->d[3]);
}

COST_FN(in0_numel_4) { return 4.0 * (double)shape_numel(IN(0)); }

COST_FN(attention_bwd_flops) {
    const Shape *x = IN(2);
    const OpAttrs *a = &op->a;
    double per_area = (double)(x->d[2] * x->d[3]) / a->area;
    return 2.5 * (double)x->d[0] * a->heads * a->area * per_area * per_area * (2.0 * a->key_dim + 2.0 * a->head_dim + 5.0);
}

/* grad_clip(grads...) -> coef [1] = min(1, max_norm / (norm + 1e-6)), norm [1] */
INFER_FN(grad_clip_infer) {
    (void)g;
    if (op->a.max_norm <= 0) FAIL("max_norm must be positive");
    out[0] = out[1] = shape1(1);
    return true;
}

COST_FN(in_numel_2) {
    double n = 0;
    for (int i = 0; i < op->n_in; i++) n += 2.0 * (double)shape_numel(IN(i));
    return n;
}

/* inputs [first] = per-group learning rates [3], then scalars up to last */
static bool lrs_and_scalars(const Graph *g, const Op *op, int first, int last, char *err, int errcap) {
    if (shape_numel(IN(first)) != 3) FAIL("the learning rates must have one entry per group (3)");
    for (int i = first + 1; i <= last; i++)
        if (shape_numel(IN(i)) != 1) FAIL("operand %d must be a scalar", i);
    return true;
}

/* sgd_step(param, grad, momentum_buf, lrs [3], momentum [1], clip_coef [1]) */
INFER_FN(sgd_step_infer) {
    (void)out;
    if (!shape_eq(IN(0), IN(1)) || !shape_eq(IN(0), IN(2))) FAIL("param, grad and momentum buffer must match");
    if (op->a.group < 0 || op->a.group > 2) FAIL("parameter group must be 0..2");
    return lrs_and_scalars(g, op, 3, 5, err, errcap);
}

/* adamw_step(param, grad, m, v, lrs [3], beta1 [1], step [1], clip_coef [1]) */
INFER_FN(adamw_step_infer) {
    (void)out;
    if (!shape_eq(IN(0), IN(1)) || !shape_eq(IN(0), IN(2)) || !shape_eq(IN(0), IN(3))) FAIL("param, grad and moments must match");
    if (op->a.group < 0 || op->a.group > 2) FAIL("parameter group must be 0..2");
    return lrs_and_scalars(g, op, 4, 7, err, errcap);
}
