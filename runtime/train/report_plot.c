/* runtime/train/report_plot.c — results.csv drawn as an SVG of 2x5 small
 * multiples, the counterpart of Ultralytics' results.png. Owns the drawing
 * only; must not touch results.csv (read through results_csv_read) or any
 * other run file. */
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/atomic_file.h"

enum { FIG_W = 1200, FIG_H = 600, COLS = 5, ROWS = 2, PANELS = COLS * ROWS, MAX_TICKS = 12 };
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

typedef struct Svg {
    char *p;
    size_t len, cap;
    bool oom;
} Svg;

static void out(Svg *s, const char *fmt, ...) {
    if (s->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = s->cap - s->len;
        int n = vsnprintf(s->p ? s->p + s->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            s->oom = true;
            return;
        }
        if ((size_t)n < room) {
            s->len += (size_t)n;
            return;
        }
        size_t nc = s->cap ? s->cap * 2 : 16384;
        while (nc < s->len + (size_t)n + 1) nc *= 2;
        char *np = realloc(s->p, nc);
        if (!np) {
            s->oom = true;
            return;
        }
        s->p = np;
        s->cap = nc;
    }
}

static void out_escaped(Svg *s, const char *t) {
    for (; *t; t++) {
        switch (*t) {
        case '&': out(s, "&amp;"); break;
        case '<': out(s, "&lt;"); break;
        case '>': out(s, "&gt;"); break;
        case '"': out(s, "&quot;"); break;
        /* keeps the document well-formed whatever bytes a path holds */
        default: out(s, "%c", (unsigned char)*t < 0x20 || (unsigned char)*t >= 0x7f ? '?' : *t);
        }
    }
}

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

/* Ticks at multiples of 1, 2 or 5 x 10^k, about 5 across [lo, hi]. min_step
 * keeps epoch ticks on integers. Returns the count (0 if none fit). */
