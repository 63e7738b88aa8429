/* compiler/model_cfg.c — top-level keys, scales, activation and row syntax of
 * an Ultralytics model YAML (semantics §1), plus the name rules (§1.3). */
#include "model_cfg.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char model_scale_from_stem(const char *stem) {
    for (const char *p = stem; (p = strstr(p, "yolo")) != NULL; p++) {
        const char *q = p + 4;
        if (*q == 'v') q++;
        if (!isdigit((unsigned char)*q)) {
            /* the optional 'v' may also be absent with a digit after it */
            continue;
        }
        while (isdigit((unsigned char)*q)) q++;
        if (*q && strchr("nslmx", *q)) return *q;
    }
    return 0;
}

bool model_unified_stem(const char *stem, char *out, int cap) {
    for (const char *p = stem; *p; p++) {
        if (!isdigit((unsigned char)*p)) continue;
        const char *q = p;
        while (isdigit((unsigned char)*q)) q++;
        if (*q && strchr("nslmx", *q)) {
            int n = snprintf(out, (size_t)cap, "%.*s%s", (int)(q - stem), stem, q + 1);
            return n > 0 && n < cap;
        }
        p = q - 1;
    }
    return false;
}

static bool parse_activation(const char *s, ModelConfig *cfg, Mark m, Diag *d) {
    static const struct { const char *name; ActKind k; } acts[] = {
        {"SiLU", ACT_SILU}, {"ReLU", ACT_RELU}, {"LeakyReLU", ACT_LEAKY_RELU}, {"Hardswish", ACT_HARDSWISH},
        {"GELU", ACT_GELU}, {"Sigmoid", ACT_SIGMOID}, {"Identity", ACT_NONE},
    };
    const char *p = strncmp(s, "nn.", 3) == 0 ? s + 3 : s;
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        size_t n = strlen(acts[i].name);
        if (strncmp(p, acts[i].name, n) != 0 || p[n] != '(') continue;
        const char *arg = p + n + 1;
        const char *close = strchr(arg, ')');
        if (!close || close[1]) break;
        cfg->act = acts[i].k;
        cfg->act_alpha = 0.01;
        if (close == arg) return true;
        if (acts[i].k != ACT_LEAKY_RELU) break;
        char num[64];
        snprintf(num, sizeof num, "%.*s", (int)(close - arg), arg);
        char *end;
        const char *ns = strncmp(num, "negative_slope=", 15) == 0 ? num + 15 : num;
        cfg->act_alpha = strtod(ns, &end);
        if (end == ns || *end || !isfinite(cfg->act_alpha)) break;
        return true;
    }
    return diag_error(d, m, "activation '%s' not supported; expected nn.SiLU(), nn.ReLU(), nn.LeakyReLU(slope), nn.Hardswish(), nn.GELU(), nn.Sigmoid() or nn.Identity()", s);
}

static bool need_number(const Value *v, const char *what, Diag *d) {
    if (!value_is_number(v) || v->kind == V_BOOL) return diag_error(d, v->mark, "%s must be a number, found %s", what, value_kind_name(v->kind));
    if (!isfinite(value_number(v))) return diag_error(d, v->mark, "%s must be finite", what);
    return true;
}

static bool read_int_key(Arena *a, const YNode *root, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present, Diag *d) {
    const YNode *n = yaml_map_get(root, key);
    *present = n != NULL;
    if (!n) return true;
    Value v;
    if (!value_from_yaml(a, n, &v, d)) return false;
    if (v.kind != V_INT) return diag_error(d, n->mark, "'%s' must be an integer, found %s", key, value_kind_name(v.kind));
    if (v.i < lo || v.i > hi) return diag_error(d, n->mark, "'%s' must be in [%lld, %lld], found %lld", key, (long long)lo, (long long)hi, (long long)v.i);
    *out = v.i;
    return true;
}

