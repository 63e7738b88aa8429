/* tests/test_cuda.c — the CUDA backend's foundation (issue #6): memory fit
 * and largest batch, the device layout of a plan, cubin/PTX choice, launch
 * geometry and arguments, convolution plan keys (all without a GPU); on a
 * GPU, every generated kernel of the tiny model against the CPU target's,
 * cuDNN convolutions against the reference kernels, and the real memory
 * check. GPU tests print `SKIP: no CUDA device` where there is none. */
#include <math.h>

#include "../compiler/kernel_ir.h"
#include "../runtime/cuda/cuda_device.h"
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/cuda/cuda_detloss.h"
#include "../runtime/cuda/cuda_kernels.h"
#include "../runtime/cuda/cudnn_conv.h"
#include "../runtime/gen_cpu.h"
#include "../runtime/interp.h"
#include "../passes/views.h"
#include "../runtime/ref_kernels.h"
#include "test_gpu.h"

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}
static float rng_uniform(uint64_t *s, float lo, float hi) { return lo + (hi - lo) * (float)((rng_next(s) >> 40) * (1.0 / 16777216.0)); }

/* f rounded to bf16 and back, as an upload stores it */
static float bf16_round(float f) {
    uint16_t h;
    cuda_f32_to_storage(DT_BF16, &f, &h, 1);
    cuda_storage_to_f32(DT_BF16, &h, &f, 1);
    return f;
}

/* ---- memory arithmetic (no GPU) ---- */

Test(cuda, memory_fit_and_largest_batch) {
    CudaMemNeed n = {.arena = 1000, .state = 500, .inputs = 200, .workspace = 100, .batch = 4};
    char err[1024] = "";
    cr_expect_eq(cuda_mem_planned(&n), 1800);
    cr_expect(cuda_mem_check(&n, 1800, err, sizeof err), "exactly enough fits");
    cr_expect(cuda_mem_check(&n, 4000, err, sizeof err));
    /* (1000 - 600) * 4 / 1200 = 1.33: batch 1 fits, batch 2 does not */
    cr_expect_eq(cuda_mem_largest_batch(&n, 1000), 1);
    cr_expect_eq(cuda_mem_largest_batch(&n, 1500), 3);
    cr_expect_eq(cuda_mem_largest_batch(&n, 1800), 4, "the compiled batch fits in exactly its planned bytes");
    cr_expect_eq(cuda_mem_largest_batch(&n, 599), 0);
    cr_expect(!cuda_mem_check(&n, 1000, err, sizeof err));
    cr_expect(strstr(err, "needs 1800 bytes") && strstr(err, "1000 bytes") && strstr(err, "largest batch that fits is 1"), "%s", err);
    cr_expect(strstr(err, "arena") && strstr(err, "persistent") && strstr(err, "workspace"), "%s", err);
    cr_expect(!strchr(err, '\n'), "one line: %s", err);
    cr_expect(!cuda_mem_check(&n, 500, err, sizeof err));
    cr_expect(strstr(err, "not even batch 1 fits"), "%s", err);
    /* a reserve counts like fixed state */
    n.reserve = 1000;
    cr_expect(!cuda_mem_check(&n, 1800, err, sizeof err));
    cr_expect_eq(cuda_mem_largest_batch(&n, 2000), 1, "(2000 - 1600) * 4 / 1200");
    cr_expect(strstr(err, "reserved"), "%s", err);
    /* nothing scales with the batch: any batch fits once the fixed part does */
    CudaMemNeed fixed = {.state = 10, .batch = 2};
    cr_expect_eq(cuda_mem_largest_batch(&fixed, 100), INT64_MAX);
    cr_expect_eq(cuda_mem_largest_batch(&fixed, 5), 0);
}

static void check_layout(const Plan *p, const CudaLayout *l) {
    const Graph *g = &p->g;
    cr_expect_eq(l->arena_bytes, p->arena_bytes);
    cr_expect_eq(l->persistent_bytes, l->state_bytes + l->input_bytes);
    const cJSON *mem = cJSON_GetObjectItem(p->meta, "memory");
    double planned_state = cJSON_GetNumberValue(cJSON_GetObjectItem(mem, "persistent_bytes"));
    double planned_inputs = cJSON_GetNumberValue(cJSON_GetObjectItem(mem, "input_bytes"));
    cr_expect((double)l->state_bytes >= planned_state && (double)l->state_bytes < planned_state + 256.0 * g->n_tensors * 2,
              "state %lld vs planned %.0f (each tensor rounded up to 256)", (long long)l->state_bytes, planned_state);
    cr_expect((double)l->input_bytes >= planned_inputs, "inputs %lld vs planned %.0f", (long long)l->input_bytes, planned_inputs);
    int64_t end = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        int64_t off = p->offset[t];
        if (off == MEMPLAN_INTERNAL) cr_expect_eq(l->region[t], CUDA_REGION_NONE, "tensor %d", t);
        else if (off >= 0) cr_expect(l->region[t] == CUDA_REGION_ARENA && l->off[t] == off, "tensor %d", t);
        else {
            cr_expect_eq(l->region[t], CUDA_REGION_PERSISTENT, "tensor %d", t);
            cr_expect_eq(l->off[t] % MEMPLAN_ALIGN, 0);
            bool input = g->tensors[t].kind == TK_INPUT;
            cr_expect(input ? l->off[t] < l->input_bytes : l->off[t] >= l->input_bytes, "inputs first: tensor %d", t);
            if (l->off[t] + shape_numel(&g->tensors[t].shape) > end) end = l->off[t] + shape_numel(&g->tensors[t].shape);
        }
        /* a weight or bias a convolution reads (BN parameters, and channels-last weights, go to their readers as fp32 masters) */
        bool conv_reads = false;
        for (int o = 0; o < g->n_ops; o++)
            for (int i = 1; i < g->ops[o].n_in; i++)
                conv_reads |= (g->ops[o].kind == OP_CONV2D || g->ops[o].kind == OP_CONV2D_DGRAD) && g->ops[o].in[i] == t;
        bool copy = p->precision != PREC_FP32 && g->tensors[t].kind == TK_PARAM && conv_reads;
        cr_expect_eq(l->lowp_off[t] >= 0, copy, "tensor %d: a compute copy exactly for convolution parameters of low-precision plans", t);
    }
    cr_expect_leq(end, l->persistent_bytes);
}

/* persistent bytes do not depend on the batch; the arena and inputs do */
Test(cuda, device_layout_of_a_plan) {
    char err[512];
    Plan p2, p4, pb;
    tiny_plan("--imgsz 64 --batch 2", &p2);
    tiny_plan("--imgsz 64 --batch 4", &p4);
    tiny_plan("--imgsz 64 --batch 2 --precision bf16", &pb);
    CudaLayout l2, l4, lb;
    cr_assert(cuda_layout_build(&p2, &l2, err, sizeof err), "%s", err);
    cr_assert(cuda_layout_build(&p4, &l4, err, sizeof err), "%s", err);
    cr_assert(cuda_layout_build(&pb, &lb, err, sizeof err), "%s", err);
    check_layout(&p2, &l2);
    check_layout(&p4, &l4);
    check_layout(&pb, &lb);
    cr_expect_eq(l2.batch, 2);
    cr_expect_eq(l4.batch, 4);
    cr_expect_eq(l2.state_bytes, l4.state_bytes, "persistent state does not scale with the batch");
    cr_expect_gt(l4.arena_bytes, l2.arena_bytes);
    cr_expect_gt(l4.input_bytes, l2.input_bytes);
    cr_expect_gt(lb.state_bytes, l2.state_bytes, "bf16 plans keep a compute copy beside each fp32 weight");
    /* the planned-bytes check on the layout: the batch-2 plan at 1.5x its need fits batch 3, not 4 */
    CudaMemNeed n = {.arena = l2.arena_bytes, .state = l2.state_bytes, .inputs = l2.input_bytes, .batch = 2};
    uint64_t free_b = (uint64_t)(n.state + 3 * (n.arena + n.inputs) / 2);
    cr_expect_eq(cuda_mem_largest_batch(&n, free_b), 3);
    cuda_layout_free(&l2);
    cuda_layout_free(&l4);
    cuda_layout_free(&lb);
    plan_free(&p2);
    plan_free(&p4);
    plan_free(&pb);
}

