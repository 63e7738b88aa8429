/* runtime/train_step.c — binds a training plan's inputs and runs it. */
#include "train_step.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static int meta_int(const Plan *p, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->meta, key);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : -1;
}

bool train_step_init(TrainStep *ts, Plan *plan, char *err, int errcap) {
    memset(ts, 0, sizeof *ts);
    ts->plan = plan;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(plan->meta, "kind");
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "train") != 0) return snprintf(err, (size_t)errcap, "not a training plan"), false;
    struct { int *dst; const char *group, *key; int64_t numel; } binds[] = {
        {&ts->images, "inputs", "images", 0}, {&ts->boxes, "inputs", "boxes", 0}, {&ts->counts, "inputs", "counts", 0},
        {&ts->grad_seed, "inputs", "grad_seed", 1}, {&ts->lrs, "inputs", "lr", 3}, {&ts->momentum, "inputs", "momentum", 1},
        {&ts->opt_step, "inputs", "opt_step", 1}, {&ts->loss, "outputs", "loss", 1}, {&ts->items, "outputs", "items", 3},
        {&ts->grad_norm, "outputs", "grad_norm", 1},
    };
    for (size_t i = 0; i < sizeof binds / sizeof binds[0]; i++) {
        int t = plan_meta_tensor(plan, binds[i].group, binds[i].key);
        bool is_input = strcmp(binds[i].group, "inputs") == 0;
        if (t < 0 || (is_input && plan->g.tensors[t].kind != TK_INPUT) || (binds[i].numel && shape_numel(&plan->g.tensors[t].shape) != binds[i].numel))
            return snprintf(err, (size_t)errcap, "plan META: %s.%s does not name a suitable tensor", binds[i].group, binds[i].key), false;
        *binds[i].dst = t;
    }
    const Shape *img = &plan->g.tensors[ts->images].shape, *bx = &plan->g.tensors[ts->boxes].shape;
    if (img->nd != 4 || bx->nd != 3 || bx->d[2] != 5 || bx->d[0] != img->d[0] || plan->g.tensors[ts->counts].dtype != DT_I64 ||
        shape_numel(&plan->g.tensors[ts->counts].shape) != img->d[0])
        return snprintf(err, (size_t)errcap, "plan META: inputs have unexpected shapes"), false;
    ts->batch = (int)img->d[0];
    ts->imgsz = (int)img->d[2];
    ts->max_boxes = (int)bx->d[1];
    ts->nc = meta_int(plan, "nc");
    if (ts->nc < 1) return snprintf(err, (size_t)errcap, "plan META: bad nc"), false;
    if (plan->precision != PREC_FP32)
        return snprintf(err, (size_t)errcap, "a %s plan needs the CUDA target; the CPU runs fp32 plans (compile with --precision fp32)", precision_name(plan->precision)), false;
    if (!interp_init(&ts->it, &plan->g)) return snprintf(err, (size_t)errcap, "out of memory"), false;
    /* activations live where the memory plan put them */
    if (plan->offset && !interp_use_arena(&ts->it, plan->offset, plan->arena_bytes, false)) return snprintf(err, (size_t)errcap, "out of memory for the %lld-byte arena", (long long)plan->arena_bytes), false;
    for (int t = 0; t < plan->g.n_tensors; t++)
        if (plan->g.tensors[t].kind != TK_ACTIVATION && !interp_tensor(&ts->it, t)) return snprintf(err, (size_t)errcap, "out of memory"), false;
    return true;
}

float *train_step_images(TrainStep *ts) { return ts->it.buf[ts->images]; }
float *train_step_boxes(TrainStep *ts) { return ts->it.buf[ts->boxes]; }
int64_t *train_step_counts(TrainStep *ts) { return ts->it.buf[ts->counts]; }

bool train_step_run(TrainStep *ts, const double lr[3], double momentum, StepResult *out, char *err, int errcap) {
    float *lrs = ts->it.buf[ts->lrs];
    for (int i = 0; i < 3; i++) lrs[i] = (float)lr[i];
    *(float *)ts->it.buf[ts->momentum] = (float)momentum;
    *(float *)ts->it.buf[ts->grad_seed] = 1.0f;
    *(float *)ts->it.buf[ts->opt_step] = (float)(ts->step + 1);
    if (!interp_run(&ts->it, 0, ts->plan->g.n_ops, err, errcap)) return false;
    ts->step++;
    const float *items = ts->it.buf[ts->items];
    *out = (StepResult){items[0], items[1], items[2], *(const float *)ts->it.buf[ts->loss], *(const float *)ts->it.buf[ts->grad_norm]};
    return true;
}

void train_step_free(TrainStep *ts) { interp_free(&ts->it); }
