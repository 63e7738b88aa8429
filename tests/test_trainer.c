/* tests/test_trainer.c — `yolort train --data` as a user runs it: a generated
 * dataset, a compiled plan, the run directory it leaves (results.csv,
 * args.yaml, plot, weights, training state), bit-exact resume, refusal of a
 * mismatched plan, and checkpoints that survive being killed mid-write. */
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <time.h>

#include "../runtime/safetensors.h"
#include "../runtime/train/checkpoint.h"
#include "../runtime/train/report.h"
#include "test_util.h"

static const char *yolort_bin(void) {
    const char *b = getenv("YOLORT_BIN");
    return b ? b : "build/yolort";
}

/* One dataset and plan per test run, made by the real tools. The runner
 * makes a fresh private directory before any test and removes it after the
 * last, so a directory left by an earlier run (a reused /tmp, a recycled pid)
 * can never be mistaken for this one; tests running at once build the
 * dataset in their own directories and the first rename wins. */
static char ROOT[128];

ReportHook(PRE_ALL)(struct criterion_test_set *set) {
    (void)set;
    char dir[] = "/tmp/yolocc-trainer-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("test_trainer: mkdtemp");
        abort();
    }
    if (setenv("YOLOCC_TEST_TRAINER_ROOT", dir, 1) != 0) abort();
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
    (void)stats;
    const char *dir = getenv("YOLOCC_TEST_TRAINER_ROOT");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir ? dir : "");
    if (dir && strncmp(dir, "/tmp/yolocc-trainer-", 20) == 0 && system(cmd) != 0) fprintf(stderr, "test_trainer: could not remove %s\n", dir);
}

static void prepare(void) {
    const char *run_dir = getenv("YOLOCC_TEST_TRAINER_ROOT");
    cr_assert(run_dir, "the runner made no directory for this run");
    snprintf(ROOT, sizeof ROOT, "%s/run", run_dir);
    char tmp[256], args[768];
    struct stat st;
    snprintf(args, sizeof args, "%s/tiny.plan", ROOT);
    if (stat(args, &st) == 0) return;
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", ROOT, (long)getpid());
    tu_tiny_data_and_plan(tmp, "--images 40 --size 64 --classes 3 --seed 7", "--imgsz 64 --batch 4 --max-boxes 32", "tiny.plan");
    if (rename(tmp, ROOT) != 0) {
        snprintf(args, sizeof args, "rm -rf %s", tmp);
        cr_assert_eq(system(args), 0);
    }
    snprintf(args, sizeof args, "%s/tiny.plan", ROOT);
    cr_assert_eq(stat(args, &st), 0, "no plan at %s", args);
}

/* another plan of the tiny model at the tests' size and batch: ROOT/FILE */
static void compile_variant(const char *extra, const char *file) {
    char args[1024];
    snprintf(args, sizeof args, "models/tiny.yaml --imgsz 64 --batch 4 %s -o %s/%s", extra, ROOT, file);
    CliResult r = tu_run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
}

static CliResult train(const char *name, const char *extra) {
    char args[1024];
    snprintf(args, sizeof args, "train %s/tiny.plan --data %s/data/data.yaml --project %s/runs --name %s --exist-ok --workers 2 %s", ROOT, ROOT, ROOT, name, extra);
    return tu_run_bin(yolort_bin(), args);
}

static bool exists(const char *name, const char *leaf) {
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/runs/%s/%s", ROOT, name, leaf);
    return stat(p, &st) == 0 && st.st_size > 0;
}

static void read_results(const char *name, ResultsTable *t) {
    char p[600], err[512];
    snprintf(p, sizeof p, "%s/runs/%s/results.csv", ROOT, name);
    cr_assert(results_csv_read(p, t, err, sizeof err), "%s", err);
}

/* The validation table the output holds from the line starting with `from`
 * (the header, "all" and the class rows) up to the first line starting
 * with `until`; malloc'd. */
