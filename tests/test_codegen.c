/* tests/test_codegen.c — the kernel IR and its code: the CPU target runs a
 * plan through its generated kernels to the reference interpreter's numbers;
 * launch counts per block type; golden sources; NVRTC compiles every kernel
 * of every model for sm_80 and sm_90; the compile cache; CLI errors. */
#include "../compiler/codegen.h"
#include "../compiler/kernel_ir.h"
#include "../compiler/train_compile.h"
#include "../compiler/nvrtc_build.h"
#include "../runtime/gen_cpu.h"
#include "test_step.h"

/* issue 5: the CPU target equals the reference interpreter (fp32, 1e-5
 * relative, values below 1e-3 compared absolutely) with fusion on and off,
 * in a poisoned arena */
static void check_cpu_target(const char *model_args) {
    for (int f = 0; f < 2; f++) {
        char args[512], path[22];
        snprintf(args, sizeof args, "%s --imgsz 64 --batch 2 --max-boxes 8 --fuse %s", model_args, f ? "full" : "none");
        Plan p;
        compile_and_read(args, path, &p);
        cr_assert(p.kernels, "%s: the plan carries no kernels", args);
        StepTrace ref, gen;
        run_two(&p, false, &ref, NULL);
        run_two(&p, true, &gen, NULL);
        double dl = fmax(fabs(gen.loss[0] - ref.loss[0]) / fabs(ref.loss[0]), fabs(gen.loss[1] - ref.loss[1]) / fabs(ref.loss[1]));
        double dg = worst_diff(gen.grads, ref.grads, ref.n_grads), dp = worst_diff(gen.state, ref.state, ref.n_state);
        cr_log_info("%s: losses %.7g %.7g (oracle %.7g %.7g); worst relative difference: loss %.3g, gradients %.3g, state after 2 steps %.3g", args, gen.loss[0],
                    gen.loss[1], ref.loss[0], ref.loss[1], dl, dg, dp);
        cr_expect(isfinite(gen.loss[1]));
        cr_expect_leq(dl, 1e-5, "%s: loss differs by %.3g", args, dl);
        cr_expect_leq(dg, 1e-5, "%s: gradients differ by %.3g", args, dg);
        cr_expect_leq(dp, 1e-5, "%s: parameters differ by %.3g", args, dp);
        free_trace(&ref);
        free_trace(&gen);
        plan_free(&p);
        unlink(path);
    }
}

Test(codegen, cpu_target_equals_reference_yolov8_style) { check_cpu_target("models/tiny.yaml"); }
Test(codegen, cpu_target_equals_reference_yolo11_style) { check_cpu_target("tests/parity/v11tiny.yaml --scale n"); }
/* v10Detect: two losses on the one2many and the detached one2one levels, and their sums */
Test(codegen, cpu_target_equals_reference_yolov10_style) { check_cpu_target("tests/parity/v10tiny.yaml"); }
Test(codegen, cpu_target_equals_reference_yolov5_style) { check_cpu_target("models/yolov5.yaml --scale n"); }
/* AdamW's updates: multi-tensor launches of their own kernel (two state tensors a row) */
Test(codegen, cpu_target_equals_reference_adamw) { check_cpu_target("models/tiny.yaml --optimizer adamw"); }

/* The generated kernels do the work: with the BN-statistics kernels (one
 * phase of two sums) replaced by ones that do nothing, the step's results
 * change. */
static void nothing(const YkArgs *a) { (void)a; }

static void break_bn_statistics(TrainStep *ts) {
    int hit = 0;
    for (int i = 0; i < ts->gen.kp.n_kernels; i++)
        if (ts->gen.kp.kernels[i].skel == KS_CHANNEL_REDUCE && ts->gen.kp.kernels[i].n_phases == 1 && ts->gen.kp.kernels[i].n_accs[0] == 2) ts->gen.fn[i] = nothing, hit++;
    cr_assert_gt(hit, 0, "no BN-statistics kernel");
}

Test(codegen, generated_kernels_do_the_work) {
    char path[22];
    Plan p;
    compile_and_read("models/tiny.yaml --imgsz 64 --batch 2 --max-boxes 8", path, &p);
    StepTrace ok, broken;
    run_two(&p, true, &ok, NULL);
    run_two(&p, true, &broken, break_bn_statistics);
    cr_expect(ok.loss[0] != broken.loss[0] || worst_diff(ok.grads, broken.grads, ok.n_grads) > 1e-3, "a no-op statistics kernel changed nothing");
    free_trace(&ok);
    free_trace(&broken);
    plan_free(&p);
    unlink(path);
}

