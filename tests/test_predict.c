/* tests/test_predict.c — `yolort predict` as a user runs it, against what
 * Ultralytics' DetectionPredictor wrote for the same weights and images
 * (tests/parity/predict, made by tools/make_predict_fixture.py): the label
 * files line by line, the console lines, the annotated images, the run
 * directory, and one clear error with no output for bad input. */
#include <cjson/cJSON.h>
#include <openssl/evp.h>

#include "../runtime/data/video_io.h"
#include "test_predict.h"

static void check_against_ultralytics(const char *model, const char *fixture_case, const char *args) {
    check_against_ultralytics_on(model, fixture_case, args, "", 2e-6, true, &SQUARE64);
}

/* `yolo predict`'s defaults for a .pt model (rect, batch 1) at 128 px: each
 * image letterboxed to the smallest multiples of 32 that hold it, the shapes
 * Ultralytics' predictor fed its model (small 40x30 and wide 96x64 -> 96x128,
 * tall 64x96 -> 128x96); the validation graph is rebuilt for each. 3e-6: the
 * printed sixth digit, which BN folded into the convs moves by up to 3 here. */
static const PredictShapes RECT128 = {{"96x128", "128x96", "96x128"}, "(1, 3, 96, 128)"};

Test(predict, yolov8_style_rect_letterbox_equals_ultralytics_predictor, .timeout = 300) {
    check_against_ultralytics_on("v8tiny", "rect128", "--conf 0.25", "--imgsz 128", 3.5e-6, true, &RECT128);
}

Test(predict, yolov10_style_rect_letterbox_equals_ultralytics_predictor, .timeout = 300) {
    check_against_ultralytics_on("v10tiny", "rect128", "--conf 0.25", "--imgsz 128", 3.5e-6, false, &RECT128);
}

Test(predict, yolov8_style_labels_equal_ultralytics_predictor, .timeout = 300) { check_against_ultralytics("v8tiny", "conf0.25", "--conf 0.25"); }
Test(predict, yolov8_style_labels_equal_ultralytics_predictor_at_conf_0_6, .timeout = 300) { check_against_ultralytics("v8tiny", "conf0.6", "--conf 0.6"); }
/* Ultralytics' classes filter: anchors whose best class is left out are no candidates */
Test(predict, yolov8_style_classes_filter_equals_ultralytics, .timeout = 300) { check_against_ultralytics("v8tiny", "conf0.25_classes_1_2", "--classes 1,2"); }
/* at IoU 0.3 boxes of different classes overlap enough that class-agnostic NMS keeps fewer (34 against 41 in wide.png) */
Test(predict, yolov8_style_iou_and_agnostic_nms_equal_ultralytics, .timeout = 300) {
    check_against_ultralytics("v8tiny", "conf0.25_iou0.3", "--iou 0.3");
    check_against_ultralytics("v8tiny", "conf0.25_iou0.3_agnostic", "--iou 0.3 --agnostic-nms");
}

/* an end-to-end head: its one2one top-k selection instead of NMS, then conf (and classes, after max_det; no NMS for IoU to change) */
Test(predict, yolov10_style_labels_equal_ultralytics_predictor, .timeout = 300) { check_against_ultralytics("v10tiny", "conf0.25", "--conf 0.25"); }
Test(predict, yolov10_style_labels_equal_ultralytics_predictor_at_conf_0_6, .timeout = 300) { check_against_ultralytics("v10tiny", "conf0.6", "--conf 0.6"); }
Test(predict, yolov10_style_classes_and_agnostic_equal_ultralytics, .timeout = 300) {
    check_against_ultralytics("v10tiny", "conf0.25_classes_1_2", "--classes 1,2");
    check_against_ultralytics("v10tiny", "conf0.25_iou0.3_agnostic", "--iou 0.3 --agnostic-nms");
}

