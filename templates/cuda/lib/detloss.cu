/* Library kernels: the detection loss (Ultralytics v8DetectionLoss with its
 * TaskAlignedAssigner) on the device, phase by phase, as runtime/detloss.c
 * and runtime/detloss_assign.c compute it in double. A phase reads what
 * earlier launches left in the scratch (YlDetLossArgs); no atomics, and sums
 * are fixed-order partial sums, so results are reproducible. The per-anchor
 * phases are grid-stride loops of independent threads; the per-GT-row
 * phases (assign, normalise) give each row a block whose threads share its
 * cells, and finish is one block (cuda_detloss_geometry). One source per
 * phase, selected by its YL_DETLOSS_* macro. */
#define YL_DL_EACH(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
#ifdef YK_HOST_EMULATION
#define YL_DL_NOINLINE
#else
/* one compiled body (no per-call-site FMA contraction): the assigner's ranking, its
 * recomputations in later phases and every phase's reading of a GT row see the same bits */
#define YL_DL_NOINLINE __noinline__
#endif
#define YL_DL_EPS 1e-9 /* TaskAlignedAssigner eps: in-box margin and metric normaliser */

__device__ __forceinline__ double yl_dl_ld(const void *p, long long i) { return (double)yk_ld_@T0@(p, i); }
__device__ __forceinline__ double *yl_dl_f64(const YlDetLossArgs &a, long long off) { return (double *)(a.scratch + off); }
__device__ __forceinline__ int *yl_dl_i32(const YlDetLossArgs &a, long long off) { return (int *)(a.scratch + off); }

/* Anchor an: its level, cell, centre in grid units and stride (make_anchors, offset 0.5). */
struct YlDlAnchor {
    int level;
    long long cell;  /* its pixel within the level */
    long long cstep; /* elements between channels of the level tensor (H*W, or 1 channels last) */
    long long pix;   /* element of its channel 0 within an image: cell, or cell * C channels last */
    double x, y, stride;
};
__device__ __forceinline__ YlDlAnchor yl_dl_anchor(const YlDetLossArgs &a, int an) {
    YlDlAnchor r;
    r.level = 0;
    while (r.level + 1 < a.nl && an >= a.anchor_off[r.level + 1]) r.level++;
    const int w = a.w[r.level];
    r.cell = an - a.anchor_off[r.level];
    r.cstep = a.level_cs[r.level];
    r.pix = r.cell * a.level_ps[r.level];
    r.x = (double)(r.cell % w) + 0.5;
    r.y = (double)(r.cell / w) + 0.5;
    r.stride = a.stride[r.level];
    return r;
}
/* element of channel c of anchor r in image b of the level tensor */
__device__ __forceinline__ long long yl_dl_at(const YlDetLossArgs &a, const YlDlAnchor &r, int b, int c) {
    return b * a.level_bs[r.level] + c * r.cstep + r.pix;
}

__device__ __forceinline__ double yl_dl_sigmoid(double x) {
    if (x >= 0) return 1 / (1 + exp(-x));
    const double e = exp(x);
    return e / (1 + e);
}

/* Softmax expectation of one side's reg_max logits from element base (channel step `step`); prob may be NULL. */
__device__ double yl_dl_side(const void *lv, long long base, long long step, int reg_max, double *prob) {
    if (reg_max == 1) {
        if (prob) prob[0] = 1.0;
        return yl_dl_ld(lv, base);
    }
    double zmax = yl_dl_ld(lv, base), e[YL_DL_MAX_REG_MAX], sum = 0, d = 0;
    for (int j = 1; j < reg_max; j++) zmax = fmax(zmax, yl_dl_ld(lv, base + j * step));
    for (int j = 0; j < reg_max; j++) sum += e[j] = exp(yl_dl_ld(lv, base + j * step) - zmax);
    for (int j = 0; j < reg_max; j++) {
        const double p = e[j] / sum;
        if (prob) prob[j] = p;
        d += j * p;
    }
    return d;
}

