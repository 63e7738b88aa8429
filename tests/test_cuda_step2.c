/* tests/test_cuda_step2.c — CudaStep's training step on a host-memory stand-in for the driver:
 * fp16 dynamic loss scaling around the optimizer (the decision, the unscale / clip / skipped
 * updates), CUDA-graph capture and replay (the segmentation, capture / replay bookkeeping), and
 * the run hook that data parallelism puts between launches. The same on a GPU is
 * test_cuda_step_gpu.c's. Owns no runtime code. */
#include <math.h>

#include "../compiler/kernel_ir.h"
#include "../compiler/lib_kernels.h"
#include "../compiler/model_cfg.h"
#include "../compiler/train_compile.h"
#include "../runtime/cuda/cuda_step.h"
#include "test_cuda_host.h"
#include "test_gpu.h"

static int clip_op_of(const Graph *g) {
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].kind == OP_GRAD_CLIP) return o;
    return -1;
}

/* ---- pure (no GPU) ---- */

Test(cuda_step, decide_applies_finite_steps_and_skips_nonfinite_ones) {
    LossScale ls;
    loss_scale_init(&ls, true);
    int lo = -1, hi = -1;
    cr_expect(cuda_step_decide(&ls, 3.5f, 40, 60, &lo, &hi), "a finite norm applies the step");
    cr_expect(lo == 41 && hi == 60, "the updates follow the clip: [%d, %d)", lo, hi);
    cr_expect_eq(ls.scale, 65536.0f);
    cr_expect(!cuda_step_decide(&ls, INFINITY, 40, 60, &lo, &hi), "inf skips");
    cr_expect(lo == 60 && hi == 60, "no update runs: [%d, %d)", lo, hi);
    cr_expect_eq(ls.scale, 32768.0f, "the scale halves");
    cr_expect(!cuda_step_decide(&ls, NAN, 40, 60, &lo, &hi), "NaN skips");
    cr_expect_eq(ls.scale, 16384.0f);
    cr_expect(ls.steps == 3 && ls.skipped == 2 && ls.growth_tracker == 0);
    /* bf16 and fp32 plans: nothing is skipped and the scale stays 1 */
    loss_scale_init(&ls, false);
    cr_expect(cuda_step_decide(&ls, INFINITY, 40, 60, &lo, &hi) && lo == 41 && hi == 60);
    cr_expect(ls.scale == 1.0f && ls.skipped == 0);
}

/* The validation step borrows the training step's arena between the training
 * step's runs (cuda_step_open_sharing). That holds only if no run reads
 * arena memory an earlier run wrote: the optimizer's runs (the clip, then the
 * updates, cuda_step_optimize) read parameters, gradients, optimizer state
 * and inputs, all persistent, or what the clip itself wrote. */
Test(cuda_step, the_optimizer_reads_nothing_backward_left_in_the_arena) {
    const char *plans[] = {"--imgsz 64 --batch 2 --target cuda --arch sm_90", "--imgsz 64 --batch 2 --precision fp16 --optimizer adamw --target cuda --arch sm_90"};
    for (int q = 0; q < 2; q++) {
        Plan p;
        tiny_plan(plans[q], &p);
        const Graph *g = &p.g;
        const int clip = clip_op_of(g);
        cr_assert_geq(clip, 0);
        bool *persistent = calloc((size_t)g->n_tensors + 1, sizeof *persistent);
        cr_assert_not_null(persistent);
        memplan_mark_persistent(g, persistent);
        int reads = 0;
        for (int o = clip; o < g->n_ops; o++)
            for (int i = 0; i < g->ops[o].n_in; i++) {
                const int t = g->ops[o].in[i];
                const Tensor *x = &g->tensors[t];
                const bool own = x->producer >= clip;
                cr_expect(persistent[t] || x->kind == TK_INPUT || own, "%s: op %d (%s) reads %s, which the arena holds from before the optimizer", plans[q], o,
                          op_def(g->ops[o].kind)->name, x->name ? x->name : "an activation");
                reads++;
            }
        cr_expect_gt(reads, 0);
        free(persistent);
        plan_free(&p);
    }
}

