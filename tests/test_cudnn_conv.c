/* tests/test_cudnn_conv.c — runtime/cuda/cudnn_conv.c without a GPU, on the stand-in for the
 * cuDNN backend API (cudnn_standin.h). It checks which engine each execution plan takes (never a
 * nondeterministic one, no tensor cores in fp32 plans, mode A before the fallback list), the
 * staged weight gradient (where no engine writes fp32 dw from bf16 x and dy, dw is computed in
 * bf16 into the workspace and the CUDA step widens it into the gradient, which then holds what a
 * direct fp32 write would have), and the candidates kept for timing (the heuristics' order, no
 * engine cuDNN compiles, none loose, none over the workspace cap). Owns no runtime code. */
#include "../compiler/kernel_ir.h"
#include "../compiler/lib_kernels.h"
#include "../runtime/cuda/cuda_abi.h"
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/cuda/cudnn_conv.h"
#include "test_cuda_host.h"
#include "test_gpu.h"
#include "cudnn_standin.h"

/* ---- plan selection and staging on the tiny plan ---- */

static int64_t dw_numel(const ConvKey *k) { return k->co * (k->ci / k->groups) * k->kh * k->kw; }
static int engine_of(const ConvPlan *e) { return ((const SDesc *)e->cand_cfg[e->chosen])->engine; }

/* The tiny plan compiled with args, its convolutions prepared on the
 * stand-in (refusing fp32 dw from bf16 inputs when refuse_mixed); with
 * candidates > 0, mode A lists its longer list and cudnn_conv_prepare keeps
 * that many engine configs per shape. */
/* The tiny plan compiled with args and a CudnnConv opened on the stand-in as it is set up now,
 * keeping `candidates` engine configs per shape. */
static void standin_open(CudnnConv *cc, CudaLibs *L, Plan *p, const char *args, int candidates) {
    tiny_plan(args, p);
    memset(L, 0, sizeof *L);
    standin_cudnn(L);
    char err[2048];
    cr_assert(cudnn_conv_open(cc, L, NULL, err, sizeof err), "%s", err);
    cc->candidates = candidates;
}

static void prepare_tuned(CudnnConv *cc, CudaLibs *L, Plan *p, const char *args, bool refuse_mixed, int candidates) {
    standin_reset();
    SD.refuse_mixed_wgrad = refuse_mixed;
    SD.more_engines = candidates > 0;
    standin_open(cc, L, p, args, candidates);
    char err[2048];
    cr_assert(cudnn_conv_prepare(cc, &p->g, &p->fusion.views, p->precision, err, sizeof err), "%s", err);
    cr_expect_eq(SD.misuse, 0, "the stand-in saw misuse: %s", SD.misuse_what);
}

static void prepare(CudnnConv *cc, CudaLibs *L, Plan *p, const char *args, bool refuse_mixed) { prepare_tuned(cc, L, p, args, refuse_mixed, 0); }

static int count_ops(const Graph *g, OpKind k) {
    int n = 0;
    for (int o = 0; o < g->n_ops; o++) n += g->ops[o].kind == k;
    return n;
}

/* The tiny bf16 plan's convolutions with the stand-in refusing (or
 * accepting) fp32 dw from bf16 inputs: which plans are staged, the
 * engines taken, the workspace, and what a weight gradient executes. */
