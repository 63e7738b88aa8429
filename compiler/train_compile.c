/* compiler/train_compile.c — the training-step pipeline and its META. */
#include "train_compile.h"

#include <cjson/cJSON.h>
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
    cJSON_AddNumberToObject(m, "nc", (double)cfg->nc);
    cJSON_AddNumberToObject(m, "ch", cfg->ch);
    cJSON_AddNumberToObject(m, "reg_max", cfg->reg_max);
    cJSON_AddNumberToObject(m, "imgsz", tc->s.imgsz);
    cJSON_AddNumberToObject(m, "batch", o->batch);
    cJSON_AddNumberToObject(m, "max_boxes", o->max_boxes);
    cJSON_AddStringToObject(m, "target", "cpu");
    cJSON_AddStringToObject(m, "precision", precision_name(o->precision));
    cJSON_AddStringToObject(m, "optimizer", o->optimizer == OPT_SGD ? "SGD" : "AdamW");
    cJSON_AddStringToObject(m, "recompute", o->recompute == RECOMPUTE_POINTWISE ? "pointwise" : "none");
    cJSON_AddNumberToObject(m, "weight_decay", o->weight_decay);
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

bool compile_training(Arena *a, const ModelConfig *cfg, const TrainOptions *o, TrainCompiled *tc, Diag *d) {
    memset(tc, 0, sizeof *tc);
    const char *head = cfg->rows[cfg->n_rows - 1].module;
    if (strcmp(head, "Detect") != 0)
        return diag_error(d, cfg->rows[cfg->n_rows - 1].module_mark, "training needs a Detect head; %s (end-to-end) training is not supported yet", head);
    if (!model_compile(a, cfg, o->imgsz, o->batch, &tc->m, &tc->s, d)) return false;
    Graph *g = &tc->m.g;
    LossSpec ls = {.nc = (int)cfg->nc, .reg_max = cfg->reg_max, .max_boxes = o->max_boxes, .nlevels = tc->s.nstrides, .topk = 10, .gains = {7.5, 0.5, 1.5},
                   .recompute = o->recompute};
    memcpy(ls.strides, tc->s.strides, sizeof ls.strides);
    OptimSpec os = {.kind = o->optimizer, .weight_decay = o->weight_decay, .max_norm = 10, .nesterov = true};
    char err[256];
    if (!autodiff_build(g, &ls, &tc->tg) || !optimizer_build(g, &tc->tg, &os, &tc->og))
        return diag_error(d, (Mark){0, 0}, "building the training step: %s", g->err);
    if (!graph_verify(g, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "internal error: training graph fails verification: %s", err);
    int loss_op = g->tensors[tc->tg.loss].producer;
    if (!memplan_build(g, loss_op, o->precision, a, &tc->mp, err, sizeof err)) return diag_error(d, (Mark){0, 0}, "memory plan: %s", err);
    tc->meta_json = meta_json(cfg, o, tc);
    if (!tc->meta_json) return diag_error(d, (Mark){0, 0}, "out of memory");
    return true;
}
