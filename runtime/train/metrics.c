/* runtime/train/metrics.c — validation metrics of Ultralytics 8.3.63 (spec:
 * training-semantics.md §8.2–§8.4). Owns only what metrics.h declares; it
 * must not touch the loss, the loader or the trainer's state.
 * Arithmetic follows the upstream dtypes: boxes and IoU in float32 (torch),
 * curves and AP in float64 (numpy, including np.interp's bracket rule and
 * numpy's pairwise summation), so results agree to the last bit or close. */
#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ numpy bits */

/* numpy's pairwise_sum for float64 (blocks of 8 accumulators up to 128
 * elements, halving above): np.sum/np.mean/np.trapz round this way. */
static double pw_sum(const double *a, size_t n, size_t stride) {
    if (n < 8) {
        double res = 0.;
        for (size_t i = 0; i < n; i++) res += a[i * stride];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int k = 0; k < 8; k++) r[k] = a[(size_t)k * stride];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (size_t k = 0; k < 8; k++) r[k] += a[(i + k) * stride];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i * stride];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pw_sum(a, n2, stride) + pw_sum(a + n2 * stride, n - n2, stride);
}

/* add.reduce starts from the identity 0.0. */
static double np_mean(const double *a, size_t n, size_t stride) {
    return (0.0 + pw_sum(a, n, stride)) / (double)n;
}

/* np.interp at one point: xp non-decreasing; j is the last index with
 * xp[j] <= x, so repeated xp values never form a zero-width bracket. */
static double np_interp(double x, const double *xp, const double *fp, size_t n,
                        double left, double right) {
    if (isnan(x)) return x;
    if (x > xp[n - 1]) return right;
    if (x < xp[0]) return left;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + ((hi - lo) >> 1);
        if (x >= xp[mid]) lo = mid + 1;
        else hi = mid;
    }
    size_t j = lo - 1;
    if (j == n - 1 || xp[j] == x) return fp[j];
    double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
    double res = slope * (x - xp[j]) + fp[j];
    if (isnan(res)) {
        res = slope * (x - xp[j + 1]) + fp[j + 1];
        if (isnan(res) && fp[j] == fp[j + 1]) res = fp[j];
    }
    return res;
}

/* np.linspace(0, 1, num): k * (1 / (num - 1)), last point exactly 1. */
static double np_linspace01(int k, int num) {
    return k == num - 1 ? 1.0 : (double)k * (1.0 / (double)(num - 1));
}

static void free3(void *a, void *b, void *c) {
    free(a);
    free(b);
    free(c);
}

double metrics_px(int i) { return np_linspace01(i, METRICS_NCURVE); }

/* ------------------------------------------------------------ NMS */

typedef struct NmsCand {
    float box[4];
    float score;
    int cls;
    size_t order;   /* candidate index: anchor-major, class-minor (torch.where) */
} NmsCand;

