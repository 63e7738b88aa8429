/* runtime/export/export.c — `yolort export`: loads the plan's validation graph
 * and the weights (eval_model_load, no device opened), lowers them to ONNX
 * (onnx_export.c), adds Ultralytics' metadata and writes the file atomically.
 * Must not run the model or touch the training step. */
#include "export.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../../compiler/version.h"
#include "../../ir/diag.h"
#include "../predict/eval_model.h"
#include "../train/trainer.h"
#include "onnx_export.h"

void export_args_defaults(ExportArgs *a) {
    memset(a, 0, sizeof *a);
    a->format = "onnx";
    a->batch = 1;
    a->opset = 17;
    a->max_det = 300;
}

char *export_names_literal(char *const *names, int n) {
    size_t cap = 4;
    for (int i = 0; i < n; i++) cap += 24 + 4 * strlen(names[i]);
    char *s = malloc(cap), *p = s;
    if (!s) return NULL;
    *p++ = '{';
    for (int i = 0; i < n; i++) {
        p += sprintf(p, "%s%d: '", i ? ", " : "", i);
        for (const unsigned char *c = (const unsigned char *)names[i]; *c; c++) {
            if (*c == '\\' || *c == '\'') *p++ = '\\', *p++ = (char)*c;
            else if (*c < 0x20 || *c == 0x7f) p += sprintf(p, "\\x%02x", *c);
            else *p++ = (char)*c; /* UTF-8 passes through: Python's literal is unicode */
        }
        *p++ = '\'';
    }
    *p++ = '}';
    *p = '\0';
    return s;
}

/* The largest stride of the head (Ultralytics' metadata "stride"), from the graph's box decode. */
static int max_stride(const Graph *g) {
    double s = 0;
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == OP_DIST2BBOX)
            for (int l = 0; l < g->ops[i].a.nlevels; l++)
                if (g->ops[i].a.strides[l] > s) s = g->ops[i].a.strides[l];
    return (int)s;
}

static double file_mb(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / 1e6 : 0.0;
}

static char *default_output(const char *weights) {
    const char *slash = strrchr(weights, '/'), *dot = strrchr(weights, '.');
    size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - weights) : strlen(weights);
    char *out = malloc(stem + 6);
    if (out) snprintf(out, stem + 6, "%.*s.onnx", (int)stem, weights);
    return out;
}

static const char *shape_text(const OnnxValue *v, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "(");
    for (int i = 0; i < v->nd; i++) n += snprintf(buf + n, cap - (size_t)n, "%s%lld", i ? ", " : "", (long long)v->d[i]);
    snprintf(buf + n, cap - (size_t)n, ")");
    return buf;
}

int export_main(const ExportArgs *a) {
    char err[2048], report[512];
    if (strcmp(a->format, "onnx") != 0) {
        fprintf(stderr, "yolort: error: format '%s' is not supported; yolort exports format onnx\n", a->format);
        return 2;
    }
    if (a->opset < ONNX_OPSET_MIN || a->opset > ONNX_OPSET_MAX) {
        fprintf(stderr, "yolort: error: --opset %d is outside %d..%d\n", a->opset, ONNX_OPSET_MIN, ONNX_OPSET_MAX);
        return 2;
    }
    double t0 = monotonic_seconds();
    EvalModel m;
    if (!eval_model_load(&m, a->plan, a->weights, report, sizeof report, err, sizeof err)) {
        fprintf(stderr, "yolort: error: %s\n", err);
        return 2;
    }
    char *out_path = a->output ? strdup(a->output) : default_output(a->weights);
    char *names = export_names_literal(m.names, m.io.nc);
    Arena arena;
    arena_init(&arena, 0);
    OnnxBuilder b;
    onnx_builder_init(&b, &arena);
    const Graph *g = &m.plan.eval->g;
    OnnxExportOptions o = {.batch = a->batch, .dynamic = a->dynamic, .opset = a->opset, .max_det = a->max_det};
    OnnxExportResult r;
    int rc = 1;
    if (!out_path || !names) {
        snprintf(err, sizeof err, "out of memory");
        goto out;
    }
    printf("%s\n", report);
    if (!onnx_export_graph(&b, g, m.ev.buf, &m.io, &o, &r, err, sizeof err)) goto out;
    char in_s[96], out_s[96];
    printf("yolocc: starting from '%s' with input shape %s BCHW and output shape(s) %s (%.1f MB)\n\n", a->weights, shape_text(&r.input, in_s, sizeof in_s),
           shape_text(&r.output, out_s, sizeof out_s), file_mb(a->weights));
    printf("ONNX: starting export with opset %d: %d ops of the eval-mode model, %d batch norms folded into their convs...\n", a->opset, r.ops_exported, r.bn_folded);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(m.plan.meta, "model");
    const char *model_name = cJSON_IsString(model) ? model->valuestring : "model";
    char desc[256], date[64], stride[16], batch[16], imgsz[48], args[160];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", localtime_r(&now, &tm));
    snprintf(desc, sizeof desc, "yolocc %s model (plan %s, weights %s)", model_name, a->plan, a->weights);
    snprintf(stride, sizeof stride, "%d", max_stride(g));
    snprintf(batch, sizeof batch, "%d", a->batch);
    snprintf(imgsz, sizeof imgsz, "[%d, %d]", m.io.imgsz, m.io.imgsz);
    snprintf(args, sizeof args, "{'batch': %d, 'dynamic': %s, 'opset': %d, 'max_det': %d, 'nms': False}", a->batch, a->dynamic ? "True" : "False", a->opset, a->max_det);
    /* the keys and value syntax Ultralytics' exporter writes and AutoBackend reads back */
    const OnnxMeta meta[] = {{"description", desc}, {"author", "yolocc"},  {"date", date},   {"version", YOLOCC_VERSION}, {"stride", stride}, {"task", "detect"},
                             {"batch", batch},      {"imgsz", imgsz},      {"names", names}, {"args", args},             {"channels", "3"}};
    size_t bytes = 0;
    if (!onnx_write(&b, out_path, model_name, &r.input, 1, &r.output, 1, a->opset, YOLOCC_VERSION, meta, (int)(sizeof meta / sizeof meta[0]), &bytes, err, sizeof err)) goto out;
    double dt = monotonic_seconds() - t0;
    printf("ONNX: export success \u2705 %.1fs, saved as '%s' (%.1f MB)\n\n", dt, out_path, (double)bytes / 1e6);
    printf("Export complete (%.1fs)\n", dt);
    char *abs = realpath(out_path, NULL), *slash = abs ? strrchr(abs, '/') : NULL;
    if (slash) *slash = '\0';
    printf("Results saved to %s\n", slash ? (slash == abs ? "/" : abs) : ".");
    free(abs);
    printf("Predict:         yolo predict task=detect model=%s imgsz=%d\n", out_path, m.io.imgsz);
    printf("Validate:        yolo val task=detect model=%s imgsz=%d data=DATA.yaml\n", out_path, m.io.imgsz);
    rc = 0;
out:
    if (rc) fprintf(stderr, "yolort: error: export to ONNX failed: %s\n", err);
    free(out_path);
    free(names);
    arena_free(&arena);
    eval_model_close(&m);
    return rc;
}
