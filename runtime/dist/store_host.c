/* runtime/dist/store_host.c — rank 0's store served from a thread (see
 * store_host.h). Owns the thread; must not touch the keys, MPI, NCCL, CUDA
 * or plans. */
#include "store_host.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "store_server.h"

#define SERVE_SLICE_MS 50   /* how soon a stop is seen */

struct StoreHost {
    StoreServer *server;
    pthread_t thread;
    atomic_bool stop;
};

static void *serve(void *arg) {
    StoreHost *h = arg;
    char err[512];
    while (!atomic_load(&h->stop)) {
        /* the ranks see the store go (their next query fails, naming the store), so they stop too */
        const char *why = NULL;
        if (!store_server_serve(h->server, SERVE_SLICE_MS, err, sizeof err)) why = err;
        else if (store_server_lost(h->server) > 0)
            why = "a rank closed its connection before the end of the run (it failed or was killed), so every rank stops now rather than at YOLOCC_COLLECTIVE_TIMEOUT_S";
        if (!why) continue;
        fprintf(stderr, "yolort: rank 0's store stops: %s\n", why);
        store_server_close(h->server);
        h->server = NULL;
        break;
    }
    return NULL;
}

StoreHost *store_host_start(int port, const char *end_suffix, char *err, int errcap) {
    StoreHost *h = calloc(1, sizeof *h);
    if (!h) return errf(err, errcap, "out of memory"), NULL;
    atomic_init(&h->stop, false);
    if (!(h->server = store_server_open_any(port, err, errcap))) return free(h), NULL;
    if (!store_server_watch_ends(h->server, end_suffix)) {
        store_server_close(h->server);
        free(h);
        return errf(err, errcap, "out of memory"), NULL;
    }
    int rc = pthread_create(&h->thread, NULL, serve, h);
    if (rc != 0) {
        store_server_close(h->server);
        free(h);
        return errf(err, errcap, "cannot start rank 0's store thread: %s", strerror(rc)), NULL;
    }
    return h;
}

void store_host_stop(StoreHost *h) {
    if (!h) return;
    atomic_store(&h->stop, true);
    (void)pthread_join(h->thread, NULL); /* it ends within one slice */
    store_server_close(h->server);
    free(h);
}
