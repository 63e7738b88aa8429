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

/* Placement orders tried: biggest first; biggest size x lifetime first;
 * earliest definition first; longest-lived first; latest last use first. Ties break on definition, then id, so plans are
 * reproducible. */
typedef struct SizeKey {
    double key;
    int def, t;
} SizeKey;

static int by_key(const void *a, const void *b) {
    const SizeKey *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    if (x->def != y->def) return x->def - y->def;
    return x->t - y->t;
}

/* Places tensors in the given order, each into the smallest gap (best fit)
 * or the lowest gap (first fit) among placed tensors whose lifetimes overlap
 * its own; returns the arena size, offsets in off[]. */
static int64_t place_greedy(const MemPlan *mp, const int *order, int m, bool best_fit, Placed *placed, int64_t *off) {
    int64_t arena = 0;
    for (int k = 0; k < m; k++) {
        int t = order[k];
        int64_t size = align_up(mp->bytes[t]);
        int np = 0;
        for (int j = 0; j < k; j++) {
            int u = order[j];
            if (mp->def[u] <= mp->last[t] && mp->def[t] <= mp->last[u]) placed[np++] = (Placed){off[u], off[u] + align_up(mp->bytes[u])};
        }
        qsort(placed, (size_t)np, sizeof(Placed), by_offset);
        int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
        for (int j = 0; j < np; j++) {
            int64_t gap = placed[j].off - cursor;
            if (gap >= size && gap < best_gap) {
                best = cursor;
                best_gap = best_fit ? gap : -1;
                if (!best_fit) break;
            }
            if (placed[j].end > cursor) cursor = placed[j].end;
        }
        off[t] = best >= 0 ? best : cursor;
        if (off[t] + size > arena) arena = off[t] + size;
    }
    return arena;
}

typedef struct ByOffset {
    int64_t off;
    int t;
} ByOffset;

static int top_first(const void *a, const void *b) {
    const ByOffset *x = a, *y = b;
    if (x->off != y->off) return x->off > y->off ? -1 : 1;
    return x->t - y->t;
}

/* Local improvement: take each tensor out, topmost first, and put it back at
 * the lowest offset where it fits among everything else; repeat while that
 * moves something. Returns the new arena size. */
static int64_t compact(const MemPlan *mp, const int *order, int m, Placed *placed, ByOffset *tops, int64_t *off) {
    for (int pass = 0; pass < 8; pass++) {
        for (int k = 0; k < m; k++) tops[k] = (ByOffset){off[order[k]], order[k]};
        qsort(tops, (size_t)m, sizeof(ByOffset), top_first);
        bool moved = false;
        for (int k = 0; k < m; k++) {
            int t = tops[k].t;
            int64_t size = align_up(mp->bytes[t]);
            int np = 0;
            for (int j = 0; j < m; j++) {
                int u = order[j];
                if (u != t && mp->def[u] <= mp->last[t] && mp->def[t] <= mp->last[u]) placed[np++] = (Placed){off[u], off[u] + align_up(mp->bytes[u])};
            }
            qsort(placed, (size_t)np, sizeof(Placed), by_offset);
            int64_t cursor = 0;
            for (int j = 0; j < np && placed[j].off - cursor < size; j++)
                if (placed[j].end > cursor) cursor = placed[j].end;
            if (cursor < off[t]) {
                off[t] = cursor;
                moved = true;
            }
        }
        if (!moved) break;
    }
    int64_t arena = 0;
    for (int k = 0; k < m; k++)
        if (off[order[k]] + align_up(mp->bytes[order[k]]) > arena) arena = off[order[k]] + align_up(mp->bytes[order[k]]);
    return arena;
}

/* Places the arena tensors in `order` (then compacts) and keeps the result
 * in mp if its arena is smaller than the best so far. */
