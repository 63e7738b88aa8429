/* runtime/interp.c — executes a graph with the reference kernels, or the fast
 * CPU ones where Interp.fast asks for them. Clarity over speed: every tensor
 * gets its own buffer, kept until interp_free. */
#include "interp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_conv.h"
#include "cpu_fold.h"
#include "gen_cpu.h"
#include "step_profile.h"
#include "../passes/views.h"

size_t dtype_size(DType dt) { return dt == DT_I64 ? 8 : dt == DT_F32 ? 4 : 2; }

bool interp_init(Interp *it, const Graph *g) {
    memset(it, 0, sizeof *it);
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

int64_t interp_tensor_bytes(const Tensor *x) { return shape_numel(&x->shape) * (x->dtype == DT_I64 ? 8 : 4); }

int64_t interp_host_bytes(const Interp *it) {
    int64_t b = it->arena ? it->arena_bytes : 0;
    for (int t = 0; it->owned && t < it->g->n_tensors; t++)
        if (it->owned[t]) b += interp_tensor_bytes(&it->g->tensors[t]);
    return b;
}

/* free_at/free_list: per op, the transient tensors to drop after it runs
 * (CSR): at end[t], or at their last reader when end is NULL */
static bool schedule_frees(Interp *it, const int *end) {
    const Graph *g = it->g;
    free(it->free_at);
    free(it->free_list);
    it->free_at = calloc((size_t)g->n_ops + 2, sizeof(int));
    it->free_list = calloc((size_t)g->n_tensors + 1, sizeof(int));
    if (!it->free_at || !it->free_list) return false;
    for (int t = 0; t < g->n_tensors; t++) {
        int at = end ? end[t] : it->last[t];
        if (it->transient[t] && at >= 0 && at < g->n_ops) it->free_at[at + 1]++;
    }
    for (int o = 0; o < g->n_ops; o++) it->free_at[o + 1] += it->free_at[o];
    int *fill = calloc((size_t)g->n_ops + 1, sizeof(int));
    if (!fill) return false;
    for (int t = 0; t < g->n_tensors; t++) {
        int at = end ? end[t] : it->last[t];
        if (it->transient[t] && at >= 0 && at < g->n_ops) it->free_list[it->free_at[at] + fill[at]++] = t;
    }
    free(fill);
    return true;
}

void interp_arena_release(Interp *it) {
    free(it->arena);
    it->arena = NULL;
}

bool interp_arena_restore(Interp *it, const int64_t *offset) {
    if (it->arena) return true;
    const size_t bytes = it->arena_bytes > 0 ? (size_t)it->arena_bytes : 1;
    if (!(it->arena = malloc(bytes))) return false;
    memset(it->arena, 0xFF, bytes);
    for (int t = 0; t < it->g->n_tensors; t++)
        if (offset[t] >= 0) it->buf[t] = it->arena + offset[t];
    return true;
}

bool interp_use_arena(Interp *it, const int64_t *offset, int64_t arena_bytes, bool poison) {
    const Graph *g = it->g;
    it->arena = malloc(arena_bytes > 0 ? (size_t)arena_bytes : 1);
    it->arena_bytes = arena_bytes;
    it->last = calloc((size_t)g->n_tensors + 1, sizeof(int));
    it->transient = calloc((size_t)g->n_tensors + 1, sizeof(bool));
    if (!it->arena || !it->last || !it->transient) return false;
    memset(it->arena, 0xFF, arena_bytes > 0 ? (size_t)arena_bytes : 1);
    graph_last_use(g, it->last);
    for (int t = 0; t < g->n_tensors; t++)
        if (offset[t] == -2) {
            /* internal to a fusion group: a buffer of its own only while the
             * group runs (the generated kernel keeps it in registers) */
            it->transient[t] = true;
        } else if (offset[t] >= 0) {
            if (it->owned[t]) free(it->buf[t]);
            it->owned[t] = false;
            it->buf[t] = it->arena + offset[t];
        } else {
            it->last[t] = -1; /* never poisoned */
        }
    it->poison = poison;
    return schedule_frees(it, NULL);
}

bool interp_use_groups(Interp *it, const Fusion *f) {
    const Graph *g = it->g;
    int *end = malloc(sizeof(int) * ((size_t)g->n_tensors + 1)), *group_end = malloc(sizeof(int) * ((size_t)g->n_ops + 1));
    if (!end || !group_end) {
        free(end);
        free(group_end);
        return false;
    }
    for (int i = 0; i < f->n_groups; i++)
        for (int o = f->groups[i].first; o < f->groups[i].first + f->groups[i].n; o++) group_end[o] = f->groups[i].first + f->groups[i].n - 1;
    for (int t = 0; t < g->n_tensors; t++) end[t] = g->tensors[t].producer >= 0 ? group_end[g->tensors[t].producer] : -1;
    it->views = f->views.n_views && it->arena ? &f->views : NULL;
    if (it->views && it->last) views_widen_lifetimes(it->views, g->n_tensors, NULL, it->last);
    bool ok = schedule_frees(it, end);
    free(end);
    free(group_end);
    return ok;
}

/* After op o: poison its inputs that die here, drop transient tensors due. */
static void after_op(Interp *it, int o) {
    const Graph *g = it->g;
    const Op *op = &g->ops[o];
    /* a skipped op read nothing: its inputs may never have been made */
    for (int i = 0; it->poison && !(it->skip && it->skip[o]) && i < op->n_in; i++) {
        int t = it->views ? it->views->base[op->in[i]] : op->in[i];
        if (it->last[t] == o && !it->transient[t]) memset(it->buf[t], 0xFF, (size_t)shape_numel(&g->tensors[t].shape) * dtype_size(g->tensors[t].dtype));
    }
    for (int j = it->free_at ? it->free_at[o] : 0; it->free_at && j < it->free_at[o + 1]; j++) {
        int t = it->free_list[j];
        if (it->owned[t]) free(it->buf[t]);
        it->buf[t] = NULL;
        it->owned[t] = false;
    }
}

/* Whether a routine cannot address t where it sits: a strided view, or a
 * channels-last tensor (the reference kernels read NCHW). */
static bool needs_packing(const Interp *it, int t) {
    return (it->views && views_row_stride(it->g, it->views, t)) || !tensor_logical_order(&it->g->tensors[t]);
}

int64_t interp_transient_bytes(const Interp *it, int threads) {
    const Graph *g = it->g;
    int64_t pack = 0, per_thread = 0;
    for (int o = 0; g && o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        const int64_t floats = it->fast ? cpu_op_thread_scratch_floats(g, op) : 0;
        if (floats > per_thread) per_thread = floats;
        int64_t b = 0;
        for (int i = 0; i < op->n_in + op->n_out; i++) {
            int t = i < op->n_in ? op->in[i] : op->out[i - op->n_in];
            if (needs_packing(it, t)) b += shape_numel(&g->tensors[t].shape) * (int64_t)sizeof(float);
        }
        if (b > pack) pack = b;
    }
    return pack + threads * per_thread * (int64_t)sizeof(float);
}

/* Between a tensor as stored and a packed NCHW copy of it (fp32): a view
 * row by row, a channels-last tensor element by element (a channels-last
 * view both, through a packed channels-last copy). */
static bool view_copy(const Interp *it, int t, float *packed, bool pack) {
    const Tensor *x = &it->g->tensors[t];
    int64_t rows, row, stride;
    views_geometry(it->g, it->views, t, &rows, &row, &stride);
    const bool cl = !tensor_logical_order(x);
    float *v = it->buf[t], *rowwise = cl ? v : packed;
    if (cl && stride && !(rowwise = malloc(sizeof(float) * (size_t)shape_numel(&x->shape)))) return false;
    for (int64_t r = 0; pack && stride && r < rows; r++) memcpy(rowwise + r * row, v + r * stride, sizeof(float) * (size_t)row);
    if (cl) ref_channels_last_copy(x, rowwise, packed, pack);
    for (int64_t r = 0; !pack && stride && r < rows; r++) memcpy(v + r * stride, rowwise + r * row, sizeof(float) * (size_t)row);
    if (cl && stride) free(rowwise);
    return true;
}

typedef struct Packed {
    int t;
    void *view;
} Packed;

/* Library routines address whole contiguous NCHW tensors: each strided view
 * or channels-last tensor the op touches is swapped for a packed copy
 * (inputs filled now) until unpack_views writes the outputs back and
 * restores the views. *pk is allocated only when some tensor needs it (most
 * ops of NCHW plans need none). */
static bool pack_views(Interp *it, const Op *op, Packed **pk, int *npk) {
    *npk = 0;
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        int t = i < op->n_in ? op->in[i] : op->out[i - op->n_in];
        bool seen = false;
        for (int j = 0; j < *npk; j++) seen |= (*pk)[j].t == t;
        if (seen || !needs_packing(it, t)) continue;
        if (!*pk && !(*pk = malloc(sizeof(Packed) * (size_t)(op->n_in + op->n_out)))) return false;
        float *p = malloc(sizeof(float) * (size_t)shape_numel(&it->g->tensors[t].shape));
        if (!p) return false;
        if (i < op->n_in && !view_copy(it, t, p, true)) return free(p), false;
        (*pk)[(*npk)++] = (Packed){t, it->buf[t]};
        it->buf[t] = p;
    }
    return true;
}

