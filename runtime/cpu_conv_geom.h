/* runtime/cpu_conv_geom.h — the geometry of one fp32 convolution as the CPU
 * kernels read it (cpu_conv.c's tiles, cpu_conv_dnnl.c's oneDNN primitives).
 * Internal to those two files; op semantics stay ref_conv.c's. */
#ifndef YOLOCC_CPU_CONV_GEOM_H
#define YOLOCC_CPU_CONV_GEOM_H
#include <stdbool.h>
#include <stdint.h>

#include "cpu_conv.h"

typedef struct Geom {
    int64_t n, ci, h, w;        /* input */
    int64_t co, ho, wo;         /* output */
    int kh, kw, sh, sw, pt, pl, dh, dw, groups;
    int64_t cig, cog, k;        /* per group: input and output channels, im2col rows */
} Geom;

static inline int64_t geom_macs(const Geom *c) { return c->n * c->co * c->ho * c->wo * c->k; }

/* How the user's tensors sit and what follows the forward conv: the
 * elements between images of x and y (a channel slice of a wider tensor,
 * else its own image; dy's for a dgrad) and an activation op applied to
 * y as oneDNN's post-op (CONV_NO_ACT: none; alpha: LeakyReLU's slope). */
enum { CONV_NO_ACT = -1 };
typedef struct ConvLayout {
    int64_t x_img, y_img;
    int act;
    float alpha;
} ConvLayout;

/* What a primitive computes: y from x and w, dx from dy and w, dw from dy and x. */
typedef enum ConvDir { CONV_FORWARD, CONV_DGRAD, CONV_WGRAD, CONV_DIRS } ConvDir;

/* oneDNN's direct convolutions (cpu_conv_dnnl.c): y = conv(x, w) (+ b),
 * dx = the adjoint of that conv applied to dy, and dw = the gradient of its
 * weights (sum over the images). Tensors are the plan's NCHW (weights
 * OIHW); oneDNN's blocked layouts live only inside the call. Every output
 * element is summed in an order fixed by the shape alone, so the bits do
 * not depend on the thread count. */
/* lay: NULL for packed tensors without an activation. */
bool dnnl_conv_forward(const Geom *c, const ConvLayout *lay, const float *x, const float *w, const float *b, float *y, char *err, int errcap);
bool dnnl_conv_dgrad(const Geom *c, const float *dy, const float *w, float *dx, char *err, int errcap);
bool dnnl_conv_wgrad(const Geom *c, const float *dy, const float *x, float *dw, char *err, int errcap);
/* Makes the primitives of direction dir of a conv now, as the first call
 * would, so that a shape oneDNN cannot run fails at set-up and the scratch
 * is known before step 0. */
bool dnnl_conv_prepare(const Geom *c, ConvDir dir, bool bias, char *err, int errcap);
/* cpu_conv.h's cpu_conv_layout_scratch_bytes and cpu_conv_primitives are
 * defined in cpu_conv_dnnl.c too. */

#endif
