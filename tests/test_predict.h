/* tests/test_predict.h — helpers of the `yolort predict` tests (test_predict.c,
 * and the GPU suite's CUDA-plan case in test_train_cuda.c): a private
 * directory with a fixture model's plan, the command, label files read back
 * and compared with what Ultralytics' DetectionPredictor wrote
 * (tests/parity/predict). */
#ifndef YOLOCC_TEST_PREDICT_H
#define YOLOCC_TEST_PREDICT_H
#include <math.h>

#include "../runtime/data/image_io.h"
#include "test_util.h"

#define FIXTURE "tests/parity/predict"

static inline inline const char *predict_bin(void) {
    const char *b = getenv("YOLORT_BIN");
    return b ? b : "build/yolort";
}

/* A private directory holding MODEL's plan (tests/parity/MODEL.yaml) at
 * 64 px, batch 1: its validation graph takes 2 images, so 3 sources make a
 * partial batch. */
static inline void setup_dir_for(char dir[64], const char *model, const char *target) {
    strcpy(dir, "/tmp/yolocc-predict-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp");
    char args[512];
    snprintf(args, sizeof args, "tests/parity/%s.yaml --imgsz 64 --batch 1 %s -o %s/m.plan", model, target, dir);
    CliResult r = tu_run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
}

static inline void setup_dir(char dir[64], const char *model) { setup_dir_for(dir, model, ""); }

static inline void remove_dir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

static inline CliResult predict(const char *dir, const char *model, const char *extra) {
    char args[1024];
    snprintf(args, sizeof args, "predict %s/m.plan --weights " FIXTURE "/%s.safetensors --source " FIXTURE " --project %s/runs %s", dir, model, dir, extra);
    return tu_run_bin(predict_bin(), args);
}

typedef struct Row {
    int cls;
    double v[5]; /* cx cy w h conf */
} Row;

/* A label file as rows; *n = -1 when it is absent. */
static inline Row *read_rows(const char *path, int *n) {
    char *text = tu_slurp(path, NULL);
    *n = -1;
    if (!text) return NULL;
    Row *rows = malloc(sizeof(Row) * ((size_t)tu_lines(text) + 1));
    cr_assert(rows);
    *n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        Row *r = &rows[*n];
        int used = 0;
        cr_assert_eq(sscanf(line, "%d %lf %lf %lf %lf %lf%n", &r->cls, &r->v[0], &r->v[1], &r->v[2], &r->v[3], &r->v[4], &used), 6, "%s: bad line '%s'", path, line);
        cr_assert_eq(line[used], 0, "%s: trailing text in '%s'", path, line);
        (*n)++;
    }
    free(text);
    return rows;
}

/* Our labels against Ultralytics': the same detections in the same order
 * (score descending), classes equal, values within tol (on the CPU 2e-6:
 * both print 6 significant digits, and Ultralytics' predictor fuses BN into
 * the convolutions, which moves the last digit): RUN/labels/STEM.txt
 * against the fixture's EXPECTED_DIR/WANT_STEM.txt. Returns the number of
 * rows compared. */
static inline int compare_labels_as(const char *run, const char *stem, const char *expected_dir, const char *want_stem, double tol) {
    char got_path[512], want_path[512];
    snprintf(got_path, sizeof got_path, "%s/labels/%s.txt", run, stem);
    snprintf(want_path, sizeof want_path, FIXTURE "/%s/%s.txt", expected_dir, want_stem);
    int n_got, n_want;
    Row *got = read_rows(got_path, &n_got), *want = read_rows(want_path, &n_want);
    cr_assert_geq(n_want, 1, "%s: the fixture has no detections", want_path);
    cr_assert_eq(n_got, n_want, "%s: %d detections, Ultralytics %d", got_path, n_got, n_want);
    double worst = 0;
    for (int i = 0; i < n_got; i++) {
        cr_expect_eq(got[i].cls, want[i].cls, "%s line %d: class %d, Ultralytics %d", got_path, i + 1, got[i].cls, want[i].cls);
        for (int k = 0; k < 5; k++) {
            double d = fabs(got[i].v[k] - want[i].v[k]);
            worst = d > worst ? d : worst;
            cr_expect_leq(d, tol, "%s line %d value %d: %.6g, Ultralytics %.6g", got_path, i + 1, k, got[i].v[k], want[i].v[k]);
        }
        if (i) cr_expect_geq(got[i - 1].v[4], got[i].v[4], "%s: sorted by score", got_path);
    }
    cr_log_info("%s: %d detections as Ultralytics', worst difference %.3g", stem, n_got, worst);
    free(got);
    free(want);
    return n_got;
}

