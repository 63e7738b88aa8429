/* runtime/train/bench_step.h — `yolort bench`: times training steps of one plan on one synthetic
 * batch (CPU plans through TrainStep, CUDA plans through CudaStep) and reports the median step, images/s
 * and peak memory. Must not touch what a step computes, the plan format, or exit codes (yolort_main.c). */
#ifndef YOLOCC_BENCH_STEP_H
#define YOLOCC_BENCH_STEP_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct BenchOptions {
    int steps;          /* timed steps (20) */
    int warmup;         /* untimed steps before them (3): first-touch allocations, cuDNN and cache warm-up */
    uint64_t seed;      /* weights_init and synthetic_batch (0) */
    double lr, momentum;/* SGD hyper-parameters, as `yolort train --synthetic` (0.01, 0.937) */
    double max_seconds; /* < 0 (-1): time all `steps`; else stop timing once the timed steps took this
                         * long (after at least one), so slow plans fit a fixed budget */
    int profile;        /* > 0 runs one more step with every launch timed (CUDA: events; CPU: the
                         * host clock) and keeps the heaviest `profile` rows of it in
                         * BenchResult.profile (0) */
} BenchOptions;

typedef struct BenchResult {
    char target[8];         /* "cpu" or "cuda" */
    char device[256];       /* the GPU's name, or the CPU's model and core count */
    char precision[8];
    int batch, imgsz, warmup;
    int steps;              /* timed steps run: BenchOptions.steps, or fewer under max_seconds */
    double median_ms, min_ms, max_ms;
    double images_per_s;    /* batch / median step */
    int64_t peak_bytes;     /* see peak_kind */
    const char *peak_kind;  /* what peak_bytes measures (static text) */
    int64_t plan_device_bytes;  /* CUDA: arena + persistent + workspace CudaStep allocated; -1 for CPU plans */
    int host_ops;           /* CUDA: library ops run on the host each step; -1 for CPU plans */
    char host_line[1536];   /* CUDA: cuda_step_describe's line; "" for CPU plans */
    double loss;            /* box + cls + dfl of the last step: a NaN here means the numbers are of a broken step */
    char profile[16384];    /* with BenchOptions.profile: step_profile_format's lines; else "" */
    double setup_s;         /* opening the step before step 0 (CUDA: kernels loaded, cuDNN plans built, engines timed, memory allocated) */
} BenchResult;

BenchOptions bench_defaults(void);

/* Reads the plan at path and runs warmup + steps training steps of it on one
 * synthetic batch from freshly initialised weights. A CPU plan (META target
 * "cpu" or none) runs through TrainStep with the fast kernels; its memory
 * figure is the process's peak resident set (getrusage). A CUDA plan runs on
 * device 0 through CudaStep; each step is timed on the host from its first
 * input upload to the end of cuda_step_run, which waits for the device, so a
 * step's time is all of its device work and host fallbacks. Its memory
 * figure is the drop in the device's free memory (cuMemGetInfo) from before
 * cuda_step_open to its lowest after any step. False with one line in err
 * (for a CUDA plan without a device: the loader's or driver's message). */
bool bench_plan(const char *path, const BenchOptions *o, BenchResult *r, char *err, int errcap);

/* The median of v[0..n) (the mean of the middle two for even n); sorts v. n >= 1. */
double bench_median(double *v, int n);

/* One JSON object on one line: plan, target, device, batch, imgsz,
 * precision, steps, warmup, median_ms, min_ms, max_ms, images_per_s,
 * peak_bytes, peak_kind, plan_device_bytes, host_ops, host_line, loss,
 * setup_s (null where a CPU plan has no such figure, or the loss is not finite). */
void bench_print_json(FILE *f, const char *plan, const BenchResult *r);
/* The same for people, a few lines. */
void bench_print_text(FILE *f, const char *plan, const BenchResult *r);

#endif