/* `yolort ARGS` must fail as bad input: exit 2, one error line holding msg. */
static void expect_refused(const char *args, const char *msg) {
    CliResult r = tu_run_bin(predict_bin(), args);
    cr_expect_eq(r.status, 2, "yolort %s: exit %d, stderr %s", args, r.status, r.err);
    cr_expect(strstr(r.err, msg), "yolort %s: expected '%s' in: %s", args, msg, r.err);
    cr_expect_eq(tu_lines(r.err), 1, "yolort %s: one error line, got: %s", args, r.err);
    tu_free(&r);
}

/* ... and nothing written: no DIR/runs, then DIR removed */
static void expect_nothing_written_and_remove(const char *dir) {
    char runs[128];
    struct stat st;
    snprintf(runs, sizeof runs, "%s/runs", dir);
    cr_expect_neq(stat(runs, &st), 0, "a failed command created %s", runs);
    remove_dir(dir);
}

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
    snprintf(path, sizeof path, "%s/runs/predict/wide.jpg", dir);
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
    snprintf(path, sizeof path, "%s/runs/predict2/tall.jpg", dir);
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
    snprintf(notimg, sizeof notimg, "%s/notes.dat", dir);
    snprintf(empty, sizeof empty, "%s/empty", dir);
    snprintf(cmd, sizeof cmd, "echo hello > %s && mkdir %s", notimg, empty);
    cr_assert_eq(system(cmd), 0);
    struct {
        char args[700];
        const char *msg;
    } cases[] = {
        {"", "needs"},
        {"", "nope.safetensors"},
        {"", "no images or videos found"},
        {"", "no images or videos found"},
        {"", "Transferred 0/"},
        {"", "--conf must be a number in [0, 1]"},
        {"", "no weights"},
        {"", "--classes: 3 is not a class of the model (0..2)"},
        {"", "--classes must be class indices separated by commas"},
        {"", "cannot read it as a video"},
        {"", "--batch must be an integer in [1, 1024]"},
    };
    snprintf(cases[0].args, sizeof cases[0].args, "--weights " FIXTURE "/v8tiny.safetensors --source");
    snprintf(cases[1].args, sizeof cases[1].args, "--weights " FIXTURE "/nope.safetensors --source " FIXTURE);
    snprintf(cases[2].args, sizeof cases[2].args, "--weights " FIXTURE "/v8tiny.safetensors --source %s", notimg);
    snprintf(cases[3].args, sizeof cases[3].args, "--weights " FIXTURE "/v8tiny.safetensors --source %s", empty);
    snprintf(cases[4].args, sizeof cases[4].args, "--weights tests/parity/v11tiny.safetensors --source " FIXTURE);
    snprintf(cases[5].args, sizeof cases[5].args, "--weights " FIXTURE "/v8tiny.safetensors --source " FIXTURE " --conf 2");
    snprintf(cases[6].args, sizeof cases[6].args, "--source " FIXTURE);
    snprintf(cases[7].args, sizeof cases[7].args, "--weights " FIXTURE "/v8tiny.safetensors --source " FIXTURE " --classes 0,3");
    snprintf(cases[8].args, sizeof cases[8].args, "--weights " FIXTURE "/v8tiny.safetensors --source " FIXTURE " --classes 1,x");
    snprintf(cmd, sizeof cmd, "head -c 3000 /dev/urandom > %s/broken.mp4", dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cases[9].args, sizeof cases[9].args, "--weights " FIXTURE "/v8tiny.safetensors --source %s/broken.mp4", dir);
    snprintf(cases[10].args, sizeof cases[10].args, "--weights " FIXTURE "/v8tiny.safetensors --source " FIXTURE " --batch 0");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[900];
        snprintf(args, sizeof args, "predict %s/m.plan --project %s/runs %s", dir, dir, cases[i].args);
        expect_refused(args, cases[i].msg);
    }
    expect_nothing_written_and_remove(dir);
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
    /* --no-rect: the 64x64 input predict gave these images (rect validation pads them into 96x96) */
    snprintf(cmd, sizeof cmd, "val %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --data %s/ds/data.yaml --project %s/runs --no-rect", dir, dir, dir);
    r = tu_run_bin(predict_bin(), cmd);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char want[200];
    snprintf(want, sizeof want, "Results saved to %s/runs/val\n", dir);
    cr_expect(strstr(r.out, want), "%s", r.out);
    /* the plots, and a confusion matrix whose class columns hold each label once */
    const char *plots[] = {"confusion_matrix.svg", "confusion_matrix_normalized.svg", "BoxPR_curve.svg", "BoxF1_curve.svg", "BoxP_curve.svg", "BoxR_curve.svg",
                           "val_batch0_labels.jpg", "val_batch0_pred.jpg"};
    for (size_t i = 0; i < sizeof plots / sizeof plots[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/runs/val/%s", dir, plots[i]);
        cr_expect_eq(access(cmd, F_OK), 0, "no %s", cmd);
    }
    snprintf(cmd, sizeof cmd, "%s/runs/val/confusion_matrix.csv", dir);
    char *csv = tu_slurp(cmd, NULL);
    cr_assert(csv, "no %s", cmd);
    long col[4] = {0}, found = 0;
    const char *line = strchr(csv, '\n');
    cr_expect(strncmp(csv, "Predicted,red,green,blue,background\n", 36) == 0, "%s", csv);
    for (int row = 0; row < 4 && line; row++, line = strchr(line + 1, '\n')) {
        long v[4];
        cr_assert_eq(sscanf(strchr(line, ',') + 1, "%ld,%ld,%ld,%ld", &v[0], &v[1], &v[2], &v[3]), 4, "%s", csv);
        for (int c = 0; c < 4; c++) col[c] += v[c];
        if (row < 3) found += v[0] + v[1] + v[2];
    }
    cr_log_info("val's confusion matrix:\n%s", csv);
    /* every label matched some detection above 0.25 (recall 1), whatever its
     * class: the model scores several classes on the same box */
    cr_expect(col[0] + col[1] + col[2] == 9 && found == 9, "%s", csv);
    free(csv);
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
    r = tu_run_bin(predict_bin(), cmd);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "has 1 classes, the plan was compiled for 3") && tu_lines(r.err) == 1, "%s", r.err);
    tu_free(&r);
    /* out-of-range NMS settings are refused before anything runs or is written */
    const char *bad[][2] = {{"--conf 2", "--conf must be a number in [0, 1]"}, {"--iou -0.1", "--iou must be a number in [0, 1]"},
                            {"--max-det 0", "--max-det must be an integer in [1, 100000]"}, {"--batch 0", "--batch must be an integer in [1, 1024]"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(cmd, sizeof cmd, "val %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --data %s/ds/data.yaml --project %s/runs %s", dir, dir, dir, bad[k][0]);
        r = tu_run_bin(predict_bin(), cmd);
        cr_expect_eq(r.status, 2, "%s", bad[k][0]);
        cr_expect(strstr(r.err, bad[k][1]) && tu_lines(r.err) == 1 && !r.out[0], "%s:\n%s%s", bad[k][0], r.out, r.err);
        tu_free(&r);
        snprintf(cmd, sizeof cmd, "%s/runs/val2", dir);
        cr_expect_eq(access(cmd, F_OK), -1, "%s made a run directory", bad[k][0]);
    }
    remove_dir(dir);
}

