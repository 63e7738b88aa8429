/* runtime/cpu_conv.c — fast fp32 convolutions for the CPU interpreter
 * (forward, dgrad, wgrad, bias grad, transposed conv) and the fast-kernel
 * table. Must not touch the reference kernels: ref_conv.c stays the oracle. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_conv.h"

/* im2col scratch per call is capped so that big images cost bounded memory;
 * output rows are processed in chunks that fit. */
enum { COL_CAP = 1 << 21 };   /* floats: 8 MiB */

typedef struct Geom {
    int64_t n, ci, h, w;        /* input */
    int64_t co, ho, wo;         /* output */
    int kh, kw, sh, sw, pt, pl, dh, dw, groups;
    int64_t cig, cog, k;        /* per group: input and output channels, im2col rows */
} Geom;

static Geom geom(const Shape *x, const Shape *w, const Shape *y, const OpAttrs *a) {
    Geom c = {x->d[0], x->d[1], x->d[2], x->d[3], y->d[1], y->d[2], y->d[3], (int)w->d[2], (int)w->d[3], a->stride[0], a->stride[1],
              a->pad[0], a->pad[2], a->dilation[0], a->dilation[1], a->groups, 0, 0, 0};
    c.cig = c.ci / c.groups;
    c.cog = c.co / c.groups;
    c.k = c.cig * c.kh * c.kw;
    return c;
}

/* A 1x1 stride-1 unpadded conv reads the input as its own im2col matrix. */
static bool is_pointwise(const Geom *c) {
    return c->kh == 1 && c->kw == 1 && c->sh == 1 && c->sw == 1 && c->pt == 0 && c->pl == 0 && c->ho == c->h && c->wo == c->w;
}

/* One input channel per group: tiny GEMMs lose to direct loops. */
static bool is_depthwise(const Geom *c) { return c->cig == 1 && c->groups > 1; }

/* Output positions o in [lo, hi) whose input coordinate o*s + off lies in [0, in). */
static void span(int64_t out, int64_t in, int s, int64_t off, int64_t *lo, int64_t *hi) {
    *lo = off >= 0 ? 0 : (-off + s - 1) / s;
    *hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / s + 1;
    if (*hi > out) *hi = out;
    if (*lo > *hi) *lo = *hi;
}

/* Rows of output per chunk so that the chunk's im2col matrix fits COL_CAP. */
static int64_t chunk_rows(const Geom *c) {
    int64_t rows = COL_CAP / (c->k * c->wo);
    return rows < 1 ? 1 : rows > c->ho ? c->ho : rows;
}

static float *col_alloc(const Geom *c, char *err, int errcap) {
    size_t n = (size_t)(c->k * c->wo * chunk_rows(c));
    float *p = malloc(n * sizeof(float));
    if (!p) snprintf(err, (size_t)errcap, "out of memory for a %zu-byte im2col buffer", n * sizeof(float));
    return p;
}

/* col[(ci*kh + i)*kw + j][oh - oh0][ow] = x[ci][oh*sh - pt + i*dh][ow*sw - pl + j*dw], zero outside the image */
static void im2col(const Geom *c, const float *x, int64_t oh0, int64_t oh1, float *col) {
    int64_t ncol = (oh1 - oh0) * c->wo;
    for (int64_t ci = 0; ci < c->cig; ci++)
        for (int i = 0; i < c->kh; i++)
            for (int j = 0; j < c->kw; j++) {
                float *dst = col + ((ci * c->kh + i) * c->kw + j) * ncol;
                int64_t off = (int64_t)j * c->dw - c->pl, lo, hi;
                span(c->wo, c->w, c->sw, off, &lo, &hi);
                for (int64_t oh = oh0; oh < oh1; oh++, dst += c->wo) {
                    int64_t ih = oh * c->sh - c->pt + (int64_t)i * c->dh;
                    if (ih < 0 || ih >= c->h) {
                        memset(dst, 0, (size_t)c->wo * sizeof(float));
                        continue;
                    }
                    const float *src = x + (ci * c->h + ih) * c->w + off;
                    memset(dst, 0, (size_t)lo * sizeof(float));
                    if (c->sw == 1) memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
                    else
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow] = src[ow * c->sw];
                    memset(dst + hi, 0, (size_t)(c->wo - hi) * sizeof(float));
                }
            }
}

