/* runtime/cuda/cuda_step.h — a training plan's step on one GPU: device, memory, kernels (generated
 * and library), cuDNN plans, host <-> device transfers, op ranges run group by group (a counted
 * host fallback for library ops without a GPU route), fp16 dynamic loss scaling around the
 * optimizer, and CUDA-graph capture and replay of the runs between host ops. Knows no datasets
 * or schedules; no CUDA headers. */
#ifndef YOLOCC_CUDA_STEP_H
#define YOLOCC_CUDA_STEP_H
#include "conv_gemm.h"
#include "cuda_attention.h"
#include "cuda_convert.h"
#include "cuda_device.h"
#include "cuda_kernels.h"
#include "cudnn_conv.h"
#include "loss_scale.h"
#include "../step_profile.h"

/* Where a launch of the plan runs: its generated kernel, a library kernel
 * (compiler/lib_kernels.h), cuDNN, the detection loss's phase kernels
 * (cuda_detloss.h), the reference kernel on the host, or (attention, set up by
 * the step) cuBLASLt's products around small library kernels (cuda_attention.h). */
typedef enum { CUDA_ROUTE_KERNEL, CUDA_ROUTE_LIBRARY, CUDA_ROUTE_CUDNN, CUDA_ROUTE_DETLOSS, CUDA_ROUTE_HOST, CUDA_ROUTE_CUBLASLT } CudaRoute;
/* the number of routes (outside the enum, so switches over a route stay checked for every case) */
enum { CUDA_ROUTE_COUNT = CUDA_ROUTE_CUBLASLT + 1 };

/* Launches [lo, hi) of a run (positions in its launch list): a maximal run
 * that needs no host work (host false: captured as one CUDA graph), or one
 * host op (host true: run eagerly between graphs). */
typedef struct CudaSegment {
    int lo, hi;
    bool host;
} CudaSegment;

/* One captured CUDA graph: the launches first_launch .. first_launch + n - 1
 * of the program, after the gradients' unscale when `unscale`. */
typedef struct CudaGraphSeg {
    int first_launch, n;
    KRows first_rows, last_rows;    /* of its first and last launch: a multi-tensor launch a range cuts (frozen parameters) */
    bool unscale;
    CuGraph graph;
    CuGraphExec exec;
} CudaGraphSeg;

/* Work a caller puts between the launches of a run: dp_cuda.c enqueues a
 * gradient bucket's all-reduce on the side stream as soon as backward has
 * produced it. `after` runs once the last launch of an op o with at_op[o]
 * is enqueued on the main stream (eager, or its graph launched: graphs end
 * after such a launch, so `after` never runs inside a capture, and runs on
 * every replay), with done_through = cuda_step_ops_done of that launch
 * (once for a multi-tensor launch however many of its rows' ops are marked);
 * before_wait runs at the end of the run, before the host waits for the
 * main stream (make main wait for the side work, and watch it there, so a
 * stuck collective fails instead of hanging the wait). */
typedef struct CudaRunHook {
    const bool *at_op;  /* per op of the plan */
    bool (*after)(void *ctx, int done_through, char *err, int errcap);
    bool (*before_wait)(void *ctx, char *err, int errcap);
    void *ctx;
} CudaRunHook;

/* What cuda_step_train did. */
typedef struct CudaStepOutcome {
    float loss;         /* the plan's loss output (never scaled: the scale seeds the backward only) */
    float loss_scale;   /* the scale this step's backward ran with (1 unless fp16) */
    float next_scale;   /* the scale after this step's update of the loss-scale state */
    float grad_norm;    /* of the unscaled gradients; inf or NaN when the step was skipped */
    bool skipped;       /* the updates did not run: parameters and optimizer state are as before */
} CudaStepOutcome;

/* A 1x1 convolution of the step that cuBLASLt can compute as one product
 * (cuda_step_conv_gemm.c): the product, its descriptors and bound operand
 * addresses, and the time each route took when measured at open. */
