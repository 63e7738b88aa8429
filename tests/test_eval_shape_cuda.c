/* tests/test_eval_shape_cuda.c — a CUDA plan's validation graph at rect shapes
 * (runtime/predict/eval_shape_cuda.c): without a GPU, that every rebuilt graph
 * lowers to the plan's own kernels and reads the own step's parameters at
 * their addresses, and the order shapes open in (no GPU; the shapes on a
 * device are test_cuda_step_gpu.c's). Owns no runtime code. */
#include <math.h>

#include "../runtime/predict/eval_shape.h"
#include "../runtime/predict/eval_shape_cuda.h"
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

/* Lenders: the first own arena large enough (never a borrowed one), the largest own workspace. */
Test(cuda_shapes, a_shape_borrows_the_first_large_enough_arena_and_the_largest_workspace) {
    CudaMem train = {.arena = 0x1000, .workspace = 0x2000, .workspace_bytes = 64}, own = {.arena = 0x1000, .arena_lent = true, .workspace = 0x3000, .workspace_bytes = 256},
            big = {.arena = 0x4000, .workspace = 0x2000, .workspace_bytes = 64, .workspace_lent = true};
    train.layout.arena_bytes = 100, own.layout.arena_bytes = 80, big.layout.arena_bytes = 300;
    const CudaMem *cand[] = {&train, &own, &big};
    CudaLend l = cuda_shapes_lend(cand, 3, 90, &own);
    cr_expect_eq(l.arena, &train, "the training arena holds 90 bytes");
    cr_expect_eq(l.workspace, &own, "the largest own workspace");
    cr_expect_eq(l.state, &own);
    l = cuda_shapes_lend(cand, 3, 200, &own);
    cr_expect_eq(l.arena, &big, "only the larger shape's own arena holds 200 bytes");
    l = cuda_shapes_lend(cand, 3, 400, &own);
    cr_expect_null(l.arena, "none holds 400 bytes: the shape allocates its own");
    l = cuda_shapes_lend(cand, 2, 90, &own);
    cr_expect_eq(l.arena, &train, "a borrowed arena is never lent on (own's is the training one's)");
    l = cuda_shapes_lend(cand + 1, 1, 10, &own);
    cr_expect_null(l.arena, "own's arena is borrowed");
}