static int nice_ticks(double lo, double hi, double min_step, double *ticks, double *step_out) {
    double raw = (hi - lo) / 5;
    double mag = pow(10, floor(log10(raw)));
    double norm = raw / mag;
    double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    if (step < min_step) step = min_step;
    *step_out = step;
    double k0 = ceil(lo / step), k1 = floor(hi / step);
    if (!(k1 - k0 < MAX_TICKS)) return 0;
    int n = 0;
    for (double k = k0; k <= k1 && n < MAX_TICKS; k++) ticks[n++] = k == 0 ? 0.0 : k * step;
    return n;
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

typedef struct Frame {
    double x0, y0, w, h;           /* plot area in figure pixels */
    double xlo, xhi, ylo, yhi;     /* data range shown */
} Frame;

static double px(const Frame *f, double x) { return f->x0 + (x - f->xlo) / (f->xhi - f->xlo) * f->w; }
static double py(const Frame *f, double y) { return f->y0 + f->h - (y - f->ylo) / (f->yhi - f->ylo) * f->h; }

static void draw_axes(Svg *s, const Frame *f, const char *title, double min_x_step) {
    double cx = f->x0 + f->w / 2;
    out(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"13\">", cx, f->y0 - 12);
    out_escaped(s, title);
    out(s, "</text>\n");
    out(s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"black\" "
           "stroke-width=\"0.8\"/>\n",
        f->x0, f->y0, f->w, f->h);
    double t[MAX_TICKS], step;
    int n = nice_ticks(f->xlo, f->xhi, min_x_step, t, &step);
    for (int i = 0; i < n; i++) {
        double x = px(f, t[i]);
        out(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"black\" stroke-width=\"0.8\"/>", x,
            f->y0 + f->h, x, f->y0 + f->h + 4);
        out(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"10\">%.6g</text>\n", x,
            f->y0 + f->h + 15, t[i]);
    }
    n = nice_ticks(f->ylo, f->yhi, 0, t, &step);
    for (int i = 0; i < n; i++) {
        double y = py(f, t[i]);
        out(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"black\" stroke-width=\"0.8\"/>",
            f->x0 - 4, y, f->x0, y);
        out(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\" font-size=\"10\">%.6g</text>\n", f->x0 - 6, y + 3.5,
            t[i]);
    }
}

static void draw_line(Svg *s, const Frame *f, const double *x, const double *y, int n, const char *color,
                      const char *dash) {
    if (n < 2) return;
    out(s, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-linejoin=\"round\"%s%s%s points=\"",
        color, dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    for (int i = 0; i < n; i++) out(s, "%s%.2f,%.2f", i ? " " : "", px(f, x[i]), py(f, y[i]));
    out(s, "\"/>\n");
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
    Frame f;
    f.x0 = (panel % COLS) * PANEL_W + PAD_L;
    f.y0 = (panel / COLS) * PANEL_H + PAD_T;
    f.w = PANEL_W - PAD_L - PAD_R;
    f.h = PANEL_H - PAD_T - PAD_B;
    axis_range(xlo, xhi, t->n > 0, 1.0, &f.xlo, &f.xhi);
    axis_range(ylo, yhi, n > 0, 0.0, &f.ylo, &f.yhi);
    out(s, "<g id=\"panel%d\">\n", panel);
    draw_axes(s, &f, results_csv_columns[col], 1.0);
    if (n == 0)
        out(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"11\" fill=\"gray\">no data</text>\n",
            f.x0 + f.w / 2, f.y0 + f.h / 2);
    draw_line(s, &f, xs, ys, n, COLOR_DATA, NULL);
    for (int i = 0; i < n; i++)
        out(s, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n", px(&f, xs[i]), py(&f, ys[i]), COLOR_DATA);
    draw_line(s, &f, xs, sm, n, COLOR_SMOOTH, "2,3");
    /* Ultralytics puts the legend on the second panel */
    if (panel == 1) {
        double lx = f.x0 + f.w - 78, ly = f.y0 + 8;
        out(s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"72\" height=\"36\" fill=\"white\" fill-opacity=\"0.8\" "
               "stroke=\"#cccccc\"/>\n",
            lx, ly);
        out(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2\"/>", lx + 5,
            ly + 11, lx + 25, ly + 11, COLOR_DATA);
        out(s, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>", lx + 15, ly + 11, COLOR_DATA);
        out(s, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\">results</text>\n", lx + 30, ly + 14.5);
        out(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2\" "
               "stroke-dasharray=\"2,3\"/>",
            lx + 5, ly + 26, lx + 25, ly + 26, COLOR_SMOOTH);
        out(s, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\">smooth</text>\n", lx + 30, ly + 29.5);
    }
    out(s, "</g>\n");
}

bool report_plot_svg(const char *csv_path, const char *svg_path, char *err, int errcap) {
    ResultsTable t;
    if (!results_csv_read(csv_path, &t, err, errcap)) return false;
    size_t n = t.n > 0 ? (size_t)t.n : 1;
    double *xs = malloc(n * sizeof *xs), *ys = malloc(n * sizeof *ys), *sm = malloc(n * sizeof *sm);
    Svg s = {0};
    if (xs && ys && sm) {
        out(&s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        out(&s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                "font-family=\"DejaVu Sans, Arial, Helvetica, sans-serif\">\n",
            FIG_W, FIG_H, FIG_W, FIG_H);
        out(&s, "<title>");
        out_escaped(&s, csv_path);
        out(&s, " (%d epochs; dotted: gaussian smoothing, sigma 3)</title>\n", t.n);
        out(&s, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", FIG_W, FIG_H);
        for (int p = 0; p < PANELS; p++) draw_panel(&s, p, &t, xs, ys, sm);
        out(&s, "</svg>\n");
    } else {
        s.oom = true;
    }
    free(xs);
    free(ys);
    free(sm);
    results_table_free(&t);
    if (s.oom) {
        free(s.p);
        snprintf(err, (size_t)errcap, "out of memory drawing %s", svg_path);
        return false;
    }
    const void *chunks[1] = {s.p};
    size_t lens[1] = {s.len};
    bool ok = atomic_write(svg_path, chunks, lens, 1, err, errcap);
    free(s.p);
    return ok;
}