typedef struct CudaConvGemmOp {
    int op;
    ConvGemm cg;
    CublasGemm lt;
    CuDevicePtr a, b, d;        /* the logical operands' addresses */
    bool out_persistent;        /* a weight gradient in the persistent gradient region */
    float ms_cudnn, ms_gemm;    /* per run as a CUDA graph replays it (YOLOCC_CUDA_CONV1X1=auto; else 0) */
    bool routed;                /* the step runs it through cuBLASLt */
} CudaConvGemmOp;

/* YOLOCC_CUDA_CONV1X1: auto (time both routes, keep the faster), cublaslt or cudnn (always) */
enum { CONV1X1_AUTO, CONV1X1_CUBLASLT, CONV1X1_CUDNN };

typedef struct CudaStep {
    const Plan *plan;
    CudaDevice dev;
    CudaKernels kern;
    CudnnConv conv;
    CudaMem mem;
    bool dev_open, kern_open, conv_open, mem_open;
    CuDevicePtr *ptr;           /* per tensor: its device address (0: internal to a fusion group) */
    unsigned char *stype;       /* per tensor: DType of its device storage (bf16/fp16 activations in low-precision plans) */
    bool *dirty;                /* per tensor: a parameter whose compute copy is older than its master */
    bool sync_each;             /* YOLOCC_CUDA_SYNC=1: synchronise after every launch, so a fault names its launch */
    /* YOLOCC_CUDA_LIB_HOST=1: ops with a library kernel (and the detection
     * loss) run on the host instead (the reference), to bisect a suspect one */
    bool lib_host;
    /* the plan's launches by route, per step (cuda_step_census) */
    int kernel_launches, lib_launches, cudnn_ops, loss_ops, host_ops, cublaslt_ops;
    int conv_gemm_ops;          /* of cublaslt_ops: the 1x1 convolutions */
    int host_op_kinds[OP_COUNT];
    /* since open */
    long host_ops_run;          /* library ops run on the host */
    long copy_refreshes;        /* parameter compute copies converted from their masters */
    /* training (cuda_step_train_init): the optimizer's clip op, the step's
     * inputs and outputs, and the loss scale (dynamic in fp16 plans, else 1) */
    bool train_bound;
    int clip_op, t_grad_seed, t_lr, t_momentum, t_opt_step, t_loss, t_grad_norm;
    LossScale ls;
    /* CUDA graphs (cuda_step_use_graphs): captured once per run of launches, then replayed */
    /* per tensor id: a parameter whose update op cuda_step_optimize skips (a
     * frozen layer); NULL: none. The caller owns the array. */
    const bool *frozen;
    /* the trainer's EMA of the fp32 parameters and buffers on the device
     * (cuda_ema.c): one allocation, per tensor its offset or -1 */
    CuDevicePtr ema;
    int64_t ema_bytes, *ema_off;
    /* host buffers pinned with cuda_step_pin (unpinned at close) */
    void *pinned[8];
    int n_pinned;
    bool use_graphs;
    CudaGraphSeg *graphs;
    int n_graphs, cap_graphs;
    long graph_replays;         /* graph launches since open */
    /* called around the launches of every run while set (TrainStep sets it
     * for the backward of a data-parallel step); NULL: none */
    const CudaRunHook *hook;
    long eager_host_ops;        /* host ops run between graphs since open */
    /* cuda_step_profile's events while it runs a step: before and after launch l at [2l] and [2l + 1],
     * and l's fusion group; NULL otherwise */
    struct CuEventSt **prof_ev;
    int *prof_group;
    struct CudaLossTiming *prof_loss;   /* per launch: the loss' phases (detection-loss launches only) */
    /* attention through cuBLASLt (cuda_step_attention.c): per op its index in att, or -1 */
    CudaAttOp *att;
    int n_att, *att_of_op;
    CublasLtHandle blas;
    int att_library;            /* attention ops left to their library kernels; att_why: the first one's reason */
    char att_why[200];
    /* 1x1 convolutions through cuBLASLt where faster (cuda_step_conv_gemm.c): per op its index in cgemm, or -1 */
    CudaConvGemmOp *cgemm;
    int n_cgemm, *cgemm_of_op;
    int conv1x1_mode;           /* CONV1X1_* */
    int cgemm_refused;          /* candidates cuBLASLt has no algorithm for; cgemm_why: the first one's reason */
    char cgemm_why[200];
    double conv_gemm_ms[2];     /* the measured candidates per step: all in cuDNN, and as routed */
    /* cuDNN's engines (cuda_step_tune.c): shapes with candidates to choose from, how many took the
     * choice from the tuning cache, how many run another engine than the heuristics' first; the
     * candidates that failed to run (tune_why: the first one's reason); why the choices could not be
     * stored; per step, the convolutions of the timed shapes as first chosen and as run */
    int tune_shapes, tune_cached, tune_changed, tune_failed;
    char tune_why[480], tune_store_why[200];
    double tune_ms[2];
} CudaStep;

