/* tests/test_cuda_step_gpu.c — CudaStep's training step on a GPU: a fp16 step
 * with an injected inf is skipped (scale halved, parameters unchanged),
 * CUDA-graph replay equals eager launch bit for bit, and the validation step
 * runs in the training step's arena and workspace, cuDNN's engines are timed once and
 * then read from the tuning cache, and the validation graph at rect shapes equals the CPU's
 * (runtime/predict/eval_shape_cuda.c). `SKIP: no CUDA device`
 * without one; the same logic on a host-memory stand-in is test_cuda_step2.c's. */
#include <math.h>

#include "../runtime/cuda/cuda_detloss.h"
#include "../runtime/cuda/cuda_step.h"
#include "../runtime/predict/eval_shape.h"
#include "../runtime/predict/eval_shape_cuda.h"
#include "../runtime/synthetic.h"
#include "../runtime/weights.h"
#include "test_gpu.h"

/* The tiny model's state (parameters, buffers, optimizer state) as the CPU
 * would start it, and one synthetic batch. */
typedef struct Start {
    void **state;
    float *images, *boxes;
    int64_t *counts;
    int t_images, t_boxes, t_counts;
} Start;

static void start_make(const Plan *p, Start *s) {
    char err[512];
    const Graph *g = &p->g;
    s->state = calloc((size_t)g->n_tensors, sizeof *s->state);
    for (int t = 0; t < g->n_tensors; t++) {
        TensorKind k = g->tensors[t].kind;
        if (k == TK_PARAM || k == TK_BUFFER || k == TK_OPTIM) s->state[t] = calloc((size_t)shape_numel(&g->tensors[t].shape) + 1, 8);
    }
    cr_assert(weights_init(g, s->state, 20250101, err, sizeof err), "%s", err);
    s->t_images = plan_meta_tensor(p, "inputs", "images"), s->t_boxes = plan_meta_tensor(p, "inputs", "boxes"), s->t_counts = plan_meta_tensor(p, "inputs", "counts");
    const Shape *img = &g->tensors[s->t_images].shape, *bx = &g->tensors[s->t_boxes].shape;
    s->images = malloc(sizeof(float) * (size_t)shape_numel(img));
    s->boxes = malloc(sizeof(float) * (size_t)shape_numel(bx));
    s->counts = malloc(sizeof(int64_t) * (size_t)img->d[0]);
    const cJSON *nc = cJSON_GetObjectItemCaseSensitive(p->meta, "nc");
    synthetic_batch(7, (int)img->d[0], (int)img->d[2], (int)nc->valuedouble, (int)bx->d[1], s->images, s->boxes, s->counts);
}

static void start_free(const Plan *p, Start *s) {
    for (int t = 0; t < p->g.n_tensors; t++) free(s->state[t]);
    free(s->state), free(s->images), free(s->boxes), free(s->counts);
}

static void start_upload(CudaStep *cs, const Start *s) {
    char err[2048];
    cr_assert(cuda_step_upload_state(cs, s->state, err, sizeof err), "%s", err);
    cr_assert(cuda_step_set_input(cs, s->t_images, s->images, err, sizeof err), "%s", err);
    cr_assert(cuda_step_set_input(cs, s->t_boxes, s->boxes, err, sizeof err), "%s", err);
    cr_assert(cuda_step_set_input(cs, s->t_counts, s->counts, err, sizeof err), "%s", err);
}

/* Every tensor of the given kinds, downloaded as fp32 into one buffer in tensor order. */
static float *snapshot(CudaStep *cs, bool params, bool optim, int64_t *n_out) {
    const Graph *g = &cs->plan->g;
    char err[2048];
    int64_t n = 0;
    for (int t = 0; t < g->n_tensors; t++)
        if ((params && g->tensors[t].kind == TK_PARAM) || (optim && g->tensors[t].kind == TK_OPTIM)) n += shape_numel(&g->tensors[t].shape);
    float *v = malloc(sizeof(float) * (size_t)n + 1), *at = v;
    for (int t = 0; t < g->n_tensors; t++)
        if ((params && g->tensors[t].kind == TK_PARAM) || (optim && g->tensors[t].kind == TK_OPTIM)) {
            cr_assert(cuda_step_download(cs, t, at, err, sizeof err), "%s", err);
            at += shape_numel(&g->tensors[t].shape);
        }
    *n_out = n;
    return v;
}