/* logsumexp(z) - z_j over one side's logits (DFLoss' cross-entropy) */
__device__ double yl_dl_ce(const void *lv, long long base, long long step, int reg_max, int j) {
    double zmax = yl_dl_ld(lv, base), sum = 0;
    for (int i = 1; i < reg_max; i++) zmax = fmax(zmax, yl_dl_ld(lv, base + i * step));
    for (int i = 0; i < reg_max; i++) sum += exp(yl_dl_ld(lv, base + i * step) - zmax);
    return zmax + log(sum) - yl_dl_ld(lv, base + j * step);
}

/* torch.maximum / minimum give a tied gradient half to each side */
__device__ __forceinline__ double yl_dl_wmax(double x, double y) { return x > y ? 1.0 : x == y ? 0.5 : 0.0; }
__device__ __forceinline__ double yl_dl_wmin(double x, double y) { return x < y ? 1.0 : x == y ? 0.5 : 0.0; }

/* CIoU of xyxy boxes (bbox_iou, eps 1e-7, alpha a constant), term by term as
 * detloss_ciou_alpha; grad (may be NULL) receives d CIoU / d p. */
__device__ double yl_dl_ciou(const double *p, const double *q, double *grad) {
    const double eps = 1e-7, pi = 3.14159265358979323846;
    const double w1 = p[2] - p[0], h1 = p[3] - p[1] + eps, w2 = q[2] - q[0], h2 = q[3] - q[1] + eps;
    const double iw_raw = fmin(p[2], q[2]) - fmax(p[0], q[0]), ih_raw = fmin(p[3], q[3]) - fmax(p[1], q[1]);
    const double iw = iw_raw > 0 ? iw_raw : 0, ih = ih_raw > 0 ? ih_raw : 0, inter = iw * ih;
    const double uni = w1 * h1 + w2 * h2 - inter + eps, iou = inter / uni;
    const double cw = fmax(p[2], q[2]) - fmin(p[0], q[0]), ch = fmax(p[3], q[3]) - fmin(p[1], q[1]);
    const double c2 = cw * cw + ch * ch + eps;
    const double dxc = q[0] + q[2] - p[0] - p[2], dyc = q[1] + q[3] - p[1] - p[3];
    const double rho2 = (dxc * dxc + dyc * dyc) / 4;
    const double dtheta = atan(w2 / h2) - atan(w1 / h1), v = (4 / (pi * pi)) * dtheta * dtheta;
    const double alpha = v / (v - iou + (1 + eps));
    const double ciou = iou - (rho2 / c2 + v * alpha);
    if (!grad) return ciou;
    const double pass_w = iw_raw >= 0 ? 1.0 : 0.0, pass_h = ih_raw >= 0 ? 1.0 : 0.0;
    const double diw[4] = {-yl_dl_wmax(p[0], q[0]) * pass_w, 0, yl_dl_wmin(p[2], q[2]) * pass_w, 0};
    const double dih[4] = {0, -yl_dl_wmax(p[1], q[1]) * pass_h, 0, yl_dl_wmin(p[3], q[3]) * pass_h};
    const double dw1[4] = {-1, 0, 1, 0}, dh1[4] = {0, -1, 0, 1};
    const double dcw[4] = {-yl_dl_wmin(p[0], q[0]), 0, yl_dl_wmax(p[2], q[2]), 0};
    const double dch[4] = {0, -yl_dl_wmin(p[1], q[1]), 0, yl_dl_wmax(p[3], q[3])};
    const double drho2[4] = {-dxc / 2, -dyc / 2, -dxc / 2, -dyc / 2};
    const double r2 = w1 * w1 + h1 * h1, k = 8 / (pi * pi) * dtheta, dv_dw1 = -k * h1 / r2, dv_dh1 = k * w1 / r2;
    for (int i = 0; i < 4; i++) {
        const double dinter = ih * diw[i] + iw * dih[i], dunion = h1 * dw1[i] + w1 * dh1[i] - dinter;
        const double diou = (dinter - iou * dunion) / uni, dc2 = 2 * cw * dcw[i] + 2 * ch * dch[i];
        const double dratio = drho2[i] / c2 - rho2 * dc2 / (c2 * c2), dv = dv_dw1 * dw1[i] + dv_dh1 * dh1[i];
        grad[i] = diou - dratio - alpha * dv;
    }
    return ciou;
}

