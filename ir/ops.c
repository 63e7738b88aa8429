/* ir/ops.c — the op registry: for every primitive op its input arity, shape
 * rule, FLOP rule and Ultralytics-thop MAC rule, defined once here.
 * (Gradient rules join this table with autodiff.) Must not know modules. */
#include <string.h>

#include "ops_impl.h"

static int64_t conv_out(int64_t in, int pad_total, int dil, int k, int stride) {
    int64_t eff = (int64_t)dil * (k - 1) + 1;
    int64_t num = in + pad_total - eff;
    return num < 0 ? 0 : num / stride + 1;
}

static bool need_nchw(const Shape *s, const char *what, char *err, int errcap) {
    if (s->nd != 4) FAIL("%s must be 4-D (N, C, H, W), got %d-D", what, s->nd);
    return true;
}

static bool spatial_ok(const OpAttrs *a, char *err, int errcap) {
    for (int i = 0; i < 2; i++)
        if (a->stride[i] < 1 || a->dilation[i] < 1) FAIL("stride and dilation must be >= 1");
    for (int i = 0; i < 4; i++)
        if (a->pad[i] < 0) FAIL("padding must be >= 0");
    return true;
}

/* ---- conv2d: x[N,Ci,H,W], w[Co,Ci/g,kh,kw], optional b[Co] ---- */
static bool conv2d_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0), *w = IN(1);
    const OpAttrs *a = &op->a;
    if (!need_nchw(x, "conv2d input", err, errcap) || !need_nchw(w, "conv2d weight", err, errcap)) return false;
    if (!spatial_ok(a, err, errcap)) return false;
    int64_t ci = x->d[1], co = w->d[0], gr = a->groups;
    if (gr < 1 || ci % gr || co % gr) FAIL("groups=%lld must divide input channels %lld and output channels %lld", (long long)gr, (long long)ci, (long long)co);
    if (w->d[1] * gr != ci) FAIL("weight expects %lld input channels, input has %lld", (long long)(w->d[1] * gr), (long long)ci);
    if (op->n_in == 3 && (g->tensors[op->in[2]].shape.nd != 1 || g->tensors[op->in[2]].shape.d[0] != co)) FAIL("bias must have %lld elements", (long long)co);
    int64_t h = conv_out(x->d[2], a->pad[0] + a->pad[1], a->dilation[0], (int)w->d[2], a->stride[0]);
    int64_t wd = conv_out(x->d[3], a->pad[2] + a->pad[3], a->dilation[1], (int)w->d[3], a->stride[1]);
    if (h < 1 || wd < 1) FAIL("kernel %lldx%lld does not fit input %lldx%lld", (long long)w->d[2], (long long)w->d[3], (long long)x->d[2], (long long)x->d[3]);
    out[0] = shape4(x->d[0], co, h, wd);
    return true;
}
double conv_macs(const Graph *g, const Op *op) {
    const Shape *w = IN(1);
    return (double)shape_numel(OUT0) * (double)(IN(0)->d[1] / op->a.groups) * (double)(w->d[2] * w->d[3]);
}
static double conv_flops(const Graph *g, const Op *op) {
    return 2 * conv_macs(g, op) + (op->n_in == 3 ? (double)shape_numel(OUT0) : 0);
}

/* ---- conv_transpose2d: x[N,Ci,H,W], w[Ci,Co/g,kh,kw], optional b[Co] ---- */
static bool convt_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0), *w = IN(1);
    const OpAttrs *a = &op->a;
    if (!need_nchw(x, "conv_transpose2d input", err, errcap) || !need_nchw(w, "conv_transpose2d weight", err, errcap)) return false;
    if (!spatial_ok(a, err, errcap)) return false;
    int64_t gr = a->groups, co = w->d[1] * gr;
    if (gr < 1 || x->d[1] % gr) FAIL("groups must divide input channels");
    if (w->d[0] != x->d[1]) FAIL("weight expects %lld input channels, input has %lld", (long long)w->d[0], (long long)x->d[1]);
    int64_t h = (x->d[2] - 1) * a->stride[0] - (a->pad[0] + a->pad[1]) + (int64_t)a->dilation[0] * (w->d[2] - 1) + 1;
    int64_t wd = (x->d[3] - 1) * a->stride[1] - (a->pad[2] + a->pad[3]) + (int64_t)a->dilation[1] * (w->d[3] - 1) + 1;
    if (h < 1 || wd < 1) FAIL("transposed convolution output would be empty");
    out[0] = shape4(x->d[0], co, h, wd);
    return true;
}

