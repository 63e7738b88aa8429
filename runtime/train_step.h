/* runtime/train_step.h — one training step of a plan: binds the plan's inputs
 * (images, targets, learning rates, momentum, step count), runs every op,
 * returns the loss. CPU plans run on the interpreter; CUDA plans on a GPU
 * (train_step_cuda.c), with the same host-side view of state and inputs.
 * Knows nothing of datasets or schedules; the caller feeds batches and
 * hyper-parameters. */
#ifndef YOLOCC_TRAIN_STEP_H
#define YOLOCC_TRAIN_STEP_H
#include "gen_cpu.h"
#include "interp.h"
#include "plan_read.h"

struct CudaStep;
struct CudaRunHook;

typedef struct TrainStep {
    Plan *plan;
    Interp it;
    GenCpu gen;         /* the plan's generated CPU kernels, when it carries them */
    bool has_gen;
    int images, boxes, counts, grad_seed, lrs, momentum, opt_step;
    int loss, items, grad_norm;
    int batch, imgsz, max_boxes, nc;
    long step;          /* optimizer steps taken */
    /* gradient accumulation over batches (training-semantics §5.4) */
    int clip_op;        /* the first optimizer op (grad_clip); its inputs are the gradients */
    float **acc;        /* per gradient (in clip-op input order): the running sum, or NULL */
    int *grad_param;    /* per gradient: the parameter its update steps (updates run group by group, not in this order) */
    int n_acc_batches;  /* batches summed into acc since the last update */
    /* data parallelism (runtime/dist/dp_train.c), NULL for one process:
     * train_step_update calls it on acc before anything else; it must leave
     * every rank holding the same sums */
    bool (*reduce_grads)(void *ctx, struct TrainStep *ts, char *err, int errcap);
    void *reduce_ctx;
    /* CUDA plans on several ranks: work put between the backward's launches
     * (dp_cuda.c: each gradient bucket summed over the ranks in device memory
     * as soon as backward has produced it); NULL for one process */
    const struct CudaRunHook *backward_hook;
    /* a CUDA plan's device step, else NULL. it.buf then holds host copies of
     * the inputs, outputs, gradients and state only (no arena); the device
     * holds the state that counts, and the flags say which side is newer */
    struct CudaStep *cuda;
    bool device_stale;  /* the host's state changed (init, load, resume, broadcast): upload before the next step */
    bool host_stale;    /* the device's parameters or buffers moved (updates, BN statistics): download before reading them */
    bool optim_stale;   /* the device's optimizer state moved */
    bool dev_pending;   /* the device's gradients hold a batch that acc does not */
    long skipped_steps; /* fp16: updates skipped for an inf/NaN gradient */
    const uint8_t *images_u8;   /* train_step_use_bytes: the next backward's pixels as bytes (borrowed), or NULL */
} TrainStep;

typedef struct StepResult {
    double box, cls, dfl;   /* Ultralytics' logged items */
    double total;           /* batch * (box + cls + dfl): what backward starts from */
    double grad_norm;
} StepResult;

/* Binds the plan; all state is zero until weights are initialised or loaded. */
bool train_step_init(TrainStep *ts, Plan *plan, char *err, int errcap);
float *train_step_images(TrainStep *ts);    /* [batch, ch, imgsz, imgsz], 0..1 */
float *train_step_boxes(TrainStep *ts);     /* [batch, max_boxes, 5]: cls, cx, cy, w, h (normalised) */
int64_t *train_step_counts(TrainStep *ts);  /* [batch] */
/* Whether the step takes a batch's pixels as bytes (a CUDA plan with the
 * images_u8 kernel); err says why not. */
bool train_step_takes_bytes(const TrainStep *ts, char *err, int errcap);
/* The backwards from now on upload bytes ([batch, 3, imgsz, imgsz], read
 * when the backward runs, so it must stay valid until then) instead of
 * train_step_images, and the device divides them by 255: a quarter of the
 * traffic and no conversion on the host (pin them with cuda_step_pin on
 * ts->cuda for the bus's speed). NULL: floats again. Needs
 * train_step_takes_bytes. */
void train_step_use_bytes(TrainStep *ts, const uint8_t *bytes);

/* fast (the default): run the plan's generated kernels when it carries them,
 * and the fast CPU library kernels (cpu_conv.h) where they exist; false: the
 * reference oracle op by op. Returns the previous setting. */
bool train_step_set_fast(TrainStep *ts, bool fast);
bool train_step_run(TrainStep *ts, const double lr[3], double momentum, StepResult *out, char *err, int errcap);

/* The step in two halves, for gradient accumulation and freezing:
 * train_step_backward runs forward, loss and backward of the bound batch and
 * adds its gradients to the accumulators; train_step_update sums what was
 * accumulated, clips, updates every parameter whose op is not skipped
 * (skip[param tensor id] true: frozen, its gradient is zeroed first and its
 * optimizer op not run; skip may be NULL), and clears the accumulators. */
bool train_step_backward(TrainStep *ts, StepResult *out, char *err, int errcap);
bool train_step_update(TrainStep *ts, const double lr[3], double momentum, const bool *skip, double *grad_norm, char *err, int errcap);
/* CUDA plans (no-ops for CPU plans): sync_host makes it.buf's parameters and
 * buffers (and, when `optimizer`, the optimizer state and acc, which then
 * holds every accumulated batch) current before the caller reads them (EMA,
 * checkpoints, hashes); host_changed says the caller wrote
 * them (weights, resume, a broadcast), so the next step uploads them first. */
bool train_step_sync_host(TrainStep *ts, bool optimizer, char *err, int errcap);
void train_step_host_changed(TrainStep *ts);
/* Uploads the host's state now if it changed (else nothing). */
bool train_step_sync_device(TrainStep *ts, char *err, int errcap);
/* Device memory the step holds (bytes), or 0 for a CPU plan. */
int64_t train_step_device_bytes(const TrainStep *ts);
/* The host bytes the step holds: its interpreter's tensors and arena, and
 * the gradient accumulators. */
int64_t train_step_host_bytes(const TrainStep *ts);
/* The gradient tensors (inputs of the clip op) and their count. */
const int *train_step_grads(const TrainStep *ts, int *n);
void train_step_free(TrainStep *ts);

#endif
