/* compiler/kernel_lower.c — fusion groups to kernels and launches: each
 * group's elementwise ops join one pending map kernel (tensors internal to the
 * group stay in registers), reductions re-evaluate that chain in their own
 * body, library ops and copies run as they are. Owns no op formulas
 * (kernel_rules.c) and no target syntax (kernel_render.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_build.h"
#include "lib_kernels.h"
#include "../passes/views.h"

typedef struct Lower {
    const Graph *g;
    const Fusion *f;
    Precision p;
    KProgram *kp;
    bool *persistent;
    bool *read;             /* per tensor: some op or the graph's outputs read it */
    char **sig;             /* per kernel: its signature, for sharing */
    size_t *sig_len;
    uint32_t *sig_hash;     /* and its hash, which names it */
    /* the pending map kernel of the current group */
    KBuild pend;
    bool active;
    int64_t n, c, inner;
    int op_lo, op_hi;
    int *reg;               /* per tensor: its register in pend, or -1 */
    int *touched, n_touched;
    int *row_of;            /* per tensor: the last launch that named it, for kernel_lower_multi */
    bool *row_wrote;        /* and whether that launch writes it */
    KBuild *clone;          /* a reduction built on a copy of pend's chain */
    int chain_sec;          /* the clone's section that starts with the chain (its registers are valid there) */
    bool failed;
    char *err;
    int errcap;
} Lower;

__attribute__((format(printf, 2, 3))) static bool fail(Lower *L, const char *fmt, ...) {
    if (!L->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(L->err, (size_t)L->errcap, fmt, ap);
        va_end(ap);
    }
    L->failed = true;
    return false;
}

static bool grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, elem * (size_t)c);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

enum { NO_LAUNCH = -2 };

