/* passes/memplan.c — liveness, the lower bound, and greedy-by-size best-fit
 * offsets in one step arena (DESIGN decision 5). */
#include "memplan.h"

#include "views.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *precision_name(Precision p) { return p == PREC_BF16 ? "bf16" : p == PREC_FP16 ? "fp16" : "fp32"; }

int64_t memplan_align(int64_t x) { return (x + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN; }

/* per-channel statistics and the loss are fp32 at any precision, and so is
 * a sum of losses (an end-to-end head's two) */
static bool always_fp32(const Graph *g, int t) {
    int p = g->tensors[t].producer;
    if (p < 0) return false;
    const Op *op = &g->ops[p];
    if (op->kind == OP_ADD) {
        for (int i = 0; i < op->n_in; i++)
            if (!always_fp32(g, op->in[i])) return false;
        return true;
    }
    return (op->kind == OP_BATCHNORM && t != op->out[0]) || op->kind == OP_DETECT_LOSS || op->kind == OP_GRAD_CLIP;
}

void memplan_mark_persistent(const Graph *g, bool *persistent) {
    for (int t = 0; t < g->n_tensors; t++) persistent[t] = g->tensors[t].kind != TK_ACTIVATION;
    /* parameter gradients live in the persistent gradient region */
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].kind == OP_SGD_STEP || g->ops[o].kind == OP_ADAMW_STEP) persistent[g->ops[o].in[1]] = true;
}

void memplan_mark_compute_copies(const Graph *g, Precision p, bool *copy) {
    memset(copy, 0, sizeof *copy * (size_t)g->n_tensors);
    if (p == PREC_FP32) return;
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        if (op->kind != OP_CONV2D && op->kind != OP_CONV2D_DGRAD) continue;
        for (int i = 1; i < op->n_in; i++)
            if (g->tensors[op->in[i]].kind == TK_PARAM) copy[op->in[i]] = true;
    }
}

/* An input only convolutions read (the images): autocast would cast it to
 * the compute type at the first convolution, so it is stored there, and
 * every convolution sees one type in x, w and y. In channels-last plans the
 * images' only reader is their layout reshape, whose output the
 * convolutions read: the same holds. */
static bool conv_only_input(const Graph *g, int t) {
    if (g->tensors[t].kind != TK_INPUT) return false;
    int readers = 0;
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        for (int i = 0; i < op->n_in; i++) {
            if (op->in[i] != t) continue;
            /* x of a convolution, and of its weight gradient */
            bool layout = op->kind == OP_RESHAPE && op->a.channels_last && shape_eq(&op->a.shape, &g->tensors[t].shape);
            if (!(op->kind == OP_CONV2D && i == 0) && !(op->kind == OP_CONV2D_WGRAD && i == 1) && !layout) return false;
            readers++;
        }
    }
    return readers > 0;
}

int64_t memplan_tensor_bytes(const Graph *g, int t, bool persistent, Precision p) {
    const Tensor *x = &g->tensors[t];
    int64_t n = shape_numel(&x->shape);
    if (x->dtype == DT_I64) return n * 8;
    bool low = p != PREC_FP32 && ((x->kind == TK_ACTIVATION && !persistent && !always_fp32(g, t)) || conv_only_input(g, t));
    return n * (low ? 2 : 4);
}

DType memplan_storage_dtype(const Graph *g, int t, bool persistent, Precision p) {
    const Tensor *x = &g->tensors[t];
    if (x->dtype == DT_I64) return DT_I64;
    int64_t n = shape_numel(&x->shape);
    if (n > 0 && memplan_tensor_bytes(g, t, persistent, p) == 2 * n) return p == PREC_FP16 ? DT_F16 : DT_BF16;
    return DT_F32;
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

/* Tensors already placed, kept sorted by offset (ties by id) so each search
 * is one scan instead of a sort. */
typedef struct ByOff {
    int *t, n;
    const int64_t *off;
} ByOff;

static bool before(const ByOff *s, int a, int b) { return s->off[a] < s->off[b] || (s->off[a] == s->off[b] && a < b); }

static void byoff_insert(ByOff *s, int t) {
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (before(s, s->t[mid], t)) lo = mid + 1;
        else hi = mid;
    }
    memmove(s->t + lo + 1, s->t + lo, sizeof(int) * (size_t)(s->n - lo));
    s->t[lo] = t;
    s->n++;
}

static void byoff_remove(ByOff *s, int t) {
    int k = 0;
    while (k < s->n && s->t[k] != t) k++;
    if (k == s->n) return;
    memmove(s->t + k, s->t + k + 1, sizeof(int) * (size_t)(s->n - k - 1));
    s->n--;
}