Test(cuda_step, graph_segments_split_at_host_ops) {
    const CudaRoute K = CUDA_ROUTE_KERNEL, L = CUDA_ROUTE_LIBRARY, C = CUDA_ROUTE_CUDNN, H = CUDA_ROUTE_HOST;
    CudaRoute r[] = {K, C, L, H, H, K, C, H};
    CudaSegment seg[8];
    int n = cuda_graph_segments(r, NULL, 8, seg);
    cr_assert_eq(n, 5);
    const CudaSegment want[] = {{0, 3, false}, {3, 4, true}, {4, 5, true}, {5, 7, false}, {7, 8, true}};
    for (int i = 0; i < n; i++)
        cr_expect(seg[i].lo == want[i].lo && seg[i].hi == want[i].hi && seg[i].host == want[i].host, "segment %d: [%d, %d) %s", i, seg[i].lo, seg[i].hi,
                  seg[i].host ? "host" : "graph");
    CudaRoute only_host[] = {H};
    cr_expect(cuda_graph_segments(only_host, NULL, 1, seg) == 1 && seg[0].host && seg[0].hi == 1);
    cr_expect_eq(cuda_graph_segments(r, NULL, 0, seg), 0, "an empty run has no segment");
}

/* The tiny plan's step: no op runs on the host (the detection loss has its
 * phase kernels), so its launches make one graph; with the loss and its
 * backward on the host (YOLOCC_CUDA_LIB_HOST's route for them) they would
 * make three around them: the forward, the few concats between the loss and
 * its backward, and the backward with the clip and the updates. */
Test(cuda_step, graph_segments_of_the_tiny_plan) {
    char err[512];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2", &p);
    KProgram kp;
    cr_assert(kernel_lower(&p.g, &p.fusion, p.precision, &kp, err, sizeof err), "%s", err);
    int n = kp.n_launches, hosts = 0, runs = 0;
    CudaRoute *r = malloc(sizeof *r * (size_t)n);
    CudaSegment *seg = malloc(sizeof *seg * (size_t)n);
    cr_assert_eq(cuda_graph_segments((const CudaRoute[]){CUDA_ROUTE_KERNEL}, NULL, 1, seg), 1);
    for (int l = 0; l < n; l++) r[l] = cuda_step_route(&p.g, &kp.launches[l]);
    cr_expect_eq(cuda_graph_segments(r, NULL, n, seg), 1, "the whole step is one graph");
    for (int l = 0; l < n; l++) {
        if (r[l] == CUDA_ROUTE_DETLOSS) r[l] = CUDA_ROUTE_HOST;
        hosts += r[l] == CUDA_ROUTE_HOST;
        runs += r[l] != CUDA_ROUTE_HOST && (l == 0 || r[l - 1] == CUDA_ROUTE_HOST);
    }
    int k = cuda_graph_segments(r, NULL, n, seg);
    cr_expect_eq(hosts, 2, "detect_loss and detect_loss_bwd");
    cr_expect_eq(k, hosts + runs);
    int at = 0, graphs = 0;
    for (int i = 0; i < k; i++) {
        cr_expect_eq(seg[i].lo, at, "segments cover the launches in order");
        cr_expect_gt(seg[i].hi, seg[i].lo);
        for (int l = seg[i].lo; l < seg[i].hi; l++) cr_expect_eq(r[l] == CUDA_ROUTE_HOST, seg[i].host, "launch %d in segment %d", l, i);
        if (seg[i].host) cr_expect_eq(seg[i].hi - seg[i].lo, 1, "a host op alone");
        /* maximal: a graph ends at a host op or the end */
        if (!seg[i].host) cr_expect(seg[i].hi == n || r[seg[i].hi] == CUDA_ROUTE_HOST, "graph segment %d is maximal", i);
        graphs += !seg[i].host;
        at = seg[i].hi;
    }
    cr_expect_eq(at, n);
    cr_expect_eq(graphs, 2, "the forward and the rest: the loss's gradient runs right after the loss (no twins of its inputs between them)");
    cr_log_info("%d launches: %d segments (%d graphs, %d host ops)", n, k, graphs, hosts);
    for (int i = 0; i < k; i++) {
        const KLaunch *a = &kp.launches[seg[i].lo], *b = &kp.launches[seg[i].hi - 1];
        cr_log_info("segment %d: launches [%d, %d) ops %d (%s) .. %d (%s)", i, seg[i].lo, seg[i].hi, a->op_lo, op_def(p.g.ops[a->op_lo].kind)->name, b->op_hi,
                    op_def(p.g.ops[b->op_hi].kind)->name);
    }
    free(r), free(seg);
    kernel_program_free(&kp);
    plan_free(&p);
}

/* The YOLO11 step (C2PSA: attention and its gradient), NCHW and NHWC
 * (its layout changes too): every launch has a device route, the attention
 * ops among the library launches; its validation graph runs attention there
 * too. The routes depend on the op kinds only, so the graphs are compiled
 * without kernels. */