/* RUN/labels/STEM.txt against the fixture's EXPECTED_DIR/STEM.txt */
static inline int compare_labels(const char *run, const char *expected_dir, const char *stem, double tol) {
    return compare_labels_as(run, stem, expected_dir, stem, tol);
}

/* What a fixture case's run must show: each image's model input as the
 * console prints it (small, tall, wide) and the Speed line's shape. */
typedef struct PredictShapes {
    const char *image[3];
    const char *speed;
} PredictShapes;

/* The square cases at 64 px */
static const PredictShapes SQUARE64 = {{"64x64", "64x64", "64x64"}, "(1, 3, 64, 64)"};

/* MODEL's predictions with ARGS (the options of the fixture's CASE; plan
 * compiled with TARGET options) against the fixture's label files
 * MODEL/CASE within tol, the console lines (shapes in sh), and with images the annotated
 * images (libgd; a GPU machine may lack it). */
static inline void check_against_ultralytics_on(const char *model, const char *fixture_case, const char *args, const char *target, double tol, bool images,
                                                const PredictShapes *sh) {
    char dir[64], extra[256], run[128], expected_dir[128];
    setup_dir_for(dir, model, target);
    snprintf(extra, sizeof extra, "%s --save-txt --save-conf%s", args, images ? "" : " --no-save");
    snprintf(expected_dir, sizeof expected_dir, "%s/%s", model, fixture_case);
    CliResult r = predict(dir, model, extra);
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(run, sizeof run, "%s/runs/predict", dir);
    const char *stems[] = {"small", "tall", "wide"}; /* sorted() order of the directory */
    int total = 0;
    for (int i = 0; i < 3; i++) {
        int n = compare_labels(run, expected_dir, stems[i], tol);
        total += n;
        /* the console line: "image 1/3 /ABSOLUTE/PATH: 64x64 COUNTS, T ms", classes named from the weights' metadata */
        char head[4400], cwd[4096];
        cr_assert(getcwd(cwd, sizeof cwd));
        snprintf(head, sizeof head, "image %d/3 %s/" FIXTURE "/%s.png: %s ", i + 1, cwd, stems[i], sh->image[i]);
        const char *line = strstr(r.out, head);
        cr_assert(line, "no line starting '%s' in:\n%s", head, r.out);
        /* what the labels count, as Results.verbose() words it: "38 reds, 1 green, 41 blues, " */
        static const char *const NAMES[3] = {"red", "green", "blue"};
        int count[3] = {0}, m;
        char lab[512], want[256] = "";
        snprintf(lab, sizeof lab, "%s/labels/%s.txt", run, stems[i]);
        Row *rows = read_rows(lab, &m);
        for (int k = 0; k < m; k++)
            if (rows[k].cls >= 0 && rows[k].cls < 3) count[rows[k].cls]++;
        free(rows);
        for (int c = 0; c < 3; c++)
            if (count[c]) snprintf(want + strlen(want), sizeof want - strlen(want), "%d %s%s, ", count[c], NAMES[c], count[c] > 1 ? "s" : "");
        cr_expect(strncmp(line + strlen(head), want, strlen(want)) == 0, "expected '%s%s' in:\n%s", head, want, r.out);
        if (!images) continue;
        /* the annotated image: the original's size, boxes drawn on it */
        char shown[512], orig[512], err[256];
        snprintf(shown, sizeof shown, "%s/%s.jpg", run, stems[i]); /* STEM.jpg whatever the source format, as Ultralytics saves */
        snprintf(orig, sizeof orig, FIXTURE "/%s.png", stems[i]);
        Image a, b;
        cr_assert(image_load(shown, &a, err, sizeof err), "%s", err);
        cr_assert(image_load(orig, &b, err, sizeof err), "%s", err);
        cr_expect(a.w == b.w && a.h == b.h, "%s is %dx%d, the source %dx%d", shown, a.w, a.h, b.w, b.h);
        size_t changed = 0;
        for (size_t k = 0; a.w == b.w && a.h == b.h && k < (size_t)a.w * (size_t)a.h * 3; k++) changed += a.px[k] != b.px[k];
        cr_expect_gt(changed, 0, "%s: no box drawn", shown);
        image_free(&a);
        image_free(&b);
    }
    char speed[64];
    snprintf(speed, sizeof speed, "per image at shape %s\n", sh->speed);
    cr_expect(strstr(r.out, "Speed: ") && strstr(r.out, speed), "no speed line ending '%s' in:\n%s", speed, r.out);
    char saved[256];
    snprintf(saved, sizeof saved, "3 labels saved to %s/labels", run);
    cr_expect(strstr(r.out, saved), "no '%s' in:\n%s", saved, r.out);
    cr_log_info("%s, %s: %d detections over 3 images equal Ultralytics'", model, fixture_case, total);
    tu_free(&r);
    remove_dir(dir);
}

