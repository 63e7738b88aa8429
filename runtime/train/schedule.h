/* runtime/train/schedule.h — the numbers Ultralytics' trainer derives per
 * epoch and per batch (training-semantics §5.1, §5.3, §6): the lr factor,
 * warmup of lr / momentum / accumulation, the optimizer-auto choice and the
 * EMA decay. Pure functions; no state, no I/O. */
#ifndef YOLOCC_SCHEDULE_H
#define YOLOCC_SCHEDULE_H
#include <stdbool.h>

/* lf(e): linear max(1 - e/E, 0)(1 - lrf) + lrf, or cosine ((1 - cos(e pi/E))/2)(lrf - 1) + 1 */
double lr_factor(int epoch, int epochs, double lrf, bool cos_lr);
/* numpy.interp(x, [0, xp1], [y0, y1]) as the warmup uses it (x clamped to [0, xp1]) */
double warmup_interp(double x, double xp1, double y0, double y1);
/* nw = max(round(warmup_epochs * nb), 100), or -1 when warmup_epochs <= 0 */
int warmup_iterations(double warmup_epochs, int nb);

typedef struct WarmupValues {
    double lr[3];       /* groups 0 (biases), 1 (decayed weights), 2 (BN weights) */
    double momentum;
    int accumulate;
} WarmupValues;

/* Values for global batch index ni (0-based) of epoch e during warmup
 * (ni <= nw): group 0 from warmup_bias_lr, the others from 0, to lr0 * lf(e);
 * momentum from warmup_momentum to momentum; accumulate from 1 to nbs/batch. */
WarmupValues warmup_values(int ni, int nw, double lr0_lf, double warmup_bias_lr, double warmup_momentum, double momentum, int nbs, int batch);

/* EMA decay after `updates` updates: 0.9999 * (1 - exp(-updates / 2000)) */
double ema_decay(long updates);

/* optimizer=auto's learning rate for AdamW: round(0.002 * 5 / (4 + nc), 6) */
double auto_adamw_lr(int nc);

#endif
