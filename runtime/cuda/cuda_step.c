/* runtime/cuda/cuda_step.c — runs each launch of a step by its route (cuda_routes.c): its
 * generated kernel, a library kernel, cuDNN, the loss's phases or the reference kernel on the host;
 * moves tensors between host fp32 and device storage (conversions in cuda_convert.c); CUDA graphs
 * and the run hook. The training step around the optimizer is cuda_train_step.c's. Must not
 * include CUDA headers, hold trainer logic, or change what the plan computes. */
#include "cuda_step.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../../passes/views.h"
#include "../interp.h"
#include "../ref_kernels.h"
#include "cuda_detloss.h"

enum { WHY = 1536 };

/* ---- device transfers ---- */

void cuda_step_tensor_label(const Graph *g, int t, char *buf, size_t cap) {
    const Tensor *x = &g->tensors[t];
    if (x->name) snprintf(buf, cap, "%%%d (%s)", t, x->name);
    else if (x->producer >= 0) snprintf(buf, cap, "%%%d (output of op %d, %s)", t, x->producer, op_def(g->ops[x->producer].kind)->name);
    else snprintf(buf, cap, "%%%d", t);
}

static bool sync_main(CudaStep *cs, const char *doing, char *err, int errcap) {
    return CUDA_CALL(&cs->dev.L, cuStreamSynchronize, (cs->dev.main), doing, err, errcap);
}

/* t as stored: rows of row elements, stride apart (0: packed) */
static void geometry(const CudaStep *cs, int t, int64_t *rows, int64_t *row, int64_t *stride) {
    views_geometry(&cs->plan->g, &cs->plan->fusion.views, t, rows, row, stride);
}

static bool has_memory(const CudaStep *cs, int t, const char *what, char *err, int errcap) {
    if (t >= 0 && t < cs->plan->g.n_tensors && cs->ptr[t]) return true;
    char label[160] = "?";
    if (t >= 0 && t < cs->plan->g.n_tensors) cuda_step_tensor_label(&cs->plan->g, t, label, sizeof label);
    return errf(err, errcap, "%s tensor %s, which has no device memory (internal to its fusion group, or no such tensor)", what, label);
}

/* Host memory can take t's device bytes as they are: a packed fp32 / int64 tensor in NCHW order. */
static bool copies_directly(const CudaStep *cs, int t) {
    DType st = (DType)cs->stype[t];
    return (st == DT_F32 || st == DT_I64) && !views_row_stride(&cs->plan->g, &cs->plan->fusion.views, t) && tensor_logical_order(&cs->plan->g.tensors[t]);
}

void cuda_step_master_changed(CudaStep *cs, int t) {
    if (cs->plan->g.tensors[t].kind == TK_PARAM && cs->mem.layout.lowp_off[t] >= 0) cs->dirty[t] = true;
}

/* Device storage of t -> host fp32 / int64 (packed). */
static bool to_host(CudaStep *cs, int t, void *host, char *err, int errcap) {
    if (!has_memory(cs, t, "downloading", err, errcap)) return false;
    DType st = (DType)cs->stype[t];
    size_t es = dtype_size(st);
    int64_t rows, row, stride;
    geometry(cs, t, &rows, &row, &stride);
    int64_t n = rows * row, span = cuda_view_span(rows, row, stride);
    char label[160], doing[224];
    cuda_step_tensor_label(&cs->plan->g, t, label, sizeof label);
    snprintf(doing, sizeof doing, "downloading tensor %s", label);
    bool direct = copies_directly(cs, t);
    unsigned char *raw = direct ? host : malloc((size_t)span * es + 1), *packed = stride ? malloc((size_t)n * es + 1) : raw;
    bool ok = raw && packed;
    if (!ok) errf(err, errcap, "out of memory while %s", doing);
    ok = ok && CUDA_CALL(&cs->dev.L, cuMemcpyDtoHAsync, (raw, cs->ptr[t], (size_t)span * es, cs->dev.main), doing, err, errcap) && sync_main(cs, doing, err, errcap);
    if (ok && stride) cuda_view_gather(raw, packed, rows, row, stride, es);
    if (ok && !direct) cuda_storage_to_f32(st, packed, host, n);
    /* channels last: the host's copy is NCHW */
    const Tensor *x = &cs->plan->g.tensors[t];
    if (ok && !tensor_logical_order(x) && !ref_channels_last_to_nchw(x, host)) ok = errf(err, errcap, "out of memory while %s", doing);
    if (packed != raw) free(packed);
    if (!direct) free(raw);
    return ok;
}

/* Host fp32 / int64 (packed) -> device storage of t; a view is written row
 * by row so the other channels of its base keep their bytes. Waits for
 * the copies, so host may be reused at once. */
