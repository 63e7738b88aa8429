/* runtime/interp.h — the reference interpreter: runs a graph's ops in order
 * with the reference kernels, one heap buffer per tensor. Callers provide the
 * inputs, parameters and buffers; the interpreter owns activations. */
#ifndef YOLOCC_INTERP_H
#define YOLOCC_INTERP_H
#include "../ir/ir.h"

typedef struct Interp {
    const Graph *g;
    void **buf;         /* per tensor id */
    bool *owned;        /* buffers the interpreter allocated */
} Interp;

bool interp_init(Interp *it, const Graph *g);
/* Allocates (zeroed) storage for tensor t if it has none; returns it. */
void *interp_tensor(Interp *it, int t);
/* Runs ops [first, last); false with err naming the op on failure. */
bool interp_run(Interp *it, int first, int last, char *err, int errcap);
void interp_free(Interp *it);
size_t dtype_size(DType dt);

#endif