/* A bf16 CUDA training plan (with its validation graph) of file at 64 px,
 * batch 2, fused, pointwise recompute; release with train_compiled_free and
 * arena_free. */
static void compile_cuda_training(const char *file, const char *scale, int64_t nc, bool nhwc, Arena *a, TrainCompiled *tc) {
    ModelConfig cfg;
    Diag d;
    memset(tc, 0, sizeof *tc);
    arena_init(a, 0);
    diag_init(&d, file);
    ModelOptions mo = {.scale = scale, .nc = nc};
    TrainOptions to = {.imgsz = 64, .batch = 2, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .recompute = RECOMPUTE_POINTWISE, .fuse = FUSE_FULL,
                       .precision = PREC_BF16, .target = TARGET_CUDA, .channels_last = nhwc};
    cr_assert(model_cfg_load(a, file, &mo, &cfg, &d) && compile_training(a, &cfg, &to, tc, &d), "%s: %s", file, d.msg);
}

/* The launches of tc's step (which 0) or validation graph (1), and their routes' census */
static void census_of(const TrainCompiled *tc, int which, KProgram *kp, CudaStep *cs) {
    char err[512];
    cr_assert(kernel_lower(which ? &tc->ev.em.g : &tc->m.g, which ? &tc->ev.efu : &tc->fu, PREC_BF16, kp, err, sizeof err), "%s", err);
    memset(cs, 0, sizeof *cs);
    cuda_step_census(cs, which ? &tc->ev.em.g : &tc->m.g, kp);
}

Test(cuda_step, yolo11_runs_nothing_on_the_host) {
    const char *models[] = {"models/yolo11.yaml", "models/yolo11.yaml"};
    for (int m = 0; m < 2; m++) {
        Arena a;
        TrainCompiled tc;
        const char *layout = m == 1 ? "nhwc" : "nchw";
        compile_cuda_training(models[m], "n", 0, m == 1, &a, &tc);
        for (int which = 0; which < 2; which++) {
            const Graph *g = which ? &tc.ev.em.g : &tc.m.g;
            KProgram kp;
            CudaStep cs;
            char line[1024];
            census_of(&tc, which, &kp, &cs);
            int attention = 0, attention_bwd = 0, relayouts = 0;
            for (int l = 0; l < kp.n_launches; l++) {
                const KLaunch *ln = &kp.launches[l];
                OpKind k = g->ops[ln->op_lo].kind;
                if (ln->kernel < 0 && (k == OP_RESHAPE || k == OP_DETACH)) {
                    cr_expect_eq(cuda_step_route(g, ln), CUDA_ROUTE_LIBRARY, "launch %d: a layout change", l);
                    relayouts++;
                }
                if (ln->kernel >= 0 || (k != OP_ATTENTION && k != OP_ATTENTION_BWD)) continue;
                cr_expect_eq(cuda_step_route(g, ln), CUDA_ROUTE_LIBRARY, "launch %d (%s)", l, op_def(k)->name);
                attention += k == OP_ATTENTION, attention_bwd += k == OP_ATTENTION_BWD;
            }
            cuda_step_describe(&cs, line, sizeof line);
            cr_log_info("%s %s %s: %s", models[m], layout, which ? "validation" : "step", line);
            printf("cuda_step %s %s %s: %s (attention x%d, attention_bwd x%d, layout changes x%d)\n", models[m], layout, which ? "validation" : "step", line,
                   attention, attention_bwd, relayouts);
            cr_expect_eq(relayouts > 0, m == 1, "%s: layout changes exactly in NHWC", layout);
            /* validation decodes boxes (dfl, dist2bbox) on the host: not attention's business */
            cr_expect_eq(which ? cs.host_op_kinds[OP_ATTENTION] : cs.host_ops, 0, "%s %s %s: %s", models[m], layout, which ? "validation" : "step", line);
            cr_expect_gt(attention, 0, "%s has attention", models[m]);
            cr_expect_eq(attention_bwd > 0, which == 0, "only the step differentiates it");
            kernel_program_free(&kp);
        }
        train_compiled_free(&tc);
        arena_free(&a);
    }
}

/* The YOLOv10-style step on the device: E2EDetectLoss is two loss ops and
 * two backward ones on their phase kernels, their sums generated kernels,
 * nothing on the host; its validation runs both losses too. */
