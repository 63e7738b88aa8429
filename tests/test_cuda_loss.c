/* tests/test_cuda_loss.c — the detection loss's phase kernels on a GPU (in
 * `make check-gpu`): the tiny plan's detect_loss and detect_loss_bwd run
 * alone through CudaStep on random head outputs and synthetic targets, and
 * must match the reference kernels (the double oracle) on the same stored
 * values. Host emulation (test_detloss_emul.c) checks the same code bit for
 * bit; here the device's libm and FMA contraction may move the last bits.
 * Without a device: `SKIP: no CUDA device`. */
#include "../runtime/cuda/cuda_step.h"
#include "../runtime/ref_kernels.h"
#include "../runtime/synthetic.h"
#include "test_gpu.h"

static int find_op(const Graph *g, OpKind k) {
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].kind == k) return o;
    return -1;
}

/* Random values in [-4, 4] as t is stored on the device (rounded to bf16 /
 * fp16 where it is), uploaded there, and returned for the host. */
static float *random_stored(CudaStep *cs, int t, uint64_t *seed) {
    int64_t n = shape_numel(&cs->plan->g.tensors[t].shape);
    float *v = malloc(sizeof(float) * (size_t)n);
    unsigned char *raw = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL, v[i] = (float)((double)(*seed >> 40) / (1 << 24) * 8 - 4);
    cuda_f32_to_storage((DType)cs->stype[t], v, raw, n);
    cuda_storage_to_f32((DType)cs->stype[t], raw, v, n);
    free(raw);
    char err[1024];
    cr_assert(cuda_step_upload(cs, t, v, err, sizeof err), "%s", err);
    return v;
}

