/* tests/test_traffic.c — the bytes a step's launches move (kernel_launch_bytes,
 * compiler/kernel_traffic.c) against the tensors' own sizes from the memory
 * plan, and the recompute policy that the count showed moving bytes twice:
 * backward recomputes each activation once, however many rules read it. */
#include "../compiler/kernel_ir.h"
#include "test_build.h"

static void build_layout(Built *b, const char *file, const char *scale, int imgsz, int batch, bool channels_last) {
    TrainOptions to = {.imgsz = imgsz, .batch = batch, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .precision = PREC_BF16,
                       .recompute = RECOMPUTE_POINTWISE, .fuse = FUSE_FULL, .channels_last = channels_last};
    build_with(b, file, scale, &to);
}

/* The tiny model's step lowered to launches, with what sizes its tensors. */
typedef struct Lowered {
    Built b;
    bool *persistent;
    KProgram kp;
} Lowered;

static void lower_tiny(Lowered *w, bool channels_last) {
    build_layout(&w->b, "models/tiny.yaml", NULL, 64, 2, channels_last);
    const Graph *g = &w->b.tc.m.g;
    w->persistent = calloc((size_t)g->n_tensors, sizeof(bool));
    cr_assert(w->persistent);
    memplan_mark_persistent(g, w->persistent);
    char err[256];
    cr_assert(kernel_lower(g, &w->b.tc.fu, PREC_BF16, &w->kp, err, sizeof err), "%s", err);
}

static void unlower(Lowered *w) {
    kernel_program_free(&w->kp);
    free(w->persistent);
    unbuild(&w->b);
}

static int64_t tensor_bytes(const Lowered *w, int t) {
    return memplan_tensor_bytes(&w->b.tc.m.g, t, w->persistent[t], PREC_BF16);
}

/* A map touches each of its buffers once whole: its element buffers at every
 * element, its per-channel vectors at every channel, its scalars once; a copy
 * reads and writes its runs; a library op moves its distinct tensors once. */
Test(traffic, launch_bytes_are_the_tensors_each_launch_touches) {
    for (int layout = 0; layout < 2; layout++) {
        Lowered w;
        lower_tiny(&w, layout);
        const Graph *g = &w.b.tc.m.g;
        const KProgram *kp = &w.kp;
        int checked[KS_COUNT + 1] = {0};
        for (int gi = 0; gi < kp->n_groups; gi++) {
            for (int l = kp->group_first[gi]; l < kp->group_first[gi + 1]; l++) {
                const KLaunch *ln = &kp->launches[l];
                int64_t want = 0;
                /* the update reads one entry of its per-group learning rates */
                if (w.b.tc.fu.groups[gi].pattern == PATTERN_OPTIMIZER) continue;
                if (ln->kernel < 0) {
                    const Op *op = &g->ops[ln->op_lo];
                    for (int i = 0; i < op->n_in + op->n_out; i++) {
                        int t = i < op->n_in ? op->in[i] : op->out[i - op->n_in];
                        bool again = false;
                        for (int j = 0; j < i; j++) again |= (j < op->n_in ? op->in[j] : op->out[j - op->n_in]) == t;
                        if (!again) want += tensor_bytes(&w, t);
                    }
                    checked[KS_COUNT]++;
                } else if (kp->kernels[ln->kernel].skel == KS_MAP) {
                    for (int s = 0; s < ln->n_args; s++) want += tensor_bytes(&w, ln->args[s]);
                    checked[KS_MAP]++;
                } else if (kp->kernels[ln->kernel].skel == KS_COPY) {
                    /* a converting copy (an fp32 master weight into a bf16 KRSC copy) reads 4 bytes and writes 2 */
                    for (int s = 0; s < 2; s++)
                        want += ln->outer * ln->len * tensor_bytes(&w, ln->args[s]) / shape_numel(&g->tensors[ln->args[s]].shape);
                    checked[KS_COPY]++;
                } else {
                    continue;
                }
                cr_expect_eq(ln->bytes, want, "%s launch %d (ops %d-%d %s): %lld bytes, the tensors say %lld", layout ? "NHWC" : "NCHW", l, ln->op_lo, ln->op_hi,
                             op_def(g->ops[ln->op_lo].kind)->name, (long long)ln->bytes, (long long)want);
            }
        }
        cr_log_info("%s: %d library launches, %d maps, %d copies checked", layout ? "NHWC" : "NCHW", checked[KS_COUNT], checked[KS_MAP], checked[KS_COPY]);
        cr_expect_gt(checked[KS_COUNT], 0);
        cr_expect_gt(checked[KS_MAP], 0);
        cr_expect_gt(checked[KS_COPY], 0);
        unlower(&w);
    }
}

/* BN statistics read their input once (one pass, where the oracle's two
 * read it twice), BN backward reads dy and x in both of its phases; each
 * phase's per-channel values are a few vectors of c more. Where dy is a sum
 * of two gradients added in the same group, both phases read its two terms
 * instead (and the sum is stored only if something else reads it). */
