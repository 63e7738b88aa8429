/* runtime/export/onnx_export.c — one ONNX emit rule per forward IR op (the
 * table EMIT), run over the ops between the validation graph's images and its
 * predictions in graph order. Conv-BN pairs are folded as Ultralytics' export
 * fuses them; ops of the loss are never reached. Must not read files or know
 * the protobuf encoding (onnx_builder.c). */
#include "onnx_export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../cpu_fold.h"

typedef struct Ex {
    OnnxBuilder *b;
    const Graph *g;
    void *const *buf;
    const OnnxExportOptions *o;
    const EvalIO *io;
    const char **name;  /* per tensor: its ONNX value name once produced */
    int *fold_bn;       /* per op: for a conv, the BN op folded into it, else -1 */
    bool *skip;         /* per op: a folded BN (its conv writes its output) */
    char *err;
    int errcap;
} Ex;

#define SH(t) (&x->g->tensors[(t)].shape)

static bool oom(Ex *x) { return errf(x->err, x->errcap, "out of memory"); }

/* Layout copies (a reshape to the same shape, stored channels last) and
 * detaches are identities on logical values. */
static bool is_alias(const Graph *g, const Op *op) {
    return op->kind == OP_DETACH || (op->kind == OP_RESHAPE && shape_eq(&g->tensors[op->in[0]].shape, &g->tensors[op->out[0]].shape));
}

/* The tensor an alias op copies into t, or -1 when no alias produces t. */
static int alias_source(const Graph *g, int t) {
    int p = g->tensors[t].producer;
    return p >= 0 && is_alias(g, &g->ops[p]) ? g->ops[p].in[0] : -1;
}

/* The state tensor (parameter or buffer) behind t, through aliases; -1 if none. */
static int state_of(const Graph *g, int t) {
    for (int s; (s = alias_source(g, t)) >= 0;) t = s;
    TensorKind k = g->tensors[t].kind;
    return (k == TK_PARAM || k == TK_BUFFER) && g->tensors[t].dtype == DT_F32 ? t : -1;
}

/* A tensor's value name; state tensors become initializers under their
 * state_dict name on first use, so that a weight only a folded conv reads is
 * never written unfolded too. Aliases resolve to their source. */
static const char *value(Ex *x, int t) {
    for (int s; !x->name[t] && (s = alias_source(x->g, t)) >= 0;) t = s;
    if (x->name[t]) return x->name[t];
    const Tensor *tt = &x->g->tensors[t];
    if (state_of(x->g, t) != t || !x->buf[t]) {
        errf(x->err, x->errcap, "internal error: tensor %%%d is read before it is produced", t);
        return NULL;
    }
    if (!(x->name[t] = onnx_const_f32(x->b, tt->name, tt->shape.d, tt->shape.nd, x->buf[t]))) oom(x);
    return x->name[t];
}

static const char *in_(Ex *x, const Op *op, int i) { return value(x, op->in[i]); }

/* One-output node on op's scope; its output becomes the value of op->out[0]. */
static bool emit1(Ex *x, const Op *op, const char *type, const char *const *in, int n) {
    for (int i = 0; i < n; i++)
        if (!in[i]) return false;
    const char *out = onnx_op(x->b, type, op->scope, in, n);
    if (!out) return oom(x);
    x->name[op->out[0]] = out;
    return true;
}

/* A node of one or two inputs; NULL (and no node) when an input is missing,
 * whose producer has already said why. */
static const char *node_n(Ex *x, const Op *op, const char *type, const char *a, const char *b, int n) {
    if (!a || (n == 2 && !b)) return NULL;
    const char *in[2] = {a, b};
    const char *out = onnx_op(x->b, type, op->scope, in, n);
    if (!out) oom(x);
    return out;
}
static const char *op1(Ex *x, const Op *op, const char *type, const char *a) { return node_n(x, op, type, a, NULL, 1); }
static const char *op_(Ex *x, const Op *op, const char *type, const char *a, const char *b) { return node_n(x, op, type, a, b, 2); }

static const char *i64s(Ex *x, const int64_t *v, int n) {
    const char *c = onnx_const_i64s(x->b, v, n);
    if (!c) oom(x);
    return c;
}