static bool to_device(CudaStep *cs, int t, const void *host, char *err, int errcap) {
    if (!has_memory(cs, t, "uploading", err, errcap)) return false;
    DType st = (DType)cs->stype[t];
    size_t es = dtype_size(st);
    int64_t rows, row, stride;
    geometry(cs, t, &rows, &row, &stride);
    int64_t n = rows * row;
    char label[160], doing[224];
    cuda_step_tensor_label(&cs->plan->g, t, label, sizeof label);
    snprintf(doing, sizeof doing, "uploading tensor %s", label);
    /* channels last: into the stored order first, then into the storage type */
    const Tensor *x = &cs->plan->g.tensors[t];
    const bool cl = !tensor_logical_order(x);
    float *ordered = cl ? malloc(sizeof(float) * (size_t)n + 1) : NULL;
    if (cl && !ordered) return errf(err, errcap, "out of memory while %s", doing);
    if (cl) ref_channels_last_copy(x, ordered, (float *)(uintptr_t)host, false);
    const void *src = cl ? ordered : host;
    unsigned char *stage = st == DT_F32 || st == DT_I64 ? (unsigned char *)(uintptr_t)src : malloc((size_t)n * es + 1);
    if (!stage) {
        free(ordered);
        return errf(err, errcap, "out of memory while %s", doing);
    }
    if (stage != src) cuda_f32_to_storage(st, src, stage, n);
    bool ok = true;
    for (int64_t i = 0; ok && i < rows; i++)
        ok = CUDA_CALL(&cs->dev.L, cuMemcpyHtoDAsync, (cs->ptr[t] + (CuDevicePtr)((size_t)(i * (stride ? stride : row)) * es), stage + (size_t)(i * row) * es,
                                                      (size_t)row * es, cs->dev.main),
                       doing, err, errcap);
    ok = ok && sync_main(cs, doing, err, errcap);
    if (stage != src) free(stage);
    free(ordered);
    return ok;
}

/* ---- open / close ---- */

/* Every launch's tensors have addresses, and every host op a reference
 * kernel: checked once, so a step never fails on what the plan lacks. */
static bool check_routes(const CudaStep *cs, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    const KProgram *kp = &cs->kern.kp;
    for (int l = 0; l < kp->n_launches; l++) {
        const KLaunch *ln = &kp->launches[l];
        const Op *op = &g->ops[ln->op_lo];
        char what[128];
        CudaRoute r = cuda_step_route_for(cs, g, ln);
        if (r == CUDA_ROUTE_LIBRARY && (l >= cs->kern.lp.n_launches || cs->kern.lp.launch_kernel[l] < 0))
            return errf(err, errcap, "op %d (%s) has no library kernel in the plan (recompile the plan)", op->id, op_def(op->kind)->name);
        if (r == CUDA_ROUTE_KERNEL) {
            snprintf(what, sizeof what, "kernel %s (launch %d, ops %d..%d) uses", kp->kernels[ln->kernel].name, l, ln->op_lo, ln->op_hi);
            for (int i = 0; i < ln->n_args; i++)
                if (!has_memory(cs, ln->args[i], what, err, errcap)) return false;
            continue;
        }
        int phases[LK_DETLOSS_GRAD - LK_DETLOSS_DECODE + 1];
        if (r == CUDA_ROUTE_DETLOSS && !cuda_detloss_kernels(&cs->kern.lp, g, op, cs->stype, phases, err, errcap)) return false;
        if (r == CUDA_ROUTE_HOST && !ref_kernel(op->kind))
            return errf(err, errcap, "op %d (%s, %s) has no generated kernel, no cuDNN route and no reference kernel to run on the host", op->id,
                        op_def(op->kind)->name, op->scope ? op->scope : "");
        snprintf(what, sizeof what, "op %d (%s, %s) uses", op->id, op_def(op->kind)->name, op->scope ? op->scope : "");
        for (int i = 0; i < op->n_in + op->n_out; i++)
            if (!has_memory(cs, i < op->n_in ? op->in[i] : op->out[i - op->n_in], what, err, errcap)) return false;
        if (r == CUDA_ROUTE_CUDNN && op->n_in > 3) return errf(err, errcap, "op %d (%s) has %d inputs; a convolution takes at most 3", op->id, op_def(op->kind)->name, op->n_in);
    }
    return true;
}

/* cuDNN's workspace, the detection loss's scratch, the library kernels'
 * (attention_bwd's statistics) and attention's through cuBLASLt take turns on the main stream, so they share
 * one allocation of the largest size. */
int64_t cuda_step_workspace_need(const CudaStep *cs) {
    const Graph *g = &cs->plan->g;
    int64_t w = cudnn_conv_workspace_bytes(&cs->conv);
    if (cs->kern.scratch_bytes > w) w = cs->kern.scratch_bytes;
    if (cuda_step_attention_workspace(cs) > w) w = cuda_step_attention_workspace(cs);
    if (cuda_step_conv_gemm_workspace(cs) > w) w = cuda_step_conv_gemm_workspace(cs);
    for (int o = 0; o < g->n_ops; o++) {
        int64_t l = cuda_detloss_op_scratch_bytes(g, &g->ops[o]);
        if (l > w) w = l;
    }
    /* a batch's pixels as bytes land there before their conversion */
    int images = plan_meta_tensor(cs->plan, "inputs", "images");
    if (cs->kern.lp.images_u8 >= 0 && images >= 0 && shape_numel(&g->tensors[images].shape) > w) w = shape_numel(&g->tensors[images].shape);
    return w;
}