/* ---- batchnorm: x[N,C,...], weight, bias, running_mean, running_var [C],
 * num_batches_tracked [] -> y, mean [C], invstd [C]. In training mode mean and
 * invstd are the batch statistics (saved for backward) and the running
 * statistics are updated in place; in eval mode they come from the running
 * statistics. ---- */
static bool bn_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0);
    if (x->nd < 2) FAIL("batchnorm input needs a channel dimension");
    for (int i = 1; i <= 4; i++)
        if (IN(i)->nd != 1 || IN(i)->d[0] != x->d[1]) FAIL("batchnorm parameter %d must have %lld elements", i, (long long)x->d[1]);
    out[0] = *x;
    out[1] = out[2] = shape1(x->d[1]);
    return true;
}
static double bn_thop(const Graph *g, const Op *op) { return 4.0 * (double)shape_numel(IN(0)); }

static bool bn_apply_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0);
    if (x->nd < 2) FAIL("bn_apply input needs a channel dimension");
    for (int i = 1; i <= 4; i++)
        if (IN(i)->nd != 1 || IN(i)->d[0] != x->d[1]) FAIL("bn_apply operand %d must have %lld elements", i, (long long)x->d[1]);
    out[0] = *x;
    return true;
}

/* ---- elementwise ---- */
static bool same_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    for (int i = 1; i < op->n_in; i++)
        if (!shape_eq(IN(0), IN(i))) FAIL("operand shapes differ");
    out[0] = *IN(0);
    return true;
}
double zero_cost(const Graph *g, const Op *op) { (void)g; (void)op; return 0; }
double per_out_1(const Graph *g, const Op *op) { return (double)shape_numel(OUT0); }
double per_out_4(const Graph *g, const Op *op) { return 4.0 * (double)shape_numel(OUT0); }

static bool chscale_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    if (IN(0)->nd < 2 || IN(1)->nd != 1 || IN(1)->d[0] != IN(0)->d[1]) FAIL("channel_scale needs a [C] scale for a [N, C, ...] input");
    out[0] = *IN(0);
    return true;
}

/* ---- layout ---- */
static bool concat_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *f = IN(0);
    int ax = op->a.axis;
    if (ax < 0 || ax >= f->nd) FAIL("concat axis %d out of range", ax);
    Shape s = *f;
    for (int i = 1; i < op->n_in; i++) {
        const Shape *t = IN(i);
        if (t->nd != f->nd) FAIL("concat inputs differ in rank");
        for (int k = 0; k < f->nd; k++)
            if (k != ax && t->d[k] != f->d[k])
                FAIL("concat input %d has size %lld in dimension %d, input 0 has %lld", i, (long long)t->d[k], k, (long long)f->d[k]);
        s.d[ax] += t->d[ax];
    }
    out[0] = s;
    return true;
}

static bool split_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0);
    int ax = op->a.axis;
    if (ax < 0 || ax >= x->nd) FAIL("split axis %d out of range", ax);
    if (op->a.nsplit != op->n_out || op->n_out < 1 || op->n_out > IR_MAX_SPLIT) FAIL("split needs one size per output");
    int64_t sum = 0;
    for (int i = 0; i < op->n_out; i++) {
        if (op->a.split[i] < 1) FAIL("split sizes must be positive");
        sum += op->a.split[i];
        out[i] = *x;
        out[i].d[ax] = op->a.split[i];
    }
    if (sum != x->d[ax]) FAIL("split sizes add up to %lld, dimension %d has %lld", (long long)sum, ax, (long long)x->d[ax]);
    return true;
}

