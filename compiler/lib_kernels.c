/* compiler/lib_kernels.c — which library ops have CUDA library kernels, the kernels a plan needs
 * (one per entry and operand storage types), their sources (the prelude of the generated kernels
 * plus a family template of templates/cuda/lib) and launch arguments. Must not compile, launch or
 * change what an op computes: runtime/ref_layout.c, runtime/ref_attention.c and runtime/detloss.c
 * are the oracles the templates follow. */
#include "lib_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/views.h"
#include "templates.h"

/* per entry: its name, the template family, the op kind it carries out, and
 * whether its operands may be channel slices of channels-last tensors
 * (YlArgs.ps: pixels a stride apart) */
static const struct {
    const char *name, *family;
    OpKind op;
    bool pixel_stride;
} ENTRY[LK_COUNT] = {
    [LK_MAXPOOL2D] = {"maxpool2d", "pool", OP_MAXPOOL2D, true},
    [LK_MAXPOOL2D_BWD] = {"maxpool2d_bwd", "pool", OP_MAXPOOL2D_BWD, true},
    [LK_AVGPOOL2D] = {"avgpool2d", "pool", OP_AVGPOOL2D, true},
    [LK_AVGPOOL2D_BWD] = {"avgpool2d_bwd", "pool", OP_AVGPOOL2D_BWD, true},
    [LK_RESIZE_NEAREST] = {"resize_nearest", "resize", OP_RESIZE_NEAREST, true},
    [LK_RESIZE_NEAREST_BWD] = {"resize_nearest_bwd", "resize", OP_RESIZE_NEAREST_BWD, true},
    [LK_ZEROPAD2D] = {"zeropad2d", "pad", OP_ZEROPAD2D, false},
    [LK_CROP2D] = {"crop2d", "pad", OP_CROP2D, false},
    [LK_ATTENTION] = {"attention", "attention", OP_ATTENTION, false},
    [LK_ATTENTION_BWD] = {"attention_bwd", "attention", OP_ATTENTION_BWD, false},
    [LK_DFL] = {"dfl", "decode", OP_DFL, false},
    [LK_DIST2BBOX] = {"dist2bbox", "decode", OP_DIST2BBOX, false},
    [LK_RELAYOUT] = {"relayout", "relayout", OP_RESHAPE, false},
    [LK_CAST] = {"cast", "cast", OP_COUNT, false},
    [LK_UNSCALE] = {"unscale", "unscale", OP_COUNT, false},
    [LK_ATTENTION_STATS] = {"attention_stats", "attention", OP_COUNT, false},
    [LK_ATT_PARTIALS] = {"att_partials", "attention_gemm", OP_COUNT, false},
    [LK_ATT_ROWS] = {"att_rows", "attention_gemm", OP_COUNT, false},
    [LK_ATT_VCOPY] = {"att_vcopy", "attention_gemm", OP_COUNT, false},
    [LK_EMA] = {"ema", "ema", OP_COUNT, false},
    [LK_IMAGES_U8] = {"images_u8", "cast", OP_COUNT, false},
    [LK_DETLOSS_DECODE] = {"detloss_decode", "detloss", OP_COUNT, false},
    [LK_DETLOSS_ASSIGN] = {"detloss_assign", "detloss", OP_COUNT, false},
    [LK_DETLOSS_RESOLVE] = {"detloss_resolve", "detloss", OP_COUNT, false},
    [LK_DETLOSS_NORMALISE] = {"detloss_normalise", "detloss", OP_COUNT, false},
    [LK_DETLOSS_TERMS] = {"detloss_terms", "detloss", OP_COUNT, false},
    [LK_DETLOSS_REDUCE] = {"detloss_reduce", "detloss", OP_COUNT, false},
    [LK_DETLOSS_FINISH] = {"detloss_finish", "detloss", OP_COUNT, false},
    [LK_DETLOSS_GRAD] = {"detloss_grad", "detloss", OP_COUNT, false},
};

_Static_assert(IR_MAX_LEVELS == YL_MAX_LEVELS, "YlArgs holds every level of a dist2bbox op");

