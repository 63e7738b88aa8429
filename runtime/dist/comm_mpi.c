/* runtime/dist/comm_mpi.c — MPI start-up, broadcast, bucketed all-reduce and
 * the collective watchdog (non-blocking collectives polled against a
 * deadline). Owns MPI calls only; must not touch plans, the optimizer or files. */
#include "comm_mpi.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../ir/diag.h"
#include "comm_store.h"

struct DistMpi {
    MPI_Comm grad, ctl;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* "MPI_Xxx failed: <MPI's text>" into err; returns false */
static bool mpi_fail(DistComm *d, int code, const char *call, char *err, int errcap) {
    char text[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
    text[len] = 0;
    d->failed = true;
    return errf(err, errcap, "rank %d of %d: %s failed: %s (MPI error %d)", d->ranks.rank, d->ranks.world, call, len ? text : "unknown error", code);
}

bool dist_timeout_from_env(const char *value, double *seconds, char *err, int errcap) {
    if (!value) return *seconds = DIST_TIMEOUT_DEFAULT_S, true;
    char *end;
    errno = 0;
    double s = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(s) || s <= 0 || s > 604800)
        return errf(err, errcap, "YOLOCC_COLLECTIVE_TIMEOUT_S='%s' must be a number of seconds in (0, 604800]", value);
    *seconds = s;
    return true;
}

bool dist_init(DistComm *d, const Ranks *r, char *err, int errcap) {
    *d = (DistComm){.ranks = *r, .timeout_s = DIST_TIMEOUT_DEFAULT_S};
    if (r->world <= 1) return true;
    if (!dist_timeout_from_env(getenv("YOLOCC_COLLECTIVE_TIMEOUT_S"), &d->timeout_s, err, errcap)) return false;
    int inited = 0, provided = 0, rc;
    if ((rc = MPI_Initialized(&inited)) != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Initialized", err, errcap);
    if (inited) return errf(err, errcap, "MPI is already initialised");
    if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Init_thread", err, errcap);
    d->active = true;
    if (provided < MPI_THREAD_FUNNELED) {
        d->failed = true;
        return errf(err, errcap, "rank %d: MPI provides thread level %d, below MPI_THREAD_FUNNELED", r->rank, provided);
    }
    if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Comm_set_errhandler", err, errcap);
    if (!(d->mpi = malloc(sizeof *d->mpi))) return d->failed = true, errf(err, errcap, "out of memory");
    d->mpi->grad = d->mpi->ctl = MPI_COMM_NULL;
    /* duplicates inherit the error handler */
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &d->mpi->grad)) != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Comm_dup", err, errcap);
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &d->mpi->ctl)) != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Comm_dup", err, errcap);
    int mrank = -1, msize = -1;
    if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, &mrank)) != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Comm_rank", err, errcap);
    if ((rc = MPI_Comm_size(MPI_COMM_WORLD, &msize)) != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Comm_size", err, errcap);
    if (mrank != r->rank || msize != r->world) {
        d->failed = true;
        return errf(err, errcap,
                    "%s says rank %d of %d but MPI says rank %d of %d: the CPU target's data parallelism needs an MPI launcher (mpirun, or srun --mpi=pmix), or MASTER_ADDR and MASTER_PORT (rank 0 then serves the others a store)",
                    ranks_source_name(r->source), r->rank, r->world, mrank, msize);
    }
    return true;
}

/* Polls reqs until all are done. 1: done; 0: the watchdog limit passed and
 * *pending is the first unfinished request; -1: an MPI error (err set). */
static int wait_all(DistComm *d, MPI_Request *reqs, int n, int *pending, char *err, int errcap) {
    double deadline = now_s() + d->timeout_s;
    long nap_ns = 20000;
    for (;;) {
        int first = -1;
        for (int i = 0; i < n; i++) {
            if (reqs[i] == MPI_REQUEST_NULL) continue;
            int flag = 0, rc = MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Test", err, errcap), -1;
            if (!flag && first < 0) first = i;
        }
        if (first < 0) return 1;
        if (now_s() >= deadline) {
            *pending = first;
            d->failed = true; /* MPI cannot cancel a collective: the job must be aborted */
            return 0;
        }
        struct timespec nap = {0, nap_ns};
        nanosleep(&nap, NULL);
        if (nap_ns < 1000000) nap_ns *= 2;
    }
}