/* Reshape to dims with the exported batch as dimension 0: the fixed batch,
 * or -1 (inferred) for a dynamic one. Literal sizes rather than ONNX's 0
 * ("copy the input's"), which some importers (OpenCV's DNN) get wrong. */
static const char *reshape_keep_batch(Ex *x, const Op *op, const char *in, const int64_t *dims, int nd) {
    int64_t d[IR_MAX_DIMS + 2];
    memcpy(d, dims, sizeof(int64_t) * (size_t)nd);
    d[0] = x->o->dynamic ? -1 : x->o->batch;
    return op_(x, op, "Reshape", in, i64s(x, d, nd));
}

/* ---- convolutions and batch norm ---- */

/* pads (top, bottom, left, right) in ONNX's order (begins, then ends) */
static void spatial_attrs(Ex *x, YoloccOnnx__NodeProto *n, const OpAttrs *a, const int64_t *kernel, bool dilations) {
    int64_t pads[4] = {a->pad[0], a->pad[2], a->pad[1], a->pad[3]}, st[2] = {a->stride[0], a->stride[1]}, dl[2] = {a->dilation[0], a->dilation[1]};
    onnx_attr_ints(x->b, n, "kernel_shape", kernel, 2);
    onnx_attr_ints(x->b, n, "strides", st, 2);
    onnx_attr_ints(x->b, n, "pads", pads, 4);
    if (dilations) onnx_attr_ints(x->b, n, "dilations", dl, 2);
}

/* Conv weights and bias with the BN after it folded in (Ultralytics' fuse_conv_and_bn, bn_fold). */
static bool folded_conv_weights(Ex *x, const Op *conv, const Op *bn, const char **w_name, const char **b_name) {
    const Graph *g = x->g;
    int w = state_of(g, conv->in[1]), cb = conv->n_in > 2 ? state_of(g, conv->in[2]) : -1;
    const float *gamma = x->buf[state_of(g, bn->in[1])], *beta = x->buf[state_of(g, bn->in[2])], *mean = x->buf[state_of(g, bn->in[3])], *var = x->buf[state_of(g, bn->in[4])];
    const Shape *ws = SH(w);
    int64_t co = ws->d[0], per = shape_numel(ws) / co;
    float *wf = malloc(sizeof(float) * (size_t)shape_numel(ws)), *bf = malloc(sizeof(float) * (size_t)co);
    if (!wf || !bf) {
        free(wf);
        free(bf);
        return oom(x);
    }
    bn_fold(x->buf[w], cb >= 0 ? x->buf[cb] : NULL, co, per, gamma, beta, mean, var, bn->a.eps, wf, bf);
    const char *scope = conv->scope ? conv->scope : "conv";
    char *bname = arena_printf(x->b->a, "%s.bias", scope);
    *w_name = onnx_const_f32(x->b, g->tensors[w].name, ws->d, ws->nd, wf);
    *b_name = bname ? onnx_const_f32(x->b, bname, &co, 1, bf) : NULL;
    free(wf);
    free(bf);
    return *w_name && *b_name ? true : oom(x);
}

static bool emit_conv(Ex *x, const Op *op) {
    const char *in[3] = {in_(x, op, 0), NULL, NULL};
    int n_in = op->n_in, bn = x->fold_bn[op->id];
    if (bn >= 0) {
        if (!folded_conv_weights(x, op, &x->g->ops[bn], &in[1], &in[2])) return false;
        n_in = 3;
    } else {
        for (int i = 1; i < n_in; i++) in[i] = in_(x, op, i);
    }
    if (!in[0] || !in[1] || (n_in > 2 && !in[2])) return false;
    const char *type = op->kind == OP_CONV2D ? "Conv" : "ConvTranspose";
    const char *out = onnx_fresh(x->b, op->scope, type);
    YoloccOnnx__NodeProto *n = out ? onnx_node(x->b, type, op->scope, in, n_in, &out, 1) : NULL;
    if (!n) return oom(x);
    const Shape *w = SH(op->in[1]);
    int64_t kernel[2] = {w->d[2], w->d[3]};
    spatial_attrs(x, n, &op->a, kernel, true);
    onnx_attr_int(x->b, n, "group", op->a.groups);
    x->name[bn >= 0 ? x->g->ops[bn].out[0] : op->out[0]] = out;
    return true;
}

