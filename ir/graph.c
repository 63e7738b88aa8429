/* ir/graph.c — building graphs: inputs, named parameters/buffers, ops whose
 * output shapes come from the registry. Also the verifier and shape helpers. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ir.h"

Shape shape4(int64_t n, int64_t c, int64_t h, int64_t w) { return (Shape){4, {n, c, h, w}}; }
Shape shape1(int64_t n) { return (Shape){1, {n}}; }

int64_t shape_numel(const Shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->nd; i++) n *= s->d[i];
    return n;
}

bool shape_eq(const Shape *a, const Shape *b) {
    if (a->nd != b->nd) return false;
    for (int i = 0; i < a->nd; i++)
        if (a->d[i] != b->d[i]) return false;
    return true;
}

const char *dtype_name(DType dt) {
    static const char *n[] = {"f32", "f16", "bf16", "i64"};
    return n[dt];
}

void graph_init(Graph *g, Arena *a) {
    memset(g, 0, sizeof *g);
    g->arena = a;
}

/* Largest element count a tensor may have: keeps every later byte size
 * (numel x 8) far from overflow. */
#define MAX_NUMEL (INT64_C(1) << 40)

static bool shape_sane(Graph *g, const Shape *s) {
    if (s->nd < 0 || s->nd > IR_MAX_DIMS) return snprintf(g->err, sizeof g->err, "rank %d unsupported", s->nd), false;
    int64_t n = 1;
    for (int i = 0; i < s->nd; i++) {
        if (s->d[i] < 1 || s->d[i] > MAX_NUMEL || n > MAX_NUMEL / s->d[i])
            return snprintf(g->err, sizeof g->err, "tensor dimension %d of size %" PRId64 " is empty or too large", i, s->d[i]), false;
        n *= s->d[i];
    }
    return true;
}

static int new_tensor(Graph *g, TensorKind kind, Shape s, DType dt, const char *name) {
    if (!shape_sane(g, &s)) return -1;
    if (g->n_tensors >= GRAPH_MAX_TENSORS) return snprintf(g->err, sizeof g->err, "model too large (more than %d tensors)", GRAPH_MAX_TENSORS), -1;
    if (!arena_grow(g->arena, (void **)&g->tensors, g->n_tensors, &g->cap_tensors, sizeof(Tensor)))
        return snprintf(g->err, sizeof g->err, "out of memory"), -1;
    int id = g->n_tensors++;
    g->tensors[id] = (Tensor){.id = id, .kind = kind, .dtype = dt, .shape = s, .name = name, .producer = -1};
    return id;
}

int graph_add_input(Graph *g, const char *name, Shape s, DType dt) {
    int id = new_tensor(g, TK_INPUT, s, dt, name);
    if (id < 0) return -1;
    if (!arena_grow(g->arena, (void **)&g->inputs, g->n_inputs, &g->cap_inputs, sizeof(int)))
        return snprintf(g->err, sizeof g->err, "out of memory"), -1;
    g->inputs[g->n_inputs++] = id;
    return id;
}

int graph_add_state(Graph *g, TensorKind kind, const char *name, Shape s, DType dt) {
    return new_tensor(g, kind, s, dt, name);
}

/* Layout is a property of the data flow: only a reshape (or a zeros) names
 * the layout of its output; every other op keeps its rank-4 inputs' layout,
 * which must be one (a convolution reading NHWC images and NCHW weights has
 * no meaning to cuDNN). */
static bool tensor_layout_rule(const Graph *g, const Op *op, const Shape *out0, bool *cl, char *err, int errcap) {
    if (op->kind == OP_RESHAPE || op->kind == OP_ZEROS) {
        *cl = op->a.channels_last && out0->nd == 4;
        if (op->a.channels_last && out0->nd != 4) return snprintf(err, (size_t)errcap, "%s: only a rank-4 tensor is stored channels last", op_def(op->kind)->name), false;
        return true;
    }
    int seen = 0;
    *cl = false;
    for (int i = 0; i < op->n_in; i++) {
        const Tensor *t = &g->tensors[op->in[i]];
        if (t->shape.nd != 4) continue;
        if (seen++ && t->channels_last != *cl)
            return snprintf(err, (size_t)errcap, "%s: reads channels-last and NCHW tensors together (%%%d is %s)", op_def(op->kind)->name, t->id, t->channels_last ? "channels last" : "NCHW"), false;
        *cl = t->channels_last;
    }
    return true;
}

void tensor_strides4(const Tensor *t, int64_t st[4]) {
    const int64_t *d = t->shape.d;
    if (t->channels_last) st[1] = 1, st[3] = d[1], st[2] = d[1] * d[3], st[0] = d[1] * d[2] * d[3];
    else st[3] = 1, st[2] = d[3], st[1] = d[2] * d[3], st[0] = d[1] * d[2] * d[3];
}

