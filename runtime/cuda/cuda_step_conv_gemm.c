/* runtime/cuda/cuda_step_conv_gemm.c — which 1x1 convolutions of a CudaStep run as one cuBLASLt
 * product (conv_gemm.h) instead of through cuDNN: each candidate's algorithm chosen for its
 * addresses, then both routes timed on the device and the faster kept (YOLOCC_CUDA_CONV1X1
 * forces either). Owns the candidates' descriptors; must not allocate plan memory (the
 * product's workspace is the step's) or change how cuDNN runs a convolution. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "cuda_step.h"

enum { TIMED_RUNS = 3 };

bool cuda_step_conv_gemm_open(CudaStep *cs, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    const char *knob = getenv("YOLOCC_CUDA_CONV1X1");
    if (!knob || !*knob || strcmp(knob, "auto") == 0) cs->conv1x1_mode = CONV1X1_AUTO;
    else if (strcmp(knob, "cublaslt") == 0) cs->conv1x1_mode = CONV1X1_CUBLASLT;
    else if (strcmp(knob, "cudnn") == 0) cs->conv1x1_mode = CONV1X1_CUDNN;
    else return errf(err, errcap, "YOLOCC_CUDA_CONV1X1=%s: expected auto, cublaslt or cudnn", knob);
    cs->cgemm_of_op = malloc(sizeof(int) * ((size_t)g->n_ops + 1));
    cs->cgemm = calloc((size_t)g->n_ops + 1, sizeof *cs->cgemm);
    if (!cs->cgemm_of_op || !cs->cgemm) return errf(err, errcap, "out of memory");
    for (int o = 0; o < g->n_ops; o++) cs->cgemm_of_op[o] = -1;
    if (cs->conv1x1_mode == CONV1X1_CUDNN) return true;
    for (int l = 0; l < cs->kern.kp.n_launches; l++) {
        const KLaunch *ln = &cs->kern.kp.launches[l];
        const Op *op = &g->ops[ln->op_lo];
        /* a bias would be a second step; a convolution that is no single product stays in cuDNN */
        if (cuda_step_route(g, ln) != CUDA_ROUTE_CUDNN || (op->kind == OP_CONV2D && op->n_in > 2)) continue;
        ConvKey k;
        char why[256];
        CudaConvGemmOp *c = &cs->cgemm[cs->n_cgemm];
        if (!conv_key_from_op(g, op, cs->plan->precision, cs->conv.persistent, &cs->plan->fusion.views, &k, why, sizeof why) ||
            !conv_gemm_from_key(&k, &c->cg, why, sizeof why))
            continue;
        c->op = op->id;
        c->out_persistent = cs->conv.persistent[op->out[0]];
        cs->cgemm_of_op[op->id] = cs->n_cgemm++;
    }
    return true;
}

int64_t cuda_step_conv_gemm_workspace(const CudaStep *cs) { return cs->n_cgemm ? CUBLAS_GEMM_WORKSPACE : 0; }

/* the device address of convolution tensor which of op: weights read through their compute copies */
static CuDevicePtr operand(const CudaStep *cs, const Op *op, ConvGemmTensor which) {
    /* op order: conv2d (x, w) -> y; dgrad (dy, w) -> dx; wgrad (dy, x) -> dw */
    int t = op->kind == OP_CONV2D          ? (which == CG_X ? op->in[0] : which == CG_W ? op->in[1] : op->out[0])
            : op->kind == OP_CONV2D_DGRAD ? (which == CG_Y ? op->in[0] : which == CG_W ? op->in[1] : op->out[0])
                                          : (which == CG_Y ? op->in[0] : which == CG_X ? op->in[1] : op->out[0]);
    return t == op->out[0] ? cs->ptr[t] : cuda_mem_compute_ptr(&cs->mem, t);
}

static bool run_gemm(const CudaStep *cs, const CudaConvGemmOp *c, CuDevicePtr d, char *err, int errcap) {
    return cublas_gemm_run(&c->lt, &cs->dev.L, cs->blas, &c->cg.g, c->a, c->b, d, cs->mem.workspace, CUBLAS_GEMM_WORKSPACE, cs->dev.main, err, errcap);
}

static bool run_route(CudaStep *cs, const CudaConvGemmOp *c, bool gemm, CuDevicePtr d, char *err, int errcap) {
    return gemm ? run_gemm(cs, c, d, err, errcap) : cuda_step_run_conv(cs, &cs->plan->g.ops[c->op], d, err, errcap);
}

typedef struct RouteRun {
    CudaStep *cs;
    const CudaConvGemmOp *c;
    bool gemm;
    CuDevicePtr d;
} RouteRun;

static bool run_route_ctx(void *ctx, char *err, int errcap) {
    const RouteRun *r = ctx;
    return run_route(r->cs, r->c, r->gemm, r->d, err, errcap);
}

