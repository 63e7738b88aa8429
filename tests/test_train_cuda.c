/* tests/test_train_cuda.c — TrainStep and `yolort train` on a CUDA plan (GPU
 * suite, in `make check-gpu`): gradient accumulation, frozen layers and the
 * host/device state hand-over against the CPU TrainStep, and a whole
 * training run with validation on the device. Without a device every test
 * prints `SKIP: no CUDA device`. */
#include "../runtime/cuda/cuda_step.h"
#include "../runtime/dist/dp_train.h"
#include "../runtime/synthetic.h"
#include "../runtime/train/report.h"
#include "../runtime/train_step.h"
#include "../runtime/weights.h"
#include "test_gpu.h"
#include "test_predict.h"

static int64_t n_of(const Graph *g, int t) { return shape_numel(&g->tensors[t].shape); }

static void check_items(const StepResult *gpu, const StepResult *cpu, const char *when) {
    const double g[4] = {gpu->total, gpu->box, gpu->cls, gpu->dfl}, c[4] = {cpu->total, cpu->box, cpu->cls, cpu->dfl};
    for (int i = 0; i < 4; i++) cr_expect_leq(rel_diff(g[i], c[i]), 1e-4, "%s item %d: GPU %.9g CPU %.9g", when, i, g[i], c[i]);
}

/* Worst relative difference of every tensor of `kind` between the two steps' host copies. */
static double worst_state(const TrainStep *gpu, const TrainStep *cpu, TensorKind kind, int *n_tensors, const char **where) {
    const Graph *g = &cpu->plan->g;
    double worst = 0;
    *n_tensors = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].kind != kind || g->tensors[t].dtype != DT_F32) continue;
        const float *a = gpu->it.buf[t], *b = cpu->it.buf[t];
        int64_t n = shape_numel(&g->tensors[t].shape);
        /* momentum buffers are sums of gradients, whose small entries are differences of large
         * partial sums that cuDNN and the CPU add in different orders: those compare against the
         * tensor's largest entry, as gradients do (tests/test_cuda_loss.c); values elementwise */
        double largest = 1e-3;
        if (kind == TK_OPTIM)
            for (int64_t e = 0; e < n; e++) largest = fmax(largest, fabs((double)b[e]));
        for (int64_t e = 0; e < n; e++) {
            double d = fabs((double)a[e] - b[e]) / (kind == TK_OPTIM ? largest : fmax(fabs((double)b[e]), 1e-3));
            if (d > worst) worst = d, *where = g->tensors[t].name;
        }
        (*n_tensors)++;
    }
    return worst;
}

/* Two batches accumulated with the first layer frozen, then one batch alone:
 * the CUDA plan through TrainStep (host accumulation, then the device's own
 * gradients) against the CPU plan, from the same weights. fp32: tolerances
 * as cuda_step's tiny_step_matches_the_cpu_fp32. */