bool tensor_logical_order(const Tensor *t) {
    return !t->channels_last || t->shape.d[1] == 1 || t->shape.d[2] * t->shape.d[3] == 1;
}

int graph_add_op(Graph *g, OpKind kind, const int *in, int n_in, const OpAttrs *a, int n_out, int row, const char *scope) {
    const OpDef *def = op_def(kind);
    if (!def) return snprintf(g->err, sizeof g->err, "unknown op %d", (int)kind), -1;
    if (def->n_out >= 0) n_out = def->n_out;
    if (n_in < def->min_in || n_in > def->max_in || n_out < (def->n_out == 0 ? 0 : 1) || n_out > IR_MAX_SPLIT)
        return snprintf(g->err, sizeof g->err, "%s: wrong number of inputs (%d) or outputs (%d)", def->name, n_in, n_out), -1;
    for (int i = 0; i < n_in; i++)
        if (in[i] < 0 || in[i] >= g->n_tensors) return snprintf(g->err, sizeof g->err, "%s: bad input tensor", def->name), -1;
    if (g->n_ops >= GRAPH_MAX_OPS) return snprintf(g->err, sizeof g->err, "model too large (more than %d ops)", GRAPH_MAX_OPS), -1;
    if (!arena_grow(g->arena, (void **)&g->ops, g->n_ops, &g->cap_ops, sizeof(Op))) return snprintf(g->err, sizeof g->err, "out of memory"), -1;
    Op op = {.id = g->n_ops, .kind = kind, .n_in = n_in, .n_out = n_out, .row = row, .scope = scope};
    if (a) op.a = *a;
    op.in = arena_array(g->arena, (size_t)n_in, sizeof(int));
    op.out = arena_array(g->arena, (size_t)n_out + 1, sizeof(int));
    if (!op.in || !op.out) return snprintf(g->err, sizeof g->err, "out of memory"), -1;
    if (n_in) memcpy(op.in, in, (size_t)n_in * sizeof(int));
    Shape shapes[IR_MAX_SPLIT];
    char why[200];
    if (!def->infer(g, &op, shapes, why, sizeof why)) return snprintf(g->err, sizeof g->err, "%s: %s", def->name, why), -1;
    bool cl;
    if (!tensor_layout_rule(g, &op, &shapes[0], &cl, g->err, sizeof g->err)) return -1;
    for (int i = 0; i < n_out; i++) {
        int t = new_tensor(g, TK_ACTIVATION, shapes[i], DT_F32, NULL);
        if (t < 0) return -1;
        g->tensors[t].producer = op.id;
        g->tensors[t].channels_last = cl && shapes[i].nd == 4;
        op.out[i] = t;
    }
    g->ops[g->n_ops++] = op;
    return op.id;
}

bool graph_mark_output(Graph *g, int tensor) {
    if (!arena_grow(g->arena, (void **)&g->outputs, g->n_outputs, &g->cap_outputs, sizeof(int))) return false;
    g->outputs[g->n_outputs++] = tensor;
    return true;
}

int graph_state_differs(const Graph *a, const Graph *b) {
    const int n = a->n_state < b->n_state ? a->n_state : b->n_state;
    for (int i = 0; i < n; i++) {
        const Tensor *x = &a->tensors[a->state[i]], *y = &b->tensors[b->state[i]];
        if (!x->name || !y->name || strcmp(x->name, y->name) != 0 || !shape_eq(&x->shape, &y->shape)) return i;
    }
    return a->n_state == b->n_state ? -1 : n;
}

int64_t graph_state_numel(const Graph *g, TensorKind kind, bool trainable_only) {
    int64_t n = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        const Tensor *t = &g->tensors[i];
        if (t->kind == kind && !(trainable_only && t->frozen)) n += shape_numel(&t->shape);
    }
    return n;
}


void graph_last_use(const Graph *g, int *last) {
    for (int t = 0; t < g->n_tensors; t++) last[t] = g->tensors[t].producer;
    for (int o = 0; o < g->n_ops; o++)
        for (int i = 0; i < g->ops[o].n_in; i++)
            if (o > last[g->ops[o].in[i]]) last[g->ops[o].in[i]] = o;
    for (int i = 0; i < g->n_outputs; i++) last[g->outputs[i]] = g->n_ops;
}