static uint32_t fnv1a(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Finishes kb as a kernel of the program (shared with an identical one) and
 * appends its launch; kb's code moves to the program or is freed. */
static int emit_kernel(Lower *L, KBuild *kb, int op_lo, int op_hi, int64_t n, int64_t c, int64_t inner) {
    kb_compact(kb);
    if (kb->failed) {
        if (!L->failed) snprintf(L->err, (size_t)L->errcap, "op %d (%s): %s", op_lo, op_def(L->g->ops[op_lo].kind)->name, kb->why);
        L->failed = true;
        kb_free(kb);
        return -1;
    }
    if (kb->k.skel == KS_MAP && kb->k.n_code == 0) {
        kb_free(kb); /* a chain whose every value stays in the group's registers */
        return NO_LAUNCH;
    }
    int64_t strides[KIR_MAX_BUFS] = {0};
    for (int i = 0; i < kb->k.n_bufs; i++) {
        int t = kb->slot_tensor[i];
        if (L->f->internal[t]) {
            kb_free(kb);
            return fail(L, "op %d: a kernel needs tensor %%%d in memory, but its fusion group keeps it internal", op_lo, t), -1;
        }
        kb->k.buf_dtype[i] = memplan_storage_dtype(L->g, t, L->persistent[t], L->p);
        int64_t bs = kb->k.skel == KS_MAP || kb->k.skel == KS_CHANNEL_REDUCE ? views_row_stride(L->g, &L->f->views, t) : 0;
        kb->k.buf_strided[i] = bs != 0;
        strides[i] = bs;
        /* a view is addressed as [row, channel, inner] of its own shape */
        int64_t tn, tc, ti;
        kernel_extents(&L->g->tensors[t], &tn, &tc, &ti);
        if (bs && (tn != n || tc != c || ti != inner)) {
            kb_free(kb);
            return fail(L, "op %d: a kernel over [%lld, %lld, %lld] reads view %%%d of another shape", op_lo, (long long)n, (long long)c, (long long)inner, t), -1;
        }
    }
    size_t len;
    char *sig = kb_signature(&kb->k, &len);
    if (!sig) return kb_free(kb), fail(L, "out of memory (op %d)", op_lo), -1;
    KProgram *kp = L->kp;
    int id = -1, same_hash = 0;
    uint32_t h = fnv1a(sig, len);
    for (int i = 0; i < kp->n_kernels && id < 0; i++) {
        if (L->sig_len[i] == len && memcmp(L->sig[i], sig, len) == 0) id = i;
        else if (L->sig_hash[i] == h) same_hash++;
    }
    if (id >= 0) {
        free(sig);
        kb_free(kb);
    } else {
        int cap_sig = kp->cap_kernels, cap_len = kp->cap_kernels, cap_hash = kp->cap_kernels;
        if (!grow((void **)&L->sig, &cap_sig, kp->n_kernels + 1, sizeof(char *)) || !grow((void **)&L->sig_len, &cap_len, kp->n_kernels + 1, sizeof(size_t)) ||
            !grow((void **)&L->sig_hash, &cap_hash, kp->n_kernels + 1, sizeof(uint32_t)) || !grow((void **)&kp->kernels, &kp->cap_kernels, kp->n_kernels + 1, sizeof(Kernel))) {
            free(sig);
            kb_free(kb);
            return fail(L, "out of memory (op %d)", op_lo), -1;
        }
        id = kp->n_kernels++;
        kp->kernels[id] = kb->k;
        snprintf(kp->kernels[id].name, KIR_NAME, same_hash ? "yk_%s_%08x_%d" : "yk_%s_%08x", kernel_skel_name(kb->k.skel), h, same_hash);
        L->sig[id] = sig;
        L->sig_len[id] = len;
        L->sig_hash[id] = h;
    }
    if (!grow((void **)&kp->launches, &kp->cap_launches, kp->n_launches + 1, sizeof(KLaunch))) return fail(L, "out of memory (op %d)", op_lo), -1;
    KLaunch *ln = &kp->launches[kp->n_launches++];
    *ln = (KLaunch){.kernel = id, .op_lo = op_lo, .op_hi = op_hi, .n_args = kp->kernels[id].n_bufs, .n = n, .c = c, .inner = inner};
    memcpy(ln->args, kb->slot_tensor, sizeof ln->args);
    memcpy(ln->bs, strides, sizeof ln->bs);
    return kp->n_launches - 1;
}

static bool library_launch(Lower *L, int o) {
    KProgram *kp = L->kp;
    const Op *op = &L->g->ops[o];
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        int t = i < op->n_in ? op->in[i] : op->out[i - op->n_in];
        /* most library routines step over images; a channels-last view's rows are pixels */
        if (L->g->tensors[t].channels_last && views_row_stride(L->g, &L->f->views, t) && !kernel_op_strided_rows(op->kind))
            return fail(L, "op %d (%s): a library routine cannot address %%%d, a channel slice of a channels-last tensor", o, op_def(op->kind)->name, t);
    }
    if (!grow((void **)&kp->launches, &kp->cap_launches, kp->n_launches + 1, sizeof(KLaunch))) return fail(L, "out of memory (op %d)", o);
    kp->launches[kp->n_launches++] = (KLaunch){.kernel = -1, .op_lo = o, .op_hi = o};
    return true;
}

static bool grow_list(KProgram *kp, int more) {
    int cap = kp->cap_list;
    return grow((void **)&kp->list, &cap, kp->n_list + more, sizeof(int)) && grow((void **)&kp->list_len, &kp->cap_list, kp->n_list + more, sizeof(int64_t));
}

static void clear_regs(Lower *L) {
    for (int i = 0; i < L->n_touched; i++) L->reg[L->touched[i]] = -1;
    L->n_touched = 0;
}

static bool flush(Lower *L) {
    if (!L->active) return !L->failed;
    L->active = false;
    kb_end_body(&L->pend, 0);
    clear_regs(L);
    return emit_kernel(L, &L->pend, L->op_lo, L->op_hi, L->n, L->c, L->inner) != -1;
}

static int lower_value(void *ctx, KBuild *kb, int t) {
    Lower *L = ctx;
    if (L->reg[t] >= 0) {
        if (kb == &L->pend || (kb == L->clone && kb->sec_first == L->chain_sec)) return L->reg[t];
        return fail(L, "op reading %%%d: the value is still in a pending kernel's registers", t), 0;
    }
    if (L->f->internal[t] && L->g->tensors[t].producer >= 0)
        return fail(L, "tensor %%%d is internal to its fusion group but no kernel of the group holds it (producer op %d)", t, L->g->tensors[t].producer), 0;
    return kb_load(kb, t, KA_ELEM, 0);
}