/* GT row g of image b: 0 = not a GT (beyond the count, or padding: coordinates sum to <= 0),
 * 1 = a valid GT, 2 = a bad row (a field not finite, a class id that is no index): the oracle
 * refuses those; here they select nothing and are counted. gt: xyxy pixels (zeros unless 0/1). */
YL_DL_NOINLINE __device__ int yl_dl_row(const YlDetLossArgs &a, int b, int g, double *gt, int *cls) {
    gt[0] = gt[1] = gt[2] = gt[3] = 0;
    *cls = 0;
    const long long n = a.counts[b];
    if (g >= n) return 0;
    const float *row = a.boxes + ((long long)b * a.max_boxes + g) * 5;
    for (int k = 0; k < 5; k++)
        if ((__float_as_uint(row[k]) & 0x7f800000u) == 0x7f800000u) return 2; /* inf or NaN */
    if (row[0] < 0 || row[0] >= (float)a.nc || row[0] != floorf(row[0])) return 2;
    const double cx = row[1] * a.img_w, cy = row[2] * a.img_h, w = row[3] * a.img_w, h = row[4] * a.img_h;
    gt[0] = cx - w / 2, gt[1] = cy - h / 2, gt[2] = cx + w / 2, gt[3] = cy + h / 2;
    *cls = (int)row[0];
    return gt[0] + gt[1] + gt[2] + gt[3] > 0 ? 1 : 0;
}

__device__ __forceinline__ bool yl_dl_inside(const double *gt, double x, double y, double stride) {
    const double ax = x * stride, ay = y * stride;
    return fmin(fmin(ax - gt[0], ay - gt[1]), fmin(gt[2] - ax, gt[3] - ay)) > YL_DL_EPS;
}

/* Cells of level l whose centres may lie inside gt (one cell of slack each
 * side; the exact test is yl_dl_inside). False when none. */
__device__ bool yl_dl_rect(const YlDetLossArgs &a, int l, const double *gt, int *x0, int *x1, int *y0, int *y1) {
    const double s = a.stride[l];
    const double fx0 = fmax(floor(gt[0] / s - 0.5) - 1, 0.0), fx1 = fmin(ceil(gt[2] / s - 0.5) + 1, (double)(a.w[l] - 1));
    const double fy0 = fmax(floor(gt[1] / s - 0.5) - 1, 0.0), fy1 = fmin(ceil(gt[3] / s - 0.5) + 1, (double)(a.h[l] - 1));
    if (!(fx0 <= fx1 && fy0 <= fy1)) return false;
    *x0 = (int)fx0, *x1 = (int)fx1, *y0 = (int)fy0, *y1 = (int)fy1;
    return true;
}

/* Alignment metric score^alpha * overlap^beta of GT gt (class cls) and anchor
 * an of image b, whose centre lies inside gt; *overlap = max(CIoU(gt, pred), 0). */
YL_DL_NOINLINE __device__ double yl_dl_pair(const YlDetLossArgs &a, int b, const double *gt, int cls, int an, double *overlap) {
    const YlDlAnchor r = yl_dl_anchor(a, an);
    const double score = yl_dl_sigmoid(yl_dl_ld(a.level[r.level], yl_dl_at(a, r, b, 4 * a.reg_max + cls)));
    const double ciou = yl_dl_ciou(gt, yl_dl_f64(a, a.off_pred) + ((long long)b * a.anchors + an) * 4, 0);
    *overlap = ciou > 0 ? ciou : 0;
    return pow(score, a.alpha) * pow(*overlap, a.beta);
}

