/* tests/test_corpus.c — every in-scope upstream YAML and scale in
 * ../shared/reference/ultralytics-cfg against what the real Ultralytics 8.3
 * package computes (tests/fixtures/ultralytics_summaries.json, made by
 * tools/ultralytics_reference.py): parameters, gradients, layer count, raw
 * GFLOPs, save list, every row of the table, and state_dict names, shapes and
 * order; and the project's models/ files against the fixture cases of their
 * upstream namesakes. The corpus tests skip when it is absent. */
#include <cjson/cJSON.h>
#include <math.h>

#include "test_util.h"

#define FIXTURE "tests/fixtures/ultralytics_summaries.json"

static const char *OUT_OF_SCOPE[] = {"rtdetr-l.yaml", "rtdetr-resnet101.yaml", "rtdetr-resnet50.yaml", "rtdetr-x.yaml",
                                     "yolov8-rtdetr.yaml", "yolo26.yaml", "yolov12_sunsmarterjie.yaml"};

static cJSON *load_fixture(void) {
    char *txt = tu_slurp(FIXTURE, NULL);
    cr_assert(txt, "cannot read %s", FIXTURE);
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    cr_assert(j, "bad JSON in %s", FIXTURE);
    return j;
}

static int64_t num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "fixture field %s", k);
    return (int64_t)v->valuedouble;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsString(v), "fixture field %s", k);
    return v->valuestring;
}

/* Compiles dir/<the case's file> at the case's scale, nc and imgsz and
 * compares everything the fixture holds for it. */
static void check_case(const char *dir, const cJSON *c) {
    char path[512], tag[600];
    const char *file = str(c, "file"), *scale = str(c, "scale");
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(tag, sizeof tag, "%s scale=%s nc=%lld imgsz=%lld", path, scale, (long long)num(c, "nc"), (long long)num(c, "imgsz"));
    Compiled m;
    cr_assert(tu_compile(&m, path, scale[0] ? scale : NULL, num(c, "nc"), (int)num(c, "imgsz")), "%s: %s", tag, m.d.msg);
    cr_expect_eq(m.s.parameters, num(c, "parameters"), "%s parameters %lld", tag, (long long)m.s.parameters);
    cr_expect_eq(m.s.gradients, num(c, "gradients"), "%s gradients", tag);
    cr_expect_eq(m.s.layers, num(c, "layers"), "%s layers %lld", tag, (long long)m.s.layers);
    double g = cJSON_GetObjectItemCaseSensitive(c, "gflops")->valuedouble;
    cr_expect(fabs(m.s.gflops - g) <= 1e-9 * g, "%s gflops %.10g vs %.10g", tag, m.s.gflops, g);
    char printed[32];
    snprintf(printed, sizeof printed, "%.1f", m.s.gflops);
    cr_expect_str_eq(printed, str(c, "gflops_printed"), "%s", tag);
    const cJSON *save = cJSON_GetObjectItemCaseSensitive(c, "save");
    cr_expect_eq(cJSON_GetArraySize(save), m.m.n_save, "%s save list length", tag);
    for (int i = 0; i < m.m.n_save && i < cJSON_GetArraySize(save); i++)
        cr_expect_eq(m.m.save[i], cJSON_GetArrayItem(save, i)->valueint, "%s save[%d]", tag, i);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(c, "rows");
    cr_expect_eq(cJSON_GetArraySize(rows), m.cfg.n_rows, "%s rows", tag);
    for (int i = 0; i < m.cfg.n_rows && i < cJSON_GetArraySize(rows); i++) {
        const cJSON *r = cJSON_GetArrayItem(rows, i);
        const RowInfo *ri = &m.m.rows[i];
        cr_expect_eq(ri->n, num(r, "n"), "%s row %d n", tag, i);
        cr_expect_eq(ri->params, num(r, "params"), "%s row %d params %lld", tag, i, (long long)ri->params);
        cr_expect_str_eq(ri->def->pytype, str(r, "module"), "%s row %d", tag, i);
        cr_expect_str_eq(ri->args, str(r, "args"), "%s row %d", tag, i);
    }
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(c, "state_dict");
    if (sd) {
        cr_expect_eq(cJSON_GetArraySize(sd), m.m.g.n_state, "%s state_dict size", tag);
        for (int i = 0; i < m.m.g.n_state && i < cJSON_GetArraySize(sd); i++) {
            const cJSON *e = cJSON_GetArrayItem(sd, i), *shape = cJSON_GetArrayItem(e, 1);
            const Tensor *t = &m.m.g.tensors[m.m.g.state[i]];
            cr_expect_str_eq(t->name, cJSON_GetArrayItem(e, 0)->valuestring, "%s state_dict[%d]", tag, i);
            bool same = cJSON_GetArraySize(shape) == t->shape.nd;
            for (int k = 0; same && k < t->shape.nd; k++) same = cJSON_GetArrayItem(shape, k)->valueint == t->shape.d[k];
            cr_expect(same, "%s %s shape", tag, t->name);
        }
    }
    tu_release(&m);
}