static bool emit_batchnorm(Ex *x, const Op *op) {
    if (x->skip[op->id]) return true;
    if (op->a.training) return errf(x->err, x->errcap, "%s: a training-mode batch norm cannot be exported", op->scope ? op->scope : "batchnorm");
    const char *in[5];
    for (int i = 0; i < 5; i++)
        if (!(in[i] = in_(x, op, i))) return false;
    if (!emit1(x, op, "BatchNormalization", in, 5)) return false;
    onnx_attr_float(x->b, onnx_last(x->b), "epsilon", (float)op->a.eps);
    return true;
}

/* ---- pointwise ---- */

static bool emit_unary(Ex *x, const Op *op) {
    static const char *const TYPE[OP_COUNT] = {[OP_RELU] = "Relu", [OP_SIGMOID] = "Sigmoid", [OP_HARDSWISH] = "HardSwish", [OP_LEAKY_RELU] = "LeakyRelu"};
    const char *in = in_(x, op, 0);
    if (!emit1(x, op, TYPE[op->kind], &in, 1)) return false;
    if (op->kind == OP_LEAKY_RELU) onnx_attr_float(x->b, onnx_last(x->b), "alpha", (float)op->a.alpha);
    return true;
}

/* x * sigmoid(x), as torch.onnx writes nn.SiLU */
static bool emit_silu(Ex *x, const Op *op) {
    const char *in = in_(x, op, 0), *s = op1(x, op, "Sigmoid", in);
    const char *both[2] = {in, s};
    return s && emit1(x, op, "Mul", both, 2);
}

/* exact GELU: x * 0.5 * (1 + erf(x / sqrt(2))) (Gelu is an op only from opset 20) */
static bool emit_gelu(Ex *x, const Op *op) {
    const char *in = in_(x, op, 0);
    const char *e = op1(x, op, "Erf", op_(x, op, "Div", in, onnx_const_scalar(x->b, (float)M_SQRT2)));
    const char *h = op_(x, op, "Mul", op_(x, op, "Add", e, onnx_const_scalar(x->b, 1.0f)), onnx_const_scalar(x->b, 0.5f));
    const char *both[2] = {in, h};
    return h && emit1(x, op, "Mul", both, 2);
}

static bool emit_add(Ex *x, const Op *op) {
    const char *in[2] = {in_(x, op, 0), in_(x, op, 1)};
    return in[1] && emit1(x, op, "Add", in, 2);
}

/* x [N, C, ...] times a per-channel [C]: the scale broadcast as [1, C, 1, ...] */
static bool emit_channel_scale(Ex *x, const Op *op) {
    const Shape *xs = SH(op->in[0]);
    int64_t dims[IR_MAX_DIMS];
    for (int i = 0; i < xs->nd; i++) dims[i] = i == 1 ? xs->d[1] : 1;
    int st = state_of(x->g, op->in[1]);
    const char *scale;
    if (st >= 0) scale = onnx_const_f32(x->b, NULL, dims, xs->nd, x->buf[st]);
    else scale = op_(x, op, "Reshape", in_(x, op, 1), i64s(x, dims, xs->nd));
    const char *in[2] = {in_(x, op, 0), scale};
    return emit1(x, op, "Mul", in, 2); /* a NULL scale: its call has set the error or the builder's oom */
}

/* ---- layout ---- */

/* nothing to emit: value() looks through it when the output is read */
static bool emit_alias(Ex *x, const Op *op) {
    (void)x;
    (void)op;
    return true;
}

static bool emit_concat(Ex *x, const Op *op) {
    const char *in[IR_MAX_SPLIT];
    for (int i = 0; i < op->n_in; i++)
        if (!(in[i] = in_(x, op, i))) return false;
    if (!emit1(x, op, "Concat", in, op->n_in)) return false;
    onnx_attr_int(x->b, onnx_last(x->b), "axis", op->a.axis);
    return true;
}