static char *table_between(const char *out, const char *from, const char *until) {
    const char *a = strstr(out, from);
    cr_assert(a, "no '%s' in:\n%s", from, out);
    a = strstr(a, "Class");
    cr_assert(a, "no table after '%s'", from);
    while (a > out && a[-1] != '\n') a--;
    const char *b = strstr(a, until);
    cr_assert(b, "no '%s' after the table in:\n%s", until, a);
    return strndup(a, (size_t)(b - a));
}

/* args.yaml's keys are Ultralytics' (tests/fixtures/ultralytics_args_keys.txt,
 * cfg/default.yaml's order, which its args.yaml keeps) in the same order, and
 * want's "key: value" lines are among its lines. */
static void args_yaml_is_ultralytics(const char *name, const char *const *want, int n_want) {
    char p[600];
    snprintf(p, sizeof p, "%s/runs/%s/args.yaml", ROOT, name);
    char *text = tu_slurp(p, NULL), *keys = tu_slurp("tests/fixtures/ultralytics_args_keys.txt", NULL);
    cr_assert(text && keys, "missing %s or the keys fixture", p);
    int pos = 0, lines = 0; /* pos: the fixture's line after the last key matched */
    bool seen[64] = {false};
    cr_assert(n_want <= 64);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save), lines++) {
        char *colon = strstr(line, ": ");
        cr_assert(colon && line[0] != ' ', "not a top-level 'key: value' line: '%s'", line);
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(colon - line), line);
        int k = 0, found = -1;
        for (const char *q = keys; *q; k++) {
            const char *nl = strchr(q, '\n');
            size_t len = nl ? (size_t)(nl - q) : strlen(q);
            if (q[0] != '#' && len == strlen(key) && strncmp(q, key, len) == 0) found = k;
            q = nl ? nl + 1 : q + len;
        }
        cr_expect(found >= 0, "args.yaml key '%s' is not one of Ultralytics'", key);
        cr_expect(found < 0 || found >= pos, "args.yaml key '%s' out of Ultralytics' order", key);
        if (found >= 0) pos = found + 1;
        for (int w = 0; w < n_want; w++)
            if (strncmp(want[w], key, strlen(key)) == 0 && want[w][strlen(key)] == ':') {
                cr_expect_str_eq(line, want[w]);
                seen[w] = true;
            }
    }
    for (int w = 0; w < n_want; w++) cr_expect(seen[w], "args.yaml lacks '%s'", want[w]);
    cr_expect(lines >= 60, "args.yaml has %d lines", lines);
    free(text);
    free(keys);
}

/* --no-plots: the numbers and weights, none of the pictures; args.yaml in
 * Ultralytics' order with the values this run used */
Test(trainer, no_plots_writes_no_pictures, .timeout = 600) {
    prepare();
    CliResult r = train("noplots", "--epochs 1 --no-plots --hsv-h 0.02 --save-period 3 --warmup-epochs 1 --cos-lr --device cpu");
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    const char *kept[] = {"results.csv", "args.yaml", "weights/best.safetensors"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) cr_expect(exists("noplots", kept[i]), "missing %s", kept[i]);
    const char *gone[] = {"results.svg", "train_batch0.jpg", "confusion_matrix.svg", "confusion_matrix.csv", "val_batch0_pred.jpg", "labels.svg"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) cr_expect(!exists("noplots", gone[i]), "%s written", gone[i]);
    const char *want[] = {"task: detect", "mode: train", "epochs: 1", "batch: 4", "imgsz: 64", "save_period: 3", "device: cpu", "optimizer: SGD",
                          "cos_lr: true", "resume: false", "amp: false", "fraction: 1.0", "plots: false", "lr0: 0.01", "weight_decay: 0.0005",
                          "warmup_epochs: 1.0", "box: 7.5", "cls: 0.5", "dfl: 1.5", "nbs: 64", "hsv_h: 0.02", "hsv_s: 0.7", "perspective: 0.0", "mosaic: 1.0"};
    args_yaml_is_ultralytics("noplots", want, (int)(sizeof want / sizeof want[0]));
    tu_free(&r);
}

/* A plan compiled without --optimizer stands for Ultralytics' default
 * optimizer=auto: for 10000 iterations or fewer auto takes AdamW, which the
 * plan cannot, and a line says how to compile for it (the run stays SGD as
 * named); for more (ceil(images / max(batch, 64)) x epochs), auto's SGD
 * trains with warmup bias lr 0. A plan compiled with --optimizer sgd trains
 * as optimizer=SGD either way. */
