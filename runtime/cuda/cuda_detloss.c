/* runtime/cuda/cuda_detloss.c — the detection loss on the device: scratch layout, the argument
 * block from the op's attributes and tensors, and the phase launches. The loss itself is the
 * template's (templates/cuda/lib/detloss.cu, checked against runtime/detloss.c); this file must
 * not route ops, allocate device memory or synchronise. */
#include "cuda_detloss.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../../passes/views.h"

enum { PART_ALIGN = 256 };

_Static_assert(IR_MAX_LEVELS <= YL_DL_MAX_LEVELS, "the loss' argument block holds every level");
_Static_assert((int)CUDA_DETLOSS_ROW_BLOCK <= (int)LIB_BLOCK, "a row's block fits the kernels' shared arrays (YK_BLOCK)");

static int64_t align_up(int64_t x) { return (x + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN; }

/* Byte offsets of the scratch parts (YlDetLossArgs off_*), in order; returns the total. */
static int64_t layout(int64_t batch, int64_t anchors, int64_t max_boxes, int topk, YlDetLossArgs *a) {
    const int64_t ba = batch * anchors, bm = batch * max_boxes, chunks = (anchors + YL_DL_CHUNK - 1) / YL_DL_CHUNK;
    const int64_t size[] = {ba * 4 * 8, bm * topk * 4, bm * 4, ba * 4, ba * 2 * 8, bm * 2 * 8, ba * 4 * 8, batch * chunks * 5 * 8, 8 * 8};
    long long *off[] = {&a->off_pred, &a->off_top, &a->off_row, &a->off_owner, &a->off_pair, &a->off_gmax, &a->off_term, &a->off_part, &a->off_sum};
    int64_t at = 0;
    for (size_t i = 0; i < sizeof size / sizeof size[0]; i++) {
        *off[i] = (long long)at;
        at += align_up(size[i]);
    }
    return at;
}

int64_t cuda_detloss_scratch_bytes(int64_t batch, int64_t anchors, int64_t max_boxes, int topk) {
    YlDetLossArgs a;
    return layout(batch, anchors, max_boxes, topk, &a);
}

static bool is_loss(const Op *op) { return op->kind == OP_DETECT_LOSS || op->kind == OP_DETECT_LOSS_BWD; }
static int first_level(const Op *op) { return op->kind == OP_DETECT_LOSS_BWD ? 1 : 0; }
static int topk_of(const Op *op) { return op->a.topk > 0 ? op->a.topk : 10; } /* runtime/ref_loss.c's default */

static int64_t anchors_of(const Op *op) {
    int64_t n = 0;
    for (int i = 0; i < op->a.nlevels && i < IR_MAX_LEVELS; i++) n += (int64_t)op->a.level_hw[i][0] * op->a.level_hw[i][1];
    return n;
}

int64_t cuda_detloss_op_scratch_bytes(const Graph *g, const Op *op) {
    if (!is_loss(op)) return 0;
    const Shape *boxes = &g->tensors[op->in[first_level(op) + op->a.nlevels]].shape;
    return cuda_detloss_scratch_bytes(boxes->d[0], anchors_of(op), boxes->d[1], topk_of(op));
}


/* elements between t's channels and between its pixels, as it is stored */
static void level_steps(const Graph *g, int t, long long *cs, long long *ps) {
    const Tensor *x = &g->tensors[t];
    if (x->channels_last) *cs = 1, *ps = (long long)x->shape.d[1];
    else *cs = (long long)x->shape.d[2] * x->shape.d[3], *ps = 1;
}

static void *dev(const CuDevicePtr *ptr, int t) { return (void *)(uintptr_t)ptr[t]; }

bool cuda_detloss_args(const Graph *g, const Views *v, const Op *op, const CuDevicePtr *ptr, CuDevicePtr scratch, YlDetLossArgs *a, char *err,
                       int errcap) {
    memset(a, 0, sizeof *a);
    if (!is_loss(op)) return errf(err, errcap, "op %d (%s) is not a detection loss", op->id, op_def(op->kind)->name);
    const OpAttrs *at = &op->a;
    const int first = first_level(op), nl = at->nlevels, topk = topk_of(op);
    const int64_t anchors = anchors_of(op);
    if (nl < 1 || nl > YL_DL_MAX_LEVELS || op->n_in != first + nl + 2) return errf(err, errcap, "op %d: %d levels and %d inputs", op->id, nl, op->n_in);
    if (at->nc < 1 || at->reg_max < 1 || at->reg_max > YL_DL_MAX_REG_MAX)
        return errf(err, errcap, "op %d: nc %d must be >= 1 and reg_max %d within 1..%d", op->id, at->nc, at->reg_max, YL_DL_MAX_REG_MAX);
    if (anchors < 1 || anchors > INT32_MAX / 2) return errf(err, errcap, "op %d: %lld anchors", op->id, (long long)anchors);
    /* torch.topk refuses k above the anchor count; the kernels keep k slots per thread */
    if (topk < 1 || topk > YL_DL_MAX_TOPK || topk > anchors)
        return errf(err, errcap, "op %d: topk %d outside 1..%lld (the device assigner keeps at most %d)", op->id, topk,
                    (long long)(anchors < YL_DL_MAX_TOPK ? anchors : YL_DL_MAX_TOPK), YL_DL_MAX_TOPK);
    const int tb = op->in[first + nl], tc = op->in[first + nl + 1];
    const Shape *bs = &g->tensors[tb].shape;
    if (views_row_stride(g, v, tb) || views_row_stride(g, v, tc)) return errf(err, errcap, "op %d: the boxes and counts must not be views", op->id);
    a->nl = nl, a->nc = at->nc, a->reg_max = at->reg_max, a->topk = topk;
    a->batch = (int)bs->d[0], a->max_boxes = (int)bs->d[1], a->anchors = (int)anchors;
    a->chunks = (int)((anchors + YL_DL_CHUNK - 1) / YL_DL_CHUNK);
    /* the oracle's configuration is fp32 (DetLossConfig): the same roundings here */
    a->alpha = (double)0.5f, a->beta = (double)6.0f;
    a->gain_box = (double)(float)at->gains[0], a->gain_cls = (double)(float)at->gains[1], a->gain_dfl = (double)(float)at->gains[2];
    for (int i = 0; i < nl; i++) {
        a->h[i] = at->level_hw[i][0], a->w[i] = at->level_hw[i][1];
        a->stride[i] = (double)(float)at->strides[i];
        if (a->h[i] < 1 || a->w[i] < 1 || !(a->stride[i] > 0)) return errf(err, errcap, "op %d: level %d is %dx%d, stride %g", op->id, i, a->h[i], a->w[i], a->stride[i]);
        for (int k = 0; k < 1 + first; k++) {
            const Shape *ls = &g->tensors[k ? op->out[i] : op->in[first + i]].shape;
            if (ls->nd != 4 || ls->d[1] != 4 * at->reg_max + at->nc || ls->d[2] != a->h[i] || ls->d[3] != a->w[i])
                return errf(err, errcap, "op %d: level %d %s is not [B, %d, %d, %d]", op->id, i, k ? "gradient" : "input", 4 * at->reg_max + at->nc, a->h[i], a->w[i]);
        }
        a->anchor_off[i + 1] = a->anchor_off[i] + a->h[i] * a->w[i];
        a->level[i] = dev(ptr, op->in[first + i]);
        a->level_bs[i] = views_image_stride(g, v, op->in[first + i]);
        level_steps(g, op->in[first + i], &a->level_cs[i], &a->level_ps[i]);
        if (first) {
            a->grad[i] = dev(ptr, op->out[i]);
            a->grad_bs[i] = views_image_stride(g, v, op->out[i]);
            level_steps(g, op->out[i], &a->grad_cs[i], &a->grad_ps[i]);
        }
    }
    a->img_h = a->h[0] * a->stride[0], a->img_w = a->w[0] * a->stride[0];
    a->boxes = dev(ptr, tb), a->counts = dev(ptr, tc);
    if (first) a->d_total = dev(ptr, op->in[0]);
    else a->total = dev(ptr, op->out[0]), a->items = dev(ptr, op->out[1]);
    a->scratch = (char *)(uintptr_t)scratch;
    layout(a->batch, a->anchors, a->max_boxes, topk, a);
    return true;
}

bool cuda_detloss_kernels(const LibProgram *lp, const Graph *g, const Op *op, const unsigned char *stype, int idx[CUDA_DETLOSS_PHASES],
                          char *err, int errcap) {
    if (!is_loss(op)) return errf(err, errcap, "op %d (%s) is not a detection loss", op->id, op_def(op->kind)->name);
    const int first = first_level(op), nl = op->a.nlevels;
    const bool bwd = first == 1;
    if (op->n_in != first + nl + 2 || (bwd ? op->n_out != nl : op->n_out != 2)) return errf(err, errcap, "op %d: unexpected operands", op->id);
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        int t = i < op->n_in ? op->in[i] : op->out[i - op->n_in];
        if (t < 0 || t >= g->n_tensors) return errf(err, errcap, "op %d: operand %d is no tensor of the graph", op->id, i);
    }
    if (stype[op->in[first + nl]] != DT_F32 || stype[op->in[first + nl + 1]] != DT_I64 || (!bwd && (stype[op->out[0]] != DT_F32 || stype[op->out[1]] != DT_F32)))
        return errf(err, errcap, "op %d: the loss kernels read fp32 boxes and int64 counts and write an fp32 total and items", op->id);
    const DType level = (DType)stype[op->in[first]], grad = bwd ? (DType)stype[op->out[0]] : level, d_total = bwd ? (DType)stype[op->in[0]] : DT_F32;
    for (int i = 0; i < nl; i++)
        if (stype[op->in[first + i]] != level || (bwd && stype[op->out[i]] != grad))
            return errf(err, errcap, "op %d: levels (or gradients) of mixed storage types", op->id);
    for (int e = LK_DETLOSS_DECODE; e <= LK_DETLOSS_GRAD; e++) {
        int *k = &idx[e - LK_DETLOSS_DECODE];
        *k = -1;
        if (e == LK_DETLOSS_GRAD && !bwd) continue;
        DType dt[YL_MAX_OPERANDS];
        int n = lib_detloss_types((LibEntry)e, level, grad, d_total, dt);
        if ((*k = lib_program_find(lp, (LibEntry)e, n, dt)) < 0)
            return errf(err, errcap, "op %d (%s): the plan has no %s kernel for its storage types (recompile the plan)", op->id, op_def(op->kind)->name,
                        e == LK_DETLOSS_GRAD ? "loss-gradient" : "loss");
    }
    return true;
}