/* Opens device `ordinal` for training plan p (compiled with --target cuda), or
 * for its validation plan (which has no optimizer: never cuda_step_train it):
 * loads the kernels for the device, builds every convolution's cuDNN plan,
 * checks arena + persistent + workspace against free memory, and only then
 * allocates them. p must outlive cs. On failure nothing stays open and err
 * holds one line. */
bool cuda_step_open(CudaStep *cs, const Plan *p, int ordinal, char *err, int errcap);
/* cuda_step_open, with other steps' memory used instead of new allocations
 * where lend allows it (cuda_mem_alloc; NULL: none): every lender must be
 * open on the same device and outlive cs, and the lenders of the arena and
 * the workspace must never run while cs runs (the trainer's validation steps
 * borrow from its training step). */
bool cuda_step_open_sharing(CudaStep *cs, const Plan *p, int ordinal, const CudaLend *lend, char *err, int errcap);
void cuda_step_close(CudaStep *cs);

/* Uploads every parameter, buffer and optimizer-state tensor t with
 * host[t] != NULL (host[t]: fp32, or int64 for DT_I64 tensors, as the CPU
 * interpreter holds them; indexed like Interp.buf) and refreshes the
 * parameters' low-precision compute copies. */
bool cuda_step_upload_state(CudaStep *cs, void *const *host, char *err, int errcap);
/* Uploads one plan input (images, boxes, counts, grad_seed, lr, momentum,
 * opt_step: see plan_meta_tensor) from fp32 / int64 host memory. */
bool cuda_step_set_input(CudaStep *cs, int tensor, const void *host, char *err, int errcap);
/* The images input `tensor` from a batch's pixels as bytes (host: as many
 * bytes as it has elements, [batch, 3, h, w]): copied into the workspace and
 * divided by 255 into its storage type on the device (the images_u8 library
 * kernel), equal to cuda_step_set_input of the loader's value / 255 and a
 * quarter of its traffic. Waits, so host may be refilled at once. */
bool cuda_step_set_images_u8(CudaStep *cs, int tensor, const uint8_t *host, char *err, int errcap);
/* Copies tensor t to host (fp32, or int64 for DT_I64), converting bf16/fp16
 * storage and packing a zero-copy view. Waits for the main stream first. */
bool cuda_step_download(CudaStep *cs, int tensor, void *host, char *err, int errcap);
/* cuda_step_download of n tensors (hosts[i] receives tensors[i]) with one
 * wait for all the packed fp32 / int64 ones: state and gradients come down
 * without a synchronisation per tensor. */
bool cuda_step_download_many(CudaStep *cs, int n, const int *tensors, void *const *hosts, char *err, int errcap);
/* Uploads any tensor with device memory (a gradient the host summed over
 * accumulated batches, say) from fp32 / int64 host memory; a parameter's
 * compute copy is refreshed by the next run. */
bool cuda_step_upload(CudaStep *cs, int tensor, const void *host, char *err, int errcap);
/* Tensor t's device bytes were written behind CudaStep's back (a collective):
 * a parameter's compute copy is refreshed by the next run or
 * cuda_step_refresh_copies. */
void cuda_step_master_changed(CudaStep *cs, int t);
/* Before a backward the caller runs itself (cuda_step_run(cs, 0, clip_op)):
 * binds the training step when needed and sets grad_seed to the loss scale. */
