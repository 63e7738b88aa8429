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
 * reshape, pad, other-axis copy, loss or optimizer reads as a flat run; a
 * channels-last one also only ops for which by_rows says their kernels step
 * over its rows with a stride (NULL: none). A buffer holding views lives as
 * long as any of them, so a candidate is taken only if the live bytes at
 * every op stay under the peak so far (the lower bound never rises):
 * zero-copy where it is free. */
bool views_build(const Graph *g, Fusion *fu, Precision p, bool (*by_rows)(OpKind), Arena *a, char *err, int errcap);

/* A tensor is stored as rows of contiguous elements: an NCHW tensor's rows
 * are its images (channels x inner), a channels-last tensor's its pixels (its
 * channels), as kernels see them (kernel_extents). A view's rows sit its
 * base's row apart. */

/* Elements between t's rows, or 0 when t is laid out contiguously (not a
 * view, or a view spanning all of its base's channels). */
int64_t views_row_stride(const Graph *g, const Views *v, int t);
/* t as `rows` runs of `row` elements `stride` apart; a packed tensor (v may
 * be NULL) is one run with stride 0. */
void views_geometry(const Graph *g, const Views *v, int t, int64_t *rows, int64_t *row, int64_t *stride);
/* Elements between t's images, for library routines: a view's row stride
 * (channels last: times its plane, a row being a pixel), else its own image. */
int64_t views_image_stride(const Graph *g, const Views *v, int t);
/* Whether t is an output of a split along axis 1: of tensor *w, from its
 * channel *chan on. A concat input that is one needs no copy where its
 * source's buffer already puts those channels in its slot. */
bool views_split_source(const Graph *g, int t, int *w, int64_t *chan);
/* Where t's first element sits in its base, in elements. */
int64_t views_elem_offset(const Graph *g, const Views *v, int t);
/* A base lives while any of its views does: def[b] (def may be NULL) and
 * last[b] widened over the views of b, for tensors [0, n). */
void views_widen_lifetimes(const Views *v, int n, int *def, int *last);
/* Whether a view of base b at channel `chan` with t's shape is well formed
 * (same rank >= 2, batch and trailing dimensions, type and layout; the
 * channels inside b's). */
bool views_fits(const Graph *g, int t, int b, int64_t chan);

#endif