static void staging_case(bool refuse_mixed) {
    Plan p;
    CudaLibs L;
    CudnnConv cc;
    prepare(&cc, &L, &p, "--imgsz 64 --batch 2 --precision bf16", refuse_mixed);
    int wgrads = count_ops(&p.g, OP_CONV2D_WGRAD);
    cr_assert_gt(wgrads, 0);
    cr_expect_eq(cc.staged_ops, refuse_mixed ? wgrads : 0, "every weight gradient is staged exactly when no engine writes fp32 dw");
    int64_t stage = 0;
    for (int i = 0; i < cc.n_plans; i++) {
        const ConvPlan *e = &cc.plans[i];
        bool wgrad = e->key.dir == CONV_WGRAD;
        cr_expect_eq(e->staged, refuse_mixed && wgrad, "plan %d (direction %d)", i, e->key.dir);
        if (wgrad) cr_expect(e->key.w_type == DNN_DATA_FLOAT && e->key.x_type == DNN_DATA_BFLOAT16, "plan %d: the key keeps the fp32 gradient", i);
        cr_expect_eq(engine_of(e), 1, "plan %d: bf16 takes mode A's deterministic tensor-core engine, never the nondeterministic one", i);
        if (e->staged && memplan_align(dw_numel(&e->key) * 2) > stage) stage = memplan_align(dw_numel(&e->key) * 2);
    }
    cr_expect_eq(cc.stage_bytes, stage, "the stage holds the largest staged gradient in bf16");
    int64_t ones = memplan_align(cc.ones_elems * 4);
    cr_expect_eq(cudnn_conv_workspace_bytes(&cc), ones + stage + ENGINES[1].workspace, "ones, stage, then the largest plan workspace");
    /* run every weight gradient, and one forward convolution, at made-up aligned addresses */
    const CuDevicePtr ws = 0x10000000, dy = 0x20000000, x = 0x30000000, out = 0x40000000;
    cudnn_conv_bind(&cc, ws, cudnn_conv_workspace_bytes(&cc));
    char err[2048];
    int ran = 0;
    for (int o = 0; o < p.g.n_ops; o++) {
        const Op *op = &p.g.ops[o];
        if (op->kind != OP_CONV2D_WGRAD && !(op->kind == OP_CONV2D && op->n_in == 2)) continue;
        const CuDevicePtr in[3] = {op->kind == OP_CONV2D ? x : dy, op->kind == OP_CONV2D ? 0x50000000 : x, 0};
        ConvWiden widen;
        int before = SD.n_exec;
        cr_assert(cudnn_conv_run(&cc, op, in, out, &widen, err, sizeof err), "op %d: %s", o, err);
        cr_assert_eq(SD.n_exec, before + 1);
        const SExec *e = &SD.exec[before];
        cr_expect_eq(e->ws, ws + (CuDevicePtr)(ones + stage), "op %d: the plan's workspace lies after the ones and the stage", o);
        if (op->kind == OP_CONV2D) {
            cr_expect(e->op_type == DN_OP_CONV_FORWARD && e->ptr[0] == x && e->ptr[2] == out && widen.n == 0, "op %d: a forward writes its output", o);
        } else {
            const Shape *w = &op->a.shape;
            int64_t n = w->d[0] * w->d[1] * w->d[2] * w->d[3];
            cr_expect(e->op_type == DN_OP_CONV_BACKWARD_FILTER && e->ptr[0] == x && e->ptr[2] == dy, "op %d: x and dy in place", o);
            if (refuse_mixed) {
                cr_expect(widen.n == n && widen.src == ws + (CuDevicePtr)ones, "op %d: %lld elements to widen from the stage", o, (long long)widen.n);
                cr_expect(e->ptr[1] == widen.src && e->type[1] == DNN_DATA_BFLOAT16, "op %d: dw computed in bf16 into the stage", o);
            } else {
                cr_expect(widen.n == 0 && e->ptr[1] == out && e->type[1] == DNN_DATA_FLOAT, "op %d: dw written in fp32 where it belongs", o);
            }
        }
        ran++;
        SD.n_exec = 0;
    }
    cr_expect_gt(ran, wgrads, "the weight gradients and at least one forward ran");
    cr_expect_eq(SD.misuse, 0, "%s", SD.misuse_what);
    cudnn_conv_close(&cc);
    cr_expect_eq(SD.live, 0, "closing destroys every descriptor");
    plan_free(&p);
}

Test(cudnn_conv, bf16_weight_gradients_are_staged_when_no_engine_writes_fp32) { staging_case(true); }
Test(cudnn_conv, bf16_weight_gradients_go_straight_to_fp32_where_an_engine_can) { staging_case(false); }

Test(cudnn_conv, fp32_plans_take_no_tensor_core_engine_and_stage_nothing) {
    Plan p;
    CudaLibs L;
    CudnnConv cc;
    prepare(&cc, &L, &p, "--imgsz 64 --batch 2", true);
    cr_expect_eq(cc.staged_ops, 0);
    cr_expect_eq(cc.stage_bytes, 0);
    for (int i = 0; i < cc.n_plans; i++) cr_expect_eq(engine_of(&cc.plans[i]), 2, "plan %d: mode A's engines refused (nondeterministic, tensor cores); the fallback's taken", i);
    cr_expect_eq(cudnn_conv_workspace_bytes(&cc), memplan_align(cc.ones_elems * 4) + ENGINES[2].workspace);
    cudnn_conv_close(&cc);
    cr_expect_eq(SD.live, 0);
    plan_free(&p);
}

