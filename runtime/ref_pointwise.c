/* runtime/ref_pointwise.c — reference BatchNorm (training: batch statistics,
 * running-stat update with the unbiased variance; eval: running statistics),
 * activations and their gradients, add, per-channel scale. */
#include <math.h>
#include <stdint.h>

#include "ref_kernels.h"

/* N, C and the per-channel element count of an [N, C, ...] shape */
static void nc_inner(const Shape *s, int64_t *n, int64_t *c, int64_t *inner) {
    *n = s->d[0];
    *c = s->d[1];
    *inner = 1;
    for (int i = 2; i < s->nd; i++) *inner *= s->d[i];
}

/* y = (x - mean) * invstd * w + b with the statistics as stored (fp32), so
 * that bn_apply recomputes a training BN's output bit for bit */
static void bn_normalise(int64_t n, int64_t c, int64_t inner, const float *x, const float *w, const float *b, const float *mean, const float *invstd,
                         float *y) {
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < inner; k++) {
                int64_t at = (i * c + ch) * inner + k;
                y[at] = (float)(((double)x[at] - mean[ch]) * invstd[ch] * w[ch] + b[ch]);
            }
}

REF_KERNEL(ref_bn_apply) {
    (void)err;
    (void)errcap;
    int64_t n, c, inner;
    nc_inner(SH(op->in[0]), &n, &c, &inner);
    bn_normalise(n, c, inner, T(0), T(1), T(2), T(3), T(4), O(0));
    return true;
}

REF_KERNEL(ref_batchnorm) {
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
            double s = 0, ss = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t k = 0; k < inner; k++) s += x[(i * c + ch) * inner + k];
            mean = s / count;
            for (int64_t i = 0; i < n; i++)
                for (int64_t k = 0; k < inner; k++) {
                    double dv = x[(i * c + ch) * inner + k] - mean;
                    ss += dv * dv;
                }
            double var = ss / count;
            invstd = 1.0 / sqrt(var + eps);
            rm[ch] = (float)((1 - mom) * rm[ch] + mom * mean);
            rv[ch] = (float)((1 - mom) * rv[ch] + mom * var * count / (count - 1));
        } else {
            mean = rm[ch];
            invstd = 1.0 / sqrt((double)rv[ch] + eps);
        }
        mean_out[ch] = (float)mean;
        invstd_out[ch] = (float)invstd;
    }
    bn_normalise(n, c, inner, x, w, b, mean_out, invstd_out, y);
    if (op->a.training) *tracked += 1;
    return true;
}

/* batchnorm_bwd(dy, x, weight, mean, invstd) -> dx, dweight, dbias. In
 * training mode mean and invstd depend on x, which adds the two reduction
 * terms to dx. */
REF_KERNEL(ref_batchnorm_bwd) {
    (void)err;
    (void)errcap;
    int64_t n, c, inner;
    nc_inner(SH(op->in[1]), &n, &c, &inner);
    const float *dy = T(0), *x = T(1), *w = T(2), *mean = T(3), *invstd = T(4);
    float *dx = O(0), *dw = O(1), *db = O(2);
    double count = (double)(n * inner);
    for (int64_t ch = 0; ch < c; ch++) {
        double sdy = 0, sdyx = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < inner; k++) {
                int64_t at = (i * c + ch) * inner + k;
                sdy += dy[at];
                sdyx += dy[at] * ((x[at] - (double)mean[ch]) * invstd[ch]);
            }
        db[ch] = (float)sdy;
        dw[ch] = (float)sdyx;
        double scale = (double)w[ch] * invstd[ch];
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < inner; k++) {
                int64_t at = (i * c + ch) * inner + k;
                double grad = dy[at];
                if (op->a.training) grad -= (sdy + (x[at] - (double)mean[ch]) * invstd[ch] * sdyx) / count;
                dx[at] = (float)(scale * grad);
            }
    }
    return true;
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static double act_forward(int kind, double x, double alpha) {
    switch (kind) {
    case OP_SILU: return x * sigmoid(x);
    case OP_RELU: return x > 0 ? x : 0;
    case OP_LEAKY_RELU: return x > 0 ? x : alpha * x;
    case OP_HARDSWISH: return x <= -3 ? 0 : x >= 3 ? x : x * (x + 3) / 6;
    case OP_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    default: return sigmoid(x);
    }
}

/* d act / dx at x, as PyTorch's backward formulas define it */
static double act_derivative(int kind, double x, double alpha) {
    switch (kind) {
    case OP_SILU: {
        double s = sigmoid(x);
        return s * (1 + x * (1 - s));
    }
    case OP_RELU: return x > 0 ? 1 : 0;
    case OP_LEAKY_RELU: return x > 0 ? 1 : alpha;
    case OP_HARDSWISH: return x < -3 ? 0 : x <= 3 ? x / 3 + 0.5 : 1;
    case OP_GELU: return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    default: {
        double s = sigmoid(x);
        return s * (1 - s);
    }
    }
}

REF_KERNEL(ref_activation) {
    (void)err;
    (void)errcap;
    int64_t total = shape_numel(SH(op->out[0]));
    for (int64_t i = 0; i < total; i++) O(0)[i] = (float)act_forward(op->kind, T(0)[i], op->a.alpha);
    return true;
}

REF_KERNEL(ref_activation_bwd) {
    (void)err;
    (void)errcap;
    int64_t total = shape_numel(SH(op->out[0]));
    for (int64_t i = 0; i < total; i++) O(0)[i] = (float)(T(0)[i] * act_derivative(op->a.act_op, T(1)[i], op->a.alpha));
    return true;
}

REF_KERNEL(ref_add) {
    (void)err;
    (void)errcap;
    int64_t total = shape_numel(SH(op->out[0]));
    for (int64_t i = 0; i < total; i++) O(0)[i] = T(0)[i] + T(1)[i];
    return true;
}

REF_KERNEL(ref_channel_scale) {
    (void)err;
    (void)errcap;
    int64_t n, c, inner;
    nc_inner(SH(op->in[0]), &n, &c, &inner);
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t k = 0; k < inner; k++) O(0)[(i * c + ch) * inner + k] = T(0)[(i * c + ch) * inner + k] * T(1)[ch];
    return true;
}

/* channel_dot(a, b)[c] = sum over everything but the channel of a * b */
REF_KERNEL(ref_channel_dot) {
    (void)err;
    (void)errcap;
    int64_t n, c, inner;
    nc_inner(SH(op->in[0]), &n, &c, &inner);
    for (int64_t ch = 0; ch < c; ch++) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < inner; k++) acc += (double)T(0)[(i * c + ch) * inner + k] * T(1)[(i * c + ch) * inner + k];
        O(0)[ch] = (float)acc;
    }
    return true;
}
