/* runtime/dist/comm_nccl.c — NCCL communicator start-up (id shared by MPI or
 * TCP), bucketed in-place fp32 sums, and the watchdog that aborts a stuck
 * collective. Owns NCCL calls only; must not touch plans, kernels, the
 * optimizer or files, nor include CUDA or NCCL headers (cuda_abi.h values). */
#include "comm_nccl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../ir/diag.h"
#include "../cuda/cuda_abi.h"
#include "../cuda/cuda_device.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the launcher's name for the local rank, for messages */
static const char *local_rank_var(RankSource s) {
    switch (s) {
    case RANKS_OMPI: return "OMPI_COMM_WORLD_LOCAL_RANK";
    case RANKS_SLURM: return "SLURM_LOCALID";
    case RANKS_TORCHRUN:
    case RANKS_SINGLE: break;
    }
    return "LOCAL_RANK";
}

bool dist_nccl_device(const Ranks *r, int device_count, int *ordinal, char *err, int errcap) {
    if (device_count < 1) return errf(err, errcap, "rank %d of %d: no CUDA device on this node", r->rank, r->world);
    /* one visible device: the launcher bound this process to it (srun --gpus-per-task, a per-rank
     * CUDA_VISIBLE_DEVICES), and its ordinal is 0 whatever the local rank */
    if (device_count == 1) return *ordinal = 0, true;
    if (r->local_rank >= device_count)
        return errf(err, errcap, "rank %d of %d: %s=%d (%s) but this node has %d CUDA devices: one rank per device, local ranks 0..%d", r->rank, r->world,
                    local_rank_var(r->source), r->local_rank, ranks_source_name(r->source), device_count, device_count - 1);
    if (r->local_world > device_count)
        return errf(err, errcap, "rank %d of %d: %d ranks on this node (%s) but %d CUDA devices: one rank per device", r->rank, r->world, r->local_world,
                    ranks_source_name(r->source), device_count);
    *ordinal = r->local_rank;
    return true;
}

bool dist_nccl_bucket_bufs(const BucketLayout *l, int b, const CuDevicePtr *grad_ptr, NcclBuf *out, int cap, int *n_out, char *err, int errcap) {
    *n_out = 0;
    if (b < 0 || b >= l->n_buckets) return errf(err, errcap, "bucket %d is not one of the layout's %d buckets", b, l->n_buckets);
    const Bucket *bk = &l->buckets[b];
    if (bk->bytes <= 0 || bk->offset % 4 || bk->bytes % 4 || bk->first < 0 || bk->last < bk->first || bk->last >= l->n_grads)
        return errf(err, errcap, "bucket %d (%lld bytes at offset %lld) is not a run of whole float32 gradients", b, (long long)bk->bytes, (long long)bk->offset);
    int64_t lo = bk->offset, hi = bk->offset + bk->bytes;
    int n = 0;
    for (int k = bk->first; k <= bk->last; k++) {
        int i = l->order[k];
        int64_t g0 = l->offset[i], g1 = k + 1 < l->n_grads ? l->offset[l->order[k + 1]] : l->total_bytes;
        int64_t a = lo > g0 ? lo : g0, e = hi < g1 ? hi : g1;
        if (e <= a) continue;
        if (!grad_ptr[i] || grad_ptr[i] % 4)
            return errf(err, errcap, "gradient %d of bucket %d is at device address 0x%llx: not a 4-byte aligned float32 buffer", i, b, (unsigned long long)grad_ptr[i]);
        CuDevicePtr p = grad_ptr[i] + (CuDevicePtr)(a - g0);
        size_t count = (size_t)(e - a) / 4;
        /* pieces that follow each other on the device are one NCCL call */
        if (n > 0 && out[n - 1].ptr + 4 * (CuDevicePtr)out[n - 1].count == p) {
            out[n - 1].count += count;
            continue;
        }
        if (n == cap) return errf(err, errcap, "bucket %d needs more than %d device runs", b, cap);
        out[n++] = (NcclBuf){p, count};
    }
    *n_out = n;
    return true;
}

NcclWaitState dist_nccl_wait_state(CuResult event, NcclResult async, double now, double deadline) {
    if (async != NCCL_RESULT_SUCCESS && async != NCCL_RESULT_IN_PROGRESS) return NCCL_WAIT_FAILED;
    if (event == 0) return NCCL_WAIT_DONE;
    if (event != CU_RESULT_NOT_READY) return NCCL_WAIT_FAILED;
    return now >= deadline ? NCCL_WAIT_TIMEOUT : NCCL_WAIT_PENDING;
}

