/* runtime/train/confusion.c — ConfusionMatrix.process_batch of Ultralytics
 * 8.3.63 (detection). Owns only what confusion.h declares; it computes no
 * mAP and writes no file. */
#include "confusion.h"

#include <stdlib.h>
#include <string.h>

bool confusion_init(ConfusionMatrix *cm, int nc, double val_conf) {
    memset(cm, 0, sizeof *cm);
    if (nc < 1) return false;
    cm->conf = val_conf == 0.001 ? CONFUSION_CONF : (float)val_conf;
    cm->m = calloc((size_t)(nc + 1) * (size_t)(nc + 1), sizeof *cm->m);
    cm->nc = nc;
    return cm->m != NULL;
}

void confusion_free(ConfusionMatrix *cm) {
    free(cm->m);
    memset(cm, 0, sizeof *cm);
}

static void bump(ConfusionMatrix *cm, int predicted, int truth) {
    cm->m[(size_t)predicted * (size_t)(cm->nc + 1) + (size_t)truth]++;
}

bool confusion_add_image(ConfusionMatrix *cm, const Detection *dets, int n_det, const float *gt_boxes,
                         const int *gt_cls, int n_gt) {
    if (!cm || !cm->m || n_det < 0 || n_gt < 0 || (n_det && !dets) || (n_gt && (!gt_boxes || !gt_cls))) return false;
    for (int i = 0; i < n_det; i++)
        if (dets[i].cls < 0 || dets[i].cls >= cm->nc) return false;
    for (int i = 0; i < n_gt; i++)
        if (gt_cls[i] < 0 || gt_cls[i] >= cm->nc) return false;
    const int bg = cm->nc;
    if (n_det == 0) { /* no predictions: every label missed */
        for (int i = 0; i < n_gt; i++) bump(cm, bg, gt_cls[i]);
        return true;
    }
    const Detection **kept = malloc((size_t)n_det * sizeof *kept);
    int *best_gt = malloc((size_t)n_det * sizeof *best_gt);
    float *best_iou = malloc((size_t)n_det * sizeof *best_iou);
    int *gt_det = malloc((size_t)(n_gt ? n_gt : 1) * sizeof *gt_det);
    bool ok = kept && best_gt && best_iou && gt_det;
    if (ok) {
        int n = 0;
        for (int j = 0; j < n_det; j++)
            if (dets[j].score > cm->conf) kept[n++] = &dets[j];
        /* process_batch sorts the (label, detection, IoU) pairs above the
         * threshold by IoU descending (numpy's argsort reversed: on equal
         * IoU the later pair first), keeps each detection's first pair, sorts
         * again and keeps each label's first. Without the sorts that is:
         * each detection's best label (ties: the higher label index), then
         * each label's best among the detections that chose it (ties: the
         * higher detection index). With no label every kept detection is a
         * false positive, as upstream's early return counts it. */
        for (int j = 0; j < n; j++) {
            best_gt[j] = -1;
            best_iou[j] = 0.0f;
            for (int i = 0; i < n_gt; i++) {
                const float v = metrics_box_iou(gt_boxes + 4 * (size_t)i, kept[j]);
                if (v > CONFUSION_IOU && (best_gt[j] < 0 || v >= best_iou[j])) best_gt[j] = i, best_iou[j] = v;
            }
        }
        for (int i = 0; i < n_gt; i++) gt_det[i] = -1;
        for (int j = 0; j < n; j++) {
            const int i = best_gt[j];
            if (i >= 0 && (gt_det[i] < 0 || best_iou[j] >= best_iou[gt_det[i]])) gt_det[i] = j;
        }
        for (int i = 0; i < n_gt; i++) bump(cm, gt_det[i] >= 0 ? kept[gt_det[i]]->cls : bg, gt_cls[i]);
        for (int j = 0; j < n; j++)
            if (best_gt[j] < 0 || gt_det[best_gt[j]] != j) bump(cm, kept[j]->cls, bg);
    }
    free(kept);
    free(best_gt);
    free(best_iou);
    free(gt_det);
    return ok;
}
