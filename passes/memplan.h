/* passes/memplan.h — the memory plan of a training step: which tensors live
 * in persistent regions (parameters, their gradients, buffers, optimizer
 * state, inputs) and where every other tensor sits in the one step arena,
 * from liveness intervals over the schedule (greedy by size, best fit); a
 * view (passes/views.h) sits inside its base, which lives as long as any of them.
 * Sizes follow the plan's precision. Knows no kernels. */
#ifndef YOLOCC_MEMPLAN_H
#define YOLOCC_MEMPLAN_H
#include "../ir/ir.h"
#include "fuse.h"

typedef enum { PREC_FP32, PREC_BF16, PREC_FP16 } Precision;

enum { MEMPLAN_ALIGN = 256, MEMPLAN_INTERNAL = -2 };

typedef struct MemPlan {
    Precision precision;
    int64_t *offset;        /* per tensor: byte offset in the arena, -1 (persistent), or
                             * MEMPLAN_INTERNAL (never leaves its fusion group: no memory) */
    int64_t *bytes;         /* per tensor: storage bytes at this precision */
    int *def, *last;        /* per tensor: producing op (or -1) and last op that reads it */
    int64_t arena_bytes;            /* the step arena */
    int64_t lower_bound_bytes;      /* max over the schedule of live arena bytes */
    int peak_op;                    /* the first op at which that many bytes are live */
    int64_t naive_bytes;            /* every arena tensor in its own buffer */
    int64_t persistent_bytes;       /* parameters (+ low-precision copies), gradients, buffers, optimizer state */
    int64_t input_bytes;
    int64_t saved_activation_bytes; /* forward tensors still live when the loss has run */
    double step_flops;
} MemPlan;

const char *precision_name(Precision p);
/* loss_op: index of the detect_loss op (forward ends there), or -1.
 * fu (NULL: none): the fusion groups; their internal tensors take no memory
 * and the others live from their group's first op to their last reader's group's end. With
 * place false only the sizes and the lower bound are computed (offsets stay
 * -1, arena_bytes 0): the fast objective of the recompute budget search. */
bool memplan_build(const Graph *g, int loss_op, const Fusion *fu, Precision p, bool place, Arena *a, MemPlan *mp, char *err, int errcap);
/* Storage bytes of tensor t: activations, activation gradients and an input
 * only convolutions read (the images) at the precision; master weights,
 * their gradients, BN statistics, optimizer state, the loss and the other
 * inputs stay fp32. */
int64_t memplan_tensor_bytes(const Graph *g, int t, bool persistent, Precision p);
/* Per tensor: the first op of its producer's group and the last op of its
 * last reader's group (fu NULL: the ops themselves); graph outputs end at
 * n_ops, tensors nobody makes start at -1. */
bool memplan_lifetimes(const Graph *g, const Fusion *fu, Arena *a, int *def, int *last, char *err, int errcap);
/* The storage type memplan_tensor_bytes sizes: DT_I64 for integers, the
 * plan's 16-bit type where a tensor is stored in 2 bytes, else DT_F32. What
 * every kernel and library call reads and writes on the device. */
DType memplan_storage_dtype(const Graph *g, int t, bool persistent, Precision p);
/* Bytes rounded up to the arena's alignment. */
int64_t memplan_align(int64_t x);
/* Offsets of views: their base's plus where they sit in it, at the
 * precision's element size (memplan_build does this itself). */
void memplan_place_views(const Graph *g, const Views *v, int64_t *offset, Precision p);
/* persistent[t]: t lives outside the step arena (state, inputs, parameter gradients). */
void memplan_mark_persistent(const Graph *g, bool *persistent);
/* Marks the parameters that keep a low-precision compute copy beside their
 * fp32 master in a bf16 / fp16 plan: those a convolution reads directly as
 * its weight or bias (in channels-last plans a weight's layout reshape reads
 * the master instead, and only biases keep copies). Nothing at fp32. */
void memplan_mark_compute_copies(const Graph *g, Precision p, bool *copy);

#endif
