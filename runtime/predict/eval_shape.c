/* runtime/predict/eval_shape.c — the validation graph at another input
 * shape: META's model YAML through the compiler's own front end and passes
 * (compile_eval), encoded and parsed back as a plan. Must not run anything. */
#include "eval_shape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/plan_write.h"
#include "../../compiler/train_compile.h"
#include "../../ir/diag.h"

void eval_rect_shape(int w0, int h0, int S, int stride, int *h, int *w) {
    double r = fmin((double)S / h0, (double)S / w0);
    /* LetterBox: new_unpad = round(w0 r), round(h0 r) (Python's round), then padded up to the stride */
    int wu = (int)nearbyint(w0 * r), hu = (int)nearbyint(h0 * r);
    *w = (wu + stride - 1) / stride * stride;
    *h = (hu + stride - 1) / stride * stride;
}

/* The largest of META's strides, and at least 32 (0 strides: 32). */
static int meta_max_stride(const cJSON *m, double *strides, int *n) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(m, "strides");
    double top = 32;
    *n = cJSON_IsArray(st) ? cJSON_GetArraySize(st) : 0;
    if (*n > IR_MAX_LEVELS) *n = 0;
    for (int i = 0; i < *n; i++) {
        strides[i] = cJSON_GetNumberValue(cJSON_GetArrayItem(st, i));
        if (!(strides[i] >= 1 && strides[i] <= 4096)) *n = 0;
        else top = fmax(top, strides[i]);
    }
    return *n ? (int)top : 32;
}

int eval_plan_stride(const Plan *train) {
    double st[IR_MAX_LEVELS];
    int n;
    return meta_max_stride(train->meta, st, &n);
}

static const char *meta_string(const cJSON *m, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, key));
    return s ? s : "";
}

bool eval_plan_at_shape(const Plan *train, int batch, int h, int w, Plan *out, char *err, int errcap) {
    memset(out, 0, sizeof *out);
    const cJSON *m = train->meta;
    const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "model_yaml"));
    if (!src) return errf(err, errcap, "the plan does not carry its model YAML (compiled by an older yolocc); recompile it for other input shapes");
    if (!train->eval) return errf(err, errcap, "the plan has no validation graph");
    double strides[IR_MAX_LEVELS];
    int n;
    const int gs = meta_max_stride(m, strides, &n);
    if (n < 1) return errf(err, errcap, "the plan's META has no strides");
    if (batch < 1 || h < gs || w < gs || h % gs || w % gs || h > 8192 || w > 8192)
        return errf(err, errcap, "input shape %dx%d (batch %d): height and width must be multiples of the stride %d up to 8192", h, w, batch, gs);
    const char *scale = meta_string(m, "scale");
    TrainOptions o = {.max_boxes = (int)cjson_number(m, "max_boxes", 0), .precision = train->precision,
                      .fuse = strcmp(meta_string(m, "fuse"), fuse_policy_name(FUSE_FULL)) == 0 ? FUSE_FULL : FUSE_NONE,
                      .channels_last = strcmp(meta_string(m, "layout"), "nhwc") == 0};
    ModelOptions mo = {.scale = scale[0] ? scale : NULL, .nc = (int64_t)cjson_number(m, "nc", 0)};
    Arena a;
    arena_init(&a, (size_t)1 << 32);
    Diag d;
    diag_init(&d, meta_string(m, "file"));
    ModelConfig cfg;
    EvalCompiled ec;
    memset(&ec, 0, sizeof ec);
    bool ok = model_cfg_parse(&a, meta_string(m, "file"), src, strlen(src), &mo, &cfg, &d) && compile_eval(&a, &cfg, &o, strides, n, batch, h, w, &ec, &d);
    if (!ok) {
        char msg[1400];
        diag_format(&d, msg, sizeof msg);
        errf(err, errcap, "the validation graph at %dx%d: %s", h, w, msg);
    } else {
        unsigned char *buf = NULL;
        size_t len = 0;
        PlanPart part = {&ec.em.g, &ec.emp, &ec.efu, ec.meta_json, train->eval->kernels, train->eval->kernels_len};
        char why[400];
        ok = plan_encode_bytes(&part, &buf, &len, why, sizeof why) && plan_parse(buf, len, out, why, sizeof why);
        if (!ok) {
            plan_free(out);
            errf(err, errcap, "the validation graph at %dx%d: %s", h, w, why);
        }
        free(buf);
    }
    eval_compiled_free(&ec);
    arena_free(&a);
    return ok;
}
