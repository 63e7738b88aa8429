/* runtime/train/svg.c — shared SVG writing for the run's plots (see svg.h).
 * Owns the buffer, ticks, frame and lines; must not know what a plot shows. */
#include "svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>


void svg_out(Svg *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(s, fmt, ap);
    va_end(ap);
}

void svg_escaped(Svg *s, const char *t) {
    for (; *t; t++) {
        switch (*t) {
        case '&': svg_out(s, "&amp;"); break;
        case '<': svg_out(s, "&lt;"); break;
        case '>': svg_out(s, "&gt;"); break;
        case '"': svg_out(s, "&quot;"); break;
        default: svg_out(s, "%c", (unsigned char)*t < 0x20 || (unsigned char)*t >= 0x7f ? '?' : *t);
        }
    }
}

void svg_begin(Svg *s, int w, int h, const char *title) {
    svg_out(s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    svg_out(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Arial, Helvetica, sans-serif\">\n",
            w, h, w, h);
    svg_out(s, "<title>");
    svg_escaped(s, title);
    svg_out(s, "</title>\n");
    svg_out(s, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", w, h);
}

bool svg_finish(Svg *s, const char *path, char *err, int errcap) {
    svg_out(s, "</svg>\n");
    return strbuf_write_atomic(s, path, err, errcap);
}

int svg_nice_ticks(double lo, double hi, double min_step, double *ticks, double *step_out) {
    double raw = (hi - lo) / 5;
    double mag = pow(10, floor(log10(raw)));
    double norm = raw / mag;
    double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    if (step < min_step) step = min_step;
    *step_out = step;
    double k0 = ceil(lo / step), k1 = floor(hi / step);
    if (!(k1 - k0 < SVG_MAX_TICKS)) return 0;
    int n = 0;
    for (double k = k0; k <= k1 && n < SVG_MAX_TICKS; k++) ticks[n++] = k == 0 ? 0.0 : k * step;
    return n;
}

double svg_x(const SvgFrame *f, double x) { return f->x0 + (x - f->xlo) / (f->xhi - f->xlo) * f->w; }
double svg_y(const SvgFrame *f, double y) { return f->y0 + f->h - (y - f->ylo) / (f->yhi - f->ylo) * f->h; }

void svg_axes(Svg *s, const SvgFrame *f, const char *title, double min_x_step) {
    double cx = f->x0 + f->w / 2;
    svg_out(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"13\">", cx, f->y0 - 12);
    svg_escaped(s, title);
    svg_out(s, "</text>\n");
    svg_out(s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"black\" "
               "stroke-width=\"0.8\"/>\n",
            f->x0, f->y0, f->w, f->h);
    double t[SVG_MAX_TICKS], step;
    int n = min_x_step < 0 ? 0 : svg_nice_ticks(f->xlo, f->xhi, min_x_step, t, &step);
    for (int i = 0; i < n; i++) {
        double x = svg_x(f, t[i]);
        svg_out(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"black\" stroke-width=\"0.8\"/>", x,
                f->y0 + f->h, x, f->y0 + f->h + 4);
        svg_out(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"10\">%.6g</text>\n", x,
                f->y0 + f->h + 15, t[i]);
    }
    n = svg_nice_ticks(f->ylo, f->yhi, 0, t, &step);
    for (int i = 0; i < n; i++) {
        double y = svg_y(f, t[i]);
        svg_out(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"black\" stroke-width=\"0.8\"/>",
                f->x0 - 4, y, f->x0, y);
        svg_out(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\" font-size=\"10\">%.6g</text>\n", f->x0 - 6,
                y + 3.5, t[i]);
    }
}

void svg_polyline(Svg *s, const SvgFrame *f, const double *x, const double *y, int n, const char *color, double width,
                  const char *dash) {
    if (n < 2) return;
    svg_out(s, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" stroke-linejoin=\"round\"%s%s%s points=\"",
            color, width, dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    for (int i = 0; i < n; i++) svg_out(s, "%s%.2f,%.2f", i ? " " : "", svg_x(f, x[i]), svg_y(f, y[i]));
    svg_out(s, "\"/>\n");
}
