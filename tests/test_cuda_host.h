/* tests/test_cuda_host.h — a CudaStep over host memory for the CUDA suites
 * that test its logic without a GPU (test_cuda_step.c, test_cuda_step2.c):
 * the plan's layout in two host buffers, kernels lowered, handle tables
 * allocated. Each suite installs its own driver stand-ins (CudaLibs entry
 * points) and kernel handles, then calls cuda_step_census. */
#ifndef YOLOCC_TEST_CUDA_HOST_H
#define YOLOCC_TEST_CUDA_HOST_H
#include "../compiler/lib_kernels.h"
#include "../runtime/cuda/cuda_step.h"
#include "test_util.h"

typedef struct HostStep {
    CudaStep cs;
    unsigned char *arena, *persistent;
} HostStep;

static inline void host_step_setup(HostStep *h, const Plan *p) {
    char err[512];
    memset(h, 0, sizeof *h);
    CudaStep *cs = &h->cs;
    cs->plan = p;
    cr_assert(cuda_layout_build(p, &cs->mem.layout, err, sizeof err), "%s", err);
    h->arena = calloc((size_t)cs->mem.layout.arena_bytes + 1, 1);
    h->persistent = calloc((size_t)cs->mem.layout.persistent_bytes + 1, 1);
    cs->mem.arena = (CuDevicePtr)(uintptr_t)h->arena, cs->mem.persistent = (CuDevicePtr)(uintptr_t)h->persistent;
    cs->mem.state = cs->mem.persistent + (CuDevicePtr)cs->mem.layout.input_bytes;
    cs->ptr = cuda_mem_pointers(&cs->mem);
    bool *persistent = calloc((size_t)p->g.n_tensors, sizeof *persistent);
    memplan_mark_persistent(&p->g, persistent);
    cs->stype = calloc((size_t)p->g.n_tensors, 1);
    cs->dirty = calloc((size_t)p->g.n_tensors, sizeof *cs->dirty);
    for (int t = 0; t < p->g.n_tensors; t++) cs->stype[t] = (unsigned char)memplan_storage_dtype(&p->g, t, persistent[t], p->precision);
    free(persistent);
    cr_assert(kernel_lower(&p->g, &p->fusion, p->precision, &cs->kern.kp, err, sizeof err), "%s", err);
    cr_assert(lib_program_build(&p->g, p->precision, &cs->kern.kp, &cs->kern.lp, err, sizeof err), "%s", err);
    cs->dev.sm_count = cs->kern.sm_count = 2;
    /* launches reach the stand-in by their (empty) handles; the list tables and reductions' part are never read */
    cs->kern.fn = calloc((size_t)cs->kern.kp.n_kernels + 1, sizeof *cs->kern.fn);
    cs->kern.list = cs->kern.list_len = cs->kern.part = 0x1000;
    cs->kern.lib_fn = calloc((size_t)cs->kern.lp.n_kernels + 1, sizeof *cs->kern.lib_fn);
}

static inline void host_step_close(HostStep *h) {
    kernel_program_free(&h->cs.kern.kp);
    lib_program_free(&h->cs.kern.lp);
    free(h->cs.kern.fn);
    free(h->cs.kern.lib_fn);
    cuda_layout_free(&h->cs.mem.layout);
    free(h->arena);
    free(h->persistent);
    cuda_step_close(&h->cs); /* frees the per-tensor tables and graphs; nothing of it was opened */
}

#endif