bool dist_nccl_share_id(const Ranks *r, Rendezvous how, DistComm *mpi, void *id, size_t n, char *err, int errcap) {
    switch (how) {
    case RDV_NONE: return true;
    case RDV_MPI:
    case RDV_STORE:
    case RDV_HOST: /* the host's channel: MPI, or the store */
        if (!mpi || !mpi->active || (how != RDV_MPI) != (mpi->store != NULL))
            return errf(err, errcap, "rank %d of %d: %s, which is not started (%s first)", r->rank, r->world,
                        how == RDV_MPI ? "under mpirun the NCCL id goes through MPI" : "without MPI the NCCL id goes through the ranks' store",
                        how == RDV_MPI ? "dist_init" : "store_comm_init");
        return dist_broadcast(mpi, id, n, 0, "the NCCL unique id", err, errcap);
    }
    return errf(err, errcap, "rank %d of %d: unknown rendezvous %d", r->rank, r->world, (int)how);
}

/* "rank R of W: CALL failed: NCCL's text (ncclResult N) while DOING"; false unless r is success */
static bool nccl_ok(const DistNccl *c, NcclResult r, const char *call, const char *doing, char *err, int errcap) {
    if (r == NCCL_RESULT_SUCCESS) return true;
    const char *text = c->L->ncclGetErrorString ? c->L->ncclGetErrorString(r) : NULL;
    return errf(err, errcap, "rank %d of %d: %s failed: %s (ncclResult %d) while %s", c->ranks.rank, c->ranks.world, call, text ? text : "unknown NCCL error", r,
                doing);
}

/* a driver failure as cuda_ok words it, with the rank in front */
static bool cu_ok(const DistNccl *c, CuResult r, const char *call, const char *doing, char *err, int errcap) {
    char why[768];
    if (cuda_ok(c->L, r, call, doing, why, sizeof why)) return true;
    return errf(err, errcap, "rank %d of %d: %s", c->ranks.rank, c->ranks.world, why);
}

/* after a failure the communicator cannot be trusted (a rank may be inside
 * a collective that will never complete): abort it so nothing waits on it */
static void abort_comm(DistNccl *c) {
    c->failed = true;
    if (c->comm) (void)c->L->ncclCommAbort(c->comm); /* its result changes nothing: the communicator is gone either way */
    c->comm = NULL;
}

static bool usable(const DistNccl *c, char *err, int errcap) {
    if (!c->failed) return true;
    return errf(err, errcap, "rank %d of %d: the NCCL communicator was aborted after an earlier failure", c->ranks.rank, c->ranks.world);
}

bool dist_nccl_adopt(DistNccl *c, const CudaLibs *L, const Ranks *r, NcclComm comm, int n_buckets, double timeout_s, char *err, int errcap) {
    *c = (DistNccl){.L = L, .ranks = *r, .device = r->local_rank, .comm = comm, .timeout_s = timeout_s, .n_buckets = n_buckets};
    if (n_buckets < 1) return abort_comm(c), errf(err, errcap, "rank %d of %d: %d gradient buckets", r->rank, r->world, n_buckets);
    c->done = calloc((size_t)n_buckets, sizeof *c->done);
    c->in_flight = calloc((size_t)n_buckets, sizeof *c->in_flight);
    c->bytes = calloc((size_t)n_buckets, sizeof *c->bytes);
    bool ok = c->done && c->in_flight && c->bytes ? true : errf(err, errcap, "out of memory");
    for (int b = 0; b < n_buckets && ok; b++) ok = cu_ok(c, L->cuEventCreate(&c->done[b], CU_EVENT_DISABLE_TIMING_FLAG), "cuEventCreate", "creating a bucket's event", err, errcap);
    if (!ok) {
        c->failed = true;
        dist_nccl_close(c);
    }
    return ok;
}