long long cuda_detloss_items(const YlDetLossArgs *a, LibEntry e) {
    const long long ba = (long long)a->batch * a->anchors, bm = (long long)a->batch * a->max_boxes;
    switch (e) {
    case LK_DETLOSS_ASSIGN:
    case LK_DETLOSS_NORMALISE: return bm;
    case LK_DETLOSS_REDUCE: return (long long)a->batch * a->chunks;
    case LK_DETLOSS_FINISH: return 1;
    default: return ba;
    }
}

CudaGeom cuda_detloss_geometry(const YlDetLossArgs *a, LibEntry e, int sm_count) {
    const long long sms = sm_count > 0 ? sm_count : 1, items = cuda_detloss_items(a, e), cap = sms * 32;
    if (e == LK_DETLOSS_FINISH) return (CudaGeom){1, 1, LIB_BLOCK};
    if (e == LK_DETLOSS_ASSIGN || e == LK_DETLOSS_NORMALISE)
        return (CudaGeom){(unsigned)(items < 1 ? 1 : items < cap ? items : cap), 1, CUDA_DETLOSS_ROW_BLOCK};
    const long long block = items < sms * LIB_BLOCK ? 32 : LIB_BLOCK, blocks = (items + block - 1) / block;
    return (CudaGeom){(unsigned)(blocks < 1 ? 1 : blocks < cap ? blocks : cap), 1, (unsigned)block};
}

