/* runtime/train_step_cuda.c — TrainStep on a GPU: the CudaStep of a CUDA plan
 * behind train_step_backward / train_step_update, with it.buf as the host's
 * view of inputs, outputs, gradients and state. Owns only the traffic between
 * that view and the device; the step itself is cuda/cuda_step.c's. */
#include "train_step_cuda.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/diag.h"
#include "cuda/cuda_step.h"
#include "detloss.h"
#include "device_select.h"
#include "dist/ranks.h"

bool plan_targets_cuda(const Plan *p) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p->meta, "target");
    return cJSON_IsString(t) && strcmp(t->valuestring, "cuda") == 0;
}

bool train_step_cuda_open(TrainStep *ts, char *err, int errcap) {
    const Graph *g = &ts->plan->g;
    /* host copies: everything but activations, plus the gradients (the
     * accumulation and the reduce hook read them) and the step's outputs */
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].kind != TK_ACTIVATION && !interp_tensor(&ts->it, t)) return errf(err, errcap, "out of memory");
    int n;
    const int *grads = train_step_grads(ts, &n);
    for (int i = 0; i < n; i++)
        if (!interp_tensor(&ts->it, grads[i])) return errf(err, errcap, "out of memory");
    const int outs[] = {ts->loss, ts->items, ts->grad_norm};
    for (int i = 0; i < 3; i++)
        if (!interp_tensor(&ts->it, outs[i])) return errf(err, errcap, "out of memory");
    Ranks r;
    if (!ranks_from_environ(&r, err, errcap)) return false;
    if (!(ts->cuda = calloc(1, sizeof *ts->cuda))) return errf(err, errcap, "out of memory");
    char why[1024];
    if (!cuda_step_open(ts->cuda, ts->plan, r.local_rank, why, sizeof why)) {
        free(ts->cuda);
        ts->cuda = NULL;
        char user[32];
        device_user_name(r.local_rank, user, sizeof user);
        return errf(err, errcap, "CUDA device %s: %s", user, why);
    }
    if (!cuda_step_use_graphs(ts->cuda, cuda_step_graphs_wanted(ts->cuda), err, errcap) || !cuda_step_train_init(ts->cuda, err, errcap)) return false;
    /* every batch's images go up from here: pinned, the copy runs at the bus's
     * speed (boxes and counts are small, and small buffers may share a page
     * with each other, which the driver registers only once) */
    const Tensor *im = &ts->plan->g.tensors[ts->images];
    if (!cuda_step_pin(ts->cuda, ts->it.buf[ts->images], (size_t)shape_numel(&im->shape) * dtype_size(im->dtype), err, errcap)) return false;
    ts->device_stale = true;
    return true;
}

void train_step_cuda_close(TrainStep *ts) {
    if (!ts->cuda) return;
    cuda_step_close(ts->cuda); /* unpins what was pinned for it */
    free(ts->cuda);
    ts->cuda = NULL;
    ts->images_u8 = NULL;
}

bool train_step_takes_bytes(const TrainStep *ts, char *err, int errcap) {
    if (!ts->cuda) return errf(err, errcap, "a CPU plan takes its pixels as floats");
    if (ts->cuda->kern.lp.images_u8 < 0) return errf(err, errcap, "the plan has no kernel for images uploaded as bytes (recompile the plan)");
    return true;
}

void train_step_use_bytes(TrainStep *ts, const uint8_t *bytes) { ts->images_u8 = bytes; }


bool train_step_cuda_sync_device(TrainStep *ts, char *err, int errcap) {
    if (!ts->device_stale) return true;
    if (!cuda_step_upload_state(ts->cuda, ts->it.buf, err, errcap)) return false;
    ts->device_stale = false;
    return true;
}

/* Downloads tensors ids[0..n) into their it.buf copies with one wait. */
static bool download_into_buf(TrainStep *ts, const int *ids, int n, char *err, int errcap) {
    void **hosts = malloc(sizeof *hosts * ((size_t)n + 1));
    if (!hosts) return errf(err, errcap, "out of memory");
    for (int i = 0; i < n; i++) hosts[i] = ts->it.buf[ids[i]];
    bool ok = cuda_step_download_many(ts->cuda, n, ids, hosts, err, errcap);
    free(hosts);
    return ok;
}

/* acc += the device's gradients (it.buf's gradient copies are the staging) */
static bool pending_to_acc(TrainStep *ts, char *err, int errcap) {
    if (!ts->dev_pending) return true;
    int n;
    const int *grads = train_step_grads(ts, &n);
    if (!download_into_buf(ts, grads, n, err, errcap)) return false;
    for (int i = 0; i < n; i++) {
        const float *gr = ts->it.buf[grads[i]];
        for (int64_t k = 0, m = shape_numel(&ts->plan->g.tensors[grads[i]].shape); k < m; k++) ts->acc[i][k] += gr[k];
    }
    ts->dev_pending = false;
    return true;
}

/* The batch's targets as the host loss checks them: the device loss would
 * turn a bad row into NaN, where this names it. */
