/* tests/test_predict.c — `yolort predict` as a user runs it, against what
 * Ultralytics' DetectionPredictor wrote for the same weights and images
 * (tests/parity/predict, made by tools/make_predict_fixture.py): the label
 * files line by line, the console lines, the annotated images, the run
 * directory, and one clear error with no output for bad input. */
#include <math.h>

#include "../runtime/data/image_io.h"
#include "test_gpu.h"

#define FIXTURE "tests/parity/predict"

static const char *yolort_bin(void) {
    const char *b = getenv("YOLORT_BIN");
    return b ? b : "build/yolort";
}

/* A private directory holding MODEL's plan (tests/parity/MODEL.yaml) at
 * 64 px, batch 1: its validation graph takes 2 images, so 3 sources make a
 * partial batch. */
static void setup_dir_for(char dir[64], const char *model, const char *target) {
    strcpy(dir, "/tmp/yolocc-predict-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp");
    char args[512];
    snprintf(args, sizeof args, "tests/parity/%s.yaml --imgsz 64 --batch 1 %s -o %s/m.plan", model, target, dir);
    CliResult r = tu_run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
}

static void setup_dir(char dir[64], const char *model) { setup_dir_for(dir, model, ""); }

static void remove_dir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

static CliResult predict(const char *dir, const char *model, const char *extra) {
    char args[1024];
    snprintf(args, sizeof args, "predict %s/m.plan --weights " FIXTURE "/%s.safetensors --source " FIXTURE " --project %s/runs %s", dir, model, dir, extra);
    return tu_run_bin(yolort_bin(), args);
}

typedef struct Row {
    int cls;
    double v[5]; /* cx cy w h conf */
} Row;

/* A label file as rows; *n = -1 when it is absent. */
static Row *read_rows(const char *path, int *n) {
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
 * the convolutions, which moves the last digit). Returns the number of rows
 * compared. */
