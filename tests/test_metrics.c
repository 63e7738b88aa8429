/* tests/test_metrics.c — suite `metrics`: NMS, letterbox mapping, §8.3
 * matching, AP/mAP/P/R/fitness and the validation table, by hand-worked cases
 * and against fixtures from ultralytics 8.3.63 (tests/fixtures/metrics/,
 * made by tools/make_metrics_fixtures.py). Owns these tests only. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/train/confusion.h"
#include "../runtime/train/metrics.h"

#define FIX "tests/fixtures/metrics/"

/* ------------------------------------------------------------ helpers */

static Detection det(float x1, float y1, float x2, float y2, float score, int cls) {
    Detection d = {x1, y1, x2, y2, score, cls};
    return d;
}

static void tp_row(const uint8_t *tp, int d, char out[METRICS_NIOU + 1]) {
    for (int t = 0; t < METRICS_NIOU; t++) out[t] = tp[d * METRICS_NIOU + t] ? '1' : '0';
    out[METRICS_NIOU] = 0;
}

static void expect_row(const uint8_t *tp, int d, const char *want) {
    char got[METRICS_NIOU + 1];
    tp_row(tp, d, got);
    cr_expect_str_eq(got, want, "detection %d: tp %s, want %s", d, got, want);
}

static Metrics compute(MetricsAccumulator *acc) {
    Metrics m;
    cr_assert_eq(metrics_compute(acc, &m), 0);
    return m;
}

/* One class, 2 labels; detections by score: TP (0.9), FP (0.8), TP (0.7). */
static MetricsAccumulator *tp_fp_tp(void) {
    MetricsAccumulator *acc = metrics_init(1);
    const float gt[] = {0, 0, 10, 10, 100, 100, 120, 120};
    const int gc[] = {0, 0};
    const Detection d[] = {det(0, 0, 10, 10, 0.9f, 0), det(50, 50, 60, 60, 0.8f, 0),
                           det(100, 100, 120, 120, 0.7f, 0)};
    cr_assert_eq(metrics_add_image(acc, d, 3, gt, gc, 2), 0);
    return acc;
}

/* ------------------------------------------------------------ AP */

/* recall [.5 .5 1], precision [1 .5 2/3]; mrec [0 .5 .5 1 1], envelope
 * mpre [1 1 2/3 2/3 0]. np.interp at x = 0.50 lands on the last xp equal to
 * 0.5 (index 2), so y_50 = 2/3; y_0..49 = 1, y_50..99 = 2/3, y_100 = 0
 * (x = 1 hits the sentinel). Trapezoid: 0.01·(Σy − (y0 + y100)/2)
 * = 0.01·(50 + 100/3 − 0.5) = 0.8283333… = 497/600. */
Test(metrics, ap_tp_fp_tp_by_hand) {
    const double rec[] = {0.5, 0.5, 1.0}, pre[] = {1.0, 0.5, 2.0 / 3.0};
    cr_expect_float_eq(metrics_compute_ap(rec, pre, 3), 497.0 / 600.0, 1e-12);

    MetricsAccumulator *acc = tp_fp_tp();
    Metrics m = compute(acc);
    cr_assert_eq(m.n_classes, 1);
    for (int t = 0; t < METRICS_NIOU; t++) cr_expect_float_eq(m.classes[0].ap[t], 497.0 / 600.0, 1e-12);
    cr_expect_float_eq(m.map50, 497.0 / 600.0, 1e-12);
    cr_expect_float_eq(m.map50_95, 497.0 / 600.0, 1e-12);
    /* fitness = 0.1 mAP50 + 0.9 mAP50-95 */
    cr_expect_float_eq(m.fitness, 0.1 * m.map50 + 0.9 * m.map50_95, 1e-15);
    metrics_result_free(&m);
    metrics_free(acc);
}

/* All detections exact and ranked first: precision 1 everywhere, recall
 * reaches 1 at the last detection, but x = 1 interpolates onto the sentinel
 * mpre = 0, so AP = 0.01·(101 − 1 − 0.5) = 0.995, Ultralytics' known ceiling. */
