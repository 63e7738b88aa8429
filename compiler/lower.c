/* compiler/lower.c — parse_model (semantics §2, §3): rows -> graph through the
 * module registry; plus the stride probe and the GFLOPs procedure (§9). */
#include "lower.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct RowState {
    int ch;                 /* output channels; -1 for a list output */
    bool is_list, is_head;
} RowState;

static int resolve_from(int f, int row) { return f >= 0 ? f : row + f; }

/* Channels of 'from' entry f at row i: ch[f] in Ultralytics' bookkeeping. */
static bool channels_of(Builder *b, const RowState *st, int f, int row, Mark m, int *out) {
    int j = resolve_from(f, row);
    if (j < 0) {
        *out = b->cfg->ch;
        return true;
    }
    if (st[j].is_list || st[j].is_head) {
        b->mark = m;
        return build_fail(b, "row %d's output is %s and cannot be used here", j, st[j].is_head ? "a detection head" : "a list (CBLinear)");
    }
    *out = st[j].ch;
    return true;
}

static int scale_width(const ModelConfig *cfg, int64_t c2) {
    /* make_divisible(min(c2, max_channels) * width, 8), ceil */
    double x = (double)c2 < cfg->max_channels ? (double)c2 : cfg->max_channels;
    return (int)(ceil(x * cfg->width / 8.0) * 8.0);
}

static int scale_depth(const ModelConfig *cfg, int64_t n) {
    if (n <= 1) return (int)n;
    double r = nearbyint((double)n * cfg->depth); /* Python round(): half to even */
    return r < 1 ? 1 : (int)r;
}

typedef struct ArgList {
    Value v[24];
    int n;
} ArgList;

static bool args_push(Builder *b, ArgList *l, Value v) {
    if (l->n >= (int)(sizeof l->v / sizeof l->v[0])) return build_fail(b, "too many arguments");
    l->v[l->n++] = v;
    return true;
}

/* Rewrites the YAML args of row r into constructor args; returns how many
 * leading args were inserted. Sets *c2 (or *is_list for CBLinear). */
static int rewrite_args(Builder *b, const ModelRow *r, const ModuleDef *def, const int *cin, int nin, ArgList *out, int *n_build,
                        int *c2, bool *legacy) {
    const ModelConfig *cfg = b->cfg;
    const Value *y = r->args.items;
    int ny = r->args.n, inserted = 0;
    out->n = 0;
    *n_build = scale_depth(cfg, r->repeats);
    switch (def->kind) {
    case RK_CHANNEL: {
        if (ny < 1 || y[0].kind != V_INT || y[0].i < 1 || y[0].i > (1 << 16)) {
            b->mark = ny ? y[0].mark : r->args_mark;
            return build_fail(b, "first argument must be the output channel count (integer 1..65536)"), -1;
        }
        int64_t raw = y[0].i;
        /* the c2 == nc quirk: a row whose raw width equals nc is not scaled */
        *c2 = raw != cfg->nc ? scale_width(cfg, raw) : (int)raw;
        if (*c2 < 1) return build_fail(b, "scaled channel count is 0"), -1;
        args_push(b, out, value_int(cin[0], r->mark));
        args_push(b, out, value_int(*c2, y[0].mark));
        inserted = 1;
        if (def->flags & MF_REPEAT) {
            args_push(b, out, value_int(*n_build, r->repeats_mark));
            inserted = 2;
            *n_build = 1;
        }
        for (int i = 1; i < ny; i++)
            if (!args_push(b, out, y[i])) return -1;
        /* scale in "mlx" is a substring test upstream: "" matches too */
        if ((def->flags & MF_C3K_AT_MLX) && strstr("mlx", cfg->scale)) {
            while (out->n < 4) args_push(b, out, value_bool(false, r->mark));
            out->v[3] = value_bool(true, r->mark);
        }
        if ((def->flags & MF_A2_AT_LX) && strstr("lx", cfg->scale)) {
            args_push(b, out, value_bool(true, r->mark));
            args_push(b, out, value_float(1.2, r->mark));
        }
        if (def->flags & MF_NONLEGACY) *legacy = false;
        return inserted;
    }
    case RK_HEAD: {
        for (int i = 0; i < ny; i++)
            if (!args_push(b, out, y[i])) return -1;
        Value chl = {.kind = V_LIST, .mark = r->from_mark, .n = nin};
        chl.items = arena_array(b->a, (size_t)nin, sizeof(Value));
        if (!chl.items) return build_fail(b, "out of memory"), -1;
        for (int i = 0; i < nin; i++) chl.items[i] = value_int(cin[i], r->from_mark);
        args_push(b, out, chl);
        *c2 = 0;
        return 0;
    }
    case RK_CBLINEAR:
        args_push(b, out, value_int(cin[0], r->mark));
        for (int i = 0; i < ny; i++)
            if (!args_push(b, out, y[i])) return -1;
        *c2 = -1;
        return 1;
    case RK_BATCHNORM:
        args_push(b, out, value_int(cin[0], r->mark));
        *c2 = cin[0];
        return 1;
    case RK_CONCAT:
        *c2 = 0;
        for (int i = 0; i < nin; i++) *c2 += cin[i];
        break;
    case RK_CBFUSE:
        *c2 = cin[nin - 1];
        break;
    case RK_PLAIN:
        *c2 = cin[0];
        break;
    }
    for (int i = 0; i < ny; i++)
        if (!args_push(b, out, y[i])) return -1;
    return 0;
}