#ifdef YL_DETLOSS_DECODE
/* @NAME@: per (image, anchor) the DFL expectation of each side and the xyxy box in pixels */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlDetLossArgs a) {
    YL_DL_EACH(i, (long long)a.batch * a.anchors) {
        const int b = (int)(i / a.anchors), an = (int)(i % a.anchors);
        const YlDlAnchor r = yl_dl_anchor(a, an);
        const void *lv = a.level[r.level];
        double d[4];
        for (int k = 0; k < 4; k++) d[k] = yl_dl_side(lv, yl_dl_at(a, r, b, k * a.reg_max), r.cstep, a.reg_max, 0);
        double *p = yl_dl_f64(a, a.off_pred) + i * 4;
        p[0] = (r.x - d[0]) * r.stride, p[1] = (r.y - d[1]) * r.stride, p[2] = (r.x + d[2]) * r.stride, p[3] = (r.y + d[3]) * r.stride;
    }
}
#endif

#ifdef YL_DETLOSS_ASSIGN
/* @NAME@: per (image, GT row), one block: the top-k anchors by metric,
 * largest first and the lower index first among equals; metrics are >= 0,
 * so when fewer than k are nonzero the rest are the lowest-indexed
 * zero-metric anchors. Each chosen anchor is positive when its centre is
 * inside the GT. A GT covers up to thousands of cells and every one costs a
 * CIoU and two powers, so the block's threads share them: thread t ranks
 * every blockDim-th cell of each level (in anchor order) into its own top
 * k, and k rounds then take the first of the threads' heads. Any fixed
 * split gives the same list: the order (metric, then index) is total. */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlDetLossArgs a) {
    __shared__ double head_m[YK_BLOCK];
    __shared__ int head_an[YK_BLOCK];
    const int t = threadIdx.x, nt = blockDim.x, k = a.topk;
    for (long long i = blockIdx.x; i < (long long)a.batch * a.max_boxes; i += gridDim.x) {
        const int b = (int)(i / a.max_boxes), g = (int)(i % a.max_boxes);
        int *top = yl_dl_i32(a, a.off_top) + i * k;
        double gt[4];
        int cls;
        /* the same row for every thread: the block takes the same branches and barriers */
        const int st = yl_dl_row(a, b, g, gt, &cls);
        if (t == 0) yl_dl_i32(a, a.off_row)[i] = st;
        if (st != 1) { /* topk_mask: an invalid row selects nothing */
            for (int s = t; s < k; s += nt) top[s] = -1;
            continue;
        }
        double tm[YL_DL_MAX_TOPK], ov;
        int ta[YL_DL_MAX_TOPK], filled = 0;
        /* this thread's candidates in increasing anchor order: level, row, column */
        for (int l = 0; l < a.nl; l++) {
            int x0, x1, y0, y1;
            if (!yl_dl_rect(a, l, gt, &x0, &x1, &y0, &y1)) continue;
            const int cw = x1 - x0 + 1, cells = cw * (y1 - y0 + 1);
            for (int j = t; j < cells; j += nt) {
                const int y = y0 + j / cw, x = x0 + j % cw;
                if (!yl_dl_inside(gt, x + 0.5, y + 0.5, a.stride[l])) continue;
                const int an = a.anchor_off[l] + y * a.w[l] + x;
                const double m = yl_dl_pair(a, b, gt, cls, an, &ov);
                if (!(m > 0)) continue; /* zero metrics rank after every nonzero one */
                if (filled == k && !(m > tm[k - 1])) continue;
                int at = filled < k ? filled : k - 1;
                while (at > 0 && m > tm[at - 1]) tm[at] = tm[at - 1], ta[at] = ta[at - 1], at--;
                tm[at] = m, ta[at] = an;
                if (filled < k) filled++;
            }
        }
        /* k rounds: every thread shows its next candidate (0: none left) and
         * all pick the same first; its owner moves on */
        int taken = 0, next = 0;
        for (; taken < k; taken++) {
            head_m[t] = next < filled ? tm[next] : 0.0;
            head_an[t] = next < filled ? ta[next] : 0;
            __syncthreads();
            int win = -1;
            for (int u = 0; u < nt; u++)
                if (head_m[u] > 0 && (win < 0 || head_m[u] > head_m[win] || (head_m[u] == head_m[win] && head_an[u] < head_an[win]))) win = u;
            const int an = win >= 0 ? head_an[win] : -1;
            __syncthreads(); /* the heads are read before the next round writes them */
            if (win < 0) break;
            if (t == 0) top[taken] = an;
            next += win == t;
        }
        if (t != 0) continue;
        /* the zero-metric slots: walk anchors from 0, skipping the nonzero ones */
        for (int an = 0; taken < k && an < a.anchors; an++) {
            const YlDlAnchor r = yl_dl_anchor(a, an);
            const bool in = yl_dl_inside(gt, r.x, r.y, r.stride);
            if (in && yl_dl_pair(a, b, gt, cls, an, &ov) > 0) continue;
            top[taken++] = in ? an : -1;
        }
        while (taken < k) top[taken++] = -1;
    }
}
#endif

