/* compiler/train_compile.h — compiles a model config into the training step:
 * forward graph in training mode, loss and backward (passes/autodiff), the
 * optimizer (passes/optimizer), the memory plan (passes/memplan), and the
 * META that tells the runtime which tensors are its inputs and outputs. */
#ifndef YOLOCC_TRAIN_COMPILE_H
#define YOLOCC_TRAIN_COMPILE_H
#include "../passes/fuse.h"
#include "../passes/memplan.h"
#include "../passes/optimizer.h"
#include "codegen.h"
#include "lower.h"

typedef struct TrainOptions {
    int imgsz, batch, max_boxes;
    OptimKind optimizer;
    bool optimizer_given;       /* --optimizer was on the command line (META optimizer_from); else the default stands for Ultralytics' optimizer=auto */
    double weight_decay;
    double gains[3];            /* box, cls, dfl loss gains; all 0: Ultralytics' 7.5, 0.5, 1.5 */
    Precision precision;
    RecomputePolicy recompute;
    FusePolicy fuse;            /* FUSE_NONE (0): one op per group */
    int64_t recompute_budget;   /* > 0: step arena budget in bytes (pointwise plus conv recompute) */
    int val_batch;              /* validation graph batch; 0: 2 x batch, as Ultralytics validates */
    int world_size;             /* ranks the plan trains on (batch each; 0 = 1): accumulation and weight decay follow batch x ranks */
    CodegenTarget target;       /* META "target" (the kernels themselves come from codegen_build) */
    bool channels_last;         /* --layout nhwc: activations channels last (BuildOptions) */
} TrainOptions;

/* The validation graph: the model in eval mode (BN running statistics,
 * decoded boxes) plus the detection loss on its raw levels, with its own
 * fusion groups, memory plan and META. */
typedef struct EvalCompiled {
    Model em;
    TrainingGraph etg;
    Fusion efu;
    MemPlan emp;
    char *meta_json;            /* malloc'd */
} EvalCompiled;

typedef struct TrainCompiled {
    Model m;
    ModelSummary s;
    TrainingGraph tg;
    OptimGraph og;
    Fusion fu;
    MemPlan mp;
    int recompute_convs;        /* conv outputs recomputed to meet the budget */
    int accumulate;             /* batches per optimizer step: max(round(64 / (batch x world_size)), 1) */
    int val_batch;
    bool end2end;               /* a v10Detect head: E2EDetectLoss, and validation without NMS */
    EvalCompiled ev;            /* the validation graph at the training image size */
    char *meta_json;            /* malloc'd */
} TrainCompiled;

/* weight_decay in o is Ultralytics' hyper-parameter; the plan's group-1
 * decay is scaled by batch * accumulate / 64 as the trainer does. */
bool compile_training(Arena *a, const ModelConfig *cfg, const TrainOptions *o, TrainCompiled *tc, Diag *d);
void train_compiled_free(TrainCompiled *tc);
/* o's loss gains (box, cls, dfl), Ultralytics' defaults where o sets none. */
void train_loss_gains(const TrainOptions *o, double gains[3]);
/* The validation graph of cfg at batch x 3 x h x w (h, w multiples of the
 * largest stride) with o's layout, fusion, precision and box limit; strides
 * from the training compile (ModelSummary). compile_training makes one at
 * its own size; the runtime makes others for rectangular letterboxes. */
bool compile_eval(Arena *a, const ModelConfig *cfg, const TrainOptions *o, const double *strides, int nstrides, int batch, int h, int w, EvalCompiled *ec, Diag *d);
void eval_compiled_free(EvalCompiled *ec);
/* Whether the model's head is end-to-end (v10Detect): its training loss is
 * Ultralytics' E2EDetectLoss and its validation selects without NMS. */
bool train_head_end2end(const ModelConfig *cfg);
/* Ultralytics' gradient accumulation for a batch: max(round(64 / batch), 1). */
int train_accumulate(int batch);
/* The ranks a plan trains on: world_size, at least 1. */
int train_world_size(const TrainOptions *o);

#endif