/* The tiny plan's CUDA step at `precision`, opened on the GPU (or the test
 * skipped) with its start uploaded. */
static void tiny_step_open(CudaDevice *probe, const char *precision, Plan *p, Start *s, CudaStep *cs) {
    open_gpu_or_skip(probe);
    char extra[160], err[2048];
    snprintf(extra, sizeof extra, "--imgsz 64 --batch 2 --precision %s --target cuda --arch sm_80,sm_90", precision);
    tiny_plan(extra, p);
    start_make(p, s);
    cr_assert(cuda_step_open(cs, p, 0, err, sizeof err), "%s", err);
    start_upload(cs, s);
}

/* fp16: steps from 65536 until one is applied (an early overflow is a skip
 * that halves the scale, as GradScaler's first steps often are), then a batch
 * with an inf pixel: every gradient goes non-finite, the step is skipped, the
 * scale halves, and parameters and optimizer state are bit for bit what they
 * were before it. */
Test(cuda_step, fp16_step_with_an_inf_is_skipped) {
    CudaDevice probe;
    char err[2048];
    Plan p;
    Start s;
    CudaStep cs;
    tiny_step_open(&probe, "fp16", &p, &s, &cs);
    const float lr[3] = {0.01f, 0.01f, 0.01f};
    CudaStepOutcome out = {0};
    int step = 0;
    for (; step < 20; step++) {
        float before = cs.ls.scale;
        cr_assert(cuda_step_train(&cs, lr, 0.9f, (float)(step + 1), &out, err, sizeof err), "step %d: %s", step, err);
        cr_log_info("step %d: loss %g, scale %g -> %g, norm %g, %s", step, out.loss, out.loss_scale, out.next_scale, out.grad_norm, out.skipped ? "skipped" : "applied");
        cr_expect_eq(out.loss_scale, before);
        cr_expect_eq(out.next_scale, out.skipped ? before / 2 : before);
        cr_expect(isfinite(out.loss), "the loss of a clean batch is finite");
        if (!out.skipped) break;
    }
    cr_assert(!out.skipped, "no step applied in 20 from scale 65536");
    cr_expect(isfinite(out.grad_norm) && out.grad_norm > 0);
    float scale = cs.ls.scale;
    int64_t n_state, n_after;
    float *before = snapshot(&cs, true, true, &n_state);
    long refreshes = cs.copy_refreshes;
    /* an inf pixel */
    const Shape *img = &p.g.tensors[s.t_images].shape;
    float *bad = malloc(sizeof(float) * (size_t)shape_numel(img));
    memcpy(bad, s.images, sizeof(float) * (size_t)shape_numel(img));
    bad[shape_numel(img) / 3] = INFINITY;
    cr_assert(cuda_step_set_input(&cs, s.t_images, bad, err, sizeof err), "%s", err);
    cr_assert(cuda_step_train(&cs, lr, 0.9f, (float)(step + 2), &out, err, sizeof err), "%s", err);
    cr_log_info("inf step: loss %g, scale %g -> %g, norm %g", out.loss, out.loss_scale, out.next_scale, out.grad_norm);
    cr_expect(out.skipped, "a non-finite gradient skips the step");
    cr_expect(!isfinite(out.grad_norm));
    cr_expect_eq(out.loss_scale, scale);
    cr_expect_eq(out.next_scale, scale / 2, "the scale halves");
    cr_expect_eq(cs.ls.skipped, step + 1, "the early skips and this one");
    float *after = snapshot(&cs, true, true, &n_after);
    cr_assert_eq(n_after, n_state);
    int64_t differ = 0;
    for (int64_t i = 0; i < n_state; i++) differ += memcmp(&before[i], &after[i], 4) != 0;
    cr_expect_eq(differ, 0, "%lld of %lld parameter and optimizer-state values changed in a skipped step", (long long)differ, (long long)n_state);
    cr_expect_eq(cs.copy_refreshes, refreshes, "no compute copy refreshed");
    free(before), free(after), free(bad);
    cuda_step_close(&cs);
    start_free(&p, &s);
    plan_free(&p);
    cuda_device_close(&probe);
}