bool dist_allreduce_sum(DistComm *d, float *region, const BucketLayout *l, char *err, int errcap) {
    if (!d->active || l->n_buckets == 0) return true;
    if (d->store) return store_allreduce_sum(d, region, l, err, errcap);
    if (d->failed) return errf(err, errcap, "rank %d: an earlier collective failed", d->ranks.rank);
    int n_req = 0;
    for (int b = 0; b < l->n_buckets; b++) {
        const Bucket *bk = &l->buckets[b];
        if (bk->offset % 4 || bk->bytes % 4 || bk->bytes <= 0) return errf(err, errcap, "bucket %d is not a whole number of float32 values", b);
        int64_t count = bk->bytes / 4;
        n_req += (int)((count + INT_MAX - 1) / INT_MAX);
    }
    MPI_Request *reqs = malloc((size_t)n_req * sizeof *reqs);
    int *bucket_of = malloc((size_t)n_req * sizeof *bucket_of);
    if (!reqs || !bucket_of) {
        free(reqs);
        free(bucket_of);
        return errf(err, errcap, "out of memory");
    }
    int k = 0, rc = MPI_SUCCESS;
    /* start every bucket in region order (the order backward finishes them) */
    for (int b = 0; b < l->n_buckets && rc == MPI_SUCCESS; b++) {
        float *p = region + l->buckets[b].offset / 4;
        for (int64_t left = l->buckets[b].bytes / 4; left > 0 && rc == MPI_SUCCESS;) {
            int count = left > INT_MAX ? INT_MAX : (int)left;
            bucket_of[k] = b;
            rc = MPI_Iallreduce(MPI_IN_PLACE, p, count, MPI_FLOAT, MPI_SUM, d->mpi->grad, &reqs[k++]);
            p += count;
            left -= count;
        }
    }
    bool ok;
    if (rc != MPI_SUCCESS) {
        ok = mpi_fail(d, rc, "MPI_Iallreduce", err, errcap);
    } else {
        int pending = -1, w = wait_all(d, reqs, k, &pending, err, errcap);
        ok = w == 1;
        if (w == 0) {
            const Bucket *bk = &l->buckets[bucket_of[pending]];
            errf(err, errcap,
                 "rank %d of %d: the gradient all-reduce of bucket %d of %d (%lld bytes at offset %lld) did not finish within %g s "
                 "(YOLOCC_COLLECTIVE_TIMEOUT_S); another rank has stopped, hung or is not at the same step",
                 d->ranks.rank, d->ranks.world, bucket_of[pending], l->n_buckets, (long long)bk->bytes, (long long)bk->offset, d->timeout_s);
        }
    }
    free(reqs);
    free(bucket_of);
    return ok;
}

bool dist_broadcast(DistComm *d, void *buf, size_t bytes, int root, const char *what, char *err, int errcap) {
    if (!d->active || bytes == 0) return true;
    if (d->store) return store_broadcast(d, buf, bytes, root, what, err, errcap);
    if (d->failed) return errf(err, errcap, "rank %d: an earlier collective failed", d->ranks.rank);
    if (root < 0 || root >= d->ranks.world) return errf(err, errcap, "broadcast root %d is not a rank", root);
    for (size_t done = 0; done < bytes;) {
        int count = bytes - done > INT_MAX ? INT_MAX : (int)(bytes - done);
        MPI_Request req;
        int rc = MPI_Ibcast((char *)buf + done, count, MPI_BYTE, root, d->mpi->ctl, &req);
        if (rc != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Ibcast", err, errcap);
        int pending, w = wait_all(d, &req, 1, &pending, err, errcap);
        if (w < 0) return false;
        if (w == 0)
            return errf(err, errcap, "rank %d of %d: the broadcast of %s from rank %d did not finish within %g s (YOLOCC_COLLECTIVE_TIMEOUT_S); another rank has stopped or hung",
                        d->ranks.rank, d->ranks.world, what, root, d->timeout_s);
        done += (size_t)count;
    }
    return true;
}

bool dist_agree_u64(DistComm *d, uint64_t value, const char *what, char *err, int errcap) {
    if (!d->active) return true;
    if (d->store) return store_agree_u64(d, value, what, err, errcap);
    if (d->failed) return errf(err, errcap, "rank %d: an earlier collective failed", d->ranks.rank);
    uint64_t v[2] = {value, ~value}; /* max of both: the highest and (complemented) the lowest */
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, d->mpi->ctl, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(d, rc, "MPI_Iallreduce", err, errcap);
    int pending, w = wait_all(d, &req, 1, &pending, err, errcap);
    if (w < 0) return false;
    if (w == 0)
        return errf(err, errcap, "rank %d of %d: the check of %s across ranks did not finish within %g s (YOLOCC_COLLECTIVE_TIMEOUT_S); another rank has stopped or hung",
                    d->ranks.rank, d->ranks.world, what, d->timeout_s);
    uint64_t hi = v[0], lo = ~v[1];
    if (hi != lo) return errf(err, errcap, "the ranks disagree on %s (values from %#llx to %#llx; this rank has %#llx)", what, (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)value);
    return true;
}

void dist_finalize(DistComm *d, int rc) {
    if (d->store) { /* the launcher ends the other ranks of a failed job (or they fail at rank 0's store) */
        store_comm_close(d, rc == 0);
        return;
    }
    if (!d->active) return;
    d->active = false;
    /* MPI started alone (a launcher's variables without an MPI launcher): nobody to stop */
    int size = 0;
    const bool alone = MPI_Comm_size(MPI_COMM_WORLD, &size) == MPI_SUCCESS && size == 1;
    if ((rc != 0 || d->failed) && !alone) {
        /* a stuck collective cannot be cancelled: end the whole job (MPI_Abort
         * does not return under Open MPI, so what is ours goes first) */
        free(d->mpi);
        d->mpi = NULL;
        MPI_Abort(MPI_COMM_WORLD, rc != 0 ? rc : 1);
        return;
    }
    /* after success nothing is pending; a failure here has no one left to tell */
    if (d->mpi && d->mpi->grad != MPI_COMM_NULL) (void)MPI_Comm_free(&d->mpi->grad);
    if (d->mpi && d->mpi->ctl != MPI_COMM_NULL) (void)MPI_Comm_free(&d->mpi->ctl);
    free(d->mpi);
    d->mpi = NULL;
    (void)MPI_Finalize();
}
