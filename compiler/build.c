/* compiler/build.c — builder mechanics: scopes and names, the layer count,
 * leaf layers and functional layout helpers. */
#include "build.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct StateKey {
    int tensor, len;
    int k[BUILD_MAX_DEPTH + 2];
} StateKey;

bool build_fail(Builder *b, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return diag_error(b->d, b->mark, "row %d (%s): %s", b->row, b->row_module ? b->row_module : "?", msg);
}

static bool push(Builder *b, const char *part) {
    int len = (int)strlen(b->path);
    if (b->depth >= BUILD_MAX_DEPTH || len + (int)strlen(part) + 2 >= (int)sizeof b->path)
        return build_fail(b, "modules nested too deeply");
    int idx = b->pending_reg >= 0 ? b->pending_reg : b->next_child[b->depth];
    b->pending_reg = -1;
    if (idx + 1 > b->next_child[b->depth]) b->next_child[b->depth] = idx + 1;
    b->reg[b->depth] = idx;
    b->path_len[b->depth++] = len;
    b->next_child[b->depth] = 0;
    b->own_state[b->depth] = 0;
    snprintf(b->path + len, sizeof b->path - (size_t)len, "%s%s", len ? "." : "", part);
    b->layers++;
    return true;
}

bool mod_enter(Builder *b, const char *attr) { return push(b, attr); }

void reg_next(Builder *b, int idx) { b->pending_reg = idx; }

bool mod_enter_idx(Builder *b, int idx) {
    char s[16];
    snprintf(s, sizeof s, "%d", idx);
    return push(b, s);
}

void mod_exit(Builder *b) {
    if (b->depth > 0) b->path[b->path_len[--b->depth]] = 0;
}

void mod_count(Builder *b) { b->layers++; }

int build_begin_copy(Builder *b) {
    int saved = b->domain;
    b->domain = ++b->next_domain < BUILD_MAX_DOMAINS ? b->next_domain : BUILD_MAX_DOMAINS - 1;
    return saved;
}

void build_end_copy(Builder *b, int saved) { b->domain = saved; }

static const char *name_of(Builder *b, const char *leaf) {
    return arena_printf(b->a, "%s%s%s", b->path, b->path[0] ? "." : "", leaf);
}

static int state(Builder *b, TensorKind kind, const char *leaf, Shape s, DType dt) {
    const char *name = name_of(b, leaf);
    if (!name) return build_fail(b, "out of memory"), -1;
    int t = graph_add_state(b->g, kind, name, s, dt);
    if (t < 0) return build_fail(b, "%s: %s", name, b->g->err), -1;
    if (!arena_grow(b->a, (void **)&b->keys, b->n_keys, &b->cap_keys, sizeof(StateKey))) return build_fail(b, "out of memory"), -1;
    /* PyTorch lists a module's own parameters, then its own buffers, then
     * its children: own tensors sort before any child index */
    StateKey *k = &b->keys[b->n_keys++];
    k->tensor = t;
    memcpy(k->k, b->reg, sizeof(int) * (size_t)b->depth);
    k->k[b->depth] = kind == TK_PARAM ? -2 : -1;
    k->k[b->depth + 1] = b->own_state[b->depth]++;
    k->len = b->depth + 2;
    return t;
}

static int key_cmp(const void *pa, const void *pb) {
    const StateKey *a = pa, *b = pb;
    for (int i = 0; i < a->len && i < b->len; i++)
        if (a->k[i] != b->k[i]) return a->k[i] < b->k[i] ? -1 : 1;
    return a->len - b->len;
}

bool build_finish_state(Builder *b) {
    if (b->n_keys) qsort(b->keys, (size_t)b->n_keys, sizeof(StateKey), key_cmp);
    b->g->state = arena_array(b->a, (size_t)b->n_keys + 1, sizeof(int));
    if (!b->g->state) return build_fail(b, "out of memory");
    for (int i = 0; i < b->n_keys; i++) b->g->state[i] = b->keys[i].tensor;
    b->g->n_state = b->n_keys;
    return true;
}

int build_param(Builder *b, const char *leaf, Shape s) { return state(b, TK_PARAM, leaf, s, DT_F32); }
int build_buffer(Builder *b, const char *leaf, Shape s, DType dt) { return state(b, TK_BUFFER, leaf, s, dt); }

void build_init(Builder *b, int t, InitKind k, double arg) {
    if (t < 0) return;
    b->g->tensors[t].init = k;
    b->g->tensors[t].init_arg = arg;
}

bool build_op_n(Builder *b, OpKind k, const int *in, int n_in, const OpAttrs *a, int n_out, int *outs) {
    for (int i = 0; i < n_in; i++)
        if (in[i] < 0) return false;  /* an earlier step failed and reported */
    const char *scope = arena_strdup(b->a, b->path);
    int op = graph_add_op(b->g, k, in, n_in, a, n_out, b->row, scope);
    if (op < 0) return build_fail(b, "%s%s%s", b->path, b->path[0] ? ": " : "", b->g->err);
    for (int i = 0; i < b->g->ops[op].n_out; i++) outs[i] = b->g->ops[op].out[i];
    return true;
}

int build_weight_layout(Builder *b, int w) {
    if (w < 0 || !b->channels_last) return w;
    OpAttrs a = {.shape = b->g->tensors[w].shape, .channels_last = true};
    return build_op(b, OP_RESHAPE, &w, 1, &a);
}

int build_op(Builder *b, OpKind k, const int *in, int n_in, const OpAttrs *a) {
    int outs[IR_MAX_SPLIT];
    return build_op_n(b, k, in, n_in, a, 1, outs) ? outs[0] : -1;
}

int chan(const Builder *b, int t) { return t < 0 ? 0 : (int)b->g->tensors[t].shape.d[1]; }

