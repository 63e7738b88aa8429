/* runtime/dist/comm_nccl.h — the NCCL communicator of CUDA plans: the unique
 * id shared through MPI or the ranks' store, ncclCommInitRank on device LOCAL_RANK, the
 * bucketed fp32 gradient sum on a stream, and the watchdog that aborts a
 * stuck collective. Owns NCCL calls only; must not touch plans, kernels,
 * the optimizer or files, and includes no CUDA or NCCL header.
 *
 * How a caller (the CUDA training step) uses it, in order:
 *   1. Ranks from ranks_from_environ; under mpirun (RDV_MPI) dist_init a
 *      DistComm first, else (RDV_STORE, RDV_HOST) store_comm_init, since
 *      the id travels by dist_broadcast.
 *   2. cuda_device_open(&dev, ranks.local_rank, true, ...): the libraries
 *      with NCCL, and device LOCAL_RANK's primary context current on this
 *      thread. NCCL takes its device from the current context, so every
 *      call below runs on that thread with that context current.
 *   3. dist_nccl_open(&c, &dev.L, &ranks, mpi_or_NULL, n_buckets, timeout_s):
 *      timeout_s from dist_timeout_from_env (YOLOCC_COLLECTIVE_TIMEOUT_S).
 *   4. Each step, for each bucket b in ready order (buckets.h): when backward
 *      has produced the bucket on the main stream, record an event on main,
 *      cuStreamWaitEvent(dev.side, it), then
 *      dist_nccl_allreduce_sum(&c, b, bufs, n, dev.side) with bufs from
 *      dist_nccl_bucket_bufs. The reduction runs on the side stream beside
 *      the rest of backward (dp_cuda.c does this from CudaStep's run hook,
 *      between the backward's CUDA graphs, never inside a capture).
 *   5. Before the optimizer reads the gradients: dist_nccl_stream_wait(&c,
 *      dev.main) (the GPU waits; the host does not).
 *   6. Where the host would block on the step (reading the loss, the end of
 *      the step): dist_nccl_wait(&c) first, never a bare cuStreamSynchronize
 *      or cuCtxSynchronize, so a stuck collective becomes an error (the
 *      communicator aborted) instead of a hang; exit non-zero on false.
 *   7. dist_nccl_close(&c) before cuda_device_close.
 *
 * Semantics: the all-reduce SUMS in place (ncclSum, fp32) and never divides
 * by the world size: Ultralytics multiplies each rank's loss by the world
 * size and DDP averages, so the applied gradient is the sum of the ranks'
 * gradients (dp_train.h explains). With one rank every call is a no-op. */
#ifndef YOLOCC_DIST_COMM_NCCL_H
#define YOLOCC_DIST_COMM_NCCL_H
#include <stdbool.h>
#include <stddef.h>

#include "../cuda/dynload.h"
#include "buckets.h"
#include "comm_mpi.h"
#include "ranks.h"

/* One contiguous run of fp32 gradient elements on the device. */
typedef struct NcclBuf {
    CuDevicePtr ptr;
    size_t count;       /* elements, not bytes */
} NcclBuf;

typedef struct DistNccl {
    const CudaLibs *L;      /* borrowed (the CudaDevice's); NCCL resolved */
    Ranks ranks;
    int device;             /* ordinal = LOCAL_RANK */
    NcclComm comm;          /* NULL for one rank and after an abort */
    double timeout_s;       /* watchdog limit of one dist_nccl_wait */
    int n_buckets;
    CuEvent *done;          /* per bucket: recorded on the stream after its all-reduce */
    bool *in_flight;        /* per bucket: launched and not yet seen done by dist_nccl_wait */
    size_t *bytes;          /* per bucket: bytes of the last launch (for messages) */
    bool failed;            /* a collective failed or timed out: the communicator is aborted */
} DistNccl;

/* ---- pure parts (no CUDA, no NCCL; tested in CI) ---- */

/* The device of this rank: LOCAL_RANK, which must exist among the node's
 * device_count devices (and local_world, when the launcher says it, must
 * not exceed them); false with one line naming the variables otherwise. */
bool dist_nccl_device(const Ranks *r, int device_count, int *ordinal, char *err, int errcap);

