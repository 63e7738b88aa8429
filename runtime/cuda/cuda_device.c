/* runtime/cuda/cuda_device.c — device, primary context and streams; the
 * plan's device memory and the arithmetic that decides whether it fits.
 * Must not launch kernels, call cuDNN, or include CUDA headers. */
#include "cuda_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../mem_fit.h"
#include "cuda_abi.h"

bool cuda_ok(const CudaLibs *L, CuResult r, const char *call, const char *doing, char *err, int errcap) {
    if (r == 0) return true;
    const char *name = NULL, *text = NULL;
    if (!L->cuGetErrorName || L->cuGetErrorName(r, &name) != 0 || !name) name = "unknown CUresult";
    if (!L->cuGetErrorString || L->cuGetErrorString(r, &text) != 0 || !text) text = "no description";
    return errf(err, errcap, "%s failed with %s (%d: %s) while %s", call, name, r, text, doing);
}

bool cuda_device_open(CudaDevice *d, int ordinal, bool with_nccl, char *err, int errcap) {
    memset(d, 0, sizeof *d);
    d->ordinal = ordinal;
    if (!cuda_libs_open(&d->L, NULL, with_nccl, err, errcap)) return false;
    d->libs_open = true;
    int count = 0;
    if (!cuda_libs_check_device(&d->L, &count, err, errcap)) goto fail;
    if (ordinal < 0 || ordinal >= count) {
        errf(err, errcap, "CUDA device %d does not exist: the driver reports %d device%s", ordinal, count, count == 1 ? "" : "s");
        goto fail;
    }
    const CudaLibs *L = &d->L;
    int major = 0, minor = 0;
    if (!CUDA_CALL(L, cuDeviceGet, (&d->dev, ordinal), "opening the CUDA device", err, errcap) ||
        !CUDA_CALL(L, cuDeviceGetName, (d->name, (int)sizeof d->name, d->dev), "reading the device name", err, errcap) ||
        !CUDA_CALL(L, cuDeviceGetAttribute, (&major, CU_ATTR_COMPUTE_CAPABILITY_MAJOR, d->dev), "reading the compute capability", err, errcap) ||
        !CUDA_CALL(L, cuDeviceGetAttribute, (&minor, CU_ATTR_COMPUTE_CAPABILITY_MINOR, d->dev), "reading the compute capability", err, errcap) ||
        !CUDA_CALL(L, cuDeviceGetAttribute, (&d->sm_count, CU_ATTR_MULTIPROCESSOR_COUNT, d->dev), "reading the multiprocessor count", err, errcap))
        goto fail;
    d->sm = major * 10 + minor;
    if (!CUDA_CALL(L, cuDevicePrimaryCtxRetain, (&d->ctx, d->dev), "retaining the device's primary context", err, errcap)) goto fail;
    d->ctx_retained = true;
    if (!CUDA_CALL(L, cuCtxSetCurrent, (d->ctx), "making the primary context current", err, errcap) ||
        !CUDA_CALL(L, cuStreamCreate, (&d->main, CU_STREAM_NON_BLOCKING_FLAG), "creating the main stream", err, errcap) ||
        !CUDA_CALL(L, cuStreamCreate, (&d->side, CU_STREAM_NON_BLOCKING_FLAG), "creating the side stream", err, errcap))
        goto fail;
    return true;
fail:
    cuda_device_close(d);
    return false;
}

bool cuda_copy_to_device(const CudaDevice *d, CuDevicePtr dst, const void *src, size_t bytes, const char *doing, char *err, int errcap) {
    return CUDA_CALL(&d->L, cuMemcpyHtoDAsync, (dst, src, bytes, d->main), doing, err, errcap) && CUDA_CALL(&d->L, cuStreamSynchronize, (d->main), doing, err, errcap);
}

bool cuda_copy_to_host(const CudaDevice *d, void *dst, CuDevicePtr src, size_t bytes, const char *doing, char *err, int errcap) {
    return CUDA_CALL(&d->L, cuMemcpyDtoHAsync, (dst, src, bytes, d->main), doing, err, errcap) && CUDA_CALL(&d->L, cuStreamSynchronize, (d->main), doing, err, errcap);
}