Test(train_cuda, accumulation_freezing_and_state_match_the_cpu) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    char err[2048];
    Plan pc, pg;
    tiny_plan("--imgsz 64 --batch 2 --precision fp32 --target cpu", &pc);
    tiny_plan("--imgsz 64 --batch 2 --precision fp32 --target cuda --arch sm_80,sm_90", &pg);
    TrainStep cpu, gpu;
    cr_assert(train_step_init(&cpu, &pc, err, sizeof err), "%s", err);
    cr_assert(train_step_init(&gpu, &pg, err, sizeof err), "%s", err);
    cr_assert(gpu.cuda != NULL && cpu.cuda == NULL);
    train_step_set_fast(&cpu, true);
    cr_assert(weights_init(&pc.g, cpu.it.buf, 11, err, sizeof err), "%s", err);
    cr_assert(weights_init(&pg.g, gpu.it.buf, 11, err, sizeof err), "%s", err);
    train_step_host_changed(&gpu);

    /* the first parameter of layer 0 is frozen */
    bool *skip = calloc((size_t)pc.g.n_tensors, sizeof *skip);
    int frozen = -1;
    for (int t = 0; t < pc.g.n_tensors && frozen < 0; t++)
        if (pc.g.tensors[t].kind == TK_PARAM && strncmp(pc.g.tensors[t].name, "model.0.", 8) == 0) frozen = t;
    cr_assert_geq(frozen, 0);
    skip[frozen] = true;
    int64_t nf = shape_numel(&pc.g.tensors[frozen].shape);
    float *before = malloc(sizeof(float) * (size_t)nf);
    memcpy(before, gpu.it.buf[frozen], sizeof(float) * (size_t)nf);

    const double lr[3] = {0.01, 0.01, 0.02}, momentum = 0.9;
    const uint64_t seeds[] = {7, 8, 9};
    const int batches_per_update[] = {2, 1};
    int b = 0;
    for (int u = 0; u < 2; u++) {
        for (int k = 0; k < batches_per_update[u]; k++, b++) {
            TrainStep *both[] = {&cpu, &gpu};
            for (int i = 0; i < 2; i++)
                synthetic_batch(seeds[b], both[i]->batch, both[i]->imgsz, both[i]->nc, both[i]->max_boxes, train_step_images(both[i]), train_step_boxes(both[i]),
                                train_step_counts(both[i]));
            StepResult rc, rg;
            cr_assert(train_step_backward(&cpu, &rc, err, sizeof err), "CPU batch %d: %s", b, err);
            cr_assert(train_step_backward(&gpu, &rg, err, sizeof err), "GPU batch %d: %s", b, err);
            char when[64];
            snprintf(when, sizeof when, "batch %d", b);
            check_items(&rg, &rc, when);
        }
        double nc, ng;
        const bool *sk = u == 0 ? skip : NULL;
        cr_assert(train_step_update(&cpu, lr, momentum, sk, &nc, err, sizeof err), "CPU update %d: %s", u, err);
        cr_assert(train_step_update(&gpu, lr, momentum, sk, &ng, err, sizeof err), "GPU update %d: %s", u, err);
        cr_expect_leq(rel_diff(ng, nc), 1e-4, "update %d: gradient norm GPU %.9g CPU %.9g", u, ng, nc);
        cr_expect_eq(gpu.step, cpu.step, "optimizer steps counted alike");
        if (u == 0) {
            cr_assert(gpu.host_stale, "the device moved the state");
            cr_assert(train_step_sync_host(&gpu, false, err, sizeof err), "%s", err);
            cr_expect(memcmp(before, gpu.it.buf[frozen], sizeof(float) * (size_t)nf) == 0, "the frozen parameter %s moved on the GPU", pc.g.tensors[frozen].name);
        }
    }
    cr_assert(train_step_sync_host(&gpu, true, err, sizeof err), "%s", err);
    cr_expect(!gpu.host_stale && !gpu.optim_stale);
    const TensorKind kinds[] = {TK_PARAM, TK_BUFFER, TK_OPTIM};
    const char *names[] = {"parameters", "buffers", "optimizer state"};
    for (int i = 0; i < 3; i++) {
        int n;
        const char *at = "-";
        double w = worst_state(&gpu, &cpu, kinds[i], &n, &at);
        cr_log_info("%d %s: worst difference %.3g (%s)", n, names[i], w, at);
        cr_expect_leq(w, 1e-4, "%s differ by %.3g (%s)", names[i], w, at);
        if (kinds[i] != TK_BUFFER) cr_expect_gt(n, 0);
    }
    /* the EMA on the device follows the device's parameters with the host's arithmetic, bit for bit */
    cr_assert(cuda_step_ema_open(gpu.cuda, err, sizeof err), "%s", err);
    void **ema = calloc((size_t)pg.g.n_tensors, sizeof *ema), **back = calloc((size_t)pg.g.n_tensors, sizeof *back);
    int followed = 0;
    for (int t = 0; t < pg.g.n_tensors; t++) {
        const Tensor *x = &pg.g.tensors[t];
        if ((x->kind != TK_PARAM && x->kind != TK_BUFFER) || x->dtype != DT_F32) continue;
        int64_t n = shape_numel(&x->shape);
        ema[t] = malloc(sizeof(float) * (size_t)n), back[t] = malloc(sizeof(float) * (size_t)n);
        for (int64_t e = 0; e < n; e++) ((float *)ema[t])[e] = 0.5f * ((const float *)gpu.it.buf[t])[e] + 0.25f;
        followed++;
    }
    cr_assert(cuda_step_ema_upload(gpu.cuda, ema, err, sizeof err), "%s", err);
    const float d = 0.75f, e = 0.25f;
    cr_assert(cuda_step_ema_update(gpu.cuda, d, e, err, sizeof err), "%s", err);
    cr_assert(cuda_step_ema_download(gpu.cuda, back, err, sizeof err), "%s", err);
    int differ = 0;
    for (int t = 0; t < pg.g.n_tensors; t++) {
        if (!ema[t]) continue;
        float *v = ema[t];
        const float *m = gpu.it.buf[t];
        for (int64_t k = 0, n = shape_numel(&pg.g.tensors[t].shape); k < n; k++) {
            v[k] *= d;
            v[k] += e * m[k];
        }
        differ += memcmp(ema[t], back[t], sizeof(float) * (size_t)n_of(&pg.g, t)) != 0;
        free(ema[t]), free(back[t]);
    }
    free(ema), free(back);
    cr_expect_gt(followed, 0);
    cr_expect_eq(differ, 0, "%d of %d tensors' EMA differ from the host's update", differ, followed);
    free(before);
    free(skip);
    train_step_free(&gpu);
    train_step_free(&cpu);
    plan_free(&pc);
    plan_free(&pg);
    cuda_device_close(&probe);
}

