/* passes/views.c — which concat inputs and split outputs live inside another
 * tensor's buffer (zero-copy concat and split). Decides only the aliasing;
 * lifetimes and offsets are memplan.c's, copies and strides the lowering's. */
#include "views.h"

#include <stdio.h>
#include <string.h>

#include "memplan.h"

static int64_t inner_of(const Shape *s) {
    int64_t inner = 1;
    for (int k = 2; k < s->nd; k++) inner *= s->d[k];
    return inner;
}

/* Elements of one row of t: an image (channels x inner), or for channels
 * last a pixel (its channels). */
static int64_t row_of(const Tensor *x) { return x->channels_last ? x->shape.d[1] : x->shape.d[1] * inner_of(&x->shape); }

bool views_fits(const Graph *g, int t, int b, int64_t chan) {
    const Shape *s = &g->tensors[t].shape, *bs = &g->tensors[b].shape;
    if (s->nd < 2 || s->nd != bs->nd || s->d[0] != bs->d[0] || chan < 0 || chan > bs->d[1] - s->d[1]) return false;
    for (int k = 2; k < s->nd; k++)
        if (s->d[k] != bs->d[k]) return false;
    return g->tensors[t].dtype == g->tensors[b].dtype && g->tensors[t].channels_last == g->tensors[b].channels_last;
}

int64_t views_row_stride(const Graph *g, const Views *v, int t) {
    int b = v->base[t];
    if (b == t || g->tensors[b].shape.d[1] == g->tensors[t].shape.d[1]) return 0;
    return row_of(&g->tensors[b]);
}

void views_geometry(const Graph *g, const Views *v, int t, int64_t *rows, int64_t *row, int64_t *stride) {
    const Tensor *x = &g->tensors[t];
    int64_t n = shape_numel(&x->shape);
    *stride = v ? views_row_stride(g, v, t) : 0;
    *row = *stride ? row_of(x) : n;
    *rows = *stride ? n / *row : 1;
}

int64_t views_image_stride(const Graph *g, const Views *v, int t) {
    const Tensor *x = &g->tensors[t];
    int64_t bs = views_row_stride(g, v, t);
    /* a channels-last view's rows are pixels: an image is a plane of them */
    if (bs) return x->channels_last ? bs * inner_of(&x->shape) : bs;
    return x->shape.nd >= 1 && x->shape.d[0] > 0 ? shape_numel(&x->shape) / x->shape.d[0] : shape_numel(&x->shape);
}

bool views_split_source(const Graph *g, int t, int *w, int64_t *chan) {
    int o = g->tensors[t].producer;
    if (o < 0 || g->ops[o].kind != OP_SPLIT || g->ops[o].a.axis != 1) return false;
    const Op *op = &g->ops[o];
    *chan = 0;
    for (int i = 0; op->out[i] != t; i++) *chan += g->tensors[op->out[i]].shape.d[1];
    *w = op->in[0];
    return true;
}

int64_t views_elem_offset(const Graph *g, const Views *v, int t) {
    return g->tensors[t].channels_last ? v->chan[t] : v->chan[t] * inner_of(&g->tensors[t].shape);
}

void views_widen_lifetimes(const Views *v, int n, int *def, int *last) {
    for (int t = 0; v->n_views && t < n; t++) {
        int b = v->base[t];
        if (b == t) continue;
        if (def && def[t] < def[b]) def[b] = def[t];
        if (last[t] > last[b]) last[b] = last[t];
    }
}

bool views_identity(const Graph *g, Arena *a, Views *v, char *err, int errcap) {
    v->base = arena_array(a, (size_t)g->n_tensors + 1, sizeof(int));
    v->chan = arena_array(a, (size_t)g->n_tensors + 1, sizeof(int64_t));
    v->n_views = 0;
    if (!v->base || !v->chan) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int t = 0; t < g->n_tensors; t++) v->base[t] = t, v->chan[t] = 0;
    return true;
}

typedef struct Alias {
    const Graph *g;
    int *parent;        /* the tensor t was placed in directly (itself: none yet) */
    int64_t *off;       /* its first channel there */
    bool *ok;           /* may hold others */
    bool *movable;      /* may live inside another buffer: ok, and no op that steps
                         * only over images touches it if it is channels last */
    /* the cost side: per buffer (a tensor that is no view) its lifetime and
     * aligned bytes; live bytes per op and their peak */
    int *lo, *hi;
    int64_t *bytes, *live, peak;
    int n_ops;
} Alias;

static bool axis1_copy(const Op *op) { return (op->kind == OP_CONCAT || op->kind == OP_SPLIT) && op->a.axis == 1; }

