/* compiler/mod_conv.c — Ultralytics conv.py modules (Conv, DWConv, GhostConv,
 * RepConv, Concat) and the torch.nn layers a YAML row may name (Upsample,
 * MaxPool2d, ZeroPad2d, Identity, BatchNorm2d, ConvTranspose2d). */
#include <math.h>
#include <string.h>

#include "modules.h"

static int gcd(int a, int b) {
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int dwconv(Builder *b, const char *attr, int x, int c2, int k, int s, int d, ActMode act) {
    ConvOpt o = conv_opt(k, s);
    o.g = gcd(chan(b, x), c2);
    o.d = d;
    o.act = act;
    return conv_block(b, attr, x, c2, o);
}

int ghostconv(Builder *b, const char *attr, int x, int c2, int k, int s, int g, ActMode act) {
    if (!enter_opt(b, attr)) return -1;
    int c_ = c2 / 2;
    ConvOpt o1 = conv_opt(k, s), o2 = conv_opt(5, 1);
    o1.g = g;
    o1.act = o2.act = act;
    o2.g = c_;
    int y = conv_block(b, "cv1", x, c_, o1);
    int cat[2] = {y, conv_block(b, "cv2", y, c_, o2)};
    int out = concat(b, cat, 2);
    exit_opt(b, attr);
    return out;
}

int repconv(Builder *b, const char *attr, int x, int c2, int k, int s, int p, int g) {
    if (!enter_opt(b, attr)) return -1;
    /* registration order: act, (bn: never built from YAMLs), conv1, conv2 */
    ConvOpt o1 = conv_opt(k, s), o2 = conv_opt(1, s);
    o1.auto_pad = o2.auto_pad = false;
    o1.p[0] = o1.p[1] = p;
    o2.p[0] = o2.p[1] = p - k / 2;
    o1.g = o2.g = g;
    o1.act = o2.act = ACTM_OFF;
    int y1 = conv_block(b, "conv1", x, c2, o1);
    int y2 = conv_block(b, "conv2", x, c2, o2);
    int out = activation(b, add(b, y1, y2), ACTM_REPCONV);
    exit_opt(b, attr);
    return out;
}

/* ---- rows ---- */

bool row_conv(Builder *b, const RowArgs *a, RowIO *io) {
    ConvOpt o = conv_opt(1, (int)arg_int(a, 3, 1));
    arg_pair(a, 2, 1, o.k);
    if (!arg_none(a, 4)) {
        o.auto_pad = false;
        arg_pair(a, 4, 0, o.p);
    }
    o.g = (int)arg_int(a, 5, 1);
    o.d = (int)arg_int(a, 6, 1);
    /* Ultralytics tests `act is True`: any other value means no activation */
    if (a->n > 7 && !(a->v[7].kind == V_BOOL && a->v[7].b)) o.act = ACTM_OFF;
    return row_out(io, conv_block(b, NULL, io->in[0], (int)arg_int(a, 1, 1), o));
}

bool row_dwconv(Builder *b, const RowArgs *a, RowIO *io) {
    int k[2];
    arg_pair(a, 2, 1, k);
    if (k[0] != k[1]) return build_fail(b, "DWConv needs a square kernel");
    ActMode act = a->n > 5 && !(a->v[5].kind == V_BOOL && a->v[5].b) ? ACTM_OFF : ACTM_DEFAULT;
    return row_out(io, dwconv(b, NULL, io->in[0], (int)arg_int(a, 1, 1), k[0], (int)arg_int(a, 3, 1), (int)arg_int(a, 4, 1), act));
}

bool row_ghostconv(Builder *b, const RowArgs *a, RowIO *io) {
    int k[2];
    arg_pair(a, 2, 1, k);
    if (k[0] != k[1]) return build_fail(b, "GhostConv needs a square kernel");
    ActMode act = a->n > 5 && !(a->v[5].kind == V_BOOL && a->v[5].b) ? ACTM_OFF : ACTM_DEFAULT;
    return row_out(io, ghostconv(b, NULL, io->in[0], (int)arg_int(a, 1, 1), k[0], (int)arg_int(a, 3, 1), (int)arg_int(a, 4, 1), act));
}

bool row_conv_transpose(Builder *b, const RowArgs *a, RowIO *io) {
    int x = io->in[0], c1 = chan(b, x), c2 = (int)arg_int(a, 1, 1), k[2];
    arg_pair(a, 2, 1, k);
    int s = (int)arg_int(a, 3, 1), p = (int)arg_int(a, 4, 0);
    int in[3] = {x, build_param(b, "weight", shape4(c1, c2, k[0], k[1])), -1};
    in[2] = build_param(b, "bias", shape1(c2));
    /* PyTorch's fan_in for a transposed conv weight [Ci, Co/g, k, k] is dim 1 x k x k */
    build_init(b, in[1], INIT_KAIMING_UNIFORM, 0);
    build_init(b, in[2], INIT_BIAS_UNIFORM, (double)c2 * k[0] * k[1]);
    OpAttrs at = {.stride = {s, s}, .pad = {p, p, p, p}, .dilation = {1, 1}, .groups = 1};
    in[1] = build_weight_layout(b, in[1]);
    return row_out(io, build_op(b, OP_CONV_TRANSPOSE2D, in, 3, &at));
}

bool row_concat(Builder *b, const RowArgs *a, RowIO *io) {
    int64_t dim = arg_int(a, 0, 1);
    if (dim != 1 && dim != -3) return build_fail(b, "only channel concatenation (dimension 1) is supported, got %lld", (long long)dim);
    return row_out(io, concat(b, io->in, io->n_in));
}

bool row_upsample(Builder *b, const RowArgs *a, RowIO *io) {
    int x = io->in[0];
    if (a->n > 2 && strcmp(a->v[2].s, "nearest") != 0) return build_fail(b, "only mode 'nearest' is supported, got '%s'", a->v[2].s);
    const Shape *s = &b->g->tensors[x].shape;
    OpAttrs at = {0};
    if (!arg_none(a, 0)) {
        arg_pair(a, 0, 1, at.out_hw);
    } else {
        if (arg_none(a, 1) || !value_is_number(&a->v[1])) return build_fail(b, "nn.Upsample needs a size or a numeric scale_factor");
        double f = value_number(&a->v[1]);
        if (!(f >= 1 && f <= 64) || f != floor(f)) return build_fail(b, "only integer scale factors 1..64 are supported, got %g", f);
        at.out_hw[0] = (int)(s->d[2] * (int64_t)f);
        at.out_hw[1] = (int)(s->d[3] * (int64_t)f);
    }
    return row_out(io, build_op(b, OP_RESIZE_NEAREST, &x, 1, &at));
}

bool row_maxpool(Builder *b, const RowArgs *a, RowIO *io) {
    OpAttrs at = {0};
    arg_pair(a, 0, 1, at.kernel);
    if (arg_none(a, 1)) memcpy(at.stride, at.kernel, sizeof at.stride);
    else arg_pair(a, 1, 1, at.stride);
    int p[2];
    arg_pair(a, 2, 0, p);
    at.pad[0] = at.pad[1] = p[0];
    at.pad[2] = at.pad[3] = p[1];
    arg_pair(a, 3, 1, at.dilation);
    if (arg_bool(a, 4, false) || arg_bool(a, 5, false)) return build_fail(b, "return_indices and ceil_mode are not supported");
    return row_out(io, build_op(b, OP_MAXPOOL2D, io->in, 1, &at));
}

bool row_zeropad(Builder *b, const RowArgs *a, RowIO *io) {
    OpAttrs at = {0};
    const Value *v = &a->v[0];
    if (v->kind == V_LIST) {
        /* torch order (left, right, top, bottom); the IR keeps (top, bottom, left, right) */
        at.pad[2] = (int)v->items[0].i;
        at.pad[3] = (int)v->items[1].i;
        at.pad[0] = (int)v->items[2].i;
        at.pad[1] = (int)v->items[3].i;
    } else {
        at.pad[0] = at.pad[1] = at.pad[2] = at.pad[3] = (int)arg_int(a, 0, 0);
    }
    return row_out(io, build_op(b, OP_ZEROPAD2D, io->in, 1, &at));
}

bool row_identity(Builder *b, const RowArgs *a, RowIO *io) {
    (void)b;
    (void)a;
    return row_out(io, io->in[0]);
}

bool row_batchnorm(Builder *b, const RowArgs *a, RowIO *io) {
    (void)a;
    return row_out(io, batchnorm_leaf(b, NULL, io->in[0]));
}
