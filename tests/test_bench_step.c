/* tests/test_bench_step.c — `yolort bench`: the JSON of a CPU plan's benchmark (images/s = batch /
 * median), its errors (one line, non-zero exit), the median helper, and on a GPU the same for a CUDA
 * plan (`SKIP: no CUDA device` without one). Owns no runtime code. */
#include <cjson/cJSON.h>
#include <math.h>

#include "../runtime/cuda/cuda_step.h"
#include "../runtime/cuda/dynload.h"
#include "../runtime/train/bench_step.h"
#include "test_gpu.h"

/* the binary named by the first of two environment variables that is set, else the fallback */
static const char *bin2(const char *env1, const char *env2, const char *fallback) {
    const char *b = getenv(env1);
    if (!b || !*b) b = getenv(env2);
    return b && *b ? b : fallback;
}

/* yolocc: the optimised build when there is one (the compile is the same, only faster) */
static CliResult yolocc(const char *args) { return tu_run_bin(bin2("YOLOCC_FAST_BIN", "YOLOCC_BIN", "build/yolocc"), args); }
static CliResult yolort(const char *args) { return tu_run_bin(bin2("YOLORT_BIN", "YOLORT_FAST_BIN", "build/yolort"), args); }

/* Compiles models/tiny.yaml at 64 px, batch 2 with EXTRA into DIR/NAME;
 * returns the yolocc result (the caller checks and frees it). */
static CliResult compile_tiny(const char *dir, const char *name, const char *extra, char *path, size_t cap) {
    char args[1024];
    snprintf(path, cap, "%s/%s", dir, name);
    snprintf(args, sizeof args, "models/tiny.yaml --imgsz 64 --batch 2 %s -o %s", extra, path);
    return yolocc(args);
}

static double num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    cr_assert(cJSON_IsNumber(v), "\"%s\" is not a number", key);
    return v->valuedouble;
}

static const char *str(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    cr_assert(cJSON_IsString(v), "\"%s\" is not a string", key);
    return v->valuestring;
}

/* Parses the one-line JSON of `yolort bench --json` and checks what holds
 * for every target: the plan's shape, the step counts, positive timings
 * and memory, images_per_s = batch / median within the printed rounding. */
static cJSON *check_json(const CliResult *r, const char *plan, int steps, int warmup) {
    cr_assert_eq(r->status, 0, "yolort bench failed: %s", r->err);
    cr_expect_eq(tu_lines(r->out), 1, "one JSON line: %s", r->out);
    cJSON *j = cJSON_Parse(r->out);
    cr_assert(j, "not JSON: %s", r->out);
    cr_expect_str_eq(str(j, "plan"), plan);
    cr_expect_eq(num(j, "batch"), 2);
    cr_expect_eq(num(j, "imgsz"), 64);
    cr_expect_eq(num(j, "steps"), steps);
    cr_expect_eq(num(j, "warmup"), warmup);
    cr_expect_gt(strlen(str(j, "device")), 0, "the device is named");
    cr_expect_gt(strlen(str(j, "peak_kind")), 0, "the memory figure says what it is");
    double med = num(j, "median_ms"), ips = num(j, "images_per_s"), lo = num(j, "min_ms"), hi = num(j, "max_ms");
    cr_expect(lo > 0 && lo <= med && med <= hi, "min %g <= median %g <= max %g", lo, med, hi);
    cr_expect_gt(ips, 0);
    double want = 2 / (med * 1e-3);
    cr_expect_leq(fabs(ips - want), 1e-4 * want + 1e-4, "images/s %.4f = batch / median = %.4f", ips, want);
    cr_expect_gt(num(j, "peak_bytes"), 0);
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(j, "loss");
    cr_expect(cJSON_IsNumber(loss) && isfinite(loss->valuedouble) && loss->valuedouble > 0, "a finite positive loss: %s", r->out);
    /* the set-up is timed apart from the steps: opening a plan takes some time, and less than a minute here */
    cr_expect(num(j, "setup_s") > 0 && num(j, "setup_s") < 60, "set-up %g s: %s", num(j, "setup_s"), r->out);
    return j;
}

/* A fresh DIR (a mkdtemp pattern) holding the tiny CPU plan DIR/t.plan. */
static void tiny_cpu_plan(char *dir, char *plan, size_t cap) {
    cr_assert(mkdtemp(dir));
    CliResult c = compile_tiny(dir, "t.plan", "", plan, cap);
    cr_assert_eq(c.status, 0, "%s", c.err);
    tu_free(&c);
}

