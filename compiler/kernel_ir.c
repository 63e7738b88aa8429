/* compiler/kernel_ir.c — building kernel code: sections of SSA instructions,
 * buffer slots, dead-code removal and the signature that names and shares a
 * kernel. Knows no ops (kernel_rules.c) and no target syntax. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_build.h"

static const char *const SKEL_NAMES[KS_COUNT] = {"map", "channel_reduce", "list_norm", "copy"};

const char *kernel_skel_name(KSkel s) { return s >= 0 && s < KS_COUNT ? SKEL_NAMES[s] : "?"; }

int kernel_storage_bytes(DType d) { return d == DT_I64 ? 8 : d == DT_F32 ? 4 : 2; }

int kernel_elem_vec(const Kernel *k) {
    if (k->skel != KS_MAP && k->skel != KS_CHANNEL_REDUCE) return 1;
    int widest = 2;
    for (int ph = 0; ph < k->n_phases; ph++)
        for (int r = k->body[ph].first; r < k->body[ph].first + k->body[ph].n; r++) {
            const KInstr *in = &k->code[r];
            switch (in->op) {
            case KI_LOAD: case KI_STORE:
                if (in->at != KA_ELEM) {
                    if (in->op == KI_STORE) return 1;
                    break;
                }
                if (k->buf_dtype[in->buf] != DT_F32 && k->buf_dtype[in->buf] != DT_BF16 && k->buf_dtype[in->buf] != DT_F16) return 1;
                if (kernel_storage_bytes(k->buf_dtype[in->buf]) > widest) widest = kernel_storage_bytes(k->buf_dtype[in->buf]);
                break;
            /* a reduction's sums and variables are kept per channel of the thread's V */
            case KI_ACCUM: case KI_VAR: if (k->skel == KS_MAP) return 1; break;
            case KI_ACC: case KI_SETVAR: case KI_INC_I64: return 1;
            default: break;
            }
        }
    /* a reduction keeps V fp64 sums and variables a channel: at 8 channels its BN-backward
     * kernels took 167 registers (one 256-thread block a multiprocessor), at 4 about 100 (two) */
    return (k->skel == KS_CHANNEL_REDUCE ? 8 : 16) / widest;
}

void kernel_channel_invariant(const Kernel *k, KSection s, bool *inv) {
    for (int r = 0; r < s.n; r++) {
        const KInstr *in = &k->code[s.first + r];
        switch (in->op) {
        case KI_LOAD: inv[r] = in->at != KA_ELEM; break;
        case KI_CONST: case KI_VAR: case KI_COUNT: inv[r] = true; break;
        case KI_NEG: case KI_EXP: case KI_SQRT: case KI_ERF: case KI_F32: case KI_SIGMOID: inv[r] = inv[in->a]; break;
        case KI_ADD: case KI_SUB: case KI_MUL: case KI_DIV: case KI_POW: inv[r] = inv[in->a] && inv[in->b]; break;
        case KI_SEL_GT: case KI_SEL_GE: inv[r] = inv[in->a] && inv[in->b] && inv[in->c] && inv[in->d]; break;
        default: inv[r] = false;
        }
    }
}

void kb_init(KBuild *kb, KSkel s) {
    memset(kb, 0, sizeof *kb);
    kb->k.skel = s;
    kb->k.n_phases = 1;
    for (int i = 0; i < KIR_MAX_BUFS; i++) kb->slot_tensor[i] = -1;
}

void kb_free(KBuild *kb) {
    free(kb->k.code);
    kb->k.code = NULL;
}

static void kb_fail(KBuild *kb, const char *why) {
    if (!kb->failed) snprintf(kb->why, sizeof kb->why, "%s", why);
    kb->failed = true;
}


void kb_section(KBuild *kb) { kb->sec_first = kb->k.n_code; }

void kb_end_body(KBuild *kb, int phase) { kb->k.body[phase] = (KSection){kb->sec_first, kb->k.n_code - kb->sec_first}; }

