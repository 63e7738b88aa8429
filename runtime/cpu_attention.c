/* runtime/cpu_attention.c — fast fp32 multi-head attention for the CPU
 * interpreter: every product of ref_attention.c's formulas as an OpenBLAS
 * sgemm, tiles on the OpenMP threads. Must not touch ref_attention.c, the
 * oracle these match up to fp32 rounding. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_conv.h"

/* Forward tiles are (image, head, area, block of ROW_BLOCK queries): a
 * query's output needs only its own row of probabilities, so a single image
 * with one or two heads still spreads over the cores. Backward sums over
 * all queries for dk and dv, so its tiles are whole (image, head, area)
 * triples. Tiling depends on the shape alone, so the bits do not depend on
 * the thread count. Attention under PARALLEL_MIN_MACS stays on the calling
 * thread (cpu_conv.h). */
enum { ROW_BLOCK = 64 };

/* qkv [N, C, tokens] holds, per head, channels [q: kd | k: kd | v: hd];
 * tokens are row-major pixels cut into `area` contiguous runs of L. */
typedef struct Attn {
    int64_t n, tokens, L, qkv_c, out_c;
    int heads, kd, hd, area;
    float scale;
} Attn;

static Attn attn_of(const Shape *qkv, const OpAttrs *a) {
    int64_t t = qkv->d[2] * qkv->d[3];
    return (Attn){qkv->d[0], t, t / a->area, qkv->d[1], (int64_t)a->heads * a->head_dim, a->heads, a->key_dim, a->head_dim, a->area, (float)a->scale};
}

/* Offsets of one (image, head, area) triple's first q, k, v channel in qkv
 * and first channel in the [N, heads*hd, tokens] outputs. */
typedef struct Slot {
    int64_t q, k, v, o;
} Slot;

static Slot slot_of(const Attn *a, int64_t triple) {
    int64_t ar = triple % a->area, h = triple / a->area % a->heads, n = triple / a->area / a->heads;
    int64_t t0 = ar * a->L, qc = h * (2 * a->kd + a->hd);
    Slot s = {(n * a->qkv_c + qc) * a->tokens + t0, 0, 0, (n * a->out_c + h * a->hd) * a->tokens + t0};
    s.k = s.q + (int64_t)a->kd * a->tokens;
    s.v = s.k + (int64_t)a->kd * a->tokens;
    return s;
}

/* Row-wise softmax in place over rows x L, max-subtracted like the oracle. */
static void softmax_rows(float *p, int64_t rows, int64_t L) {
    for (int64_t i = 0; i < rows; i++, p += L) {
        float mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < L; j++) mx = fmaxf(mx, p[j]);
        for (int64_t j = 0; j < L; j++) sum += (p[j] = expf(p[j] - mx));
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < L; j++) p[j] *= inv;
    }
}

/* P[i0 + r][j] for r < rows: softmax_j(scale * q_i . k_j); S = scale Q^T K. */
static void attn_probs_rows(const Attn *a, const float *qkv, Slot s, int64_t i0, int64_t rows, float *P) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)a->L, a->kd, a->scale, qkv + s.q + i0, (int)a->tokens, qkv + s.k,
                (int)a->tokens, 0.0f, P, (int)a->L);
    softmax_rows(P, rows, a->L);
}

/* Multiply-adds of the forward; a macro because only the pragmas use it
 * (a build without OpenMP would warn of an unused function). */
#define ATTN_MACS(a) ((a).n * (a).heads * (a).area * (a).L * (a).L * (int64_t)((a).kd + (a).hd))

/* Every sgemm here is one tile on one thread of our OpenMP team. OpenBLAS's
 * own threads (its pthread build is Debian's default, and does not see the
 * team) would oversubscribe the cores, YOLO12n's attention backward took
 * 1.19 s instead of 0.05 s a step on 2 cores, and would split a product's
 * sums by their count, so the bits would follow the machine. Checked at
 * every op: anything in the process may have set it since. */
