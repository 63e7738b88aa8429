/* runtime/predict/eval_model.h — a training plan's validation graph (the
 * eval-mode model and its loss) on its own, with weights from a safetensors
 * file, for yolort predict and yolort val: on the
 * CPU (interpreter + the plan's generated kernels) or, for a CUDA plan, on the
 * device. Owns only that graph's buffers; no images, no NMS, no files but
 * the plan and the weights. */
#ifndef YOLOCC_EVAL_MODEL_H
#define YOLOCC_EVAL_MODEL_H
#include <stdbool.h>
#include <stdint.h>

#include "../interp.h"
#include "../plan_read.h"
#include "eval_shape.h"

typedef struct EvalModel {
    Plan plan;              /* the training plan; plan.eval is its own validation graph */
    Interp ev;              /* host buffers of plan.eval: its parameters and buffers (the weights); for a CUDA plan its inputs too */
    void **state;           /* ev's parameter and buffer storage, in state order (every shape's graph reads it) */
    EvalIO own_io;          /* plan.eval's inputs, outputs and sizes */
    EvalGraph own;          /* plan.eval on the CPU, opened at its first run (so a predict at other shapes never holds its arena) */
    bool own_open;
    EvalShapes shapes;      /* the CPU graphs of other shapes (eval_model_shape) */
    EvalGraph *active;      /* the CPU graph eval_model_run runs: &own or one of shapes' */
    bool reference;
    struct CudaStep *cuda;  /* a CUDA plan's validation graph on the device, or NULL */
    struct CudaShapes *cuda_shapes; /* a CUDA plan's graphs at other shapes (eval_model_shape) */
    struct CudaStep *cuda_active;   /* the device step eval_model_run runs: cuda or one of cuda_shapes' */
    int64_t *zeros;         /* a CUDA plan's empty labels: counts, then boxes (floats), of the last shape run without */
    EvalIO io;              /* the active graph's inputs, outputs and sizes */
    char **names;           /* io.nc class names: the weights file's metadata `names`, else class0, class1, ... */
    float *pred;            /* [batch, 4 + nc, anchors] after run() */
    float items[3];         /* the validation loss's box, cls, dfl after run() (NaN: run without labels on the CPU) */
} EvalModel;

/* Opens PLAN's validation graph and loads WEIGHTS (PyTorch state_dict names);
 * every state tensor must come from the file. reference: the oracle kernels.
 * On failure err says why and nothing stays open. *report receives the
 * weights line ("Transferred a/b items ..."). The file is read once, for its
 * tensors and its class names. */
bool eval_model_open(EvalModel *m, const char *plan, const char *weights, bool reference, char *report, int reportcap, char *err, int errcap);

/* The first half of eval_model_open: the plan, the weights in host memory
 * (m->ev.buf) and the class names, without opening the CPU kernels or the
 * device; eval_model_run cannot be called on it. For yolort export. */
bool eval_model_load(EvalModel *m, const char *plan, const char *weights, char *report, int reportcap, char *err, int errcap);

/* One batch: pixels [batch, 3, h, w] (m->io) RGB planar, as bytes (floats
 * value / 255 are made from them on the side that runs the model), and the
 * labels as the loader gives them (boxes [batch, max_boxes, 5], counts
 * [batch]; both NULL: no labels). The predictions land in m->pred, the loss
 * items in m->items (without labels the CPU skips the loss: NaN). */
bool eval_model_run(EvalModel *m, const uint8_t *pixels, const float *boxes, const int64_t *counts, char *err, int errcap);

/* Makes the graph at batch x 3 x h x w the one eval_model_run runs (m->io,
 * m->pred follow it): the plan's own at its size, else one built at that
 * shape in this process (eval_shape.h; for a CUDA plan eval_shape_cuda.h)
 * and kept for the next request. On failure the active graph stays as it was. */
bool eval_model_shape(EvalModel *m, int batch, int h, int w, char *err, int errcap);
/* For a CUDA plan, opens the graphs of all n shapes hw[i] at once before
 * the first run (the largest arena first, so one arena serves them all);
 * nothing for a CPU plan, whose graphs hold one arena at a time anyway. */
bool eval_model_prepare_shapes(EvalModel *m, int batch, int n, const int (*hw)[2], char *err, int errcap);

void eval_model_close(EvalModel *m);

#endif