static void try_order(MemPlan *mp, int n, const int *order, int m, bool best_fit, Placed *placed, ByOffset *tops, int64_t *trial) {
    for (int t = 0; t < n; t++) trial[t] = mp->offset[t] == MEMPLAN_INTERNAL ? MEMPLAN_INTERNAL : -1;
    place_greedy(mp, order, m, best_fit, placed, trial);
    int64_t arena = compact(mp, order, m, placed, tops, trial);
    if (arena < mp->arena_bytes) {
        mp->arena_bytes = arena;
        memcpy(mp->offset, trial, sizeof(int64_t) * (size_t)n);
    }
}

bool memplan_build(const Graph *g, int loss_op, const bool *internal, Precision p, bool place, Arena *a, MemPlan *mp, char *err, int errcap) {
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
    graph_last_use(g, mp->last);
    for (int t = 0; t < n; t++) {
        mp->def[t] = g->tensors[t].producer;
        persistent[t] = g->tensors[t].kind != TK_ACTIVATION;
    }
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        mp->step_flops += op_def(op->kind)->flops(g, op);
        /* parameter gradients live in the persistent gradient region */
        if (op->kind == OP_SGD_STEP || op->kind == OP_ADAMW_STEP) persistent[op->in[1]] = true;
    }
    int m = 0;
    for (int t = 0; t < n; t++) {
        const Tensor *x = &g->tensors[t];
        mp->bytes[t] = memplan_tensor_bytes(g, t, persistent[t], p);
        mp->offset[t] = -1;
        if (internal && internal[t]) {
            mp->offset[t] = MEMPLAN_INTERNAL;
        } else if (x->kind == TK_INPUT) {
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
        if (live > mp->lower_bound_bytes) mp->lower_bound_bytes = live, mp->peak_op = o;
    }
    if (!place) return true;
    /* greedy placement under a few orders and fit rules; keep the smallest arena */
    SizeKey *keys = arena_array(a, (size_t)m + 1, sizeof(SizeKey));
    int64_t *trial = arena_array(a, (size_t)n + 1, sizeof(int64_t));
    ByOffset *tops = arena_array(a, (size_t)m + 1, sizeof(ByOffset));
    if (!keys || !trial || !tops) return snprintf(err, (size_t)errcap, "out of memory"), false;
    mp->arena_bytes = INT64_MAX;
    for (int strategy = 0; strategy < 10; strategy++) {
        for (int k = 0; k < m; k++) {
            int t = order[k];
            double size = (double)align_up(mp->bytes[t]), life = (double)(mp->last[t] - mp->def[t] + 1);
            int order_kind = strategy / 2;
            double key = order_kind == 0   ? size
                         : order_kind == 1 ? size * life
                         : order_kind == 2 ? -(double)mp->def[t]
                         : order_kind == 3 ? life * 1e15 + size
                                           : (double)mp->last[t] * 1e15 + size;
            keys[k] = (SizeKey){key, mp->def[t], t};
        }
        qsort(keys, (size_t)m, sizeof(SizeKey), by_key);
        for (int k = 0; k < m; k++) order[k] = keys[k].t;
        try_order(mp, n, order, m, strategy % 2 == 0, placed, tops, trial);
    }
    /* then a few seeded perturbations of the size order: swap neighbours of
     * similar size and re-place; keeps the best (plans stay reproducible) */
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
    for (int trial_no = 0; trial_no < 24 && mp->arena_bytes > mp->lower_bound_bytes; trial_no++) {
        for (int k = 0; k < m; k++) {
            int t = order[k];
            keys[k] = (SizeKey){(double)align_up(mp->bytes[t]), mp->def[t], t};
        }
        qsort(keys, (size_t)m, sizeof(SizeKey), by_key);
        for (int k = 0; k + 1 < m; k++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if ((rng & 3) == 0 && keys[k + 1].key >= 0.5 * keys[k].key) {
                SizeKey tmp = keys[k];
                keys[k] = keys[k + 1];
                keys[k + 1] = tmp;
            }
        }
        for (int k = 0; k < m; k++) order[k] = keys[k].t;
        try_order(mp, n, order, m, trial_no % 2 == 0, placed, tops, trial);
    }
    if (m == 0) mp->arena_bytes = 0;
    return true;
}
