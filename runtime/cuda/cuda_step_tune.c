/* runtime/cuda/cuda_step_tune.c — which of cuDNN's candidate engines (cudnn_conv.h) each
 * convolution shape of a CudaStep runs: under YOLOCC_CUDNN_TUNE=time (the default) every
 * candidate is timed at the step's bound addresses as graph replays and the fastest kept, as
 * PyTorch's cudnn.benchmark does; the choice goes into the kernel cache so that a later run on the
 * same device and cuDNN takes the same engines (a resume stays bit for bit). =heuristic keeps the
 * heuristics' first choice. Must not allocate plan memory (only scratch for timing). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/kcache.h"
#include "../../ir/diag.h"
#include "cuda_step.h"

enum { TUNE_RUNS = 3 };
/* another engine replaces the heuristics' first choice only when this much faster, so timing noise
 * alone does not move a shape off the engine cuDNN recommends */
#define TUNE_MARGIN 0.97f
static const char ENTRY_HEAD[] = "yolocc cudnn tune 1\n";

/* ---- pure ---- */

bool cudnn_tune_knob(const char *v, int *candidates, char *err, int errcap) {
    if (!v || !*v || strcmp(v, "time") == 0) return *candidates = CONV_TUNE_MAX, true;
    if (strcmp(v, "heuristic") == 0) return *candidates = 1, true;
    return errf(err, errcap, "YOLOCC_CUDNN_TUNE=%s: expected time or heuristic", v);
}

int cudnn_tune_pick(const float *ms, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (ms[i] >= 0 && (best < 0 || ms[i] < ms[best])) best = i;
    /* the first choice stays unless the best beats it by the margin */
    if (best > 0 && ms[0] >= 0 && !(ms[best] < TUNE_MARGIN * ms[0])) best = 0;
    return best;
}

int cudnn_tune_entry_format(char *buf, int cap, int rank, int n, const float *ms) {
    int used = snprintf(buf, (size_t)cap, "%srank %d of %d\nms", ENTRY_HEAD, rank, n);
    for (int i = 0; i < n && used > 0 && used < cap; i++) used += snprintf(buf + used, (size_t)(cap - used), " %.6g", (double)ms[i]);
    if (used > 0 && used < cap) used += snprintf(buf + used, (size_t)(cap - used), "\n");
    return used > 0 && used < cap ? used : -1;
}

bool cudnn_tune_entry_parse(const char *buf, size_t len, int n, int *rank, float *ms) {
    char text[256];
    const size_t head = sizeof ENTRY_HEAD - 1;
    if (len >= sizeof text || len < head || memcmp(buf, ENTRY_HEAD, head) != 0 || memchr(buf, 0, len)) return false;
    memcpy(text, buf, len);
    text[len] = 0;
    int r = -1, of = -1, used = 0;
    if (sscanf(text + head, "rank %d of %d\nms%n", &r, &of, &used) != 2 || used == 0 || of != n || r < 0 || r >= n) return false;
    const char *p = text + head + used;
    for (int i = 0; i < n; i++) {
        char *end;
        ms[i] = strtof(p, &end);
        if (end == p || (*end != ' ' && *end != '\n')) return false;
        p = end;
    }
    if (strcmp(p, "\n") != 0 || ms[r] < 0) return false;
    *rank = r;
    return true;
}

/* ---- timing on the device ---- */

/* The cache key of plan e's choice: the device, cuDNN, the shape and its candidates' engines. */
static void cache_key(const CudaStep *cs, const ConvPlan *e, char hex[65]) {
    int64_t fields[CONV_KEY_NFIELDS], shape[4] = {cs->dev.sm, cs->dev.sm_count, e->staged, e->n_cand};
    conv_key_fields(&e->key, fields);
    char version[32];
    snprintf(version, sizeof version, "%zu", cs->dev.L.cudnnGetVersion());
    const void *parts[] = {ENTRY_HEAD, cs->dev.name, version, fields, shape, e->cand_ws, e->cand_engine};
    const size_t lens[] = {sizeof ENTRY_HEAD - 1, strlen(cs->dev.name), strlen(version), sizeof fields, sizeof shape, sizeof e->cand_ws, sizeof e->cand_engine};
    kcache_key(parts, lens, (int)(sizeof parts / sizeof parts[0]), hex);
}

typedef struct ConvRun {
    CudaStep *cs;
    const Op *op;
    CuDevicePtr out;
} ConvRun;

static bool run_conv_ctx(void *ctx, char *err, int errcap) {
    const ConvRun *r = ctx;
    return cuda_step_run_conv(r->cs, r->op, r->out, err, errcap);
}

/* Times each candidate of e on op; ms[i] < 0: candidate i failed to run (counted, the first
 * reason kept). False when a failure left the device unusable (a fault is sticky: every later
 * call would fail too), with that error. */
static bool time_candidates(CudaStep *cs, ConvPlan *e, const Op *op, CuDevicePtr out, float *ms, char *err, int errcap) {
    char what[384], doing[640], why[512];
    conv_key_describe(&e->key, what, sizeof what);
    ConvRun r = {cs, op, out};
    for (int i = 0; i < e->n_cand; i++) {
        snprintf(doing, sizeof doing, "timing cuDNN engine candidate %d of %d for convolution %s", i + 1, e->n_cand, what);
        e->chosen = i;
        if (cuda_time_replays(&cs->dev, run_conv_ctx, &r, TUNE_RUNS, doing, &ms[i], why, sizeof why)) continue;
        ms[i] = -1;
        if (!cs->tune_failed++) snprintf(cs->tune_why, sizeof cs->tune_why, "%.*s", (int)sizeof cs->tune_why - 1, why);
        snprintf(doing, sizeof doing, "checking the device after cuDNN engine candidate %d of %d of convolution %s failed (%.64s)", i + 1, e->n_cand, what, why);
        if (!CUDA_CALL(&cs->dev.L, cuStreamSynchronize, (cs->dev.main), doing, err, errcap)) return false;
    }
    return true;
}

