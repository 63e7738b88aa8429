/* runtime/ref_conv.c — reference convolution kernels (NCHW, fp32 storage,
 * double accumulation): forward, input gradient (dgrad), weight gradient
 * (wgrad), bias gradient; a transposed conv is the dgrad of a conv. */
#include <stdlib.h>
#include <string.h>

#include "ref_kernels.h"

typedef struct ConvGeom {
    int64_t n, ci, h, w;        /* input */
    int64_t co, ho, wo;         /* output */
    int kh, kw, sh, sw, pt, pl, dh, dw, groups;
} ConvGeom;

static ConvGeom geom(const Shape *x, const Shape *w, const Shape *y, const OpAttrs *a) {
    return (ConvGeom){x->d[0], x->d[1], x->d[2], x->d[3], y->d[1], y->d[2], y->d[3], (int)w->d[2], (int)w->d[3],
                      a->stride[0], a->stride[1], a->pad[0], a->pad[2], a->dilation[0], a->dilation[1], a->groups};
}

/* y[n, co, oh, ow] = b[co] + sum over the group's ci and the kernel */
static void conv_forward(const ConvGeom *c, const float *x, const float *w, const float *b, float *y) {
    int64_t cig = c->ci / c->groups, cog = c->co / c->groups;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t co = 0; co < c->co; co++) {
            int64_t g0 = co / cog * cig;
            const float *wc = w + co * cig * c->kh * c->kw;
            for (int64_t oh = 0; oh < c->ho; oh++)
                for (int64_t ow = 0; ow < c->wo; ow++) {
                    double acc = b ? b[co] : 0.0;
                    for (int64_t ci = 0; ci < cig; ci++) {
                        const float *xc = x + ((n * c->ci + g0 + ci) * c->h) * c->w;
                        const float *wk = wc + ci * c->kh * c->kw;
                        for (int kh = 0; kh < c->kh; kh++) {
                            int64_t ih = oh * c->sh - c->pt + (int64_t)kh * c->dh;
                            if (ih < 0 || ih >= c->h) continue;
                            for (int kw = 0; kw < c->kw; kw++) {
                                int64_t iw = ow * c->sw - c->pl + (int64_t)kw * c->dw;
                                if (iw >= 0 && iw < c->w) acc += (double)xc[ih * c->w + iw] * wk[kh * c->kw + kw];
                            }
                        }
                    }
                    y[((n * c->co + co) * c->ho + oh) * c->wo + ow] = (float)acc;
                }
        }
}

/* dx[n, ci, ih, iw] = sum of dy * w over every output position that read it;
 * accumulated in double, then rounded once. */
static bool conv_dgrad(const ConvGeom *c, const float *dy, const float *w, float *dx) {
    int64_t total = c->n * c->ci * c->h * c->w, cig = c->ci / c->groups, cog = c->co / c->groups;
    double *acc = calloc((size_t)total, sizeof(double));
    if (!acc) return false;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t co = 0; co < c->co; co++) {
            int64_t g0 = co / cog * cig;
            for (int64_t oh = 0; oh < c->ho; oh++)
                for (int64_t ow = 0; ow < c->wo; ow++) {
                    double d = dy[((n * c->co + co) * c->ho + oh) * c->wo + ow];
                    if (d == 0) continue;
                    for (int64_t ci = 0; ci < cig; ci++) {
                        const float *wk = w + (co * cig + ci) * c->kh * c->kw;
                        double *xc = acc + ((n * c->ci + g0 + ci) * c->h) * c->w;
                        for (int kh = 0; kh < c->kh; kh++) {
                            int64_t ih = oh * c->sh - c->pt + (int64_t)kh * c->dh;
                            if (ih < 0 || ih >= c->h) continue;
                            for (int kw = 0; kw < c->kw; kw++) {
                                int64_t iw = ow * c->sw - c->pl + (int64_t)kw * c->dw;
                                if (iw >= 0 && iw < c->w) xc[ih * c->w + iw] += d * wk[kh * c->kw + kw];
                            }
                        }
                    }
                }
        }
    for (int64_t i = 0; i < total; i++) dx[i] = (float)acc[i];
    free(acc);
    return true;
}

