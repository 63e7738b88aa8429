/* runtime/dist/launch.h — yolort's own launcher (`yolort train ... --ranks N`):
 * starts N ranks of this program on this machine and serves them a store,
 * as torchrun's agent does, so data parallelism needs neither torchrun nor
 * mpirun. Owns the child processes and the store server; must not train,
 * touch MPI, NCCL or CUDA. */
#ifndef YOLOCC_DIST_LAUNCH_H
#define YOLOCC_DIST_LAUNCH_H
#include <stdbool.h>

#define LAUNCH_MAX_RANKS 64

/* argv holds "--ranks N" (or "--ranks=N"): *ranks = N, *at = its index and
 * *span = the argv entries it takes, 2 or 1 (*at -1 when absent, *ranks 1).
 * False with one line in err on a bad N. */
bool launch_find_ranks(int argc, char **argv, int *ranks, int *at, int *span, char *err, int errcap);

/* Runs argv without its "--ranks N" (argv[at .. at + span)) as ranks 0..n-1, each with
 * torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * MASTER_ADDR=127.0.0.1, MASTER_PORT of this process's store,
 * TORCHELASTIC_USE_AGENT_STORE=True, a run id), and serves the store until
 * every rank has ended. When a rank fails the others are ended (SIGTERM,
 * SIGKILL 10 s later), as torchrun's agent ends them; SIGINT and SIGTERM to
 * this process reach every rank. Returns the exit status: the first failed
 * rank's (128 + its signal when killed; err says so), else 0; 2 with err
 * set when the ranks cannot start. */
int launch_ranks(int argc, char **argv, int at, int span, int n, char *err, int errcap);

#endif
