/* compiler/memory_svg.h — draws a plan's step arena over its schedule as
 * SVG: time (op index) across, arena offset down, one rectangle per tensor,
 * forward tensors blue, backward red, recomputed green. */
#ifndef YOLOCC_MEMORY_SVG_H
#define YOLOCC_MEMORY_SVG_H
#include "../runtime/plan_read.h"

bool memory_svg_write(const Plan *p, const char *path, char *err, int errcap);

#endif
