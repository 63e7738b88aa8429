/* runtime/train/metrics.h — validation metrics as Ultralytics 8.3.63 computes
 * them: NMS, box mapping back through the letterbox, §8.3 matching, AP / mAP /
 * P / R / fitness and the validation table. Owns runtime/train/metrics.{h,c};
 * it runs no model and reads no dataset (callers bring outputs and labels). */
#ifndef YOLOCC_METRICS_H
#define YOLOCC_METRICS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define METRICS_NIOU 10            /* IoU thresholds 0.50:0.05:0.95 */
#define NMS_MAX_CANDIDATES 30000   /* max_nms */
#define METRICS_NCURVE 1000        /* points of the curves: px = linspace(0, 1, 1000) */
#define NMS_CLASS_OFFSET 7680.0f   /* max_wh: per-class offset of boxes */

typedef struct Detection {
    float x1, y1, x2, y2, score;
    int cls;
} Detection;

/* Ultralytics' non_max_suppression settings: multi_label true (validation)
 * makes a candidate of every class above conf, false (prediction) of each
 * anchor's best class only; agnostic suppresses across classes; classes,
 * when not NULL, flags (one byte per class) the classes kept, applied to the
 * candidates before NMS as Ultralytics' `classes` argument is. */
typedef struct NmsOptions {
    double conf, iou;
    int max_det;
    bool multi_label, agnostic;
    const unsigned char *classes;
} NmsOptions;

/* Validation's settings: conf 0.001, IoU 0.7, 300 detections, multi-label. */
#define NMS_VALIDATION ((NmsOptions){.conf = 0.001, .iou = 0.7, .max_det = 300, .multi_label = true})

/* non_max_suppression for one image. pred is the eval-mode head output of
 * that image, channel-major [4 + nc][n_anchors]: rows 0..3 cx, cy, w, h
 * (network pixels), rows 4.. the sigmoided class scores. Writes at most
 * max_det detections to out, sorted by score descending; equal scores keep
 * candidate order (anchor, then class), which is what the stable sorts of
 * torchvision's CPU NMS produce. conf and iou are double because that is
 * how Ultralytics passes them: conf is compared in float32 (score >
 * (float)conf), IoU in double (ovr > iou), as torchvision's CPU kernel does
 * (its CUDA kernel compares with a float). Returns the number kept, or -1 on
 * bad arguments or allocation failure. */
int nms_image(const float *pred, int n_anchors, int nc, const NmsOptions *o, Detection *out);

/* Anchor a's best class score in pred ([4 + nc][n_anchors], as nms_image
 * reads it); NaN if any of its scores is NaN (torch.amax), so that NMS never
 * makes it a candidate. */
float anchor_best_score(const float *pred, size_t n_anchors, int nc, size_t a);

/* An end-to-end head's detections for one image, without NMS (v10Detect's
 * postprocess, then non_max_suppression's end-to-end branch). pred as for
 * nms_image, but rows 0..3 are x1, y1, x2, y2 (the one2one boxes decoded as
 * xyxy). The min(max_det, n_anchors) anchors of highest best-class score,
 * then the min(max_det, n_anchors) highest (anchor, class) scores among
 * those, then the ones above conf (float32, as nms_image). Equal scores keep
 * the lower index (torch.topk leaves their order unspecified). Sorted by
 * score descending. Returns the number written, or -1 on bad arguments or
 * allocation failure. */
int e2e_image(const float *pred, int n_anchors, int nc, double conf, int max_det, Detection *out);

/* Network pixels -> original image pixels (ops.scale_boxes with ratio_pad,
 * CPU float32 arithmetic): (v - pad) / ratio, then x clipped to [0, orig_w]
 * and y to [0, orig_h]. box is x1, y1, x2, y2. ratio is Ultralytics' gain
 * ratio_pad[0][0]; pad_x, pad_y the letterbox's left and top padding. (On
 * CUDA torch divides by multiplying with 1/ratio: up to 1 ulp apart.) */
void metrics_box_to_original(float box[4], float ratio, float pad_x, float pad_y,
                             int orig_w, int orig_h);
void metrics_dets_to_original(Detection *dets, int n, float ratio, float pad_x,
                              float pad_y, int orig_w, int orig_h);

/* box_iou of one label (xyxy) and one detection, float32 with eps 1e-7. */
float metrics_box_iou(const float gt[4], const Detection *d);

/* Point i of the curves' grid px = np.linspace(0, 1, METRICS_NCURVE). */
double metrics_px(int i);