Test(trainer, default_optimizer_follows_ultralytics_auto, .timeout = 900) {
    prepare();
    CliResult r = train("auto_short", "--epochs 1 --no-val --no-plots");
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    cr_expect(strstr(r.out, "optimizer=auto would train AdamW(lr=0.001429, momentum=0.9) for 1 iteration;") && strstr(r.out, "--optimizer adamw"), "%s", r.out);
    cr_expect(strstr(r.out, "optimizer: SGD(lr=0.01, momentum=0.937)"), "%s", r.out);
    const char *short_args[] = {"optimizer: SGD", "warmup_bias_lr: 0.1", "lr0: 0.01"};
    args_yaml_is_ultralytics("auto_short", short_args, 3);
    tu_free(&r);
    r = train("auto_long", "--epochs 10001 --stop-after 1 --no-val --no-plots");
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    cr_expect(strstr(r.out, "optimizer: 'optimizer=auto' found, ignoring 'lr0=0.01' and 'momentum=0.937'") && !strstr(r.out, "would train AdamW"), "%s", r.out);
    const char *long_args[] = {"optimizer: SGD", "warmup_bias_lr: 0.0", "epochs: 10001"};
    args_yaml_is_ultralytics("auto_long", long_args, 3);
    cr_expect(strstr(r.out, "optimizer: SGD(lr=0.01, momentum=0.937)"), "a warmup ends at 0.937:\n%s", r.out);
    tu_free(&r);
    /* without a warmup auto's SGD keeps the momentum it was made with */
    r = train("auto_nowarmup", "--epochs 10001 --stop-after 1 --warmup-epochs 0 --no-val --no-plots");
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    cr_expect(strstr(r.out, "optimizer: SGD(lr=0.01, momentum=0.9)"), "%s", r.out);
    tu_free(&r);
    compile_variant("--max-boxes 32 --optimizer sgd", "named_sgd.plan");
    char cmd[768];
    snprintf(cmd, sizeof cmd, "train %s/named_sgd.plan --data %s/data/data.yaml --project %s/runs --name named --exist-ok --workers 2 --epochs 10001 --stop-after 1 --no-val --no-plots",
             ROOT, ROOT, ROOT);
    r = tu_run_bin(yolort_bin(), cmd);
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    cr_expect(!strstr(r.out, "optimizer=auto"), "%s", r.out);
    const char *named_args[] = {"optimizer: SGD", "warmup_bias_lr: 0.1"};
    args_yaml_is_ultralytics("named", named_args, 2);
    tu_free(&r);
}

