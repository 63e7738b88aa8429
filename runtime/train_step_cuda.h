/* runtime/train_step_cuda.h — the device half of TrainStep for CUDA plans:
 * opens the plan's CudaStep, keeps it.buf's host copies and the device in
 * step, and runs backward and update there. Called only by train_step.c;
 * must not touch the interpreter's kernels or the trainer. */
#ifndef YOLOCC_TRAIN_STEP_CUDA_H
#define YOLOCC_TRAIN_STEP_CUDA_H
#include "train_step.h"

/* True when the plan's META names the CUDA target. */
bool plan_targets_cuda(const Plan *p);

/* Host copies of what crosses to the device (inputs, outputs, gradients,
 * state), then the device step on ordinal LOCAL_RANK (0 without a launcher).
 * The state uploads before the first step (device_stale). */
bool train_step_cuda_open(TrainStep *ts, char *err, int errcap);
void train_step_cuda_close(TrainStep *ts);

/* Forward, loss and backward of the bound batch on the device. The
 * gradients stay there (dev_pending); a second batch before the update
 * first adds them to the host accumulators. */
bool train_step_cuda_backward(TrainStep *ts, StepResult *out, char *err, int errcap);
/* One batch, nothing frozen, one rank: the device's gradients are used as
 * they are. Otherwise the sums go through acc on the host (the reduce hook,
 * frozen gradients zeroed) and back up. Then unscale (fp16), clip and the
 * updates on the device; a step skipped for an inf/NaN gradient does not
 * count in ts->step (torch's GradScaler skips optimizer.step). */
bool train_step_cuda_update(TrainStep *ts, const double lr[3], double momentum, const bool *skip, double *grad_norm, char *err, int errcap);
bool train_step_cuda_sync_device(TrainStep *ts, char *err, int errcap);
/* Downloads what moved; with `optimizer` also the optimizer state, and a
 * pending batch's gradients join acc (what a checkpoint saves). */
bool train_step_cuda_sync_host(TrainStep *ts, bool optimizer, char *err, int errcap);

#endif
