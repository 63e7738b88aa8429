/* runtime/detloss.h — the reference (oracle) detection loss: Ultralytics'
 * v8DetectionLoss forward and backward with its TaskAlignedAssigner, in double.
 * Owns only this loss; knows nothing of graphs, plans or kernels. */
#ifndef YOLOCC_DETLOSS_H
#define YOLOCC_DETLOSS_H
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#define DETLOSS_MAX_LEVELS 8
#define DETLOSS_MAX_REG_MAX 64

typedef struct DetLossConfig {
    int nc, reg_max /* 16 */, nl;
    int level_h[DETLOSS_MAX_LEVELS], level_w[DETLOSS_MAX_LEVELS];
    float stride[DETLOSS_MAX_LEVELS];
    int topk;          /* 10 */
    float alpha, beta; /* 0.5, 6.0 */
    float gain_box, gain_cls, gain_dfl; /* 7.5, 0.5, 1.5 */
} DetLossConfig;

typedef struct DetTargets {
    int batch;
    int max_boxes;
    const int *count;   /* [batch] */
    const float *boxes; /* [batch][max_boxes][5] = cls, cx, cy, w, h (normalised to the image) */
} DetTargets;

typedef struct DetLossResult {
    double box, cls, dfl; /* items as Ultralytics logs them: gain * term */
    double total;         /* what the trainer backpropagates: batch * (box + cls + dfl) */
    int n_fg;             /* foreground anchors over the batch */
    double score_sum;     /* sum of target scores before max(., 1), the loss normaliser */
} DetLossResult;

/* Fills the Ultralytics defaults (reg_max 16, topk 10, alpha 0.5, beta 6,
 * gains 7.5/0.5/1.5) for nl levels of the given sizes and strides. */
void detloss_config_default(DetLossConfig *cfg, int nc, int nl, const int *level_h, const int *level_w, const float *stride);

/* levels[i]: head output of level i, NCHW float [batch][4*reg_max + nc][H_i][W_i]
 * (the PyTorch training-mode Detect output). grads (optional, same layout, may
 * be NULL): d total / d levels, overwritten. out may be NULL when grads are
 * wanted alone (the values' logarithms are then skipped). Returns false with
 * err on a bad config or bad targets (e.g. a class id out of range). Runs on
 * the OpenMP team; its bits do not depend on the thread count. */
bool detloss_forward_backward(const DetLossConfig *cfg, const float *const *levels, const DetTargets *t, DetLossResult *out,
                              float *const *grads, char *err, int errcap);

/* ---- building blocks, exposed so that faster paths can be checked piece by piece ---- */

/* The assigner's output. Everything here is a constant for the gradient. */
typedef struct DetAssignment {
    int batch, anchors;
    unsigned char *fg; /* [batch][anchors] 1 = foreground */
    int *gt_index;     /* [batch][anchors] assigned GT row (0 for background, as upstream) */
    int *label;        /* [batch][anchors] class of that row */
    double *score;     /* [batch][anchors] soft target t(a); 0 for background */
    double *box;       /* [batch][anchors][4] that row's box, xyxy pixels */
    double score_sum;  /* sum of t over the batch (before max(., 1)) */
    int n_fg;
} DetAssignment;

/* TaskAlignedAssigner on detached predictions. Allocates out's arrays. */
bool detloss_assign(const DetLossConfig *cfg, const float *const *levels, const DetTargets *t, DetAssignment *out, char *err,
                    int errcap);
void detloss_assignment_free(DetAssignment *as);

/* The loss and its gradient for a fixed assignment (cfg as given to
 * detloss_assign). With the assignment frozen the loss is smooth almost
 * everywhere, which is what finite differences can check. */
void detloss_loss_assigned(const DetLossConfig *cfg, const float *const *levels, const DetAssignment *as, DetLossResult *out,
                           float *const *grads);

/* Same, with CIoU's alpha (a no-grad constant upstream) made explicit, per
 * [batch][anchors] (foreground entries only): alpha_in, when not NULL, is used
 * instead of recomputing it; alpha_out, when not NULL, receives the values
 * used. Freezing alpha lets finite differences see the gradient upstream takes. */
void detloss_loss_assigned_ex(const DetLossConfig *cfg, const float *const *levels, const DetAssignment *as, const double *alpha_in,
                              double *alpha_out, DetLossResult *out, float *const *grads);

/* Validates cfg, levels and targets; the error names the offending field. */
bool detloss_check(const DetLossConfig *cfg, const float *const *levels, const DetTargets *t, char *err, int errcap);
/* Targets over a plan's tensors, whose counts are int64: each checked
 * within 0..max_boxes (the error names the image) into *counts (malloc'd,
 * the caller frees it), which t then points at. */
bool detloss_targets_from_i64(int batch, int max_boxes, const int64_t *counts64, const float *boxes, DetTargets *t, int **counts, char *err, int errcap);
/* Its targets half (counts within 0..max_boxes, finite rows, whole class ids
 * in 0..nc-1): the CUDA step checks a batch with it before the device loss,
 * which would only turn a bad row into NaN. */
bool detloss_check_targets(const DetTargets *t, int nc, char *err, int errcap);

/* CIoU of xyxy boxes (Ultralytics bbox_iou, eps 1e-7, alpha constant);
 * grad_box1 (may be NULL) receives d CIoU / d box1. */
double detloss_ciou(const double box1[4], const double box2[4], double grad_box1[4]);
/* Same; fixed_alpha (may be NULL) replaces the computed alpha, alpha_used
 * (may be NULL) receives the alpha that was used. */
double detloss_ciou_alpha(const double box1[4], const double box2[4], const double *fixed_alpha, double *alpha_used,
                          double grad_box1[4]);

/* DFL target split: the distance is clamped to [0, reg_max - 1.01], then
 * bins lo and lo + 1 get weights w_lo = lo + 1 - D and w_hi = 1 - w_lo. */
typedef struct DflSplit {
    double distance; /* after clamping */
    int lo;
    double w_lo, w_hi;
} DflSplit;
DflSplit detloss_dfl_split(double distance, int reg_max);

/* Where anchor a of image b lives in the head outputs. */
typedef struct DetAnchorRef {
    int level;
    size_t base;    /* index of channel 0 of this cell in levels[level] (and grads[level]) */
    size_t step;    /* distance between channels: H * W of the level */
    double x, y;    /* cell centre in grid units of its level */
    double stride;
} DetAnchorRef;

typedef struct DetHead {
    const DetLossConfig *cfg;
    int channels, anchors;
    int offset[DETLOSS_MAX_LEVELS + 1]; /* first anchor of each level; offset[nl] = anchors */
} DetHead;

void detloss_head_init(DetHead *head, const DetLossConfig *cfg);
DetAnchorRef detloss_anchor(const DetHead *head, int b, int a);

/* Softmax expectation of one side's reg_max logits (logit[j * step]); prob
 * (may be NULL) receives the softmax. reg_max 1 means no DFL: the logit is
 * the distance. */
double detloss_side_distance(const float *logit, size_t step, int reg_max, double *prob);

#endif
