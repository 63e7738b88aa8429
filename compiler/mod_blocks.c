/* compiler/mod_blocks.c — Ultralytics block.py CSP family: Bottleneck, C1, C2,
 * C2f (and its C3k2/C2fCIB/C2fPSA variants), C3 (C3x, C3Ghost, C3k, RepCSP),
 * BottleneckCSP, SPP, SPPF, GhostBottleneck. Registration indices (reg_next)
 * give parameters PyTorch's state_dict order where forward order differs. */
#include <stdio.h>

#include "modules.h"

static int hidden(double c, double e) { return (int)(c * e); }

static int conv1x1(Builder *b, const char *attr, int x, int c2) { return conv_block(b, attr, x, c2, conv_opt(1, 1)); }

int bottleneck(Builder *b, const char *attr, int x, int c2, bool shortcut, int g, const int k1[2], const int k2[2], double e, bool rep) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    int c1 = chan(b, x), c_ = hidden(c2, e);
    int y;
    if (rep) {
        y = repconv(b, "cv1", x, c_, k1[0], 1, 1, 1);
    } else {
        ConvOpt o = conv_opt(1, 1);
        o.k[0] = k1[0];
        o.k[1] = k1[1];
        y = conv_block(b, "cv1", x, c_, o);
    }
    ConvOpt o2 = conv_opt(1, 1);
    o2.k[0] = k2[0];
    o2.k[1] = k2[1];
    o2.g = g;
    y = conv_block(b, "cv2", y, c2, o2);
    if (shortcut && c1 == c2) y = add(b, x, y);
    exit_opt(b, attr);
    return y;
}

int ghost_bottleneck(Builder *b, const char *attr, int x, int c2, int k, int s) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    int c1 = chan(b, x), c_ = c2 / 2;
    int y = -1, sc = x;
    if (mod_enter(b, "conv")) {
        y = ghostconv(b, "0", x, c_, 1, 1, 1, ACTM_DEFAULT);
        if (s == 2) y = dwconv(b, "1", y, c_, k, s, 1, ACTM_OFF);
        else mod_enter_idx(b, 1), mod_exit(b); /* nn.Identity */
        y = ghostconv(b, "2", y, c2, 1, 1, 1, ACTM_OFF);
        mod_exit(b);
    }
    if (s == 2) {
        if (mod_enter(b, "shortcut")) {
            sc = dwconv(b, "0", x, c1, k, s, 1, ACTM_OFF);
            ConvOpt o = conv_opt(1, 1);
            o.act = ACTM_OFF;
            sc = conv_block(b, "1", sc, c2, o);
            mod_exit(b);
        }
    } else {
        mod_enter(b, "shortcut"), mod_exit(b); /* nn.Identity */
    }
    int out = add(b, y, sc);
    exit_opt(b, attr);
    return out;
}

/* One inner block of a C3-style Sequential m. */
static int c3_inner(Builder *b, const char *name, int x, int c_, bool shortcut, int g, int variant, int k) {
    static const int k11[2] = {1, 1}, k33[2] = {3, 3}, k13[2] = {1, 3}, k31[2] = {3, 1};
    int kk[2] = {k, k};
    switch (variant) {
    case C3_X: return bottleneck(b, name, x, c_, shortcut, g, k13, k31, 1.0, false);
    case C3_GHOST: return ghost_bottleneck(b, name, x, c_, 3, 1);
    case C3_K: return bottleneck(b, name, x, c_, shortcut, g, kk, kk, 1.0, false);
    case C3_REP: return bottleneck(b, name, x, c_, shortcut, g, k33, k33, 1.0, true);
    default: return bottleneck(b, name, x, c_, shortcut, g, k11, k33, 1.0, false);
    }
}

int c3(Builder *b, const char *attr, int x, int c2, int n, bool shortcut, int g, double e, int variant, int k) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    /* registered: cv1, cv2, cv3, m */
    int c_ = hidden(c2, e);
    int y1 = conv1x1(b, "cv1", x, c_);
    int y2 = conv1x1(b, "cv2", x, c_);
    reg_next(b, 3);
    if (mod_enter(b, "m")) {
        char name[16];
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "%d", i);
            y1 = c3_inner(b, name, y1, c_, shortcut, g, variant, k);
        }
        mod_exit(b);
    }
    int cat[2] = {y1, y2};
    reg_next(b, 2);
    int out = conv1x1(b, "cv3", concat(b, cat, 2), c2);
    exit_opt(b, attr);
    return out;
}