bool dist_nccl_open(DistNccl *c, const CudaLibs *L, const Ranks *r, DistComm *mpi, int n_buckets, double timeout_s, char *err, int errcap) {
    *c = (DistNccl){.L = L, .ranks = *r, .device = r->local_rank, .timeout_s = timeout_s, .n_buckets = n_buckets};
    if (r->world <= 1) return true;
    if (!(timeout_s > 0)) return errf(err, errcap, "rank %d of %d: the collective timeout must be positive", r->rank, r->world);
    if (!L || !L->ncclCommInitRank) return errf(err, errcap, "rank %d of %d: NCCL is not loaded (open the CUDA libraries with NCCL for more than one rank)", r->rank, r->world);
    Rendezvous how;
    if (!ranks_rendezvous(r, &how, err, errcap)) return false;
    int count = 0, ordinal = 0;
    CuDevice want = 0, cur = 0;
    if (!cu_ok(c, L->cuDeviceGetCount(&count), "cuDeviceGetCount", "counting the node's devices", err, errcap) ||
        !dist_nccl_device(r, count, &ordinal, err, errcap) ||
        !cu_ok(c, L->cuDeviceGet(&want, ordinal), "cuDeviceGet", "finding this rank's device", err, errcap) ||
        !cu_ok(c, L->cuCtxGetDevice(&cur), "cuCtxGetDevice", "reading the current context's device (open the device first)", err, errcap))
        return false;
    if (cur != want)
        return errf(err, errcap, "rank %d of %d: the current CUDA context is on device %d, not on device %d (%s=%d): open this rank's device first", r->rank, r->world,
                    (int)cur, ordinal, local_rank_var(r->source), r->local_rank);
    c->device = ordinal;
    NcclUniqueId id;
    memset(&id, 0, sizeof id);
    if (r->rank == 0 && !nccl_ok(c, L->ncclGetUniqueId(&id), "ncclGetUniqueId", "making the communicator's id", err, errcap)) return false;
    if (!dist_nccl_share_id(r, how, mpi, &id, sizeof id, err, errcap)) return false;
    NcclComm comm = NULL;
    if (!nccl_ok(c, L->ncclCommInitRank(&comm, r->world, id, r->rank), "ncclCommInitRank", "joining the communicator", err, errcap)) return false;
    if (!dist_nccl_adopt(c, L, r, comm, n_buckets, timeout_s, err, errcap)) return false;
    c->device = ordinal;
    return true;
}

/* One NCCL group of in-place collectives over bufs on stream (sums of fp32
 * runs, or a broadcast of byte runs from root when root >= 0), then bucket
 * b's event recorded after it for the watchdog. */
static bool grouped(DistNccl *c, int b, const NcclBuf *bufs, int n, int root, CuStream stream, const char *what, char *err, int errcap) {
    const CudaLibs *L = c->L;
    char doing[96];
    snprintf(doing, sizeof doing, "starting %s", what);
    if (!nccl_ok(c, L->ncclGroupStart(), "ncclGroupStart", doing, err, errcap)) return abort_comm(c), false;
    size_t bytes = 0;
    bool ok = true;
    snprintf(doing, sizeof doing, "enqueueing %s", what);
    for (int i = 0; i < n && ok; i++) {
        void *p = (void *)(uintptr_t)bufs[i].ptr;
        ok = root < 0 ? nccl_ok(c, L->ncclAllReduce(p, p, bufs[i].count, NCCL_TYPE_FLOAT32, NCCL_OP_SUM, c->comm, stream), "ncclAllReduce", doing, err, errcap)
                      : nccl_ok(c, L->ncclBroadcast(p, p, bufs[i].count, NCCL_TYPE_UINT8, root, c->comm, stream), "ncclBroadcast", doing, err, errcap);
        bytes += (root < 0 ? 4 : 1) * bufs[i].count;
    }
    /* the group must be closed even after a failed enqueue; the first error is the one kept */
    char end_err[512];
    NcclResult ge = L->ncclGroupEnd();
    snprintf(doing, sizeof doing, "launching %s", what);
    if (ok) ok = nccl_ok(c, ge, "ncclGroupEnd", doing, err, errcap);
    else (void)nccl_ok(c, ge, "ncclGroupEnd", "closing a failed group", end_err, sizeof end_err);
    snprintf(doing, sizeof doing, "marking the end of %s", what);
    if (ok) ok = cu_ok(c, L->cuEventRecord(c->done[b], stream), "cuEventRecord", doing, err, errcap);
    if (!ok) return abort_comm(c), false;
    c->in_flight[b] = true;
    c->bytes[b] = bytes;
    return true;
}

bool dist_nccl_allreduce_sum(DistNccl *c, int b, const NcclBuf *bufs, int n, CuStream stream, char *err, int errcap) {
    if (!c->comm && !c->failed) return true;
    if (!usable(c, err, errcap)) return false;
    if (b < 0 || b >= c->n_buckets || n < 1 || !bufs)
        return errf(err, errcap, "rank %d of %d: bucket %d with %d device runs (the communicator has %d buckets)", c->ranks.rank, c->ranks.world, b, n, c->n_buckets);
    return grouped(c, b, bufs, n, -1, stream, "a gradient bucket's all-reduce", err, errcap);
}

