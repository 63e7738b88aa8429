/* passes/optimizer.h — appends the optimizer step to a training graph:
 * gradient-norm clipping over all gradients, then one in-place update per
 * trainable parameter, with Ultralytics' three parameter groups. The trainer
 * feeds the per-group learning rates, momentum and step count as inputs. */
#ifndef YOLOCC_OPTIMIZER_H
#define YOLOCC_OPTIMIZER_H
#include "autodiff.h"

typedef enum { OPT_SGD, OPT_ADAMW } OptimKind;

typedef struct OptimSpec {
    OptimKind kind;
    double weight_decay;    /* group 1 only (already scaled by the trainer) */
    double max_norm;        /* 10 */
    bool nesterov;          /* SGD: Ultralytics uses Nesterov */
} OptimSpec;

typedef struct OptimGraph {
    int lrs, momentum, step;    /* inputs: lr per group [3], momentum / beta1 [1], step count t >= 1 [1] */
    int clip_coef, grad_norm;   /* outputs */
    int n_in_group[3];          /* trainable tensors per group */
} OptimGraph;

/* Group of a parameter: 0 if its name contains "bias", 2 if it is a
 * BatchNorm weight, else 1 (Ultralytics' build_optimizer). */
int optimizer_param_group(const Graph *g, int param);
bool optimizer_build(Graph *g, const TrainingGraph *tg, const OptimSpec *o, OptimGraph *og);
/* The next run of updates among ops [*o, hi) whose parameters (in[0]) are
 * not frozen (frozen may be NULL): false when none is left, else [*o, *end)
 * and the caller goes on from *o = *end. Runs, not single ops, so a
 * multi-tensor launch runs whole or in as few pieces as the frozen allow. */
bool optimizer_next_run(const Graph *g, const bool *frozen, int *o, int hi, int *end);

#endif
