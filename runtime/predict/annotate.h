/* runtime/predict/annotate.h — draws detections on an image as Ultralytics'
 * Annotator does (its palette by class, its line width, a filled label
 * "name 0.87" above the box), through libgd (opened on first use). Owns only the drawing; no
 * files, no model. */
#ifndef YOLOCC_ANNOTATE_H
#define YOLOCC_ANNOTATE_H
#include <stdbool.h>

#include "../data/image.h"
#include "../train/metrics.h"

/* Boxes in im's pixels (x1 y1 x2 y2); names[cls] labels them (NULL: no
 * labels). False, with err, when libgd cannot be opened or cannot allocate
 * the canvas. */
bool annotate_detections(Image *im, const Detection *dets, int n, const char *const *names, bool show_conf, char *err, int errcap);

/* Ultralytics' line width for an image: max(round((w + h + 3) / 2 * 0.003), 2). */
int annotate_line_width(int w, int h);

#endif
