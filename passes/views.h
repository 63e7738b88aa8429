/* passes/views.h — zero-copy layout (DESIGN decision 4): a concat input whose
 * producer can write straight into its channel slice of the concat's buffer,
 * and a split output that is a channel slice of its input, become views
 * (Views in fuse.h: a base tensor and a first channel on axis 1). Owns which
 * tensor lives inside which; places no bytes (memplan.c) and knows no kernels. */
#ifndef YOLOCC_VIEWS_H
#define YOLOCC_VIEWS_H
#include "memplan.h"

/* Every tensor its own base. */
bool views_identity(const Graph *g, Arena *a, Views *v, char *err, int errcap);
/* Decides the views of a step (fu: its fusion, whose views it replaces).
 * Candidates, in op order: split outputs along axis 1 inside their input;
 * concat inputs along axis 1 inside the concat's buffer (or, for a run of
 * inputs split from one tensor that they cover exactly, that tensor). Both
 * sides must be arena activations no group keeps in registers and that no
 * reshape, pad, other-axis copy, loss or optimizer reads as a flat run. A
 * buffer holding views lives as long as any of them, so a candidate is taken
 * only if the live bytes at every op stay under the peak so far (the lower
 * bound never rises): zero-copy where it is free. */
bool views_build(const Graph *g, Fusion *fu, Precision p, Arena *a, char *err, int errcap);

/* Elements per image of t as it sits in its base (base channels x inner),
 * or 0 when t is laid out contiguously (not a view, or a view spanning all of
 * its base's channels). */
int64_t views_batch_stride(const Graph *g, const Views *v, int t);
/* Where t's first element sits in its base, in elements. */
int64_t views_elem_offset(const Graph *g, const Views *v, int t);
/* A base lives while any of its views does: def[b] (def may be NULL) and
 * last[b] widened over the views of b, for tensors [0, n). */
void views_widen_lifetimes(const Views *v, int n, int *def, int *last);
/* Whether a view of base b at channel `chan` with t's shape is well formed
 * (same rank >= 2, batch and trailing dimensions; the channels inside b's;
 * neither stored channels last). */
bool views_fits(const Graph *g, int t, int b, int64_t chan);

#endif
