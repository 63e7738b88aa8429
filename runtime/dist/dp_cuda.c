/* runtime/dist/dp_cuda.c — data parallelism of CUDA plans: the NCCL
 * communicator on the TrainStep's device, rank 0's state to every rank, and
 * the backward hook that sums each gradient bucket in device memory on the
 * side stream as soon as backward has produced it. Must not touch kernels,
 * the optimizer's arithmetic or host-side gradients (dp_train.c owns those
 * for CPU plans). */
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../cuda/cuda_abi.h"
#include "../cuda/cuda_step.h"
#include "dp_train.h"

/* Bytes of a state tensor as the device holds it: fp32 masters, int64 counters. */
static size_t device_bytes(const Tensor *t) { return (size_t)shape_numel(&t->shape) * (t->dtype == DT_I64 ? 8 : 4); }

/* DDP broadcasts rank 0's module state at construction. Under MPI the host
 * copies go (the step uploads them before its first batch); without MPI
 * (torchrun: its store carries only small messages) the device's, through
 * NCCL, after this rank's own upload. */
static bool broadcast_state(DataParallel *dp, TrainStep *ts, char *err, int errcap) {
    const Graph *g = &ts->plan->g;
    if (dp->comm.active && !dp->comm.store) return dp_broadcast_host_state(dp, ts, err, errcap);
    CudaStep *cs = ts->cuda;
    NcclBuf *runs = malloc(sizeof *runs * ((size_t)g->n_state + 1));
    if (!runs) return errf(err, errcap, "out of memory");
    for (int i = 0; i < g->n_state; i++) {
        int t = g->state[i];
        runs[i] = (NcclBuf){cs->ptr[t], device_bytes(&g->tensors[t])};
        cuda_step_master_changed(cs, t); /* the compute copy follows its master */
    }
    char why[1024];
    bool ok = train_step_sync_device(ts, err, errcap) && dist_nccl_broadcast_bytes(&dp->nccl, runs, g->n_state, 0, cs->dev.main, err, errcap) &&
              dist_nccl_wait(&dp->nccl, err, errcap);
    if (ok && !cuda_step_refresh_copies(cs, why, sizeof why)) ok = errf(err, errcap, "after rank 0's state arrived: %s", why);
    free(runs);
    /* the host's copies are rank 0's only once downloaded */
    ts->host_stale = true;
    return ok;
}

/* The hook's `after`: every bucket whose gradients backward has now finished
 * goes to the side stream behind an event on main, so its sum runs beside
 * the rest of backward. Buckets are in ready order. */
static bool buckets_ready(void *ctx, int done_through, char *err, int errcap) {
    DataParallel *dp = ctx;
    const BucketLayout *l = &dp->layout;
    const CudaDevice *dev = &dp->cuda->dev;
    if (dp->next_bucket >= l->n_buckets || l->buckets[dp->next_bucket].ready_op > done_through) return true;
    if (!CUDA_CALL(&dev->L, cuEventRecord, (dp->ready_ev, dev->main), "marking where backward finished a gradient bucket", err, errcap) ||
        !CUDA_CALL(&dev->L, cuStreamWaitEvent, (dev->side, dp->ready_ev, 0), "ordering a bucket's all-reduce after its gradients", err, errcap))
        return false;
    for (; dp->next_bucket < l->n_buckets && l->buckets[dp->next_bucket].ready_op <= done_through; dp->next_bucket++) {
        int b = dp->next_bucket;
        if (!dist_nccl_allreduce_sum(&dp->nccl, b, dp->runs + dp->run_lo[b], dp->run_lo[b + 1] - dp->run_lo[b], dev->side, err, errcap)) return false;
    }
    return true;
}

/* The hook's `before_wait`: what follows backward (the clip first) reads the
 * sums, so main waits for them on the GPU; the host watches them, so a stuck
 * collective ends the job instead of hanging the step's wait. */
static bool backward_done(void *ctx, char *err, int errcap) {
    DataParallel *dp = ctx;
    int reached = dp->next_bucket;
    dp->next_bucket = 0;
    if (reached != dp->layout.n_buckets)
        return errf(err, errcap, "rank %d of %d: backward ended with %d of its %d gradient buckets summed (a bucket's ready op never ran)", dp->comm.ranks.rank,
                    dp->comm.ranks.world, reached, dp->layout.n_buckets);
    return dist_nccl_stream_wait(&dp->nccl, dp->cuda->dev.main, err, errcap) && dist_nccl_wait(&dp->nccl, err, errcap);
}

