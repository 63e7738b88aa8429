/* runtime/dist/comm_store.h — comm_mpi.h's collectives (broadcast, agreement,
 * the CPU target's gradient sum) through a TCPStore, for ranks without MPI:
 * the one torchrun's agent (or `yolort --ranks`) serves, else one rank 0
 * serves itself at MASTER_PORT (store_host.h). Owns the keys it writes
 * there; must not touch plans, the optimizer, NCCL or files.
 *
 * Every rank runs the same collectives in the same order (as with MPI), so
 * the n-th collective's keys are "/yolocc/RUN_ID/RESTART/n/...": a restarted
 * attempt never reads a failed one's. Values go in chunks of at most
 * TCPSTORE_MAX_VALUE bytes; each key is deleted once its last reader has it
 * (counted with ADD), so the agent's memory does not grow with the steps.
 * The gradient sum goes through rank 0, which adds the ranks' regions in
 * rank order and hands the sum back, so every rank gets the same bits:
 * (W - 1) regions each way through rank 0's agent, fine for a few CPU ranks
 * (mpirun carries many better); CUDA plans sum on the device through NCCL
 * and use the store only for its id and the trainer's decisions. A wait
 * longer than the DistComm's timeout is the watchdog's error. */
#ifndef YOLOCC_DIST_COMM_STORE_H
#define YOLOCC_DIST_COMM_STORE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buckets.h"
#include "comm_mpi.h"

/* Connects this rank to the store at MASTER_ADDR:MASTER_PORT (more than one
 * rank): the agent's (r->agent_store), or with hosted rank 0's, which rank 0
 * starts first. d becomes active, with YOLOCC_COLLECTIVE_TIMEOUT_S as its
 * limit. */
bool store_comm_init(DistComm *d, const Ranks *r, bool hosted, char *err, int errcap);
bool store_broadcast(DistComm *d, void *buf, size_t bytes, int root, const char *what, char *err, int errcap);
bool store_agree_u64(DistComm *d, uint64_t value, const char *what, char *err, int errcap);
bool store_allreduce_sum(DistComm *d, float *region, const BucketLayout *l, char *err, int errcap);
/* Disconnects. Rank 0's own store must outlive every rank's last query:
 * each rank whose run ended well says it is done (ADD to one key; the last
 * one sets another), and rank 0 waits for that before it stops serving. A
 * rank that failed disconnects without a word, which ends rank 0's store
 * at once (store_host.h); rank 0 after a failure stops at once too. */
void store_comm_close(DistComm *d, bool ended_well);

#endif