/* The pending chain without its stores (the map kernel stores what escapes). */
static void copy_chain(KBuild *dst, const KBuild *pend) {
    for (int i = 0; i < pend->k.n_code; i++) {
        KInstr in = pend->k.code[i];
        kb_emit(dst, in.op == KI_STORE ? (KInstr){.op = KI_CONST} : in);
    }
}

static void lower_begin_body(void *ctx, KBuild *kb) {
    Lower *L = ctx;
    kb_section(kb);
    if (kb == L->clone) {
        copy_chain(kb, &L->pend);
        L->chain_sec = kb->sec_first;
    }
}

static bool pend_open(Lower *L, int o, const Tensor *t) {
    int64_t n, c, inner;
    kernel_extents(t, &n, &c, &inner);
    if (L->active && (n != L->n || c != L->c || inner != L->inner) && !flush(L)) return false;
    if (!L->active) {
        kb_init(&L->pend, KS_MAP);
        L->active = true;
        L->n = n, L->c = c, L->inner = inner;
        L->op_lo = o;
    }
    L->op_hi = o;
    return true;
}

static bool lower_elementwise(Lower *L, int o, const KRule *r) {
    const Op *op = &L->g->ops[o];
    if (!pend_open(L, o, &L->g->tensors[op->out[0]])) return false;
    KValues v = {lower_value, lower_begin_body, L};
    int out[8];
    if (op->n_out > 8 || !r->elementwise(&L->pend, L->g, op, &v, out)) return fail(L, "op %d: cannot lower", o);
    for (int i = 0; i < op->n_out; i++) {
        int t = op->out[i];
        if (out[i] < 0) continue;
        /* an op's result is an fp32 tensor value even when it stays in a
         * register: round it as storing it would (a no-op for fp32 math) */
        out[i] = kb_un(&L->pend, KI_F32, out[i]);
        L->reg[t] = out[i];
        L->touched[L->n_touched++] = t;
        if (!L->f->internal[t]) kb_store(&L->pend, t, KA_ELEM, 0, out[i]);
    }
    return !L->failed;
}

static bool lower_reduce(Lower *L, int o, const KRule *r) {
    const Op *op = &L->g->ops[o];
    int x = op->kind == OP_BATCHNORM_BWD ? op->in[1] : op->in[0];
    /* eval-mode BN: the map normalises with the running statistics itself;
     * the statistics outputs are written only when something reads them */
    if (op->kind == OP_BATCHNORM && !op->a.training && !L->read[op->out[1]] && !L->read[op->out[2]]) return lower_elementwise(L, o, r);
    int64_t n, c, inner;
    kernel_extents(&L->g->tensors[x], &n, &c, &inner);
    KBuild rb;
    kb_init(&rb, KS_CHANNEL_REDUCE);
    if (L->active && n == L->n && c == L->c && inner == L->inner) {
        /* the reduction reads the chain's values from registers: same slots */
        memcpy(rb.slot_tensor, L->pend.slot_tensor, sizeof rb.slot_tensor);
        rb.k.n_bufs = L->pend.k.n_bufs;
        copy_chain(&rb, &L->pend);
        L->clone = &rb;
        L->chain_sec = 0;
    }
    KValues v = {lower_value, lower_begin_body, L};
    bool ok = r->reduce(&rb, L->g, op, &v);
    L->clone = NULL;
    if (!ok || L->failed) return kb_free(&rb), fail(L, "op %d: cannot lower its reduction", o);
    if (emit_kernel(L, &rb, o, o, n, c, inner) == -1) return false;
    return r->elementwise ? lower_elementwise(L, o, r) : true;
}

static bool lower_alone(Lower *L, int o, const KRule *r) {
    const Op *op = &L->g->ops[o];
    if (!flush(L)) return false;
    KBuild kb;
    kb_init(&kb, KS_MAP);
    if (!r->map(&kb, L->g, op)) return kb_free(&kb), fail(L, "op %d: cannot lower", o);
    int64_t n, c, inner;
    kernel_extents(&L->g->tensors[op->n_out ? op->out[0] : op->in[0]], &n, &c, &inner);
    return emit_kernel(L, &kb, o, o, n, c, inner) != -1;
}

/* total = sum of squared per-tensor norms; norm = fp32(sqrt(total));
 * coef = min(1, max_norm / (norm + 1e-6)) */