/* The adjoint of im2col: every column entry is added back where it was read. */
static void col2im(const Geom *c, const float *col, int64_t oh0, int64_t oh1, float *x) {
    int64_t ncol = (oh1 - oh0) * c->wo;
    for (int64_t ci = 0; ci < c->cig; ci++)
        for (int i = 0; i < c->kh; i++)
            for (int j = 0; j < c->kw; j++) {
                const float *src = col + ((ci * c->kh + i) * c->kw + j) * ncol;
                int64_t off = (int64_t)j * c->dw - c->pl, lo, hi;
                span(c->wo, c->w, c->sw, off, &lo, &hi);
                for (int64_t oh = oh0; oh < oh1; oh++, src += c->wo) {
                    int64_t ih = oh * c->sh - c->pt + (int64_t)i * c->dh;
                    if (ih < 0 || ih >= c->h) continue;
                    float *dst = x + (ci * c->h + ih) * c->w + off;
                    if (c->sw == 1)
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow] += src[ow];
                    else
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow * c->sw] += src[ow];
                }
            }
}

/* ---- depthwise (one input channel per group): direct loops ---- */

static void dw_forward(const Geom *c, const float *x, const float *w, float *y) {
    int64_t hw = c->h * c->w, howo = c->ho * c->wo;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t co = 0; co < c->co; co++) {
            const float *xc = x + (n * c->ci + co / c->cog) * hw;
            float *yc = y + (n * c->co + co) * howo;
            for (int i = 0; i < c->kh; i++)
                for (int j = 0; j < c->kw; j++) {
                    float wv = w[(co * c->kh + i) * c->kw + j];
                    int64_t off = (int64_t)j * c->dw - c->pl, lo, hi;
                    span(c->wo, c->w, c->sw, off, &lo, &hi);
                    for (int64_t oh = 0; oh < c->ho; oh++) {
                        int64_t ih = oh * c->sh - c->pt + (int64_t)i * c->dh;
                        if (ih < 0 || ih >= c->h) continue;
                        const float *src = xc + ih * c->w + off;
                        float *dst = yc + oh * c->wo;
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow] += wv * src[ow * c->sw];
                    }
                }
        }
}

static void dw_dgrad(const Geom *c, const float *dy, const float *w, float *dx) {
    int64_t hw = c->h * c->w, howo = c->ho * c->wo;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t co = 0; co < c->co; co++) {
            float *xc = dx + (n * c->ci + co / c->cog) * hw;
            const float *yc = dy + (n * c->co + co) * howo;
            for (int i = 0; i < c->kh; i++)
                for (int j = 0; j < c->kw; j++) {
                    float wv = w[(co * c->kh + i) * c->kw + j];
                    int64_t off = (int64_t)j * c->dw - c->pl, lo, hi;
                    span(c->wo, c->w, c->sw, off, &lo, &hi);
                    for (int64_t oh = 0; oh < c->ho; oh++) {
                        int64_t ih = oh * c->sh - c->pt + (int64_t)i * c->dh;
                        if (ih < 0 || ih >= c->h) continue;
                        float *dst = xc + ih * c->w + off;
                        const float *src = yc + oh * c->wo;
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow * c->sw] += wv * src[ow];
                    }
                }
        }
}

/* double sums like the oracle's */
static void dw_wgrad(const Geom *c, const float *dy, const float *x, float *dw) {
    int64_t hw = c->h * c->w, howo = c->ho * c->wo;
    for (int64_t co = 0; co < c->co; co++)
        for (int i = 0; i < c->kh; i++)
            for (int j = 0; j < c->kw; j++) {
                int64_t off = (int64_t)j * c->dw - c->pl, lo, hi;
                span(c->wo, c->w, c->sw, off, &lo, &hi);
                double acc = 0;
                for (int64_t n = 0; n < c->n; n++) {
                    const float *xc = x + (n * c->ci + co / c->cog) * hw, *yc = dy + (n * c->co + co) * howo;
                    for (int64_t oh = 0; oh < c->ho; oh++) {
                        int64_t ih = oh * c->sh - c->pt + (int64_t)i * c->dh;
                        if (ih < 0 || ih >= c->h) continue;
                        const float *src = xc + ih * c->w + off, *d = yc + oh * c->wo;
                        if (c->sw == 1) acc += cpu_row_dot(d + lo, src + lo, hi - lo);
                        else
                            for (int64_t ow = lo; ow < hi; ow++) acc += (double)d[ow] * src[ow * c->sw];
                    }
                }
                dw[(co * c->kh + i) * c->kw + j] = (float)acc;
            }
}

