/* runtime/cuda/cuda_profile.c — where a CudaStep's device time goes (`yolort bench --profile`):
 * one more step run eagerly with an event pair around every launch, summed by route and by op
 * (generated kernels by fusion pattern). Must not change what a step computes or allocate plan
 * memory; the events are its own and destroyed before it returns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "cuda_detloss.h"
#include "cuda_step.h"

_Static_assert((int)CUDA_ROUTE_COUNT <= (int)PROFILE_ROUTES, "every route has a column");

bool cuda_step_profile(CudaStep *cs, StepProfile *p, char *err, int errcap) {
    memset(p, 0, sizeof *p);
    p->how = "one eager step, events around each launch";
    for (int r = 0; r < CUDA_ROUTE_COUNT; r++) p->route_name[r] = cuda_route_name((CudaRoute)r);
    const CudaLibs *L = &cs->dev.L;
    const KProgram *kp = &cs->kern.kp;
    const int n = kp->n_launches;
    CuEvent *ev = calloc(2 * (size_t)n + 1, sizeof *ev);
    int *group = malloc(sizeof(int) * ((size_t)n + 1));
    /* the loss' launches get their phases timed too: a row per phase kernel */
    CudaLossTiming *loss = calloc((size_t)n + 1, sizeof *loss);
    bool ok = ev && group && loss;
    if (!ok) errf(err, errcap, "out of memory");
    for (int i = 0; ok && i < 2 * n; i++) ok = CUDA_CALL(L, cuEventCreate, (&ev[i], 0), "creating the profile's events", err, errcap);
    for (int l = 0; ok && l < n; l++)
        for (int i = 0; ok && cuda_step_route_for(cs, &cs->plan->g, &kp->launches[l]) == CUDA_ROUTE_DETLOSS && i <= CUDA_DETLOSS_PHASES; i++)
            ok = CUDA_CALL(L, cuEventCreate, (&loss[l].ev[i], 0), "creating the profile's events", err, errcap);
    for (int l = 0; l < n; l++) group[l] = -1;
    const bool graphs = cs->use_graphs;
    if (ok) {
        cs->use_graphs = false, cs->prof_ev = ev, cs->prof_group = group, cs->prof_loss = loss;
        const double t0 = step_profile_clock_ms();
        char why[1536];
        ok = cuda_step_run(cs, 0, cs->plan->g.n_ops, why, sizeof why) || errf(err, errcap, "the profiled step: %s", why);
        p->wall_ms = step_profile_clock_ms() - t0;
        cs->use_graphs = graphs, cs->prof_ev = NULL, cs->prof_group = NULL, cs->prof_loss = NULL;
    }
    for (int l = 0; ok && l < n; l++) {
        const KLaunch *ln = &kp->launches[l];
        if (group[l] < 0) continue; /* not part of the step's run */
        float ms = 0;
        ok = CUDA_CALL(L, cuEventElapsedTime, (&ms, ev[2 * l], ev[2 * l + 1]), "reading a launch's time (profile)", err, errcap);
        const CudaRoute r = cuda_step_route_for(cs, &cs->plan->g, ln);
        if (ok && !step_profile_launch(p, (int)r, &cs->plan->g, &cs->plan->fusion, kp, l, group[l], ms)) ok = errf(err, errcap, "out of memory");
        for (int i = 0; ok && i < loss[l].n; i++) {
            ok = CUDA_CALL(L, cuEventElapsedTime, (&ms, loss[l].ev[i], loss[l].ev[i + 1]), "reading a loss phase's time (profile)", err, errcap);
            char what[112];
            snprintf(what, sizeof what, "  of which loss phase %s", cs->kern.lp.kernels[loss[l].kernel[i]].name);
            if (ok && !step_profile_row(p, what, ms, 0)) ok = errf(err, errcap, "out of memory");
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
    if (ok) step_profile_sort(p);
    else step_profile_free(p);
    return ok;
}