static int compare_labels(const char *run, const char *expected_dir, const char *stem, double tol) {
    char got_path[512], want_path[512];
    snprintf(got_path, sizeof got_path, "%s/labels/%s.txt", run, stem);
    snprintf(want_path, sizeof want_path, FIXTURE "/%s/%s.txt", expected_dir, stem);
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

static void check_against_ultralytics_on(const char *model, const char *conf, const char *target, double tol) {
    char dir[64], extra[128], run[128], expected_dir[64];
    setup_dir_for(dir, model, target);
    snprintf(extra, sizeof extra, "--conf %s --save-txt --save-conf", conf);
    snprintf(expected_dir, sizeof expected_dir, "%s/conf%s", model, conf);
    CliResult r = predict(dir, model, extra);
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(run, sizeof run, "%s/runs/predict", dir);
    const char *stems[] = {"small", "tall", "wide"}; /* sorted() order of the directory */
    int total = 0;
    for (int i = 0; i < 3; i++) {
        int n = compare_labels(run, expected_dir, stems[i], tol);
        total += n;
        /* the console line: "image 1/3 PATH: 64x64 COUNTS, T ms", classes named from the weights' metadata */
        char head[256];
        snprintf(head, sizeof head, "image %d/3 " FIXTURE "/%s.png: 64x64 ", i + 1, stems[i]);
        const char *line = strstr(r.out, head);
        cr_assert(line, "no line starting '%s' in:\n%s", head, r.out);
        int reds = 0, cls0 = 0, m;
        char lab[512];
        snprintf(lab, sizeof lab, "%s/labels/%s.txt", run, stems[i]);
        Row *rows = read_rows(lab, &m);
        for (int k = 0; k < m; k++) cls0 += rows[k].cls == 0;
        free(rows);
        cr_assert(cls0 > 1, "the fixture gives class 0 several boxes");
        cr_expect_eq(sscanf(line + strlen(head), "%d reds,", &reds), 1, "expected '%d reds, ...' after '%s'", cls0, head);
        cr_expect_eq(reds, cls0, "%s: the line counts %d reds, the labels %d", stems[i], reds, cls0);
        /* the annotated image: the original's size, boxes drawn on it */
        char shown[512], orig[512], err[256];
        snprintf(shown, sizeof shown, "%s/%s.png", run, stems[i]);
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
    cr_expect(strstr(r.out, "Speed: ") && strstr(r.out, "per image at shape (2, 3, 64, 64)"), "no speed line:\n%s", r.out);
    char saved[256];
    snprintf(saved, sizeof saved, "3 labels saved to %s/labels", run);
    cr_expect(strstr(r.out, saved), "no '%s' in:\n%s", saved, r.out);
    cr_log_info("%s at conf %s: %d detections over 3 images equal Ultralytics'", model, conf, total);
    tu_free(&r);
    remove_dir(dir);
}

static void check_against_ultralytics(const char *model, const char *conf) { check_against_ultralytics_on(model, conf, "", 2e-6); }

Test(predict, yolov8_style_labels_equal_ultralytics_predictor, .timeout = 300) { check_against_ultralytics("v8tiny", "0.25"); }
Test(predict, yolov8_style_labels_equal_ultralytics_predictor_at_conf_0_6, .timeout = 300) { check_against_ultralytics("v8tiny", "0.6"); }

/* an end-to-end head: its one2one top-k selection instead of NMS, then conf */
Test(predict, yolov10_style_labels_equal_ultralytics_predictor, .timeout = 300) { check_against_ultralytics("v10tiny", "0.25"); }
Test(predict, yolov10_style_labels_equal_ultralytics_predictor_at_conf_0_6, .timeout = 300) { check_against_ultralytics("v10tiny", "0.6"); }

/* --max-det keeps the highest-scoring detections: the first lines of the full list */
Test(predict, max_det_keeps_the_best, .timeout = 300) {
    char dir[64], path[256];
    setup_dir(dir, "v8tiny");
    CliResult r = predict(dir, "v8tiny", "--max-det 4 --save-txt --save-conf --no-save");
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(path, sizeof path, "%s/runs/predict/labels/wide.txt", dir);
    int n, m;
    Row *got = read_rows(path, &n), *all = read_rows(FIXTURE "/v8tiny/conf0.25/wide.txt", &m);
    cr_assert_eq(n, 4);
    for (int i = 0; i < n; i++) cr_expect(got[i].cls == all[i].cls && fabs(got[i].v[4] - all[i].v[4]) <= 2e-6, "line %d", i + 1);
    snprintf(path, sizeof path, "%s/runs/predict/wide.png", dir);
    struct stat st;
    cr_expect_neq(stat(path, &st), 0, "--no-save wrote %s", path);
    free(got);
    free(all);
    tu_free(&r);
    remove_dir(dir);
}

/* A second run goes to predict2 (Ultralytics' increment_path); --exist-ok reuses predict */
Test(predict, run_directories_increment, .timeout = 300) {
    char dir[64], path[256];
    setup_dir(dir, "v8tiny");
    struct stat st;
    for (int k = 0; k < 3; k++) {
        CliResult r = predict(dir, "v8tiny", k == 2 ? "--exist-ok" : "");
        cr_assert_eq(r.status, 0, "%s", r.err);
        tu_free(&r);
    }
    snprintf(path, sizeof path, "%s/runs/predict2/tall.png", dir);
    cr_expect_eq(stat(path, &st), 0, "no %s", path);
    snprintf(path, sizeof path, "%s/runs/predict3", dir);
    cr_expect_neq(stat(path, &st), 0, "--exist-ok made %s", path);
    remove_dir(dir);
}

/* Bad input: one error line naming the problem, exit 2, no run directory. */
Test(predict, bad_input_fails_cleanly, .timeout = 300) {
    char dir[64];
    setup_dir(dir, "v8tiny");
    char notimg[128], empty[128], cmd[300];
    snprintf(notimg, sizeof notimg, "%s/notes.txt", dir);
    snprintf(empty, sizeof empty, "%s/empty", dir);
    snprintf(cmd, sizeof cmd, "echo hello > %s && mkdir %s", notimg, empty);
    cr_assert_eq(system(cmd), 0);
    struct {
        char args[700];
        const char *msg;
    } cases[] = {
        {"", "needs"},
        {"", "nope.safetensors"},
        {"", "not an image file"},
        {"", "no images found"},
        {"", "Transferred 0/"},
        {"", "--conf must be a number in [0, 1]"},
        {"", "no weights"},
    };
    snprintf(cases[0].args, sizeof cases[0].args, "--weights " FIXTURE "/v8tiny.safetensors --source");
    snprintf(cases[1].args, sizeof cases[1].args, "--weights " FIXTURE "/nope.safetensors --source " FIXTURE);
    snprintf(cases[2].args, sizeof cases[2].args, "--weights " FIXTURE "/v8tiny.safetensors --source %s", notimg);
    snprintf(cases[3].args, sizeof cases[3].args, "--weights " FIXTURE "/v8tiny.safetensors --source %s", empty);
    snprintf(cases[4].args, sizeof cases[4].args, "--weights tests/parity/v11tiny.safetensors --source " FIXTURE);
    snprintf(cases[5].args, sizeof cases[5].args, "--weights " FIXTURE "/v8tiny.safetensors --source " FIXTURE " --conf 2");
    snprintf(cases[6].args, sizeof cases[6].args, "--source " FIXTURE);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[900];
        snprintf(args, sizeof args, "predict %s/m.plan --project %s/runs %s", dir, dir, cases[i].args);
        CliResult r = tu_run_bin(yolort_bin(), args);
        cr_expect_eq(r.status, 2, "case %zu (%s): exit %d, stderr %s", i, cases[i].args, r.status, r.err);
        cr_expect(strstr(r.err, cases[i].msg), "case %zu: expected '%s' in: %s", i, cases[i].msg, r.err);
        cr_expect_eq(tu_lines(r.err), 1, "case %zu: one error line, got: %s", i, r.err);
        tu_free(&r);
    }
    char runs[128];
    struct stat st;
    snprintf(runs, sizeof runs, "%s/runs", dir);
    cr_expect_neq(stat(runs, &st), 0, "a failed command created %s", runs);
    remove_dir(dir);
}

/* GPU suite: an fp32 CUDA plan's validation graph on the device (cuDNN
 * convolutions, generated kernels, the box decode) gives the same label
 * files as Ultralytics', within 1e-5 (cuDNN's engines sum in another order
 * than the CPU; fp32 throughout). */
Test(predict, fp32_cuda_plan_labels_equal_ultralytics_predictor, .timeout = 600) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    cuda_device_close(&probe);
    check_against_ultralytics_on("v8tiny", "0.25", "--precision fp32 --target cuda --arch sm_80,sm_90", 1e-5);
    check_against_ultralytics_on("v10tiny", "0.25", "--precision fp32 --target cuda --arch sm_80,sm_90", 1e-5);
}

