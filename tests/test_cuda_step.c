/* tests/test_cuda_step.c — CudaStep: routes, host-op line, storage types and conversions, and the host
 * side on a host-memory stand-in for the driver (no GPU); on a GPU, tiny SGD steps against the CPU and
 * device memory against the plan (`SKIP: no CUDA device` without one). Owns no runtime code. */
#include <math.h>

#include "../compiler/kernel_ir.h"
#include "../compiler/lib_kernels.h"
#include "../passes/views.h"
#include "../runtime/cuda/cuda_detloss.h"
#include "../runtime/cuda/cuda_step.h"
#include "../runtime/ref_kernels.h"
#include "../runtime/synthetic.h"
#include "../runtime/train_step.h"
#include "../runtime/weights.h"
#include "test_cuda_host.h"
#include "test_gpu.h"

/* ---- routes and the host-op line (no GPU) ---- */

Test(cuda_step, launches_route_to_kernels_cudnn_or_the_host) {
    char err[512], line[1024];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2", &p);
    KProgram kp;
    cr_assert(kernel_lower(&p.g, &p.fusion, p.precision, &kp, err, sizeof err), "%s", err);
    CudaStep cs;
    memset(&cs, 0, sizeof cs);
    cuda_step_census(&cs, &p.g, &kp);
    int convs = 0, library = 0;
    for (int o = 0; o < p.g.n_ops; o++) {
        OpKind k = p.g.ops[o].kind;
        convs += k == OP_CONV2D || k == OP_CONV2D_DGRAD || k == OP_CONV2D_WGRAD;
    }
    for (int l = 0; l < kp.n_launches; l++) {
        const KLaunch *ln = &kp.launches[l];
        CudaRoute r = cuda_step_route(&p.g, ln);
        library += ln->kernel < 0;
        cr_expect_eq(r == CUDA_ROUTE_KERNEL, ln->kernel >= 0, "launch %d: generated launches run their kernel", l);
        cr_expect_eq(r == CUDA_ROUTE_LIBRARY, ln->kernel < 0 && lib_entry_of(p.g.ops[ln->op_lo].kind) >= 0, "launch %d: pooling and resize run library kernels", l);
        OpKind k = p.g.ops[ln->op_lo].kind;
        cr_expect_eq(r == CUDA_ROUTE_DETLOSS, k == OP_DETECT_LOSS || k == OP_DETECT_LOSS_BWD, "launch %d: the loss runs its phase kernels", l);
        if (r == CUDA_ROUTE_HOST) cr_expect_not_null(ref_kernel(p.g.ops[ln->op_lo].kind), "launch %d: a host op needs its reference kernel", l);
    }
    cr_expect_eq(cs.cudnn_ops, convs, "every convolution, its data and its weight gradient go to cuDNN");
    cr_expect_eq(cs.kernel_launches + cs.lib_launches + cs.cudnn_ops + cs.loss_ops + cs.host_ops, kp.n_launches);
    cr_expect_eq(cs.lib_launches + cs.cudnn_ops + cs.loss_ops + cs.host_ops, library);
    /* library kernels: the tiny model's SPPF (3 max pools) and their
     * gradients, its one upsample (run forward, and recomputed once for
     * backward by --recompute pointwise) and its gradient; the detection
     * loss and its backward on their phase kernels; nothing on the host */
    cr_expect_eq(cs.lib_launches, 9);
    cr_expect_eq(cs.loss_ops, 2);
    cr_expect_eq(cs.host_ops, 0, "no op runs on the host");
    cuda_step_describe(&cs, line, sizeof line);
    cr_log_info("%s", line);
    char want[256];
    snprintf(want, sizeof want,
             "no library op runs on the host: %d generated launches, 9 library kernel launches, %d cuDNN convolutions and 2 detection-loss ops each step",
             cs.kernel_launches, convs);
    cr_expect_str_eq(line, want);
    /* YOLOCC_CUDA_LIB_HOST=1 sends them back to the host, by count, ties in op order */
    cs.lib_host = true;
    cuda_step_census(&cs, &p.g, &kp);
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect(cs.lib_launches == 0 && cs.loss_ops == 0);
    cr_expect_str_eq(line, "11 library ops run on the host each step: maxpool2d x3, maxpool2d_bwd x3, resize_nearest x2, resize_nearest_bwd x1, detect_loss x1, "
                           "detect_loss_bwd x1");
    kernel_program_free(&kp);
    plan_free(&p);
}

Test(cuda_step, host_op_line_forms) {
    CudaStep cs;
    memset(&cs, 0, sizeof cs);
    char line[256];
    cs.kernel_launches = 10, cs.lib_launches = 3, cs.cudnn_ops = 4, cs.loss_ops = 2;
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect_str_eq(line, "no library op runs on the host: 10 generated launches, 3 library kernel launches, 4 cuDNN convolutions and 2 detection-loss ops each step");
    cs.host_ops = 1, cs.host_op_kinds[OP_DETECT_LOSS] = 1;
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect_str_eq(line, "1 library op runs on the host each step: detect_loss x1");
    cs.host_ops = 6, cs.host_op_kinds[OP_ATTENTION] = 2, cs.host_op_kinds[OP_MAXPOOL2D] = 3;
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect_str_eq(line, "6 library ops run on the host each step: maxpool2d x3, attention x2, detect_loss x1", "by count");
    char small[20];
    memset(small, 'z', sizeof small);
    cuda_step_describe(&cs, small, 12);
    cr_expect_eq(strlen(small), 11, "cut to the buffer: %s", small);
    cr_expect_eq(small[12], 'z', "nothing written past cap");
}

/* The clauses on cuBLASLt: attention and 1x1 convolutions counted apart, the measured times
 * under auto, the forcing knob, and a candidate left to cuDNN with its reason. */
