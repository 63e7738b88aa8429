/* runtime/cpu_fold.h — an eval-mode graph's conv-BN(-activation) groups run
 * on the CPU as one oneDNN convolution each: the BN folded into the conv's
 * weights and bias as Ultralytics' fuse_conv_and_bn does (its predictor and
 * standalone validator fuse a .pt model so), the activation as the conv's
 * post-op. Owns the folded weights; never changes the graph, and the
 * trainer's validation does not use it (Ultralytics validates unfused there). */
#ifndef YOLOCC_CPU_FOLD_H
#define YOLOCC_CPU_FOLD_H
#include <stdbool.h>
#include <stdint.h>

#include "../compiler/kernel_ir.h"
#include "../passes/fuse.h"

typedef struct FoldedConv {
    int conv, bn, act;        /* its ops (act -1: none) */
    int out;                  /* the tensor the group leaves: act's output, else BN's */
    int64_t w, b;             /* its weights and bias in CpuFold.weights */
} FoldedConv;

typedef struct CpuFold {
    int n;
    FoldedConv *fc;
    int *head;                /* per op: the fc index of the group whose conv it is, else -1 */
    bool *gone;               /* per op: a BN or activation its group's conv computes */
    float *weights;
    int64_t floats;
} CpuFold;

/* Per output channel of co, `per` weights each (b NULL: no bias), in fp32
 * as fuse_conv_and_bn computes it: r = sqrt(var + eps), s = gamma / r,
 * w' = s w, b' = s b + (beta - gamma mean / r). */
void bn_fold(const float *w, const float *b, int64_t co, int64_t per, const float *gamma, const float *beta, const float *mean, const float *var, double eps,
             float *wf, float *bf);

/* Which groups of g (fusion fu, views v, launches kp: NULL without generated
 * kernels) fold: conv + eval BN (+ SiLU, ReLU, LeakyReLU, Hardswish, GELU or
 * Sigmoid), whose conv output and BN output nothing else reads, with
 * NCHW input and output (packed or channel slices) and launches that carry
 * no other op; then their folded weights from the state in buf. A group
 * that does not qualify runs as before. */
bool cpu_fold_build(CpuFold *f, const Graph *g, const Fusion *fu, const Views *v, const KProgram *kp, void *const *buf, char *err, int errcap);
/* Runs the folded group fc[f->head[op]] on buf. */
bool cpu_fold_run(const CpuFold *f, const Graph *g, const Views *v, int op, void **buf, char *err, int errcap);
/* Whether every op of lo..hi is computed by a folded conv. */
bool cpu_fold_covers(const CpuFold *f, int lo, int hi);
void cpu_fold_free(CpuFold *f);

#endif