static bool is_detloss(LibEntry e) { return e >= LK_DETLOSS_DECODE && e <= LK_DETLOSS_GRAD; }

int lib_detloss_types(LibEntry e, DType level, DType grad, DType d_total, DType dt[YL_MAX_OPERANDS]) {
    switch (e) {
    case LK_DETLOSS_DECODE:
    case LK_DETLOSS_ASSIGN:
    case LK_DETLOSS_RESOLVE:
    case LK_DETLOSS_TERMS: dt[0] = level; return 1;
    case LK_DETLOSS_NORMALISE:
    case LK_DETLOSS_REDUCE:
    case LK_DETLOSS_FINISH: return 0;
    case LK_DETLOSS_GRAD: dt[0] = level, dt[1] = grad, dt[2] = d_total; return 3;
    default: return -1;
    }
}

int lib_program_find(const LibProgram *lp, LibEntry e, int n, const DType *dt) {
    for (int i = 0; i < lp->n_kernels; i++) {
        const LibKernel *k = &lp->kernels[i];
        if (k->entry == e && k->n_operands == n && memcmp(k->dt, dt, sizeof(DType) * (size_t)n) == 0) return i;
    }
    return -1;
}

int lib_entry_of(OpKind k) {
    /* a detach is a reshape to the same shape: a library launch only between layouts */
    if (k == OP_DETACH) return LK_RELAYOUT;
    for (int e = 0; e < LK_CAST; e++)
        if (ENTRY[e].op == k) return e;
    return -1;
}

bool kernel_op_strided_rows(OpKind k) {
    const int e = lib_entry_of(k);
    return kernel_op_generated(k) || (e >= 0 && ENTRY[e].pixel_stride);
}

void lib_att_gemm_types(OpKind k, const DType *dt, LibEntry e, DType out[2]) {
    bool bwd = k == OP_ATTENTION_BWD;
    /* operands: attention qkv, o, v; attention_bwd d_o, d_v, qkv, d_qkv */
    if (e == LK_ATT_VCOPY) out[0] = dt[bwd ? 1 : 0], out[1] = dt[bwd ? 3 : 2];
    else out[0] = DT_F32, out[1] = dt[bwd ? 2 : 0];
}

static const char *tag(DType d) { return d == DT_BF16 ? "bf16" : d == DT_F16 ? "f16" : "f32"; }

/* kernel (entry, types) in lp, added when new; its index or -1 (out of memory) */
static int intern(LibProgram *lp, int *cap, LibEntry e, int n, const DType *dt) {
    int found = lib_program_find(lp, e, n, dt);
    if (found >= 0) return found;
    if (lp->n_kernels == *cap) {
        int c = *cap ? *cap * 2 : 8;
        LibKernel *q = realloc(lp->kernels, sizeof *q * (size_t)c);
        if (!q) return -1;
        lp->kernels = q;
        *cap = c;
    }
    LibKernel *k = &lp->kernels[lp->n_kernels];
    memset(k, 0, sizeof *k);
    k->entry = e;
    k->n_operands = n;
    memcpy(k->dt, dt, sizeof(DType) * (size_t)n);
    int used = snprintf(k->name, sizeof k->name, "yl_%s", ENTRY[e].name);
    for (int i = 0; i < n; i++) used += snprintf(k->name + used, sizeof k->name - (size_t)used, "_%s", tag(dt[i]));
    return lp->n_kernels++;
}

/* The loss phases of detect_loss (bwd: detect_loss_bwd) op, interned in
 * launch order; false with err on mixed level or gradient storage types
 * (one kernel reads every level) or out of memory. */