bool cuda_step_seed(CudaStep *cs, char *err, int errcap);
/* Runs ops [first_op, last_op) of the step on the main stream and waits for
 * them; the range must not cut a launch in two (as interp_run). Compute
 * copies of parameters the range updated are refreshed before it returns.
 * With cuda_step_use_graphs on, the range's runs between host ops (and
 * cs->hook's points) are replayed from graphs captured on their first run. */
bool cuda_step_run(CudaStep *cs, int first_op, int last_op, char *err, int errcap);
/* cuda_step_run after dividing every gradient (the clip op's inputs) by the
 * fp16 loss scale in grad_seed's device memory (in the first graph when
 * graphs are on). */
bool cuda_step_run_unscaled(CudaStep *cs, int first_op, int last_op, char *err, int errcap);
/* Converts every dirty parameter's fp32 master into its compute copy with the
 * plan's cast library kernel (a no-op in fp32 plans). cuda_step_upload_state and cuda_step_run call it. */
bool cuda_step_refresh_copies(CudaStep *cs, char *err, int errcap);
/* Binds the training step of cs's plan: the clip op (OP_GRAD_CLIP, followed
 * only by SGD / AdamW updates), the step's inputs and outputs from META, and
 * a fresh loss scale (65536 and dynamic for fp16 plans; disabled, 1,
 * otherwise). A resume may then overwrite cs->ls. cuda_step_train calls it
 * when it has not been called. */
bool cuda_step_train_init(CudaStep *cs, char *err, int errcap);
/* One optimizer step: cuda_step_bind_step, forward, loss and backward (ops
 * [0, clip_op)), then cuda_step_optimize. Inputs (images, boxes, counts) are
 * set before with cuda_step_set_input. */
bool cuda_step_train(CudaStep *cs, const float lr[3], float momentum, float step_no, CudaStepOutcome *out, char *err, int errcap);
/* Its parts. bind_step uploads lr, momentum, opt_step = step_no and
 * grad_seed = the loss scale (binding the step first when needed).
 * optimize, after the backward: in fp16 plans divides every gradient by the
 * scale on the device; runs the clip; reads the gradient norm and the loss;
 * updates the loss scale with whether the norm is finite (cuda_step_decide)
 * and runs the updates [clip_op + 1, n_ops) only when the step is applied. A
 * skipped step leaves parameters, optimizer state and compute copies
 * untouched (BN running statistics, updated by the forward, do move, as in
 * PyTorch's skipped AMP steps). */
bool cuda_step_bind_step(CudaStep *cs, const float lr[3], float momentum, float step_no, char *err, int errcap);
bool cuda_step_optimize(CudaStep *cs, CudaStepOutcome *out, char *err, int errcap);
/* Turns CUDA-graph replay on or off for every later run: each run of
 * launches between host ops is captured once on the main stream (thread-local
 * capture mode: a synchronising or allocating call inside it fails the
 * capture instead of passing silently) and replayed with cuGraphLaunch; the
 * host ops run eagerly between. Refused (false, err) with YOLOCC_CUDA_SYNC,
 * whose per-launch synchronisation cannot be captured. Graphs capture device
 * addresses, which never move while cs is open. */
bool cuda_step_use_graphs(CudaStep *cs, bool on, char *err, int errcap);
/* Pins host memory [host, host + bytes) for DMA (cuMemHostRegister), so
 * uploads from it run at the bus's speed; unpinned by cuda_step_close. At
 * most 8 buffers. */
bool cuda_step_pin(CudaStep *cs, void *host, size_t bytes, char *err, int errcap);
/* Whether runs should replay CUDA graphs: yes unless YOLOCC_CUDA_GRAPHS=0
 * or YOLOCC_CUDA_SYNC (whose per-launch synchronisation cannot be captured). */
bool cuda_step_graphs_wanted(const CudaStep *cs);
/* The workspace the step needs (before rounding): the largest of cuDNN's
 * plans' workspace, the detection loss's scratch and the library kernels'
 * scratch, which take turns on the main stream. Needs the kernels and the
 * cuDNN plans (cuda_step_open computes it before allocating). */