/* ---- image choice, geometry, arguments (no GPU) ---- */

Test(cuda, cubin_or_ptx_choice) {
    const char *archs[] = {"sm_80", "sm_90"};
    char err[512] = "";
    int c = 7;
    cr_expect(cuda_choose_image(archs, 2, "sm_90", 90, &c, err, sizeof err), "%s", err);
    cr_expect_eq(c, 1, "sm_90 device, archs sm_80+sm_90 -> cubin sm_90");
    cr_expect(cuda_choose_image(archs, 2, "sm_90", 80, &c, err, sizeof err));
    cr_expect_eq(c, 0);
    /* sm_89 runs sm_80 code (same major version); the sm_90 PTX could not JIT there */
    cr_expect(cuda_choose_image(archs, 2, "sm_90", 89, &c, err, sizeof err), "%s", err);
    cr_expect_eq(c, 0, "sm_89 device -> the binary-compatible cubin sm_80");
    const char *only90[] = {"sm_90"};
    cr_expect(cuda_choose_image(only90, 1, "sm_90", 100, &c, err, sizeof err), "%s", err);
    cr_expect_eq(c, -1, "sm_100 device -> the PTX, JIT-compiled by the driver");
    cr_expect(cuda_choose_image(only90, 1, "sm_80", 86, &c, err, sizeof err), "%s", err);
    cr_expect_eq(c, -1, "sm_86 device, cubin sm_90 and PTX sm_80 -> PTX");
    cr_expect(!cuda_choose_image(archs, 2, "sm_90", 75, &c, err, sizeof err));
    cr_expect(strstr(err, "the plan was compiled for sm_80,sm_90 and this device is sm_75"), "%s", err);
    cr_expect(!cuda_choose_image(only90, 1, "sm_90", 89, &c, err, sizeof err));
    cr_expect(strstr(err, "compiled for sm_90") && strstr(err, "sm_89") && strstr(err, "--arch sm_89"), "%s", err);
    cr_expect(!cuda_choose_image(only90, 1, NULL, 80, &c, err, sizeof err));
    cr_expect(strstr(err, "no PTX"), "%s", err);
}

Test(cuda, launch_geometry_matches_the_skeletons) {
    KLaunch ln = {.kernel = 0, .n = 2, .c = 3, .inner = 1000};
    CudaGeom g = cuda_launch_geometry(KS_MAP, &ln, 1, 132);
    cr_expect_eq(g.block, 256, "YK_BLOCK");
    cr_expect_eq(g.grid, 24, "6000 elements: 24 blocks of 256");
    ln.n = 64, ln.c = 256, ln.inner = 160 * 160;
    g = cuda_launch_geometry(KS_MAP, &ln, 1, 132);
    cr_expect_eq(g.grid, 132 * 32, "grid-stride: capped at 32 blocks per multiprocessor");
    ln.n = 0;
    cr_expect_eq(cuda_launch_geometry(KS_MAP, &ln, 1, 132).grid, 1, "an empty extent still launches a valid grid");
    /* channels last: a stride of whole pixels, so a thread's channel never changes */
    ln = (KLaunch){.n = 64 * 80 * 80, .c = 144, .inner = 1};
    g = cuda_launch_geometry(KS_MAP, &ln, 1, 132);
    cr_expect(g.grid == 132 * 32 / 9 * 9 && (int64_t)g.grid * 256 % 144 == 0, "144 channels: %u blocks of 256 threads", g.grid);
    ln.c = 64;
    cr_expect_eq(cuda_launch_geometry(KS_MAP, &ln, 1, 132).grid, 132 * 32, "64 channels divide a block already");
    ln = (KLaunch){.n = 16, .c = 48, .inner = 400};
    g = cuda_launch_geometry(KS_CHANNEL_REDUCE, &ln, 1, 132);
    cr_expect(g.grid == 48 && g.grid_y == 1 && g.block == 256, "6400 elements a channel: one block each: %u x %u x %u", g.grid, g.grid_y, g.block);
    /* YOLOv8's first layer at batch 64: 16 channels of 64 x 320 x 320, each over 400 blocks of 16384 elements */
    ln = (KLaunch){.n = 64, .c = 16, .inner = 320 * 320};
    g = cuda_launch_geometry(KS_CHANNEL_REDUCE, &ln, 1, 132);
    cr_expect(g.grid == 16 && g.grid_y == 400, "a channel split over blocks: %u x %u", g.grid, g.grid_y);
    cr_expect_eq(cuda_reduce_part_bytes(&ln), 16 * 400 * 4 * 8 + 16 * 4 * 8, "sums and variables per channel");
    cr_expect_eq(cuda_launch_geometry(KS_CHANNEL_REDUCE, &ln, 1, 8).grid_y, 400, "the split depends on the shape alone, not the device");
    ln.n = 64 * 64;
    cr_expect_eq(cuda_reduce_split(&ln, 1), CUDA_REDUCE_MAX_SPLIT, "at most %d blocks a channel", CUDA_REDUCE_MAX_SPLIT);
    ln.n = 1, ln.inner = 16385;
    cr_expect_eq(cuda_reduce_split(&ln, 1), 2, "one element over a chunk is a second block");
    ln = (KLaunch){.outer = 10, .len = 100};
    cr_expect_eq(cuda_launch_geometry(KS_COPY, &ln, 1, 132).grid, 4, "1000 elements of a copy");
    /* channels last: a block reduces adjacent channels side by side, one per thread of a row */
    ln = (KLaunch){.n = 64 * 320 * 320, .c = 16, .inner = 1};
    g = cuda_launch_geometry(KS_CHANNEL_REDUCE, &ln, 1, 132);
    cr_expect_eq(cuda_reduce_lanes(&ln, 1), 16, "16 channels side by side");
    cr_expect(g.grid == 1 && g.grid_y == CUDA_REDUCE_MAX_SPLIT, "one group of 16 channels over the most blocks: %u x %u", g.grid, g.grid_y);
    cr_expect_eq(cuda_reduce_counters(&ln), 1, "a counter per group");
    cr_expect_eq(cuda_reduce_part_bytes(&ln), 16 * CUDA_REDUCE_MAX_SPLIT * 4 * 8 + 16 * 4 * 8, "sums and variables per channel");
    ln = (KLaunch){.n = 64 * 20 * 20, .c = 80, .inner = 1};
    g = cuda_launch_geometry(KS_CHANNEL_REDUCE, &ln, 1, 132);
    cr_expect(cuda_reduce_lanes(&ln, 1) == 16 && g.grid == 5, "80 classes: 5 groups of 16 (%lld lanes, %u groups)", (long long)cuda_reduce_lanes(&ln, 1), g.grid);
    cr_expect_eq(g.grid_y, (64 * 20 * 20 * 16 + CUDA_REDUCE_CHUNK - 1) / CUDA_REDUCE_CHUNK, "a chunk of the group's elements per block");
    ln.c = 256;
    cr_expect(cuda_reduce_lanes(&ln, 1) == 32 && cuda_launch_geometry(KS_CHANNEL_REDUCE, &ln, 1, 132).grid == 8, "at most a warp's width of lanes");
    /* V = 4 adjacent channels a thread: a row of lanes x 4 channels, as many rows a block as lanes allow */
    g = cuda_launch_geometry(KS_CHANNEL_REDUCE, &ln, 4, 132);
    cr_expect(cuda_reduce_lanes(&ln, 4) == 32 && g.grid == 2 && g.grid_y == 200, "256 channels, 4 a thread: two groups over 200 blocks (%u x %u)", g.grid, g.grid_y);
    cr_expect_eq(cuda_reduce_part_bytes(&ln), 256 * 200 * 4 * 8 + 256 * 4 * 8, "sized for the widest group's split");
    ln.c = 80;
    g = cuda_launch_geometry(KS_CHANNEL_REDUCE, &ln, 4, 132);
    cr_expect(cuda_reduce_lanes(&ln, 4) == 4 && g.grid == 5, "80 classes, 4 a thread: 5 groups of 4 x 4 (%u groups)", g.grid);
    cr_expect_eq(cuda_reduce_part_bytes(&ln), 80 * g.grid_y * 4 * 8 + 80 * 4 * 8, "sized for the group of either width");
    ln.c = 8, ln.n = 64 * 320 * 320;
    cr_expect(cuda_reduce_lanes(&ln, 4) == 2 && cuda_reduce_split(&ln, 4) == CUDA_REDUCE_MAX_SPLIT, "8 channels, 4 a thread: 2 lanes, the most blocks");
    ln.n = 64 * 20 * 20, ln.c = 96;
    cr_expect(cuda_reduce_lanes(&ln, 4) == 8 && cuda_reduce_split(&ln, 4) == (64 * 20 * 20 * 32 + CUDA_REDUCE_CHUNK - 1) / CUDA_REDUCE_CHUNK,
              "96 channels, 4 a thread: groups of 8 x 4, a chunk of the group's elements per block");
    cr_expect_eq(cuda_reduce_part_bytes(&ln), 96 * 50 * 4 * 8 + 96 * 4 * 8, "32-channel groups at every width: 50 blocks each");
    ln.c = 3;
    cr_expect_eq(cuda_reduce_lanes(&ln, 1), 1, "an odd channel count: one lane");
    ln = (KLaunch){.n = 16, .c = 48, .inner = 400};
    cr_expect_eq(cuda_reduce_lanes(&ln, 1), 1, "NCHW: each channel's plane is contiguous already");
    ln = (KLaunch){.list_n = 7};
    g = cuda_launch_geometry(KS_LIST_NORM, &ln, 1, 132);
    cr_expect(g.grid == 7 && g.grid_y == CUDA_LIST_SPLIT && g.block == 256, "the gradient norm: a row of blocks per tensor: %u x %u", g.grid, g.grid_y);
    cr_expect_eq(cuda_reduce_part_bytes(&ln), (7 * CUDA_LIST_SPLIT + 7) * 8, "each block's sum, then each tensor's squared norm");
    cr_expect_eq(cuda_reduce_counters(&ln), 8, "a counter per tensor and one for the list");
    /* the loss: a block per GT row, per-anchor phases in full blocks, the finish one block */
    YlDetLossArgs la = {.batch = 64, .max_boxes = 20, .anchors = 8400, .chunks = (8400 + YL_DL_CHUNK - 1) / YL_DL_CHUNK};
    g = cuda_detloss_geometry(&la, LK_DETLOSS_ASSIGN, 132);
    cr_expect(g.block == CUDA_DETLOSS_ROW_BLOCK && g.grid == 1280, "1280 GT rows: %u blocks of %u", g.grid, g.block);
    la.max_boxes = 300;
    g = cuda_detloss_geometry(&la, LK_DETLOSS_NORMALISE, 132);
    cr_expect(g.block == CUDA_DETLOSS_ROW_BLOCK && g.grid == 132 * 32, "19200 GT rows: %u blocks, each taking every %u-th row", g.grid, g.grid);
    g = cuda_detloss_geometry(&la, LK_DETLOSS_TERMS, 132);
    cr_expect(g.block == 256 && g.grid == 2100, "537600 anchors: %u blocks of %u", g.grid, g.block);
    g = cuda_detloss_geometry(&la, LK_DETLOSS_REDUCE, 132);
    cr_expect(g.block == 32 && g.grid == 66, "2112 chunks in warps: %u blocks of %u", g.grid, g.block);
    g = cuda_detloss_geometry(&la, LK_DETLOSS_FINISH, 132);
    cr_expect(g.block == 256 && g.grid == 1, "the one-block finish");
}