/* fp32: two steps launched eagerly and two replayed from CUDA graphs, from the
 * same start: every launch is deterministic (cuDNN plans refuse
 * nondeterministic engines), so losses, norms, parameters and optimizer
 * state agree bit for bit. */
Test(cuda_step, graph_replay_equals_eager_launch) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    char err[2048];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision fp32 --target cuda --arch sm_80,sm_90", &p);
    Start s;
    start_make(&p, &s);
    CudaStep cs;
    cr_assert(cuda_step_open(&cs, &p, 0, err, sizeof err), "%s", err);
    const float lr[3] = {0.01f, 0.01f, 0.01f};
    CudaStepOutcome eager[2], replay[2];
    float *state[2];
    int64_t n[2];
    for (int mode = 0; mode < 2; mode++) {
        cr_assert(cuda_step_use_graphs(&cs, mode == 1, err, sizeof err), "%s", err);
        start_upload(&cs, &s);
        for (int k = 0; k < 2; k++)
            cr_assert(cuda_step_train(&cs, lr, 0.9f, (float)(k + 1), mode ? &replay[k] : &eager[k], err, sizeof err), "%s step %d: %s", mode ? "graph" : "eager", k, err);
        state[mode] = snapshot(&cs, true, true, &n[mode]);
    }
    for (int k = 0; k < 2; k++) {
        cr_log_info("step %d: loss eager %.9g graph %.9g, norm eager %.9g graph %.9g", k, eager[k].loss, replay[k].loss, eager[k].grad_norm, replay[k].grad_norm);
        cr_expect(memcmp(&eager[k].loss, &replay[k].loss, 4) == 0, "step %d: loss", k);
        cr_expect(memcmp(&eager[k].grad_norm, &replay[k].grad_norm, 4) == 0, "step %d: gradient norm", k);
        cr_expect(!eager[k].skipped && !replay[k].skipped && eager[k].loss_scale == 1.0f);
    }
    cr_assert_eq(n[0], n[1]);
    int64_t differ = 0;
    for (int64_t i = 0; i < n[0]; i++) differ += memcmp(&state[0][i], &state[1][i], 4) != 0;
    cr_expect_eq(differ, 0, "%lld of %lld parameter and optimizer-state values differ", (long long)differ, (long long)n[0]);
    /* each run captured once: [0, clip_op) as one graph more than it has host
     * ops (none when the library ops and the loss run on the device; see
     * graph_segments_of_the_tiny_plan for them on the host), the clip, the updates */
    cr_expect_eq(cs.n_graphs, cs.host_ops + 3);
    cr_expect_eq(cs.graph_replays, 2 * cs.n_graphs, "every graph replayed once a step");
    cr_expect_eq(cs.eager_host_ops, 2 * cs.host_ops, "the host ops ran between the graphs");
    cr_log_info("%d graphs, %ld replays, %ld host ops between them", cs.n_graphs, cs.graph_replays, cs.eager_host_ops);
    free(state[0]), free(state[1]);
    cuda_step_close(&cs);
    start_free(&p, &s);
    plan_free(&p);
    cuda_device_close(&probe);
}