/* `yolort val --save-txt --save-conf --save-json`: labels/STEM.txt and
 * predictions.json carry the same detections (every one from conf 0.001),
 * each in its own format: the JSON's category_id is the class + 1, its bbox
 * the top-left corner and size in original pixels (3 decimals), its score
 * the line's (5 decimals), image_id the file's stem; images in order of aspect ratio. */
Test(predict, val_save_txt_and_json_agree, .timeout = 300) {
    char dir[64], cmd[1024];
    setup_dir(dir, "v8tiny");
    snprintf(cmd, sizeof cmd, "mkdir -p %s/ds/images/val && cp " FIXTURE "/*.png %s/ds/images/val/ && printf '%s' > %s/ds/data.yaml", dir, dir,
             "train: images/val\\nval: images/val\\nnames:\\n  0: red\\n  1: green\\n  2: blue\\n", dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "val %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --data %s/ds/data.yaml --project %s/runs --no-plots --save-txt --save-conf --save-json",
             dir, dir, dir);
    CliResult r = tu_run_bin(predict_bin(), cmd);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char want[200];
    snprintf(want, sizeof want, "Saving %s/runs/val/predictions.json...\n", dir);
    cr_expect(strstr(r.out, want), "%s", r.out);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "%s/runs/val/predictions.json", dir);
    char *text = tu_slurp(cmd, NULL);
    cr_assert(text, "no %s", cmd);
    cJSON *j = cJSON_Parse(text);
    cr_assert(cJSON_IsArray(j), "predictions.json is not a JSON array");
    const char *stems[] = {"wide", "small", "tall"}; /* rect validation's order: aspect ratio h/w 0.67, 0.75, 1.5, as Ultralytics' */
    int entry = 0, total = 0;
    for (int s = 0; s < 3; s++) {
        char path[600];
        int w, h;
        snprintf(path, sizeof path, FIXTURE "/%s.png", stems[s]);
        cr_assert(image_probe(path, &w, &h, cmd, sizeof cmd), "%s", cmd);
        snprintf(path, sizeof path, "%s/runs/val/labels/%s.txt", dir, stems[s]);
        char *lines = tu_slurp(path, NULL);
        cr_assert(lines, "no %s", path);
        int n = 0;
        for (char *save = NULL, *ln = strtok_r(lines, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save), n++, entry++) {
            int cls;
            double cx, cy, bw, bh, conf;
            cr_assert_eq(sscanf(ln, "%d %lf %lf %lf %lf %lf", &cls, &cx, &cy, &bw, &bh, &conf), 6, "%s", ln);
            const cJSON *e = cJSON_GetArrayItem(j, entry), *bbox = cJSON_GetObjectItem(e, "bbox");
            cr_assert(e && cJSON_GetArraySize(bbox) == 4, "entry %d", entry);
            cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(e, "image_id")), stems[s]);
            cr_expect_eq(cJSON_GetObjectItem(e, "category_id")->valueint, cls + 1);
            const double x = cJSON_GetArrayItem(bbox, 0)->valuedouble, y = cJSON_GetArrayItem(bbox, 1)->valuedouble;
            const double jw = cJSON_GetArrayItem(bbox, 2)->valuedouble, jh = cJSON_GetArrayItem(bbox, 3)->valuedouble;
            /* %g keeps 6 digits, the JSON 3 decimals */
            cr_expect(fabs((x + jw / 2) / w - cx) < 1e-4 && fabs((y + jh / 2) / h - cy) < 1e-4, "%s: centre (%g, %g)", ln, x + jw / 2, y + jh / 2);
            cr_expect(fabs(jw / w - bw) < 1e-4 && fabs(jh / h - bh) < 1e-4, "%s: size %g x %g", ln, jw, jh);
            const double score = cJSON_GetObjectItem(e, "score")->valuedouble;
            cr_expect(fabs(score - conf) <= 5e-6 + 1e-6 * conf && score >= 0.001, "%s: score %g", ln, score);
        }
        total += n;
        free(lines);
    }
    cr_expect_eq(cJSON_GetArraySize(j), total, "%d JSON entries, %d label lines", cJSON_GetArraySize(j), total);
    cr_expect_gt(total, 100, "validation keeps every detection from conf 0.001 up");
    cJSON_Delete(j);
    free(text);
    /* --conf and --max-det reach the NMS: scores above 0.5, at most 2 an image */
    snprintf(cmd, sizeof cmd, "val %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --data %s/ds/data.yaml --project %s/runs --name strict --no-plots --save-json --conf 0.5 --max-det 2",
             dir, dir, dir);
    r = tu_run_bin(predict_bin(), cmd);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "%s/runs/strict/predictions.json", dir);
    text = tu_slurp(cmd, NULL);
    cr_assert(text, "no %s", cmd);
    j = cJSON_Parse(text);
    int per_image[3] = {0};
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        cr_expect_gt(cJSON_GetObjectItem(e, "score")->valuedouble, 0.5);
        for (int s = 0; s < 3; s++) per_image[s] += strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "image_id")), stems[s]) == 0;
    }
    cr_expect(cJSON_GetArraySize(j) > 0 && per_image[0] <= 2 && per_image[1] <= 2 && per_image[2] <= 2, "%d entries: %d %d %d", cJSON_GetArraySize(j),
              per_image[0], per_image[1], per_image[2]);
    cJSON_Delete(j);
    free(text);
    remove_dir(dir);
}

