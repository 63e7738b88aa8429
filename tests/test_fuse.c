/* tests/test_fuse.c — fusion groups: what each block type costs in launches
 * (kernel counts), that --fuse none is one op per group, that the internal
 * marks have teeth (a tensor read outside its group cannot be internal), and
 * that plans carry their groups and reject groups that break the rules. */
#include "../compiler/plan_write.h"
#include "../compiler/train_compile.h"
#include "../runtime/interp.h"
#include "../runtime/plan_read.h"
#include "../runtime/synthetic.h"
#include "../runtime/weights.h"
#include "test_util.h"

typedef struct Fused {
    Arena arena;
    ModelConfig cfg;
    TrainCompiled tc;
    Diag d;
} Fused;

static void compile_tiny(Fused *f, FusePolicy fuse, RecomputePolicy r) {
    arena_init(&f->arena, 0);
    diag_init(&f->d, "models/tiny.yaml");
    ModelOptions mo = {0};
    TrainOptions to = {.imgsz = 64, .batch = 2, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .recompute = r, .fuse = fuse};
    cr_assert(model_cfg_load(&f->arena, "models/tiny.yaml", &mo, &f->cfg, &f->d) && compile_training(&f->arena, &f->cfg, &to, &f->tc, &f->d), "%s", f->d.msg);
}

static void release(Fused *f) {
    train_compiled_free(&f->tc);
    arena_free(&f->arena);
}

static int count_ops(const Graph *g, OpKind k, int first, int last) {
    int n = 0;
    for (int o = first; o < last; o++) n += g->ops[o].kind == k;
    return n;
}

/* Groups per block type (tiny model, training step, pointwise recompute; the
 * launches each costs are pinned in test_codegen.c):
 *  - a conv-BN-SiLU block forward is ONE group, whose BN output stays inside;
 *  - its backward is one bn_act_bwd group (BN-apply recomputed, activation
 *    grad, BN grad) whose activation gradient stays inside;
 *  - the whole optimizer (clip + every update) is one group. */
Test(fuse, groups_per_block_type) {
    Fused f;
    compile_tiny(&f, FUSE_FULL, RECOMPUTE_POINTWISE);
    const Graph *g = &f.tc.m.g;
    const Fusion *fu = &f.tc.fu;
    int n_fwd = f.tc.tg.n_forward_ops, conv_blocks = 0, bwd_blocks = 0, optim = 0;
    for (int i = 0; i < fu->n_groups; i++) {
        const FusionGroup *gr = &fu->groups[i];
        if (gr->pattern == PATTERN_CONV_BN_ACT) {
            conv_blocks++;
            cr_expect_eq(g->ops[gr->first].kind, OP_CONV2D);
            cr_expect_eq(g->ops[gr->first + 1].kind, OP_BATCHNORM);
            cr_expect(gr->n == 3 || gr->n == 4, "conv block of %d ops", gr->n);
            /* the BN output never leaves the group; the conv output is kept for backward */
            cr_expect(fu->internal[g->ops[gr->first + 1].out[0]]);
            cr_expect_not(fu->internal[g->ops[gr->first].out[0]]);
        } else if (gr->pattern == PATTERN_BN_ACT_BWD) {
            bwd_blocks++;
            const Op *last = &g->ops[gr->first + gr->n - 1];
            cr_expect_eq(last->kind, OP_BATCHNORM_BWD);
            cr_expect(fu->internal[last->in[0]], "the activation gradient is materialised");
        } else if (gr->pattern == PATTERN_OPTIMIZER) {
            optim++;
            cr_expect_eq(gr->n, 1 + count_ops(g, OP_SGD_STEP, 0, g->n_ops));
            /* the clip coefficient is read by every update after the norm: in memory */
            cr_expect_not(fu->internal[g->ops[gr->first].out[0]]);
        }
    }
    int fwd_bn = count_ops(g, OP_BATCHNORM, 0, n_fwd), bn_bwd = count_ops(g, OP_BATCHNORM_BWD, 0, g->n_ops);
    cr_expect_eq(conv_blocks, fwd_bn, "every BN of the tiny model follows a conv: %d blocks, %d BNs", conv_blocks, fwd_bn);
    cr_expect_eq(bwd_blocks, bn_bwd);
    cr_expect_eq(optim, 1);
    cr_log_info("tiny training step: %d ops in %d groups; %d conv-BN-SiLU blocks, %d BN-act backward groups", g->n_ops, fu->n_groups, conv_blocks, bwd_blocks);
    release(&f);
}