static bool reshape_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    if (shape_numel(&op->a.shape) != shape_numel(IN(0))) FAIL("reshape changes the element count");
    out[0] = op->a.shape;
    return true;
}

static bool resize_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    if (!need_nchw(IN(0), "resize input", err, errcap)) return false;
    if (op->a.out_hw[0] < 1 || op->a.out_hw[1] < 1) FAIL("resize output size must be positive");
    out[0] = shape4(IN(0)->d[0], IN(0)->d[1], op->a.out_hw[0], op->a.out_hw[1]);
    return true;
}
/* nn.Upsample counts one op per output element in ultralytics-thop 2.x;
 * F.interpolate inside a block is not a module and counts nothing. */
static double resize_thop(const Graph *g, const Op *op) { return op->functional ? 0 : (double)shape_numel(OUT0); }

static bool pool_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0);
    const OpAttrs *a = &op->a;
    if (!need_nchw(x, "pool input", err, errcap) || !spatial_ok(a, err, errcap)) return false;
    for (int i = 0; i < 2; i++) {
        if (a->kernel[i] < 1) FAIL("pool kernel must be >= 1");
        int64_t eff = (int64_t)a->dilation[i] * (a->kernel[i] - 1) + 1;
        if (2 * (int64_t)a->pad[2 * i] > eff) FAIL("pool padding %d is more than half the kernel %d", a->pad[2 * i], a->kernel[i]);
    }
    int64_t h = conv_out(x->d[2], a->pad[0] + a->pad[1], a->dilation[0], a->kernel[0], a->stride[0]);
    int64_t w = conv_out(x->d[3], a->pad[2] + a->pad[3], a->dilation[1], a->kernel[1], a->stride[1]);
    if (h < 1 || w < 1) FAIL("pool kernel %dx%d does not fit input %lldx%lld", a->kernel[0], a->kernel[1], (long long)x->d[2], (long long)x->d[3]);
    out[0] = shape4(x->d[0], x->d[1], h, w);
    return true;
}
static double pool_flops(const Graph *g, const Op *op) { return (double)shape_numel(OUT0) * op->a.kernel[0] * op->a.kernel[1]; }

static bool zeropad_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0);
    if (!need_nchw(x, "pad input", err, errcap)) return false;
    for (int i = 0; i < 4; i++)
        if (op->a.pad[i] < 0) FAIL("padding must be >= 0");
    out[0] = shape4(x->d[0], x->d[1], x->d[2] + op->a.pad[0] + op->a.pad[1], x->d[3] + op->a.pad[2] + op->a.pad[3]);
    return true;
}

/* ---- attention: qkv[N, heads*(2*key_dim+head_dim), H, W], channels per head
 * [q | k | v] -> o and v, both [N, heads*head_dim, H, W]; tokens (row-major)
 * are cut into `area` contiguous chunks that attend only within themselves. */
static bool attention_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0);
    const OpAttrs *a = &op->a;
    if (!need_nchw(x, "attention input", err, errcap)) return false;
    if (a->heads < 1 || a->key_dim < 1 || a->head_dim < 1 || a->area < 1) FAIL("attention needs heads, key_dim, head_dim and area >= 1");
    if (x->d[1] != (int64_t)a->heads * (2 * a->key_dim + a->head_dim))
        FAIL("attention input has %lld channels, %d heads x (2*%d+%d) expected", (long long)x->d[1], a->heads, a->key_dim, a->head_dim);
    if ((x->d[2] * x->d[3]) % a->area) FAIL("%lld tokens cannot be cut into %d equal areas", (long long)(x->d[2] * x->d[3]), a->area);
    out[0] = out[1] = shape4(x->d[0], (int64_t)a->heads * a->head_dim, x->d[2], x->d[3]);
    return true;
}
static double attention_flops(const Graph *g, const Op *op) {
    const Shape *x = IN(0);
    const OpAttrs *a = &op->a;
    double tokens = (double)(x->d[2] * x->d[3]), per_area = tokens / a->area;
    double pairs = (double)x->d[0] * a->heads * a->area * per_area * per_area;
    return pairs * (2.0 * a->key_dim + 2.0 * a->head_dim + 5.0);
}

