/* runtime/detloss.c — the oracle detection loss (Ultralytics v8DetectionLoss,
 * BboxLoss, DFLoss): validation, decode, CIoU with its gradient, BCE/box/DFL
 * terms and backward. The assigner is in detloss_assign.c. Touches nothing else. */
#include "../ir/diag.h"
#include "detloss.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void detloss_config_default(DetLossConfig *cfg, int nc, int nl, const int *level_h, const int *level_w, const float *stride) {
    memset(cfg, 0, sizeof *cfg);
    cfg->nc = nc;
    cfg->reg_max = 16;
    cfg->nl = nl;
    for (int i = 0; i < nl && i < DETLOSS_MAX_LEVELS; i++) {
        cfg->level_h[i] = level_h[i];
        cfg->level_w[i] = level_w[i];
        cfg->stride[i] = stride[i];
    }
    cfg->topk = 10;
    cfg->alpha = 0.5f;
    cfg->beta = 6.0f;
    cfg->gain_box = 7.5f;
    cfg->gain_cls = 0.5f;
    cfg->gain_dfl = 1.5f;
}

bool detloss_check(const DetLossConfig *cfg, const float *const *levels, const DetTargets *t, char *err, int errcap) {
    if (!cfg || !levels || !t) return errf(err, errcap, "detloss: NULL config, levels or targets");
    if (cfg->nc < 1) return errf(err, errcap, "detloss: nc %d must be >= 1", cfg->nc);
    if (cfg->reg_max < 1 || cfg->reg_max > DETLOSS_MAX_REG_MAX)
        return errf(err, errcap, "detloss: reg_max %d outside 1..%d", cfg->reg_max, DETLOSS_MAX_REG_MAX);
    if (cfg->nl < 1 || cfg->nl > DETLOSS_MAX_LEVELS) return errf(err, errcap, "detloss: nl %d outside 1..%d", cfg->nl, DETLOSS_MAX_LEVELS);
    long anchors = 0;
    for (int i = 0; i < cfg->nl; i++) {
        if (cfg->level_h[i] < 1 || cfg->level_w[i] < 1)
            return errf(err, errcap, "detloss: level %d size %dx%d", i, cfg->level_h[i], cfg->level_w[i]);
        if (!(cfg->stride[i] > 0) || !isfinite(cfg->stride[i])) return errf(err, errcap, "detloss: level %d stride must be > 0", i);
        if (!levels[i]) return errf(err, errcap, "detloss: level %d output is NULL", i);
        anchors += (long)cfg->level_h[i] * cfg->level_w[i];
        if (anchors > 100000000L) return errf(err, errcap, "detloss: too many anchors");
    }
    /* torch.topk raises when k exceeds the anchor count; so do we */
    if (cfg->topk < 1 || cfg->topk > anchors) return errf(err, errcap, "detloss: topk %d outside 1..%ld anchors", cfg->topk, anchors);
    if (!isfinite(cfg->alpha) || !isfinite(cfg->beta) || !isfinite(cfg->gain_box) || !isfinite(cfg->gain_cls) || !isfinite(cfg->gain_dfl))
        return errf(err, errcap, "detloss: alpha, beta and gains must be finite");
    return detloss_check_targets(t, cfg->nc, err, errcap);
}

bool detloss_targets_from_i64(int batch, int max_boxes, const int64_t *counts64, const float *boxes, DetTargets *t, int **counts, char *err, int errcap) {
    *counts = malloc(sizeof(int) * ((size_t)batch + 1));
    if (!*counts) return errf(err, errcap, "out of memory");
    for (int b = 0; b < batch; b++) {
        if (counts64[b] < 0 || counts64[b] > max_boxes) {
            free(*counts);
            *counts = NULL;
            return errf(err, errcap, "image %d has %lld boxes; 0..%d allowed", b, (long long)counts64[b], max_boxes);
        }
        (*counts)[b] = (int)counts64[b];
    }
    *t = (DetTargets){.batch = batch, .max_boxes = max_boxes, .count = *counts, .boxes = boxes};
    return true;
}