static const char *yolort_bin(void) {
    const char *b = getenv("YOLORT_BIN");
    return b ? b : "build/yolort";
}

/* The tiny CUDA plan (bf16) as a TrainStep from seed-11 weights, synthetic
 * batch 7 bound; the test skips without a device. */
static void tiny_cuda_step(Plan *p, TrainStep *ts) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    cuda_device_close(&probe);
    char err[2048];
    tiny_plan("--imgsz 64 --batch 2 --target cuda --arch sm_80,sm_90", p);
    cr_assert(train_step_init(ts, p, err, sizeof err), "%s", err);
    cr_assert(ts->cuda != NULL);
    cr_assert(weights_init(&p->g, ts->it.buf, 11, err, sizeof err), "%s", err);
    train_step_host_changed(ts);
    synthetic_batch(7, ts->batch, ts->imgsz, ts->nc, ts->max_boxes, train_step_images(ts), train_step_boxes(ts), train_step_counts(ts));
}

/* Every gradient of ts's device, downloaded (one host buffer per gradient). */
typedef struct Grads {
    float **g;
    int n;
} Grads;

static Grads grads_now(TrainStep *ts) {
    char err[1024];
    Grads r = {NULL, 0};
    const int *ids = train_step_grads(ts, &r.n);
    r.g = calloc((size_t)r.n, sizeof *r.g);
    for (int i = 0; i < r.n; i++) r.g[i] = malloc(sizeof(float) * (size_t)n_of(&ts->plan->g, ids[i]));
    cr_assert(cuda_step_download_many(ts->cuda, r.n, ids, (void *const *)r.g, err, sizeof err), "%s", err);
    return r;
}

static void grads_free(Grads *g) {
    for (int i = 0; i < g->n; i++) free(g->g[i]);
    free(g->g);
}

/* How many of ts's gradients differ in any bit between a and the device's now. */
static int grads_differ_now(TrainStep *ts, const Grads *a) {
    Grads b = grads_now(ts);
    int n, differ = 0;
    const int *ids = train_step_grads(ts, &n);
    for (int i = 0; i < n; i++) differ += memcmp(a->g[i], b.g[i], sizeof(float) * (size_t)n_of(&ts->plan->g, ids[i])) != 0;
    grads_free(&b);
    return differ;
}

static bool same_items(const StepResult *a, const StepResult *b) { return a->total == b->total && a->box == b->box && a->cls == b->cls && a->dfl == b->dfl; }