Test(cuda_step, cublaslt_line_forms) {
    CudaStep cs;
    memset(&cs, 0, sizeof cs);
    char line[512];
    cs.kernel_launches = 10, cs.cudnn_ops = 4, cs.cublaslt_ops = 5, cs.conv_gemm_ops = 3, cs.n_cgemm = 7;
    cs.conv_gemm_ms[0] = 1.5, cs.conv_gemm_ms[1] = 1.25;
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect(strstr(line, "; 2 attention ops through cuBLASLt; 3 of 7 1x1 convolutions through cuBLASLt, where it measured faster (1.250 ms a step instead of 1.500 in cuDNN)"),
              "%s", line);
    cs.conv1x1_mode = CONV1X1_CUBLASLT, cs.cublaslt_ops = 7, cs.conv_gemm_ops = 6, cs.cgemm_refused = 1;
    snprintf(cs.cgemm_why, sizeof cs.cgemm_why, "op 12: cuBLASLt has no algorithm");
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect(strstr(line, "; 1 attention op through cuBLASLt; 6 of 7 1x1 convolutions through cuBLASLt (YOLOCC_CUDA_CONV1X1=cublaslt); 1 1x1 convolution left to cuDNN (op 12: cuBLASLt has no algorithm)"),
              "%s", line);
    cs.n_cgemm = cs.cgemm_refused = cs.cublaslt_ops = cs.conv_gemm_ops = 0;
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect_null(strstr(line, "cuBLASLt"), "no clause without candidates: %s", line);
}

Test(cuda_step, a_plan_that_is_neither_training_nor_validation_is_refused) {
    char err[512] = "";
    Plan p;
    tiny_plan("--imgsz 64 --batch 2", &p);
    cr_assert_not_null(p.eval, "a training plan embeds its validation graph");
    /* the validation graph runs on the device too (`yolort train` validates there); another kind does not */
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(p.eval->meta, "kind")), "eval");
    cJSON_ReplaceItemInObject(p.eval->meta, "kind", cJSON_CreateString("deploy"));
    CudaStep cs;
    cr_expect(!cuda_step_open(&cs, p.eval, 0, err, sizeof err), "a deploy graph is no step CudaStep runs");
    cr_expect(strstr(err, "not a training or validation plan"), "%s", err);
    cr_expect(!cs.dev_open && !cs.mem_open && !cs.ptr, "nothing stays open");
    plan_free(&p);
}

/* ---- storage types, views and conversions (no GPU) ---- */

/* The host fallback converts with the types the generated kernels and cuDNN use. */
Test(cuda_step, storage_types_agree_with_kernels_and_cudnn) {
    char err[512];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision bf16", &p);
    const Graph *g = &p.g;
    bool *persistent = calloc((size_t)g->n_tensors, sizeof *persistent);
    memplan_mark_persistent(g, persistent);
    int low = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        DType st = memplan_storage_dtype(g, t, persistent[t], p.precision);
        TensorKind k = g->tensors[t].kind;
        if (g->tensors[t].dtype == DT_I64) cr_expect_eq(st, DT_I64, "tensor %d: integers are copied as they are", t);
        else if (g->tensors[t].name && strcmp(g->tensors[t].name, "images") == 0 && k == TK_INPUT)
            cr_expect_eq(st, DT_BF16, "tensor %d: the images, read by the first convolution only, are stored as autocast would cast them", t);
        else if (k != TK_ACTIVATION || persistent[t]) cr_expect_eq(st, DT_F32, "tensor %d: other inputs, masters, gradients and state stay fp32", t);
        low += st == DT_BF16;
    }
    cr_expect_gt(low, 0, "a bf16 plan stores activations in bf16");
    KProgram kp;
    cr_assert(kernel_lower(g, &p.fusion, p.precision, &kp, err, sizeof err), "%s", err);
    for (int l = 0; l < kp.n_launches; l++) {
        const KLaunch *ln = &kp.launches[l];
        if (ln->kernel < 0) {
            const Op *op = &g->ops[ln->op_lo];
            ConvKey key;
            if (!conv_key_from_op(g, op, p.precision, persistent, &p.fusion.views, &key, err, sizeof err)) continue;
            /* cuDNN's data types: 0 float, 9 bfloat16 */
            int xt = op->kind == OP_CONV2D_DGRAD ? op->out[0] : op->kind == OP_CONV2D_WGRAD ? op->in[1] : op->in[0];
            DType x = memplan_storage_dtype(g, xt, persistent[xt], p.precision);
            cr_expect_eq(key.x_type, x == DT_BF16 ? 9 : 0, "op %d: cuDNN reads x as it is stored", op->id);
            continue;
        }
        const Kernel *k = &kp.kernels[ln->kernel];
        for (int s = 0; s < ln->n_args; s++)
            cr_expect_eq(k->buf_dtype[s], memplan_storage_dtype(g, ln->args[s], persistent[ln->args[s]], p.precision), "launch %d (%s) slot %d", l, k->name, s);
    }
    kernel_program_free(&kp);
    free(persistent);
    plan_free(&p);
}

Test(cuda_step, view_gather_and_span) {
    cr_expect_eq(cuda_view_span(3, 4, 10), 24, "two strides and a last row");
    cr_expect_eq(cuda_view_span(3, 4, 0), 12, "packed");
    cr_expect_eq(cuda_view_span(1, 4, 10), 4);
    /* channels [2, 4) of a [3, 5, 2] base: rows of 4 elements, 10 apart, from element 4 */
    float base[30], packed[12];
    for (int i = 0; i < 30; i++) base[i] = (float)i;
    cuda_view_gather(base + 4, packed, 3, 4, 10, sizeof(float));
    const float want[12] = {4, 5, 6, 7, 14, 15, 16, 17, 24, 25, 26, 27};
    cr_expect_arr_eq(packed, want, sizeof want);
    uint16_t b16[6] = {1, 2, 3, 4, 5, 6}, p16[4];
    cuda_view_gather(b16, p16, 2, 2, 3, 2);
    cr_expect(p16[0] == 1 && p16[1] == 2 && p16[2] == 4 && p16[3] == 5, "2-byte elements");
    int64_t i64[3] = {7, 8, 9}, o64[3];
    cuda_view_gather(i64, o64, 1, 3, 0, 8);
    cr_expect_arr_eq(o64, i64, sizeof i64, "a packed tensor is one copy");
}