/* The BN statistics keep a small variance under a large mean: on channels
 * of M + u (M up to 3e5, u uniform in [-1, 1], stored fp32) the generated
 * kernel's batch mean and running variance agree with an exact two-pass over
 * the stored values to fp32 rounding, where E[x^2] - E[x]^2 over the same
 * values in fp64 is off by more than 1e-6 (so the data can tell the two). */
Test(codegen, bn_statistics_keep_a_small_variance_under_a_large_mean) {
    char path[22], err[256];
    Plan p;
    compile_and_read("models/tiny.yaml --imgsz 64 --batch 2 --max-boxes 8", path, &p);
    GenCpu gc;
    cr_assert(gen_cpu_open(&gc, &p, err, sizeof err), "%s", err);
    const Graph *g = &p.g;
    const KLaunch *ln = NULL;
    for (int l = 0; l < gc.kp.n_launches && !ln; l++) {
        const KLaunch *c = &gc.kp.launches[l];
        if (c->kernel >= 0 && gc.kp.kernels[c->kernel].skel == KS_CHANNEL_REDUCE && g->ops[c->op_hi].kind == OP_BATCHNORM) ln = c;
    }
    cr_assert_not_null(ln, "no BN-statistics launch");
    const Op *bn = &g->ops[ln->op_hi];
    void **buf = calloc((size_t)g->n_tensors, sizeof *buf);
    cr_assert_not_null(buf);
    for (int s = 0; s < ln->n_args; s++)
        if (!buf[ln->args[s]]) cr_assert_not_null(buf[ln->args[s]] = calloc((size_t)shape_numel(&g->tensors[ln->args[s]].shape), 8));
    float *x = buf[bn->in[0]];
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    for (int64_t n = 0; n < ln->n; n++)
        for (int64_t c = 0; c < ln->c; c++)
            for (int64_t k = 0; k < ln->inner; k++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                x[(n * ln->c + c) * ln->inner + k] = (float)(1e5 * (double)(1 + c % 3) + ((double)(seed >> 11) / 9007199254740992.0 * 2 - 1));
            }
    gen_cpu_launch(&gc, ln, kernel_all_rows(&gc.kp, ln), buf);
    const float *mean = buf[bn->out[1]], *running_var = buf[bn->in[4]];
    const double count = (double)(ln->n * ln->inner);
    double worst_mean = 0, worst_var = 0, worst_naive = 0;
    for (int64_t c = 0; c < ln->c; c++) {
        long double sum = 0, centred = 0;
        double s1 = 0, s2 = 0;
        for (int64_t n = 0; n < ln->n; n++)
            for (int64_t k = 0; k < ln->inner; k++) {
                double v = x[(n * ln->c + c) * ln->inner + k];
                sum += v, s1 += v, s2 += v * v;
            }
        long double m = sum / count;
        for (int64_t n = 0; n < ln->n; n++)
            for (int64_t k = 0; k < ln->inner; k++) centred += (x[(n * ln->c + c) * ln->inner + k] - m) * (x[(n * ln->c + c) * ln->inner + k] - m);
        double var = (double)(centred / count), unbiased = var * count / (count - 1), naive = s2 / count - (s1 / count) * (s1 / count);
        worst_mean = fmax(worst_mean, fabs(mean[c] - (double)m) / (double)m);
        worst_var = fmax(worst_var, fabs(running_var[c] / bn->a.momentum - unbiased) / unbiased);
        worst_naive = fmax(worst_naive, fabs(naive - var) / var);
    }
    cr_log_info("BN statistics of %lld channels x %.0f values near 1e5: worst relative error of the mean %.3g, of the variance %.3g; E[x^2]-E[x]^2 %.3g",
                (long long)ln->c, count, worst_mean, worst_var, worst_naive);
    cr_expect_leq(worst_mean, 1e-7);
    cr_expect_leq(worst_var, 1e-6);
    cr_expect_gt(worst_naive, 1e-6, "the data does not tell the one-pass forms apart");
    for (int s = 0; s < ln->n_args; s++) {
        free(buf[ln->args[s]]);
        for (int r = s + 1; r < ln->n_args; r++)
            if (ln->args[r] == ln->args[s]) buf[ln->args[r]] = NULL;
        buf[ln->args[s]] = NULL;
    }
    free(buf);
    gen_cpu_close(&gc);
    plan_free(&p);
    unlink(path);
}

static void compile_tiny(Arena *a, TrainCompiled *tc, FusePolicy fuse) {
    ModelConfig cfg;
    Diag d;
    arena_init(a, 0);
    diag_init(&d, "models/tiny.yaml");
    ModelOptions mo = {0};
    TrainOptions to = {.imgsz = 64, .batch = 2, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .recompute = RECOMPUTE_POINTWISE, .fuse = fuse};
    cr_assert(model_cfg_load(a, "models/tiny.yaml", &mo, &cfg, &d) && compile_training(a, &cfg, &to, tc, &d), "%s", d.msg);
}

