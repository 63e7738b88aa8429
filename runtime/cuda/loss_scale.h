/* runtime/cuda/loss_scale.h — the fp16 dynamic loss-scale state machine
 * (PyTorch GradScaler's rule, as Ultralytics' AMP uses it). Pure C: owns the
 * scale and its counters only; must not touch CUDA, gradients or the optimizer. */
#ifndef YOLOCC_LOSS_SCALE_H
#define YOLOCC_LOSS_SCALE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Issue #6's constants (GradScaler defaults). */
#define LOSS_SCALE_INIT 65536.0f
#define LOSS_SCALE_GROWTH 2.0f
#define LOSS_SCALE_BACKOFF 0.5f
#define LOSS_SCALE_INTERVAL 2000
/* Floor: backoff never takes the scale below 1 (GradScaler has no floor; a
 * scale under 1 would only shrink fp16 gradients further, so repeated
 * overflows at scale 1 keep skipping steps at 1 instead). Ceiling: growth
 * stops at 2^127, the largest power of two a float holds, so the scale stays
 * finite. Every reachable scale is a power of two, so scaling and unscaling
 * are exact. */
#define LOSS_SCALE_MIN 1.0f
#define LOSS_SCALE_MAX 1.7014118346046923e38f /* 2^127 */

/* The whole state; a resume file stores these fields as they are. */
typedef struct LossScale {
    bool enabled;           /* false (bf16, fp32): scale stays 1 and no step is skipped */
    float scale;            /* multiply the loss (the backward seed) by this */
    int32_t growth_tracker; /* consecutive finite steps since the last change, 0..LOSS_SCALE_INTERVAL-1 */
    int64_t steps;          /* updates seen */
    int64_t skipped;        /* updates skipped for inf/NaN gradients */
} LossScale;

/* Fresh state: enabled -> scale 65536, otherwise 1. */
void loss_scale_init(LossScale *ls, bool enabled);

/* After backward: grads_finite is false when any gradient is inf or NaN.
 * Returns true when the optimizer step must be applied (with gradients
 * multiplied by 1/scale first, using the scale from before this call), false
 * when it must be skipped. Transitions (enabled):
 *   non-finite: skip; scale = max(scale * 0.5, 1); tracker = 0
 *   finite:     apply; tracker + 1 == 2000 ? (scale = min(scale * 2, 2^127), tracker = 0) : tracker + 1
 * Disabled: always apply; nothing changes but the step count. */
bool loss_scale_update(LossScale *ls, bool grads_finite);

/* 1 / scale, exact (the scale is a power of two). */
float loss_scale_inverse(const LossScale *ls);

/* True when all n values are finite (no inf, no NaN). */
bool loss_scale_all_finite(const float *x, size_t n);

/* Checks a state read back from a resume file: scale a power of two in
 * [1, 2^127] (exactly 1 when disabled), tracker in [0, 2000), counters
 * non-negative with skipped <= steps. False with one error naming the field. */
bool loss_scale_validate(const LossScale *ls, char *err, int errcap);

#endif
