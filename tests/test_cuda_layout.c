/* tests/test_cuda_layout.c — CudaStep with channels-last plans (--layout nhwc) on a host-memory
 * stand-in for the driver (no GPU): transfers cross the bus in NCHW order while the device holds
 * NHWC, and every library op (pooling, resize, the layout changes) on the host fallback equals
 * the reference. Owns no runtime code; the kernels' own arithmetic is tests/test_cuda_emul.c's. */
#include <math.h>

#include "../passes/views.h"
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/cuda/cuda_step.h"
#include "../runtime/interp.h"
#include "../runtime/ref_kernels.h"
#include "test_cuda_host.h"
#include "test_gpu.h"

static CuResult htod(CuDevicePtr dst, const void *src, size_t n, CuStream s) {
    (void)s;
    memcpy((void *)(uintptr_t)dst, src, n);
    return 0;
}
static CuResult dtoh(void *dst, CuDevicePtr src, size_t n, CuStream s) {
    (void)s;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
}
static CuResult sync_none(CuStream s) {
    (void)s;
    return 0;
}

/* A host-backed CudaStep whose library ops run on the host (YOLOCC_CUDA_LIB_HOST). */
static void open_host(HostStep *h, const Plan *p) {
    host_step_setup(h, p);
    h->cs.lib_host = true;
    cuda_step_census(&h->cs, &p->g, &h->cs.kern.kp);
    h->cs.dev.L.cuMemcpyHtoDAsync = htod, h->cs.dev.L.cuMemcpyDtoHAsync = dtoh, h->cs.dev.L.cuStreamSynchronize = sync_none;
}

/* v rounded to what storage type st holds, in place */
static void round_to(DType st, float *v, int64_t n) {
    for (int64_t i = 0; i < n && st != DT_F32; i++) {
        uint16_t b;
        cuda_f32_to_storage(st, &v[i], &b, 1), cuda_storage_to_f32(st, &b, &v[i], 1);
    }
}

/* n values in [-2, 2) that the storage type st holds exactly */
static float *values(DType st, int64_t n, uint64_t *seed) {
    float *v = malloc(sizeof(float) * (size_t)n + 1);
    cr_assert_not_null(v);
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
        v[i] = (float)((double)(*seed >> 40) / (1 << 24) * 4 - 2);
    }
    round_to(st, v, n);
    return v;
}

/* The device bytes of channels-last t hold element (n, c, y, x) of the NCHW
 * host copy v at image n, pixel (y, x), channel c. */
static int64_t misplaced(const CudaStep *cs, int t, const float *v) {
    const Shape *s = &cs->plan->g.tensors[t].shape;
    /* a channel slice of a wider tensor (an upsample's output in its concat): pixels its base's channels apart */
    const int64_t C = s->d[1], P = s->d[2] * s->d[3], row = views_row_stride(&cs->plan->g, &cs->plan->fusion.views, t), ps = row ? row : C;
    DType st = (DType)cs->stype[t];
    const unsigned char *dev = (const unsigned char *)(uintptr_t)cs->ptr[t];
    int64_t bad = 0;
    for (int64_t i = 0; i < shape_numel(s); i++) {
        int64_t n = i / (C * P), c = i / P % C, p = i % P;
        float got;
        cuda_storage_to_f32(st, dev + (size_t)((n * P + p) * ps + c) * dtype_size(st), &got, 1);
        bad += got != v[i];
    }
    return bad;
}

/* Uploads and downloads of channels-last activations, bf16 and fp32: the
 * host side is NCHW, the device side channels last, and the round trip
 * returns every value. */