Test(cuda_step, yolov10_end2end_losses_run_on_the_device) {
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        Arena a;
        TrainCompiled tc;
        compile_cuda_training("tests/parity/v10tiny.yaml", NULL, 3, nhwc, &a, &tc);
        for (int which = 0; which < 2; which++) {
            const Graph *g = which ? &tc.ev.em.g : &tc.m.g;
            const TrainingGraph *tg = which ? &tc.ev.etg : &tc.tg;
            KProgram kp;
            CudaStep cs;
            char line[1024];
            census_of(&tc, which, &kp, &cs);
            int sums = 0;
            for (int l = 0; l < kp.n_launches; l++) {
                const KLaunch *ln = &kp.launches[l];
                for (int o = ln->op_lo; o <= ln->op_hi; o++)
                    if (g->ops[o].out[0] == tg->loss || g->ops[o].out[0] == tg->items) {
                        cr_expect_eq(cuda_step_route(g, ln), CUDA_ROUTE_KERNEL, "launch %d: a loss sum in a generated kernel", l);
                        sums++;
                    }
            }
            cuda_step_describe(&cs, line, sizeof line);
            cr_log_info("v10tiny %s %s: %s", nhwc ? "nhwc" : "nchw", which ? "validation" : "step", line);
            cr_expect_eq(sums, 2, "the summed loss and items");
            cr_expect_eq(cs.loss_ops, which ? 2 : 4, "%s: one2many and one2one losses%s", which ? "validation" : "step", which ? "" : " and their gradients");
            if (!which) cr_expect_eq(cs.host_ops, 0, "step: %s", line);
            kernel_program_free(&kp);
        }
        train_compiled_free(&tc);
        arena_free(&a);
    }
}

/* ---- on a host-memory stand-in for the driver (no GPU) ----
 * As test_cuda_step.c's: device addresses are host pointers. The unscale
 * kernel divides for real, the cast converts to fp16, generated kernels are
 * only counted. A capture records launches instead of running them, and a
 * graph launch runs what was recorded: a replay reads device memory when it
 * runs, as a CUDA graph does. */

enum { MAX_REC = 4096, MAX_GRAPHS = 16 }; /* the stand-in tests capture a few graphs */
typedef struct Rec {
    CuFunction f;
    YlArgs a;
} Rec;
static Rec rec[MAX_GRAPHS][MAX_REC];
static int rec_n[MAX_GRAPHS], n_graphs_made, captures, graph_launches;
static bool capturing;
static int host_kernels, host_casts, host_unscales;
static long executed, syncs; /* launches run (eagerly or replayed), stream waits */
static CuFunction const CAST_FN = (CuFunction)(uintptr_t)0xca57, UNSCALE_FN = (CuFunction)(uintptr_t)0x5ca1e, LIB_FN = (CuFunction)(uintptr_t)0x11b;

static CuResult sh_htod(CuDevicePtr dst, const void *src, size_t n, CuStream s) {
    (void)s;
    cr_assert(!capturing, "no copy inside a capture");
    memcpy((void *)(uintptr_t)dst, src, n);
    return 0;
}
static CuResult sh_dtoh(void *dst, CuDevicePtr src, size_t n, CuStream s) {
    (void)s;
    cr_assert(!capturing, "no copy inside a capture");
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
}
static CuResult sh_sync(CuStream s) {
    (void)s;
    cr_assert(!capturing, "no synchronisation inside a capture");
    syncs++;
    return 0;
}
static void execute(CuFunction f, const YlArgs *a) {
    executed++;
    if (f == CAST_FN) {
        cuda_f32_to_storage(DT_F16, a->t[0], a->t[1], (int64_t)a->total);
        host_casts++;
    } else if (f == UNSCALE_FN) {
        float *g = a->t[0], s = *(const float *)a->t[1];
        for (long long i = 0; i < a->total; i++) g[i] /= s;
        host_unscales++;
    } else {
        host_kernels++;
    }
}
static CuResult sh_launch(CuFunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, CuStream s, void **params,
                          void **extra) {
    (void)gx, (void)gy, (void)gz, (void)by, (void)bz, (void)shared, (void)s, (void)extra;
    cr_assert(bx == CUDA_BLOCK);
    YlArgs a;
    memset(&a, 0, sizeof a);
    if (f == CAST_FN || f == UNSCALE_FN || f == LIB_FN) a = *(const YlArgs *)params[0];
    if (!capturing) {
        execute(f, &a);
        return 0;
    }
    int gi = n_graphs_made;
    cr_assert_lt(rec_n[gi], MAX_REC);
    rec[gi][rec_n[gi]++] = (Rec){f, a};
    return 0;
}
static CuResult sh_begin(CuStream s, int mode) {
    (void)s;
    cr_assert(!capturing && mode == 1, "thread-local capture, never nested");
    cr_assert_lt(n_graphs_made, MAX_GRAPHS);
    capturing = true;
    rec_n[n_graphs_made] = 0;
    captures++;
    return 0;
}
static CuResult sh_end(CuStream s, CuGraph *g) {
    (void)s;
    cr_assert(capturing);
    capturing = false;
    *g = (CuGraph)(uintptr_t)(++n_graphs_made);
    return 0;
}
static CuResult sh_instantiate(CuGraphExec *e, CuGraph g, unsigned long long flags) {
    (void)flags;
    *e = (CuGraphExec)(uintptr_t)g;
    return 0;
}
static CuResult sh_graph_launch(CuGraphExec e, CuStream s) {
    (void)s;
    int gi = (int)(uintptr_t)e - 1;
    cr_assert(gi >= 0 && gi < n_graphs_made && !capturing);
    for (int i = 0; i < rec_n[gi]; i++) execute(rec[gi][i].f, &rec[gi][i].a);
    graph_launches++;
    return 0;
}
static CuResult sh_destroy_exec(CuGraphExec e) { return (void)e, 0; }
static CuResult sh_destroy_graph(CuGraph g) { return (void)g, 0; }