Test(corpus, every_upstream_yaml_and_scale_matches_ultralytics, .timeout = 600) {
    const char *corpus = tu_corpus();
    if (!corpus) cr_skip_test("no Ultralytics corpus at ../shared/reference/ultralytics-cfg");
    cJSON *j = load_fixture();
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(j, "cases"), *c;
    int n = 0;
    cJSON_ArrayForEach(c, cases) {
        check_case(corpus, c);
        n++;
    }
    cr_log_info("%d Ultralytics cases compared (%s %s)", n, "ultralytics", str(j, "ultralytics_version"));
    cr_expect_geq(n, 70);
    cJSON_Delete(j);
}

/* The project's own models/ files mean what the upstream files of the same
 * name mean: each is held to every fixture case of its upstream twin. Needs
 * no corpus (the fixture is in the tree). */
Test(corpus, project_models_match_their_upstream_twins, .timeout = 600) {
    static const char *twins[] = {"yolov3.yaml", "yolov5.yaml", "yolov8.yaml", "yolov9t.yaml", "yolov9s.yaml", "yolov10n.yaml", "yolov10s.yaml", "yolo11.yaml", "yolo12.yaml"};
    cJSON *j = load_fixture();
    for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++) {
        int n = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "cases")) {
            if (strcmp(str(c, "file"), twins[i]) != 0) continue;
            check_case("models", c);
            n++;
        }
        cr_expect_gt(n, 0, "no fixture case for %s", twins[i]);
        cr_log_info("models/%s: %d Ultralytics cases compared", twins[i], n);
    }
    cJSON_Delete(j);
}

/* Each in-scope file in the corpus has at least one fixture case at every scale. */
Test(corpus, fixture_covers_every_in_scope_file) {
    const char *corpus = tu_corpus();
    if (!corpus) cr_skip_test("no Ultralytics corpus at ../shared/reference/ultralytics-cfg");
    cJSON *j = load_fixture();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s", corpus);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char line[256];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (!strstr(line, ".yaml")) continue;
        bool skip = false;
        for (size_t i = 0; i < sizeof OUT_OF_SCOPE / sizeof OUT_OF_SCOPE[0]; i++) skip |= strcmp(line, OUT_OF_SCOPE[i]) == 0;
        if (skip) {
            cr_log_info("skipped (out of scope): %s", line);
            continue;
        }
        int found = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "cases")) found += strcmp(str(c, "file"), line) == 0;
        cr_expect_gt(found, 0, "%s has no Ultralytics fixture case", line);
    }
    pclose(p);
    cJSON_Delete(j);
}

/* Out-of-scope files fail cleanly: one error line, exit 2. */
Test(corpus, out_of_scope_files_fail_cleanly) {
    const char *corpus = tu_corpus();
    if (!corpus) cr_skip_test("no Ultralytics corpus at ../shared/reference/ultralytics-cfg");
    const char *files[] = {"rtdetr-l.yaml", "yolov8-rtdetr.yaml", "yolo26.yaml"};
    for (int i = 0; i < 3; i++) {
        char args[600];
        snprintf(args, sizeof args, "summary %s/%s", corpus, files[i]);
        CliResult r = tu_run(args);
        cr_expect_eq(r.status, 2, "%s", files[i]);
        cr_expect_eq(tu_lines(r.err) - (strstr(r.err, "warning:") ? 1 : 0), 1, "%s: %s", files[i], r.err);
        cr_expect(strstr(r.err, ": error: "), "%s", r.err);
        cr_expect_eq(r.out[0], 0);
        tu_free(&r);
    }
}