#ifdef YL_DETLOSS_RESOLVE
/* @NAME@: per (image, anchor) its owner: the one row that chose it, or, when
 * several did, the row of largest overlap over all rows (the first wins,
 * even a row that did not choose it); the metric and overlap of that pair. */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlDetLossArgs a) {
    YL_DL_EACH(i, (long long)a.batch * a.anchors) {
        const int b = (int)(i / a.anchors), an = (int)(i % a.anchors), k = a.topk;
        const YlDlAnchor r = yl_dl_anchor(a, an);
        const long long cnt = a.counts[b];
        const int n = cnt < 0 ? 0 : cnt > a.max_boxes ? a.max_boxes : (int)cnt;
        const int *rows = yl_dl_i32(a, a.off_row) + (long long)b * a.max_boxes;
        double gt[4], ov;
        int cls, claims = 0, owner = -1;
        for (int g = 0; g < n; g++) {
            if (rows[g] != 1 || yl_dl_row(a, b, g, gt, &cls) != 1 || !yl_dl_inside(gt, r.x, r.y, r.stride)) continue;
            const int *top = yl_dl_i32(a, a.off_top) + ((long long)b * a.max_boxes + g) * k;
            for (int s = 0; s < k; s++)
                if (top[s] == an) {
                    if (!claims++) owner = g;
                    break;
                }
        }
        if (claims > 1) {
            double best = -1;
            for (int g = 0; g < n; g++) {
                double o = 0;
                if (rows[g] == 1 && yl_dl_row(a, b, g, gt, &cls) == 1 && yl_dl_inside(gt, r.x, r.y, r.stride)) yl_dl_pair(a, b, gt, cls, an, &o);
                if (g == 0 || o > best) best = o, owner = g;
            }
        }
        double *pair = yl_dl_f64(a, a.off_pair) + i * 2;
        pair[0] = pair[1] = 0;
        if (owner >= 0 && rows[owner] == 1 && yl_dl_row(a, b, owner, gt, &cls) == 1 && yl_dl_inside(gt, r.x, r.y, r.stride))
            pair[0] = yl_dl_pair(a, b, gt, cls, an, &pair[1]);
        yl_dl_i32(a, a.off_owner)[i] = owner;
    }
}
#endif