/* ---- GEMM paths ---- */

/* y = conv(x, w) (+ b) */
static bool conv_forward(const Geom *c, const float *x, const float *w, const float *b, float *y, char *err, int errcap) {
    int64_t howo = c->ho * c->wo, hw = c->h * c->w;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t co = 0; co < c->co; co++) {
            float *yc = y + (n * c->co + co) * howo, v = b ? b[co] : 0.0f;
            for (int64_t i = 0; i < howo; i++) yc[i] = v;
        }
    if (is_depthwise(c)) {
        dw_forward(c, x, w, y);
        return true;
    }
    float beta = b ? 1.0f : 0.0f;
    if (is_pointwise(c)) {
        for (int64_t n = 0; n < c->n; n++)
            for (int64_t g = 0; g < c->groups; g++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->cog, (int)howo, (int)c->cig, 1.0f, w + g * c->cog * c->k, (int)c->k,
                            x + (n * c->ci + g * c->cig) * hw, (int)hw, beta, y + (n * c->co + g * c->cog) * howo, (int)howo);
        return true;
    }
    float *col = col_alloc(c, err, errcap);
    if (!col) return false;
    int64_t rows = chunk_rows(c);
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t g = 0; g < c->groups; g++)
            for (int64_t oh0 = 0; oh0 < c->ho; oh0 += rows) {
                int64_t oh1 = oh0 + rows < c->ho ? oh0 + rows : c->ho, ncol = (oh1 - oh0) * c->wo;
                im2col(c, x + (n * c->ci + g * c->cig) * hw, oh0, oh1, col);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->cog, (int)ncol, (int)c->k, 1.0f, w + g * c->cog * c->k, (int)c->k, col,
                            (int)ncol, beta, y + (n * c->co + g * c->cog) * howo + oh0 * c->wo, (int)howo);
            }
    free(col);
    return true;
}

/* dx = W^T dy, scattered back through col2im */
static bool conv_dgrad(const Geom *c, const float *dy, const float *w, float *dx, char *err, int errcap) {
    int64_t howo = c->ho * c->wo, hw = c->h * c->w;
    if (is_pointwise(c)) {
        for (int64_t n = 0; n < c->n; n++)
            for (int64_t g = 0; g < c->groups; g++)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)c->cig, (int)hw, (int)c->cog, 1.0f, w + g * c->cog * c->k, (int)c->k,
                            dy + (n * c->co + g * c->cog) * howo, (int)howo, 0.0f, dx + (n * c->ci + g * c->cig) * hw, (int)hw);
        return true;
    }
    memset(dx, 0, (size_t)(c->n * c->ci * hw) * sizeof(float));
    if (is_depthwise(c)) {
        dw_dgrad(c, dy, w, dx);
        return true;
    }
    float *col = col_alloc(c, err, errcap);
    if (!col) return false;
    int64_t rows = chunk_rows(c);
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t g = 0; g < c->groups; g++)
            for (int64_t oh0 = 0; oh0 < c->ho; oh0 += rows) {
                int64_t oh1 = oh0 + rows < c->ho ? oh0 + rows : c->ho, ncol = (oh1 - oh0) * c->wo;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)c->k, (int)ncol, (int)c->cog, 1.0f, w + g * c->cog * c->k, (int)c->k,
                            dy + (n * c->co + g * c->cog) * howo + oh0 * c->wo, (int)howo, 0.0f, col, (int)ncol);
                col2im(c, col, oh0, oh1, dx + (n * c->ci + g * c->cig) * hw);
            }
    free(col);
    return true;
}

/* dw = sum over images of dy col^T; the first GEMM of each group overwrites,
 * the rest accumulate */