static bool unpack_views(Interp *it, const Op *op, Packed *pk, int npk, bool ok) {
    bool unpacked = true;
    for (int j = 0; j < npk; j++) {
        int t = pk[j].t;
        float *p = it->buf[t];
        it->buf[t] = pk[j].view;
        bool written = false;
        for (int i = 0; i < op->n_out; i++) written |= op->out[i] == t;
        if (ok && written) unpacked = view_copy(it, t, p, false) && unpacked;
        free(p);
    }
    return unpacked;
}

/* One op through its library routine (fast CPU kernel or the oracle). */
static bool run_op(Interp *it, int o, char *err, int errcap) {
    const Graph *g = it->g;
    const Op *op = &g->ops[o];
    RefKernel k = it->fast ? cpu_kernel(op->kind) : NULL;
    if (!k) k = ref_kernel(op->kind);
    if (!k) return snprintf(err, (size_t)errcap, "op %d (%s) has no reference kernel", o, op_def(op->kind)->name), false;
    for (int i = 0; i < op->n_in; i++)
        if (!it->buf[op->in[i]]) return snprintf(err, (size_t)errcap, "op %d (%s) reads %%%d, which has no value", o, op_def(op->kind)->name, op->in[i]), false;
    for (int i = 0; i < op->n_out; i++)
        if (!interp_tensor(it, op->out[i])) return snprintf(err, (size_t)errcap, "out of memory"), false;
    char why[200];
    Packed *pk = NULL;
    int npk = 0;
    bool ok = pack_views(it, op, &pk, &npk) || (snprintf(why, sizeof why, "out of memory"), false);
    ok = ok && k(g, op, it->buf, why, sizeof why);
    if (!unpack_views(it, op, pk, npk, ok) && ok) ok = false, snprintf(why, sizeof why, "out of memory");
    free(pk);
    if (!ok) return snprintf(err, (size_t)errcap, "op %d (%s, %s): %s", o, op_def(op->kind)->name, op->scope ? op->scope : "", why), false;
    return true;
}