static bool intern_detloss(const Graph *g, const Op *op, bool bwd, const bool *persistent, Precision p, LibProgram *lp, int *cap, char *err, int errcap) {
    const int first = bwd ? 1 : 0, nl = op->a.nlevels;
    DType level = memplan_storage_dtype(g, op->in[first], persistent[op->in[first]], p), grad = level, d_total = DT_F32;
    if (bwd) {
        grad = memplan_storage_dtype(g, op->out[0], persistent[op->out[0]], p);
        d_total = memplan_storage_dtype(g, op->in[0], persistent[op->in[0]], p);
    }
    for (int i = 0; i < nl; i++) {
        bool mixed = memplan_storage_dtype(g, op->in[first + i], persistent[op->in[first + i]], p) != level ||
                     (bwd && i < op->n_out && memplan_storage_dtype(g, op->out[i], persistent[op->out[i]], p) != grad);
        if (mixed)
            return snprintf(err, (size_t)errcap, "op %d (%s): its levels (or their gradients) have mixed storage types; the loss kernels read one", op->id,
                            op_def(op->kind)->name), false;
    }
    for (int e = LK_DETLOSS_DECODE; e <= (bwd ? LK_DETLOSS_GRAD : LK_DETLOSS_FINISH); e++) {
        DType dt[YL_MAX_OPERANDS];
        int n = lib_detloss_types((LibEntry)e, level, grad, d_total, dt);
        if (intern(lp, cap, (LibEntry)e, n, dt) < 0) return snprintf(err, (size_t)errcap, "out of memory"), false;
    }
    return true;
}

/* Elements of one image of a tensor shaped s (YlArgs.per); the whole tensor when it has no batch. */
static int64_t per_image(const Shape *s) { return s->nd >= 1 && s->d[0] > 0 ? shape_numel(s) / s->d[0] : shape_numel(s); }

/* lib_program_build's way out once err says why */
static bool build_refused(LibProgram *lp, bool *persistent) {
    free(persistent);
    lib_program_free(lp);
    return false;
}