static uint16_t bits16(DType t, float f) {
    uint16_t h;
    cuda_f32_to_storage(t, &f, &h, 1);
    return h;
}

Test(cuda_step, conversions_round_to_nearest_even) {
    cr_expect_eq(bits16(DT_BF16, 1.0f), 0x3f80);
    cr_expect_eq(bits16(DT_BF16, 1.00390625f), 0x3f80, "1 + 2^-8 ties to even 1");
    cr_expect_eq(bits16(DT_BF16, 1.01171875f), 0x3f82, "1 + 3*2^-8 ties to even 1 + 2^-6");
    cr_expect_eq(bits16(DT_BF16, -2.0f), 0xc000);
    cr_expect_eq(bits16(DT_BF16, INFINITY), 0x7f80);
    cr_expect_eq(bits16(DT_BF16, NAN) & 0x7fc0, 0x7fc0, "NaN stays NaN");
    cr_expect_eq(bits16(DT_F16, 1.0f), 0x3c00);
    cr_expect_eq(bits16(DT_F16, 65504.0f), 0x7bff, "largest fp16");
    cr_expect_eq(bits16(DT_F16, 65519.0f), 0x7bff);
    cr_expect_eq(bits16(DT_F16, 65520.0f), 0x7c00, "rounds to infinity");
    cr_expect_eq(bits16(DT_F16, 1.0f / 3), 0x3555);
    cr_expect_eq(bits16(DT_F16, 0x1p-24f), 0x0001, "smallest subnormal");
    cr_expect_eq(bits16(DT_F16, 0x1p-25f), 0x0000, "half of it ties to even zero");
    cr_expect_eq(bits16(DT_F16, 0x1.8p-25f), 0x0001);
    cr_expect_eq(bits16(DT_F16, 0x1.8p-24f), 0x0002, "1.5 subnormal steps tie to even 2");
    cr_expect_eq(bits16(DT_F16, 0x1p-14f), 0x0400, "smallest normal");
    cr_expect_eq(bits16(DT_F16, 0x1.ffcp-15f), 0x0400, "rounds up out of the subnormals");
    cr_expect_eq(bits16(DT_F16, -0.0f), 0x8000);
    cr_expect_eq(bits16(DT_F16, 1.0f + 0x1p-11f), 0x3c00, "ties to even");
    cr_expect_eq(bits16(DT_F16, 1.0f + 0x1.8p-10f), 0x3c02);
    cr_expect_eq(bits16(DT_F16, NAN) & 0x7e00, 0x7e00);
    /* every 16-bit value survives the trip through fp32 (NaNs stay NaN) */
    int bad[2] = {0, 0};
    for (uint32_t v = 0; v < 65536; v++) {
        for (int w = 0; w < 2; w++) {
            DType t = w ? DT_F16 : DT_BF16;
            uint16_t h = (uint16_t)v, back;
            float f, again;
            cuda_storage_to_f32(t, &h, &f, 1);
            cuda_f32_to_storage(t, &f, &back, 1);
            cuda_storage_to_f32(t, &back, &again, 1);
            bad[w] += isnan(f) ? !isnan(again) : back != h;
        }
    }
    cr_expect(bad[0] == 0 && bad[1] == 0, "round trips: %d bf16, %d fp16 values changed", bad[0], bad[1]);
    float in[4] = {1.5f, -3.25f, 0.0f, 1e-8f}, out[4];
    uint16_t st[4];
    cuda_f32_to_storage(DT_F16, in, st, 4);
    cuda_storage_to_f32(DT_F16, st, out, 4);
    cr_expect(out[0] == 1.5f && out[1] == -3.25f && out[2] == 0.0f && fabsf(out[3] - 1e-8f) < 0x1p-25f, "%g %g %g %g", out[0], out[1], out[2], out[3]);
    float f32[2] = {1.25f, -7.0f}, g32[2];
    cuda_f32_to_storage(DT_F32, f32, g32, 2);
    cr_expect_arr_eq(g32, f32, sizeof f32, "fp32 is copied");
}

/* ---- the step's host side on a host-memory stand-in for the driver (no GPU) ----
 * Device addresses are host addresses and the driver's copies are memcpy, so
 * everything CudaStep does around the GPU runs here for real: storage
 * conversion, view packing and scattering, the host fallback, compute-copy
 * refreshes (the conversion "kernel" is done by the stand-in's launch). */

static int host_casts, host_kernels, host_libs;
static YlArgs last_lib;
static CuFunction const CAST_FN = (CuFunction)(uintptr_t)0xca57, LIB_FN = (CuFunction)(uintptr_t)0x11b;
static CuResult host_htod(CuDevicePtr dst, const void *src, size_t n, CuStream s) {
    (void)s;
    memcpy((void *)(uintptr_t)dst, src, n);
    return 0;
}
static CuResult host_dtoh(void *dst, CuDevicePtr src, size_t n, CuStream s) {
    (void)s;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
}
static CuResult host_sync(CuStream s) {
    (void)s;
    return 0;
}
static CuResult host_launch(CuFunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, CuStream s,
                            void **params, void **extra) {
    (void)gy, (void)gz, (void)by, (void)bz, (void)shared, (void)s, (void)extra;
    cr_assert(gx >= 1 && bx == CUDA_BLOCK);
    if (f == LIB_FN) { /* a library kernel: its arguments are kept (its arithmetic is tests/test_lib_kernels.c's) */
        last_lib = *(const YlArgs *)params[0];
        host_libs++;
        return 0;
    }
    if (f != CAST_FN) { /* a generated kernel: only counted (its arithmetic is tests/test_cuda.c's) */
        host_kernels++;
        return 0;
    }
    const YlArgs *a = params[0];
    long long n = a->total, blocks = (n + CUDA_BLOCK - 1) / CUDA_BLOCK;
    cr_assert(n > 0 && gx == (blocks < 2 * 32 ? blocks : 2 * 32), "%lld elements: %u blocks (grid-stride, 32 per multiprocessor at most)", n, gx);
    cuda_f32_to_storage(DT_BF16, a->t[0], a->t[1], (int64_t)n);
    host_casts++;
    return 0;
}