/* cuDNN's plans and the library kernels find the workspace where cs->mem has it now */
static void bind_workspace(CudaStep *cs) {
    cudnn_conv_bind(&cs->conv, cs->mem.workspace, cs->mem.workspace_bytes);
    cs->kern.scratch = cs->mem.workspace;
}

bool cuda_step_open(CudaStep *cs, const Plan *p, int ordinal, char *err, int errcap) { return cuda_step_open_sharing(cs, p, ordinal, NULL, err, errcap); }

bool cuda_step_open_sharing(CudaStep *cs, const Plan *p, int ordinal, const CudaLend *lend, char *err, int errcap) {
    memset(cs, 0, sizeof *cs);
    cs->plan = p;
    /* the scale is readable from the open on, before the first step binds the training inputs */
    loss_scale_init(&cs->ls, p->precision == PREC_FP16);
    const char *sync = getenv("YOLOCC_CUDA_SYNC");
    cs->sync_each = sync && *sync && strcmp(sync, "0") != 0;
    const char *lib_host = getenv("YOLOCC_CUDA_LIB_HOST");
    cs->lib_host = lib_host && *lib_host && strcmp(lib_host, "0") != 0;
    const Graph *g = &p->g;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(p->meta, "kind");
    if (!cJSON_IsString(kind) || (strcmp(kind->valuestring, "train") != 0 && strcmp(kind->valuestring, "eval") != 0))
        return errf(err, errcap, "not a training or validation plan (META kind is neither \"train\" nor \"eval\")");
    int n = g->n_tensors;
    bool *persistent = calloc((size_t)n + 1, sizeof *persistent);
    cs->stype = calloc((size_t)n + 1, 1);
    cs->dirty = calloc((size_t)n + 1, sizeof *cs->dirty);
    if (!persistent || !cs->stype || !cs->dirty) {
        free(persistent);
        cuda_step_close(cs);
        return errf(err, errcap, "out of memory");
    }
    memplan_mark_persistent(g, persistent);
    for (int t = 0; t < n; t++) cs->stype[t] = (unsigned char)memplan_storage_dtype(g, t, persistent[t], p->precision);
    free(persistent);
    char doing[256];
    /* kernels first: a plan compiled for another architecture fails before any memory is taken */
    bool ok = (cs->dev_open = cuda_device_open(&cs->dev, ordinal, false, err, errcap)) &&
              (cs->kern_open = cuda_kernels_open(&cs->kern, &cs->dev, p, err, errcap)) && cuda_step_attention_open(cs, err, errcap) &&
              (cs->conv_open = cudnn_conv_open(&cs->conv, &cs->dev.L, cs->dev.main, err, errcap)) &&
              cudnn_tune_knob(getenv("YOLOCC_CUDNN_TUNE"), &cs->conv.candidates, err, errcap) &&
              cudnn_conv_prepare(&cs->conv, g, &p->fusion.views, p->precision, err, errcap) && cuda_step_conv_gemm_open(cs, err, errcap) &&
              (cs->mem_open = cuda_mem_alloc(&cs->mem, &cs->dev, p, cuda_step_workspace_need(cs), 0, lend, err, errcap));
    if (ok) {
        bind_workspace(cs);
        ok = (cs->ptr = cuda_mem_pointers(&cs->mem)) ? true : errf(err, errcap, "out of memory");
        /* cuDNN's engines first (each runs once, so every launch's tensors must have memory): the
         * workspace then shrinks to what the chosen ones need, before attention and the 1x1
         * products take addresses in it; the routes they change are checked again below */
        ok = ok && check_routes(cs, err, errcap) && cuda_step_cudnn_tune(cs, err, errcap) &&
             cuda_mem_fit_workspace(&cs->mem, &cs->dev, cuda_step_workspace_need(cs), lend ? lend->workspace : NULL, err, errcap);
        if (ok) bind_workspace(cs);
        ok = ok && cuda_step_attention_prepare(cs, err, errcap) && cuda_step_conv_gemm_prepare(cs, err, errcap);
        cuda_step_census(cs, g, &cs->kern.kp);
    }
    snprintf(doing, sizeof doing, "finishing the set-up of the plan on %s (zeroing state, uploading tables)", cs->dev.name);
    /* everything the set-up queued went on the main stream: a failure of it is reported here, named */
    ok = ok && check_routes(cs, err, errcap) && cuda_kernels_bind_tables(&cs->kern, &cs->dev, cs->ptr, err, errcap) && sync_main(cs, doing, err, errcap);
    if (!ok) cuda_step_close(cs);
    return ok;
}