static bool lower_norm(Lower *L, int o) {
    const Op *op = &L->g->ops[o];
    KProgram *kp = L->kp;
    if (!flush(L)) return false;
    KBuild kb;
    kb_init(&kb, KS_LIST_NORM);
    kb_end_body(&kb, 0);
    kb_section(&kb);
    int norm = kb_un(&kb, KI_F32, kb_un(&kb, KI_SQRT, kb_emit(&kb, (KInstr){.op = KI_ACC, .b = 0})));
    int coef = kb_bin(&kb, KI_DIV, kb_const(&kb, op->a.max_norm), kb_bin(&kb, KI_ADD, norm, kb_const(&kb, 1e-6)));
    int one = kb_const(&kb, 1);
    kb_store(&kb, op->out[0], KA_FIXED, 0, kb_sel(&kb, KI_SEL_GT, coef, one, one, coef));
    kb_store(&kb, op->out[1], KA_FIXED, 0, norm);
    kb_end_finalize(&kb, 0);
    int l = emit_kernel(L, &kb, o, o, 1, 1, 1);
    if (l < 0) return false;
    if (!grow_list(kp, op->n_in)) return fail(L, "out of memory (op %d)", o);
    kp->launches[l].list_first = kp->n_list;
    kp->launches[l].list_n = op->n_in;
    for (int i = 0; i < op->n_in; i++) {
        if (L->f->internal[op->in[i]]) return fail(L, "op %d: gradient %%%d has no memory", o, op->in[i]);
        kp->list_len[kp->n_list] = shape_numel(&L->g->tensors[op->in[i]].shape);
        kp->list[kp->n_list++] = op->in[i];
    }
    return true;
}

/* Whether launch j can be row j - lo of a multi-tensor launch with rows
 * [lo, j) (lo: a single-op launch of a flat kernel): the same kernel, one op,
 * the next one, and no tensor that one row writes named by another (rows run
 * side by side). */
static bool joins_rows(Lower *L, int lo, int j) {
    const KProgram *kp = L->kp;
    const KLaunch *b = &kp->launches[j];
    if (j - lo >= KIR_MAX_ROWS || b->kernel != kp->launches[lo].kernel || b->op_lo != b->op_hi || b->op_lo != kp->launches[j - 1].op_hi + 1) return false;
    const Kernel *k = &kp->kernels[b->kernel];
    for (int s = 0; s < b->n_args; s++) {
        int t = b->args[s];
        if (L->row_of[t] >= lo && L->row_of[t] < j && (L->row_wrote[t] || k->buf_written[s])) return false;
    }
    return true;
}

static void mark_row(Lower *L, int l) {
    const KLaunch *ln = &L->kp->launches[l];
    const Kernel *k = &L->kp->kernels[ln->kernel];
    for (int s = 0; s < ln->n_args; s++) {
        int t = ln->args[s];
        L->row_wrote[t] = (L->row_of[t] == l && L->row_wrote[t]) || k->buf_written[s];
        L->row_of[t] = l;
    }
}

/* The launches [from, n_launches) of one group, with each run of two or more
 * that joins_rows allows made one multi-tensor launch (a row of tensor ids
 * per op in KProgram.list): the optimizer's 183 updates of YOLOv8n become a
 * launch per parameter group. */
static bool kernel_lower_multi(Lower *L, int from) {
    KProgram *kp = L->kp;
    int w = from;
    /* marks are launch indices, which the next group reuses after a merge */
    for (int l = from; l < kp->n_launches; l++)
        for (int s = 0; s < kp->launches[l].n_args; s++) L->row_of[kp->launches[l].args[s]] = -1;
    for (int lo = from; lo < kp->n_launches;) {
        int hi = lo + 1;
        bool single = kp->launches[lo].kernel >= 0 && kp->launches[lo].op_lo == kp->launches[lo].op_hi && kernel_map_is_flat(&kp->kernels[kp->launches[lo].kernel]);
        if (single) {
            mark_row(L, lo);
            while (hi < kp->n_launches && joins_rows(L, lo, hi)) mark_row(L, hi++);
        }
        KLaunch merged = kp->launches[lo];
        if (hi - lo > 1) {
            int nb = merged.n_args;
            if (!grow_list(kp, (hi - lo) * nb)) return fail(L, "out of memory (ops %d-%d)", merged.op_lo, kp->launches[hi - 1].op_hi);
            merged.list_first = kp->n_list, merged.list_n = hi - lo, merged.op_hi = kp->launches[hi - 1].op_hi;
            Kernel *k = &kp->kernels[merged.kernel];
            if (!k->multi) {
                /* its own name: a plan compiled before the kernel took rows
                 * fails the runtime's name check instead of updating row 0 alone */
                char name[KIR_NAME];
                snprintf(name, sizeof name, "yk_rows%s", k->name + strlen("yk_map"));
                memcpy(k->name, name, sizeof name);
                k->multi = true;
            }
            for (int r = lo; r < hi; r++) {
                const KLaunch *ln = &kp->launches[r];
                for (int s = 0; s < nb; s++) {
                    kp->list_len[kp->n_list] = ln->n * ln->c * ln->inner;
                    kp->list[kp->n_list++] = ln->args[s];
                }
            }
        }
        kp->launches[w++] = merged;
        lo = hi;
    }
    kp->n_launches = w;
    return true;
}

