/* runtime/cuda/cudnn_conv.h — convolutions of a plan through the cuDNN 9
 * backend (graph) API: forward, data gradient and weight gradient, one
 * execution plan per distinct shape key, built before the first step and
 * cached. Owns no plan memory (its workspace comes from cuda_device.h) and
 * must not include CUDA headers.
 *
 * Layout: the plan's (ir.h, Tensor.channels_last): NCHW with packed
 * strides, or under --layout nhwc NHWC activations and KRSC weights, what
 * tensor cores want (DESIGN decision 8); one convolution's x, w and y share it.
 * Data types follow the plan's storage (fp32, or bf16/fp16 activations and
 * compute copies of the weights); accumulation is fp32. fp32 plans refuse
 * engines that round inputs (TF32 tensor cores) or reduce in lower
 * precision, and every plan refuses nondeterministic engines. */
#ifndef YOLOCC_CUDNN_CONV_H
#define YOLOCC_CUDNN_CONV_H
#include "../../ir/ir.h"
#include "../../passes/memplan.h"
#include "dynload.h"

typedef enum { CONV_FWD, CONV_DGRAD, CONV_WGRAD } ConvDir;

/* Everything an execution plan depends on. Built by conv_key_from_op; two
 * convolutions with equal keys share one plan. */
typedef struct ConvKey {
    int dir;                        /* ConvDir */
    int accumulate;                 /* 1: the output is added to (beta = 1) */
    int x_type, w_type, y_type;     /* cuDNN data types of x/dx, w/dw, y/dy */
    int64_t n, ci, h, w;            /* x */
    int64_t co, ho, wo;             /* y */
    int64_t kh, kw, groups;
    int64_t stride[2], dilation[2], pre_pad[2], post_pad[2];    /* [h, w] */
    /* x (dx) and y (dy) as zero-copy views (passes/views.h): elements
     * between images (0: packed) and the byte alignment of their address */
    int64_t x_bs, y_bs, x_align, y_align;
    int64_t channels_last;          /* 1: x, w and y stored channels last */
} ConvKey;

/* Pure: the key of an OP_CONV2D / OP_CONV2D_DGRAD / OP_CONV2D_WGRAD op.
 * persistent: memplan_mark_persistent's marks (storage sizes follow them);
 * views: the plan's zero-copy views (NULL: every tensor packed).
 * False with a message for other ops or shapes cuDNN cannot take. */
bool conv_key_from_op(const Graph *g, const Op *op, Precision p, const bool *persistent, const Views *views, ConvKey *k, char *err, int errcap);
/* Pure: the bias step of a forward key with a bias: y += ones[N,1,Ho,Wo]
 * (*) bias[Co,1,1,1], a 1x1 convolution accumulating into y. */
ConvKey conv_bias_key(const ConvKey *fwd);
bool conv_key_equal(const ConvKey *a, const ConvKey *b);
/* Every field of k, in a fixed order (what the tuning cache's key hashes). */
enum { CONV_KEY_NFIELDS = 28 };
void conv_key_fields(const ConvKey *k, int64_t out[CONV_KEY_NFIELDS]);
uint64_t conv_key_hash(const ConvKey *k);
/* "forward x[2,16,32,32] w[32,16,3,3] y[2,32,32,32] stride 1x1 pad 1,1,1,1 dilation 1x1 groups 1 fp32" */
void conv_key_describe(const ConvKey *k, char *buf, int cap);

/* Engine configs kept per shape for timing (CudnnConv.candidates > 1): the
 * heuristics' first acceptable config, then later ones of the same list
 * that cuDNN need not compile at run time (a compile per candidate would
 * make opening a plan take minutes), that neither round their inputs down
 * nor reduce in lower precision (speed alone must not loosen the
 * arithmetic), and whose workspace stays within max(the first's,
 * CONV_TUNE_WORKSPACE). */
enum { CONV_TUNE_MAX = 4 };
#define CONV_TUNE_WORKSPACE ((int64_t)128 << 20)