static bool emit_split(Ex *x, const Op *op) {
    int64_t sizes[IR_MAX_SPLIT];
    const char *out[IR_MAX_SPLIT];
    for (int i = 0; i < op->n_out; i++) {
        sizes[i] = op->a.split[i];
        if (!(out[i] = onnx_fresh(x->b, op->scope, "Split"))) return oom(x);
    }
    const char *in[2] = {in_(x, op, 0), i64s(x, sizes, op->n_out)};
    if (!in[0] || !in[1]) return false;
    YoloccOnnx__NodeProto *n = onnx_node(x->b, "Split", op->scope, in, 2, out, op->n_out);
    if (!n) return oom(x);
    onnx_attr_int(x->b, n, "axis", op->a.axis);
    for (int i = 0; i < op->n_out; i++) x->name[op->out[i]] = out[i];
    return true;
}

static bool emit_reshape(Ex *x, const Op *op) {
    if (is_alias(x->g, op)) return emit_alias(x, op);
    const Shape *in = SH(op->in[0]), *out = SH(op->out[0]);
    if (in->d[0] != x->io->batch || out->d[0] != x->io->batch)
        return errf(x->err, x->errcap, "%s: a reshape that moves the batch dimension (%lld -> %lld) cannot be exported batch-free", op->scope ? op->scope : "reshape",
                    (long long)in->d[0], (long long)out->d[0]);
    const char *r = reshape_keep_batch(x, op, in_(x, op, 0), out->d, out->nd);
    x->name[op->out[0]] = r;
    return r != NULL;
}

static bool emit_resize(Ex *x, const Op *op) {
    const Shape *in = SH(op->in[0]);
    int64_t four = 4;
    float scales[4] = {1, 1, (float)op->a.out_hw[0] / (float)in->d[2], (float)op->a.out_hw[1] / (float)in->d[3]};
    const char *ins[3] = {in_(x, op, 0), "", onnx_const_f32(x->b, NULL, &four, 1, scales)};
    if (!ins[2]) return oom(x);
    if (!emit1(x, op, "Resize", ins, 3)) return false;
    YoloccOnnx__NodeProto *n = onnx_last(x->b);
    /* PyTorch's nearest: source index floor(dst * in / out) */
    onnx_attr_string(x->b, n, "mode", "nearest");
    onnx_attr_string(x->b, n, "coordinate_transformation_mode", "asymmetric");
    onnx_attr_string(x->b, n, "nearest_mode", "floor");
    return true;
}

static bool emit_pool(Ex *x, const Op *op) {
    bool max = op->kind == OP_MAXPOOL2D;
    if (!max && (op->a.dilation[0] != 1 || op->a.dilation[1] != 1)) return errf(x->err, x->errcap, "%s: a dilated average pool has no ONNX form before opset 19", op->scope);
    const char *in = in_(x, op, 0);
    if (!emit1(x, op, max ? "MaxPool" : "AveragePool", &in, 1)) return false;
    YoloccOnnx__NodeProto *n = onnx_last(x->b);
    int64_t kernel[2] = {op->a.kernel[0], op->a.kernel[1]};
    spatial_attrs(x, n, &op->a, kernel, max);
    /* torch's avg_pool2d default: padded zeros count in the divisor */
    if (!max) onnx_attr_int(x->b, n, "count_include_pad", 1);
    return true;
}

static bool emit_zeropad(Ex *x, const Op *op) {
    const int *p = op->a.pad;
    int64_t pads[8] = {0, 0, p[0], p[2], 0, 0, p[1], p[3]};
    const char *in[2] = {in_(x, op, 0), i64s(x, pads, 8)};
    return in[1] && emit1(x, op, "Pad", in, 2);
}

/* ---- attention ---- */

static const char *transpose(Ex *x, const Op *op, const char *in, const int64_t *perm, int n) {
    const char *t = op1(x, op, "Transpose", in);
    if (t) onnx_attr_ints(x->b, onnx_last(x->b), "perm", perm, n);
    return t;
}

/* qkv [N, heads * (2 kd + hd), H, W] as [N, area, heads, 2 kd + hd, L] (L tokens
 * an area), per-area softmax(scale q^T k), o = v P^T; o and v back to [N, heads hd, H, W]. */