/* The trainer's validation step borrows the training step's arena and
 * workspace where they are large enough: it allocates only its own regions,
 * and, its runs never overlapping the training step's, predicts bit for bit
 * the same after a training step has overwritten the shared memory, and the
 * same again replayed from CUDA graphs. One
 * route for 1x1 convolutions, so that nothing timed differs between runs. */
Test(cuda_step, validation_runs_in_the_training_steps_arena) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    char err[2048];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision bf16 --target cuda --arch sm_80,sm_90", &p);
    cr_assert_not_null(p.eval);
    cr_assert_eq(setenv("YOLOCC_CUDA_CONV1X1", "cudnn", 1), 0);
    Start st, se;
    start_make(&p, &st);
    start_make(p.eval, &se);
    CudaStep tr, ev;
    cr_assert(cuda_step_open(&tr, &p, 0, err, sizeof err), "%s", err);
    size_t free0 = 0, free1 = 0, total = 0;
    cr_assert(CUDA_CALL(&probe.L, cuMemGetInfo, (&free0, &total), "reading free memory", err, sizeof err), "%s", err);
    const CudaLend lend = {.arena = &tr.mem, .workspace = &tr.mem};
    cr_assert(cuda_step_open_sharing(&ev, p.eval, 0, &lend, err, sizeof err), "%s", err);
    cr_assert(CUDA_CALL(&probe.L, cuMemGetInfo, (&free1, &total), "reading free memory", err, sizeof err), "%s", err);
    const bool arena_fits = ev.mem.layout.arena_bytes <= tr.mem.layout.arena_bytes;
    const bool ws_fits = memplan_align(cuda_step_workspace_need(&ev)) <= tr.mem.workspace_bytes;
    cr_expect(arena_fits, "the tiny plan's validation arena (%lld bytes) fits its training arena (%lld)", (long long)ev.mem.layout.arena_bytes,
              (long long)tr.mem.layout.arena_bytes);
    cr_expect_eq(ev.mem.arena_lent, arena_fits);
    cr_expect_eq(ev.mem.workspace_lent, ws_fits);
    if (ev.mem.arena_lent) cr_expect_eq(ev.mem.arena, tr.mem.arena);
    if (ev.mem.workspace_lent) cr_expect_eq(ev.mem.workspace, tr.mem.workspace);
    const int64_t own = ev.mem.layout.persistent_bytes + (ev.mem.arena_lent ? 0 : ev.mem.layout.arena_bytes) + (ev.mem.workspace_lent ? 0 : ev.mem.workspace_bytes);
    cr_expect_eq(cuda_step_device_bytes(&ev), own, "only its own regions count");
    cr_log_info("validation step: %lld bytes of its own (arena %s, workspace %s); free memory dropped by %lld across its open", (long long)own,
                ev.mem.arena_lent ? "lent" : "own", ev.mem.workspace_lent ? "lent" : "own", (long long)free0 - (long long)free1);

    const int pred = plan_meta_tensor(p.eval, "outputs", "predictions");
    cr_assert_geq(pred, 0);
    const int64_t n = shape_numel(&p.eval->g.tensors[pred].shape);
    float *before = malloc(sizeof(float) * (size_t)n), *after = malloc(sizeof(float) * (size_t)n);
    cr_assert(before && after);
    start_upload(&ev, &se);
    cr_assert(cuda_step_run(&ev, 0, p.eval->g.n_ops, err, sizeof err), "validation: %s", err);
    cr_assert(cuda_step_download(&ev, pred, before, err, sizeof err), "%s", err);
    /* a training step fills the shared arena and workspace with its own tensors */
    start_upload(&tr, &st);
    const float lr[3] = {0.01f, 0.01f, 0.01f};
    CudaStepOutcome o;
    cr_assert(cuda_step_train(&tr, lr, 0.9f, 1.0f, &o, err, sizeof err), "training: %s", err);
    cr_expect(isfinite(o.loss), "loss %g", o.loss);
    cr_assert(cuda_step_run(&ev, 0, p.eval->g.n_ops, err, sizeof err), "validation again: %s", err);
    cr_assert(cuda_step_download(&ev, pred, after, err, sizeof err), "%s", err);
    int64_t differ = 0, finite = 0;
    for (int64_t i = 0; i < n; i++) differ += memcmp(&before[i], &after[i], 4) != 0, finite += isfinite(before[i]);
    cr_expect_eq(differ, 0, "%lld of %lld predictions changed after a training step ran in the shared memory", (long long)differ, (long long)n);
    cr_expect_eq(finite, n, "every prediction is finite");
    /* as the trainer runs it: the first batch captured into graphs, later batches replayed */
    cr_assert(cuda_step_use_graphs(&ev, true, err, sizeof err), "%s", err);
    for (int k = 0; k < 2; k++) {
        cr_assert(cuda_step_run(&ev, 0, p.eval->g.n_ops, err, sizeof err), "validation from graphs, run %d: %s", k, err);
        cr_assert(cuda_step_download(&ev, pred, after, err, sizeof err), "%s", err);
        differ = 0;
        for (int64_t i = 0; i < n; i++) differ += memcmp(&before[i], &after[i], 4) != 0;
        cr_expect_eq(differ, 0, "run %d from graphs: %lld of %lld predictions differ from the eager run", k, (long long)differ, (long long)n);
    }
    cr_expect(ev.n_graphs > 0 && ev.graph_replays == 2 * ev.n_graphs, "%d graphs, %ld replays", ev.n_graphs, ev.graph_replays);
    free(before), free(after);
    cuda_step_close(&ev);
    cuda_step_close(&tr);
    start_free(p.eval, &se);
    start_free(&p, &st);
    plan_free(&p);
    cuda_device_close(&probe);
}

