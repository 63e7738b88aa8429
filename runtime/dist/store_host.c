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
    while (!atomic_load(&h->stop))
        if (!store_server_serve(h->server, SERVE_SLICE_MS, err, sizeof err)) {
            /* the ranks see the store go (their next query fails, naming the store), so they stop too */
            fprintf(stderr, "yolort: rank 0's store stops: %s\n", err);
            store_server_close(h->server);
            h->server = NULL;
            break;
        }
    return NULL;
}

StoreHost *store_host_start(int port, char *err, int errcap) {
    StoreHost *h = calloc(1, sizeof *h);
    if (!h) return errf(err, errcap, "out of memory"), NULL;
    atomic_init(&h->stop, false);
    if (!(h->server = store_server_open_any(port, err, errcap))) return free(h), NULL;
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
