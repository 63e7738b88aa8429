/* passes/autodiff.h — turns a training-mode forward graph into the training
 * graph: detection loss on the head outputs, then the backward pass built
 * from each op's gradient rule (fan-out gradients summed). The optimizer
 * update is appended by optimizer.c. Knows no kernels. */
#ifndef YOLOCC_AUTODIFF_H
#define YOLOCC_AUTODIFF_H
#include "../ir/ir.h"

/* What backward may recompute instead of keeping from forward:
 * RECOMPUTE_NONE keeps every forward tensor a gradient rule reads;
 * RECOMPUTE_POINTWISE keeps conv outputs and BN statistics and recomputes
 * BN-apply, activations, adds and layout ops (concat, split, upsample, ...)
 * right before backward needs them (DESIGN decision 6). */
typedef enum { RECOMPUTE_NONE, RECOMPUTE_POINTWISE } RecomputePolicy;

/* Ops whose outputs pointwise recompute re-emits in backward: BN (its
 * output; statistics are kept), activations, adds, layout ops. */
bool autodiff_recomputable(OpKind k);

typedef struct LossSpec {
    int nc, reg_max, max_boxes;
    int nlevels;
    double strides[IR_MAX_LEVELS];
    int topk;
    /* v10Detect (end-to-end): the head's outputs are its one2many levels,
     * then its one2one levels; the loss is the one2many loss at topk plus
     * the one2one loss at topk 1 (Ultralytics' E2EDetectLoss), items summed */
    bool end2end;
    double gains[3];        /* box, cls, dfl */
    RecomputePolicy recompute;
    /* with RECOMPUTE_POINTWISE: forward tensors (by id) that backward also
     * recomputes although a conv produced them (a memory budget asked for
     * it); NULL for none */
    const bool *recompute_conv;
    /* with RECOMPUTE_POINTWISE: make pointwise twins again for each gradient
     * rule that reads them instead of sharing one across the backward in
     * between: fewer bytes live, more moved (a memory budget asks for it) */
    bool twins_per_rule;
} LossSpec;

typedef struct TrainingGraph {
    int images, boxes, counts, grad_seed;   /* inputs */
    int loss, items;                        /* total (what backward starts from) and logged items */
    int levels[2 * IR_MAX_LEVELS];          /* the head levels the losses read (end2end: one2many, then one2one) */
    int n_levels;
    int n_forward_ops;                      /* ops before the loss */
    int *grad_of;                           /* per tensor id: its gradient tensor, or -1 */
    int n_grad_of;
    int n_recompute_ops;                    /* ops backward added to recompute forward tensors */
    double recompute_flops;
} TrainingGraph;

/* The head levels the loss reads: nlevels, twice that for an end2end head. */
int loss_spec_levels(const LossSpec *ls);

/* Appends the inputs boxes [B, max_boxes, 5] (cls, cx, cy, w, h normalised)
 * and counts [B] and the detect loss on the given head levels (end2end:
 * 2 x nlevels of them, and two losses added); fills
 * images, boxes, counts, loss, items and n_forward_ops of tg, and marks loss
 * and items as graph outputs, so that the memory plan keeps them to the end.
 * Used alone by the validation graph, whose losses need no backward. */
bool loss_build(Graph *g, const LossSpec *ls, const int *levels, TrainingGraph *tg);

/* g: forward graph in training mode whose outputs are the head levels
 * (end2end: one2many, then one2one).
 * The levels stop being graph outputs (tg->levels names them), so the
 * memory plan frees them after the loss's backward. Adds inputs boxes [B, max_boxes, 5] (cls, cx, cy, w, h normalised),
 * counts [B] and grad_seed [1] (1, or the fp16 loss scale). */
bool autodiff_build(Graph *g, const LossSpec *ls, TrainingGraph *tg);

#endif
