/* runtime/dist/dp_train.h — data-parallel training: ties a TrainStep to the
 * MPI communicator (CPU plans: gradient region, buckets, the reduce hook
 * train_step_update calls, start-up broadcast, end-of-run agreement) or to
 * NCCL (CUDA plans, dp_cuda.c: the same buckets summed in device memory) and
 * says which samples each rank takes. Must not touch kernels, the
 * optimizer's arithmetic, the data pipeline or files.
 *
 * Semantics (Ultralytics DDP, training-semantics): each rank computes its
 * loss on its own batch (BN statistics per rank, the loss normalised by the
 * rank's own target-score sum), Ultralytics multiplies that loss by the world
 * size, and DDP averages the gradients, so the gradient every rank applies is
 * the SUM of the per-rank gradients. This is what a single process computes
 * by accumulating the ranks' batches one after another (train_step_backward
 * once per batch, then train_step_update), not what one batch of the
 * combined size computes. The all-reduce therefore sums and never divides. */
#ifndef YOLOCC_DIST_DP_TRAIN_H
#define YOLOCC_DIST_DP_TRAIN_H
#include <stdbool.h>
#include <stdint.h>

#include "../train_step.h"
#include "buckets.h"
#include "comm_mpi.h"
#include "comm_nccl.h"

struct CudaRunHook;

typedef struct DataParallel {
    DistComm comm;          /* MPI: every CPU job, and CUDA jobs under mpirun (inactive under torchrun) */
    BucketLayout layout;    /* over the TrainStep's gradients (fp32) */
    float *region;          /* layout.total_bytes: the accumulated gradients, packed (CPU plans) */
    TrainStep *ts;
    /* CUDA plans on several ranks (dp_cuda.c) */
    CudaLibs nccl_libs;     /* the libraries with NCCL (the step's own table has none) */
    bool nccl_libs_open, nccl_open;
    DistNccl nccl;
    NcclBuf *runs;          /* every bucket's device runs, bucket by bucket (dist_nccl_bucket_bufs) */
    int *run_lo;            /* per bucket b: its runs are runs[run_lo[b] .. run_lo[b + 1]) */
    bool *ready_at;         /* per op: a bucket's gradients are final after it */
    struct CudaRunHook *hook;   /* ts->backward_hook while attached */
    struct CudaStep *cuda;  /* the step whose streams the hook uses */
    CuEvent ready_ev;       /* recorded on the step's main stream at a ready point; the side stream waits for it */
    int next_bucket;        /* the first bucket of the running backward not yet enqueued */
} DataParallel;

/* Discovers the ranks from the environment and, when there is more than
 * one, connects them: under mpirun through MPI; under torchrun (or
 * `yolort --ranks`) through its agent's store; otherwise, with MASTER_ADDR
 * and MASTER_PORT, through a store rank 0 serves there itself (Slurm's
 * srun, variables set by hand). Without those two a CPU plan still starts
 * MPI and a CUDA plan (device_collectives, the NCCL id) is refused.
 * dp->comm.ranks says which rank this is afterwards. */
bool dp_init(DataParallel *dp, bool device_collectives, char *err, int errcap);

/* More than one rank: checks that every rank runs the same graph, lays out
 * the gradient buckets (YOLOCC_BUCKET_CAP_MB, default 25; the first 1 MiB as DDP's), copies rank 0's
 * parameters and buffers to all ranks (as DDP does at construction), and
 * installs the reduce hook in ts. One rank: does nothing. Call after the
 * weights are initialised or loaded. */
bool dp_attach(DataParallel *dp, TrainStep *ts, char *err, int errcap);

/* DDP's start-up broadcast of rank 0's module state (parameters and
 * buffers) through MPI, in ts's host copies, which are then marked newer
 * than the device's (train_step_host_changed). */
bool dp_broadcast_host_state(DataParallel *dp, TrainStep *ts, char *err, int errcap);

/* The hook: packs ts's accumulated gradients into the region in bucket
 * order, sums every bucket over the ranks, unpacks. */
bool dp_reduce_grads(void *ctx, TrainStep *ts, char *err, int errcap);

/* CUDA plans (dp_cuda.c), from dp_attach: the NCCL communicator on the
 * step's device, rank 0's state to every rank (through MPI on the host when
 * MPI runs, else NCCL on the device), and ts->backward_hook, which sums each
 * bucket of the device gradients in place on the side stream as soon as
 * backward has produced it (DDP's overlap), makes the main stream wait for
 * the sums before anything after backward, and watches them (the watchdog)
 * before the host waits for the step. Every backward is summed, accumulated
 * batches too (as DDP without no_sync: the sums add up to the same).
 * dp_detach closes NCCL, and must run before the TrainStep is freed (NCCL
 * needs the device's context). */
bool dp_cuda_attach(DataParallel *dp, TrainStep *ts, char *err, int errcap);
/* The hook alone (dp_cuda_attach's second half; tests give it a one-rank or
 * stand-in communicator in dp->nccl and a layout in dp->layout over grads):
 * each bucket's device runs from cs's gradient addresses, the ready points,
 * the event, and dp->hook for cs->hook / ts->backward_hook. */
bool dp_cuda_hook(DataParallel *dp, struct CudaStep *cs, const int *grads, int n, char *err, int errcap);
void dp_detach(DataParallel *dp);

/* Before rank 0 writes a state file: CPU plans keep each rank's accumulated
 * gradients apart until the update sums them, so pending ones are summed
 * now into rank 0's and the other ranks start again from zero (the update
 * then sums the same gradients; a resumed run does exactly the same, so it
 * stays bit for bit the run that was not stopped). CUDA plans sum every
 * backward at once: their accumulators already agree, nothing to do. */
bool dp_settle_accumulated(DataParallel *dp, TrainStep *ts, char *err, int errcap);
/* After every rank restored rank 0's state file: the other ranks' share of
 * the saved accumulators is in rank 0's (dp_settle_accumulated), theirs restart at zero. */
void dp_state_restored(DataParallel *dp, TrainStep *ts);

/* True when every rank holds bit-identical parameters and buffers (checked
 * with a hash at the end of a run, through MPI; without MPI, not checked). */
bool dp_check_in_sync(DataParallel *dp, char *err, int errcap);

/* Sample s of the batch that data unit u of n takes from a pool of
 * batch * n samples: s * n + u, every n-th sample like PyTorch's
 * DistributedSampler (n = world size x micro-batches per step, u = rank x
 * micro-batches + micro-batch index). */
static inline int64_t dp_sample_index(int64_t s, int unit, int units) { return s * units + unit; }

bool dp_is_root(const DataParallel *dp);   /* rank 0: the only rank that prints and writes files */

/* Frees the region and layout and ends MPI (dist_finalize: abort on rc != 0). */
void dp_finalize(DataParallel *dp, int rc);

#endif