Test(metrics, perfect_detections_give_0995) {
    MetricsAccumulator *acc = metrics_init(2);
    const float gt[] = {10, 10, 50, 50, 60, 60, 90, 120, 5, 70, 40, 100};
    const int gc[] = {0, 1, 0};
    const Detection d[] = {det(10, 10, 50, 50, 0.9f, 0), det(60, 60, 90, 120, 0.8f, 1),
                           det(5, 70, 40, 100, 0.7f, 0)};
    cr_assert_eq(metrics_add_image(acc, d, 3, gt, gc, 3), 0);
    Metrics m = compute(acc);
    cr_expect_float_eq(m.map50, 0.995, 1e-12);
    cr_expect_float_eq(m.map50_95, 0.995, 1e-12);
    cr_expect_float_eq(m.mp, 1.0, 1e-12);
    cr_expect_float_eq(m.mr, 1.0, 1e-12);
    metrics_result_free(&m);
    metrics_free(acc);
}

/* Class 0 perfect (0.995), class 1 has labels but no detection (AP 0):
 * mAP50 = (0.995 + 0) / 2. Class 2 is only predicted: not evaluated. */
Test(metrics, missing_and_unlabelled_classes) {
    MetricsAccumulator *acc = metrics_init(3);
    const float gt[] = {0, 0, 10, 10, 20, 20, 30, 30};
    const int gc[] = {0, 1};
    const Detection d[] = {det(40, 40, 50, 50, 0.99f, 2), det(0, 0, 10, 10, 0.9f, 0)};
    cr_assert_eq(metrics_add_image(acc, d, 2, gt, gc, 2), 0);
    Metrics m = compute(acc);
    cr_assert_eq(m.n_classes, 2);
    cr_expect_eq(m.classes[0].cls, 0);
    cr_expect_eq(m.classes[1].cls, 1);
    cr_expect_float_eq(m.classes[1].ap50, 0.0, 0);
    cr_expect_float_eq(m.map50, 0.4975, 1e-12);
    cr_expect_eq(m.instances, 2);
    cr_expect_eq(m.class_instances[2], 0);
    metrics_result_free(&m);
    metrics_free(acc);
}

/* P/R at max smoothed F1 for TP, FP, TP: below conf 0.7 the curves hold their
 * final values P = 2/3, R = 1 (F1 0.8, the maximum); the smoothed F1 is flat
 * there, so its argmax is grid index 0 and P = 2/3, R = 1. */
Test(metrics, precision_recall_simple) {
    MetricsAccumulator *acc = tp_fp_tp();
    Metrics m = compute(acc);
    cr_expect_float_eq(m.mp, 2.0 / 3.0, 1e-12);
    cr_expect_float_eq(m.mr, 1.0, 1e-12);
    metrics_result_free(&m);
    metrics_free(acc);
}

Test(metrics, no_true_positive_gives_zeros) {
    MetricsAccumulator *acc = metrics_init(2);
    const float gt[] = {0, 0, 10, 10};
    const int gc[] = {1};
    const Detection d[] = {det(0, 0, 10, 10, 0.9f, 0)};   /* right box, wrong class */
    cr_assert_eq(metrics_add_image(acc, d, 1, gt, gc, 1), 0);
    cr_assert_eq(metrics_add_image(acc, NULL, 0, NULL, NULL, 0), 0);
    Metrics m = compute(acc);
    cr_expect_eq(m.seen, 2);
    cr_expect_eq(m.instances, 1);
    cr_expect_eq(m.n_classes, 0);
    cr_expect(m.mp == 0 && m.mr == 0 && m.map50 == 0 && m.map50_95 == 0 && m.fitness == 0);
    metrics_result_free(&m);
    metrics_free(acc);
}

Test(metrics, bad_class_rejected_and_state_kept) {
    MetricsAccumulator *acc = metrics_init(2);
    const float gt[] = {0, 0, 10, 10};
    const int bad[] = {2};
    const Detection d[] = {det(0, 0, 10, 10, 0.9f, 0)};
    cr_expect_eq(metrics_add_image(acc, d, 1, gt, bad, 1), -1);
    const Detection dbad[] = {det(0, 0, 10, 10, 0.9f, -1)};
    cr_expect_eq(metrics_add_image(acc, dbad, 1, NULL, NULL, 0), -1);
    Metrics m = compute(acc);
    cr_expect_eq(m.seen, 0);
    metrics_result_free(&m);
    cr_expect_null(metrics_init(0));
    metrics_free(acc);
}

/* ------------------------------------------------------------ matching */

Test(metrics, iou_thresholds_are_float_linspace) {
    float t[METRICS_NIOU];
    metrics_iou_thresholds(t);
    for (int i = 0; i < METRICS_NIOU; i++) cr_expect_eq(t[i], (float)(0.5 + 0.05 * i), "t[%d]", i);
}