static bool build_row(Builder *b, const ModelRow *r, RowState *st, Model *m) {
    RowInfo *info = &m->rows[r->index];
    b->row = r->index;
    b->row_module = r->module;
    b->mark = r->module_mark;
    const ModuleDef *def = module_find(r->module);
    if (!def) return build_fail(b, "unknown module '%s'; supported: %s", r->module, module_names());
    info->def = def;
    bool multi = def->flags & MF_MULTI_INPUT;
    b->mark = r->from_mark;
    if (multi && !r->from_is_list) return build_fail(b, "'from' must be a list of input rows for %s", def->name);
    if (!multi && (r->from_is_list || r->nfrom != 1)) return build_fail(b, "%s takes one input; 'from' must be a single row", def->name);
    /* inputs */
    RowIO io = {.n_in = r->nfrom};
    int cin[MODEL_MAX_FROM];
    for (int i = 0; i < r->nfrom; i++) {
        int j = resolve_from(r->from[i], r->index);
        bool list_ok = def->kind == RK_CBFUSE && i < r->nfrom - 1;
        if (j >= 0 && st[j].is_list && list_ok) {
            io.in[i] = -1;
            io.list_n[i] = m->rows[j].n_out;
            memcpy(io.lists[i], m->rows[j].out, sizeof(int) * (size_t)m->rows[j].n_out);
            cin[i] = -1;
            continue;
        }
        if (list_ok) return build_fail(b, "CBFuse input %d (row %d) must be a CBLinear row", i, j);
        if (!channels_of(b, st, r->from[i], r->index, r->from_mark, &cin[i])) return false;
        io.in[i] = j < 0 ? b->images : m->rows[j].out[0];
    }
    /* arguments */
    ArgList args;
    int n_build = 1, c2 = 0;
    bool legacy = m->legacy;
    b->mark = r->args_mark;
    int inserted = rewrite_args(b, r, def, cin, r->nfrom, &args, &n_build, &c2, &legacy);
    if (inserted < 0) return false;
    m->legacy = legacy;
    RowArgs ra = {args.v, args.n};
    if (!module_check_args(b, def, &ra, inserted, def->kind == RK_HEAD, r->args_mark)) return false;
    Value shown = {.kind = V_LIST, .n = args.n, .items = args.v};
    char repr[512];
    if (!value_repr(&shown, repr, sizeof repr)) snprintf(repr + sizeof repr - 5, 5, "...]");
    info->args = arena_strdup(b->a, repr);
    info->n = scale_depth(b->cfg, r->repeats);
    /* build: one module, or an nn.Sequential of n copies */
    b->mark = r->mark;
    b->legacy = m->legacy;
    int t0 = b->g->n_tensors;
    if (!mod_enter_idx(b, r->index)) return false;
    bool ok = true;
    if (n_build > 1) {
        int x = io.in[0];
        /* n independent copies built with the same arguments: copy k > 0
         * sees c2 channels where it was built for c1 */
        if (multi || def->kind == RK_CBLINEAR || (def->kind == RK_CHANNEL && cin[0] != c2)) {
            mod_exit(b);
            return build_fail(b, "repeats %d: %s cannot be chained %d times (needs one input and equal in/out channels)", n_build, def->name, n_build);
        }
        for (int k = 0; k < n_build && ok; k++) {
            RowIO one = {.n_in = 1, .in = {x}};
            ok = mod_enter_idx(b, k) && def->build(b, &ra, &one);
            mod_exit(b);
            x = one.out[0];
            io.out[0] = x;
            io.n_out = 1;
        }
    } else {
        ok = def->build(b, &ra, &io);
    }
    mod_exit(b);
    if (!ok || b->d->failed) return b->d->failed ? false : build_fail(b, "could not be built");
    for (int t = t0; t < b->g->n_tensors; t++)
        if (b->g->tensors[t].kind == TK_PARAM) info->params += shape_numel(&b->g->tensors[t].shape);
    memcpy(info->out, io.out, sizeof(int) * (size_t)io.n_out);
    info->n_out = io.n_out;
    st[r->index].ch = c2;
    st[r->index].is_list = def->kind == RK_CBLINEAR;
    st[r->index].is_head = def->kind == RK_HEAD;
    if (!st[r->index].is_list && !st[r->index].is_head && chan(b, io.out[0]) != c2)
        return build_fail(b, "produces %d channels, %d expected", chan(b, io.out[0]), c2);
    return true;
}

