/* runtime/train/schedule.c — lr factor, warmup, accumulation and EMA decay
 * exactly as Ultralytics 8.3 computes them (Python's round is half to
 * even: nearbyint in the default rounding mode). Must not touch: optimizer state,
 * tensors, files. */
#include "schedule.h"

#include <math.h>

double lr_factor(int epoch, int epochs, double lrf, bool cos_lr) {
    double e = epoch, E = epochs;
    if (cos_lr) return ((1 - cos(e * M_PI / E)) / 2) * (lrf - 1) + 1;
    double f = 1 - e / E;
    return (f > 0 ? f : 0) * (1.0 - lrf) + lrf;
}

double warmup_interp(double x, double xp1, double y0, double y1) {
    if (x <= 0) return y0;
    if (x >= xp1) return y1;
    /* numpy.interp: y0 + (x - x0) * slope, slope = (y1 - y0) / (x1 - x0) */
    return y0 + x * ((y1 - y0) / xp1);
}

int warmup_iterations(double warmup_epochs, int nb) {
    if (warmup_epochs <= 0) return -1;
    double nw = nearbyint(warmup_epochs * nb);
    return nw > 100 ? (int)nw : 100;
}

WarmupValues warmup_values(int ni, int nw, double lr0_lf, double warmup_bias_lr, double warmup_momentum, double momentum, int nbs, int batch) {
    WarmupValues v;
    double a = nearbyint(warmup_interp(ni, nw, 1, (double)nbs / batch));
    v.accumulate = a > 1 ? (int)a : 1;
    v.lr[0] = warmup_interp(ni, nw, warmup_bias_lr, lr0_lf);
    v.lr[1] = v.lr[2] = warmup_interp(ni, nw, 0, lr0_lf);
    v.momentum = warmup_interp(ni, nw, warmup_momentum, momentum);
    return v;
}

double ema_decay(long updates) { return 0.9999 * (1 - exp(-(double)updates / 2000.0)); }

double auto_adamw_lr(int nc) { return nearbyint(0.002 * 5 / (4 + nc) * 1e6) / 1e6; }