/* IoU 50/(100 + 1e-7) rounds to exactly 0.5f: TP at 0.50 only; 75/100 =
 * 0.75f: TP from 0.50 to 0.75 (>= counts). On a unit box the eps is not lost
 * (1 + 1e-7 -> 1.0000001f), so IoU < 0.5 and the detection is FP. */
Test(metrics, iou_exactly_at_threshold_counts) {
    uint8_t tp[3 * METRICS_NIOU];
    const float gt[] = {0, 0, 10, 10};
    const int gc[] = {0};
    Detection d[] = {det(0, 0, 10, 5, 0.9f, 0)};
    cr_assert_eq(metrics_match(d, 1, gt, gc, 1, tp), 0);
    expect_row(tp, 0, "1000000000");
    d[0] = det(0, 0, 10, 7.5f, 0.9f, 0);
    cr_assert_eq(metrics_match(d, 1, gt, gc, 1, tp), 0);
    expect_row(tp, 0, "1111110000");
    const float unit[] = {0, 0, 1, 1};
    d[0] = det(0, 0, 1, 0.5f, 0.9f, 0);
    cr_assert_eq(metrics_match(d, 1, unit, gc, 1, tp), 0);
    expect_row(tp, 0, "0000000000");
}

/* Labels A [0,0,10,10], B [2,0,12,10]. det0 = A exactly. det1 [0.5,0,10.5,10]
 * overlaps A by 95/105 = 0.905 and B by 85/115 = 0.739: its best label is A,
 * which det0 (lower index) already holds, and it does not fall back to B, so
 * det1 is FP everywhere. det2 [1,0,11,10] of another class matches nothing. */
Test(metrics, match_one_detection_two_labels) {
    uint8_t tp[3 * METRICS_NIOU];
    const float gt[] = {0, 0, 10, 10, 2, 0, 12, 10};
    const int gc[] = {0, 0};
    const Detection d[] = {det(0, 0, 10, 10, 0.9f, 0), det(0.5f, 0, 10.5f, 10, 0.8f, 0),
                           det(1, 0, 11, 10, 0.7f, 1)};
    cr_assert_eq(metrics_match(d, 3, gt, gc, 2, tp), 0);
    expect_row(tp, 0, "1111111111");
    expect_row(tp, 1, "0000000000");
    expect_row(tp, 2, "0000000000");
    /* Alone, det1 takes A (0.905: thresholds 0.50..0.90). */
    cr_assert_eq(metrics_match(d + 1, 1, gt, gc, 2, tp), 0);
    expect_row(tp, 0, "1111111110");
}

/* Two detections on one label: det0 (higher score, IoU 0.9) wins at every
 * threshold it passes, although det1 has IoU 1; at 0.95 only det1 qualifies. */
Test(metrics, match_two_detections_one_label) {
    uint8_t tp[2 * METRICS_NIOU];
    const float gt[] = {0, 0, 10, 10};
    const int gc[] = {0};
    const Detection d[] = {det(0, 0, 10, 9, 0.9f, 0), det(0, 0, 10, 10, 0.8f, 0)};
    cr_assert_eq(metrics_match(d, 2, gt, gc, 1, tp), 0);
    expect_row(tp, 0, "1111111110");
    expect_row(tp, 1, "0000000001");
}

/* det0 [4,0,16,10] has IoU exactly 0.5 with both labels L0 [0,0,12,10] and
 * L1 [8,0,20,10]; numpy's reversed argsort puts the higher label first, so it
 * takes L1 and det1 (= L0) is a TP too (checked against 8.3.63's
 * match_predictions). Taking L0 instead would leave det1 a FP at 0.50. */
Test(metrics, match_equal_iou_prefers_higher_label) {
    uint8_t tp[2 * METRICS_NIOU];
    const float gt[] = {0, 0, 12, 10, 8, 0, 20, 10};
    const int gc[] = {0, 0};
    const Detection d[] = {det(4, 0, 16, 10, 0.9f, 0), det(0, 0, 12, 10, 0.8f, 0)};
    cr_assert_eq(metrics_match(d, 2, gt, gc, 2, tp), 0);
    expect_row(tp, 0, "1000000000");
    expect_row(tp, 1, "1111111111");
}

/* ------------------------------------------------------------ NMS */

