/* runtime/ref_optim.c — reference optimizer kernels, following PyTorch 1.13's
 * clip_grad_norm_ and its single-tensor SGD / AdamW: the same update order and
 * the same points where values are stored (rounded) in fp32. */
#include <math.h>

#include "ref_kernels.h"

/* total norm = norm of the per-tensor norms; coef = min(1, max / (norm + 1e-6)) */
REF_KERNEL(ref_grad_clip) {
    (void)err;
    (void)errcap;
    double total = 0;
    for (int i = 0; i < op->n_in; i++) {
        double sq = 0;
        for (int64_t k = 0, n = shape_numel(SH(op->in[i])); k < n; k++) sq += (double)T(i)[k] * T(i)[k];
        float tensor_norm = (float)sqrt(sq);
        total += (double)tensor_norm * tensor_norm;
    }
    float norm = (float)sqrt(total);
    double coef = op->a.max_norm / ((double)norm + 1e-6);
    O(0)[0] = (float)(coef < 1 ? coef : 1);
    O(1)[0] = norm;
    return true;
}

/* d = g*coef + wd*p;  buf = mu*buf + d;  d = d + mu*buf (Nesterov);  p -= lr*d */
REF_KERNEL(ref_sgd_step) {
    (void)err;
    (void)errcap;
    float *p = T(0), *mbuf = T(2);
    const float *grad = T(1);
    double lr = T(3)[op->a.group], mu = T(4)[0], coef = T(5)[0], wd = op->a.weight_decay;
    for (int64_t k = 0, n = shape_numel(SH(op->in[0])); k < n; k++) {
        float gk = (float)(grad[k] * coef);
        float d = wd != 0 ? (float)(gk + wd * p[k]) : gk;
        mbuf[k] = (float)(mu * mbuf[k] + d);
        if (op->a.nesterov) d = (float)(d + mu * mbuf[k]);
        else d = mbuf[k];
        p[k] = (float)(p[k] - lr * d);
    }
    return true;
}

/* p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps) */
REF_KERNEL(ref_adamw_step) {
    (void)err;
    (void)errcap;
    float *p = T(0), *m = T(2), *v = T(3);
    const float *grad = T(1);
    double lr = T(4)[op->a.group], b1 = T(5)[0], t = T(6)[0], coef = T(7)[0], b2 = op->a.beta2, eps = op->a.eps;
    double step_size = lr / (1 - pow(b1, t)), bc2_sqrt = sqrt(1 - pow(b2, t));
    for (int64_t k = 0, n = shape_numel(SH(op->in[0])); k < n; k++) {
        float gk = (float)(grad[k] * coef);
        p[k] = (float)(p[k] * (1 - lr * op->a.weight_decay));
        m[k] = (float)(b1 * m[k] + (1 - b1) * gk);
        v[k] = (float)(b2 * v[k] + (1 - b2) * (double)gk * gk);
        float denom = (float)(sqrt((double)v[k]) / bc2_sqrt + eps);
        p[k] = (float)(p[k] - step_size * m[k] / denom);
    }
    return true;
}