/* Bytes of op's output when it lives in the persistent region (a weight gradient), else 0. */
static int64_t persistent_out_bytes(const CudaStep *cs, const Op *op) {
    return cs->conv.persistent[op->out[0]] ? memplan_tensor_bytes(&cs->plan->g, op->out[0], true, cs->plan->precision) : 0;
}

/* The chosen engine of e choosing from the cache or by timing, on op with its output at out:
 * *timed when it ran here (else the caller warms it). */
static bool choose_engine(CudaStep *cs, ConvPlan *e, const Op *op, CuDevicePtr out, float plan_ms[2], bool *timed, char *err, int errcap) {
    *timed = false;
    cs->tune_shapes++;
    char hex[65];
    cache_key(cs, e, hex);
    unsigned char *entry = NULL;
    size_t len = 0;
    float ms[CONV_TUNE_MAX];
    int rank = -1;
    const bool cached = kcache_get(hex, &entry, &len) && cudnn_tune_entry_parse((const char *)entry, len, e->n_cand, &rank, ms);
    free(entry);
    if (cached) {
        cs->tune_cached++;
    } else {
        if (!time_candidates(cs, e, op, out, ms, err, errcap)) return false;
        *timed = true;
        if ((rank = cudnn_tune_pick(ms, e->n_cand)) < 0) {
            char what[384];
            conv_key_describe(&e->key, what, sizeof what);
            return errf(err, errcap, "no cuDNN engine of convolution %s ran (%d candidates): %s", what, e->n_cand, cs->tune_why);
        }
        char text[256], why[256];
        int n = cudnn_tune_entry_format(text, sizeof text, rank, e->n_cand, ms);
        if (n > 0 && !kcache_put(hex, text, (size_t)n, why, sizeof why) && !cs->tune_store_why[0])
            snprintf(cs->tune_store_why, sizeof cs->tune_store_why, "%.*s", (int)sizeof cs->tune_store_why - 1, why);
    }
    e->chosen = rank;
    cs->tune_changed += rank != 0;
    plan_ms[0] = ms[0], plan_ms[1] = ms[rank];
    return true;
}

bool cuda_step_cudnn_tune(CudaStep *cs, char *err, int errcap) {
    CudnnConv *cc = &cs->conv;
    const Graph *g = &cs->plan->g;
    const KProgram *kp = &cs->kern.kp;
    cs->tune_shapes = cs->tune_cached = cs->tune_changed = cs->tune_failed = 0;
    cs->tune_why[0] = cs->tune_store_why[0] = 0;
    cs->tune_ms[0] = cs->tune_ms[1] = 0;
    int64_t scratch_bytes = 0;
    for (int l = 0; l < kp->n_launches; l++)
        if (cuda_step_route(g, &kp->launches[l]) == CUDA_ROUTE_CUDNN && persistent_out_bytes(cs, &g->ops[kp->launches[l].op_lo]) > scratch_bytes)
            scratch_bytes = persistent_out_bytes(cs, &g->ops[kp->launches[l].op_lo]);
    /* per plan: the first choice's and the chosen engine's time (-1: not timed), and whether it ran here;
     * the step's timed convolutions are summed over every launch, as the heuristics chose and as chosen */
    float(*plan_ms)[2] = malloc(sizeof *plan_ms * ((size_t)cc->n_plans + 1));
    bool *ran = calloc((size_t)cc->n_plans + 1, sizeof *ran);
    if (!plan_ms || !ran) return free(plan_ms), free(ran), errf(err, errcap, "out of memory");
    for (int i = 0; i < cc->n_plans; i++) plan_ms[i][0] = plan_ms[i][1] = -1;
    CuDevicePtr scratch = 0;
    bool ok = !scratch_bytes || CUDA_CALL(&cs->dev.L, cuMemAlloc, (&scratch, (size_t)scratch_bytes), "allocating scratch for timing weight gradients", err, errcap);
    for (int l = 0; ok && l < kp->n_launches; l++) {
        if (cuda_step_route(g, &kp->launches[l]) != CUDA_ROUTE_CUDNN) continue;
        const Op *op = &g->ops[kp->launches[l].op_lo];
        ConvPlan *e = cudnn_conv_plan_of(cc, op, err, errcap);
        if (!(ok = e != NULL)) break;
        float *m = plan_ms[e - cc->plans];
        if (!ran[e - cc->plans]) {
            ran[e - cc->plans] = true;
            const CuDevicePtr out = persistent_out_bytes(cs, op) ? scratch : cs->ptr[op->out[0]];
            bool timed = false;
            ok = cc->candidates <= 1 || e->n_cand <= 1 || choose_engine(cs, e, op, out, m, &timed, err, errcap);
            /* every engine runs once before any capture: whatever cuDNN sets up on an engine's first run happens outside a graph */
            ok = ok && (timed || cuda_step_run_conv(cs, op, out, err, errcap));
        }
        if (m[0] >= 0 && m[1] >= 0) cs->tune_ms[0] += m[0], cs->tune_ms[1] += m[1];
    }
    ok = ok && CUDA_CALL(&cs->dev.L, cuStreamSynchronize, (cs->dev.main), "running each convolution's chosen cuDNN engine once before the first step", err, errcap);
    /* teardown of the timing: a failure leaves nothing to undo */
    if (scratch) (void)cs->dev.L.cuMemFree(scratch);
    free(plan_ms);
    free(ran);
    if (ok) cudnn_conv_settle(cc);
    return ok;
}
