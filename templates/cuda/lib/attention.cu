/* Library kernels: multi-head attention over image tokens and its gradient,
 * as runtime/ref_attention.c computes them (same fp64 operations in the same
 * order, so fp32 results equal the reference's bit for bit). qkv channels per
 * head: [q: key_dim | k: key_dim | v: head_dim]; tokens are row-major pixels
 * cut into `area` chunks of L that attend within themselves. Every thread
 * works alone (grid-stride, no shared memory, no atomics): thread i is
 * (image, head, channel group g of YL_ATT_G channels, token t), t fastest so
 * a warp reads consecutive tokens. Image n of operand s starts at n * a.bs[s]
 * (operand 3: a.bs3); element (channel c, token t) of an image at c * T + t,
 * or at t * C + c when a.cl is set (channels last; C: the operand's channels). */
/* channels one thread accumulates: fp64 registers, and few enough recomputed
 * probabilities per group */
#define YL_ATT_G 8

/* The geometry of one thread: image n, head h, group g, token t, its area's first token a0. */
struct YlAtt {
    long long n, t, a0, T, L, q, k, v; /* q, k, v: element offsets of the head's first q, k, v channel in qkv */
    /* the step between channels (every operand), and between tokens of qkv (and d_qkv) and of o, v, d_o, d_v */
    long long cs, qt, ot;
    int h, g;
};

__device__ __forceinline__ YlAtt yl_att(const YlArgs &a, long long i, int groups, long long qkv_bs) {
    YlAtt r;
    r.T = a.h * a.w;
    r.L = r.T / a.area;
    const long long per = (long long)a.heads * groups * r.T;
    r.n = i / per;
    long long rem = i - r.n * per;
    r.h = (int)(rem / ((long long)groups * r.T));
    rem -= (long long)r.h * groups * r.T;
    r.g = (int)(rem / r.T);
    r.t = rem - (long long)r.g * r.T;
    r.a0 = r.t / r.L * r.L;
    r.cs = a.cl ? 1 : r.T, r.qt = a.cl ? a.c : 1, r.ot = a.cl ? (long long)a.heads * a.head_dim : 1;
    r.q = r.n * qkv_bs + (long long)r.h * (2 * a.key_dim + a.head_dim) * r.cs;
    r.k = r.q + (long long)a.key_dim * r.cs;
    r.v = r.k + (long long)a.key_dim * r.cs;
    return r;
}

/* scale * (q of token i . k of token j), i and j absolute tokens: the
 * reference's scaled score (exact fp32 products summed in fp64) */
__device__ __forceinline__ double yl_score(const void *qkv, const YlArgs &a, const YlAtt &r, long long i, long long j) {
    double s = 0;
    for (int c = 0; c < a.key_dim; c++) s += (double)yk_ld_@TQ@(qkv, r.q + c * r.cs + i * r.qt) * yk_ld_@TQ@(qkv, r.k + c * r.cs + j * r.qt);
    return yl_dmul(s, a.scale);
}

/* The softmax statistics of query row i: its maximum score and the sum of exp(score - max) */
__device__ __forceinline__ void yl_row_stats(const void *qkv, const YlArgs &a, const YlAtt &r, long long i, double *mx, double *sum) {
    double m = yl_neg_inf(), s = 0;
    for (long long j = 0; j < r.L; j++) m = fmax(m, yl_score(qkv, a, r, i, r.a0 + j));
    for (long long j = 0; j < r.L; j++) s += exp(yl_score(qkv, a, r, i, r.a0 + j) - m);
    *mx = m, *sum = s;
}

#ifdef YL_ATTENTION
/* @NAME@: attention(qkv) -> o, v; thread (n, h, g, t) writes channels
 * [g * G, g * G + G) of head h's o and v at token t */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const int groups = (a.head_dim + YL_ATT_G - 1) / YL_ATT_G;
    YL_EACH(i) {
        const YlAtt r = yl_att(a, i, groups, a.bs[0]);
        const int d0 = r.g * YL_ATT_G, nd = a.head_dim - d0 < YL_ATT_G ? a.head_dim - d0 : YL_ATT_G;
        double mx, sum, acc[YL_ATT_G];
        yl_row_stats(a.t[0], a, r, r.t, &mx, &sum);
        for (int d = 0; d < YL_ATT_G; d++) acc[d] = 0;
        for (long long j = 0; j < r.L; j++) {
            const double p = exp(yl_score(a.t[0], a, r, r.t, r.a0 + j) - mx) / sum;
            for (int d = 0; d < nd; d++) acc[d] += yl_dmul(yk_ld_@T0@(a.t[0], r.v + (d0 + d) * r.cs + (r.a0 + j) * r.qt), p);
        }
        const long long o = ((long long)r.h * a.head_dim + d0) * r.cs + r.t * r.ot;
        for (int d = 0; d < nd; d++) {
            yk_st_@T1@(a.t[1], r.n * a.bs[1] + o + d * r.cs, (float)acc[d]);
            yk_st_@T2@(a.t[2], r.n * a.bs[2] + o + d * r.cs, yk_ld_@T0@(a.t[0], r.v + (d0 + d) * r.cs + r.t * r.qt));
        }
    }
}
#endif