bool model_build(Arena *a, const ModelConfig *cfg, const BuildOptions *o, const double *strides, int nstrides, Model *m, Diag *d) {
    memset(m, 0, sizeof *m);
    m->cfg = cfg;
    m->legacy = true;
    m->h = o->h, m->w = o->w;
    m->batch = o->batch;
    graph_init(&m->g, a);
    m->rows = arena_array(a, (size_t)cfg->n_rows, sizeof(RowInfo));
    RowState *st = arena_array(a, (size_t)cfg->n_rows, sizeof(RowState));
    m->save = arena_array(a, (size_t)cfg->n_rows * MODEL_MAX_FROM + 1, sizeof(int));
    if (!m->rows || !st || !m->save) return diag_error(d, (Mark){0, 0}, "out of memory");
    if (cfg->end2end)
        return diag_error(d, (Mark){1, 1}, "'end2end: true' heads follow Ultralytics 8.4 (YOLO26) semantics, which yolocc does not support yet");
    Builder b = {.g = &m->g, .a = a, .d = d, .cfg = cfg, .eval = o->eval, .batch = o->batch, .pending_reg = -1, .nstrides = nstrides, .channels_last = o->channels_last};
    if (strides) memcpy(b.strides, strides, sizeof(double) * (size_t)nstrides);
    b.images = graph_add_input(&m->g, "images", shape4(o->batch, cfg->ch, o->h, o->w), DT_F32);
    if (b.images < 0) return diag_error(d, (Mark){0, 0}, "input: %s", m->g.err);
    if (o->channels_last) {
        OpAttrs to_cl = {.shape = m->g.tensors[b.images].shape, .channels_last = true};
        int op = graph_add_op(&m->g, OP_RESHAPE, &b.images, 1, &to_cl, 1, -1, "images");
        if (op < 0) return diag_error(d, (Mark){0, 0}, "input: %s", m->g.err);
        b.images = m->g.ops[op].out[0];
    }
    /* DetectionModel and its nn.Sequential 'model' */
    b.layers = 1;
    if (!mod_enter(&b, "model")) return false;
    for (int i = 0; i < cfg->n_rows; i++)
        if (!build_row(&b, &cfg->rows[i], st, m)) return false;
    mod_exit(&b);
    const RowInfo *last = &m->rows[cfg->n_rows - 1];
    for (int i = 0; i < last->n_out; i++)
        if (!graph_mark_output(&m->g, last->out[i])) return diag_error(d, (Mark){0, 0}, "out of memory");
    if (!build_finish_state(&b)) return false;
    m->layers = b.layers;
    /* save list: every non -1 'from' entry, modulo the row index, sorted;
     * Ultralytics keeps duplicates */
    for (int i = 0; i < cfg->n_rows; i++)
        for (int k = 0; k < cfg->rows[i].nfrom; k++) {
            int f = cfg->rows[i].from[k];
            if (f != -1) m->save[m->n_save++] = ((f % i) + i) % i;
        }
    for (int i = 1; i < m->n_save; i++)
        for (int j = i; j > 0 && m->save[j - 1] > m->save[j]; j--) {
            int t = m->save[j];
            m->save[j] = m->save[j - 1];
            m->save[j - 1] = t;
        }
    char err[256];
    if (!graph_verify(&m->g, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "internal error: IR verification failed: %s", err);
    return true;
}

static double graph_thop_macs(const Graph *g) {
    double macs = 0;
    for (int i = 0; i < g->n_ops; i++) macs += op_def(g->ops[i].kind)->thop_macs(g, &g->ops[i]);
    return macs;
}

bool model_compile(Arena *a, const ModelConfig *cfg, int imgsz, int batch, bool channels_last, Model *train, ModelSummary *s, Diag *d) {
    memset(s, 0, sizeof *s);
    /* stride probe: a 256x256 forward in training mode; stride = 256 / H per level */
    Model probe;
    BuildOptions po = {.h = 256, .w = 256, .batch = 1};
    if (!model_build(a, cfg, &po, NULL, 0, &probe, d)) return false;
    const ModelRow *head = &cfg->rows[cfg->n_rows - 1];
    const ModuleDef *hd = module_find(head->module);
    if (hd && hd->kind == RK_HEAD) {
        s->nstrides = probe.rows[cfg->n_rows - 1].n_out;
        if (hd->build == row_v10detect) s->nstrides /= 2;
        for (int i = 0; i < s->nstrides; i++)
            s->strides[i] = 256.0 / (double)probe.g.tensors[probe.rows[cfg->n_rows - 1].out[i]].shape.d[2];
    } else {
        s->nstrides = 1;
        s->strides[0] = 32;
    }
    double maxs = 0;
    for (int i = 0; i < s->nstrides; i++) maxs = s->strides[i] > maxs ? s->strides[i] : maxs;
    s->max_stride = (int)maxs;
    int gs = s->max_stride > 32 ? s->max_stride : 32;
    /* check_imgsz: round up to a multiple of the grid stride */
    if (imgsz < 1 || imgsz > 8192) return diag_error(d, (Mark){0, 0}, "--imgsz must be in [1, 8192], got %d", imgsz);
    s->imgsz = (imgsz + gs - 1) / gs * gs;
    if (s->imgsz != imgsz)
        diag_warn(d, "--imgsz=%d must be a multiple of max stride %d, updating to %d", imgsz, gs, s->imgsz);
    BuildOptions to = {.h = s->imgsz, .w = s->imgsz, .batch = batch, .channels_last = channels_last};
    if (!model_build(a, cfg, &to, s->strides, s->nstrides, train, d)) return false;
    train->nstrides = s->nstrides;
    memcpy(train->strides, s->strides, sizeof s->strides);
    s->parameters = graph_state_numel(&train->g, TK_PARAM, false);
    s->gradients = graph_state_numel(&train->g, TK_PARAM, true);
    s->layers = train->layers;
    /* get_flops: thop MACs of an eval forward at gs x gs, batch 1, scaled to
     * imgsz; if that fails, at imgsz itself (as upstream does) */
    Model ev;
    BuildOptions eo = {.h = gs, .w = gs, .batch = 1, .eval = true};
    Diag quiet;
    diag_init(&quiet, d->file);
    if (model_build(a, cfg, &eo, s->strides, s->nstrides, &ev, &quiet)) {
        s->gflops = graph_thop_macs(&ev.g) / 1e9 * 2 * imgsz / gs * imgsz / gs;
    } else {
        eo.h = eo.w = imgsz;
        if (!model_build(a, cfg, &eo, s->strides, s->nstrides, &ev, d)) return false;
        s->gflops = graph_thop_macs(&ev.g) / 1e9 * 2;
    }
    return true;
}
