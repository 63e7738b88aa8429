/* runtime/cpu_conv.h — the fast fp32 CPU kernels the interpreter runs instead
 * of the reference ones when Interp.fast is set: convolutions (cpu_conv.c),
 * BatchNorm/activations (cpu_pointwise.c), max pooling and nearest resize
 * (cpu_pool.c), attention (cpu_attention.c). Must not change op semantics:
 * every kernel here matches its ref_kernels.h oracle up to fp32 rounding. */
#ifndef YOLOCC_CPU_CONV_H
#define YOLOCC_CPU_CONV_H
#include "ref_kernels.h"

/* A kernel of fewer than PARALLEL_MIN_MACS multiply-adds (~0.1 ms on one
 * core) runs on the calling thread alone: waking the team would cost more,
 * and on a loaded machine a sleeping worker stalls the whole op. */
enum { PARALLEL_MIN_MACS = 1 << 22 };

/* The fast kernel for an op, or NULL when only the reference one exists. */
RefKernel cpu_kernel(OpKind k);

/* Inside an OpenMP parallel region: this thread's scratch of `floats`
 * floats (NULL for none); on allocation failure NULL, and *ok (shared by
 * the team) set false. */
float *cpu_thread_scratch(int64_t floats, bool *ok);
/* The floats of cpu_thread_scratch each thread takes while op's fast
 * kernel runs (0 for none; convolutions count theirs in
 * cpu_conv_layout_scratch_bytes). */
int64_t cpu_op_thread_scratch_floats(const Graph *g, const Op *op);
int64_t cpu_attention_scratch_floats(const Graph *g, const Op *op);
int64_t cpu_maxpool_scratch_floats(const Graph *g, const Op *op);
/* Forward, dgrad, wgrad and transposed convs through oneDNN (its
 * primitives made once per shape; the bits do not depend on the thread
 * count: a weight gradient runs as tiles fixed by its shape, each a
 * single-threaded primitive on one of the OpenMP threads). Arbitrary
 * kernel, stride, padding, dilation, groups; out of memory is an error. */
bool cpu_conv2d(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_conv_transpose2d(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_conv2d_dgrad(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_conv2d_wgrad(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_bias_grad(const Graph *g, const Op *op, void **buf, char *err, int errcap);
/* y = act(conv(x, w) + b) for conv (an OP_CONV2D of g) with weights w and
 * bias b of its shapes (a BN folded in), into tensor out (conv's output
 * shape): x and out where buf puts them, each packed or a channel slice
 * of a wider NCHW tensor (a view of v); act an activation op kind
 * (OP_SILU, OP_RELU, OP_LEAKY_RELU with slope alpha, OP_HARDSWISH,
 * OP_GELU, OP_SIGMOID) or -1 for none, run as oneDNN's post-op. */
struct Views;
bool cpu_conv_forward_act(const Graph *g, const struct Views *v, const Op *conv, const float *w, const float *b, int act, float alpha, int out, void **buf,
                          char *err, int errcap);
/* Makes the oneDNN primitives of g's convolutions now (set-up, before step
 * 0), so that a shape it cannot run fails first and its scratch is known. */
bool cpu_conv_prepare(const Graph *g, char *err, int errcap);
/* The bytes of layout scratch the convolutions prepared or run so far hold
 * (kept for the process; one buffer per role, as large as the largest need,
 * and the same again for each thread that runs weight-gradient tiles, plus
 * their partial sums). */
int64_t cpu_conv_layout_scratch_bytes(void);
/* How many oneDNN primitives this process has made (one per shape, direction and thread count). */
int cpu_conv_primitives(void);

/* cpu_pointwise.c. The sums are in double like the oracle's, in lanes. */
double cpu_row_sum(const float *p, int64_t n);
double cpu_row_dot(const float *a, const float *b, int64_t n);
bool cpu_batchnorm(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_batchnorm_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_activation(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_activation_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);

/* cpu_pool.c: the same bits as the oracle's, planes on the OpenMP threads. */
bool cpu_maxpool2d(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_resize_nearest(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_maxpool2d_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_resize_nearest_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);

/* cpu_attention.c: sgemm tiles on the OpenMP threads, fp32 softmax. */
bool cpu_attention(const Graph *g, const Op *op, void **buf, char *err, int errcap);
bool cpu_attention_bwd(const Graph *g, const Op *op, void **buf, char *err, int errcap);

#endif