/* Data parallelism's backward hook (dp_cuda.c) on a real one-rank NCCL
 * communicator: each gradient bucket's ncclAllReduce on the side stream
 * between the backward's CUDA graphs (cut at the buckets' ready points), main
 * joined to them before the clip, the watchdog watching them. Over one rank a
 * sum is the gradient itself, so the items and every gradient equal the
 * backward without the hook bit for bit: the same weights and batch, twice
 * (captured, then replayed). */
Test(train_cuda, one_rank_overlapped_all_reduce_leaves_the_gradients) {
    char err[2048];
    Plan p;
    TrainStep ts;
    tiny_cuda_step(&p, &ts);
    StepResult r0, r;
    cr_assert(train_step_backward(&ts, &r0, err, sizeof err), "%s", err);
    Grads want = grads_now(&ts);

    int n;
    const int *grads = train_step_grads(&ts, &n);
    DataParallel dp;
    memset(&dp, 0, sizeof dp);
    dp.comm.ranks = (Ranks){.source = RANKS_SINGLE, .rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    cr_assert(bucket_layout_from_graph(&p.g, grads, n, 64 * 1024, &dp.layout, err, sizeof err), "%s", err);
    if (!(dp.nccl_libs_open = cuda_libs_open(&dp.nccl_libs, NULL, true, err, sizeof err))) {
        printf("SKIP: no NCCL\n");
        fflush(stdout);
        cr_skip_test("%s", err);
    }
    NcclUniqueId id;
    NcclComm comm = NULL;
    cr_assert_eq(dp.nccl_libs.ncclGetUniqueId(&id), 0);
    cr_assert_eq(dp.nccl_libs.ncclCommInitRank(&comm, 1, id, 0), 0);
    cr_assert(dist_nccl_adopt(&dp.nccl, &dp.nccl_libs, &dp.comm.ranks, comm, dp.layout.n_buckets, 30, err, sizeof err), "%s", err);
    dp.nccl_open = true;
    cr_assert(dp_cuda_hook(&dp, ts.cuda, grads, n, err, sizeof err), "%s", err);
    ts.backward_hook = dp.hook;
    int graphs0 = ts.cuda->n_graphs;
    for (int k = 0; k < 2; k++) {
        cr_assert(train_step_backward(&ts, &r, err, sizeof err), "hooked backward %d: %s", k, err);
        cr_expect(same_items(&r, &r0), "backward %d: the loss %.9g, without the hook %.9g", k, r.total, r0.total);
        int differ = grads_differ_now(&ts, &want);
        cr_expect_eq(differ, 0, "backward %d: %d of %d gradients changed by a one-rank sum", k, differ, n);
    }
    if (ts.cuda->use_graphs) cr_expect_gt(ts.cuda->n_graphs - graphs0, 1, "the hooked backward runs as several graphs, cut at %d buckets' ready points", dp.layout.n_buckets);
    cr_log_info("%d buckets, %d graphs for the hooked backward", dp.layout.n_buckets, ts.cuda->n_graphs - graphs0);
    ts.backward_hook = NULL;
    dp_detach(&dp);
    bucket_layout_free(&dp.layout);
    grads_free(&want);
    train_step_free(&ts);
    plan_free(&p);
}

/* A batch's pixels as bytes (train_step_use_bytes, what `yolort train` uploads
 * for CUDA plans from the loader's pinned slots), divided by 255 on the
 * device, give the loss and every gradient bit for bit as the loader's
 * value / 255 uploaded as floats. */
Test(train_cuda, bytes_upload_equals_the_float_upload) {
    char err[2048];
    Plan p;
    TrainStep ts;
    tiny_cuda_step(&p, &ts);
    int64_t npx = n_of(&p.g, ts.images);
    uint8_t *px = NULL; /* whole pages, as the loader's slots: pinning works page by page */
    cr_assert_eq(posix_memalign((void **)&px, 4096, ((size_t)npx + 4095) / 4096 * 4096), 0);
    float *images = train_step_images(&ts);
    for (int64_t i = 0; i < npx; i++) px[i] = (uint8_t)(images[i] * 255.0f + 0.5f), images[i] = (float)px[i] / 255.0f;
    StepResult r0, r;
    cr_assert(train_step_backward(&ts, &r0, err, sizeof err), "%s", err);
    Grads want = grads_now(&ts);
    cr_assert(train_step_takes_bytes(&ts, err, sizeof err), "%s", err);
    cr_assert(cuda_step_pin(ts.cuda, px, (size_t)npx, err, sizeof err), "%s", err);
    train_step_use_bytes(&ts, px);
    cr_assert(train_step_backward(&ts, &r, err, sizeof err), "%s", err);
    cr_expect(same_items(&r, &r0), "loss from bytes %.9g, from floats %.9g", r.total, r0.total);
    int differ = grads_differ_now(&ts, &want);
    cr_expect_eq(differ, 0, "%d of %d gradients differ", differ, want.n);
    grads_free(&want);
    train_step_free(&ts); /* unpins px */
    free(px);
    plan_free(&p);
}

/* A target row the host loss refuses (a class id beyond nc, a non-finite
 * box) stops a CUDA backward with the host's message naming the row, before
 * the device loss could turn it into NaN. */
Test(train_cuda, bad_target_row_is_named_before_the_device_loss) {
    char err[2048];
    Plan p;
    TrainStep ts;
    tiny_cuda_step(&p, &ts);
    float *row = train_step_boxes(&ts) + (size_t)ts.max_boxes * 5; /* image 1, box 0 */
    if (train_step_counts(&ts)[1] < 1) train_step_counts(&ts)[1] = 1, row[1] = row[2] = 0.5f, row[3] = row[4] = 0.25f;
    row[0] = (float)ts.nc;
    StepResult r;
    cr_expect(!train_step_backward(&ts, &r, err, sizeof err), "a class id of nc is refused");
    char want[128];
    snprintf(want, sizeof want, "image 1 box 0: class id %d outside 0..%d", ts.nc, ts.nc - 1);
    cr_expect(strstr(err, "the batch's targets") && strstr(err, want), "%s", err);
    row[0] = 0, row[3] = NAN;
    cr_expect(!train_step_backward(&ts, &r, err, sizeof err) && strstr(err, "image 1 box 0: field 3 is not finite"), "%s", err);
    row[3] = 0.25f;
    cr_expect(train_step_backward(&ts, &r, err, sizeof err) && isfinite(r.total), "%s", err);
    train_step_free(&ts);
    plan_free(&p);
}

/* `yolort train` on a bf16 CUDA plan, validation on the device: two epochs
 * finish, results.csv has their rows with finite losses, the console names
 * the device and its memory, and the run can be resumed from its state. */
Test(train_cuda, yolort_train_runs_on_the_gpu) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    cuda_device_close(&probe);
    char dir[] = "/tmp/yolocc-tcuda-XXXXXX", args[2048];
    cr_assert(mkdtemp(dir));
    /* the shapes of cuda_step's step_vs_cpu, so the kernel cache serves both */
    tu_tiny_data_and_plan(dir, "--images 12 --size 64 --classes 3 --seed 5", "--imgsz 64 --batch 2 --precision bf16 --target cuda --arch sm_80,sm_90", "tiny.plan");
    snprintf(args, sizeof args, "train %s/tiny.plan --data %s/data/data.yaml --project %s/runs --name gpu --exist-ok --workers 2 --epochs 3 --stop-after 2", dir, dir,
             dir);
    CliResult r = tu_run_bin(yolort_bin(), args);
    cr_assert_eq(r.status, 0, "yolort %s\nstdout:\n%s\nstderr:\n%s", args, r.out, r.err);
    cr_expect(strstr(r.out, "CUDA:0 ("), "the device is named:\n%s", r.out);
    cr_expect(strstr(r.out, "GPU_mem"), "the progress bar shows device memory:\n%s", r.out);
    /* 64 px images validate in rect batches of at least 96x96 (half a stride of padding): graphs of their own, counted before step 0 */
    cr_expect(strstr(r.out, "other rect shape") && strstr(r.out, "checked against free memory before step 0"), "rect validation shapes in the device line:\n%s", r.out);
    tu_free(&r);
    ResultsTable t;
    char p[600], err[512];
    snprintf(p, sizeof p, "%s/runs/gpu/results.csv", dir);
    cr_assert(results_csv_read(p, &t, err, sizeof err), "%s", err);
    cr_expect_eq(t.n, 2);
    for (int i = 0; i < t.n; i++)
        for (int c = 2; c <= 4; c++) cr_expect(isfinite(t.rows[i].v[c]) && t.rows[i].v[c] > 0, "row %d column %d: %g", i, c, t.rows[i].v[c]);
    results_table_free(&t);
    snprintf(args, sizeof args, "train %s/tiny.plan --resume %s/runs/gpu", dir, dir);
    r = tu_run_bin(yolort_bin(), args);
    cr_assert_eq(r.status, 0, "resume: %s", r.err);
    tu_free(&r);
    cr_assert(results_csv_read(p, &t, err, sizeof err), "%s", err);
    cr_expect_eq(t.n, 3, "the resumed run added the last epoch");
    results_table_free(&t);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_expect_eq(system(args), 0);
}