static bool emit_attention(Ex *x, const Op *op) {
    const OpAttrs *a = &op->a;
    const Shape *s = SH(op->in[0]);
    int64_t per = 2 * a->key_dim + a->head_dim, L = s->d[2] * s->d[3] / a->area;
    int64_t r5[5] = {0, a->heads, per, a->area, L}, to_area[5] = {0, 3, 1, 2, 4}, swap[5] = {0, 1, 2, 4, 3}, back[5] = {0, 2, 3, 1, 4};
    int64_t out4[4] = {0, (int64_t)a->heads * a->head_dim, s->d[2], s->d[3]}, sizes[3] = {a->key_dim, a->key_dim, a->head_dim};
    const char *t = transpose(x, op, reshape_keep_batch(x, op, in_(x, op, 0), r5, 5), to_area, 5);
    const char *qkv[3] = {onnx_fresh(x->b, op->scope, "q"), onnx_fresh(x->b, op->scope, "k"), onnx_fresh(x->b, op->scope, "v")};
    const char *sin[2] = {t, i64s(x, sizes, 3)};
    if (!t || !sin[1] || !qkv[0] || !qkv[1] || !qkv[2]) return false;
    YoloccOnnx__NodeProto *sp = onnx_node(x->b, "Split", op->scope, sin, 2, qkv, 3);
    if (!sp) return oom(x);
    onnx_attr_int(x->b, sp, "axis", 3);
    const char *scores = op_(x, op, "Mul", op_(x, op, "MatMul", transpose(x, op, qkv[0], swap, 5), qkv[1]), onnx_const_scalar(x->b, (float)a->scale));
    const char *p = op1(x, op, "Softmax", scores);
    if (!p) return false;
    onnx_attr_int(x->b, onnx_last(x->b), "axis", -1);
    const char *o = op_(x, op, "MatMul", qkv[2], transpose(x, op, p, swap, 5));
    const char *outs[2] = {o, qkv[2]};
    for (int i = 0; i < 2; i++)
        if (!(x->name[op->out[i]] = reshape_keep_batch(x, op, transpose(x, op, outs[i], back, 5), out4, 4))) return false;
    return true;
}

/* ---- Detect's decode ---- */

/* [N, 4 reg_max, A] -> softmax over each side's reg_max bins, expectation with the DFL conv's weights (bins 0..reg_max-1) */
static bool emit_dfl(Ex *x, const Op *op) {
    int64_t r = op->a.reg_max, A = SH(op->in[0])->d[2], r4[4] = {0, 4, r, A}, wdims[4] = {1, 1, r, 1}, axis = 2;
    int w = state_of(x->g, op->in[1]);
    if (w < 0) return errf(x->err, x->errcap, "%s: the DFL weights are not a parameter", op->scope);
    const char *sm = op1(x, op, "Softmax", reshape_keep_batch(x, op, in_(x, op, 0), r4, 4));
    if (!sm) return false;
    onnx_attr_int(x->b, onnx_last(x->b), "axis", 2);
    const char *weighted = op_(x, op, "Mul", sm, onnx_const_f32(x->b, NULL, wdims, 4, x->buf[w]));
    const char *in[2] = {weighted, i64s(x, &axis, 1)};
    if (!weighted || !in[1] || !emit1(x, op, "ReduceSum", in, 2)) return false;
    onnx_attr_int(x->b, onnx_last(x->b), "keepdims", 0);
    return true;
}

/* distances (l, t, r, b) from the cell centres to boxes in pixels: x1y1 = c - lt,
 * x2y2 = c + rb; xywh ((x1y1 + x2y2) / 2, x2y2 - x1y1) or xyxy; times the level's stride */
