/* runtime/dist/comm_store.c — broadcast, agreement and the gradient sum
 * through torchrun's TCPStore (the key scheme and why in comm_store.h). Owns
 * the keys it writes there; must not touch plans, the optimizer, NCCL or files. */
#include "comm_store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "store_host.h"
#include "tcpstore.h"

#define END_DONE "end/done"  /* ADDed by each rank whose run ended well */
#define END_ALL "end/all"    /* set by the last of them */

/* why a store call failed, as the collective's error: the watchdog's words when a wait ran out */
static bool failed(DistComm *d, const char *what, const char *why, char *err, int errcap) {
    d->failed = true;
    if (d->store->timed_out)
        return errf(err, errcap, "rank %d of %d: %s did not finish within %g s (YOLOCC_COLLECTIVE_TIMEOUT_S); another rank has stopped, hung or is not at the same step (%s)",
                    d->ranks.rank, d->ranks.world, what, d->timeout_s, why);
    return errf(err, errcap, "rank %d of %d: %s failed: %s", d->ranks.rank, d->ranks.world, what, why);
}

static int n_chunks(size_t bytes) { return (int)((bytes + TCPSTORE_MAX_VALUE - 1) / TCPSTORE_MAX_VALUE); }
static size_t chunk_bytes(size_t bytes, int i) {
    size_t at = (size_t)i * TCPSTORE_MAX_VALUE;
    return bytes - at < TCPSTORE_MAX_VALUE ? bytes - at : TCPSTORE_MAX_VALUE;
}

/* Store calls of one collective: its keys under "SEQ/", the error phrased for it. */
typedef struct Call {
    DistComm *d;
    const char *what;
    uint64_t seq;
    char *err;
    int errcap;
} Call;

static void key_of(const Call *c, char *key, size_t cap, const char *name, int i) {
    if (i >= 0) snprintf(key, cap, "%" PRIu64 "/%s/%d", c->seq, name, i);
    else snprintf(key, cap, "%" PRIu64 "/%s", c->seq, name);
}

static bool set_key(Call *c, const char *name, int i, const void *p, size_t n) {
    char key[256], why[512];
    key_of(c, key, sizeof key, name, i);
    return tcpstore_set(c->d->store, key, p, n, c->d->timeout_s, why, sizeof why) || failed(c->d, c->what, why, c->err, c->errcap);
}

static bool get_key(Call *c, const char *name, int i, void *p, size_t n) {
    char key[256], why[512];
    key_of(c, key, sizeof key, name, i);
    return tcpstore_get(c->d->store, key, p, n, c->d->timeout_s, why, sizeof why) || failed(c->d, c->what, why, c->err, c->errcap);
}

static bool del_key(Call *c, const char *name, int i) {
    char key[256], why[512];
    key_of(c, key, sizeof key, name, i);
    return tcpstore_delete(c->d->store, key, c->d->timeout_s, why, sizeof why) || failed(c->d, c->what, why, c->err, c->errcap);
}

static bool put_all(Call *c, const char *name, const void *buf, size_t bytes) {
    for (int i = 0; i < n_chunks(bytes); i++)
        if (!set_key(c, name, i, (const char *)buf + (size_t)i * TCPSTORE_MAX_VALUE, chunk_bytes(bytes, i))) return false;
    return true;
}

/* reads every chunk of name; the last of `readers` readers deletes them */
static bool take_all(Call *c, const char *name, void *buf, size_t bytes, int readers) {
    for (int i = 0; i < n_chunks(bytes); i++)
        if (!get_key(c, name, i, (char *)buf + (size_t)i * TCPSTORE_MAX_VALUE, chunk_bytes(bytes, i))) return false;
    char key[256], why[512];
    key_of(c, key, sizeof key, name, -1);
    strncat(key, "/read", sizeof key - strlen(key) - 1);
    int64_t n;
    if (!tcpstore_add(c->d->store, key, 1, &n, c->d->timeout_s, why, sizeof why)) return failed(c->d, c->what, why, c->err, c->errcap);
    if (n < readers) return true;
    if (!tcpstore_delete(c->d->store, key, c->d->timeout_s, why, sizeof why)) return failed(c->d, c->what, why, c->err, c->errcap);
    for (int i = 0; i < n_chunks(bytes); i++)
        if (!del_key(c, name, i)) return false;
    return true;
}

/* the next collective: its sequence number, after the checks every one makes */
static bool begin(DistComm *d, Call *c, const char *what, char *err, int errcap) {
    *c = (Call){.d = d, .what = what, .err = err, .errcap = errcap};
    if (d->failed) return errf(err, errcap, "rank %d: an earlier collective failed", d->ranks.rank);
    c->seq = ++d->seq;
    return true;
}

