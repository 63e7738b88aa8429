/* ir/plan_codec.c — little-endian encode/decode of plan fields, with every
 * read bounds-checked and range-checked. */
#include "plan_codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pc_writer(PlanCodec *c) { memset(c, 0, sizeof *c); }

void pc_reader(PlanCodec *c, const unsigned char *in, size_t len, uint64_t file_offset) {
    memset(c, 0, sizeof *c);
    c->reading = true;
    c->in = in;
    c->in_len = len;
    c->base = file_offset;
}

void pc_free(PlanCodec *c) {
    free(c->out);
    c->out = NULL;
}

bool pc_fail(PlanCodec *c, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    int n = snprintf(c->err, sizeof c->err, "offset %llu: ", (unsigned long long)(c->base + c->pos));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + n, sizeof c->err - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

/* n little-endian bytes of *v */
static bool raw(PlanCodec *c, uint64_t *v, int n, const char *what) {
    if (c->failed) return false;
    if (c->reading) {
        if (c->in_len - c->pos < (size_t)n) return pc_fail(c, "data ends inside %s", what);
        uint64_t x = 0;
        for (int i = n - 1; i >= 0; i--) x = x << 8 | c->in[c->pos + (size_t)i];
        c->pos += (size_t)n;
        *v = x;
        return true;
    }
    if (c->cap - c->len < (size_t)n) {
        size_t cap = c->cap ? c->cap * 2 : 4096;
        unsigned char *p = realloc(c->out, cap);
        if (!p) return pc_fail(c, "out of memory");
        c->out = p;
        c->cap = cap;
    }
    for (int i = 0; i < n; i++) c->out[c->len++] = (unsigned char)(*v >> (8 * i));
    return true;
}

bool pc_append(PlanCodec *c, const unsigned char *bytes, size_t n) {
    if (c->failed) return false;
    if (c->reading) return pc_fail(c, "internal error: append on a reader");
    if (c->cap - c->len < n) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap - c->len < n) cap *= 2;
        unsigned char *p = realloc(c->out, cap);
        if (!p) return pc_fail(c, "out of memory");
        c->out = p;
        c->cap = cap;
    }
    if (n) memcpy(c->out + c->len, bytes, n);
    c->len += n;
    return true;
}

bool pc_u8(PlanCodec *c, uint8_t *v, const char *what) {
    uint64_t x = *v;
    if (!raw(c, &x, 1, what)) return false;
    *v = (uint8_t)x;
    return true;
}

bool pc_u32(PlanCodec *c, uint32_t *v, const char *what) {
    uint64_t x = *v;
    if (!raw(c, &x, 4, what)) return false;
    *v = (uint32_t)x;
    return true;
}

bool pc_i32(PlanCodec *c, int32_t *v, const char *what) {
    uint32_t x = (uint32_t)*v;
    if (!pc_u32(c, &x, what)) return false;
    memcpy(v, &x, sizeof x);
    return true;
}

bool pc_u64(PlanCodec *c, uint64_t *v, const char *what) { return raw(c, v, 8, what); }

bool pc_i64(PlanCodec *c, int64_t *v, const char *what) {
    uint64_t x;
    memcpy(&x, v, sizeof x);
    if (!raw(c, &x, 8, what)) return false;
    memcpy(v, &x, sizeof x);
    return true;
}

bool pc_f64(PlanCodec *c, double *v, const char *what) {
    uint64_t x;
    memcpy(&x, v, sizeof x);
    if (!raw(c, &x, 8, what)) return false;
    memcpy(v, &x, sizeof x);
    return true;
}

bool pc_int(PlanCodec *c, int *v, int lo, int hi, const char *what) {
    int32_t x = *v;
    if (!pc_i32(c, &x, what)) return false;
    if (c->reading && (x < lo || x > hi)) {
        c->pos -= 4;
        return pc_fail(c, "%s = %d, expected %d..%d", what, x, lo, hi);
    }
    *v = x;
    return true;
}

bool pc_shape(PlanCodec *c, Shape *s, const char *what) {
    if (!pc_int(c, &s->nd, 0, IR_MAX_DIMS, what)) return false;
    for (int i = 0; i < IR_MAX_DIMS; i++) {
        if (!pc_i64(c, &s->d[i], what)) return false;
        if (c->reading && (s->d[i] < 0 || s->d[i] > ((int64_t)1 << 40))) {
            c->pos -= 8;
            return pc_fail(c, "%s dimension %d = %lld out of range", what, i, (long long)s->d[i]);
        }
    }
    return true;
}

enum { SMALL = 1 << 12, MEDIUM = 1 << 20, LARGE = 1 << 30 };

bool pc_attrs(PlanCodec *c, OpAttrs *a) {
    bool ok = true;
    for (int i = 0; i < 2; i++) {
        ok = ok && pc_int(c, &a->kernel[i], 0, SMALL, "kernel") && pc_int(c, &a->stride[i], 0, SMALL, "stride") &&
             pc_int(c, &a->dilation[i], 0, SMALL, "dilation") && pc_int(c, &a->out_hw[i], 0, MEDIUM, "output size");
    }
    for (int i = 0; i < 4; i++) ok = ok && pc_int(c, &a->pad[i], 0, SMALL, "padding");
    ok = ok && pc_int(c, &a->groups, 0, MEDIUM, "groups") && pc_int(c, &a->axis, 0, IR_MAX_DIMS - 1, "axis") &&
         pc_int(c, &a->nsplit, 0, IR_MAX_SPLIT, "split count");
    for (int i = 0; i < IR_MAX_SPLIT; i++) ok = ok && pc_int(c, &a->split[i], 0, LARGE, "split size");
    ok = ok && pc_int(c, &a->heads, 0, MEDIUM, "heads") && pc_int(c, &a->key_dim, 0, MEDIUM, "key_dim") &&
         pc_int(c, &a->head_dim, 0, MEDIUM, "head_dim") && pc_int(c, &a->area, 0, MEDIUM, "area") &&
         pc_int(c, &a->nlevels, 0, IR_MAX_LEVELS, "levels") && pc_int(c, &a->reg_max, 0, SMALL, "reg_max");
    for (int i = 0; i < IR_MAX_LEVELS; i++)
        ok = ok && pc_int(c, &a->level_hw[i][0], 0, MEDIUM, "level size") && pc_int(c, &a->level_hw[i][1], 0, MEDIUM, "level size") &&
             pc_f64(c, &a->strides[i], "stride");
    int flags = a->xywh | a->training << 1 | a->nesterov << 2 | a->channels_last << 3;
    ok = ok && pc_int(c, &flags, 0, 15, "flags") && pc_int(c, &a->act_op, 0, OP_COUNT - 1, "activation") &&
         pc_int(c, &a->nc, 0, MEDIUM, "nc") && pc_int(c, &a->topk, 0, MEDIUM, "topk") && pc_int(c, &a->group, 0, 2, "group");
    a->xywh = flags & 1;
    a->training = flags >> 1 & 1;
    a->nesterov = flags >> 2 & 1;
    a->channels_last = flags >> 3 & 1;
    double *dbl[] = {&a->gains[0], &a->gains[1], &a->gains[2], &a->eps, &a->momentum, &a->alpha, &a->scale, &a->weight_decay, &a->beta2, &a->max_norm};
    for (size_t i = 0; i < sizeof dbl / sizeof dbl[0]; i++) ok = ok && pc_f64(c, dbl[i], "attribute");
    return ok && pc_shape(c, &a->shape, "shape attribute");
}