static bool emit_dist2bbox(Ex *x, const Op *op) {
    const OpAttrs *a = &op->a;
    int64_t A = SH(op->in[0])->d[2], adims[3] = {1, 2, A}, sdims[3] = {1, 1, A}, halves[2] = {2, 2};
    float *anc = malloc(sizeof(float) * 2 * (size_t)A), *str = malloc(sizeof(float) * (size_t)A);
    if (!anc || !str) {
        free(anc);
        free(str);
        return oom(x);
    }
    int64_t k = 0;
    for (int lv = 0; lv < a->nlevels; lv++)
        for (int y = 0; y < a->level_hw[lv][0]; y++)
            for (int xx = 0; xx < a->level_hw[lv][1]; xx++, k++) {
                anc[k] = (float)xx + 0.5f;
                anc[A + k] = (float)y + 0.5f;
                str[k] = (float)a->strides[lv];
            }
    const char *anchors = onnx_const_f32(x->b, NULL, adims, 3, anc), *strides = onnx_const_f32(x->b, NULL, sdims, 3, str);
    free(anc);
    free(str);
    const char *parts[2] = {onnx_fresh(x->b, op->scope, "lt"), onnx_fresh(x->b, op->scope, "rb")};
    const char *sin[2] = {in_(x, op, 0), i64s(x, halves, 2)};
    if (!anchors || !strides || !parts[0] || !parts[1] || !sin[0] || !sin[1]) return sin[0] ? oom(x) : false;
    YoloccOnnx__NodeProto *sp = onnx_node(x->b, "Split", op->scope, sin, 2, parts, 2);
    if (!sp) return oom(x);
    onnx_attr_int(x->b, sp, "axis", 1);
    const char *x1y1 = op_(x, op, "Sub", anchors, parts[0]), *x2y2 = op_(x, op, "Add", anchors, parts[1]);
    const char *cat[2] = {x1y1, x2y2};
    if (a->xywh) {
        cat[0] = op_(x, op, "Div", op_(x, op, "Add", x1y1, x2y2), onnx_const_scalar(x->b, 2.0f));
        cat[1] = op_(x, op, "Sub", x2y2, x1y1);
    }
    const char *boxes = cat[0] && cat[1] ? onnx_op(x->b, "Concat", op->scope, cat, 2) : NULL;
    if (!boxes) return oom(x);
    onnx_attr_int(x->b, onnx_last(x->b), "axis", 1);
    const char *in[2] = {boxes, strides};
    return emit1(x, op, "Mul", in, 2);
}

typedef bool (*EmitRule)(Ex *x, const Op *op);

/* The forward ops an eval-mode model is made of; everything else (loss, backward, optimizer) has no rule. */
static const EmitRule EMIT[OP_COUNT] = {
    [OP_CONV2D] = emit_conv,
    [OP_CONV_TRANSPOSE2D] = emit_conv,
    [OP_BATCHNORM] = emit_batchnorm,
    [OP_SILU] = emit_silu,
    [OP_RELU] = emit_unary,
    [OP_LEAKY_RELU] = emit_unary,
    [OP_HARDSWISH] = emit_unary,
    [OP_GELU] = emit_gelu,
    [OP_SIGMOID] = emit_unary,
    [OP_ADD] = emit_add,
    [OP_CHANNEL_SCALE] = emit_channel_scale,
    [OP_CONCAT] = emit_concat,
    [OP_SPLIT] = emit_split,
    [OP_RESHAPE] = emit_reshape,
    [OP_RESIZE_NEAREST] = emit_resize,
    [OP_MAXPOOL2D] = emit_pool,
    [OP_AVGPOOL2D] = emit_pool,
    [OP_ZEROPAD2D] = emit_zeropad,
    [OP_ATTENTION] = emit_attention,
    [OP_DFL] = emit_dfl,
    [OP_DIST2BBOX] = emit_dist2bbox,
    [OP_DETACH] = emit_alias,
};

/* ---- v10Detect's selection (Detect.postprocess) ---- */

/* ReduceMax over the last axis: axes an attribute before opset 18, an input from it */
static const char *reduce_max_last(Ex *x, const Op *op, const char *in) {
    int64_t axis = -1;
    const char *r = x->o->opset >= 18 ? op_(x, op, "ReduceMax", in, i64s(x, &axis, 1)) : op1(x, op, "ReduceMax", in);
    if (!r) return NULL;
    if (x->o->opset < 18) onnx_attr_ints(x->b, onnx_last(x->b), "axes", &axis, 1);
    onnx_attr_int(x->b, onnx_last(x->b), "keepdims", 0);
    return r;
}