Test(traffic, reductions_read_their_inputs_once_a_phase) {
    Lowered w;
    lower_tiny(&w, true);
    const Graph *g = &w.b.tc.m.g;
    const KProgram *kp = &w.kp;
    int stats = 0, bwd = 0, summed = 0;
    for (int gi = 0; gi < kp->n_groups; gi++) {
        for (int l = kp->group_first[gi]; l < kp->group_first[gi + 1]; l++) {
            const KLaunch *ln = &kp->launches[l];
            if (ln->kernel < 0 || kp->kernels[ln->kernel].skel != KS_CHANNEL_REDUCE) continue;
            const Op *op = &g->ops[ln->op_hi], *first = &g->ops[w.b.tc.fu.groups[gi].first];
            int64_t elems = 0, per_channel = 16 * ln->c * 8;
            if (op->kind == OP_BATCHNORM && op->a.training) elems = tensor_bytes(&w, op->in[0]), stats++;
            else if (op->kind == OP_BATCHNORM_BWD && first->kind == OP_ADD)
                elems = 2 * (tensor_bytes(&w, first->in[0]) + tensor_bytes(&w, first->in[1]) + tensor_bytes(&w, op->in[1])) + tensor_bytes(&w, op->out[0]) +
                        (w.b.tc.fu.internal[first->out[0]] ? 0 : tensor_bytes(&w, first->out[0])),
                bwd++, summed++;
            else if (op->kind == OP_BATCHNORM_BWD) elems = 2 * (tensor_bytes(&w, op->in[0]) + tensor_bytes(&w, op->in[1])) + tensor_bytes(&w, op->out[0]), bwd++;
            else continue;
            cr_expect_eq(kp->kernels[ln->kernel].n_phases, op->kind == OP_BATCHNORM ? 1 : 2, "launch %d (%s)", l, op_def(op->kind)->name);
            cr_expect(ln->bytes >= elems && ln->bytes <= elems + per_channel, "launch %d (%s): %lld bytes, its element passes %lld", l, op_def(op->kind)->name,
                      (long long)ln->bytes, (long long)elems);
        }
    }
    cr_expect_gt(stats, 0);
    cr_expect_gt(bwd, summed);
    cr_expect_gt(summed, 0, "no BN backward adds its gradient's two terms itself");
    unlower(&w);
}

/* An activation is recomputed for backward once, however many gradient
 * rules read it: every SiLU after the loss is a recompute (its gradient is
 * activation_bwd), and there are no more of them than in the forward. */
Test(traffic, backward_recomputes_each_activation_once) {
    Built b;
    build_layout(&b, "models/yolov8.yaml", "n", 256, 2, true);
    const Graph *g = &b.tc.m.g;
    int fwd = 0, again = 0;
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].kind == OP_SILU) *(o < b.tc.tg.n_forward_ops ? &fwd : &again) += 1;
    cr_log_info("YOLOv8n: %d SiLU in the forward, %d recomputed for backward", fwd, again);
    cr_expect_gt(again, 0, "pointwise recompute makes activations again");
    cr_expect_leq(again, fwd, "an activation made more than once for backward");
    unbuild(&b);
}

/* The loss's gradient runs right after the loss, while its inputs are still
 * alive: it reads the head's levels themselves, and no concat of the head's
 * convolutions is made again for it (a twin would free no byte). Other
 * concats are still recomputed for backward. */
Test(traffic, the_loss_gradient_reads_the_levels_without_twins) {
    Built b;
    build_layout(&b, "models/yolov8.yaml", "n", 256, 2, true);
    const Graph *g = &b.tc.m.g;
    int loss = -1, bwd = -1, twins = 0;
    for (int o = 0; o < g->n_ops; o++) {
        if (g->ops[o].kind == OP_DETECT_LOSS) loss = o;
        if (g->ops[o].kind == OP_DETECT_LOSS_BWD) bwd = o;
    }
    cr_assert(loss >= 0 && bwd > loss, "the step has a loss and its gradient");
    const int nl = g->ops[loss].a.nlevels;
    cr_assert_eq(nl, 3);
    for (int i = 0; i < nl; i++)
        cr_expect_eq(g->ops[bwd].in[1 + i], g->ops[loss].in[i], "level %d: the gradient reads %%%d, the loss %%%d", i, g->ops[bwd].in[1 + i], g->ops[loss].in[i]);
    for (int o = b.tc.tg.n_forward_ops; o < g->n_ops; o++) {
        if (g->ops[o].kind != OP_CONCAT) continue;
        twins++;
        cr_expect(!g->ops[o].scope || strcmp(g->ops[o].scope, "model.22") != 0, "op %d: the head's concat made again for backward", o);
    }
    cr_expect_gt(twins, 0, "the neck's and C2f's concats are still recomputed");
    unbuild(&b);
}
