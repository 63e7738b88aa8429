/* passes/memplan.c — liveness, the lower bound, and greedy-by-size best-fit
 * offsets in one step arena (DESIGN decision 5). */
#include "memplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *precision_name(Precision p) { return p == PREC_BF16 ? "bf16" : p == PREC_FP16 ? "fp16" : "fp32"; }

static int64_t align_up(int64_t x) { return (x + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN; }

/* per-channel statistics and the loss are fp32 at any precision */
static bool always_fp32(const Graph *g, int t) {
    int p = g->tensors[t].producer;
    if (p < 0) return false;
    const Op *op = &g->ops[p];
    return (op->kind == OP_BATCHNORM && t != op->out[0]) || op->kind == OP_DETECT_LOSS || op->kind == OP_GRAD_CLIP;
}

int64_t memplan_tensor_bytes(const Graph *g, int t, bool persistent, Precision p) {
    const Tensor *x = &g->tensors[t];
    int64_t n = shape_numel(&x->shape);
    if (x->dtype == DT_I64) return n * 8;
    bool low = p != PREC_FP32 && x->kind == TK_ACTIVATION && !persistent && !always_fp32(g, t);
    return n * (low ? 2 : 4);
}

typedef struct Placed {
    int64_t off, end;
} Placed;

static int by_offset(const void *a, const void *b) {
    const Placed *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

typedef struct SizeKey {
    int64_t size;
    int def, t;
} SizeKey;

/* biggest first; ties by definition order, then id, so plans are reproducible */
static int by_size(const void *a, const void *b) {
    const SizeKey *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    if (x->def != y->def) return x->def - y->def;
    return x->t - y->t;
}

bool memplan_build(const Graph *g, int loss_op, Precision p, Arena *a, MemPlan *mp, char *err, int errcap) {
    memset(mp, 0, sizeof *mp);
    mp->precision = p;
    int n = g->n_tensors;
    mp->offset = arena_array(a, (size_t)n + 1, sizeof(int64_t));
    mp->bytes = arena_array(a, (size_t)n + 1, sizeof(int64_t));
    mp->def = arena_array(a, (size_t)n + 1, sizeof(int));
    mp->last = arena_array(a, (size_t)n + 1, sizeof(int));
    bool *persistent = arena_array(a, (size_t)n + 1, sizeof(bool));
    int *order = arena_array(a, (size_t)n + 1, sizeof(int));
    Placed *placed = arena_array(a, (size_t)n + 1, sizeof(Placed));
    int64_t *delta = arena_array(a, (size_t)g->n_ops + 2, sizeof(int64_t));
    if (!mp->offset || !mp->bytes || !mp->def || !mp->last || !persistent || !order || !placed || !delta)
        return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int t = 0; t < n; t++) {
        mp->def[t] = g->tensors[t].producer;
        mp->last[t] = mp->def[t];
        persistent[t] = g->tensors[t].kind != TK_ACTIVATION;
    }
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        mp->step_flops += op_def(op->kind)->flops(g, op);
        for (int i = 0; i < op->n_in; i++)
            if (o > mp->last[op->in[i]]) mp->last[op->in[i]] = o;
        /* parameter gradients live in the persistent gradient region */
        if (op->kind == OP_SGD_STEP || op->kind == OP_ADAMW_STEP) persistent[op->in[1]] = true;
    }
    for (int i = 0; i < g->n_outputs; i++) mp->last[g->outputs[i]] = g->n_ops;
    int m = 0;
    for (int t = 0; t < n; t++) {
        const Tensor *x = &g->tensors[t];
        mp->bytes[t] = memplan_tensor_bytes(g, t, persistent[t], p);
        mp->offset[t] = -1;
        if (x->kind == TK_INPUT) {
            mp->input_bytes += mp->bytes[t];
        } else if (persistent[t]) {
            mp->persistent_bytes += mp->bytes[t];
            /* a low-precision compute copy beside each fp32 master weight */
            if (x->kind == TK_PARAM && p != PREC_FP32) mp->persistent_bytes += shape_numel(&x->shape) * 2;
        } else {
            mp->naive_bytes += align_up(mp->bytes[t]);
            delta[mp->def[t]] += align_up(mp->bytes[t]);
            delta[mp->last[t] + 1] -= align_up(mp->bytes[t]);
            if (loss_op >= 0 && mp->def[t] < loss_op && mp->last[t] > loss_op) mp->saved_activation_bytes += mp->bytes[t];
            order[m++] = t;
        }
    }
    int64_t live = 0;
    for (int o = 0; o <= g->n_ops; o++) {
        live += delta[o];
        if (live > mp->lower_bound_bytes) mp->lower_bound_bytes = live;
    }
    /* greedy by size: biggest first, each into the smallest gap among the
     * already placed tensors whose lifetimes overlap its own */
    SizeKey *keys = arena_array(a, (size_t)m + 1, sizeof(SizeKey));
    if (!keys) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int k = 0; k < m; k++) keys[k] = (SizeKey){mp->bytes[order[k]], mp->def[order[k]], order[k]};
    qsort(keys, (size_t)m, sizeof(SizeKey), by_size);
    for (int k = 0; k < m; k++) order[k] = keys[k].t;
    for (int k = 0; k < m; k++) {
        int t = order[k];
        int64_t size = align_up(mp->bytes[t]);
        int np = 0;
        for (int j = 0; j < k; j++) {
            int u = order[j];
            if (mp->def[u] <= mp->last[t] && mp->def[t] <= mp->last[u]) placed[np++] = (Placed){mp->offset[u], mp->offset[u] + align_up(mp->bytes[u])};
        }
        qsort(placed, (size_t)np, sizeof(Placed), by_offset);
        int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
        for (int j = 0; j < np; j++) {
            int64_t gap = placed[j].off - cursor;
            if (gap >= size && gap < best_gap) {
                best = cursor;
                best_gap = gap;
            }
            if (placed[j].end > cursor) cursor = placed[j].end;
        }
        mp->offset[t] = best >= 0 ? best : cursor;
        if (mp->offset[t] + size > mp->arena_bytes) mp->arena_bytes = mp->offset[t] + size;
    }
    return true;
}
