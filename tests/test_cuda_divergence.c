/* tests/test_cuda_divergence.c — the tiny model's whole fp32 step run fusion
 * group by fusion group on the GPU (CudaStep) and the CPU (TrainStep's
 * interpreter, generated kernels) from the same state: every output a group
 * leaves for later ops must agree. A group that disagrees is named with its
 * op, tensor and route, and the CPU's values are put on the device before
 * the next group, so one run names every wrong op, not just the first.
 * `SKIP: no CUDA device` without one. */
#include <math.h>

#include "../runtime/cuda/cuda_step.h"
#include "../runtime/ref_kernels.h"
#include "../runtime/synthetic.h"
#include "../runtime/train_step.h"
#include "../runtime/weights.h"
#include "test_gpu.h"

/* The route of the launch that runs op o. */
static const char *route_of_op(const CudaStep *cs, int o) {
    const KProgram *kp = &cs->kern.kp;
    for (int l = 0; l < kp->n_launches; l++)
        if (kp->launches[l].op_lo <= o && o <= kp->launches[l].op_hi) return cuda_route_name(cuda_step_route_for(cs, &cs->plan->g, &kp->launches[l]));
    return "no launch";
}

/* env: "NAME=VALUE" set while the GPU step opens (NULL: none). Returns the
 * number of group outputs that disagreed by more than tol of their largest
 * CPU magnitude. */
static int divergent_outputs(const char *size, const char *layout, const char *env, double tol) {
    CudaDevice probe;
    open_gpu_or_skip(&probe);
    char extra[256], err[2048];
    Plan pc, pg;
    snprintf(extra, sizeof extra, "%s --precision fp32 --layout %s", size, layout);
    tiny_plans_cpu_cuda(extra, extra, &pc, &pg);
    const Graph *g = &pg.g;
    cr_assert(pc.fusion.n_groups == pg.fusion.n_groups, "both targets group the step alike");
    for (int i = 0; i < pg.fusion.n_groups; i++)
        cr_assert(pc.fusion.groups[i].first == pg.fusion.groups[i].first && pc.fusion.groups[i].n == pg.fusion.groups[i].n, "group %d", i);
    TrainStep ts;
    cr_assert(train_step_init(&ts, &pc, err, sizeof err), "%s", err);
    train_step_set_fast(&ts, true);
    cr_assert(weights_init(&pc.g, ts.it.buf, 20250101, err, sizeof err), "%s", err);
    synthetic_batch(7, ts.batch, ts.imgsz, ts.nc, ts.max_boxes, train_step_images(&ts), train_step_boxes(&ts), train_step_counts(&ts));
    float *lrs = ts.it.buf[ts.lrs];
    lrs[0] = lrs[1] = lrs[2] = 0.01f;
    *(float *)ts.it.buf[ts.momentum] = 0.9f, *(float *)ts.it.buf[ts.opt_step] = 1.0f, *(float *)ts.it.buf[ts.grad_seed] = 1.0f;

    char name[64] = "", *value = NULL;
    if (env) {
        snprintf(name, sizeof name, "%.*s", (int)(strchr(env, '=') - env), env);
        value = strchr(env, '=') + 1;
        cr_assert_eq(setenv(name, value, 1), 0);
    }
    CudaStep cs;
    bool opened = cuda_step_open(&cs, &pg, 0, err, sizeof err);
    if (env) unsetenv(name);
    cr_assert(opened, "%s", err);
    char line[1024];
    cuda_step_describe(&cs, line, sizeof line);
    int split = 0;
    for (int l = 0; l < cs.kern.kp.n_launches; l++) {
        const KLaunch *ln = &cs.kern.kp.launches[l];
        /* split as the launch takes it: its channels a thread depend on the bound addresses */
        const Kernel *k = ln->kernel >= 0 ? &cs.kern.kp.kernels[ln->kernel] : NULL;
        split += k && k->skel == KS_CHANNEL_REDUCE && cuda_reduce_split(ln, cuda_elem_vec(k, ln, cs.ptr)) > 1;
    }
    cr_log_info("%s %s %s: %s; %d channel reductions split over blocks", size, layout, env ? env : "(defaults)", line, split);
    cr_expect(split > 0 || strstr(size, "--imgsz 64"), "a plan this size splits some channel reduction over blocks");
    cr_assert(cuda_step_upload_state(&cs, ts.it.buf, err, sizeof err), "%s", err);
    const int inputs[] = {ts.images, ts.boxes, ts.counts, ts.lrs, ts.momentum, ts.opt_step, ts.grad_seed};
    for (int i = 0; i < 7; i++) cr_assert(cuda_step_set_input(&cs, inputs[i], ts.it.buf[inputs[i]], err, sizeof err), "%s", err);

    /* an output is compared when something after its group reads it, or nothing reads it at all */
    int *last_read = malloc(sizeof(int) * (size_t)g->n_tensors);
    for (int t = 0; t < g->n_tensors; t++) last_read[t] = -1;
    for (int o = 0; o < g->n_ops; o++)
        for (int i = 0; i < g->ops[o].n_in; i++) last_read[g->ops[o].in[i]] = o;
    int64_t cap = 1;
    for (int t = 0; t < g->n_tensors; t++) cap = shape_numel(&g->tensors[t].shape) > cap ? shape_numel(&g->tensors[t].shape) : cap;
    float *got = malloc(sizeof(float) * (size_t)cap), *want = malloc(sizeof(float) * (size_t)cap);
    int divergent = 0, compared = 0;
    double worst = 0;
    for (int gi = 0; gi < pg.fusion.n_groups; gi++) {
        int lo = pg.fusion.groups[gi].first, hi = lo + pg.fusion.groups[gi].n;
        cr_assert(interp_run(&ts.it, lo, hi, err, sizeof err), "CPU ops [%d, %d): %s", lo, hi, err);
        cr_assert(cuda_step_run(&cs, lo, hi, err, sizeof err), "GPU ops [%d, %d): %s", lo, hi, err);
        for (int o = lo; o < hi; o++) {
            const Op *op = &g->ops[o];
            for (int k = 0; k < op->n_out; k++) {
                int t = op->out[k];
                const Tensor *x = &g->tensors[t];
                if (x->dtype != DT_F32 || !cs.ptr[t] || !ts.it.buf[t] || pg.fusion.views.base[t] != t || (last_read[t] >= 0 && last_read[t] < hi)) continue;
                int64_t n = shape_numel(&x->shape);
                memcpy(want, ts.it.buf[t], sizeof(float) * (size_t)n);
                if (x->channels_last) cr_assert(ref_channels_last_to_nchw(x, want));
                cr_assert(cuda_step_download(&cs, t, got, err, sizeof err), "%s", err);
                double scale = 1e-6, d = 0;
                int64_t at = 0;
                for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(want[e]));
                for (int64_t e = 0; e < n; e++) {
                    double de = isfinite(got[e]) ? fabs((double)got[e] - want[e]) / scale : INFINITY;
                    if (de > d) d = de, at = e;
                }
                compared++;
                worst = fmax(worst, d);
                if (d <= tol) continue;
                if (divergent++ < 24)
                    cr_log_error("op %d %s (%s, group %d) output %d %s [%lld elements%s]: worst difference %.3g of its largest %.3g at element %lld (GPU %.6g CPU %.6g)", o,
                                 op_def(op->kind)->name, route_of_op(&cs, o), gi, k, x->name, (long long)n, x->channels_last ? ", channels last" : "", d, scale,
                                 (long long)at, got[at], want[at]);
                /* the next groups start from the CPU's values */
                cr_assert(cuda_step_upload(&cs, t, want, err, sizeof err), "%s", err);
            }
        }
    }
    cr_log_info("%s %s: %d outputs of %d groups compared, %d differ by more than %.0e of their largest (worst %.3g)", layout, env ? env : "(defaults)", compared,
                pg.fusion.n_groups, divergent, tol, worst);
    cr_expect_gt(compared, 100);
    free(got), free(want), free(last_read);
    cuda_step_close(&cs);
    train_step_free(&ts);
    plan_free(&pc);
    plan_free(&pg);
    cuda_device_close(&probe);
    return divergent;
}

