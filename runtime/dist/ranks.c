/* runtime/dist/ranks.c — rank discovery from launcher variables (torchrun,
 * Open MPI, Slurm) with one clear error per bad value. Pure: reads only
 * through the caller's getenv callback; must not touch MPI or NCCL. */
#include "ranks.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"

enum { RANKS_MAX_WORLD = 1 << 20 };

typedef struct Launcher {
    RankSource source;
    const char *name;
    const char *rank, *world, *local_rank, *local_world; /* local_world may be NULL: not provided */
} Launcher;

static const Launcher LAUNCHERS[] = {
    {RANKS_TORCHRUN, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {RANKS_OMPI, "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {RANKS_SLURM, "Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
};

const char *ranks_source_name(RankSource s) {
    switch (s) {
    case RANKS_TORCHRUN: return "torchrun";
    case RANKS_OMPI: return "Open MPI";
    case RANKS_SLURM: return "Slurm";
    case RANKS_SINGLE: break;
    }
    return "single process";
}

/* A decimal integer in [lo, hi]: digits only (an optional leading '+'), no
 * spaces, no exponent. */
static bool parse_int(const char *var, const char *v, const char *who, long lo, long hi, int *out, char *err, int errcap) {
    bool neg = v[0] == '-';
    const char *p = v + (neg || v[0] == '+');
    if (!*p) return errf(err, errcap, "%s='%s' (%s) is not an integer", var, v, who);
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q)) return errf(err, errcap, "%s='%s' (%s) is not an integer", var, v, who);
    if (neg) return errf(err, errcap, "%s=%s (%s) must not be negative", var, v, who);
    while (p[0] == '0' && p[1]) p++;
    if (strlen(p) > 9) return errf(err, errcap, "%s=%s (%s) is out of range (%ld..%ld)", var, v, who, lo, hi);
    long x = strtol(p, NULL, 10);
    if (x < lo || x > hi) return errf(err, errcap, "%s=%s (%s) is out of range (%ld..%ld)", var, v, who, lo, hi);
    *out = (int)x;
    return true;
}

static bool read_master(RankGetenv get, void *ctx, Ranks *r, char *err, int errcap) {
    const char *addr = get(ctx, "MASTER_ADDR"), *port = get(ctx, "MASTER_PORT");
    if (addr) {
        if (!*addr) return errf(err, errcap, "MASTER_ADDR is set but empty");
        if (strlen(addr) >= sizeof r->master_addr) return errf(err, errcap, "MASTER_ADDR is longer than %zu bytes", sizeof r->master_addr - 1);
        for (const char *p = addr; *p; p++)
            if (isspace((unsigned char)*p) || !isprint((unsigned char)*p)) return errf(err, errcap, "MASTER_ADDR='%s' contains a space or control character", addr);
        snprintf(r->master_addr, sizeof r->master_addr, "%s", addr);
    }
    if (port && !parse_int("MASTER_PORT", port, "rendezvous", 1, 65535, &r->master_port, err, errcap)) return false;
    return true;
}

/* r->run_id = id, which must be printable, without spaces, and fit; name says where it came from */
static bool set_run_id(Ranks *r, const char *name, const char *id, char *err, int errcap) {
    if (!*id || strlen(id) >= sizeof r->run_id) return errf(err, errcap, "%s must be 1..%zu bytes", name, sizeof r->run_id - 1);
    for (const char *p = id; *p; p++)
        if (!isgraph((unsigned char)*p)) return errf(err, errcap, "%s='%s' contains a space or control character", name, id);
    memcpy(r->run_id, id, strlen(id) + 1);
    return true;
}

/* Slurm's job and step: a store a rank 0 serves at MASTER_PORT keeps this
 * job's keys apart from another job's that reaches the same port */
static bool read_slurm_job(RankGetenv get, void *ctx, Ranks *r, char *err, int errcap) {
    const char *job = get(ctx, "SLURM_JOB_ID"), *step = get(ctx, "SLURM_STEP_ID");
    if (!job) return true;
    char id[sizeof r->run_id + 16];
    snprintf(id, sizeof id, "slurm-%s.%s", job, step ? step : "0");
    return set_run_id(r, "SLURM_JOB_ID.SLURM_STEP_ID", id, err, errcap);
}

/* torchelastic's variables: torch itself takes the store only for the exact
 * text "True" (str(True)), so anything else means rank 0 listens itself */