/* Bucket b of l as device runs: grad_ptr[i] is the device address of
 * gradient i (the layout's input index: BucketGrad order, fp32). Pieces of
 * the bucket that are adjacent on the device are merged into one run. At
 * most l->buckets[b].last - first + 1 runs are written to out (cap); false
 * with a message on a bad bucket, a NULL or misaligned pointer, or too small
 * a cap. */
bool dist_nccl_bucket_bufs(const BucketLayout *l, int b, const CuDevicePtr *grad_ptr, NcclBuf *out, int cap, int *n_out, char *err, int errcap);

/* One look of the watchdog: event is cuEventQuery's result on the bucket's
 * event, async is what ncclCommGetAsyncError reported. An NCCL error wins,
 * then a finished event, then a driver error, then the deadline. */
typedef enum { NCCL_WAIT_DONE, NCCL_WAIT_PENDING, NCCL_WAIT_FAILED, NCCL_WAIT_TIMEOUT } NcclWaitState;
NcclWaitState dist_nccl_wait_state(CuResult event, NcclResult async, double now, double deadline);

/* The id exchange alone: rank 0's id (n bytes) reaches every rank through
 * MPI (how == RDV_MPI: mpi must be an active DistComm) or the ranks' store
 * (RDV_STORE, torchrun's; RDV_HOST, rank 0's: mpi must hold it,
 * comm_store.h); RDV_NONE does nothing. */
bool dist_nccl_share_id(const Ranks *r, Rendezvous how, DistComm *mpi, void *id, size_t n, char *err, int errcap);

/* ---- the communicator ---- */

/* World 1: fills c and returns true (every call below is then a no-op).
 * More: checks that the current context is device LOCAL_RANK's, rank 0
 * calls ncclGetUniqueId, the id is shared (ranks_rendezvous picks MPI or
 * the store), ncclCommInitRank (blocking: every rank has the id by then),
 * and one event per bucket is created. On failure nothing
 * stays allocated and err holds one line naming the rank. */
bool dist_nccl_open(DistNccl *c, const CudaLibs *L, const Ranks *r, DistComm *mpi, int n_buckets, double timeout_s, char *err, int errcap);

/* The second half of dist_nccl_open, for a communicator made elsewhere
 * (tests make a one-rank one): takes comm over (closed by dist_nccl_close,
 * aborted on failure here) and creates the bucket events. */
bool dist_nccl_adopt(DistNccl *c, const CudaLibs *L, const Ranks *r, NcclComm comm, int n_buckets, double timeout_s, char *err, int errcap);

/* Enqueues bucket b's sum on stream: one ncclAllReduce per run (in place,
 * ncclFloat32, ncclSum) between ncclGroupStart/End, then records the
 * bucket's event on stream. Returns once enqueued; dist_nccl_wait waits. */
bool dist_nccl_allreduce_sum(DistNccl *c, int b, const NcclBuf *bufs, int n, CuStream stream, char *err, int errcap);

/* Rank root's bytes of every run (counts in BYTES here) to all ranks, in
 * place, grouped, on stream (DDP's start-up broadcast of the model state);
 * tracked as bucket 0, so dist_nccl_wait is its watchdog. */
bool dist_nccl_broadcast_bytes(DistNccl *c, const NcclBuf *bufs, int n, int root, CuStream stream, char *err, int errcap);

/* Makes consumer wait (on the GPU) for every bucket in flight. */
bool dist_nccl_stream_wait(DistNccl *c, CuStream consumer, char *err, int errcap);

/* The watchdog: polls each bucket in flight (in bucket order) with
 * cuEventQuery and the communicator with ncclCommGetAsyncError, napping 20 us
 * doubling to 1 ms, until all are done or timeout_s has passed. On an NCCL
 * error or the timeout the communicator is aborted (ncclCommAbort) and err
 * names the rank, the world, the bucket and the seconds waited; every later
 * call fails at once. */
bool dist_nccl_wait(DistNccl *c, char *err, int errcap);

/* Destroys the events and the communicator (ncclCommDestroy, or
 * ncclCommAbort after a failure, which does not wait for the other ranks). */
void dist_nccl_close(DistNccl *c);

#endif