static bool read_scales(Arena *a, const YNode *root, const ModelOptions *opt, const char *stem, ModelConfig *cfg, Diag *d) {
    const YNode *scales = yaml_map_get(root, "scales");
    cfg->depth = cfg->width = 1.0;
    cfg->max_channels = INFINITY;
    if (!scales) {
        const char *keys[2] = {"depth_multiple", "width_multiple"};
        double *dst[2] = {&cfg->depth, &cfg->width};
        for (int k = 0; k < 2; k++) {
            const YNode *n = yaml_map_get(root, keys[k]);
            if (!n) continue;
            Value v;
            if (!value_from_yaml(a, n, &v, d) || !need_number(&v, keys[k], d)) return false;
            *dst[k] = value_number(&v);
            if (*dst[k] <= 0 || *dst[k] > 64) return diag_error(d, n->mark, "'%s' must be in (0, 64]", keys[k]);
        }
        /* Ultralytics keeps the requested (or guessed) scale even without
         * 'scales'; C3k2/A2C2f rules test it */
        if (opt->scale && opt->scale[0]) snprintf(cfg->scale, sizeof cfg->scale, "%s", opt->scale);
        else if (model_scale_from_stem(stem)) cfg->scale[0] = model_scale_from_stem(stem);
        return true;
    }
    if (scales->kind != YN_MAP || scales->n == 0) return diag_error(d, scales->mark, "'scales' must be a non-empty mapping of scale -> [depth, width, max_channels]");
    char want[16] = "";
    if (opt->scale && opt->scale[0]) snprintf(want, sizeof want, "%s", opt->scale);
    else if (model_scale_from_stem(stem)) want[0] = model_scale_from_stem(stem);
    int pick = -1;
    for (int i = 0; i < scales->n; i++) {
        if (want[0] && strcmp(scales->keys[i]->str, want) == 0) pick = i;
        const YNode *row = scales->items[i];
        if (row->kind != YN_SEQ || row->n != 3)
            return diag_error(d, row->mark, "scale '%s' must be [depth, width, max_channels]", scales->keys[i]->str);
    }
    if (!want[0]) {
        pick = 0;
        diag_warn(d, "no model scale passed. Assuming scale='%s'.", scales->keys[0]->str);
    } else if (pick < 0) {
        char keys[256] = "";
        for (int i = 0; i < scales->n; i++)
            snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", i ? ", " : "", scales->keys[i]->str);
        return diag_error(d, scales->mark, "scale '%s' is not in 'scales' (has: %s)", want, keys);
    }
    if (strlen(scales->keys[pick]->str) >= sizeof cfg->scale) return diag_error(d, scales->keys[pick]->mark, "scale name too long");
    snprintf(cfg->scale, sizeof cfg->scale, "%s", scales->keys[pick]->str);
    const YNode *row = scales->items[pick];
    Value v[3];
    const char *what[3] = {"scale depth", "scale width", "scale max_channels"};
    for (int k = 0; k < 3; k++)
        if (!value_from_yaml(a, row->items[k], &v[k], d) || !need_number(&v[k], what[k], d)) return false;
    cfg->depth = value_number(&v[0]);
    cfg->width = value_number(&v[1]);
    cfg->max_channels = value_number(&v[2]);
    if (cfg->depth <= 0 || cfg->depth > 64) return diag_error(d, v[0].mark, "scale depth must be in (0, 64]");
    if (cfg->width <= 0 || cfg->width > 64) return diag_error(d, v[1].mark, "scale width must be in (0, 64]");
    if (cfg->max_channels < 1) return diag_error(d, v[2].mark, "scale max_channels must be >= 1");
    return true;
}