bool cuda_step_pin(CudaStep *cs, void *host, size_t bytes, char *err, int errcap) {
    if (cs->n_pinned == (int)(sizeof cs->pinned / sizeof cs->pinned[0])) return errf(err, errcap, "more than %d pinned host buffers", cs->n_pinned);
    if (!CUDA_CALL(&cs->dev.L, cuMemHostRegister, (host, bytes, 0), "pinning an input's host buffer", err, errcap)) return false;
    cs->pinned[cs->n_pinned++] = host;
    return true;
}

bool cuda_step_graphs_wanted(const CudaStep *cs) {
    const char *v = getenv("YOLOCC_CUDA_GRAPHS");
    return !(v && strcmp(v, "0") == 0) && !cs->sync_each;
}

void cuda_step_close(CudaStep *cs) {
    /* teardown: failures leave nothing to undo */
    for (int i = 0; i < cs->n_pinned; i++) (void)cs->dev.L.cuMemHostUnregister(cs->pinned[i]);
    if (cs->ema) (void)cs->dev.L.cuMemFree(cs->ema);
    free(cs->ema_off);
    for (int i = 0; i < cs->n_graphs; i++) {
        if (cs->graphs[i].exec) (void)cs->dev.L.cuGraphExecDestroy(cs->graphs[i].exec);
        if (cs->graphs[i].graph) (void)cs->dev.L.cuGraphDestroy(cs->graphs[i].graph);
    }
    free(cs->graphs);
    if (cs->mem_open) cuda_mem_free(&cs->mem, &cs->dev);
    cuda_step_conv_gemm_close(cs);
    cuda_step_attention_close(cs);
    if (cs->conv_open) cudnn_conv_close(&cs->conv);
    if (cs->kern_open) cuda_kernels_close(&cs->kern, &cs->dev);
    if (cs->dev_open) cuda_device_close(&cs->dev);
    free(cs->ptr);
    free(cs->stype);
    free(cs->dirty);
    memset(cs, 0, sizeof *cs);
}

int64_t cuda_step_device_bytes(const CudaStep *cs) { return cuda_mem_owned_bytes(&cs->mem) + cs->ema_bytes; }

/* ---- state and inputs ---- */

bool cuda_step_refresh_copies(CudaStep *cs, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    for (int t = 0; t < g->n_tensors; t++) {
        if (!cs->dirty[t]) continue;
        cs->dirty[t] = false;
        CuDevicePtr src = cuda_mem_ptr(&cs->mem, t), dst = cuda_mem_compute_ptr(&cs->mem, t);
        if (cs->kern.lp.cast < 0 || dst == src) continue;
        char label[160], doing[224], why[WHY];
        cuda_step_tensor_label(g, t, label, sizeof label);
        snprintf(doing, sizeof doing, "refreshing the compute copy of parameter %s", label);
        if (!cuda_kernels_cast(&cs->kern, &cs->dev, src, dst, shape_numel(&g->tensors[t].shape), cs->dev.main, why, sizeof why) ||
            (cs->sync_each && !sync_main(cs, doing, why, sizeof why)))
            return errf(err, errcap, "%s: %s", doing, why);
        cs->copy_refreshes++;
    }
    return true;
}

bool cuda_step_upload_state(CudaStep *cs, void *const *host, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    for (int t = 0; t < g->n_tensors; t++) {
        TensorKind k = g->tensors[t].kind;
        if (!host[t] || (k != TK_PARAM && k != TK_BUFFER && k != TK_OPTIM)) continue;
        if (!cuda_step_upload(cs, t, host[t], err, errcap)) return false;
    }
    return cuda_step_refresh_copies(cs, err, errcap) && sync_main(cs, "refreshing the parameters' compute copies after an upload", err, errcap);
}

bool cuda_step_set_input(CudaStep *cs, int tensor, const void *host, char *err, int errcap) {
    if (tensor < 0 || tensor >= cs->plan->g.n_tensors || cs->plan->g.tensors[tensor].kind != TK_INPUT)
        return errf(err, errcap, "tensor %d is not an input of the plan", tensor);
    return to_device(cs, tensor, host, err, errcap);
}

bool cuda_step_set_images_u8(CudaStep *cs, int tensor, const uint8_t *host, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    if (tensor < 0 || tensor >= g->n_tensors || g->tensors[tensor].kind != TK_INPUT) return errf(err, errcap, "tensor %d is not an input of the plan", tensor);
    if (!has_memory(cs, tensor, "uploading", err, errcap)) return false;
    int64_t rows, row, stride;
    geometry(cs, tensor, &rows, &row, &stride);
    int64_t n = rows * row;
    if ((stride && stride != row) || n > cs->mem.workspace_bytes)
        return errf(err, errcap, "tensor %d cannot take bytes: %s", tensor, n > cs->mem.workspace_bytes ? "the workspace is smaller than a batch of pixels" : "it is a view");
    /* the conversion reads the workspace before anything of the step can reuse it (the main stream orders them) */
    const char *doing = "uploading a batch's pixels as bytes";
    return CUDA_CALL(&cs->dev.L, cuMemcpyHtoDAsync, (cs->mem.workspace, host, (size_t)n, cs->dev.main), doing, err, errcap) &&
           cuda_kernels_images_u8(&cs->kern, &cs->dev, cs->ptr[tensor], cs->mem.workspace, n, cs->dev.main, err, errcap) &&
           sync_main(cs, doing, err, errcap); /* the caller may refill host at once */
}