bool graph_verify(const Graph *g, char *err, int errcap) {
    Arena scratch;
    arena_init(&scratch, 0);
    bool ok = false;
    int *defined = arena_array(&scratch, (size_t)g->n_tensors + 1, sizeof(int));
    int *producers = arena_array(&scratch, (size_t)g->n_tensors + 1, sizeof(int));
    if (!defined || !producers) { snprintf(err, (size_t)errcap, "out of memory"); goto done; }
    for (int i = 0; i < g->n_tensors; i++) {
        const Tensor *t = &g->tensors[i];
        if (t->id != i) { snprintf(err, (size_t)errcap, "tensor %d has id %d", i, t->id); goto done; }
        defined[i] = t->kind != TK_ACTIVATION;
        if (t->kind == TK_OPTIM && !t->name) { snprintf(err, (size_t)errcap, "optimizer state %%%d has no name", i); goto done; }
        if ((t->kind == TK_PARAM || t->kind == TK_BUFFER) && !t->name) { snprintf(err, (size_t)errcap, "state tensor %%%d has no name", i); goto done; }
    }
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        const OpDef *def = op_def(op->kind);
        if (!def || op->id != o) { snprintf(err, (size_t)errcap, "op %d is malformed", o); goto done; }
        for (int i = 0; i < op->n_in; i++) {
            int t = op->in[i];
            if (t < 0 || t >= g->n_tensors || !defined[t]) { snprintf(err, (size_t)errcap, "op %d (%s) reads %%%d before it is produced", o, def->name, t); goto done; }
            TensorKind k = g->tensors[t].kind;
            if (i < 32 && (def->mutates >> i & 1) && k != TK_PARAM && k != TK_BUFFER && k != TK_OPTIM) { snprintf(err, (size_t)errcap, "op %d (%s) updates %%%d, which is not state", o, def->name, t); goto done; }
        }
        Shape shapes[IR_MAX_SPLIT];
        char why[200];
        bool cl = false;
        if (op->n_out > IR_MAX_SPLIT || !def->infer(g, op, shapes, why, sizeof why) || (op->n_out && !tensor_layout_rule(g, op, &shapes[0], &cl, why, sizeof why))) {
            snprintf(err, (size_t)errcap, "op %d (%s): %s", o, def->name, why);
            goto done;
        }
        for (int i = 0; i < op->n_out; i++) {
            int t = op->out[i];
            if (t < 0 || t >= g->n_tensors || g->tensors[t].kind != TK_ACTIVATION) { snprintf(err, (size_t)errcap, "op %d writes a non-activation", o); goto done; }
            if (producers[t]++ || defined[t]) { snprintf(err, (size_t)errcap, "tensor %%%d has more than one producer", t); goto done; }
            if (g->tensors[t].producer != o) { snprintf(err, (size_t)errcap, "tensor %%%d records the wrong producer", t); goto done; }
            if (!shape_eq(&shapes[i], &g->tensors[t].shape)) { snprintf(err, (size_t)errcap, "op %d (%s): output %d shape differs from its shape rule", o, def->name, i); goto done; }
            if (g->tensors[t].channels_last != (cl && shapes[i].nd == 4)) { snprintf(err, (size_t)errcap, "op %d (%s): output %d layout differs from its layout rule", o, def->name, i); goto done; }
            defined[t] = 1;
        }
    }
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].kind == TK_ACTIVATION && !defined[i]) { snprintf(err, (size_t)errcap, "tensor %%%d is never produced", i); goto done; }
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] < 0 || g->outputs[i] >= g->n_tensors) { snprintf(err, (size_t)errcap, "graph output %d is invalid", i); goto done; }
    /* unique state names: sort-free quadratic check is too slow for big
     * models, so compare against a hash table */
    {
        int cap = 1;
        while (cap < 2 * g->n_tensors + 2) cap <<= 1;
        int *slots = arena_array(&scratch, (size_t)cap, sizeof(int));
        if (!slots) { snprintf(err, (size_t)errcap, "out of memory"); goto done; }
        for (int i = 0; i < cap; i++) slots[i] = -1;
        for (int i = 0; i < g->n_tensors; i++) {
            const char *nm = g->tensors[i].name;
            if (!nm || (g->tensors[i].kind != TK_PARAM && g->tensors[i].kind != TK_BUFFER)) continue;
            uint64_t h = 1469598103934665603ULL;
            for (const char *c = nm; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
            for (int s = (int)(h & (uint64_t)(cap - 1));; s = (s + 1) & (cap - 1)) {
                if (slots[s] < 0) { slots[s] = i; break; }
                if (strcmp(g->tensors[slots[s]].name, nm) == 0) { snprintf(err, (size_t)errcap, "state name '%s' used twice", nm); goto done; }
            }
        }
    }
    ok = true;
done:
    arena_free(&scratch);
    return ok;
}