/* Channel-major [4 + nc][A] input from per-anchor rows {cx, cy, w, h, s0..}. */
static float *pred_of(const float *rows, int A, int nc) {
    float *p = malloc((size_t)(4 + nc) * (size_t)A * sizeof *p);
    for (int a = 0; a < A; a++)
        for (int k = 0; k < 4 + nc; k++) p[(size_t)k * (size_t)A + (size_t)a] = rows[a * (4 + nc) + k];
    return p;
}

/* Box A [0,0,100,100]; B [0,0,100,h] has IoU h/100 with it. */
static int nms_pair(float h, int cls_b, double iou) {
    const float rows[] = {50, 50, 100, 100, 0.9f, 0.0f,
                          50, h / 2, 100, h, cls_b ? 0.0f : 0.8f, cls_b ? 0.8f : 0.0f};
    float *p = pred_of(rows, 2, 2);
    Detection out[4];
    int n = nms_image(p, 2, 2, &(NmsOptions){.conf = 0.001, .iou = iou, .max_det = 300, .multi_label = true}, out);
    free(p);
    return n;
}

Test(metrics, nms_threshold_is_strict) {
    cr_expect_eq(nms_pair(71, 0, 0.7), 1, "IoU 0.71 > 0.7: suppressed");
    cr_expect_eq(nms_pair(69, 0, 0.7), 2, "IoU 0.69: kept");
    cr_expect_eq(nms_pair(70, 0, 0.7), 2, "IoU 0.7f is not > 0.7: kept");
    cr_expect_eq(nms_pair(70, 0, 0.69), 1, "IoU 0.70 > 0.69: suppressed");
    cr_expect_eq(nms_pair(100, 1, 0.7), 2, "other class: offset by 7680, never overlaps");
}

/* Three anchors, two classes: anchor 0's classes tie at 0.5, anchor 1's
 * best is exactly conf 0.25 (not > conf), anchor 2 has 0.3 and 0.7. */
static const float NMS_ROWS[] = {20, 20, 10, 10, 0.5f, 0.5f,
                                 60, 60, 10, 10, 0.25f, 0.1f,
                                 100, 100, 10, 10, 0.3f, 0.7f};

Test(metrics, nms_multilabel_conf_and_order) {
    /* anchor 0: both classes, class 0 first; anchor 2: both classes emitted */
    float *p = pred_of(NMS_ROWS, 3, 2);
    Detection out[8];
    int n = nms_image(p, 3, 2, &(NmsOptions){.conf = 0.25, .iou = 0.7, .max_det = 300, .multi_label = true}, out);
    cr_assert_eq(n, 4);
    cr_expect(out[0].score == 0.7f && out[0].cls == 1 && out[0].x1 == 95);
    cr_expect(out[1].score == 0.5f && out[1].cls == 0 && out[1].x1 == 15);
    cr_expect(out[2].score == 0.5f && out[2].cls == 1 && out[2].x1 == 15);
    cr_expect(out[3].score == 0.3f && out[3].cls == 0);
    /* nc == 1: the single class, same threshold rule. */
    const float one[] = {20, 20, 10, 10, 0.5f, 60, 60, 10, 10, 0.2f};
    float *q = pred_of(one, 2, 1);
    cr_expect_eq(nms_image(q, 2, 1, &(NmsOptions){.conf = 0.25, .iou = 0.7, .max_det = 300, .multi_label = true}, out), 1);
    free(p);
    free(q);
}

/* Prediction's NMS (multi_label=False): each anchor's best class alone
 * (cls.max(1): the first index of a tie), kept when it is above conf. On
 * NMS_ROWS anchor 0 ties (class 0 only), anchor 1 falls at conf, anchor 2
 * keeps class 1 and drops class 0's 0.3 that validation keeps. */
Test(metrics, nms_single_label_keeps_each_anchors_best_class) {
    float *p = pred_of(NMS_ROWS, 3, 2);
    Detection out[8];
    int n = nms_image(p, 3, 2, &(NmsOptions){.conf = 0.25, .iou = 0.7, .max_det = 300, .multi_label = false}, out);
    cr_assert_eq(n, 2);
    cr_expect(out[0].score == 0.7f && out[0].cls == 1 && out[0].x1 == 95);
    cr_expect(out[1].score == 0.5f && out[1].cls == 0 && out[1].x1 == 15);
    /* a best class at or under conf leaves the anchor out even when NMS would keep it */
    cr_expect_eq(nms_image(p, 3, 2, &(NmsOptions){.conf = 0.7, .iou = 0.7, .max_det = 300, .multi_label = false}, out), 0);
    free(p);
}