bool cuda_step_download(CudaStep *cs, int tensor, void *host, char *err, int errcap) { return to_host(cs, tensor, host, err, errcap); }

bool cuda_step_download_many(CudaStep *cs, int n, const int *tensors, void *const *hosts, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    bool *direct = calloc((size_t)n + 1, sizeof *direct);
    if (!direct) return errf(err, errcap, "out of memory");
    bool ok = true;
    /* packed fp32 / int64 tensors: every copy queued, one wait */
    for (int i = 0; ok && i < n; i++) {
        int t = tensors[i];
        if (!(ok = has_memory(cs, t, "downloading", err, errcap))) break;
        if (!(direct[i] = copies_directly(cs, t))) continue;
        char label[160], doing[224];
        cuda_step_tensor_label(g, t, label, sizeof label);
        snprintf(doing, sizeof doing, "downloading tensor %s", label);
        ok = CUDA_CALL(&cs->dev.L, cuMemcpyDtoHAsync, (hosts[i], cs->ptr[t], (size_t)shape_numel(&g->tensors[t].shape) * dtype_size((DType)cs->stype[t]), cs->dev.main), doing, err, errcap);
    }
    ok = ok && sync_main(cs, "downloading tensors", err, errcap);
    for (int i = 0; ok && i < n; i++)
        if (!direct[i]) ok = to_host(cs, tensors[i], hosts[i], err, errcap);
    free(direct);
    return ok;
}

bool cuda_step_upload(CudaStep *cs, int tensor, const void *host, char *err, int errcap) {
    if (tensor < 0 || tensor >= cs->plan->g.n_tensors) return errf(err, errcap, "tensor %d is not a tensor of the plan", tensor);
    if (!to_device(cs, tensor, host, err, errcap)) return false;
    cuda_step_master_changed(cs, tensor);
    return true;
}

/* ---- the step ---- */

/* Library op o through its reference kernel on the host: the device is
 * synchronised, the op's inputs come down as fp32, its outputs (and the
 * state it updates in place) go back in their storage types. */
static bool run_host(CudaStep *cs, int o, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    const Op *op = &g->ops[o];
    const OpDef *def = op_def(op->kind);
    RefKernel k = ref_kernel(op->kind);
    char why[WHY];
    void **buf = calloc((size_t)g->n_tensors + 1, sizeof *buf);
    bool ok = buf && k;
    if (!buf) snprintf(why, sizeof why, "out of memory");
    else if (!k) snprintf(why, sizeof why, "no reference kernel");
    ok = ok && sync_main(cs, "finishing the work queued before a host op", why, sizeof why);
    for (int i = 0; ok && i < op->n_in + op->n_out; i++) {
        int t = i < op->n_in ? op->in[i] : op->out[i - op->n_in];
        if (buf[t]) continue;
        size_t n = (size_t)shape_numel(&g->tensors[t].shape);
        buf[t] = calloc(n ? n : 1, g->tensors[t].dtype == DT_I64 ? 8 : 4);
        if (!buf[t]) ok = errf(why, sizeof why, "out of memory");
        else if (i < op->n_in) ok = to_host(cs, t, buf[t], why, sizeof why);
    }
    ok = ok && k(g, op, buf, why, sizeof why);
    for (int i = 0; ok && i < op->n_out; i++) ok = to_device(cs, op->out[i], buf[op->out[i]], why, sizeof why);
    for (int i = 0; ok && i < op->n_in && i < 32; i++)
        if (def->mutates >> i & 1) ok = to_device(cs, op->in[i], buf[op->in[i]], why, sizeof why);
    for (int t = 0; buf && t < g->n_tensors; t++) free(buf[t]);
    free(buf);
    if (!ok) return errf(err, errcap, "op %d (%s, %s) on the host: %s", o, def->name, op->scope ? op->scope : "", why);
    cs->host_ops_run++;
    return true;
}

bool cuda_step_run_conv(CudaStep *cs, const Op *op, CuDevicePtr out, char *err, int errcap) {
    CuDevicePtr in[3] = {0};
    /* weights (and a bias) through their compute copies; for other tensors cuda_mem_compute_ptr is their own address */
    for (int i = 0; i < op->n_in && i < 3; i++) in[i] = cuda_mem_compute_ptr(&cs->mem, op->in[i]);
    ConvWiden widen;
    return cudnn_conv_run(&cs->conv, op, in, out, &widen, err, errcap) &&
           (widen.n == 0 || cuda_kernels_widen(&cs->kern, &cs->dev, widen.src, out, widen.n, cs->dev.main, err, errcap));
}