/* The chosen candidate of every cuDNN plan of cs, in plan order (malloc'd), after checking that
 * only the chosen ones are left and that the workspace is what they need. */
static int *chosen_engines(const CudaStep *cs, const char *what) {
    int *chosen = calloc((size_t)cs->conv.n_plans + 1, sizeof *chosen);
    for (int i = 0; i < cs->conv.n_plans; i++) {
        const ConvPlan *e = &cs->conv.plans[i];
        chosen[i] = e->chosen;
        for (int j = 0; j < e->n_cand; j++) cr_expect_eq(e->cand[j] != NULL, j == e->chosen, "%s plan %d: candidate %d", what, i, j);
    }
    cr_expect_eq(cs->mem.workspace_bytes, memplan_align(cuda_step_workspace_need(cs)), "%s: the workspace shrank to what the chosen engines need", what);
    return chosen;
}

/* YOLOCC_CUDNN_TUNE: the default times every shape's candidates on a cold cache (the chosen one
 * never slower than the heuristics' first), a second open takes every choice from the cache,
 * heuristic keeps each first choice, and an unknown value is refused before anything is
 * allocated. The tiny step's accuracy with the chosen engines is the tiny_step_* tests'. */
Test(cuda_step, cudnn_engines_are_timed_once_then_read_from_the_tuning_cache) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    char err[2048], line[2048], cache[] = "/tmp/yolocc-tune-XXXXXX";
    cr_assert_not_null(mkdtemp(cache));
    cr_assert_eq(setenv("XDG_CACHE_HOME", cache, 1), 0);
    cr_assert_eq(unsetenv("YOLOCC_NO_CACHE"), 0);
    cr_assert_eq(unsetenv("YOLOCC_CUDNN_TUNE"), 0);
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision bf16 --layout nhwc --target cuda --arch sm_80,sm_90", &p);
    CudaStep cs;
    cr_assert(cuda_step_open(&cs, &p, 0, err, sizeof err), "%s", err);
    cuda_step_describe(&cs, line, sizeof line);
    cr_log_info("cold cache: %s", line);
    cr_expect_gt(cs.tune_shapes, 0, "cuDNN offered more than one engine for some shape: %s", line);
    cr_expect_eq(cs.tune_cached, 0);
    cr_expect_eq(cs.tune_failed, 0, "%s", cs.tune_why);
    cr_expect_str_empty(cs.tune_store_why);
    cr_expect_leq(cs.tune_ms[1], cs.tune_ms[0] * (1 + 1e-6), "the chosen engines never take longer than the first choices as timed");
    cr_expect(strstr(line, "cuDNN engines timed for"), "%s", line);
    const int n_plans = cs.conv.n_plans, shapes = cs.tune_shapes;
    int *first = chosen_engines(&cs, "cold");
    cuda_step_close(&cs);

    cr_assert(cuda_step_open(&cs, &p, 0, err, sizeof err), "%s", err);
    cr_expect_eq(cs.tune_shapes, shapes);
    cr_expect_eq(cs.tune_cached, shapes, "every choice came from the cache");
    cr_assert_eq(cs.conv.n_plans, n_plans);
    int *again = chosen_engines(&cs, "cached");
    for (int i = 0; i < n_plans; i++) cr_expect_eq(again[i], first[i], "plan %d runs the engine the first open chose", i);
    cuda_step_close(&cs);

    cr_assert_eq(setenv("YOLOCC_CUDNN_TUNE", "heuristic", 1), 0);
    cr_assert(cuda_step_open(&cs, &p, 0, err, sizeof err), "%s", err);
    cr_expect_eq(cs.tune_shapes, 0);
    for (int i = 0; i < cs.conv.n_plans; i++) cr_expect(cs.conv.plans[i].n_cand == 1 && cs.conv.plans[i].chosen == 0, "plan %d", i);
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect(strstr(line, "(YOLOCC_CUDNN_TUNE=heuristic)"), "%s", line);
    cuda_step_close(&cs);

    cr_assert_eq(setenv("YOLOCC_CUDNN_TUNE", "fastest", 1), 0);
    cr_expect_not(cuda_step_open(&cs, &p, 0, err, sizeof err));
    cr_expect(strstr(err, "YOLOCC_CUDNN_TUNE=fastest: expected time or heuristic"), "%s", err);
    cr_expect(!cs.mem_open && !cs.ptr, "nothing stays open");
    free(first), free(again);
    plan_free(&p);
    cuda_device_close(&probe);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", cache);
    cr_expect_eq(system(rm), 0);
}

