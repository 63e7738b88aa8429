/* runtime/cuda/attention_gemm.c — the products, scratch and work list of attention through
 * cuBLASLt (attention_gemm.h). Pure: shapes, strides and offsets only; runtime/ref_attention.c
 * is the oracle of what the list computes. */
#include "attention_gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t align_up(int64_t x) { return (x + ATT_ALIGN - 1) / ATT_ALIGN * ATT_ALIGN; }

/* The operand (inputs, then outputs) behind buffer b: attention(qkv) -> o, v;
 * attention_bwd(d_o, d_v, qkv) -> d_qkv; -1 for the scratch and the forward's d_qkv. */
static int operand_of(const Op *op, AttBuf b) {
    static const int FWD[AB_COUNT] = {0, 1, 2, -1, -1, -1, -1}, BWD[AB_COUNT] = {2, 0, 1, 3, -1, -1, -1};
    return (op->kind == OP_ATTENTION_BWD ? BWD : FWD)[b];
}

int attention_gemm_tensor(const Op *op, AttBuf b) {
    int i = operand_of(op, b);
    return i < 0 ? -1 : lib_operand_tensor(op, i);
}

/* Where channel c, token t of a tensor lies relative to its image: steps between channels and between tokens. */
typedef struct Lay {
    int64_t chs, tks, bs;
    bool cl;
} Lay;

/* buffer b's operand as lib_launch_args gives it: its image stride and layout bit */
static Lay lay_of(const YlArgs *la, const Op *op, AttBuf b, int64_t channels, int64_t T) {
    int i = operand_of(op, b);
    long long bs = i < YL_MAX_OPERANDS ? la->bs[i] : la->bs3;
    return la->cl >> i & 1 ? (Lay){1, channels, bs, true} : (Lay){T, 1, bs, false};
}

/* The logical matrix (channel-like rows, token-like columns) of a tensor, or its transpose. */
static GemmView chan_tok(DType dt, Lay l) { return (GemmView){dt, l.chs, l.tks, l.bs}; }
static GemmView tok_chan(DType dt, Lay l) { return (GemmView){dt, l.tks, l.chs, l.bs}; }

typedef struct Geo {
    int64_t n, h, w, T, L, C, OC, chunks, rows;
    int heads, kd, hd, area;
    Lay qkv, o, v, dqkv;
} Geo;

static bool push(AttGemm *ag, int *cap, AttStep s) {
    if (ag->n_steps == *cap) {
        int c = *cap ? *cap * 2 : 32;
        AttStep *q = realloc(ag->steps, sizeof *q * (size_t)c);
        if (!q) return false;
        ag->steps = q, *cap = c;
    }
    ag->steps[ag->n_steps++] = s;
    return true;
}

static AttStep gemm_step(AttRole r, AttRef a, AttRef b, AttRef d) { return (AttStep){.gemm = true, .role = r, .a = a, .b = b, .d = d}; }

/* a kernel over one slice's rows: partials (all rows x chunks) or rows (every element) */
static AttStep softmax_step(const Geo *ge, LibEntry e, bool bwd) {
    AttStep s = {.entry = e, .t0 = {AB_S, 0}, .t1 = {AB_P, 0}};
    s.args.att_rows = ge->rows, s.args.att_len = ge->L, s.args.att_bwd = bwd;
    s.args.total = e == LK_ATT_PARTIALS ? ge->rows * ge->chunks : ge->rows * ge->L;
    return s;
}

static AttStep vcopy_step(const Geo *ge, const Op *op, bool bwd) {
    AttStep s = {.entry = LK_ATT_VCOPY, .t0 = {bwd ? AB_V : AB_QKV, 0}, .t1 = {bwd ? AB_DQKV : AB_V, 0}};
    YlArgs *a = &s.args;
    a->c = ge->C, a->h = ge->h, a->w = ge->w, a->heads = ge->heads, a->key_dim = ge->kd, a->head_dim = ge->hd, a->area = ge->area, a->scale = op->a.scale;
    a->att_bwd = bwd;
    /* operand 0 / 1: source and destination; the v-shaped one has OC channels */
    Lay src = bwd ? ge->v : ge->qkv, dst = bwd ? ge->dqkv : ge->v;
    a->bs[0] = src.bs, a->bs[1] = dst.bs;
    a->cl = src.cl | dst.cl << 1;
    a->total = ge->n * ge->OC * ge->T;
    return s;
}

