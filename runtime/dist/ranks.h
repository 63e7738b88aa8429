/* runtime/dist/ranks.h — which process of a data-parallel job this is: rank,
 * world size and local rank read from the launcher's environment, validated.
 * Owns rank discovery only; must not touch MPI, NCCL or any other state. */
#ifndef YOLOCC_DIST_RANKS_H
#define YOLOCC_DIST_RANKS_H
#include <stdbool.h>

/* Where the ranks came from. Precedence when several launchers' variables are
 * present (first match wins):
 *   1. torchrun        RANK, WORLD_SIZE, LOCAL_RANK [, LOCAL_WORLD_SIZE]
 *   2. Open MPI        OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK [, _LOCAL_SIZE]
 *   3. Slurm (srun)    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
 *   4. none            a single process (rank 0 of 1)
 * torchrun first: it runs inside Slurm allocations and sets its own ranks per
 * worker. Open MPI before Slurm: `mpirun` inside an sbatch script inherits the
 * batch step's SLURM_PROCID (0 for every process), so Slurm's would be wrong.
 * A launcher counts as present when its rank or its world-size variable is set. */
typedef enum { RANKS_SINGLE, RANKS_TORCHRUN, RANKS_OMPI, RANKS_SLURM } RankSource;

/* How ranks meet (issue #6): through MPI under mpirun; under torchrun
 * through the TCPStore its agent serves at MASTER_ADDR:MASTER_PORT
 * (TORCHELASTIC_USE_AGENT_STORE=True: the port is taken); otherwise through
 * a TCPStore rank 0 serves there itself (RDV_HOST, store_host.h). */
typedef enum { RDV_NONE, RDV_MPI, RDV_STORE, RDV_HOST } Rendezvous;

typedef struct Ranks {
    RankSource source;
    int rank, world;        /* 0 <= rank < world */
    int local_rank;         /* 0 <= local_rank < world (and < local_world when known) */
    int local_world;        /* processes on this node, or -1 when the launcher does not say */
    char master_addr[256];  /* MASTER_ADDR, or "" when unset */
    int master_port;        /* MASTER_PORT (1..65535), or 0 when unset */
    /* torchrun's agent serves a TCPStore at MASTER_ADDR:MASTER_PORT
     * (TORCHELASTIC_USE_AGENT_STORE=True), for this attempt of this run */
    bool agent_store;
    int restart_count;      /* TORCHELASTIC_RESTART_COUNT (0 when unset) */
    /* what keeps one job's keys apart from another's in a store: torchrun's
     * TORCHELASTIC_RUN_ID, Slurm's "slurm-JOB.STEP" (SLURM_JOB_ID,
     * SLURM_STEP_ID), else "none" (torchrun's default) */
    char run_id[128];
    bool yolort_launcher;   /* torchrun's variables set by `yolort train --ranks N` (YOLORT_LAUNCHER=1) */
} Ranks;

/* getenv-like lookup: the value of NAME, or NULL when unset. ctx is passed through. */
typedef const char *(*RankGetenv)(void *ctx, const char *name);

/* Reads the variables through get (tests feed their own environments).
 * Every value must be a decimal integer in range; a bad or inconsistent value
 * gives one error naming the variable, its value and the launcher. A world
 * size of 1 (or no launcher at all) is a single process. */
bool ranks_discover(RankGetenv get, void *ctx, Ranks *out, char *err, int errcap);
/* The same over the process environment. */
bool ranks_from_environ(Ranks *out, char *err, int errcap);

/* How ranks meet: RDV_NONE for one process, RDV_MPI under Open MPI,
 * RDV_STORE under torchrun's agent store, else RDV_HOST; the last two need
 * MASTER_ADDR and MASTER_PORT (error naming the missing one). */
bool ranks_rendezvous(const Ranks *r, Rendezvous *out, char *err, int errcap);

const char *ranks_source_name(RankSource s);
/* Who started the ranks, for messages: "yolort --ranks" or the source's name. */
const char *ranks_launcher_name(const Ranks *r);

#endif