static bool read_row(Arena *a, const YNode *n, int index, ModelConfig *cfg, Diag *d) {
    ModelRow *r = &cfg->rows[index];
    r->index = index;
    r->mark = n->mark;
    if (n->kind != YN_SEQ || n->n != 4)
        return diag_error(d, n->mark, "row %d: expected [from, repeats, module, args]", index);
    /* from */
    const YNode *f = n->items[0];
    r->from_mark = f->mark;
    Value fv;
    if (!value_from_yaml(a, f, &fv, d)) return false;
    r->from_is_list = fv.kind == V_LIST;
    const Value *items = r->from_is_list ? fv.items : &fv;
    int count = r->from_is_list ? fv.n : 1;
    if (count < 1 || count > MODEL_MAX_FROM) return diag_error(d, f->mark, "row %d: 'from' must list 1 to %d inputs", index, MODEL_MAX_FROM);
    for (int i = 0; i < count; i++) {
        if (items[i].kind != V_INT)
            return diag_error(d, items[i].mark, "row %d: 'from' entries must be integers, found %s", index, value_kind_name(items[i].kind));
        int64_t k = items[i].i;
        int64_t j = k >= 0 ? k : index + k;
        bool input = k == -1 && index == 0;
        if (!input && (j < 0 || j >= index))
            return diag_error(d, items[i].mark, "row %d: 'from' %lld is out of range (rows 0..%d precede this one)", index, (long long)k, index - 1);
        r->from[i] = (int)k;
    }
    r->nfrom = count;
    /* repeats */
    Value nv;
    r->repeats_mark = n->items[1]->mark;
    if (!value_from_yaml(a, n->items[1], &nv, d)) return false;
    if (nv.kind != V_INT) return diag_error(d, nv.mark, "row %d: repeats must be an integer, found %s", index, value_kind_name(nv.kind));
    if (nv.i < 1 || nv.i > MODEL_MAX_REPEATS) return diag_error(d, nv.mark, "row %d: repeats must be in [1, %d]", index, MODEL_MAX_REPEATS);
    r->repeats = nv.i;
    /* module */
    const YNode *m = n->items[2];
    r->module_mark = m->mark;
    if (m->kind != YN_SCALAR || m->len == 0) return diag_error(d, m->mark, "row %d: module must be a name", index);
    r->module = m->str;
    /* args */
    const YNode *args = n->items[3];
    r->args_mark = args->mark;
    if (args->kind != YN_SEQ) return diag_error(d, args->mark, "row %d: args must be a list", index);
    if (!value_from_yaml(a, args, &r->args, d)) return false;
    for (int i = 0; i < r->args.n; i++) value_resolve_arg(a, &r->args.items[i], cfg->nc);
    return true;
}

static const char *stem_of(Arena *a, const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    return arena_strndup(a, base, dot ? (size_t)(dot - base) : strlen(base));
}

bool model_cfg_parse(Arena *a, const char *name, const char *buf, size_t len, const ModelOptions *opt, ModelConfig *cfg, Diag *d) {
    memset(cfg, 0, sizeof *cfg);
    cfg->path = name;
    char *src = arena_alloc(a, len + 1);
    if (!src) return diag_error(d, (Mark){0, 0}, "out of memory");
    memcpy(src, buf, len);
    src[len] = 0;
    cfg->source = src, cfg->source_len = len;
    const YNode *root = yaml_doc_parse(a, buf, len, d);
    if (!root) return false;
    if (root->kind != YN_MAP) return diag_error(d, root->mark, "a model file must be a mapping with keys nc, backbone, head");
    const char *stem = stem_of(a, name);
    if (!stem) return diag_error(d, root->mark, "out of memory");
    /* nc: the command line overrides the file, as the trainer does with the dataset's nc */
    bool present;
    if (!read_int_key(a, root, "nc", 1, MODEL_MAX_NC, &cfg->nc, &present, d)) return false;
    if (opt->nc > 0) cfg->nc = opt->nc;
    else if (!present) return diag_error(d, root->mark, "missing key 'nc' (number of classes); give it in the file or with --nc");
    int64_t ch = 3, reg_max = 16;
    if (!read_int_key(a, root, "ch", 1, 64, &ch, &present, d)) return false;
    if (!read_int_key(a, root, "reg_max", 1, 64, &reg_max, &present, d)) return false;
    cfg->ch = (int)ch;
    cfg->reg_max = (int)reg_max;
    const YNode *e2e = yaml_map_get(root, "end2end");
    if (e2e) {
        Value v;
        if (!value_from_yaml(a, e2e, &v, d)) return false;
        if (v.kind != V_BOOL) return diag_error(d, e2e->mark, "'end2end' must be true or false");
        cfg->end2end = v.b;
    }
    cfg->act = ACT_SILU;
    const YNode *act = yaml_map_get(root, "activation");
    if (act) {
        if (act->kind != YN_SCALAR) return diag_error(d, act->mark, "'activation' must be a string such as nn.ReLU()");
        cfg->act_text = act->str;
        if (!parse_activation(act->str, cfg, act->mark, d)) return false;
    }
    if (!read_scales(a, root, opt, stem, cfg, d)) return false;
    const YNode *parts[2] = {yaml_map_get(root, "backbone"), yaml_map_get(root, "head")};
    const char *part_names[2] = {"backbone", "head"};
    int total = 0;
    for (int k = 0; k < 2; k++) {
        if (!parts[k]) return diag_error(d, root->mark, "missing key '%s'", part_names[k]);
        if (parts[k]->kind != YN_SEQ) return diag_error(d, parts[k]->mark, "'%s' must be a list of rows", part_names[k]);
        total += parts[k]->n;
    }
    if (total < 1 || total > MODEL_MAX_ROWS) return diag_error(d, root->mark, "a model needs 1 to %d rows, found %d", MODEL_MAX_ROWS, total);
    cfg->rows = arena_array(a, (size_t)total, sizeof(ModelRow));
    if (!cfg->rows) return diag_error(d, root->mark, "out of memory");
    cfg->n_backbone = parts[0]->n;
    for (int k = 0, i = 0; k < 2; k++)
        for (int j = 0; j < parts[k]->n; j++, i++)
            if (!read_row(a, parts[k]->items[j], i, cfg, d)) return false;
    cfg->n_rows = total;
    /* display name: the stem with the scale letter after the first digits,
     * as Ultralytics names its files (yolov8 + n -> yolov8n, yolov8-p2 + s -> yolov8s-p2) */
    cfg->name = stem;
    if (opt->scale && strlen(cfg->scale) == 1 && !model_scale_from_stem(stem)) {
        const char *p = stem;
        while (*p && !isdigit((unsigned char)*p)) p++;
        while (isdigit((unsigned char)*p)) p++;
        if (p > stem && isdigit((unsigned char)p[-1]) && !isalpha((unsigned char)*p)) cfg->name = arena_printf(a, "%.*s%s%s", (int)(p - stem), stem, cfg->scale, p);
    }
    if (!cfg->name) return diag_error(d, root->mark, "out of memory");
    return true;
}