/* Parameters that the ops of launch ln (of a multi-tensor launch, those of
 * rows) update in place: their compute copies go stale. */
static void mark_updates(CudaStep *cs, const KLaunch *ln, KRows rows) {
    const Graph *g = &cs->plan->g;
    const bool multi = kernel_is_multi(&cs->kern.kp, ln);
    for (int o = multi ? ln->op_lo + rows.lo : ln->op_lo; o <= (multi ? ln->op_lo + rows.hi - 1 : ln->op_hi); o++) {
        const Op *op = &g->ops[o];
        unsigned m = op_def(op->kind)->mutates;
        for (int i = 0; i < op->n_in && i < 32; i++)
            if (m >> i & 1) cuda_step_master_changed(cs, op->in[i]);
    }
}

/* One launch of a step, routed (kernel_run_range's visitor). */
static bool run_launch(void *ctx, int l, int gi, KRows rows, char *err, int errcap) {
    CudaStep *cs = ctx;
    const Graph *g = &cs->plan->g;
    const KProgram *kp = &cs->kern.kp;
    const KLaunch *ln = &kp->launches[l];
    const Op *op = &g->ops[ln->op_lo];
    char why[WHY];
    CudaRoute r = cuda_step_route_for(cs, g, ln);
    mark_updates(cs, ln, rows);
    bool ok = r == CUDA_ROUTE_KERNEL    ? cuda_kernels_launch(&cs->kern, &cs->dev, ln, rows, cs->ptr, cs->dev.main, why, sizeof why)
              : r == CUDA_ROUTE_LIBRARY ? cuda_kernels_launch_lib(&cs->kern, &cs->dev, g, &cs->plan->fusion.views, l, cs->ptr, cs->dev.main, why, sizeof why)
              : r == CUDA_ROUTE_CUDNN   ? cuda_step_run_conv(cs, op, cs->ptr[op->out[0]], why, sizeof why)
              : r == CUDA_ROUTE_CUBLASLT ? (cuda_step_conv_gemm_routed(cs, ln->op_lo) ? cuda_step_conv_gemm_run(cs, ln->op_lo, why, sizeof why)
                                                                                      : cuda_step_attention_run(cs, ln->op_lo, why, sizeof why))
              : r == CUDA_ROUTE_DETLOSS ? cuda_detloss_launch(&cs->kern, &cs->dev, g, &cs->plan->fusion.views, op, cs->ptr, cs->stype, cs->mem.workspace,
                                                              cs->mem.workspace_bytes, cs->dev.main, cs->prof_loss ? &cs->prof_loss[l] : NULL, why, sizeof why)
                                        : run_host(cs, ln->op_lo, why, sizeof why);
    if (ok && cs->sync_each) ok = sync_main(cs, "running it (YOLOCC_CUDA_SYNC)", why, sizeof why);
    if (ok) return true;
    return errf(err, errcap, "launch %d (%s, ops %d-%d, group %d: %s, %s): %s", l, r == CUDA_ROUTE_KERNEL    ? kp->kernels[ln->kernel].name
                                                             : r == CUDA_ROUTE_LIBRARY ? cs->kern.lp.kernels[cs->kern.lp.launch_kernel[l]].name
                                                                                       : op_def(op->kind)->name,
                ln->op_lo, ln->op_hi, gi, group_kind_name(cs->plan->fusion.groups[gi].kind), op->scope ? op->scope : "", why);
}

/* ---- runs: eager, or CUDA graphs between host ops ---- */

int cuda_step_ops_done(const KProgram *kp, int l) {
    int done = kp->launches[l].op_hi;
    if (l + 1 < kp->n_launches && kp->launches[l + 1].op_lo <= done) done = kp->launches[l + 1].op_lo - 1;
    return done;
}

/* Whether cs's hook runs after launch l: an op it marks is done with l and was not before. */
static bool hook_point(const CudaStep *cs, int l) {
    if (!cs->hook || !cs->hook->at_op || !cs->hook->after) return false;
    const KProgram *kp = &cs->kern.kp;
    for (int o = l > 0 ? cuda_step_ops_done(kp, l - 1) + 1 : 0, done = cuda_step_ops_done(kp, l); o <= done; o++)
        if (cs->hook->at_op[o]) return true;
    return false;
}

static bool hook_after(CudaStep *cs, int l, char *err, int errcap) { return cs->hook->after(cs->hook->ctx, cuda_step_ops_done(&cs->kern.kp, l), err, errcap); }