bool cuda_detloss_launch(const CudaKernels *ck, const CudaDevice *d, const Graph *g, const Views *v, const Op *op, const CuDevicePtr *ptr,
                         const unsigned char *stype, CuDevicePtr scratch, int64_t scratch_bytes, CuStream s, CudaLossTiming *timing, char *err, int errcap) {
    int idx[CUDA_DETLOSS_PHASES];
    YlDetLossArgs a;
    if (!cuda_detloss_kernels(&ck->lp, g, op, stype, idx, err, errcap) || !cuda_detloss_args(g, v, op, ptr, scratch, &a, err, errcap)) return false;
    const int64_t need = cuda_detloss_op_scratch_bytes(g, op);
    if (scratch_bytes < need || scratch % PART_ALIGN)
        return errf(err, errcap, "op %d: the loss needs %lld bytes of 256-byte aligned scratch; it was given %lld at 0x%llx", op->id, (long long)need,
                    (long long)scratch_bytes, (unsigned long long)scratch);
    if (timing) timing->n = 0;
    if (timing && !CUDA_CALL(&d->L, cuEventRecord, (timing->ev[0], s), "timing the loss' phases (profile)", err, errcap)) return false;
    for (int i = 0; i < CUDA_DETLOSS_PHASES && idx[i] >= 0; i++) {
        const LibKernel *k = &ck->lp.kernels[idx[i]];
        const CudaGeom geo = cuda_detloss_geometry(&a, k->entry, ck->sm_count);
        void *params[] = {&a};
        char doing[192];
        snprintf(doing, sizeof doing, "launching %s (op %d, %u blocks of %u)", k->name, op->id, geo.grid, geo.block);
        if (!CUDA_CALL(&d->L, cuLaunchKernel, (ck->lib_fn[idx[i]], geo.grid, 1, 1, geo.block, 1, 1, 0, s, params, NULL), doing, err, errcap)) return false;
        if (timing && !CUDA_CALL(&d->L, cuEventRecord, (timing->ev[i + 1], s), "timing the loss' phases (profile)", err, errcap)) return false;
        if (timing) timing->kernel[timing->n++] = idx[i];
    }
    return true;
}
