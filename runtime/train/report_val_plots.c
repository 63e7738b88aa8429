/* runtime/train/report_val_plots.c — what Ultralytics' validator draws when
 * plots are on, as SVG: the confusion matrix (counts and column-normalised),
 * the PR curve and the F1/P/R-confidence curves, plus the matrix as CSV.
 * Owns these files only; the numbers come from metrics.c and confusion.c. */
#include "report.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../ir/diag.h"
#include "confusion.h"
#include "metrics.h"
#include "svg.h"

/* matplotlib's tab10 cycle: the per-class line colours */
static const char *const cycle[10] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
/* ColorBrewer's Blues, matplotlib's "Blues" colormap anchors */
static const unsigned char blues[9][3] = {{247, 251, 255}, {222, 235, 247}, {198, 219, 239}, {158, 202, 225}, {107, 174, 214},
                                          {66, 146, 198},  {33, 113, 181},  {8, 81, 156},    {8, 48, 107}};

static void blues_at(double t, unsigned char rgb[3]) {
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    const double x = t * 8;
    const int k = x >= 8 ? 7 : (int)x;
    const double f = x - k;
    for (int c = 0; c < 3; c++) rgb[c] = (unsigned char)lround(blues[k][c] + f * (blues[k + 1][c] - blues[k][c]));
}

/* seaborn's annotation colour: dark text on cells lighter than 0.408 relative luminance */
static bool light_cell(const unsigned char rgb[3]) {
    double lin[3];
    for (int c = 0; c < 3; c++) {
        const double v = rgb[c] / 255.0;
        lin[c] = v <= 0.03928 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4);
    }
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2] > 0.408;
}

static void path_join(const char *dir, const char *file, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", dir, file);
}

/* ---- confusion matrix ------------------------------------------------------ */

/* ConfusionMatrix.plot: the array (normalised by column sums + 1e-9 when
 * asked), cells under 0.005 left blank, annotated when nc < 30, tick labels
 * the names plus "background" when 0 < names < 99 (else indices). */