bool detloss_check_targets(const DetTargets *t, int nc, char *err, int errcap) {
    if (t->batch < 1) return errf(err, errcap, "detloss: batch %d must be >= 1", t->batch);
    if (t->max_boxes < 0) return errf(err, errcap, "detloss: max_boxes %d must be >= 0", t->max_boxes);
    if (t->max_boxes > 0 && (!t->count || !t->boxes)) return errf(err, errcap, "detloss: NULL count or boxes");
    for (int b = 0; b < t->batch; b++) {
        int n = t->count ? t->count[b] : 0;
        if (n < 0 || n > t->max_boxes) return errf(err, errcap, "detloss: image %d: count %d outside 0..%d", b, n, t->max_boxes);
        for (int g = 0; g < n; g++) {
            const float *row = t->boxes + ((size_t)b * t->max_boxes + g) * 5;
            for (int k = 0; k < 5; k++)
                if (!isfinite(row[k])) return errf(err, errcap, "detloss: image %d box %d: field %d is not finite", b, g, k);
            /* upstream indexes scores with long(cls): a fraction or out-of-range id is a data error */
            if (row[0] < 0 || row[0] >= (float)nc || row[0] != floorf(row[0]))
                return errf(err, errcap, "detloss: image %d box %d: class id %g outside 0..%d", b, g, (double)row[0], nc - 1);
        }
    }
    return true;
}

void detloss_head_init(DetHead *head, const DetLossConfig *cfg) {
    head->cfg = cfg;
    head->channels = 4 * cfg->reg_max + cfg->nc;
    head->offset[0] = 0;
    for (int i = 0; i < cfg->nl; i++) head->offset[i + 1] = head->offset[i] + cfg->level_h[i] * cfg->level_w[i];
    head->anchors = head->offset[cfg->nl];
}

DetAnchorRef detloss_anchor(const DetHead *head, int b, int a) {
    const DetLossConfig *cfg = head->cfg;
    int level = 0;
    while (a >= head->offset[level + 1]) level++;
    int cell = a - head->offset[level], w = cfg->level_w[level];
    size_t plane = (size_t)cfg->level_h[level] * (size_t)w;
    DetAnchorRef r;
    r.level = level;
    r.step = plane;
    r.base = (size_t)b * (size_t)head->channels * plane + (size_t)cell;
    r.x = cell % w + 0.5; /* make_anchors: grid_cell_offset 0.5 */
    r.y = cell / w + 0.5;
    r.stride = cfg->stride[level];
    return r;
}

double detloss_side_distance(const float *logit, size_t step, int reg_max, double *prob) {
    if (reg_max == 1) {
        if (prob) prob[0] = 1.0;
        return logit[0];
    }
    double zmax = logit[0];
    for (int j = 1; j < reg_max; j++) zmax = fmax(zmax, (double)logit[(size_t)j * step]);
    double e[DETLOSS_MAX_REG_MAX], sum = 0;
    for (int j = 0; j < reg_max; j++) sum += e[j] = exp(logit[(size_t)j * step] - zmax);
    double d = 0;
    for (int j = 0; j < reg_max; j++) {
        double p = e[j] / sum;
        if (prob) prob[j] = p;
        d += j * p;
    }
    return d;
}

/* torch.maximum/minimum hand a tied gradient half to each side; the first
 * argument's share is returned. */
static double wins_max(double a, double b) { return a > b ? 1.0 : a == b ? 0.5 : 0.0; }
static double wins_min(double a, double b) { return a < b ? 1.0 : a == b ? 0.5 : 0.0; }

/* Arithmetic follows metrics.py bbox_iou(xywh=False, CIoU=True) term by term.
 * With a = box1 (x1 y1 x2 y2), b = box2 fixed, alpha held constant:
 *   IoU = I / U,  U = w1 h1 + w2 h2 - I + eps       dIoU = (dI - IoU dU) / U
 *   I = iw ih with iw = clamp(min(x2) - max(x1), 0)   (clamp passes grad where >= 0)
 *   R = rho2 / c2:  drho2/dx1a = drho2/dx2a = -(x1b + x2b - x1a - x2a) / 2,
 *                   dR = drho2 / c2 - R dc2 / c2,  dc2 = 2 cw dcw + 2 ch dch
 *   v = 4/pi^2 (atan(w2/h2) - atan(w1/h1))^2:
 *       dv/dw1 = -8/pi^2 D h1 / (w1^2 + h1^2),  dv/dh1 = +8/pi^2 D w1 / (w1^2 + h1^2)
 *   dCIoU = dIoU - dR - alpha dv. */