bool lib_program_build(const Graph *g, Precision p, const KProgram *kp, LibProgram *lp, char *err, int errcap) {
    memset(lp, 0, sizeof *lp);
    lp->cast = lp->unscale = lp->ema = lp->images_u8 = lp->widen = -1;
    int cap = 0;
    bool trains = false, wgrad = false;
    for (int o = 0; o < g->n_ops; o++) trains |= g->ops[o].kind == OP_GRAD_CLIP, wgrad |= g->ops[o].kind == OP_CONV2D_WGRAD;
    bool *persistent = calloc((size_t)g->n_tensors + 1, sizeof *persistent);
    lp->launch_kernel = malloc(sizeof(int) * ((size_t)kp->n_launches + 1));
    lp->n_launches = kp->n_launches;
    bool ok = persistent && lp->launch_kernel;
    if (ok) memplan_mark_persistent(g, persistent);
    for (int l = 0; ok && l < kp->n_launches; l++) {
        const KLaunch *ln = &kp->launches[l];
        const Op *op = &g->ops[ln->op_lo];
        int e = ln->kernel < 0 ? lib_entry_of(op->kind) : -1;
        lp->launch_kernel[l] = -1;
        if (ln->kernel < 0 && (op->kind == OP_DETECT_LOSS || op->kind == OP_DETECT_LOSS_BWD)) {
            if (!intern_detloss(g, op, op->kind == OP_DETECT_LOSS_BWD, persistent, p, lp, &cap, err, errcap)) return build_refused(lp, persistent);
            continue;
        }
        if (e < 0) continue;
        const int n = op->n_in + op->n_out;
        if (n > LIB_MAX_OPERANDS)
            return snprintf(err, (size_t)errcap, "op %d (%s) has %d operands; its library kernel takes at most %d", op->id, op_def(op->kind)->name, n,
                            LIB_MAX_OPERANDS), build_refused(lp, persistent);
        DType dt[LIB_MAX_OPERANDS];
        for (int i = 0; i < n; i++) {
            int t = lib_operand_tensor(op, i);
            dt[i] = memplan_storage_dtype(g, t, persistent[t], p);
            /* the kernels divide offsets within an image by multiply and shift, exact in 32 bits (common.cuh) */
            const int64_t per = per_image(&g->tensors[t].shape);
            if (per >= ((int64_t)1 << 32))
                return snprintf(err, (size_t)errcap, "op %d (%s): an image of operand %d holds %lld elements; library kernels index at most 2^32 - 1 per image",
                                op->id, op_def(op->kind)->name, i, (long long)per), build_refused(lp, persistent);
        }
        /* the statistics launch runs first, so it is interned first */
        if (e == LK_ATTENTION_BWD) ok = intern(lp, &cap, LK_ATTENTION_STATS, n, dt) >= 0;
        ok = ok && (lp->launch_kernel[l] = intern(lp, &cap, (LibEntry)e, n, dt)) >= 0;
        /* and the kernels around its cuBLASLt products, which the runtime prefers */
        for (int ae = LK_ATT_PARTIALS; ok && (e == LK_ATTENTION || e == LK_ATTENTION_BWD) && ae <= LK_ATT_VCOPY; ae++) {
            DType at[2];
            lib_att_gemm_types(op->kind, dt, (LibEntry)ae, at);
            ok = intern(lp, &cap, (LibEntry)ae, 2, at) >= 0;
        }
    }
    if (ok && trains) {
        DType dt[2] = {DT_F32, DT_F32};
        ok = (lp->ema = intern(lp, &cap, LK_EMA, 2, dt)) >= 0;
    }
    int images = -1;
    for (int i = 0; i < g->n_inputs && images < 0; i++)
        if (g->tensors[g->inputs[i]].name && strcmp(g->tensors[g->inputs[i]].name, "images") == 0) images = g->inputs[i];
    if (ok && images >= 0) {
        DType dt[1] = {memplan_storage_dtype(g, images, persistent[images], p)};
        ok = (lp->images_u8 = intern(lp, &cap, LK_IMAGES_U8, 1, dt)) >= 0;
    }
    if (ok && p == PREC_FP16) {
        /* the gradients (fp32, persistent) and the scale (the fp32 grad_seed input) */
        DType dt[2] = {DT_F32, DT_F32};
        ok = (lp->unscale = intern(lp, &cap, LK_UNSCALE, 2, dt)) >= 0;
    }
    if (ok && p != PREC_FP32 && wgrad) {
        DType dt[2] = {p == PREC_FP16 ? DT_F16 : DT_BF16, DT_F32};
        ok = (lp->widen = intern(lp, &cap, LK_CAST, 2, dt)) >= 0;
    }
    if (ok && p != PREC_FP32) {
        DType dt[2] = {DT_F32, p == PREC_FP16 ? DT_F16 : DT_BF16};
        ok = (lp->cast = intern(lp, &cap, LK_CAST, 2, dt)) >= 0;
    }
    free(persistent);
    if (!ok) {
        lib_program_free(lp);
        snprintf(err, (size_t)errcap, "out of memory");
    }
    return ok;
}

void lib_program_free(LibProgram *lp) {
    free(lp->kernels);
    free(lp->launch_kernel);
    memset(lp, 0, sizeof *lp);
    lp->cast = lp->unscale = lp->ema = lp->images_u8 = lp->widen = -1;
}

/* Writes template text with each @KEY@ of kv replaced by its value. */
static bool put_template(FILE *out, const char *path, const char *const *kv, int n_kv) {
    size_t len;
    const char *t = template_get(path, &len);
    if (!t) return false;
    for (size_t i = 0; i < len;) {
        if (t[i] == '@') {
            size_t j = i + 1;
            while (j < len && t[j] != '@' && t[j] != '\n') j++;
            int hit = -1;
            for (int k = 0; j < len && t[j] == '@' && k < n_kv && hit < 0; k++)
                if (strlen(kv[2 * k]) == j - i - 1 && strncmp(kv[2 * k], t + i + 1, j - i - 1) == 0) hit = k;
            if (hit >= 0) {
                fputs(kv[2 * hit + 1], out);
                i = j + 1;
                continue;
            }
        }
        fputc(t[i++], out);
    }
    return true;
}