Test(bench_step, cpu_plan_json_reports_images_per_second) {
    char dir[] = "/tmp/yolocc-bench-XXXXXX", plan[512], args[1024];
    tiny_cpu_plan(dir, plan, sizeof plan);
    snprintf(args, sizeof args, "bench %s --steps 2 --warmup 1 --json", plan);
    CliResult r = yolort(args);
    cJSON *j = check_json(&r, plan, 2, 1);
    cr_expect_str_eq(str(j, "target"), "cpu");
    cr_expect_str_eq(str(j, "precision"), "fp32");
    cr_expect(strstr(str(j, "peak_kind"), "resident"), "a CPU plan's memory figure is the process's peak RSS: %s", str(j, "peak_kind"));
    cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "plan_device_bytes")), "no device bytes for a CPU plan");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "host_ops")), "no host-op count for a CPU plan");
    cr_expect_eq(r.err[0], 0, "nothing on stderr: %s", r.err);
    cJSON_Delete(j);
    tu_free(&r);
    /* the text form says the same for people */
    snprintf(args, sizeof args, "bench %s --steps 1 --warmup 0 --seed 3", plan);
    r = yolort(args);
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "images/s") && strstr(r.out, "median of 1 after 0 warm-up") && strstr(r.out, "peak resident set"), "%s", r.out);
    cr_expect(strstr(r.out, "set-up before step 0: ") && strstr(r.out, " s (kernels loaded)"), "%s", r.out);
    tu_free(&r);
    /* a time budget ends the timed steps early, after one at least */
    snprintf(args, sizeof args, "bench %s --steps 50 --warmup 0 --max-seconds 0 --json", plan);
    r = yolort(args);
    j = check_json(&r, plan, 1, 0);
    cJSON_Delete(j);
    tu_free(&r);
    unlink(plan);
    rmdir(dir);
}

Test(bench_step, a_bad_plan_gives_one_error_line) {
    const char *cases[] = {"bench /tmp/yolocc-bench-no-such.plan --json", "bench models/tiny.yaml --steps 1"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CliResult r = yolort(cases[i]);
        cr_expect_neq(r.status, 0, "'%s' exited 0", cases[i]);
        cr_expect_eq(tu_lines(r.err), 1, "'%s': one error line: %s", cases[i], r.err);
        cr_expect(strncmp(r.err, "yolort: error: ", 15) == 0, "%s", r.err);
        cr_expect_eq(r.out[0], 0, "'%s' printed to stdout: %s", cases[i], r.out);
        tu_free(&r);
    }
}

Test(bench_step, a_bad_option_gives_one_error_line) {
    const char *cases[] = {"bench", "bench x.plan --steps 0", "bench x.plan --steps 1.5", "bench x.plan --warmup -1", "bench x.plan --seed abc",
                           "bench x.plan --frob", "bench x.plan --steps", "bench x.plan --max-seconds -1"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CliResult r = yolort(cases[i]);
        cr_expect_eq(r.status, 2, "'%s' exited %d", cases[i], r.status);
        cr_expect_eq(tu_lines(r.err), 1, "'%s': %s", cases[i], r.err);
        cr_expect_eq(r.out[0], 0, "'%s' printed to stdout", cases[i]);
        tu_free(&r);
    }
}

Test(bench_step, median_of_odd_and_even_counts) {
    double a[] = {5, 1, 3}, b[] = {4, 1, 3, 2}, c[] = {7};
    cr_expect_eq(bench_median(a, 3), 3);
    cr_expect_eq(bench_median(b, 4), 2.5, "the mean of the middle two");
    cr_expect_eq(bench_median(c, 1), 7);
    cr_expect(a[0] == 1 && a[2] == 5, "sorted in place");
}

/* Without a GPU a CUDA plan's benchmark fails with the loader's or the
 * driver's one line (the CUDA plan itself compiles anywhere with NVRTC). */
Test(bench_step, cuda_plan_without_a_device_fails_with_one_line) {
    char gerr[1024];
    if (have_gpu(gerr, sizeof gerr)) cr_skip_test("a CUDA device is present (bench_step/cuda_plan_on_the_gpu covers it)");
    char dir[] = "/tmp/yolocc-bench-XXXXXX", plan[512], args[1024];
    cr_assert(mkdtemp(dir));
    CliResult c = compile_tiny(dir, "g.plan", "--precision bf16 --target cuda --arch sm_80,sm_90", plan, sizeof plan);
    if (c.status != 0) {
        tu_free(&c);
        rmdir(dir);
        cr_skip_test("no CUDA plan without NVRTC");
    }
    tu_free(&c);
    snprintf(args, sizeof args, "bench %s --steps 1 --json", plan);
    CliResult r = yolort(args);
    cr_expect_neq(r.status, 0);
    cr_expect_eq(tu_lines(r.err), 1, "one line: %s", r.err);
    cr_expect(strstr(r.err, "libcuda") || strstr(r.err, "cuInit") || strstr(r.err, "no CUDA device"), "the loader's or the driver's message: %s", r.err);
    cr_expect_eq(r.out[0], 0, "%s", r.out);
    tu_free(&r);
    unlink(plan);
    rmdir(dir);
}