void interp_use_generated(Interp *it, const GenCpu *gen) { it->gen = gen; }

/* Every tensor a launch's rows name must hold a value, except what its own ops make. */
static bool bind_launch(Interp *it, const KLaunch *ln, KRows rows, char *err, int errcap) {
    for (int i = 0; i < ln->n_args * (rows.hi > rows.lo ? rows.hi - rows.lo : 1); i++) {
        int t = kernel_row_args(&it->gen->kp, ln, rows.lo + i / ln->n_args)[i % ln->n_args], p = it->g->tensors[t].producer;
        if (it->buf[t]) continue;
        if (p < ln->op_lo || p > ln->op_hi)
            return snprintf(err, (size_t)errcap, "kernel %s (ops %d-%d) reads %%%d, which has no value", it->gen->kp.kernels[ln->kernel].name, ln->op_lo, ln->op_hi, t), false;
        if (!interp_tensor(it, t)) return snprintf(err, (size_t)errcap, "out of memory"), false;
    }
    return true;
}

/* Op o when it heads a folded group: the group's one convolution, true in
 * *ran; false in *ran for any other op. */
static bool run_folded(Interp *it, int o, bool *ran, char *err, int errcap) {
    *ran = it->fold && it->fold->head[o] >= 0;
    if (!*ran) return true;
    const FoldedConv *fc = &it->fold->fc[it->fold->head[o]];
    char why[200];
    if (!interp_tensor(it, fc->out)) return snprintf(err, (size_t)errcap, "out of memory"), false;
    if (cpu_fold_run(it->fold, it->g, it->views, o, it->buf, why, sizeof why)) return true;
    const Op *op = &it->g->ops[o];
    return snprintf(err, (size_t)errcap, "op %d (%s folded with its batch norm, %s): %s", o, op_def(op->kind)->name, op->scope ? op->scope : "", why), false;
}