/* TopK's (values, indices) of the last axis, largest first */
static bool topk(Ex *x, const Op *op, const char *in, int64_t k, const char **vals, const char **idx) {
    const char *out[2] = {*vals = onnx_fresh(x->b, op->scope, "topk_values"), *idx = onnx_fresh(x->b, op->scope, "topk_indices")};
    const char *ins[2] = {in, i64s(x, &k, 1)};
    if (!in || !ins[1] || !out[0] || !out[1]) return false;
    YoloccOnnx__NodeProto *n = onnx_node(x->b, "TopK", op->scope, ins, 2, out, 2);
    if (!n) return oom(x);
    onnx_attr_int(x->b, n, "axis", -1);
    return true;
}

/* rows of src [N, A, C] at indices [N, k] -> [N, k, C] */
static const char *gather_rows(Ex *x, const Op *op, const char *src, const char *idx, int64_t c) {
    int64_t last = -1, rep[3] = {1, 1, c};
    const char *tiled = op_(x, op, "Tile", op_(x, op, "Unsqueeze", idx, i64s(x, &last, 1)), i64s(x, rep, 3));
    const char *g = op_(x, op, "GatherElements", src, tiled);
    if (g) onnx_attr_int(x->b, onnx_last(x->b), "axis", 1);
    return g;
}

/* pred [N, 4 + nc, A] (xyxy, scores) -> [N, k, 6]: the k anchors with the highest
 * class score, then the k best (anchor, class) pairs among them as x1 y1 x2 y2 score class */
static bool emit_end2end(Ex *x, const Op *pred_op, const char *pred, int64_t nc, int64_t k, const char *out_name) {
    int64_t perm[3] = {0, 2, 1}, sizes[2] = {4, nc}, flat[2] = {x->o->dynamic ? -1 : x->o->batch, k * nc}, last = -1;
    const char *t = transpose(x, pred_op, pred, perm, 3);
    const char *parts[2] = {onnx_fresh(x->b, pred_op->scope, "boxes"), onnx_fresh(x->b, pred_op->scope, "scores")};
    const char *sin[2] = {t, i64s(x, sizes, 2)};
    if (!t || !sin[1] || !parts[0] || !parts[1]) return false;
    YoloccOnnx__NodeProto *sp = onnx_node(x->b, "Split", pred_op->scope, sin, 2, parts, 2);
    if (!sp) return oom(x);
    onnx_attr_int(x->b, sp, "axis", 2);
    const char *v1, *i1, *v2, *i2;
    if (!topk(x, pred_op, reduce_max_last(x, pred_op, parts[1]), k, &v1, &i1)) return false;
    const char *boxes = gather_rows(x, pred_op, parts[0], i1, 4), *scores = gather_rows(x, pred_op, parts[1], i1, nc);
    if (!topk(x, pred_op, op_(x, pred_op, "Reshape", scores, i64s(x, flat, 2)), k, &v2, &i2)) return false;
    int64_t nc1[1] = {nc};
    const char *ncc = onnx_const_i64(x->b, NULL, NULL, 0, nc1);
    const char *anchor = op_(x, pred_op, "Div", i2, ncc), *cls = op1(x, pred_op, "Cast", op_(x, pred_op, "Mod", i2, ncc));
    if (!cls) return false;
    onnx_attr_int(x->b, onnx_last(x->b), "to", ONNX_FLOAT);
    const char *cat[3] = {gather_rows(x, pred_op, boxes, anchor, 4), op_(x, pred_op, "Unsqueeze", v2, i64s(x, &last, 1)), op_(x, pred_op, "Unsqueeze", cls, i64s(x, &last, 1))};
    if (!cat[0] || !cat[1] || !cat[2]) return false;
    YoloccOnnx__NodeProto *n = onnx_node(x->b, "Concat", pred_op->scope, cat, 3, &out_name, 1);
    if (!n) return oom(x);
    onnx_attr_int(x->b, n, "axis", -1);
    return true;
}