static int cand_cmp(const void *pa, const void *pb) {
    const NmsCand *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

float anchor_best_score(const float *pred, size_t A, int nc, size_t a) {
    float mx = pred[4 * A + a];
    for (int c = 1; c < nc && !isnan(mx); c++) {
        const float s = pred[(size_t)(4 + c) * A + a];
        if (isnan(s) || s > mx) mx = s;
    }
    return mx;
}

/* The classes of anchor a that become NMS candidates: every class above
 * conf (multi_label), or only the first best one when it is above conf
 * (x[:, 4:].max(1): torch returns the first index of a tie); of those, the
 * ones o->classes keeps. Writes their indices to cls (when not NULL) and
 * returns how many. */
static int anchor_candidates(const float *pred, size_t A, int nc, size_t a, float conf_f, const NmsOptions *o, int *cls) {
    if (!(anchor_best_score(pred, A, nc, a) > conf_f)) return 0;
    int n = 0;
    if (!o->multi_label) {
        int best = 0;
        for (int c = 1; c < nc; c++)
            if (pred[(size_t)(4 + c) * A + a] > pred[(size_t)(4 + best) * A + a]) best = c;
        if (o->classes && !o->classes[best]) return 0;
        if (cls) cls[0] = best;
        return 1;
    }
    for (int c = 0; c < nc; c++)
        if (pred[(size_t)(4 + c) * A + a] > conf_f && (!o->classes || o->classes[c])) {
            if (cls) cls[n] = c;
            n++;
        }
    return n;
}

int nms_image(const float *pred, int n_anchors, int nc, const NmsOptions *o, Detection *out) {
    const int max_det = o->max_det;
    if (!pred || n_anchors < 0 || nc < 1 || max_det < 0 || (max_det > 0 && !out)) return -1;
    const size_t A = (size_t)n_anchors;
    const float conf_f = (float)o->conf;   /* torch compares float32 with the scalar cast to float32 */
    size_t n = 0;
    for (size_t a = 0; a < A; a++) n += (size_t)anchor_candidates(pred, A, nc, a, conf_f, o, NULL);
    if (n == 0 || max_det == 0) return 0;
    NmsCand *cand = malloc(n * sizeof *cand);
    int *cls = malloc((size_t)nc * sizeof *cls);
    if (!cand || !cls) {
        free3(cand, cls, NULL);
        return -1;
    }
    size_t k = 0;
    for (size_t a = 0; a < A; a++) {
        const int m = anchor_candidates(pred, A, nc, a, conf_f, o, cls);
        const float cx = pred[a], cy = pred[A + a], hw = pred[2 * A + a] / 2, hh = pred[3 * A + a] / 2;
        for (int i = 0; i < m; i++) {
            const int c = cls[i];
            const float s = pred[(size_t)(4 + c) * A + a];
            NmsCand *q = &cand[k];
            q->box[0] = cx - hw;
            q->box[1] = cy - hh;
            q->box[2] = cx + hw;
            q->box[3] = cy + hh;
            q->score = s;
            q->cls = c;
            q->order = k++;
        }
    }
    /* The 30000 cap and torchvision's stable descending sort both reduce to
     * one stable sort by score. */
    qsort(cand, n, sizeof *cand, cand_cmp);
    if (n > NMS_MAX_CANDIDATES) n = NMS_MAX_CANDIDATES;
    float *ob = malloc(n * 5 * sizeof *ob);
    unsigned char *sup = calloc(n, 1);
    free(cls);
    if (!ob || !sup) {
        free3(cand, ob, sup);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const float off = o->agnostic ? 0.0f : (float)cand[i].cls * NMS_CLASS_OFFSET;
        float *b = ob + i * 5;
        for (int m = 0; m < 4; m++) b[m] = cand[i].box[m] + off;
        b[4] = (b[2] - b[0]) * (b[3] - b[1]);
    }
    int kept = 0;
    for (size_t i = 0; i < n && kept < max_det; i++) {
        if (sup[i]) continue;
        const Detection d = {cand[i].box[0], cand[i].box[1], cand[i].box[2], cand[i].box[3],
                             cand[i].score, cand[i].cls};
        out[kept++] = d;
        const float *bi = ob + i * 5;
        for (size_t j = i + 1; j < n; j++) {
            if (sup[j]) continue;
            const float *bj = ob + j * 5;
            float w = fminf(bi[2], bj[2]) - fmaxf(bi[0], bj[0]);
            float h = fminf(bi[3], bj[3]) - fmaxf(bi[1], bj[1]);
            w = w > 0.0f ? w : 0.0f;
            h = h > 0.0f ? h : 0.0f;
            const float inter = w * h;
            const float ovr = inter / (bi[4] + bj[4] - inter);
            if ((double)ovr > o->iou) sup[j] = 1;
        }
    }
    free3(cand, ob, sup);
    return kept;
}

/* ------------------------------------------------------------ mapping */

static float clampf(float v, float hi) {
    if (v < 0.0f) return 0.0f;
    return v > hi ? hi : v;   /* NaN passes through, as torch.clamp does */
}

void metrics_box_to_original(float box[4], float ratio, float pad_x, float pad_y,
                             int orig_w, int orig_h) {
    box[0] = clampf((box[0] - pad_x) / ratio, (float)orig_w);
    box[1] = clampf((box[1] - pad_y) / ratio, (float)orig_h);
    box[2] = clampf((box[2] - pad_x) / ratio, (float)orig_w);
    box[3] = clampf((box[3] - pad_y) / ratio, (float)orig_h);
}

void metrics_dets_to_original(Detection *dets, int n, float ratio, float pad_x,
                              float pad_y, int orig_w, int orig_h) {
    for (int i = 0; i < n; i++) {
        float b[4] = {dets[i].x1, dets[i].y1, dets[i].x2, dets[i].y2};
        metrics_box_to_original(b, ratio, pad_x, pad_y, orig_w, orig_h);
        dets[i] = (Detection){b[0], b[1], b[2], b[3], dets[i].score, dets[i].cls};
    }
}

/* ------------------------------------------------------------ matching */

void metrics_iou_thresholds(float out[METRICS_NIOU]) {
    /* torch.linspace's float32 rule: the first half counts up from start,
     * the second half down from end. */
    const float start = 0.5f, end = 0.95f;
    const float step = (end - start) / (float)(METRICS_NIOU - 1);
    for (int i = 0; i < METRICS_NIOU; i++)
        out[i] = i < METRICS_NIOU / 2 ? start + step * (float)i
                                      : end - step * (float)(METRICS_NIOU - 1 - i);
}

/* box_iou(labels, detections) in float32 with eps 1e-7. */
float metrics_box_iou(const float a[4], const Detection *b) {
    float w = fminf(a[2], b->x2) - fmaxf(a[0], b->x1);
    float h = fminf(a[3], b->y2) - fmaxf(a[1], b->y1);
    w = w > 0.0f ? w : 0.0f;
    h = h > 0.0f ? h : 0.0f;
    const float inter = w * h;
    const float area_a = (a[2] - a[0]) * (a[3] - a[1]);
    const float area_b = (b->x2 - b->x1) * (b->y2 - b->y1);
    return inter / (area_a + area_b - inter + 1e-7f);
}

int metrics_match(const Detection *dets, int n_det, const float *gt_boxes,
                  const int *gt_cls, int n_gt, uint8_t *tp) {
    if (n_det <= 0) return 0;
    memset(tp, 0, (size_t)n_det * METRICS_NIOU);
    if (n_gt <= 0) return 0;
    const size_t D = (size_t)n_det, L = (size_t)n_gt;
    float *iou = malloc(L * D * sizeof *iou);
    int *best = malloc(D * sizeof *best);
    unsigned char *claimed = malloc(L);
    if (!iou || !best || !claimed) {
        free3(iou, best, claimed);
        return -1;
    }
    for (size_t l = 0; l < L; l++)
        for (size_t d = 0; d < D; d++)
            iou[l * D + d] = gt_cls[l] == dets[d].cls ? metrics_box_iou(gt_boxes + 4 * l, &dets[d]) : 0.0f;
    float thr[METRICS_NIOU];
    metrics_iou_thresholds(thr);
    for (int t = 0; t < METRICS_NIOU; t++) {
        /* Each detection keeps its highest-IoU label (on equal IoU the higher
         * label index, the order numpy's reversed argsort gives); then each
         * label goes to the lowest detection index that kept it. A detection
         * whose label is taken does not fall back to another label. */
        for (size_t d = 0; d < D; d++) {
            best[d] = -1;
            float bv = 0.0f;
            for (size_t l = 0; l < L; l++) {
                const float v = iou[l * D + d];
                if (v >= thr[t] && (best[d] < 0 || v >= bv)) {
                    best[d] = (int)l;
                    bv = v;
                }
            }
        }
        memset(claimed, 0, L);
        for (size_t d = 0; d < D; d++) {
            if (best[d] < 0 || claimed[best[d]]) continue;
            claimed[best[d]] = 1;
            tp[d * METRICS_NIOU + (size_t)t] = 1;
        }
    }
    free3(iou, best, claimed);
    return 0;
}

/* ------------------------------------------------------------ AP */

/* compute_ap; pr_at_px, when not NULL, gets the precision envelope
 * interpolated at px (np.interp(px, mrec, mpre), the PR curve's points). */
static double compute_ap_curve(const double *recall, const double *precision, int n, double *pr_at_px) {
    if (n < 1) return 0.0;
    const size_t m = (size_t)n + 2;
    double *mrec = malloc(m * sizeof *mrec), *mpre = malloc(m * sizeof *mpre);
    if (!mrec || !mpre) {
        free3(mrec, mpre, NULL);
        return -1.0;
    }
    mrec[0] = 0.0;
    mpre[0] = 1.0;
    memcpy(mrec + 1, recall, (size_t)n * sizeof *mrec);
    memcpy(mpre + 1, precision, (size_t)n * sizeof *mpre);
    mrec[m - 1] = 1.0;
    mpre[m - 1] = 0.0;
    for (size_t i = m - 1; i-- > 0;)   /* envelope: running max from the right, NaN-propagating */
        if (isnan(mpre[i + 1]) || mpre[i + 1] > mpre[i]) mpre[i] = mpre[i + 1];
    double y[101], terms[100];
    for (int k = 0; k < 101; k++) y[k] = np_interp(np_linspace01(k, 101), mrec, mpre, m, mpre[0], mpre[m - 1]);
    if (pr_at_px)
        for (int k = 0; k < METRICS_NCURVE; k++)
            pr_at_px[k] = np_interp(metrics_px(k), mrec, mpre, m, mpre[0], mpre[m - 1]);
    for (int k = 0; k < 100; k++) {
        const double dx = np_linspace01(k + 1, 101) - np_linspace01(k, 101);
        terms[k] = dx * (y[k + 1] + y[k]) / 2.0;
    }
    free3(mrec, mpre, NULL);
    return 0.0 + pw_sum(terms, 100, 1);
}

double metrics_compute_ap(const double *recall, const double *precision, int n) {
    return compute_ap_curve(recall, precision, n, NULL);
}

/* ------------------------------------------------------------ accumulator */

struct MetricsAccumulator {
    int nc;
    long seen;
    size_t n, cap;
    float *conf;
    int *cls;
    uint16_t *tp;       /* bit t: true positive at threshold t */
    long *nt;           /* [nc] labels per class */
    long *nimg;         /* [nc] images containing the class */
};

MetricsAccumulator *metrics_init(int nc) {
    if (nc < 1) return NULL;
    MetricsAccumulator *acc = calloc(1, sizeof *acc);
    if (!acc) return NULL;
    acc->nc = nc;
    acc->nt = calloc((size_t)nc, sizeof *acc->nt);
    acc->nimg = calloc((size_t)nc, sizeof *acc->nimg);
    if (!acc->nt || !acc->nimg) {
        metrics_free(acc);
        return NULL;
    }
    return acc;
}

void metrics_reset(MetricsAccumulator *acc) {
    if (!acc) return;
    acc->seen = 0;
    acc->n = 0;
    memset(acc->nt, 0, (size_t)acc->nc * sizeof *acc->nt);
    memset(acc->nimg, 0, (size_t)acc->nc * sizeof *acc->nimg);
}

void metrics_free(MetricsAccumulator *acc) {
    if (!acc) return;
    free(acc->conf);
    free(acc->cls);
    free(acc->tp);
    free(acc->nt);
    free(acc->nimg);
    free(acc);
}

static int reserve(MetricsAccumulator *acc, size_t need) {
    if (need <= acc->cap) return 0;
    size_t cap = acc->cap ? acc->cap : 1024;
    while (cap < need) cap *= 2;
    float *conf = realloc(acc->conf, cap * sizeof *conf);
    if (!conf) return -1;
    acc->conf = conf;
    int *cls = realloc(acc->cls, cap * sizeof *cls);
    if (!cls) return -1;
    acc->cls = cls;
    uint16_t *tp = realloc(acc->tp, cap * sizeof *tp);
    if (!tp) return -1;
    acc->tp = tp;
    acc->cap = cap;
    return 0;
}

int metrics_add_image(MetricsAccumulator *acc, const Detection *dets, int n_det,
                      const float *gt_boxes, const int *gt_cls, int n_gt) {
    if (!acc || n_det < 0 || n_gt < 0 || (n_det && !dets) || (n_gt && (!gt_boxes || !gt_cls))) return -1;
    for (int i = 0; i < n_det; i++)
        if (dets[i].cls < 0 || dets[i].cls >= acc->nc) return -1;
    for (int i = 0; i < n_gt; i++)
        if (gt_cls[i] < 0 || gt_cls[i] >= acc->nc) return -1;
    if (reserve(acc, acc->n + (size_t)n_det) != 0) return -1;
    uint8_t *tp = NULL;
    if (n_det > 0) {
        tp = malloc((size_t)n_det * METRICS_NIOU);
        if (!tp || metrics_match(dets, n_det, gt_boxes, gt_cls, n_gt, tp) != 0) {
            free(tp);
            return -1;
        }
    }
    acc->seen++;
    for (int i = 0; i < n_gt; i++) {
        int first = 1;   /* target_img: the image's distinct label classes */
        for (int j = 0; j < i && first; j++) first = gt_cls[j] != gt_cls[i];
        acc->nt[gt_cls[i]]++;
        acc->nimg[gt_cls[i]] += first;
    }
    for (int i = 0; i < n_det; i++) {
        uint16_t bits = 0;
        for (int t = 0; t < METRICS_NIOU; t++)
            if (tp[(size_t)i * METRICS_NIOU + (size_t)t]) bits |= (uint16_t)(1u << t);
        acc->conf[acc->n] = dets[i].score;
        acc->cls[acc->n] = dets[i].cls;
        acc->tp[acc->n] = bits;
        acc->n++;
    }
    free(tp);
    return 0;
}

/* ------------------------------------------------------------ ap_per_class */

typedef struct ConfIdx {
    float conf;
    size_t idx;
} ConfIdx;

/* np.argsort(-conf) is not stable; equal confidences keep insertion order here. */
static int confidx_cmp(const void *pa, const void *pb) {
    const ConfIdx *a = pa, *b = pb;
    if (a->conf != b->conf) return a->conf > b->conf ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

void metrics_result_free(Metrics *m) {
    if (!m) return;
    free(m->classes);
    free(m->class_images);
    free(m->class_instances);
    free(m->p_curve);
    free(m->r_curve);
    free(m->f1_curve);
    free(m->pr_curve);
    memset(m, 0, sizeof *m);
}

#define NCURVE METRICS_NCURVE

/* Per class: AP at every threshold, P/R curves over the confidence grid and
 * the PR curve (IoU 0.5) over the recall grid. */
static int class_curves(const MetricsAccumulator *acc, const ConfIdx *order, int c,
                        MetricsClass *row, double *pc, double *rc, double *prc, size_t *scratch_idx) {
    size_t np_ = 0;
    for (size_t k = 0; k < acc->n; k++)
        if (acc->cls[order[k].idx] == c) scratch_idx[np_++] = order[k].idx;
    if (np_ == 0) return 0;   /* AP 0, P and R curves 0 */
    const double nl = (double)acc->nt[c] + 1e-16;
    double *rec = malloc(np_ * METRICS_NIOU * sizeof *rec);
    double *pre = malloc(np_ * METRICS_NIOU * sizeof *pre);
    double *negconf = malloc(np_ * sizeof *negconf);
    if (!rec || !pre || !negconf) {
        free3(rec, pre, negconf);
        return -1;
    }
    for (int t = 0; t < METRICS_NIOU; t++) {
        long tpc = 0;
        for (size_t k = 0; k < np_; k++) {
            tpc += (acc->tp[scratch_idx[k]] >> t) & 1u;
            rec[(size_t)t * np_ + k] = (double)tpc / nl;
            pre[(size_t)t * np_ + k] = (double)tpc / (double)(k + 1);
        }
    }
    for (size_t k = 0; k < np_; k++) negconf[k] = -(double)acc->conf[scratch_idx[k]];
    for (int i = 0; i < NCURVE; i++) {
        const double x = -metrics_px(i);
        rc[i] = np_interp(x, negconf, rec, np_, 0.0, rec[np_ - 1]);
        pc[i] = np_interp(x, negconf, pre, np_, 1.0, pre[np_ - 1]);
    }
    int rcode = 0;
    for (int t = 0; t < METRICS_NIOU && rcode == 0; t++) {
        row->ap[t] = compute_ap_curve(rec + (size_t)t * np_, pre + (size_t)t * np_, (int)np_, t == 0 ? prc : NULL);
        if (row->ap[t] < 0) rcode = -1;
    }
    free3(rec, pre, negconf);
    row->has_pr = rcode == 0;
    return rcode;
}

void metrics_smooth(const double *y, int n, double f, double *out) {
    const int nf = (int)nearbyint((double)n * f * 2) / 2 + 1;   /* round half to even, like Python */
    const int half = nf / 2;
    const double w = 1.0 / (double)nf;
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int k = 0; k < nf; k++) {
            int j = i + k - half;
            j = j < 0 ? 0 : (j >= n ? n - 1 : j);
            s += y[j] * w;
        }
        out[i] = s;
    }
}

