/* runtime/predict/eval_shape_cuda.h — a CUDA plan's validation graph at
 * other input shapes (rect letterboxes) on the device: each shape's graph
 * built in this process (eval_plan_at_shape) and opened as a CudaStep that
 * runs the plan's own validation kernels, reads the parameters and buffers
 * of the plan's own validation step in place and borrows an arena and a
 * workspace. The GPU counterpart of EvalShapes (eval_shape.h). Must not read
 * images or files, and never writes the state it reads. */
#ifndef YOLOCC_EVAL_SHAPE_CUDA_H
#define YOLOCC_EVAL_SHAPE_CUDA_H
#include "../cuda/cuda_step.h"
#include "../plan_read.h"

typedef struct CudaShape {
    Plan plan;              /* the validation graph at this shape; its KERNELS are the plan's own */
    CudaStep cs;
    EvalIO io;
} CudaShape;

typedef struct CudaShapes {
    const Plan *train;      /* the training plan whose model is rebuilt */
    const CudaStep *own;    /* the plan's own validation step: its state is read, its arena and workspace may be borrowed */
    const CudaStep *runs;   /* another step whose arena and workspace may be borrowed (the training step), or NULL */
    CudaShape **s;
    int n;
} CudaShapes;

/* Pure: the order cuda_shapes_open opens n graphs whose arenas take
 * arena[i] bytes: the largest first (ties in the order given), so that the
 * first one that needs an arena of its own lends it to all the others.
 * Writes n indices to order. */
void cuda_shapes_order(const int64_t *arena, int n, int *order);

/* Pure: what a new shape whose arena takes arena_bytes borrows from the
 * candidates cand[0..n) (tried in order): the arena of the first whose own
 * arena is at least as large, the workspace of the one with the largest own
 * workspace (cuda_mem_alloc uses it only if large enough), and state. */
CudaLend cuda_shapes_lend(const CudaMem *const *cand, int n, int64_t arena_bytes, const CudaMem *state);

/* Builds the graphs at batch x 3 x hw[i][0] x hw[i][1] that are neither
 * open yet nor the own step's shape, checks that each lowers to the plan's
 * kernels (cuda_kernels_cover, before the device is touched), and opens
 * them, the largest arena first; each borrows the arena of the first step
 * (runs, own, or one opened before it) whose own arena is large enough and
 * the workspace of the one with the largest own workspace, and replays
 * CUDA graphs when own does. On failure err names the shape; the shapes
 * opened before it stay open. */
bool cuda_shapes_open(CudaShapes *s, int batch, int n, const int (*hw)[2], char *err, int errcap);
/* The open graph at batch x 3 x h x w, or NULL. */
CudaShape *cuda_shapes_find(const CudaShapes *s, int batch, int h, int w);
/* Device bytes the shapes allocated themselves (borrowed regions not counted). */
int64_t cuda_shapes_device_bytes(const CudaShapes *s);
void cuda_shapes_close(CudaShapes *s);

#endif