/* A gradient read by several ops is summed when its own rule needs it, not
 * as each term arrives: the adds of one sum are consecutive ops, so one
 * kernel adds them with no partial sum in memory, and a sum of two right
 * before a BN-activation backward is added inside that group's kernels. */
Test(fuse, gradient_sums_sit_before_their_rule) {
    Fused f;
    compile_tiny(&f, FUSE_FULL, RECOMPUTE_POINTWISE);
    const Graph *g = &f.tc.m.g;
    const Fusion *fu = &f.tc.fu;
    int *group_of = calloc((size_t)g->n_ops, sizeof(int)), chained = 0, into_bwd = 0;
    cr_assert(group_of);
    for (int i = 0; i < fu->n_groups; i++)
        for (int o = fu->groups[i].first; o < fu->groups[i].first + fu->groups[i].n; o++) group_of[o] = i;
    for (int o = f.tc.tg.n_forward_ops; o < g->n_ops; o++) {
        if (g->ops[o].kind != OP_ADD) continue;
        const int sum = g->ops[o].out[0];
        for (int r = o + 1; r < g->n_ops; r++) {
            if (g->ops[r].kind != OP_ADD || (g->ops[r].in[0] != sum && g->ops[r].in[1] != sum)) continue;
            chained++;
            cr_expect_eq(r, o + 1, "op %d adds op %d's partial sum %d ops later", r, o, r - o);
            cr_expect_eq(group_of[r], group_of[o], "a sum's adds in two kernels");
            cr_expect(fu->internal[sum], "partial sum %%%d in memory", sum);
        }
        const FusionGroup *gr = &fu->groups[group_of[o]];
        if (gr->pattern != PATTERN_BN_ACT_BWD) continue;
        into_bwd++;
        cr_expect_eq(gr->first, o, "the add leads its BN-activation backward group");
        const Op *act = &g->ops[gr->first + gr->n - 2];
        cr_expect_eq(act->kind, OP_ACTIVATION_BWD);
        cr_expect_eq(act->in[0], sum, "the activation gradient reads the sum");
        int readers = 0;
        for (int r = 0; r < g->n_ops; r++)
            for (int i = 0; i < g->ops[r].n_in; i++) readers += g->ops[r].in[i] == sum;
        cr_expect_eq(fu->internal[sum], readers == 1, "sum %%%d: %d readers, internal %d", sum, readers, fu->internal[sum]);
    }
    cr_log_info("tiny step: %d partial sums added on in the same kernel, %d sums of two inside a BN-activation backward", chained, into_bwd);
    cr_expect_gt(into_bwd, 0);
    free(group_of);
    release(&f);
}

Test(fuse, none_is_one_op_per_group) {
    Fused f;
    compile_tiny(&f, FUSE_NONE, RECOMPUTE_POINTWISE);
    cr_expect_eq(f.tc.fu.n_groups, f.tc.m.g.n_ops);
    for (int i = 0; i < f.tc.fu.n_groups; i++) cr_expect_eq(f.tc.fu.groups[i].n, 1);
    for (int t = 0; t < f.tc.m.g.n_tensors; t++) cr_expect_not(f.tc.fu.internal[t]);
    release(&f);
}

/* A tensor backward reads (no recompute: the BN output feeds the SiLU
 * gradient) is not internal; forcing it internal makes the step fail loudly
 * when backward reaches for it, so the internal marks are load-bearing. */
