/* runtime/train/confusion.h — the detection confusion matrix of Ultralytics
 * 8.3.63's validator (ConfusionMatrix.process_batch). Owns the counting only;
 * drawing it is report_val_plots.c's, matching for mAP is metrics.c's. */
#ifndef YOLOCC_CONFUSION_H
#define YOLOCC_CONFUSION_H
#include "metrics.h"

#define CONFUSION_CONF 0.25f   /* validation's default conf 0.001 becomes 0.25 here */
#define CONFUSION_IOU 0.45f

/* (nc + 1) x (nc + 1) counts, row = predicted class, column = true class;
 * row and column nc are the background (a missed label, a detection that
 * matched none). */
typedef struct ConfusionMatrix {
    int nc;
    float conf;     /* detections above it take part */
    long *m;
} ConfusionMatrix;

/* val_conf is the validator's conf: its default 0.001 means
 * CONFUSION_CONF, any other value is used as it is. Returns false on nc < 1
 * or no memory. */
bool confusion_init(ConfusionMatrix *cm, int nc, double val_conf);
void confusion_free(ConfusionMatrix *cm);

static inline long confusion_at(const ConfusionMatrix *cm, int predicted, int truth) {
    return cm->m[(size_t)predicted * (size_t)(cm->nc + 1) + (size_t)truth];
}

/* One image, as update_metrics hands it over: dets in NMS order and
 * gt_boxes xyxy, both in original pixels; classes in [0, nc). Detections
 * above cm->conf take part; label/detection pairs above CONFUSION_IOU
 * are matched one to one by descending IoU (each detection its best label,
 * then each label its best detection), whatever their classes. Returns false
 * on bad arguments or no memory (the counts are then unchanged). */
bool confusion_add_image(ConfusionMatrix *cm, const Detection *dets, int n_det, const float *gt_boxes,
                         const int *gt_cls, int n_gt);

#endif