/* ---- Detect inference pieces ---- */
static bool dfl_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0), *w = IN(1);
    int r = op->a.reg_max;
    if (x->nd != 3 || r < 2 || x->d[1] != 4LL * r) FAIL("dfl needs [N, 4*reg_max, A] input");
    if (w->nd != 4 || w->d[0] != 1 || w->d[1] != r || w->d[2] != 1 || w->d[3] != 1) FAIL("dfl weight must be [1, %d, 1, 1]", r);
    Shape s = *x;
    s.d[1] = 4;
    out[0] = s;
    return true;
}
/* The DFL 1x1 conv over reg_max bins is an nn.Conv2d: thop counts it. */
static double dfl_thop(const Graph *g, const Op *op) { return (double)shape_numel(OUT0) * op->a.reg_max; }
static double dfl_flops(const Graph *g, const Op *op) { return (double)shape_numel(OUT0) * op->a.reg_max * 7.0; }

static bool dist2bbox_infer(const Graph *g, const Op *op, Shape *out, char *err, int errcap) {
    const Shape *x = IN(0);
    if (x->nd != 3 || x->d[1] != 4) FAIL("dist2bbox needs [N, 4, A] input");
    int64_t anchors = 0;
    if (op->a.nlevels < 1 || op->a.nlevels > IR_MAX_LEVELS) FAIL("dist2bbox needs 1..%d levels", IR_MAX_LEVELS);
    for (int i = 0; i < op->a.nlevels; i++) anchors += (int64_t)op->a.level_hw[i][0] * op->a.level_hw[i][1];
    if (anchors != x->d[2]) FAIL("levels hold %lld anchors, input has %lld", (long long)anchors, (long long)x->d[2]);
    out[0] = *x;
    return true;
}

