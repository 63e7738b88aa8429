/* runtime/cuda/cuda_step_attention.c — which attention ops of a CudaStep run through cuBLASLt
 * (cuda_attention.h) and their set-up, workspace and launch; an op cuBLASLt cannot take keeps its
 * library kernels, counted and explained in the step's description. Owns the cuBLASLt handle;
 * must not allocate device memory (the step's workspace holds the scratch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../passes/views.h"
#include "cuda_step.h"

static void refuse(CudaStep *cs, const Op *op, const char *why) {
    /* the first reason, cut to the field: the description is one line */
    if (!cs->att_library++) snprintf(cs->att_why, sizeof cs->att_why, "op %d: %.*s", op->id, (int)sizeof cs->att_why - 24, why);
}

/* the loaded function of kernel e for an op of kind k whose operands are stored as dt, or NULL */
static CuFunction att_kernel(const CudaStep *cs, OpKind k, const DType *dt, LibEntry e) {
    DType kt[2];
    lib_att_gemm_types(k, dt, e, kt);
    int i = lib_program_find(&cs->kern.lp, e, 2, kt);
    return i >= 0 ? cs->kern.lib_fn[i] : NULL;
}

bool cuda_step_attention_open(CudaStep *cs, char *err, int errcap) {
    const Graph *g = &cs->plan->g;
    const char *knob = getenv("YOLOCC_CUDA_ATTENTION");
    const bool library = knob && strcmp(knob, "library") == 0;
    cs->att_of_op = malloc(sizeof(int) * ((size_t)g->n_ops + 1));
    if (!cs->att_of_op) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int o = 0; o < g->n_ops; o++) cs->att_of_op[o] = -1;
    int cap = 0;
    for (int l = 0; l < cs->kern.kp.n_launches; l++) {
        const KLaunch *ln = &cs->kern.kp.launches[l];
        const Op *op = &g->ops[ln->op_lo];
        if (ln->kernel >= 0 || (op->kind != OP_ATTENTION && op->kind != OP_ATTENTION_BWD) || cs->lib_host) continue;
        if (library) {
            refuse(cs, op, "YOLOCC_CUDA_ATTENTION=library");
            continue;
        }
        if (cs->n_att == cap) {
            cap = cap ? 2 * cap : 8;
            CudaAttOp *q = realloc(cs->att, sizeof *q * (size_t)cap);
            if (!q) return snprintf(err, (size_t)errcap, "out of memory"), false;
            cs->att = q;
        }
        CudaAttOp *a = &cs->att[cs->n_att];
        memset(a, 0, sizeof *a);
        DType dt[LIB_MAX_OPERANDS];
        for (int i = 0; i < op->n_in + op->n_out && i < LIB_MAX_OPERANDS; i++) dt[i] = (DType)cs->stype[lib_operand_tensor(op, i)];
        YlArgs la = lib_launch_args(g, &cs->plan->fusion.views, op);
        char why[256];
        if (!attention_gemm_build(&a->ag, g, op, &la, dt, why, sizeof why)) {
            refuse(cs, op, why);
            continue;
        }
        const LibEntry ent[3] = {LK_ATT_PARTIALS, LK_ATT_ROWS, LK_ATT_VCOPY};
        bool found = true;
        for (int e = 0; e < 3; e++) found = found && (a->fn[e] = att_kernel(cs, op->kind, dt, ent[e])) != NULL;
        if (!found) {
            attention_gemm_free(&a->ag);
            refuse(cs, op, "the plan has no kernels for attention's cuBLASLt route (recompile it)");
            continue;
        }
        cs->att_of_op[op->id] = cs->n_att++;
    }
    return true;
}

/* the cuBLASLt workspace sits after the op's scratch */
static int64_t gemm_ws_offset(const CudaAttOp *a) { return (a->ag.scratch_bytes + ATT_ALIGN - 1) / ATT_ALIGN * ATT_ALIGN; }

int64_t cuda_step_attention_workspace(const CudaStep *cs) {
    int64_t w = 0;
    for (int i = 0; i < cs->n_att; i++) {
        int64_t need = gemm_ws_offset(&cs->att[i]) + CUBLAS_GEMM_WORKSPACE;
        if (need > w) w = need;
    }
    return w;
}

bool cuda_step_blas_open(CudaStep *cs, char *err, int errcap) {
    if (cs->blas) return true;
    CublasStatus st = cs->dev.L.cublasLtCreate(&cs->blas);
    if (st == 0) return true;
    cs->blas = NULL;
    return snprintf(err, (size_t)errcap, "cublasLtCreate failed (cublasStatus %d) on %s", st, cs->dev.name), false;
}

bool cuda_step_attention_prepare(CudaStep *cs, char *err, int errcap) {
    if (!cs->n_att) return true;
    if (!cuda_step_blas_open(cs, err, errcap)) return false;
    const CudaLibs *L = &cs->dev.L;
    const Graph *g = &cs->plan->g;
    for (int o = 0; o < g->n_ops; o++) {
        int i = cs->att_of_op[o];
        if (i < 0) continue;
        CudaAttOp *a = &cs->att[i];
        char why[256];
        if (!cuda_attention_prepare(a, L, cs->blas, &g->ops[o], cs->ptr, cs->mem.workspace, why, sizeof why)) {
            refuse(cs, &g->ops[o], why);
            cs->att_of_op[o] = -1;
        }
    }
    return true;
}

bool cuda_step_attention_routed(const CudaStep *cs, int op) { return cs->att_of_op && cs->att_of_op[op] >= 0 && cs->att[cs->att_of_op[op]].chosen; }

bool cuda_step_attention_run(CudaStep *cs, int op, char *err, int errcap) {
    const CudaAttOp *a = &cs->att[cs->att_of_op[op]];
    return cuda_attention_run(a, &cs->dev.L, cs->blas, cs->mem.workspace + (CuDevicePtr)gemm_ws_offset(a), cs->dev.sm_count, cs->dev.main, err, errcap);
}

void cuda_step_attention_close(CudaStep *cs) {
    for (int i = 0; i < cs->n_att; i++) cuda_attention_free(&cs->att[i], &cs->dev.L);
    /* teardown: a failure leaves nothing to undo */
    if (cs->blas) (void)cs->dev.L.cublasLtDestroy(cs->blas);
    free(cs->att);
    free(cs->att_of_op);
    cs->att = NULL, cs->att_of_op = NULL, cs->n_att = 0, cs->blas = NULL;
}
