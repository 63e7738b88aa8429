/* runtime/detloss_assign.c — the oracle's TaskAlignedAssigner (Ultralytics
 * utils/tal.py): candidates, alignment metric, top-k, multi-GT resolution and
 * soft targets, all on detached predictions. Touches nothing outside detloss. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detloss.h"

#define ASSIGN_EPS 1e-9 /* TaskAlignedAssigner eps: in-box margin and metric normaliser */

void detloss_assignment_free(DetAssignment *as) {
    free(as->fg);
    free(as->gt_index);
    free(as->label);
    free(as->score);
    free(as->box);
    memset(as, 0, sizeof *as);
}

/* Per-image work space: one row of A values per GT. */
typedef struct AssignScratch {
    double *pred;       /* [A][4] predicted boxes, pixels */
    double *metric;     /* [M][A] score^alpha * iou^beta (0 outside the box) */
    double *overlap;    /* [M][A] max(CIoU(gt, pred), 0) (0 outside the box) */
    unsigned char *in;  /* [M][A] anchor centre strictly inside a valid GT */
    unsigned char *pos; /* [M][A] positive after top-k, then after resolution */
    int *top;           /* [topk] */
    double *max_metric, *max_overlap; /* [M] over each GT's positives */
} AssignScratch;

/* Indices of the k largest values of row, largest first; among equal values
 * the lower anchor index comes first (the spec's rule for torch.topk ties). */