bool dist_nccl_broadcast_bytes(DistNccl *c, const NcclBuf *bufs, int n, int root, CuStream stream, char *err, int errcap) {
    if (!c->comm && !c->failed) return true;
    if (!usable(c, err, errcap)) return false;
    if (root < 0 || root >= c->ranks.world || n < 1 || !bufs) return errf(err, errcap, "rank %d of %d: a broadcast of %d runs from rank %d", c->ranks.rank, c->ranks.world, n, root);
    /* bucket 0's event marks it, so dist_nccl_wait's watchdog covers it */
    return grouped(c, 0, bufs, n, root, stream, "the state broadcast", err, errcap);
}

bool dist_nccl_stream_wait(DistNccl *c, CuStream consumer, char *err, int errcap) {
    if (!c->comm && !c->failed) return true;
    if (!usable(c, err, errcap)) return false;
    for (int b = 0; b < c->n_buckets; b++)
        if (c->in_flight[b] && !cu_ok(c, c->L->cuStreamWaitEvent(consumer, c->done[b], 0), "cuStreamWaitEvent", "ordering the reduced gradients before their reader", err, errcap))
            return abort_comm(c), false;
    return true;
}

bool dist_nccl_wait(DistNccl *c, char *err, int errcap) {
    if (!c->comm && !c->failed) return true;
    if (!usable(c, err, errcap)) return false;
    const CudaLibs *L = c->L;
    double start = now_s(), deadline = start + c->timeout_s;
    long nap_ns = 20000;
    for (int b = 0; b < c->n_buckets;) {
        if (!c->in_flight[b]) {
            b++;
            continue;
        }
        CuResult ev = L->cuEventQuery(c->done[b]);
        NcclResult async = NCCL_RESULT_SUCCESS;
        if (!nccl_ok(c, L->ncclCommGetAsyncError(c->comm, &async), "ncclCommGetAsyncError", "watching a bucket's all-reduce", err, errcap)) return abort_comm(c), false;
        double now = now_s();
        switch (dist_nccl_wait_state(ev, async, now, deadline)) {
        case NCCL_WAIT_DONE:
            c->in_flight[b++] = false;
            break;
        case NCCL_WAIT_PENDING: {
            struct timespec nap = {0, nap_ns};
            nanosleep(&nap, NULL);
            if (nap_ns < 1000000) nap_ns *= 2;
            break;
        }
        case NCCL_WAIT_FAILED: {
            char why[768];
            if (async != NCCL_RESULT_SUCCESS && async != NCCL_RESULT_IN_PROGRESS) nccl_ok(c, async, "the all-reduce", "NCCL reported it asynchronously", why, sizeof why);
            else cu_ok(c, ev, "cuEventQuery", "watching a bucket's all-reduce", why, sizeof why);
            abort_comm(c);
            return errf(err, errcap, "%s; bucket %d of %d (%zu bytes) failed and the NCCL communicator was aborted", why, b, c->n_buckets, c->bytes[b]);
        }
        case NCCL_WAIT_TIMEOUT:
            abort_comm(c);
            return errf(err, errcap,
                        "rank %d of %d: the gradient all-reduce of bucket %d of %d (%zu bytes) did not finish within %g s (waited %.1f s): a stuck collective "
                        "(YOLOCC_COLLECTIVE_TIMEOUT_S); another rank has stopped, hung or is not at the same step; the NCCL communicator was aborted",
                        c->ranks.rank, c->ranks.world, b, c->n_buckets, c->bytes[b], c->timeout_s, now - start);
        }
    }
    return true;
}

void dist_nccl_close(DistNccl *c) {
    if (!c->L) return;
    bool pending = false;
    for (int b = 0; c->in_flight && b < c->n_buckets; b++) pending |= c->in_flight[b];
    /* work never waited for may belong to a collective other ranks left: destroying would wait on it */
    if (pending) c->failed = true;
    for (int b = 0; c->done && b < c->n_buckets; b++)
        if (c->done[b]) (void)c->L->cuEventDestroy(c->done[b]); /* teardown: a destroy failure leaves nothing to undo */
    if (c->comm) (void)(c->failed ? c->L->ncclCommAbort(c->comm) : c->L->ncclCommDestroy(c->comm));
    free(c->done);
    free(c->in_flight);
    free(c->bytes);
    c->done = NULL, c->in_flight = NULL, c->bytes = NULL, c->comm = NULL;
}