ConvOpt conv_opt(int k, int s) {
    return (ConvOpt){.k = {k, k}, .s = s, .g = 1, .d = 1, .auto_pad = true, .act = ACTM_DEFAULT};
}

int conv2d_leaf(Builder *b, const char *attr, int x, int c2, int kh, int kw, int s, int ph, int pw, int g, int d, bool bias) {
    if (x < 0 || !mod_enter(b, attr)) return -1;
    int c1 = chan(b, x);
    if (g < 1 || c1 % g || c2 % g) {
        build_fail(b, "%s: groups=%d must divide in_channels %d and out_channels %d", b->path, g, c1, c2);
        mod_exit(b);
        return -1;
    }
    int in[3] = {x, build_param(b, "weight", shape4(c2, c1 / g, kh, kw)), -1};
    if (b->trunc_normal_convs) build_init(b, in[1], INIT_TRUNC_NORMAL, 0.02);
    else build_init(b, in[1], INIT_KAIMING_UNIFORM, 0);
    if (bias) {
        in[2] = build_param(b, "bias", shape1(c2));
        build_init(b, in[2], INIT_BIAS_UNIFORM, (double)(c1 / g) * kh * kw);
    }
    OpAttrs a = {.stride = {s, s}, .pad = {ph, ph, pw, pw}, .dilation = {d, d}, .groups = g};
    in[1] = build_weight_layout(b, in[1]);
    int y = build_op(b, OP_CONV2D, in, bias ? 3 : 2, &a);
    mod_exit(b);
    return y;
}

int batchnorm_leaf(Builder *b, const char *attr, int x) {
    if (x < 0 || (attr && !mod_enter(b, attr))) return -1;
    Shape c = shape1(chan(b, x));
    /* one statement each: state_dict order follows creation order */
    int in[6] = {x};
    in[1] = build_param(b, "weight", c);
    in[2] = build_param(b, "bias", c);
    in[3] = build_buffer(b, "running_mean", c, DT_F32);
    in[4] = build_buffer(b, "running_var", c, DT_F32);
    in[5] = build_buffer(b, "num_batches_tracked", (Shape){0, {0}}, DT_I64);
    /* weight 1, running_var 1; bias, running_mean and the counter stay 0 */
    build_init(b, in[1], INIT_CONST, 1.0);
    build_init(b, in[4], INIT_CONST, 1.0);
    /* Ultralytics' initialize_weights sets every BatchNorm2d to these */
    OpAttrs a = {.eps = 1e-3, .momentum = 0.03, .training = !b->eval};
    int y = build_op(b, OP_BATCHNORM, in, 6, &a);
    if (attr) mod_exit(b);
    return y;
}

static int apply_act(Builder *b, int x, ActKind k, double alpha) {
    static const OpKind ops[] = {[ACT_SILU] = OP_SILU, [ACT_RELU] = OP_RELU, [ACT_LEAKY_RELU] = OP_LEAKY_RELU,
                                 [ACT_HARDSWISH] = OP_HARDSWISH, [ACT_GELU] = OP_GELU, [ACT_SIGMOID] = OP_SIGMOID};
    if (k == ACT_NONE) return x;
    OpAttrs a = {.alpha = alpha};
    return build_op(b, ops[k], &x, 1, &a);
}

int activation(Builder *b, int x, ActMode m) {
    if (x < 0) return -1;
    switch (m) {
    case ACTM_OFF: mod_count(b); return x;
    case ACTM_OWN_SILU: mod_count(b); return apply_act(b, x, ACT_SILU, 0);
    case ACTM_DEFAULT:
    case ACTM_REPCONV: {
        int which = m == ACTM_REPCONV;
        uint64_t bit = 1ULL << b->domain;
        if (!(b->shared_counted[which] & bit)) {
            b->shared_counted[which] |= bit;
            b->layers++;
        }
        return which ? apply_act(b, x, ACT_SILU, 0) : apply_act(b, x, b->cfg->act, b->cfg->act_alpha);
    }
    }
    return -1;
}

bool enter_opt(Builder *b, const char *attr) { return !attr || mod_enter(b, attr); }
void exit_opt(Builder *b, const char *attr) {
    if (attr) mod_exit(b);
}

int conv_block(Builder *b, const char *attr, int x, int c2, ConvOpt o) {
    if (x < 0 || !enter_opt(b, attr)) return -1;
    int p[2];
    for (int i = 0; i < 2; i++) {
        int k = o.d > 1 ? o.d * (o.k[i] - 1) + 1 : o.k[i];
        p[i] = o.auto_pad ? k / 2 : o.p[i];
    }
    int y = conv2d_leaf(b, "conv", x, c2, o.k[0], o.k[1], o.s, p[0], p[1], o.g, o.d, false);
    y = batchnorm_leaf(b, "bn", y);
    y = activation(b, y, o.act);
    exit_opt(b, attr);
    return y;
}

int add(Builder *b, int x, int y) {
    int in[2] = {x, y};
    return build_op(b, OP_ADD, in, 2, NULL);
}

int concat(Builder *b, const int *xs, int n) {
    OpAttrs a = {.axis = 1};
    return build_op(b, OP_CONCAT, xs, n, &a);
}

bool split2(Builder *b, int x, int c0, int c1, int out[2]) {
    OpAttrs a = {.axis = 1, .nsplit = 2, .split = {c0, c1}};
    return build_op_n(b, OP_SPLIT, &x, 1, &a, 2, out);
}

bool chunk2(Builder *b, int x, int out[2]) {
    if (x < 0) return false;
    int c = chan(b, x);
    if (c < 2) return build_fail(b, "cannot chunk %d channel(s) into 2", c);
    return split2(b, x, (c + 1) / 2, c / 2, out);
}