#ifdef YL_DETLOSS_NORMALISE
/* @NAME@: per (image, GT row), one block: the largest metric and overlap
 * over its positives. Those with a nonzero value lie inside the box, so
 * only its cells are visited, every blockDim-th by each thread; the rest
 * add nothing to a maximum that starts at 0 (fmax: exact in any order). */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlDetLossArgs a) {
    __shared__ double max_m[YK_BLOCK], max_o[YK_BLOCK];
    const int t = threadIdx.x, nt = blockDim.x;
    for (long long i = blockIdx.x; i < (long long)a.batch * a.max_boxes; i += gridDim.x) {
        const int b = (int)(i / a.max_boxes), g = (int)(i % a.max_boxes);
        double gt[4], mm = 0, mo = 0;
        int cls;
        if (yl_dl_i32(a, a.off_row)[i] == 1 && yl_dl_row(a, b, g, gt, &cls) == 1)
            for (int l = 0; l < a.nl; l++) {
                int x0, x1, y0, y1;
                if (!yl_dl_rect(a, l, gt, &x0, &x1, &y0, &y1)) continue;
                const int cw = x1 - x0 + 1, cells = cw * (y1 - y0 + 1);
                for (int j = t; j < cells; j += nt) {
                    const int y = y0 + j / cw, x = x0 + j % cw;
                    const long long ba = (long long)b * a.anchors + a.anchor_off[l] + y * a.w[l] + x;
                    if (yl_dl_i32(a, a.off_owner)[ba] != g || !yl_dl_inside(gt, x + 0.5, y + 0.5, a.stride[l])) continue;
                    const double *pair = yl_dl_f64(a, a.off_pair) + ba * 2;
                    mm = fmax(mm, pair[0]);
                    mo = fmax(mo, pair[1]);
                }
            }
        max_m[t] = mm, max_o[t] = mo;
        __syncthreads();
        if (t == 0) {
            for (int u = 1; u < nt; u++) mm = fmax(mm, max_m[u]), mo = fmax(mo, max_o[u]);
            double *gm = yl_dl_f64(a, a.off_gmax) + i * 2;
            gm[0] = mm, gm[1] = mo;
        }
        __syncthreads(); /* read before the next row writes */
    }
}
#endif

#if defined(YL_DETLOSS_TERMS) || defined(YL_DETLOSS_GRAD)
/* The foreground anchor's soft target t, class, target box (grid units) and decoded box. */
struct YlDlFg {
    double t, target[4], pred[4], dist[4];
    int label;
};
__device__ bool yl_dl_fg(const YlDetLossArgs &a, long long i, int b, const YlDlAnchor &r, YlDlFg *f) {
    const int owner = yl_dl_i32(a, a.off_owner)[i];
    f->t = 0, f->label = -1;
    if (owner < 0) return false;
    const double *pair = yl_dl_f64(a, a.off_pair) + i * 2, *gm = yl_dl_f64(a, a.off_gmax) + ((long long)b * a.max_boxes + owner) * 2;
    f->t = pair[0] * gm[1] / (gm[0] + YL_DL_EPS);
    double gt[4];
    yl_dl_row(a, b, owner, gt, &f->label);
    for (int k = 0; k < 4; k++) f->target[k] = gt[k] / r.stride;
    const void *lv = a.level[r.level];
    for (int k = 0; k < 4; k++) f->dist[k] = yl_dl_side(lv, yl_dl_at(a, r, b, k * a.reg_max), r.cstep, a.reg_max, 0);
    f->pred[0] = r.x - f->dist[0], f->pred[1] = r.y - f->dist[1], f->pred[2] = r.x + f->dist[2], f->pred[3] = r.y + f->dist[3];
    return true;
}
/* DFL target split: clamp to [0, reg_max - 1.01], bins lo and lo + 1 */
__device__ __forceinline__ double yl_dl_split(double dist, int reg_max, int *lo) {
    const double hi = reg_max - 1 - 0.01, d = dist < 0 ? 0 : dist > hi ? hi : dist;
    *lo = (int)d;
    return (*lo + 1) - d; /* w_lo; w_hi = 1 - w_lo */
}
#endif