/* lib_host: the library kernels' ops run on the host (YOLOCC_CUDA_LIB_HOST) */
static void host_step_open(HostStep *h, const Plan *p, bool lib_host) {
    host_step_setup(h, p);
    CudaStep *cs = &h->cs;
    cs->lib_host = lib_host;
    cuda_step_census(cs, &p->g, &cs->kern.kp);
    cs->dev.L.cuMemcpyHtoDAsync = host_htod, cs->dev.L.cuMemcpyDtoHAsync = host_dtoh, cs->dev.L.cuStreamSynchronize = host_sync;
    cs->dev.L.cuLaunchKernel = host_launch;
    /* library kernels by their handles: the cast converts, the others keep their arguments */
    for (int k = 0; k < cs->kern.lp.n_kernels; k++) cs->kern.lib_fn[k] = k == cs->kern.lp.cast ? CAST_FN : LIB_FN;
}

/* Writes fp32 values into t's device storage as the plan stores them
 * (row by row for a view) and returns them as stored (rounded). */
static float *host_fill(CudaStep *cs, int t, uint64_t *seed) {
    const Graph *g = &cs->plan->g;
    const Shape *s = &g->tensors[t].shape;
    DType st = (DType)cs->stype[t];
    size_t es = st == DT_F32 ? 4 : 2;
    int64_t n = shape_numel(s), images, row, stride;
    views_geometry(g, &cs->plan->fusion.views, t, &images, &row, &stride);
    float *v = malloc(sizeof(float) * (size_t)n);
    unsigned char *stored = malloc((size_t)n * es);
    for (int64_t i = 0; i < n; i++) *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL, v[i] = (float)((double)(*seed >> 40) / (1 << 24) * 4 - 2);
    cuda_f32_to_storage(st, v, stored, n);
    cuda_storage_to_f32(st, stored, v, n);
    for (int64_t i = 0; i < images; i++) memcpy((char *)(uintptr_t)cs->ptr[t] + (size_t)(i * (stride ? stride : row)) * es, stored + (size_t)(i * row) * es, (size_t)row * es);
    free(stored);
    return v;
}

