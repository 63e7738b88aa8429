/* runtime/cuda/cuda_profile.c — where a CudaStep's device time goes (`yolort bench --profile`):
 * one more step run eagerly with an event pair around every launch, summed by route and by op
 * (generated kernels by fusion pattern). Must not change what a step computes or allocate plan
 * memory; the events are its own and destroyed before it returns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../ir/diag.h"
#include "cuda_detloss.h"
#include "cuda_step.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int by_ms_desc(const void *a, const void *b) {
    double x = ((const CudaProfileRow *)a)->ms, y = ((const CudaProfileRow *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* What launch l is, for the by-op table: route and op kind, or a generated kernel's fusion pattern and first op. */
static void launch_label(const CudaStep *cs, int l, int gi, CudaRoute r, char *buf, size_t cap) {
    const Graph *g = &cs->plan->g;
    const KLaunch *ln = &cs->kern.kp.launches[l];
    const char *op = op_def(g->ops[ln->op_lo].kind)->name;
    if (r == CUDA_ROUTE_KERNEL && gi >= 0)
        snprintf(buf, cap, "%s: %s (%s ...)", cuda_route_name(r), group_pattern_name(cs->plan->fusion.groups[gi].pattern), op);
    else snprintf(buf, cap, "%s: %s", cuda_route_name(r), op);
}

static void add_row(CudaProfile *p, const char *what, double ms, double bytes) {
    for (int i = 0; i < p->n_rows; i++)
        if (strcmp(p->rows[i].what, what) == 0) {
            p->rows[i].launches++, p->rows[i].ms += ms, p->rows[i].bytes += bytes;
            return;
        }
    CudaProfileRow *row = &p->rows[p->n_rows++];
    snprintf(row->what, sizeof row->what, "%s", what);
    row->launches = 1, row->ms = ms, row->bytes = bytes;
}

static void keep_top(CudaProfile *p, const char *what, double ms, double bytes) {
    const int cap = (int)(sizeof p->top / sizeof p->top[0]);
    if (p->n_top == cap && ms <= p->top[cap - 1].ms) return;
    int at = p->n_top < cap ? p->n_top++ : cap - 1;
    while (at > 0 && p->top[at - 1].ms < ms) p->top[at] = p->top[at - 1], at--;
    snprintf(p->top[at].what, sizeof p->top[at].what, "%s", what);
    p->top[at].launches = 1, p->top[at].ms = ms, p->top[at].bytes = bytes;
}

bool cuda_step_profile(CudaStep *cs, CudaProfile *p, char *err, int errcap) {
    memset(p, 0, sizeof *p);
    const CudaLibs *L = &cs->dev.L;
    const KProgram *kp = &cs->kern.kp;
    const int n = kp->n_launches;
    CuEvent *ev = calloc(2 * (size_t)n + 1, sizeof *ev);
    int *group = malloc(sizeof(int) * ((size_t)n + 1));
    /* the loss' launches get their phases timed too: a row per phase kernel */
    CudaLossTiming *loss = calloc((size_t)n + 1, sizeof *loss);
    p->rows = calloc((size_t)n + 1 + 2 * CUDA_DETLOSS_PHASES, sizeof *p->rows);
    bool ok = ev && group && loss && p->rows;
    if (!ok) errf(err, errcap, "out of memory");
    for (int i = 0; ok && i < 2 * n; i++) ok = CUDA_CALL(L, cuEventCreate, (&ev[i], 0), "creating the profile's events", err, errcap);
    for (int l = 0; ok && l < n; l++)
        for (int i = 0; ok && cuda_step_route_for(cs, &cs->plan->g, &kp->launches[l]) == CUDA_ROUTE_DETLOSS && i <= CUDA_DETLOSS_PHASES; i++)
            ok = CUDA_CALL(L, cuEventCreate, (&loss[l].ev[i], 0), "creating the profile's events", err, errcap);
    for (int l = 0; l < n; l++) group[l] = -1;
    const bool graphs = cs->use_graphs;
    if (ok) {
        cs->use_graphs = false, cs->prof_ev = ev, cs->prof_group = group, cs->prof_loss = loss;
        const double t0 = now_ms();
        char why[1536];
        ok = cuda_step_run(cs, 0, cs->plan->g.n_ops, why, sizeof why) || errf(err, errcap, "the profiled step: %s", why);
        p->wall_ms = now_ms() - t0;
        cs->use_graphs = graphs, cs->prof_ev = NULL, cs->prof_group = NULL, cs->prof_loss = NULL;
    }
    for (int l = 0; ok && l < n; l++) {
        const KLaunch *ln = &kp->launches[l];
        if (group[l] < 0) continue; /* not part of the step's run */
        float ms = 0;
        ok = CUDA_CALL(L, cuEventElapsedTime, (&ms, ev[2 * l], ev[2 * l + 1]), "reading a launch's time (profile)", err, errcap);
        CudaRoute r = cuda_step_route_for(cs, &cs->plan->g, ln);
        char what[112], one[112];
        launch_label(cs, l, group[l], r, what, sizeof what);
        const double bytes = (double)ln->bytes;
        add_row(p, what, ms, bytes);
        snprintf(one, sizeof one, "launch %d, ops %d-%d %s", l, ln->op_lo, ln->op_hi, cs->plan->g.ops[ln->op_lo].scope ? cs->plan->g.ops[ln->op_lo].scope : "");
        keep_top(p, one, ms, bytes);
        p->launch_ms += ms, p->launch_bytes += bytes;
        if ((unsigned)r < CUDA_ROUTE_COUNT) p->route_ms[r] += ms, p->route_bytes[r] += bytes, p->route_launches[r]++;
        for (int i = 0; ok && i < loss[l].n; i++) {
            ok = CUDA_CALL(L, cuEventElapsedTime, (&ms, loss[l].ev[i], loss[l].ev[i + 1]), "reading a loss phase's time (profile)", err, errcap);
            snprintf(what, sizeof what, "  of which loss phase %s", cs->kern.lp.kernels[loss[l].kernel[i]].name);
            add_row(p, what, ms, 0);
        }
    }
    /* teardown of our own events: nothing to report */
    for (int i = 0; ev && i < 2 * n; i++)
        if (ev[i]) (void)L->cuEventDestroy(ev[i]);
    for (int l = 0; loss && l < n; l++)
        for (int i = 0; i <= CUDA_DETLOSS_PHASES; i++)
            if (loss[l].ev[i]) (void)L->cuEventDestroy(loss[l].ev[i]);
    free(loss);
    free(ev);
    free(group);
    if (ok) qsort(p->rows, (size_t)p->n_rows, sizeof *p->rows, by_ms_desc);
    else cuda_profile_free(p);
    return ok;
}