/* The tiny training step compiled (compile_tiny) and its kernels lowered in fp32. */
static void lower_tiny(Arena *a, TrainCompiled *tc, FusePolicy fuse, KProgram *kp) {
    char err[256];
    compile_tiny(a, tc, fuse);
    cr_assert(kernel_lower(&tc->m.g, &tc->fu, PREC_FP32, kp, err, sizeof err), "%s", err);
}

static void lowered_tiny_free(Arena *a, TrainCompiled *tc, KProgram *kp) {
    kernel_program_free(kp);
    train_compiled_free(tc);
    arena_free(a);
}

static int distinct_kernels(const KProgram *kp, int group) {
    int seen[64], n = 0;
    for (int l = kp->group_first[group]; l < kp->group_first[group + 1]; l++) {
        int k = kp->launches[l].kernel, dup = 0;
        for (int j = 0; j < n; j++) dup |= seen[j] == k;
        if (k >= 0 && !dup && n < 64) seen[n++] = k;
    }
    return n;
}

/* issue 5 counts (tiny model, training step, pointwise recompute, fused):
 *  - conv-BN-SiLU forward: 1 library call (the conv) + 2 generated launches:
 *    the BN statistics (a one-pass per-channel reduction ending in the
 *    per-channel finalize that also updates the running statistics) and one
 *    BN-apply + SiLU [+ residual add] map;
 *  - its backward: a bn_act_bwd group of ONE generated launch, a two-pass
 *    per-channel kernel (the BN-grad sums, then dX from the unrounded sums;
 *    each pass recomputes BN-apply and SiLU-grad in registers, but the C
 *    target's second pass reads the first's back: kernel_reuse.h), then dgrad
 *    and wgrad as library calls of their own;
 *  - the optimizer: 1 norm launch + one multi-tensor update launch per
 *    parameter group (SGD with and without weight decay, and the learning
 *    rate of its group), a row per parameter, 4 distinct kernels;
 *  - validation (eval BN): conv + one map of BN-apply + SiLU. */
Test(codegen, launch_counts_per_block_type) {
    Arena a;
    TrainCompiled tc = {0};
    compile_tiny(&a, &tc, FUSE_FULL);
    const Graph *g = &tc.m.g;
    KProgram kp, ekp;
    char err[256];
    cr_assert(kernel_lower(g, &tc.fu, PREC_FP32, &kp, err, sizeof err), "%s", err);
    cr_assert(kernel_lower(&tc.ev.em.g, &tc.ev.efu, PREC_FP32, &ekp, err, sizeof err), "%s", err);
    int conv = 0, bwd = 0, params = 0;
    for (int i = 0; i < tc.fu.n_groups; i++) {
        const FusionGroup *gr = &tc.fu.groups[i];
        int lib, gen;
        kernel_count_launches(&kp, i, i + 1, &lib, &gen);
        if (gr->pattern == PATTERN_CONV_BN_ACT) {
            conv++;
            cr_expect_eq(lib, 1);
            cr_expect_eq(gen, 2);
            const KLaunch *stats = &kp.launches[kp.group_first[i] + 1];
            cr_expect_eq(kp.kernels[stats->kernel].skel, KS_CHANNEL_REDUCE);
            cr_expect_eq(kp.kernels[stats->kernel].n_phases, 1);
        } else if (gr->pattern == PATTERN_BN_ACT_BWD) {
            bwd++;
            cr_expect_eq(lib, 0);
            cr_expect_eq(gen, 1);
            const Kernel *k = &kp.kernels[kp.launches[kp.group_first[i]].kernel];
            cr_expect_eq(k->skel, KS_CHANNEL_REDUCE);
            cr_expect_eq(k->n_phases, 2);
        } else if (gr->pattern == PATTERN_OPTIMIZER) {
            params = gr->n - 1;
            cr_expect_eq(lib, 0);
            cr_expect_eq(gen, 4, "the norm and one update launch per parameter group: %d", gen);
            cr_expect_eq(distinct_kernels(&kp, i), 4);
            int rows = 0;
            for (int l = kp.group_first[i] + 1; l < kp.group_first[i + 1]; l++) {
                const KLaunch *ln = &kp.launches[l];
                cr_assert(kernel_is_multi(&kp, ln), "launch %d is a multi-tensor launch", l);
                cr_expect_eq(ln->op_hi - ln->op_lo + 1, ln->list_n, "a row per op");
                for (int r = 0; r < ln->list_n; r++) {
                    const Op *op = &g->ops[ln->op_lo + r];
                    const int *args = kernel_row_args(&kp, ln, r);
                    bool param = false, grad = false;
                    for (int s = 0; s < ln->n_args; s++) param |= args[s] == op->in[0], grad |= args[s] == op->in[1];
                    cr_expect(op->kind == OP_SGD_STEP && param && grad, "row %d of launch %d names op %d's parameter and gradient", r, l, op->id);
                    cr_expect_eq(op->a.group, g->ops[ln->op_lo].a.group, "one parameter group a launch");
                    cr_expect_eq(kernel_row_len(&kp, ln, r), shape_numel(&g->tensors[op->in[0]].shape));
                    rows++;
                }
            }
            cr_expect_eq(rows, params, "every update is a row");
        }
    }
    cr_expect_gt(conv, 10);
    cr_expect_eq(bwd, conv);
    int eval_conv = 0;
    for (int i = 0; i < tc.ev.efu.n_groups; i++) {
        if (tc.ev.efu.groups[i].pattern != PATTERN_CONV_BN_ACT) continue;
        int lib, gen;
        kernel_count_launches(&ekp, i, i + 1, &lib, &gen);
        eval_conv++;
        cr_expect_eq(lib, 1);
        cr_expect_eq(gen, 1, "eval conv block %d: %d generated launches", i, gen);
    }
    cr_expect_eq(eval_conv, conv);
    int lib, gen;
    kernel_count_launches(&kp, 0, kp.n_groups, &lib, &gen);
    cr_log_info("tiny training step: %d ops, %d groups, %d library calls, %d generated launches of %d kernels; %d conv-BN-SiLU blocks; %d parameter updates",
                g->n_ops, tc.fu.n_groups, lib, gen, kp.n_kernels, conv, params);
    kernel_program_free(&kp);
    kernel_program_free(&ekp);
    train_compiled_free(&tc);
    arena_free(&a);
}