Test(cuda_step, host_fallback_and_transfers_on_a_host_backed_device) {
    char err[2048];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision bf16", &p);
    const Graph *g = &p.g;
    HostStep h;
    host_step_open(&h, &p, true);
    CudaStep *cs = &h.cs;
    /* state up: masters exact, compute copies the bf16 of each master */
    void **state = calloc((size_t)g->n_tensors, sizeof *state);
    int copies = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        TensorKind k = g->tensors[t].kind;
        if (k == TK_PARAM || k == TK_BUFFER || k == TK_OPTIM) state[t] = calloc((size_t)shape_numel(&g->tensors[t].shape) + 1, 8);
        copies += cs->mem.layout.lowp_off[t] >= 0;
    }
    cr_assert(weights_init(g, state, 3, err, sizeof err), "%s", err);
    host_casts = 0;
    cr_assert(cuda_step_upload_state(cs, state, err, sizeof err), "%s", err);
    cr_expect_eq(host_casts, copies, "one conversion per compute copy");
    cr_expect_eq(cs->copy_refreshes, copies);
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].kind != TK_PARAM) continue;
        int64_t n = shape_numel(&g->tensors[t].shape);
        float *back = malloc(sizeof(float) * (size_t)n), *lowp = malloc(sizeof(float) * (size_t)n);
        cr_assert(cuda_step_download(cs, t, back, err, sizeof err), "%s", err);
        cr_expect_arr_eq(back, state[t], sizeof(float) * (size_t)n, "parameter %s: the fp32 master round-trips exactly", g->tensors[t].name);
        /* convolution weights and biases keep copies; the others' readers take the fp32 master */
        if (cs->mem.layout.lowp_off[t] >= 0) cuda_storage_to_f32(DT_BF16, (const void *)(uintptr_t)cuda_mem_compute_ptr(&cs->mem, t), lowp, n);
        for (int64_t e = 0; e < n && cs->mem.layout.lowp_off[t] >= 0; e++) {
            uint16_t b;
            float r;
            cuda_f32_to_storage(DT_BF16, &((float *)state[t])[e], &b, 1);
            cuda_storage_to_f32(DT_BF16, &b, &r, 1);
            if (lowp[e] != r) cr_expect_fail("parameter %s element %lld: copy %g, bf16 of the master %g", g->tensors[t].name, (long long)e, lowp[e], r);
            if (lowp[e] != r) break;
        }
        free(back), free(lowp);
    }
    /* many at once (one wait) equals one by one: packed fp32 / int64 state and a bf16 activation (converted) */
    int *ids = malloc(sizeof(int) * (size_t)g->n_tensors), m = 0, lowp_act = -1;
    void **many = calloc((size_t)g->n_tensors, sizeof *many);
    uint64_t fill_seed = 5;
    for (int t = 0; t < g->n_tensors; t++) {
        TensorKind k = g->tensors[t].kind;
        if (lowp_act < 0 && k == TK_ACTIVATION && cs->stype[t] == DT_BF16 && cs->ptr[t] && !views_row_stride(g, &p.fusion.views, t)) lowp_act = t;
        if (k == TK_PARAM || k == TK_BUFFER) ids[m++] = t;
    }
    cr_assert_geq(lowp_act, 0);
    free(host_fill(cs, lowp_act, &fill_seed));
    ids[m++] = lowp_act;
    for (int i = 0; i < m; i++) many[i] = calloc((size_t)shape_numel(&g->tensors[ids[i]].shape) + 1, 8);
    cr_assert(cuda_step_download_many(cs, m, ids, many, err, sizeof err), "%s", err);
    for (int i = 0; i < m; i++) {
        size_t bytes = (size_t)shape_numel(&g->tensors[ids[i]].shape) * 8 + 8;
        void *one = calloc(bytes, 1);
        cr_assert(cuda_step_download(cs, ids[i], one, err, sizeof err), "%s", err);
        cr_expect_arr_eq(many[i], one, bytes, "tensor %d: together as alone", ids[i]);
        free(one), free(many[i]);
    }
    free(ids), free(many);
    /* every pooling and resize op on the host against the reference on the same (bf16) values */
    int ran = 0, views = 0, in_views = 0;
    uint64_t seed = 99;
    for (int l = 0; l < cs->kern.kp.n_launches; l++) {
        const KLaunch *ln = &cs->kern.kp.launches[l];
        const Op *op = &g->ops[ln->op_lo];
        /* the ops of the library kernels, on the host here (lib_host) */
        if (cuda_step_route(g, ln) != CUDA_ROUTE_LIBRARY) continue;
        void **buf = calloc((size_t)g->n_tensors, sizeof *buf);
        int t = op->out[0], b = p.fusion.views.base[t];
        int64_t n = shape_numel(&g->tensors[t].shape), base_bytes = shape_numel(&g->tensors[b].shape) * (cs->stype[b] == DT_F32 ? 4 : 2);
        unsigned char *base = (unsigned char *)(uintptr_t)cs->ptr[b], *before = malloc((size_t)base_bytes);
        memset(base, 0xab, (size_t)base_bytes);
        for (int i = 0; i < op->n_in; i++) {
            buf[op->in[i]] = host_fill(cs, op->in[i], &seed);
            in_views += views_row_stride(g, &p.fusion.views, op->in[i]) != 0;
        }
        buf[t] = calloc((size_t)n, sizeof(float));
        cr_assert(ref_kernel(op->kind)(g, op, buf, err, sizeof err), "%s", err);
        float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
        uint16_t *st = malloc(2 * (size_t)n);
        cuda_f32_to_storage((DType)cs->stype[t], buf[t], cs->stype[t] == DT_F32 ? (void *)want : (void *)st, n);
        if (cs->stype[t] != DT_F32) cuda_storage_to_f32((DType)cs->stype[t], st, want, n);
        memcpy(before, base, (size_t)base_bytes);
        cr_assert(cuda_step_run(cs, ln->op_lo, ln->op_hi + 1, err, sizeof err), "%s", err);
        cr_assert(cuda_step_download(cs, t, got, err, sizeof err), "%s", err);
        cr_expect_arr_eq(got, want, sizeof(float) * (size_t)n, "op %d (%s): host fallback vs reference", op->id, op_def(op->kind)->name);
        /* a view's base keeps every byte outside the view's rows */
        int64_t stride = views_row_stride(g, &p.fusion.views, t);
        if (stride) {
            size_t es = cs->stype[t] == DT_F32 ? 4 : 2, row = (size_t)(n / g->tensors[t].shape.d[0]) * es, off = (size_t)(cs->ptr[t] - cs->ptr[b]);
            int outside_changed = 0;
            for (size_t i = 0; i < (size_t)base_bytes; i++) {
                bool inside = i >= off && (i - off) % ((size_t)stride * es) < row && (i - off) / ((size_t)stride * es) < (size_t)g->tensors[t].shape.d[0];
                outside_changed += !inside && base[i] != before[i];
            }
            cr_expect_eq(outside_changed, 0, "op %d writes only its view's rows", op->id);
            views++;
        }
        for (int i = 0; i < op->n_in; i++) free(buf[op->in[i]]), buf[op->in[i]] = NULL;
        free(buf[t]), free(buf), free(want), free(got), free(st), free(before);
        ran++;
    }
    cr_log_info("%d host ops checked, %d of them writing a zero-copy view, %d inputs read from one", ran, views, in_views);
    cr_expect_eq(ran, 9, "3 max pools, 2 resizes (forward and its recompute) and their 4 gradients");
    cr_expect_eq(cs->host_ops_run, ran, "each counted");
    cr_expect_gt(views, 0, "the upsample writes its slice of the concat");
    cr_expect_gt(in_views, 0, "split outputs are read in place");
    /* the optimizer's group: every update makes its parameter's copy stale, refreshed before the run returns */
    int clip = -1, updated = 0, launches = 0;
    for (int o = 0; o < g->n_ops && clip < 0; o++)
        if (g->ops[o].kind == OP_GRAD_CLIP) clip = o;
    cr_assert_geq(clip, 0);
    for (int o = clip; o < g->n_ops; o++) updated += g->ops[o].kind == OP_SGD_STEP && cs->mem.layout.lowp_off[g->ops[o].in[0]] >= 0;
    for (int l = 0; l < cs->kern.kp.n_launches; l++) launches += cs->kern.kp.launches[l].op_lo >= clip && cs->kern.kp.launches[l].kernel >= 0;
    host_casts = host_kernels = 0;
    cr_assert(cuda_step_run(cs, clip, g->n_ops, err, sizeof err), "%s", err);
    cr_expect_eq(host_kernels, launches, "the clip and the updates are generated launches");
    cr_expect(updated > 0 && host_casts == updated, "%d copies refreshed for %d updated parameters", host_casts, updated);
    for (int t = 0; t < g->n_tensors; t++) cr_expect(!cs->dirty[t], "tensor %d left stale", t);
    /* ranges are checked before anything runs */
    for (int l = 0; l < cs->kern.kp.n_launches; l++) {
        const KLaunch *ln = &cs->kern.kp.launches[l];
        if (ln->op_hi == ln->op_lo) continue;
        cr_expect(!cuda_step_run(cs, ln->op_lo + 1, ln->op_hi + 1, err, sizeof err));
        cr_expect(strstr(err, "cut the launch"), "%s", err);
        break;
    }
    cr_expect(!cuda_step_run(cs, 5, 2, err, sizeof err) && strstr(err, "not a range"), "%s", err);
    cr_expect(!cuda_step_set_input(cs, g->state[0], state[g->state[0]], err, sizeof err) && strstr(err, "not an input"), "%s", err);
    for (int t = 0; t < g->n_tensors; t++) free(state[t]);
    free(state);
    host_step_close(&h);
    plan_free(&p);
}

