/* runtime/cpu_conv.c — fast fp32 convolutions for the CPU interpreter
 * (forward, dgrad and transposed conv through oneDNN, cpu_conv_dnnl.c;
 * wgrad in sgemm tiles; bias grad) and the fast-kernel table. Must not
 * touch the reference kernels: ref_conv.c stays the oracle. */
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_conv.h"
#include "cpu_conv_geom.h"

/* A weight gradient is cut into tiles (input-channel blocks, each summing
 * over every image) that the OpenMP threads of the generated kernels share,
 * every tile calling a single-threaded sgemm: one thread pool on the cores
 * instead of OpenBLAS's own pthreads spinning beside libgomp's (which made
 * two threads slower than one). The tiling is a function of the shape alone
 * and every output element is summed inside one tile, so results are the
 * same bits whatever the thread count (oneDNN's weight gradients split
 * their sums by the thread count; its forward and dgrad do not).
 * COL_CAP bounds a tile's im2col scratch (floats: 8 MiB); small convs run
 * on the calling thread (PARALLEL_MIN_MACS). */
enum { COL_CAP = 1 << 21, CHAN_BLOCKS = 8 };

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

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Output positions o in [lo, hi) whose input coordinate o*s + off lies in [0, in). */
static void span(int64_t out, int64_t in, int s, int64_t off, int64_t *lo, int64_t *hi) {
    *lo = off >= 0 ? 0 : (-off + s - 1) / s;
    *hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / s + 1;
    if (*hi > out) *hi = out;
    if (*lo > *hi) *lo = *hi;
}

/* ---- tiling ---- */

/* Output rows per im2col chunk whose matrix has krows rows: what fits COL_CAP. */
static int64_t chunk_rows(const Geom *c, int64_t krows) { return clamp64(COL_CAP / (krows * c->wo), 1, c->ho); }

typedef struct Job Job;
typedef void TileFn(const Job *j, int64_t tile, float *col);
struct Job {
    const Geom *c;
    const float *a, *b;      /* dy, x */
    float *out;
    int64_t rows;            /* output rows per im2col chunk */
    int64_t chans, blocks;   /* input channels per block, blocks per group */
    TileFn *tile;
};

/* A group's cig input channels in blocks, which own disjoint rows of the
 * im2col matrix, so of dw; returns the floats of
 * im2col scratch a block's chunk of output rows takes (0 for 1x1) */
static int64_t job_blocks(Job *j) {
    const Geom *c = j->c;
    j->chans = cdiv(c->cig, clamp64(c->cig / 4, 1, CHAN_BLOCKS));
    j->blocks = cdiv(c->cig, j->chans);
    if (is_pointwise(c)) {
        j->rows = c->ho;
        return 0;
    }
    j->rows = chunk_rows(c, j->chans * c->kh * c->kw);
    return j->chans * c->kh * c->kw * c->wo * j->rows;
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single_threaded(void) { openblas_set_num_threads(1); }

int64_t cpu_conv_scratch_max_bytes(void) { return (int64_t)COL_CAP * (int64_t)sizeof(float); }

float *cpu_thread_scratch(int64_t floats, bool *ok) {
    if (floats <= 0) return NULL;
    float *p = malloc((size_t)floats * sizeof(float));
    if (!p) {
#pragma omp atomic write
        *ok = false;
    }
    return p;
}

/* Runs j->tile over [0, tiles) on the OpenMP threads, each with its own
 * col_floats of im2col scratch (none when 0). */
static bool job_run(const Job *j, int64_t tiles, int64_t col_floats, char *err, int errcap) {
    pthread_once(&blas_once, blas_single_threaded);
    bool ok = true;
#pragma omp parallel if (tiles > 1 && geom_macs(j->c) >= PARALLEL_MIN_MACS)
    {
        float *col = cpu_thread_scratch(col_floats, &ok);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tiles; t++)
            if (col || !col_floats) j->tile(j, t, col);
        free(col);
    }
    if (!ok) snprintf(err, (size_t)errcap, "out of memory for a %lld-byte im2col buffer", (long long)col_floats * (long long)sizeof(float));
    return ok;
}