Test(trainer, run_directory_and_files, .timeout = 900) {
    prepare();
    CliResult r = train("files", "--epochs 2");
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    /* `yolort val` on best.safetensors prints the table the trainer's final evaluation of that file printed */
    char vargs[1200];
    snprintf(vargs, sizeof vargs, "val %s/tiny.plan --weights %s/runs/files/weights/best.safetensors --data %s/data/data.yaml --project %s/runs --name val-files --exist-ok",
             ROOT, ROOT, ROOT, ROOT);
    CliResult v = tu_run_bin(yolort_bin(), vargs);
    cr_assert_eq(v.status, 0, "%s", v.err);
    char *final = table_between(r.out, "Validating ", "Results saved"), *val = table_between(v.out, "val: ", "Speed: ");
    cr_expect_str_eq(val, final, "yolort val:\n%s\nthe trainer's final evaluation:\n%s", val, final);
    cr_expect(strstr(v.out, "Transferred 195/195 items"), "%s", v.out);
    /* and the same confusion matrix as the final evaluation drew into the run directory */
    char pt[700], pv[700];
    snprintf(pt, sizeof pt, "%s/runs/files/confusion_matrix.csv", ROOT);
    snprintf(pv, sizeof pv, "%s/runs/val-files/confusion_matrix.csv", ROOT);
    char *ct = tu_slurp(pt, NULL), *cv = tu_slurp(pv, NULL);
    cr_assert(ct && cv, "missing %s or %s", pt, pv);
    cr_expect(strncmp(ct, "Predicted,", 10) == 0 && tu_lines(ct) == 1 + 3 + 1, "%s", ct);
    cr_expect_str_eq(cv, ct);
    free(ct);
    free(cv);
    free(final);
    free(val);
    tu_free(&v);
    cr_expect(strstr(r.out, "box_loss") && strstr(r.out, "Instances") && strstr(r.out, "2/2"), "%s", r.out);
    cr_expect(strstr(r.out, "mAP50-95)") && strstr(r.out, "all "), "%s", r.out);
    cr_expect(strstr(r.out, "train: 32 images") || strstr(r.out, "train: "), "%s", r.out);
    const char *files[] = {"args.yaml", "results.csv", "results.svg", "weights/last.safetensors", "weights/best.safetensors", "weights/last.state",
                           "confusion_matrix.svg", "confusion_matrix_normalized.svg", "train_batch0.jpg", "train_batch1.jpg", "train_batch2.jpg",
                           "val_batch0_labels.jpg", "val_batch0_pred.jpg", "labels.svg"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) cr_expect(exists("files", files[i]), "missing %s", files[i]);
    /* plot_idx: batches 0-2 only (2 epochs, so the mosaic never closes) */
    cr_expect(!exists("files", "train_batch3.jpg"), "train_batch3.jpg written");
    ResultsTable t;
    read_results("files", &t);
    cr_assert_eq(t.n, 2);
    for (int e = 0; e < 2; e++) {
        cr_expect_eq(t.rows[e].v[RESULTS_EPOCH], e + 1);
        for (int k = RESULTS_TRAIN_BOX; k <= RESULTS_TRAIN_DFL; k++) cr_expect(t.rows[e].v[k] > 0 && t.rows[e].v[k] < 50, "epoch %d col %d = %g", e + 1, k, t.rows[e].v[k]);
        for (int k = RESULTS_VAL_BOX; k <= RESULTS_VAL_DFL; k++) cr_expect(t.rows[e].v[k] > 0 && t.rows[e].v[k] < 50, "epoch %d val col %d = %g", e + 1, k, t.rows[e].v[k]);
        cr_expect(t.rows[e].v[RESULTS_LR_PG1] > 0 && t.rows[e].v[RESULTS_LR_PG1] < 0.1);
    }
    results_table_free(&t);
    /* last.safetensors holds the EMA under Ultralytics' names */
    char p[600], err[512];
    snprintf(p, sizeof p, "%s/runs/files/weights/last.safetensors", ROOT);
    StFile f;
    cr_assert(st_read(p, &f, err, sizeof err), "%s", err);
    cr_expect(st_find(&f, "model.0.conv.weight") && st_find(&f, "model.13.dfl.conv.weight") && st_find(&f, "model.0.bn.running_mean"));
    /* and the dataset's class names, as Ultralytics' checkpoints carry them */
    const char *names = NULL;
    for (int i = 0; i < f.n_meta; i++)
        if (strcmp(f.meta_keys[i], "names") == 0) names = f.meta_values[i];
    cr_expect(names && strcmp(names, "[\"rectangle\",\"ellipse\",\"triangle\"]") == 0, "names metadata: %s", names ? names : "(none)");
    st_free(&f);
    tu_free(&r);
    /* which `yolort predict` prints with the best weights (conf 0: the barely trained model's every box) */
    char args[1200];
    snprintf(args, sizeof args, "predict %s/tiny.plan --weights %s/runs/files/weights/best.safetensors --source %s/data/images/val --conf 0 --max-det 2 --project %s/runs --name pred",
             ROOT, ROOT, ROOT, ROOT);
    r = tu_run_bin(yolort_bin(), args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "image 1/8 ") && (strstr(r.out, "rectangle") || strstr(r.out, "ellipse") || strstr(r.out, "triangle")), "%s", r.out);
    tu_free(&r);
}