Test(cuda, launch_arguments_carry_device_pointers) {
    CuDevicePtr ptr[6] = {0, 0x1000, 0x2000, 0x3000, 0x4000, 0x5000};
    KLaunch ln = {.kernel = 0, .n_args = 3, .args = {5, 1, 3}, .n = 2, .c = 4, .inner = 9, .outer = 7, .len = 8, .src_stride = 11, .src_off = 12,
                  .dst_stride = 13, .dst_off = 14};
    Kernel map = {.skel = KS_MAP};
    YkArgs a = cuda_launch_args(&map, &ln, ptr, 0x9000, 0xa000);
    cr_expect(a.t[0] == (void *)(uintptr_t)0x5000 && a.t[1] == (void *)(uintptr_t)0x1000 && a.t[2] == (void *)(uintptr_t)0x3000);
    cr_expect_null(a.t[3], "unused slots stay NULL");
    cr_expect(a.n == 2 && a.c == 4 && a.inner == 9 && a.outer == 7 && a.len == 8 && a.src_stride == 11 && a.src_off == 12 && a.dst_stride == 13 &&
              a.dst_off == 14);
    cr_expect(a.list == NULL && a.list_len == NULL && a.list_n == 0, "no list without a LIST_NORM launch");
    ln.list_first = 3, ln.list_n = 5;
    a = cuda_launch_args(&map, &ln, ptr, 0x9000, 0xa000);
    cr_expect_eq((uintptr_t)a.list, 0x9000 + 3 * 8, "the launch's part of the pointer table");
    cr_expect_eq((uintptr_t)a.list_len, 0xa000 + 3 * 8);
    cr_expect_eq(a.list_n, 5);
    cr_expect_eq(a.vec, 1, "a map moves no units");
}

/* A copy's unit: the widest power of two up to 16 bytes dividing its run, strides, offsets and addresses. */
Test(cuda, copy_units_divide_every_run_stride_offset_and_address) {
    Kernel k = {.skel = KS_COPY, .buf_dtype = {DT_BF16, DT_BF16}};
    /* a channels-last concat: 16 channels of a 48-channel pixel, at channel 32 */
    KLaunch ln = {.outer = 64 * 160 * 160, .len = 16, .src_stride = 16, .src_off = 0, .dst_stride = 48, .dst_off = 32};
    cr_expect_eq(cuda_copy_vec(&k, &ln, 0x10000, 0x20000), 8, "8 bf16 channels in 16 bytes");
    cr_expect_eq(cuda_launch_geometry(KS_COPY, &ln, 8, 132).grid, 132 * 32, "a big copy still fills the device");
    ln.outer = 10, ln.len = 16;
    cr_expect_eq(cuda_launch_geometry(KS_COPY, &ln, 8, 132).grid, 1, "160 elements in 20 units: one block");
    cr_expect_eq(cuda_copy_vec(&k, &ln, 0x10008, 0x20000), 4, "an 8-byte aligned source: 4 elements");
    cr_expect_eq(cuda_copy_vec(&k, &ln, 0x10000, 0x20002), 1, "a destination at an odd element");
    ln.dst_off = 34;
    cr_expect_eq(cuda_copy_vec(&k, &ln, 0x10000, 0x20000), 2, "an offset of 34 elements");
    ln.dst_off = 32, ln.dst_stride = 40, ln.len = 12;
    cr_expect_eq(cuda_copy_vec(&k, &ln, 0x10000, 0x20000), 4, "a run of 12");
    ln.src_stride = 17;
    cr_expect_eq(cuda_copy_vec(&k, &ln, 0x10000, 0x20000), 1, "an odd source stride");
    k.buf_dtype[0] = k.buf_dtype[1] = DT_F32;
    ln = (KLaunch){.outer = 3, .len = 64, .src_stride = 64, .dst_stride = 128, .dst_off = 64};
    cr_expect_eq(cuda_copy_vec(&k, &ln, 0x10000, 0x20000), 4, "fp32: 4 elements in 16 bytes");
    k.buf_dtype[1] = DT_BF16;
    cr_expect_eq(cuda_copy_vec(&k, &ln, 0x10000, 0x20000), 1, "a converting copy moves elements");
    k.skel = KS_MAP;
    cr_expect_eq(cuda_copy_vec(&k, &ln, 0x10000, 0x20000), 1, "not a copy");
}

