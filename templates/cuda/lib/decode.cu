/* Library kernels: the validation graph's box decode, as runtime/ref_layout.c
 * computes it — the DFL expectation of each side's bins, and distances to
 * boxes in pixels. One thread per output element (dfl) or anchor
 * (dist2bbox), grid-stride; image n of operand s starts at n * a.bs[s]. */
#ifdef YL_DFL
/* @NAME@: dfl(logits [4 * reg_max, A], bins [reg_max]) -> [4, A]: per side
 * the softmax-weighted sum of the bins, in double and the reference's order */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const long long A = a.w, per = 4 * A;
    YL_EACH(i) {
        const long long n = i / per, r = i - n * per, side = r / A, an = r - side * A;
        const long long base = n * a.bs[0] + side * a.reg_max * A + an;
        double mx = yl_neg_inf(), sum = 0, dot = 0;
        for (int j = 0; j < a.reg_max; j++) mx = fmax(mx, (double)yk_ld_@T0@(a.t[0], base + j * A));
        for (int j = 0; j < a.reg_max; j++) {
            const double e = exp((double)yk_ld_@T0@(a.t[0], base + j * A) - mx);
            sum += e;
            dot += yl_dmul(e, (double)yk_ld_@T1@(a.t[1], j));
        }
        yk_st_@T2@(a.t[2], n * a.bs[2] + r, (float)(dot / sum));
    }
}
#endif
#ifdef YL_DIST2BBOX
/* @NAME@: dist2bbox(d [4, A]) -> boxes [4, A] in pixels: the anchor's level
 * and cell from its index, then (x1, y1, x2, y2) = centre -/+ d, as xywh or xyxy */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    const long long A = a.w;
    YL_EACH(i) {
        const long long n = i / A;
        long long an = i - n * A, k = an;
        int lv = 0;
        while (lv + 1 < a.nlevels && k >= (long long)a.level_h[lv] * a.level_w[lv]) k -= (long long)a.level_h[lv] * a.level_w[lv], lv++;
        const double ax = (double)(k % a.level_w[lv]) + 0.5, ay = (double)(k / a.level_w[lv]) + 0.5, s = a.strides[lv];
        const long long in = n * a.bs[0] + an, out = n * a.bs[1] + an;
        const double x1 = ax - (double)yk_ld_@T0@(a.t[0], in), y1 = ay - (double)yk_ld_@T0@(a.t[0], in + A);
        const double x2 = ax + (double)yk_ld_@T0@(a.t[0], in + 2 * A), y2 = ay + (double)yk_ld_@T0@(a.t[0], in + 3 * A);
        if (a.xywh) {
            yk_st_@T1@(a.t[1], out, (float)((x1 + x2) / 2 * s));
            yk_st_@T1@(a.t[1], out + A, (float)((y1 + y2) / 2 * s));
            yk_st_@T1@(a.t[1], out + 2 * A, (float)((x2 - x1) * s));
            yk_st_@T1@(a.t[1], out + 3 * A, (float)((y2 - y1) * s));
        } else {
            yk_st_@T1@(a.t[1], out, (float)(x1 * s));
            yk_st_@T1@(a.t[1], out + A, (float)(y1 * s));
            yk_st_@T1@(a.t[1], out + 2 * A, (float)(x2 * s));
            yk_st_@T1@(a.t[1], out + 3 * A, (float)(y2 * s));
        }
    }
}
#endif