static void state_tensors_equal(const char *a, const char *b) {
    char pa[600], pb[600], err[512];
    snprintf(pa, sizeof pa, "%s/runs/%s/weights/last.state", ROOT, a);
    snprintf(pb, sizeof pb, "%s/runs/%s/weights/last.state", ROOT, b);
    StFile fa, fb;
    cJSON *sa, *sb;
    cr_assert(ckpt_read(pa, &fa, &sa, err, sizeof err), "%s", err);
    cr_assert(ckpt_read(pb, &fb, &sb, err, sizeof err), "%s", err);
    cr_assert_eq(fa.n, fb.n);
    int differ = 0;
    for (int i = 0; i < fa.n; i++) {
        const StTensor *x = &fa.tensors[i], *y = st_find(&fb, x->name);
        cr_assert(y, "%s missing", x->name);
        if (x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes) != 0) {
            if (differ++ < 5) cr_log_error("tensor %s differs", x->name);
        }
    }
    cr_expect_eq(differ, 0, "%d of %d tensors differ", differ, fa.n);
    const char *keys[] = {"epoch", "opt_steps", "ema_updates", "last_opt_step", "best_fitness"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(sa, keys[k])), cJSON_GetNumberValue(cJSON_GetObjectItem(sb, keys[k])), "%s differs", keys[k]);
    cJSON_Delete(sa);
    cJSON_Delete(sb);
    st_free(&fa);
    st_free(&fb);
}

Test(trainer, resume_is_bit_exact, .timeout = 900) {
    prepare();
    /* 4 epochs straight; 2 epochs, stop, resume for the other 2 */
    CliResult r = train("straight", "--epochs 4 --close-mosaic 1");
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    r = train("split", "--epochs 4 --close-mosaic 1 --stop-after 2");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "--resume"), "%s", r.out);
    tu_free(&r);
    char args[1024];
    snprintf(args, sizeof args, "train %s/tiny.plan --resume %s/runs/split --workers 1", ROOT, ROOT);
    r = tu_run_bin(yolort_bin(), args);
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    cr_expect(strstr(r.out, "Resuming training"), "%s", r.out);
    tu_free(&r);
    state_tensors_equal("straight", "split");
    ResultsTable a, b;
    read_results("straight", &a);
    read_results("split", &b);
    cr_assert_eq(a.n, 4);
    cr_assert_eq(b.n, 4);
    for (int e = 0; e < 4; e++)
        for (int k = RESULTS_TRAIN_BOX; k < RESULTS_NCOLS; k++)
            cr_expect_eq(a.rows[e].v[k], b.rows[e].v[k], "epoch %d column %s: %g vs %g", e + 1, results_csv_columns[k], a.rows[e].v[k], b.rows[e].v[k]);
    results_table_free(&a);
    results_table_free(&b);
}

Test(trainer, resume_refuses_another_plan_and_bad_data, .timeout = 900) {
    prepare();
    CliResult r = train("other", "--epochs 2 --stop-after 1");
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    compile_variant("--max-boxes 16", "other.plan");
    char args[1024];
    snprintf(args, sizeof args, "train %s/other.plan --resume %s/runs/other", ROOT, ROOT);
    r = tu_run_bin(yolort_bin(), args);
    cr_expect_neq(r.status, 0);
    cr_expect(strstr(r.err, "another plan"), "%s", r.err);
    cr_expect_eq(tu_lines(r.err), 1, "%s", r.err);
    tu_free(&r);
    /* a plan compiled for another batch: the error says how to recompile */
    snprintf(args, sizeof args, "train %s/tiny.plan --data %s/data/data.yaml --batch 8 --project %s/runs", ROOT, ROOT, ROOT);
    r = tu_run_bin(yolort_bin(), args);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "recompile") && strstr(r.err, "--batch 8"), "%s", r.err);
    tu_free(&r);
    /* a dataset YAML that does not exist */
    snprintf(args, sizeof args, "train %s/tiny.plan --data %s/none.yaml --project %s/runs", ROOT, ROOT, ROOT);
    r = tu_run_bin(yolort_bin(), args);
    cr_expect_eq(r.status, 2);
    cr_expect_eq(tu_lines(r.err), 1, "%s", r.err);
    tu_free(&r);
}

/* --time: the epochs follow the mean epoch time, the run ends when the time
 * is up and its state says it is finished */
