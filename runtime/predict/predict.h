/* runtime/predict/predict.h — `yolort predict PLAN --weights W --source S`:
 * Ultralytics' predict mode on a plan's eval-mode model (letterbox, rect by
 * default as `yolo predict` does for a .pt model; NMS or an end-to-end head's selection, boxes in the
 * original pixels), with its console lines and its run directory
 * (annotated images and videos, labels/STEM.txt, crops/CLASS/STEM.jpg). */
#ifndef YOLOCC_PREDICT_H
#define YOLOCC_PREDICT_H
#include <stdbool.h>
#include <stddef.h>

#include "../train/metrics.h"

typedef struct PredictArgs {
    const char *plan, *weights, *source, *project, *name;
    const char *classes;    /* "0,2": keep only these classes (NULL: all) */
    double conf, iou;
    int max_det, vid_stride;   /* vid_stride: every Nth video frame (1: all) */
    bool agnostic_nms, exist_ok, save, save_txt, save_conf, save_crop, reference;
    bool save_frames;       /* each annotated video frame also as STEM_frames/STEM_F.jpg */
    int batch;              /* pictures per inference (0: 1 on the CPU; a CUDA plan's own batch) */
    bool rect;              /* a batch of one picture size letterboxed to the smallest stride multiples (Ultralytics' rect, LetterBox auto) */
} PredictArgs;

/* Ultralytics' defaults: conf 0.25, iou 0.7, max_det 300, runs/detect/predict, save on, rect on. */
void predict_args_defaults(PredictArgs *a);

/* The whole command: 0 done, 1 a failure while predicting, 2 bad arguments,
 * plan, weights or source. Prints to stdout; errors to stderr. */
int predict_main(const PredictArgs *a);

/* The name Ultralytics gives a picture's outputs: the source's file name
 * without its extension, and for a video frame (frame > 0) "_FRAME" after it. */
void predict_output_stem(char *out, size_t cap, const char *src, int frame);
/* Results.save_txt: appends "cls cx cy w h [conf]" (normalised to w0 x h0,
 * %g) per detection to LABELS/STEM.txt; nothing for n == 0. */
bool predict_save_txt(const char *labels, const char *stem, const Detection *d, int n, int w0, int h0, bool save_conf, char *err, int errcap);

#endif