/* Which tensors may take part: step activations in memory that only
 * elementwise-addressable ops touch. A reshape, pad, crop or a copy along
 * another axis reads its operand as one flat run, so neither side may be a
 * strided slice. A channel slice of a channels-last tensor is strided per
 * pixel, not per image: it may hold others, but live inside another buffer
 * only if every op touching it steps over rows with a stride (by_rows). */
static void mark_eligible(const Graph *g, const bool *internal, bool (*by_rows)(OpKind), bool *ok, bool *movable, bool *persistent) {
    memplan_mark_persistent(g, persistent);
    for (int t = 0; t < g->n_tensors; t++) {
        const Tensor *x = &g->tensors[t];
        ok[t] = x->kind == TK_ACTIVATION && x->producer >= 0 && !persistent[t] && !(internal && internal[t]) && x->shape.nd >= 2 && x->dtype != DT_I64;
        movable[t] = true;
    }
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        if (by_rows && by_rows(op->kind)) continue;
        for (int i = 0; i < op->n_in + op->n_out; i++) {
            int t = i < op->n_in ? op->in[i] : op->out[i - op->n_in];
            if (g->tensors[t].channels_last) movable[t] = false;
        }
    }
    for (int i = 0; i < g->n_outputs; i++) ok[g->outputs[i]] = false;
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        bool flat = op->kind == OP_RESHAPE || op->kind == OP_DETACH || op->kind == OP_ZEROPAD2D || op->kind == OP_CROP2D ||
                    ((op->kind == OP_CONCAT || op->kind == OP_SPLIT) && !axis1_copy(op));
        /* the optimizer and the loss read their operands whole */
        flat |= op->kind == OP_DETECT_LOSS || op->kind == OP_DETECT_LOSS_BWD || op->kind == OP_GRAD_CLIP || op->kind == OP_SGD_STEP || op->kind == OP_ADAMW_STEP;
        if (!flat) continue;
        for (int i = 0; i < op->n_in; i++) ok[op->in[i]] = false;
        for (int i = 0; i < op->n_out; i++) ok[op->out[i]] = false;
    }
    for (int t = 0; t < g->n_tensors; t++) movable[t] = movable[t] && ok[t];
}

static int root_of(const Alias *al, int t) {
    while (al->parent[t] != t) t = al->parent[t];
    return t;
}

/* Puts buffer x (with whatever lives in it) into t's buffer at channel
 * `chan` of t, if the merged buffer's lifetime keeps every op's live bytes
 * within the peak. */
static void place(Alias *al, int x, int t, int64_t chan) {
    int y = root_of(al, t);
    if (y == x) return;
    int lo = al->lo[x] < al->lo[y] ? al->lo[x] : al->lo[y], hi = al->hi[x] > al->hi[y] ? al->hi[x] : al->hi[y];
    for (int pass = 0; pass < 2; pass++)
        for (int o = lo; o <= hi && o < al->n_ops; o++) {
            int64_t d = al->bytes[y];
            if (o >= al->lo[x] && o <= al->hi[x]) d -= al->bytes[x];
            if (o >= al->lo[y] && o <= al->hi[y]) d -= al->bytes[y];
            if (pass == 0 && al->live[o] + d > al->peak) return;
            if (pass == 1) al->live[o] += d;
        }
    al->lo[y] = lo, al->hi[y] = hi;
    al->parent[x] = t;
    al->off[x] = chan;
}

static void alias_split(Alias *al, const Op *op) {
    int r = op->in[0];
    if (!al->ok[r]) return;
    int64_t off = 0;
    for (int i = 0; i < op->n_out; i++) {
        int t = op->out[i];
        if (al->movable[t] && al->parent[t] == t && views_fits(al->g, t, r, off)) place(al, t, r, off);
        off += al->g->tensors[t].shape.d[1];
    }
}

/* Where concat input x's values sit in p: its channel in p when it lives
 * there, or when the split that made it took it from p (a copy, but p holds
 * the same values at that channel); else -1. */
static int64_t channel_in(const Alias *al, int x, int p) {
    int w;
    int64_t chan;
    if (al->parent[x] == p && x != p) return al->off[x];
    return views_split_source(al->g, x, &w, &chan) && w == p ? chan : -1;
}

/* A run of concat inputs whose values already sit in p, in p's order and
 * covering all of p, lets p itself move into the concat's buffer at `at`. */
static bool covers(const Alias *al, const Op *op, const int64_t *slot, int p, int64_t at) {
    int64_t end = at + al->g->tensors[p].shape.d[1], covered = 0;
    for (int j = 0; j < op->n_in; j++) {
        int x = op->in[j];
        int64_t c = al->g->tensors[x].shape.d[1], in_p = channel_in(al, x, p);
        if (slot[j] + c <= at || slot[j] >= end) continue;
        if (in_p < 0 || slot[j] - in_p != at) return false;
        covered += c;
    }
    return covered == al->g->tensors[p].shape.d[1];
}