static bool confusion_svg(const ConfusionMatrix *cm, const char *const *names, bool normalize, const char *path, char *err,
                          int errcap) {
    const int n = cm->nc + 1;
    double *a = malloc((size_t)n * (size_t)n * sizeof *a);
    if (!a) return errf(err, errcap, "out of memory drawing %s", path);
    double vmax = NAN;
    for (int c = 0; c < n; c++) {
        double col = 0;
        for (int r = 0; r < n; r++) col += (double)confusion_at(cm, r, c);
        for (int r = 0; r < n; r++) {
            double v = (double)confusion_at(cm, r, c) / (normalize ? col + 1e-9 : 1.0);
            a[(size_t)r * (size_t)n + (size_t)c] = v < 0.005 ? NAN : v;
            if (v >= 0.005 && !(v <= vmax)) vmax = v;
        }
    }
    const bool labels = names && cm->nc < 99, annotate = cm->nc < 30;
    const double cs = fmin(56.0, fmax(5.0, 680.0 / n));
    const double x0 = labels ? 130 : 60, y0 = 50, side = cs * n;
    const int fig_w = (int)ceil(x0 + side + 110), fig_h = (int)ceil(y0 + side + (labels ? 100 : 50));
    const char *title = normalize ? "Confusion Matrix Normalized" : "Confusion Matrix";
    Svg s = {0};
    svg_begin(&s, fig_w, fig_h, title);
    svg_out(&s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"15\">%s</text>\n", x0 + side / 2, y0 - 18, title);
    const double fs = fmin(11.0, cs * 0.3);
    for (int r = 0; r < n; r++)
        for (int c = 0; c < n; c++) {
            const double v = a[(size_t)r * (size_t)n + (size_t)c];
            if (isnan(v)) continue;
            unsigned char rgb[3];
            blues_at(vmax > 0 ? v / vmax : 0, rgb);
            const double x = x0 + c * cs, y = y0 + r * cs;
            svg_out(&s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#%02x%02x%02x\"/>", x, y, cs, cs, rgb[0],
                    rgb[1], rgb[2]);
            if (annotate)
                svg_out(&s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"%.1f\" fill=\"%s\">%.*f</text>", x + cs / 2,
                        y + cs / 2 + fs * 0.35, fs, light_cell(rgb) ? "#262626" : "white", normalize ? 2 : 0, v);
            svg_out(&s, "\n");
        }
    svg_out(&s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#cccccc\" stroke-width=\"0.5\"/>\n", x0, y0,
            side, side);
    /* tick labels: every class with names, else indices thinned to about 40 */
    const int every = labels ? 1 : (n + 39) / 40;
    for (int k = 0; k < n; k += every) {
        const char *name = labels ? (k < cm->nc ? names[k] : "background") : NULL;
        const double mid = k * cs + cs / 2;
        svg_out(&s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\" font-size=\"10\">", x0 - 4, y0 + mid + 3.5);
        if (name) svg_escaped(&s, name);
        else svg_out(&s, "%d", k);
        svg_out(&s, "</text>\n<text text-anchor=\"end\" font-size=\"10\" transform=\"translate(%.2f,%.2f) rotate(-90)\">", x0 + mid + 3.5,
                y0 + side + 4);
        if (name) svg_escaped(&s, name);
        else svg_out(&s, "%d", k);
        svg_out(&s, "</text>\n");
    }
    svg_out(&s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"12\">True</text>\n", x0 + side / 2,
            (double)fig_h - 12);
    svg_out(&s, "<text text-anchor=\"middle\" font-size=\"12\" transform=\"translate(14,%.2f) rotate(-90)\">Predicted</text>\n",
            y0 + side / 2);
    /* colour bar, 0 to vmax */
    const double bx = x0 + side + 24, bw = 16;
    svg_out(&s, "<defs><linearGradient id=\"blues\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">");
    for (int k = 0; k < 9; k++)
        svg_out(&s, "<stop offset=\"%.4f\" stop-color=\"#%02x%02x%02x\"/>", k / 8.0, blues[k][0], blues[k][1], blues[k][2]);
    svg_out(&s, "</linearGradient></defs>\n<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"url(#blues)\" stroke=\"black\" "
                "stroke-width=\"0.5\"/>\n",
            bx, y0, bw, side);
    const double top = isnan(vmax) ? 1.0 : vmax;
    double t[SVG_MAX_TICKS], step;
    const int nt = svg_nice_ticks(0, top, 0, t, &step);
    for (int k = 0; k < nt; k++) {
        const double y = y0 + side - t[k] / top * side;
        svg_out(&s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"black\" stroke-width=\"0.8\"/>", bx + bw, y, bx + bw + 4, y);
        svg_out(&s, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\">%.6g</text>\n", bx + bw + 6, y + 3.5, t[k]);
    }
    free(a);
    return svg_finish(&s, path, err, errcap);
}

/* ConfusionMatrix.summary() as CSV: "Predicted", then the class names made
 * identifier-safe (other characters to '_', a repeat, ignoring case, gets
 * _1, _2, ...) and "background"; one row per predicted class, counts. */
static bool confusion_csv(const ConfusionMatrix *cm, const char *const *names, const char *path, char *err, int errcap) {
    const int n = cm->nc + 1;
    char **clean = calloc((size_t)n, sizeof *clean);
    StrBuf s = {0};
    bool ok = clean != NULL;
    for (int k = 0; k < n && ok; k++) {
        char idx[32];
        snprintf(idx, sizeof idx, "class%d", k);
        const char *src = k == cm->nc ? "background" : names ? names[k] : idx;
        const size_t len = strlen(src);
        if (!(clean[k] = malloc(len + 24))) {
            ok = false;
            break;
        }
        for (size_t i = 0; i <= len; i++) clean[k][i] = isalnum((unsigned char)src[i]) || src[i] == '_' || !src[i] ? src[i] : '_';
        char *base = strdup(clean[k]);
        ok = base != NULL;
        for (int suffix = 1; ok; suffix++) {
            bool taken = false;
            for (int j = 0; j < k && !taken; j++) taken = strcasecmp(clean[j], clean[k]) == 0;
            if (!taken) break;
            snprintf(clean[k], len + 24, "%s_%d", base, suffix);
        }
        free(base);
    }
    if (ok) {
        strbuf_printf(&s, "Predicted");
        for (int k = 0; k < n; k++) strbuf_printf(&s, ",%s", clean[k]);
        strbuf_printf(&s, "\n");
        for (int r = 0; r < n; r++) {
            strbuf_printf(&s, "%s", clean[r]);
            for (int c = 0; c < n; c++) strbuf_printf(&s, ",%ld", confusion_at(cm, r, c));
            strbuf_printf(&s, "\n");
        }
    }
    for (int k = 0; clean && k < n; k++) free(clean[k]);
    free(clean);
    if (!ok) {
        strbuf_free(&s);
        return errf(err, errcap, "out of memory writing %s", path);
    }
    return strbuf_write_atomic(&s, path, err, errcap);
}

/* ---- curves ---------------------------------------------------------------- */

enum { CURVE_W = 900, CURVE_H = 600, CURVE_X0 = 70, CURVE_Y0 = 40, CURVE_PW = 560, CURVE_PH = 500 };

typedef struct Legend {
    double x, y;
} Legend;

static void legend_entry(Svg *s, Legend *l, const char *color, double width, const char *label) {
    svg_out(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"%g\"/>", l->x, l->y, l->x + 24, l->y,
            color, width);
    svg_out(s, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">", l->x + 30, l->y + 4);
    svg_escaped(s, label);
    svg_out(s, "</text>\n");
    l->y += 17;
}

/* One figure: the evaluated classes' rows of curves (those with use[ci], or
 * all when use is NULL) in
 * tab10 colours with a legend below 21 classes, grey without one above,
 * then the thick blue mean labelled by its caller. */
static bool curve_svg(const Metrics *m, const char *const *names, const double *curves, const bool *use, const double *mean,
                      const char *mean_label, const char *title, const char *xlabel, const char *ylabel, const char *path,
                      bool pr, char *err, int errcap) {
    double *px = malloc(METRICS_NCURVE * sizeof *px);
    if (!px) return errf(err, errcap, "out of memory drawing %s", path);
    for (int i = 0; i < METRICS_NCURVE; i++) px[i] = metrics_px(i);
    Svg s = {0};
    svg_begin(&s, CURVE_W, CURVE_H, title);
    const SvgFrame f = {CURVE_X0, CURVE_Y0, CURVE_PW, CURVE_PH, 0, 1, 0, 1};
    svg_axes(&s, &f, title, 0);
    svg_out(&s, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">%s</text>\n", f.x0 + f.w / 2, CURVE_H - 12, xlabel);
    svg_out(&s, "<text text-anchor=\"middle\" font-size=\"12\" transform=\"translate(20,%.2f) rotate(-90)\">%s</text>\n", f.y0 + f.h / 2,
            ylabel);
    const bool per_class = m->n_classes > 0 && m->n_classes < 21;
    Legend l = {f.x0 + f.w + 20, f.y0 + 8};
    int shown = 0;
    for (int ci = 0; ci < m->n_classes; ci++) {
        if (use && !use[ci]) continue;
        const char *color = per_class ? cycle[shown % 10] : "grey";
        svg_polyline(&s, &f, px, curves + (size_t)ci * METRICS_NCURVE, METRICS_NCURVE, color, 1, NULL);
        shown++;
        if (!per_class) continue;
        char idx[32], label[300];
        const int c = m->classes[ci].cls;
        snprintf(idx, sizeof idx, "class%d", c);
        if (pr) snprintf(label, sizeof label, "%s %.3f", names ? names[c] : idx, m->classes[ci].ap50);
        else snprintf(label, sizeof label, "%s", names ? names[c] : idx);
        legend_entry(&s, &l, color, 1, label);
    }
    svg_polyline(&s, &f, px, mean, METRICS_NCURVE, "blue", 3, NULL);
    legend_entry(&s, &l, "blue", 3, mean_label);
    free(px);
    return svg_finish(&s, path, err, errcap);
}

/* mean over the used rows (NULL: all) at each point (rows added in order, then divided) */
static void curve_mean(const Metrics *m, const double *curves, const bool *use, double *mean) {
    int k = 0;
    for (int i = 0; i < METRICS_NCURVE; i++) mean[i] = 0;
    for (int ci = 0; ci < m->n_classes; ci++) {
        if (use && !use[ci]) continue;
        k++;
        for (int i = 0; i < METRICS_NCURVE; i++) mean[i] += curves[(size_t)ci * METRICS_NCURVE + i];
    }
    for (int i = 0; i < METRICS_NCURVE && k; i++) mean[i] /= k;
}

static bool curves_svg(const char *dir, const Metrics *m, const char *const *names, char *err, int errcap) {
    bool *with_pr = malloc((size_t)m->n_classes * sizeof *with_pr);
    double *mean = malloc(METRICS_NCURVE * sizeof *mean), *sm = malloc(METRICS_NCURVE * sizeof *sm);
    bool ok = with_pr && mean && sm;
    if (!ok) errf(err, errcap, "out of memory drawing the validation curves");
    for (int ci = 0; ok && ci < m->n_classes; ci++) with_pr[ci] = m->classes[ci].has_pr;
    char path[1200], label[128];
    if (ok) {
        curve_mean(m, m->pr_curve, with_pr, mean);
        snprintf(label, sizeof label, "all classes %.3f mAP@0.5", m->map50);
        path_join(dir, "BoxPR_curve.svg", path, sizeof path);
        ok = curve_svg(m, names, m->pr_curve, with_pr, mean, label, "Precision-Recall Curve", "Recall", "Precision", path, true, err,
                       errcap);
    }
    const struct {
        const double *curves;
        const char *file, *ylabel, *title;
    } mc[] = {{m->f1_curve, "BoxF1_curve.svg", "F1", "F1-Confidence Curve"},
              {m->p_curve, "BoxP_curve.svg", "Precision", "Precision-Confidence Curve"},
              {m->r_curve, "BoxR_curve.svg", "Recall", "Recall-Confidence Curve"}};
    for (size_t k = 0; ok && k < sizeof mc / sizeof mc[0]; k++) {
        /* plot_mc_curve labels the smoothed mean by its peak */
        curve_mean(m, mc[k].curves, NULL, mean);
        metrics_smooth(mean, METRICS_NCURVE, 0.05, sm);
        const int at = metrics_argmax(sm, METRICS_NCURVE);
        snprintf(label, sizeof label, "all classes %.2f at %.3f", sm[at], metrics_px(at));
        path_join(dir, mc[k].file, path, sizeof path);
        ok = curve_svg(m, names, mc[k].curves, NULL, sm, label, mc[k].title, "Confidence", mc[k].ylabel, path, false, err, errcap);
    }
    free(with_pr);
    free(mean);
    free(sm);
    return ok;
}

bool report_val_plots(const char *dir, const Metrics *m, const ConfusionMatrix *cm, const char *const *names, char *err, int errcap) {
    char path[1200];
    path_join(dir, "confusion_matrix_normalized.svg", path, sizeof path);
    if (!confusion_svg(cm, names, true, path, err, errcap)) return false;
    path_join(dir, "confusion_matrix.svg", path, sizeof path);
    if (!confusion_svg(cm, names, false, path, err, errcap)) return false;
    path_join(dir, "confusion_matrix.csv", path, sizeof path);
    if (!confusion_csv(cm, names, path, err, errcap)) return false;
    /* Ultralytics draws the curves inside ap_per_class, which it skips when
     * no detection is a true positive */
    return m->n_classes == 0 || curves_svg(dir, m, names, err, errcap);
}
