/* tests/test_eval_shape_cuda.c — a CUDA plan's validation graph at rect shapes
 * (runtime/predict/eval_shape_cuda.c): without a GPU, that every rebuilt graph
 * lowers to the plan's own kernels and reads the own step's parameters at
 * their addresses, and the order shapes open in; on a GPU, each shape's
 * predictions and loss against the CPU's at the same shape (`SKIP: no CUDA
 * device` without one). Owns no runtime code. */
#include <math.h>

#include "../runtime/predict/eval_shape.h"
#include "../runtime/predict/eval_shape_cuda.h"
#include "../runtime/weights.h"
#include "test_gpu.h"

/* rect shapes of the tiny model (stride 32) around its 64x64 validation graph: smaller, wider, taller, larger */
static const int RECT[][2] = {{32, 64}, {64, 32}, {96, 64}, {64, 128}, {96, 96}};
enum { N_RECT = sizeof RECT / sizeof RECT[0] };

/* `yolocc ARGS` (a CUDA plan) rebuilt at n shapes hw, batches 2 and 3: each lowers to its kernels */
static void expect_rect_graphs_covered(const char *args, int n, const int (*hw)[2]) {
    Plan p;
    char err[2048];
    compile_plan(args, &p);
    cr_assert_not_null(p.eval);
    cr_expect(cuda_kernels_cover(p.eval, err, sizeof err), "%s: the plan's own validation graph: %s", args, err);
    for (int batch = 2; batch <= 3; batch++)
        for (int i = 0; i < n; i++) {
            Plan r;
            cr_assert(eval_plan_at_shape(&p, batch, hw[i][0], hw[i][1], &r, err, sizeof err), "%s: %dx%d: %s", args, hw[i][0], hw[i][1], err);
            cr_expect(cuda_kernels_cover(&r, err, sizeof err), "%s: the graph at %dx%d, batch %d: %s", args, hw[i][0], hw[i][1], batch, err);
            plan_free(&r);
        }
    plan_free(&p);
}

Test(cuda_shapes, rect_graphs_lower_to_the_plans_own_kernels) {
    expect_rect_graphs_covered("models/tiny.yaml --imgsz 64 --batch 2 --precision bf16 --layout nhwc --target cuda --arch sm_90", N_RECT, RECT);
    expect_rect_graphs_covered("models/tiny.yaml --imgsz 64 --batch 2 --precision fp16 --layout nchw --target cuda --arch sm_90", N_RECT, RECT);
    expect_rect_graphs_covered("models/tiny.yaml --imgsz 64 --batch 2 --precision fp32 --target cuda --arch sm_90", N_RECT, RECT);
}

/* Every model family of models/ (attention, end-to-end heads, v9's blocks) at 128 px: a wide,
 * a tall and a larger rect batch (128 + half a stride rounds up to 160). */
Test(cuda_shapes, every_model_familys_rect_graphs_lower_to_its_kernels, .timeout = 600) {
    static const int hw[][2] = {{64, 128}, {128, 96}, {160, 160}};
    static const char *const models[] = {"yolov8.yaml --scale n", "yolo11.yaml --scale n", "yolo12.yaml --scale n", "yolov10n.yaml", "yolov9t.yaml",
                                         "yolov5.yaml --scale n", "yolov3.yaml"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "models/%s --imgsz 128 --batch 2 --precision bf16 --layout nhwc --target cuda --arch sm_90", models[i]);
        expect_rect_graphs_covered(args, 3, hw);
    }
}

/* The check refuses kernels of another graph: a bf16 plan's graph with an fp32 plan's KERNELS. */
Test(cuda_shapes, a_graph_whose_kernels_the_plan_lacks_is_refused) {
    Plan lo, hi;
    char err[2048];
    tiny_plan("--imgsz 64 --batch 2 --precision bf16 --target cuda --arch sm_90", &lo);
    tiny_plan("--imgsz 64 --batch 2 --precision fp32 --target cuda --arch sm_90", &hi);
    Plan mixed = *lo.eval;
    mixed.kernels = hi.eval->kernels, mixed.kernels_len = hi.eval->kernels_len;
    cr_expect_not(cuda_kernels_cover(&mixed, err, sizeof err));
    cr_expect(strstr(err, "kernel") && strstr(err, "recompile"), "the message names a kernel: %s", err);
    Plan none = *lo.eval;
    none.kernels = NULL, none.kernels_len = 0;
    cr_expect_not(cuda_kernels_cover(&none, err, sizeof err));
    cr_expect(strstr(err, "--target cuda"), "%s", err);
    plan_free(&lo);
    plan_free(&hi);
}

/* A rect graph's CudaMem with the own step's state lent: every parameter and
 * buffer (and bf16 compute copy) at the own step's address, its inputs in
 * its own region, and only those counted as its own. */