/* torch compares float32 scores with the threshold cast to float32:
 * 0.001f > 0.001 in double, but not in float32, so the box is dropped
 * (torch.tensor([0.001]) > 0.001 is False). */
Test(metrics, nms_conf_compared_in_float32) {
    const float rows[] = {20, 20, 10, 10, 0.001f, 60, 60, 10, 10, nextafterf(0.001f, 1)};
    float *p = pred_of(rows, 2, 1);
    Detection out[2];
    cr_expect_eq(nms_image(p, 2, 1, &(NmsOptions){.conf = 0.001, .iou = 0.7, .max_det = 300, .multi_label = true}, out), 1);
    cr_expect_eq(out[0].x1, 55);
    free(p);
}

Test(metrics, nms_max_det_keeps_highest) {
    float rows[6 * 5];
    for (int a = 0; a < 6; a++) {
        const float r[] = {20.0f + 50.0f * (float)a, 20, 10, 10, 0.1f * (float)(a + 1)};
        memcpy(rows + a * 5, r, sizeof r);
    }
    float *p = pred_of(rows, 6, 1);
    Detection out[3];
    cr_assert_eq(nms_image(p, 6, 1, &(NmsOptions){.conf = 0.001, .iou = 0.7, .max_det = 3, .multi_label = true}, out), 3);
    cr_expect(out[0].score == 0.6f && out[1].score == 0.5f && out[2].score == 0.4f);
    cr_expect_eq(nms_image(p, 6, 1, &(NmsOptions){.conf = 0.001, .iou = 0.7, .max_det = 0, .multi_label = true}, out), 0);
    cr_expect_eq(nms_image(p, 6, 0, &(NmsOptions){.conf = 0.001, .iou = 0.7, .max_det = 3, .multi_label = true}, out), -1);
    free(p);
}

/* ------------------------------------------------------------ mapping, table */

/* 800x600 into 640: ratio 0.8, 640x480, top pad round(80 - 0.1) = 80. */
Test(metrics, letterbox_mapping_and_clip) {
    float b[4] = {100, 180, 300, 380};
    metrics_box_to_original(b, 0.8f, 0, 80, 800, 600);
    cr_expect(b[0] == 125 && b[1] == 125 && b[2] == 375 && b[3] == 375);
    float c[4] = {-10, 50, 700, 700};
    metrics_box_to_original(c, 0.8f, 0, 80, 800, 600);
    cr_expect(c[0] == 0 && c[1] == 0 && c[2] == 800 && c[3] == 600);
}

Test(metrics, table_format) {
    char line[256];
    metrics_format_header(line, sizeof line);
    cr_expect_str_eq(line, "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95)");
    metrics_format_row(line, sizeof line, "all", 128, 929, 0.6401, 0.53791, 0.6054, 0.44812);
    cr_expect_str_eq(line, "                   all        128        929       0.64      0.538      0.605      0.448");
    metrics_format_row(line, sizeof line, "x", 1, 2, -NAN, 1e-5, 1, 0);
    cr_expect_str_eq(line, "                     x          1          2        nan      1e-05          1          0");
}

/* ------------------------------------------------------------ fixtures */

static cJSON *load_fixture(const char *name) {
    char path[256];
    snprintf(path, sizeof path, FIX "%s.json", name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "missing %s (tools/make_metrics_fixtures.py)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    cr_assert_not_null(j, "%s: bad JSON", path);
    return j;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "no number %s", key);
    return v->valuedouble;
}

static double rel(double got, double want) {
    double d = fabs(got - want);
    return want != 0 ? d / fabs(want) : d;
}

/* Relative tolerance for AP/P/R/mAP/fitness; the arithmetic mirrors numpy so
 * the observed differences are 0 or a few ulps (logged with --verbose). */
#define REL_TOL 1e-6

