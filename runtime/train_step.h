/* runtime/train_step.h — one training step of a plan on the reference
 * interpreter: binds the plan's inputs (images, targets, learning rates,
 * momentum, step count), runs every op, returns the loss. Knows nothing of
 * datasets or schedules; the caller feeds batches and hyper-parameters. */
#ifndef YOLOCC_TRAIN_STEP_H
#define YOLOCC_TRAIN_STEP_H
#include "interp.h"
#include "plan_read.h"

typedef struct TrainStep {
    Plan *plan;
    Interp it;
    int images, boxes, counts, grad_seed, lrs, momentum, opt_step;
    int loss, items, grad_norm;
    int batch, imgsz, max_boxes, nc;
    long step;          /* optimizer steps taken */
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
bool train_step_run(TrainStep *ts, const double lr[3], double momentum, StepResult *out, char *err, int errcap);
void train_step_free(TrainStep *ts);

#endif
