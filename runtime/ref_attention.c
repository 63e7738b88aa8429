/* runtime/ref_attention.c — reference multi-head attention over image tokens
 * (Ultralytics Attention and AAttn): qkv channels per head are
 * [q: key_dim | k: key_dim | v: head_dim]; tokens are row-major pixels cut
 * into `area` contiguous chunks that attend within themselves. Forward gives
 * o and v; backward recomputes the softmax from qkv. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_kernels.h"

typedef struct AttnGeom {
    int64_t n, tokens, per_area, qkv_c;
    int heads, kd, hd, area;
    double scale;
} AttnGeom;

static AttnGeom attn_geom(const Shape *qkv, const OpAttrs *a) {
    int64_t t = qkv->d[2] * qkv->d[3];
    return (AttnGeom){qkv->d[0], t, t / a->area, qkv->d[1], a->heads, a->key_dim, a->head_dim, a->area, a->scale};
}

/* channel ch of token t of image n in a [N, C, tokens] tensor */
#define AT(base, C, n, ch, t, T) ((base)[((n) * (C) + (ch)) * (T) + (t)])

/* P[i][j] = softmax_j(scale * sum_c q[c][i] k[c][j]) for one (image, head, area) */
static void attn_probs(const AttnGeom *g, const float *qkv, int64_t n, int h, int64_t t0, double *P) {
    int64_t L = g->per_area, qc = (int64_t)h * (2 * g->kd + g->hd), kc = qc + g->kd;
    for (int64_t i = 0; i < L; i++) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < L; j++) {
            double s = 0;
            for (int c = 0; c < g->kd; c++) s += (double)AT(qkv, g->qkv_c, n, qc + c, t0 + i, g->tokens) * AT(qkv, g->qkv_c, n, kc + c, t0 + j, g->tokens);
            P[i * L + j] = s * g->scale;
            mx = fmax(mx, P[i * L + j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < L; j++) sum += (P[i * L + j] = exp(P[i * L + j] - mx));
        for (int64_t j = 0; j < L; j++) P[i * L + j] /= sum;
    }
}

REF_KERNEL(ref_attention) {
    AttnGeom ag = attn_geom(SH(op->in[0]), &op->a);
    int64_t L = ag.per_area, oc = (int64_t)ag.heads * ag.hd;
    double *P = malloc((size_t)(L * L) * sizeof(double));
    if (!P) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int64_t n = 0; n < ag.n; n++)
        for (int h = 0; h < ag.heads; h++) {
            int64_t vc = (int64_t)h * (2 * ag.kd + ag.hd) + 2 * ag.kd;
            for (int ar = 0; ar < ag.area; ar++) {
                int64_t t0 = ar * L;
                attn_probs(&ag, T(0), n, h, t0, P);
                for (int d = 0; d < ag.hd; d++)
                    for (int64_t i = 0; i < L; i++) {
                        double acc = 0;
                        for (int64_t j = 0; j < L; j++) acc += AT(T(0), ag.qkv_c, n, vc + d, t0 + j, ag.tokens) * P[i * L + j];
                        AT(O(0), oc, n, (int64_t)h * ag.hd + d, t0 + i, ag.tokens) = (float)acc;
                        AT(O(1), oc, n, (int64_t)h * ag.hd + d, t0 + i, ag.tokens) = AT(T(0), ag.qkv_c, n, vc + d, t0 + i, ag.tokens);
                    }
            }
        }
    free(P);
    return true;
}

/* attention_bwd(d_o, d_v, qkv) -> d_qkv:
 *   dv = P^T d_o + d_v;  dP = d_o v^T;  dS = P * (dP - rowsum(P * dP));
 *   dq = scale dS k;  dk = scale dS^T q */
REF_KERNEL(ref_attention_bwd) {
    AttnGeom ag = attn_geom(SH(op->in[2]), &op->a);
    int64_t L = ag.per_area, oc = (int64_t)ag.heads * ag.hd;
    const float *dO = T(0), *dV = T(1), *qkv = T(2);
    float *dqkv = O(0);
    double *P = malloc((size_t)(L * L) * sizeof(double)), *dS = malloc((size_t)(L * L) * sizeof(double));
    if (!P || !dS) {
        free(P);
        free(dS);
        return snprintf(err, (size_t)errcap, "out of memory"), false;
    }
    for (int64_t n = 0; n < ag.n; n++)
        for (int h = 0; h < ag.heads; h++) {
            int64_t qc = (int64_t)h * (2 * ag.kd + ag.hd), kc = qc + ag.kd, vc = kc + ag.kd, o0 = (int64_t)h * ag.hd;
            for (int ar = 0; ar < ag.area; ar++) {
                int64_t t0 = ar * L;
                attn_probs(&ag, qkv, n, h, t0, P);
                for (int d = 0; d < ag.hd; d++)
                    for (int64_t j = 0; j < L; j++) {
                        double acc = AT(dV, oc, n, o0 + d, t0 + j, ag.tokens);
                        for (int64_t i = 0; i < L; i++) acc += P[i * L + j] * AT(dO, oc, n, o0 + d, t0 + i, ag.tokens);
                        AT(dqkv, ag.qkv_c, n, vc + d, t0 + j, ag.tokens) = (float)acc;
                    }
                for (int64_t i = 0; i < L; i++) {
                    double rowsum = 0;
                    for (int64_t j = 0; j < L; j++) {
                        double dp = 0;
                        for (int d = 0; d < ag.hd; d++) dp += (double)AT(dO, oc, n, o0 + d, t0 + i, ag.tokens) * AT(qkv, ag.qkv_c, n, vc + d, t0 + j, ag.tokens);
                        dS[i * L + j] = dp;
                        rowsum += P[i * L + j] * dp;
                    }
                    for (int64_t j = 0; j < L; j++) dS[i * L + j] = P[i * L + j] * (dS[i * L + j] - rowsum);
                }
                for (int c = 0; c < ag.kd; c++) {
                    for (int64_t i = 0; i < L; i++) {
                        double acc = 0;
                        for (int64_t j = 0; j < L; j++) acc += dS[i * L + j] * AT(qkv, ag.qkv_c, n, kc + c, t0 + j, ag.tokens);
                        AT(dqkv, ag.qkv_c, n, qc + c, t0 + i, ag.tokens) = (float)(acc * ag.scale);
                    }
                    for (int64_t j = 0; j < L; j++) {
                        double acc = 0;
                        for (int64_t i = 0; i < L; i++) acc += dS[i * L + j] * AT(qkv, ag.qkv_c, n, qc + c, t0 + i, ag.tokens);
                        AT(dqkv, ag.qkv_c, n, kc + c, t0 + j, ag.tokens) = (float)(acc * ag.scale);
                    }
                }
            }
        }
    free(P);
    free(dS);
    return true;
}