static void host_step_open(HostStep *h, const Plan *p) {
    host_step_setup(h, p);
    CudaStep *cs = &h->cs;
    cuda_step_census(cs, &p->g, &cs->kern.kp);
    CudaLibs *L = &cs->dev.L;
    L->cuMemcpyHtoDAsync = sh_htod, L->cuMemcpyDtoHAsync = sh_dtoh, L->cuStreamSynchronize = sh_sync, L->cuLaunchKernel = sh_launch;
    L->cuStreamBeginCapture = sh_begin, L->cuStreamEndCapture = sh_end, L->cuGraphInstantiate = sh_instantiate, L->cuGraphLaunch = sh_graph_launch;
    L->cuGraphExecDestroy = sh_destroy_exec, L->cuGraphDestroy = sh_destroy_graph;
    for (int k = 0; k < cs->kern.lp.n_kernels; k++) cs->kern.lib_fn[k] = k == cs->kern.lp.cast ? CAST_FN : k == cs->kern.lp.unscale ? UNSCALE_FN : LIB_FN;
    n_graphs_made = captures = graph_launches = 0;
    capturing = false;
}

/* Fills every gradient with want[i] * scale (exact: a power of two), keeping want. */
static void fill_grads(CudaStep *cs, float scale, float **want, uint64_t *seed) {
    const Graph *g = &cs->plan->g;
    const Op *clip = &g->ops[cs->clip_op];
    for (int i = 0; i < clip->n_in; i++) {
        int t = clip->in[i];
        float *d = (float *)(uintptr_t)cs->ptr[t];
        for (int64_t e = 0; e < shape_numel(&g->tensors[t].shape); e++) {
            *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
            want[i][e] = (float)((double)(*seed >> 40) / (1 << 24) - 0.5);
            d[e] = want[i][e] * scale;
        }
    }
}

static int unscaled_wrong(CudaStep *cs, float **want) {
    const Graph *g = &cs->plan->g;
    const Op *clip = &g->ops[cs->clip_op];
    int wrong = 0;
    for (int i = 0; i < clip->n_in; i++) wrong += memcmp((void *)(uintptr_t)cs->ptr[clip->in[i]], want[i], sizeof(float) * (size_t)shape_numel(&g->tensors[clip->in[i]].shape)) != 0;
    return wrong;
}

/* Generated launches of ops [lo, hi). */
static int generated_in(const KProgram *kp, int lo, int hi) {
    int n = 0;
    for (int l = 0; l < kp->n_launches; l++) n += kp->launches[l].kernel >= 0 && kp->launches[l].op_lo >= lo && kp->launches[l].op_hi < hi;
    return n;
}

/* One optimize after presetting the gradients (scaled) and the norm the clip
 * "computes" (the stand-in's clip kernel writes nothing). */
static CudaStepOutcome optimize(CudaStep *cs, float step, float norm, float **want, uint64_t *seed) {
    char err[2048];
    const float lr[3] = {0.01f, 0.01f, 0.01f};
    cr_assert(cuda_step_bind_step(cs, lr, 0.9f, step, err, sizeof err), "%s", err);
    cr_expect_eq(*(const float *)(uintptr_t)cs->ptr[cs->t_grad_seed], cs->ls.scale, "the backward is seeded with the scale");
    cr_expect_eq(*(const float *)(uintptr_t)cs->ptr[cs->t_opt_step], step);
    fill_grads(cs, cs->ls.scale, want, seed);
    *(float *)(uintptr_t)cs->ptr[cs->t_grad_norm] = norm;
    host_kernels = host_casts = host_unscales = 0;
    CudaStepOutcome out;
    cr_assert(cuda_step_optimize(cs, &out, err, sizeof err), "%s", err);
    cr_expect_eq(unscaled_wrong(cs, want), 0, "every gradient divided exactly by the scale %g before the clip", out.loss_scale);
    cr_expect_eq(host_unscales, cs->plan->g.ops[cs->clip_op].n_in, "one unscale per gradient");
    return out;
}

