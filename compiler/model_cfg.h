/* compiler/model_cfg.h — a model YAML as Ultralytics reads it: top-level keys,
 * the chosen scale, activation, and the raw rows [from, repeats, module, args].
 * Also the model-name rules (yolov8n.yaml -> yolov8.yaml, scale n).
 * Does not interpret modules; lower.c does. */
#ifndef YOLOCC_MODEL_CFG_H
#define YOLOCC_MODEL_CFG_H
#include <stdbool.h>
#include <stdint.h>

#include "value.h"
#include "yaml_doc.h"

enum { MODEL_MAX_ROWS = 1024, MODEL_MAX_FROM = 64, MODEL_MAX_REPEATS = 1000, MODEL_MAX_NC = 65536 };

typedef enum { ACT_NONE, ACT_SILU, ACT_RELU, ACT_LEAKY_RELU, ACT_HARDSWISH, ACT_GELU, ACT_SIGMOID } ActKind;

typedef struct ModelRow {
    int index;
    Mark mark;                  /* the row itself */
    int nfrom;
    int from[MODEL_MAX_FROM];   /* as written: -1, absolute, or relative negative */
    bool from_is_list;
    Mark from_mark;
    int64_t repeats;            /* as written */
    Mark repeats_mark;
    const char *module;
    Mark module_mark;
    Value args;                 /* V_LIST, string arguments already resolved */
    Mark args_mark;
} ModelRow;

typedef struct ModelConfig {
    const char *path;           /* file actually read */
    const char *source;         /* its text (len source_len, NUL-terminated): a plan carries it so the runtime can build other input shapes */
    size_t source_len;
    const char *name;           /* display name, e.g. "yolov8n" */
    int64_t nc;
    char scale[16];             /* scale key used, "" when the file has no scales */
    double depth, width, max_channels;
    int ch;
    ActKind act;                /* the model's default activation (Conv.default_act) */
    double act_alpha;
    const char *act_text;       /* as written, NULL when absent */
    int reg_max;
    bool end2end;
    int n_rows, n_backbone;
    ModelRow *rows;
} ModelConfig;

typedef struct ModelOptions {
    const char *scale;          /* --scale, NULL if not given */
    int64_t nc;                 /* --nc, 0 if not given */
} ModelOptions;

/* Applies the Ultralytics name rules to `requested` and reads the file.
 * Warnings (assumed scale, P6 rename) are queued in d. */
bool model_cfg_load(Arena *a, const char *requested, const ModelOptions *opt, ModelConfig *cfg, Diag *d);
/* Same, from a buffer (fuzzing, tests); `name` is used for the scale rule. */
bool model_cfg_parse(Arena *a, const char *name, const char *buf, size_t len, const ModelOptions *opt, ModelConfig *cfg, Diag *d);
/* Scale letter guessed from a file stem (regex yolo[v]?\d+([nslmx])), or 0. */
char model_scale_from_stem(const char *stem);
/* yolov8n-p2 -> yolov8-p2 (regex (\d+)([nslmx])(.+)?$ on the stem); false if no match. */
bool model_unified_stem(const char *stem, char *out, int cap);

#endif