static bool copy_launch(Lower *L, int o, int src, int dst, int64_t outer, int64_t len, int64_t src_stride, int64_t src_off, int64_t dst_stride, int64_t dst_off) {
    KBuild kb;
    kb_init(&kb, KS_COPY);
    kb_slot(&kb, src);
    kb_slot(&kb, dst);
    kb.k.buf_written[1] = true;
    kb_end_body(&kb, 0);
    int l = emit_kernel(L, &kb, o, o, 1, 1, 1);
    if (l < 0) return false;
    KLaunch *ln = &L->kp->launches[l];
    ln->outer = outer, ln->len = len, ln->src_stride = src_stride, ln->src_off = src_off, ln->dst_stride = dst_stride, ln->dst_off = dst_off;
    return true;
}

/* Whether `part` already sits where a concat/split along axis 1 puts it:
 * `chan` channels into `whole`, inside the same base (a zero-copy view). A
 * concat input split off a tensor that lives there holds the same values
 * as that tensor's channels, which are already in place. */
static bool in_place(const Lower *L, int part, int whole, int64_t chan, bool cat) {
    const Views *v = &L->f->views;
    int w;
    int64_t at;
    if (cat && v->base[part] == part && views_split_source(L->g, part, &w, &at) && v->base[w] != w && v->base[w] == v->base[whole])
        return v->chan[w] + at == v->chan[whole] + chan;
    if (v->base[part] != v->base[whole]) return false;
    return v->chan[part] == v->chan[whole] + chan;
}

/* Elements between t's runs along axis ax: a view's base stride along axis
 * 1 (views exist only there), else the packed run. */
static int64_t image_stride(const Lower *L, int ax, int t, int64_t run) {
    int64_t bs = ax == 1 ? views_row_stride(L->g, &L->f->views, t) : 0;
    return bs ? bs : run;
}

/* concat / split along any axis as runs of contiguous elements (of the
 * stored order: channels last keeps axis 1 innermost); reshape and detach as
 * one run. Along axis 1 a part that is a view of the whole costs nothing,
 * and views on either side are read and written with their base's stride
 * between images. A reshape between orders is a transpose: a library
 * routine. */
