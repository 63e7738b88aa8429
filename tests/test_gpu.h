/* tests/test_gpu.h — helpers of the CUDA suites (test_cuda.c,
 * test_cuda_step.c): compile the tiny model into a plan through the CLI, and
 * open device 0 or skip with the line every GPU test prints without one. */
#ifndef YOLOCC_TEST_GPU_H
#define YOLOCC_TEST_GPU_H
#include <math.h>

#include "../runtime/cuda/cuda_device.h"
#include "../runtime/plan_read.h"
#include "test_util.h"

/* Compiles `yolocc models/tiny.yaml EXTRA -o DIR/NAME` and reads the plan. */
static inline void tiny_plan(const char *dir, const char *name, const char *extra, Plan *p) {
    char args[1024], path[512], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(args, sizeof args, "models/tiny.yaml %s -o %s", extra, path);
    CliResult r = tu_run(args);
    cr_assert_eq(r.status, 0, "yolocc %s: %s", args, r.err);
    tu_free(&r);
    cr_assert(plan_read(path, p, err, sizeof err), "%s", err);
    unlink(path);
}

/* Opens device 0 (its primary context is the one CudaStep shares), or
 * prints `SKIP: no CUDA device` and skips the test. */
static inline void open_gpu_or_skip(CudaDevice *d) {
    CudaLibs L;
    char err[1024];
    int n = 0;
    bool have = cuda_libs_open(&L, NULL, false, err, sizeof err);
    if (have) {
        have = cuda_libs_check_device(&L, &n, err, sizeof err);
        cuda_libs_close(&L);
    }
    if (!have) {
        printf("SKIP: no CUDA device\n");
        fflush(stdout);
        cr_skip_test("no CUDA device: %s", err);
    }
    cr_assert(cuda_device_open(d, 0, false, err, sizeof err), "%s", err);
    cr_log_info("device 0: %s, sm_%d, %d multiprocessors", d->name, d->sm, d->sm_count);
}

/* |gpu - cpu| / max(|cpu|, 1e-3); NaN or infinity on one side only is
 * infinitely far */
static inline double rel_diff(double gpu, double cpu) {
    if (isnan(gpu) || isnan(cpu)) return isnan(gpu) && isnan(cpu) ? 0 : INFINITY;
    if (isinf(gpu) || isinf(cpu)) return gpu == cpu ? 0 : INFINITY;
    return fabs(gpu - cpu) / fmax(fabs(cpu), 1e-3);
}

#endif