bool attention_gemm_build(AttGemm *ag, const Graph *g, const Op *op, const YlArgs *la, const DType *dt, char *err, int errcap) {
    memset(ag, 0, sizeof *ag);
    if (op->kind != OP_ATTENTION && op->kind != OP_ATTENTION_BWD) return snprintf(err, (size_t)errcap, "op %d is no attention", op->id), false;
    bool bwd = ag->bwd = op->kind == OP_ATTENTION_BWD;
    const Shape *qs = &g->tensors[attention_gemm_tensor(op, AB_QKV)].shape;
    Geo ge = {.n = qs->d[0], .h = qs->d[2], .w = qs->d[3], .T = qs->d[2] * qs->d[3], .C = qs->d[1], .heads = op->a.heads, .kd = op->a.key_dim, .hd = op->a.head_dim, .area = op->a.area};
    ge.L = ge.T / ge.area, ge.OC = (int64_t)ge.heads * ge.hd;
    ge.chunks = (ge.L + ATT_CHUNK - 1) / ATT_CHUNK, ge.rows = ge.n * ge.L;
    ge.qkv = lay_of(la, op, AB_QKV, ge.C, ge.T), ge.o = lay_of(la, op, AB_O, ge.OC, ge.T), ge.v = lay_of(la, op, AB_V, ge.OC, ge.T);
    if (bwd) ge.dqkv = lay_of(la, op, AB_DQKV, ge.C, ge.T);
    for (int b = 0; b < AB_COUNT; b++) ag->type[b] = operand_of(op, (AttBuf)b) >= 0 ? dt[operand_of(op, (AttBuf)b)] : DT_F32;
    ag->type[AB_P] = ag->type[AB_QKV];

    const DType tq = ag->type[AB_QKV], tp = ag->type[AB_P], to = ag->type[AB_O];
    const int64_t L = ge.L, LL = L * L;
    const GemmView S_ij = {DT_F32, 1, L, LL}, P_ij = {tp, 1, L, LL}, P_ji = {tp, L, 1, LL};
    const float scale = (float)op->a.scale;
    char why[256];
    const char *failed = NULL;
#define MAKE(role, rows, cols, inner, A, B, D, alpha, beta)                                                                                                    \
    if (!failed && !gemm_desc_make(&ag->gemm[role], rows, cols, inner, ge.n, A, B, D, alpha, beta, why, sizeof why)) failed = #role;
    MAKE(AG_SCORES, L, L, ge.kd, tok_chan(tq, ge.qkv), chan_tok(tq, ge.qkv), S_ij, scale, 0.0f)
    if (!bwd) MAKE(AG_OUT, ge.hd, L, L, chan_tok(tq, ge.qkv), P_ji, chan_tok(to, ge.o), 1.0f, 0.0f)
    if (bwd) {
        const DType td = ag->type[AB_DQKV];
        MAKE(AG_DPROBS, L, L, ge.hd, tok_chan(to, ge.o), chan_tok(tq, ge.qkv), S_ij, 1.0f, 0.0f)
        MAKE(AG_DV, ge.hd, L, L, chan_tok(to, ge.o), P_ij, chan_tok(td, ge.dqkv), 1.0f, 1.0f)
        MAKE(AG_DQ, ge.kd, L, L, chan_tok(tq, ge.qkv), P_ji, chan_tok(td, ge.dqkv), scale, 0.0f)
        MAKE(AG_DK, ge.kd, L, L, chan_tok(tq, ge.qkv), P_ij, chan_tok(td, ge.dqkv), scale, 0.0f)
    }
#undef MAKE
    if (failed) return snprintf(err, (size_t)errcap, "op %d (%s): cuBLASLt cannot take %s: %s", op->id, op_def(op->kind)->name, failed, why), false;

    ag->scratch_off[AB_S] = 0;
    ag->scratch_off[AB_P] = align_up(ge.n * LL * 4);
    ag->scratch_off[AB_PARTIALS] = ag->scratch_off[AB_P] + align_up(ge.n * LL * (tp == DT_F32 ? 4 : 2));
    ag->scratch_bytes = ag->scratch_off[AB_PARTIALS] + align_up(2 * ge.chunks * ge.rows * 4);

    int cap = 0;
    bool ok = !bwd || push(ag, &cap, vcopy_step(&ge, op, true));
    const AttRef S = {AB_S, 0}, P = {AB_P, 0};
    for (int h = 0; h < ge.heads && ok; h++)
        for (int ar = 0; ar < ge.area && ok; ar++) {
            const int64_t t0 = ar * L, qc = (int64_t)h * (2 * ge.kd + ge.hd), kc = qc + ge.kd, vc = kc + ge.kd, oc = (int64_t)h * ge.hd;
            const AttRef q = {AB_QKV, qc * ge.qkv.chs + t0 * ge.qkv.tks}, k = {AB_QKV, kc * ge.qkv.chs + t0 * ge.qkv.tks},
                         vv = {AB_QKV, vc * ge.qkv.chs + t0 * ge.qkv.tks}, o = {AB_O, oc * ge.o.chs + t0 * ge.o.tks};
            ok = push(ag, &cap, gemm_step(AG_SCORES, q, k, S)) && push(ag, &cap, softmax_step(&ge, LK_ATT_PARTIALS, false)) &&
                 push(ag, &cap, softmax_step(&ge, LK_ATT_ROWS, false));
            if (!bwd) {
                ok = ok && push(ag, &cap, gemm_step(AG_OUT, vv, P, o));
                continue;
            }
            const AttRef dq = {AB_DQKV, qc * ge.dqkv.chs + t0 * ge.dqkv.tks}, dk = {AB_DQKV, kc * ge.dqkv.chs + t0 * ge.dqkv.tks},
                         dv = {AB_DQKV, vc * ge.dqkv.chs + t0 * ge.dqkv.tks};
            ok = ok && push(ag, &cap, gemm_step(AG_DPROBS, o, vv, S)) && push(ag, &cap, gemm_step(AG_DV, o, P, dv)) &&
                 push(ag, &cap, softmax_step(&ge, LK_ATT_PARTIALS, true)) && push(ag, &cap, softmax_step(&ge, LK_ATT_ROWS, true)) &&
                 push(ag, &cap, gemm_step(AG_DQ, k, P, dq)) && push(ag, &cap, gemm_step(AG_DK, q, P, dk));
        }
    ok = ok && (bwd || push(ag, &cap, vcopy_step(&ge, op, false)));
    if (!ok) {
        attention_gemm_free(ag);
        return snprintf(err, (size_t)errcap, "out of memory"), false;
    }
    return true;
}

void attention_gemm_free(AttGemm *ag) {
    free(ag->steps);
    ag->steps = NULL, ag->n_steps = 0;
}
