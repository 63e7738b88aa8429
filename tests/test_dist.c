/* tests/test_dist.c — data parallelism on the CPU (issue #6, CI part): rank
 * discovery from fed environments, the gradient bucket layout (by hand, by
 * property over random layouts, and over a real plan), and `yolort` under
 * `mpirun -np 2`, `yolort ... --ranks 2` (its own launcher and store) and
 * `torchrun --nproc-per-node 2` (no MPI: its agent's store): the same parameters as one process accumulating the same two
 * half-batches, the collective watchdog, and bad launcher variables.
 * mpirun is a CI dependency (openmpi-bin): without it the MPI tests fail;
 * torchrun needs PyTorch 2 (make torch-venv), else its tests are skipped. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

#include "../runtime/dist/buckets.h"
#include "../runtime/dist/ranks.h"
#include "../runtime/plan_read.h"
#include "../runtime/safetensors.h"
#include "../runtime/train/checkpoint.h"
#include "../runtime/train_step.h"
#include "test_util.h"

/* ---------------------------------------------------------------- ranks */

/* kv: NULL-terminated "NAME=VALUE" strings */
static const char *fake_get(void *ctx, const char *name) {
    size_t n = strlen(name);
    for (const char *const *kv = ctx; *kv; kv++)
        if (strncmp(*kv, name, n) == 0 && (*kv)[n] == '=') return *kv + n + 1;
    return NULL;
}

static Ranks discover_ok(const char *const *env) {
    Ranks r;
    char err[512] = "";
    cr_assert(ranks_discover(fake_get, (void *)env, &r, err, sizeof err), "rejected: %s", err);
    return r;
}

Test(dist, ranks_single_process) {
    const char *none[] = {"PATH=/usr/bin", NULL};
    Ranks r = discover_ok(none);
    cr_expect_eq(r.source, RANKS_SINGLE);
    cr_expect(r.rank == 0 && r.world == 1 && r.local_rank == 0 && r.local_world == -1);
    const char *w1[] = {"WORLD_SIZE=1", NULL};
    r = discover_ok(w1);
    cr_expect(r.source == RANKS_SINGLE && r.rank == 0 && r.world == 1, "WORLD_SIZE=1 alone is one process");
    const char *w1full[] = {"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", NULL};
    r = discover_ok(w1full);
    cr_expect(r.source == RANKS_SINGLE && r.world == 1);
    Rendezvous rv;
    char err[256];
    cr_expect(ranks_rendezvous(&r, &rv, err, sizeof err) && rv == RDV_NONE);
}

