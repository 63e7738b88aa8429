/* runtime/dist/dp_cuda.c — data parallelism of CUDA plans: the NCCL
 * communicator on the TrainStep's device, rank 0's state to every rank, and
 * the bucketed sum of the gradients in device memory before the clip. Must
 * not touch kernels, the optimizer's arithmetic or host-side gradients
 * (dp_train.c owns those for CPU plans). */
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../cuda/cuda_step.h"
#include "dp_train.h"

/* Bytes of a state tensor as the device holds it: fp32 masters, int64 counters. */
static size_t device_bytes(const Tensor *t) { return (size_t)shape_numel(&t->shape) * (t->dtype == DT_I64 ? 8 : 4); }

/* DDP broadcasts rank 0's module state at construction. Under MPI the host
 * copies go (the step uploads them before its first batch); without MPI the
 * device's, through NCCL, after this rank's own upload. */
static bool broadcast_state(DataParallel *dp, TrainStep *ts, char *err, int errcap) {
    const Graph *g = &ts->plan->g;
    if (dp->comm.active) return dp_broadcast_host_state(dp, ts, err, errcap);
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

bool dp_cuda_attach(DataParallel *dp, TrainStep *ts, char *err, int errcap) {
    const Graph *g = &ts->plan->g;
    CudaStep *cs = ts->cuda;
    int n;
    const int *grads = train_step_grads(ts, &n);
    for (int i = 0; i < n; i++)
        if (cs->stype[grads[i]] != DT_F32 || !cs->ptr[grads[i]])
            return errf(err, errcap, "the NCCL all-reduce sums fp32 gradients in device memory; gradient %d is not one", grads[i]);
    int64_t cap;
    if (!bucket_cap_from_env(getenv("YOLOCC_BUCKET_CAP_MB"), &cap, err, errcap) || !bucket_layout_from_graph(g, grads, n, cap, &dp->layout, err, errcap)) return false;
    dp->grad_ptr = malloc(sizeof *dp->grad_ptr * ((size_t)n + 1));
    dp->bufs = malloc(sizeof *dp->bufs * ((size_t)n + 1));
    if (!dp->grad_ptr || !dp->bufs) return errf(err, errcap, "out of memory");
    for (int i = 0; i < n; i++) dp->grad_ptr[i] = cs->ptr[grads[i]];
    char why[1024];
    if (!(dp->nccl_libs_open = cuda_libs_open(&dp->nccl_libs, NULL, true, why, sizeof why)))
        return errf(err, errcap, "rank %d of %d: a CUDA plan on several ranks needs NCCL: %s", dp->comm.ranks.rank, dp->comm.ranks.world, why);
    /* NCCL's device is the current context's: the step opened LOCAL_RANK's on this thread */
    if (!(dp->nccl_open = dist_nccl_open(&dp->nccl, &dp->nccl_libs, &dp->comm.ranks, dp->comm.active ? &dp->comm : NULL, dp->layout.n_buckets, dp->comm.timeout_s,
                                         err, errcap)))
        return false;
    if (!broadcast_state(dp, ts, err, errcap)) return false;
    ts->reduce_device = dp_cuda_reduce;
    ts->reduce_ctx = dp;
    dp->ts = ts;
    return true;
}

bool dp_cuda_reduce(void *ctx, TrainStep *ts, char *err, int errcap) {
    DataParallel *dp = ctx;
    const BucketLayout *l = &dp->layout;
    CuStream main = ts->cuda->dev.main;
    for (int b = 0; b < l->n_buckets; b++) {
        int runs;
        if (!dist_nccl_bucket_bufs(l, b, dp->grad_ptr, dp->bufs, l->n_grads, &runs, err, errcap) ||
            !dist_nccl_allreduce_sum(&dp->nccl, b, dp->bufs, runs, main, err, errcap))
            return false;
    }
    /* the clip and the updates follow on the same stream; the host waits here so a stuck collective ends the job */
    return dist_nccl_wait(&dp->nccl, err, errcap);
}

void dp_detach(DataParallel *dp) {
    if (dp->nccl_open) dist_nccl_close(&dp->nccl);
    if (dp->nccl_libs_open) cuda_libs_close(&dp->nccl_libs);
    dp->nccl_open = dp->nccl_libs_open = false;
    free(dp->grad_ptr);
    free(dp->bufs);
    dp->grad_ptr = NULL;
    dp->bufs = NULL;
    if (dp->ts) dp->ts->reduce_device = NULL;
    dp->ts = NULL;
}
