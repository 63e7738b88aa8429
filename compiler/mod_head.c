/* compiler/mod_head.c — detection heads: Detect (legacy or depthwise class
 * branch), v10Detect (adds deep-copied one2one branches on detached
 * features), DFL, and the eval-mode box decode (semantics §7). */
#include <math.h>
#include <stdio.h>

#include "modules.h"

typedef struct Head {
    int nc, reg_max, nl;
    int c2, c3;
    bool legacy, light_cls;
} Head;

/* DetectionModel.bias_init: the final conv bias of the box branch is 1, of the
 * class branch ln(5 / nc / (640 / stride)^2) (stride known after the probe). */
static void bias_init(Builder *b, int y, double value) {
    if (y < 0) return;
    const Op *op = &b->g->ops[b->g->tensors[y].producer];
    build_init(b, op->in[2], INIT_CONST, value);
}

static double cls_bias(const Builder *b, const Head *h, int level) {
    double s = level < b->nstrides ? b->strides[level] : 0;
    return s > 0 ? log(5.0 / h->nc / ((640.0 / s) * (640.0 / s))) : 0;
}

/* Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), Conv2d(c2, 4*reg_max, 1)) */
static int box_branch(Builder *b, const char *name, int x, const Head *h) {
    if (x < 0 || !mod_enter(b, name)) return -1;
    int y = conv_block(b, "0", x, h->c2, conv_opt(3, 1));
    y = conv_block(b, "1", y, h->c2, conv_opt(3, 1));
    y = conv2d_leaf(b, "2", y, 4 * h->reg_max, 1, 1, 1, 0, 0, 1, 1, true);
    bias_init(b, y, 1.0);
    mod_exit(b);
    return y;
}

/* legacy: Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), Conv2d(c3, nc, 1));
 * else:   Sequential(Sequential(DW 3x3, Conv 1x1) x2, Conv2d(c3, nc, 1)) */
static int cls_branch(Builder *b, const char *name, int x, const Head *h, int level) {
    if (x < 0 || !mod_enter(b, name)) return -1;
    int y = x;
    if (h->legacy && !h->light_cls) {
        y = conv_block(b, "0", y, h->c3, conv_opt(3, 1));
        y = conv_block(b, "1", y, h->c3, conv_opt(3, 1));
    } else {
        for (int i = 0; i < 2; i++) {
            char nm[4] = {(char)('0' + i), 0};
            if (!mod_enter(b, nm)) return -1;
            ConvOpt dw = conv_opt(3, 1);
            dw.g = chan(b, y);
            y = conv_block(b, "0", y, chan(b, y), dw);
            y = conv_block(b, "1", y, h->c3, conv_opt(1, 1));
            mod_exit(b);
        }
    }
    y = conv2d_leaf(b, "2", y, h->nc, 1, 1, 1, 0, 0, 1, 1, true);
    bias_init(b, y, cls_bias(b, h, level));
    mod_exit(b);
    return y;
}

/* cv2/cv3-style ModuleLists over the levels; outputs cat(box, cls) per level */
static bool branches(Builder *b, const char *box_name, const char *cls_name, const int *xs, const Head *h, int *out) {
    int box[IR_MAX_LEVELS], cls[IR_MAX_LEVELS];
    const char *names[2] = {box_name, cls_name};
    for (int k = 0; k < 2; k++) {
        if (!mod_enter(b, names[k])) return false;
        for (int i = 0; i < h->nl; i++) {
            char nm[16];
            snprintf(nm, sizeof nm, "%d", i);
            if (k == 0) box[i] = box_branch(b, nm, xs[i], h);
            else cls[i] = cls_branch(b, nm, xs[i], h, i);
        }
        mod_exit(b);
    }
    for (int i = 0; i < h->nl; i++) {
        int pair[2] = {box[i], cls[i]};
        if ((out[i] = concat(b, pair, 2)) < 0) return false;
    }
    return true;
}

/* Detect._inference: (B, no, A) over all levels, DFL expectation, boxes to
 * image units (xywh for Detect, xyxy for end-to-end heads), sigmoid scores. */
static int decode(Builder *b, const int *levels, const Head *h, int dfl_w, bool xywh) {
    int flat[IR_MAX_LEVELS];
    OpAttrs d2b = {.nlevels = h->nl, .xywh = xywh};
    int no = 4 * h->reg_max + h->nc;
    for (int i = 0; i < h->nl; i++) {
        const Shape *s = &b->g->tensors[levels[i]].shape;
        OpAttrs r = {.shape = {3, {s->d[0], no, s->d[2] * s->d[3]}}};
        flat[i] = build_op(b, OP_RESHAPE, &levels[i], 1, &r);
        d2b.level_hw[i][0] = (int)s->d[2];
        d2b.level_hw[i][1] = (int)s->d[3];
        d2b.strides[i] = i < b->nstrides ? b->strides[i] : 0;
    }
    OpAttrs cat = {.axis = 2};
    int all = build_op(b, OP_CONCAT, flat, h->nl, &cat);
    int parts[2];
    OpAttrs sp = {.axis = 1, .nsplit = 2, .split = {4 * h->reg_max, h->nc}};
    if (!build_op_n(b, OP_SPLIT, &all, 1, &sp, 2, parts)) return -1;
    int dist = parts[0];
    if (h->reg_max > 1) {
        int in[2] = {parts[0], dfl_w};
        OpAttrs da = {.reg_max = h->reg_max};
        dist = build_op(b, OP_DFL, in, 2, &da);
    }
    int y[2] = {build_op(b, OP_DIST2BBOX, &dist, 1, &d2b), -1};
    y[1] = build_op(b, OP_SIGMOID, &parts[1], 1, NULL);
    return concat(b, y, 2);
}

