/* runtime/dist/comm_store.h — comm_mpi.h's collectives (broadcast, agreement,
 * the CPU target's gradient sum) through the TCPStore torchrun's agent
 * serves, for ranks torchrun starts without MPI. Owns the keys it writes
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

/* Connects this rank to the agent's store (r->agent_store, more than one
 * rank); d becomes active, with YOLOCC_COLLECTIVE_TIMEOUT_S as its limit. */
bool store_comm_init(DistComm *d, const Ranks *r, char *err, int errcap);
bool store_broadcast(DistComm *d, void *buf, size_t bytes, int root, const char *what, char *err, int errcap);
bool store_agree_u64(DistComm *d, uint64_t value, const char *what, char *err, int errcap);
bool store_allreduce_sum(DistComm *d, float *region, const BucketLayout *l, char *err, int errcap);
void store_comm_close(DistComm *d);

#endif