static void optimize_on_stand_in(bool graphs) {
    char err[2048];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision fp16", &p);
    const Graph *g = &p.g;
    HostStep h;
    host_step_open(&h, &p);
    CudaStep *cs = &h.cs;
    cr_assert_geq(cs->kern.lp.unscale, 0, "fp16 plans carry the unscale kernel");
    cr_expect_str_eq(cs->kern.lp.kernels[cs->kern.lp.unscale].name, "yl_unscale_f32_f32");
    cr_assert(cuda_step_train_init(cs, err, sizeof err), "%s", err);
    cr_expect(cs->ls.enabled && cs->ls.scale == 65536.0f);
    cr_expect_eq(cs->clip_op, clip_op_of(g));
    cs->sync_each = true;
    cr_expect(!cuda_step_use_graphs(cs, true, err, sizeof err) && strstr(err, "YOLOCC_CUDA_SYNC"), "%s", err);
    cs->sync_each = false;
    cr_assert(cuda_step_use_graphs(cs, graphs, err, sizeof err), "%s", err);
    const Op *clip = &g->ops[cs->clip_op];
    float **want = calloc((size_t)clip->n_in, sizeof *want);
    for (int i = 0; i < clip->n_in; i++) want[i] = malloc(sizeof(float) * (size_t)shape_numel(&g->tensors[clip->in[i]].shape));
    int clip_launches = generated_in(&cs->kern.kp, cs->clip_op, cs->clip_op + 1), update_launches = generated_in(&cs->kern.kp, cs->clip_op + 1, g->n_ops);
    int copies = 0;
    for (int o = cs->clip_op + 1; o < g->n_ops; o++) copies += cs->mem.layout.lowp_off[g->ops[o].in[0]] >= 0;
    uint64_t seed = 5;
    /* a finite norm: the updates run and refresh their parameters' compute copies */
    CudaStepOutcome out = optimize(cs, 1, 2.5f, want, &seed);
    cr_expect(!out.skipped && out.loss_scale == 65536.0f && out.next_scale == 65536.0f && out.grad_norm == 2.5f);
    cr_expect_eq(host_kernels, clip_launches + update_launches, "the clip and every update");
    cr_expect(copies > 0 && host_casts == copies, "%d copies refreshed of %d", host_casts, copies);
    /* an inf norm: skipped, the scale halves, no update and no refresh */
    out = optimize(cs, 2, INFINITY, want, &seed);
    cr_expect(out.skipped && out.loss_scale == 65536.0f && out.next_scale == 32768.0f);
    cr_expect_eq(host_kernels, clip_launches, "the clip only");
    cr_expect_eq(host_casts, 0, "the compute copies stay");
    for (int t = 0; t < g->n_tensors; t++) cr_expect(!cs->dirty[t], "tensor %d marked stale by a skipped step", t);
    cr_expect(cs->ls.steps == 2 && cs->ls.skipped == 1);
    /* the next step is seeded (and unscaled) with the halved scale */
    out = optimize(cs, 2, 1.0f, want, &seed);
    cr_expect(!out.skipped && out.loss_scale == 32768.0f && out.next_scale == 32768.0f);
    cr_expect_eq(host_kernels, clip_launches + update_launches);
    if (graphs) {
        /* captured once each (the unscale with the clip, the updates), then only replayed */
        cr_expect_eq(captures, 2);
        cr_expect_eq(cs->n_graphs, 2);
        cr_expect_eq(graph_launches, 5, "clip x3, updates x2");
        cr_expect_eq(cs->graph_replays, 5);
    } else {
        cr_expect_eq(captures, 0);
        cr_expect_eq(graph_launches, 0);
    }
    for (int i = 0; i < clip->n_in; i++) free(want[i]);
    free(want);
    host_step_close(&h);
    plan_free(&p);
}

Test(cuda_step, optimize_unscales_and_skips_on_a_host_backed_device) { optimize_on_stand_in(false); }
Test(cuda_step, optimize_replays_graphs_on_a_host_backed_device) { optimize_on_stand_in(true); }