/* A map's elements a thread: 16 bytes of its widest element buffer, where the shape and addresses allow. */
Test(cuda, map_units_need_the_shape_and_every_element_address) {
    KInstr code[3] = {{.op = KI_LOAD, .buf = 0, .at = KA_ELEM}, {.op = KI_LOAD, .buf = 1, .at = KA_CHAN}, {.op = KI_STORE, .a = 0, .buf = 2, .at = KA_ELEM}};
    Kernel k = {.skel = KS_MAP, .code = code, .n_code = 3, .n_phases = 1, .body = {{0, 3}}, .n_bufs = 3, .buf_dtype = {DT_BF16, DT_F32, DT_BF16}};
    KLaunch ln = {.n_args = 3, .args = {0, 1, 2}, .n = 64 * 80 * 80, .c = 64, .inner = 1};
    CuDevicePtr ptr[3] = {0x10000, 0x20004, 0x30000};
    cr_expect_eq(kernel_elem_vec(&k), 8, "16-bit element buffers: 8 a thread (the fp32 one is per channel)");
    cr_expect_eq(cuda_elem_vec(&k, &ln, ptr), 8, "64 channels last, 16-byte aligned elements; a channel vector at any address");
    CudaGeom g = cuda_launch_geometry(KS_MAP, &ln, 8, 132);
    cr_expect(g.grid == 132 * 32 && (int64_t)g.grid * 256 * 8 % 64 == 0, "a stride of whole pixels: %u blocks", g.grid);
    ln.c = 144;
    g = cuda_launch_geometry(KS_MAP, &ln, 8, 132);
    cr_expect((int64_t)g.grid * 256 * 8 % 144 == 0, "144 channels in units of 8: still whole pixels (%u blocks)", g.grid);
    ln.c = 36;
    cr_expect_eq(cuda_elem_vec(&k, &ln, ptr), 1, "36 channels are no multiple of 8");
    ln = (KLaunch){.n_args = 3, .args = {0, 1, 2}, .n = 64, .c = 16, .inner = 20 * 20};
    cr_expect_eq(cuda_elem_vec(&k, &ln, ptr), 8, "NCHW: 8 of a plane of 400");
    ln.inner = 10 * 10;
    cr_expect_eq(cuda_elem_vec(&k, &ln, ptr), 1, "a plane of 100");
    ln.inner = 400, ptr[2] = 0x30008;
    cr_expect_eq(cuda_elem_vec(&k, &ln, ptr), 1, "an output 8 bytes off a 16-byte boundary");
    k.buf_dtype[2] = DT_F32, ptr[2] = 0x30000;
    cr_expect(kernel_elem_vec(&k) == 4 && cuda_elem_vec(&k, &ln, ptr) == 4, "an fp32 element buffer: 4 a thread");
    /* a view's rows start its base's row apart: units only where that stride keeps them aligned */
    k.buf_strided[0] = true;
    ln.bs[0] = 3 * 16 * 400;
    cr_expect(kernel_elem_vec(&k) == 4 && cuda_elem_vec(&k, &ln, ptr) == 4, "a view inside 48 channels of 400-pixel planes");
    ln = (KLaunch){.n_args = 3, .args = {0, 1, 2}, .n = 64 * 80 * 80, .c = 64, .inner = 1, .bs = {96}};
    cr_expect_eq(cuda_elem_vec(&k, &ln, ptr), 4, "channels last: 64 channels of 96-channel pixels");
    ln.bs[0] = 66;
    cr_expect_eq(cuda_elem_vec(&k, &ln, ptr), 1, "pixels 66 elements apart are no multiple of 4");
    k.buf_strided[0] = false, code[1].op = KI_STORE;
    cr_expect_eq(kernel_elem_vec(&k), 1, "a per-channel store");
    /* a reduction's sums are per channel: V adjacent channels a thread, channels last only */
    KInstr sum[2] = {{.op = KI_LOAD, .buf = 0, .at = KA_ELEM}, {.op = KI_ACCUM, .a = 0, .b = 0}};
    Kernel r = {.skel = KS_CHANNEL_REDUCE, .code = sum, .n_code = 2, .n_phases = 1, .body = {{0, 2}}, .n_bufs = 1, .buf_dtype = {DT_BF16}};
    ln = (KLaunch){.n_args = 1, .args = {0}, .n = 64 * 80 * 80, .c = 64, .inner = 1};
    cr_expect(kernel_elem_vec(&r) == 4 && cuda_elem_vec(&r, &ln, ptr) == 4, "a channels-last sum: 4 channels a thread, 8 bytes of each buffer");
    cr_expect_leq(kernel_elem_vec(&r), CUDA_REDUCE_MAX_VEC, "the part is sized for the widest");
    r.buf_dtype[0] = DT_F32;
    cr_expect_eq(kernel_elem_vec(&r), 2, "an fp32 sum: 2 channels a thread");
    r.buf_dtype[0] = DT_BF16;
    ln = (KLaunch){.n_args = 1, .args = {0}, .n = 64, .c = 64, .inner = 80 * 80};
    cr_expect_eq(cuda_elem_vec(&r, &ln, ptr), 1, "an NCHW sum: one channel a thread");
    k.skel = KS_MAP, code[1] = (KInstr){.op = KI_ACCUM, .a = 0, .b = 0};
    cr_expect_eq(kernel_elem_vec(&k), 1, "a map's sum is not elementwise");
}

/* Maps and reductions count in 32 bits while every index they form, a
 * grid-stride step past the end included, stays below 2^31; past that they
 * take their 64-bit path, one element a thread. */