/* `yolort val` end to end: a dataset whose labels are what `yolort predict`
 * found with the same weights (its 3 best boxes an image, conf 0.8) must be
 * found again: every box recalled, mAP50 above 0.9 (not 0.995: validation
 * resizes at load time with its own interpolation and keeps every class of
 * an anchor above 0.001, so the ranking moves a little). Wrong weights, a
 * lost letterbox offset or a box in the wrong frame all put it near 0. */
Test(predict, val_recalls_the_boxes_predict_wrote, .timeout = 300) {
    char dir[64], cmd[1024];
    setup_dir(dir, "v8tiny");
    snprintf(cmd, sizeof cmd, "mkdir -p %s/ds/images/val %s/ds/labels/val && cp " FIXTURE "/*.png %s/ds/images/val/ && printf '%s' > %s/ds/data.yaml", dir, dir, dir,
             "train: images/val\\nval: images/val\\nnames:\\n  0: red\\n  1: green\\n  2: blue\\n", dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    CliResult r = predict(dir, "v8tiny", "--conf 0.8 --max-det 3 --save-txt --no-save");
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "cp %s/runs/predict/labels/*.txt %s/ds/labels/val/", dir, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "val %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --data %s/ds/data.yaml", dir, dir);
    r = tu_run_bin(yolort_bin(), cmd);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *all = strstr(r.out, "  all ");
    cr_assert(all, "no 'all' row in:\n%s", r.out);
    int images, instances;
    double p, rec, map50, map;
    cr_assert_eq(sscanf(all, " all %d %d %lf %lf %lf %lf", &images, &instances, &p, &rec, &map50, &map), 6, "%s", all);
    cr_expect(images == 3 && instances == 9, "%d images, %d instances", images, instances);
    cr_expect_eq(rec, 1.0, "recall %g", rec);
    cr_expect_geq(map50, 0.9, "mAP50 %g", map50);
    cr_log_info("val on predict's boxes: P %g R %g mAP50 %g mAP50-95 %g", p, rec, map50, map);
    tu_free(&r);
    /* a data file of another class count is refused */
    snprintf(cmd, sizeof cmd, "printf 'train: images/val\\nval: images/val\\nnames:\\n  0: red\\n' > %s/ds/one.yaml", dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "val %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --data %s/ds/one.yaml", dir, dir);
    r = tu_run_bin(yolort_bin(), cmd);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "has 1 classes, the plan was compiled for 3") && tu_lines(r.err) == 1, "%s", r.err);
    tu_free(&r);
    remove_dir(dir);
}