Test(cudnn_conv, no_engine_either_way_names_both_attempts_and_leaks_nothing) {
    standin_reset();
    SD.refuse_wgrad = true;
    Plan p;
    CudaLibs L;
    CudnnConv cc;
    standin_open(&cc, &L, &p, "--imgsz 64 --batch 2 --precision bf16", 0);
    char err[2048];
    cr_assert_not(cudnn_conv_prepare(&cc, &p.g, &p.fusion.views, p.precision, err, sizeof err));
    cr_log_info("%s", err);
    cr_expect(strstr(err, "cuDNN 91900 has no deterministic engine for convolution wgrad") != NULL, "%s", err);
    cr_expect(strstr(err, "bf16/fp32/bf16") != NULL, "the key names the fp32 gradient first: %s", err);
    cr_expect(strstr(err, "; nor with dw in bf16 to widen afterwards: cuDNN 91900 has no deterministic engine") != NULL, "%s", err);
    cr_expect(strstr(err, "bf16/bf16/bf16") != NULL, "then the staged key: %s", err);
    cr_expect_eq(SD.misuse, 0, "%s", SD.misuse_what);
    cudnn_conv_close(&cc);
    cr_expect_eq(SD.live, 0, "the failed plans' descriptors are destroyed too");
    plan_free(&p);
}

/* ---- the CUDA step widens what cuDNN staged ---- */

static CuFunction const WIDEN_FN = (CuFunction)(uintptr_t)0x31de, OTHER_FN = (CuFunction)(uintptr_t)0x07e4;
static struct {
    int widens, others, exec_at_widen;
    YlArgs last;
} LK;

static CuResult st_launch(CuFunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, CuStream s, void **params,
                          void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)s, (void)extra;
    if (f != WIDEN_FN) return LK.others++, 0;
    /* what the widening cast computes (its arithmetic is tests/test_cast_emul.c's) */
    LK.last = *(const YlArgs *)params[0];
    cuda_storage_to_f32(DT_BF16, LK.last.t[0], LK.last.t[1], LK.last.total);
    LK.widens++, LK.exec_at_widen = SD.n_exec;
    return 0;
}
static CuResult st_sync(CuStream s) { return (void)s, 0; }

/* Runs every weight gradient of the tiny bf16 plan through a host-backed
 * CudaStep; each gradient must hold the stand-in's dw values either way. */