typedef struct ConvPlan {
    ConvKey key;
    uint64_t hash;
    CudnnBackendDescriptor keep[6];     /* the operation graph's descriptors */
    /* execution plans of acceptable engine configs, in the heuristics'
     * order, with their configs and workspace; NULL once dropped by
     * cudnn_conv_settle. chosen: the one that runs. */
    CudnnBackendDescriptor cand[CONV_TUNE_MAX], cand_cfg[CONV_TUNE_MAX];
    int64_t cand_ws[CONV_TUNE_MAX];
    int64_t cand_engine[CONV_TUNE_MAX]; /* each one's engine (CUDNN_ATTR_ENGINE_GLOBAL_INDEX; -1: unknown) */
    int n_cand, chosen;
    /* a weight gradient into fp32 from bf16 / fp16 inputs that no engine
     * writes directly: the plan computes dw in the inputs' type into the
     * workspace's stage, and the caller widens it (ConvWiden) */
    bool staged;
} ConvPlan;

typedef struct CudnnConv {
    const CudaLibs *L;
    CudnnHandle h;
    CuStream stream;
    ConvPlan *plans;
    int n_plans, cap_plans;
    const Graph *g;                 /* the prepared graph */
    const Views *views;             /* and its zero-copy views */
    Precision precision;
    bool *persistent;
    int64_t ones_elems;             /* the bias steps' ones tensor: the largest N*Ho*Wo */
    /* engine configs cudnn_conv_prepare keeps per shape: 1 (0 reads as 1):
     * the heuristics' choice; up to CONV_TUNE_MAX: candidates to time
     * (cuda_step_tune.c); bias steps always keep 1 */
    int candidates;
    int64_t stage_bytes;            /* the largest staged weight gradient (0: none staged) */
    int staged_ops;                 /* convolutions of the prepared graph whose plan is staged */
    CuDevicePtr workspace;          /* bound: the ones tensor, the stage, then the plans' workspace */
    int64_t workspace_bytes;
} CudnnConv;

/* Loads NVRTC (13, else 12, where the machine has it) for the process:
 * cuDNN's heuristics open it and close it again on every query (about 15 ms
 * a load, hundreds of queries for a model), and each load allocates the
 * libstdc++ pool linked into it, never freed. cudnn_conv_open calls it. */
void cudnn_conv_keep_nvrtc(void);
/* A cuDNN handle on stream s. */
bool cudnn_conv_open(CudnnConv *cc, const CudaLibs *L, CuStream s, char *err, int errcap);
void cudnn_conv_close(CudnnConv *cc);
/* Builds the execution plans (cc->candidates per shape) of every
 * convolution of g (no device memory is allocated); afterwards
 * cudnn_conv_workspace_bytes says what to allocate. */
bool cudnn_conv_prepare(CudnnConv *cc, const Graph *g, const Views *views, Precision p, char *err, int errcap);
/* The workspace every execution plan still held may need: with candidates
 * kept, the largest of them; after cudnn_conv_settle, the chosen ones'. */
int64_t cudnn_conv_workspace_bytes(const CudnnConv *cc);
void cudnn_conv_bind(CudnnConv *cc, CuDevicePtr workspace, int64_t bytes);
/* The prepared plan of convolution op (NULL with a message when it has none). */
ConvPlan *cudnn_conv_plan_of(CudnnConv *cc, const Op *op, char *err, int errcap);
/* Destroys every candidate no plan uses: their descriptors, and the kernels
 * cuDNN loaded for them. */
void cudnn_conv_settle(CudnnConv *cc);
/* What a staged weight gradient leaves to the caller: n elements in the
 * inputs' type at src to widen into the op's fp32 output (n = 0: nothing). */
typedef struct ConvWiden {
    CuDevicePtr src;
    int64_t n;
} ConvWiden;

/* Runs convolution op of the prepared graph on the handle's stream. in: the
 * device addresses of op's inputs in op order (weights: their compute
 * copies); out: its output. *widen: what is left to do on the same stream
 * before out holds the result. */
bool cudnn_conv_run(CudnnConv *cc, const Op *op, const CuDevicePtr *in, CuDevicePtr out, ConvWiden *widen, char *err, int errcap);

#endif