/* Every count of Ultralytics' matrix (rows predicted, columns true). */
static void check_confusion(const char *name, const ConfusionMatrix *cm, const cJSON *want) {
    cr_assert_eq(cJSON_GetArraySize(want), cm->nc + 1, "%s: confusion rows", name);
    for (int r = 0; r <= cm->nc; r++) {
        const cJSON *row = cJSON_GetArrayItem(want, r);
        cr_assert_eq(cJSON_GetArraySize(row), cm->nc + 1);
        for (int c = 0; c <= cm->nc; c++)
            cr_expect_eq(confusion_at(cm, r, c), (long)cJSON_GetArrayItem(row, c)->valuedouble,
                         "%s: confusion[%d][%d] %ld, Ultralytics %ld", name, r, c, confusion_at(cm, r, c),
                         (long)cJSON_GetArrayItem(row, c)->valuedouble);
    }
}

/* ap_per_class' curves at the stored indices; prec_values has rows only for
 * the classes with predictions. Returns the worst relative difference. */
static double check_curves(const char *name, const Metrics *m, const cJSON *want) {
    if (cJSON_IsNull(want)) {
        cr_expect_eq(m->n_classes, 0, "%s: curves without Ultralytics' curves", name);
        return 0;
    }
    const cJSON *idx = cJSON_GetObjectItem(want, "index");
    const struct { const char *key; const double *got; } curves[] = {
        {"p", m->p_curve}, {"r", m->r_curve}, {"f1", m->f1_curve}, {"pr", m->pr_curve}};
    double worst = 0;
    for (size_t k = 0; k < sizeof curves / sizeof curves[0]; k++) {
        const cJSON *rows = cJSON_GetObjectItem(want, curves[k].key);
        const bool pr = !strcmp(curves[k].key, "pr");
        int wr = 0;
        for (int ci = 0; ci < m->n_classes; ci++) {
            if (pr && !m->classes[ci].has_pr) continue;
            const cJSON *row = cJSON_GetArrayItem(rows, wr++);
            cr_assert_not_null(row, "%s: %s has fewer rows than the classes with curves", name, curves[k].key);
            for (int i = 0; i < cJSON_GetArraySize(idx); i++) {
                const int at = cJSON_GetArrayItem(idx, i)->valueint;
                const double got = curves[k].got[(size_t)ci * METRICS_NCURVE + (size_t)at];
                const double w = cJSON_GetArrayItem(row, i)->valuedouble, r = rel(got, w);
                worst = fmax(worst, r);
                cr_expect(r <= REL_TOL, "%s class %d %s[%d]: %.17g vs %.17g", name, m->classes[ci].cls, curves[k].key,
                          at, got, w);
            }
        }
        cr_expect_eq(wr, cJSON_GetArraySize(rows), "%s: %s rows", name, curves[k].key);
    }
    return worst;
}

