/* runtime/train/report_labels.c — the training labels drawn as Ultralytics'
 * plot_labels draws labels.jpg, as labels.svg: instances per class, 500 boxes
 * at one centre, and 2-D histograms of centres and of sizes. Owns this
 * drawing only; the labels come from the dataset, unchanged. */
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../data/dataset.h"
#include "../predict/annotate.h"
#include "svg.h"

enum { LAB_FIG = 800, LAB_PANEL = 400, LAB_PAD = 50, LAB_BINS = 50, LAB_BOXES = 500 };

static void rgb_hex(unsigned rgb, char out[8]) { snprintf(out, 8, "#%06x", rgb & 0xffffffu); }

static SvgFrame panel_frame(int k, double xlo, double xhi, double ylo, double yhi) {
    return (SvgFrame){(k % 2) * LAB_PANEL + LAB_PAD, (k / 2) * LAB_PANEL + 30, LAB_PANEL - LAB_PAD - 20, LAB_PANEL - LAB_PAD - 30, xlo, xhi, ylo, yhi};
}

/* seaborn's histplot(bins=50, pmax=0.9): the colour saturates at the count
 * below which cells hold 90% of all labels */
static void hist2d(Svg *s, const SvgFrame *f, const double *x, const double *y, long n, const char *xlabel, const char *ylabel) {
    long cells[LAB_BINS][LAB_BINS] = {{0}};
    for (long i = 0; i < n; i++) {
        const int bx = (int)fmin(LAB_BINS - 1, fmax(0, (x[i] - f->xlo) / (f->xhi - f->xlo) * LAB_BINS));
        const int by = (int)fmin(LAB_BINS - 1, fmax(0, (y[i] - f->ylo) / (f->yhi - f->ylo) * LAB_BINS));
        cells[bx][by]++;
    }
    long sorted[LAB_BINS * LAB_BINS], acc = 0, vmax = 1;
    memcpy(sorted, cells, sizeof sorted);
    for (int i = 1; i < LAB_BINS * LAB_BINS; i++)   /* insertion sort: 2500 cells */
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            long t = sorted[j];
            sorted[j] = sorted[j - 1], sorted[j - 1] = t;
        }
    for (int i = 0; i < LAB_BINS * LAB_BINS; i++) {
        acc += sorted[i];
        if (sorted[i] > 0) vmax = sorted[i];
        if (acc >= 0.9 * n) break;
    }
    svg_axes(s, f, "", 0);
    const double cw = f->w / LAB_BINS, ch = f->h / LAB_BINS;
    for (int bx = 0; bx < LAB_BINS; bx++)
        for (int by = 0; by < LAB_BINS; by++) {
            if (!cells[bx][by]) continue;
            const double t = fmin(1.0, (double)cells[bx][by] / (double)vmax);
            svg_out(s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#1f77b4\" fill-opacity=\"%.3f\"/>\n", f->x0 + bx * cw,
                    f->y0 + f->h - (by + 1) * ch, cw, ch, 0.15 + 0.85 * t);
        }
    svg_out(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"11\">%s</text>\n", f->x0 + f->w / 2, f->y0 + f->h + 28, xlabel);
    svg_out(s, "<text text-anchor=\"middle\" font-size=\"11\" transform=\"translate(%.2f,%.2f) rotate(-90)\">%s</text>\n", f->x0 - 36,
            f->y0 + f->h / 2, ylabel);
}

bool report_labels_svg(const char *path, const DataSplit *split, int nc, const char *const *names, char *err, int errcap) {
    long n = 0;
    for (int i = 0; i < split->n; i++) n += split->samples[i].n_labels;
    double *v = malloc(sizeof *v * (size_t)(4 * n + 1));
    long *per_class = calloc((size_t)nc, sizeof *per_class);
    if (!v || !per_class) {
        free(v), free(per_class);
        return errf(err, errcap, "out of memory drawing %s", path);
    }
    double *cx = v, *cy = v + n, *w = v + 2 * n, *h = v + 3 * n;
    long k = 0;
    for (int i = 0; i < split->n; i++)
        for (int j = 0; j < split->samples[i].n_labels; j++, k++) {
            const Label *l = &split->samples[i].labels[j];
            cx[k] = l->cx, cy[k] = l->cy, w[k] = l->w, h[k] = l->h;
            if (l->cls >= 0 && l->cls < nc) per_class[l->cls]++;
        }
    Svg s = {0};
    char title[1300], color[8];
    snprintf(title, sizeof title, "%ld training labels of %d classes", n, nc);
    svg_begin(&s, LAB_FIG, LAB_FIG, title);
    /* instances per class, bars in the class colours */
    long most = 1;
    for (int c = 0; c < nc; c++) most = per_class[c] > most ? per_class[c] : most;
    SvgFrame f = panel_frame(0, -0.5, nc - 0.5, 0, (double)most * 1.05);
    svg_axes(&s, &f, "", names && nc < 30 ? -1 : 1);
    for (int c = 0; c < nc; c++) {
        rgb_hex(annotate_class_rgb(c), color);
        const double x = svg_x(&f, c - 0.4), x2 = svg_x(&f, c + 0.4), y = svg_y(&f, (double)per_class[c]);
        svg_out(&s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>%ld</title></rect>\n", x, y, x2 - x,
                f.y0 + f.h - y, color, per_class[c]);
        if (names && nc < 30) {
            svg_out(&s, "<text text-anchor=\"end\" font-size=\"10\" transform=\"translate(%.2f,%.2f) rotate(-90)\">", (x + x2) / 2 + 3.5,
                    f.y0 + f.h + 18);
            svg_escaped(&s, names[c]);
            svg_out(&s, "</text>\n");
        }
    }
    svg_out(&s, "<text text-anchor=\"middle\" font-size=\"11\" transform=\"translate(%.2f,%.2f) rotate(-90)\">instances</text>\n", f.x0 - 40,
            f.y0 + f.h / 2);
    if (!names || nc >= 30)
        svg_out(&s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"11\">classes</text>\n", f.x0 + f.w / 2, f.y0 + f.h + 28);
    /* the first 500 boxes, all centred, as outlines in the class colours */
    f = panel_frame(1, 0, 1, 0, 1);
    k = 0;
    for (int i = 0; i < split->n && k < LAB_BOXES; i++)
        for (int j = 0; j < split->samples[i].n_labels && k < LAB_BOXES; j++, k++) {
            const Label *l = &split->samples[i].labels[j];
            rgb_hex(annotate_class_rgb(l->cls), color);
            const double side = fmin(f.w, f.h);
            svg_out(&s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"%s\" stroke-width=\"0.6\"/>\n",
                    f.x0 + (0.5 - l->w / 2) * side, f.y0 + (0.5 - l->h / 2) * side, l->w * side, l->h * side, color);
        }
    f = panel_frame(2, 0, 1, 0, 1);
    hist2d(&s, &f, cx, cy, n, "x", "y");
    f = panel_frame(3, 0, 1, 0, 1);
    hist2d(&s, &f, w, h, n, "width", "height");
    free(v), free(per_class);
    return svg_finish(&s, path, err, errcap);
}