static void step_case(bool refuse_mixed) {
    standin_reset();
    memset(&LK, 0, sizeof LK);
    SD.refuse_mixed_wgrad = refuse_mixed, SD.write_dw = true;
    Plan p;
    tiny_plan("--imgsz 64 --batch 2 --precision bf16", &p);
    const Graph *g = &p.g;
    HostStep h;
    host_step_setup(&h, &p);
    CudaStep *cs = &h.cs;
    standin_cudnn(&cs->dev.L);
    cs->dev.L.cuLaunchKernel = st_launch, cs->dev.L.cuStreamSynchronize = st_sync;
    for (int k = 0; k < cs->kern.lp.n_kernels; k++) cs->kern.lib_fn[k] = k == cs->kern.lp.widen ? WIDEN_FN : OTHER_FN;
    cr_assert_geq(cs->kern.lp.widen, 0);
    char err[2048];
    cr_assert(cs->conv_open = cudnn_conv_open(&cs->conv, &cs->dev.L, NULL, err, sizeof err), "%s", err);
    cr_assert(cudnn_conv_prepare(&cs->conv, g, &p.fusion.views, p.precision, err, sizeof err), "%s", err);
    int64_t need = cuda_step_workspace_need(cs);
    cr_expect_geq(need, cudnn_conv_workspace_bytes(&cs->conv));
    void *ws = NULL;
    cr_assert_eq(posix_memalign(&ws, 256, (size_t)need), 0);
    cs->mem.workspace = (CuDevicePtr)(uintptr_t)ws, cs->mem.workspace_bytes = need;
    cudnn_conv_bind(&cs->conv, cs->mem.workspace, need);
    cuda_step_census(cs, g, &cs->kern.kp);
    int wgrads = 0;
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        if (op->kind != OP_CONV2D_WGRAD) continue;
        int t = op->out[0];
        int64_t n = shape_numel(&g->tensors[t].shape);
        float *grad = (float *)(uintptr_t)cs->ptr[t];
        cr_assert_eq(cs->stype[t], DT_F32, "op %d: weight gradients are stored in fp32", o);
        memset(grad, 0xff, (size_t)n * 4);
        int widens = LK.widens;
        SD.n_exec = 0;
        cr_assert(cuda_step_run(cs, o, o + 1, err, sizeof err), "op %d: %s", o, err);
        cr_assert_eq(SD.n_exec, 1, "op %d: one cuDNN execution", o);
        if (refuse_mixed) {
            cr_expect(LK.widens == widens + 1 && LK.exec_at_widen == 1, "op %d: one widening, after the execution", o);
            cr_expect(LK.last.t[0] == (void *)(uintptr_t)SD.exec[0].ptr[1] && LK.last.t[1] == grad && LK.last.total == n,
                      "op %d: from the stage cuDNN wrote, into the gradient, every element", o);
        } else {
            cr_expect_eq(LK.widens, widens, "op %d: nothing to widen", o);
        }
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += grad[i] != dw_value(i);
        cr_expect_eq(bad, 0, "op %d: the gradient holds dw exactly (%lld of %lld elements differ)", o, (long long)bad, (long long)n);
        wgrads++;
    }
    cr_expect_gt(wgrads, 0);
    char line[1024];
    cuda_step_describe(cs, line, sizeof line);
    cr_log_info("%s", line);
    cr_expect_eq(strstr(line, "weight gradients in bf16 by cuDNN, then widened to fp32") != NULL, refuse_mixed, "%s", line);
    cr_expect_eq(SD.misuse, 0, "%s", SD.misuse_what);
    host_step_close(&h);
    cr_expect_eq(SD.live, 0);
    free(ws);
    plan_free(&p);
}

Test(cudnn_conv, the_step_widens_each_staged_weight_gradient_into_its_fp32_gradient) { step_case(true); }
Test(cudnn_conv, the_step_lets_cudnn_write_fp32_gradients_where_it_can) { step_case(false); }

/* ---- candidates to time ---- */

/* A bias step's key (conv_bias_key): one input channel, accumulating. */
static bool is_bias_key(const ConvKey *k) { return k->dir == CONV_FWD && k->accumulate && k->ci == 1 && k->kh == 1 && k->kw == 1; }

/* With candidates kept, each shape holds mode A's acceptable configs in order: the first
 * whatever it is, then configs cuDNN need not compile, not loose, whose workspace stays under the cap,
 * up to CONV_TUNE_MAX; the workspace covers every candidate until cudnn_conv_settle drops the
 * unchosen ones, and a run executes the chosen one. Bias steps keep one. */