double detloss_ciou(const double box1[4], const double box2[4], double grad_box1[4]) {
    return detloss_ciou_alpha(box1, box2, NULL, NULL, grad_box1);
}

double detloss_ciou_alpha(const double box1[4], const double box2[4], const double *fixed_alpha, double *alpha_used,
                          double grad_box1[4]) {
    const double eps = 1e-7, pi = 3.14159265358979323846;
    const double ax1 = box1[0], ay1 = box1[1], ax2 = box1[2], ay2 = box1[3];
    const double bx1 = box2[0], by1 = box2[1], bx2 = box2[2], by2 = box2[3];
    double w1 = ax2 - ax1, h1 = ay2 - ay1 + eps;
    double w2 = bx2 - bx1, h2 = by2 - by1 + eps;
    double iw_raw = fmin(ax2, bx2) - fmax(ax1, bx1), ih_raw = fmin(ay2, by2) - fmax(ay1, by1);
    double iw = iw_raw > 0 ? iw_raw : 0, ih = ih_raw > 0 ? ih_raw : 0;
    double inter = iw * ih;
    double uni = w1 * h1 + w2 * h2 - inter + eps;
    double iou = inter / uni;
    double cw = fmax(ax2, bx2) - fmin(ax1, bx1), ch = fmax(ay2, by2) - fmin(ay1, by1);
    double c2 = cw * cw + ch * ch + eps;
    double dxc = bx1 + bx2 - ax1 - ax2, dyc = by1 + by2 - ay1 - ay2;
    double rho2 = (dxc * dxc + dyc * dyc) / 4;
    double dtheta = atan(w2 / h2) - atan(w1 / h1);
    double v = (4 / (pi * pi)) * dtheta * dtheta;
    double alpha = fixed_alpha ? *fixed_alpha : v / (v - iou + (1 + eps));
    if (alpha_used) *alpha_used = alpha;
    double ciou = iou - (rho2 / c2 + v * alpha);
    if (!grad_box1) return ciou;

    /* d iw, d ih with respect to (x1, y1, x2, y2) of box1 */
    double pass_w = iw_raw >= 0 ? 1.0 : 0.0, pass_h = ih_raw >= 0 ? 1.0 : 0.0;
    double diw[4] = {-wins_max(ax1, bx1) * pass_w, 0, wins_min(ax2, bx2) * pass_w, 0};
    double dih[4] = {0, -wins_max(ay1, by1) * pass_h, 0, wins_min(ay2, by2) * pass_h};
    double dw1[4] = {-1, 0, 1, 0}, dh1[4] = {0, -1, 0, 1};
    double dcw[4] = {-wins_min(ax1, bx1), 0, wins_max(ax2, bx2), 0};
    double dch[4] = {0, -wins_min(ay1, by1), 0, wins_max(ay2, by2)};
    double drho2[4] = {-dxc / 2, -dyc / 2, -dxc / 2, -dyc / 2};
    double r2 = w1 * w1 + h1 * h1, k = 8 / (pi * pi) * dtheta;
    double dv_dw1 = -k * h1 / r2, dv_dh1 = k * w1 / r2;
    for (int i = 0; i < 4; i++) {
        double dinter = ih * diw[i] + iw * dih[i];
        double dunion = h1 * dw1[i] + w1 * dh1[i] - dinter;
        double diou = (dinter - iou * dunion) / uni;
        double dc2 = 2 * cw * dcw[i] + 2 * ch * dch[i];
        double dratio = drho2[i] / c2 - rho2 * dc2 / (c2 * c2);
        double dv = dv_dw1 * dw1[i] + dv_dh1 * dh1[i];
        grad_box1[i] = diou - dratio - alpha * dv;
    }
    return ciou;
}

DflSplit detloss_dfl_split(double distance, int reg_max) {
    /* bbox2dist and DFLoss both clamp to reg_max - 1 - 0.01 */
    double hi = reg_max - 1 - 0.01;
    DflSplit s;
    s.distance = distance < 0 ? 0 : distance > hi ? hi : distance;
    s.lo = (int)s.distance; /* .long() truncates; D >= 0 */
    s.w_lo = (s.lo + 1) - s.distance;
    s.w_hi = 1 - s.w_lo; /* upstream: wr = 1 - wl, not D - lo */
    return s;
}