void cuda_device_close(CudaDevice *d) {
    if (d->libs_open) {
        /* teardown errors have no one left to report to: the process is releasing the device */
        if (d->side) (void)d->L.cuStreamDestroy(d->side);
        if (d->main) (void)d->L.cuStreamDestroy(d->main);
        if (d->ctx_retained) (void)d->L.cuDevicePrimaryCtxRelease(d->dev);
        cuda_libs_close(&d->L);
    }
    memset(d, 0, sizeof *d);
}

/* ---- memory arithmetic ---- */

int64_t cuda_mem_planned(const CudaMemNeed *n) { return n->arena + n->state + n->inputs + n->workspace; }

int64_t cuda_mem_largest_batch(const CudaMemNeed *n, uint64_t free_bytes) {
    return mem_largest_batch(n->state + n->workspace + n->reserve, n->arena + n->inputs, n->batch, free_bytes);
}

bool cuda_mem_check(const CudaMemNeed *n, uint64_t free_bytes, char *err, int errcap) {
    int64_t planned = cuda_mem_planned(n);
    if ((uint64_t)planned + (uint64_t)n->reserve <= free_bytes) return true;
    int64_t b = cuda_mem_largest_batch(n, free_bytes);
    char fit[160];
    if (b == 0)
        snprintf(fit, sizeof fit, "not even batch 1 fits: persistent state and workspace alone take %.1f MB",
                 (double)(n->state + n->workspace + n->reserve) / 1e6);
    else snprintf(fit, sizeof fit, "the largest batch that fits is %lld", (long long)b);
    char reserve[64] = "";
    if (n->reserve) snprintf(reserve, sizeof reserve, " + %.1f MB reserved", (double)n->reserve / 1e6);
    return errf(err, errcap,
                "the plan needs %lld bytes (%.1f MB) of device memory: arena %.1f MB + persistent %.1f MB (state %.1f MB, inputs %.1f MB) + "
                "workspace %.1f MB%s, but only %llu bytes (%.1f MB) are free; the plan is compiled for batch %lld and %s (recompile with a smaller --batch or a --recompute budget)",
                (long long)planned, (double)planned / 1e6, (double)n->arena / 1e6, (double)(n->state + n->inputs) / 1e6, (double)n->state / 1e6,
                (double)n->inputs / 1e6, (double)n->workspace / 1e6, reserve, (unsigned long long)free_bytes, (double)free_bytes / 1e6,
                (long long)n->batch, fit);
}

/* ---- layout ---- */