typedef struct Visits {
    int launch[8];
    KRows rows[8];
    int n;
} Visits;

static bool note_visit(void *ctx, int l, int group, KRows rows, char *err, int errcap) {
    (void)group, (void)err, (void)errcap;
    Visits *v = ctx;
    cr_assert_lt(v->n, 8);
    v->launch[v->n] = l, v->rows[v->n++] = rows;
    return true;
}

/* A range of ops may cut a multi-tensor launch (the updates left after a
 * frozen parameter): the run visits the rows inside it, and any other
 * launch it cuts is still an error. */
Test(codegen, ranges_run_the_rows_of_multi_tensor_launches_inside_them) {
    Arena a;
    TrainCompiled tc = {0};
    KProgram kp;
    char err[256];
    lower_tiny(&a, &tc, FUSE_FULL, &kp);
    int m = -1;
    for (int l = 0; l < kp.n_launches && m < 0; l++)
        if (kernel_is_multi(&kp, &kp.launches[l]) && kp.launches[l].list_n >= 3) m = l;
    cr_assert_geq(m, 0, "a multi-tensor launch of 3 rows or more");
    const KLaunch *ln = &kp.launches[m];
    Visits v = {.n = 0};
    cr_assert(kernel_run_range(&kp, &tc.fu, ln->op_lo + 1, ln->op_hi, note_visit, NULL, &v, err, sizeof err), "%s", err);
    cr_expect(v.n == 1 && v.launch[0] == m && v.rows[0].lo == 1 && v.rows[0].hi == ln->list_n - 1, "rows [1, %d) of launch %d: %d visits, rows [%d, %d)",
              ln->list_n - 1, m, v.n, v.rows[0].lo, v.rows[0].hi);
    v.n = 0;
    cr_assert(kernel_run_range(&kp, &tc.fu, ln->op_lo, ln->op_hi + 1, note_visit, NULL, &v, err, sizeof err), "%s", err);
    cr_expect(v.n == 1 && v.rows[0].lo == 0 && v.rows[0].hi == ln->list_n, "the whole range: every row");
    cr_expect(kernel_all_rows(&kp, ln).hi == ln->list_n && kernel_n_rows(&kp, ln) == ln->list_n);
    for (int l = 0; l < kp.n_launches; l++) {
        const KLaunch *o = &kp.launches[l];
        if (kernel_is_multi(&kp, o) || o->op_hi == o->op_lo) continue;
        v.n = 0;
        cr_expect(!kernel_run_range(&kp, &tc.fu, o->op_lo + 1, o->op_hi + 1, note_visit, NULL, &v, err, sizeof err) && strstr(err, "cut the launch"), "%s", err);
        cr_expect_eq(kernel_n_rows(&kp, o), 1);
        break;
    }
    lowered_tiny_free(&a, &tc, &kp);
}

/* Without fusion every generated launch carries out one op, and no register
 * value crosses ops. */
Test(codegen, fuse_none_launches_one_op_each) {
    Arena a;
    TrainCompiled tc = {0};
    KProgram kp;
    lower_tiny(&a, &tc, FUSE_NONE, &kp);
    for (int l = 0; l < kp.n_launches; l++) cr_expect_eq(kp.launches[l].op_lo, kp.launches[l].op_hi);
    lowered_tiny_free(&a, &tc, &kp);
}