Test(trainer, time_sets_the_epochs_and_ends_the_run, .timeout = 600) {
    prepare();
    const double hours = 0.0003;   /* 1.08 s: a few epochs of this model, several hundred needed for the 100 of --epochs */
    CliResult r = train("timed", "--time 0.0003 --epochs 100 --no-plots");
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    cr_expect(strstr(r.out, "Starting training for 0.0003 hours..."), "%s", r.out);
    ResultsTable t;
    read_results("timed", &t);
    cr_assert(t.n >= 1 && t.n < 100, "%d epochs", t.n);
    /* the last epoch ended after the time was up, no epoch before it did (a check after each optimizer step,
     * and at each epoch's end; the time column is taken just before that check) */
    cr_expect(t.rows[t.n - 1].v[RESULTS_TIME] > hours * 3600 * 0.5, "ended at %g s", t.rows[t.n - 1].v[RESULTS_TIME]);
    for (int e = 0; e + 1 < t.n; e++) cr_expect(t.rows[e].v[RESULTS_TIME] <= hours * 3600, "epoch %d ended at %g s", e + 1, t.rows[e].v[RESULTS_TIME]);
    if (t.n >= 2) {
        /* after epoch 1 the epochs are those that fit at its pace, at most ceil(1.08 s / its time) */
        int shown = 0;
        const char *p = strstr(r.out, "        2/");
        cr_assert(p && sscanf(p + 10, "%d", &shown) == 1, "%s", r.out);
        cr_expect(shown >= 2 && shown <= (int)ceil(hours * 3600 / t.rows[0].v[RESULTS_TIME]), "2/%d after an epoch of %g s", shown, t.rows[0].v[RESULTS_TIME]);
    }
    char p[600], err[512];
    snprintf(p, sizeof p, "%s/runs/timed/weights/last.state", ROOT);
    StFile f;
    cJSON *s;
    cr_assert(ckpt_read(p, &f, &s, err, sizeof err), "%s", err);
    const cJSON *args = cJSON_GetObjectItem(s, "args");
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(args, "epochs")), t.n);
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(args, "time")), hours);
    cJSON_Delete(s);
    st_free(&f);
    snprintf(p, sizeof p, "%s/runs/timed/args.yaml", ROOT);
    char *y = tu_slurp(p, NULL);
    cr_assert(y);
    cr_expect(strstr(y, "\ntime: 0.0003\n"), "%s", y);
    free(y);
    results_table_free(&t);
    tu_free(&r);
    snprintf(p, sizeof p, "train %s/tiny.plan --resume %s/runs/timed", ROOT, ROOT);
    r = tu_run_bin(yolort_bin(), p);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "nothing to resume"), "%s", r.err);
    tu_free(&r);
}