/* kernel_run_range's visitor for eager runs: the launch, then the hook where it wants to run. */
static bool run_launch_eager(void *ctx, int l, int gi, KRows rows, char *err, int errcap) {
    CudaStep *cs = ctx;
    const CudaLibs *L = &cs->dev.L;
    if (cs->prof_ev && !CUDA_CALL(L, cuEventRecord, (cs->prof_ev[2 * l], cs->dev.main), "timing a launch (profile)", err, errcap)) return false;
    if (!run_launch(cs, l, gi, rows, err, errcap)) return false;
    if (cs->prof_ev && !CUDA_CALL(L, cuEventRecord, (cs->prof_ev[2 * l + 1], cs->dev.main), "timing a launch (profile)", err, errcap)) return false;
    if (cs->prof_group) cs->prof_group[l] = gi;
    return !hook_point(cs, l) || hook_after(cs, l, err, errcap);
}

int cuda_graph_segments(const CudaRoute *routes, const bool *cut_after, int n, CudaSegment *seg) {
    int k = 0;
    for (int i = 0; i < n;) {
        bool host = routes[i] == CUDA_ROUTE_HOST;
        int j = i + 1;
        while (!host && j < n && routes[j] != CUDA_ROUTE_HOST && !(cut_after && cut_after[j - 1])) j++;
        seg[k++] = (CudaSegment){i, j, host};
        i = j;
    }
    return k;
}

/* The launches of an op range in the order kernel_run_range visits them, with their groups and rows. */
typedef struct LaunchList {
    int *l, *g;
    KRows *rows;
    int n;
} LaunchList;

static bool collect_launch(void *ctx, int l, int gi, KRows rows, char *err, int errcap) {
    (void)err, (void)errcap;
    LaunchList *ll = ctx;
    ll->l[ll->n] = l, ll->g[ll->n] = gi, ll->rows[ll->n++] = rows;
    return true;
}

static bool same_rows(KRows a, KRows b) { return a.lo == b.lo && a.hi == b.hi; }

/* Divides every gradient (the clip op's inputs) by the scale in grad_seed's device memory, on the main stream. */
static bool unscale_grads(CudaStep *cs, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    const Op *clip = &g->ops[cs->clip_op];
    char why[WHY], label[160];
    for (int i = 0; i < clip->n_in; i++) {
        int t = clip->in[i];
        if (!cuda_kernels_unscale(&cs->kern, &cs->dev, cs->ptr[t], shape_numel(&g->tensors[t].shape), cs->ptr[cs->t_grad_seed], cs->dev.main, why, sizeof why) ||
            (cs->sync_each && !sync_main(cs, "unscaling it (YOLOCC_CUDA_SYNC)", why, sizeof why))) {
            cuda_step_tensor_label(g, t, label, sizeof label);
            return errf(err, errcap, "unscaling gradient %s: %s", label, why);
        }
    }
    return true;
}

/* The graph of launches ll[lo, hi) (after the unscale when `unscale`):
 * captured on first use, then replayed. Replays mark the parameters the
 * launches update stale, as the eager run does. */
static bool run_graph(CudaStep *cs, const LaunchList *ll, int lo, int hi, bool unscale, char *err, int errcap) {
    const CudaLibs *L = &cs->dev.L;
    const KProgram *kp = &cs->kern.kp;
    CudaGraphSeg *gs = NULL;
    for (int i = 0; i < cs->n_graphs && !gs; i++)
        if (cs->graphs[i].first_launch == ll->l[lo] && cs->graphs[i].n == hi - lo && cs->graphs[i].unscale == unscale &&
            same_rows(cs->graphs[i].first_rows, ll->rows[lo]) && same_rows(cs->graphs[i].last_rows, ll->rows[hi - 1]))
            gs = &cs->graphs[i];
    char doing[192];
    snprintf(doing, sizeof doing, "capturing launches %d-%d of the step as a CUDA graph", ll->l[lo], ll->l[hi - 1]);
    if (!gs) {
        if (cs->n_graphs == cs->cap_graphs) {
            int c = cs->cap_graphs ? cs->cap_graphs * 2 : 8;
            CudaGraphSeg *q = realloc(cs->graphs, sizeof *q * (size_t)c);
            if (!q) return errf(err, errcap, "out of memory");
            cs->graphs = q, cs->cap_graphs = c;
        }
        CudaGraphSeg fresh = {ll->l[lo], hi - lo, ll->rows[lo], ll->rows[hi - 1], unscale, NULL, NULL};
        /* thread-local mode: a synchronising or allocating call on this thread fails the capture */
        if (!CUDA_CALL(L, cuStreamBeginCapture, (cs->dev.main, 1), doing, err, errcap)) return false;
        bool ok = !unscale || unscale_grads(cs, err, errcap);
        for (int i = lo; ok && i < hi; i++) ok = run_launch(cs, ll->l[i], ll->g[i], ll->rows[i], err, errcap);
        /* the capture always ends, so a failure leaves the stream usable; its error is the one reported */
        char why[WHY];
        bool ended = CUDA_CALL(L, cuStreamEndCapture, (cs->dev.main, &fresh.graph), doing, why, sizeof why);
        if (ok && !ended) ok = errf(err, errcap, "%s", why);
        ok = ok && CUDA_CALL(L, cuGraphInstantiate, (&fresh.exec, fresh.graph, 0), doing, err, errcap);
        if (!ok) {
            if (fresh.graph) (void)L->cuGraphDestroy(fresh.graph);
            return false;
        }
        gs = &cs->graphs[cs->n_graphs++];
        *gs = fresh;
    } else {
        for (int i = lo; i < hi; i++) mark_updates(cs, &kp->launches[ll->l[i]], ll->rows[i]);
    }
    snprintf(doing, sizeof doing, "replaying the CUDA graph of launches %d-%d of the step", ll->l[lo], ll->l[hi - 1]);
    if (!CUDA_CALL(L, cuGraphLaunch, (gs->exec, cs->dev.main), doing, err, errcap)) return false;
    cs->graph_replays++;
    return true;
}

