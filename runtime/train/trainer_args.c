/* runtime/train/trainer_args.c — the training arguments outside the loop:
 * Ultralytics' defaults, the copy a state file keeps for --resume, and the
 * run directory's args.yaml. Must not touch training, data or weights. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda/cuda_step.h"
#include "report.h"
#include "trainer.h"

void train_args_defaults(TrainArgs *a) {
    *a = (TrainArgs){.project = "runs/detect", .name = "train", .epochs = 100, .patience = 100, .close_mosaic = 10, .workers = 2, .batch = -1,
                     .save_period = -1, .lr0 = -1, .lrf = 0.01, .momentum = -1, .warmup_epochs = 3.0, .warmup_momentum = 0.8, .warmup_bias_lr = -1,
                     .weight_decay = -1, .gains = {-1, -1, -1}, .fraction = 1.0, .val = true, .plots = true, .hyp = hyp_defaults()};
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
    {"cache_ram", offsetof(TrainArgs, cache_ram), 'b'}, {"cache_disk", offsetof(TrainArgs, cache_disk), 'b'},
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

/* A number as Python prints it (args.yaml is yaml.safe_dump of Python
 * values): the shortest digits that read back as the same value, of a float
 * when single (the augmentation gains are kept as floats), with ".0" on an
 * integral value, so 3.0 stays a float and 0.015 is not 0.014999999664. */
static const char *py_float(char b[40], double v, bool single) {
    for (int p = 1; p <= 17; p++) {
        snprintf(b, 40, "%.*g", p, v);
        double back = strtod(b, NULL);
        if (single ? (float)back == (float)v : back == v) break;
    }
    /* %g writes 100 as 1e+02 at 1 digit: Python keeps positional form below 1e16 */
    if (fabs(v) >= 1e-4 && fabs(v) < 1e16 && strchr(b, 'e')) {
        int e = (int)floor(log10(fabs(v)));
        int sig = (int)(strchr(b, 'e') - b) - (b[0] == '-') - (strchr(b, '.') != NULL);
        snprintf(b, 40, "%.*f", sig - 1 - e > 0 ? sig - 1 - e : 0, v);
    }
    if (!strpbrk(b, ".en")) strcat(b, ".0");
    return b;
}
static const char *int_text(char b[40], int v) { return snprintf(b, 40, "%d", v), b; }

/* The run's arguments in Ultralytics' args.yaml order (cfg/default.yaml),
 * each with the value this run uses; keys of other tasks and modes
 * (segmentation, pose, export, prediction display) are left out. */
void train_write_args_yaml(const Trainer *t) {
    char b[34][40], p[1200], dev[64]; /* b[k]: the k-th number below */
    const TrainArgs *a = &t->a;
    const Hyp *h = &a->hyp;
    double gains[3] = {7.5, 0.5, 1.5};
    (void)plan_loss_gains(&t->plan, gains);
    /* Ultralytics keeps CUDA_VISIBLE_DEVICES there, which --device sets */
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (!t->ts.cuda) snprintf(dev, sizeof dev, "cpu");
    else if (visible && *visible) snprintf(dev, sizeof dev, "%s", visible);
    else if (t->world == 1) snprintf(dev, sizeof dev, "%d", t->ts.cuda->dev.ordinal);
    else {
        int k = snprintf(dev, sizeof dev, "0");
        for (int r = 1; r < t->world && k < (int)sizeof dev - 8; r++) k += snprintf(dev + k, sizeof dev - (size_t)k, ",%d", r);
    }
#define I(k, v) int_text(b[k], (v))
#define F(k, v) py_float(b[k], (v), false)
#define H(k, v) py_float(b[k], (v), true)
#define B(v) ((v) ? "true" : "false")
    const char *kv[] = {"task", "detect", "mode", "train", "model", a->plan, "data", a->data, "epochs", I(0, a->epochs),
                        "time", a->time > 0 ? F(1, a->time) : NULL, "patience", I(2, a->patience), "batch", I(3, t->ts.batch * t->world),
                        "imgsz", I(4, t->ts.imgsz), "save", "true", "save_period", I(5, a->save_period), "cache", a->cache_disk ? "disk" : a->cache_ram ? "ram" : "false",
                        "device", dev, "workers", I(6, a->workers), "project", a->project, "name", a->name, "exist_ok", B(a->exist_ok),
                        "pretrained", a->weights ? a->weights : "false", "optimizer", cJSON_GetStringValue(cJSON_GetObjectItem(t->plan.meta, "optimizer")),
                        "verbose", "true", "seed", I(7, a->seed), "deterministic", "true", "single_cls", B(a->single_cls), "rect", "false",
                        "cos_lr", B(a->cos_lr), "close_mosaic", I(8, a->close_mosaic), "resume", a->resume ? a->resume : "false",
                        "amp", B(t->plan.precision != PREC_FP32), "fraction", F(9, a->fraction), "profile", "false",
                        "freeze", a->freeze > 0 ? I(10, a->freeze) : NULL, "multi_scale", "false", "val", B(a->val), "split", "val",
                        "save_json", "false", "conf", NULL, "iou", "0.7", "max_det", "300", "half", "false", "plots", B(a->plots),
                        "lr0", F(11, a->lr0), "lrf", F(12, a->lrf), "momentum", F(13, a->momentum),
                        "weight_decay", F(14, cjson_number(t->plan.meta, "weight_decay_hyp", 0)), "warmup_epochs", F(15, a->warmup_epochs),
                        "warmup_momentum", F(16, a->warmup_momentum), "warmup_bias_lr", F(17, a->warmup_bias_lr), "box", F(18, gains[0]), "cls", F(19, gains[1]),
                        "dfl", F(20, gains[2]), "nbs", I(21, (int)cjson_number(t->plan.meta, "nbs", 64)), "hsv_h", H(22, h->hsv_h), "hsv_s", H(23, h->hsv_s),
                        "hsv_v", H(24, h->hsv_v), "degrees", H(25, h->degrees), "translate", H(26, h->translate), "scale", H(27, h->scale), "shear", H(28, h->shear),
                        "perspective", H(29, h->perspective), "flipud", H(30, h->flipud), "fliplr", H(31, h->fliplr), "bgr", "0.0", "mosaic", H(32, h->mosaic),
                        "mixup", H(33, h->mixup), "copy_paste", "0.0", "save_dir", t->dir, NULL};
#undef I
#undef F
#undef H
#undef B
    char err[256];
    snprintf(p, sizeof p, "%s/args.yaml", t->dir);
    if (!report_write_args_yaml(p, kv, err, sizeof err)) fprintf(stderr, "yolort: warning: %s\n", err);
}
