/* tests/test_step.h — compiles a plan with the CLI and runs two optimizer
 * steps of it on the CPU from fixed weights and one synthetic batch, for the
 * suites that compare two ways of running the same step (test_codegen.c:
 * generated code against the oracle; test_layout.c: NHWC against NCHW). */
#ifndef YOLOCC_TEST_STEP_H
#define YOLOCC_TEST_STEP_H
#include <math.h>

#include "../runtime/synthetic.h"
#include "../runtime/train_step.h"
#include "../runtime/weights.h"
#include "test_util.h"

/* Compiles `yolocc ARGS` into a fresh temp file (path: 22 bytes) and reads it. */
static inline void compile_and_read(const char *args, char *path, Plan *p) {
    snprintf(path, 22, "/tmp/yolocc-cg-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    char cmd[1024], err[512];
    snprintf(cmd, sizeof cmd, "%s -o %s", args, path);
    CliResult r = tu_run(cmd);
    cr_assert_eq(r.status, 0, "yolocc %s: %s", cmd, r.err);
    tu_free(&r);
    cr_assert(plan_read(path, p, err, sizeof err), "%s", err);
}

/* Two optimizer steps on one synthetic batch; gradients of the first step,
 * losses and every state value afterwards. */
typedef struct StepTrace {
    double loss[2];
    float *grads, *state;
    int64_t n_grads, n_state;
} StepTrace;

/* A step on the plan with fixed weights and batch. Library ops (convolutions,
 * loss, ...) run the oracle's kernels either way, so comparisons isolate the
 * generated code; dead arena bytes are poisoned. */
static inline void start_step(TrainStep *ts, Plan *p, bool generated, void (*tamper)(TrainStep *)) {
    char err[512];
    cr_assert(train_step_init(ts, p, err, sizeof err), "%s", err);
    train_step_set_fast(ts, false);
    cr_assert_null(ts->it.gen);
    if (generated) {
        cr_assert(ts->has_gen);
        interp_use_generated(&ts->it, &ts->gen);
    }
    ts->it.poison = true;
    if (tamper) tamper(ts);
    cr_assert(weights_init(&p->g, ts->it.buf, 7, err, sizeof err), "%s", err);
    synthetic_batch(3, ts->batch, ts->imgsz, ts->nc, ts->max_boxes, train_step_images(ts), train_step_boxes(ts), train_step_counts(ts));
}

static inline void run_two(Plan *p, bool generated, StepTrace *tr, void (*tamper)(TrainStep *)) {
    TrainStep ts;
    char err[512];
    start_step(&ts, p, generated, tamper);
    const Graph *g = &p->g;
    int n;
    const int *grads = train_step_grads(&ts, &n);
    tr->n_grads = tr->n_state = 0;
    for (int i = 0; i < n; i++) tr->n_grads += shape_numel(&g->tensors[grads[i]].shape);
    for (int i = 0; i < g->n_state; i++) tr->n_state += shape_numel(&g->tensors[g->state[i]].shape);
    tr->grads = malloc(sizeof(float) * (size_t)tr->n_grads);
    tr->state = malloc(sizeof(float) * (size_t)tr->n_state);
    const double lr[3] = {0.01, 0.01, 0.01};
    for (int s = 0; s < 2; s++) {
        StepResult out;
        double norm;
        cr_assert(train_step_backward(&ts, &out, err, sizeof err), "%s", err);
        tr->loss[s] = out.total;
        if (s == 0)
            for (int i = 0, k = 0; i < n; k += (int)shape_numel(&g->tensors[grads[i]].shape), i++)
                memcpy(tr->grads + k, ts.acc[i], sizeof(float) * (size_t)shape_numel(&g->tensors[grads[i]].shape));
        cr_assert(train_step_update(&ts, lr, 0.937, NULL, &norm, err, sizeof err), "%s", err);
    }
    float *w = tr->state;
    for (int i = 0; i < g->n_state; i++) {
        const Tensor *t = &g->tensors[g->state[i]];
        int64_t k = shape_numel(&t->shape);
        if (t->dtype == DT_I64) *w++ = (float)*(int64_t *)ts.it.buf[t->id];
        else memcpy(w, ts.it.buf[t->id], sizeof(float) * (size_t)k), w += k;
    }
    train_step_free(&ts);
}

static inline double worst_diff(const float *a, const float *b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-3));
    return worst;
}

static inline void free_trace(StepTrace *t) {
    free(t->grads);
    free(t->state);
}

#endif
