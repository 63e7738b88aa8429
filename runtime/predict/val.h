/* runtime/predict/val.h — `yolort val PLAN --weights W --data DATA.yaml`:
 * Ultralytics' val mode on saved weights (the validation the trainer runs
 * each epoch, on any weights file), its table per class. */
#ifndef YOLOCC_VAL_H
#define YOLOCC_VAL_H
#include <stdbool.h>

typedef struct ValArgs {
    const char *plan, *weights, *data;
    const char *split;           /* "val" (NULL), "test" or "train": the data YAML's list to validate */
    const char *project, *name;  /* run directory PROJECT/NAME[N] for the plots (runs/detect, val) */
    int workers;
    double conf, iou;            /* NMS: 0.001 and 0.7 as Ultralytics' val */
    int max_det;                 /* 300 */
    bool reference, exist_ok;
    bool single_cls;             /* every label class 0, the names one "item" (a plan for nc 1) */
    bool plots;                  /* confusion matrix and curves (report_val_plots) */
    bool save_txt, save_conf;    /* labels/STEM.txt of every image's detections (conf 0.001), with scores */
    bool save_json;              /* predictions.json in COCO's results format */
    int batch;                   /* images per batch (0: Ultralytics' 16 on the CPU; a CUDA plan's own validation batch) */
    bool rect;                   /* rect batches (Model.val's rect=True); CPU plans only */
} ValArgs;

/* 0 done, 1 a failure while validating, 2 bad arguments, plan, weights or data. */
int val_main(const ValArgs *a);

#endif
