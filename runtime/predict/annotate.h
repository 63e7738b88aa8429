/* runtime/predict/annotate.h — draws detections on an image as Ultralytics'
 * Annotator does (its palette by class, its line width, a filled label
 * "name 0.87" above the box), through libgd (opened on first use). Owns only the drawing; no
 * files, no model. */
#ifndef YOLOCC_ANNOTATE_H
#define YOLOCC_ANNOTATE_H
#include <stdbool.h>

#include "../data/image.h"
#include "../train/metrics.h"

/* Plain text drawn after the boxes (plot_images' file names). */
typedef struct AnnotateText {
    int x, y;
    const char *text;
    unsigned rgb;       /* 0xRRGGBB */
} AnnotateText;

typedef struct AnnotateStyle {
    int conf_digits;    /* the score's decimals in the label; < 0: no score */
    int line_width;     /* 0: annotate_line_width of the image */
    bool class_ids;     /* label by class index (names NULL still draws labels) */
    const AnnotateText *texts;
    int n_texts;
} AnnotateStyle;

/* Boxes in im's pixels (x1 y1 x2 y2); names[cls] labels them (NULL and not
 * class_ids: no labels). False, with err, when libgd cannot be opened or
 * cannot allocate the canvas. */
bool annotate_detections(Image *im, const Detection *dets, int n, const char *const *names, const AnnotateStyle *style, char *err,
                         int errcap);

/* Ultralytics' colors(cls) as 0xRRGGBB: its 20-colour palette by class. */
unsigned annotate_class_rgb(int cls);

/* Ultralytics' line width for an image: max(round((w + h + 3) / 2 * 0.003), 2). */
int annotate_line_width(int w, int h);

#endif