#if defined(YL_ATTENTION_STATS) || defined(YL_ATTENTION_BWD)
/* attention_bwd(d_o, d_v, qkv) -> d_qkv, in two launches over the same
 * threads: groups of q channels (dq rows), of k channels (dk columns), of v
 * channels (dv columns). The first launch keeps, per query row, the
 * softmax's maximum and sum and rowsum(P * dP) in a.ws; the second reads
 * them, so a column's thread recomputes L probabilities, not L softmaxes. */
__device__ __forceinline__ int yl_att_groups(const YlArgs &a) { return 2 * ((a.key_dim + YL_ATT_G - 1) / YL_ATT_G) + (a.head_dim + YL_ATT_G - 1) / YL_ATT_G; }

/* dP[i][j] = d_o of token i . v of token j (exact products summed in fp64) */
__device__ __forceinline__ double yl_dp(const YlArgs &a, const YlAtt &r, long long i, long long j) {
    const long long ob = r.n * a.bs[0] + (long long)r.h * a.head_dim * r.cs;
    double s = 0;
    for (int d = 0; d < a.head_dim; d++) s += (double)yk_ld_@T0@(a.t[0], ob + d * r.cs + i * r.ot) * yk_ld_@T2@(a.t[2], r.v + d * r.cs + j * r.qt);
    return s;
}

/* the scratch of query row i: max, sum, rowsum */
__device__ __forceinline__ double *yl_ws(const YlArgs &a, const YlAtt &r, long long i) {
    return (double *)a.ws + ((r.n * a.heads + r.h) * r.T + i) * 3;
}
#endif

#ifdef YL_ATTENTION_STATS
/* @NAME@: the threads of group 0 write their query row's statistics */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    YL_EACH(i) {
        const YlAtt r = yl_att(a, i, yl_att_groups(a), a.bs[2]);
        if (r.g != 0) continue;
        double mx, sum, rowsum = 0;
        yl_row_stats(a.t[2], a, r, r.t, &mx, &sum);
        for (long long j = 0; j < r.L; j++) {
            const double p = exp(yl_score(a.t[2], a, r, r.t, r.a0 + j) - mx) / sum;
            rowsum += yl_dmul(p, yl_dp(a, r, r.t, r.a0 + j));
        }
        double *w = yl_ws(a, r, r.t);
        w[0] = mx, w[1] = sum, w[2] = rowsum;
    }
}
#endif

#ifdef YL_ATTENTION_BWD
/* @NAME@: dv = P^T d_o + d_v; dS = P * (dP - rowsum); dq = scale dS k;
 * dk = scale dS^T q. Each sum runs over the area in the reference's order. */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const int nq = (a.key_dim + YL_ATT_G - 1) / YL_ATT_G;
    YL_EACH(i) {
        const YlAtt r = yl_att(a, i, yl_att_groups(a), a.bs[2]);
        /* region 0: q, 1: k, 2: v; channels [c0, c0 + nc) of it */
        const int region = r.g < nq ? 0 : r.g < 2 * nq ? 1 : 2, width = region < 2 ? a.key_dim : a.head_dim;
        const int c0 = (r.g - region * nq) * YL_ATT_G, nc = width - c0 < YL_ATT_G ? width - c0 : YL_ATT_G;
        double acc[YL_ATT_G];
        const long long ob = (long long)r.h * a.head_dim * r.cs;
        for (int c = 0; c < YL_ATT_G; c++) acc[c] = region == 2 && c < nc ? (double)yk_ld_@T1@(a.t[1], r.n * a.bs[1] + ob + (c0 + c) * r.cs + r.t * r.ot) : 0.0;
        for (long long u = 0; u < r.L; u++) {
            /* the pair (query qi, key kj): this thread's row against key u, or query u against its column */
            const long long qi = region == 0 ? r.t : r.a0 + u, kj = region == 0 ? r.a0 + u : r.t;
            const double *w = yl_ws(a, r, qi);
            const double p = exp(yl_score(a.t[2], a, r, qi, kj) - w[0]) / w[1];
            if (region == 2) {
                for (int c = 0; c < nc; c++) acc[c] += yl_dmul(p, yk_ld_@T0@(a.t[0], r.n * a.bs[0] + ob + (c0 + c) * r.cs + qi * r.ot));
                continue;
            }
            const double ds = p * (yl_dp(a, r, qi, kj) - w[2]);
            /* dq reads k of the key, dk reads q of the query */
            const long long src = region == 0 ? r.k + kj * r.qt : r.q + qi * r.qt;
            for (int c = 0; c < nc; c++) acc[c] += yl_dmul(ds, yk_ld_@T2@(a.t[2], src + (c0 + c) * r.cs));
        }
        const long long base = r.n * a.bs3 + ((long long)r.h * (2 * a.key_dim + a.head_dim) + (long long)region * a.key_dim + c0) * r.cs + r.t * r.qt;
        for (int c = 0; c < nc; c++) yk_st_@T3@(a.t3, base + c * r.cs, (float)(region == 2 ? acc[c] : acc[c] * a.scale));
    }
}
#endif