Test(fuse, internal_marks_have_teeth) {
    Fused f;
    compile_tiny(&f, FUSE_FULL, RECOMPUTE_NONE);
    const Graph *g = &f.tc.m.g;
    int victim = -1;
    for (int i = 0; i < f.tc.fu.n_groups && victim < 0; i++)
        if (f.tc.fu.groups[i].pattern == PATTERN_CONV_BN_ACT) victim = g->ops[f.tc.fu.groups[i].first + 1].out[0];
    cr_assert(victim >= 0);
    cr_assert_not(f.tc.fu.internal[victim], "a BN output that backward reads was marked internal");
    f.tc.mp.offset[victim] = MEMPLAN_INTERNAL;
    Interp it;
    char err[512];
    cr_assert(interp_init(&it, g));
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].kind != TK_ACTIVATION) cr_assert(interp_tensor(&it, t));
    cr_assert(interp_use_arena(&it, f.tc.mp.offset, f.tc.mp.arena_bytes, true) && interp_use_groups(&it, &f.tc.fu));
    cr_assert(weights_init(g, it.buf, 11, err, sizeof err), "%s", err);
    synthetic_batch(5, 2, 64, (int)f.cfg.nc, 8, it.buf[f.tc.tg.images], it.buf[f.tc.tg.boxes], it.buf[f.tc.tg.counts]);
    *(float *)it.buf[f.tc.tg.grad_seed] = 1.0f;
    *(float *)it.buf[f.tc.og.step] = 1.0f;
    cr_expect_not(interp_run(&it, 0, g->n_ops, err, sizeof err), "a step whose saved BN output was freed ran");
    cr_expect(strstr(err, "has no value"), "%s", err);
    interp_free(&it);
    release(&f);
}

/* Plans carry the groups; the reader re-derives them from the rules and
 * refuses a group that claims more than its pattern matches. */
Test(fuse, plans_carry_checked_groups) {
    Fused f;
    compile_tiny(&f, FUSE_FULL, RECOMPUTE_POINTWISE);
    char path[] = "/tmp/yolocc-fuse-XXXXXX", err[512];
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert(plan_write(path, (PlanPart){&f.tc.m.g, &f.tc.mp, &f.tc.fu, f.tc.meta_json, NULL, 0}, &(PlanPart){&f.tc.ev.em.g, &f.tc.ev.emp, &f.tc.ev.efu, f.tc.ev.meta_json, NULL, 0}, err,
                         sizeof err),
              "%s", err);
    Plan p;
    cr_assert(plan_read(path, &p, err, sizeof err), "%s", err);
    cr_assert_eq(p.fusion.n_groups, f.tc.fu.n_groups);
    cr_expect(memcmp(p.fusion.groups, f.tc.fu.groups, sizeof(FusionGroup) * (size_t)f.tc.fu.n_groups) == 0);
    cr_expect(memcmp(p.fusion.internal, f.tc.fu.internal, sizeof(bool) * (size_t)f.tc.m.g.n_tensors) == 0);
    cr_assert(p.eval);
    cr_expect_eq(p.eval->fusion.n_groups, f.tc.ev.efu.n_groups);
    /* a conv group stretched over the next op breaks its rule */
    Fusion bad = p.fusion;
    bad.groups = arena_array(&p.arena, (size_t)bad.n_groups, sizeof(FusionGroup));
    memcpy(bad.groups, p.fusion.groups, sizeof(FusionGroup) * (size_t)bad.n_groups);
    cr_assert_eq(bad.groups[0].pattern, PATTERN_CONV_BN_ACT);
    bad.groups[0].n++;
    bad.groups[1].first++;
    bad.groups[1].n--;
    cr_expect_not(fuse_check(&p.g, &p.arena, &bad, err, sizeof err));
    cr_expect(strstr(err, "conv_bn_act"), "%s", err);
    plan_free(&p);
    unlink(path);
    release(&f);
}