/* "1234 GB/s", or a blank of the same width when nothing was counted or timed */
static const char *rate(char *buf, size_t cap, double bytes, double ms) {
    if (bytes > 0 && ms > 0) snprintf(buf, cap, "%5.0f GB/s", bytes / ms / 1e6);
    else snprintf(buf, cap, "%10s", "");
    return buf;
}

void cuda_profile_format(const CudaProfile *p, int rows, char *buf, int cap) {
    int at = 0;
    /* a line that does not fit is cut and the rest dropped: at never passes cap */
#define PUT(...)                                                   \
    do {                                                           \
        if (at < cap) at += snprintf(buf + at, (size_t)(cap - at), __VA_ARGS__); \
        if (at > cap) at = cap;                                    \
    } while (0)
    char bw[32];
    PUT("profile (one eager step, events around each launch): %.3f ms in launches, %.3f ms on the host clock; %.3f GB moved, %s\n", p->launch_ms, p->wall_ms,
        p->launch_bytes / 1e9, rate(bw, sizeof bw, p->launch_bytes, p->launch_ms));
    PUT("  (GB/s: the bytes a launch must move, kernel_launch_bytes, over its time; library ops count their inputs and outputs once, a lower bound)\n");
    for (int r = 0; r < CUDA_ROUTE_COUNT; r++)
        if (p->route_launches[r])
            PUT("  %-18s %8.3f ms %5.1f%%  %5d launches %s\n", cuda_route_name((CudaRoute)r), p->route_ms[r], 100 * p->route_ms[r] / (p->launch_ms > 0 ? p->launch_ms : 1),
                p->route_launches[r], rate(bw, sizeof bw, p->route_bytes[r], p->route_ms[r]));
    PUT("  by op:\n");
    for (int i = 0; i < p->n_rows && i < rows; i++)
        PUT("  %8.3f ms %5.1f%% %5d x %s  %s\n", p->rows[i].ms, 100 * p->rows[i].ms / (p->launch_ms > 0 ? p->launch_ms : 1), p->rows[i].launches,
            rate(bw, sizeof bw, p->rows[i].bytes, p->rows[i].ms), p->rows[i].what);
    PUT("  heaviest launches:\n");
    for (int i = 0; i < p->n_top; i++) PUT("  %8.3f ms %s  %s\n", p->top[i].ms, rate(bw, sizeof bw, p->top[i].bytes, p->top[i].ms), p->top[i].what);
#undef PUT
}

void cuda_profile_free(CudaProfile *p) {
    free(p->rows);
    memset(p, 0, sizeof *p);
}
