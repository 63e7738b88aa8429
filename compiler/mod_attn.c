/* compiler/mod_attn.c — attention blocks (Attention, PSABlock, C2PSA, C2fPSA,
 * PSA; YOLO12's AAttn, ABlock, A2C2f) and the YOLOv10 blocks (SCDown,
 * RepVGGDW, CIB, C2fCIB). Attention itself is one IR op (registry). */
#include <math.h>
#include <stdio.h>

#include "modules.h"

#define C1_ (chan(b, io->in[0]))
#define C2_ ((int)arg_int(a, 1, 1))
#define N_ ((int)arg_int(a, 2, 1))

static int conv_noact(Builder *b, const char *attr, int x, int c2, int k, int g) {
    ConvOpt o = conv_opt(k, 1);
    o.g = g;
    o.act = ACTM_OFF;
    return conv_block(b, attr, x, c2, o);
}

/* Attention (v10/11) and AAttn (12) share one shape: qkv 1x1 conv, the
 * attention op, pe depthwise conv on v, proj. Registered: qkv, proj, pe. */
static int attention_core(Builder *b, const char *attr, int x, int heads, int key_dim, int head_dim, int area, int pe_k) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    int dim = chan(b, x);
    int qkv = conv_noact(b, "qkv", x, heads * (2 * key_dim + head_dim), 1, 1);
    OpAttrs at = {.heads = heads, .key_dim = key_dim, .head_dim = head_dim, .area = area, .scale = pow(key_dim, -0.5)};
    int ov[2] = {-1, -1};
    if (qkv >= 0) build_op_n(b, OP_ATTENTION, &qkv, 1, &at, 2, ov);
    reg_next(b, 2);
    int pe = conv_noact(b, "pe", ov[1], dim, pe_k, dim);
    reg_next(b, 1);
    int out = conv_noact(b, "proj", ov[0] < 0 || pe < 0 ? -1 : add(b, ov[0], pe), dim, 1, 1);
    exit_opt(b, attr);
    return out;
}

static int attention(Builder *b, const char *attr, int x, int heads, double attn_ratio) {
    int dim = chan(b, x);
    if (heads < 1) return build_fail(b, "attention needs at least one head (num_heads = channels // 64; %d channels)", dim), -1;
    int head_dim = dim / heads;
    return attention_core(b, attr, x, heads, (int)(head_dim * attn_ratio), head_dim, 1, 3);
}

/* ffn / mlp: Sequential(Conv(c, h, 1), Conv(h, c, 1, act=False)) */
static int ffn(Builder *b, const char *attr, int x, int hidden) {
    if (x < 0 || !mod_enter(b, attr)) return -1;
    int c = chan(b, x);
    int y = conv_block(b, "0", x, hidden, conv_opt(1, 1));
    y = conv_noact(b, "1", y, c, 1, 1);
    mod_exit(b);
    return y;
}

int psa_block(Builder *b, const char *attr, int x, double attn_ratio, int heads, bool shortcut) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    int c = chan(b, x);
    int y = attention(b, "attn", x, heads, attn_ratio);
    if (shortcut) y = add(b, x, y);
    int z = ffn(b, "ffn", y, 2 * c);
    if (shortcut) z = add(b, y, z);
    exit_opt(b, attr);
    return z;
}

static bool need_same_channels(Builder *b, int c1, int c2) {
    if (c1 != c2) return build_fail(b, "needs input channels == output channels (%d != %d)", c1, c2);
    return true;
}

bool row_c2psa(Builder *b, const RowArgs *a, RowIO *io) {
    if (!need_same_channels(b, C1_, C2_)) return false;
    /* registered: cv1, cv2, m; a, b = split(cv1(x)); out = cv2(cat(a, m(b))) */
    int c = (int)(C1_ * arg_num(a, 3, 0.5)), parts[2];
    if (!split2(b, conv_block(b, "cv1", io->in[0], 2 * c, conv_opt(1, 1)), c, c, parts)) return false;
    reg_next(b, 2);
    if (mod_enter(b, "m")) {
        for (int i = 0; i < N_; i++) {
            char name[16];
            snprintf(name, sizeof name, "%d", i);
            parts[1] = psa_block(b, name, parts[1], 0.5, c / 64, true);
        }
        mod_exit(b);
    }
    reg_next(b, 1);
    return row_out(io, conv_block(b, "cv2", concat(b, parts, 2), C1_, conv_opt(1, 1)));
}

bool row_c2fpsa(Builder *b, const RowArgs *a, RowIO *io) {
    if (!need_same_channels(b, C1_, C2_)) return false;
    return row_out(io, c2f(b, NULL, io->in[0], C2_, N_, false, 1, arg_num(a, 3, 0.5), C2F_PSA, false));
}

bool row_psa(Builder *b, const RowArgs *a, RowIO *io) {
    if (!need_same_channels(b, C1_, C2_)) return false;
    /* registered: cv1, cv2, attn, ffn */
    int c = (int)(C1_ * arg_num(a, 2, 0.5)), parts[2];
    if (!split2(b, conv_block(b, "cv1", io->in[0], 2 * c, conv_opt(1, 1)), c, c, parts)) return false;
    reg_next(b, 2);
    int y = add(b, parts[1], attention(b, "attn", parts[1], c / 64, 0.5));
    parts[1] = add(b, y, ffn(b, "ffn", y, 2 * c));
    reg_next(b, 1);
    return row_out(io, conv_block(b, "cv2", concat(b, parts, 2), C1_, conv_opt(1, 1)));
}

/* ---- YOLOv10 ---- */

