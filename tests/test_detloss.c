/* tests/test_detloss.c — suite detloss: the oracle detection loss (runtime/detloss*)
 * against the real Ultralytics v8DetectionLoss (tests/fixtures/detloss/, made by
 * tools/make_detloss_fixtures.py), finite differences, and the spec's edge cases.
 * Reads only its own fixtures; tests nothing outside runtime/detloss*. */
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <time.h>

#include "../runtime/detloss.h"
#include "test_util.h"

#define FIXTURE_DIR "tests/fixtures/detloss/"

/* ---- small helpers ---- */

typedef struct Rng {
    uint64_t s;
} Rng;

static double rng_uniform(Rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return ((r->s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double rng_normal(Rng *r) {
    double u = rng_uniform(r), v = rng_uniform(r);
    return sqrt(-2 * log(u)) * cos(2 * 3.14159265358979323846 * v);
}

/* A target row (cls, cx, cy, w, h) inside the image: a class below nc, sides in [lo, lo + span). */
static void random_box(Rng *r, int nc, double lo, double span, float row[5]) {
    float w = (float)(lo + span * rng_uniform(r)), h = (float)(lo + span * rng_uniform(r));
    row[0] = (float)(int)(nc * rng_uniform(r));
    row[1] = (float)(w / 2 + (1 - w) * rng_uniform(r));
    row[2] = (float)(h / 2 + (1 - h) * rng_uniform(r));
    row[3] = w;
    row[4] = h;
}

/* Head outputs shaped like the fixtures': box logits tilted to small bins so
 * decoded boxes are image-sized (not 15 cells a side), class logits around -1. */
typedef struct Head {
    DetLossConfig cfg;
    int batch;
    float *data[DETLOSS_MAX_LEVELS], *grad[DETLOSS_MAX_LEVELS];
    size_t len[DETLOSS_MAX_LEVELS];
} Head;

static void head_make(Head *h, const DetLossConfig *cfg, int batch, uint64_t seed) {
    memset(h, 0, sizeof *h);
    h->cfg = *cfg;
    h->batch = batch;
    Rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
    int ch = 4 * cfg->reg_max + cfg->nc;
    for (int i = 0; i < cfg->nl; i++) {
        size_t plane = (size_t)cfg->level_h[i] * cfg->level_w[i];
        h->len[i] = (size_t)batch * ch * plane;
        h->data[i] = malloc(h->len[i] * sizeof(float));
        h->grad[i] = malloc(h->len[i] * sizeof(float));
        cr_assert(h->data[i] && h->grad[i]);
        for (int b = 0; b < batch; b++)
            for (int c = 0; c < ch; c++)
                for (size_t p = 0; p < plane; p++) {
                    double x = rng_normal(&r) - 1.0;
                    if (c < 4 * cfg->reg_max) /* reg_max 1: the logit is the distance itself, keep it positive */
                        x = cfg->reg_max == 1 ? 2.5 + rng_normal(&r) : 1.5 * rng_normal(&r) - 0.3 * (c % cfg->reg_max);
                    h->data[i][((size_t)b * ch + c) * plane + p] = (float)x;
                }
    }
}

static void head_free(Head *h) {
    for (int i = 0; i < h->cfg.nl; i++) {
        free(h->data[i]);
        free(h->grad[i]);
    }
}

static const float *const *head_levels(const Head *h) { return (const float *const *)h->data; }

static DetLossConfig small_config(void) {
    DetLossConfig cfg;
    int hs[2] = {8, 4}, ws[2] = {8, 4};
    float st[2] = {8, 16};
    detloss_config_default(&cfg, 3, 2, hs, ws, st);
    return cfg;
}

static double rel_err(double ours, double ref) { return ref == 0 ? fabs(ours) : fabs(ours - ref) / fabs(ref); }

/* ---- parity with Ultralytics ---- */

static void *fixture_file(const char *name, size_t bytes) {
    char path[512];
    snprintf(path, sizeof path, FIXTURE_DIR "%s", name);
    size_t len = 0;
    char *buf = tu_slurp(path, &len);
    cr_assert(buf, "cannot read %s (regenerate with /opt/ultra/bin/python tools/make_detloss_fixtures.py)", path);
    cr_assert_eq(len, bytes, "%s: %zu bytes, expected %zu", path, len, bytes);
    return buf; /* malloc'd, so aligned for double; the files are little-endian like every target we build for */
}

static double json_num(const cJSON *obj, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    cr_assert(cJSON_IsNumber(it), "fixture field %s missing", key);
    return it->valuedouble;
}

static void check_fixture(const char *name) {
    char path[512];
    snprintf(path, sizeof path, FIXTURE_DIR "%s.json", name);
    char *text = tu_slurp(path, NULL);
    cr_assert(text, "cannot read %s", path);
    cJSON *doc = cJSON_Parse(text);
    cr_assert(doc, "%s: bad JSON", path);

    const cJSON *lv = cJSON_GetObjectItemCaseSensitive(doc, "levels"), *st = cJSON_GetObjectItemCaseSensitive(doc, "strides");
    int nl = cJSON_GetArraySize(lv), hs[DETLOSS_MAX_LEVELS], ws[DETLOSS_MAX_LEVELS];
    float strides[DETLOSS_MAX_LEVELS];
    cr_assert(nl >= 1 && nl <= DETLOSS_MAX_LEVELS && cJSON_GetArraySize(st) == nl);
    for (int i = 0; i < nl; i++) {
        hs[i] = cJSON_GetArrayItem(cJSON_GetArrayItem(lv, i), 0)->valueint;
        ws[i] = cJSON_GetArrayItem(cJSON_GetArrayItem(lv, i), 1)->valueint;
        strides[i] = (float)cJSON_GetArrayItem(st, i)->valuedouble;
    }
    DetLossConfig cfg;
    detloss_config_default(&cfg, (int)json_num(doc, "nc"), nl, hs, ws, strides);
    cr_assert_eq(cfg.reg_max, (int)json_num(doc, "reg_max"));
    cr_assert_eq(cfg.topk, (int)json_num(doc, "topk"));

    int batch = (int)json_num(doc, "batch"), max_boxes = (int)json_num(doc, "max_boxes");
    int counts[64];
    float *boxes = calloc((size_t)batch * max_boxes * 5 + 1, sizeof(float));
    const cJSON *jc = cJSON_GetObjectItemCaseSensitive(doc, "counts"), *jb = cJSON_GetObjectItemCaseSensitive(doc, "boxes");
    cr_assert(batch <= 64 && cJSON_GetArraySize(jc) == batch && cJSON_GetArraySize(jb) == batch * max_boxes * 5);
    for (int b = 0; b < batch; b++) counts[b] = cJSON_GetArrayItem(jc, b)->valueint;
    for (int i = 0; i < batch * max_boxes * 5; i++) boxes[i] = (float)cJSON_GetArrayItem(jb, i)->valuedouble;
    DetTargets targets = {batch, max_boxes, counts, boxes};

    size_t per_level[DETLOSS_MAX_LEVELS], total_len = 0;
    for (int i = 0; i < nl; i++) total_len += per_level[i] = (size_t)batch * (4 * cfg.reg_max + cfg.nc) * hs[i] * ws[i];
    float *inputs = fixture_file(cJSON_GetObjectItemCaseSensitive(doc, "inputs")->valuestring, total_len * sizeof(float));
    float *grads = malloc(total_len * sizeof(float));
    const float *levels[DETLOSS_MAX_LEVELS];
    float *grad_levels[DETLOSS_MAX_LEVELS];
    for (size_t i = 0, at = 0; i < (size_t)nl; at += per_level[i], i++) {
        levels[i] = inputs + at;
        grad_levels[i] = grads + at;
    }

    DetLossResult res;
    char err[256] = "";
    cr_assert(detloss_forward_backward(&cfg, levels, &targets, &res, grad_levels, err, sizeof err), "%s: %s", name, err);

    const cJSON *entry;
    cJSON_ArrayForEach(entry, cJSON_GetObjectItemCaseSensitive(doc, "results")) {
        bool f64 = strcmp(cJSON_GetObjectItemCaseSensitive(entry, "dtype")->valuestring, "float64") == 0;
        /* float64 upstream differs from our double only by operation order; float32
         * upstream carries float rounding through sums of up to 10^4 terms */
        double item_tol = f64 ? 1e-9 : 1e-5;
        double e_box = rel_err(res.box, json_num(entry, "box")), e_cls = rel_err(res.cls, json_num(entry, "cls"));
        double e_dfl = rel_err(res.dfl, json_num(entry, "dfl")), e_tot = rel_err(res.total, json_num(entry, "total"));
        double e_sum = rel_err(res.score_sum, json_num(entry, "score_sum"));
        double e_items = fmax(fmax(e_box, e_cls), fmax(e_dfl, e_tot));
        cr_expect_eq(res.n_fg, (int)json_num(entry, "n_fg"), "%s %s: n_fg %d vs %d", name, f64 ? "f64" : "f32", res.n_fg,
                     (int)json_num(entry, "n_fg"));
        cr_expect(e_items <= item_tol, "%s %s: items rel err box %.3g cls %.3g dfl %.3g total %.3g", name, f64 ? "f64" : "f32", e_box,
                  e_cls, e_dfl, e_tot);
        cr_expect(e_sum <= item_tol, "%s: target score sum rel err %.3g", name, e_sum);

        const cJSON *gname = cJSON_GetObjectItemCaseSensitive(entry, "grads");
        double e_grad = -1;
        if (cJSON_IsString(gname)) {
            double gmax = 0, dmax = 0;
            if (f64) {
                double *ref = fixture_file(gname->valuestring, total_len * sizeof(double));
                for (size_t i = 0; i < total_len; i++) gmax = fmax(gmax, fabs(ref[i])), dmax = fmax(dmax, fabs(grads[i] - ref[i]));
                free(ref);
            } else {
                float *ref = fixture_file(gname->valuestring, total_len * sizeof(float));
                for (size_t i = 0; i < total_len; i++)
                    gmax = fmax(gmax, fabs(ref[i])), dmax = fmax(dmax, fabs((double)grads[i] - ref[i]));
                free(ref);
            }
            e_grad = dmax / gmax;
            /* our gradients are stored as float: 1e-6 of the largest is float rounding
             * with margin; against a float32 autograd the spec's 1e-4 applies */
            cr_expect(e_grad <= (f64 ? 1e-6 : 1e-4), "%s %s: gradient max err / max |grad| = %.3g", name, f64 ? "f64" : "f32", e_grad);
        }
        char grad_note[64] = "not stored";
        if (e_grad >= 0) snprintf(grad_note, sizeof grad_note, "%.2e", e_grad);
        cr_log_info("detloss fixture %s %s: n_fg %d, items max rel err %.2e, score sum %.2e, grads max err/max|g| %s", name,
                    f64 ? "f64" : "f32", res.n_fg, e_items, e_sum, grad_note);
    }
    free(grads);
    free(inputs);
    free(boxes);
    cJSON_Delete(doc);
    free(text);
}

Test(detloss, ultralytics_basic) { check_fixture("basic"); }
Test(detloss, ultralytics_overlapping_gts) { check_fixture("overlap"); }
Test(detloss, ultralytics_no_boxes) { check_fixture("noboxes"); }
Test(detloss, ultralytics_large_three_levels) { check_fixture("large"); }

/* ---- finite differences ---- */

/* fixed targets for the small config: image 0 three boxes (two overlapping), image 1 two */
static const float SMALL_BOXES[2][3][5] = {
    {{0, 0.30f, 0.35f, 0.40f, 0.45f}, {2, 0.38f, 0.40f, 0.35f, 0.50f}, {1, 0.75f, 0.70f, 0.30f, 0.35f}},
    {{1, 0.50f, 0.50f, 0.55f, 0.40f}, {0, 0.20f, 0.80f, 0.25f, 0.30f}, {0, 0, 0, 0, 0}},
};
static const int SMALL_COUNTS[2] = {3, 2};

static double frozen_total(const Head *h, const DetAssignment *as, const double *alpha) {
    DetLossResult r;
    detloss_loss_assigned_ex(&h->cfg, head_levels(h), as, alpha, NULL, &r, NULL);
    return r.total;
}

/* Assignment, target scores and CIoU alpha are no-grad constants upstream, so
 * the analytic gradient is checked against central differences of the loss
 * with those frozen at the unperturbed point; nothing then flips. */
static void finite_difference_check(int reg_max, uint64_t seed) {
    DetLossConfig cfg = small_config();
    cfg.reg_max = reg_max;
    Head h;
    head_make(&h, &cfg, 2, seed);
    DetTargets t = {2, 3, SMALL_COUNTS, &SMALL_BOXES[0][0][0]};
    DetAssignment as;
    char err[256];
    cr_assert(detloss_assign(&cfg, head_levels(&h), &t, &as, err, sizeof err), "%s", err);
    cr_assert(as.n_fg >= 10, "too few foreground anchors (%d) for a useful check", as.n_fg);
    double *alpha = calloc((size_t)as.batch * as.anchors, sizeof(double));
    DetLossResult r0;
    detloss_loss_assigned_ex(&cfg, head_levels(&h), &as, NULL, alpha, &r0, h.grad);

    DetHead head;
    detloss_head_init(&head, &cfg);
    double gmax = 0;
    for (int i = 0; i < cfg.nl; i++)
        for (size_t k = 0; k < h.len[i]; k++) gmax = fmax(gmax, fabs(h.grad[i][k]));

    int fg_list[4096], n_fg = 0;
    for (int ba = 0; ba < as.batch * as.anchors && n_fg < 4096; ba++)
        if (as.fg[ba]) fg_list[n_fg++] = ba;
    Rng rng = {seed + 77};
    const int samples = 200, channels = 4 * reg_max + cfg.nc;
    int checked = 0, kinks = 0;
    double worst = 0;
    for (int s = 0; s < samples; s++) {
        int b, a, c;
        if (s < 120) { /* box logits of foreground anchors: the CIoU and DFL paths */
            int ba = fg_list[(int)(rng_uniform(&rng) * n_fg)];
            b = ba / as.anchors, a = ba % as.anchors, c = (int)(rng_uniform(&rng) * 4 * reg_max);
        } else if (s < 170) { /* class logits anywhere: BCE */
            b = (int)(rng_uniform(&rng) * 2), a = (int)(rng_uniform(&rng) * as.anchors), c = 4 * reg_max + (int)(rng_uniform(&rng) * cfg.nc);
        } else {
            b = (int)(rng_uniform(&rng) * 2), a = (int)(rng_uniform(&rng) * as.anchors), c = (int)(rng_uniform(&rng) * channels);
        }
        DetAnchorRef ref = detloss_anchor(&head, b, a);
        float *x = h.data[ref.level] + ref.base + (size_t)c * ref.step;
        const float x0 = *x, xp = (float)(x0 + 1e-4), xm = (float)(x0 - 1e-4);
        *x = xp;
        double fp = frozen_total(&h, &as, alpha);
        *x = xm;
        double fm = frozen_total(&h, &as, alpha);
        *x = x0;
        double f0 = frozen_total(&h, &as, alpha);
        /* the perturbation is what float rounding made of it, exactly */
        double fd = (fp - fm) / ((double)xp - (double)xm);
        double slope_up = (fp - f0) / ((double)xp - x0), slope_down = (f0 - fm) / ((double)x0 - xm);
        if (fabs(slope_up - slope_down) > 1e-2 * gmax) { /* a min/max/clamp kink of CIoU inside the step */
            kinks++;
            continue;
        }
        double analytic = h.grad[ref.level][ref.base + (size_t)c * ref.step];
        double e = fabs(fd - analytic) / gmax;
        worst = fmax(worst, e);
        cr_expect(e < 1e-6, "reg_max %d image %d anchor %d channel %d: fd %.10g analytic %.10g", reg_max, b, a, c, fd, analytic);
        checked++;
    }
    cr_expect(kinks <= samples / 20, "%d of %d coordinates skipped at kinks", kinks, samples);
    cr_log_info("detloss finite differences (reg_max %d): %d coordinates, %d kinks skipped, max |fd - analytic| / max|g| = %.2e", reg_max,
                checked, kinks, worst);
    free(alpha);
    detloss_assignment_free(&as);
    head_free(&h);
}

Test(detloss, finite_differences_reg_max_16) { finite_difference_check(16, 1); }
Test(detloss, finite_differences_second_draw) { finite_difference_check(16, 2); }
Test(detloss, finite_differences_without_dfl) { finite_difference_check(1, 3); }

Test(detloss, ciou_gradient_matches_finite_differences) {
    Rng r = {12345};
    double worst = 0;
    for (int n = 0; n < 500; n++) {
        double a[4], b[4];
        double ax = 10 * rng_uniform(&r), ay = 10 * rng_uniform(&r), bx = 10 * rng_uniform(&r), by = 10 * rng_uniform(&r);
        double aw = 0.5 + 6 * rng_uniform(&r), ah = 0.5 + 6 * rng_uniform(&r), bw = 0.5 + 6 * rng_uniform(&r), bh = 0.5 + 6 * rng_uniform(&r);
        a[0] = ax, a[1] = ay, a[2] = ax + aw, a[3] = ay + ah;
        b[0] = bx, b[1] = by, b[2] = bx + bw, b[3] = by + bh;
        double g[4], alpha;
        detloss_ciou_alpha(a, b, NULL, &alpha, g);
        for (int k = 0; k < 4; k++) {
            const double step = 1e-6;
            double ap[4], am[4];
            memcpy(ap, a, sizeof ap);
            memcpy(am, a, sizeof am);
            ap[k] += step;
            am[k] -= step;
            double fd = (detloss_ciou_alpha(ap, b, &alpha, NULL, NULL) - detloss_ciou_alpha(am, b, &alpha, NULL, NULL)) / (ap[k] - am[k]);
            double dplus = (detloss_ciou_alpha(ap, b, &alpha, NULL, NULL) - detloss_ciou_alpha(a, b, &alpha, NULL, NULL)) / (ap[k] - a[k]);
            double dminus = (detloss_ciou_alpha(a, b, &alpha, NULL, NULL) - detloss_ciou_alpha(am, b, &alpha, NULL, NULL)) / (a[k] - am[k]);
            if (fabs(dplus - dminus) > 1e-3) continue; /* at a min/max kink */
            worst = fmax(worst, fabs(fd - g[k]));
            cr_expect(fabs(fd - g[k]) < 1e-7, "pair %d coord %d: fd %.10g analytic %.10g", n, k, fd, g[k]);
        }
    }
    cr_log_info("detloss CIoU gradient: max |fd - analytic| = %.2e", worst);
}

Test(detloss, ciou_values) {
    double a[4] = {1, 2, 5, 8}, far[4] = {20, 20, 21, 22};
    cr_expect(fabs(detloss_ciou(a, a, NULL) - 1) < 1e-7, "identical boxes have CIoU 1");
    /* disjoint: IoU 0; penalty = rho2 / c2 + v alpha with alpha = v / (v + 1 + eps) */
    double rho2 = (pow(20.5 - 3, 2) + pow(21 - 5, 2)), c2 = 20.0 * 20.0 + 20.0 * 20.0 + 1e-7;
    double v = 4 / (M_PI * M_PI) * pow(atan(1 / (2 + 1e-7)) - atan(4 / (6 + 1e-7)), 2);
    double expect = 0 - (rho2 / c2 + v * v / (v + 1 + 1e-7));
    cr_expect(fabs(detloss_ciou(a, far, NULL) - expect) < 1e-12, "disjoint CIoU %.15g vs %.15g", detloss_ciou(a, far, NULL), expect);
}

/* ---- DFL target split ---- */

Test(detloss, dfl_split_worked_example) {
    DflSplit s = detloss_dfl_split(3.7, 16);
    cr_expect_eq(s.lo, 3);
    cr_expect(fabs(s.w_lo - 0.3) < 1e-12 && fabs(s.w_hi - 0.7) < 1e-12, "weights %.17g %.17g", s.w_lo, s.w_hi);
    s = detloss_dfl_split(20.0, 16); /* clamped to reg_max - 1.01 = 14.99 */
    cr_expect_eq(s.lo, 14);
    cr_expect(fabs(s.distance - 14.99) < 1e-12 && fabs(s.w_lo - 0.01) < 1e-12 && fabs(s.w_hi - 0.99) < 1e-12);
    s = detloss_dfl_split(-0.5, 16);
    cr_expect(s.lo == 0 && s.distance == 0 && s.w_lo == 1 && s.w_hi == 0);
    s = detloss_dfl_split(5.0, 16); /* an integer distance puts all weight on its own bin */
    cr_expect(s.lo == 5 && s.w_lo == 1 && s.w_hi == 0);
}

/* ---- edge cases ---- */

static double softplus(double x) { return fmax(x, 0) + log1p(exp(-fabs(x))); }

Test(detloss, no_boxes_anywhere) {
    DetLossConfig cfg = small_config();
    Head h;
    head_make(&h, &cfg, 2, 9);
    int zero[2] = {0, 0};
    float pad[3 * 5] = {0};
    DetTargets none = {2, 0, NULL, NULL}, padded = {2, 3, zero, pad};
    DetLossResult r, r_padded;
    char err[256];
    cr_assert(detloss_forward_backward(&cfg, head_levels(&h), &none, &r, h.grad, err, sizeof err), "%s", err);
    double bce = 0, grad_err = 0;
    int cls0 = 4 * cfg.reg_max;
    for (int i = 0; i < cfg.nl; i++) {
        size_t plane = (size_t)cfg.level_h[i] * cfg.level_w[i];
        for (size_t k = 0; k < h.len[i]; k++) {
            int c = (int)(k / plane) % (cls0 + cfg.nc);
            double x = h.data[i][k];
            /* S = 1: d total / dx = batch * 0.5 * sigmoid(x) for class logits, 0 for box logits */
            double expect = c >= cls0 ? 2 * 0.5 / (1 + exp(-x)) : 0.0;
            if (c >= cls0) bce += softplus(x);
            grad_err = fmax(grad_err, fabs(h.grad[i][k] - expect));
        }
    }
    cr_expect(r.box == 0 && r.dfl == 0 && r.n_fg == 0 && r.score_sum == 0);
    cr_expect(fabs(r.cls - 0.5 * bce) < 1e-9 * bce, "cls %.12g vs 0.5 * sum BCE(x, 0) = %.12g", r.cls, 0.5 * bce);
    cr_expect(fabs(r.total - 2 * r.cls) < 1e-9 * r.total);
    cr_expect(grad_err < 1e-6, "gradient off by %g", grad_err);
    cr_assert(detloss_forward_backward(&cfg, head_levels(&h), &padded, &r_padded, NULL, err, sizeof err), "%s", err);
    cr_expect(r_padded.total == r.total && r_padded.n_fg == 0, "all-padding rows behave as no rows");
    head_free(&h);
}

Test(detloss, box_without_anchor_centre_is_never_positive) {
    DetLossConfig cfg = small_config();
    Head h;
    head_make(&h, &cfg, 1, 4);
    /* pixels 13..19 at imgsz 64: centres are at 4, 12, 20, ... (stride 8) and 8, 24, ... (stride 16) */
    float boxes[2][5] = {{1, 16.0f / 64, 16.0f / 64, 6.0f / 64, 6.0f / 64}, {0, 0.7f, 0.6f, 0.4f, 0.5f}};
    int count = 2;
    DetTargets t = {1, 2, &count, &boxes[0][0]};
    DetAssignment as;
    char err[256];
    cr_assert(detloss_assign(&cfg, head_levels(&h), &t, &as, err, sizeof err), "%s", err);
    cr_expect(as.n_fg > 0, "the second box has anchors");
    for (int a = 0; a < as.anchors; a++)
        if (as.fg[a]) cr_expect_eq(as.gt_index[a], 1, "anchor %d assigned to the anchor-free box", a);
    detloss_assignment_free(&as);

    count = 1; /* the anchor-free box alone: nothing positive, S = 1 */
    DetLossResult r;
    cr_assert(detloss_forward_backward(&cfg, head_levels(&h), &t, &r, NULL, err, sizeof err), "%s", err);
    cr_expect(r.n_fg == 0 && r.box == 0 && r.dfl == 0 && r.score_sum == 0);
    head_free(&h);
}

/* Predictions pushed to d_l = d_t = 15, d_r = d_b = 0 make every CIoU with a small
 * box negative, so all metrics are 0 and top-k is a pure tie: the lowest anchor
 * indices 0..9 are taken and only those inside the box turn positive, with t = 0. */
Test(detloss, topk_ties_take_lowest_anchor_index) {
    DetLossConfig cfg = small_config();
    Head h;
    head_make(&h, &cfg, 1, 5);
    DetHead head;
    detloss_head_init(&head, &cfg);
    for (int a = 0; a < head.anchors; a++) {
        DetAnchorRef ref = detloss_anchor(&head, 0, a);
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 16; j++) h.data[ref.level][ref.base + (size_t)(k * 16 + j) * ref.step] = (j == (k < 2 ? 15 : 0)) ? 30.0f : 0.0f;
    }
    float box[5] = {2, 10.0f / 64, 10.0f / 64, 20.0f / 64, 20.0f / 64}; /* pixels 0..20: centres 4, 12 of level 0, and 8 of level 1 */
    int count = 1;
    DetTargets t = {1, 1, &count, box};
    DetAssignment as;
    char err[256];
    cr_assert(detloss_assign(&cfg, head_levels(&h), &t, &as, err, sizeof err), "%s", err);
    cr_expect_eq(as.n_fg, 4, "fg %d", as.n_fg);
    cr_expect(as.fg[0] && as.fg[1] && as.fg[8] && as.fg[9] && !as.fg[64], "anchors 0, 1, 8, 9 (not 64, index beyond the top 10)");
    cr_expect(as.score_sum == 0);
    detloss_assignment_free(&as);
    head_free(&h);
}

Test(detloss, equal_iou_multi_gt_anchor_goes_to_first_row) {
    DetLossConfig cfg = small_config();
    Head h;
    head_make(&h, &cfg, 1, 6);
    /* rows 1 and 2 are the same box and class, so they have the same top-k and
     * claim the same anchors with equal IoU; row 0 competes for some of them */
    float boxes[3][5] = {{0, 0.6f, 0.4f, 0.2f, 0.2f}, {2, 0.5f, 0.5f, 0.5f, 0.5f}, {2, 0.5f, 0.5f, 0.5f, 0.5f}};
    int count = 3;
    DetTargets t = {1, 3, &count, &boxes[0][0]};
    DetAssignment as;
    char err[256];
    cr_assert(detloss_assign(&cfg, head_levels(&h), &t, &as, err, sizeof err), "%s", err);
    int to_row1 = 0;
    for (int a = 0; a < as.anchors; a++) {
        if (!as.fg[a]) continue;
        cr_expect(as.gt_index[a] != 2, "anchor %d went to the later of two identical boxes", a);
        if (as.gt_index[a] != 1) continue;
        to_row1++;
        cr_expect_eq(as.label[a], 2);
    }
    cr_expect(to_row1 >= 5, "the duplicated box keeps its anchors (%d)", to_row1);
    detloss_assignment_free(&as);
    head_free(&h);
}

Test(detloss, bad_targets_and_config_are_errors) {
    DetLossConfig cfg = small_config();
    Head h;
    head_make(&h, &cfg, 1, 7);
    float box[5] = {3, 0.5f, 0.5f, 0.2f, 0.2f};
    int count = 1;
    DetTargets t = {1, 1, &count, box};
    DetLossResult r;
    char err[256];
    const float *const *lv = head_levels(&h);
    cr_expect(!detloss_forward_backward(&cfg, lv, &t, &r, NULL, err, sizeof err) && strstr(err, "class id"), "class 3 of nc 3: %s", err);
    box[0] = -1;
    cr_expect(!detloss_forward_backward(&cfg, lv, &t, &r, NULL, err, sizeof err) && strstr(err, "class id"), "class -1: %s", err);
    box[0] = 1.5f;
    cr_expect(!detloss_forward_backward(&cfg, lv, &t, &r, NULL, err, sizeof err) && strstr(err, "class id"), "class 1.5: %s", err);
    box[0] = 2;
    cr_expect(detloss_forward_backward(&cfg, lv, &t, &r, NULL, err, sizeof err), "class 2 is fine: %s", err);
    count = 2;
    cr_expect(!detloss_forward_backward(&cfg, lv, &t, &r, NULL, err, sizeof err) && strstr(err, "count"), "count > max_boxes: %s", err);
    count = 1;
    box[3] = NAN;
    cr_expect(!detloss_forward_backward(&cfg, lv, &t, &r, NULL, err, sizeof err), "NaN box");
    box[3] = 0.2f;
    DetLossConfig bad = cfg;
    bad.nc = 0;
    cr_expect(!detloss_forward_backward(&bad, lv, &t, &r, NULL, err, sizeof err), "nc 0");
    bad = cfg;
    bad.topk = 81; /* more than the 80 anchors: torch.topk raises */
    cr_expect(!detloss_forward_backward(&bad, lv, &t, &r, NULL, err, sizeof err) && strstr(err, "topk"), "%s", err);
    bad = cfg;
    bad.nl = 0;
    cr_expect(!detloss_forward_backward(&bad, lv, &t, &r, NULL, err, sizeof err), "nl 0");
    bad = cfg;
    bad.reg_max = DETLOSS_MAX_REG_MAX + 1;
    cr_expect(!detloss_forward_backward(&bad, lv, &t, &r, NULL, err, sizeof err), "reg_max too large");
    head_free(&h);
}

/* ---- speed: 640, 8400 anchors, 80 classes, batch 2, 50 boxes ---- */

Test(detloss, runs_at_640_in_well_under_a_second) {
    DetLossConfig cfg;
    int hs[3] = {80, 40, 20};
    float st[3] = {8, 16, 32};
    detloss_config_default(&cfg, 80, 3, hs, hs, st);
    Head h;
    head_make(&h, &cfg, 2, 11);
    float boxes[2][25][5];
    int counts[2] = {25, 25};
    Rng r = {99};
    for (int b = 0; b < 2; b++)
        for (int g = 0; g < 25; g++) random_box(&r, 80, 0.02, 0.4, boxes[b][g]);
    DetTargets t = {2, 25, counts, &boxes[0][0][0]};
    DetLossResult res;
    char err[256];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert(detloss_forward_backward(&cfg, head_levels(&h), &t, &res, h.grad, err, sizeof err), "%s", err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    cr_expect(res.n_fg > 100 && isfinite(res.total), "n_fg %d total %g", res.n_fg, res.total);
    /* this runner is built -O1 with ASan/UBSan, several times slower than -O2 */
    cr_expect(secs < 5.0, "640 forward+backward took %.3f s", secs);
    cr_log_info("detloss at 640 (8400 anchors, nc 80, batch 2, 50 boxes): %.3f s, n_fg %d", secs, res.n_fg);
    head_free(&h);
}

/* The oracle runs on the OpenMP team: its loss and gradient bits must not
 * follow the thread count, and a gradient-only call (no result) must give
 * the gradient of a full one. */
Test(detloss, same_bits_for_any_thread_count_and_gradient_only) {
    DetLossConfig cfg;
    int hs[3] = {40, 20, 10}, ws[3] = {40, 20, 10};
    float st[3] = {8, 16, 32};
    detloss_config_default(&cfg, 5, 3, hs, ws, st);
    enum { B = 3, M = 6 };
    Head h;
    head_make(&h, &cfg, B, 21);
    float boxes[B][M][5];
    int counts[B] = {6, 0, 4};
    Rng r = {7};
    for (int b = 0; b < B; b++)
        for (int g = 0; g < M; g++) random_box(&r, 5, 0.05, 0.5, boxes[b][g]);
    DetTargets t = {B, M, counts, &boxes[0][0][0]};
    float *first[DETLOSS_MAX_LEVELS];
    DetLossResult res[3];
    char err[256];
    const int threads_before = omp_get_max_threads(), threads[3] = {1, 3, 2};
    for (int run = 0; run < 3; run++) {
        omp_set_num_threads(threads[run]);
        cr_assert(detloss_forward_backward(&cfg, head_levels(&h), &t, run == 2 ? NULL : &res[run], h.grad, err, sizeof err), "%s", err);
        for (int i = 0; i < cfg.nl; i++) {
            if (run == 0) {
                first[i] = malloc(h.len[i] * sizeof(float));
                cr_assert(first[i]);
                memcpy(first[i], h.grad[i], h.len[i] * sizeof(float));
            } else
                cr_expect(!memcmp(first[i], h.grad[i], h.len[i] * sizeof(float)), "run %d (%d threads): level %d's gradient differs", run, threads[run], i);
        }
    }
    omp_set_num_threads(threads_before);
    cr_expect(res[0].n_fg > 20, "n_fg %d", res[0].n_fg);
    cr_expect(res[0].total == res[1].total && res[0].box == res[1].box && res[0].cls == res[1].cls && res[0].dfl == res[1].dfl &&
                  res[0].score_sum == res[1].score_sum && res[0].n_fg == res[1].n_fg,
              "1 thread: total %.17g, 3 threads: %.17g", res[0].total, res[1].total);
    for (int i = 0; i < cfg.nl; i++) free(first[i]);
    head_free(&h);
}
