/* runtime/dist/dp_train.c — data-parallel training glue (see dp_train.h for
 * the semantics): gradient region and buckets over a TrainStep, the reduce
 * hook, start-up broadcast and end-of-run agreement. Must not touch kernels,
 * the optimizer's arithmetic, the data pipeline or files. */
#include "dp_train.h"

#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "comm_store.h"

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ULL;
    return h;
}

/* What every rank must agree on before summing gradients: tensor kinds,
 * dtypes and shapes, and the op sequence. */
static uint64_t graph_hash(const Graph *g) {
    uint64_t h = 0xCBF29CE484222325ULL;
    h = fnv1a(h, &g->n_tensors, sizeof g->n_tensors);
    h = fnv1a(h, &g->n_ops, sizeof g->n_ops);
    for (int t = 0; t < g->n_tensors; t++) {
        int kd[2] = {(int)g->tensors[t].kind, (int)g->tensors[t].dtype};
        h = fnv1a(h, kd, sizeof kd);
        h = fnv1a(h, &g->tensors[t].shape.nd, sizeof g->tensors[t].shape.nd);
        h = fnv1a(h, g->tensors[t].shape.d, sizeof(int64_t) * (size_t)g->tensors[t].shape.nd);
    }
    for (int o = 0; o < g->n_ops; o++) {
        int k = (int)g->ops[o].kind;
        h = fnv1a(h, &k, sizeof k);
    }
    return h;
}

bool dp_init(DataParallel *dp, bool device_collectives, char *err, int errcap) {
    memset(dp, 0, sizeof *dp);
    Ranks r;
    Rendezvous how = RDV_NONE;
    if (!ranks_from_environ(&r, err, errcap)) return false;
    /* a CPU plan without MASTER_ADDR and MASTER_PORT keeps MPI, which may
     * know the world by itself (srun with PMIx); CUDA plans need them for the
     * NCCL id unless under mpirun */
    const bool meets = r.agent_store || (r.master_addr[0] && r.master_port);
    if (r.world > 1 && (device_collectives || meets) && !ranks_rendezvous(&r, &how, err, errcap)) return false;
    if (how == RDV_STORE || how == RDV_HOST) return store_comm_init(&dp->comm, &r, how == RDV_HOST, err, errcap);
    return dist_init(&dp->comm, &r, err, errcap);
}

bool dp_is_root(const DataParallel *dp) { return dp->comm.ranks.rank == 0; }

bool dp_attach(DataParallel *dp, TrainStep *ts, char *err, int errcap) {
    if (dp->comm.ranks.world <= 1) return true;
    const Graph *g = &ts->plan->g;
    if (dp->comm.active && !dist_agree_u64(&dp->comm, graph_hash(g), "the plan's graph (run the same plan on every rank)", err, errcap)) return false;
    if (ts->cuda) return dp_cuda_attach(dp, ts, err, errcap);
    int n;
    const int *grads = train_step_grads(ts, &n);
    for (int i = 0; i < n; i++)
        if (g->tensors[grads[i]].dtype != DT_F32) return errf(err, errcap, "data parallelism on the CPU needs fp32 gradients; gradient %d is %s", grads[i], dtype_name(g->tensors[grads[i]].dtype));
    int64_t cap;
    if (!bucket_cap_from_env(getenv("YOLOCC_BUCKET_CAP_MB"), &cap, err, errcap)) return false;
    if (!bucket_layout_from_graph(g, grads, n, cap, &dp->layout, err, errcap)) return false;
    if (dp->layout.total_bytes > 0 && !(dp->region = malloc((size_t)dp->layout.total_bytes))) return errf(err, errcap, "out of memory for the %lld-byte gradient region", (long long)dp->layout.total_bytes);
    if (!dp_broadcast_host_state(dp, ts, err, errcap)) return false;
    ts->reduce_grads = dp_reduce_grads;
    ts->reduce_ctx = dp;
    dp->ts = ts;
    return true;
}

bool dp_broadcast_host_state(DataParallel *dp, TrainStep *ts, char *err, int errcap) {
    const Graph *g = &ts->plan->g;
    for (int i = 0; i < g->n_state; i++) {
        const Tensor *t = &g->tensors[g->state[i]];
        if (!dist_broadcast(&dp->comm, ts->it.buf[t->id], (size_t)interp_tensor_bytes(t), 0, t->name ? t->name : "a state tensor", err, errcap)) return false;
    }
    train_step_host_changed(ts);
    return true;
}

bool dp_reduce_grads(void *ctx, TrainStep *ts, char *err, int errcap) {
    DataParallel *dp = ctx;
    const BucketLayout *l = &dp->layout;
    const Graph *g = &ts->plan->g;
    int n;
    const int *grads = train_step_grads(ts, &n);
    if (n != l->n_grads) return errf(err, errcap, "the gradient layout has %d gradients, the step %d", l->n_grads, n);
    /* the accumulators are separate arrays; the collective wants the region contiguous */
    for (int i = 0; i < n; i++) memcpy((char *)dp->region + l->offset[i], ts->acc[i], (size_t)interp_tensor_bytes(&g->tensors[grads[i]]));
    if (!dist_allreduce_sum(&dp->comm, dp->region, l, err, errcap)) return false;
    for (int i = 0; i < n; i++) memcpy(ts->acc[i], (char *)dp->region + l->offset[i], (size_t)interp_tensor_bytes(&g->tensors[grads[i]]));
    return true;
}

/* this rank's accumulated gradients back to zero (CPU plans) */
static void zero_accumulated(TrainStep *ts) {
    const Graph *g = &ts->plan->g;
    int n;
    const int *grads = train_step_grads(ts, &n);
    for (int i = 0; i < n; i++) memset(ts->acc[i], 0, (size_t)interp_tensor_bytes(&g->tensors[grads[i]]));
}

/* the CPU hook is attached: each rank's accumulators are its own until the update */
static bool sums_at_update(const DataParallel *dp, const TrainStep *ts) { return dp->ts == ts && ts->reduce_grads == dp_reduce_grads; }

bool dp_settle_accumulated(DataParallel *dp, TrainStep *ts, char *err, int errcap) {
    if (!sums_at_update(dp, ts) || ts->n_acc_batches == 0) return true;
    if (!dp_reduce_grads(dp, ts, err, errcap)) return false;
    if (!dp_is_root(dp)) zero_accumulated(ts);
    return true;
}

void dp_state_restored(DataParallel *dp, TrainStep *ts) {
    if (sums_at_update(dp, ts) && !dp_is_root(dp)) zero_accumulated(ts);
}

bool dp_check_in_sync(DataParallel *dp, char *err, int errcap) {
    if (!dp->comm.active || !dp->ts) return true;
    const Graph *g = &dp->ts->plan->g;
    /* parameters and optimizer state; BN running statistics stay per rank
     * (each rank's forward updates its own, and rank 0's are the ones saved) */
    uint64_t h = 0xCBF29CE484222325ULL;
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].kind == TK_PARAM || g->tensors[t].kind == TK_OPTIM) h = fnv1a(h, dp->ts->it.buf[t], (size_t)interp_tensor_bytes(&g->tensors[t]));
    return dist_agree_u64(&dp->comm, h, "the parameters and optimizer state after training (a hash)", err, errcap);
}

void dp_finalize(DataParallel *dp, int rc) {
    dp_detach(dp);
    free(dp->region);
    dp->region = NULL;
    bucket_layout_free(&dp->layout);
    dist_finalize(&dp->comm, rc);
}