Test(cuda, launches_count_in_32_bits_where_every_index_fits) {
    KInstr code[2] = {{.op = KI_LOAD, .buf = 0, .at = KA_ELEM}, {.op = KI_STORE, .a = 0, .buf = 1, .at = KA_ELEM}};
    Kernel k = {.skel = KS_MAP, .code = code, .n_code = 2, .n_phases = 1, .body = {{0, 2}}, .n_bufs = 2, .buf_dtype = {DT_BF16, DT_BF16}};
    const int64_t most = INT32_MAX - CUDA_IDX32_SLACK;
    KLaunch ln = {.n_args = 2, .args = {0, 1}, .n = 1, .c = 1, .inner = most};
    CuDevicePtr ptr[2] = {0x10000, 0x20000};
    cr_expect(cuda_launch_idx32(&k, &ln) && cuda_launch_args(&k, &ln, ptr, 0, 0).idx32 == 1, "2^31 - 2^26 - 1 elements");
    cr_expect_eq(CUDA_IDX32_SLACK, 32 * 1024 * CUDA_BLOCK * 8, "the slack: 32 blocks of 8-element threads on 1024 multiprocessors");
    ln.inner = most + 1;
    cr_expect(!cuda_launch_idx32(&k, &ln) && cuda_launch_args(&k, &ln, ptr, 0, 0).idx32 == 0, "one more");
    /* the largest activation of YOLOv8x at 640, batch 64: 80 channels of 320 x 320 */
    ln = (KLaunch){.n_args = 2, .args = {0, 1}, .n = 64 * 320 * 320, .c = 80, .inner = 1};
    cr_expect(cuda_launch_idx32(&k, &ln) && cuda_elem_vec(&k, &ln, ptr) == 8, "YOLOv8x's stem output at batch 64: 32 bits, 8 channels a thread");
    ln.n *= 4;
    cr_expect(!cuda_launch_idx32(&k, &ln) && cuda_elem_vec(&k, &ln, ptr) == 1, "at 1280 it counts in 64 bits, one element a thread");
    /* a view's rows are its base's apart: its last row ends past n * c * inner */
    k.buf_strided[1] = true;
    ln = (KLaunch){.n_args = 2, .args = {0, 1}, .n = 1 << 20, .c = 64, .inner = 1, .bs = {0, 64}};
    cr_expect(cuda_launch_idx32(&k, &ln), "a view of 64 channels of 64-channel pixels");
    ln.bs[1] = 2048;
    cr_expect(!cuda_launch_idx32(&k, &ln), "64 channels of 2048-channel pixels reach 2^31");
    k.skel = KS_COPY;
    ln.bs[1] = 64;
    cr_expect(!cuda_launch_idx32(&k, &ln), "copies have one path");
}

/* ---- convolution keys (no GPU) ---- */

typedef struct ConvCase {
    int64_t n, ci, h, w, co;
    int k, stride, pad, groups;
    bool bias;
} ConvCase;

typedef struct ConvGraph {
    Arena arena;
    Graph g;
    int fwd, dgrad, wgrad;  /* op ids */
} ConvGraph;

/* t through a layout reshape into channels last (cl), else t */
static int into_layout(Graph *g, int t, bool cl) {
    if (!cl) return t;
    OpAttrs a = {.shape = g->tensors[t].shape, .channels_last = true};
    int o = graph_add_op(g, OP_RESHAPE, &t, 1, &a, 1, 0, "layout");
    cr_assert_geq(o, 0, "%s", g->err);
    return g->ops[o].out[0];
}

/* conv2d(x, w[, b]) and its dgrad and wgrad from an input dy; cl: x, w and
 * dy enter channels last, so the convolutions run NHWC / KRSC */
static void conv_graph(ConvGraph *cg, const ConvCase *c, bool cl) {
    arena_init(&cg->arena, 0);
    Graph *g = &cg->g;
    graph_init(g, &cg->arena);
    int x = into_layout(g, graph_add_input(g, "x", shape4(c->n, c->ci, c->h, c->w), DT_F32), cl);
    int w = into_layout(g, graph_add_state(g, TK_PARAM, "w", shape4(c->co, c->ci / c->groups, c->k, c->k), DT_F32), cl);
    int in[3] = {x, w, c->bias ? graph_add_state(g, TK_PARAM, "b", shape1(c->co), DT_F32) : -1};
    OpAttrs a = {.kernel = {c->k, c->k}, .stride = {c->stride, c->stride}, .pad = {c->pad, c->pad, c->pad, c->pad}, .dilation = {1, 1}, .groups = c->groups};
    cg->fwd = graph_add_op(g, OP_CONV2D, in, c->bias ? 3 : 2, &a, 1, 0, "conv");
    cr_assert_geq(cg->fwd, 0, "%s", g->err);
    int dy = into_layout(g, graph_add_input(g, "dy", g->tensors[g->ops[cg->fwd].out[0]].shape, DT_F32), cl);
    OpAttrs ad = a, aw = a;
    ad.shape = g->tensors[x].shape;
    aw.shape = g->tensors[w].shape;
    cg->dgrad = graph_add_op(g, OP_CONV2D_DGRAD, (int[]){dy, w}, 2, &ad, 1, 0, "conv.dgrad");
    cg->wgrad = graph_add_op(g, OP_CONV2D_WGRAD, (int[]){dy, x}, 2, &aw, 1, 0, "conv.wgrad");
    cr_assert(cg->dgrad >= 0 && cg->wgrad >= 0, "%s", g->err);
}

/* x as a zero-copy view: channels [8, 24) of a 40-channel buffer */
static ConvKey key_of_view(const ConvCase *c) {
    ConvGraph cg;
    conv_graph(&cg, c, false);
    bool persistent[16] = {0};
    memplan_mark_persistent(&cg.g, persistent);
    const Shape *xs = &cg.g.tensors[cg.g.ops[cg.fwd].in[0]].shape;
    int wide = graph_add_input(&cg.g, "wide", shape4(xs->d[0], 40, xs->d[2], xs->d[3]), DT_F32);
    int base[16], x = cg.g.ops[cg.fwd].in[0];
    int64_t chan[16] = {0};
    for (int t = 0; t < 16; t++) base[t] = t;
    base[x] = wide, chan[x] = 8;
    Views v = {base, chan, 1};
    ConvKey k;
    char err[512];
    cr_assert(conv_key_from_op(&cg.g, &cg.g.ops[cg.fwd], PREC_FP32, persistent, &v, &k, err, sizeof err), "%s", err);
    arena_free(&cg.arena);
    return k;
}

static ConvKey key_of_layout(const ConvCase *c, int which, Precision p, bool cl) {
    ConvGraph cg;
    conv_graph(&cg, c, cl);
    bool persistent[16] = {0};
    cr_assert_lt(cg.g.n_tensors, 16);
    memplan_mark_persistent(&cg.g, persistent);
    ConvKey k;
    char err[512];
    int op = which == 0 ? cg.fwd : which == 1 ? cg.dgrad : cg.wgrad;
    cr_assert(conv_key_from_op(&cg.g, &cg.g.ops[op], p, persistent, NULL, &k, err, sizeof err), "%s", err);
    arena_free(&cg.arena);
    return k;
}

static ConvKey key_of(const ConvCase *c, int which, Precision p) { return key_of_layout(c, which, p, false); }

