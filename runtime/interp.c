/* runtime/interp.c — executes a graph with the reference kernels. Clarity
 * over speed: every tensor gets its own buffer, kept until interp_free. */
#include "interp.h"

#include <stdio.h>
#include <stdlib.h>

#include "ref_kernels.h"

size_t dtype_size(DType dt) { return dt == DT_I64 ? 8 : dt == DT_F32 ? 4 : 2; }

bool interp_init(Interp *it, const Graph *g) {
    it->g = g;
    it->buf = calloc((size_t)g->n_tensors + 1, sizeof(void *));
    it->owned = calloc((size_t)g->n_tensors + 1, sizeof(bool));
    return it->buf && it->owned;
}

void *interp_tensor(Interp *it, int t) {
    if (!it->buf[t]) {
        const Tensor *x = &it->g->tensors[t];
        size_t n = (size_t)shape_numel(&x->shape);
        it->buf[t] = calloc(n ? n : 1, x->dtype == DT_I64 ? 8 : 4);
        it->owned[t] = it->buf[t] != NULL;
    }
    return it->buf[t];
}

bool interp_run(Interp *it, int first, int last, char *err, int errcap) {
    const Graph *g = it->g;
    for (int o = first; o < last; o++) {
        const Op *op = &g->ops[o];
        RefKernel k = ref_kernel(op->kind);
        if (!k) return snprintf(err, (size_t)errcap, "op %d (%s) has no reference kernel", o, op_def(op->kind)->name), false;
        for (int i = 0; i < op->n_in; i++)
            if (!it->buf[op->in[i]])
                return snprintf(err, (size_t)errcap, "op %d (%s) reads %%%d, which has no value", o, op_def(op->kind)->name, op->in[i]), false;
        for (int i = 0; i < op->n_out; i++)
            if (!interp_tensor(it, op->out[i])) return snprintf(err, (size_t)errcap, "out of memory"), false;
        char why[200];
        if (!k(g, op, it->buf, why, sizeof why))
            return snprintf(err, (size_t)errcap, "op %d (%s, %s): %s", o, op_def(op->kind)->name, op->scope ? op->scope : "", why), false;
    }
    return true;
}

void interp_free(Interp *it) {
    if (it->buf)
        for (int t = 0; t < it->g->n_tensors; t++)
            if (it->owned[t]) free(it->buf[t]);
    free(it->buf);
    free(it->owned);
    it->buf = NULL;
    it->owned = NULL;
}