/* Which ops lie on a path from the graph's inputs to the predictions; which conv-BN pairs fold. */
static bool plan_ops(Ex *x, bool *needed, int *n_needed, int *n_folded) {
    const Graph *g = x->g;
    bool *live = calloc((size_t)g->n_tensors, sizeof *live);
    int *readers = calloc((size_t)g->n_tensors, sizeof *readers);
    if (!live || !readers) {
        free(live);
        free(readers);
        return oom(x);
    }
    live[x->io->pred] = true;
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const Op *op = &g->ops[i];
        for (int k = 0; k < op->n_out && !needed[i]; k++) needed[i] = live[op->out[k]];
        if (!needed[i]) continue;
        for (int k = 0; k < op->n_in; k++) live[op->in[k]] = true, readers[op->in[k]]++;
    }
    *n_needed = *n_folded = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const Op *op = &g->ops[i];
        x->fold_bn[i] = -1;
        if (!needed[i]) continue;
        (*n_needed)++;
        if (op->kind != OP_BATCHNORM || op->a.training) continue;
        int c = g->tensors[op->in[0]].producer;
        if (c < 0 || g->ops[c].kind != OP_CONV2D || readers[op->in[0]] != 1 || op->in[0] == x->io->pred) continue;
        const Op *conv = &g->ops[c];
        bool foldable = state_of(g, conv->in[1]) >= 0 && (conv->n_in < 3 || state_of(g, conv->in[2]) >= 0);
        for (int k = 1; k <= 4; k++) foldable = foldable && state_of(g, op->in[k]) >= 0;
        if (!foldable) continue;
        x->fold_bn[c] = i;
        x->skip[i] = true;
        (*n_folded)++;
    }
    free(live);
    free(readers);
    return true;
}

bool onnx_export_graph(OnnxBuilder *b, const Graph *g, void *const *buf, const EvalIO *io, const OnnxExportOptions *o, OnnxExportResult *r, char *err, int errcap) {
    memset(r, 0, sizeof *r);
    Ex x = {.b = b, .g = g, .buf = buf, .o = o, .io = io, .err = err, .errcap = errcap};
    x.name = calloc((size_t)g->n_tensors, sizeof *x.name);
    x.fold_bn = calloc((size_t)g->n_ops, sizeof *x.fold_bn);
    x.skip = calloc((size_t)g->n_ops, sizeof *x.skip);
    bool *needed = calloc((size_t)g->n_ops, sizeof *needed);
    err[0] = '\0';
    bool ok = x.name && x.fold_bn && x.skip && needed ? plan_ops(&x, needed, &r->ops_exported, &r->bn_folded) : oom(&x);
    if (ok) x.name[io->images] = "images";
    for (int i = 0; ok && i < g->n_ops; i++) {
        const Op *op = &g->ops[i];
        if (!needed[i]) continue;
        if (!EMIT[op->kind]) {
            ok = errf(err, errcap, "%s: op %s has no ONNX form (only the eval-mode model from the images to the predictions is exported)", op->scope ? op->scope : "?", op_def(op->kind)->name);
            break;
        }
        ok = EMIT[op->kind](&x, op);
    }
    const Shape *ps = &g->tensors[io->pred].shape;
    const char *pred = ok ? value(&x, io->pred) : NULL;
    if (ok && !pred) ok = false;
    if (ok) {
        const Op *last = &g->ops[g->tensors[io->pred].producer];
        int64_t k = o->max_det < ps->d[2] ? o->max_det : ps->d[2];
        if (io->end2end) ok = emit_end2end(&x, last, pred, io->nc, k, "output0");
        else {
            const char *out = "output0";
            ok = onnx_node(b, "Identity", last->scope, &pred, 1, &out, 1) != NULL || oom(&x);
        }
        const char *param = o->dynamic ? "batch" : NULL;
        r->input = (OnnxValue){.name = "images", .nd = 4, .d = {o->batch, 3, io->imgsz, io->imgsz}, .batch_param = param};
        r->output = io->end2end ? (OnnxValue){.name = "output0", .nd = 3, .d = {o->batch, k, 6}, .batch_param = param}
                                : (OnnxValue){.name = "output0", .nd = 3, .d = {o->batch, ps->d[1], ps->d[2]}, .batch_param = param};
    }
    free(x.name);
    free(x.fold_bn);
    free(x.skip);
    free(needed);
    /* a rule may have failed inside an expression whose NULL the caller then
     * passed on, or a constant's allocation may have failed unreported */
    if (ok && (err[0] || b->oom)) ok = false;
    if (!ok && !err[0]) {
        if (b->oom) oom(&x);
        else errf(err, errcap, "internal error: an ONNX rule failed without saying why");
    }
    return ok;
}