Test(cuda_layout, channels_last_tensors_cross_the_bus_in_nchw_order) {
    const char *precisions[] = {"bf16", "fp32"};
    for (int q = 0; q < 2; q++) {
        char extra[128], err[1024];
        snprintf(extra, sizeof extra, "--imgsz 64 --batch 2 --precision %s --layout nhwc", precisions[q]);
        Plan p;
        tiny_plan(extra, &p);
        HostStep h;
        open_host(&h, &p);
        CudaStep *cs = &h.cs;
        uint64_t seed = 11;
        int checked = 0;
        for (int t = 0; t < p.g.n_tensors && checked < 6; t++) {
            const Tensor *x = &p.g.tensors[t];
            if (tensor_logical_order(x) || !cs->ptr[t]) continue;
            int64_t n = shape_numel(&x->shape);
            float *v = values((DType)cs->stype[t], n, &seed), *back = malloc(sizeof(float) * (size_t)n + 1);
            cr_assert_not_null(back);
            cr_assert(cuda_step_upload(cs, t, v, err, sizeof err), "%s", err);
            cr_expect_eq(misplaced(cs, t, v), 0, "%s tensor %d [%lld,%lld,%lld,%lld]: stored channels last", precisions[q], t, (long long)x->shape.d[0],
                         (long long)x->shape.d[1], (long long)x->shape.d[2], (long long)x->shape.d[3]);
            cr_assert(cuda_step_download(cs, t, back, err, sizeof err), "%s", err);
            cr_expect_arr_eq(back, v, sizeof(float) * (size_t)n, "%s tensor %d: NCHW back", precisions[q], t);
            int ids[1] = {t};
            void *hosts[1] = {back};
            memset(back, 0, sizeof(float) * (size_t)n);
            cr_assert(cuda_step_download_many(cs, 1, ids, hosts, err, sizeof err), "%s", err);
            cr_expect_arr_eq(back, v, sizeof(float) * (size_t)n, "%s tensor %d: NCHW back, several at once", precisions[q], t);
            free(v), free(back);
            checked++;
        }
        cr_expect_eq(checked, 6, "%s: channels-last activations with memory", precisions[q]);
        host_step_close(&h);
        plan_free(&p);
    }
}

/* Every library launch of the NHWC tiny bf16 step run by the host fallback
 * (its inputs down in NCHW, the reference kernel, its output up channels
 * last) equals the reference kernel on the same values: the layout changes
 * of the images, the weights and the head's levels, pooling and resize. */
Test(cuda_layout, library_ops_on_the_host_fallback_equal_the_reference) {
    char err[2048];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision bf16 --layout nhwc", &p);
    const Graph *g = &p.g;
    HostStep h;
    open_host(&h, &p);
    CudaStep *cs = &h.cs;
    uint64_t seed = 5;
    int ran = 0, relayouts = 0;
    for (int l = 0; l < cs->kern.kp.n_launches; l++) {
        const KLaunch *ln = &cs->kern.kp.launches[l];
        if (cuda_step_route(g, ln) != CUDA_ROUTE_LIBRARY) continue;
        const Op *op = &g->ops[ln->op_lo];
        void **buf = calloc((size_t)g->n_tensors, sizeof *buf);
        cr_assert_not_null(buf);
        for (int i = 0; i < op->n_in; i++) {
            int t = op->in[i];
            if (buf[t]) continue;
            buf[t] = values((DType)cs->stype[t], shape_numel(&g->tensors[t].shape), &seed);
            cr_assert(cuda_step_upload(cs, t, buf[t], err, sizeof err), "%s", err);
        }
        int t = op->out[0];
        int64_t n = shape_numel(&g->tensors[t].shape);
        buf[t] = calloc((size_t)n, sizeof(float));
        float *got = malloc(sizeof(float) * (size_t)n + 1);
        cr_assert(buf[t] && got);
        cr_assert(ref_kernel(op->kind)(g, op, buf, err, sizeof err), "%s", err);
        /* the reference in fp32, rounded to the output's storage as the upload rounds it */
        float *want = malloc(sizeof(float) * (size_t)n + 1);
        cr_assert_not_null(want);
        memcpy(want, buf[t], sizeof(float) * (size_t)n);
        round_to((DType)cs->stype[t], want, n);
        cr_assert(cuda_step_run(cs, ln->op_lo, ln->op_hi + 1, err, sizeof err), "%s", err);
        cr_assert(cuda_step_download(cs, t, got, err, sizeof err), "%s", err);
        cr_expect_arr_eq(got, want, sizeof(float) * (size_t)n, "op %d (%s, %s -> %s): host fallback vs reference", op->id, op_def(op->kind)->name,
                         g->tensors[op->in[0]].channels_last ? "NHWC" : "NCHW", g->tensors[t].channels_last ? "NHWC" : "NCHW");
        if (!tensor_logical_order(&g->tensors[t])) cr_expect_eq(misplaced(cs, t, want), 0, "op %d: its output stored channels last", op->id);
        relayouts += op->kind == OP_RESHAPE || op->kind == OP_DETACH;
        for (int tt = 0; tt < g->n_tensors; tt++) free(buf[tt]);
        free(buf), free(got), free(want);
        ran++;
    }
    cr_log_info("%d library ops on the host fallback, %d of them layout changes", ran, relayouts);
    cr_expect_eq(ran - relayouts, 9, "3 max pools, 2 resizes (forward and its recompute) and their 4 gradients");
    cr_expect_gt(relayouts, 20, "the images, each k x k weight and its gradient, the head's levels");
    cr_expect_eq(cs->host_ops_run, ran);
    host_step_close(&h);
    plan_free(&p);
}
