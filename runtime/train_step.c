/* runtime/train_step.c — binds a training plan's inputs and runs it. */
#include "train_step.h"

#include "cpu_conv.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target.h"
#include "../passes/optimizer.h"
#include "cuda/cuda_step.h"
#include "train_step_cuda.h"

static int meta_int(const Plan *p, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->meta, key);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : -1;
}

/* The clip op and the updates after it, and a host accumulator per gradient. */
static bool find_optimizer(TrainStep *ts, char *err, int errcap) {
    const Graph *g = &ts->plan->g;
    ts->clip_op = -1;
    for (int o = 0; o < g->n_ops && ts->clip_op < 0; o++)
        if (g->ops[o].kind == OP_GRAD_CLIP) ts->clip_op = o;
    if (ts->clip_op < 0) return snprintf(err, (size_t)errcap, "plan has no optimizer step"), false;
    for (int o = ts->clip_op + 1; o < g->n_ops; o++) {
        OpKind k = g->ops[o].kind;
        if (k != OP_SGD_STEP && k != OP_ADAMW_STEP) return snprintf(err, (size_t)errcap, "plan: op %d (%s) follows the optimizer's clip", o, op_def(k)->name), false;
    }
    int n;
    const int *grads = train_step_grads(ts, &n);
    if (!(ts->acc = calloc((size_t)n, sizeof(float *))) || !(ts->grad_param = malloc(sizeof(int) * ((size_t)n + 1)))) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int i = 0; i < n; i++) {
        ts->grad_param[i] = -1;
        for (int o = ts->clip_op + 1; o < g->n_ops; o++)
            if (g->ops[o].in[1] == grads[i]) ts->grad_param[i] = ts->grad_param[i] < 0 ? g->ops[o].in[0] : -2;
        if (ts->grad_param[i] < 0) return snprintf(err, (size_t)errcap, "plan: gradient %%%d has %s update op", grads[i], ts->grad_param[i] == -1 ? "no" : "more than one"), false;
    }
    for (int i = 0; i < n; i++)
        if (!(ts->acc[i] = calloc((size_t)shape_numel(&g->tensors[grads[i]].shape), sizeof(float)))) return snprintf(err, (size_t)errcap, "out of memory"), false;
    return true;
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
    if (!target_prepare(plan->meta, err, errcap)) return false;
    if (!interp_init(&ts->it, &plan->g)) return snprintf(err, (size_t)errcap, "out of memory"), false;
    if (!find_optimizer(ts, err, errcap)) return false;
    if (plan_targets_cuda(plan)) return train_step_cuda_open(ts, err, errcap);
    if (plan->precision != PREC_FP32)
        return snprintf(err, (size_t)errcap, "a %s plan needs the CUDA target; the CPU runs fp32 plans (compile with --precision fp32)", precision_name(plan->precision)), false;
    /* activations live where the memory plan put them */
    if (plan->offset && (!interp_use_arena(&ts->it, plan->offset, plan->arena_bytes, false) || !interp_use_groups(&ts->it, &plan->fusion))) return snprintf(err, (size_t)errcap, "out of memory for the %lld-byte arena", (long long)plan->arena_bytes), false;
    for (int t = 0; t < plan->g.n_tensors; t++)
        if (plan->g.tensors[t].kind != TK_ACTIVATION && !interp_tensor(&ts->it, t)) return snprintf(err, (size_t)errcap, "out of memory"), false;
    if (plan->kernels) {
        char why[400];
        if (!gen_cpu_open(&ts->gen, plan, why, sizeof why)) return snprintf(err, (size_t)errcap, "generated kernels: %s", why), false;
        ts->has_gen = true;
        interp_use_generated(&ts->it, &ts->gen);
    }
    return true;
}

const int *train_step_grads(const TrainStep *ts, int *n) {
    const Op *clip = &ts->plan->g.ops[ts->clip_op];
    *n = clip->n_in;
    return clip->in;
}

float *train_step_images(TrainStep *ts) { return ts->it.buf[ts->images]; }
float *train_step_boxes(TrainStep *ts) { return ts->it.buf[ts->boxes]; }
int64_t *train_step_counts(TrainStep *ts) { return ts->it.buf[ts->counts]; }

bool train_step_set_fast(TrainStep *ts, bool fast) {
    bool was = ts->it.fast;
    ts->it.fast = fast;
    interp_use_generated(&ts->it, fast && ts->has_gen ? &ts->gen : NULL);
    return was;
}

static void bind_hyper(TrainStep *ts, const double lr[3], double momentum) {
    float *lrs = ts->it.buf[ts->lrs];
    for (int i = 0; i < 3; i++) lrs[i] = (float)lr[i];
    *(float *)ts->it.buf[ts->momentum] = (float)momentum;
    *(float *)ts->it.buf[ts->opt_step] = (float)(ts->step + 1);
}