/* bf16 plans neither scale nor carry the unscale kernel. */
Test(cuda_step, bf16_plans_do_not_scale_the_loss) {
    char err[2048];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision bf16", &p);
    HostStep h;
    host_step_open(&h, &p);
    CudaStep *cs = &h.cs;
    cr_expect_eq(cs->kern.lp.unscale, -1);
    cr_assert(cuda_step_train_init(cs, err, sizeof err), "%s", err);
    cr_expect(!cs->ls.enabled && cs->ls.scale == 1.0f);
    const float lr[3] = {0.01f, 0.01f, 0.01f};
    cr_assert(cuda_step_bind_step(cs, lr, 0.9f, 1, err, sizeof err), "%s", err);
    cr_expect_eq(*(const float *)(uintptr_t)cs->ptr[cs->t_grad_seed], 1.0f);
    *(float *)(uintptr_t)cs->ptr[cs->t_grad_norm] = INFINITY;
    host_unscales = 0;
    CudaStepOutcome out;
    cr_assert(cuda_step_optimize(cs, &out, err, sizeof err), "%s", err);
    cr_expect(!out.skipped && out.loss_scale == 1.0f && out.next_scale == 1.0f, "nothing is skipped without loss scaling");
    cr_expect_eq(host_unscales, 0);
    host_step_close(&h);
    plan_free(&p);
}

/* ---- the run hook (dp_cuda.c's all-reduce points) on the stand-in ---- */

typedef struct HookLog {
    const KProgram *kp;
    const bool *at;
    int lo, hi;             /* the op range run */
    long executed0;         /* executed before the run */
    int afters, waits, fail_at;
    int reported;           /* the last op done at the previous call */
    long syncs_at_wait;
} HookLog;
static HookLog HK;

/* Driver launches of ops [HK.lo, HK.hi) that start at or before op `upto`
 * (a channel reduction launches once per phase). */
static long launches_through(int upto) {
    long n = 0;
    for (int l = 0; l < HK.kp->n_launches; l++) {
        const KLaunch *ln = &HK.kp->launches[l];
        const Kernel *k = ln->kernel >= 0 ? &HK.kp->kernels[ln->kernel] : NULL;
        if (ln->op_lo >= HK.lo && ln->op_hi < HK.hi && ln->op_lo <= upto) n += k && k->skel == KS_CHANNEL_REDUCE ? k->n_phases : 1;
    }
    return n;
}

static bool hk_after(void *ctx, int done, char *err, int errcap) {
    (void)ctx;
    cr_expect(!capturing, "the hook runs outside captures (a graph ends at its point)");
    bool marked = false;
    for (int o = HK.reported + 1; o <= done; o++) marked |= HK.at[o];
    cr_expect(marked, "called when ops %d-%d were done, none of them marked", HK.reported + 1, done);
    HK.reported = done;
    /* every launch of the ops done has run (eagerly or its graph replayed), and nothing after them */
    cr_expect_eq(executed - HK.executed0, launches_through(done), "done through op %d", done);
    HK.afters++;
    if (HK.afters == HK.fail_at) return snprintf(err, (size_t)errcap, "the hook failed here"), false;
    return true;
}

static bool hk_wait(void *ctx, char *err, int errcap) {
    (void)ctx, (void)err, (void)errcap;
    cr_expect(!capturing);
    cr_expect_eq(executed - HK.executed0, launches_through(HK.hi), "before_wait follows every launch of the run");
    HK.waits++;
    HK.syncs_at_wait = syncs;
    return true;
}

/* Runs ops [lo, hi) twice with a hook at the ops at[] marks (`marked` of
 * them, the last op of the range among them): `after` once per marked op,
 * outside any capture, once every launch of the ops done has run and nothing
 * later; before_wait once, after every launch and before the host's wait.
 * With graphs, each run of launches ends at a marked op's last launch; the
 * second run replays them all. */
static void check_hook_runs(CudaStep *cs, int lo, int hi, const bool *at, int marked, bool graphs) {
    char err[2048];
    CudaRunHook hook = {at, hk_after, hk_wait, NULL};
    HK = (HookLog){.kp = &cs->kern.kp, .at = at, .lo = lo, .hi = hi};
    cs->hook = &hook;
    for (int run = 0; run < 2; run++) {
        int captures0 = captures, replays0 = graph_launches;
        HK.executed0 = executed, HK.afters = HK.waits = 0, HK.reported = lo - 1;
        long syncs0 = syncs;
        cr_assert(cuda_step_run(cs, lo, hi, err, sizeof err), "ops [%d, %d) run %d: %s", lo, hi, run, err);
        cr_expect_eq(HK.afters, marked, "ops [%d, %d) run %d: once per marked op (%d, not %d)", lo, hi, run, HK.afters, marked);
        cr_expect_eq(HK.waits, 1);
        cr_expect(HK.syncs_at_wait == syncs0 && syncs > syncs0, "run %d: before_wait comes before the host waits", run);
        cr_expect_eq(captures - captures0, graphs && run == 0 ? marked : 0, "ops [%d, %d) run %d: one graph per marked op, captured once", lo, hi, run);
        cr_expect_eq(graph_launches - replays0, graphs ? marked : 0);
    }
    cs->hook = NULL;
}

