/* compiler/kernel_reuse.c — the C target's two-phase channel reductions
 * compute their costliest per-element value once (see kernel_reuse.h).
 * Rewrites a copy of one kernel's IR; must not touch the kernel it is given,
 * the lowering's sharing and names, or the CUDA rendering. */
#include "kernel_reuse.h"

#include <stdlib.h>
#include <string.h>

#include "kernel_build.h"

/* Why only C: the C skeleton runs both phases of a channel in one loop
 * nest on one thread, and stores every buffer in fp32, so an fp32-rounded
 * value parks exactly in the output element. The CUDA target's phases are
 * separate launches over bf16/fp16 storage. On a 2-core CPU the double
 * sigmoid is most of a BN-SiLU backward; reading the value back instead of
 * the two gradient inputs it came from moves as many bytes as before. */

/* One value: an instruction's kind and what it reads, by value number. */
typedef struct VKey {
    int op, a, b, c, d, buf, at;
    double imm;
} VKey;

typedef struct VTab {
    VKey *key;
    int n;
} VTab;

static bool same_key(const VKey *x, const VKey *y) {
    return x->op == y->op && x->a == y->a && x->b == y->b && x->c == y->c && x->d == y->d && x->buf == y->buf && x->at == y->at &&
           memcmp(&x->imm, &y->imm, sizeof x->imm) == 0;
}

static int value_number(VTab *t, const VKey *key) {
    for (int i = 0; i < t->n; i++)
        if (same_key(&t->key[i], key)) return i;
    t->key[t->n] = *key;
    return t->n++;
}

/* Numbers the values of section s so that two sections' equal numbers are
 * equal values: the same pure instruction over the same loads and
 * constants. A load of a buffer the kernel writes, a sum, a variable or an
 * effect gets -1 (its value may differ between the phases), and so does
 * whatever depends on one. */
static void number_section(const Kernel *k, KSection s, VTab *t, int *vn) {
    for (int r = 0; r < s.n; r++) {
        const KInstr *in = &k->code[s.first + r];
        VKey key;
        memset(&key, 0, sizeof key);
        key.op = in->op;
        bool ok = true;
        int ops[4], n = kb_reg_operands(in, ops), *field[4] = {&key.a, &key.b, &key.c, &key.d};
        switch (in->op) {
        case KI_LOAD:
            ok = !k->buf_written[in->buf];
            key.buf = in->buf, key.at = in->at;
            if (in->at == KA_FIXED) key.imm = in->imm;
            break;
        case KI_CONST: key.imm = in->imm; break;
        case KI_COUNT: break;
        case KI_NEG: case KI_EXP: case KI_SQRT: case KI_ERF: case KI_F32: case KI_SIGMOID: case KI_ADD: case KI_SUB: case KI_MUL: case KI_DIV: case KI_POW:
        case KI_SEL_GT: case KI_SEL_GE:
            for (int j = 0; j < n; j++) {
                *field[j] = vn[ops[j]];
                ok &= vn[ops[j]] >= 0;
            }
            break;
        default: ok = false;
        }
        vn[r] = ok ? value_number(t, &key) : -1;
    }
}

static bool costly(KInstrOp op) { return op == KI_EXP || op == KI_SIGMOID || op == KI_ERF || op == KI_POW; }

static int costly_count(const KInstr *code, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += costly(code[i].op);
    return c;
}

/* The one element store of section s: its register, or -1 when there is
 * none or more than one. */
static int element_store(const Kernel *k, KSection s) {
    int at = -1;
    for (int r = 0; r < s.n; r++) {
        const KInstr *in = &k->code[s.first + r];
        if (in->op != KI_STORE || in->at != KA_ELEM) continue;
        if (at >= 0) return -1;
        at = r;
    }
    return at;
}

/* Whether any instruction of the kernel other than instruction `except`
 * reads or writes slot buf. */
static bool slot_touched(const Kernel *k, int buf, int except) {
    for (int i = 0; i < k->n_code; i++)
        if (i != except && (k->code[i].op == KI_LOAD || k->code[i].op == KI_STORE || k->code[i].op == KI_INC_I64) && k->code[i].buf == buf) return true;
    return false;
}

typedef struct Choice {
    int r0, saved, dropped; /* the first phase's register; costly instructions and instructions spared */
    KInstr *body;           /* the second phase with its twin read back, compacted */
    int n;
} Choice;

/* The second phase with register r1 read back from slot buf, compacted into
 * c (its saving filled in); false when out of memory. */