Test(cuda, conv_plan_keys) {
    const ConvCase base = {2, 16, 32, 32, 32, 3, 1, 1, 1, false};
    ConvKey a = key_of(&base, 0, PREC_FP32), b = key_of(&base, 0, PREC_FP32);
    cr_expect(conv_key_equal(&a, &b) && conv_key_hash(&a) == conv_key_hash(&b), "equal convolutions share a key");
    ConvCase bias = base;
    bias.bias = true;
    ConvKey kb = key_of(&bias, 0, PREC_FP32);
    cr_expect(conv_key_equal(&a, &kb), "the bias is a separate step: the convolution's key is the same");
    char what[512];
    conv_key_describe(&a, what, sizeof what);
    cr_expect(strstr(what, "forward x[2,16,32,32] w[32,16,3,3] y[2,32,32,32] stride 1x1 pad 1,1,1,1"), "%s", what);
    ConvCase changed[] = {
        {3, 16, 32, 32, 32, 3, 1, 1, 1, false}, {2, 32, 32, 32, 32, 3, 1, 1, 1, false}, {2, 16, 16, 32, 32, 3, 1, 1, 1, false},
        {2, 16, 32, 16, 32, 3, 1, 1, 1, false}, {2, 16, 32, 32, 64, 3, 1, 1, 1, false}, {2, 16, 32, 32, 32, 1, 1, 0, 1, false},
        {2, 16, 32, 32, 32, 3, 2, 1, 1, false}, {2, 16, 32, 32, 32, 3, 1, 2, 1, false}, {2, 16, 32, 32, 32, 3, 1, 1, 16, false},
        {2, 16, 32, 32, 32, 3, 1, 1, 2, false},
    };
    for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++) {
        ConvKey k = key_of(&changed[i], 0, PREC_FP32);
        cr_expect(!conv_key_equal(&a, &k) && conv_key_hash(&a) != conv_key_hash(&k), "case %zu must have its own key", i);
    }
    /* a view is read with its base's image stride, at an address its
     * channel offset aligns (8 channels x 32 x 32 x 4 bytes: 16-byte aligned) */
    ConvKey v = key_of_view(&base);
    cr_expect(!conv_key_equal(&a, &v) && v.x_bs == 40 * 32 * 32 && v.y_bs == 0 && v.x_align == 16, "view: stride %lld align %lld", (long long)v.x_bs, (long long)v.x_align);
    ConvKey d = key_of(&base, 1, PREC_FP32), w = key_of(&base, 2, PREC_FP32), h = key_of(&base, 0, PREC_BF16);
    cr_expect(!conv_key_equal(&a, &d) && !conv_key_equal(&a, &w) && !conv_key_equal(&d, &w), "each direction has its own plan");
    cr_expect(!conv_key_equal(&a, &h) && conv_key_hash(&a) != conv_key_hash(&h), "the storage type is part of the key");
    cr_expect(d.n == a.n && d.ci == a.ci && d.h == a.h && d.co == a.co && d.ho == a.ho, "dgrad describes the same x, w and y");
    /* each single field of the key changes it */
    ConvKey m;
    int64_t *fields[] = {&m.n, &m.ci, &m.h, &m.w, &m.co, &m.ho, &m.wo, &m.kh, &m.kw, &m.groups, &m.stride[0], &m.stride[1], &m.dilation[0],
                         &m.dilation[1], &m.pre_pad[0], &m.pre_pad[1], &m.post_pad[0], &m.post_pad[1], &m.x_bs, &m.y_bs, &m.x_align, &m.y_align,
                         &m.channels_last};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        m = a;
        ++*fields[i];
        cr_expect(!conv_key_equal(&a, &m) && conv_key_hash(&a) != conv_key_hash(&m), "field %zu", i);
    }
    int *ifields[] = {&m.dir, &m.accumulate, &m.x_type, &m.w_type, &m.y_type};
    for (size_t i = 0; i < sizeof ifields / sizeof ifields[0]; i++) {
        m = a;
        ++*ifields[i];
        cr_expect(!conv_key_equal(&a, &m) && conv_key_hash(&a) != conv_key_hash(&m), "int field %zu", i);
    }
    ConvKey bk = conv_bias_key(&a);
    cr_expect(bk.accumulate == 1 && bk.ci == 1 && bk.kh == 1 && bk.kw == 1 && bk.h == a.ho && bk.w == a.wo && bk.co == a.co && bk.groups == 1,
              "the bias step: ones[N,1,Ho,Wo] (*) b[Co,1,1,1] added to y");
    /* bf16 plans read weights through their bf16 compute copies */
    cr_expect(h.y_type != a.y_type && h.w_type == h.y_type, "bf16: the activation y and the weight copy are bf16");
    /* channels last: the same convolution in every direction under its own key, which names the layout; the bias step keeps it */
    for (int which = 0; which < 3; which++) {
        ConvKey kn = key_of(&base, which, PREC_FP32), kc = key_of_layout(&base, which, PREC_FP32, true);
        cr_expect(kc.channels_last == 1 && kn.channels_last == 0, "direction %d", which);
        cr_expect(!conv_key_equal(&kn, &kc) && conv_key_hash(&kn) != conv_key_hash(&kc), "direction %d: a layout of its own", which);
        cr_expect(kc.n == kn.n && kc.ci == kn.ci && kc.h == kn.h && kc.w == kn.w && kc.co == kn.co && kc.ho == kn.ho && kc.wo == kn.wo && kc.kh == kn.kh,
                  "direction %d: dimensions in NCHW order either way", which);
        conv_key_describe(&kc, what, sizeof what);
        cr_expect(strstr(what, " NHWC x[2,16,32,32]") != NULL, "%s", what);
        cr_expect_eq(conv_bias_key(&kc).channels_last, 1);
    }
}


/* ---- on a GPU ---- */


static float from_bf16(uint16_t v) {
    float f;
    cuda_storage_to_f32(DT_BF16, &v, &f, 1);
    return f;
}

/* Every generated launch of the tiny model once on fresh random inputs, on
 * the GPU and through the CPU target's kernel of the same launch. fp32 plans:
 * relative tolerance 1e-5, absolute below 0.1 (the GPU computes in fp32 with
 * fp64 sums, the CPU in double). bf16 plans: inputs rounded to bf16 for both sides, outputs
 * within 1e-2 relative (one bf16 rounding is 2^-9). */
/* Elements a launch may touch from t's address: a zero-copy view steps its
 * base's row stride, so its last row ends (rows - 1) * stride further on. */
static int64_t span_of(const Plan *p, int t) {
    int64_t rows, row, stride;
    views_geometry(&p->g, &p->fusion.views, t, &rows, &row, &stride);
    return cuda_view_span(rows, row, stride);
}