static const char *fast_bin(void) {
    const char *b = getenv("YOLOCC_FAST_BIN");
    return b ? b : "build/yolocc";
}

static cJSON *inspect_json(const char *plan) {
    char args[600];
    snprintf(args, sizeof args, "inspect %s --json", plan);
    CliResult r = tu_run_bin(fast_bin(), args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "inspect output is not JSON");
    tu_free(&r);
    return j;
}

/* issue 5: every generated CUDA kernel of every model in models/ compiles
 * with NVRTC for sm_80 and sm_90 (cache off: real compiles), and inspect
 * lists each with both architectures, cubin and PTX sizes; so are the
 * library kernels (compiler/lib_kernels.h) the plan carries. */
Test(codegen, nvrtc_compiles_every_kernel_of_every_model) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    const char *models[][2] = {{"models/tiny.yaml", ""}, {"models/yolov3.yaml", ""}, {"models/yolov5.yaml", "--scale n"}, {"models/yolov8.yaml", "--scale n"},
                               {"models/yolo11.yaml", "--scale n"}};
    char bin[600], path[] = "/tmp/yolocc-cg-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    snprintf(bin, sizeof bin, "YOLOCC_NO_CACHE=1 %s", fast_bin());
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        char args[600];
        snprintf(args, sizeof args, "%s %s --imgsz 640 --batch 16 --precision bf16 --target cuda --arch sm_80,sm_90 -o %s", models[m][0], models[m][1], path);
        CliResult r = tu_run_bin(bin, args);
        cr_assert_eq(r.status, 0, "%s: %s", models[m][0], r.err);
        int train = 0, eval = 0, compiled = 0, cached = -1;
        const char *line = strstr(r.out, "kernels (cuda): ");
        cr_assert(line && sscanf(line, "kernels (cuda): %d training + %d validation, %d compiled, %d from the cache", &train, &eval, &compiled, &cached) == 4, "%s", r.out);
        cr_expect_eq(cached, 0);
        cr_expect_eq(compiled, 3 * (train + eval), "%s: a cubin for each architecture and PTX per kernel", models[m][0]);
        cJSON *j = inspect_json(path), *k, *lib = cJSON_GetObjectItem(j, "library_kernels");
        /* the training count holds the generated kernels and the library kernels (pooling, resize, the cast) */
        cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "kernels")) + cJSON_GetArraySize(lib), train);
        cr_expect_gt(cJSON_GetArraySize(lib), 1, "%s: library kernels are listed", models[m][0]);
        for (int list = 0; list < 2; list++) {
            const cJSON *arr = list ? lib : cJSON_GetObjectItem(j, "kernels");
            cJSON_ArrayForEach(k, arr) {
                const cJSON *archs = cJSON_GetObjectItem(k, "archs");
                cr_expect_eq(cJSON_GetArraySize(archs), 2);
                cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(archs, 0)), "sm_80");
                cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(archs, 1)), "sm_90");
                cr_expect_gt(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "cubin_bytes")), 1000);
                cr_expect_gt(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "ptx_bytes")), 100);
            }
        }
        cr_log_info("%s: %d training + %d validation kernels compiled by NVRTC for sm_80, sm_90 (+PTX)", models[m][0], train, eval);
        cJSON_Delete(j);
        tu_free(&r);
    }
    unlink(path);
}

static void set_cache_dir(char *dir) {
    cr_assert(mkdtemp(dir));
    setenv("XDG_CACHE_HOME", dir, 1);
    unsetenv("YOLOCC_NO_CACHE");
}

/* issue 5: the second identical compile comes from the cache (nothing is
 * compiled again) and writes the same plan; a corrupted entry is compiled
 * again rather than used. */
