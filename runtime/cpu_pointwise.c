/* runtime/cpu_pointwise.c — fast CPU BatchNorm (forward, backward) and
 * activations (forward, backward) for the interpreter's fast mode. Must not
 * touch ref_pointwise.c, the oracle these match to within 1e-5 relative. */
#include <math.h>
#include <stdint.h>

#include "cpu_conv.h"

/* Lane-wise double partial sums vectorise (the oracle's single running sum
 * cannot) while keeping its precision; only the order of additions differs. */
enum { LANES = 4 };

double cpu_row_sum(const float *p, int64_t n) {
    double s[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) s[k] += p[i + k];
    for (; i < n; i++) s[0] += p[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

double cpu_row_dot(const float *a, const float *b, int64_t n) {
    double s[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) s[k] += (double)a[i + k] * b[i + k];
    for (; i < n; i++) s[0] += (double)a[i] * b[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static void nc_inner(const Shape *s, int64_t *n, int64_t *c, int64_t *inner) {
    *n = s->d[0];
    *c = s->d[1];
    *inner = 1;
    for (int i = 2; i < s->nd; i++) *inner *= s->d[i];
}

/* sum over the rows of one channel of (x - m)^2 */
static double centred_squares(const float *x, int64_t n, int64_t c, int64_t inner, int64_t ch, double m) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *p = x + (i * c + ch) * inner;
        double s[LANES] = {0};
        int64_t k = 0;
        for (; k + LANES <= inner; k += LANES)
            for (int l = 0; l < LANES; l++) {
                double d = p[k + l] - m;
                s[l] += d * d;
            }
        for (; k < inner; k++) s[0] += (p[k] - m) * (p[k] - m);
        acc += (s[0] + s[1]) + (s[2] + s[3]);
    }
    return acc;
}

/* The oracle's normalisation formula, evaluated identically, so that the
 * reference bn_apply still recomputes this output bit for bit. */
static void normalise_row(const float *x, float *y, int64_t inner, double mean, double invstd, double w, double b) {
    for (int64_t k = 0; k < inner; k++) y[k] = (float)(((double)x[k] - mean) * invstd * w + b);
}

REF_KERNEL(cpu_batchnorm) {
    int64_t n, c, inner;
    nc_inner(SH(op->in[0]), &n, &c, &inner);
    const float *x = T(0), *w = T(1), *b = T(2);
    float *rm = T(3), *rv = T(4), *y = O(0), *mean_out = O(1), *invstd_out = O(2);
    int64_t *tracked = buf[op->in[5]];
    double count = (double)(n * inner), eps = op->a.eps, mom = op->a.momentum;
    if (op->a.training && count < 2) return snprintf(err, (size_t)errcap, "batchnorm in training mode needs more than one value per channel"), false;
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, invstd;
        if (op->a.training) {
            double s = 0;
            for (int64_t i = 0; i < n; i++) s += cpu_row_sum(x + (i * c + ch) * inner, inner);
            mean = s / count;
            double var = centred_squares(x, n, c, inner, ch, mean) / count;
            invstd = 1.0 / sqrt(var + eps);
            rm[ch] = (float)((1 - mom) * rm[ch] + mom * mean);
            rv[ch] = (float)((1 - mom) * rv[ch] + mom * var * count / (count - 1));
        } else {
            mean = rm[ch];
            invstd = 1.0 / sqrt((double)rv[ch] + eps);
        }
        mean_out[ch] = (float)mean;
        invstd_out[ch] = (float)invstd;
        for (int64_t i = 0; i < n; i++)
            normalise_row(x + (i * c + ch) * inner, y + (i * c + ch) * inner, inner, mean_out[ch], invstd_out[ch], w[ch], b[ch]);
    }
    if (op->a.training) *tracked += 1;
    return true;
}

/* batchnorm_bwd(dy, x, weight, mean, invstd) -> dx, dweight, dbias, using
 * sum(dy * xhat) = invstd * (sum(dy * x) - mean * sum(dy)) to read x once
 * for the reductions */
REF_KERNEL(cpu_batchnorm_bwd) {
    (void)err;
    (void)errcap;
    int64_t n, c, inner;
    nc_inner(SH(op->in[1]), &n, &c, &inner);
    const float *dy = T(0), *x = T(1), *w = T(2), *mean = T(3), *invstd = T(4);
    float *dx = O(0), *dw = O(1), *db = O(2);
    double count = (double)(n * inner);
    for (int64_t ch = 0; ch < c; ch++) {
        double sdy = 0, sdyxm = 0, m = mean[ch], is = invstd[ch];
        for (int64_t i = 0; i < n; i++) {
            const float *d = dy + (i * c + ch) * inner, *p = x + (i * c + ch) * inner;
            double s[LANES] = {0}, t[LANES] = {0};
            int64_t k = 0;
            for (; k + LANES <= inner; k += LANES)
                for (int l = 0; l < LANES; l++) {
                    s[l] += d[k + l];
                    t[l] += d[k + l] * (p[k + l] - m);
                }
            for (; k < inner; k++) {
                s[0] += d[k];
                t[0] += d[k] * (p[k] - m);
            }
            sdy += (s[0] + s[1]) + (s[2] + s[3]);
            sdyxm += (t[0] + t[1]) + (t[2] + t[3]);
        }
        double sdyx = sdyxm * is, scale = (double)w[ch] * is;
        db[ch] = (float)sdy;
        dw[ch] = (float)sdyx;
        /* dx = scale * (dy - (sdy + (x - m) * is * sdyx) / count) = a * dy + bx * x + c0 */
        double a = scale, bx = 0, c0 = 0;
        if (op->a.training) {
            bx = -scale * is * sdyx / count;
            c0 = -scale * (sdy - m * is * sdyx) / count;
        }
        for (int64_t i = 0; i < n; i++) {
            const float *d = dy + (i * c + ch) * inner, *p = x + (i * c + ch) * inner;
            float *o = dx + (i * c + ch) * inner;
            for (int64_t k = 0; k < inner; k++) o[k] = (float)(a * d[k] + bx * p[k] + c0);
        }
    }
    return true;
}

/* ---- activations: the switch is hoisted out of the element loop; the
 * exponential runs in fp32 where its rounding stays far below 1e-5 ---- */

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

REF_KERNEL(cpu_activation) {
    (void)err;
    (void)errcap;
    int64_t total = shape_numel(SH(op->out[0]));
    const float *x = T(0);
    float *y = O(0);
    double alpha = op->a.alpha;
    switch (op->kind) {
    case OP_SILU:
        for (int64_t i = 0; i < total; i++) y[i] = x[i] * sigmoidf(x[i]);
        return true;
    case OP_SIGMOID:
        for (int64_t i = 0; i < total; i++) y[i] = sigmoidf(x[i]);
        return true;
    case OP_RELU:
        for (int64_t i = 0; i < total; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
        return true;
    case OP_LEAKY_RELU:
        for (int64_t i = 0; i < total; i++) y[i] = x[i] > 0 ? x[i] : (float)(alpha * x[i]);
        return true;
    case OP_HARDSWISH:
        for (int64_t i = 0; i < total; i++) {
            double v = x[i];
            y[i] = (float)(v <= -3 ? 0 : v >= 3 ? v : v * (v + 3) / 6);
        }
        return true;
    default: /* OP_GELU */
        for (int64_t i = 0; i < total; i++) {
            double v = x[i];
            y[i] = (float)(0.5 * v * (1 + erf(v / sqrt(2.0))));
        }
        return true;
    }
}

REF_KERNEL(cpu_activation_bwd) {
    (void)err;
    (void)errcap;
    int64_t total = shape_numel(SH(op->out[0]));
    const float *dy = T(0), *x = T(1);
    float *dx = O(0);
    double alpha = op->a.alpha;
    switch (op->a.act_op) {
    case OP_SILU:
        /* s + x s (1 - s) cancels near x = -1.28, so that part runs in double */
        for (int64_t i = 0; i < total; i++) {
            double s = sigmoidf(x[i]);
            dx[i] = (float)(dy[i] * (s * (1 + x[i] * (1 - s))));
        }
        return true;
    case OP_SIGMOID:
        for (int64_t i = 0; i < total; i++) {
            double s = sigmoidf(x[i]);
            dx[i] = (float)(dy[i] * (s * (1 - s)));
        }
        return true;
    case OP_RELU:
        for (int64_t i = 0; i < total; i++) dx[i] = x[i] > 0 ? dy[i] : 0.0f;
        return true;
    case OP_LEAKY_RELU:
        for (int64_t i = 0; i < total; i++) dx[i] = x[i] > 0 ? dy[i] : (float)(dy[i] * alpha);
        return true;
    case OP_HARDSWISH:
        for (int64_t i = 0; i < total; i++) {
            double v = x[i];
            dx[i] = (float)(dy[i] * (v < -3 ? 0 : v <= 3 ? v / 3 + 0.5 : 1));
        }
        return true;
    default: /* OP_GELU */
        for (int64_t i = 0; i < total; i++) {
            double v = x[i];
            dx[i] = (float)(dy[i] * (0.5 * (1 + erf(v / sqrt(2.0))) + v * exp(-0.5 * v * v) / sqrt(2 * M_PI)));
        }
        return true;
    }
}