/* `yolort bench --profile`: one eager step with every launch timed, and the
 * detection loss' phases inside its two launches; the phases' times add up to
 * no more than the launches' that hold them. */
Test(cuda_step, profile_times_every_launch_and_the_loss_phases) {
    CudaDevice probe;
    char err[2048];
    Plan p;
    Start s;
    CudaStep cs;
    tiny_step_open(&probe, "bf16", &p, &s, &cs);
    StepProfile prof;
    cr_assert(cuda_step_profile(&cs, &prof, err, sizeof err), "%s", err);
    char text[8192];
    step_profile_format(&prof, 64, text, sizeof text);
    cr_log_info("%s", text);
    cr_expect_gt(prof.launch_ms, 0);
    cr_expect_eq(prof.route_launches[CUDA_ROUTE_DETLOSS], 2, "the loss and its gradient");
    int phases = 0;
    double phase_ms = 0;
    for (int i = 0; i < prof.n_rows; i++)
        if (strstr(prof.rows[i].what, "loss phase yl_detloss_")) phases++, phase_ms += prof.rows[i].ms;
    cr_expect_eq(phases, CUDA_DETLOSS_PHASES, "a row per phase kernel (the gradient's only in the backward)");
    cr_expect(phase_ms > 0 && phase_ms <= prof.route_ms[CUDA_ROUTE_DETLOSS] * 1.01 + 0.01, "phases %.4f ms within the loss launches' %.4f ms", phase_ms,
              prof.route_ms[CUDA_ROUTE_DETLOSS]);
    step_profile_free(&prof);
    cuda_step_close(&cs);
    start_free(&p, &s);
    plan_free(&p);
    cuda_device_close(&probe);
}