void kb_end_finalize(KBuild *kb, int phase) { kb->k.finalize[phase] = (KSection){kb->sec_first, kb->k.n_code - kb->sec_first}; }

int kb_emit(KBuild *kb, KInstr in) {
    if (kb->failed) return 0;
    if (kb->k.n_code == kb->cap) {
        int cap = kb->cap ? kb->cap * 2 : 32;
        KInstr *code = realloc(kb->k.code, sizeof(KInstr) * (size_t)cap);
        if (!code) return kb_fail(kb, "out of memory"), 0;
        kb->k.code = code;
        kb->cap = cap;
    }
    kb->k.code[kb->k.n_code++] = in;
    return kb->k.n_code - 1 - kb->sec_first;
}

int kb_slot(KBuild *kb, int tensor) {
    for (int i = 0; i < kb->k.n_bufs; i++)
        if (kb->slot_tensor[i] == tensor) return i;
    if (kb->k.n_bufs == KIR_MAX_BUFS) return kb_fail(kb, "a kernel would need more than 16 buffers"), 0;
    kb->slot_tensor[kb->k.n_bufs] = tensor;
    return kb->k.n_bufs++;
}

int kb_load(KBuild *kb, int tensor, KAccess at, double index) {
    return kb_emit(kb, (KInstr){.op = KI_LOAD, .buf = kb_slot(kb, tensor), .at = at, .imm = index});
}

void kb_store(KBuild *kb, int tensor, KAccess at, double index, int value) {
    int slot = kb_slot(kb, tensor);
    kb->k.buf_written[slot] = true;
    kb_emit(kb, (KInstr){.op = KI_STORE, .a = value, .buf = slot, .at = at, .imm = index});
}

int kb_const(KBuild *kb, double v) { return kb_emit(kb, (KInstr){.op = KI_CONST, .imm = v}); }
int kb_un(KBuild *kb, KInstrOp op, int a) { return kb_emit(kb, (KInstr){.op = op, .a = a}); }
int kb_bin(KBuild *kb, KInstrOp op, int a, int b) { return kb_emit(kb, (KInstr){.op = op, .a = a, .b = b}); }
int kb_sel(KBuild *kb, KInstrOp op, int a, int b, int c, int d) { return kb_emit(kb, (KInstr){.op = op, .a = a, .b = b, .c = c, .d = d}); }

int kb_reg_operands(const KInstr *in, int *r) {
    switch (in->op) {
    case KI_STORE: case KI_SETVAR: case KI_ACCUM: case KI_NEG: case KI_EXP: case KI_SQRT: case KI_ERF: case KI_F32: case KI_SIGMOID: r[0] = in->a; return 1;
    case KI_ADD: case KI_SUB: case KI_MUL: case KI_DIV: case KI_POW: r[0] = in->a, r[1] = in->b; return 2;
    case KI_SEL_GT: case KI_SEL_GE: r[0] = in->a, r[1] = in->b, r[2] = in->c, r[3] = in->d; return 4;
    default: return 0;
    }
}

static bool has_effect(KInstrOp op) { return op == KI_STORE || op == KI_SETVAR || op == KI_ACCUM || op == KI_INC_I64; }

int kb_compact_section(const KInstr *code, int n, KInstr *out) {
    bool *live = calloc((size_t)n + 1, sizeof(bool));
    int *renum = calloc((size_t)n + 1, sizeof(int));
    if (!live || !renum) {
        free(live);
        free(renum);
        memcpy(out, code, sizeof(KInstr) * (size_t)n);
        return n;
    }
    for (int i = n - 1; i >= 0; i--) {
        if (has_effect(code[i].op)) live[i] = true;
        if (!live[i]) continue;
        int r[4], k = kb_reg_operands(&code[i], r);
        for (int j = 0; j < k; j++) live[r[j]] = true;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!live[i]) continue;
        KInstr in = code[i];
        int r[4], k = kb_reg_operands(&in, r);
        int *dst[4] = {&in.a, &in.b, &in.c, &in.d};
        for (int j = 0; j < k; j++) *dst[j] = renum[r[j]];
        renum[i] = m;
        out[m++] = in;
    }
    free(live);
    free(renum);
    return m;
}

