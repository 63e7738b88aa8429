/* ir/ops_impl.h — internal to the op registry: the shape, FLOP and gradient
 * functions defined in ops.c, ops_bwd.c and grad.c, so that the one table in
 * ops.c can name them. Nothing outside ir/ includes this. */
#ifndef YOLOCC_OPS_IMPL_H
#define YOLOCC_OPS_IMPL_H
#include <stdio.h>

#include "ir.h"

#define IN(i) (&g->tensors[op->in[i]].shape)
#define OUT0 (&g->tensors[op->out[0]].shape)
#define FAIL(...) return (snprintf(err, (size_t)errcap, __VA_ARGS__), false)
#define INFER_FN(name) bool name(const Graph *g, const Op *op, Shape *out, char *err, int errcap)
#define COST_FN(name) double name(const Graph *g, const Op *op)
#define GRAD_FN(name) bool name(Graph *g, const Op *op, const int *dy, int *dx)

COST_FN(zero_cost);
COST_FN(per_out_1);
COST_FN(per_out_4);
COST_FN(conv_macs);

/* backward ops (ops_bwd.c) */
INFER_FN(restore_shape_infer);
INFER_FN(per_channel_infer);
INFER_FN(bn_bwd_infer);
INFER_FN(like_second_infer);
INFER_FN(zeros_infer);
INFER_FN(resize_bwd_infer);
INFER_FN(crop_infer);
INFER_FN(attention_bwd_infer);
INFER_FN(detect_loss_infer);
INFER_FN(detect_loss_bwd_infer);
COST_FN(dgrad_flops);
COST_FN(wgrad_flops);
COST_FN(in0_numel_4);
COST_FN(attention_bwd_flops);
COST_FN(in_numel_2);
INFER_FN(grad_clip_infer);
INFER_FN(sgd_step_infer);
INFER_FN(adamw_step_infer);

/* gradient rules (grad.c) */
GRAD_FN(conv2d_grad);
GRAD_FN(conv_transpose2d_grad);
GRAD_FN(batchnorm_grad);
GRAD_FN(activation_grad);
GRAD_FN(add_grad);
GRAD_FN(channel_scale_grad);
GRAD_FN(concat_grad);
GRAD_FN(split_grad);
GRAD_FN(reshape_grad);
GRAD_FN(resize_nearest_grad);
GRAD_FN(maxpool2d_grad);
GRAD_FN(avgpool2d_grad);
GRAD_FN(zeropad2d_grad);
GRAD_FN(attention_grad);
GRAD_FN(detect_loss_grad);

#endif