#ifdef YL_DETLOSS_TERMS
/* @NAME@: per (image, anchor) t, its BCE over the classes, (1 - CIoU) t and
 * the DFL term t * mean over sides; zero terms for background. */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlDetLossArgs a) {
    YL_DL_EACH(i, (long long)a.batch * a.anchors) {
        const int b = (int)(i / a.anchors), an = (int)(i % a.anchors);
        const YlDlAnchor r = yl_dl_anchor(a, an);
        const void *lv = a.level[r.level];
        YlDlFg f;
        const bool fg = yl_dl_fg(a, i, b, r, &f);
        double cls = 0, box = 0, dfl = 0;
        for (int c = 0; c < a.nc; c++) {
            const double x = yl_dl_ld(lv, yl_dl_at(a, r, b, 4 * a.reg_max + c)), target = fg && c == f.label ? f.t : 0.0;
            cls += fmax(x, 0.0) - x * target + log1p(exp(-fabs(x)));
        }
        if (fg) {
            box = (1.0 - yl_dl_ciou(f.pred, f.target, 0)) * f.t;
            if (a.reg_max > 1) {
                const double td[4] = {r.x - f.target[0], r.y - f.target[1], f.target[2] - r.x, f.target[3] - r.y};
                double s = 0;
                for (int k = 0; k < 4; k++) {
                    int lo;
                    const double wl = yl_dl_split(td[k], a.reg_max, &lo), wh = 1 - wl;
                    const long long base = yl_dl_at(a, r, b, k * a.reg_max);
                    s += wl * yl_dl_ce(lv, base, r.cstep, a.reg_max, lo) + wh * yl_dl_ce(lv, base, r.cstep, a.reg_max, lo + 1);
                }
                dfl = s / 4 * f.t;
            }
        }
        double *term = yl_dl_f64(a, a.off_term) + i * 4;
        term[0] = fg ? f.t : 0, term[1] = cls, term[2] = box, term[3] = dfl;
    }
}
#endif

#ifdef YL_DETLOSS_REDUCE
/* @NAME@: per (image, chunk of YL_DL_CHUNK anchors) the sums of t, the three
 * terms and the foreground count, in anchor order */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlDetLossArgs a) {
    YL_DL_EACH(i, (long long)a.batch * a.chunks) {
        const long long b = i / a.chunks, lo = (i % a.chunks) * YL_DL_CHUNK;
        const long long hi = lo + YL_DL_CHUNK < a.anchors ? lo + YL_DL_CHUNK : a.anchors;
        double s[5] = {0, 0, 0, 0, 0};
        for (long long an = lo; an < hi; an++) {
            const double *term = yl_dl_f64(a, a.off_term) + (b * a.anchors + an) * 4;
            for (int k = 0; k < 4; k++) s[k] += term[k];
            s[4] += yl_dl_i32(a, a.off_owner)[b * a.anchors + an] >= 0;
        }
        for (int k = 0; k < 5; k++) yl_dl_f64(a, a.off_part)[i * 5 + k] = s[k];
    }
}
#endif

#ifdef YL_DETLOSS_FINISH
/* @NAME@: one block: the partial sums (thread t adds every blockDim-th in
 * order, thread 0 adds the threads' sums in thread order: a fixed order for
 * a fixed block), the normaliser max(sum t, 1), the items and the total
 * (when a.total is set; NaN when a row or count is bad), and the count of
 * bad rows and counts */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlDetLossArgs a) {
    __shared__ double sums_[YK_BLOCK][6];
    const int t = threadIdx.x, nt = blockDim.x;
    if (blockIdx.x != 0) return;
    double s[6] = {0, 0, 0, 0, 0, 0}; /* score, cls, box, DFL, fg count, bad rows and counts */
    for (long long p = t; p < (long long)a.batch * a.chunks; p += nt)
        for (int k = 0; k < 5; k++) s[k] += yl_dl_f64(a, a.off_part)[p * 5 + k];
    for (long long r = t; r < (long long)a.batch * a.max_boxes; r += nt) s[5] += yl_dl_i32(a, a.off_row)[r] == 2;
    for (int b = t; b < a.batch; b += nt) s[5] += a.counts[b] < 0 || a.counts[b] > a.max_boxes;
    for (int k = 0; k < 6; k++) sums_[t][k] = s[k];
    __syncthreads();
    if (t != 0) return;
    for (int u = 1; u < nt; u++)
        for (int k = 0; k < 6; k++) s[k] += sums_[u][k];
    const double bad = s[5], norm = fmax(s[0], 1.0);
    const double box = a.gain_box * (s[2] / norm), cls = a.gain_cls * (s[1] / norm), dfl = a.gain_dfl * (s[3] / norm);
    double *out = yl_dl_f64(a, a.off_sum);
    out[0] = s[0], out[1] = s[1], out[2] = s[2], out[3] = s[3], out[4] = s[4], out[5] = norm, out[6] = bad, out[7] = 0;
    /* a row the oracle would refuse: a NaN loss, so the trainer's
     * not-finite check stops the run instead of training on it */
    const float nan = __uint_as_float(0x7fc00000u);
    if (a.total) a.total[0] = bad > 0 ? nan : (float)(a.batch * (box + cls + dfl));
    if (a.items) a.items[0] = bad > 0 ? nan : (float)box, a.items[1] = bad > 0 ? nan : (float)cls, a.items[2] = bad > 0 ? nan : (float)dfl;
}
#endif

