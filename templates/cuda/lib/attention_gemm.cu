/* Library kernels around attention's cuBLASLt products (runtime/cuda/attention_gemm.h): the
 * softmax over one (head, area) slice's scores and its gradient, and v's copy between qkv and
 * the op's v. Scores S (and later dP) are fp32, P (and later dS) in T1; element (i, j) of image
 * n at n * L * L + j * L + i, so consecutive threads (consecutive rows i) read consecutive
 * addresses. Every thread works alone (grid-stride, no shared memory, no atomics); arithmetic
 * is fp32, as PyTorch's softmax under autocast. a.ws: the partials, [2][chunks][rows]. */
#define YL_ATT_CHUNK 32

#ifdef YL_ATT_PARTIALS
/* @NAME@: thread (chunk c, row r): over columns [c * 32, c * 32 + 32) of row r, the maximum of
 * S and the sum of exp(S - maximum); or (att_bwd) the sum of P * dP */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    YL_EACH(i) {
        const long long c = i / a.att_rows, r = i - c * a.att_rows, n = r / a.att_len, row = r - n * a.att_len;
        const long long base = n * a.att_len * a.att_len + row, j0 = c * YL_ATT_CHUNK;
        const long long j1 = j0 + YL_ATT_CHUNK < a.att_len ? j0 + YL_ATT_CHUNK : a.att_len;
        float *w = (float *)a.ws;
        if (a.att_bwd) {
            float s = 0;
            for (long long j = j0; j < j1; j++) s += yk_ld_@T1@(a.t[1], base + j * a.att_len) * yk_ld_@T0@(a.t[0], base + j * a.att_len);
            w[i] = s;
            continue;
        }
        float m = __int_as_float(0xff800000), s = 0;
        for (long long j = j0; j < j1; j++) m = fmaxf(m, yk_ld_@T0@(a.t[0], base + j * a.att_len));
        for (long long j = j0; j < j1; j++) s += yk_exp(yk_ld_@T0@(a.t[0], base + j * a.att_len) - m);
        w[i] = m;
        w[(a.total) + i] = s;
    }
}
#endif

#ifdef YL_ATT_ROWS
/* @NAME@: one thread per element (i, j): P = exp(S - M) / Z with M, Z its row's maximum and
 * sum combined over the chunks; or (att_bwd) dS = P * (dP - the row's sum of P * dP), in
 * place of P */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const long long chunks = (a.att_len + YL_ATT_CHUNK - 1) / YL_ATT_CHUNK, rows = a.att_rows, part = chunks * rows;
    const float *w = (const float *)a.ws;
    YL_EACH(e) {
        const long long ll = a.att_len * a.att_len, n = e / ll, rem = e - n * ll, r = n * a.att_len + rem % a.att_len;
        if (a.att_bwd) {
            float s = 0;
            for (long long c = 0; c < chunks; c++) s += w[c * rows + r];
            const float p = yk_ld_@T1@(a.t[1], e);
            yk_st_@T1@(a.t[1], e, p * (yk_ld_@T0@(a.t[0], e) - s));
            continue;
        }
        float m = __int_as_float(0xff800000), z = 0;
        for (long long c = 0; c < chunks; c++) m = fmaxf(m, w[c * rows + r]);
        for (long long c = 0; c < chunks; c++) z += w[part + c * rows + r] * yk_exp(w[c * rows + r] - m);
        yk_st_@T1@(a.t[1], e, yk_exp(yk_ld_@T0@(a.t[0], e) - m) / z);
    }
}
#endif

#ifdef YL_ATT_VCOPY
/* @NAME@: one thread per element of the v-shaped operand ([N, heads * head_dim, h, w]: the
 * forward's destination v, the gradient's source d_v), in its storage order: forward
 * v = qkv's v channels; gradient d_qkv's v channels = d_v (the products then add dV to it) */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const long long oc = (long long)a.heads * a.head_dim, plane = a.h * a.w;
    const int vs = a.att_bwd ? 0 : 1; /* the operand shaped like v */
    const bool vcl = a.cl >> vs & 1, qcl = a.cl >> (1 - vs) & 1;
    yl_each_pix(a, vcl, oc, a.h, a.w, [&](const YlPix &x) {
        const long long h = x.ch / a.head_dim, qch = h * (2 * a.key_dim + a.head_dim) + 2 * a.key_dim + (x.ch - h * a.head_dim);
        const long long at_v = x.n * a.bs[vs] + x.r, at_q = x.n * a.bs[1 - vs] + yl_at(qcl, qch, x.p, a.c, plane);
        if (a.att_bwd) yk_st_@T1@(a.t[1], at_q, yk_ld_@T0@(a.t[0], at_v));
        else yk_st_@T1@(a.t[1], at_v, yk_ld_@T0@(a.t[0], at_q));
    });
}
#endif