int metrics_argmax(const double *y, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (y[i] > y[best] || (isnan(y[i]) && !isnan(y[best]))) best = i;
    return best;
}

int metrics_compute(const MetricsAccumulator *acc, Metrics *out) {
    if (!acc || !out) return -1;
    memset(out, 0, sizeof *out);
    out->nc = acc->nc;
    out->seen = acc->seen;
    out->class_images = malloc((size_t)acc->nc * sizeof *out->class_images);
    out->class_instances = malloc((size_t)acc->nc * sizeof *out->class_instances);
    if (!out->class_images || !out->class_instances) {
        metrics_result_free(out);
        return -1;
    }
    for (int c = 0; c < acc->nc; c++) {
        out->class_images[c] = acc->nimg[c];
        out->class_instances[c] = acc->nt[c];
        out->instances += acc->nt[c];
    }
    int any_tp = 0;
    for (size_t k = 0; k < acc->n && !any_tp; k++) any_tp = acc->tp[k] != 0;
    if (!any_tp) return 0;   /* get_stats skips ap_per_class: all metrics 0 */

    int ncls = 0;
    for (int c = 0; c < acc->nc; c++) ncls += acc->nt[c] > 0;
    out->classes = calloc((size_t)ncls, sizeof *out->classes);
    ConfIdx *order = malloc(acc->n * sizeof *order);
    size_t *scratch = malloc(acc->n * sizeof *scratch);
    double *pc = out->p_curve = calloc((size_t)ncls * NCURVE, sizeof *pc);
    double *rc = out->r_curve = calloc((size_t)ncls * NCURVE, sizeof *rc);
    double *f1c = out->f1_curve = calloc((size_t)ncls * NCURVE, sizeof *f1c);
    out->pr_curve = calloc((size_t)ncls * NCURVE, sizeof *out->pr_curve);
    double *f1 = calloc(NCURVE, sizeof *f1);
    double *tmp = malloc((size_t)ncls * (METRICS_NIOU + 2) * sizeof *tmp);
    int rcode = (out->classes && order && scratch && pc && rc && f1c && out->pr_curve && f1 && tmp) ? 0 : -1;
    if (rcode == 0) {
        for (size_t k = 0; k < acc->n; k++) order[k] = (ConfIdx){acc->conf[k], k};
        qsort(order, acc->n, sizeof *order, confidx_cmp);
        int ci = 0;
        for (int c = 0; c < acc->nc && rcode == 0; c++) {
            if (acc->nt[c] == 0) continue;
            MetricsClass *row = &out->classes[ci];
            row->cls = c;
            row->images = acc->nimg[c];
            row->instances = acc->nt[c];
            rcode = class_curves(acc, order, c, row, pc + (size_t)ci * NCURVE,
                                 rc + (size_t)ci * NCURVE, out->pr_curve + (size_t)ci * NCURVE, scratch);
            ci++;
        }
    }
    if (rcode == 0) {
        for (size_t k = 0; k < (size_t)ncls * NCURVE; k++) f1c[k] = 2 * pc[k] * rc[k] / (pc[k] + rc[k] + 1e-16);
        /* f1_curve.mean(0): rows added one after another, then divided. */
        for (int i = 0; i < NCURVE; i++) {
            double s = 0.0;
            for (int ci = 0; ci < ncls; ci++) s += f1c[(size_t)ci * NCURVE + i];
            f1[i] = s / (double)ncls;
        }
        double sm[NCURVE];
        metrics_smooth(f1, NCURVE, 0.1, sm);
        const int best = metrics_argmax(sm, NCURVE);
        for (int ci = 0; ci < ncls; ci++) {
            MetricsClass *row = &out->classes[ci];
            row->p = pc[(size_t)ci * NCURVE + best];
            row->r = rc[(size_t)ci * NCURVE + best];
            row->ap50 = row->ap[0];
            row->ap50_95 = np_mean(row->ap, METRICS_NIOU, 1);
            memcpy(tmp + (size_t)ci * METRICS_NIOU, row->ap, sizeof row->ap);
        }
        double *col = tmp + (size_t)ncls * METRICS_NIOU;   /* P then R per class */
        for (int ci = 0; ci < ncls; ci++) {
            col[ci] = out->classes[ci].p;
            col[ncls + ci] = out->classes[ci].r;
        }
        out->n_classes = ncls;
        out->mp = np_mean(col, (size_t)ncls, 1);
        out->mr = np_mean(col + ncls, (size_t)ncls, 1);
        out->map50 = np_mean(tmp, (size_t)ncls, METRICS_NIOU);
        out->map50_95 = np_mean(tmp, (size_t)ncls * METRICS_NIOU, 1);
        out->fitness = out->map50 * 0.1 + out->map50_95 * 0.9;
    }
    free3(order, scratch, f1);
    free(tmp);
    if (rcode != 0) metrics_result_free(out);
    return rcode;
}