/* `yolort val` as `yolo val model=MODEL.pt` runs it (Model.val's rect=True)
 * against Ultralytics' DetectionValidator on tests/parity/val_rect (made by
 * tools/make_val_rect_fixture.py: 6 images of aspect ratios 0.5 to 2 at
 * 128 px, batch 2, so three rect batches of 96x160, 160x160 and 160x128):
 * predictions.json entry for entry (the images in Ultralytics' aspect-ratio
 * order, classes equal, boxes within box_tol pixels and scores within
 * score_tol) and the table's "all" row as its metrics print; --no-rect then
 * finds other boxes. target: yolocc's options for the plan (--imgsz 128 and
 * any --target). */
static inline void check_val_rect_on(const char *model, const char *target, double box_tol, double score_tol) {
    char dir[64], cmd[1024], path[256];
    setup_dir_for(dir, model, target);
    snprintf(cmd, sizeof cmd, "val %s/m.plan --weights " FIXTURE "/%s.safetensors --data tests/parity/val_rect/data.yaml --batch 2 --save-json --no-plots --project %s/runs --name rect",
             dir, model, dir);
    CliResult r = tu_run_bin(predict_bin(), cmd);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "per image (load, inference and postprocess) at shape (2, 3, 160, 128)\n"), "%s", r.out);
    snprintf(path, sizeof path, "tests/parity/val_rect/%s/metrics.json", model);
    char *text = tu_slurp(path, NULL);
    cJSON *want_m = cJSON_Parse(text);
    free(text);
    cr_assert(want_m, "%s", path);
    char row[128];
    snprintf(row, sizeof row, " all          6         18%11.3g%11.3g%11.3g%11.3g\n", cJSON_GetObjectItem(want_m, "mp")->valuedouble, cJSON_GetObjectItem(want_m, "mr")->valuedouble,
             cJSON_GetObjectItem(want_m, "map50")->valuedouble, cJSON_GetObjectItem(want_m, "map50_95")->valuedouble);
    cr_expect(strstr(r.out, row), "no '%s' in:\n%s", row, r.out);
    cJSON_Delete(want_m);
    snprintf(path, sizeof path, "%s/runs/rect/predictions.json", dir);
    text = tu_slurp(path, NULL);
    cJSON *got = cJSON_Parse(text);
    free(text);
    snprintf(path, sizeof path, "tests/parity/val_rect/%s/predictions.json", model);
    text = tu_slurp(path, NULL);
    cJSON *want = cJSON_Parse(text);
    free(text);
    cr_assert(got && want, "predictions.json");
    const int n = cJSON_GetArraySize(want);
    cr_assert_eq(cJSON_GetArraySize(got), n, "%d entries, Ultralytics %d", cJSON_GetArraySize(got), n);
    double worst_box = 0, worst_score = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *g = cJSON_GetArrayItem(got, i), *w = cJSON_GetArrayItem(want, i);
        cr_assert_str_eq(cJSON_GetObjectItem(g, "image_id")->valuestring, cJSON_GetObjectItem(w, "image_id")->valuestring, "entry %d", i);
        cr_expect_eq(cJSON_GetObjectItem(g, "category_id")->valueint, cJSON_GetObjectItem(w, "category_id")->valueint, "entry %d", i);
        for (int k = 0; k < 4; k++) {
            double d = fabs(cJSON_GetArrayItem(cJSON_GetObjectItem(g, "bbox"), k)->valuedouble - cJSON_GetArrayItem(cJSON_GetObjectItem(w, "bbox"), k)->valuedouble);
            worst_box = d > worst_box ? d : worst_box;
        }
        double d = fabs(cJSON_GetObjectItem(g, "score")->valuedouble - cJSON_GetObjectItem(w, "score")->valuedouble);
        worst_score = d > worst_score ? d : worst_score;
    }
    cr_expect_leq(worst_box, box_tol, "a box %g pixels from Ultralytics'", worst_box);
    cr_expect_leq(worst_score, score_tol, "a score %g from Ultralytics'", worst_score);
    cr_log_info("%s: %d predictions.json entries as Ultralytics' rect validation (worst box %g px, score %g); %s", model, n, worst_box, worst_score, row);
    tu_free(&r);
    /* square batches (rect=False) see other pixels: other boxes */
    snprintf(cmd, sizeof cmd, "val %s/m.plan --weights " FIXTURE "/%s.safetensors --data tests/parity/val_rect/data.yaml --batch 2 --save-json --no-plots --no-rect --project %s/runs --name square",
             dir, model, dir);
    r = tu_run_bin(predict_bin(), cmd);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "at shape (2, 3, 128, 128)\n"), "%s", r.out);
    snprintf(path, sizeof path, "%s/runs/square/predictions.json", dir);
    text = tu_slurp(path, NULL);
    cJSON *square = cJSON_Parse(text);
    free(text);
    cr_assert(square);
    int moved = 0;
    for (int i = 0; i < n && i < cJSON_GetArraySize(square); i++) {
        const cJSON *a = cJSON_GetObjectItem(cJSON_GetArrayItem(square, i), "bbox"), *b = cJSON_GetObjectItem(cJSON_GetArrayItem(want, i), "bbox");
        moved += fabs(cJSON_GetArrayItem(a, 0)->valuedouble - cJSON_GetArrayItem(b, 0)->valuedouble) > 0.01;
    }
    cr_expect_gt(moved, n / 2, "--no-rect moved only %d of %d boxes", moved, n);
    cJSON_Delete(square);
    cJSON_Delete(got);
    cJSON_Delete(want);
    tu_free(&r);
    remove_dir(dir);
}