/* Sources as Ultralytics lists them: a glob pattern (sorted), and a .txt
 * list whose lines (sorted; empty ones skipped) are paths relative to the
 * working directory or to the list's folder, or patterns themselves; an
 * entry that does not exist fails the command before anything is written. */
Test(predict, glob_and_list_sources, .timeout = 300) {
    char dir[64], args[5200], cwd[4096];
    cr_assert(getcwd(cwd, sizeof cwd));
    setup_dir(dir, "v8tiny");
    snprintf(args, sizeof args, "cp " FIXTURE "/wide.png %s/a.png && printf 'a.png\\n\\n%s/" FIXTURE "/t*.png\\n' > %s/list.txt", dir, cwd, dir);
    cr_assert_eq(system(args), 0, "%s", args);
    struct {
        const char *source, *want[3];
    } cases[] = {
        {"'" FIXTURE "/[st]*.png'", {"/" FIXTURE "/small.png", "/" FIXTURE "/tall.png", NULL}},
        /* the sorted lines: "/CWD/.../t*.png" before "a.png", which is found relative to the list's folder */
        {"LIST", {"/" FIXTURE "/tall.png", "/a.png", NULL}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char src[256];
        if (strcmp(cases[c].source, "LIST") == 0) snprintf(src, sizeof src, "%s/list.txt", dir);
        else snprintf(src, sizeof src, "%s", cases[c].source);
        snprintf(args, sizeof args, "predict %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --source %s --no-save", dir, src);
        CliResult r = tu_run_bin(predict_bin(), args);
        cr_assert_eq(r.status, 0, "%s", r.err);
        const char *at = r.out;
        for (int i = 0; cases[c].want[i]; i++) {
            char line[600];
            snprintf(line, sizeof line, "image %d/2 ", i + 1);
            at = strstr(at, line);
            cr_assert(at, "case %zu: no '%s' in:\n%s", c, line, r.out);
            const char *colon = strchr(at, ':');
            cr_assert(colon && colon - at > (long)strlen(cases[c].want[i]) &&
                          strncmp(colon - strlen(cases[c].want[i]), cases[c].want[i], strlen(cases[c].want[i])) == 0 && at[strlen(line)] == '/',
                      "case %zu: image %d should be an absolute path ending in %s:\n%s", c, i + 1, cases[c].want[i], r.out);
        }
        cr_expect(!strstr(r.out, "image 3/"), "case %zu: more than two images:\n%s", c, r.out);
        tu_free(&r);
    }
    snprintf(args, sizeof args, "predict %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --source %s/none/*.png --project %s/runs", dir, dir, dir);
    expect_refused(args, "no images or videos found");
    snprintf(args, sizeof args, "printf 'missing.png\\n' >> %s/list.txt", dir);
    cr_assert_eq(system(args), 0);
    snprintf(args, sizeof args, "predict %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --source %s/list.txt --project %s/runs", dir, dir, dir);
    expect_refused(args, "missing.png does not exist");
    expect_nothing_written_and_remove(dir);
}

/* SHA-256 of an image's RGB pixels as hex (as tools/make_crop_fixture.py hashes PIL's decode) */
static void pixels_sha256(const Image *im, char hex[65]) {
    unsigned char md[32];
    unsigned int n = 0;
    cr_assert(EVP_Digest(im->px, (size_t)im->w * (size_t)im->h * 3, md, &n, EVP_sha256(), NULL) == 1 && n == 32);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* Files under dir, counted by find(1). */
static int count_files(const char *dir) {
    char cmd[300], *out;
    snprintf(cmd, sizeof cmd, "find '%s' -type f | wc -l", dir);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char line[32] = "";
    out = fgets(line, sizeof line, p);
    pclose(p);
    return out ? atoi(line) : -1;
}

/* --save-crop writes what Ultralytics' save_crop wrote for the same
 * detections (tools/make_crop_fixture.py): the same files under crops/
 * (CLASS/STEM.jpg, STEM2.jpg, ...), the same sizes and the same decoded
 * pixels; a second run into the same directory (--exist-ok) numbers on. */
Test(predict, save_crop_writes_ultralytics_crops, .timeout = 300) {
    char dir[64], crops[128], path[512], err[256], hex[65];
    setup_dir(dir, "v8tiny");
    CliResult r = predict(dir, "v8tiny", "--conf 0.6 --save-crop --no-save");
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    char *text = tu_slurp(FIXTURE "/v8tiny/conf0.6/crops.json", NULL);
    cr_assert(text, "no crops.json fixture");
    cJSON *want = cJSON_Parse(text);
    free(text);
    cr_assert(want);
    snprintf(crops, sizeof crops, "%s/runs/predict/crops", dir);
    int n = 0, same = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, want) {
        snprintf(path, sizeof path, "%s/%s", crops, e->string);
        Image im;
        if (!image_load(path, &im, err, sizeof err)) {
            cr_expect(false, "%s", err);
            continue;
        }
        n++;
        int w = cJSON_GetObjectItemCaseSensitive(e, "w")->valueint, h = cJSON_GetObjectItemCaseSensitive(e, "h")->valueint;
        cr_expect(im.w == w && im.h == h, "%s is %dx%d, Ultralytics' %dx%d", e->string, im.w, im.h, w, h);
        pixels_sha256(&im, hex);
        same += strcmp(hex, cJSON_GetObjectItemCaseSensitive(e, "sha256")->valuestring) == 0;
        image_free(&im);
    }
    cr_expect_eq(same, n, "%d of %d crops have Ultralytics' pixels", same, n);
    cr_expect_eq(count_files(crops), cJSON_GetArraySize(want), "crops/ holds other files than Ultralytics wrote");
    cr_log_info("--save-crop: %d crops with Ultralytics' names, sizes and pixels", same);
    r = predict(dir, "v8tiny", "--conf 0.6 --save-crop --no-save --exist-ok");
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    cr_expect_eq(count_files(crops), 2 * cJSON_GetArraySize(want), "a second run must add numbered crops");
    int k = 0; /* blue/small.jpg, small2.jpg, ... smallK.jpg from the first run; the second ends at small(2K).jpg */
    cJSON_ArrayForEach(e, want) k += strncmp(e->string, "blue/small", 10) == 0;
    cr_assert_gt(k, 1);
    struct stat st;
    snprintf(path, sizeof path, "%s/blue/small%d.jpg", crops, 2 * k);
    cr_expect_eq(stat(path, &st), 0, "no %s after the second run", path);
    snprintf(path, sizeof path, "%s/blue/small%d.jpg", crops, 2 * k + 1);
    cr_expect_neq(stat(path, &st), 0, "%s: more crops than boxes", path);
    cJSON_Delete(want);
    remove_dir(dir);
}

/* `yolort predict` of the v8tiny fixture on the test clip at conf 0.25 with
 * EXTRA options, into DIR/runs/predict (run); it must succeed. */
static CliResult predict_clip(const char *dir, const char *extra, char run[128]) {
    char args[1024];
    snprintf(args, sizeof args,
             "predict %s/m.plan --weights " FIXTURE "/v8tiny.safetensors --source tests/parity/predict_video/clip.avi --project %s/runs --conf 0.25 %s",
             dir, dir, extra);
    CliResult r = tu_run_bin(predict_bin(), args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(run, 128, "%s/runs/predict", dir);
    return r;
}

/* A video source (tools/make_video_fixture.py: 7 frames of 80x56 written by
 * OpenCV as Motion JPEG): every frame's labels (labels/clip_N.txt) equal
 * what Ultralytics' predictor wrote for it, which needs FFmpeg's frames
 * converted as OpenCV converts them; the console's "video 1/1 (frame N/7)"
 * lines; the annotated clip.avi holds 7 frames of the source's size; crops
 * are named after the frame (clip_N.jpg). */
Test(predict, video_frames_equal_ultralytics_predictor, .timeout = 300) {
    char dir[64], run[128], path[512], err[256];
    setup_dir(dir, "v8tiny");
    CliResult r = predict_clip(dir, "--save-txt --save-conf --save-crop --save-frames", run);
    int total = 0;
    for (int n = 1; n <= 7; n++) {
        char stem[32], line[64];
        snprintf(stem, sizeof stem, "clip_%d", n);
        total += compare_labels(run, "../predict_video/v8tiny/conf0.25", stem, 2e-6);
        snprintf(line, sizeof line, "video 1/1 (frame %d/7) ", n);
        const char *at = strstr(r.out, line);
        cr_expect(at && strstr(at, "clip.avi: 64x64 "), "no '%s... clip.avi: 64x64' line in:\n%s", line, r.out);
    }
    cr_expect(!strstr(r.out, "(frame 8/"), "more frames than the video has:\n%s", r.out);
    cr_expect(strstr(r.out, "7 labels saved to"), "no '7 labels saved' in:\n%s", r.out);
    snprintf(path, sizeof path, "%s/crops/red/clip_1.jpg", run);
    struct stat st;
    cr_expect_eq(stat(path, &st), 0, "no %s", path);
    snprintf(path, sizeof path, "%s/clip.avi", run);
    int w, h, fps, frames, decoded = 0;
    VideoReader *v = video_open(path, &w, &h, &fps, &frames, err, sizeof err);
    cr_assert(v, "%s", err);
    cr_expect(w == 80 && h == 56 && fps == 10 && frames == 7, "%s: %dx%d, %d fps, %d frames", path, w, h, fps, frames);
    Image im;
    int got;
    /* --save-frames: each annotated frame also as clip_frames/clip_N.jpg, the picture the video got:
     * two lossy encodings of it (the AVI's Motion JPEG at q 3 through YUV, JPEG 95) of a small noisy
     * clip, 5-8 grey levels apart on average, and at least twice as far from the frame before */
    while ((got = video_read(v, &im, err, sizeof err)) == 1) {
        decoded++;
        char fp[600];
        snprintf(fp, sizeof fp, "%s/clip_frames/clip_%d.jpg", run, decoded);
        Image fr;
        cr_assert(image_load(fp, &fr, err, sizeof err), "%s", err);
        cr_assert(fr.w == im.w && fr.h == im.h, "%s: %dx%d, the video %dx%d", fp, fr.w, fr.h, im.w, im.h);
        double diff = 0;
        for (size_t k = 0; k < (size_t)im.w * (size_t)im.h * 3; k++) diff += abs((int)fr.px[k] - (int)im.px[k]);
        diff /= (double)im.w * im.h * 3;
        cr_expect(diff < 10, "%s differs from the video's frame %d by %.2f grey levels on average", fp, decoded, diff);
        if (decoded > 1) {
            /* and not any frame: the previous one is further away (the clip moves) */
            char prev[600];
            snprintf(prev, sizeof prev, "%s/clip_frames/clip_%d.jpg", run, decoded - 1);
            Image pf;
            cr_assert(image_load(prev, &pf, err, sizeof err), "%s", err);
            double pd = 0;
            for (size_t k = 0; k < (size_t)im.w * (size_t)im.h * 3; k++) pd += abs((int)pf.px[k] - (int)im.px[k]);
            pd /= (double)im.w * im.h * 3;
            cr_log_info("frame %d: %.2f grey levels from clip_%d.jpg, %.2f from clip_%d.jpg", decoded, diff, decoded, pd, decoded - 1);
            cr_expect(pd > 2 * diff, "frame %d is %.2f from clip_%d.jpg and %.2f from its own", decoded, pd, decoded - 1, diff);
            image_free(&pf);
        }
        image_free(&fr);
        image_free(&im);
    }
    cr_expect_eq(got, 0, "%s", err);
    cr_expect_eq(decoded, 7, "%s: %d frames decoded", path, decoded);
    snprintf(path, sizeof path, "%s/clip_frames/clip_8.jpg", run);
    cr_expect_neq(stat(path, &st), 0, "more frames saved than the video has");
    video_close(v);
    cr_log_info("video: %d detections over 7 frames equal Ultralytics'", total);
    tu_free(&r);
    remove_dir(dir);
}

/* --vid-stride 2 keeps frames 2, 4 and 6 of the 7 (int(7 / 2) = 3 reported,
 * the last of each pair read kept, as LoadImagesAndVideos grabs them): the
 * labels of its frames 1-3 are Ultralytics' of the clip's frames 2, 4, 6. */
Test(predict, vid_stride_keeps_every_nth_frame, .timeout = 300) {
    char dir[64], run[128];
    setup_dir(dir, "v8tiny");
    CliResult r = predict_clip(dir, "--save-txt --save-conf --no-save --vid-stride 2", run);
    for (int n = 1; n <= 3; n++) {
        char stem[32], want[32], line[64];
        snprintf(stem, sizeof stem, "clip_%d", n);
        snprintf(want, sizeof want, "clip_%d", 2 * n);
        compare_labels_as(run, stem, "../predict_video/v8tiny/conf0.25", want, 2e-6);
        snprintf(line, sizeof line, "video 1/1 (frame %d/3) ", n);
        cr_expect(strstr(r.out, line), "no '%s' line in:\n%s", line, r.out);
    }
    cr_expect(!strstr(r.out, "(frame 4/"), "more than 3 frames:\n%s", r.out);
    tu_free(&r);
    remove_dir(dir);
}

/* --no-rect (Ultralytics' rect=False): every image at the square plan size,
 * whose detections differ from the rect letterbox's; --batch 2 letterboxes a
 * batch of two sizes square, as the predictor does without same_shapes. */
Test(predict, no_rect_and_mixed_batches_letterbox_square, .timeout = 300) {
    char dir[64];
    setup_dir_for(dir, "v8tiny", "--imgsz 128");
    CliResult r = predict(dir, "v8tiny", "--no-rect --save-txt --save-conf --no-save");
    cr_assert_eq(r.status, 0, "%s", r.err);
    int lines = 0;
    for (const char *s = r.out; (s = strstr(s, "\nimage ")); s++, lines++) cr_expect(strstr(s, ": 128x128 ") && strstr(s, ": 128x128 ") < strchr(s + 1, '\n'), "not square: %.80s", s + 1);
    cr_expect_eq(lines, 3, "%s", r.out);
    cr_expect(strstr(r.out, "image 1/3 ") && strstr(r.out, "small.png: 128x128 "), "%s", r.out);
    char run[128];
    snprintf(run, sizeof run, "%s/runs/predict/labels/tall.txt", dir);
    int n_square, n_rect;
    Row *sq = read_rows(run, &n_square), *re = read_rows(FIXTURE "/v8tiny/rect128/tall.txt", &n_rect);
    cr_expect(n_square != n_rect || memcmp(sq, re, sizeof *sq * (size_t)n_rect) != 0, "--no-rect found what the rect letterbox found");
    free(sq);
    free(re);
    tu_free(&r);
    r = predict(dir, "v8tiny", "--batch 2 --no-save --exist-ok");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "small.png: 128x128 ") && strstr(r.out, "tall.png: 128x128 ") && strstr(r.out, "wide.png: 96x128 "), "%s", r.out);
    cr_expect(strstr(r.out, "per image at shape (2, 3, 96, 128)\n"), "%s", r.out);
    tu_free(&r);
    remove_dir(dir);
}

Test(predict, val_rect_batches_equal_ultralytics_validator_yolov8_style, .timeout = 300) { check_val_rect_on("v8tiny", "--imgsz 128", 0.0011, 1.1e-5); }
Test(predict, val_rect_batches_equal_ultralytics_validator_yolov10_style, .timeout = 300) { check_val_rect_on("v10tiny", "--imgsz 128", 0.0011, 1.1e-5); }

Test(predict, trainer_validates_in_rect_batches, .timeout = 300) { check_trainer_rect_on("--imgsz 128"); }