/* --single-cls on a plan for one class, --fraction of the training images; yolort val --split */
Test(trainer, single_cls_fraction_and_val_splits, .timeout = 900) {
    prepare();
    char args[1200];
    snprintf(args, sizeof args, "models/tiny.yaml --nc 1 --imgsz 64 --batch 4 --max-boxes 32 -o %s/runs/one.plan", ROOT);
    CliResult r = tu_run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    /* the 3-class plan refuses --single-cls, the 1-class plan refuses 3 classes without it */
    r = train("one-bad", "--epochs 1 --single-cls");
    cr_expect(r.status == 2 && strstr(r.err, "--nc 1") && tu_lines(r.err) == 1, "%d %s", r.status, r.err);
    tu_free(&r);
    snprintf(args, sizeof args, "train %s/runs/one.plan --data %s/data/data.yaml --project %s/runs --name one --exist-ok --epochs 1", ROOT, ROOT, ROOT);
    r = tu_run_bin(yolort_bin(), args);
    cr_expect(r.status == 2 && strstr(r.err, "--single-cls"), "%d %s", r.status, r.err);
    tu_free(&r);
    strcat(args, " --single-cls --fraction 0.5 --no-plots");
    r = tu_run_bin(yolort_bin(), args);
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    /* the generated set has 32 training images and 8 val */
    cr_expect(strstr(r.out, "Overriding class names with single class.") && strstr(r.out, "train: 16 images"), "%s", r.out);
    snprintf(args, sizeof args, "%s/runs/one/args.yaml", ROOT);
    char *y = tu_slurp(args, NULL);
    cr_assert(y);
    cr_expect(strstr(y, "\nsingle_cls: true\n") && strstr(y, "\nfraction: 0.5\n"), "%s", y);
    free(y);
    tu_free(&r);
    /* val on each split: the test split (here the val images again) scores as val does; train has its 32 images */
    snprintf(args, sizeof args, "%s/data/data3.yaml", ROOT);
    FILE *f = fopen(args, "w");
    cr_assert(f);
    fputs("train: images/train\nval: images/val\ntest: images/val\nnames: [rectangle, ellipse, triangle]\n", f);
    cr_assert_eq(fclose(f), 0);
    char *rows[3];
    const char *splits[] = {"val", "test", "train"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "val %s/runs/one.plan --weights %s/runs/one/weights/best.safetensors --data %s/data/data3.yaml --split %s --single-cls --no-plots", ROOT, ROOT,
                 ROOT, splits[i]);
        CliResult v = tu_run_bin(yolort_bin(), args);
        cr_assert_eq(v.status, 0, "%s\n%s", v.out, v.err);
        char head[32];
        snprintf(head, sizeof head, "%s: ", splits[i]);
        cr_expect(strstr(v.out, head), "%s", v.out);
        const char *all = strstr(v.out, "  all  ");
        cr_assert(all, "%s", v.out);
        rows[i] = strndup(all, strcspn(all, "\n"));
        tu_free(&v);
    }
    cr_expect_str_eq(rows[1], rows[0]);
    int images = 0;
    cr_expect(sscanf(rows[2] + strspn(rows[2], " "), "all %d", &images) == 1 && images == 32, "%s", rows[2]);
    for (int i = 0; i < 3; i++) free(rows[i]);
    /* no test split in the generated YAML: one error naming it */
    snprintf(args, sizeof args, "val %s/runs/one.plan --weights %s/runs/one/weights/best.safetensors --data %s/data/data.yaml --split test --single-cls --no-plots", ROOT, ROOT, ROOT);
    r = tu_run_bin(yolort_bin(), args);
    cr_expect(r.status == 2 && strstr(r.err, "no 'test:' split") && tu_lines(r.err) == 1, "%d %s", r.status, r.err);
    tu_free(&r);
}

/* SIGKILL the trainer at random moments, many times: whatever instant the
 * kill lands on (inside a checkpoint write included), the previous
 * checkpoint must load and pass its checksums. Each round starts from an
 * empty run directory and waits for its own first checkpoint before the
 * random delay, so a loaded machine's slow set-up cannot leave rounds with
 * nothing to check. */
Test(trainer, killed_runs_leave_loadable_checkpoints, .timeout = 900) {
    prepare();
    char plan[300], data[300], proj[300], run[400], cmd[600];
    snprintf(plan, sizeof plan, "%s/tiny.plan", ROOT);
    snprintf(data, sizeof data, "%s/data/data.yaml", ROOT);
    snprintf(proj, sizeof proj, "%s/runs", ROOT);
    snprintf(run, sizeof run, "%s/killed", proj);
    srand(12345);
    int kills = 0, loaded = 0;
    for (int round = 0; round < 12; round++) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", run);
        cr_assert_eq(system(cmd), 0);
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(127);
            execl(yolort_bin(), yolort_bin(), "train", plan, "--data", data, "--project", proj, "--name", "killed", "--exist-ok", "--epochs", "1000", "--no-val", "--no-plots",
                  "--workers", "1", (char *)NULL);
            _exit(127);
        }
        /* the weights are written after the state: both exist once this does */
        char p[700], err[512];
        snprintf(p, sizeof p, "%s/weights/last.safetensors", run);
        struct stat sb;
        int st, waited_ms = 0;
        bool exited = false;
        while (stat(p, &sb) != 0 && waited_ms < 300000) {
            if (waitpid(pid, &st, WNOHANG) == pid) {
                exited = true;
                break;
            }
            nanosleep(&(struct timespec){0, 10000000L}, NULL);
            waited_ms += 10;
        }
        cr_assert(!exited, "round %d: the trainer exited before its first checkpoint (status %d)", round, st);
        cr_assert(waited_ms < 300000, "round %d: no checkpoint after 300 s", round);
        /* 0 .. 2 s more: into the checkpoint writes of the next epochs */
        long ms = rand() % 2000;
        nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st)) kills++;
        snprintf(p, sizeof p, "%s/weights/last.state", run);
        StFile f;
        cJSON *s;
        cr_assert(ckpt_read(p, &f, &s, err, sizeof err), "round %d: %s", round, err);
        st_free(&f);
        cJSON_Delete(s);
        snprintf(p, sizeof p, "%s/weights/last.safetensors", run);
        cr_assert(st_read(p, &f, err, sizeof err), "round %d: %s", round, err);
        st_free(&f);
        loaded++;
    }
    cr_expect(kills == 12, "only %d of 12 runs were killed", kills);
    cr_expect(loaded == 12, "only %d rounds had a checkpoint to check", loaded);
    /* and the survivor resumes */
    char args[1024];
    snprintf(args, sizeof args, "train %s --resume %s/killed --stop-after 1", plan, proj);
    CliResult r = tu_run_bin(yolort_bin(), args);
    cr_expect_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
}