Test(cuda_shapes, rect_graphs_read_the_own_steps_parameters_in_place) {
    Plan p;
    char err[2048];
    tiny_plan("--imgsz 64 --batch 2 --precision bf16 --layout nhwc --target cuda --arch sm_90", &p);
    const Plan *ep = p.eval;
    CudaMem own = {.g = &ep->g};
    cr_assert(cuda_layout_build(ep, &own.layout, err, sizeof err), "%s", err);
    own.persistent = 0x100000, own.state = own.persistent + (CuDevicePtr)own.layout.input_bytes, own.arena = 0x40000000;
    CudaLayout train;
    cr_assert(cuda_layout_build(&p, &train, err, sizeof err), "%s", err);
    cr_expect_not(cuda_layout_state_matches(&p.g, &train, &ep->g, &own.layout), "the training graph's state (gradients, momentum) lies otherwise");
    for (int i = 0; i < N_RECT; i++) {
        Plan r;
        cr_assert(eval_plan_at_shape(&p, 2, RECT[i][0], RECT[i][1], &r, err, sizeof err), "%s", err);
        CudaMem m = {.g = &r.g};
        cr_assert(cuda_layout_build(&r, &m.layout, err, sizeof err), "%s", err);
        cr_expect(cuda_layout_state_matches(&ep->g, &own.layout, &r.g, &m.layout), "%dx%d: the same parameters at the same offsets", RECT[i][0], RECT[i][1]);
        m.persistent = 0x900000, m.state = own.state, m.state_lent = true, m.arena = 0x80000000;
        cr_assert_eq(r.g.n_state, ep->g.n_state);
        int copies = 0;
        for (int k = 0; k < r.g.n_state; k++) {
            const int t = r.g.state[k], o = ep->g.state[k];
            cr_expect_eq(cuda_mem_ptr(&m, t), cuda_mem_ptr(&own, o), "%dx%d: %s", RECT[i][0], RECT[i][1], r.g.tensors[t].name);
            cr_expect_eq(cuda_mem_compute_ptr(&m, t), cuda_mem_compute_ptr(&own, o), "%dx%d: %s's compute copy", RECT[i][0], RECT[i][1], r.g.tensors[t].name);
            copies += m.layout.lowp_off[t] >= 0;
        }
        cr_expect_gt(copies, 0, "a bf16 plan's convolution weights have compute copies, shared too");
        int inputs = 0;
        for (int t = 0; t < r.g.n_tensors; t++) {
            if (r.g.tensors[t].kind != TK_INPUT || m.layout.region[t] != CUDA_REGION_PERSISTENT) continue;
            const CuDevicePtr a = cuda_mem_ptr(&m, t);
            cr_expect(a >= m.persistent && a < m.persistent + (CuDevicePtr)m.layout.input_bytes, "%dx%d: input %s in its own region", RECT[i][0], RECT[i][1],
                      r.g.tensors[t].name);
            inputs++;
        }
        cr_expect_geq(inputs, 3, "images, boxes and counts");
        m.arena_lent = true;
        cr_expect_eq(cuda_mem_owned_bytes(&m), m.layout.input_bytes, "%dx%d: only its inputs are its own", RECT[i][0], RECT[i][1]);
        cuda_layout_free(&m.layout);
        plan_free(&r);
    }
    /* another model's state does not match */
    Plan q;
    tiny_plan("--imgsz 64 --batch 2 --nc 5 --precision bf16 --layout nhwc --target cuda --arch sm_90", &q);
    CudaLayout lq;
    cr_assert(cuda_layout_build(q.eval, &lq, err, sizeof err), "%s", err);
    cr_expect_not(cuda_layout_state_matches(&ep->g, &own.layout, &q.eval->g, &lq), "a head for 5 classes has other parameters");
    cuda_layout_free(&lq);
    plan_free(&q);
    cuda_layout_free(&train);
    cuda_layout_free(&own.layout);
    plan_free(&p);
}

Test(cuda_shapes, the_largest_arena_opens_first) {
    const int64_t arena[] = {5, 9, 1, 9, 7};
    int order[5];
    cuda_shapes_order(arena, 5, order);
    const int want[] = {1, 3, 4, 0, 2};
    for (int i = 0; i < 5; i++) cr_expect_eq(order[i], want[i], "position %d", i);
    cuda_shapes_order(arena, 0, order);
}

/* ---- on a GPU ---- */

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
Test(cuda_shapes, rect_graphs_on_the_device_equal_the_cpu) {
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
    cr_assert(cuda_shapes_open(&cs, 2, N_RECT, RECT, err, sizeof err), "%s", err);
    cr_expect_eq(cs.n, N_RECT, "every rect shape has a step");
    int own_arenas = 0;
    for (int i = 0; i < cs.n; i++) {
        own_arenas += !cs.s[i]->cs.mem.arena_lent;
        cr_expect(cs.s[i]->cs.mem.state_lent, "shape %d reads the own step's parameters", i);
    }
    cr_expect_leq(own_arenas, 1, "at most one rect shape (the largest) has an arena of its own");
    for (int i = 0; i < N_RECT; i++) {
        const int h = RECT[i][0], w = RECT[i][1];
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
