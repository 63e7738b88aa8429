/* runtime/train/svg.h — the few SVG pieces the run's plots share: a growing
 * text buffer, escaped text, an axes frame with round-number ticks, lines,
 * and the atomic save. Owns no plot's layout (report_plot.c, report_val_plots.c). */
#ifndef YOLOCC_SVG_H
#define YOLOCC_SVG_H
#include <stdbool.h>
#include <stddef.h>

#include "../../ir/strbuf.h"

/* The document being written: a growing text buffer (ir/strbuf.h). */
typedef StrBuf Svg;

/* printf into the document. */
void svg_out(Svg *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Text content or an attribute value: XML's specials escaped, control and
 * non-ASCII bytes as '?' so that any path or class name keeps it well formed. */
void svg_escaped(Svg *s, const char *t);
/* The XML declaration, the <svg> element w x h, a <title> and a white page. */
void svg_begin(Svg *s, int w, int h, const char *title);
/* Closes the document and writes it to path through atomic_write; frees the
 * buffer either way. false (err set) on no memory or a failed write. */
bool svg_finish(Svg *s, const char *path, char *err, int errcap);

enum { SVG_MAX_TICKS = 12 };

/* Ticks at multiples of 1, 2 or 5 x 10^k, about 5 across [lo, hi]; min_step
 * keeps integer axes on integers. Returns the count (0 if none fit). */
int svg_nice_ticks(double lo, double hi, double min_step, double *ticks, double *step_out);

typedef struct SvgFrame {
    double x0, y0, w, h;           /* plot area in figure pixels */
    double xlo, xhi, ylo, yhi;     /* data range shown */
} SvgFrame;

double svg_x(const SvgFrame *f, double x);
double svg_y(const SvgFrame *f, double y);
/* Title above, the frame, ticks and tick labels left and below (none
 * below when min_x_step < 0: the caller labels that axis itself). */
void svg_axes(Svg *s, const SvgFrame *f, const char *title, double min_x_step);
/* A polyline through n points in data coordinates; dash NULL for solid. */
void svg_polyline(Svg *s, const SvgFrame *f, const double *x, const double *y, int n, const char *color, double width,
                  const char *dash);

#endif
