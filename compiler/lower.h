/* compiler/lower.h — parse_model: model rows -> IR forward graph. Resolves
 * 'from', scales depth and width, rewrites constructor arguments, builds each
 * row through the module registry, and records what the summary prints.
 * Also the stride probe and Ultralytics' GFLOPs procedure. */
#ifndef YOLOCC_LOWER_H
#define YOLOCC_LOWER_H
#include "model_cfg.h"
#include "modules.h"

typedef struct RowInfo {
    const ModuleDef *def;
    int n;                  /* repeats after depth scaling, as printed */
    int64_t params;
    const char *args;       /* constructor arguments, Python repr */
    int out[IR_MAX_SPLIT], n_out;
} RowInfo;

typedef struct BuildOptions {
    int h, w;               /* input height and width (a training graph's are equal) */
    int batch;
    bool eval;              /* eval-mode head (decoded boxes) */
    /* store activations channels last (NHWC, cuDNN's fast layout): the
     * images and every conv weight enter through a layout reshape, and the
     * data flow carries the layout on (ir.h, Tensor.channels_last) */
    bool channels_last;
} BuildOptions;

typedef struct Model {
    const ModelConfig *cfg;
    Graph g;
    RowInfo *rows;
    int64_t layers;         /* Ultralytics 8.3 layer count */
    bool legacy;
    int nstrides;
    double strides[IR_MAX_LEVELS];
    int h, w, batch;
    int *save, n_save;
} Model;

/* Builds the graph. strides (may be NULL) feed the eval-mode box decode. */
bool model_build(Arena *a, const ModelConfig *cfg, const BuildOptions *o, const double *strides, int nstrides, Model *m, Diag *d);

typedef struct ModelSummary {
    int64_t parameters, gradients, layers;
    double gflops;          /* Ultralytics' get_flops(model, imgsz) */
    int max_stride, imgsz;  /* imgsz rounded up to a multiple of max(max_stride, 32) */
    int nstrides;
    double strides[IR_MAX_LEVELS];
} ModelSummary;

/* Stride probe (256x256, as DetectionModel does), the training graph at
 * imgsz (rounded up with a warning; channels last on request), and GFLOPs
 * per Ultralytics. */
bool model_compile(Arena *a, const ModelConfig *cfg, int imgsz, int batch, bool channels_last, Model *train, ModelSummary *s, Diag *d);

#endif
