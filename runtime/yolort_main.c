/* runtime/yolort_main.c — the yolort command line: `yolort train FILE.plan
 * --synthetic` runs training steps of a plan on the CPU and prints the losses.
 * The only place here that prints errors and picks exit codes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "synthetic.h"
#include "train_step.h"
#include "weights.h"

static const char USAGE[] =
    "usage: yolort train FILE.plan --synthetic [options]\n"
    "\n"
    "Runs training steps of a yolocc plan on the CPU (reference interpreter) on a\n"
    "generated batch (fixed seed) and prints box/cls/dfl losses per step.\n"
    "\n"
    "options:\n"
    "  --synthetic        train on a generated batch (the only data source so far)\n"
    "  --steps N          optimizer steps (default 10)\n"
    "  --weights FILE     initial weights (.safetensors, PyTorch state_dict names); default: fresh init\n"
    "  --save FILE        write the trained weights (.safetensors) at the end\n"
    "  --lr0 X            learning rate of every group (default 0.01 for SGD, 0.001 for AdamW)\n"
    "  --momentum X       SGD momentum / Adam beta1 (default 0.937)\n"
    "  --seed N           seed of the generated batch and of the initial weights (default 0)\n"
    "  --json             one JSON object per step: step, loss, box, cls, dfl\n"
    "  --reference        run only the reference kernels (default: OpenBLAS convolutions and fast BN/activations)\n";

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "yolort: error: ");
    fprintf(stderr, msg, arg);
    fprintf(stderr, " (see yolort --help)\n");
    return 2;
}

static bool number(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

int main(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc < 3 || strcmp(argv[1], "train") != 0) return usage_error("%s", argc < 2 ? "no command given" : "expected: yolort train FILE.plan --synthetic");
    const char *plan_path = argv[2], *weights = NULL, *save = NULL;
    bool synthetic = false, json = false, reference = false;
    double steps = 10, lr0 = -1, momentum = 0.937, seed = 0;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--synthetic") == 0) synthetic = true;
        else if (strcmp(a, "--json") == 0) json = true;
        else if (strcmp(a, "--reference") == 0) reference = true;
        else if (i + 1 >= argc) return usage_error("unknown option or missing value: '%s'", a);
        else if (strcmp(a, "--weights") == 0) weights = argv[++i];
        else if (strcmp(a, "--save") == 0) save = argv[++i];
        else if (strcmp(a, "--steps") == 0) {
            if (!number(argv[++i], 1, 1e9, &steps) || steps != (long)steps) return usage_error("--steps must be a positive integer, got '%s'", argv[i]);
        } else if (strcmp(a, "--lr0") == 0) {
            if (!number(argv[++i], 0, 10, &lr0)) return usage_error("--lr0 must be a number in [0, 10], got '%s'", argv[i]);
        } else if (strcmp(a, "--momentum") == 0) {
            if (!number(argv[++i], 0, 1, &momentum)) return usage_error("--momentum must be a number in [0, 1], got '%s'", argv[i]);
        } else if (strcmp(a, "--seed") == 0) {
            if (!number(argv[++i], 0, 1e15, &seed) || seed != (long long)seed) return usage_error("--seed must be a non-negative integer, got '%s'", argv[i]);
        } else return usage_error("unknown option '%s'", a);
    }
    if (!synthetic) return usage_error("%s", "no data: pass --synthetic (datasets arrive with the trainer)");
    Plan plan;
    TrainStep ts;
    char err[512];
    int rc = 2;
    if (!plan_read(plan_path, &plan, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        plan_free(&plan);
        return 2;
    }
    if (!train_step_init(&ts, &plan, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", plan_path, err);
        goto out;
    }
    train_step_set_fast(&ts, !reference);
    const char *opt = cJSON_GetStringValue(cJSON_GetObjectItem(plan.meta, "optimizer"));
    if (lr0 < 0) lr0 = opt && strcmp(opt, "AdamW") == 0 ? 0.001 : 0.01;
    if (weights) {
        WeightsLoadReport rep;
        if (!weights_load(&plan.g, ts.it.buf, weights, NULL, &rep, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            goto out;
        }
        char line[1024];
        weights_report_format(&rep, line, sizeof line);
        fprintf(stderr, "%s\n", line);
    } else if (!weights_init(&plan.g, ts.it.buf, (uint64_t)seed, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        goto out;
    }
    synthetic_batch((uint64_t)seed, ts.batch, ts.imgsz, ts.nc, ts.max_boxes, train_step_images(&ts), train_step_boxes(&ts), train_step_counts(&ts));
    double lr[3] = {lr0, lr0, lr0};
    rc = 1;
    for (long s = 1; s <= (long)steps; s++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        StepResult r;
        if (!train_step_run(&ts, lr, momentum, &r, err, sizeof err)) {
            fprintf(stderr, "%s: step %ld: %s\n", plan_path, s, err);
            goto out;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double loss = r.box + r.cls + r.dfl;
        if (json)
            printf("{\"step\": %ld, \"loss\": %.6f, \"box\": %.6f, \"cls\": %.6f, \"dfl\": %.6f, \"total\": %.6f, \"grad_norm\": %.6f, \"seconds\": %.3f}\n", s, loss,
                   r.box, r.cls, r.dfl, r.total, r.grad_norm, secs);
        else
            printf("step %4ld/%ld  loss %.4f  box %.4f  cls %.4f  dfl %.4f  grad_norm %.3f  %.2fs\n", s, (long)steps, loss, r.box, r.cls, r.dfl, r.grad_norm, secs);
        fflush(stdout);
    }
    if (save && !weights_save(&plan.g, ts.it.buf, save, NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        goto out;
    }
    rc = 0;
out:
    train_step_free(&ts);
    plan_free(&plan);
    return rc;
}
