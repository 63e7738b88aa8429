/* runtime/train/report_batches.h — a loader batch drawn as Ultralytics'
 * plot_images draws it: train_batchN.jpg, val_batchN_labels.jpg and
 * val_batchN_pred.jpg. Owns the mosaic and its file; must not touch the
 * batch, the model or any other run file. */
#ifndef YOLOCC_REPORT_BATCHES_H
#define YOLOCC_REPORT_BATCHES_H
#include <stdbool.h>

#include "../data/dataset.h"
#include "../data/loader.h"
#include "metrics.h"

#define BATCH_PLOT_MAX_IMAGES 16   /* max_subplots */
#define BATCH_PLOT_MAX_SIZE 1920   /* max_size: the mosaic's side at most */
#define BATCH_PLOT_CONF 0.25f      /* predictions at or under it are not drawn */

typedef struct BatchPlot {
    const Batch *b;
    int n;                         /* images of the batch to show (the first 16 of them) */
    int imgsz, max_boxes;          /* the loader's (imgsz: the side of a batch that gives no h, w) */
    const DataSplit *split;        /* where the tiles' file names come from */
    /* per image, predictions in network pixels (xyxy), labelled "name 0.9";
     * NULL: the batch's own labels, labelled by name */
    const Detection *const *dets;
    const int *n_dets;
    const char *const *names;      /* NULL: class indices, as training samples are */
} BatchPlot;

/* Tiles of the batch's h x w in a square grid filled column by column on white, the
 * whole scaled down to at most 1920 px (bilinear), a white 2 px border and
 * the file name (first 40 bytes) on each tile, the boxes in the palette of
 * `yolort predict`, written as a JPEG of quality 75 (PIL's default).
 * Nothing is written for n < 1. False, with err, on a failed write or no
 * memory. */
bool report_batch_jpeg(const char *path, const BatchPlot *p, char *err, int errcap);

#endif