static bool check_targets(TrainStep *ts, char *err, int errcap) {
    DetTargets t;
    int *counts = NULL;
    char why[256];
    bool ok = (detloss_targets_from_i64(ts->batch, ts->max_boxes, ts->it.buf[ts->counts], ts->it.buf[ts->boxes], &t, &counts, why, sizeof why) &&
               detloss_check_targets(&t, ts->nc, why, sizeof why)) ||
              errf(err, errcap, "the batch's targets: %s", why);
    free(counts);
    return ok;
}

bool train_step_cuda_backward(TrainStep *ts, StepResult *out, char *err, int errcap) {
    CudaStep *cs = ts->cuda;
    if (!check_targets(ts, err, errcap) || !train_step_cuda_sync_device(ts, err, errcap) || !pending_to_acc(ts, err, errcap)) return false;
    if (!(ts->images_u8 ? cuda_step_set_images_u8(cs, ts->images, ts->images_u8, err, errcap) : cuda_step_set_input(cs, ts->images, ts->it.buf[ts->images], err, errcap)) ||
        !cuda_step_set_input(cs, ts->boxes, ts->it.buf[ts->boxes], err, errcap) || !cuda_step_set_input(cs, ts->counts, ts->it.buf[ts->counts], err, errcap))
        return false;
    char why[1024];
    if (!cuda_step_seed(cs, err, errcap)) return false;
    cs->hook = ts->backward_hook;
    bool ran = cuda_step_run(cs, 0, ts->clip_op, why, sizeof why);
    cs->hook = NULL;
    if (!ran) return errf(err, errcap, "forward and backward on the GPU: %s", why);
    /* BN running statistics moved with the forward */
    ts->host_stale = ts->dev_pending = true;
    ts->n_acc_batches++;
    const int outs[] = {ts->items, ts->loss};
    if (!download_into_buf(ts, outs, 2, err, errcap)) return false;
    const float *items = ts->it.buf[ts->items];
    *out = (StepResult){items[0], items[1], items[2], *(const float *)ts->it.buf[ts->loss], 0};
    return true;
}

static bool any_frozen(const TrainStep *ts, const bool *skip) {
    const Graph *g = &ts->plan->g;
    for (int o = ts->clip_op + 1; skip && o < g->n_ops; o++)
        if (skip[g->ops[o].in[0]]) return true;
    return false;
}

bool train_step_cuda_update(TrainStep *ts, const double lr[3], double momentum, const bool *skip, double *grad_norm, char *err, int errcap) {
    CudaStep *cs = ts->cuda;
    const Graph *g = &ts->plan->g;
    int n;
    const int *grads = train_step_grads(ts, &n);
    if (ts->n_acc_batches > 1 || ts->reduce_grads || any_frozen(ts, skip)) {
        if (!pending_to_acc(ts, err, errcap)) return false;
        if (ts->reduce_grads && !ts->reduce_grads(ts->reduce_ctx, ts, err, errcap)) return false;
        for (int i = 0; i < n; i++) {
            size_t bytes = (size_t)shape_numel(&g->tensors[grads[i]].shape) * sizeof(float);
            if (skip && skip[ts->grad_param[i]]) memset(ts->acc[i], 0, bytes);
            if (!cuda_step_upload(cs, grads[i], ts->acc[i], err, errcap)) return false;
            memset(ts->acc[i], 0, bytes);
        }
    }
    ts->dev_pending = false;
    ts->n_acc_batches = 0;
    const float lrf[3] = {(float)lr[0], (float)lr[1], (float)lr[2]};
    CudaStepOutcome o;
    cs->frozen = skip;
    bool ok = cuda_step_bind_step(cs, lrf, (float)momentum, (float)(ts->step + 1), err, errcap) && cuda_step_optimize(cs, &o, err, errcap);
    cs->frozen = NULL;
    if (!ok) return false;
    if (o.skipped) ts->skipped_steps++;
    else ts->step++, ts->host_stale = ts->optim_stale = true;
    *(float *)ts->it.buf[ts->grad_norm] = o.grad_norm;
    if (grad_norm) *grad_norm = o.grad_norm;
    return true;
}

bool train_step_cuda_sync_host(TrainStep *ts, bool optimizer, char *err, int errcap) {
    const Graph *g = &ts->plan->g;
    /* a checkpoint holds the accumulators too: the device's batch joins them */
    if (optimizer && !pending_to_acc(ts, err, errcap)) return false;
    bool params = ts->host_stale, optim = optimizer && ts->optim_stale;
    int *ids = malloc(sizeof *ids * ((size_t)g->n_tensors + 1)), n = 0;
    if (!ids) return errf(err, errcap, "out of memory");
    for (int t = 0; t < g->n_tensors; t++) {
        TensorKind k = g->tensors[t].kind;
        if ((params && (k == TK_PARAM || k == TK_BUFFER)) || (optim && k == TK_OPTIM)) ids[n++] = t;
    }
    bool ok = n == 0 || download_into_buf(ts, ids, n, err, errcap);
    free(ids);
    if (!ok) return false;
    if (params) ts->host_stale = false;
    if (optim) ts->optim_stale = false;
    return true;
}