bool store_comm_init(DistComm *d, const Ranks *r, bool hosted, char *err, int errcap) {
    *d = (DistComm){.ranks = *r, .timeout_s = DIST_TIMEOUT_DEFAULT_S, .hosted = hosted};
    if (r->world <= 1) return true;
    if (!r->agent_store && !hosted) return errf(err, errcap, "rank %d of %d: no store to meet through", r->rank, r->world);
    if (!dist_timeout_from_env(getenv("YOLOCC_COLLECTIVE_TIMEOUT_S"), &d->timeout_s, err, errcap)) return false;
    const char *who = ranks_launcher_name(r);
    char why[700];
    if (hosted && r->rank == 0 && !(d->host = store_host_start(r->master_port, "/" END_DONE, why, sizeof why)))
        return errf(err, errcap, "rank 0 of %d (%s): %s", r->world, who, why);
    TcpStore *s = calloc(1, sizeof *s);
    if (!s) return store_host_stop(d->host), d->host = NULL, errf(err, errcap, "out of memory");
    char prefix[200];
    snprintf(prefix, sizeof prefix, "/yolocc/%s/%d/", r->run_id, r->restart_count);
    if (!tcpstore_open(s, r->master_addr, r->master_port, prefix, d->timeout_s, why, sizeof why)) {
        tcpstore_close(s);
        free(s);
        store_host_stop(d->host);
        d->host = NULL;
        return errf(err, errcap, "rank %d of %d (%s): %s", r->rank, r->world, who, why);
    }
    d->store = s;
    d->active = true;
    return true;
}

bool store_broadcast(DistComm *d, void *buf, size_t bytes, int root, const char *what, char *err, int errcap) {
    char text[300];
    snprintf(text, sizeof text, "the broadcast of %s from rank %d", what, root);
    Call c;
    if (!begin(d, &c, text, err, errcap)) return false;
    if (root < 0 || root >= d->ranks.world) return errf(err, errcap, "broadcast root %d is not a rank", root);
    return d->ranks.rank == root ? put_all(&c, "b", buf, bytes) : take_all(&c, "b", buf, bytes, d->ranks.world - 1);
}

bool store_agree_u64(DistComm *d, uint64_t value, const char *what, char *err, int errcap) {
    char text[300];
    snprintf(text, sizeof text, "the check of %s across ranks", what);
    Call c;
    if (!begin(d, &c, text, err, errcap)) return false;
    uint64_t lohi[2] = {value, value};
    if (d->ranks.rank != 0) {
        if (!set_key(&c, "v", d->ranks.rank, &value, sizeof value) || !take_all(&c, "r", lohi, sizeof lohi, d->ranks.world - 1)) return false;
    } else {
        for (int r = 1; r < d->ranks.world; r++) {
            uint64_t v;
            if (!get_key(&c, "v", r, &v, sizeof v) || !del_key(&c, "v", r)) return false;
            if (v < lohi[0]) lohi[0] = v;
            if (v > lohi[1]) lohi[1] = v;
        }
        if (!put_all(&c, "r", lohi, sizeof lohi)) return false;
    }
    if (lohi[0] != lohi[1])
        return errf(err, errcap, "the ranks disagree on %s (values from %#llx to %#llx; this rank has %#llx)", what, (unsigned long long)lohi[0], (unsigned long long)lohi[1],
                    (unsigned long long)value);
    return true;
}

bool store_allreduce_sum(DistComm *d, float *region, const BucketLayout *l, char *err, int errcap) {
    char text[200];
    snprintf(text, sizeof text, "the gradient sum (%lld bytes in %d buckets)", (long long)l->total_bytes, l->n_buckets);
    Call c;
    if (!begin(d, &c, text, err, errcap)) return false;
    if (l->total_bytes % 4) return errf(err, errcap, "the gradient region is not a whole number of float32 values");
    const size_t bytes = (size_t)l->total_bytes;
    if (d->ranks.rank != 0) {
        char mine[32];
        snprintf(mine, sizeof mine, "g%d", d->ranks.rank);
        return put_all(&c, mine, region, bytes) && take_all(&c, "sum", region, bytes, d->ranks.world - 1);
    }
    float *other = malloc(TCPSTORE_MAX_VALUE);
    if (!other) return errf(err, errcap, "out of memory");
    bool ok = true;
    /* rank 0's values, then rank 1's added, then rank 2's...: one order, so one result for every rank */
    for (int i = 0; ok && i < n_chunks(bytes); i++) {
        float *acc = region + (size_t)i * (TCPSTORE_MAX_VALUE / 4);
        const size_t n = chunk_bytes(bytes, i);
        for (int r = 1; ok && r < d->ranks.world; r++) {
            char theirs[32];
            snprintf(theirs, sizeof theirs, "g%d", r);
            ok = get_key(&c, theirs, i, other, n) && del_key(&c, theirs, i);
            for (size_t k = 0; ok && k < n / 4; k++) acc[k] += other[k];
        }
        ok = ok && set_key(&c, "sum", i, acc, n);
    }
    free(other);
    return ok;
}

/* The end of a run that ended well on rank 0's store (store_comm_close):
 * keys outside the collectives' sequence. A rank that failed says nothing:
 * its connection closing first tells rank 0's store (store_host.h). */
static void report_end(DistComm *d) {
    char why[512];
    const double limit = d->ranks.rank == 0 ? d->timeout_s : 10.0;
    int64_t n;
    if (!tcpstore_add(d->store, END_DONE, 1, &n, limit, why, sizeof why)) return;
    if (n == d->ranks.world && !tcpstore_set(d->store, END_ALL, "1", 1, limit, why, sizeof why)) return;
    char one;
    if (d->ranks.rank == 0 && !tcpstore_get(d->store, END_ALL, &one, 1, limit, why, sizeof why))
        fprintf(stderr, "yolort: rank 0 stops its store before every rank said it was done: %s\n", why);
}

void store_comm_close(DistComm *d, bool ended_well) {
    if (!d->store) return;
    if (d->hosted && ended_well && !d->failed) report_end(d);
    tcpstore_close(d->store);
    free(d->store);
    d->store = NULL;
    store_host_stop(d->host);
    d->host = NULL;
    d->active = false;
}