/* The ten thresholds as float32 torch.linspace(0.5, 0.95, 10) yields them. */
void metrics_iou_thresholds(float out[METRICS_NIOU]);

/* §8.3 for one image: tp[d * METRICS_NIOU + t] = 1 when detection d is a true
 * positive at threshold t. dets must be in NMS order (score descending): a
 * label claimed by several detections goes to the lowest index. gt_boxes is
 * [n_gt][4] xyxy in the same pixel space as dets. Returns 0, or -1 on
 * allocation failure. */
int metrics_match(const Detection *dets, int n_det, const float *gt_boxes,
                  const int *gt_cls, int n_gt, uint8_t *tp);

/* compute_ap: sentinels, precision envelope, 101-point np.interp and np.trapz
 * (numpy's pairwise summation) over recall/precision of length n >= 1.
 * recall must be non-decreasing within [0, 1]. Returns -1 on allocation
 * failure (AP is never negative otherwise). */
double metrics_compute_ap(const double *recall, const double *precision, int n);

typedef struct MetricsClass {
    int cls;                      /* class id */
    long images;                  /* images whose labels contain the class */
    long instances;               /* labels of the class */
    double p, r;                  /* at the max-F1 confidence */
    double ap50, ap50_95;
    double ap[METRICS_NIOU];
    bool has_pr;                  /* has predictions, so a PR curve (prec_values row) */
} MetricsClass;

typedef struct Metrics {
    int nc;                       /* classes of the model */
    long seen;                    /* images added */
    long instances;               /* all labels */
    double mp, mr, map50, map50_95;
    double fitness;               /* 0.1 mAP50 + 0.9 mAP50-95 (8.3.63) */
    /* Distinct label classes, ascending; 0 rows when no detection is a true
     * positive at any threshold (Ultralytics then skips ap_per_class and
     * every metric stays 0). */
    int n_classes;
    MetricsClass *classes;
    long *class_images;           /* [nc] images containing each class */
    long *class_instances;        /* [nc] labels of each class */
    /* ap_per_class' curves, [n_classes][METRICS_NCURVE] in the rows' order:
     * P, R and F1 against the confidence px; precision against the recall px
     * at IoU 0.5 (zeros where !has_pr; Ultralytics leaves such rows out). */
    double *p_curve, *r_curve, *f1_curve, *pr_curve;
} Metrics;

/* smooth(y, f) of metrics.py: a box filter of nf = round(n·f·2)//2 + 1 taps
 * over y padded with nf//2 copies of each end value. np.convolve sums
 * through a BLAS dot, so the last bit of a window sum may differ; only
 * near-exact ties between windows could move an argmax taken on it. */
void metrics_smooth(const double *y, int n, double f, double *out);
/* np.argmax: the first maximum, a NaN counting as the maximum. */
int metrics_argmax(const double *y, int n);

typedef struct MetricsAccumulator MetricsAccumulator;

MetricsAccumulator *metrics_init(int nc);  /* NULL on nc < 1 or no memory */
void metrics_reset(MetricsAccumulator *acc);
void metrics_free(MetricsAccumulator *acc);

/* One validation image: dets in NMS order, gt_boxes [n_gt][4] xyxy, both in
 * original image pixels; classes must lie in [0, nc). Returns 0, or -1 on
 * bad classes or allocation failure (the accumulator is then unchanged). */
int metrics_add_image(MetricsAccumulator *acc, const Detection *dets, int n_det,
                      const float *gt_boxes, const int *gt_cls, int n_gt);

/* ap_per_class + DetMetrics over everything added. Fills out (release with
 * metrics_result_free). Returns 0, or -1 on allocation failure. The values
 * are not rounded; the trainer rounds to 5 decimals for best/early stop. */
int metrics_compute(const MetricsAccumulator *acc, Metrics *out);
void metrics_result_free(Metrics *m);

/* The validation table. Lines carry no newline; they return the snprintf
 * count (truncated when >= size). names may be NULL (class ids printed). */
int metrics_format_header(char *buf, size_t size);
int metrics_format_row(char *buf, size_t size, const char *name, long images,
                       long instances, double p, double r, double map50,
                       double map50_95);
/* Header, the `all` row and, when per_class, one row per evaluated class
 * (Ultralytics prints them for the final validation when nc > 1). */
void metrics_print(FILE *f, const Metrics *m, const char *const *names,
                   int per_class);

#endif