static double sigmoid(double x) {
    if (x >= 0) return 1 / (1 + exp(-x));
    double e = exp(x);
    return e / (1 + e);
}

/* BCEWithLogits(x, t) = max(x, 0) - x t + log(1 + exp(-|x|)) */
static double bce_with_logits(double x, double t) { return fmax(x, 0) - x * t + log1p(exp(-fabs(x))); }

/* logsumexp(z) - z_j over one side's reg_max logits */
static double cross_entropy(const float *logit, size_t step, int reg_max, int j) {
    double zmax = logit[0];
    for (int i = 1; i < reg_max; i++) zmax = fmax(zmax, (double)logit[(size_t)i * step]);
    double sum = 0;
    for (int i = 0; i < reg_max; i++) sum += exp(logit[(size_t)i * step] - zmax);
    return zmax + log(sum) - logit[(size_t)j * step];
}

void detloss_loss_assigned(const DetLossConfig *cfg, const float *const *levels, const DetAssignment *as, DetLossResult *out,
                           float *const *grads) {
    detloss_loss_assigned_ex(cfg, levels, as, NULL, NULL, out, grads);
}

/* What every anchor's terms share: the inputs, the gradients' scales, and
 * whether the loss' value is wanted (not by a gradient-only call). */
typedef struct LossCtx {
    const DetLossConfig *cfg;
    DetHead head;
    const float *const *levels;
    const DetAssignment *as;
    const double *alpha_in;
    double *alpha_out;
    float *const *grads;
    double k_cls, k_box, k_dfl;
    bool value;
} LossCtx;

/* Anchor ba's terms added to sum[0..2] (cls, box, dfl: unnormalised, each
 * class's BCE on its own, in class order) and, with grads, its gradients. */
static void anchor_loss(const LossCtx *L, size_t ba, double sum[3]) {
    const DetLossConfig *cfg = L->cfg;
    const int nc = cfg->nc, reg_max = cfg->reg_max, cls0 = 4 * reg_max; /* cls0: first class channel */
    const DetAnchorRef ref = detloss_anchor(&L->head, (int)(ba / (size_t)L->as->anchors), (int)(ba % (size_t)L->as->anchors));
    const float *z = L->levels[ref.level] + ref.base;
    float *gz = L->grads ? L->grads[ref.level] + ref.base : NULL;
    const bool fg = L->as->fg[ba];
    const double t = L->as->score[ba];

    /* classification: every anchor and class; only the assigned class has a target */
    for (int c = 0; c < nc; c++) {
        double x = z[(size_t)(cls0 + c) * ref.step];
        double target = fg && c == L->as->label[ba] ? t : 0.0;
        if (L->value) sum[0] += bce_with_logits(x, target);
        if (gz) gz[(size_t)(cls0 + c) * ref.step] = (float)(L->k_cls * (sigmoid(x) - target));
    }
    if (!fg) return;

    /* box: CIoU in grid units between the decoded box and the target */
    double prob[4][DETLOSS_MAX_REG_MAX], dist[4];
    for (int k = 0; k < 4; k++) dist[k] = detloss_side_distance(z + (size_t)k * reg_max * ref.step, ref.step, reg_max, prob[k]);
    double pred[4] = {ref.x - dist[0], ref.y - dist[1], ref.x + dist[2], ref.y + dist[3]};
    double target_box[4];
    for (int k = 0; k < 4; k++) target_box[k] = L->as->box[ba * 4 + k] / ref.stride;
    double dciou[4];
    double ciou = detloss_ciou_alpha(pred, target_box, L->alpha_in ? &L->alpha_in[ba] : NULL, L->alpha_out ? &L->alpha_out[ba] : NULL, dciou);
    sum[1] += (1.0 - ciou) * t;
    /* x1 = px - d_l, y1 = py - d_t, x2 = px + d_r, y2 = py + d_b */
    double d_dist[4] = {L->k_box * t * dciou[0], L->k_box * t * dciou[1], -L->k_box * t * dciou[2], -L->k_box * t * dciou[3]};

    if (reg_max == 1) {
        if (gz)
            for (int k = 0; k < 4; k++) gz[(size_t)k * ref.step] = (float)d_dist[k];
        return;
    }

    /* DFL: distances from the anchor to the target's sides, split over two bins */
    double target_dist[4] = {ref.x - target_box[0], ref.y - target_box[1], target_box[2] - ref.x, target_box[3] - ref.y};
    double anchor_dfl = 0;
    for (int k = 0; k < 4; k++) {
        const float *zk = z + (size_t)k * reg_max * ref.step;
        DflSplit sp = detloss_dfl_split(target_dist[k], reg_max);
        if (L->value) anchor_dfl += sp.w_lo * cross_entropy(zk, ref.step, reg_max, sp.lo) + sp.w_hi * cross_entropy(zk, ref.step, reg_max, sp.lo + 1);
        if (!gz) continue;
        /* expectation: d d_k / d z_j = P_j (j - d_k); cross-entropy: d CE(z, i) / d z_j = P_j - [i == j] */
        double k_side = L->k_dfl * t / 4;
        for (int j = 0; j < reg_max; j++) {
            double p = prob[k][j];
            double g = d_dist[k] * p * (j - dist[k]);
            g += k_side * ((sp.w_lo + sp.w_hi) * p - (j == sp.lo ? sp.w_lo : 0) - (j == sp.lo + 1 ? sp.w_hi : 0));
            gz[(size_t)(k * reg_max + j) * ref.step] = (float)g;
        }
    }
    sum[2] += anchor_dfl / 4 * t;
}