/* Ops [first_op, last_op), the gradients unscaled first when `unscale`:
 * launch by launch, or as graphs between host ops (use_graphs). Refreshes
 * the compute copies and waits for the stream. */
static bool run_ops(CudaStep *cs, int first_op, int last_op, bool unscale, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    if (first_op < 0 || last_op > g->n_ops || first_op > last_op)
        return errf(err, errcap, "ops [%d, %d) are not a range of the step's %d ops", first_op, last_op, g->n_ops);
    if (!cs->use_graphs) {
        if ((unscale && !unscale_grads(cs, err, errcap)) || !kernel_run_range(&cs->kern.kp, &cs->plan->fusion, first_op, last_op, run_launch_eager, NULL, cs, err, errcap))
            return false;
    } else {
        int n = cs->kern.kp.n_launches;
        LaunchList ll = {malloc(sizeof(int) * ((size_t)n + 1)), malloc(sizeof(int) * ((size_t)n + 1)), malloc(sizeof(KRows) * ((size_t)n + 1)), 0};
        CudaRoute *routes = malloc(sizeof *routes * ((size_t)n + 1));
        CudaSegment *seg = malloc(sizeof *seg * ((size_t)n + 1));
        bool *cut = malloc(sizeof *cut * ((size_t)n + 1));
        bool ok = ll.l && ll.g && ll.rows && routes && seg && cut;
        if (!ok) errf(err, errcap, "out of memory");
        ok = ok && kernel_run_range(&cs->kern.kp, &cs->plan->fusion, first_op, last_op, collect_launch, NULL, &ll, err, errcap);
        for (int i = 0; ok && i < ll.n; i++) {
            routes[i] = cuda_step_route_for(cs, g, &cs->kern.kp.launches[ll.l[i]]);
            cut[i] = hook_point(cs, ll.l[i]);
        }
        int n_seg = ok ? cuda_graph_segments(routes, cut, ll.n, seg) : 0;
        /* the unscale joins the first graph; before a host op (or nothing) it runs eagerly */
        bool pending = unscale;
        if (ok && pending && (n_seg == 0 || seg[0].host)) ok = unscale_grads(cs, err, errcap), pending = false;
        for (int k = 0; ok && k < n_seg; k++) {
            if (seg[k].host) {
                ok = run_launch(cs, ll.l[seg[k].lo], ll.g[seg[k].lo], ll.rows[seg[k].lo], err, errcap);
                cs->eager_host_ops += ok;
            } else {
                ok = run_graph(cs, &ll, seg[k].lo, seg[k].hi, pending, err, errcap);
                pending = false;
            }
            /* a segment ends at a hook point: its work is enqueued, the capture (if any) over */
            if (ok && cut[seg[k].hi - 1]) ok = hook_after(cs, ll.l[seg[k].hi - 1], err, errcap);
        }
        free(ll.l), free(ll.g), free(ll.rows), free(routes), free(seg), free(cut);
        if (!ok) return false;
    }
    if (cs->hook && cs->hook->before_wait && !cs->hook->before_wait(cs->hook->ctx, err, errcap)) return false;
    char doing[256];
    snprintf(doing, sizeof doing, "running ops [%d, %d) of the step (set YOLOCC_CUDA_SYNC=1 to find the failing launch)", first_op, last_op);
    return cuda_step_refresh_copies(cs, err, errcap) && sync_main(cs, doing, err, errcap);
}

bool cuda_step_run(CudaStep *cs, int first_op, int last_op, char *err, int errcap) { return run_ops(cs, first_op, last_op, false, err, errcap); }

bool cuda_step_run_unscaled(CudaStep *cs, int first_op, int last_op, char *err, int errcap) { return run_ops(cs, first_op, last_op, true, err, errcap); }

bool cuda_step_use_graphs(CudaStep *cs, bool on, char *err, int errcap) {
    if (on && cs->sync_each) return errf(err, errcap, "CUDA graphs cannot capture YOLOCC_CUDA_SYNC's synchronisation after every launch (unset it)");
    cs->use_graphs = on;
    return true;
}