char *lib_kernel_render(const LibKernel *k) {
    size_t abi_len, len = 0;
    const char *abi = template_get("lib_abi.h", &abi_len);
    if (!abi) return NULL;
    while (abi_len && abi[abi_len - 1] == '\n') abi_len--;
    char *abi_text = strndup(abi, abi_len), *buf = NULL, macro[48], path[64];
    FILE *out = abi_text ? open_memstream(&buf, &len) : NULL;
    if (!out) return free(abi_text), NULL;
    /* the entry's macro selects its kernel in the family file */
    snprintf(macro, sizeof macro, "YL_%s", ENTRY[k->entry].name);
    for (char *c = macro; *c; c++) *c = *c >= 'a' && *c <= 'z' ? (char)(*c - 'a' + 'A') : *c;
    snprintf(path, sizeof path, "cuda/lib/%s.cu", ENTRY[k->entry].family);
    const char *prelude_kv[] = {"ABI", abi_text};
    bool ok = put_template(out, "cuda/prelude.cu", prelude_kv, 1);
    /* the loss phases take their own argument block */
    if (is_detloss(k->entry)) ok = ok && put_template(out, "detloss_abi.h", NULL, 0);
    /* the loop and index helpers of every YlArgs family; the fp64 helpers of those that follow a reference's fp64 arithmetic */
    if (!is_detloss(k->entry)) ok = ok && put_template(out, "cuda/lib/common.cuh", NULL, 0);
    bool fp64 = strcmp(ENTRY[k->entry].family, "attention") == 0 || strcmp(ENTRY[k->entry].family, "decode") == 0;
    if (fp64) ok = ok && put_template(out, "cuda/lib/fp64.cuh", NULL, 0);
    fprintf(out, "#define %s 1\n", macro);
    bool attention_bwd = k->entry == LK_ATTENTION_BWD || k->entry == LK_ATTENTION_STATS;
    /* X: the storage type of the pooled input (maxpool2d's operand 0, maxpool2d_bwd's operand 1);
     * TQ: attention's qkv (attention's operand 0, attention_bwd's operand 2) */
    const char *kv[] = {"NAME", k->name, "T0", tag(k->dt[0]), "T1", tag(k->dt[1]), "T2", tag(k->n_operands > 2 ? k->dt[2] : DT_F32),
                        "T3", tag(k->n_operands > 3 ? k->dt[3] : DT_F32), "X", tag(k->entry == LK_MAXPOOL2D_BWD ? k->dt[1] : k->dt[0]),
                        "TQ", tag(attention_bwd ? k->dt[2] : k->dt[0])};
    ok = ok && put_template(out, path, kv, 7);
    /* so that sources concatenated into one unit (the host emulation's) each define their own */
    if (is_detloss(k->entry)) fprintf(out, "\n#undef %s\n#undef YL_DETLOSS_ABI_H\n#undef YL_DL_EACH\n", macro);
    else fprintf(out, "\n#undef %s\n#undef YL_EACH\n%s", macro, k->entry == LK_ATTENTION || attention_bwd ? "#undef YL_ATT_G\n" : "");
    ok = fclose(out) == 0 && ok;
    free(abi_text);
    if (!ok) free(buf);
    return ok ? buf : NULL;
}


/* attention and attention_bwd: qkv's plane and channels, the attributes, and
 * one thread per (image, head, group of LIB_ATT_GROUP channels, token) */
static void attention_args(const Graph *g, const Op *op, YlArgs *a) {
    const Shape *qkv = &g->tensors[op->in[op->kind == OP_ATTENTION_BWD ? 2 : 0]].shape;
    const OpAttrs *at = &op->a;
    const long long kg = (at->key_dim + LIB_ATT_GROUP - 1) / LIB_ATT_GROUP, vg = (at->head_dim + LIB_ATT_GROUP - 1) / LIB_ATT_GROUP;
    a->c = qkv->d[1], a->h = qkv->d[2], a->w = qkv->d[3];
    a->heads = at->heads, a->key_dim = at->key_dim, a->head_dim = at->head_dim, a->area = at->area, a->scale = at->scale;
    a->total = (long long)qkv->d[0] * at->heads * (op->kind == OP_ATTENTION_BWD ? 2 * kg + vg : vg) * a->h * a->w;
}

