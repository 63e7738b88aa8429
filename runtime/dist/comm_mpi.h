/* runtime/dist/comm_mpi.h — the host's collectives through MPI (Open
 * MPI): start-up checked against the launcher's ranks, broadcast, bucketed
 * gradient all-reduce, and the watchdog that turns a stuck collective into an
 * error; under torchrun without MPI the same calls go through its agent's
 * TCPStore (comm_store.h). Owns MPI calls only; must not touch plans, the
 * optimizer or files. The header is MPI-free so includers need no MPI flags. */
#ifndef YOLOCC_DIST_COMM_MPI_H
#define YOLOCC_DIST_COMM_MPI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buckets.h"
#include "ranks.h"

#define DIST_TIMEOUT_DEFAULT_S 600.0

/* Two communicators (both duplicates of MPI_COMM_WORLD): one for gradient
 * buckets, one for everything else (broadcasts, agreement checks). MPI
 * matches collectives by order within a communicator, so a rank that falls
 * out of step can only ever pair a gradient bucket with an identical bucket:
 * a control collective never receives gradient bytes, and the watchdog
 * reports the hang instead of memory being overrun. */
typedef struct DistMpi DistMpi;
struct TcpStore;

typedef struct DistComm {
    Ranks ranks;
    DistMpi *mpi;       /* the communicators (comm_mpi.c), NULL for one rank or the store */
    struct TcpStore *store; /* a TCPStore instead of MPI (comm_store.c), else NULL */
    struct StoreHost *host; /* rank 0 serving that store itself (store_host.h), else NULL */
    bool hosted;            /* the store is rank 0's: every rank reports its end before rank 0 stops it */
    uint64_t seq;       /* collectives so far through the store: the next one's keys */
    bool active;        /* MPI was initialised here, or the store connected (more than one rank) */
    bool failed;        /* a collective failed or timed out: abort the job, never finalise */
    double timeout_s;   /* watchdog limit per collective */
} DistComm;

/* YOLOCC_COLLECTIVE_TIMEOUT_S: NULL -> 600; else a number of seconds in
 * (0, 604800] (fractions allowed); false with an error naming the variable. */
bool dist_timeout_from_env(const char *value, double *seconds, char *err, int errcap);

/* One rank: nothing to do (active stays false; every collective below is
 * then a no-op). More: MPI_Init_thread with MPI_THREAD_FUNNELED (only the
 * main thread calls MPI; loader and BLAS threads never do), errors returned
 * rather than fatal, and MPI's rank and size must equal the launcher's. */
bool dist_init(DistComm *d, const Ranks *r, char *err, int errcap);

/* Sums region's buckets over all ranks in place (float32; the region is
 * l->total_bytes long): one non-blocking all-reduce per bucket, all in
 * flight together, then polled until done or until the watchdog limit, when
 * the error names this rank, the first unfinished bucket and the limit.
 * No division by the world size: see dp_train.h for why a sum is right. */
bool dist_allreduce_sum(DistComm *d, float *region, const BucketLayout *l, char *err, int errcap);

/* Copies root's bytes to every rank (what names it in errors). Watchdog as above. */
bool dist_broadcast(DistComm *d, void *buf, size_t bytes, int root, const char *what, char *err, int errcap);

/* True when every rank passed the same value; false with an error naming
 * what otherwise (the lowest and highest values seen). */
bool dist_agree_u64(DistComm *d, uint64_t value, const char *what, char *err, int errcap);

/* Ends MPI: MPI_Finalize after success (rc 0), MPI_Abort(rc) after a failure
 * on this rank or a stuck collective, so the other ranks do not wait out
 * their watchdogs (MPI_Finalize when MPI runs this process alone: there are
 * none). Does nothing for one rank. */
void dist_finalize(DistComm *d, int rc);

#endif