static void loss_matches(const char *precision, double grad_tol) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    char extra[256], err[2048];
    Plan p;
    /* the shapes of cuda_step's step_vs_cpu, so the kernel cache serves both */
    snprintf(extra, sizeof extra, "--imgsz 64 --batch 2 --precision %s --target cuda --arch sm_80,sm_90", precision);
    tiny_plan(extra, &p);
    const Graph *g = &p.g;
    int lf = find_op(g, OP_DETECT_LOSS), lb = find_op(g, OP_DETECT_LOSS_BWD);
    cr_assert(lf >= 0 && lb > lf);
    const Op *fw = &g->ops[lf], *bw = &g->ops[lb];
    CudaStep cs;
    cr_assert(cuda_step_open(&cs, &p, 0, err, sizeof err), "%s", err);
    cr_expect_eq(cs.host_ops, 0, "the loss has its kernels");
    void **buf = calloc((size_t)g->n_tensors, sizeof *buf);
    uint64_t seed = 99;
    const int nl = fw->a.nlevels, boxes = fw->in[nl], counts = fw->in[nl + 1];
    for (int i = 0; i < nl; i++) buf[fw->in[i]] = random_stored(&cs, fw->in[i], &seed);
    const Shape *bs = &g->tensors[boxes].shape;
    const int batch = (int)bs->d[0], max_boxes = (int)bs->d[1];
    float *images = malloc(sizeof(float) * (size_t)batch * 3 * 64 * 64);
    buf[boxes] = malloc(sizeof(float) * (size_t)batch * (size_t)max_boxes * 5);
    buf[counts] = malloc(sizeof(int64_t) * (size_t)batch);
    synthetic_batch(5, batch, 64, fw->a.nc, max_boxes, images, buf[boxes], buf[counts]);
    cr_assert(cuda_step_upload(&cs, boxes, buf[boxes], err, sizeof err), "%s", err);
    cr_assert(cuda_step_upload(&cs, counts, buf[counts], err, sizeof err), "%s", err);
    /* the backward reads the same boxes and counts, and a seed of 3; its levels are the forward's or,
     * where the plan recomputes them before the backward (the head's concats), copies given the same values */
    for (int i = 0; i < nl + 2; i++) {
        int tb = bw->in[1 + i], tf = fw->in[i];
        if (tb == tf) continue;
        cr_assert(i < nl && shape_eq(&g->tensors[tb].shape, &g->tensors[tf].shape) && g->tensors[tb].dtype == g->tensors[tf].dtype,
                  "the backward's operand %d is the forward's or a copy of it", i);
        size_t bytes = sizeof(float) * (size_t)shape_numel(&g->tensors[tf].shape);
        buf[tb] = malloc(bytes);
        memcpy(buf[tb], buf[tf], bytes);
    }
    float seed_val = 3.0f;
    buf[bw->in[0]] = malloc(sizeof(float));
    *(float *)buf[bw->in[0]] = seed_val;
    cr_assert(cuda_step_upload(&cs, bw->in[0], &seed_val, err, sizeof err), "%s", err);
    for (int i = 0; i < fw->n_out; i++) buf[fw->out[i]] = calloc((size_t)shape_numel(&g->tensors[fw->out[i]].shape), sizeof(float));
    for (int i = 0; i < bw->n_out; i++) buf[bw->out[i]] = calloc((size_t)shape_numel(&g->tensors[bw->out[i]].shape), sizeof(float));
    cr_assert(ref_kernel(OP_DETECT_LOSS)(g, fw, buf, err, sizeof err), "oracle: %s", err);
    cr_assert(ref_kernel(OP_DETECT_LOSS_BWD)(g, bw, buf, err, sizeof err), "oracle: %s", err);
    cr_assert(cuda_step_run(&cs, lf, lf + 1, err, sizeof err), "device loss: %s", err);
    /* the copies go up after the forward ran: the arena may give them the bytes of what it no longer reads */
    for (int i = 0; i < nl; i++)
        if (bw->in[1 + i] != fw->in[i]) cr_assert(cuda_step_upload(&cs, bw->in[1 + i], buf[bw->in[1 + i]], err, sizeof err), "%s", err);
    cr_assert(cuda_step_run(&cs, lb, lb + 1, err, sizeof err), "device loss backward: %s", err);
    float total, items[3];
    cr_assert(cuda_step_download(&cs, fw->out[0], &total, err, sizeof err), "%s", err);
    cr_assert(cuda_step_download(&cs, fw->out[1], items, err, sizeof err), "%s", err);
    const float *want_items = buf[fw->out[1]];
    cr_expect_leq(rel_diff(total, *(float *)buf[fw->out[0]]), 1e-5, "total: device %.9g oracle %.9g", total, *(float *)buf[fw->out[0]]);
    for (int k = 0; k < 3; k++) cr_expect_leq(rel_diff(items[k], want_items[k]), 1e-5, "item %d: device %.9g oracle %.9g", k, items[k], want_items[k]);
    double worst = 0;
    for (int i = 0; i < bw->n_out; i++) {
        int t = bw->out[i];
        int64_t n = shape_numel(&g->tensors[t].shape);
        float *got = malloc(sizeof(float) * (size_t)n);
        const float *want = buf[t];
        cr_assert(cuda_step_download(&cs, t, got, err, sizeof err), "%s", err);
        double scale = 1e-12, d = 0;
        for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(want[e]));
        for (int64_t e = 0; e < n; e++) d = fmax(d, fabs((double)got[e] - want[e]) / scale);
        cr_expect_leq(d, grad_tol, "level %d gradient: worst difference %.3g of its largest magnitude %.3g", i, d, scale);
        worst = fmax(worst, d);
        free(got);
    }
    cr_log_info("%s on %s: loss %.7g (oracle %.7g), worst gradient difference %.3g of the largest", precision, cs.dev.name, total, *(float *)buf[fw->out[0]], worst);
    for (int t = 0; t < g->n_tensors; t++) free(buf[t]);
    free(buf);
    free(images);
    cuda_step_close(&cs);
    plan_free(&p);
    cuda_device_close(&probe);
}

/* fp32 storage: the device computes in double like the oracle; only libm and
 * contraction differ, far below fp32's rounding of the stored gradient. */
Test(cuda_loss, fp32_matches_the_oracle) { loss_matches("fp32", 1e-5); }
/* bf16 storage of the levels and their gradients: one bf16 rounding (2^-9). */
Test(cuda_loss, bf16_matches_the_oracle) { loss_matches("bf16", 4e-3); }