static int64_t align_up(int64_t x) { return (x + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN; }

bool cuda_layout_build(const Plan *p, CudaLayout *l, char *err, int errcap) {
    memset(l, 0, sizeof *l);
    const Graph *g = &p->g;
    int n = g->n_tensors;
    const cJSON *batch = cJSON_GetObjectItemCaseSensitive(p->meta, "batch");
    if (!cJSON_IsNumber(batch) || batch->valuedouble < 1) return errf(err, errcap, "the plan's META has no batch size");
    l->batch = (int64_t)batch->valuedouble;
    l->n_tensors = n;
    l->region = calloc((size_t)n + 1, 1);
    l->off = calloc((size_t)n + 1, sizeof *l->off);
    l->lowp_off = calloc((size_t)n + 1, sizeof *l->lowp_off);
    bool *persistent = calloc((size_t)n + 1, sizeof *persistent), *has_copy = calloc((size_t)n + 1, sizeof *has_copy);
    if (!l->region || !l->off || !l->lowp_off || !persistent || !has_copy) {
        free(persistent);
        free(has_copy);
        cuda_layout_free(l);
        return errf(err, errcap, "out of memory");
    }
    memplan_mark_persistent(g, persistent);
    memplan_mark_compute_copies(g, p->precision, has_copy);
    l->arena_bytes = p->arena_bytes;
    for (int t = 0; t < n; t++) l->lowp_off[t] = -1;
    /* inputs first, so the region's head is what the loader refills every step */
    for (int pass = 0; pass < 2; pass++)
        for (int t = 0; t < n; t++) {
            int64_t off = p->offset[t];
            bool input = g->tensors[t].kind == TK_INPUT;
            if (off == MEMPLAN_INTERNAL) {
                l->region[t] = CUDA_REGION_NONE;
            } else if (off >= 0) {
                l->region[t] = CUDA_REGION_ARENA;
                l->off[t] = off;
            } else if (input == (pass == 0)) {
                int64_t bytes = align_up(memplan_tensor_bytes(g, t, persistent[t], p->precision));
                l->region[t] = CUDA_REGION_PERSISTENT;
                l->off[t] = l->persistent_bytes;
                l->persistent_bytes += bytes;
                *(input ? &l->input_bytes : &l->state_bytes) += bytes;
                if (has_copy[t]) {
                    /* the bf16/fp16 copy of an fp32 master weight that convolutions read */
                    int64_t copy = align_up(shape_numel(&g->tensors[t].shape) * 2);
                    l->lowp_off[t] = l->persistent_bytes;
                    l->persistent_bytes += copy;
                    l->state_bytes += copy;
                }
            }
        }
    free(persistent);
    free(has_copy);
    return true;
}

void cuda_layout_free(CudaLayout *l) {
    free(l->region);
    free(l->off);
    free(l->lowp_off);
    memset(l, 0, sizeof *l);
}

/* ---- device memory ---- */

/* Whether lender's own workspace can serve one of ws bytes. */
static bool workspace_to_borrow(const CudaMem *lender, int64_t ws) {
    return lender && lender->workspace && !lender->workspace_lent && lender->workspace_bytes >= ws && ws > 0;
}

/* the first persistent tensor that is not an input, from t on, in id order (n_tensors: none) */
static int next_state_tensor(const Graph *g, const CudaLayout *l, int t) {
    while (t < l->n_tensors && (l->region[t] != CUDA_REGION_PERSISTENT || g->tensors[t].kind == TK_INPUT)) t++;
    return t;
}

bool cuda_layout_state_matches(const Graph *ga, const CudaLayout *a, const Graph *gb, const CudaLayout *b) {
    if (a->state_bytes != b->state_bytes) return false;
    int ta = next_state_tensor(ga, a, 0), tb = next_state_tensor(gb, b, 0);
    for (; ta < a->n_tensors && tb < b->n_tensors; ta = next_state_tensor(ga, a, ta + 1), tb = next_state_tensor(gb, b, tb + 1)) {
        const Tensor *x = &ga->tensors[ta], *y = &gb->tensors[tb];
        if (x->kind != y->kind || x->dtype != y->dtype || !shape_eq(&x->shape, &y->shape) || strcmp(x->name ? x->name : "", y->name ? y->name : "") != 0 ||
            a->off[ta] - a->input_bytes != b->off[tb] - b->input_bytes || (a->lowp_off[ta] < 0) != (b->lowp_off[tb] < 0) ||
            (a->lowp_off[ta] >= 0 && a->lowp_off[ta] - a->input_bytes != b->lowp_off[tb] - b->input_bytes))
            return false;
    }
    return ta == a->n_tensors && tb == b->n_tensors;
}

bool cuda_mem_alloc(CudaMem *m, CudaDevice *d, const Plan *p, int64_t workspace_bytes, int64_t reserve_bytes, const CudaLend *lend, char *err, int errcap) {
    memset(m, 0, sizeof *m);
    m->g = &p->g;
    if (!cuda_layout_build(p, &m->layout, err, errcap)) return false;
    const CudaLayout *l = &m->layout;
    const CudaLibs *L = &d->L;
    const CudaMem *arena_from = lend ? lend->arena : NULL, *state_from = lend ? lend->state : NULL;
    if (state_from && (state_from->state_lent || !state_from->g || !cuda_layout_state_matches(state_from->g, &state_from->layout, &p->g, l)))
        return cuda_mem_free(m, d), errf(err, errcap, "the plan's parameters and buffers do not lie as those of the step it would read them from (another model?)");
    size_t free_b = 0, total_b = 0;
    if (!CUDA_CALL(L, cuMemGetInfo, (&free_b, &total_b), "reading free device memory before allocating the plan's memory", err, errcap))
        return cuda_mem_free(m, d), false;
    const int64_t ws = align_up(workspace_bytes);
    m->arena_lent = arena_from && arena_from->arena && !arena_from->arena_lent && arena_from->layout.arena_bytes >= l->arena_bytes && l->arena_bytes > 0;
    m->workspace_lent = workspace_to_borrow(lend ? lend->workspace : NULL, ws);
    m->state_lent = state_from != NULL && l->state_bytes > 0;
    CudaMemNeed need = {.arena = m->arena_lent ? 0 : l->arena_bytes, .state = m->state_lent ? 0 : l->state_bytes, .inputs = l->input_bytes,
                        .workspace = m->workspace_lent ? 0 : ws, .reserve = reserve_bytes, .batch = l->batch};
    if (!cuda_mem_check(&need, free_b, err, errcap)) return cuda_mem_free(m, d), false;
    if (m->arena_lent) m->arena = arena_from->arena;
    if (m->workspace_lent) m->workspace = lend->workspace->workspace;
    m->workspace_bytes = m->workspace_lent ? lend->workspace->workspace_bytes : ws;
    const int64_t own_persistent = l->persistent_bytes - (m->state_lent ? l->state_bytes : 0);
    /* zero-byte regions get no allocation (cuMemAlloc rejects size 0) */
    if ((!m->arena_lent && l->arena_bytes && !CUDA_CALL(L, cuMemAlloc, (&m->arena, (size_t)l->arena_bytes), "allocating the step arena", err, errcap)) ||
        (own_persistent && !CUDA_CALL(L, cuMemAlloc, (&m->persistent, (size_t)own_persistent), "allocating persistent state and inputs", err, errcap)) ||
        (!m->workspace_lent && m->workspace_bytes && !CUDA_CALL(L, cuMemAlloc, (&m->workspace, (size_t)m->workspace_bytes), "allocating the library workspace", err, errcap)))
        return cuda_mem_free(m, d), false;
    m->state = m->state_lent ? state_from->state : m->persistent + (CuDevicePtr)l->input_bytes;
    /* a fresh plan starts from zeros (gradients accumulate, counters count); lent state is the lender's to keep */
    if (m->persistent && !CUDA_CALL(L, cuMemsetD8Async, (m->persistent, 0, (size_t)own_persistent, d->main), "zeroing persistent state", err, errcap))
        return cuda_mem_free(m, d), false;
    return true;
}

bool cuda_mem_fit_workspace(CudaMem *m, CudaDevice *d, int64_t need, const CudaMem *lender, char *err, int errcap) {
    const int64_t ws = align_up(need);
    if (m->workspace_lent || ws >= m->workspace_bytes) return true;
    const bool borrow = workspace_to_borrow(lender, ws);
    if (m->workspace) (void)d->L.cuMemFree(m->workspace); /* nothing runs on it yet: freeing leaves nothing to undo */
    m->workspace = borrow ? lender->workspace : 0;
    m->workspace_lent = borrow;
    m->workspace_bytes = borrow ? lender->workspace_bytes : ws;
    if (!borrow && ws && !CUDA_CALL(&d->L, cuMemAlloc, (&m->workspace, (size_t)ws), "allocating the library workspace at its settled size", err, errcap))
        return m->workspace_bytes = 0, false;
    return true;
}

int64_t cuda_mem_owned_bytes(const CudaMem *m) {
    return (m->arena_lent ? 0 : m->layout.arena_bytes) + m->layout.persistent_bytes - (m->state_lent ? m->layout.state_bytes : 0) +
           (m->workspace_lent ? 0 : m->workspace_bytes);
}

void cuda_mem_free(CudaMem *m, CudaDevice *d) {
    CuDevicePtr p[] = {m->workspace_lent ? 0 : m->workspace, m->persistent, m->arena_lent ? 0 : m->arena};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]) (void)d->L.cuMemFree(p[i]); /* freeing at teardown: a failure leaves nothing to undo */
    cuda_layout_free(&m->layout);
    memset(m, 0, sizeof *m);
}

