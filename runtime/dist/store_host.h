/* runtime/dist/store_host.h — rank 0's TCPStore, when no launcher serves
 * one (Slurm's srun, a launcher's variables set by hand, with MASTER_ADDR
 * and MASTER_PORT): store_server at MASTER_PORT on every address, served by
 * a thread of rank 0 while it trains. Owns that thread; must not touch the
 * keys, MPI, NCCL, CUDA or plans. */
#ifndef YOLOCC_DIST_STORE_HOST_H
#define YOLOCC_DIST_STORE_HOST_H
#include <stdbool.h>

typedef struct StoreHost StoreHost;

/* Listens (one line in err when the port is taken) and starts serving. A
 * rank that closes its connection before it has ADDed to a key ending in
 * end_suffix has failed or was killed: the store then stops at once (one
 * line on stderr), so every other rank's next or pending query fails now
 * rather than at the collective timeout. */
StoreHost *store_host_start(int port, const char *end_suffix, char *err, int errcap);
/* Stops serving and closes every connection: the ranks must be done with
 * the store (comm_store.c waits for them). NULL is allowed. */
void store_host_stop(StoreHost *h);

#endif