bool row_scdown(Builder *b, const RowArgs *a, RowIO *io) {
    int k[2];
    arg_pair(a, 2, 1, k);
    int y = conv_block(b, "cv1", io->in[0], C2_, conv_opt(1, 1));
    ConvOpt o = conv_opt(k[0], (int)arg_int(a, 3, 1));
    o.k[1] = k[1];
    o.g = C2_;
    o.act = ACTM_OFF;
    return row_out(io, conv_block(b, "cv2", y, C2_, o));
}

int rep_vgg_dw(Builder *b, const char *attr, int x) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    int ed = chan(b, x);
    /* registered: conv (7x7 dw), conv1 (3x3 dw), act (its own SiLU) */
    int y7 = conv_noact(b, "conv", x, ed, 7, ed);
    int y3 = conv_noact(b, "conv1", x, ed, 3, ed);
    int y = add(b, y7, y3);
    y = activation(b, y, ACTM_OWN_SILU);
    exit_opt(b, attr);
    return y;
}

int cib(Builder *b, const char *attr, int x, int c2, bool shortcut, double e, bool lk) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    int c1 = chan(b, x), c_ = (int)(c2 * e);
    int y = -1;
    if (mod_enter(b, "cv1")) {
        ConvOpt dw = conv_opt(3, 1);
        dw.g = c1;
        y = conv_block(b, "0", x, c1, dw);
        y = conv_block(b, "1", y, 2 * c_, conv_opt(1, 1));
        if (lk) {
            y = rep_vgg_dw(b, "2", y);
        } else {
            dw.g = 2 * c_;
            y = conv_block(b, "2", y, 2 * c_, dw);
        }
        y = conv_block(b, "3", y, c2, conv_opt(1, 1));
        dw.g = c2;
        y = conv_block(b, "4", y, c2, dw);
        mod_exit(b);
    }
    if (shortcut && c1 == c2) y = add(b, x, y);
    exit_opt(b, attr);
    return y;
}

bool row_c2fcib(Builder *b, const RowArgs *a, RowIO *io) {
    /* C2fCIB(c1, c2, n, shortcut=False, lk=False, g=1, e=0.5) */
    return row_out(io, c2f(b, NULL, io->in[0], C2_, N_, arg_bool(a, 3, false), (int)arg_int(a, 5, 1), arg_num(a, 6, 0.5), C2F_CIB,
                           arg_bool(a, 4, false)));
}

/* ---- YOLO12 area attention ---- */

int abl_block(Builder *b, const char *attr, int x, int heads, double mlp_ratio, int area) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    int dim = chan(b, x);
    if (heads < 1) return build_fail(b, "ABlock needs at least one head (%d channels)", dim), -1;
    int head_dim = dim / heads;
    /* ABlock._init_weights: every Conv2d inside gets trunc_normal(std=0.02) */
    bool outer = b->trunc_normal_convs;
    b->trunc_normal_convs = true;
    int y = add(b, x, attention_core(b, "attn", x, heads, head_dim, head_dim, area, 7));
    y = add(b, y, ffn(b, "mlp", y, (int)(dim * mlp_ratio)));
    b->trunc_normal_convs = outer;
    exit_opt(b, attr);
    return y;
}

bool row_a2c2f(Builder *b, const RowArgs *a, RowIO *io) {
    /* A2C2f(c1, c2, n, a2=True, area=1, residual=False, mlp_ratio=2.0, e=0.5, g=1, shortcut=True) */
    bool a2 = arg_bool(a, 3, true), residual = arg_bool(a, 5, false), shortcut = arg_bool(a, 9, true);
    int area = (int)arg_int(a, 4, 1), g = (int)arg_int(a, 8, 1), n = N_, x = io->in[0];
    double mlp_ratio = arg_num(a, 6, 2.0);
    int c_ = (int)(C2_ * arg_num(a, 7, 0.5));
    if (c_ % 32) return build_fail(b, "hidden channels int(c2*e) = %d must be a multiple of 32", c_);
    if (n + 1 > IR_MAX_SPLIT) return build_fail(b, "%d repeats: at most %d are supported (its concat joins repeats + 1 tensors)", n, IR_MAX_SPLIT - 1);
    /* registered: cv1, cv2, gamma (own parameter, listed first), m */
    int gamma = a2 && residual ? build_param(b, "gamma", shape1(C2_)) : -1;
    build_init(b, gamma, INIT_CONST, 0.01);
    int ys[IR_MAX_SPLIT], ny = 1;
    ys[0] = conv_block(b, "cv1", x, c_, conv_opt(1, 1));
    reg_next(b, 2);
    if (mod_enter(b, "m")) {
        for (int i = 0; i < n; i++, ny++) {
            char name[16];
            snprintf(name, sizeof name, "%d", i);
            if (!a2) {
                ys[ny] = c3(b, name, ys[ny - 1], c_, 2, shortcut, g, 0.5, C3_K, 3);
            } else if (mod_enter(b, name)) {
                int y = abl_block(b, "0", ys[ny - 1], c_ / 32, mlp_ratio, area);
                ys[ny] = abl_block(b, "1", y, c_ / 32, mlp_ratio, area);
                mod_exit(b);
            }
        }
        mod_exit(b);
    }
    reg_next(b, 1);
    int y = conv_block(b, "cv2", concat(b, ys, ny), C2_, conv_opt(1, 1));
    if (gamma >= 0) {
        int in[2] = {y, gamma};
        y = add(b, x, build_op(b, OP_CHANNEL_SCALE, in, 2, NULL));
    }
    return row_out(io, y);
}
