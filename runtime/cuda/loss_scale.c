/* runtime/cuda/loss_scale.c — fp16 dynamic loss scaling (see loss_scale.h
 * for the transitions). Pure C state machine; must not touch CUDA, gradients
 * or the optimizer. */
#include "loss_scale.h"

#include <math.h>

#include "../../ir/diag.h"

void loss_scale_init(LossScale *ls, bool enabled) {
    *ls = (LossScale){.enabled = enabled, .scale = enabled ? LOSS_SCALE_INIT : 1.0f};
}

bool loss_scale_update(LossScale *ls, bool grads_finite) {
    ls->steps++;
    if (!ls->enabled) return true;
    if (!grads_finite) {
        ls->skipped++;
        ls->growth_tracker = 0;
        float s = ls->scale * LOSS_SCALE_BACKOFF;
        ls->scale = s < LOSS_SCALE_MIN ? LOSS_SCALE_MIN : s;
        return false;
    }
    if (++ls->growth_tracker >= LOSS_SCALE_INTERVAL) {
        ls->growth_tracker = 0;
        if (ls->scale <= LOSS_SCALE_MAX / LOSS_SCALE_GROWTH) ls->scale *= LOSS_SCALE_GROWTH;
    }
    return true;
}

float loss_scale_inverse(const LossScale *ls) { return 1.0f / ls->scale; }

bool loss_scale_all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

bool loss_scale_validate(const LossScale *ls, char *err, int errcap) {
    int e;
    float m = isfinite(ls->scale) ? frexpf(ls->scale, &e) : 0;
    if (!(ls->scale >= LOSS_SCALE_MIN && ls->scale <= LOSS_SCALE_MAX) || m != 0.5f)
        return errf(err, errcap, "loss scale %g is not a power of two in [1, 2^127]", (double)ls->scale);
    if (!ls->enabled && ls->scale != 1.0f) return errf(err, errcap, "loss scale %g with loss scaling disabled (must be 1)", (double)ls->scale);
    if (ls->growth_tracker < 0 || ls->growth_tracker >= LOSS_SCALE_INTERVAL)
        return errf(err, errcap, "loss-scale growth tracker %d is outside [0, %d)", (int)ls->growth_tracker, LOSS_SCALE_INTERVAL);
    if (ls->steps < 0 || ls->skipped < 0 || ls->skipped > ls->steps)
        return errf(err, errcap, "loss-scale counters are inconsistent (%lld skipped of %lld steps)", (long long)ls->skipped, (long long)ls->steps);
    return true;
}
