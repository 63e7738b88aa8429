/* compiler/mod_v9.c — YOLOv9 blocks: RepNCSPELAN4, ELAN1, AConv, ADown,
 * SPPELAN, CBLinear, CBFuse (semantics §6.6). */
#include <stdio.h>

#include "modules.h"

#define C1_ (chan(b, io->in[0]))
#define C2_ ((int)arg_int(a, 1, 1))

static int conv_k(Builder *b, const char *attr, int x, int c2, int k, int s, int p) {
    ConvOpt o = conv_opt(k, s);
    if (p >= 0) {
        o.auto_pad = false;
        o.p[0] = o.p[1] = p;
    }
    return conv_block(b, attr, x, c2, o);
}

/* RepNCSPELAN4 and ELAN1 share the forward: y = chunk2(cv1(x)); append
 * cv2(y[-1]), cv3(y[-1]); out = cv4(cat(y)). `n` < 0 selects ELAN1's plain
 * 3x3 convs instead of RepCSP + Conv Sequentials. */
static bool elan(Builder *b, const RowArgs *a, RowIO *io, int n) {
    int hid = (int)arg_int(a, 2, 1), c4 = (int)arg_int(a, 3, 1), ys[4];
    if (!chunk2(b, conv_k(b, "cv1", io->in[0], hid, 1, 1, -1), ys)) return false;
    const char *names[2] = {"cv2", "cv3"};
    for (int i = 0; i < 2; i++) {
        int last = ys[1 + i];
        if (n < 0) {
            ys[2 + i] = conv_k(b, names[i], last, c4, 3, 1, -1);
        } else if (mod_enter(b, names[i])) {
            int y = c3(b, "0", last, c4, n, true, 1, 0.5, C3_REP, 3);
            ys[2 + i] = conv_k(b, "1", y, c4, 3, 1, -1);
            mod_exit(b);
        } else {
            return false;
        }
    }
    return row_out(io, conv_k(b, "cv4", concat(b, ys, 4), C2_, 1, 1, -1));
}

bool row_repncspelan4(Builder *b, const RowArgs *a, RowIO *io) { return elan(b, a, io, (int)arg_int(a, 4, 1)); }
bool row_elan1(Builder *b, const RowArgs *a, RowIO *io) { return elan(b, a, io, -1); }

/* F.avg_pool2d(x, 2, 1, 0, False, True): a functional call, not a module */
static int avgpool2_s1(Builder *b, int x) {
    OpAttrs at = {.kernel = {2, 2}, .stride = {1, 1}, .dilation = {1, 1}};
    return build_op(b, OP_AVGPOOL2D, &x, 1, &at);
}

bool row_aconv(Builder *b, const RowArgs *a, RowIO *io) {
    return row_out(io, conv_k(b, "cv1", avgpool2_s1(b, io->in[0]), C2_, 3, 2, 1));
}

bool row_adown(Builder *b, const RowArgs *a, RowIO *io) {
    int c = C2_ / 2, parts[2];
    if (!chunk2(b, avgpool2_s1(b, io->in[0]), parts)) return false;
    int out[2];
    out[0] = conv_k(b, "cv1", parts[0], c, 3, 2, 1);
    OpAttrs mp = {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1, 1, 1}, .dilation = {1, 1}};
    out[1] = conv_k(b, "cv2", build_op(b, OP_MAXPOOL2D, &parts[1], 1, &mp), c, 1, 1, 0);
    return row_out(io, concat(b, out, 2));
}

bool row_sppelan(Builder *b, const RowArgs *a, RowIO *io) {
    int hid = (int)arg_int(a, 2, 1), k = (int)arg_int(a, 3, 5), ys[4];
    ys[0] = conv_k(b, "cv1", io->in[0], hid, 1, 1, -1);
    /* cv2..cv4: three MaxPool2d modules, chained */
    for (int i = 1; i < 4; i++) {
        mod_count(b);
        OpAttrs at = {.kernel = {k, k}, .stride = {1, 1}, .pad = {k / 2, k / 2, k / 2, k / 2}, .dilation = {1, 1}};
        ys[i] = build_op(b, OP_MAXPOOL2D, &ys[i - 1], 1, &at);
    }
    return row_out(io, conv_k(b, "cv5", concat(b, ys, 4), C2_, 1, 1, -1));
}

bool row_cblinear(Builder *b, const RowArgs *a, RowIO *io) {
    const Value *c2s = &a->v[1];
    int k[2], p[2], s = (int)arg_int(a, 3, 1), g = (int)arg_int(a, 5, 1), total = 0;
    arg_pair(a, 2, 1, k);
    if (arg_none(a, 4)) {
        p[0] = k[0] / 2;
        p[1] = k[1] / 2;
    } else {
        arg_pair(a, 4, 0, p);
    }
    OpAttrs at = {.axis = 1, .nsplit = c2s->n};
    for (int i = 0; i < c2s->n; i++) {
        if (c2s->items[i].i < 1) return build_fail(b, "CBLinear output sizes must be positive");
        at.split[i] = (int)c2s->items[i].i;
        total += at.split[i];
    }
    int y = conv2d_leaf(b, "conv", io->in[0], total, k[0], k[1], s, p[0], p[1], g, 1, true);
    if (y < 0) return false;
    if (!build_op_n(b, OP_SPLIT, &y, 1, &at, c2s->n, io->out)) return false;
    io->n_out = c2s->n;
    return true;
}

bool row_cbfuse(Builder *b, const RowArgs *a, RowIO *io) {
    const Value *idx = &a->v[0];
    int m = io->n_in - 1, t = io->in[m];
    if (idx->n < m) return build_fail(b, "idx lists %d entries for %d CBLinear inputs", idx->n, m);
    const Shape *ts = &b->g->tensors[t].shape;
    int sum = -1;
    for (int i = 0; i < m; i++) {
        int64_t j = idx->items[i].i;
        if (j < 0 || j >= io->list_n[i]) return build_fail(b, "idx[%d] = %lld, but input %d has %d chunks", i, (long long)j, i, io->list_n[i]);
        /* F.interpolate(size=target, mode='nearest'): functional, thop counts 0 */
        OpAttrs at = {.out_hw = {(int)ts->d[2], (int)ts->d[3]}};
        int r = build_op(b, OP_RESIZE_NEAREST, &io->lists[i][j], 1, &at);
        if (r < 0) return false;
        b->g->ops[b->g->n_ops - 1].functional = true;
        sum = sum < 0 ? r : add(b, sum, r);
    }
    return row_out(io, sum < 0 ? t : add(b, sum, t));
}