/* col[((ci - ci0)*kh + i)*kw + j][oh - oh0][ow] = x[ci][oh*sh - pt + i*dh][ow*sw - pl + j*dw], zero outside the image */
static void im2col(const Geom *c, const float *x, int64_t ci0, int64_t ci1, int64_t oh0, int64_t oh1, float *col) {
    int64_t ncol = (oh1 - oh0) * c->wo;
    for (int64_t ci = ci0; ci < ci1; ci++)
        for (int i = 0; i < c->kh; i++)
            for (int j = 0; j < c->kw; j++) {
                float *dst = col + (((ci - ci0) * c->kh + i) * c->kw + j) * ncol;
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

/* ---- depthwise (one input channel per group): direct loops ---- */

/* tile: output channel co, summed over the images; double sums like the oracle's */
static void dw_wgrad_tile(const Job *jb, int64_t co, float *col) {
    (void)col;
    const Geom *c = jb->c;
    int64_t hw = c->h * c->w, howo = c->ho * c->wo;
    for (int i = 0; i < c->kh; i++)
        for (int j = 0; j < c->kw; j++) {
            int64_t off = (int64_t)j * c->dw - c->pl, lo, hi;
            span(c->wo, c->w, c->sw, off, &lo, &hi);
            double acc = 0;
            for (int64_t n = 0; n < c->n; n++) {
                const float *xc = jb->b + (n * c->ci + co / c->cog) * hw, *yc = jb->a + (n * c->co + co) * howo;
                for (int64_t oh = 0; oh < c->ho; oh++) {
                    int64_t ih = oh * c->sh - c->pt + (int64_t)i * c->dh;
                    if (ih < 0 || ih >= c->h) continue;
                    const float *src = xc + ih * c->w + off, *d = yc + oh * c->wo;
                    if (c->sw == 1) acc += cpu_row_dot(d + lo, src + lo, hi - lo);
                    else
                        for (int64_t ow = lo; ow < hi; ow++) acc += (double)d[ow] * src[ow * c->sw];
                }
            }
            jb->out[(co * c->kh + i) * c->kw + j] = (float)acc;
        }
}

/* ---- GEMM tiles ---- */

/* dw = sum over images of dy col^T; a = dy, b = x. Tile: group g, a block
 * of input channels (disjoint columns of dw); the first GEMM overwrites,
 * the rest accumulate. */
static void wgrad_tile(const Job *j, int64_t t, float *col) {
    const Geom *c = j->c;
    int64_t g = t / j->blocks, ci0 = t % j->blocks * j->chans, ci1 = min64(ci0 + j->chans, c->cig), kk = c->kh * c->kw;
    int64_t hw = c->h * c->w, howo = c->ho * c->wo;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t oh0 = 0; oh0 < c->ho; oh0 += j->rows) {
            int64_t oh1 = min64(oh0 + j->rows, c->ho), ncol = (oh1 - oh0) * c->wo;
            const float *dy = j->a + (n * c->co + g * c->cog) * howo + oh0 * c->wo;
            float *dw = j->out + g * c->cog * c->k + ci0 * kk;
            if (!is_pointwise(c)) {
                im2col(c, j->b + (n * c->ci + g * c->cig) * hw, ci0, ci1, oh0, oh1, col);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->cog, (int)((ci1 - ci0) * kk), (int)ncol, 1.0f, dy, (int)howo, col, (int)ncol,
                            n || oh0 ? 1.0f : 0.0f, dw, (int)c->k);
            } else /* 1x1: the input is its own im2col matrix (one chunk: all rows) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->cog, (int)(ci1 - ci0), (int)hw, 1.0f, dy, (int)howo,
                            j->b + (n * c->ci + g * c->cig + ci0) * hw, (int)hw, n ? 1.0f : 0.0f, dw, (int)c->k);
        }
}

/* ---- the four conv ops ---- */

/* The geometry of a conv op's oneDNN primitive: true for the forward
 * convolution and dgrads (a transposed conv is the dgrad of the conv from
 * its output to its input); false for other ops. */
static bool dnnl_geom(const Graph *g, const Op *op, Geom *c) {
    if (op->kind == OP_CONV2D) *c = geom(SH(op->in[0]), SH(op->in[1]), SH(op->out[0]), &op->a);
    else if (op->kind == OP_CONV_TRANSPOSE2D) *c = geom(SH(op->out[0]), SH(op->in[1]), SH(op->in[0]), &op->a);
    else if (op->kind == OP_CONV2D_DGRAD) *c = geom(&op->a.shape, SH(op->in[1]), SH(op->in[0]), &op->a);
    else return false;
    return true;
}

bool cpu_conv_prepare(const Graph *g, char *err, int errcap) {
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        const bool forward = op->kind == OP_CONV2D;
        Geom c;
        if (dnnl_geom(g, op, &c) && !dnnl_conv_prepare(&c, forward, forward && op->n_in == 3, err, errcap)) return false;
    }
    return true;
}

REF_KERNEL(cpu_conv2d) {
    Geom c;
    dnnl_geom(g, op, &c);
    return dnnl_conv_forward(&c, T(0), T(1), op->n_in == 3 ? T(2) : NULL, O(0), err, errcap);
}

/* z = conv_transpose(x, w), plus the bias */
REF_KERNEL(cpu_conv_transpose2d) {
    const Shape *z = SH(op->out[0]);
    Geom c;
    dnnl_geom(g, op, &c);
    if (!dnnl_conv_dgrad(&c, T(0), T(1), O(0), err, errcap)) return false;
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
    Geom c;
    dnnl_geom(g, op, &c);
    return dnnl_conv_dgrad(&c, T(0), T(1), O(0), err, errcap);
}

/* conv2d_wgrad(dy, x) -> dw shaped a.shape */
REF_KERNEL(cpu_conv2d_wgrad) {
    Geom c = geom(SH(op->in[1]), &op->a.shape, SH(op->in[0]), &op->a);
    Job j = {.c = &c, .a = T(0), .b = T(1), .out = O(0)};
    if (is_depthwise(&c)) {
        j.tile = dw_wgrad_tile;
        return job_run(&j, c.co, 0, err, errcap);
    }
    int64_t col = job_blocks(&j);
    j.tile = wgrad_tile;
    return job_run(&j, c.groups * j.blocks, col, err, errcap);
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
    [OP_MAXPOOL2D] = cpu_maxpool2d,
    [OP_RESIZE_NEAREST] = cpu_resize_nearest,
    [OP_ATTENTION] = cpu_attention,
    [OP_ATTENTION_BWD] = cpu_attention_bwd,
};

RefKernel cpu_kernel(OpKind k) { return k >= 0 && k < OP_COUNT ? CPU_KERNELS[k] : NULL; }

