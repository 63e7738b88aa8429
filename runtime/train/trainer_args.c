/* runtime/train/trainer_args.c — the training arguments outside the loop:
 * Ultralytics' defaults, the copy a state file keeps for --resume, and the
 * run directory's args.yaml. Must not touch training, data or weights. */
#include <stddef.h>
#include <stdio.h>

#include "report.h"
#include "trainer.h"

void train_args_defaults(TrainArgs *a) {
    *a = (TrainArgs){.project = "runs/detect", .name = "train", .epochs = 100, .patience = 100, .close_mosaic = 10, .workers = 2, .batch = -1,
                     .save_period = -1, .lr0 = -1, .lrf = 0.01, .momentum = -1, .warmup_epochs = 3.0, .warmup_momentum = 0.8, .warmup_bias_lr = -1,
                     .weight_decay = -1, .fraction = 1.0, .val = true, .plots = true, .hyp = hyp_defaults()};
}

/* The training arguments a state file records, for --resume (Ultralytics
 * takes them from its checkpoint's train_args the same way). */
typedef struct ArgField {
    const char *key;
    size_t off;
    char kind; /* 'i' int, 'd' double, 'b' bool */
} ArgField;

static const ArgField ARG_FIELDS[] = {
    {"epochs", offsetof(TrainArgs, epochs), 'i'}, {"patience", offsetof(TrainArgs, patience), 'i'},
    {"close_mosaic", offsetof(TrainArgs, close_mosaic), 'i'}, {"freeze", offsetof(TrainArgs, freeze), 'i'},
    {"seed", offsetof(TrainArgs, seed), 'i'}, {"save_period", offsetof(TrainArgs, save_period), 'i'},
    {"lr0", offsetof(TrainArgs, lr0), 'd'}, {"lrf", offsetof(TrainArgs, lrf), 'd'}, {"momentum", offsetof(TrainArgs, momentum), 'd'},
    {"warmup_epochs", offsetof(TrainArgs, warmup_epochs), 'd'}, {"warmup_momentum", offsetof(TrainArgs, warmup_momentum), 'd'},
    {"warmup_bias_lr", offsetof(TrainArgs, warmup_bias_lr), 'd'}, {"cos_lr", offsetof(TrainArgs, cos_lr), 'b'}, {"val", offsetof(TrainArgs, val), 'b'},
    {"fraction", offsetof(TrainArgs, fraction), 'd'}, {"time", offsetof(TrainArgs, time), 'd'}, {"single_cls", offsetof(TrainArgs, single_cls), 'b'},
};
enum { N_ARG_FIELDS = sizeof ARG_FIELDS / sizeof ARG_FIELDS[0], N_HYP = sizeof(Hyp) / sizeof(float) };

cJSON *train_args_json(const TrainArgs *a) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "data", a->data);
    for (int i = 0; i < N_ARG_FIELDS; i++) {
        const char *p = (const char *)a + ARG_FIELDS[i].off;
        if (ARG_FIELDS[i].kind == 'b') cJSON_AddBoolToObject(j, ARG_FIELDS[i].key, *(const bool *)p);
        else cJSON_AddNumberToObject(j, ARG_FIELDS[i].key, ARG_FIELDS[i].kind == 'i' ? *(const int *)p : *(const double *)p);
    }
    const float *h = &a->hyp.hsv_h;
    cJSON *hy = cJSON_AddArrayToObject(j, "hyp");
    for (int i = 0; i < N_HYP; i++) cJSON_AddItemToArray(hy, cJSON_CreateNumber(h[i]));
    return j;
}

bool train_args_from_json(TrainArgs *a, const cJSON *j) {
    const char *data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "data"));
    const cJSON *hy = cJSON_GetObjectItemCaseSensitive(j, "hyp");
    if (!data || !cJSON_IsArray(hy) || cJSON_GetArraySize(hy) != N_HYP) return false;
    a->data = data;
    for (int i = 0; i < N_ARG_FIELDS; i++) {
        char *p = (char *)a + ARG_FIELDS[i].off;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, ARG_FIELDS[i].key);
        if (ARG_FIELDS[i].kind == 'b') *(bool *)p = cJSON_IsTrue(v);
        else if (ARG_FIELDS[i].kind == 'i') *(int *)p = (int)cjson_number(j, ARG_FIELDS[i].key, *(int *)p);
        else *(double *)p = cjson_number(j, ARG_FIELDS[i].key, *(double *)p);
    }
    float *h = &a->hyp.hsv_h;
    for (int i = 0; i < N_HYP; i++) h[i] = (float)cJSON_GetNumberValue(cJSON_GetArrayItem(hy, i));
    return true;
}

/* a number as args.yaml shows it, in its own buffer */
static const char *int_text(char b[32], int v) { return snprintf(b, 32, "%d", v), b; }
static const char *num_text(char b[32], double v) { return snprintf(b, 32, "%g", v), b; }

void train_write_args_yaml(const Trainer *t) {
    char b[17][32], p[1200];
    const TrainArgs *a = &t->a;
    const char *kv[] = {"task", "detect", "mode", "train", "model", a->plan, "data", a->data, "epochs", int_text(b[0], a->epochs),
                        "time", a->time > 0 ? num_text(b[1], a->time) : NULL, "patience", int_text(b[2], a->patience), "batch", int_text(b[3], t->ts.batch * t->world),
                        "imgsz", int_text(b[4], t->ts.imgsz), "save_period", "-1", "workers", int_text(b[5], a->workers), "project", a->project, "name", a->name,
                        "exist_ok", a->exist_ok ? "true" : "false", "optimizer", cJSON_GetStringValue(cJSON_GetObjectItem(t->plan.meta, "optimizer")),
                        "seed", int_text(b[6], a->seed), "single_cls", a->single_cls ? "true" : "false", "cos_lr", a->cos_lr ? "true" : "false",
                        "close_mosaic", int_text(b[7], a->close_mosaic), "resume", a->resume, "fraction", num_text(b[8], a->fraction),
                        "freeze", int_text(b[9], a->freeze), "lr0", num_text(b[10], a->lr0), "lrf", num_text(b[11], a->lrf), "momentum", num_text(b[12], a->momentum),
                        "weight_decay", num_text(b[13], cjson_number(t->plan.meta, "weight_decay_hyp", 0)), "warmup_epochs", num_text(b[14], a->warmup_epochs),
                        "warmup_momentum", num_text(b[15], a->warmup_momentum), "warmup_bias_lr", num_text(b[16], a->warmup_bias_lr),
                        "cache", a->cache_ram ? "ram" : "false", "plots", a->plots ? "true" : "false", "save_dir", t->dir, NULL};
    char err[256];
    snprintf(p, sizeof p, "%s/args.yaml", t->dir);
    if (!report_write_args_yaml(p, kv, err, sizeof err)) fprintf(stderr, "yolort: warning: %s\n", err);
}