/* offset off of the persistent region: the inputs at its head, the state from m->state */
static CuDevicePtr persistent_at(const CudaMem *m, int64_t off) {
    return off < m->layout.input_bytes ? m->persistent + (CuDevicePtr)off : m->state + (CuDevicePtr)(off - m->layout.input_bytes);
}

CuDevicePtr cuda_mem_ptr(const CudaMem *m, int t) {
    const CudaLayout *l = &m->layout;
    if (t < 0 || t >= l->n_tensors) return 0;
    switch ((CudaRegion)l->region[t]) {
    case CUDA_REGION_ARENA: return m->arena + (CuDevicePtr)l->off[t];
    case CUDA_REGION_PERSISTENT: return persistent_at(m, l->off[t]);
    case CUDA_REGION_NONE: break;
    }
    return 0;
}

CuDevicePtr cuda_mem_compute_ptr(const CudaMem *m, int t) {
    if (t >= 0 && t < m->layout.n_tensors && m->layout.lowp_off[t] >= 0) return persistent_at(m, m->layout.lowp_off[t]);
    return cuda_mem_ptr(m, t);
}

CuDevicePtr *cuda_mem_pointers(const CudaMem *m) {
    CuDevicePtr *ptr = calloc((size_t)m->layout.n_tensors + 1, sizeof *ptr);
    for (int t = 0; ptr && t < m->layout.n_tensors; t++) ptr[t] = cuda_mem_ptr(m, t);
    return ptr;
}