Test(codegen, second_compile_is_served_from_the_cache) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    char dir[] = "/tmp/yolocc-cache-XXXXXX", a[] = "/tmp/yolocc-cg-XXXXXX", b[] = "/tmp/yolocc-cg-XXXXXX";
    set_cache_dir(dir);
    int fa = mkstemp(a), fb = mkstemp(b);
    cr_assert(fa >= 0 && fb >= 0);
    close(fa);
    close(fb);
    int counts[3][3];
    for (int run = 0; run < 3; run++) {
        if (run == 2) {
            /* flip a byte in the middle of one cached artifact */
            char cmd[800];
            snprintf(cmd, sizeof cmd, "f=$(ls %s/yolocc | head -1) && printf 'X' | dd of=%s/yolocc/$f bs=1 seek=200 conv=notrunc 2>/dev/null", dir, dir);
            cr_assert_eq(system(cmd), 0);
        }
        char args[600];
        snprintf(args, sizeof args, "models/yolov8.yaml --scale n --imgsz 640 --batch 16 --precision bf16 --target cuda -o %s", run == 0 ? a : b);
        CliResult r = tu_run_bin(fast_bin(), args);
        cr_assert_eq(r.status, 0, "%s", r.err);
        const char *line = strstr(r.out, "kernels (cuda): ");
        int tr, ev;
        cr_assert(line && sscanf(line, "kernels (cuda): %d training + %d validation, %d compiled, %d from the cache", &tr, &ev, &counts[run][0], &counts[run][1]) == 4);
        counts[run][2] = 3 * (tr + ev);
        tu_free(&r);
    }
    cr_expect_eq(counts[0][1] + counts[0][0], counts[0][2]);
    cr_expect_eq(counts[1][0], 0, "the second compile compiled %d kernels", counts[1][0]);
    cr_expect_eq(counts[1][1], counts[1][2]);
    cr_expect_eq(counts[2][0], 1, "the corrupted entry was compiled again: %d", counts[2][0]);
    size_t la, lb;
    char *pa = tu_slurp(a, &la), *pb = tu_slurp(b, &lb);
    cr_expect(la == lb && memcmp(pa, pb, la) == 0, "cached and fresh compiles wrote different plans");
    free(pa);
    free(pb);
    unlink(a);
    unlink(b);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
    unsetenv("XDG_CACHE_HOME");
}

/* Golden generated sources: the tiny model's C unit and its CUDA kernels
 * (bf16) as yolocc --emit-src writes them must equal tests/golden/codegen.
 * After an intended change: `make golden`, then read the diff. */
static void compare_dirs(const char *golden, const char *fresh) {
    char cmd[800];
    snprintf(cmd, sizeof cmd, "diff -r %s %s >/dev/null", golden, fresh);
    cr_expect_eq(system(cmd), 0, "generated sources differ from %s (run `make golden` if the change is intended, and review the diff)", golden);
}