static void alias_concat(Alias *al, const Op *op, int64_t *slot) {
    int y = op->out[0];
    if (!al->ok[y]) return;
    for (int j = 0, c = 0; j < op->n_in; j++) slot[j] = c, c += (int)al->g->tensors[op->in[j]].shape.d[1];
    for (int j = 0; j < op->n_in; j++) {
        int x = op->in[j], p = al->parent[x];
        int64_t in_p = al->off[x];
        if (p == x) {
            if (al->movable[x] && views_fits(al->g, x, y, slot[j])) {
                place(al, x, y, slot[j]);
                continue;
            }
            /* a split output kept in its own buffer: its source may move instead */
            if (!views_split_source(al->g, x, &p, &in_p)) continue;
        }
        int64_t at = slot[j] - in_p;
        if (p != y && al->parent[p] == p && al->movable[p] && views_fits(al->g, p, y, at) && covers(al, op, slot, p, at)) place(al, p, y, at);
    }
}

/* Lifetimes and bytes as the memory plan will see them, and the live bytes
 * per op with no views. */
static bool cost_init(Alias *al, const Fusion *fu, Precision p, const bool *persistent, Arena *a, char *err, int errcap) {
    const Graph *g = al->g;
    size_t n = (size_t)g->n_tensors + 1;
    al->n_ops = g->n_ops;
    al->lo = arena_array(a, n, sizeof(int));
    al->hi = arena_array(a, n, sizeof(int));
    al->bytes = arena_array(a, n, sizeof(int64_t));
    al->live = arena_array(a, (size_t)g->n_ops + 2, sizeof(int64_t));
    if (!al->lo || !al->hi || !al->bytes || !al->live) return snprintf(err, (size_t)errcap, "out of memory"), false;
    if (!memplan_lifetimes(g, fu, a, al->lo, al->hi, err, errcap)) return false;
    for (int t = 0; t < g->n_tensors; t++) {
        bool arena = g->tensors[t].kind == TK_ACTIVATION && !persistent[t] && !fu->internal[t] && al->lo[t] >= 0;
        al->bytes[t] = arena ? memplan_align(memplan_tensor_bytes(g, t, false, p)) : 0;
        if (!arena) continue;
        int end = al->hi[t] < g->n_ops ? al->hi[t] : g->n_ops;
        al->live[al->lo[t]] += al->bytes[t];
        al->live[end + 1] -= al->bytes[t];
    }
    al->peak = 0;
    for (int o = 0; o <= g->n_ops; o++) {
        if (o) al->live[o] += al->live[o - 1];
        if (al->live[o] > al->peak) al->peak = al->live[o];
    }
    return true;
}

bool views_build(const Graph *g, Fusion *fu, Precision p, bool (*by_rows)(OpKind), Arena *a, char *err, int errcap) {
    Views *v = &fu->views;
    if (!views_identity(g, a, v, err, errcap)) return false;
    size_t n = (size_t)g->n_tensors + 1;
    Alias al = {.g = g, .parent = arena_array(a, n, sizeof(int)), .off = arena_array(a, n, sizeof(int64_t)), .ok = arena_array(a, n, sizeof(bool)),
                .movable = arena_array(a, n, sizeof(bool))};
    bool *persistent = arena_array(a, n, sizeof(bool));
    int64_t *slot = arena_array(a, IR_MAX_SPLIT + 1, sizeof(int64_t));
    if (!al.parent || !al.off || !al.ok || !al.movable || !persistent || !slot) return snprintf(err, (size_t)errcap, "out of memory"), false;
    mark_eligible(g, fu->internal, by_rows, al.ok, al.movable, persistent);
    if (!cost_init(&al, fu, p, persistent, a, err, errcap)) return false;
    for (int t = 0; t < g->n_tensors; t++) al.parent[t] = t, al.off[t] = 0;
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        if (!axis1_copy(op)) continue;
        if (op->kind == OP_SPLIT) alias_split(&al, op);
        else if (op->n_in <= IR_MAX_SPLIT) alias_concat(&al, op, slot);
    }
    /* chains (a split of a tensor that moved into a concat) resolve to the
     * outermost buffer; offsets add up */
    for (int t = 0; t < g->n_tensors; t++) {
        int b = t;
        int64_t chan = 0;
        for (int hops = 0; al.parent[b] != b; hops++) {
            if (hops > g->n_tensors) return snprintf(err, (size_t)errcap, "internal error: tensor %d's views form a cycle", t), false;
            chan += al.off[b];
            b = al.parent[b];
        }
        v->base[t] = b;
        v->chan[t] = chan;
        v->n_views += b != t;
    }
    return true;
}