/* GPU suite: an fp32 CUDA plan's validation graph on the device (cuDNN
 * convolutions, generated kernels, the box decode), at the square size and
 * at rect shapes, gives the same label files as Ultralytics', within 1e-5 (cuDNN's engines sum in another order
 * than the CPU; fp32 throughout). */
Test(train_cuda, predict_with_an_fp32_cuda_plan_labels_equal_ultralytics_predictor, .timeout = 600) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    cuda_device_close(&probe);
    /* as on the CPU: batch 1, and rect letterboxes (at 128 px three shapes, each a graph of its own on the device) */
    check_against_ultralytics_on("v8tiny", "conf0.25", "--conf 0.25", "--precision fp32 --target cuda --arch sm_80,sm_90", 1e-5, false, &SQUARE64);
    check_against_ultralytics_on("v10tiny", "conf0.25", "--conf 0.25", "--precision fp32 --target cuda --arch sm_80,sm_90", 1e-5, false, &SQUARE64);
    const PredictShapes rect128 = {{"96x128", "128x96", "96x128"}, "(1, 3, 96, 128)"};
    check_against_ultralytics_on("v8tiny", "rect128", "--conf 0.25", "--imgsz 128 --precision fp32 --target cuda --arch sm_80,sm_90", 1e-5, false, &rect128);
    check_against_ultralytics_on("v10tiny", "rect128", "--conf 0.25", "--imgsz 128 --precision fp32 --target cuda --arch sm_80,sm_90", 1e-5, false, &rect128);
}