static void conv_wgrad(const ConvGeom *c, const float *dy, const float *x, float *dw) {
    int64_t cig = c->ci / c->groups, cog = c->co / c->groups;
    for (int64_t co = 0; co < c->co; co++) {
        int64_t g0 = co / cog * cig;
        for (int64_t ci = 0; ci < cig; ci++)
            for (int kh = 0; kh < c->kh; kh++)
                for (int kw = 0; kw < c->kw; kw++) {
                    double acc = 0;
                    for (int64_t n = 0; n < c->n; n++) {
                        const float *xc = x + ((n * c->ci + g0 + ci) * c->h) * c->w;
                        const float *dyc = dy + ((n * c->co + co) * c->ho) * c->wo;
                        for (int64_t oh = 0; oh < c->ho; oh++) {
                            int64_t ih = oh * c->sh - c->pt + (int64_t)kh * c->dh;
                            if (ih < 0 || ih >= c->h) continue;
                            for (int64_t ow = 0; ow < c->wo; ow++) {
                                int64_t iw = ow * c->sw - c->pl + (int64_t)kw * c->dw;
                                if (iw >= 0 && iw < c->w) acc += (double)dyc[oh * c->wo + ow] * xc[ih * c->w + iw];
                            }
                        }
                    }
                    dw[((co * cig + ci) * c->kh + kh) * c->kw + kw] = (float)acc;
                }
    }
}

REF_KERNEL(ref_conv2d) {
    (void)err;
    (void)errcap;
    ConvGeom c = geom(SH(op->in[0]), SH(op->in[1]), SH(op->out[0]), &op->a);
    conv_forward(&c, T(0), T(1), op->n_in == 3 ? T(2) : NULL, O(0));
    return true;
}

/* z = conv_transpose(x, w) is the dgrad of the conv whose input is z and whose
 * output is x, plus the bias. */
REF_KERNEL(ref_conv_transpose2d) {
    const Shape *x = SH(op->in[0]), *z = SH(op->out[0]);
    ConvGeom c = geom(z, SH(op->in[1]), x, &op->a);
    if (!conv_dgrad(&c, T(0), T(1), O(0))) return snprintf(err, (size_t)errcap, "out of memory"), false;
    if (op->n_in == 3) {
        int64_t hw = z->d[2] * z->d[3];
        for (int64_t n = 0; n < z->d[0]; n++)
            for (int64_t ch = 0; ch < z->d[1]; ch++)
                for (int64_t i = 0; i < hw; i++) O(0)[(n * z->d[1] + ch) * hw + i] += T(2)[ch];
    }
    return true;
}

/* conv2d_dgrad(dy, w) -> dx with dx's shape in a.shape */
REF_KERNEL(ref_conv2d_dgrad) {
    ConvGeom c = geom(&op->a.shape, SH(op->in[1]), SH(op->in[0]), &op->a);
    if (!conv_dgrad(&c, T(0), T(1), O(0))) return snprintf(err, (size_t)errcap, "out of memory"), false;
    return true;
}

/* conv2d_wgrad(dy, x) -> dw with dw's shape in a.shape */
REF_KERNEL(ref_conv2d_wgrad) {
    (void)err;
    (void)errcap;
    ConvGeom c = geom(SH(op->in[1]), &op->a.shape, SH(op->in[0]), &op->a);
    conv_wgrad(&c, T(0), T(1), O(0));
    return true;
}

REF_KERNEL(ref_bias_grad) {
    (void)err;
    (void)errcap;
    const Shape *s = SH(op->in[0]);
    int64_t inner = 1;
    for (int i = 2; i < s->nd; i++) inner *= s->d[i];
    for (int64_t ch = 0; ch < s->d[1]; ch++) {
        double acc = 0;
        for (int64_t n = 0; n < s->d[0]; n++)
            for (int64_t i = 0; i < inner; i++) acc += T(0)[(n * s->d[1] + ch) * inner + i];
        O(0)[ch] = (float)acc;
    }
    return true;
}
