/* runtime/ref_kernels.h — the reference kernels: a plain fp32 implementation
 * of every op's forward and backward with double accumulators, executed by
 * interp.c. They are the oracle that faster paths are compared with, so they
 * favour clarity over speed. buf[t] holds tensor t (float, or int64 for
 * DT_I64 tensors), allocated by the interpreter. */
#ifndef YOLOCC_REF_KERNELS_H
#define YOLOCC_REF_KERNELS_H
#include <stdio.h>

#include "../ir/ir.h"

typedef bool (*RefKernel)(const Graph *g, const Op *op, void **buf, char *err, int errcap);

/* NULL when the op has no reference kernel. */
RefKernel ref_kernel(OpKind k);

/* kernels by family (ref_conv.c, ref_pointwise.c, ref_layout.c, ref_attention.c, ref_loss.c, ref_optim.c) */
bool ref_conv2d(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_conv_transpose2d(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_conv2d_dgrad(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_conv2d_wgrad(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_bias_grad(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_batchnorm(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_batchnorm_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_bn_apply(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_activation(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_activation_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_add(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_channel_scale(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_channel_dot(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_concat(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_split(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_copy(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_zeros(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_resize_nearest(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_resize_nearest_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_maxpool2d(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_maxpool2d_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_avgpool2d(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_avgpool2d_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_zeropad2d(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_crop2d(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_dfl(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_dist2bbox(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_attention(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_attention_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_detect_loss(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_grad_clip(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_sgd_step(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_adamw_step(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool ref_detect_loss_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);

/* Nearest resize's source index for destination index i: floor(i * in /
 * out), as PyTorch's nearest mode computes it for integer ratios. */
int64_t ref_nearest_src(int64_t i, int64_t in, int64_t out);

/* Between a channels-last tensor as stored and a packed NCHW copy of it
 * (fp32): pack fills packed, else stored. The reference kernels read NCHW. */
void ref_channels_last_copy(const Tensor *x, float *stored, float *packed, bool pack);
/* The same in place: data, channels-last x as stored, becomes its NCHW
 * copy. False when out of memory (data unchanged). */
bool ref_channels_last_to_nchw(const Tensor *x, float *data);

#define REF_KERNEL(name) bool name(const Graph *g, const Op *op, void **buf, char *err, int errcap)
#define T(i) ((float *)buf[op->in[i]])
#define O(i) ((float *)buf[op->out[i]])
#define SH(t) (&g->tensors[t].shape)

#endif