/* fp32 on both sides: cuDNN's and cuBLASLt's summation orders against the
 * CPU's stay orders of magnitude below 1e-3 of a tensor's largest value */
#define SMALL "--imgsz 64 --batch 2"
/* 192 px, 4 images: the first layers' channels hold 36864 and 9216 elements, so their reductions
 * split over three blocks and finish in the last one (cuda_reduce_split) */
#define SPLIT "--imgsz 192 --batch 4"
Test(cuda_divergence, every_group_of_the_nchw_step_agrees) { cr_expect_eq(divergent_outputs(SMALL, "nchw", NULL, 1e-3), 0); }
Test(cuda_divergence, every_group_of_the_nhwc_step_agrees) { cr_expect_eq(divergent_outputs(SMALL, "nhwc", NULL, 1e-3), 0); }
/* the same with every 1x1 convolution in cuDNN and the heuristics' first engines: the routes apart */
Test(cuda_divergence, every_group_of_the_nhwc_step_agrees_on_cudnn_alone) {
    cr_expect_eq(divergent_outputs(SMALL, "nhwc", "YOLOCC_CUDA_CONV1X1=cudnn", 1e-3), 0);
}
Test(cuda_divergence, every_group_of_the_nhwc_step_agrees_with_heuristic_engines) {
    cr_expect_eq(divergent_outputs(SMALL, "nhwc", "YOLOCC_CUDNN_TUNE=heuristic", 1e-3), 0);
}
Test(cuda_divergence, every_group_agrees_where_reductions_split_nchw) { cr_expect_eq(divergent_outputs(SPLIT, "nchw", NULL, 1e-3), 0); }
Test(cuda_divergence, every_group_agrees_where_reductions_split_nhwc) { cr_expect_eq(divergent_outputs(SPLIT, "nhwc", NULL, 1e-3), 0); }