/* The anchors of the batch run in LOSS_CHUNKS fixed chunks, each summed in
 * anchor order by whichever thread takes it, the chunks' sums then added in
 * chunk order: the same bits for any thread count. */
enum { LOSS_CHUNKS = 256 };

void detloss_loss_assigned_ex(const DetLossConfig *cfg, const float *const *levels, const DetAssignment *as, const double *alpha_in,
                              double *alpha_out, DetLossResult *out, float *const *grads) {
    const int batch = as->batch;
    const double norm = fmax(as->score_sum, 1.0);
    /* d total / d (unnormalised sum) of each term: total = batch * gain * sum / norm */
    LossCtx L = {.cfg = cfg,
                 .levels = levels,
                 .as = as,
                 .alpha_in = alpha_in,
                 .alpha_out = alpha_out,
                 .grads = grads,
                 .k_cls = batch * (double)cfg->gain_cls / norm,
                 .k_box = batch * (double)cfg->gain_box / norm,
                 .k_dfl = batch * (double)cfg->gain_dfl / norm,
                 .value = out != NULL};
    detloss_head_init(&L.head, cfg);

    if (grads)
        for (int i = 0; i < cfg->nl; i++)
            memset(grads[i], 0, sizeof(float) * (size_t)batch * L.head.channels * cfg->level_h[i] * cfg->level_w[i]);

    const size_t n = (size_t)batch * (size_t)as->anchors, per = (n + LOSS_CHUNKS - 1) / LOSS_CHUNKS;
    double part[LOSS_CHUNKS][3] = {{0}};
#pragma omp parallel for schedule(dynamic, 4)
    for (int ch = 0; ch < LOSS_CHUNKS; ch++)
        for (size_t ba = (size_t)ch * per; ba < n && ba < (size_t)(ch + 1) * per; ba++) anchor_loss(&L, ba, part[ch]);
    if (!out) return;
    double cls_sum = 0, box_sum = 0, dfl_sum = 0;
    for (int ch = 0; ch < LOSS_CHUNKS; ch++) cls_sum += part[ch][0], box_sum += part[ch][1], dfl_sum += part[ch][2];
    out->box = cfg->gain_box * (box_sum / norm);
    out->cls = cfg->gain_cls * (cls_sum / norm);
    out->dfl = cfg->gain_dfl * (dfl_sum / norm);
    out->total = batch * (out->box + out->cls + out->dfl);
    out->n_fg = as->n_fg;
    out->score_sum = as->score_sum;
}

bool detloss_forward_backward(const DetLossConfig *cfg, const float *const *levels, const DetTargets *t, DetLossResult *out,
                              float *const *grads, char *err, int errcap) {
    DetAssignment as;
    if (!detloss_assign(cfg, levels, t, &as, err, errcap)) return false;
    detloss_loss_assigned(cfg, levels, &as, out, grads);
    detloss_assignment_free(&as);
    return true;
}
