/* compiler/train_compile.c — the training-step pipeline and its META. */
#include "train_compile.h"

#include "recompute_budget.h"
#include "../passes/views.h"
#include "kernel_ir.h"
#include "lib_kernels.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef YOLOCC_VERSION
#define YOLOCC_VERSION "0.1.0"
#endif

static char *meta_json(const ModelConfig *cfg, const TrainOptions *o, const TrainCompiled *tc) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    cJSON_AddStringToObject(m, "format", "yolocc-plan");
    cJSON_AddStringToObject(m, "yolocc_version", YOLOCC_VERSION);
    cJSON_AddStringToObject(m, "kind", "train");
    cJSON_AddStringToObject(m, "model", cfg->name);
    cJSON_AddStringToObject(m, "file", cfg->path);
    cJSON_AddStringToObject(m, "scale", cfg->scale);
    cJSON_AddStringToObject(m, "model_yaml", cfg->source);
    cJSON_AddNumberToObject(m, "nc", (double)cfg->nc);
    cJSON_AddNumberToObject(m, "ch", cfg->ch);
    cJSON_AddNumberToObject(m, "reg_max", cfg->reg_max);
    cJSON_AddNumberToObject(m, "imgsz", tc->s.imgsz);
    cJSON_AddNumberToObject(m, "batch", o->batch);
    cJSON_AddNumberToObject(m, "max_boxes", o->max_boxes);
    cJSON_AddStringToObject(m, "target", codegen_target_name(o->target));
    cJSON_AddStringToObject(m, "precision", precision_name(o->precision));
    cJSON_AddStringToObject(m, "layout", o->channels_last ? "nhwc" : "nchw");
    cJSON_AddStringToObject(m, "optimizer", o->optimizer == OPT_SGD ? "SGD" : "AdamW");
    cJSON_AddStringToObject(m, "optimizer_from", o->optimizer_given ? "--optimizer" : "default");
    cJSON_AddStringToObject(m, "fuse", fuse_policy_name(o->fuse));
    cJSON_AddStringToObject(m, "recompute", o->recompute_budget > 0 ? "budget" : o->recompute == RECOMPUTE_POINTWISE ? "pointwise" : "none");
    cJSON_AddNumberToObject(m, "recompute_budget", (double)o->recompute_budget);
    cJSON_AddNumberToObject(m, "recompute_convs", tc->recompute_convs);
    cJSON_AddNumberToObject(m, "weight_decay", o->weight_decay * o->batch * train_world_size(o) * tc->accumulate / 64.0);
    cJSON_AddNumberToObject(m, "world_size", train_world_size(o));
    cJSON_AddNumberToObject(m, "weight_decay_hyp", o->weight_decay);
    cJSON_AddNumberToObject(m, "nbs", 64);
    double gains[3];
    train_loss_gains(o, gains);
    cJSON *lg = cJSON_AddObjectToObject(m, "loss_gains");
    cJSON_AddNumberToObject(lg, "box", gains[0]);
    cJSON_AddNumberToObject(lg, "cls", gains[1]);
    cJSON_AddNumberToObject(lg, "dfl", gains[2]);
    cJSON_AddNumberToObject(m, "accumulate", tc->accumulate);
    cJSON_AddNumberToObject(m, "val_batch", tc->val_batch);
    cJSON_AddNumberToObject(m, "parameters", (double)tc->s.parameters);
    cJSON_AddNumberToObject(m, "gradients", (double)tc->s.gradients);
    cJSON_AddNumberToObject(m, "gflops", tc->s.gflops);
    cJSON *st = cJSON_AddArrayToObject(m, "strides");
    for (int i = 0; st && i < tc->s.nstrides; i++) cJSON_AddItemToArray(st, cJSON_CreateNumber(tc->s.strides[i]));
    cJSON *in = cJSON_AddObjectToObject(m, "inputs");
    cJSON_AddNumberToObject(in, "images", tc->tg.images);
    cJSON_AddNumberToObject(in, "boxes", tc->tg.boxes);
    cJSON_AddNumberToObject(in, "counts", tc->tg.counts);
    cJSON_AddNumberToObject(in, "grad_seed", tc->tg.grad_seed);
    cJSON_AddNumberToObject(in, "lr", tc->og.lrs);
    cJSON_AddNumberToObject(in, "momentum", tc->og.momentum);
    cJSON_AddNumberToObject(in, "opt_step", tc->og.step);
    cJSON *out = cJSON_AddObjectToObject(m, "outputs");
    cJSON_AddNumberToObject(out, "loss", tc->tg.loss);
    cJSON_AddNumberToObject(out, "items", tc->tg.items);
    cJSON_AddNumberToObject(out, "grad_norm", tc->og.grad_norm);
    cJSON_AddNumberToObject(m, "forward_ops", tc->tg.n_forward_ops);
    cJSON *mem = cJSON_AddObjectToObject(m, "memory");
    cJSON_AddNumberToObject(mem, "arena_bytes", (double)tc->mp.arena_bytes);
    cJSON_AddNumberToObject(mem, "lower_bound_bytes", (double)tc->mp.lower_bound_bytes);
    cJSON_AddNumberToObject(mem, "naive_bytes", (double)tc->mp.naive_bytes);
    cJSON_AddNumberToObject(mem, "persistent_bytes", (double)tc->mp.persistent_bytes);
    cJSON_AddNumberToObject(mem, "input_bytes", (double)tc->mp.input_bytes);
    cJSON_AddNumberToObject(mem, "saved_activation_bytes", (double)tc->mp.saved_activation_bytes);
    cJSON_AddNumberToObject(mem, "recompute_flops", tc->tg.recompute_flops);
    cJSON_AddNumberToObject(mem, "step_flops", tc->mp.step_flops);
    char *txt = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return txt;
}