/* The GPU tests' start: `SKIP: no CUDA device` without one; else this
 * test alone on it (yolort bench reads the device's free memory across the
 * steps) and the tiny bf16 CUDA plan compiled into dir (a mkdtemp
 * template) as plan. */
static void gpu_tiny_plan(char *dir, char *plan, size_t cap) {
    char gerr[1024];
    if (!have_gpu(gerr, sizeof gerr)) {
        printf("SKIP: no CUDA device\n");
        fflush(stdout);
        cr_skip_test("no CUDA device");
    }
    tu_gpu_alone();
    cr_assert(mkdtemp(dir));
    CliResult c = compile_tiny(dir, "g.plan", "--precision bf16 --target cuda --arch sm_80,sm_90", plan, cap);
    cr_assert_eq(c.status, 0, "%s", c.err);
    tu_free(&c);
}

/* On a GPU: the tiny bf16 CUDA plan's benchmark through CudaStep. */
Test(bench_step, cuda_plan_on_the_gpu) {
    char dir[] = "/tmp/yolocc-bench-XXXXXX", plan[512], args[1024];
    gpu_tiny_plan(dir, plan, sizeof plan);
    snprintf(args, sizeof args, "bench %s --steps 3 --warmup 1 --json", plan);
    CliResult r = yolort(args);
    cJSON *j = check_json(&r, plan, 3, 1);
    cr_expect_str_eq(str(j, "target"), "cuda");
    cr_expect_str_eq(str(j, "precision"), "bf16");
    cr_expect_gt(num(j, "plan_device_bytes"), 0, "CudaStep allocated the plan's regions");
    cr_expect_geq(num(j, "host_ops"), 0);
    cr_expect(strstr(str(j, "host_line"), "host"), "the host-op line: %s", str(j, "host_line"));
    cr_expect(strstr(str(j, "host_line"), "cuDNN engines"), "how cuDNN's engines were chosen: %s", str(j, "host_line"));
    /* the driver hands out whole pages, so the used-memory increase covers the plan less at most one page */
    cr_expect_geq(num(j, "peak_bytes") + (2 << 20), num(j, "plan_device_bytes"), "%s", r.out);
    cr_log_info("%s", r.out);
    cJSON_Delete(j);
    tu_free(&r);
    unlink(plan);
    rmdir(dir);
}

/* On a GPU: --device as Ultralytics' device=. 0 runs the plan there; -1
 * asks NVML for the most idle GPU (or warns that it cannot) and runs; a
 * device the driver does not have and cpu for a CUDA plan are one line,
 * exit 2, naming CUDA_VISIBLE_DEVICES and the plan. */
Test(bench_step, cuda_plan_with_the_device_option) {
    char dir[] = "/tmp/yolocc-bench-XXXXXX", plan[512], args[1024];
    gpu_tiny_plan(dir, plan, sizeof plan);
    snprintf(args, sizeof args, "bench %s --steps 1 --warmup 0 --json --device cuda:0", plan);
    CliResult r = yolort(args);
    cJSON *j = check_json(&r, plan, 1, 0);
    cr_expect_str_eq(str(j, "target"), "cuda");
    cJSON_Delete(j);
    tu_free(&r);
    snprintf(args, sizeof args, "bench %s --steps 1 --warmup 0 --json --device -1", plan);
    r = yolort(args);
    j = check_json(&r, plan, 1, 0);
    cr_expect(strstr(r.err, "Selected idle CUDA devices [") || strstr(r.err, "NVML stats unavailable"), "%s", r.err);
    cr_log_info("--device -1: %s", r.err);
    cJSON_Delete(j);
    tu_free(&r);
    snprintf(args, sizeof args, "bench %s --steps 1 --json --device 63", plan);
    r = yolort(args);
    cr_expect(r.status == 2 && strstr(r.err, "CUDA_VISIBLE_DEVICES=63") && tu_lines(r.err) == 1 && !r.out[0], "exit %d: %s", r.status, r.err);
    tu_free(&r);
    snprintf(args, sizeof args, "bench %s --steps 1 --json --device cpu", plan);
    r = yolort(args);
    cr_expect(r.status == 2 && strstr(r.err, "g.plan is a CUDA plan") && tu_lines(r.err) == 1, "exit %d: %s", r.status, r.err);
    tu_free(&r);
    unlink(plan);
    rmdir(dir);
}

/* `--profile` on a CPU plan: one more step with each launch timed by the
 * host clock; its rows (all of them asked for) add up to the launches'
 * total, which is most of the step and no more than it. */