static bool read_agent_store(RankGetenv get, void *ctx, Ranks *r, char *err, int errcap) {
    const char *use = get(ctx, "TORCHELASTIC_USE_AGENT_STORE"), *restart = get(ctx, "TORCHELASTIC_RESTART_COUNT"), *id = get(ctx, "TORCHELASTIC_RUN_ID");
    r->agent_store = use && strcmp(use, "True") == 0;
    const char *own = get(ctx, "YOLORT_LAUNCHER");
    r->yolort_launcher = own && strcmp(own, "1") == 0;
    if (restart && !parse_int("TORCHELASTIC_RESTART_COUNT", restart, "torchrun", 0, 1000000, &r->restart_count, err, errcap)) return false;
    if (!id) id = "none";
    return set_run_id(r, "TORCHELASTIC_RUN_ID", id, err, errcap);
}

bool ranks_discover(RankGetenv get, void *ctx, Ranks *out, char *err, int errcap) {
    Ranks r = {.source = RANKS_SINGLE, .rank = 0, .world = 1, .local_rank = 0, .local_world = -1, .run_id = "none"};
    if (!read_master(get, ctx, &r, err, errcap)) return false;
    const Launcher *l = NULL;
    for (size_t i = 0; i < sizeof LAUNCHERS / sizeof LAUNCHERS[0] && !l; i++)
        if (get(ctx, LAUNCHERS[i].rank) || get(ctx, LAUNCHERS[i].world)) l = &LAUNCHERS[i];
    if (!l) {
        *out = r;
        return true;
    }
    const char *vr = get(ctx, l->rank), *vw = get(ctx, l->world), *vl = get(ctx, l->local_rank);
    const char *vlw = l->local_world ? get(ctx, l->local_world) : NULL;
    if (!vw) return errf(err, errcap, "%s is set but %s is not (%s sets both)", l->rank, l->world, l->name);
    if (!parse_int(l->world, vw, l->name, 1, RANKS_MAX_WORLD, &r.world, err, errcap)) return false;
    if (vr) {
        if (!parse_int(l->rank, vr, l->name, 0, RANKS_MAX_WORLD, &r.rank, err, errcap)) return false;
    } else if (r.world > 1) {
        return errf(err, errcap, "%s=%d but %s is not set (%s sets both)", l->world, r.world, l->rank, l->name);
    }
    if (r.rank >= r.world) return errf(err, errcap, "%s=%d (%s) is not below %s=%d", l->rank, r.rank, l->name, l->world, r.world);
    if (vl) {
        if (!parse_int(l->local_rank, vl, l->name, 0, RANKS_MAX_WORLD, &r.local_rank, err, errcap)) return false;
    } else if (r.world > 1) {
        return errf(err, errcap, "%s=%d but %s is not set (%s sets it for every process)", l->world, r.world, l->local_rank, l->name);
    }
    if (r.local_rank >= r.world) return errf(err, errcap, "%s=%d (%s) is not below %s=%d", l->local_rank, r.local_rank, l->name, l->world, r.world);
    if (vlw) {
        if (!parse_int(l->local_world, vlw, l->name, 1, RANKS_MAX_WORLD, &r.local_world, err, errcap)) return false;
        if (r.local_world > r.world) return errf(err, errcap, "%s=%d (%s) exceeds %s=%d", l->local_world, r.local_world, l->name, l->world, r.world);
        if (r.local_rank >= r.local_world)
            return errf(err, errcap, "%s=%d (%s) is not below %s=%d", l->local_rank, r.local_rank, l->name, l->local_world, r.local_world);
    }
    r.source = r.world > 1 ? l->source : RANKS_SINGLE;
    if (r.source == RANKS_TORCHRUN && !read_agent_store(get, ctx, &r, err, errcap)) return false;
    if (r.source == RANKS_SLURM && !read_slurm_job(get, ctx, &r, err, errcap)) return false;
    *out = r;
    return true;
}

static const char *env_get(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

bool ranks_from_environ(Ranks *out, char *err, int errcap) { return ranks_discover(env_get, NULL, out, err, errcap); }

const char *ranks_launcher_name(const Ranks *r) { return r->yolort_launcher ? "yolort --ranks" : ranks_source_name(r->source); }

bool ranks_rendezvous(const Ranks *r, Rendezvous *out, char *err, int errcap) {
    if (r->world <= 1) return *out = RDV_NONE, true;
    if (r->source == RANKS_OMPI) return *out = RDV_MPI, true;
    if (!r->master_addr[0]) return errf(err, errcap, "%d processes (%s) need MASTER_ADDR for the rendezvous (or run under mpirun)", r->world, ranks_source_name(r->source));
    if (!r->master_port) return errf(err, errcap, "%d processes (%s) need MASTER_PORT for the rendezvous (or run under mpirun)", r->world, ranks_source_name(r->source));
    *out = r->agent_store ? RDV_STORE : RDV_HOST;
    return true;
}