/* One training step with the given extra conv recompute set (NULL: none):
 * model, loss and backward, optimizer, memory plan (placed or bound only). */
static bool build_step(Arena *a, const ModelConfig *cfg, const TrainOptions *o, const bool *convs, bool place, TrainCompiled *tc, Diag *d) {
    if (!model_compile(a, cfg, o->imgsz, o->batch, o->channels_last, &tc->m, &tc->s, d)) return false;
    Graph *g = &tc->m.g;
    LossSpec ls = {.nc = (int)cfg->nc, .reg_max = cfg->reg_max, .max_boxes = o->max_boxes, .nlevels = tc->s.nstrides, .topk = 10, .end2end = tc->end2end,
                   .recompute = o->recompute_budget > 0 ? RECOMPUTE_POINTWISE : o->recompute, .recompute_conv = convs,
                   .twins_per_rule = o->recompute_budget > 0};
    memcpy(ls.strides, tc->s.strides, sizeof ls.strides);
    train_loss_gains(o, ls.gains);
    OptimSpec os = {.kind = o->optimizer, .weight_decay = o->weight_decay, .max_norm = 10, .nesterov = true};
    char err[256];
    if (!autodiff_build(g, &ls, &tc->tg) || !optimizer_build(g, &tc->tg, &os, &tc->og))
        return diag_error(d, (Mark){0, 0}, "building the training step: %s", g->err);
    if (!graph_verify(g, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "internal error: training graph fails verification: %s", err);
    int loss_op = g->tensors[tc->tg.loss].producer;
    if (!fuse_build(g, o->fuse, a, &tc->fu, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "fusion: %s", err);
    if (o->fuse == FUSE_FULL && !views_build(g, &tc->fu, o->precision, kernel_op_strided_rows, a, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "zero-copy views: %s", err);
    if (!memplan_build(g, loss_op, &tc->fu, o->precision, place, a, &tc->mp, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "memory plan: %s", err);
    return true;
}

typedef struct StepCtx {
    Arena *a;
    const ModelConfig *cfg;
    const TrainOptions *o;
    TrainCompiled *tc;
    Diag *d;
} StepCtx;

static bool build_step_cb(void *ctx, const bool *convs, bool place) {
    StepCtx *c = ctx;
    return build_step(c->a, c->cfg, c->o, convs, place, c->tc, c->d);
}

static bool fit_budget(Arena *a, const ModelConfig *cfg, const TrainOptions *o, TrainCompiled *tc, Diag *d) {
    StepCtx ctx = {a, cfg, o, tc, d};
    BudgetResult r;
    /* the first build tells the head's level count */
    if (!build_step(a, cfg, o, NULL, false, tc, d)) return false;
    bool ok = recompute_fit_budget(a, o->recompute_budget, build_step_cb, &ctx, &tc->m.g, &tc->tg, &tc->mp, tc->s.nstrides, &r);
    tc->recompute_convs = r.recompute_convs;
    if (ok) return true;
    if (d->failed) return false;
    if (!r.smallest) return diag_error(d, (Mark){0, 0}, "out of memory");
    return diag_error(d, (Mark){0, 0}, "recompute budget of %lld bytes cannot be met: recomputing every conv output that lowers the peak still needs a %lld-byte arena (the smallest feasible budget)",
                      (long long)o->recompute_budget, (long long)r.smallest);
}

/* Every META key a validation graph's reader needs (runtime/plan_read.h, plan_eval_io). */
static char *eval_meta(const ModelConfig *cfg, const TrainOptions *o, bool end2end, int batch, int h, int w, const EvalCompiled *ec) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    const Graph *g = &ec->em.g;
    cJSON_AddStringToObject(m, "format", "yolocc-plan");
    cJSON_AddStringToObject(m, "kind", "eval");
    cJSON_AddNumberToObject(m, "nc", (double)cfg->nc);
    cJSON_AddNumberToObject(m, "imgsz", h > w ? h : w);
    cJSON_AddNumberToObject(m, "height", h);
    cJSON_AddNumberToObject(m, "width", w);
    cJSON_AddNumberToObject(m, "batch", batch);
    cJSON_AddBoolToObject(m, "end2end", end2end);
    cJSON_AddNumberToObject(m, "max_boxes", o->max_boxes);
    cJSON *in = cJSON_AddObjectToObject(m, "inputs");
    cJSON_AddNumberToObject(in, "images", ec->etg.images);
    cJSON_AddNumberToObject(in, "boxes", ec->etg.boxes);
    cJSON_AddNumberToObject(in, "counts", ec->etg.counts);
    cJSON *out = cJSON_AddObjectToObject(m, "outputs");
    cJSON_AddNumberToObject(out, "predictions", g->outputs[0]);
    cJSON_AddNumberToObject(out, "loss", ec->etg.loss);
    cJSON_AddNumberToObject(out, "items", ec->etg.items);
    cJSON *mem = cJSON_AddObjectToObject(m, "memory");
    cJSON_AddNumberToObject(mem, "arena_bytes", (double)ec->emp.arena_bytes);
    cJSON_AddNumberToObject(mem, "persistent_bytes", (double)ec->emp.persistent_bytes);
    char *txt = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return txt;
}

bool compile_eval(Arena *a, const ModelConfig *cfg, const TrainOptions *o, const double *strides, int nstrides, int batch, int h, int w, EvalCompiled *ec, Diag *d) {
    memset(ec, 0, sizeof *ec);
    const bool end2end = train_head_end2end(cfg);
    BuildOptions eo = {.h = h, .w = w, .batch = batch, .eval = true, .channels_last = o->channels_last};
    if (!model_build(a, cfg, &eo, strides, nstrides, &ec->em, d)) return false;
    Graph *g = &ec->em.g;
    LossSpec ls = {.nc = (int)cfg->nc, .reg_max = cfg->reg_max, .max_boxes = o->max_boxes, .nlevels = nstrides, .topk = 10, .end2end = end2end};
    memcpy(ls.strides, strides, sizeof(double) * (size_t)nstrides);
    train_loss_gains(o, ls.gains);
    const int n_levels = loss_spec_levels(&ls);
    if (g->n_outputs != 1 + n_levels) return diag_error(d, (Mark){0, 0}, "internal error: the eval head has %d outputs", g->n_outputs);
    int levels[2 * IR_MAX_LEVELS];
    memcpy(levels, g->outputs + 1, sizeof(int) * (size_t)n_levels);
    char err[256];
    if (!loss_build(g, &ls, levels, &ec->etg)) return diag_error(d, (Mark){0, 0}, "building the validation graph: %s", g->err);
    if (!graph_verify(g, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "internal error: validation graph fails verification: %s", err);
    if (!fuse_build(g, o->fuse, a, &ec->efu, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "validation fusion: %s", err);
    if (o->fuse == FUSE_FULL && !views_build(g, &ec->efu, o->precision, kernel_op_strided_rows, a, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "validation zero-copy views: %s", err);
    if (!memplan_build(g, -1, &ec->efu, o->precision, true, a, &ec->emp, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "validation memory plan: %s", err);
    ec->meta_json = eval_meta(cfg, o, end2end, batch, h, w, ec);
    return ec->meta_json ? true : diag_error(d, (Mark){0, 0}, "out of memory");
}

void eval_compiled_free(EvalCompiled *ec) {
    free(ec->meta_json);
    ec->meta_json = NULL;
}

bool train_head_end2end(const ModelConfig *cfg) { return cfg->n_rows > 0 && strcmp(cfg->rows[cfg->n_rows - 1].module, "v10Detect") == 0; }

void train_loss_gains(const TrainOptions *o, double gains[3]) {
    static const double ULTRALYTICS[3] = {7.5, 0.5, 1.5}; /* cfg/default.yaml box, cls, dfl */
    const bool set = o->gains[0] != 0 || o->gains[1] != 0 || o->gains[2] != 0;
    memcpy(gains, set ? o->gains : ULTRALYTICS, sizeof ULTRALYTICS);
}

int train_world_size(const TrainOptions *o) { return o->world_size > 1 ? o->world_size : 1; }

int train_accumulate(int batch) {
    /* Python's round is half to even, as nearbyint in the default rounding mode */
    int r = (int)nearbyint(64.0 / batch);
    return r > 1 ? r : 1;
}

void train_compiled_free(TrainCompiled *tc) {
    free(tc->meta_json);
    tc->meta_json = NULL;
    eval_compiled_free(&tc->ev);
}

bool compile_training(Arena *a, const ModelConfig *cfg, const TrainOptions *o_in, TrainCompiled *tc, Diag *d) {
    memset(tc, 0, sizeof *tc);
    /* Ultralytics scales weight decay by the effective batch over nbs = 64 */
    TrainOptions scaled = *o_in;
    const TrainOptions *o = &scaled;
    /* under data parallelism Ultralytics' batch is every rank's together */
    const int total = o_in->batch * train_world_size(o_in);
    tc->accumulate = train_accumulate(total);
    scaled.weight_decay = o_in->weight_decay * total * tc->accumulate / 64.0;
    tc->val_batch = o_in->val_batch > 0 ? o_in->val_batch : 2 * o_in->batch;
    const char *head = cfg->rows[cfg->n_rows - 1].module;
    tc->end2end = train_head_end2end(cfg);
    if (strcmp(head, "Detect") != 0 && !tc->end2end)
        return diag_error(d, cfg->rows[cfg->n_rows - 1].module_mark, "training needs a Detect or v10Detect head, not %s", head);
    if (o->recompute_budget > 0 ? !fit_budget(a, cfg, o, tc, d) : !build_step(a, cfg, o, NULL, true, tc, d)) return false;
    if (!compile_eval(a, cfg, o, tc->s.strides, tc->s.nstrides, tc->val_batch, tc->s.imgsz, tc->s.imgsz, &tc->ev, d)) return false;
    tc->meta_json = meta_json(cfg, o_in, tc);
    if (!tc->meta_json) return diag_error(d, (Mark){0, 0}, "out of memory");
    return true;
}