bool cuda_time_replays(CudaDevice *d, bool (*run)(void *ctx, char *err, int errcap), void *ctx, int runs, const char *doing, float *ms, char *err,
                       int errcap) {
    const CudaLibs *L = &d->L;
    CuEvent ev[2] = {0};
    CuGraph graph = NULL;
    CuGraphExec exec = NULL;
    char why[256];
    *ms = 0;
    bool ok = run(ctx, err, errcap) && CUDA_CALL(L, cuStreamSynchronize, (d->main), doing, err, errcap) &&
              CUDA_CALL(L, cuEventCreate, (&ev[0], 0), doing, err, errcap) && CUDA_CALL(L, cuEventCreate, (&ev[1], 0), doing, err, errcap);
    /* thread-local capture: a synchronising or allocating call inside fails the capture instead of passing */
    if (ok && CUDA_CALL(L, cuStreamBeginCapture, (d->main, 1), doing, err, errcap)) {
        for (int r = 0; ok && r < runs; r++) ok = run(ctx, err, errcap);
        /* the capture always ends, so a failure leaves the stream usable */
        const bool ended = CUDA_CALL(L, cuStreamEndCapture, (d->main, &graph), doing, why, sizeof why);
        if (ok && !ended) ok = errf(err, errcap, "%s", why);
    } else {
        ok = false;
    }
    ok = ok && CUDA_CALL(L, cuGraphInstantiate, (&exec, graph, 0), doing, err, errcap) && CUDA_CALL(L, cuGraphLaunch, (exec, d->main), doing, err, errcap) &&
         CUDA_CALL(L, cuEventRecord, (ev[0], d->main), doing, err, errcap) && CUDA_CALL(L, cuGraphLaunch, (exec, d->main), doing, err, errcap) &&
         CUDA_CALL(L, cuEventRecord, (ev[1], d->main), doing, err, errcap) && CUDA_CALL(L, cuEventSynchronize, (ev[1]), doing, err, errcap) &&
         CUDA_CALL(L, cuEventElapsedTime, (ms, ev[0], ev[1]), doing, err, errcap);
    if (runs > 0) *ms /= (float)runs;
    /* teardown: a failure leaves nothing to undo */
    if (exec) (void)L->cuGraphExecDestroy(exec);
    if (graph) (void)L->cuGraphDestroy(graph);
    for (int e = 0; e < 2; e++)
        if (ev[e]) (void)L->cuEventDestroy(ev[e]);
    return ok;
}