static void check_val_fixture(const char *name) {
    cJSON *j = load_fixture(name);
    const int nc = (int)num(j, "nc");
    const char *version = cJSON_GetObjectItem(j, "ultralytics")->valuestring;
    MetricsAccumulator *acc = metrics_init(nc);
    ConfusionMatrix cm;
    cr_assert(confusion_init(&cm, nc, 0.001));
    const cJSON *im;
    int tp_rows = 0;
    cJSON_ArrayForEach(im, cJSON_GetObjectItem(j, "images")) {
        const float ratio = (float)num(im, "ratio"), px = (float)num(im, "pad_x"), py = (float)num(im, "pad_y");
        const int ow = (int)num(im, "orig_w"), oh = (int)num(im, "orig_h");
        const cJSON *gcls = cJSON_GetObjectItem(im, "gt_cls"), *gbox = cJSON_GetObjectItem(im, "gt_net_xyxy");
        const cJSON *dets = cJSON_GetObjectItem(im, "dets"), *tpj = cJSON_GetObjectItem(im, "tp");
        const int ng = cJSON_GetArraySize(gcls), nd = cJSON_GetArraySize(dets);
        float *gt = malloc(sizeof(float) * 4 * (size_t)(ng + 1));
        int *gc = malloc(sizeof(int) * (size_t)(ng + 1));
        Detection *d = malloc(sizeof(Detection) * (size_t)(nd + 1));
        uint8_t *tp = malloc((size_t)(nd + 1) * METRICS_NIOU);
        for (int i = 0; i < ng; i++) {
            gc[i] = cJSON_GetArrayItem(gcls, i)->valueint;
            for (int k = 0; k < 4; k++)
                gt[4 * i + k] = (float)cJSON_GetArrayItem(cJSON_GetArrayItem(gbox, i), k)->valuedouble;
            metrics_box_to_original(gt + 4 * i, ratio, px, py, ow, oh);
        }
        for (int i = 0; i < nd; i++) {
            const cJSON *r = cJSON_GetArrayItem(dets, i);
            float v[6];
            for (int k = 0; k < 6; k++) v[k] = (float)cJSON_GetArrayItem(r, k)->valuedouble;
            d[i] = det(v[0], v[1], v[2], v[3], v[4], (int)v[5]);
        }
        metrics_dets_to_original(d, nd, ratio, px, py, ow, oh);
        cr_assert_eq(metrics_match(d, nd, gt, gc, ng, tp), 0);
        for (int i = 0; i < cJSON_GetArraySize(tpj) && ng > 0; i++, tp_rows++)
            for (int t = 0; t < METRICS_NIOU; t++)
                cr_expect_eq(tp[i * METRICS_NIOU + t],
                             cJSON_GetArrayItem(cJSON_GetArrayItem(tpj, i), t)->valueint,
                             "%s: tp[%d][%d]", name, i, t);
        cr_assert_eq(metrics_add_image(acc, d, nd, gt, gc, ng), 0);
        cr_assert(confusion_add_image(&cm, d, nd, gt, gc, ng));
        free(gt);
        free(gc);
        free(d);
        free(tp);
    }
    Metrics m = compute(acc);
    const cJSON *e = cJSON_GetObjectItem(j, "expected");
    cr_expect_eq(m.seen, (long)num(e, "seen"));
    cr_expect_eq(m.instances, (long)num(e, "instances"));
    double worst = 0;
    const struct { const char *key; double got; } top[] = {
        {"mp", m.mp}, {"mr", m.mr}, {"map50", m.map50}, {"map50_95", m.map50_95}, {"fitness", m.fitness}};
    for (size_t k = 0; k < sizeof top / sizeof top[0]; k++) {
        /* 8.4 and later changed fitness; only 8.3.x fixtures carry the 8.3.63 rule. */
        if (!strcmp(top[k].key, "fitness") && strncmp(version, "8.3.", 4) != 0) continue;
        const double want = num(e, top[k].key), r = rel(top[k].got, want);
        worst = fmax(worst, r);
        cr_expect(r <= REL_TOL, "%s %s: %.17g vs %.17g", name, top[k].key, top[k].got, want);
    }
    const cJSON *classes = cJSON_GetObjectItem(e, "classes");
    cr_assert_eq(m.n_classes, cJSON_GetArraySize(classes), "%s: evaluated classes", name);
    for (int ci = 0; ci < m.n_classes; ci++) {
        const cJSON *c = cJSON_GetArrayItem(classes, ci);
        const MetricsClass *row = &m.classes[ci];
        cr_expect_eq(row->cls, (int)num(c, "cls"));
        cr_expect_eq(row->images, (long)num(c, "images"));
        cr_expect_eq(row->instances, (long)num(c, "instances"));
        const double got[] = {row->p, row->r, row->ap50, row->ap50_95};
        const char *keys[] = {"p", "r", "ap50", "ap50_95"};
        for (int k = 0; k < 4; k++) {
            const double r = rel(got[k], num(c, keys[k]));
            worst = fmax(worst, r);
            cr_expect(r <= REL_TOL, "%s class %d %s: %.17g vs %.17g", name, row->cls, keys[k], got[k], num(c, keys[k]));
        }
        for (int t = 0; t < METRICS_NIOU; t++) {
            const double want = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "ap"), t)->valuedouble;
            worst = fmax(worst, rel(row->ap[t], want));
            cr_expect(rel(row->ap[t], want) <= REL_TOL, "%s class %d ap[%d]", name, row->cls, t);
        }
    }
    /* The table, per-class rows included (8.3.63 names classes "classN" here). */
    char *names[16];
    for (int c = 0; c < nc && c < 16; c++) {
        names[c] = malloc(24);
        snprintf(names[c], 24, "class%d", c);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    metrics_print(mem, &m, (const char *const *)names, nc > 1);
    fclose(mem);
    const cJSON *tab = cJSON_GetObjectItem(e, "table"), *ln;
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    cJSON_ArrayForEach(ln, tab) {
        cr_assert_not_null(line, "%s: table too short", name);
        cr_expect_str_eq(line, ln->valuestring);
        line = strtok_r(NULL, "\n", &save);
    }
    cr_expect_null(line, "%s: extra table line %s", name, line);
    check_confusion(name, &cm, cJSON_GetObjectItem(e, "confusion"));
    const double curve_worst = check_curves(name, &m, cJSON_GetObjectItem(e, "curves"));
    cr_log_info("%s (ultralytics %s): %d tp rows equal, max relative difference %.3g, curves %.3g", name, version,
                tp_rows, worst, curve_worst);
    confusion_free(&cm);
    free(text);
    for (int c = 0; c < nc && c < 16; c++) free(names[c]);
    metrics_result_free(&m);
    metrics_free(acc);
    cJSON_Delete(j);
}

