/* runtime/cuda/cuda_ema.c — the trainer's EMA of the model kept on the device:
 * one allocation holding a copy of every fp32 parameter and buffer, updated
 * after each optimizer step by the plan's EMA library kernel, moved to and
 * from the host only for validation, checkpoints and resume. Must not touch
 * the step's own memory or decide when an update happens (the trainer does). */
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "cuda_step.h"

/* a tensor the EMA follows: an fp32 parameter or buffer with device memory */
static bool followed(const CudaStep *cs, int t) {
    const Tensor *x = &cs->plan->g.tensors[t];
    return (x->kind == TK_PARAM || x->kind == TK_BUFFER) && x->dtype == DT_F32 && cs->ptr[t];
}

static int64_t bytes_of(const CudaStep *cs, int t) { return shape_numel(&cs->plan->g.tensors[t].shape) * 4; }

bool cuda_step_ema_open(CudaStep *cs, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    if (!(cs->ema_off = malloc(sizeof *cs->ema_off * ((size_t)g->n_tensors + 1)))) return errf(err, errcap, "out of memory");
    int64_t total = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        cs->ema_off[t] = -1;
        if (!followed(cs, t)) continue;
        cs->ema_off[t] = total;
        total += (bytes_of(cs, t) + 255) / 256 * 256;
    }
    size_t free_b = 0, all = 0;
    if (!CUDA_CALL(&cs->dev.L, cuMemGetInfo, (&free_b, &all), "reading the free device memory for the EMA", err, errcap)) return false;
    if ((uint64_t)total > free_b)
        return errf(err, errcap, "the EMA's copy of the model needs %lld bytes (%.1f MB) of device memory; %zu bytes (%.1f MB) are free", (long long)total,
                    (double)total / 1e6, free_b, (double)free_b / 1e6);
    if (total && !CUDA_CALL(&cs->dev.L, cuMemAlloc, (&cs->ema, (size_t)total), "allocating the EMA's copy of the model", err, errcap)) return false;
    cs->ema_bytes = total;
    return true;
}

bool cuda_step_ema_update(CudaStep *cs, float d, float e, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    for (int t = 0; t < g->n_tensors; t++) {
        if (!cs->ema_off || cs->ema_off[t] < 0) continue;
        char why[1024];
        if (!cuda_kernels_ema(&cs->kern, &cs->dev, cs->ema + (CuDevicePtr)cs->ema_off[t], cs->ptr[t], bytes_of(cs, t) / 4, d, e, cs->dev.main, why, sizeof why))
            return errf(err, errcap, "the EMA of %s: %s", g->tensors[t].name ? g->tensors[t].name : "a state tensor", why);
    }
    return true;
}

/* every copy between host[t] and the device, one wait */
static bool ema_move(CudaStep *cs, void *const *host, bool up, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    const char *doing = up ? "uploading the EMA" : "downloading the EMA";
    for (int t = 0; t < g->n_tensors; t++) {
        if (!cs->ema_off || cs->ema_off[t] < 0 || !host[t]) continue;
        CuDevicePtr dev = cs->ema + (CuDevicePtr)cs->ema_off[t];
        size_t n = (size_t)bytes_of(cs, t);
        bool ok = up ? CUDA_CALL(&cs->dev.L, cuMemcpyHtoDAsync, (dev, host[t], n, cs->dev.main), doing, err, errcap)
                     : CUDA_CALL(&cs->dev.L, cuMemcpyDtoHAsync, (host[t], dev, n, cs->dev.main), doing, err, errcap);
        if (!ok) return false;
    }
    return CUDA_CALL(&cs->dev.L, cuStreamSynchronize, (cs->dev.main), doing, err, errcap);
}

bool cuda_step_ema_upload(CudaStep *cs, void *const *host, char *err, int errcap) { return ema_move(cs, host, true, err, errcap); }
bool cuda_step_ema_download(CudaStep *cs, void *const *host, char *err, int errcap) { return ema_move(cs, host, false, err, errcap); }