static bool file_exists(const char *p) { return access(p, R_OK) == 0; }

bool model_cfg_load(Arena *a, const char *requested, const ModelOptions *opt, ModelConfig *cfg, Diag *d) {
    const char *slash = strrchr(requested, '/');
    size_t dirlen = slash ? (size_t)(slash - requested + 1) : 0;
    const char *stem = stem_of(a, requested);
    const char *dot = strrchr(requested + dirlen, '.');
    const char *ext = dot ? dot : "";
    if (!stem) return diag_error(d, (Mark){0, 0}, "out of memory");
    /* P6 rename: yolov8n6 -> yolov8n-p6 */
    char renamed[256];
    const char *path = requested;
    for (const char *v = "58"; *v; v++)
        for (const char *s = "nsmlx"; *s; s++) {
            char pat[16];
            snprintf(pat, sizeof pat, "yolov%c%c6", *v, *s);
            const char *hit = strstr(stem, pat);
            if (hit && snprintf(renamed, sizeof renamed, "%.*s%.*s%c%c-p6%s%s", (int)dirlen, requested, (int)(hit - stem), stem, pat[5], *s,
                                hit + 7, ext) < (int)sizeof renamed) {
                diag_warn(d, "renaming %s to %s", requested, renamed);
                path = arena_strdup(a, renamed);
                stem = stem_of(a, path);
            }
        }
    const char *chosen = path;
    char unified[256], upath[512];
    if (!file_exists(path) && model_unified_stem(stem, unified, sizeof unified) &&
        snprintf(upath, sizeof upath, "%.*s%s%s", (int)dirlen, path, unified, ext) < (int)sizeof upath && file_exists(upath))
        chosen = arena_strdup(a, upath);
    d->file = chosen;
    size_t len;
    char *buf = yaml_read_file(a, chosen, &len, d);
    if (!buf) return false;
    /* the scale comes from the requested name, the contents from the chosen file */
    ModelOptions o = *opt;
    char letter[2] = {model_scale_from_stem(stem), 0};
    if (!(o.scale && o.scale[0]) && letter[0]) o.scale = letter;
    if (!model_cfg_parse(a, chosen, buf, len, &o, cfg, d)) return false;
    if (chosen != path) cfg->name = stem;
    return true;
}