Test(metrics, fixture_val_basic) { check_val_fixture("val_basic"); }
Test(metrics, fixture_val_missing_class) { check_val_fixture("val_missing_class"); }
Test(metrics, fixture_val_no_tp) { check_val_fixture("val_no_tp"); }
Test(metrics, fixture_val_single_class) { check_val_fixture("val_single_class"); }

/* nms_cap's input is the integer formula the generator documents: anchors
 * below 10000 hold the 30000 highest scores on one nearly fixed box (NMS
 * leaves one per class); the rest are scattered, lower-scored boxes that only
 * survive if the 30000-candidate cap is missing. */
static float *cap_pred(int nc, int A) {
    float *p = malloc(sizeof(float) * (size_t)(4 + nc) * (size_t)A);
    for (long a = 0; a < A; a++) {
        const int hi = a < 10000;
        p[a] = (float)(hi ? 320 + a % 5 : (a * 37) % 600 + 20);
        p[A + a] = (float)(hi ? 320 + a % 3 : (a * 53) % 600 + 20);
        p[2 * A + a] = (float)(hi ? 100 : (a * 13) % 100 + 20);
        p[3 * A + a] = (float)(hi ? 100 : (a * 29) % 100 + 20);
        for (int c = 0; c < nc; c++) {
            const long idx = a * nc + c;
            const long m = hi ? (idx * 7919) % 30011 + 6100 : ((idx - 30000) * 7919) % 6007 + 50;
            p[(4 + c) * (long)A + a] = (float)m * (float)(1.0 / 65536);
        }
    }
    return p;
}

static void check_nms_fixture(const char *name) {
    cJSON *j = load_fixture(name);
    const int nc = (int)num(j, "nc"), A = (int)num(j, "n_anchors"), max_det = (int)num(j, "max_det");
    const cJSON *pj = cJSON_GetObjectItem(j, "pred"), *kept = cJSON_GetObjectItem(j, "kept");
    float *p;
    if (pj) {
        p = malloc(sizeof(float) * (size_t)(4 + nc) * (size_t)A);
        for (int k = 0; k < 4 + nc; k++)
            for (int a = 0; a < A; a++)
                p[(size_t)k * (size_t)A + (size_t)a] = (float)cJSON_GetArrayItem(cJSON_GetArrayItem(pj, k), a)->valuedouble;
    } else {
        p = cap_pred(nc, A);
    }
    Detection *out = malloc(sizeof(Detection) * (size_t)max_det);
    const int n = nms_image(p, A, nc, &(NmsOptions){.conf = num(j, "conf"), .iou = num(j, "iou"), .max_det = max_det, .multi_label = true}, out);
    cr_assert_eq(n, cJSON_GetArraySize(kept), "%s: kept %d, want %d", name, n, cJSON_GetArraySize(kept));
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *r = cJSON_GetArrayItem(kept, i);
        const float got[] = {out[i].x1, out[i].y1, out[i].x2, out[i].y2, out[i].score};
        for (int k = 0; k < 5; k++) {
            const double d = fabs((double)got[k] - cJSON_GetArrayItem(r, k)->valuedouble);
            worst = fmax(worst, d);
            cr_expect(d == 0, "%s row %d col %d: %.9g vs %.9g", name, i, k, got[k],
                      cJSON_GetArrayItem(r, k)->valuedouble);
        }
        cr_expect_eq(out[i].cls, (int)cJSON_GetArrayItem(r, 5)->valuedouble, "%s row %d class", name, i);
    }
    cr_log_info("%s: %d detections kept, max abs difference %.3g", name, n, worst);
    free(out);
    free(p);
    cJSON_Delete(j);
}

Test(metrics, fixture_nms_multi) { check_nms_fixture("nms_multi"); }
Test(metrics, fixture_nms_single) { check_nms_fixture("nms_single"); }
Test(metrics, fixture_nms_cap) { check_nms_fixture("nms_cap"); }