/* On the tiny plan: the clip and the optimizer updates with a hook at the
 * clip, every 12th update and the last (once a launch: the updates of a
 * parameter group are one multi-tensor launch); and the first op with several
 * launches (a reduction's passes) off cuDNN's and the loss's routes, marked
 * once: the hook comes after its last launch. A failing hook fails the run
 * with its message, and before_wait does not run. */
static void hook_on_stand_in(bool graphs) {
    char err[2048];
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision fp16", &p);
    const Graph *g = &p.g;
    HostStep h;
    host_step_open(&h, &p);
    CudaStep *cs = &h.cs;
    cr_assert(cuda_step_train_init(cs, err, sizeof err), "%s", err);
    cr_assert(cuda_step_use_graphs(cs, graphs, err, sizeof err), "%s", err);
    const KProgram *kp = &cs->kern.kp;
    int multi_lo = -1, multi_hi = -1;
    for (int l = 0; l < kp->n_launches; l++) {
        const KLaunch *a = &kp->launches[l], *b = l > 0 ? &kp->launches[l - 1] : NULL;
        cr_assert(!b || (a->op_lo >= b->op_lo && a->op_hi >= b->op_hi), "launch %d: launches run in op order", l);
        if (multi_lo >= 0 || (b && a->op_lo <= b->op_hi)) continue;
        /* l starts an op range; it has several launches when the next launch shares an op */
        int e = l;
        bool device = true;
        while (e + 1 < kp->n_launches && kp->launches[e + 1].op_lo <= kp->launches[e].op_hi) e++;
        for (int k = l; k <= e; k++) device &= cuda_step_route(g, &kp->launches[k]) <= CUDA_ROUTE_LIBRARY;
        if (e > l && device) multi_lo = a->op_lo, multi_hi = kp->launches[e].op_hi + 1;
    }
    cr_assert_geq(multi_lo, 0, "the tiny plan has an op with several generated launches");
    bool *at = calloc((size_t)g->n_ops, sizeof *at);
    at[multi_lo] = true;
    check_hook_runs(cs, multi_lo, multi_hi, at, 1, graphs);
    memset(at, 0, sizeof *at * (size_t)g->n_ops);
    int marked = 0, points = 0;
    for (int o = cs->clip_op; o < g->n_ops; o += 12) at[o] = true, marked++;
    if (!at[g->n_ops - 1]) at[g->n_ops - 1] = true, marked++;
    /* the updates run as multi-tensor launches: one hook point a launch with a marked op */
    for (int l = 0; l < kp->n_launches; l++) {
        bool any = false;
        for (int o = kp->launches[l].op_lo; o <= kp->launches[l].op_hi && kp->launches[l].op_lo >= cs->clip_op; o++) any |= at[o];
        points += any;
    }
    cr_expect(points >= 3 && points < marked, "%d marked ops, %d launches with one", marked, points);
    check_hook_runs(cs, cs->clip_op, g->n_ops, at, points, graphs);
    cr_log_info("ops [%d, %d) with several launches, marked once; clip and updates with %d hook points (%d ops marked); %s", multi_lo, multi_hi, points, marked,
                graphs ? "graphs" : "eager");
    CudaRunHook hook = {at, hk_after, hk_wait, NULL};
    cs->hook = &hook;
    HK.executed0 = executed, HK.afters = HK.waits = 0, HK.reported = cs->clip_op - 1, HK.fail_at = 2;
    cr_expect(!cuda_step_run(cs, cs->clip_op, g->n_ops, err, sizeof err) && strstr(err, "the hook failed here"), "%s", err);
    cr_expect(HK.afters == 2 && HK.waits == 0);
    cs->hook = NULL;
    free(at);
    host_step_close(&h);
    plan_free(&p);
}

Test(cuda_step, run_hook_points_eager) { hook_on_stand_in(false); }
Test(cuda_step, run_hook_points_end_graphs) { hook_on_stand_in(true); }