static bool conv_wgrad(const Geom *c, const float *dy, const float *x, float *dw, char *err, int errcap) {
    int64_t howo = c->ho * c->wo, hw = c->h * c->w;
    if (is_depthwise(c)) {
        dw_wgrad(c, dy, x, dw);
        return true;
    }
    if (is_pointwise(c)) {
        for (int64_t n = 0; n < c->n; n++)
            for (int64_t g = 0; g < c->groups; g++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->cog, (int)c->cig, (int)hw, 1.0f, dy + (n * c->co + g * c->cog) * howo,
                            (int)howo, x + (n * c->ci + g * c->cig) * hw, (int)hw, n ? 1.0f : 0.0f, dw + g * c->cog * c->k, (int)c->k);
        return true;
    }
    float *col = col_alloc(c, err, errcap);
    if (!col) return false;
    int64_t rows = chunk_rows(c);
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t g = 0; g < c->groups; g++)
            for (int64_t oh0 = 0; oh0 < c->ho; oh0 += rows) {
                int64_t oh1 = oh0 + rows < c->ho ? oh0 + rows : c->ho, ncol = (oh1 - oh0) * c->wo;
                im2col(c, x + (n * c->ci + g * c->cig) * hw, oh0, oh1, col);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->cog, (int)c->k, (int)ncol, 1.0f,
                            dy + (n * c->co + g * c->cog) * howo + oh0 * c->wo, (int)howo, col, (int)ncol, n || oh0 ? 1.0f : 0.0f,
                            dw + g * c->cog * c->k, (int)c->k);
            }
    free(col);
    return true;
}

REF_KERNEL(cpu_conv2d) {
    Geom c = geom(SH(op->in[0]), SH(op->in[1]), SH(op->out[0]), &op->a);
    return conv_forward(&c, T(0), T(1), op->n_in == 3 ? T(2) : NULL, O(0), err, errcap);
}

/* z = conv_transpose(x, w) is the dgrad of the conv from z to x, plus the bias */
REF_KERNEL(cpu_conv_transpose2d) {
    const Shape *x = SH(op->in[0]), *z = SH(op->out[0]);
    Geom c = geom(z, SH(op->in[1]), x, &op->a);
    if (!conv_dgrad(&c, T(0), T(1), O(0), err, errcap)) return false;
    if (op->n_in == 3) {
        int64_t hw = z->d[2] * z->d[3];
        for (int64_t n = 0; n < z->d[0]; n++)
            for (int64_t ch = 0; ch < z->d[1]; ch++) {
                float *p = O(0) + (n * z->d[1] + ch) * hw, b = T(2)[ch];
                for (int64_t i = 0; i < hw; i++) p[i] += b;
            }
    }
    return true;
}

/* conv2d_dgrad(dy, w) -> dx shaped a.shape */
REF_KERNEL(cpu_conv2d_dgrad) {
    Geom c = geom(&op->a.shape, SH(op->in[1]), SH(op->in[0]), &op->a);
    return conv_dgrad(&c, T(0), T(1), O(0), err, errcap);
}

/* conv2d_wgrad(dy, x) -> dw shaped a.shape */
REF_KERNEL(cpu_conv2d_wgrad) {
    Geom c = geom(SH(op->in[1]), &op->a.shape, SH(op->in[0]), &op->a);
    return conv_wgrad(&c, T(0), T(1), O(0), err, errcap);
}

REF_KERNEL(cpu_bias_grad) {
    (void)err;
    (void)errcap;
    const Shape *s = SH(op->in[0]);
    int64_t inner = 1;
    for (int i = 2; i < s->nd; i++) inner *= s->d[i];
    for (int64_t ch = 0; ch < s->d[1]; ch++) {
        double acc = 0;
        for (int64_t n = 0; n < s->d[0]; n++) acc += cpu_row_sum(T(0) + (n * s->d[1] + ch) * inner, inner);
        O(0)[ch] = (float)acc;
    }
    return true;
}

static const RefKernel CPU_KERNELS[OP_COUNT] = {
    [OP_CONV2D] = cpu_conv2d,
    [OP_CONV_TRANSPOSE2D] = cpu_conv_transpose2d,
    [OP_CONV2D_DGRAD] = cpu_conv2d_dgrad,
    [OP_CONV2D_WGRAD] = cpu_conv2d_wgrad,
    [OP_BIAS_GRAD] = cpu_bias_grad,
    [OP_BATCHNORM] = cpu_batchnorm,
    [OP_BATCHNORM_BWD] = cpu_batchnorm_bwd,
    [OP_SILU] = cpu_activation,
    [OP_RELU] = cpu_activation,
    [OP_LEAKY_RELU] = cpu_activation,
    [OP_HARDSWISH] = cpu_activation,
    [OP_GELU] = cpu_activation,
    [OP_SIGMOID] = cpu_activation,
    [OP_ACTIVATION_BWD] = cpu_activation_bwd,
};

RefKernel cpu_kernel(OpKind k) { return k >= 0 && k < OP_COUNT ? CPU_KERNELS[k] : NULL; }

void cpu_conv_set_threads(int n) { openblas_set_num_threads(n); }