int64_t cuda_step_workspace_need(const CudaStep *cs);
/* Bytes CudaStep allocated for the plan: arena + persistent + workspace + the EMA, less what a lender lent. */
int64_t cuda_step_device_bytes(const CudaStep *cs);

/* ---- the EMA on the device (cuda_ema.c) ---- */

/* Allocates a device copy of every fp32 parameter and buffer (the model's
 * EMA, training-semantics §6), after checking it fits the free memory; its
 * bytes count in cuda_step_device_bytes. */
bool cuda_step_ema_open(CudaStep *cs, char *err, int errcap);
/* ema = ema * d + e * model for every copy, on the main stream (no wait). */
bool cuda_step_ema_update(CudaStep *cs, float d, float e, char *err, int errcap);
/* host[t] (fp32, indexed by tensor id) to and from the copies; both wait. */
bool cuda_step_ema_upload(CudaStep *cs, void *const *host, char *err, int errcap);
bool cuda_step_ema_download(CudaStep *cs, void *const *host, char *err, int errcap);

/* ---- pure: no GPU ---- */

/* After the clip: updates ls with whether grad_norm is finite
 * (loss_scale_update) and gives the updates to run, [clip_op + 1, n_ops) when
 * the step is applied and the empty [n_ops, n_ops) when it is skipped.
 * Returns whether it is applied. */
bool cuda_step_decide(LossScale *ls, float grad_norm, int clip_op, int n_ops, int *update_lo, int *update_hi);
/* Splits a run of n launches with routes routes[0..n) into segments in order:
 * maximal runs of non-host launches that end early after a launch i with
 * cut_after[i] (a CudaRunHook's point; cut_after may be NULL), and each host
 * launch alone. Writes at most n segments to seg and returns how many. */
int cuda_graph_segments(const CudaRoute *routes, const bool *cut_after, int n, CudaSegment *seg);

/* The last op all of whose launches are enqueued once launch l is (launches
 * run in op order; an op may have several, a reduction's passes): l's last
 * op, unless the next launch still works on it. */
int cuda_step_ops_done(const KProgram *kp, int l);
/* "%12 (name)", or "%12 (output of op 3, conv2d)": tensor t for messages. */
void cuda_step_tensor_label(const Graph *g, int t, char *buf, size_t cap);

/* ---- routes (cuda_routes.c; pure) ---- */

/* The route of launch ln of graph g. */
CudaRoute cuda_step_route(const Graph *g, const KLaunch *ln);
/* The route cs takes: library-kernel and loss ops go to the host under cs->lib_host;
 * attention ops cs set up for cuBLASLt take it. */
CudaRoute cuda_step_route_for(const CudaStep *cs, const Graph *g, const KLaunch *ln);
/* What a route runs, for people: "generated kernels", "cuDNN", ... */
const char *cuda_route_name(CudaRoute r);
/* Fills cs's route counts (kernel_launches, lib_launches, cudnn_ops,
 * loss_ops, host_ops, cublaslt_ops, host_op_kinds) from a lowered program, library and
 * loss ops counted on the host when cs->lib_host; nothing else of cs is
 * touched. */
void cuda_step_census(CudaStep *cs, const Graph *g, const KProgram *kp);
/* One line for yolort: "12 library ops run on the host each step:
 * maxpool2d x3, resize_nearest x3, ..." (kinds by count, then op order), or
 * that none does; then how many weight gradients cuDNN computed in bf16 /
 * fp16 to be widened (cudnn_conv.h), if any; then attention through
 * cuBLASLt, and why any attention op kept its library kernels. */
void cuda_step_describe(const CudaStep *cs, char *buf, int cap);

/* Where one step's device time goes: the step run once more, eagerly, with
 * events around every launch (cuda_profile.c), into p (step_profile.h: rows
 * by route and op or fusion pattern, heaviest first; the loss' phases as
 * rows of their own); the step's state moves as a step moves it. */
bool cuda_step_profile(CudaStep *cs, StepProfile *p, char *err, int errcap);