/* Pooling and resize launches go to their library kernels with each
 * operand's device address and image stride (views included); nothing runs
 * on the host. */
Test(cuda_step, library_ops_launch_library_kernels_on_a_host_backed_device) {
    char err[2048];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision bf16", &p);
    const Graph *g = &p.g;
    HostStep h;
    host_step_open(&h, &p, false);
    CudaStep *cs = &h.cs;
    int ran = 0, views = 0;
    for (int l = 0; l < cs->kern.kp.n_launches; l++) {
        const KLaunch *ln = &cs->kern.kp.launches[l];
        const Op *op = &g->ops[ln->op_lo];
        if (cuda_step_route(g, ln) != CUDA_ROUTE_LIBRARY) continue;
        host_libs = 0;
        memset(&last_lib, 0, sizeof last_lib);
        cr_assert(cuda_step_run(cs, ln->op_lo, ln->op_hi + 1, err, sizeof err), "%s", err);
        cr_expect_eq(host_libs, 1, "op %d (%s): one library launch", op->id, op_def(op->kind)->name);
        for (int i = 0; i <= op->n_in; i++) {
            int t = i < op->n_in ? op->in[i] : op->out[0];
            int64_t bs = views_row_stride(g, &p.fusion.views, t), row = shape_numel(&g->tensors[t].shape) / g->tensors[t].shape.d[0];
            cr_expect_eq((CuDevicePtr)(uintptr_t)last_lib.t[i], cs->ptr[t], "op %d operand %d: its device address", op->id, i);
            cr_expect_eq(last_lib.bs[i], bs ? bs : row, "op %d operand %d: its image stride", op->id, i);
            views += bs != 0;
        }
        cr_expect_eq(last_lib.total, shape_numel(&g->tensors[op->out[0]].shape));
        ran++;
    }
    cr_expect_eq(ran, 9, "3 max pools, 2 resizes (forward and its recompute) and their 4 gradients");
    cr_expect_gt(views, 0, "some operand is a zero-copy view");
    cr_expect_eq(cs->host_ops_run, 0, "nothing ran on the host");
    host_step_close(&h);
    plan_free(&p);
}

/* ---- on a GPU ---- */

static void set_input(CudaStep *cs, int t, const void *v) {
    char err[2048];
    cr_assert(cuda_step_set_input(cs, t, v, err, sizeof err), "%s", err);
}

/* Trains the tiny model for `steps` SGD steps from the same weights and
 * batch on the CPU (an fp32 plan through TrainStep) and on the GPU (a
 * `precision` CUDA plan through CudaStep); the losses must agree within
 * loss_tol relative and every parameter afterwards within param_tol
 * (relative as rel_diff, or absolute). */
static void step_vs_cpu_routed(const char *precision, const char *layout, int steps, double loss_tol, double param_tol, bool param_abs, const char *conv1x1);
static void step_vs_cpu(const char *precision, const char *layout, int steps, double loss_tol, double param_tol, bool param_abs) {
    step_vs_cpu_routed(precision, layout, steps, loss_tol, param_tol, param_abs, NULL);
}