/* rect shapes of the tiny model (stride 32) around its 64x64 validation graph: smaller, wider, taller, larger */
static const int RECT_SHAPES[][2] = {{32, 64}, {64, 32}, {96, 64}, {64, 128}, {96, 96}};
enum { N_RECT_SHAPES = sizeof RECT_SHAPES / sizeof RECT_SHAPES[0] };

/* Deterministic pixels and labels of a batch x 3 x h x w batch. */
static void rect_batch(int batch, int h, int w, int max_boxes, uint8_t *px, float *boxes, int64_t *counts) {
    uint32_t x = 12345u + (uint32_t)(h * 7 + w);
    for (size_t i = 0; i < (size_t)batch * 3 * (size_t)h * (size_t)w; i++) {
        x = x * 1664525u + 1013904223u;
        px[i] = (uint8_t)(x >> 24);
    }
    memset(boxes, 0, sizeof(float) * (size_t)batch * (size_t)max_boxes * 5);
    for (int b = 0; b < batch; b++) {
        counts[b] = b % 2 ? 2 : 1;
        for (int k = 0; k < counts[b]; k++) {
            float *row = boxes + ((size_t)b * (size_t)max_boxes + (size_t)k) * 5;
            row[0] = (float)k, row[1] = 0.3f + 0.2f * (float)k, row[2] = 0.5f, row[3] = 0.25f, row[4] = 0.4f;
        }
    }
}

/* The fp32 tiny plan's validation graph at each rect shape on the device, all
 * opened at once beside the own step (one arena for all of them), against
 * the CPU plan's graph at the same shape on the reference kernels, with the
 * same parameters: predictions and loss items within 1e-4 (cuDNN sums in
 * another order). */