static void blas_on_one_thread(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

static bool out_of_memory(char *err, int errcap, int64_t floats) {
    snprintf(err, (size_t)errcap, "out of memory for %lld bytes of attention scratch", (long long)(floats * (int64_t)sizeof(float)));
    return false;
}

int64_t cpu_attention_scratch_floats(const Graph *g, const Op *op) {
    const Attn a = attn_of(SH(op->in[op->kind == OP_ATTENTION ? 0 : 2]), &op->a);
    return op->kind == OP_ATTENTION ? (int64_t)ROW_BLOCK * a.L : 2 * a.L * a.L;
}

/* attention(qkv) -> o, v: o[d][i] = sum_j v[d][j] P[i][j] (O = V P^T), and v copied out. */
REF_KERNEL(cpu_attention) {
    blas_on_one_thread();
    const Attn a = attn_of(SH(op->in[0]), &op->a);
    const float *qkv = T(0);
    float *o = O(0), *vout = O(1);
    const int64_t blocks = (a.L + ROW_BLOCK - 1) / ROW_BLOCK, tiles = a.n * a.heads * a.area * blocks, scratch = cpu_attention_scratch_floats(g, op);
    bool ok = true;
#pragma omp parallel if (ATTN_MACS(a) >= PARALLEL_MIN_MACS)
    {
        float *P = cpu_thread_scratch(scratch, &ok);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tiles; t++) {
            if (!P) continue;
            Slot s = slot_of(&a, t / blocks);
            int64_t i0 = t % blocks * ROW_BLOCK, rows = a.L - i0 < ROW_BLOCK ? a.L - i0 : ROW_BLOCK;
            attn_probs_rows(&a, qkv, s, i0, rows, P);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a.hd, (int)rows, (int)a.L, 1.0f, qkv + s.v, (int)a.tokens, P, (int)a.L, 0.0f,
                        o + s.o + i0, (int)a.tokens);
            for (int d = 0; d < a.hd; d++) memcpy(vout + s.o + (int64_t)d * a.tokens + i0, qkv + s.v + (int64_t)d * a.tokens + i0, (size_t)rows * sizeof(float));
        }
        free(P);
    }
    return ok || out_of_memory(err, errcap, scratch);
}

/* attention_bwd(d_o, d_v, qkv) -> d_qkv, the oracle's formulas as GEMMs:
 *   dV = dO P + d_v;  dP = dO^T V;  dS = P * (dP - rowsum(P * dP));
 *   dQ = scale K dS^T;  dK = scale Q dS */
REF_KERNEL(cpu_attention_bwd) {
    blas_on_one_thread();
    const Attn a = attn_of(SH(op->in[2]), &op->a);
    const float *dO = T(0), *dV = T(1), *qkv = T(2);
    float *dqkv = O(0);
    const int64_t triples = a.n * a.heads * a.area, scratch = cpu_attention_scratch_floats(g, op);
    const int tok = (int)a.tokens, L = (int)a.L;
    bool ok = true;
#pragma omp parallel if (3 * ATTN_MACS(a) >= PARALLEL_MIN_MACS)
    {
        float *P = cpu_thread_scratch(scratch, &ok), *dS = P ? P + a.L * a.L : NULL;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < triples; t++) {
            if (!P) continue;
            Slot s = slot_of(&a, t);
            attn_probs_rows(&a, qkv, s, 0, a.L, P);
            for (int d = 0; d < a.hd; d++)
                memcpy(dqkv + s.v + (int64_t)d * a.tokens, dV + s.o + (int64_t)d * a.tokens, (size_t)a.L * sizeof(float));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a.hd, L, L, 1.0f, dO + s.o, tok, P, L, 1.0f, dqkv + s.v, tok);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, L, a.hd, 1.0f, dO + s.o, tok, qkv + s.v, tok, 0.0f, dS, L);
            for (int64_t i = 0; i < a.L; i++) {
                const float *p = P + i * a.L;
                float *ds = dS + i * a.L, rowsum = 0;
                for (int64_t j = 0; j < a.L; j++) rowsum += p[j] * ds[j];
                for (int64_t j = 0; j < a.L; j++) ds[j] = p[j] * (ds[j] - rowsum);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a.kd, L, L, a.scale, qkv + s.k, tok, dS, L, 0.0f, dqkv + s.q, tok);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a.kd, L, L, a.scale, qkv + s.q, tok, dS, L, 0.0f, dqkv + s.k, tok);
        }
        free(P);
    }
    return ok || out_of_memory(err, errcap, scratch);
}