static void kernels_vs_cpu(const char *precision, const char *layout, double tol) {
    CudaDevice d;
    open_gpu_or_skip(&d);
    char extra[256], err[1024];
    Plan pc, pg;
    snprintf(extra, sizeof extra, "--imgsz 64 --batch 2 --precision %s --layout %s", precision, layout);
    tiny_plans_cpu_cuda(extra, extra, &pc, &pg);
    GenCpu gc;
    CudaKernels ck;
    cr_assert(gen_cpu_open(&gc, &pc, err, sizeof err), "%s", err);
    cr_assert(cuda_kernels_open(&ck, &d, &pg, err, sizeof err), "%s", err);
    for (int k = 0; k < ck.kp.n_kernels; k++) cr_log_info("%s: %s", ck.kp.kernels[k].name, ck.image[k]);
    cr_assert_eq(gc.kp.n_launches, ck.kp.n_launches, "both targets lower the same graph");
    const Graph *g = &pg.g;
    int n = g->n_tensors;
    cr_assert_eq(pc.g.n_tensors, n);
    /* each tensor's device storage type: from the CUDA kernels' slots (gradient lists are fp32) */
    DType *dt = malloc(sizeof *dt * (size_t)n);
    for (int t = 0; t < n; t++) dt[t] = g->tensors[t].dtype == DT_I64 ? DT_I64 : DT_F32;
    for (int i = 0; i < ck.kp.n_launches; i++) {
        const KLaunch *ln = &ck.kp.launches[i];
        if (ln->kernel < 0) continue;
        for (int s = 0; s < ln->n_args; s++)
            if (dt[ln->args[s]] != DT_I64) dt[ln->args[s]] = ck.kp.kernels[ln->kernel].buf_dtype[s];
    }
    void **host = calloc((size_t)n, sizeof *host);
    CuDevicePtr *dev = calloc((size_t)n, sizeof *dev);
    unsigned char *stage = NULL;
    size_t stage_cap = 0;
    for (int t = 0; t < n; t++) {
        int64_t numel = span_of(&pg, t);
        host[t] = calloc((size_t)numel + 1, 8);
        cr_assert(dt[t] != DT_F16, "fp16 storage is not exercised here");
        cr_assert(CUDA_CALL(&d.L, cuMemAlloc, (&dev[t], (size_t)(numel + 1) * dtype_size(dt[t])), "allocating a test tensor", err, sizeof err), "%s", err);
        if ((size_t)(numel + 1) * 8 > stage_cap) stage_cap = (size_t)(numel + 1) * 8;
    }
    stage = malloc(stage_cap);
    cr_assert(cuda_kernels_bind_tables(&ck, &d, dev, err, sizeof err), "%s", err);
    int *stamp = calloc((size_t)n, sizeof *stamp);
    double worst_all = 0;
    int compared = 0;
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < ck.kp.n_launches; i++) {
        const KLaunch *lg = &ck.kp.launches[i], *lc = &gc.kp.launches[i];
        if (lg->kernel < 0) continue;
        const Kernel *kg = &ck.kp.kernels[lg->kernel];
        cr_assert(lc->kernel >= 0 && strcmp(gc.kp.kernels[lc->kernel].name, kg->name) == 0, "launch %d: CPU %s vs CUDA %s", i,
                  lc->kernel >= 0 ? gc.kp.kernels[lc->kernel].name : "a library op", kg->name);
        /* fresh inputs for every tensor the launch touches */
        int touched[KIR_MAX_BUFS + 4096], nt = 0;
        const int rows = kernel_n_rows(&ck.kp, lg);
        for (int r = 0; r < rows; r++)
            for (int s = 0; s < lg->n_args && nt < (int)(sizeof touched / sizeof touched[0]); s++) touched[nt++] = kernel_row_args(&ck.kp, lg, r)[s];
        for (int j = 0; !kernel_is_multi(&ck.kp, lg) && j < lg->list_n && nt < (int)(sizeof touched / sizeof touched[0]); j++) touched[nt++] = ck.kp.list[lg->list_first + j];
        for (int j = 0; j < nt; j++) {
            int t = touched[j];
            if (stamp[t] == i + 1) continue;
            stamp[t] = i + 1;
            int64_t numel = span_of(&pg, t);
            TensorKind kind = g->tensors[t].kind;
            if (dt[t] == DT_I64) {
                for (int64_t e = 0; e < numel; e++) ((int64_t *)host[t])[e] = (int64_t)(rng_next(&seed) % 7);
            } else {
                /* optimizer state and BN buffers (moments, variances) stay positive */
                bool positive = kind == TK_OPTIM || kind == TK_BUFFER;
                for (int64_t e = 0; e < numel; e++) {
                    float v = rng_uniform(&seed, positive ? 0.1f : -1.0f, 1.0f);
                    ((float *)host[t])[e] = dt[t] == DT_BF16 ? bf16_round(v) : v;
                }
            }
            cuda_f32_to_storage(dt[t], host[t], stage, numel);
            cr_assert(cuda_copy_to_device(&d, dev[t], stage, (size_t)numel * dtype_size(dt[t]), "uploading inputs", err, sizeof err), "%s", err);
        }
        gen_cpu_launch(&gc, lc, kernel_all_rows(&gc.kp, lc), host);
        cr_assert(cuda_kernels_launch(&ck, &d, lg, kernel_all_rows(&ck.kp, lg), dev, d.main, err, sizeof err), "%s", err);
        cr_assert(CUDA_CALL(&d.L, cuStreamSynchronize, (d.main), "running a kernel", err, sizeof err), "launch %d (%s): %s", i, kg->name, err);
        double worst = 0;
        for (int rs = 0; rs < rows * lg->n_args; rs++) {
            const int s = rs % lg->n_args, t = kernel_row_args(&ck.kp, lg, rs / lg->n_args)[s];
            if (!kg->buf_written[s]) continue;
            int64_t numel = span_of(&pg, t);
            cr_assert(cuda_copy_to_host(&d, stage, dev[t], (size_t)numel * dtype_size(dt[t]), "downloading outputs", err, sizeof err), "%s", err);
            for (int64_t e = 0; e < numel; e++) {
                double gv, cv;
                if (dt[t] == DT_I64) gv = (double)((int64_t *)stage)[e], cv = (double)((int64_t *)host[t])[e];
                else if (dt[t] == DT_BF16) gv = from_bf16(((uint16_t *)stage)[e]), cv = ((float *)host[t])[e];
                else gv = ((float *)stage)[e], cv = ((float *)host[t])[e];
                /* the CUDA map computes in fp32, the CPU target in double:
                 * an update that cancels to ~1e-3 (SGD with momentum) keeps
                 * fp32's absolute rounding (3e-8 seen in the host emulation,
                 * tests/test_cuda_emul.c), so values below 0.1 compare
                 * absolutely at tol * 0.1 */
                double r = isfinite(gv) && isfinite(cv) ? fabs(gv - cv) / fmax(fabs(cv), 0.1) : rel_diff(gv, cv);
                if (r > worst) worst = r;
                if (r > tol) cr_log_error("launch %d %s slot %d tensor %d element %lld: gpu %.9g cpu %.9g", i, kg->name, s, t, (long long)e, gv, cv);
                if (r > tol) break;
            }
            compared++;
        }
        cr_log_info("launch %d %s (%s): worst relative difference %.3g", i, kg->name, kernel_skel_name(kg->skel), worst);
        cr_expect_leq(worst, tol, "launch %d (%s, %s): GPU and CPU differ by %.3g", i, kg->name, kernel_skel_name(kg->skel), worst);
        if (worst > worst_all) worst_all = worst;
    }
    cr_log_info("%s: %d outputs of %d launches compared; worst relative difference %.3g", precision, compared, ck.kp.n_launches, worst_all);
    cr_expect_gt(compared, 0);
    for (int t = 0; t < n; t++) {
        (void)d.L.cuMemFree(dev[t]);
        free(host[t]);
    }
    free(stage), free(stamp), free(host), free(dev), free(dt);
    cuda_kernels_close(&ck, &d);
    gen_cpu_close(&gc);
    plan_free(&pc);
    plan_free(&pg);
    cuda_device_close(&d);
}

Test(cuda, generated_kernels_match_the_cpu_fp32) { kernels_vs_cpu("fp32", "nchw", 1e-5); }
Test(cuda, generated_kernels_match_the_cpu_bf16) { kernels_vs_cpu("bf16", "nchw", 1e-2); }
/* channels last: map kernels over rows of channels, BN statistics reduced
 * over n * h * w rows with channels C apart (only a real block runs these) */
Test(cuda, generated_kernels_match_the_cpu_bf16_nhwc) { kernels_vs_cpu("bf16", "nhwc", 1e-2); }

/* cuDNN forward, dgrad and wgrad against the reference kernels on random
 * tensors, NCHW and channels last (NHWC activations, KRSC weights: the
 * reference reads NCHW copies); fp32 (no TF32: the engines are filtered),
 * tolerance 1e-4 of the largest reference magnitude. */