/* GPU suite: `yolort val` with an fp32 CUDA plan runs Ultralytics' rect
 * batches as the CPU does (96x160, 160x160, 160x128 on tests/parity/val_rect,
 * each shape's graph on the device beside the plan's own): predictions.json
 * equals Ultralytics' DetectionValidator's entry for entry, boxes within
 * 0.002 px and scores within 2e-5 (cuDNN's engines sum in another order than
 * the CPU; fp32 throughout), and the "all" row prints the same numbers. */
Test(train_cuda, val_with_an_fp32_cuda_plan_runs_rect_batches_as_ultralytics_validator, .timeout = 600) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    cuda_device_close(&probe);
    check_val_rect_on("v8tiny", "--imgsz 128 --precision fp32 --target cuda --arch sm_80,sm_90", 0.002, 2e-5);
    check_val_rect_on("v10tiny", "--imgsz 128 --precision fp32 --target cuda --arch sm_80,sm_90", 0.002, 2e-5);
}

/* GPU suite: the trainer's validation on the device runs the same rect
 * batches (each shape's graph opened at set-up): its final evaluation of
 * best.safetensors prints `yolort val`'s table of that file on the device,
 * digit for digit, and not --no-rect's. */
Test(train_cuda, the_trainers_rect_validation_on_the_gpu_equals_yolort_val, .timeout = 600) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    cuda_device_close(&probe);
    check_trainer_rect_on("--imgsz 128 --precision fp32 --target cuda --arch sm_80,sm_90");
}