void kb_compact(KBuild *kb) {
    if (kb->failed || !kb->k.n_code) return;
    Kernel *k = &kb->k;
    KInstr *out = malloc(sizeof(KInstr) * (size_t)k->n_code);
    if (!out) return kb_fail(kb, "out of memory");
    int m = 0;
    KSection *secs[2 * KIR_MAX_PHASES];
    int ns = 0;
    for (int p = 0; p < k->n_phases; p++) secs[ns++] = &k->body[p];
    for (int p = 0; p < k->n_phases; p++) secs[ns++] = &k->finalize[p];
    for (int s = 0; s < ns; s++) {
        int n = kb_compact_section(k->code + secs[s]->first, secs[s]->n, out + m);
        secs[s]->first = m;
        secs[s]->n = n;
        m += n;
    }
    free(k->code);
    k->code = out;
    k->n_code = m;
    kb->cap = m;
    if (k->skel == KS_COPY) return;
    /* slots nothing reads or writes any more go, the rest keep their order */
    int renum[KIR_MAX_BUFS], n = 0;
    bool used[KIR_MAX_BUFS] = {false};
    for (int i = 0; i < m; i++)
        if (out[i].op == KI_LOAD || out[i].op == KI_STORE || out[i].op == KI_INC_I64) used[out[i].buf] = true;
    for (int i = 0; i < k->n_bufs; i++) {
        renum[i] = n;
        if (!used[i]) continue;
        kb->slot_tensor[n] = kb->slot_tensor[i];
        k->buf_written[n] = k->buf_written[i];
        n++;
    }
    for (int i = n; i < KIR_MAX_BUFS; i++) kb->slot_tensor[i] = -1, k->buf_written[i] = false;
    k->n_bufs = n;
    for (int i = 0; i < m; i++)
        if (out[i].op == KI_LOAD || out[i].op == KI_STORE || out[i].op == KI_INC_I64) out[i].buf = renum[out[i].buf];
}

/* Everything that decides the generated code, in a fixed byte layout. */
char *kb_signature(const Kernel *k, size_t *len) {
    size_t n = 64 + sizeof(KInstr) * (size_t)k->n_code + 4 * KIR_MAX_PHASES * 4 + 3 * KIR_MAX_BUFS + 1;
    char *s = calloc(1, n), *p = s;
    if (!s) return NULL;
    int head[4 + 5 * KIR_MAX_PHASES] = {k->skel, k->n_phases, k->n_vars, k->n_bufs};
    for (int i = 0; i < KIR_MAX_PHASES; i++) {
        head[4 + 5 * i] = k->body[i].first, head[5 + 5 * i] = k->body[i].n, head[6 + 5 * i] = k->finalize[i].first;
        head[7 + 5 * i] = k->finalize[i].n, head[8 + 5 * i] = k->n_accs[i];
    }
    memcpy(p, head, sizeof head);
    p += sizeof head;
    for (int i = 0; i < k->n_bufs; i++) *p++ = (char)k->buf_dtype[i], *p++ = (char)k->buf_written[i];
    /* strided slots only when there are any, so other kernels keep their names */
    bool strided = false;
    for (int i = 0; i < k->n_bufs; i++) strided |= k->buf_strided[i];
    if (strided) {
        *p++ = 'S';
        for (int i = 0; i < k->n_bufs; i++) *p++ = (char)k->buf_strided[i];
    }
    for (int i = 0; i < k->n_code; i++) {
        const KInstr *in = &k->code[i];
        int f[6] = {in->op, in->a, in->b, in->c, in->d, in->buf};
        memcpy(p, f, sizeof f);
        p += sizeof f;
        int at = in->at;
        memcpy(p, &at, sizeof at);
        p += sizeof at;
        memcpy(p, &in->imm, sizeof in->imm);
        p += sizeof in->imm;
    }
    *len = (size_t)(p - s);
    return s;
}

