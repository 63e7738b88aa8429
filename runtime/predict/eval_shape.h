/* runtime/predict/eval_shape.h — a validation graph on the CPU (its
 * interpreter, arena and generated kernels), and the graphs of other input
 * shapes (rect letterboxes) built in this process from the model YAML the
 * plan carries, each opened once and kept. Used by yolort predict and val
 * (eval_model.c) and the trainer's validation. Must not read images or files. */
#ifndef YOLOCC_EVAL_SHAPE_H
#define YOLOCC_EVAL_SHAPE_H
#include "../cpu_fold.h"
#include "../gen_cpu.h"
#include "../interp.h"
#include "../plan_read.h"

/* Compiles train's model at batch x 3 x h x w with the plan's layout, fusion,
 * precision and box limit, and reads it back as a plan (*out, plan_free's)
 * whose KERNELS are the plan's own validation kernels: the CPU target opens
 * them only if the new graph lowers to the same kernel source, so a shape
 * that would need other kernels fails there, with a message. h and w must
 * be multiples of the plan's largest stride. */
bool eval_plan_at_shape(const Plan *train, int batch, int h, int w, Plan *out, char *err, int errcap);

/* The stride a letterbox rounds to: the plan's largest, at least 32 (AutoBackend's). */
int eval_plan_stride(const Plan *train);

/* A validation graph opened on the CPU. */
typedef struct EvalGraph {
    const Plan *plan;       /* the graph (a plan file's EVAL, or own) */
    Plan *own;              /* built at another shape and owned, else NULL */
    Interp ev;
    GenCpu gen;
    bool has_gen;
    EvalIO io;
    int pred_end;           /* a run without labels: the ops up to the fusion group that makes the predictions */
    bool *skip_pred;        /* per op: what a run without labels leaves out (another head's branch: YOLOv10's one-to-many) */
    CpuFold fold;           /* its folded conv-BN(-activation) groups (fold.n 0: none) */
} EvalGraph;

/* Opens ep on the interpreter: its state tensors read state[i] (ep's state
 * order; NULL: zeroed storage of its own), inputs get buffers of their own,
 * activations the memory plan's arena, and fusion groups the generated
 * kernels unless reference. fold (not with reference): its conv-BN groups
 * run folded (cpu_fold.h), from the state as it is now, which must then not
 * change (yolort predict and val; the trainer's validation runs unfolded). */
bool eval_graph_open(EvalGraph *eg, const Plan *ep, void *const *state, bool reference, bool fold, char *err, int errcap);
/* Runs the graph on what eg->ev.buf holds at its inputs: every op with
 * loss, else only what the predictions need (the ops they depend on, and
 * the generated launches those share with others). */
bool eval_graph_run(EvalGraph *eg, bool loss, char *err, int errcap);
void eval_graph_close(EvalGraph *eg);

/* The validation graphs of train's model at the shapes asked for, all
 * reading one set of parameters and buffers (state, in the plan's
 * validation graph's state order). */
typedef struct EvalShapes {
    const Plan *train;
    void *const *state;
    bool reference, fold;   /* as eval_graph_open takes them */
    EvalGraph **g;
    int n;
    EvalGraph *last;        /* the one whose arena is held */
} EvalShapes;

/* The graph at batch x 3 x h x w: built and opened on the first request
 * (the plan's own validation graph is not among them), then kept; only the
 * graph last asked for holds its arena (rect batches come sorted, so the
 * shape changes a few times a pass). */
EvalGraph *eval_shapes_get(EvalShapes *s, int batch, int h, int w, char *err, int errcap);
void eval_shapes_free(EvalShapes *s);
/* The host bytes the graphs hold at most: each one's own tensors, and the
 * largest arena (one is held at a time). */
int64_t eval_shapes_host_bytes(const EvalShapes *s);

#endif
