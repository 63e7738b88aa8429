/* runtime/cuda/cuda_attention.c — an attention op's work list on a device (cuda_attention.h):
 * cuBLASLt products and the kernels around them, in list order on one stream. Must not allocate
 * device memory or load modules. */
#include "cuda_attention.h"

#include <stdio.h>
#include <string.h>

#include "cuda_device.h"

static size_t esz(DType d) { return d == DT_F32 ? 4 : 2; }

static CuDevicePtr addr(const CudaAttOp *a, AttRef r) { return a->buf[r.buf] + (CuDevicePtr)r.off * esz(a->ag.type[r.buf]); }

static int kernel_slot(LibEntry e) { return e == LK_ATT_PARTIALS ? 0 : e == LK_ATT_ROWS ? 1 : 2; }

bool cuda_attention_prepare(CudaAttOp *a, const CudaLibs *L, CublasLtHandle h, const Op *op, const CuDevicePtr *ptr, CuDevicePtr scratch, char *err, int errcap) {
    const AttGemm *ag = &a->ag;
    for (int b = 0; b < AB_COUNT; b++) {
        int t = attention_gemm_tensor(op, (AttBuf)b);
        a->buf[b] = b >= AB_S ? scratch + (CuDevicePtr)ag->scratch_off[b] : t >= 0 ? ptr[t] : 0;
    }
    bool used[AG_ROLES] = {0};
    unsigned align[AG_ROLES][3];
    for (int r = 0; r < AG_ROLES; r++) align[r][0] = align[r][1] = align[r][2] = 16;
    /* one algorithm per role serves every slice: the worst alignment over their addresses and batches */
    for (int s = 0; s < ag->n_steps; s++) {
        const AttStep *st = &ag->steps[s];
        if (!st->gemm) continue;
        used[st->role] = true;
        const AttRef ops[3] = {st->a, st->b, st->d};
        for (int i = 0; i < 3; i++) {
            unsigned al = cublas_gemm_operand_alignment(&ag->gemm[st->role], i, addr(a, ops[i]));
            if (al < align[st->role][i]) align[st->role][i] = al;
        }
    }
    for (int r = 0; r < AG_ROLES; r++) {
        if (!used[r]) continue;
        cublas_gemm_destroy(&a->gemm[r], L);
        if (!cublas_gemm_describe(&a->gemm[r], L, &ag->gemm[r], err, errcap) ||
            !cublas_gemm_choose(&a->gemm[r], L, h, &ag->gemm[r], align[r][0], align[r][1], align[r][2], CUBLAS_GEMM_WORKSPACE, err, errcap)) {
            for (int q = 0; q < AG_ROLES; q++) cublas_gemm_destroy(&a->gemm[q], L);
            return false;
        }
    }
    a->chosen = true;
    return true;
}

bool cuda_attention_run(const CudaAttOp *a, const CudaLibs *L, CublasLtHandle h, CuDevicePtr ws, int sm_count, CuStream s, char *err, int errcap) {
    if (!a->chosen) return snprintf(err, (size_t)errcap, "attention through cuBLASLt was not prepared"), false;
    const AttGemm *ag = &a->ag;
    for (int i = 0; i < ag->n_steps; i++) {
        const AttStep *st = &ag->steps[i];
        if (st->gemm) {
            if (!cublas_gemm_run(&a->gemm[st->role], L, h, &ag->gemm[st->role], addr(a, st->a), addr(a, st->b), addr(a, st->d), ws,
                                 CUBLAS_GEMM_WORKSPACE, s, err, errcap))
                return false;
            continue;
        }
        YlArgs args = st->args;
        args.t[0] = (void *)(uintptr_t)addr(a, st->t0), args.t[1] = (void *)(uintptr_t)addr(a, st->t1);
        args.ws = (void *)(uintptr_t)a->buf[AB_PARTIALS];
        unsigned grid = lib_launch_grid(&args, sm_count);
        void *params[] = {&args};
        char doing[96];
        snprintf(doing, sizeof doing, "launching attention's %s kernel (%u blocks of %d)",
                 st->entry == LK_ATT_PARTIALS ? "softmax statistics" : st->entry == LK_ATT_ROWS ? "softmax" : "v copy", grid, LIB_BLOCK);
        if (!CUDA_CALL(L, cuLaunchKernel, (a->fn[kernel_slot(st->entry)], grid, 1, 1, LIB_BLOCK, 1, 1, 0, s, params, NULL), doing, err, errcap)) return false;
    }
    return true;
}

void cuda_attention_free(CudaAttOp *a, const CudaLibs *L) {
    for (int r = 0; r < AG_ROLES; r++) cublas_gemm_destroy(&a->gemm[r], L);
    attention_gemm_free(&a->ag);
    a->chosen = false;
}