static bool detect(Builder *b, const RowArgs *a, RowIO *io, bool v10) {
    Head h = {.nc = (int)arg_int(a, 0, 80), .reg_max = b->cfg->reg_max, .nl = io->n_in, .legacy = b->legacy, .light_cls = v10};
    if (h.nl > IR_MAX_LEVELS) return build_fail(b, "at most %d levels", IR_MAX_LEVELS);
    int ch0 = chan(b, io->in[0]);
    h.c2 = ch0 / 4 > 16 ? ch0 / 4 : 16;
    if (4 * h.reg_max > h.c2) h.c2 = 4 * h.reg_max;
    h.c3 = h.nc < 100 ? h.nc : 100;
    if (ch0 > h.c3) h.c3 = ch0;
    /* registered: cv2, cv3, dfl, one2one_cv2, one2one_cv3 */
    int levels[IR_MAX_LEVELS];
    if (!branches(b, "cv2", "cv3", io->in, &h, levels)) return false;
    int dfl_w = -1;
    reg_next(b, 2);
    if (mod_enter(b, "dfl")) {
        if (h.reg_max > 1) {
            /* DFL: Conv2d(reg_max, 1, 1, bias=False) with weights 0..reg_max-1, frozen */
            if (!mod_enter(b, "conv")) return false;
            dfl_w = build_param(b, "weight", shape4(1, h.reg_max, 1, 1));
            if (dfl_w >= 0) b->g->tensors[dfl_w].frozen = true;
            build_init(b, dfl_w, INIT_ARANGE, 0);
            mod_exit(b);
        }
        mod_exit(b);
    }
    io->n_out = 0;
    if (v10) {
        /* one2one: deep copies of cv2/cv3 on detached features; each copy owns
         * a copy of the shared activation */
        int det[IR_MAX_LEVELS], o2o[IR_MAX_LEVELS];
        for (int i = 0; i < h.nl; i++) det[i] = build_op(b, OP_DETACH, &io->in[i], 1, NULL);
        int saved = build_begin_copy(b);
        int box[IR_MAX_LEVELS], cls[IR_MAX_LEVELS];
        if (mod_enter(b, "one2one_cv2")) {
            for (int i = 0; i < h.nl; i++) {
                char nm[16];
                snprintf(nm, sizeof nm, "%d", i);
                box[i] = box_branch(b, nm, det[i], &h);
            }
            mod_exit(b);
        }
        build_end_copy(b, saved);
        saved = build_begin_copy(b);
        if (mod_enter(b, "one2one_cv3")) {
            for (int i = 0; i < h.nl; i++) {
                char nm[16];
                snprintf(nm, sizeof nm, "%d", i);
                cls[i] = cls_branch(b, nm, det[i], &h, i);
            }
            mod_exit(b);
        }
        build_end_copy(b, saved);
        for (int i = 0; i < h.nl; i++) {
            int pair[2] = {box[i], cls[i]};
            if ((o2o[i] = concat(b, pair, 2)) < 0) return false;
        }
        /* eval: the one2one boxes decoded (xyxy), then the raw levels of both
         * heads, as Ultralytics' eval v10Detect returns (y, {one2many, one2one}):
         * validation's E2EDetectLoss reads them */
        if (b->eval) io->out[io->n_out++] = decode(b, o2o, &h, dfl_w, false);
        for (int i = 0; i < h.nl; i++) io->out[io->n_out++] = levels[i];
        for (int i = 0; i < h.nl; i++) io->out[io->n_out++] = o2o[i];
    } else if (b->eval) {
        /* the raw levels follow the decoded boxes, as Ultralytics' eval
         * Detect returns (y, x): validation computes its losses on them */
        io->out[io->n_out++] = decode(b, levels, &h, dfl_w, true);
        for (int i = 0; i < h.nl; i++) io->out[io->n_out++] = levels[i];
    } else {
        for (int i = 0; i < h.nl; i++) io->out[io->n_out++] = levels[i];
    }
    for (int i = 0; i < io->n_out; i++)
        if (io->out[i] < 0) return false;
    return true;
}

bool row_detect(Builder *b, const RowArgs *a, RowIO *io) { return detect(b, a, io, false); }
bool row_v10detect(Builder *b, const RowArgs *a, RowIO *io) { return detect(b, a, io, true); }