static bool overlap(const MemPlan *mp, int t, int u) { return mp->def[u] <= mp->last[t] && mp->def[t] <= mp->last[u]; }

/* The lowest (first fit) or tightest (best fit) offset where t fits among
 * the placed tensors whose lifetimes overlap its own. */
static int64_t find_gap(const MemPlan *mp, const ByOff *s, int t, bool best_fit) {
    int64_t size = memplan_align(mp->bytes[t]), best = -1, best_gap = INT64_MAX, cursor = 0;
    for (int j = 0; j < s->n; j++) {
        int u = s->t[j];
        if (u == t || !overlap(mp, t, u)) continue;
        int64_t gap = s->off[u] - cursor;
        if (gap >= size && gap < best_gap) {
            best = cursor;
            best_gap = best_fit ? gap : -1;
            if (!best_fit) break;
        }
        int64_t end = s->off[u] + memplan_align(mp->bytes[u]);
        if (end > cursor) cursor = end;
    }
    return best >= 0 ? best : cursor;
}

/* Places tensors in the given order, each into the smallest gap (best fit)
 * or the lowest gap (first fit); returns the arena size, offsets in off[]. */
static int64_t place_greedy(const MemPlan *mp, const int *order, int m, bool best_fit, int *scratch, int64_t *off) {
    int64_t arena = 0;
    ByOff s = {scratch, 0, off};
    for (int k = 0; k < m; k++) {
        int t = order[k];
        off[t] = find_gap(mp, &s, t, best_fit);
        byoff_insert(&s, t);
        if (off[t] + memplan_align(mp->bytes[t]) > arena) arena = off[t] + memplan_align(mp->bytes[t]);
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
static int64_t compact(const MemPlan *mp, const int *order, int m, int *scratch, ByOffset *tops, int64_t *off) {
    ByOff s = {scratch, 0, off};
    for (int k = 0; k < m; k++) byoff_insert(&s, order[k]);
    for (int pass = 0; pass < 8; pass++) {
        for (int k = 0; k < m; k++) tops[k] = (ByOffset){off[order[k]], order[k]};
        qsort(tops, (size_t)m, sizeof(ByOffset), top_first);
        bool moved = false;
        for (int k = 0; k < m; k++) {
            int t = tops[k].t;
            int64_t at = find_gap(mp, &s, t, false);
            if (at < off[t]) {
                byoff_remove(&s, t);
                off[t] = at;
                byoff_insert(&s, t);
                moved = true;
            }
        }
        if (!moved) break;
    }
    int64_t arena = 0;
    for (int k = 0; k < m; k++)
        if (off[order[k]] + memplan_align(mp->bytes[order[k]]) > arena) arena = off[order[k]] + memplan_align(mp->bytes[order[k]]);
    return arena;
}

/* Places the arena tensors in `order` (then compacts) and keeps the result
 * in mp if its arena is smaller than the best so far. */
static bool try_order(MemPlan *mp, int n, const int *order, int m, bool best_fit, int *placed, ByOffset *tops, int64_t *trial) {
    for (int t = 0; t < n; t++) trial[t] = mp->offset[t] == MEMPLAN_INTERNAL ? MEMPLAN_INTERNAL : -1;
    place_greedy(mp, order, m, best_fit, placed, trial);
    int64_t arena = compact(mp, order, m, placed, tops, trial);
    if (arena >= mp->arena_bytes) return false;
    mp->arena_bytes = arena;
    memcpy(mp->offset, trial, sizeof(int64_t) * (size_t)n);
    return true;
}

bool memplan_lifetimes(const Graph *g, const Fusion *fu, Arena *a, int *def, int *last, char *err, int errcap) {
    graph_last_use(g, last);
    for (int t = 0; t < g->n_tensors; t++) def[t] = g->tensors[t].producer;
    /* a launch may carry out several ops of its group at once: a tensor is
     * live from the start of its producer's group to the end of its last
     * reader's group */
    if (!fu) return true;
    int *lo = arena_array(a, (size_t)g->n_ops + 1, sizeof(int)), *hi = arena_array(a, (size_t)g->n_ops + 1, sizeof(int));
    if (!lo || !hi) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int i = 0; i < fu->n_groups; i++)
        for (int o = fu->groups[i].first; o < fu->groups[i].first + fu->groups[i].n; o++) lo[o] = fu->groups[i].first, hi[o] = fu->groups[i].first + fu->groups[i].n - 1;
    for (int t = 0; t < g->n_tensors; t++) {
        if (def[t] >= 0) def[t] = lo[def[t]];
        if (last[t] >= 0 && last[t] < g->n_ops) last[t] = hi[last[t]];
    }
    return true;
}

bool memplan_build(const Graph *g, int loss_op, const Fusion *fu, Precision p, bool place, Arena *a, MemPlan *mp, char *err, int errcap) {
    const bool *internal = fu ? fu->internal : NULL;
    memset(mp, 0, sizeof *mp);
    mp->precision = p;
    int n = g->n_tensors;
    mp->offset = arena_array(a, (size_t)n + 1, sizeof(int64_t));
    mp->bytes = arena_array(a, (size_t)n + 1, sizeof(int64_t));
    mp->def = arena_array(a, (size_t)n + 1, sizeof(int));
    mp->last = arena_array(a, (size_t)n + 1, sizeof(int));
    bool *persistent = arena_array(a, (size_t)n + 1, sizeof(bool)), *copy = arena_array(a, (size_t)n + 1, sizeof(bool));
    int *order = arena_array(a, (size_t)n + 1, sizeof(int));
    int *placed = arena_array(a, (size_t)n + 1, sizeof(int));
    int64_t *delta = arena_array(a, (size_t)g->n_ops + 2, sizeof(int64_t));
    if (!mp->offset || !mp->bytes || !mp->def || !mp->last || !persistent || !copy || !order || !placed || !delta)
        return snprintf(err, (size_t)errcap, "out of memory"), false;
    if (!memplan_lifetimes(g, fu, a, mp->def, mp->last, err, errcap)) return false;
    memplan_mark_persistent(g, persistent);
    memplan_mark_compute_copies(g, p, copy);
    /* a tensor that holds views is live while any of them is */
    const Views *views = fu ? &fu->views : NULL;
    if (views) views_widen_lifetimes(views, n, mp->def, mp->last);
    for (int o = 0; o < g->n_ops; o++) mp->step_flops += op_def(g->ops[o].kind)->flops(g, &g->ops[o]);
    int m = 0;
    for (int t = 0; t < n; t++) {
        const Tensor *x = &g->tensors[t];
        mp->bytes[t] = memplan_tensor_bytes(g, t, persistent[t], p);
        mp->offset[t] = -1;
        if (views && views->base[t] != t) {
            continue; /* inside its base's bytes */
        } else if (internal && internal[t]) {
            mp->offset[t] = MEMPLAN_INTERNAL;
        } else if (x->kind == TK_INPUT) {
            mp->input_bytes += mp->bytes[t];
        } else if (persistent[t]) {
            mp->persistent_bytes += mp->bytes[t];
            /* a low-precision compute copy beside the fp32 master of a weight convolutions read */
            if (copy[t]) mp->persistent_bytes += shape_numel(&x->shape) * 2;
        } else {
            mp->naive_bytes += memplan_align(mp->bytes[t]);
            delta[mp->def[t]] += memplan_align(mp->bytes[t]);
            delta[mp->last[t] + 1] -= memplan_align(mp->bytes[t]);
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
            double size = (double)memplan_align(mp->bytes[t]), life = (double)(mp->last[t] - mp->def[t] + 1);
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
    /* then seeded perturbations of the best order so far (hill climbing):
     * swap neighbours of similar size and re-place; plans stay reproducible */
    int *best = arena_array(a, (size_t)m + 1, sizeof(int));
    if (!best) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int k = 0; k < m; k++) keys[k] = (SizeKey){(double)memplan_align(mp->bytes[order[k]]), mp->def[order[k]], order[k]};
    qsort(keys, (size_t)m, sizeof(SizeKey), by_key);
    for (int k = 0; k < m; k++) best[k] = keys[k].t;
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
    for (int trial_no = 0; trial_no < 200 && mp->arena_bytes > mp->lower_bound_bytes; trial_no++) {
        memcpy(order, best, sizeof(int) * (size_t)m);
        for (int k = 0; k + 1 < m; k++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            int u = order[k], v = order[k + 1];
            if ((rng & 3) == 0 && memplan_align(mp->bytes[v]) >= memplan_align(mp->bytes[u]) / 2) order[k] = v, order[k + 1] = u;
        }
        if (try_order(mp, n, order, m, trial_no % 2 == 0, placed, tops, trial)) memcpy(best, order, sizeof(int) * (size_t)m);
    }
    if (m == 0) mp->arena_bytes = 0;
    memplan_place_views(g, views, mp->offset, p);
    return true;
}

void memplan_place_views(const Graph *g, const Views *v, int64_t *offset, Precision p) {
    for (int t = 0; v && v->n_views && t < g->n_tensors; t++) {
        int b = v->base[t];
        if (b == t) continue;
        int64_t esize = memplan_tensor_bytes(g, t, false, p) / shape_numel(&g->tensors[t].shape);
        offset[t] = offset[b] + views_elem_offset(g, v, t) * esize;
    }
}