/* The table from the last "  all " row of OUT through the end of its block (the per-class rows). */
static inline char *last_table(const char *out) {
    const char *at = NULL;
    for (const char *p = out; (p = strstr(p, "                   all ")); p++) at = p;
    cr_assert(at, "no 'all' row in:\n%s", out);
    const char *end = at;
    for (int k = 0; k < 4 && end; k++) end = strchr(end + 1, '\n'); /* all + 3 classes */
    cr_assert(end);
    return strndup(at, (size_t)(end - at));
}

/* The trainer validates in rect batches too (its val loader's rect=True, at
 * 2 x batch): one epoch on val_rect from the fixture's detecting weights
 * (a tiny lr, so the table is not empty), then the final evaluation of
 * best.safetensors equals `yolort val --batch 2` of that file, digit for
 * digit, and differs from `--no-rect`'s. target: yolocc's options for the
 * plan (--imgsz 128 and any --target). */
static inline void check_trainer_rect_on(const char *target) {
    char dir[64], cmd[1024];
    setup_dir_for(dir, "v8tiny", target);
    snprintf(cmd, sizeof cmd, "train %s/m.plan --data tests/parity/val_rect/data.yaml --weights " FIXTURE "/v8tiny.safetensors --epochs 1 --lr0 1e-6 --warmup-epochs 0 --no-plots --project %s/runs --name t",
             dir, dir);
    CliResult tr = tu_run_bin(predict_bin(), cmd);
    cr_assert_eq(tr.status, 0, "%s\n%s", tr.out, tr.err);
    char *trained = last_table(tr.out);
    snprintf(cmd, sizeof cmd, "val %s/m.plan --weights %s/runs/t/weights/best.safetensors --data tests/parity/val_rect/data.yaml --batch 2 --no-plots", dir, dir);
    CliResult v = tu_run_bin(predict_bin(), cmd);
    cr_assert_eq(v.status, 0, "%s", v.err);
    char *valued = last_table(v.out);
    cr_expect_str_eq(valued, trained, "yolort val:\n%s\nthe trainer's final evaluation:\n%s", valued, trained);
    double p, r, map50;
    cr_assert_eq(sscanf(trained, " all %*d %*d %lf %lf %lf", &p, &r, &map50), 3, "%s", trained);
    cr_expect_gt(map50, 0, "an empty table proves nothing:\n%s", trained);
    tu_free(&v);
    snprintf(cmd, sizeof cmd, "val %s/m.plan --weights %s/runs/t/weights/best.safetensors --data tests/parity/val_rect/data.yaml --batch 2 --no-plots --no-rect", dir, dir);
    v = tu_run_bin(predict_bin(), cmd);
    cr_assert_eq(v.status, 0, "%s", v.err);
    char *square = last_table(v.out);
    cr_expect(strcmp(square, trained) != 0, "square validation printed the rect table:\n%s", square);
    cr_log_info("trainer's rect validation = yolort val's:\n%s\nsquare:\n%s", trained, square);
    free(trained), free(valued), free(square);
    tu_free(&v);
    tu_free(&tr);
    remove_dir(dir);
}

#endif