/* The routes of a CPU step's profile */
enum { CPU_ROUTE_KERNELS, CPU_ROUTE_LIBRARY, CPU_ROUTE_FOLDED };

void interp_profile_start(Interp *it, StepProfile *p) {
    memset(p, 0, sizeof *p);
    p->how = "one more step, the host clock around each launch";
    p->route_name[CPU_ROUTE_KERNELS] = "generated kernels";
    p->route_name[CPU_ROUTE_LIBRARY] = "library routines";
    p->route_name[CPU_ROUTE_FOLDED] = "folded convs";
    it->prof = p;
}

static bool visit_launch(void *ctx, int l, int group, KRows rows, char *err, int errcap) {
    Interp *it = ctx;
    const KLaunch *ln = &it->gen->kp.launches[l];
    bool skipped = it->skip != NULL, folded = false, ok;
    for (int o = ln->op_lo; skipped && o <= ln->op_hi; o++) skipped = it->skip[o];
    if (skipped || (it->fold && cpu_fold_covers(it->fold, ln->op_lo, ln->op_hi))) return true;
    const double t0 = it->prof ? step_profile_clock_ms() : 0;
    if (ln->kernel < 0) ok = run_folded(it, ln->op_lo, &folded, err, errcap) && (folded || run_op(it, ln->op_lo, err, errcap));
    else if ((ok = bind_launch(it, ln, rows, err, errcap))) gen_cpu_launch(it->gen, ln, rows, it->buf);
    const int route = ln->kernel >= 0 ? CPU_ROUTE_KERNELS : folded ? CPU_ROUTE_FOLDED : CPU_ROUTE_LIBRARY;
    if (ok && it->prof && !step_profile_launch(it->prof, route, it->g, it->gen->fusion, &it->gen->kp, l, group, step_profile_clock_ms() - t0))
        return snprintf(err, (size_t)errcap, "out of memory"), false;
    return ok;
}

static void group_done(void *ctx, int lo, int hi) {
    for (int o = lo; o < hi; o++) after_op(ctx, o);
}

bool interp_run(Interp *it, int first, int last, char *err, int errcap) {
    if (it->gen) return kernel_run_range(&it->gen->kp, it->gen->fusion, first, last, visit_launch, group_done, it, err, errcap);
    for (int o = first; o < last; o++) {
        bool folded, skipped = (it->skip && it->skip[o]) || (it->fold && it->fold->gone[o]);
        if (!skipped && !run_folded(it, o, &folded, err, errcap)) return false;
        if (!skipped && !folded && !run_op(it, o, err, errcap)) return false;
        after_op(it, o);
    }
    return true;
}

void interp_free(Interp *it) {
    if (it->buf)
        for (int t = 0; t < it->g->n_tensors; t++)
            if (it->owned[t]) free(it->buf[t]);
    free(it->buf);
    free(it->owned);
    free(it->arena);
    free(it->last);
    free(it->transient);
    free(it->free_at);
    free(it->free_list);
    it->transient = NULL;
    it->free_at = it->free_list = NULL;
    it->buf = NULL;
    it->owned = NULL;
    it->arena = NULL;
    it->last = NULL;
}