void kernel_program_free(KProgram *kp) {
    for (int i = 0; i < kp->n_kernels; i++) free(kp->kernels[i].code);
    free(kp->kernels);
    free(kp->launches);
    free(kp->group_first);
    free(kp->list);
    free(kp->list_len);
    memset(kp, 0, sizeof *kp);
}

void kernel_count_launches(const KProgram *kp, int first_group, int last_group, int *library, int *generated) {
    *library = *generated = 0;
    for (int l = kp->group_first[first_group]; l < kp->group_first[last_group]; l++) {
        if (kp->launches[l].kernel < 0) ++*library;
        else ++*generated;
    }
}

YkArgs kernel_launch_args(const KLaunch *ln) {
    YkArgs a = {.n = ln->n, .c = ln->c, .inner = ln->inner, .outer = ln->outer, .len = ln->len, .src_stride = ln->src_stride,
                .src_off = ln->src_off, .dst_stride = ln->dst_stride, .dst_off = ln->dst_off};
    for (int i = 0; i < ln->n_args && i < YK_MAX_BUFS; i++) a.bs[i] = ln->bs[i];
    return a;
}

bool kernel_map_is_flat(const Kernel *k) {
    if (k->skel != KS_MAP) return false;
    for (int i = 0; i < k->n_code; i++) {
        const KInstr *in = &k->code[i];
        bool mem = in->op == KI_LOAD || in->op == KI_STORE;
        if ((mem && ((in->at != KA_ELEM && in->at != KA_FIXED) || k->buf_strided[in->buf])) || in->op == KI_VAR || in->op == KI_SETVAR || in->op == KI_ACC ||
            in->op == KI_ACCUM || in->op == KI_COUNT || in->op == KI_INC_I64)
            return false;
    }
    return true;
}

bool kernel_is_multi(const KProgram *kp, const KLaunch *ln) { return ln->kernel >= 0 && ln->list_n > 0 && kp->kernels[ln->kernel].skel == KS_MAP; }

const int *kernel_row_args(const KProgram *kp, const KLaunch *ln, int r) {
    return kernel_is_multi(kp, ln) ? &kp->list[ln->list_first + r * ln->n_args] : ln->args;
}

int64_t kernel_row_len(const KProgram *kp, const KLaunch *ln, int r) {
    return kernel_is_multi(kp, ln) ? kp->list_len[ln->list_first + r * ln->n_args] : ln->n * ln->c * ln->inner;
}

KRows kernel_all_rows(const KProgram *kp, const KLaunch *ln) { return (KRows){0, kernel_is_multi(kp, ln) ? ln->list_n : 0}; }

int kernel_n_rows(const KProgram *kp, const KLaunch *ln) { return kernel_is_multi(kp, ln) ? ln->list_n : 1; }

bool kernel_run_range(const KProgram *kp, const Fusion *f, int first, int last, KLaunchVisit visit, KGroupDone group_done, void *ctx, char *err, int errcap) {
    for (int gi = 0; gi < f->n_groups; gi++) {
        int lo = f->groups[gi].first, hi = lo + f->groups[gi].n;
        if (hi <= first || lo >= last) continue;
        for (int l = kp->group_first[gi]; l < kp->group_first[gi + 1]; l++) {
            const KLaunch *ln = &kp->launches[l];
            if (ln->op_hi < first || ln->op_lo >= last) continue;
            KRows rows = {0, 0};
            if (kernel_is_multi(kp, ln)) {
                rows.lo = ln->op_lo < first ? first - ln->op_lo : 0;
                rows.hi = ln->op_hi >= last ? last - ln->op_lo : ln->list_n;
            } else if (ln->op_lo < first || ln->op_hi >= last) {
                return snprintf(err, (size_t)errcap, "ops [%d, %d) cut the launch of ops %d-%d in two", first, last, ln->op_lo, ln->op_hi), false;
            }
            if (!visit(ctx, l, gi, rows, err, errcap)) return false;
        }
        if (group_done) group_done(ctx, lo > first ? lo : first, hi < last ? hi : last);
    }
    return true;
}