static void top_k(const double *row, int n, int k, int *top) {
    int filled = 0;
    for (int a = 0; a < n; a++) {
        double m = row[a];
        if (filled == k && !(m > row[top[k - 1]])) continue;
        int at = filled < k ? filled : k - 1;
        while (at > 0 && m > row[top[at - 1]]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = a;
        if (filled < k) filled++;
    }
}

static double sigmoid(double x) {
    if (x >= 0) return 1 / (1 + exp(-x));
    double e = exp(x);
    return e / (1 + e);
}

/* preprocess: normalised xywh * (W, H, W, H), then xywh2xyxy */
static void gt_pixels(const float *row, double img_w, double img_h, double box[4]) {
    double cx = row[1] * img_w, cy = row[2] * img_h, w = row[3] * img_w, h = row[4] * img_h;
    box[0] = cx - w / 2;
    box[1] = cy - h / 2;
    box[2] = cx + w / 2;
    box[3] = cy + h / 2;
}

static void assign_image(const DetLossConfig *cfg, const DetHead *head, const float *const *levels, const DetTargets *t, int b,
                         AssignScratch *s, DetAssignment *as) {
    const int A = head->anchors, n_gt = t->count ? t->count[b] : 0, reg_max = cfg->reg_max;
    /* imgsz = level-0 grid size * stride[0], as v8DetectionLoss computes it */
    const double img_h = cfg->level_h[0] * (double)cfg->stride[0], img_w = cfg->level_w[0] * (double)cfg->stride[0];
    const float *rows = t->boxes ? t->boxes + (size_t)b * t->max_boxes * 5 : NULL;

    /* every anchor's own work runs on the team; what crosses anchors (top-k,
     * the maxima, the normaliser's sum) stays serial, so the bits are those
     * of one thread */
#pragma omp parallel for schedule(static)
    for (int a = 0; a < A; a++) {
        DetAnchorRef ref = detloss_anchor(head, b, a);
        const float *z = levels[ref.level] + ref.base;
        double d[4];
        for (int k = 0; k < 4; k++) d[k] = detloss_side_distance(z + (size_t)k * reg_max * ref.step, ref.step, reg_max, NULL);
        /* decode in grid units, then scale: (pred_bboxes * stride_tensor) */
        s->pred[a * 4 + 0] = (ref.x - d[0]) * ref.stride;
        s->pred[a * 4 + 1] = (ref.y - d[1]) * ref.stride;
        s->pred[a * 4 + 2] = (ref.x + d[2]) * ref.stride;
        s->pred[a * 4 + 3] = (ref.y + d[3]) * ref.stride;
    }

    /* Padding rows beyond count are left out: they are never positive and
     * their IoU is 0, so they cannot win an argmax over real rows, and an
     * all-zero argmax picks row 0, which is real whenever anything is positive. */
    for (int g = 0; g < n_gt; g++) {
        double *metric = s->metric + (size_t)g * A, *overlap = s->overlap + (size_t)g * A;
        unsigned char *in = s->in + (size_t)g * A, *pos = s->pos + (size_t)g * A;
        const float *row = rows + (size_t)g * 5;
        double gt[4];
        gt_pixels(row, img_w, img_h, gt);
        const bool valid = gt[0] + gt[1] + gt[2] + gt[3] > 0; /* mask_gt: padding rows sum to 0 */
        const int cls = (int)row[0];
#pragma omp parallel for schedule(static)
        for (int a = 0; a < A; a++) {
            DetAnchorRef ref = detloss_anchor(head, b, a);
            double ax = ref.x * ref.stride, ay = ref.y * ref.stride;
            double margin = fmin(fmin(ax - gt[0], ay - gt[1]), fmin(gt[2] - ax, gt[3] - ay));
            in[a] = valid && margin > ASSIGN_EPS;
            pos[a] = 0;
            metric[a] = overlap[a] = 0;
            if (!in[a]) continue;
            double score = sigmoid(levels[ref.level][ref.base + (size_t)(4 * reg_max + cls) * ref.step]);
            double ciou = detloss_ciou(gt, s->pred + (size_t)a * 4, NULL); /* bbox_iou(gt, pred) */
            overlap[a] = ciou > 0 ? ciou : 0;
            metric[a] = pow(score, cfg->alpha) * pow(overlap[a], cfg->beta);
        }
        if (!valid) continue; /* topk_mask: an invalid row selects nothing */
        top_k(metric, A, cfg->topk, s->top);
        for (int i = 0; i < cfg->topk; i++) pos[s->top[i]] = in[s->top[i]];
    }

    /* An anchor claimed by several GTs goes to the row of largest IoU over all
     * rows (first wins), even a row whose top-k did not pick it. */
#pragma omp parallel for schedule(static)
    for (int a = 0; a < A; a++) {
        int claims = 0;
        for (int g = 0; g < n_gt; g++) claims += s->pos[(size_t)g * A + a];
        if (claims <= 1) continue;
        int best = 0;
        for (int g = 1; g < n_gt; g++)
            if (s->overlap[(size_t)g * A + a] > s->overlap[(size_t)best * A + a]) best = g;
        for (int g = 0; g < n_gt; g++) s->pos[(size_t)g * A + a] = g == best;
    }

    /* Soft target t(a) = metric(g, a) * max_pos_iou(g) / (max_pos_metric(g) + eps) for its GT g. */
    double *max_metric = s->max_metric, *max_overlap = s->max_overlap;
    for (int g = 0; g < n_gt; g++) {
        double mm = 0, mo = 0;
        for (int a = 0; a < A; a++) {
            size_t ga = (size_t)g * A + a;
            if (!s->pos[ga]) continue;
            mm = fmax(mm, s->metric[ga]);
            mo = fmax(mo, s->overlap[ga]);
        }
        max_metric[g] = mm;
        max_overlap[g] = mo;
    }
#pragma omp parallel for schedule(static)
    for (int a = 0; a < A; a++) {
        size_t ba = (size_t)b * A + a;
        int gt_index = 0;
        bool fg = false;
        for (int g = 0; g < n_gt && !fg; g++)
            if (s->pos[(size_t)g * A + a]) gt_index = g, fg = true;
        as->fg[ba] = fg;
        as->gt_index[ba] = gt_index;
        if (n_gt > 0) {
            const float *row = rows + (size_t)gt_index * 5;
            as->label[ba] = (int)row[0];
            gt_pixels(row, img_w, img_h, as->box + ba * 4);
        }
        as->score[ba] = fg ? s->metric[(size_t)gt_index * A + a] * max_overlap[gt_index] / (max_metric[gt_index] + ASSIGN_EPS) : 0.0;
    }
    for (int a = 0; a < A; a++) {
        const size_t ba = (size_t)b * A + a;
        if (!as->fg[ba]) continue;
        as->score_sum += as->score[ba];
        as->n_fg++;
    }
}

bool detloss_assign(const DetLossConfig *cfg, const float *const *levels, const DetTargets *t, DetAssignment *as, char *err,
                    int errcap) {
    memset(as, 0, sizeof *as);
    if (!detloss_check(cfg, levels, t, err, errcap)) return false;
    DetHead head;
    detloss_head_init(&head, cfg);
    const int A = head.anchors, B = t->batch;
    int max_gt = 0;
    for (int b = 0; b < B; b++)
        if (t->count && t->count[b] > max_gt) max_gt = t->count[b];

    const size_t ba = (size_t)B * A, ma = (size_t)(max_gt > 0 ? max_gt : 1) * A;
    as->batch = B;
    as->anchors = A;
    as->fg = calloc(ba, 1);
    as->gt_index = calloc(ba, sizeof(int));
    as->label = calloc(ba, sizeof(int));
    as->score = calloc(ba, sizeof(double));
    as->box = calloc(ba * 4, sizeof(double));
    AssignScratch s = {
        .pred = malloc((size_t)A * 4 * sizeof(double)),
        .metric = malloc(ma * sizeof(double)),
        .overlap = malloc(ma * sizeof(double)),
        .in = malloc(ma),
        .pos = malloc(ma),
        .top = malloc((size_t)cfg->topk * sizeof(int)),
        .max_metric = malloc((size_t)(max_gt > 0 ? max_gt : 1) * sizeof(double)),
        .max_overlap = malloc((size_t)(max_gt > 0 ? max_gt : 1) * sizeof(double)),
    };
    bool ok = as->fg && as->gt_index && as->label && as->score && as->box && s.pred && s.metric && s.overlap && s.in && s.pos && s.top && s.max_metric &&
              s.max_overlap;
    if (ok)
        for (int b = 0; b < B; b++) assign_image(cfg, &head, levels, t, b, &s, as);
    free(s.pred);
    free(s.metric);
    free(s.overlap);
    free(s.in);
    free(s.pos);
    free(s.top);
    free(s.max_metric);
    free(s.max_overlap);
    if (!ok) {
        detloss_assignment_free(as);
        if (err && errcap > 0) snprintf(err, (size_t)errcap, "detloss: out of memory");
        return false;
    }
    return true;
}
