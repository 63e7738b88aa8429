/* compiler/summary.c — renders a compiled model the way Ultralytics prints it
 * (parse_model's table, model_info's totals line) and as JSON (cJSON). */
#include "summary.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <inttypes.h>
#include <string.h>

void format_thousands(int64_t v, char *buf, int cap) {
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%" PRId64, v < 0 ? -v : v), o = 0;
    if (v < 0 && o < cap - 1) buf[o++] = '-';
    for (int i = 0; i < n && o < cap - 1; i++) {
        if (i && (n - i) % 3 == 0 && o < cap - 1) buf[o++] = ',';
        if (o < cap - 1) buf[o++] = digits[i];
    }
    buf[o] = 0;
}

static void from_str(const ModelRow *r, char *buf, int cap) {
    if (!r->from_is_list) {
        snprintf(buf, (size_t)cap, "%d", r->from[0]);
        return;
    }
    int o = snprintf(buf, (size_t)cap, "[");
    for (int i = 0; i < r->nfrom && o < cap; i++) o += snprintf(buf + o, (size_t)(cap - o), "%s%d", i ? ", " : "", r->from[i]);
    if (o < cap) snprintf(buf + o, (size_t)(cap - o), "]");
}

/* model_info's name: the YAML stem with "yolo" -> "YOLO" */
static void display_name(const Model *m, char *buf, int cap) {
    const char *n = m->cfg->name;
    const char *hit = strstr(n, "yolo");
    if (hit) snprintf(buf, (size_t)cap, "%.*sYOLO%s", (int)(hit - n), n, hit + 4);
    else snprintf(buf, (size_t)cap, "%s", n[0] ? n : "Model");
}

void summary_print_table(FILE *f, const Model *m, const ModelSummary *s) {
    fprintf(f, "\n%3s%20s%3s%10s  %-45s%-30s\n", "", "from", "n", "params", "module", "arguments");
    for (int i = 0; i < m->cfg->n_rows; i++) {
        const RowInfo *r = &m->rows[i];
        char from[256];
        from_str(&m->cfg->rows[i], from, sizeof from);
        fprintf(f, "%3d%20s%3d%10" PRId64 "  %-45s%-30s\n", i, from, r->n, r->params, r->def->pytype, r->args);
    }
    char name[128], p[32], g[32];
    display_name(m, name, sizeof name);
    format_thousands(s->parameters, p, sizeof p);
    format_thousands(s->gradients, g, sizeof g);
    fprintf(f, "%s summary: %" PRId64 " layers, %s parameters, %s gradients, %.1f GFLOPs\n", name, s->layers, p, g, s->gflops);
}

static cJSON *shape_json(const Shape *s, int from) {
    cJSON *a = cJSON_CreateArray();
    for (int i = from; a && i < s->nd; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->d[i]));
    return a;
}

char *summary_json(const Model *m, const ModelSummary *s) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char printed[32];
    snprintf(printed, sizeof printed, "%.1f", s->gflops);
    cJSON_AddStringToObject(o, "model", m->cfg->name);
    cJSON_AddStringToObject(o, "file", m->cfg->path);
    cJSON_AddStringToObject(o, "scale", m->cfg->scale);
    cJSON_AddNumberToObject(o, "nc", (double)m->cfg->nc);
    cJSON_AddNumberToObject(o, "imgsz", s->imgsz);
    cJSON_AddNumberToObject(o, "parameters", (double)s->parameters);
    cJSON_AddNumberToObject(o, "gradients", (double)s->gradients);
    cJSON_AddNumberToObject(o, "gflops", s->gflops);
    cJSON_AddStringToObject(o, "gflops_printed", printed);
    cJSON_AddNumberToObject(o, "layer_count", (double)s->layers);
    cJSON_AddBoolToObject(o, "legacy_head", m->legacy);
    cJSON *st = cJSON_AddArrayToObject(o, "strides");
    for (int i = 0; st && i < s->nstrides; i++) cJSON_AddItemToArray(st, cJSON_CreateNumber(s->strides[i]));
    cJSON *sv = cJSON_AddArrayToObject(o, "save");
    for (int i = 0; sv && i < m->n_save; i++) cJSON_AddItemToArray(sv, cJSON_CreateNumber(m->save[i]));
    cJSON *layers = cJSON_AddArrayToObject(o, "layers");
    for (int i = 0; layers && i < m->cfg->n_rows; i++) {
        const RowInfo *r = &m->rows[i];
        const ModelRow *mr = &m->cfg->rows[i];
        cJSON *l = cJSON_CreateObject();
        if (!l) break;
        cJSON_AddNumberToObject(l, "index", i);
        if (mr->from_is_list) {
            cJSON *fa = cJSON_AddArrayToObject(l, "from");
            for (int k = 0; fa && k < mr->nfrom; k++) cJSON_AddItemToArray(fa, cJSON_CreateNumber(mr->from[k]));
        } else {
            cJSON_AddNumberToObject(l, "from", mr->from[0]);
        }
        cJSON_AddNumberToObject(l, "n", r->n);
        cJSON_AddNumberToObject(l, "params", (double)r->params);
        cJSON_AddStringToObject(l, "module", r->def->name);
        cJSON_AddStringToObject(l, "type", r->def->pytype);
        cJSON_AddStringToObject(l, "arguments", r->args);
        cJSON *outs = cJSON_AddArrayToObject(l, "outputs");
        for (int k = 0; outs && k < r->n_out; k++) cJSON_AddItemToArray(outs, shape_json(&m->g.tensors[r->out[k]].shape, 1));
        cJSON_AddItemToArray(layers, l);
    }
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    return txt;
}

char *state_dict_json(const Model *m) {
    cJSON *o = cJSON_CreateArray();
    for (int i = 0; o && i < m->g.n_state; i++) {
        const Tensor *t = &m->g.tensors[m->g.state[i]];
        cJSON *e = cJSON_CreateArray();
        if (!e) break;
        cJSON_AddItemToArray(e, cJSON_CreateString(t->name));
        cJSON_AddItemToArray(e, shape_json(&t->shape, 0));
        cJSON_AddItemToArray(e, cJSON_CreateString(t->kind == TK_PARAM ? (t->frozen ? "frozen" : "param") : "buffer"));
        cJSON_AddItemToArray(o, e);
    }
    char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return txt;
}

void state_dict_print(FILE *f, const Model *m) {
    for (int i = 0; i < m->g.n_state; i++) {
        const Tensor *t = &m->g.tensors[m->g.state[i]];
        fprintf(f, "%-6s %s [", t->kind == TK_PARAM ? (t->frozen ? "frozen" : "param") : "buffer", t->name);
        for (int k = 0; k < t->shape.nd; k++) fprintf(f, "%s%" PRId64, k ? ", " : "", t->shape.d[k]);
        fprintf(f, "]\n");
    }
}