Test(dist, ranks_from_each_launcher) {
    const char *torch[] = {"RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=node0", "MASTER_PORT=29500", NULL};
    Ranks r = discover_ok(torch);
    cr_expect_eq(r.source, RANKS_TORCHRUN);
    cr_expect(r.rank == 3 && r.world == 8 && r.local_rank == 1 && r.local_world == 4);
    cr_expect_str_eq(r.master_addr, "node0");
    cr_expect_eq(r.master_port, 29500);
    const char *ompi[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    r = discover_ok(ompi);
    cr_expect_eq(r.source, RANKS_OMPI);
    cr_expect(r.rank == 1 && r.world == 2 && r.local_rank == 1 && r.local_world == 2);
    const char *slurm[] = {"SLURM_PROCID=5", "SLURM_NTASKS=6", "SLURM_LOCALID=1", NULL};
    r = discover_ok(slurm);
    cr_expect_eq(r.source, RANKS_SLURM);
    cr_expect(r.rank == 5 && r.world == 6 && r.local_rank == 1 && r.local_world == -1);
    cr_expect_str_eq(r.run_id, "none");
    /* the job's identity keeps its keys apart in a store another job reaches */
    const char *slurm_job[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=1", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=3", NULL};
    r = discover_ok(slurm_job);
    cr_expect_str_eq(r.run_id, "slurm-4242.3");
    const char *plus[] = {"RANK=+1", "WORLD_SIZE=002", "LOCAL_RANK=0", NULL};
    r = discover_ok(plus);
    cr_expect(r.rank == 1 && r.world == 2, "a leading + and leading zeros are still decimal integers");
}

Test(dist, ranks_precedence) {
    /* torchrun inside a Slurm job launched by mpirun: torchrun's own ranks win */
    const char *all[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0", "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1",
                         "OMPI_COMM_WORLD_LOCAL_RANK=0", "RANK=2", "WORLD_SIZE=3", "LOCAL_RANK=2", NULL};
    Ranks r = discover_ok(all);
    cr_expect(r.source == RANKS_TORCHRUN && r.rank == 2 && r.world == 3);
    /* mpirun inside sbatch: every process sees SLURM_PROCID=0; Open MPI's ranks win */
    const char *mpi_in_slurm[] = {"SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0", "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
                                  "OMPI_COMM_WORLD_LOCAL_RANK=3", NULL};
    r = discover_ok(mpi_in_slurm);
    cr_expect(r.source == RANKS_OMPI && r.rank == 3 && r.world == 4);
}

Test(dist, ranks_bad_values_one_clear_error_each) {
    struct {
        const char *env[8];
        const char *needles[3];
    } cases[] = {
        {{"RANK=abc", "WORLD_SIZE=2", "LOCAL_RANK=0"}, {"RANK='abc'", "not an integer", "torchrun"}},
        {{"RANK=-1", "WORLD_SIZE=2", "LOCAL_RANK=0"}, {"RANK=-1", "negative", "torchrun"}},
        {{"RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0"}, {"RANK=2", "not below WORLD_SIZE=2", NULL}},
        {{"RANK=0", "WORLD_SIZE=0", "LOCAL_RANK=0"}, {"WORLD_SIZE=0", "out of range", NULL}},
        {{"RANK=0", "WORLD_SIZE= 2", "LOCAL_RANK=0"}, {"WORLD_SIZE=' 2'", "not an integer", NULL}},
        {{"RANK=0", "WORLD_SIZE=2.0", "LOCAL_RANK=0"}, {"WORLD_SIZE='2.0'", "not an integer", NULL}},
        {{"RANK=0", "WORLD_SIZE=", "LOCAL_RANK=0"}, {"WORLD_SIZE=''", "not an integer", NULL}},
        {{"RANK=0", "WORLD_SIZE=99999999999", "LOCAL_RANK=0"}, {"WORLD_SIZE=99999999999", "out of range", NULL}},
        {{"RANK=1"}, {"WORLD_SIZE is not", "RANK", NULL}},
        {{"WORLD_SIZE=2", "LOCAL_RANK=0"}, {"RANK is not set", "WORLD_SIZE=2", NULL}},
        {{"RANK=1", "WORLD_SIZE=2"}, {"LOCAL_RANK is not set", NULL, NULL}},
        {{"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"}, {"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2", NULL}},
        {{"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=4"}, {"LOCAL_RANK=4", "WORLD_SIZE=4", NULL}},
        {{"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=8"}, {"LOCAL_WORLD_SIZE=8", "exceeds", NULL}},
        {{"OMPI_COMM_WORLD_RANK=x", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0"}, {"OMPI_COMM_WORLD_RANK='x'", "Open MPI", NULL}},
        {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=-3"}, {"OMPI_COMM_WORLD_LOCAL_RANK=-3", "negative", NULL}},
        {{"SLURM_PROCID=0", "SLURM_NTASKS=0", "SLURM_LOCALID=0"}, {"SLURM_NTASKS=0", "Slurm", NULL}},
        {{"SLURM_PROCID=7", "SLURM_NTASKS=4", "SLURM_LOCALID=0"}, {"SLURM_PROCID=7", "SLURM_NTASKS=4", NULL}},
        {{"MASTER_PORT=70000"}, {"MASTER_PORT=70000", "out of range", NULL}},
        {{"MASTER_PORT=http"}, {"MASTER_PORT='http'", "not an integer", NULL}},
        {{"MASTER_ADDR="}, {"MASTER_ADDR", "empty", NULL}},
        {{"MASTER_ADDR=a b"}, {"MASTER_ADDR='a b'", "space", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Ranks r;
        char err[512] = "";
        cr_expect(!ranks_discover(fake_get, (void *)cases[i].env, &r, err, sizeof err), "case %zu (%s) accepted", i, cases[i].env[0]);
        cr_expect(err[0] && !strchr(err, '\n'), "case %zu: not one line: '%s'", i, err);
        for (int k = 0; k < 3 && cases[i].needles[k]; k++) cr_expect(strstr(err, cases[i].needles[k]), "case %zu: '%s' lacks '%s'", i, err, cases[i].needles[k]);
    }
}

Test(dist, ranks_rendezvous) {
    char err[512] = "";
    Rendezvous rv;
    const char *ompi[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0", NULL};
    Ranks r = discover_ok(ompi);
    cr_expect(ranks_rendezvous(&r, &rv, err, sizeof err) && rv == RDV_MPI, "NCCL id through MPI under mpirun");
    const char *torch[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=1234", NULL};
    r = discover_ok(torch);
    cr_expect(ranks_rendezvous(&r, &rv, err, sizeof err) && rv == RDV_HOST);
    const char *slurm[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", NULL};
    r = discover_ok(slurm);
    cr_expect(!ranks_rendezvous(&r, &rv, err, sizeof err));
    cr_expect(strstr(err, "MASTER_ADDR"), "%s", err);
    const char *no_port[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "MASTER_ADDR=n1", NULL};
    r = discover_ok(no_port);
    cr_expect(!ranks_rendezvous(&r, &rv, err, sizeof err));
    cr_expect(strstr(err, "MASTER_PORT"), "%s", err);
}

/* What torchrun's agent sets (PyTorch 2.5.1, every rendezvous backend):
 * TORCHELASTIC_USE_AGENT_STORE=True with MASTER_PORT its store's, taken. */
Test(dist, ranks_torchrun_agent_store) {
    char err[512] = "";
    Rendezvous rv;
    const char *agent[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500", "TORCHELASTIC_USE_AGENT_STORE=True",
                           "TORCHELASTIC_RESTART_COUNT=2", "TORCHELASTIC_RUN_ID=80e06543-4b28", NULL};
    Ranks r = discover_ok(agent);
    cr_expect(r.agent_store && r.restart_count == 2 && strcmp(r.run_id, "80e06543-4b28") == 0);
    cr_expect(ranks_rendezvous(&r, &rv, err, sizeof err) && rv == RDV_STORE, "%s", err);
    /* torch takes the store only for the exact text "True"; the run id defaults as torchrun's does */
    const char *own[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500", "TORCHELASTIC_USE_AGENT_STORE=true", NULL};
    r = discover_ok(own);
    cr_expect(!r.agent_store && r.restart_count == 0 && strcmp(r.run_id, "none") == 0);
    cr_expect(ranks_rendezvous(&r, &rv, err, sizeof err) && rv == RDV_HOST, "%s", err);
    /* Open MPI's ranks never read torchelastic's variables */
    const char *ompi[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0", "TORCHELASTIC_USE_AGENT_STORE=True", NULL};
    r = discover_ok(ompi);
    cr_expect(!r.agent_store && ranks_rendezvous(&r, &rv, err, sizeof err) && rv == RDV_MPI);
    const char *bad[][7] = {{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "TORCHELASTIC_RESTART_COUNT=-1", NULL},
                            {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "TORCHELASTIC_RUN_ID=a b", NULL},
                            {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "TORCHELASTIC_RUN_ID=", NULL},
                            {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_JOB_ID=1 2", NULL}};
    const char *need[] = {"TORCHELASTIC_RESTART_COUNT=-1", "TORCHELASTIC_RUN_ID='a b'", "TORCHELASTIC_RUN_ID must be",
                          "SLURM_JOB_ID.SLURM_STEP_ID='slurm-1 2.0' contains a space"};
    for (int i = 0; i < 4; i++) {
        cr_expect(!ranks_discover(fake_get, (void *)bad[i], &r, err, sizeof err), "case %d accepted", i);
        cr_expect(strstr(err, need[i]), "case %d: %s", i, err);
    }
    /* a store with no address to reach it */
    const char *no_addr[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "TORCHELASTIC_USE_AGENT_STORE=True", NULL};
    r = discover_ok(no_addr);
    cr_expect(!ranks_rendezvous(&r, &rv, err, sizeof err) && strstr(err, "MASTER_ADDR"), "%s", err);
}

/* ---------------------------------------------------------------- buckets */

Test(dist, buckets_by_hand) {
    /* bytes / ready op; cap 32 */
    BucketGrad g[] = {{100, 40, 10}, {101, 8, 5}, {102, 16, 5}, {103, 24, 7}};
    BucketLayout l;
    char err[256];
    cr_assert(bucket_layout_build(g, 4, 32, 32, 4, &l, err, sizeof err), "%s", err);
    /* backward order: ready 5 (ties in reverse input order: 102, 101), 7, 10 */
    int order[] = {2, 1, 3, 0};
    int64_t offset[] = {48, 16, 0, 24};
    for (int k = 0; k < 4; k++) cr_expect_eq(l.order[k], order[k], "order[%d]", k);
    for (int i = 0; i < 4; i++) cr_expect_eq(l.offset[i], offset[i], "offset of grad %d", i);
    cr_expect_eq(l.total_bytes, 88);
    /* 102+101 (24 B), 103 (24 B: 48 would pass the cap), 100 (40 B > cap) cut in 32 + 8 */
    Bucket want[] = {{0, 24, 0, 1, 5}, {24, 24, 2, 2, 7}, {48, 32, 3, 3, 10}, {80, 8, 3, 3, 10}};
    cr_assert_eq(l.n_buckets, 4);
    for (int b = 0; b < 4; b++) {
        const Bucket *x = &l.buckets[b];
        cr_expect(x->offset == want[b].offset && x->bytes == want[b].bytes && x->first == want[b].first && x->last == want[b].last && x->ready_op == want[b].ready_op,
                  "bucket %d: [%lld, +%lld) grads %d..%d ready %d", b, (long long)x->offset, (long long)x->bytes, x->first, x->last, x->ready_op);
    }
    bucket_layout_free(&l);
    /* the cap is rounded down to whole elements; one bucket when it all fits */
    cr_assert(bucket_layout_build(g, 4, 1 << 20, 1 << 20, 4, &l, err, sizeof err));
    cr_expect(l.n_buckets == 1 && l.buckets[0].bytes == 88 && l.buckets[0].ready_op == 10);
    bucket_layout_free(&l);
    cr_assert(bucket_layout_build(g, 0, 32, 32, 4, &l, err, sizeof err));
    cr_expect(l.n_buckets == 0 && l.total_bytes == 0);
    bucket_layout_free(&l);
    /* DDP's small first bucket (cap 16 there, 64 after): 102 alone (16 B), then 101+103 (32 B),
     * 100 joining them would pass 64 (72 B): its own */
    cr_assert(bucket_layout_build(g, 4, 16, 64, 4, &l, err, sizeof err), "%s", err);
    Bucket first[] = {{0, 16, 0, 0, 5}, {16, 32, 1, 2, 7}, {48, 40, 3, 3, 10}};
    cr_assert_eq(l.n_buckets, 3);
    for (int b = 0; b < 3; b++) {
        const Bucket *x = &l.buckets[b];
        cr_expect(x->offset == first[b].offset && x->bytes == first[b].bytes && x->first == first[b].first && x->last == first[b].last && x->ready_op == first[b].ready_op,
                  "bucket %d: [%lld, +%lld) grads %d..%d ready %d", b, (long long)x->offset, (long long)x->bytes, x->first, x->last, x->ready_op);
    }
    bucket_layout_free(&l);
    /* a first gradient larger than the first cap is cut at it, then at the cap */
    BucketGrad big[] = {{7, 40, 1}};
    cr_assert(bucket_layout_build(big, 1, 8, 16, 4, &l, err, sizeof err), "%s", err);
    cr_expect(l.n_buckets == 3 && l.buckets[0].bytes == 8 && l.buckets[1].bytes == 16 && l.buckets[2].bytes == 16, "%d buckets", l.n_buckets);
    bucket_layout_free(&l);
}

Test(dist, buckets_reject_bad_input) {
    BucketLayout l;
    char err[256];
    BucketGrad odd[] = {{7, 6, 0}};
    cr_expect(!bucket_layout_build(odd, 1, 64, 64, 4, &l, err, sizeof err));
    cr_expect(strstr(err, "gradient 7") && strstr(err, "6 bytes"), "%s", err);
    BucketGrad ok[] = {{1, 8, 0}};
    cr_expect(!bucket_layout_build(ok, 1, 3, 3, 4, &l, err, sizeof err));
    cr_expect(strstr(err, "cap"), "%s", err);
    BucketGrad zero[] = {{1, 0, 0}};
    cr_expect(!bucket_layout_build(zero, 1, 64, 64, 4, &l, err, sizeof err));
    int64_t cap;
    cr_expect(bucket_cap_from_env(NULL, &cap, err, sizeof err) && cap == 25 * 1024 * 1024, "DDP's 25 MiB by default");
    cr_expect(bucket_cap_from_env("0.5", &cap, err, sizeof err) && cap == 512 * 1024);
    const char *bad[] = {"abc", "0", "-1", "inf", "nan", "1e300", "25MB", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        cr_expect(!bucket_cap_from_env(bad[i], &cap, err, sizeof err), "'%s' accepted", bad[i]);
        cr_expect(strstr(err, "YOLOCC_BUCKET_CAP_MB"), "'%s': %s", bad[i], err);
    }
}

/* Every rule of buckets.h over one layout. */
/* The layout's invariants, bucket 0 capped at first_cap (DDP's small first
 * bucket), the others at cap (both whole elements, first_cap <= cap). */
static void check_layout(const BucketGrad *g, int n, int64_t first_cap, int64_t cap, const BucketLayout *l) {
    cr_assert_eq(l->n_grads, n);
    bool *seen = calloc((size_t)n + 1, 1);
    int64_t pos = 0;
    for (int k = 0; k < n; k++) {
        int i = l->order[k];
        cr_assert(i >= 0 && i < n && !seen[i], "order is not a permutation");
        seen[i] = true;
        cr_assert_eq(l->offset[i], pos, "gradients are not contiguous in region order");
        pos += g[i].bytes;
        if (k > 0) {
            int p = l->order[k - 1];
            cr_assert(g[p].ready_op < g[i].ready_op || (g[p].ready_op == g[i].ready_op && p > i), "region order is not the backward order");
        }
    }
    free(seen);
    cr_assert_eq(l->total_bytes, pos);
    /* buckets tile the region: no gap, no overlap, none past the cap */
    int64_t at = 0;
    for (int b = 0; b < l->n_buckets; b++) {
        const Bucket *x = &l->buckets[b];
        cr_assert_eq(x->offset, at, "bucket %d leaves a gap or overlaps", b);
        int64_t lim = b == 0 ? first_cap : cap;
        cr_assert(x->bytes > 0 && x->bytes <= lim && x->bytes % 4 == 0, "bucket %d has %lld bytes (cap %lld)", b, (long long)x->bytes, (long long)lim);
        at += x->bytes;
        /* the gradients it touches, and its ready point */
        int first = INT_MAX, last = -1, ready = -1;
        for (int k = 0; k < n; k++) {
            int i = l->order[k];
            if (l->offset[i] < x->offset + x->bytes && l->offset[i] + g[i].bytes > x->offset) {
                first = k < first ? k : first;
                last = k;
                ready = g[i].ready_op > ready ? g[i].ready_op : ready;
            }
        }
        cr_assert(x->first == first && x->last == last, "bucket %d: gradients %d..%d, expected %d..%d", b, x->first, x->last, first, last);
        cr_assert_eq(x->ready_op, ready, "bucket %d: ready after op %d, expected %d", b, x->ready_op, ready);
        if (b > 0) cr_assert(l->buckets[b - 1].ready_op <= x->ready_op, "buckets are not in ready order");
        /* greedy: the previous bucket closed only because this one's first
         * gradient (or piece) would have taken it past the cap */
        if (b > 0) {
            const Bucket *p = &l->buckets[b - 1];
            int64_t plim = b == 1 ? first_cap : cap;
            int i = l->order[x->first];
            bool starts_tensor = l->offset[i] == x->offset;
            if (starts_tensor) cr_assert(p->bytes + g[i].bytes > plim, "bucket %d closed early", b - 1);
            else cr_assert_eq(p->bytes, plim, "a cut tensor's pieces fill their bucket's cap");
        }
    }
    cr_assert_eq(at, l->total_bytes, "buckets do not cover the region");
    /* a gradient is cut only when it alone exceeds the cap of the bucket it starts in */
    for (int i = 0; i < n; i++) {
        int b0 = 0;
        while (b0 + 1 < l->n_buckets && l->buckets[b0 + 1].offset <= l->offset[i]) b0++;
        if (g[i].bytes > (b0 == 0 ? first_cap : cap)) continue;
        bool inside = false;
        for (int b = 0; b < l->n_buckets && !inside; b++)
            inside = l->buckets[b].offset <= l->offset[i] && l->offset[i] + g[i].bytes <= l->buckets[b].offset + l->buckets[b].bytes;
        cr_assert(inside, "gradient %d (%lld bytes <= cap %lld) was split", i, (long long)g[i].bytes, (long long)cap);
    }
}

Test(dist, buckets_property_random_layouts) {
    uint64_t s = 99;
    const int64_t caps[] = {4, 12, 64, 100, 1000, 1 << 20};
    int cases = 0, cut = 0, smaller_first = 0;
    for (int round = 0; round < 400; round++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        int n = 1 + (int)((s >> 33) % 60);
        int64_t cap = caps[(s >> 20) % 6], first = caps[(s >> 40) % 6];
        int64_t capr = cap - cap % 4, firstr = first < capr ? first - first % 4 : capr;
        BucketGrad *g = malloc((size_t)n * sizeof *g);
        for (int i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            g[i] = (BucketGrad){1000 + i, 4 * (1 + (int64_t)((s >> 33) % (uint64_t)(3 * capr / 4 + 2))), (int)((s >> 13) % 50)};
            cut += g[i].bytes > capr;
        }
        BucketLayout l;
        char err[256];
        cr_assert(bucket_layout_build(g, n, first, cap, 4, &l, err, sizeof err), "%s", err);
        cr_assert(l.cap_bytes == capr && l.first_cap_bytes == firstr);
        check_layout(g, n, firstr, capr, &l);
        smaller_first += firstr < capr && l.n_buckets > 1;
        bucket_layout_free(&l);
        free(g);
        cases++;
    }
    cr_log_info("bucket layouts checked: %d (%d gradients larger than their cap)", cases, cut);
    cr_expect(cut > 100, "the random layouts must include gradients larger than the cap");
    cr_expect(smaller_first > 50, "and first buckets smaller than the others (%d)", smaller_first);
}

static const char *yolocc_bin(void) { return tu_bin(); }
static const char *yolort_bin(void) {
    const char *b = getenv("YOLORT_BIN");
    return b ? b : "build/yolort";
}

/* A private directory per test (tests run two at a time). */
static void make_dir(char *dir, size_t cap, const char *tag) {
    snprintf(dir, cap, "/tmp/yolocc-%s-XXXXXX", tag);
    cr_assert(mkdtemp(dir), "mkdtemp failed");
}

static void remove_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* A gradient that a later op of backward reads is ready after that reader,
 * not after its producer: the all-reduce sums in place beside backward, and
 * must not change it under the reader. Ops after the clip do not count. */
Test(dist, buckets_wait_for_the_last_reader_before_the_clip) {
    Arena a;
    arena_init(&a, 0);
    Graph g;
    graph_init(&g, &a);
    int x = graph_add_input(&g, "x", shape1(16), DT_F32);
    int op_a = graph_add_op(&g, OP_SILU, &x, 1, &(OpAttrs){0}, 1, 0, NULL);
    int op_b = graph_add_op(&g, OP_SILU, &x, 1, &(OpAttrs){0}, 1, 0, NULL);
    cr_assert(op_a >= 0 && op_b >= 0, "%s", g.err);
    int ga = g.ops[op_a].out[0], gb = g.ops[op_b].out[0];
    int reader = graph_add_op(&g, OP_ADD, (const int[]){ga, x}, 2, &(OpAttrs){0}, 1, 0, NULL);
    int clip = graph_add_op(&g, OP_GRAD_CLIP, (const int[]){ga, gb}, 2, &(OpAttrs){.max_norm = 10}, 2, 0, NULL);
    int after_clip = graph_add_op(&g, OP_ADD, (const int[]){gb, gb}, 2, &(OpAttrs){0}, 1, 0, NULL);
    cr_assert(reader >= 0 && clip >= 0 && after_clip >= 0, "%s", g.err);
    char err[256];
    BucketLayout l;
    const int grads[] = {ga, gb};
    cr_assert(bucket_layout_from_graph(&g, grads, 2, 64, &l, err, sizeof err), "%s", err);
    cr_assert_eq(l.n_buckets, 2, "64-byte gradients at a 64-byte cap");
    /* region order is ready order: b (ready at its producer) first, then a (ready at its reader) */
    cr_expect(l.order[0] == 1 && l.order[1] == 0, "order %d %d", l.order[0], l.order[1]);
    cr_expect_eq(l.buckets[0].ready_op, op_b, "b: nothing reads it before the clip");
    cr_expect_eq(l.buckets[1].ready_op, reader, "a: ready after op %d that reads it, not after its producer %d", reader, op_a);
    bucket_layout_free(&l);
    arena_free(&a);
}

/* models/tiny.yaml at 64 px, batch b, for w ranks into dir/NAME */
static void compile_tiny_for(const char *dir, const char *name, int batch, int world) {
    char args[512];
    snprintf(args, sizeof args, "models/tiny.yaml --imgsz 64 --batch %d --world-size %d -o %s/%s", batch, world, dir, name);
    CliResult r = tu_run_bin(yolocc_bin(), args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
}

static void compile_tiny(const char *dir, int batch) { compile_tiny_for(dir, "tiny.plan", batch, 1); }

Test(dist, buckets_over_a_real_plan) {
    char dir[64], path[128], err[512];
    make_dir(dir, sizeof dir, "buckets");
    compile_tiny(dir, 2);
    snprintf(path, sizeof path, "%s/tiny.plan", dir);
    Plan plan;
    cr_assert(plan_read(path, &plan, err, sizeof err), "%s", err);
    TrainStep ts;
    cr_assert(train_step_init(&ts, &plan, err, sizeof err), "%s", err);
    int n;
    const int *grads = train_step_grads(&ts, &n);
    int64_t params = 0;
    for (int i = 0; i < n; i++) params += shape_numel(&plan.g.tensors[grads[i]].shape);
    BucketLayout l;
    cr_assert(bucket_layout_from_graph(&plan.g, grads, n, 64 * 1024, &l, err, sizeof err), "%s", err);
    cr_expect_eq(l.total_bytes, 4 * params, "the region holds every fp32 gradient");
    for (int i = 0; i < n; i++) {
        int producer = plan.g.tensors[grads[i]].producer;
        cr_expect(producer >= 0 && producer < ts.clip_op, "gradient %d is produced by op %d, not in backward", grads[i], producer);
    }
    BucketGrad *bg = malloc((size_t)n * sizeof *bg);
    for (int i = 0; i < n; i++) bg[i] = (BucketGrad){grads[i], 4 * shape_numel(&plan.g.tensors[grads[i]].shape), plan.g.tensors[grads[i]].producer};
    check_layout(bg, n, 64 * 1024, 64 * 1024, &l);
    cr_expect(l.n_buckets > 3, "tiny at a 64 KiB cap needs several buckets, got %d", l.n_buckets);
    /* early reduction is possible: the first bucket is final well before backward ends */
    cr_expect(l.buckets[0].ready_op < l.buckets[l.n_buckets - 1].ready_op);
    cr_log_info("tiny (%lld parameters, %d gradients): %d buckets of <= 64 KiB; first ready after op %d, last after op %d; backward ends at op %d", (long long)params, n,
                l.n_buckets, l.buckets[0].ready_op, l.buckets[l.n_buckets - 1].ready_op, ts.clip_op - 1);
    bucket_layout_free(&l);
    cr_assert(bucket_layout_from_graph(&plan.g, grads, n, BUCKET_CAP_DEFAULT, &l, err, sizeof err));
    cr_expect_eq(l.n_buckets, 1, "0.8 MB of gradients fit one 25 MiB bucket");
    bucket_layout_free(&l);
    free(bg);
    train_step_free(&ts);
    plan_free(&plan);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- mpirun */

/* mpirun is installed in CI (openmpi-bin); not finding it is a failure. */
static void need_mpirun(void) {
    int st = system("command -v mpirun >/dev/null 2>&1");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mpirun not found: install openmpi-bin (scripts/install-deps.sh)");
}

/* The environment and launcher for MPI runs: root allowed (CI runs as
 * root), oversubscription (CI has 2 cores), Open MPI's own leaks suppressed
 * for the sanitised binaries (tests/lsan.supp, which needs slow unwinding),
 * and mpirun's own time limit in place of a Criterion .timeout (Criterion
 * 2.4.1's runner leaks when timed tests overlap, failing `make test`). */
static void mpirun_prefix(char *out, size_t cap) {
    char supp[PATH_MAX];
    cr_assert(realpath("tests/lsan.supp", supp), "tests/lsan.supp missing");
    snprintf(out, cap,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 "
             "LSAN_OPTIONS=suppressions=%s:print_suppressions=0:fast_unwind_on_malloc=0 "
             "mpirun --allow-run-as-root --oversubscribe --bind-to none --timeout 240",
             supp);
}

/* A loopback port nobody listens on (bound, read, closed). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* How a test starts 2 ranks of yolort: the launcher's command up to the
 * program, and its name for messages. */
typedef struct Launch {
    const char *name, *source; /* source: as yolort's DDP line names the launcher */
    char pre[1100];            /* before the program */
    const char *post;          /* after its arguments */
} Launch;

static Launch mpirun_two(void) {
    Launch l = {.name = "mpirun -np 2", .source = "Open MPI", .post = ""};
    char pre[1024];
    mpirun_prefix(pre, sizeof pre);
    snprintf(l.pre, sizeof l.pre, "%s -np 2", pre);
    return l;
}

/* torchrun (PyTorch's launcher, from tu_torch_python(); the test is
 * skipped without it): --standalone picks a free port for its agent's
 * store, through which the ranks meet without MPI; --no-python runs yolort
 * itself. Its agent ends the job's other ranks when one fails. */
static bool torchrun_two(Launch *l) {
    if (!tu_have_torch()) return false;
    *l = (Launch){.name = "torchrun --nproc-per-node 2", .source = "torchrun", .post = ""};
    snprintf(l->pre, sizeof l->pre, "OPENBLAS_NUM_THREADS=1 %s -m torch.distributed.run --standalone --nproc-per-node 2 --no-python", tu_torch_python());
    return true;
}

/* yolort's own launcher: `yolort train ... --ranks 2` starts both ranks and serves their store. */
static Launch yolort_two(void) { return (Launch){.name = "yolort --ranks 2", .source = "yolort --ranks", .pre = "OPENBLAS_NUM_THREADS=1", .post = "--ranks 2"}; }

/* Slurm's srun without MPI (tests/launch_slurm_env.sh sets its variables
 * and MASTER_ADDR=localhost): rank 0 serves the others a store itself. */
static Launch slurm_env_two(void) {
    Launch l = {.name = "srun-style variables, no MPI", .source = "Slurm", .post = ""};
    snprintf(l.pre, sizeof l.pre, "OPENBLAS_NUM_THREADS=1 tests/launch_slurm_env.sh 2 %d", free_port());
    return l;
}

/* Kills (SIGKILL) the processes whose parent is this process, by pid. */
static void kill_own_children(void) {
    DIR *d = opendir("/proc");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *close_paren = strrchr(buf, ')');
        int pid = atoi(e->d_name), ppid = 0;
        char state;
        if (close_paren && sscanf(close_paren + 1, " %c %d", &state, &ppid) == 2 && ppid == (int)getpid() && pid > 0) kill(pid, SIGKILL);
    }
    closedir(d);
}

/* Runs cmd through the shell in a child that is the subreaper of everything
 * cmd starts: when mpirun ends a failed job it may exit before all ranks
 * have, and those ranks must be waited for here (and killed if they outlive
 * mpirun by 30 s), not inherited by the test runner. */
static int run_reaped(const char *cmd) {
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork failed");
    if (pid == 0) {
        if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) _exit(126);
        int st = system(cmd);
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            pid_t w = waitpid(-1, NULL, WNOHANG);
            if (w < 0 && errno == ECHILD) break;
            if (w > 0) continue;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec > 30) kill_own_children();
            struct timespec nap = {0, 50 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
        _exit(st == -1 ? 127 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0));
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) cr_assert(errno == EINTR, "waitpid failed");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static CliResult sh(const char *cmd) {
    char out[] = "/tmp/yolocc-dist-out-XXXXXX", err[] = "/tmp/yolocc-dist-err-XXXXXX";
    int fo = mkstemp(out), fe = mkstemp(err);
    cr_assert(fo >= 0 && fe >= 0);
    close(fo);
    close(fe);
    char full[4096];
    snprintf(full, sizeof full, "%s >%s 2>%s", cmd, out, err);
    CliResult r = {run_reaped(full), tu_slurp(out, NULL), tu_slurp(err, NULL)};
    unlink(out);
    unlink(err);
    cr_assert(r.out && r.err);
    return r;
}

/* grad_norm of each JSON step line */
static int grad_norms(const char *out, double *gn, int cap) {
    int n = 0;
    for (const char *line = out; *line && n < cap;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        cJSON *j = cJSON_ParseWithLength(line, len);
        cr_assert(j, "not JSON: %.*s", (int)len, line);
        gn[n++] = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "grad_norm"));
        cJSON_Delete(j);
        line = nl ? nl + 1 : line + len;
    }
    return n;
}

/* Largest |a - b| / max(|a|, |b|, 1e-6) over the plan's parameters in two
 * safetensors files (BN running statistics are per rank and not compared);
 * per_tensor: over the largest |a| or |b| of each tensor instead (rounding
 * differences of elements near zero then count at their tensor's scale). */
static double param_diff(const Plan *plan, const char *fa, const char *fb, bool per_tensor, int *n_params) {
    StFile a, b;
    char err[512];
    cr_assert(st_read(fa, &a, err, sizeof err), "%s", err);
    cr_assert(st_read(fb, &b, err, sizeof err), "%s", err);
    double worst = 0;
    *n_params = 0;
    for (int i = 0; i < plan->g.n_state; i++) {
        const Tensor *t = &plan->g.tensors[plan->g.state[i]];
        if (t->kind != TK_PARAM) continue;
        const StTensor *x = st_find(&a, t->name), *y = st_find(&b, t->name);
        cr_assert(x && y && x->dtype == ST_F32 && y->dtype == ST_F32 && x->nbytes == y->nbytes, "parameter %s missing or mismatched", t->name);
        double scale = 1e-6;
        for (uint64_t k = 0; per_tensor && k < st_numel(x); k++) {
            float u, v;
            memcpy(&u, (const char *)x->data + 4 * k, 4);
            memcpy(&v, (const char *)y->data + 4 * k, 4);
            scale = fmax(scale, fmax(fabs(u), fabs(v)));
        }
        for (uint64_t k = 0; k < st_numel(x); k++) {
            float u, v;
            memcpy(&u, (const char *)x->data + 4 * k, 4);
            memcpy(&v, (const char *)y->data + 4 * k, 4);
            double den = per_tensor ? scale : fmax(fmax(fabs(u), fabs(v)), 1e-6), d = fabs((double)u - (double)v) / den;
            cr_assert(isfinite(u) && isfinite(v), "%s[%llu] is not finite", t->name, (unsigned long long)k);
            if (d > worst) worst = d;
        }
        (*n_params)++;
    }
    st_free(&a);
    st_free(&b);
    return worst;
}

/* The parameters of fa and fb agree within bound (param_diff), and training
 * moved them from init by more than min_move, else the comparison would
 * prove nothing; the numbers go to the log and stdout. Runs sh's init
 * command: the same seed, one step at lr 0, saved. */
static void expect_same_training(const char *plan_path, const char *fa, const char *fb, const char *init_cmd, const char *init, bool per_tensor, double bound,
                                 double min_move, const char *what) {
    CliResult z = sh(init_cmd);
    cr_assert_eq(z.status, 0, "%s", z.err);
    tu_free(&z);
    Plan plan;
    char err[512];
    cr_assert(plan_read(plan_path, &plan, err, sizeof err), "%s", err);
    int np, np0;
    double d = param_diff(&plan, fa, fb, per_tensor, &np), moved = param_diff(&plan, fa, init, per_tensor, &np0);
    const char *scale = per_tensor ? "of its tensor's largest weight" : "relative";
    cr_log_info("%s: max difference %.3g %s over %d parameter tensors; largest move from the start %.3g", what, d, scale, np, moved);
    printf("dist: %s: max difference %.3g %s (%d parameter tensors); largest move from the start %.3g\n", what, d, scale, np, moved);
    cr_expect(np > 50, "compared only %d parameter tensors", np);
    cr_expect_leq(d, bound, "max difference %.3g > %.3g", d, bound);
    cr_expect_gt(moved, min_move, "training did not change the parameters (%.3g): the comparison would prove nothing", moved);
    plan_free(&plan);
}

/* The issue asks for "mpirun -np 2 with half the batch per rank equals one
 * rank with the whole batch". Under Ultralytics DDP semantics that is not
 * an identity: each rank normalises its loss by its own target-score sum and
 * BN uses per-rank batch statistics; Ultralytics multiplies the loss by the
 * world size and DDP averages, so the applied gradient is the SUM of the
 * per-rank gradients. The exact single-process equivalent is therefore
 * gradient accumulation of the same two half-batches (train_step_backward
 * twice, then train_step_update), which is what this test compares against:
 * 2 ranks x batch 2 vs 1 process x 2 micro-batches of 2 (--accumulate 2),
 * samples dealt like DistributedSampler (rank r takes every 2nd sample),
 * SGD, fp32, 3 optimizer steps, every parameter within 1e-5 (relative). */
static void two_ranks_equal_accumulated_half_batches(const Launch *l) {
    char dir[64], cmd[3072], plan_path[128], ref[128], dp[128], init[128];
    make_dir(dir, sizeof dir, "dist");
    compile_tiny(dir, 2);
    snprintf(plan_path, sizeof plan_path, "%s/tiny.plan", dir);
    snprintf(ref, sizeof ref, "%s/accumulated.safetensors", dir);
    snprintf(dp, sizeof dp, "%s/mpirun.safetensors", dir);
    snprintf(init, sizeof init, "%s/init.safetensors", dir);
    const char *yolort = yolort_bin();

    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 %s train %s --synthetic --steps 3 --seed 3 --accumulate 2 --json --save %s", yolort, plan_path, ref);
    CliResult one = sh(cmd);
    cr_assert_eq(one.status, 0, "one process: %s", one.err);
    snprintf(cmd, sizeof cmd, "%s %s train %s --synthetic --steps 3 --seed 3 --json --save %s %s", l->pre, yolort, plan_path, dp, l->post);
    CliResult two = sh(cmd);
    cr_assert_eq(two.status, 0, "%s exited %d: %s", l->name, two.status, two.err);
    double gn1[8], gn2[8];
    cr_assert_eq(grad_norms(one.out, gn1, 8), 3);
    cr_assert_eq(grad_norms(two.out, gn2, 8), 3, "rank 0 alone prints one line per step:\n%s", two.out);
    for (int i = 0; i < 3; i++) cr_expect(fabs(gn1[i] - gn2[i]) <= 1e-5 * gn1[i], "step %d: gradient norm %.7g (one process) vs %.7g (2 ranks)", i + 1, gn1[i], gn2[i]);

    /* from the same start: same seed, one step at lr 0 changes nothing */
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 %s train %s --synthetic --steps 1 --seed 3 --lr0 0 --save %s", yolort, plan_path, init);
    char what[128];
    snprintf(what, sizeof what, "2 ranks (%s) vs accumulated half-batches after 3 steps", l->name);
    expect_same_training(plan_path, ref, dp, cmd, init, false, 1e-5, 1e-4, what);
    tu_free(&one);
    tu_free(&two);
    remove_dir(dir);
}

Test(dist, mpirun_two_ranks_equal_accumulated_half_batches) {
    need_mpirun();
    Launch l = mpirun_two();
    two_ranks_equal_accumulated_half_batches(&l);
}

/* The same with yolort starting the ranks itself (neither MPI nor PyTorch). */
Test(dist, yolort_ranks_two_ranks_equal_accumulated_half_batches) {
    Launch l = yolort_two();
    two_ranks_equal_accumulated_half_batches(&l);
}

/* The same under torchrun: no MPI, the ranks meet through its agent's store. */
Test(dist, torchrun_two_ranks_equal_accumulated_half_batches) {
    Launch l;
    if (torchrun_two(&l)) two_ranks_equal_accumulated_half_batches(&l);
}

/* The same with Slurm's variables and no MPI: through rank 0's own store. */
Test(dist, slurm_env_two_ranks_equal_accumulated_half_batches) {
    Launch l = slurm_env_two();
    two_ranks_equal_accumulated_half_batches(&l);
}

/* `mpirun -np 2 yolort train --data`: each rank trains every other image of
 * each epoch's shuffled order and rank 0 alone validates and writes. With
 * one image a batch and no warmup, one process (batch 1, 64 images an
 * update) and 2 ranks (batch 1 each, 32 each an update) put the same images
 * through the same per-image steps, augmentation included (the loader test
 * shows the dealing): 2 updates over 4 epochs must give the same weights up
 * to the order of the sums (a third update already lets the assigner's
 * choices amplify that rounding, as any change of summation order does).
 * A run stopped after epoch 1, half-way through an update's accumulation,
 * and resumed must end bit for bit as the straight run. */
static void trains_a_dataset_as_one_process(const Launch *l) {
    char dir[64], cmd[3072], a[160], b[160], init[160], err[512];
    make_dir(dir, sizeof dir, "ddp");
    compile_tiny_for(dir, "one.plan", 1, 1);
    compile_tiny_for(dir, "two.plan", 1, 2);
    const char *yolort = yolort_bin();
    snprintf(cmd, sizeof cmd, "%s datagen %s/data --images 40 --size 64 --classes 3 --seed 7", yolort, dir);
    CliResult g = sh(cmd);
    cr_assert_eq(g.status, 0, "%s", g.err);
    tu_free(&g);
    const char *common = "--epochs 4 --warmup-epochs 0 --no-val --no-plots --workers 1";
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 %s train %s/one.plan --data %s/data/data.yaml --project %s/runs --name one %s", yolort, dir, dir, dir, common);
    CliResult one = sh(cmd);
    cr_assert_eq(one.status, 0, "one process: %s\n%s", one.out, one.err);
    snprintf(cmd, sizeof cmd, "%s %s train %s/two.plan --data %s/data/data.yaml --project %s/runs --name two %s %s", l->pre, yolort, dir, dir, dir, common, l->post);
    CliResult two = sh(cmd);
    cr_assert_eq(two.status, 0, "%s exited %d: %s\n%s", l->name, two.status, two.out, two.err);
    /* rank 0 alone prints and writes: one banner, one run directory, 16 batches a rank an epoch */
    const char *banner = strstr(two.out, "Starting training for 4 epochs");
    cr_expect(banner && !strstr(banner + 1, "Starting training"), "%s", two.out);
    char ddp[64];
    snprintf(ddp, sizeof ddp, "DDP: 2 ranks (%s)", l->source);
    cr_expect(strstr(two.out, ddp) && strstr(two.out, "16/16"), "%s", two.out);
    /* the ranks on this node share its memory: each one's part is checked against half */
    cr_expect(strstr(two.out, "\nCPU: ") && strstr(two.out, "of host memory for each of 2 ranks on this node ("), "%s", two.out);
    cr_expect(strstr(one.out, "32/32"), "%s", one.out);
    snprintf(cmd, sizeof cmd, "%s/runs/two2", dir);
    struct stat st;
    cr_expect(stat(cmd, &st) != 0, "a second rank made its own run directory");
    /* args.yaml's batch is Ultralytics' total: every rank's images together */
    snprintf(cmd, sizeof cmd, "%s/runs/two/args.yaml", dir);
    char *args_yaml = tu_slurp(cmd, NULL);
    cr_assert(args_yaml, "no %s", cmd);
    cr_expect(strstr(args_yaml, "\nbatch: 2\n"), "%s", args_yaml);
    free(args_yaml);
    /* from the same start (the same seed, one step at lr 0); 64 gradients summed in another order: elements
     * near zero differ by their tensor's rounding, so the difference is taken at each tensor's scale.
     * One image dealt twice or left out moves the weights by far more. */
    snprintf(init, sizeof init, "%s/init.safetensors", dir);
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 %s train %s/one.plan --synthetic --steps 1 --lr0 0 --save %s", yolort, dir, init);
    snprintf(a, sizeof a, "%s/runs/one/weights/last.safetensors", dir);
    snprintf(b, sizeof b, "%s/runs/two/weights/last.safetensors", dir);
    char plan_path[160];
    snprintf(plan_path, sizeof plan_path, "%s/one.plan", dir);
    char what[160];
    snprintf(what, sizeof what, "%s yolort train --data vs one process, 4 epochs (2 updates)", l->name);
    expect_same_training(plan_path, a, b, cmd, init, true, 1e-5, 1e-3, what);
    tu_free(&one);
    /* stopped after epoch 1 (16 of an update's 32 images a rank accumulated) and resumed on 2 ranks:
     * rank 0's weights and state bit for bit those of the straight run */
    snprintf(cmd, sizeof cmd, "%s %s train %s/two.plan --data %s/data/data.yaml --project %s/runs --name split %s --stop-after 1 %s", l->pre, yolort, dir, dir, dir, common,
             l->post);
    CliResult r = sh(cmd);
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "%s %s train %s/two.plan --resume %s/runs/split --workers 1 %s", l->pre, yolort, dir, dir, l->post);
    r = sh(cmd);
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    cr_expect(strstr(r.out, "Resuming training") && strstr(r.out, ddp), "%s", r.out);
    tu_free(&r);
    const char *leaves[] = {"last.safetensors", "last.state"};
    for (int k = 0; k < 2; k++) {
        char pa[200], pb[200];
        snprintf(pa, sizeof pa, "%s/runs/two/weights/%s", dir, leaves[k]);
        snprintf(pb, sizeof pb, "%s/runs/split/weights/%s", dir, leaves[k]);
        StFile fa, fb;
        cJSON *sa = NULL, *sb = NULL;
        if (k == 0) {
            cr_assert(st_read(pa, &fa, err, sizeof err), "%s", err);
            cr_assert(st_read(pb, &fb, err, sizeof err), "%s", err);
        } else {
            cr_assert(ckpt_read(pa, &fa, &sa, err, sizeof err), "%s", err);
            cr_assert(ckpt_read(pb, &fb, &sb, err, sizeof err), "%s", err);
            cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(sa, "opt_steps")), cJSON_GetNumberValue(cJSON_GetObjectItem(sb, "opt_steps")));
            cJSON_Delete(sa);
            cJSON_Delete(sb);
        }
        cr_assert_eq(fa.n, fb.n);
        int differ = 0;
        for (int i = 0; i < fa.n; i++) {
            const StTensor *x = &fa.tensors[i], *y = st_find(&fb, x->name);
            cr_assert(y, "%s missing", x->name);
            differ += x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes) != 0;
        }
        cr_expect_eq(differ, 0, "%s: %d of %d tensors differ after the resume", leaves[k], differ, fa.n);
        st_free(&fa);
        st_free(&fb);
    }
    tu_free(&two);
    remove_dir(dir);
}

Test(dist, mpirun_trains_a_dataset_as_one_process) {
    need_mpirun();
    Launch l = mpirun_two();
    trains_a_dataset_as_one_process(&l);
}

/* The same with `--ranks 2`, resume included. */
Test(dist, yolort_ranks_trains_a_dataset_as_one_process) {
    Launch l = yolort_two();
    trains_a_dataset_as_one_process(&l);
}

/* The same under torchrun, resume included: rank 0's decisions, the state
 * broadcast and the gradient sums go through its agent's store. */
Test(dist, torchrun_trains_a_dataset_as_one_process) {
    Launch l;
    if (torchrun_two(&l)) trains_a_dataset_as_one_process(&l);
}

/* The same as srun starts tasks without MPI (Slurm's variables,
 * MASTER_ADDR and MASTER_PORT), resume included: through the store rank 0
 * serves on every address, reached at localhost. */
Test(dist, slurm_env_trains_a_dataset_as_one_process) {
    Launch l = slurm_env_two();
    trains_a_dataset_as_one_process(&l);
}

/* A job whose rank 0 is left in a collective by a rank that stopped (3 s
 * limit): it must end non-zero within a minute, its stderr naming each of
 * needles. */
static void expect_watchdog(const char *cmd, const char *launcher, const char *const *needles, int n) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CliResult r = sh(cmd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_log_info("watchdog: %s exited %d after %.1f s", launcher, r.status, secs);
    cr_expect_neq(r.status, 0, "a stuck collective must end the job non-zero");
    for (int i = 0; i < n; i++) cr_expect(strstr(r.err, needles[i]), "stderr lacks '%s':\n%s", needles[i], r.err);
    cr_expect_lt(secs, 60, "the job took %.1f s; the watchdog limit was 3 s", secs);
    tu_free(&r);
}

/* A rank that stops taking part (here: told to run fewer steps) leaves the
 * others in a collective that never completes; with
 * YOLOCC_COLLECTIVE_TIMEOUT_S=3 rank 0 must end the job, non-zero, with a
 * message naming its rank, the bucket and the limit. Rank 1 gets a long
 * limit so that rank 0's watchdog is the one that fires (3 s, not less, so
 * that a slow start of rank 1 on a loaded machine is not what trips it). */
Test(dist, watchdog_ends_a_stuck_collective) {
    need_mpirun();
    char dir[64], pre[1024], cmd[3072], plan_path[128];
    make_dir(dir, sizeof dir, "watchdog");
    compile_tiny(dir, 2);
    snprintf(plan_path, sizeof plan_path, "%s/tiny.plan", dir);
    mpirun_prefix(pre, sizeof pre);
    const char *yolort = yolort_bin();
    snprintf(cmd, sizeof cmd, "YOLOCC_COLLECTIVE_TIMEOUT_S=3 %s -np 1 %s train %s --synthetic --steps 3 : -np 1 env YOLOCC_COLLECTIVE_TIMEOUT_S=120 %s train %s --synthetic --steps 1",
             pre, yolort, plan_path, yolort, plan_path);
    const char *needles[] = {"rank 0 of 2", "gradient all-reduce of bucket 0 of", "within 3 s", "YOLOCC_COLLECTIVE_TIMEOUT_S"};
    expect_watchdog(cmd, "mpirun", needles, 4);
    remove_dir(dir);
}

/* The watchdog under torchrun: rank 1 (told by its RANK) runs one step and
 * ends; rank 0 waits in the store for rank 1's gradients until its 3 s limit
 * and ends the job non-zero, naming itself, the gradient sum and the limit.
 * Rank 1's own limit is long, as in the mpirun test: it starts waiting
 * first, so with the same 3 s it could fire first and torchrun would end
 * rank 0 before rank 0 says anything. */
Test(dist, torchrun_watchdog_ends_a_stuck_collective) {
    Launch l;
    if (!torchrun_two(&l)) return;
    char dir[64], cmd[3072], plan_path[128];
    make_dir(dir, sizeof dir, "twatchdog");
    compile_tiny(dir, 2);
    snprintf(plan_path, sizeof plan_path, "%s/tiny.plan", dir);
    const char *yolort = yolort_bin();
    snprintf(cmd, sizeof cmd,
             "YOLOCC_COLLECTIVE_TIMEOUT_S=3 %s sh -c 'if [ \"$RANK\" = 1 ]; then YOLOCC_COLLECTIVE_TIMEOUT_S=120 exec %s train %s --synthetic --steps 1; else exec %s train %s --synthetic --steps 3; fi'",
             l.pre, yolort, plan_path, yolort, plan_path);
    const char *needles[] = {"rank 0 of 2", "the gradient sum", "did not finish within 3 s", "YOLOCC_COLLECTIVE_TIMEOUT_S"};
    expect_watchdog(cmd, "torchrun", needles, 4);
    remove_dir(dir);
}

/* `--ranks`: a failing rank ends the job with its status and one line
 * from the launcher; bad counts and --ranks under another launcher are
 * usage errors before anything starts. */
Test(dist, yolort_ranks_failures_and_usage) {
    char dir[64], cmd[3072];
    make_dir(dir, sizeof dir, "ranks");
    compile_tiny(dir, 2);
    const char *yolort = yolort_bin();
    snprintf(cmd, sizeof cmd, "YOLOCC_COLLECTIVE_TIMEOUT_S=soon %s train %s/tiny.plan --synthetic --steps 1 --ranks 2", yolort, dir);
    CliResult r = sh(cmd);
    cr_expect_eq(r.status, 2, "%s", r.err);
    cr_expect(strstr(r.err, "YOLOCC_COLLECTIVE_TIMEOUT_S='soon'") && strstr(r.err, "yolort: error: a rank of 2 ended with exit status 2; the others were ended"), "%s", r.err);
    tu_free(&r);
    const char *bad[] = {"--ranks 0", "--ranks 65", "--ranks two", "--ranks=", "--ranks 2 --ranks 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s train %s/tiny.plan --synthetic --steps 1 %s", yolort, dir, bad[i]);
        r = sh(cmd);
        cr_expect(r.status == 2 && strstr(r.err, "--ranks") && tu_lines(r.err) == 1 && !r.out[0], "'%s': exit %d: %s", bad[i], r.status, r.err);
        tu_free(&r);
    }
    snprintf(cmd, sizeof cmd, "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 %s train %s/tiny.plan --synthetic --steps 1 --ranks 2", yolort, dir);
    r = sh(cmd);
    cr_expect(r.status == 2 && strstr(r.err, "already rank 0 of 2 (torchrun): leave --ranks out") && tu_lines(r.err) == 1, "%s", r.err);
    tu_free(&r);
    /* one rank is this process itself */
    snprintf(cmd, sizeof cmd, "%s train %s/tiny.plan --synthetic --steps 1 --json --ranks=1", yolort, dir);
    r = sh(cmd);
    cr_expect(r.status == 0 && strstr(r.out, "\"step\": 1"), "%s", r.err);
    tu_free(&r);
    remove_dir(dir);
}

/* Rank 0's own store (Slurm's variables, MASTER_ADDR and MASTER_PORT, no
 * MPI): a port another process holds is rank 0's one line, naming
 * MASTER_PORT; a rank 0 that never comes is rank 1's at the limit. */
Test(dist, rank_0s_store_failures_are_one_line) {
    char dir[64], cmd[3072];
    make_dir(dir, sizeof dir, "host");
    compile_tiny(dir, 2);
    const char *yolort = yolort_bin();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof a;
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 4) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    int port = ntohs(a.sin_port);
    snprintf(cmd, sizeof cmd, "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d %s train %s/tiny.plan --synthetic --steps 1", port, yolort,
             dir);
    CliResult r = sh(cmd);
    close(fd);
    char want[200];
    snprintf(want, sizeof want, "rank 0 of 2 (Slurm): the ranks' store (rank 0) cannot listen on port %d: bind: Address already in use (another job", port);
    cr_expect(r.status == 2 && strstr(r.err, want) && tu_lines(r.err) == 1 && !r.out[0], "exit %d: %s", r.status, r.err);
    tu_free(&r);
    port = free_port();
    snprintf(cmd, sizeof cmd, "YOLOCC_COLLECTIVE_TIMEOUT_S=1 SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d %s train %s/tiny.plan --synthetic --steps 1",
             port, yolort, dir);
    r = sh(cmd);
    snprintf(want, sizeof want, "rank 1 of 2 (Slurm): TCPStore at 127.0.0.1:%d: could not connect within 1 s", port);
    cr_expect(r.status == 2 && strstr(r.err, want) && strstr(r.err, "rank 0") && tu_lines(r.err) == 1, "exit %d: %s", r.status, r.err);
    tu_free(&r);
    remove_dir(dir);
}

/* Rank 0's own store ends the job when a rank dies: rank 1 is killed
 * (SIGKILL) a second into a long run, and rank 0 stops with one line from
 * its store and its own error, long before the 120 s collective limit
 * (before this, it waited out the limit). */
Test(dist, rank_0s_store_ends_the_job_when_a_rank_dies) {
    char dir[64], cmd[4096];
    make_dir(dir, sizeof dir, "lost");
    compile_tiny(dir, 2);
    const char *yolort = yolort_bin();
    int port = free_port();
    char env[256];
    snprintf(env, sizeof env, "OPENBLAS_NUM_THREADS=1 YOLOCC_COLLECTIVE_TIMEOUT_S=120 SLURM_NTASKS=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d", port);
    snprintf(cmd, sizeof cmd,
             "((%s SLURM_PROCID=1 SLURM_LOCALID=1 %s train %s/tiny.plan --synthetic --steps 100000 >/dev/null 2>&1 & p=$!; sleep 2; kill -9 $p) & "
             "%s SLURM_PROCID=0 SLURM_LOCALID=0 %s train %s/tiny.plan --synthetic --steps 100000 --json; rc=$?; wait; exit $rc)",
             env, yolort, dir, env, yolort, dir);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CliResult r = sh(cmd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_expect_neq(r.status, 0, "rank 0 went on: %s", r.err);
    cr_expect(strstr(r.err, "rank 0's store stops: a rank closed its connection before the end of the run") && strstr(r.err, "rank 0 of 2"), "%s", r.err);
    cr_expect(s < 60, "rank 0 took %.1f s to stop (the limit is 120 s)", s);
    cr_log_info("rank 0 stopped %.1f s after the start: %s", s, r.err);
    tu_free(&r);
    remove_dir(dir);
}

/* Bad launcher variables, --data on several ranks, a bad --accumulate and a
 * bad watchdog limit: one error line, exit 2, before any work. */
Test(dist, yolort_rejects_bad_launcher_variables) {
    need_mpirun();
    char dir[64], pre[1024], cmd[3072];
    make_dir(dir, sizeof dir, "distenv");
    compile_tiny(dir, 2);
    const char *yolort = yolort_bin();
    snprintf(cmd, sizeof cmd, "RANK=abc WORLD_SIZE=2 LOCAL_RANK=0 %s train %s/tiny.plan --synthetic --steps 1", yolort, dir);
    CliResult r = sh(cmd);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "RANK='abc'") && strstr(r.err, "torchrun") && tu_lines(r.err) == 1, "%s", r.err);
    cr_expect_eq(r.out[0], 0);
    tu_free(&r);
    /* the dataset trainer of a CPU plan under torchrun: MPI carries its collectives, so refused, not run W times */
    char *supp = realpath("tests/lsan.supp", NULL);
    cr_assert(supp, "tests/lsan.supp missing");
    /* MPI starts (a singleton) to say so: its own leaks are suppressed as in the mpirun runs */
    snprintf(cmd, sizeof cmd, "LSAN_OPTIONS=suppressions=%s:print_suppressions=0:fast_unwind_on_malloc=0 RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 %s train %s/tiny.plan --data %s/none.yaml",
             supp, yolort, dir, dir);
    free(supp);
    r = sh(cmd);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "torchrun says rank 0 of 2") && strstr(r.err, "mpirun") && tu_lines(r.err) == 1, "%s", r.err);
    tu_free(&r);
    /* torchrun's variables saying its agent serves the store, where nothing listens: one error at the limit */
    int port = free_port();
    snprintf(cmd, sizeof cmd,
             "YOLOCC_COLLECTIVE_TIMEOUT_S=1 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d TORCHELASTIC_USE_AGENT_STORE=True %s train %s/tiny.plan --synthetic --steps 1",
             port, yolort, dir);
    r = sh(cmd);
    char want[128];
    snprintf(want, sizeof want, "rank 1 of 2 (torchrun): TCPStore at 127.0.0.1:%d: could not connect within 1 s", port);
    cr_expect(r.status == 2 && strstr(r.err, want) && tu_lines(r.err) == 1, "exit %d: %s", r.status, r.err);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "%s train %s/tiny.plan --synthetic --accumulate 0", yolort, dir);
    r = sh(cmd);
    cr_expect(r.status == 2 && strstr(r.err, "--accumulate") && tu_lines(r.err) == 1, "%s", r.err);
    tu_free(&r);
    mpirun_prefix(pre, sizeof pre);
    snprintf(cmd, sizeof cmd, "YOLOCC_COLLECTIVE_TIMEOUT_S=soon %s -np 2 %s train %s/tiny.plan --synthetic --steps 1", pre, yolort, dir);
    r = sh(cmd);
    cr_expect_neq(r.status, 0);
    cr_expect(strstr(r.err, "YOLOCC_COLLECTIVE_TIMEOUT_S='soon'"), "%s", r.err);
    tu_free(&r);
    remove_dir(dir);
}