Test(cuda, cudnn_conv_matches_the_reference) {
    CudaDevice d;
    open_gpu_or_skip(&d);
    const ConvCase cases[] = {
        {2, 8, 16, 16, 16, 3, 1, 1, 1, false},  /* 3x3 stride 1 */
        {2, 8, 16, 16, 16, 3, 2, 1, 1, true},   /* 3x3 stride 2 with a bias */
        {2, 16, 8, 8, 32, 1, 1, 0, 1, false},   /* 1x1 */
        {2, 16, 12, 12, 16, 3, 1, 1, 16, false}, /* depthwise */
    };
    char err[2048];
    for (size_t run = 0; run < 2 * sizeof cases / sizeof cases[0]; run++) {
        const size_t c = run % (sizeof cases / sizeof cases[0]);
        const bool cl = run >= sizeof cases / sizeof cases[0];
        ConvGraph cg;
        conv_graph(&cg, &cases[c], cl);
        Graph *g = &cg.g;
        CudnnConv cc;
        cr_assert(cudnn_conv_open(&cc, &d.L, d.main, err, sizeof err), "%s", err);
        cr_assert(cudnn_conv_prepare(&cc, g, NULL, PREC_FP32, err, sizeof err), "case %zu: %s", c, err);
        int64_t ws = cudnn_conv_workspace_bytes(&cc);
        CuDevicePtr wsp = 0;
        if (ws) cr_assert(CUDA_CALL(&d.L, cuMemAlloc, (&wsp, (size_t)ws), "allocating the workspace", err, sizeof err), "%s", err);
        cudnn_conv_bind(&cc, wsp, ws);
        /* host copies NCHW for the reference, the device's in each tensor's layout */
        void *host[16] = {0};
        CuDevicePtr dev[16] = {0};
        uint64_t seed = 12345 + c;
        float *stored = NULL;
        for (int t = 0; t < g->n_tensors; t++) {
            int64_t numel = shape_numel(&g->tensors[t].shape);
            host[t] = calloc((size_t)numel, sizeof(float));
            stored = realloc(stored, (size_t)numel * sizeof(float));
            cr_assert(host[t] && stored);
            for (int64_t e = 0; e < numel; e++) ((float *)host[t])[e] = rng_uniform(&seed, -1, 1);
            if (tensor_logical_order(&g->tensors[t])) memcpy(stored, host[t], (size_t)numel * 4);
            else ref_channels_last_copy(&g->tensors[t], stored, host[t], false);
            cr_assert(CUDA_CALL(&d.L, cuMemAlloc, (&dev[t], (size_t)numel * 4), "allocating", err, sizeof err), "%s", err);
            cr_assert(cuda_copy_to_device(&d, dev[t], stored, (size_t)numel * 4, "uploading", err, sizeof err), "%s", err);
        }
        const int ops[3] = {cg.fwd, cg.dgrad, cg.wgrad};
        for (int k = 0; k < 3; k++) {
            const Op *op = &g->ops[ops[k]];
            CuDevicePtr in[3];
            for (int i = 0; i < op->n_in; i++) in[i] = dev[op->in[i]];
            cr_assert(ref_kernel(op->kind)(g, op, host, err, sizeof err), "%s", err);
            ConvWiden widen;
            cr_assert(cudnn_conv_run(&cc, op, in, dev[op->out[0]], &widen, err, sizeof err), "case %zu %s: %s", c, op_def(op->kind)->name, err);
            cr_assert_eq(widen.n, 0, "an fp32 weight gradient is never staged");
            int t = op->out[0];
            int64_t numel = shape_numel(&g->tensors[t].shape);
            float *got = malloc((size_t)numel * 4);
            cr_assert(CUDA_CALL(&d.L, cuStreamSynchronize, (d.main), "running the convolution", err, sizeof err), "%s", err);
            cr_assert(cuda_copy_to_host(&d, got, dev[t], (size_t)numel * 4, "downloading", err, sizeof err), "%s", err);
            if (!tensor_logical_order(&g->tensors[t])) {
                float *nchw = malloc((size_t)numel * 4);
                cr_assert_not_null(nchw);
                ref_channels_last_copy(&g->tensors[t], got, nchw, true);
                free(got);
                got = nchw;
            }
            double max_ref = 0, max_diff = 0;
            for (int64_t e = 0; e < numel; e++) {
                max_ref = fmax(max_ref, fabs(((float *)host[t])[e]));
                max_diff = fmax(max_diff, fabs((double)got[e] - ((float *)host[t])[e]));
            }
            const char *lay = cl ? "NHWC" : "NCHW";
            cr_log_info("case %zu %s %s: max |cuDNN - reference| %.3g of max magnitude %.3g", c, lay, op_def(op->kind)->name, max_diff, max_ref);
            cr_expect(max_ref > 0 && max_diff <= 1e-4 * max_ref, "case %zu %s %s: differs by %.3g (max magnitude %.3g)", c, lay, op_def(op->kind)->name,
                      max_diff, max_ref);
            free(got);
        }
        cr_log_info("case %zu: %d execution plans, workspace %lld bytes", c, cc.n_plans, (long long)ws);
        cr_expect_eq(cc.n_plans, 3 + cases[c].bias, "one plan per direction (and the bias step)");
        for (int t = 0; t < g->n_tensors; t++) (void)d.L.cuMemFree(dev[t]), free(host[t]);
        free(stored);
        if (wsp) (void)d.L.cuMemFree(wsp);
        cudnn_conv_close(&cc);
        arena_free(&cg.arena);
    }
    cuda_device_close(&d);
}

int tu_gpu_lock_fd = -1;

/* The real check refuses before allocating; a plan that fits gets every tensor an address.
 * Free memory is read across calls: no other GPU test runs meanwhile. */
Test(cuda, device_memory_check_and_allocation) {
    CudaDevice d;
    open_gpu_or_skip(&d);
    tu_gpu_alone();
    char err[1024];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2", &p);
    size_t free0 = 0, free1 = 0, total = 0;
    cr_assert(CUDA_CALL(&d.L, cuMemGetInfo, (&free0, &total), "reading free memory", err, sizeof err), "%s", err);
    CudaMem m;
    cr_expect(!cuda_mem_alloc(&m, &d, &p, 1 << 20, (int64_t)1 << 50, NULL, err, sizeof err), "a petabyte reserve cannot fit");
    cr_expect(strstr(err, "the plan needs") && strstr(err, "are free") && strstr(err, "not even batch 1 fits"), "%s", err);
    cr_assert(CUDA_CALL(&d.L, cuMemGetInfo, (&free1, &total), "reading free memory", err, sizeof err), "%s", err);
    cr_expect_geq(free1 + (1 << 21), free0, "nothing was allocated by the refused plan");
    /* room for the state and 3/4 of the batch-2 activations: refused, batch 1 fits */
    CudaLayout l;
    cr_assert(cuda_layout_build(&p, &l, err, sizeof err), "%s", err);
    int64_t room = l.state_bytes + (l.arena_bytes + l.input_bytes) * 3 / 4, reserve = (int64_t)free1 - room;
    cuda_layout_free(&l);
    cr_assert_gt(reserve, 0);
    cr_expect(!cuda_mem_alloc(&m, &d, &p, 0, reserve, NULL, err, sizeof err), "only %lld bytes are left for the plan", (long long)room);
    cr_expect(strstr(err, "largest batch that fits is 1"), "%s", err);
    cr_log_info("%s", err);
    cr_assert(cuda_mem_alloc(&m, &d, &p, 1 << 20, 0, NULL, err, sizeof err), "%s", err);
    for (int t = 0; t < p.g.n_tensors; t++) {
        CuDevicePtr ptr = cuda_mem_ptr(&m, t);
        if (p.offset[t] == MEMPLAN_INTERNAL) cr_expect_eq(ptr, 0);
        else if (p.offset[t] >= 0) cr_expect(ptr >= m.arena && ptr < m.arena + (CuDevicePtr)p.arena_bytes);
        else cr_expect(ptr >= m.persistent && ptr < m.persistent + (CuDevicePtr)m.layout.persistent_bytes);
    }
    cr_expect(m.workspace != 0 && m.workspace_bytes >= (1 << 20));
    cr_assert(CUDA_CALL(&d.L, cuStreamSynchronize, (d.main), "zeroing persistent memory", err, sizeof err), "%s", err);
    cuda_mem_free(&m, &d);
    plan_free(&p);
    cuda_device_close(&d);
}