static const OpDef REGISTRY[OP_COUNT] = {
    /* name, inputs min..max, outputs, shape, FLOPs, thop MACs, gradient rule */
    [OP_CONV2D] = {.name = "conv2d", .min_in = 2, .max_in = 3, .n_out = 1, .infer = conv2d_infer, .flops = conv_flops, .thop_macs = conv_macs, .grad = conv2d_grad},
    [OP_CONV_TRANSPOSE2D] = {.name = "conv_transpose2d", .min_in = 2, .max_in = 3, .n_out = 1, .infer = convt_infer, .flops = conv_flops, .thop_macs = conv_macs, .grad = conv_transpose2d_grad},
    /* training mode updates running_mean, running_var, num_batches_tracked */
    [OP_BATCHNORM] = {.name = "batchnorm", .min_in = 6, .max_in = 6, .n_out = 3, .infer = bn_infer, .flops = per_out_4, .thop_macs = bn_thop, .grad = batchnorm_grad, .mutates = 0x38},
    [OP_SILU] = {.name = "silu", .min_in = 1, .max_in = 1, .n_out = 1, .infer = same_infer, .flops = per_out_4, .thop_macs = zero_cost, .grad = activation_grad},
    [OP_RELU] = {.name = "relu", .min_in = 1, .max_in = 1, .n_out = 1, .infer = same_infer, .flops = per_out_1, .thop_macs = zero_cost, .grad = activation_grad},
    [OP_LEAKY_RELU] = {.name = "leaky_relu", .min_in = 1, .max_in = 1, .n_out = 1, .infer = same_infer, .flops = per_out_1, .thop_macs = zero_cost, .grad = activation_grad},
    [OP_HARDSWISH] = {.name = "hardswish", .min_in = 1, .max_in = 1, .n_out = 1, .infer = same_infer, .flops = per_out_4, .thop_macs = zero_cost, .grad = activation_grad},
    [OP_GELU] = {.name = "gelu", .min_in = 1, .max_in = 1, .n_out = 1, .infer = same_infer, .flops = per_out_4, .thop_macs = zero_cost, .grad = activation_grad},
    [OP_SIGMOID] = {.name = "sigmoid", .min_in = 1, .max_in = 1, .n_out = 1, .infer = same_infer, .flops = per_out_4, .thop_macs = zero_cost, .grad = activation_grad},
    [OP_ADD] = {.name = "add", .min_in = 2, .max_in = 2, .n_out = 1, .infer = same_infer, .flops = per_out_1, .thop_macs = zero_cost, .grad = add_grad},
    [OP_CHANNEL_SCALE] = {.name = "channel_scale", .min_in = 2, .max_in = 2, .n_out = 1, .infer = chscale_infer, .flops = per_out_1, .thop_macs = zero_cost, .grad = channel_scale_grad},
    [OP_CONCAT] = {.name = "concat", .min_in = 1, .max_in = IR_MAX_SPLIT, .n_out = 1, .infer = concat_infer, .flops = zero_cost, .thop_macs = zero_cost, .grad = concat_grad},
    [OP_SPLIT] = {.name = "split", .min_in = 1, .max_in = 1, .n_out = -1, .infer = split_infer, .flops = zero_cost, .thop_macs = zero_cost, .grad = split_grad},
    [OP_RESHAPE] = {.name = "reshape", .min_in = 1, .max_in = 1, .n_out = 1, .infer = reshape_infer, .flops = zero_cost, .thop_macs = zero_cost, .grad = reshape_grad},
    [OP_RESIZE_NEAREST] = {.name = "resize_nearest", .min_in = 1, .max_in = 1, .n_out = 1, .infer = resize_infer, .flops = zero_cost, .thop_macs = resize_thop, .grad = resize_nearest_grad},
    [OP_MAXPOOL2D] = {.name = "maxpool2d", .min_in = 1, .max_in = 1, .n_out = 1, .infer = pool_infer, .flops = pool_flops, .thop_macs = zero_cost, .grad = maxpool2d_grad},
    [OP_AVGPOOL2D] = {.name = "avgpool2d", .min_in = 1, .max_in = 1, .n_out = 1, .infer = pool_infer, .flops = pool_flops, .thop_macs = zero_cost, .grad = avgpool2d_grad},
    [OP_ZEROPAD2D] = {.name = "zeropad2d", .min_in = 1, .max_in = 1, .n_out = 1, .infer = zeropad_infer, .flops = zero_cost, .thop_macs = zero_cost, .grad = zeropad2d_grad},
    [OP_ATTENTION] = {.name = "attention", .min_in = 1, .max_in = 1, .n_out = 2, .infer = attention_infer, .flops = attention_flops, .thop_macs = zero_cost, .grad = attention_grad},
    /* eval-mode box decode: never differentiated */
    [OP_DFL] = {.name = "dfl", .min_in = 2, .max_in = 2, .n_out = 1, .infer = dfl_infer, .flops = dfl_flops, .thop_macs = dfl_thop, .grad = NULL},
    [OP_DIST2BBOX] = {.name = "dist2bbox", .min_in = 1, .max_in = 1, .n_out = 1, .infer = dist2bbox_infer, .flops = per_out_4, .thop_macs = zero_cost, .grad = NULL},
    /* identity forward; blocks the gradient (v10Detect's one2one branch) */
    /* bn_apply(x, weight, bias, mean, invstd) -> y: a training BN's output from
     * its saved statistics (pointwise recompute); never differentiated */
    [OP_BN_APPLY] = {.name = "bn_apply", .min_in = 5, .max_in = 5, .n_out = 1, .infer = bn_apply_infer, .flops = per_out_4, .thop_macs = zero_cost, .grad = NULL},
    [OP_DETACH] = {.name = "detach", .min_in = 1, .max_in = 1, .n_out = 1, .infer = same_infer, .flops = zero_cost, .thop_macs = zero_cost, .grad = NULL},
    /* backward ops: their own gradients are never needed */
    [OP_CONV2D_DGRAD] = {.name = "conv2d_dgrad", .min_in = 2, .max_in = 2, .n_out = 1, .infer = restore_shape_infer, .flops = dgrad_flops, .thop_macs = zero_cost, .grad = NULL},
    [OP_CONV2D_WGRAD] = {.name = "conv2d_wgrad", .min_in = 2, .max_in = 2, .n_out = 1, .infer = restore_shape_infer, .flops = wgrad_flops, .thop_macs = zero_cost, .grad = NULL},
    [OP_BIAS_GRAD] = {.name = "bias_grad", .min_in = 1, .max_in = 1, .n_out = 1, .infer = per_channel_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL},
    [OP_BATCHNORM_BWD] = {.name = "batchnorm_bwd", .min_in = 5, .max_in = 5, .n_out = 3, .infer = bn_bwd_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL},
    [OP_ACTIVATION_BWD] = {.name = "activation_bwd", .min_in = 2, .max_in = 2, .n_out = 1, .infer = like_second_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL},
    [OP_CHANNEL_DOT] = {.name = "channel_dot", .min_in = 2, .max_in = 2, .n_out = 1, .infer = per_channel_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL},
    [OP_ZEROS] = {.name = "zeros", .min_in = 0, .max_in = 0, .n_out = 1, .infer = zeros_infer, .flops = zero_cost, .thop_macs = zero_cost, .grad = NULL},
    [OP_RESIZE_NEAREST_BWD] = {.name = "resize_nearest_bwd", .min_in = 1, .max_in = 1, .n_out = 1, .infer = resize_bwd_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL},
    [OP_MAXPOOL2D_BWD] = {.name = "maxpool2d_bwd", .min_in = 2, .max_in = 2, .n_out = 1, .infer = like_second_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL},
    [OP_AVGPOOL2D_BWD] = {.name = "avgpool2d_bwd", .min_in = 1, .max_in = 1, .n_out = 1, .infer = restore_shape_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL},
    [OP_CROP2D] = {.name = "crop2d", .min_in = 1, .max_in = 1, .n_out = 1, .infer = crop_infer, .flops = zero_cost, .thop_macs = zero_cost, .grad = NULL},
    [OP_ATTENTION_BWD] = {.name = "attention_bwd", .min_in = 3, .max_in = 3, .n_out = 1, .infer = attention_bwd_infer, .flops = attention_bwd_flops, .thop_macs = zero_cost, .grad = NULL},
    /* Ultralytics v8DetectionLoss; inputs: levels..., boxes, counts */
    [OP_DETECT_LOSS] = {.name = "detect_loss", .min_in = 3, .max_in = 10, .n_out = 2, .infer = detect_loss_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = detect_loss_grad},
    [OP_DETECT_LOSS_BWD] = {.name = "detect_loss_bwd", .min_in = 4, .max_in = 11, .n_out = -1, .infer = detect_loss_bwd_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL},
    /* optimizer (passes/optimizer.c): clip coefficient over all gradients,
     * then one in-place update per parameter */
    [OP_GRAD_CLIP] = {.name = "grad_clip", .min_in = 1, .max_in = 1 << 16, .n_out = 2, .infer = grad_clip_infer, .flops = in_numel_2, .thop_macs = zero_cost, .grad = NULL},
    [OP_SGD_STEP] = {.name = "sgd_step", .min_in = 6, .max_in = 6, .n_out = 0, .infer = sgd_step_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL, .mutates = 0x5},
    [OP_ADAMW_STEP] = {.name = "adamw_step", .min_in = 8, .max_in = 8, .n_out = 0, .infer = adamw_step_infer, .flops = in0_numel_4, .thop_macs = zero_cost, .grad = NULL, .mutates = 0xD},
};


const OpDef *op_def(OpKind k) { return k >= 0 && k < OP_COUNT ? &REGISTRY[k] : NULL; }
