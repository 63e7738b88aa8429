/* runtime/predict/eval_shape.h — a training plan's validation graph built
 * again at another input shape (a rectangular letterbox), in this process,
 * from the model YAML the plan carries. Owns that compile only; running it
 * is eval_model.c's. */
#ifndef YOLOCC_EVAL_SHAPE_H
#define YOLOCC_EVAL_SHAPE_H
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

/* Ultralytics' LetterBox(auto=True) output size for an image w0 x h0 and a
 * square target S: the resized image's sides rounded up to multiples of stride. */
void eval_rect_shape(int w0, int h0, int S, int stride, int *h, int *w);

#endif