int64_t lib_scratch_bytes(const Graph *g, const Op *op) {
    if (op->kind != OP_ATTENTION_BWD) return 0;
    const Shape *qkv = &g->tensors[op->in[2]].shape;
    return qkv->d[0] * op->a.heads * qkv->d[2] * qkv->d[3] * 3 * (int64_t)sizeof(double);
}

YlArgs lib_launch_args(const Graph *g, const Views *v, const Op *op) {
    YlArgs a;
    memset(&a, 0, sizeof a);
    const OpAttrs *at = &op->a;
    const Shape *out = &g->tensors[op->out[0]].shape, *in0 = &g->tensors[op->in[0]].shape;
    for (int i = 0; i < op->n_in + op->n_out && i < LIB_MAX_OPERANDS; i++) {
        const Tensor *t = &g->tensors[lib_operand_tensor(op, i)];
        *lib_operand_bs(&a, i) = views_image_stride(g, v, t->id);
        a.cl |= t->channels_last << i;
        if (i >= YL_MAX_OPERANDS) continue;
        const int64_t row = views_row_stride(g, v, t->id);
        if (t->channels_last && t->shape.nd == 4) a.ps[i] = row ? row : t->shape.d[1];
        const Shape *s = &t->shape;
        a.per[i] = per_image(s);
        if (s->nd == 4) a.ch[i] = s->d[1], a.plane[i] = s->d[2] * s->d[3];
    }
    if (op->kind == OP_RESHAPE || op->kind == OP_DETACH) {
        a.total = (long long)shape_numel(out);
        return a;
    }
    if (op->kind == OP_ATTENTION || op->kind == OP_ATTENTION_BWD) {
        attention_args(g, op, &a);
        return a;
    }
    if (op->kind == OP_DFL || op->kind == OP_DIST2BBOX) {
        /* [N, C, A]: anchors in w; dfl one thread per output, dist2bbox one per anchor */
        a.w = in0->d[2];
        a.total = (long long)(op->kind == OP_DFL ? shape_numel(out) : in0->d[0] * in0->d[2]);
        a.reg_max = at->reg_max, a.nlevels = at->nlevels, a.xywh = at->xywh;
        for (int l = 0; l < at->nlevels && l < YL_MAX_LEVELS; l++) a.level_h[l] = at->level_hw[l][0], a.level_w[l] = at->level_hw[l][1], a.strides[l] = at->strides[l];
        return a;
    }
    a.total = (long long)shape_numel(out);
    a.c = out->nd == 4 ? (long long)out->d[1] : 0;
    /* the forward op's input plane (h, w) and output plane (oh, ow) */
    const Shape *fin = in0, *fout = out;
    switch (op->kind) {
    case OP_MAXPOOL2D_BWD: fin = &g->tensors[op->in[1]].shape, fout = in0; break;
    case OP_AVGPOOL2D_BWD:
    case OP_RESIZE_NEAREST_BWD:
    case OP_CROP2D: fin = out, fout = in0; break;
    default: break;
    }
    if (fin->nd == 4 && fout->nd == 4) a.h = fin->d[2], a.w = fin->d[3], a.oh = fout->d[2], a.ow = fout->d[3];
    bool pool = op->kind == OP_MAXPOOL2D || op->kind == OP_MAXPOOL2D_BWD || op->kind == OP_AVGPOOL2D || op->kind == OP_AVGPOOL2D_BWD;
    if (pool) {
        a.kh = at->kernel[0], a.kw = at->kernel[1], a.sh = at->stride[0], a.sw = at->stride[1];
        a.dh = at->dilation[0], a.dw = at->dilation[1];
    }
    if (pool || op->kind == OP_ZEROPAD2D || op->kind == OP_CROP2D) a.ph = at->pad[0], a.pw = at->pad[2];
    return a;
}

unsigned lib_launch_grid(const YlArgs *a, int sm_count) {
    long long blocks = (a->total + LIB_BLOCK - 1) / LIB_BLOCK, cap = (long long)(sm_count > 0 ? sm_count : 1) * 32;
    return (unsigned)(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
}