/* One inner block of a C2f-style ModuleList m; c is the split width. */
static int c2f_inner(Builder *b, const char *name, int x, int c, bool shortcut, int g, int variant, bool flag) {
    static const int k33[2] = {3, 3};
    switch (variant) {
    case C2F_C3K2:
        /* C3k2: C3k(c, c, 2, shortcut, g), or a Bottleneck with its defaults e=0.5 */
        return flag ? c3(b, name, x, c, 2, shortcut, g, 0.5, C3_K, 3) : bottleneck(b, name, x, c, shortcut, g, k33, k33, 0.5, false);
    case C2F_CIB: return cib(b, name, x, c, shortcut, 1.0, flag);
    case C2F_PSA: return psa_block(b, name, x, 0.5, c / 64, true);
    default: return bottleneck(b, name, x, c, shortcut, g, k33, k33, 1.0, false);
    }
}

int c2f(Builder *b, const char *attr, int x, int c2, int n, bool shortcut, int g, double e, int variant, bool flag) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    /* registered: cv1, cv2, m; forward: cv1, chunk, m..., cv2(cat) */
    int c = hidden(c2, e);
    int ys[IR_MAX_SPLIT], ny = 0;
    /* the final concat joins n + 2 tensors */
    if (n + 2 > IR_MAX_SPLIT) return build_fail(b, "%d repeats: at most %d are supported (its concat joins repeats + 2 tensors)", n, IR_MAX_SPLIT - 2);
    int y = conv1x1(b, "cv1", x, 2 * c);
    if (!chunk2(b, y, ys)) return -1;
    ny = 2;
    reg_next(b, 2);
    if (mod_enter(b, "m")) {
        char name[16];
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "%d", i);
            ys[ny] = c2f_inner(b, name, ys[ny - 1], c, shortcut, g, variant, flag);
            ny++;
        }
        mod_exit(b);
    }
    reg_next(b, 1);
    int out = conv1x1(b, "cv2", concat(b, ys, ny), c2);
    exit_opt(b, attr);
    return out;
}

/* ---- rows ---- */

#define C1_ (chan(b, io->in[0]))
#define C2_ ((int)arg_int(a, 1, 1))
#define N_ ((int)arg_int(a, 2, 1))

bool row_bottleneck(Builder *b, const RowArgs *a, RowIO *io) {
    int k1[2] = {3, 3}, k2[2] = {3, 3};
    if (a->n > 4) {
        RowArgs ks = {a->v[4].items, 2};
        arg_pair(&ks, 0, 3, k1);
        arg_pair(&ks, 1, 3, k2);
    }
    return row_out(io, bottleneck(b, NULL, io->in[0], C2_, arg_bool(a, 2, true), (int)arg_int(a, 3, 1), k1, k2, arg_num(a, 5, 0.5), false));
}

bool row_ghost_bottleneck(Builder *b, const RowArgs *a, RowIO *io) {
    return row_out(io, ghost_bottleneck(b, NULL, io->in[0], C2_, (int)arg_int(a, 2, 3), (int)arg_int(a, 3, 1)));
}

bool row_c1(Builder *b, const RowArgs *a, RowIO *io) {
    /* registered: cv1, m; out = m(y) + y */
    int y = conv1x1(b, "cv1", io->in[0], C2_), z = y;
    if (mod_enter(b, "m")) {
        for (int i = 0; i < N_; i++) {
            char name[16];
            snprintf(name, sizeof name, "%d", i);
            z = conv_block(b, name, z, C2_, conv_opt(3, 1));
        }
        mod_exit(b);
    }
    return row_out(io, add(b, z, y));
}

bool row_c2(Builder *b, const RowArgs *a, RowIO *io) {
    static const int k33[2] = {3, 3};
    /* registered: cv1, cv2, m; out = cv2(cat(m(a), b)) */
    int c = hidden(C2_, arg_num(a, 5, 0.5)), parts[2];
    if (!chunk2(b, conv1x1(b, "cv1", io->in[0], 2 * c), parts)) return false;
    reg_next(b, 2);
    if (mod_enter(b, "m")) {
        for (int i = 0; i < N_; i++) {
            char name[16];
            snprintf(name, sizeof name, "%d", i);
            parts[0] = bottleneck(b, name, parts[0], c, arg_bool(a, 3, true), (int)arg_int(a, 4, 1), k33, k33, 1.0, false);
        }
        mod_exit(b);
    }
    reg_next(b, 1);
    return row_out(io, conv1x1(b, "cv2", concat(b, parts, 2), C2_));
}

bool row_c2f(Builder *b, const RowArgs *a, RowIO *io) {
    return row_out(io, c2f(b, NULL, io->in[0], C2_, N_, arg_bool(a, 3, false), (int)arg_int(a, 4, 1), arg_num(a, 5, 0.5), C2F_PLAIN, false));
}