Test(cudnn_conv, candidates_to_time_are_the_heuristics_order_without_compiled_loose_or_oversized_engines) {
    Plan p;
    CudaLibs L;
    CudnnConv cc;
    prepare_tuned(&cc, &L, &p, "--imgsz 64 --batch 2 --precision bf16", false, CONV_TUNE_MAX);
    /* engine 0 is nondeterministic, 3 compiles at finalize, 5 is over the cap, 6 is loose, 9 comes after four */
    const int want[CONV_TUNE_MAX] = {1, 4, 7, 8};
    int tuned = 0, bias = 0;
    for (int i = 0; i < cc.n_plans; i++) {
        const ConvPlan *e = &cc.plans[i];
        cr_expect_eq(e->chosen, 0, "plan %d starts on the heuristics' first choice", i);
        cr_expect(e->n_cand >= 1 && e->cand[0] && e->cand_cfg[0], "plan %d holds its first choice", i);
        if (is_bias_key(&e->key)) {
            cr_expect_eq(e->n_cand, 1, "plan %d: a bias step is not timed", i);
            bias++;
            continue;
        }
        cr_assert_eq(e->n_cand, CONV_TUNE_MAX, "plan %d", i);
        for (int j = 0; j < CONV_TUNE_MAX; j++) {
            cr_expect_eq(((const SDesc *)e->cand_cfg[j])->engine, want[j], "plan %d candidate %d", i, j);
            cr_expect_eq(e->cand_ws[j], ENGINES[want[j]].workspace, "plan %d candidate %d", i, j);
            cr_expect_eq(e->cand_engine[j], 100 + want[j], "plan %d candidate %d: its engine's global index", i, j);
        }
        tuned++;
    }
    cr_expect_gt(tuned, 0);
    cr_expect_gt(bias, 0, "the tiny plan's Detect has biased convolutions");
    const int64_t below = memplan_align(cc.ones_elems * 4) + cc.stage_bytes;
    cr_expect_eq(cudnn_conv_workspace_bytes(&cc), below + ENGINES[4].workspace, "the workspace covers the largest candidate");
    /* every timed shape on its last candidate (16 bytes of workspace); bias steps keep engine 1's */
    for (int i = 0; i < cc.n_plans; i++)
        if (cc.plans[i].n_cand > 1) cc.plans[i].chosen = CONV_TUNE_MAX - 1;
    const int live = SD.live;
    cudnn_conv_settle(&cc);
    cr_expect_eq(SD.live, live - tuned * (CONV_TUNE_MAX - 1) * 2, "settling destroys each unchosen plan and its config");
    cr_expect_eq(cudnn_conv_workspace_bytes(&cc), below + ENGINES[1].workspace, "then only the chosen plans' workspace counts");
    const CuDevicePtr ws = 0x10000000;
    cudnn_conv_bind(&cc, ws, cudnn_conv_workspace_bytes(&cc));
    char err[2048];
    int ran = 0;
    for (int o = 0; o < p.g.n_ops; o++) {
        const Op *op = &p.g.ops[o];
        if (op->kind != OP_CONV2D_DGRAD) continue;
        const CuDevicePtr in[3] = {0x20000000, 0x30000000, 0};
        ConvWiden widen;
        SD.n_exec = 0;
        cr_assert(cudnn_conv_run(&cc, op, in, 0x40000000, &widen, err, sizeof err), "op %d: %s", o, err);
        cr_expect(SD.n_exec == 1 && SD.exec[0].engine == want[CONV_TUNE_MAX - 1], "op %d runs the chosen engine", o);
        ran++;
    }
    cr_expect_gt(ran, 0);
    cr_expect_eq(SD.misuse, 0, "%s", SD.misuse_what);
    cudnn_conv_close(&cc);
    cr_expect_eq(SD.live, 0);
    plan_free(&p);
}

/* One candidate per shape is what the heuristics rank first, whatever else mode A lists. */
Test(cudnn_conv, one_candidate_is_the_heuristics_first_choice) {
    Plan p;
    CudaLibs L;
    CudnnConv cc;
    prepare_tuned(&cc, &L, &p, "--imgsz 64 --batch 2 --precision bf16", false, 1);
    for (int i = 0; i < cc.n_plans; i++) cr_expect(cc.plans[i].n_cand == 1 && engine_of(&cc.plans[i]) == 1, "plan %d", i);
    cr_expect_eq(cudnn_conv_workspace_bytes(&cc), memplan_align(cc.ones_elems * 4) + cc.stage_bytes + ENGINES[1].workspace);
    cudnn_conv_close(&cc);
    cr_expect_eq(SD.live, 0);
    plan_free(&p);
}

/* Behaviour notes that cannot be read count as "compiles": the heuristics' first choice is still
 * taken, and nothing else is timed. */
Test(cudnn_conv, unreadable_behaviour_notes_leave_only_the_first_choice) {
    standin_reset();
    SD.more_engines = SD.hide_behavior = true;
    Plan p;
    CudaLibs L;
    CudnnConv cc;
    standin_open(&cc, &L, &p, "--imgsz 64 --batch 2 --precision bf16", CONV_TUNE_MAX);
    char err[2048];
    cr_assert(cudnn_conv_prepare(&cc, &p.g, &p.fusion.views, p.precision, err, sizeof err), "%s", err);
    for (int i = 0; i < cc.n_plans; i++) cr_expect(cc.plans[i].n_cand == 1 && engine_of(&cc.plans[i]) == 1, "plan %d", i);
    cr_expect_eq(SD.misuse, 0, "%s", SD.misuse_what);
    cudnn_conv_close(&cc);
    cr_expect_eq(SD.live, 0);
    plan_free(&p);
}