/* Milliseconds per run of one route of candidate c (gemm: the product, else cuDNN) as a step's
 * graph replays it. The output goes to d: the arena's outputs hold nothing yet, and the caller
 * redirects a persistent one (a weight gradient). */
static bool time_route(CudaStep *cs, CudaConvGemmOp *c, bool gemm, CuDevicePtr d, float *ms, char *err, int errcap) {
    char doing[128];
    snprintf(doing, sizeof doing, "timing op %d's %s", c->op, gemm ? "cuBLASLt product" : "cuDNN convolution");
    RouteRun r = {cs, c, gemm, d};
    return cuda_time_replays(&cs->dev, run_route_ctx, &r, TIMED_RUNS, doing, ms, err, errcap);
}

/* Describes and chooses each candidate's product for the bound addresses; under auto, times
 * both routes and keeps the faster. A candidate cuBLASLt has no algorithm for stays in cuDNN. */
bool cuda_step_conv_gemm_prepare(CudaStep *cs, char *err, int errcap) {
    if (!cs->n_cgemm) return true;
    if (!cuda_step_blas_open(cs, err, errcap)) return false;
    const CudaLibs *L = &cs->dev.L;
    const Graph *g = &cs->plan->g;
    int64_t scratch_bytes = 0;
    for (int i = 0; i < cs->n_cgemm; i++) {
        CudaConvGemmOp *c = &cs->cgemm[i];
        const Op *op = &g->ops[c->op];
        c->a = operand(cs, op, c->cg.a), c->b = operand(cs, op, c->cg.b), c->d = operand(cs, op, c->cg.d);
        const GemmDesc *gd = &c->cg.g;
        char why[384];
        if (!cublas_gemm_describe(&c->lt, L, gd, why, sizeof why) ||
            !cublas_gemm_choose(&c->lt, L, cs->blas, gd, cublas_gemm_operand_alignment(gd, 0, c->a), cublas_gemm_operand_alignment(gd, 1, c->b),
                                cublas_gemm_operand_alignment(gd, 2, c->d), CUBLAS_GEMM_WORKSPACE, why, sizeof why)) {
            if (!cs->cgemm_refused++) snprintf(cs->cgemm_why, sizeof cs->cgemm_why, "op %d: %.*s", c->op, (int)sizeof cs->cgemm_why - 24, why);
            cublas_gemm_destroy(&c->lt, L);
            continue;
        }
        const int64_t out_bytes = c->out_persistent ? memplan_tensor_bytes(g, op->out[0], true, cs->plan->precision) : 0;
        if (out_bytes > scratch_bytes) scratch_bytes = out_bytes;
        c->routed = cs->conv1x1_mode == CONV1X1_CUBLASLT;
    }
    if (cs->conv1x1_mode != CONV1X1_AUTO) return true;
    CuDevicePtr scratch = 0;
    bool ok = !scratch_bytes || CUDA_CALL(L, cuMemAlloc, (&scratch, (size_t)scratch_bytes), "allocating scratch for timing weight gradients", err, errcap);
    cs->conv_gemm_ms[0] = cs->conv_gemm_ms[1] = 0;
    for (int i = 0; ok && i < cs->n_cgemm; i++) {
        CudaConvGemmOp *c = &cs->cgemm[i];
        if (!c->lt.chosen) continue;
        const CuDevicePtr d = c->out_persistent ? scratch : c->d;
        ok = time_route(cs, c, false, d, &c->ms_cudnn, err, errcap) && time_route(cs, c, true, d, &c->ms_gemm, err, errcap);
        c->routed = c->ms_gemm < c->ms_cudnn;
        cs->conv_gemm_ms[0] += c->ms_cudnn;
        cs->conv_gemm_ms[1] += c->routed ? c->ms_gemm : c->ms_cudnn;
    }
    /* teardown of the timing: a failure leaves nothing to undo */
    if (scratch) (void)L->cuMemFree(scratch);
    return ok;
}

bool cuda_step_conv_gemm_routed(const CudaStep *cs, int op) { return cs->cgemm_of_op && cs->cgemm_of_op[op] >= 0 && cs->cgemm[cs->cgemm_of_op[op]].routed; }

bool cuda_step_conv_gemm_run(CudaStep *cs, int op, char *err, int errcap) {
    const CudaConvGemmOp *c = &cs->cgemm[cs->cgemm_of_op[op]];
    return run_gemm(cs, c, c->d, err, errcap);
}

void cuda_step_conv_gemm_close(CudaStep *cs) {
    for (int i = 0; i < cs->n_cgemm; i++) cublas_gemm_destroy(&cs->cgemm[i].lt, &cs->dev.L);
    free(cs->cgemm);
    free(cs->cgemm_of_op);
    cs->cgemm = NULL, cs->cgemm_of_op = NULL, cs->n_cgemm = 0;
}