Test(bench_step, cpu_plan_profile_times_every_launch) {
    char dir[] = "/tmp/yolocc-bench-XXXXXX", plan[512], args[1024];
    tiny_cpu_plan(dir, plan, sizeof plan);
    snprintf(args, sizeof args, "bench %s --steps 1 --warmup 1 --profile 1000", plan);
    CliResult r = yolort(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    double launches = 0, wall = 0, rows = 0;
    const char *head = strstr(r.err, "profile (one more step, the host clock around each launch): ");
    cr_assert(head && sscanf(strchr(head, ':') + 1, "%lf ms in launches, %lf ms on the host clock", &launches, &wall) == 2, "%s", r.err);
    cr_expect(launches > 0 && launches <= wall && launches > 0.5 * wall, "launches %.3f ms within the step's %.3f ms", launches, wall);
    cr_expect(strstr(r.err, "  generated kernels ") && strstr(r.err, "  library routines ") && !strstr(r.err, "folded convs"), "%s", r.err);
    cr_expect(strstr(r.err, "library routines: conv2d_wgrad") && strstr(r.err, "library routines: detect_loss_bwd") &&
                  strstr(r.err, "generated kernels: bn_act_bwd (batchnorm_bwd ...)"),
              "%s", r.err);
    int n = 0;
    const char *at = strstr(r.err, "  by op:\n"), *end = strstr(r.err, "  heaviest launches:");
    cr_assert(at && end, "%s", r.err);
    for (at = strchr(at, '\n') + 1; at < end; at = strchr(at, '\n') + 1) {
        double ms;
        cr_assert_eq(sscanf(at, "%lf ms", &ms), 1, "a row: %.60s", at);
        rows += ms, n++;
    }
    cr_expect(n > 5 && fabs(rows - launches) <= 0.001 * n + 1e-6, "%d rows add up to %.3f ms, the launches %.3f ms", n, rows, launches);
    tu_free(&r);
    unlink(plan);
    rmdir(dir);
}

/* `--profile`'s text (pure): routes with launches only, rows heaviest first up
 * to the asked number, and a buffer too small cut without writing past it. */
Test(bench_step, profile_text_keeps_its_rows_and_its_buffer) {
    ProfileRow rows[3] = {{"cuDNN: conv2d", 4, 3.0, 6e9}, {"generated kernels: conv_bn_act (batchnorm ...)", 9, 2.0, 0}, {"library kernels: maxpool2d", 1, 1.0, 1e9}};
    StepProfile p = {.how = "one eager step, events around each launch", .rows = rows, .n_rows = 3, .launch_ms = 6.0, .wall_ms = 6.5, .launch_bytes = 7e9};
    for (int r = 0; r < CUDA_ROUTE_COUNT; r++) p.route_name[r] = cuda_route_name((CudaRoute)r);
    p.route_ms[CUDA_ROUTE_CUDNN] = 3.0, p.route_launches[CUDA_ROUTE_CUDNN] = 4;
    p.route_ms[CUDA_ROUTE_KERNEL] = 3.0, p.route_launches[CUDA_ROUTE_KERNEL] = 10;
    p.top[0] = (ProfileRow){"launch 7, ops 7-7 model.0.bn", 1, 1.5, 0}, p.n_top = 1;
    char text[2048];
    step_profile_format(&p, 2, text, sizeof text);
    cr_expect(strstr(text, "6.000 ms in launches, 6.500 ms on the host clock; 7.000 GB moved,  1167 GB/s"), "%s", text);
    /* bytes over time where both are known, a blank where the bytes were not counted */
    cr_expect(strstr(text, "4 x  2000 GB/s  cuDNN: conv2d"), "%s", text);
    cr_expect(strstr(text, "9 x             generated kernels"), "%s", text);
    char ran[64], idle[64];
    snprintf(ran, sizeof ran, "\n  %s ", cuda_route_name(CUDA_ROUTE_CUDNN));
    snprintf(idle, sizeof idle, "\n  %s ", cuda_route_name(CUDA_ROUTE_HOST));
    cr_expect(strstr(text, ran) && !strstr(text, idle), "only routes that ran: %s", text);
    const char *a = strstr(text, "cuDNN: conv2d"), *b = strstr(text, "conv_bn_act");
    cr_expect(a && b && a < b, "heaviest first: %s", text);
    cr_expect_null(strstr(text, "maxpool2d"), "two rows asked for: %s", text);
    cr_expect(strstr(text, "model.0.bn"), "%s", text);
    char small[40 + 8];
    memset(small, 'x', sizeof small);
    step_profile_format(&p, 3, small, 40);
    cr_expect_eq(strlen(small), 39, "cut at the buffer: '%s'", small);
    for (size_t i = 40; i < sizeof small; i++) cr_expect_eq(small[i], 'x', "byte %zu past the buffer kept", i);
}