Test(codegen, golden_sources) {
    char dir[] = "/tmp/yolocc-golden-XXXXXX", cdir[700], udir[700], args[1600];
    cr_assert(mkdtemp(dir));
    snprintf(cdir, sizeof cdir, "%s/cpu", dir);
    snprintf(udir, sizeof udir, "%s/cuda", dir);
    snprintf(args, sizeof args, "models/tiny.yaml --imgsz 64 --batch 2 --target cpu --emit-src %s -o %s/p.plan", cdir, dir);
    CliResult r = tu_run_bin(fast_bin(), args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    compare_dirs("tests/golden/codegen/cpu", cdir);
    char why[512];
    if (nvrtc_available(why, sizeof why)) {
        snprintf(args, sizeof args, "models/tiny.yaml --imgsz 64 --batch 2 --precision bf16 --target cuda --emit-src %s -o %s/p.plan", udir, dir);
        r = tu_run_bin(fast_bin(), args);
        cr_assert_eq(r.status, 0, "%s", r.err);
        tu_free(&r);
        compare_dirs("tests/golden/codegen/cuda", udir);
    }
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_expect_eq(system(args), 0);
}

/* Bad codegen options: one clear error, exit 2, no plan. */
Test(codegen, bad_options_are_one_clear_error) {
    const char *cases[][2] = {{"--target gpu", "--target must be cpu or cuda"},
                              {"--target cuda --arch sm_1", "'sm_1' is not an architecture"},
                              {"--target cuda --arch sm_80,sm_80", "listed twice"},
                              {"--target cuda --arch ,", "expected sm_NN"},
                              {"--emit-src /proc/no/such/dir", "--emit-src: cannot create"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[600];
        unlink("/tmp/yolocc-cg-bad.plan");
        snprintf(args, sizeof args, "models/tiny.yaml --imgsz 64 %s -o /tmp/yolocc-cg-bad.plan", cases[i][0]);
        CliResult r = tu_run(args);
        cr_expect_neq(r.status, 0, "%s", cases[i][0]);
        cr_expect(strstr(r.err, cases[i][1]), "%s: stderr was: %s", cases[i][0], r.err);
        cr_expect_eq(tu_lines(r.err), 1, "%s: %s", cases[i][0], r.err);
        cr_expect_neq(access("/tmp/yolocc-cg-bad.plan", F_OK), 0, "%s left a plan", cases[i][0]);
        tu_free(&r);
    }
}

/* The finite test over gradients (what fp16 loss scaling skips a step on) is
 * the gradient-norm kernel: its fp64 sum of squares cannot overflow for fp32
 * gradients, so the norm is non-finite exactly when a gradient is. A NaN and
 * an inf planted in the accumulated gradients show in the norm the generated
 * kernel reports, as in the oracle's. */
static double norm_after_planting(Plan *p, bool generated, float value) {
    TrainStep ts;
    char err[512];
    start_step(&ts, p, generated, NULL);
    StepResult out;
    double norm = 0;
    const double lr[3] = {0.01, 0.01, 0.01};
    cr_assert(train_step_backward(&ts, &out, err, sizeof err), "%s", err);
    int n;
    const int *grads = train_step_grads(&ts, &n);
    ts.acc[n / 2][(int)shape_numel(&p->g.tensors[grads[n / 2]].shape) / 2] = value;
    cr_assert(train_step_update(&ts, lr, 0.937, NULL, &norm, err, sizeof err), "%s", err);
    train_step_free(&ts);
    return norm;
}

Test(codegen, nonfinite_gradient_shows_in_the_norm) {
    char path[22];
    Plan p;
    compile_and_read("models/tiny.yaml --imgsz 64 --batch 2 --max-boxes 8", path, &p);
    double finite = norm_after_planting(&p, true, 1.0f), nan_gen = norm_after_planting(&p, true, NAN), inf_gen = norm_after_planting(&p, true, INFINITY);
    cr_expect(isfinite(finite) && finite > 0);
    cr_expect(isnan(nan_gen), "norm %g with a NaN gradient", nan_gen);
    cr_expect(isinf(inf_gen), "norm %g with an inf gradient", inf_gen);
    cr_expect(isnan(norm_after_planting(&p, false, NAN)) && isinf(norm_after_planting(&p, false, INFINITY)), "the oracle agrees");
    plan_free(&p);
    unlink(path);
}

/* The KERNELS index parser: each malformed section is one clear error. */
static bool parse_kernels(const char *json, size_t extra_blob, char *err, int errcap) {
    size_t jl = strlen(json);
    unsigned char buf[512] = {(unsigned char)jl, (unsigned char)(jl >> 8), 0, 0};
    memcpy(buf + 4, json, jl);
    cJSON *idx = NULL;
    const unsigned char *blobs;
    size_t blobs_len;
    bool ok = codegen_parse_section(buf, 4 + jl + extra_blob, &idx, &blobs, &blobs_len, err, errcap);
    cJSON_Delete(idx);
    return ok;
}

Test(codegen, kernels_section_rejects_bad_indexes) {
    char err[256];
    cr_expect(parse_kernels("{\"target\":\"cpu\",\"kernels\":[],\"so\":{\"offset\":0,\"bytes\":8}}", 8, err, sizeof err), "%s", err);
    const char *bad[][2] = {{"{\"target\":\"cpu\",\"kernels\":[],\"so\":{\"offset\":4,\"bytes\":8}}", "outside the section"},
                            {"{\"target\":\"cpu\"}", "a target and a kernels array"},
                            {"[1,2]", "a target and a kernels array"},
                            {"{\"target\":\"cuda\",\"kernels\":[{\"name\":\"k\",\"blobs\":[{\"offset\":0,\"bytes\":99}]}]}", "outside the section"},
                            {"{\"target\":\"cuda\",\"kernels\":[{\"blobs\":[]}]}", "without a name"},
                            {"{\"target\":\"cuda\",\"kernels\":[],\"library\":{}}", "not an array"},
                            {"{\"target\":\"cuda\",\"kernels\":[],\"library\":[{\"blobs\":[]}]}", "without a name"},
                            {"{\"target\":\"cuda\",\"kernels\":[],\"library\":[{\"name\":\"l\",\"blobs\":[{\"offset\":4,\"bytes\":8}]}]}", "outside the section"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        cr_expect_not(parse_kernels(bad[i][0], 8, err, sizeof err), "%s was accepted", bad[i][0]);
        cr_expect(strstr(err, bad[i][1]), "%s: %s", bad[i][0], err);
    }
    unsigned char shortbuf[3] = {0}, longlen[8] = {200, 0, 0, 0, '{', '}', 0, 0};
    cJSON *idx = NULL;
    const unsigned char *blobs;
    size_t blobs_len;
    cr_expect_not(codegen_parse_section(shortbuf, sizeof shortbuf, &idx, &blobs, &blobs_len, err, sizeof err));
    cr_expect(strstr(err, "shorter than its 4-byte index length"), "%s", err);
    cr_expect_not(codegen_parse_section(longlen, sizeof longlen, &idx, &blobs, &blobs_len, err, sizeof err));
    cr_expect(strstr(err, "runs past the section"), "%s", err);
}

/* One update with parameters frozen in the middle and at the start of the
 * multi-tensor launches (a rows' range each side of them), generated kernels
 * against the oracle's op-by-op update with the same ones frozen: frozen
 * parameters and their momentum keep every bit (the initial weights, zero),
 * every other parameter and momentum agrees to 1e-5. Returns a copy of each
 * parameter and optimizer-state tensor (NULL for the others). */
static bool updated_kind(const Tensor *t) { return t->kind == TK_PARAM || t->kind == TK_OPTIM; }

static float **update_with_frozen(Plan *p, bool generated, const bool *skip) {
    TrainStep ts;
    char err[512];
    start_step(&ts, p, generated, NULL);
    StepResult out;
    double norm;
    const double lr[3] = {0.01, 0.02, 0.03};
    cr_assert(train_step_backward(&ts, &out, err, sizeof err), "%s", err);
    cr_assert(train_step_update(&ts, lr, 0.937, skip, &norm, err, sizeof err), "%s", err);
    const Graph *g = &p->g;
    float **copy = calloc((size_t)g->n_tensors, sizeof *copy);
    cr_assert_not_null(copy);
    for (int t = 0; t < g->n_tensors; t++) {
        if (!updated_kind(&g->tensors[t])) continue;
        size_t bytes = (size_t)shape_numel(&g->tensors[t].shape) * sizeof(float);
        cr_assert_not_null(copy[t] = malloc(bytes));
        memcpy(copy[t], ts.it.buf[t], bytes);
    }
    train_step_free(&ts);
    return copy;
}

Test(codegen, frozen_parameters_cut_the_multi_tensor_updates) {
    char path[22], err[512];
    Plan p;
    compile_and_read("models/tiny.yaml --imgsz 64 --batch 2 --max-boxes 8", path, &p);
    const Graph *g = &p.g;
    GenCpu gc;
    cr_assert(gen_cpu_open(&gc, &p, err, sizeof err), "%s", err);
    bool *skip = calloc((size_t)g->n_tensors, sizeof *skip);
    int cut = 0, frozen = 0, moved = 0;
    for (int l = 0; l < gc.kp.n_launches; l++) {
        const KLaunch *ln = &gc.kp.launches[l];
        if (!kernel_is_multi(&gc.kp, ln) || ln->list_n < 3) continue;
        skip[g->ops[ln->op_lo + ln->list_n / 2].in[0]] = true;
        if (cut++ == 0) skip[g->ops[ln->op_lo].in[0]] = true;
    }
    gen_cpu_close(&gc);
    cr_assert_geq(cut, 2, "the tiny plan's updates run as multi-tensor launches of 3 rows or more");
    float **gen = update_with_frozen(&p, true, skip), **ref = update_with_frozen(&p, false, skip);
    /* the initial weights, which the frozen ones must still hold */
    void **buf = calloc((size_t)g->n_tensors, sizeof *buf);
    cr_assert_not_null(buf);
    for (int i = 0; i < g->n_state; i++) cr_assert_not_null(buf[g->state[i]] = calloc((size_t)shape_numel(&g->tensors[g->state[i]].shape), 8));
    cr_assert(weights_init(&p.g, buf, 7, err, sizeof err), "%s", err);
    double worst = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        const Tensor *x = &g->tensors[t];
        if (!updated_kind(x)) continue;
        int64_t len = shape_numel(&x->shape);
        /* a frozen parameter (its initial weights), or the momentum buffer of one (zero) */
        int of = skip[t] ? t : -1;
        for (int j = 0; j < g->n_tensors && of < 0 && x->kind == TK_OPTIM; j++) {
            char name[320];
            snprintf(name, sizeof name, "optim.momentum_buffer.%s", g->tensors[j].name);
            if (skip[j] && strcmp(x->name, name) == 0) of = j;
        }
        if (of >= 0) {
            frozen++;
            for (int64_t e = 0; e < len; e++) {
                float want = of == t ? ((const float *)buf[t])[e] : 0.0f;
                cr_expect(memcmp(&gen[t][e], &want, 4) == 0 && memcmp(&ref[t][e], &want, 4) == 0, "%s element %lld moved", x->name, (long long)e);
            }
            continue;
        }
        moved += x->kind == TK_PARAM && x->frozen == false && buf[t] && memcmp(gen[t], buf[t], sizeof(float) * (size_t)len) != 0;
        double d = worst_diff(gen[t], ref[t], len);
        if (d > worst) worst = d;
    }
    cr_log_info("%d multi-tensor launches cut, %d frozen tensors (parameters and momentum) held, %d parameters updated; worst relative difference %.3g", cut,
                frozen, moved, worst);
    cr_expect_eq(frozen, 2 * (cut + 1), "each frozen parameter and its momentum buffer held");
    cr_expect_gt(moved, 10, "the other parameters were updated");
    cr_expect_leq(worst, 1e-5);
    for (int t = 0; t < g->n_tensors; t++) free(gen[t]), free(ref[t]), free(buf[t]);
    free(gen), free(ref), free(buf), free(skip);
    plan_free(&p);
    unlink(path);
}