/* A CPU run's host memory is known before step 0: the line printed before
 * training bounds the process's peak resident memory, which the run prints
 * at its end, and is not far above it (YOLOv8n, 160 px, batch 8, the
 * images cached in RAM: 40 of 160 x 160 x 3 bytes). */
Test(trainer, host_memory_is_known_before_step_0, .timeout = 900) {
    prepare();
    /* the optimised builds: the sanitisers' shadow memory would be most of a sanitised process's */
    char args[1200];
    snprintf(args, sizeof args, "models/yolov8.yaml --scale n --nc 3 --imgsz 160 --batch 8 -o %s/v8n160.plan", ROOT);
    CliResult r = tu_run_bin(tu_env_bin("YOLOCC_FAST_BIN", "build/yolocc"), args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    snprintf(args, sizeof args, "train %s/v8n160.plan --data %s/data/data.yaml --project %s/runs --name memory --exist-ok --workers 2 --epochs 1 --no-plots --cache ram", ROOT, ROOT,
             ROOT);
    r = tu_run_bin(tu_env_bin("YOLORT_FAST_BIN", "build/yolort"), args);
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    const char *line = strstr(r.out, "\nCPU: "), *end = strstr(r.out, "Peak host memory ");
    cr_assert(line && end && line < strstr(r.out, "Starting training"), "%s", r.out);
    double planned = 0, peak = 0, again = 0;
    cr_assert_eq(sscanf(line, "\nCPU: %lf GB of host memory", &planned), 1);
    cr_assert_eq(sscanf(end, "Peak host memory %lf GB (%lf GB known before step 0)", &peak, &again), 2, "%s", end);
    cr_expect_eq(again, planned);
    const char *cache = strstr(line, "RAM cache ");
    double cache_gb = 0;
    cr_expect(cache && sscanf(cache, "RAM cache %lf", &cache_gb) == 1 && fabs(cache_gb - 40 * 160 * 160 * 3 / 1e9) < 1e-3, "%.400s", line);
    cr_expect(strstr(line, "training step ") && strstr(line, "validation ") && strstr(line, "batch buffers ") && strstr(line, " available ("), "%.400s", line);
    /* the convolutions' oneDNN layouts are made and counted before step 0 */
    const char *layouts = strstr(line, " of kernel scratch (");
    double layouts_gb = 0;
    cr_expect(layouts && strstr(layouts, " of it oneDNN's layouts)") && sscanf(strstr(layouts, "(") + 1, "%lf", &layouts_gb) == 1 && layouts_gb > 0, "%.600s", line);
    /* an upper bound up to the allocator's own slack, and a tight one */
    cr_expect(peak <= 1.10 * planned && peak >= 0.75 * planned, "peak %.3f GB against %.3f GB known before step 0", peak, planned);
    cr_log_info("host memory: peak %.3f GB, %.3f GB known before step 0", peak, planned);
    tu_free(&r);
}