Test(cuda_step, rect_validation_graphs_on_the_device_equal_the_cpu) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    char err[2048];
    Plan pc, pg;
    tiny_plans_cpu_cuda("--imgsz 64 --batch 2 --precision fp32", "--imgsz 64 --batch 2 --precision fp32", &pc, &pg);
    const Graph *g = &pg.eval->g;
    void **state = calloc((size_t)g->n_tensors, sizeof *state), **ordered = calloc((size_t)g->n_state + 1, sizeof *ordered);
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].kind == TK_PARAM || g->tensors[t].kind == TK_BUFFER) state[t] = calloc((size_t)shape_numel(&g->tensors[t].shape) + 1, 8);
    cr_assert(weights_init(g, state, 20251130, err, sizeof err), "%s", err);
    for (int k = 0; k < g->n_state; k++) ordered[k] = state[g->state[k]];
    CudaStep own;
    cr_assert(cuda_step_open(&own, pg.eval, 0, err, sizeof err), "%s", err);
    cr_assert(cuda_step_upload_state(&own, state, err, sizeof err), "%s", err);
    CudaShapes cs = {.train = &pg, .own = &own};
    cr_assert(cuda_shapes_open(&cs, 2, N_RECT_SHAPES, RECT_SHAPES, err, sizeof err), "%s", err);
    cr_expect_eq(cs.n, N_RECT_SHAPES, "every rect shape has a step");
    int own_arenas = 0;
    for (int i = 0; i < cs.n; i++) {
        own_arenas += !cs.s[i]->cs.mem.arena_lent;
        cr_expect(cs.s[i]->cs.mem.state_lent, "shape %d reads the own step's parameters", i);
    }
    cr_expect_leq(own_arenas, 1, "at most one rect shape (the largest) has an arena of its own");
    for (int i = 0; i < N_RECT_SHAPES; i++) {
        const int h = RECT_SHAPES[i][0], w = RECT_SHAPES[i][1];
        CudaShape *sh = cuda_shapes_find(&cs, 2, h, w);
        cr_assert_not_null(sh, "%dx%d", h, w);
        const EvalIO *io = &sh->io;
        const size_t n_px = (size_t)io->batch * 3 * (size_t)h * (size_t)w;
        uint8_t *px = malloc(n_px);
        float *boxes = malloc(sizeof(float) * (size_t)io->batch * (size_t)io->max_boxes * 5), *im = malloc(sizeof(float) * n_px);
        int64_t *counts = malloc(sizeof(int64_t) * (size_t)io->batch);
        rect_batch(io->batch, h, w, io->max_boxes, px, boxes, counts);
        for (size_t k = 0; k < n_px; k++) im[k] = (float)px[k] / 255.0f;
        const int64_t n_pred = (int64_t)io->batch * (4 + io->nc) * io->anchors;
        float *dev = malloc(sizeof(float) * (size_t)n_pred), items[3];
        cr_assert(cuda_step_set_input(&sh->cs, io->images, im, err, sizeof err), "%s", err);
        cr_assert(cuda_step_set_input(&sh->cs, io->boxes, boxes, err, sizeof err), "%s", err);
        cr_assert(cuda_step_set_input(&sh->cs, io->counts, counts, err, sizeof err), "%s", err);
        cr_assert(cuda_step_run(&sh->cs, 0, sh->plan.g.n_ops, err, sizeof err), "%dx%d: %s", h, w, err);
        cr_assert(cuda_step_download(&sh->cs, io->pred, dev, err, sizeof err), "%s", err);
        cr_assert(cuda_step_download(&sh->cs, io->items, items, err, sizeof err), "%s", err);
        /* the CPU plan's graph at the same shape, on the reference kernels */
        EvalShapes es = {.train = &pc, .state = ordered, .reference = true};
        EvalGraph *eg = eval_shapes_get(&es, 2, h, w, err, sizeof err);
        cr_assert_not_null(eg, "%s", err);
        memcpy(eg->ev.buf[eg->io.images], im, sizeof(float) * n_px);
        memcpy(eg->ev.buf[eg->io.boxes], boxes, sizeof(float) * (size_t)io->batch * (size_t)io->max_boxes * 5);
        memcpy(eg->ev.buf[eg->io.counts], counts, sizeof(int64_t) * (size_t)io->batch);
        cr_assert(eval_graph_run(eg, true, err, sizeof err), "%s", err);
        const float *cpu = eg->ev.buf[eg->io.pred], *cpu_items = eg->ev.buf[eg->io.items];
        cr_assert_eq(eg->io.anchors, io->anchors);
        double worst = 0;
        for (int64_t k = 0; k < n_pred; k++) {
            const double d = fabs((double)dev[k] - cpu[k]) / (1.0 + fabs((double)cpu[k]));
            worst = d > worst ? d : worst;
        }
        cr_expect_leq(worst, 1e-4, "%dx%d: predictions differ by %.3g (relative to 1 + |cpu|)", h, w, worst);
        for (int k = 0; k < 3; k++)
            cr_expect_leq(fabs((double)items[k] - cpu_items[k]), 1e-4 * (1 + fabs((double)cpu_items[k])), "%dx%d: loss item %d: %g on the GPU, %g on the CPU", h, w, k,
                          (double)items[k], (double)cpu_items[k]);
        cr_log_info("%dx%d: %lld predictions, worst %.3g; loss %g %g %g", h, w, (long long)n_pred, worst, (double)items[0], (double)items[1], (double)items[2]);
        eval_shapes_free(&es);
        free(px), free(boxes), free(im), free(counts), free(dev);
    }
    cuda_shapes_close(&cs);
    cuda_step_close(&own);
    for (int t = 0; t < g->n_tensors; t++) free(state[t]);
    free(state), free(ordered);
    plan_free(&pc), plan_free(&pg);
    cuda_device_close(&probe);
}