/* conv1x1: YOLOCC_CUDA_CONV1X1 for the GPU step (NULL: the default, auto) */
static void step_vs_cpu_routed(const char *precision, const char *layout, int steps, double loss_tol, double param_tol, bool param_abs, const char *conv1x1) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    char extra[256], extra_gpu[256], err[2048], line[1024];
    Plan pc, pg;
    /* the CPU plan in the same layout (it trains to the same numbers in either), so tensor ids match */
    snprintf(extra, sizeof extra, "--imgsz 64 --batch 2 --precision fp32 --layout %s", layout);
    snprintf(extra_gpu, sizeof extra_gpu, "--imgsz 64 --batch 2 --precision %s --layout %s", precision, layout);
    tiny_plans_cpu_cuda(extra, extra_gpu, &pc, &pg);
    TrainStep ts;
    cr_assert(train_step_init(&ts, &pc, err, sizeof err), "%s", err);
    train_step_set_fast(&ts, true); /* as yolort trains: generated kernels and OpenBLAS convolutions */
    cr_assert(weights_init(&pc.g, ts.it.buf, 20250101, err, sizeof err), "%s", err);
    synthetic_batch(7, ts.batch, ts.imgsz, ts.nc, ts.max_boxes, train_step_images(&ts), train_step_boxes(&ts), train_step_counts(&ts));
    CudaStep cs;
    if (conv1x1) cr_assert_eq(setenv("YOLOCC_CUDA_CONV1X1", conv1x1, 1), 0);
    cr_assert(cuda_step_open(&cs, &pg, 0, err, sizeof err), "%s", err);
    cuda_step_describe(&cs, line, sizeof line);
    cr_log_info("%s (%s): %s", precision, cs.dev.name, line);
    if (conv1x1 && strcmp(conv1x1, "cublaslt") == 0) {
        /* the tiny model: four C2f (a 1x1 cv1 and cv2 each) and SPPF's two are 10 forward products; Detect's
         * four last 1x1 convolutions add their data and weight gradients (14 each); NCHW weight gradients sum over images */
        const int want = 10 + 14 + (strcmp(layout, "nhwc") == 0 ? 14 : 0);
        cr_expect_eq(cs.cgemm_refused, 0, "cuBLASLt has an algorithm for every candidate: %s", cs.cgemm_why);
        cr_expect_eq(cs.conv_gemm_ops, want, "%d convolutions through cuBLASLt, expected %d: %s", cs.conv_gemm_ops, want, line);
        cr_expect(strstr(line, "1x1 convolutions through cuBLASLt (YOLOCC_CUDA_CONV1X1=cublaslt)"), "%s", line);
    } else if (!conv1x1) {
        cr_expect(strstr(line, "1x1 convolutions through cuBLASLt, where it measured faster"), "the default times both routes: %s", line);
    }
    /* the same tensor ids name the same inputs in both plans */
    const char *names[] = {"images", "boxes", "counts", "grad_seed", "lr", "momentum", "opt_step"};
    const int cpu_ids[] = {ts.images, ts.boxes, ts.counts, ts.grad_seed, ts.lrs, ts.momentum, ts.opt_step};
    for (int i = 0; i < 7; i++) cr_assert_eq(plan_meta_tensor(&pg, "inputs", names[i]), cpu_ids[i], "input %s", names[i]);
    cr_assert_eq(plan_meta_tensor(&pg, "outputs", "loss"), ts.loss);
    cr_assert(cuda_step_upload_state(&cs, ts.it.buf, err, sizeof err), "%s", err);
    set_input(&cs, ts.images, ts.it.buf[ts.images]);
    set_input(&cs, ts.boxes, ts.it.buf[ts.boxes]);
    set_input(&cs, ts.counts, ts.it.buf[ts.counts]);
    const double lr[3] = {0.01, 0.01, 0.01}, momentum = 0.9;
    double worst_loss = 0;
    for (int s = 0; s < steps; s++) {
        StepResult r;
        cr_assert(train_step_run(&ts, lr, momentum, &r, err, sizeof err), "CPU step %d: %s", s, err);
        /* what train_step_run binds: the learning rates, momentum, the step count (from 1) and the backward seed */
        float lrs[3] = {(float)lr[0], (float)lr[1], (float)lr[2]}, mom = (float)momentum, step = (float)(s + 1), seed = 1.0f, loss, items[3];
        set_input(&cs, ts.lrs, lrs);
        set_input(&cs, ts.momentum, &mom);
        set_input(&cs, ts.opt_step, &step);
        set_input(&cs, ts.grad_seed, &seed);
        cr_assert(cuda_step_run(&cs, 0, pg.g.n_ops, err, sizeof err), "GPU step %d: %s", s, err);
        cr_assert(cuda_step_download(&cs, ts.loss, &loss, err, sizeof err), "%s", err);
        cr_assert(cuda_step_download(&cs, ts.items, items, err, sizeof err), "%s", err);
        const double cpu[4] = {r.total, r.box, r.cls, r.dfl}, gpu[4] = {loss, items[0], items[1], items[2]};
        for (int i = 0; i < 4; i++) {
            double d = rel_diff(gpu[i], cpu[i]);
            worst_loss = fmax(worst_loss, d);
            cr_expect_leq(d, loss_tol, "step %d %s: GPU %.9g CPU %.9g (relative %.3g)", s, i ? (i == 1 ? "box" : i == 2 ? "cls" : "dfl") : "loss", gpu[i], cpu[i], d);
        }
        cr_log_info("step %d: loss GPU %.7g CPU %.7g", s, loss, r.total);
    }
    double worst = 0;
    int params = 0, worst_t = -1;
    for (int t = 0; t < pg.g.n_tensors; t++) {
        if (pg.g.tensors[t].kind != TK_PARAM) continue;
        int64_t n = shape_numel(&pg.g.tensors[t].shape);
        float *got = malloc(sizeof(float) * (size_t)n), *want = ts.it.buf[t];
        cr_assert(cuda_step_download(&cs, t, got, err, sizeof err), "%s", err);
        double d = 0;
        for (int64_t e = 0; e < n; e++) d = fmax(d, param_abs ? fabs((double)got[e] - want[e]) : rel_diff(got[e], want[e]));
        if (d > worst) worst = d, worst_t = t;
        cr_expect_leq(d, param_tol, "parameter %s differs by %.3g", pg.g.tensors[t].name, d);
        free(got);
        params++;
    }
    cr_log_info("%s, %d steps: worst loss difference %.3g (relative), worst parameter difference %.3g (%s, %s); %ld host ops run, %ld compute copies refreshed",
                precision, steps, worst_loss, worst, param_abs ? "absolute" : "relative", worst_t >= 0 ? pg.g.tensors[worst_t].name : "-", cs.host_ops_run,
                cs.copy_refreshes);
    cr_expect_gt(params, 0);
    cr_expect_eq(cs.host_ops_run, (long)steps * cs.host_ops, "every host op ran once a step, and was counted");
    if (pg.precision != PREC_FP32) {
        /* refreshed: every copy after the upload, then each updated parameter after each step */
        long copies = 0, updated = 0;
        for (int t = 0; t < pg.g.n_tensors; t++) copies += cs.mem.layout.lowp_off[t] >= 0;
        for (int o = 0; o < pg.g.n_ops; o++) updated += pg.g.ops[o].kind == OP_SGD_STEP && cs.mem.layout.lowp_off[pg.g.ops[o].in[0]] >= 0;
        cr_expect_eq(cs.copy_refreshes, copies + steps * updated);
    }
    cuda_step_close(&cs);
    train_step_free(&ts);
    plan_free(&pc);
    plan_free(&pg);
    cuda_device_close(&probe);
}

/* fp32: cuDNN's convolutions sum in another order than OpenBLAS (and the CPU
 * target's generated kernels sum in double, the GPU's in fp32 with fp64
 * totals), so each convolution agrees to a few fp32 roundings of reordered
 * sums (~1e-6); ~100 convolutions forward and backward and two SGD steps
 * compound that to well under 1e-4 relative. */
Test(cuda_step, tiny_step_matches_the_cpu_fp32) { step_vs_cpu("fp32", "nchw", 2, 1e-4, 1e-4, false); }

