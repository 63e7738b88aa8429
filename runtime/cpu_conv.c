/* runtime/cpu_conv.c — fast fp32 convolutions for the CPU interpreter
 * (forward, dgrad, wgrad and transposed conv through oneDNN,
 * cpu_conv_dnnl.c; bias grad) and the fast-kernel table. Must not touch
 * the reference kernels: ref_conv.c stays the oracle. */
#include <stdlib.h>
#include <string.h>

#include "cpu_conv.h"
#include "cpu_conv_geom.h"
#include "../passes/views.h"

static Geom geom(const Shape *x, const Shape *w, const Shape *y, const OpAttrs *a) {
    Geom c = {x->d[0], x->d[1], x->d[2], x->d[3], y->d[1], y->d[2], y->d[3], (int)w->d[2], (int)w->d[3], a->stride[0], a->stride[1],
              a->pad[0], a->pad[2], a->dilation[0], a->dilation[1], a->groups, 0, 0, 0};
    c.cig = c.ci / c.groups;
    c.cog = c.co / c.groups;
    c.k = c.cig * c.kh * c.kw;
    return c;
}

float *cpu_thread_scratch(int64_t floats, bool *ok) {
    if (floats <= 0) return NULL;
    float *p = malloc((size_t)floats * sizeof(float));
    if (!p) {
#pragma omp atomic write
        *ok = false;
    }
    return p;
}

/* ---- the four conv ops ---- */

/* The geometry of a conv op's oneDNN primitive: the forward convolution,
 * dgrads (a transposed conv is the dgrad of the conv from its output to its
 * input) and wgrads; false for other ops. */
static bool dnnl_geom(const Graph *g, const Op *op, Geom *c) {
    if (op->kind == OP_CONV2D) *c = geom(SH(op->in[0]), SH(op->in[1]), SH(op->out[0]), &op->a);
    else if (op->kind == OP_CONV_TRANSPOSE2D) *c = geom(SH(op->out[0]), SH(op->in[1]), SH(op->in[0]), &op->a);
    else if (op->kind == OP_CONV2D_DGRAD) *c = geom(&op->a.shape, SH(op->in[1]), SH(op->in[0]), &op->a);
    else if (op->kind == OP_CONV2D_WGRAD) *c = geom(SH(op->in[1]), &op->a.shape, SH(op->in[0]), &op->a);
    else return false;
    return true;
}

bool cpu_conv_prepare(const Graph *g, char *err, int errcap) {
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        const ConvDir dir = op->kind == OP_CONV2D ? CONV_FORWARD : op->kind == OP_CONV2D_WGRAD ? CONV_WGRAD : CONV_DGRAD;
        Geom c;
        if (dnnl_geom(g, op, &c) && !dnnl_conv_prepare(&c, dir, dir == CONV_FORWARD && op->n_in == 3, err, errcap)) return false;
    }
    return true;
}

REF_KERNEL(cpu_conv2d) {
    Geom c;
    dnnl_geom(g, op, &c);
    return dnnl_conv_forward(&c, NULL, T(0), T(1), op->n_in == 3 ? T(2) : NULL, O(0), err, errcap);
}

/* Elements between t's images where it sits (v: NULL when no tensor is a view). */
static int64_t image_stride(const Graph *g, const Views *v, int t) {
    return v ? views_image_stride(g, v, t) : shape_numel(SH(t)) / SH(t)->d[0];
}

bool cpu_conv_forward_act(const Graph *g, const Views *v, const Op *conv, const float *w, const float *b, int act, float alpha, int out, void **buf, char *err,
                          int errcap) {
    Geom c;
    dnnl_geom(g, conv, &c);
    const ConvLayout lay = {image_stride(g, v, conv->in[0]), image_stride(g, v, out), act, alpha};
    return dnnl_conv_forward(&c, &lay, buf[conv->in[0]], w, b, buf[out], err, errcap);
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
    Geom c;
    dnnl_geom(g, op, &c);
    return dnnl_conv_wgrad(&c, T(0), T(1), O(0), err, errcap);
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
    [OP_MAXPOOL2D_BWD] = cpu_maxpool2d_bwd,
    [OP_RESIZE_NEAREST_BWD] = cpu_resize_nearest_bwd,
    [OP_ATTENTION] = cpu_attention,
    [OP_ATTENTION_BWD] = cpu_attention_bwd,
};

int64_t cpu_op_thread_scratch_floats(const Graph *g, const Op *op) {
    switch (op->kind) {
    case OP_ATTENTION: case OP_ATTENTION_BWD: return cpu_attention_scratch_floats(g, op);
    case OP_MAXPOOL2D: case OP_MAXPOOL2D_BWD: return cpu_maxpool_scratch_floats(g, op);
    default: return 0;
    }
}

RefKernel cpu_kernel(OpKind k) { return k >= 0 && k < OP_COUNT ? CPU_KERNELS[k] : NULL; }