/* ---- attention through cuBLASLt (cuda_step_attention.c) ---- */

/* Builds the work list of every attention library launch (unless
 * YOLOCC_CUDA_ATTENTION=library or cs->lib_host) after the kernels are open;
 * ops cuBLASLt cannot take are counted in att_library. False only when out of memory. */
bool cuda_step_attention_open(CudaStep *cs, char *err, int errcap);
/* Workspace bytes the routed ops need: scratch plus cuBLASLt's. */
int64_t cuda_step_attention_workspace(const CudaStep *cs);
/* Once the memory is bound: the cuBLASLt handle and each op's algorithms (an op without one keeps its library kernels). */
bool cuda_step_attention_prepare(CudaStep *cs, char *err, int errcap);
bool cuda_step_attention_routed(const CudaStep *cs, int op);
bool cuda_step_attention_run(CudaStep *cs, int op, char *err, int errcap);
void cuda_step_attention_close(CudaStep *cs);
/* The step's cuBLASLt handle, created on first need (closed by cuda_step_attention_close). */
bool cuda_step_blas_open(CudaStep *cs, char *err, int errcap);

/* ---- 1x1 convolutions through cuBLASLt (cuda_step_conv_gemm.c) ---- */

/* After cuDNN's plans: the step's 1x1 convolutions without a bias that are one product
 * (unless YOLOCC_CUDA_CONV1X1=cudnn); false on an unknown knob value or out of memory. */
bool cuda_step_conv_gemm_open(CudaStep *cs, char *err, int errcap);
/* Workspace bytes the candidates need (cuBLASLt's). */
int64_t cuda_step_conv_gemm_workspace(const CudaStep *cs);
/* Once the memory is bound: each candidate's algorithm for its addresses, then (auto) both
 * routes timed and the faster kept; under cublaslt every candidate with an algorithm is routed. */
bool cuda_step_conv_gemm_prepare(CudaStep *cs, char *err, int errcap);
bool cuda_step_conv_gemm_routed(const CudaStep *cs, int op);
bool cuda_step_conv_gemm_run(CudaStep *cs, int op, char *err, int errcap);
void cuda_step_conv_gemm_close(CudaStep *cs);
/* Convolution op through cuDNN with its output at out (its widening included): the step's
 * route for it, and the baseline the 1x1 products are timed against. */
bool cuda_step_run_conv(CudaStep *cs, const Op *op, CuDevicePtr out, char *err, int errcap);

/* ---- cuDNN's engine per shape (cuda_step_tune.c) ---- */

/* Pure: YOLOCC_CUDNN_TUNE's value v (NULL or "": time) as the candidates per shape
 * cudnn_conv_prepare keeps: time CONV_TUNE_MAX, heuristic 1; false on anything else. */
bool cudnn_tune_knob(const char *v, int *candidates, char *err, int errcap);
/* Pure: which of n timed candidates to run (ms[i] < 0: failed to run): the fastest, but the
 * heuristics' first (0) unless another beats it by 3%; -1 when none ran. */
int cudnn_tune_pick(const float *ms, int n);
/* Pure: the tuning cache's entry (text: a version line, "rank R of N", "ms" and the N times);
 * its length, or -1 when cap is too small. parse: false for anything but a well-formed entry
 * of n candidates whose chosen one ran. */
int cudnn_tune_entry_format(char *buf, int cap, int rank, int n, const float *ms);
bool cudnn_tune_entry_parse(const char *buf, size_t len, int n, int *rank, float *ms);
/* Once the memory is bound, before anything else is set up on the workspace: each shape with
 * candidates takes its engine from the tuning cache, or times them on its first convolution
 * (weight gradients into scratch) and stores the choice; every shape's engine then has run once
 * outside any capture, and the other candidates are dropped (cudnn_conv_workspace_bytes shrinks
 * to what the chosen ones need). A candidate that fails to run is skipped and counted, unless
 * it left the device unusable; a shape none of whose candidates ran is an error. */
bool cuda_step_cudnn_tune(CudaStep *cs, char *err, int errcap);

#endif