/* bf16 GPU plan vs the fp32 CPU plan after one step: bf16 keeps 8 mantissa
 * bits (2^-9 = 0.2% per rounding) on every activation, so the loss may move
 * a few percent: 5e-2 relative. Parameters change by lr * gradient (lr 0.01)
 * from identical fp32 masters, so bf16 gradient errors move them by far less
 * than 1e-2 absolute; a wrong master or compute copy would not. */
Test(cuda_step, tiny_step_matches_the_cpu_bf16) { step_vs_cpu("bf16", "nchw", 1, 5e-2, 1e-2, true); }

/* The same in NHWC (channels-last cuDNN descriptors and library kernels,
 * the layout changes on the device), against the CPU's NHWC plan, which
 * trains to the NCHW plan's numbers bit for bit (tests/test_layout.c). */
Test(cuda_step, tiny_step_matches_the_cpu_fp32_nhwc) { step_vs_cpu("fp32", "nhwc", 2, 1e-4, 1e-4, false); }
Test(cuda_step, tiny_step_matches_the_cpu_bf16_nhwc) { step_vs_cpu("bf16", "nhwc", 1, 5e-2, 1e-2, true); }

/* Every 1x1 convolution cuBLASLt can take, forced through it: the same numbers as above,
 * since both routes accumulate in fp32 (fp32 never TF32) and round once into the output. */
Test(cuda_step, tiny_step_with_1x1_convolutions_through_cublaslt_matches_the_cpu_fp32) { step_vs_cpu_routed("fp32", "nchw", 2, 1e-4, 1e-4, false, "cublaslt"); }
Test(cuda_step, tiny_step_with_1x1_convolutions_through_cublaslt_matches_the_cpu_bf16_nhwc) {
    step_vs_cpu_routed("bf16", "nhwc", 1, 5e-2, 1e-2, true, "cublaslt");
}

/* An unknown route for 1x1 convolutions is refused at open, by name, with nothing left open. */
Test(cuda_step, an_unknown_yolocc_cuda_conv1x1_is_refused) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    char err[1024];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --target cuda --arch sm_80,sm_90", &p);
    cr_assert_eq(setenv("YOLOCC_CUDA_CONV1X1", "fastest", 1), 0);
    CudaStep cs;
    cr_assert_not(cuda_step_open(&cs, &p, 0, err, sizeof err));
    cr_expect(strstr(err, "YOLOCC_CUDA_CONV1X1=fastest: expected auto, cublaslt or cudnn"), "%s", err);
    plan_free(&p);
    cuda_device_close(&probe);
}

/* CudaStep allocates exactly the plan's arena, the persistent layout and the
 * cuDNN workspace (each rounded as cuda_mem_alloc rounds it), and nothing of
 * that is virtual: free device memory drops by at least that much. The
 * driver hands out memory in 2 MiB pages, so the drop is usually more; one
 * small region may land in a page the context already held, so the drop may
 * fall short of the plan by up to one page. */
Test(cuda_step, device_peak_equals_the_plan) {
    CudaDevice d;
    open_gpu_or_skip(&d);
    tu_gpu_alone(); /* free memory is read across calls: no other GPU test runs meanwhile */
    char err[2048];
    Plan p;
    tiny_plan("--imgsz 128 --batch 16 --target cuda --arch sm_80,sm_90", &p);
    size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
    cr_assert(CUDA_CALL(&d.L, cuMemGetInfo, (&free0, &total), "reading free memory", err, sizeof err), "%s", err);
    CudaStep cs;
    cr_assert(cuda_step_open(&cs, &p, 0, err, sizeof err), "%s", err);
    cr_assert(CUDA_CALL(&d.L, cuMemGetInfo, (&free1, &total), "reading free memory", err, sizeof err), "%s", err);
    CudaLayout l;
    cr_assert(cuda_layout_build(&p, &l, err, sizeof err), "%s", err);
    int64_t workspace = memplan_align(cuda_step_workspace_need(&cs)), planned = p.arena_bytes + l.persistent_bytes + workspace;
    cr_expect_geq(cuda_step_workspace_need(&cs), cudnn_conv_workspace_bytes(&cs.conv), "cuDNN's plans fit the workspace");
    for (int o = 0; o < p.g.n_ops; o++) cr_expect_geq(cuda_step_workspace_need(&cs), cuda_detloss_op_scratch_bytes(&p.g, &p.g.ops[o]), "so does the loss's scratch");
    cr_expect_eq(cs.mem.layout.arena_bytes, p.arena_bytes, "the step arena is the plan's");
    cr_expect_eq(cs.mem.layout.persistent_bytes, l.persistent_bytes);
    cr_expect_eq(cs.mem.workspace_bytes, workspace, "the workspace is what cuDNN's plans and the library kernels need");
    cr_expect_eq(cuda_step_device_bytes(&cs), planned);
    cr_expect(cs.mem.arena && cs.mem.persistent, "both regions are allocated");
    int64_t drop = (int64_t)free0 - (int64_t)free1;
    cr_log_info("planned %lld bytes (arena %lld, persistent %lld, workspace %lld); free memory dropped by %lld across open", (long long)planned,
                (long long)p.arena_bytes, (long long)l.persistent_bytes, (long long)workspace, (long long)drop);
    cr_expect_geq(drop + (2 << 20), planned, "the allocations are real: free memory dropped by %lld for %lld planned bytes", (long long)drop, (long long)planned);
    cuda_step_close(&cs);
    cr_assert(CUDA_CALL(&d.L, cuMemGetInfo, (&free2, &total), "reading free memory", err, sizeof err), "%s", err);
    cr_log_info("after close: %lld bytes below the free memory before open", (long long)free0 - (long long)free2);
    cr_expect_geq((int64_t)free2 - (int64_t)free1 + (2 << 20), planned, "closing gives the plan's regions back");
    cuda_layout_free(&l);
    plan_free(&p);
    cuda_device_close(&d);
}