static bool lower_copy(Lower *L, int o) {
    const Op *op = &L->g->ops[o];
    if (!flush(L)) return false;
    if (op->kind == OP_RESHAPE || op->kind == OP_DETACH) {
        if (!tensor_logical_order(&L->g->tensors[op->in[0]]) || !tensor_logical_order(&L->g->tensors[op->out[0]])) return library_launch(L, o);
        int64_t n = shape_numel(&L->g->tensors[op->out[0]].shape);
        return copy_launch(L, o, op->in[0], op->out[0], 1, n, n, 0, n, 0);
    }
    bool cat = op->kind == OP_CONCAT;
    int whole_t = cat ? op->out[0] : op->in[0];
    const Tensor *wt = &L->g->tensors[whole_t];
    Shape whole = wt->shape;
    int ax = op->a.axis;
    if (wt->channels_last) {
        static const int stored_axis[4] = {0, 3, 1, 2};
        whole = (Shape){4, {wt->shape.d[0], wt->shape.d[2], wt->shape.d[3], wt->shape.d[1]}};
        ax = stored_axis[op->a.axis];
    }
    int64_t outer = 1, inner = 1, off = 0;
    for (int i = 0; i < ax; i++) outer *= whole.d[i];
    for (int i = ax + 1; i < whole.nd; i++) inner *= whole.d[i];
    int64_t whole_run = whole.d[ax] * inner, chan = 0;
    int64_t whole_stride = image_stride(L, op->a.axis, whole_t, whole_run);
    for (int i = 0; i < (cat ? op->n_in : op->n_out); i++) {
        int part = cat ? op->in[i] : op->out[i];
        int64_t run = L->g->tensors[part].shape.d[op->a.axis] * inner;
        int64_t part_stride = image_stride(L, op->a.axis, part, run);
        bool ok = op->a.axis == 1 && in_place(L, part, whole_t, chan, cat);
        if (!ok)
            ok = cat ? copy_launch(L, o, part, whole_t, outer, run, part_stride, 0, whole_stride, off) : copy_launch(L, o, whole_t, part, outer, run, whole_stride, off, part_stride, 0);
        if (!ok) return false;
        off += run;
        chan += L->g->tensors[part].shape.d[op->a.axis];
    }
    return true;
}

static bool lower_op(Lower *L, int o) {
    const KRule *r = kernel_rule(L->g->ops[o].kind);
    switch (r->cls) {
    case KR_LIBRARY: return flush(L) && library_launch(L, o);
    case KR_ELEMENTWISE: return lower_elementwise(L, o, r);
    case KR_ALONE_MAP: return lower_alone(L, o, r);
    case KR_REDUCE: return lower_reduce(L, o, r);
    case KR_NORM: return lower_norm(L, o);
    case KR_COPY: return lower_copy(L, o);
    }
    return fail(L, "op %d: no lowering rule", o);
}

bool kernel_lower(const Graph *g, const Fusion *f, Precision p, KProgram *kp, char *err, int errcap) {
    memset(kp, 0, sizeof *kp);
    kp->precision = p;
    Lower L = {.g = g, .f = f, .p = p, .kp = kp, .err = err, .errcap = errcap};
    L.persistent = calloc((size_t)g->n_tensors + 1, sizeof(bool));
    L.read = calloc((size_t)g->n_tensors + 1, sizeof(bool));
    L.reg = malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
    L.touched = malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
    L.row_of = malloc(sizeof(int) * ((size_t)g->n_tensors + 1));
    L.row_wrote = calloc((size_t)g->n_tensors + 1, sizeof(bool));
    kp->group_first = malloc(sizeof(int) * ((size_t)f->n_groups + 1));
    kp->n_groups = f->n_groups;
    bool ok = L.persistent && L.read && L.reg && L.touched && L.row_of && L.row_wrote && kp->group_first;
    if (!ok) snprintf(err, (size_t)errcap, "out of memory");
    if (ok) {
        memplan_mark_persistent(g, L.persistent);
        for (int t = 0; t < g->n_tensors; t++) L.reg[t] = L.row_of[t] = -1;
        for (int o = 0; o < g->n_ops; o++)
            for (int i = 0; i < g->ops[o].n_in; i++) L.read[g->ops[o].in[i]] = true;
        for (int i = 0; i < g->n_outputs; i++) L.read[g->outputs[i]] = true;
    }
    for (int i = 0; ok && i < f->n_groups; i++) {
        kp->group_first[i] = kp->n_launches;
        for (int o = f->groups[i].first; ok && o < f->groups[i].first + f->groups[i].n; o++) ok = lower_op(&L, o);
        ok = ok && flush(&L) && kernel_lower_multi(&L, kp->group_first[i]);
    }
    if (ok) kp->group_first[f->n_groups] = kp->n_launches;
    for (int l = 0; ok && l < kp->n_launches; l++) kp->launches[l].bytes = kernel_launch_bytes(kp, g, L.persistent, l);
    if (L.active) kb_free(&L.pend);
    for (int i = 0; i < kp->n_kernels; i++) free(L.sig[i]);
    free(L.sig);
    free(L.sig_len);
    free(L.sig_hash);
    free(L.persistent);
    free(L.read);
    free(L.reg);
    free(L.touched);
    free(L.row_of);
    free(L.row_wrote);
    if (!ok) kernel_program_free(kp);
    return ok;
}
