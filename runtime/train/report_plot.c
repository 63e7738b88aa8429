/* runtime/train/report_plot.c — results.csv drawn as an SVG of 2x5 small
 * multiples, the counterpart of Ultralytics' results.png. Owns the drawing
 * only; must not touch results.csv (read through results_csv_read) or any
 * other run file. */
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svg.h"

enum { FIG_W = 1200, FIG_H = 600, COLS = 5, ROWS = 2, PANELS = COLS * ROWS };
/* plot area inside each 240x300 panel: room for the title above and tick
 * labels left and below */
enum { PAD_L = 54, PAD_R = 12, PAD_T = 34, PAD_B = 30 };
#define PANEL_W ((double)FIG_W / COLS)
#define PANEL_H ((double)FIG_H / ROWS)
#define SIGMA 3.0
#define TRUNCATE 4.0          /* scipy's default: the kernel ends at 4 sigma */
#define PLOTTABLE 1e30        /* larger magnitudes would overflow the scales */
#define COLOR_DATA "#1f77b4"  /* matplotlib's first two cycle colours */
#define COLOR_SMOOTH "#ff7f0e"

/* Ultralytics' plot_results index for detection, by column */
static const int panel_col[PANELS] = {
    RESULTS_TRAIN_BOX, RESULTS_TRAIN_CLS, RESULTS_TRAIN_DFL, RESULTS_PRECISION, RESULTS_RECALL,
    RESULTS_VAL_BOX,   RESULTS_VAL_CLS,   RESULTS_VAL_DFL,   RESULTS_MAP50,     RESULTS_MAP50_95,
};

static bool plottable(double v) { return isfinite(v) && fabs(v) <= PLOTTABLE; }

/* scipy.ndimage.gaussian_filter1d(y, 3) with mode "reflect": the sequence
 * continues mirrored with the edge sample repeated (d c b a | a b c d | d c b a). */
static void gaussian_smooth(const double *y, double *o, int n) {
    int radius = (int)(TRUNCATE * SIGMA + 0.5);
    double w[64], sum = 0;
    for (int k = -radius; k <= radius; k++) sum += w[k + radius] = exp(-0.5 * k * k / (SIGMA * SIGMA));
    for (int k = 0; k <= 2 * radius; k++) w[k] /= sum;
    for (int i = 0; i < n; i++) {
        double acc = 0;
        for (int k = -radius; k <= radius; k++) {
            long m = ((long)i + k) % (2L * n);
            if (m < 0) m += 2L * n;
            if (m >= n) m = 2L * n - 1 - m;
            acc += w[k + radius] * y[m];
        }
        o[i] = acc;
    }
}

/* Data range with matplotlib's 5% margins; a degenerate range (one value, or
 * a spread below float resolution) becomes a band around it. */
static void axis_range(double lo, double hi, bool any, double min_half, double *out_lo, double *out_hi) {
    if (!any) {
        lo = 0;
        hi = 1;
    }
    double mag = fmax(fabs(lo), fabs(hi));
    if (hi - lo <= 1e-9 * mag || hi - lo < 1e-300) {
        double half = fmax(min_half, mag * 0.05);
        if (half < 1e-12) half = 0.5;
        lo -= half;
        hi += half;
    }
    double pad = (hi - lo) * 0.05;
    *out_lo = lo - pad;
    *out_hi = hi + pad;
}

static void draw_panel(Svg *s, int panel, const ResultsTable *t, double *xs, double *ys, double *sm) {
    int col = panel_col[panel];
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        double v = t->rows[i].v[col];
        if (!plottable(v)) continue;
        xs[n] = t->rows[i].v[RESULTS_EPOCH];
        ys[n++] = v;
    }
    gaussian_smooth(ys, sm, n);
    double xlo = 0, xhi = 0, ylo = 0, yhi = 0;
    for (int i = 0; i < t->n; i++) {
        double e = t->rows[i].v[RESULTS_EPOCH];
        xlo = i ? fmin(xlo, e) : e;
        xhi = i ? fmax(xhi, e) : e;
    }
    for (int i = 0; i < n; i++) {
        ylo = i ? fmin(ylo, ys[i]) : ys[i];
        yhi = i ? fmax(yhi, ys[i]) : ys[i];
    }
    SvgFrame f;
    f.x0 = (panel % COLS) * PANEL_W + PAD_L;
    f.y0 = (panel / COLS) * PANEL_H + PAD_T;
    f.w = PANEL_W - PAD_L - PAD_R;
    f.h = PANEL_H - PAD_T - PAD_B;
    axis_range(xlo, xhi, t->n > 0, 1.0, &f.xlo, &f.xhi);
    axis_range(ylo, yhi, n > 0, 0.0, &f.ylo, &f.yhi);
    svg_out(s, "<g id=\"panel%d\">\n", panel);
    svg_axes(s, &f, results_csv_columns[col], 1.0);
    if (n == 0)
        svg_out(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"11\" fill=\"gray\">no data</text>\n",
            f.x0 + f.w / 2, f.y0 + f.h / 2);
    svg_polyline(s, &f, xs, ys, n, COLOR_DATA, 2, NULL);
    for (int i = 0; i < n; i++)
        svg_out(s, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n", svg_x(&f, xs[i]), svg_y(&f, ys[i]), COLOR_DATA);
    svg_polyline(s, &f, xs, sm, n, COLOR_SMOOTH, 2, "2,3");
    /* Ultralytics puts the legend on the second panel */
    if (panel == 1) {
        double lx = f.x0 + f.w - 78, ly = f.y0 + 8;
        svg_out(s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"72\" height=\"36\" fill=\"white\" fill-opacity=\"0.8\" "
               "stroke=\"#cccccc\"/>\n",
            lx, ly);
        svg_out(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2\"/>", lx + 5,
            ly + 11, lx + 25, ly + 11, COLOR_DATA);
        svg_out(s, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>", lx + 15, ly + 11, COLOR_DATA);
        svg_out(s, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\">results</text>\n", lx + 30, ly + 14.5);
        svg_out(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2\" "
               "stroke-dasharray=\"2,3\"/>",
            lx + 5, ly + 26, lx + 25, ly + 26, COLOR_SMOOTH);
        svg_out(s, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\">smooth</text>\n", lx + 30, ly + 29.5);
    }
    svg_out(s, "</g>\n");
}

bool report_plot_svg(const char *csv_path, const char *svg_path, char *err, int errcap) {
    ResultsTable t;
    if (!results_csv_read(csv_path, &t, err, errcap)) return false;
    size_t n = t.n > 0 ? (size_t)t.n : 1;
    double *xs = malloc(n * sizeof *xs), *ys = malloc(n * sizeof *ys), *sm = malloc(n * sizeof *sm);
    Svg s = {0};
    if (xs && ys && sm) {
        char title[1400];
        snprintf(title, sizeof title, "%s (%d epochs; dotted: gaussian smoothing, sigma 3)", csv_path, t.n);
        svg_begin(&s, FIG_W, FIG_H, title);
        for (int p = 0; p < PANELS; p++) draw_panel(&s, p, &t, xs, ys, sm);
    } else {
        s.oom = true;
    }
    free(xs);
    free(ys);
    free(sm);
    results_table_free(&t);
    return svg_finish(&s, svg_path, err, errcap);
}