/* ------------------------------------------------------------ table */

int metrics_format_header(char *buf, size_t size) {
    return snprintf(buf, size, "%22s%11s%11s%11s%11s%11s%11s", "Class", "Images", "Instances",
                    "Box(P", "R", "mAP50", "mAP50-95)");
}

/* Python's %g prints NaN as "nan" whatever its sign bit; C may print "-nan". */
static void fmt_g(char *dst, size_t size, double v) {
    if (isnan(v)) snprintf(dst, size, "%11s", "nan");
    else snprintf(dst, size, "%11.3g", v);
}

int metrics_format_row(char *buf, size_t size, const char *name, long images,
                       long instances, double p, double r, double map50,
                       double map50_95) {
    char g[4][48];
    fmt_g(g[0], sizeof g[0], p);
    fmt_g(g[1], sizeof g[1], r);
    fmt_g(g[2], sizeof g[2], map50);
    fmt_g(g[3], sizeof g[3], map50_95);
    return snprintf(buf, size, "%22s%11ld%11ld%s%s%s%s", name, images, instances, g[0], g[1],
                    g[2], g[3]);
}

void metrics_print(FILE *f, const Metrics *m, const char *const *names, int per_class) {
    char line[512];
    metrics_format_header(line, sizeof line);
    fprintf(f, "%s\n", line);
    metrics_format_row(line, sizeof line, "all", m->seen, m->instances, m->mp, m->mr, m->map50,
                       m->map50_95);
    fprintf(f, "%s\n", line);
    if (!per_class) return;
    for (int i = 0; i < m->n_classes; i++) {
        const MetricsClass *row = &m->classes[i];
        char id[24];
        snprintf(id, sizeof id, "%d", row->cls);
        metrics_format_row(line, sizeof line, names ? names[row->cls] : id, row->images,
                           row->instances, row->p, row->r, row->ap50, row->ap50_95);
        fprintf(f, "%s\n", line);
    }
}