static bool try_reuse(const Kernel *k, int buf, int r1, Choice *c) {
    const KSection s1 = k->body[1];
    KInstr *trial = malloc(sizeof(KInstr) * (size_t)s1.n), *out = malloc(sizeof(KInstr) * (size_t)s1.n);
    if (!trial || !out) {
        free(trial);
        free(out);
        return false;
    }
    memcpy(trial, k->code + s1.first, sizeof(KInstr) * (size_t)s1.n);
    trial[r1] = (KInstr){.op = KI_LOAD, .buf = buf, .at = KA_ELEM};
    c->n = kb_compact_section(trial, s1.n, out);
    c->body = out;
    c->saved = costly_count(k->code + s1.first, s1.n) - costly_count(out, c->n);
    c->dropped = s1.n - c->n;
    free(trial);
    return true;
}

static bool better(const Choice *x, const Choice *y) { return x->saved > y->saved || (x->saved == y->saved && x->dropped > y->dropped); }

bool kernel_reuse_phase_value(const Kernel *k, Kernel *out) {
    if (k->skel != KS_CHANNEL_REDUCE || k->n_phases != 2) return false;
    const KSection s0 = k->body[0], s1 = k->body[1];
    const int st = element_store(k, s1);
    if (st < 0 || s0.n == 0) return false;
    const int buf = k->code[s1.first + st].buf;
    /* the stored element is the kernel's alone: parked there, the value meets nothing else */
    if (k->buf_strided[buf] || slot_touched(k, buf, s1.first + st)) return false;
    VTab t = {malloc(sizeof(VKey) * (size_t)(s0.n + s1.n)), 0};
    int *vn0 = malloc(sizeof(int) * (size_t)s0.n), *vn1 = malloc(sizeof(int) * (size_t)s1.n);
    Choice best = {.r0 = -1};
    if (t.key && vn0 && vn1) {
        number_section(k, s0, &t, vn0);
        number_section(k, s1, &t, vn1);
        /* candidates: fp32 roundings before the store that the first phase
         * also computes and that vary within a channel (a per-channel value
         * is computed once a channel already) */
        bool *inv = calloc((size_t)s1.n + 1, sizeof(bool));
        if (inv) kernel_channel_invariant(k, s1, inv);
        for (int r1 = 0; inv && r1 < st; r1++) {
            if (k->code[s1.first + r1].op != KI_F32 || vn1[r1] < 0 || inv[r1]) continue;
            int r0 = -1;
            for (int r = 0; r < s0.n && r0 < 0; r++)
                if (vn0[r] == vn1[r1]) r0 = r;
            Choice c = {.r0 = r0};
            if (r0 < 0 || !try_reuse(k, buf, r1, &c)) continue;
            if (c.saved > 0 && (best.r0 < 0 || better(&c, &best))) {
                free(best.body);
                best = c;
            } else {
                free(c.body);
            }
        }
        free(inv);
    }
    free(t.key);
    free(vn0);
    free(vn1);
    if (best.r0 < 0) return false;
    /* the sections in order: body 0 and its store, finalize 0, the new body 1, finalize 1 */
    const KSection f0 = k->finalize[0], f1 = k->finalize[1];
    const int n = s0.n + 1 + f0.n + best.n + f1.n;
    KInstr *code = malloc(sizeof(KInstr) * (size_t)n);
    if (!code) {
        free(best.body);
        return false;
    }
    *out = *k;
    out->code = code;
    out->n_code = n;
    int at = 0;
    memcpy(code + at, k->code + s0.first, sizeof(KInstr) * (size_t)s0.n);
    code[at + s0.n] = (KInstr){.op = KI_STORE, .a = best.r0, .buf = buf, .at = KA_ELEM};
    out->body[0] = (KSection){at, s0.n + 1};
    at += s0.n + 1;
    memcpy(code + at, k->code + f0.first, sizeof(KInstr) * (size_t)f0.n);
    out->finalize[0] = (KSection){at, f0.n};
    at += f0.n;
    memcpy(code + at, best.body, sizeof(KInstr) * (size_t)best.n);
    out->body[1] = (KSection){at, best.n};
    at += best.n;
    memcpy(code + at, k->code + f1.first, sizeof(KInstr) * (size_t)f1.n);
    out->finalize[1] = (KSection){at, f1.n};
    free(best.body);
    return true;
}

void kernel_reuse_free(Kernel *k) {
    free(k->code);
    k->code = NULL;
    k->n_code = 0;
}