bool row_c3k2(Builder *b, const RowArgs *a, RowIO *io) {
    /* C3k2(c1, c2, n, c3k=False, e=0.5, g=1, shortcut=True) */
    return row_out(io, c2f(b, NULL, io->in[0], C2_, N_, arg_bool(a, 6, true), (int)arg_int(a, 5, 1), arg_num(a, 4, 0.5), C2F_C3K2,
                           arg_bool(a, 3, false)));
}

static bool row_c3_variant(Builder *b, const RowArgs *a, RowIO *io, int variant) {
    return row_out(io, c3(b, NULL, io->in[0], C2_, N_, arg_bool(a, 3, true), (int)arg_int(a, 4, 1), arg_num(a, 5, 0.5), variant, 3));
}
bool row_c3(Builder *b, const RowArgs *a, RowIO *io) { return row_c3_variant(b, a, io, C3_PLAIN); }
bool row_c3x(Builder *b, const RowArgs *a, RowIO *io) { return row_c3_variant(b, a, io, C3_X); }
bool row_c3ghost(Builder *b, const RowArgs *a, RowIO *io) { return row_c3_variant(b, a, io, C3_GHOST); }

bool row_bottleneck_csp(Builder *b, const RowArgs *a, RowIO *io) {
    static const int k33[2] = {3, 3};
    /* registered: cv1, cv2, cv3, cv4, bn, act, m;
     * out = cv4(act(bn(cat(cv3(m(cv1(x))), cv2(x))))) */
    int x = io->in[0], c_ = hidden(C2_, arg_num(a, 5, 0.5));
    int y1 = conv1x1(b, "cv1", x, c_);
    reg_next(b, 6);
    if (mod_enter(b, "m")) {
        for (int i = 0; i < N_; i++) {
            char name[16];
            snprintf(name, sizeof name, "%d", i);
            y1 = bottleneck(b, name, y1, c_, arg_bool(a, 3, true), (int)arg_int(a, 4, 1), k33, k33, 1.0, false);
        }
        mod_exit(b);
    }
    reg_next(b, 2);
    y1 = conv2d_leaf(b, "cv3", y1, c_, 1, 1, 1, 0, 0, 1, 1, false);
    reg_next(b, 1);
    int cat[2] = {y1, conv2d_leaf(b, "cv2", x, c_, 1, 1, 1, 0, 0, 1, 1, false)};
    reg_next(b, 4);
    int y = batchnorm_leaf(b, "bn", concat(b, cat, 2));
    y = activation(b, y, ACTM_OWN_SILU);
    reg_next(b, 3);
    return row_out(io, conv1x1(b, "cv4", y, C2_));
}

static int maxpool_same(Builder *b, int x, int k) {
    OpAttrs at = {.kernel = {k, k}, .stride = {1, 1}, .pad = {k / 2, k / 2, k / 2, k / 2}, .dilation = {1, 1}};
    return build_op(b, OP_MAXPOOL2D, &x, 1, &at);
}

bool row_spp(Builder *b, const RowArgs *a, RowIO *io) {
    int ks[16] = {5, 9, 13}, nk = 3;
    if (a->n > 2) {
        nk = a->v[2].n;
        for (int i = 0; i < nk; i++) ks[i] = (int)a->v[2].items[i].i;
    }
    /* registered: cv1, cv2, m (ModuleList of pools); pools run in parallel */
    int y = conv1x1(b, "cv1", io->in[0], C1_ / 2), cat[17] = {y};
    reg_next(b, 2);
    if (mod_enter(b, "m")) {
        for (int i = 0; i < nk; i++) {
            mod_count(b);
            cat[1 + i] = maxpool_same(b, y, ks[i]);
        }
        mod_exit(b);
    }
    reg_next(b, 1);
    return row_out(io, conv1x1(b, "cv2", concat(b, cat, nk + 1), C2_));
}

bool row_sppf(Builder *b, const RowArgs *a, RowIO *io) {
    int k = (int)arg_int(a, 2, 5);
    /* registered: cv1, cv2, m (one MaxPool2d applied three times in a chain) */
    int cat[4];
    cat[0] = conv1x1(b, "cv1", io->in[0], C1_ / 2);
    for (int i = 1; i < 4; i++) cat[i] = maxpool_same(b, cat[i - 1], k);
    int out = conv1x1(b, "cv2", concat(b, cat, 4), C2_);
    mod_count(b); /* m */
    return row_out(io, out);
}