static void read_items(TrainStep *ts, StepResult *out) {
    const float *items = ts->it.buf[ts->items];
    *out = (StepResult){items[0], items[1], items[2], *(const float *)ts->it.buf[ts->loss], 0};
}

bool train_step_run(TrainStep *ts, const double lr[3], double momentum, StepResult *out, char *err, int errcap) {
    if (ts->reduce_grads) return snprintf(err, (size_t)errcap, "data-parallel steps go through train_step_backward and train_step_update"), false;
    if (ts->cuda) {
        double norm;
        if (!train_step_cuda_backward(ts, out, err, errcap) || !train_step_cuda_update(ts, lr, momentum, NULL, &norm, err, errcap)) return false;
        out->grad_norm = norm;
        return true;
    }
    bind_hyper(ts, lr, momentum);
    *(float *)ts->it.buf[ts->grad_seed] = 1.0f;
    if (!interp_run(&ts->it, 0, ts->plan->g.n_ops, err, errcap)) return false;
    ts->step++;
    read_items(ts, out);
    out->grad_norm = *(const float *)ts->it.buf[ts->grad_norm];
    return true;
}

bool train_step_backward(TrainStep *ts, StepResult *out, char *err, int errcap) {
    if (ts->cuda) return train_step_cuda_backward(ts, out, err, errcap);
    int n;
    const int *grads = train_step_grads(ts, &n);
    *(float *)ts->it.buf[ts->grad_seed] = 1.0f;
    if (!interp_run(&ts->it, 0, ts->clip_op, err, errcap)) return false;
    for (int i = 0; i < n; i++) {
        const float *gr = ts->it.buf[grads[i]];
        int64_t m = shape_numel(&ts->plan->g.tensors[grads[i]].shape);
        for (int64_t k = 0; k < m; k++) ts->acc[i][k] += gr[k];
    }
    ts->n_acc_batches++;
    read_items(ts, out);
    return true;
}

bool train_step_update(TrainStep *ts, const double lr[3], double momentum, const bool *skip, double *grad_norm, char *err, int errcap) {
    if (ts->n_acc_batches == 0) return snprintf(err, (size_t)errcap, "no accumulated gradients to apply"), false;
    if (ts->cuda) return train_step_cuda_update(ts, lr, momentum, skip, grad_norm, err, errcap);
    if (ts->reduce_grads && !ts->reduce_grads(ts->reduce_ctx, ts, err, errcap)) return false; /* data parallelism */
    const Graph *g = &ts->plan->g;
    int n;
    const int *grads = train_step_grads(ts, &n);
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)shape_numel(&g->tensors[grads[i]].shape) * sizeof(float);
        if (skip && skip[ts->grad_param[i]]) memset(ts->acc[i], 0, bytes);
        memcpy(ts->it.buf[grads[i]], ts->acc[i], bytes);
        memset(ts->acc[i], 0, bytes);
    }
    ts->n_acc_batches = 0;
    bind_hyper(ts, lr, momentum);
    if (!interp_run(&ts->it, ts->clip_op, ts->clip_op + 1, err, errcap)) return false;
    for (int o = ts->clip_op + 1, end; optimizer_next_run(g, skip, &o, g->n_ops, &end); o = end)
        if (!interp_run(&ts->it, o, end, err, errcap)) return false;
    ts->step++;
    if (grad_norm) *grad_norm = *(const float *)ts->it.buf[ts->grad_norm];
    return true;
}

bool train_step_sync_host(TrainStep *ts, bool optimizer, char *err, int errcap) {
    return !ts->cuda || train_step_cuda_sync_host(ts, optimizer, err, errcap);
}

void train_step_host_changed(TrainStep *ts) { ts->device_stale = ts->cuda != NULL; }

bool train_step_sync_device(TrainStep *ts, char *err, int errcap) { return !ts->cuda || train_step_cuda_sync_device(ts, err, errcap); }

int64_t train_step_device_bytes(const TrainStep *ts) { return ts->cuda ? cuda_step_device_bytes(ts->cuda) : 0; }

int64_t train_step_host_bytes(const TrainStep *ts) {
    int n;
    const int *grads = train_step_grads(ts, &n);
    int64_t b = interp_host_bytes(&ts->it);
    for (int i = 0; ts->acc && i < n; i++)
        if (ts->acc[i]) b += interp_tensor_bytes(&ts->plan->g.tensors[grads[i]]);
    return b;
}

void train_step_free(TrainStep *ts) {
    train_step_cuda_close(ts);
    if (ts->acc) {
        int n;
        train_step_grads(ts, &n);
        for (int i = 0; i < n; i++) free(ts->acc[i]);
        free(ts->acc);
        ts->acc = NULL;
    }
    free(ts->grad_param);
    ts->grad_param = NULL;
    interp_free(&ts->it);
    if (ts->has_gen) gen_cpu_close(&ts->gen);
    ts->has_gen = false;
}