#ifdef YL_DETLOSS_GRAD
/* @NAME@: per (image, anchor) d total / d every channel of its cell: the
 * class logits always, the box / DFL logits of foreground anchors (zero for
 * background), each rounded to fp32 as the oracle stores it, times d_total
 * in fp32, then stored */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlDetLossArgs a) {
    const double norm = yl_dl_f64(a, a.off_sum)[5];
    const double k_cls = a.batch * a.gain_cls / norm, k_box = a.batch * a.gain_box / norm, k_dfl = a.batch * a.gain_dfl / norm;
    const float seed = yk_ld_@T2@(a.d_total, 0);
    YL_DL_EACH(i, (long long)a.batch * a.anchors) {
        const int b = (int)(i / a.anchors), an = (int)(i % a.anchors), rm = a.reg_max;
        const YlDlAnchor r = yl_dl_anchor(a, an);
        const void *lv = a.level[r.level];
        void *gv = a.grad[r.level];
        const long long gbase = b * a.grad_bs[r.level] + r.cell * a.grad_ps[r.level], gstep = a.grad_cs[r.level];
        YlDlFg f;
        const bool fg = yl_dl_fg(a, i, b, r, &f);
        for (int c = 0; c < a.nc; c++) {
            const double x = yl_dl_ld(lv, yl_dl_at(a, r, b, 4 * rm + c)), target = fg && c == f.label ? f.t : 0.0;
            yk_st_@T1@(gv, gbase + (4 * rm + c) * gstep, (float)(k_cls * (yl_dl_sigmoid(x) - target)) * seed);
        }
        if (!fg) {
            for (int c = 0; c < 4 * rm; c++) yk_st_@T1@(gv, gbase + c * gstep, 0.0f * seed);
            continue;
        }
        double dc[4];
        yl_dl_ciou(f.pred, f.target, dc);
        /* x1 = px - d_l, y1 = py - d_t, x2 = px + d_r, y2 = py + d_b */
        const double dd[4] = {k_box * f.t * dc[0], k_box * f.t * dc[1], -k_box * f.t * dc[2], -k_box * f.t * dc[3]};
        if (rm == 1) {
            for (int k = 0; k < 4; k++) yk_st_@T1@(gv, gbase + k * gstep, (float)dd[k] * seed);
            continue;
        }
        const double td[4] = {r.x - f.target[0], r.y - f.target[1], f.target[2] - r.x, f.target[3] - r.y};
        const double k_side = k_dfl * f.t / 4;
        for (int k = 0; k < 4; k++) {
            double prob[YL_DL_MAX_REG_MAX];
            yl_dl_side(lv, yl_dl_at(a, r, b, k * rm), r.cstep, rm, prob);
            int lo;
            const double wl = yl_dl_split(td[k], rm, &lo), wh = 1 - wl;
            for (int j = 0; j < rm; j++) {
                const double p = prob[j];
                double gr = dd[k] * p * (j - f.dist[k]);
                gr += k_side * ((wl + wh) * p - (j == lo ? wl : 0) - (j == lo + 1 ? wh : 0));
                yk_st_@T1@(gv, gbase + (k * rm + j) * gstep, (float)gr * seed);
            }
        }
    }
}
#endif