bool dp_cuda_hook(DataParallel *dp, CudaStep *cs, const int *grads, int n, char *err, int errcap) {
    const BucketLayout *l = &dp->layout;
    const Graph *g = &cs->plan->g;
    if (n != l->n_grads || l->n_buckets < 1) return errf(err, errcap, "the gradient layout has %d gradients in %d buckets, the step %d", l->n_grads, l->n_buckets, n);
    CuDevicePtr *grad_ptr = malloc(sizeof *grad_ptr * ((size_t)n + 1));
    dp->run_lo = malloc(sizeof *dp->run_lo * ((size_t)l->n_buckets + 1));
    dp->ready_at = calloc((size_t)g->n_ops + 1, sizeof *dp->ready_at);
    dp->hook = calloc(1, sizeof *dp->hook);
    int cap = 0;
    for (int b = 0; b < l->n_buckets; b++) cap += l->buckets[b].last - l->buckets[b].first + 1;
    dp->runs = malloc(sizeof *dp->runs * ((size_t)cap + 1));
    bool ok = grad_ptr && dp->run_lo && dp->ready_at && dp->hook && dp->runs ? true : errf(err, errcap, "out of memory");
    for (int i = 0; ok && i < n; i++) {
        grad_ptr[i] = cs->ptr[grads[i]];
        if (cs->stype[grads[i]] != DT_F32 || !grad_ptr[i])
            ok = errf(err, errcap, "the NCCL all-reduce sums fp32 gradients in device memory; gradient %d is not one", grads[i]);
    }
    /* the runs never change: device addresses are fixed while the step is open */
    dp->run_lo[0] = 0;
    for (int b = 0; ok && b < l->n_buckets; b++) {
        int runs;
        ok = dist_nccl_bucket_bufs(l, b, grad_ptr, dp->runs + dp->run_lo[b], cap - dp->run_lo[b], &runs, err, errcap);
        dp->run_lo[b + 1] = dp->run_lo[b] + (ok ? runs : 0);
        if (ok && (l->buckets[b].ready_op < 0 || l->buckets[b].ready_op >= g->n_ops))
            ok = errf(err, errcap, "gradient bucket %d is ready after op %d, not an op of the step", b, l->buckets[b].ready_op);
        if (ok) dp->ready_at[l->buckets[b].ready_op] = true;
    }
    free(grad_ptr);
    /* a ready point means "every launch of these ops is enqueued" only when launches run in op order */
    const KProgram *kp = &cs->kern.kp;
    for (int k = 1; ok && k < kp->n_launches; k++)
        if (kp->launches[k].op_lo < kp->launches[k - 1].op_lo || kp->launches[k].op_hi < kp->launches[k - 1].op_hi)
            ok = errf(err, errcap, "launch %d (ops %d-%d) follows launch %d (ops %d-%d): the overlapped all-reduce needs the launches in op order", k,
                      kp->launches[k].op_lo, kp->launches[k].op_hi, k - 1, kp->launches[k - 1].op_lo, kp->launches[k - 1].op_hi);
    ok = ok && CUDA_CALL(&cs->dev.L, cuEventCreate, (&dp->ready_ev, CU_EVENT_DISABLE_TIMING_FLAG), "creating the gradient buckets' ready event", err, errcap);
    if (!ok) return false;
    *dp->hook = (CudaRunHook){dp->ready_at, buckets_ready, backward_done, dp};
    dp->cuda = cs;
    dp->next_bucket = 0;
    return true;
}

bool dp_cuda_attach(DataParallel *dp, TrainStep *ts, char *err, int errcap) {
    const Graph *g = &ts->plan->g;
    int n;
    const int *grads = train_step_grads(ts, &n);
    int64_t cap;
    if (!bucket_cap_from_env(getenv("YOLOCC_BUCKET_CAP_MB"), &cap, err, errcap) || !bucket_layout_from_graph(g, grads, n, cap, &dp->layout, err, errcap)) return false;
    char why[1024];
    if (!(dp->nccl_libs_open = cuda_libs_open(&dp->nccl_libs, NULL, true, why, sizeof why)))
        return errf(err, errcap, "rank %d of %d: a CUDA plan on several ranks needs NCCL: %s", dp->comm.ranks.rank, dp->comm.ranks.world, why);
    /* NCCL's device is the current context's: the step opened LOCAL_RANK's on this thread */
    if (!(dp->nccl_open = dist_nccl_open(&dp->nccl, &dp->nccl_libs, &dp->comm.ranks, dp->comm.active ? &dp->comm : NULL, dp->layout.n_buckets, dp->comm.timeout_s,
                                         err, errcap)))
        return false;
    if (!broadcast_state(dp, ts, err, errcap) || !dp_cuda_hook(dp, ts->cuda, grads, n, err, errcap)) return false;
    ts->backward_hook = dp->hook;
    dp->ts = ts;
    return true;
}

void dp_detach(DataParallel *dp) {
    if (dp->nccl_open) dist_nccl_close(&dp->nccl);
    if (dp->nccl_libs_open) cuda_libs_close(&dp->nccl_libs);
    dp->nccl_open = dp->nccl_libs_open = false;
    /* teardown: a failed destroy leaves nothing to undo */
    if (dp->ready_ev) (void)dp->cuda->dev.L.cuEventDestroy(dp->ready_ev);
    dp->ready_ev = NULL;
    free(dp->runs), free(dp->run_lo), free(dp->ready_at), free(dp->hook);
    dp->runs = NULL, dp->run_lo = NULL, dp->ready_at = NULL, dp->hook = NULL;
    if (dp->ts) dp->ts->backward_hook = NULL;
    dp->ts = NULL;
    dp->cuda = NULL;
}
