/* tests/test_layout.c — channels-last plans (--layout nhwc): the layout rule
 * of the IR (only a reshape changes a layout; no op mixes them), what the
 * kernel lowering makes of channels-last tensors (rows of channels, copies of
 * channel runs, transposing reshapes as library routines), that a CPU
 * plan trains to the same numbers in either layout, and that CUDA plans
 * compile in it. */
#include "../compiler/codegen.h"
#include "../compiler/kernel_ir.h"
#include "../compiler/nvrtc_build.h"
#include "test_build.h"
#include "test_step.h"

static void build_layout(Built *b, const char *file, const char *scale, bool channels_last) {
    TrainOptions to = {.imgsz = 64, .batch = 2, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .precision = PREC_FP32,
                       .recompute = RECOMPUTE_POINTWISE, .fuse = FUSE_FULL, .channels_last = channels_last};
    build_with(b, file, scale, &to);
}

static bool is_cl(const Graph *g, int t) { return g->tensors[t].channels_last; }

/* Every convolution of both graphs reads and writes channels-last tensors;
 * inputs and state keep PyTorch's order; the images and each conv weight
 * enter through a layout reshape (pointwise recompute may repeat one in the
 * backward), and nothing else does. */
Test(layout, nhwc_graph_is_channels_last_where_convs_are) {
    Built b;
    build_layout(&b, "models/tiny.yaml", NULL, true);
    for (int which = 0; which < 2; which++) {
        const Graph *g = which ? &b.tc.ev.em.g : &b.tc.m.g;
        int convs = 0, images_in = 0;
        for (int o = 0; o < g->n_ops; o++) {
            const Op *op = &g->ops[o];
            if (op->kind == OP_CONV2D || op->kind == OP_CONV2D_DGRAD || op->kind == OP_CONV2D_WGRAD) {
                convs++;
                for (int i = 0; i < op->n_in; i++)
                    if (g->tensors[op->in[i]].shape.nd == 4) cr_expect(is_cl(g, op->in[i]), "op %d (%s) input %d is NCHW", o, op_def(op->kind)->name, i);
                cr_expect(is_cl(g, op->out[0]), "op %d output is NCHW", o);
            }
            if (op->kind == OP_CONV2D) {
                int p = g->tensors[op->in[1]].producer;
                cr_expect(p >= 0 && g->ops[p].kind == OP_RESHAPE && g->ops[p].a.channels_last && g->tensors[g->ops[p].in[0]].kind == TK_PARAM,
                          "op %d: the weight does not come from a layout reshape of a parameter", o);
            }
            if (op->kind == OP_RESHAPE && op->a.channels_last) {
                const Tensor *src = &g->tensors[op->in[0]];
                images_in += src->kind == TK_INPUT;
                cr_expect((src->kind == TK_INPUT && strcmp(src->name, "images") == 0) || (src->kind == TK_PARAM && src->shape.nd == 4), "op %d: a layout reshape of %%%d", o, src->id);
            }
        }
        for (int t = 0; t < g->n_tensors; t++)
            if (g->tensors[t].kind != TK_ACTIVATION) cr_expect(!g->tensors[t].channels_last, "state or input %%%d is channels last", t);
        cr_expect_gt(convs, 10);
        cr_expect_geq(images_in, 1);
        char err[256];
        cr_expect(graph_verify(g, err, sizeof err), "%s", err);
    }
    unbuild(&b);
}

/* bf16 plans store the images in bf16 in either layout: in NHWC their only
 * reader is the layout reshape, whose output the convolutions read. */
Test(layout, bf16_images_in_either_layout) {
    for (int cl = 0; cl < 2; cl++) {
        Built b;
        TrainOptions to = {.imgsz = 64, .batch = 2, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .precision = PREC_BF16,
                           .recompute = RECOMPUTE_POINTWISE, .fuse = FUSE_FULL, .channels_last = cl};
        build_with(&b, "models/tiny.yaml", NULL, &to);
        const Graph *g = &b.tc.m.g;
        int images = b.tc.tg.images;
        cr_expect_eq(memplan_storage_dtype(g, images, true, PREC_BF16), DT_BF16, "%s: images stored as %s", cl ? "nhwc" : "nchw",
                     dtype_name(memplan_storage_dtype(g, images, true, PREC_BF16)));
        cr_expect_eq(memplan_tensor_bytes(g, images, true, PREC_BF16), 2 * shape_numel(&g->tensors[images].shape));
        unbuild(&b);
    }
}

/* Generated kernels address a channels-last tensor as rows of channels:
 * [n*h*w, c, 1], so per-channel loads (BN statistics, biases) stay
 * per-channel, and a channel slice living in a wider tensor (a zero-copy
 * view) steps its base's channel count between rows; copies along the
 * channel axis move runs of a part's channels with the whole's row between
 * them; the validation head's [N, no, H, W] -> [N, no, H*W] reshape is a
 * transpose, so a library routine. */
Test(layout, kernels_see_rows_of_channels) {
    Built b;
    build_layout(&b, "models/tiny.yaml", NULL, true);
    char err[256];
    for (int which = 0; which < 2; which++) {
        const Graph *g = which ? &b.tc.ev.em.g : &b.tc.m.g;
        KProgram kp;
        cr_assert(kernel_lower(g, which ? &b.tc.ev.efu : &b.tc.fu, PREC_FP32, &kp, err, sizeof err), "%s", err);
        const Views *v = which ? &b.tc.ev.efu.views : &b.tc.fu.views;
        int rows = 0, channel_copies = 0, transposes = 0, slices = 0;
        for (int l = 0; l < kp.n_launches; l++) {
            const KLaunch *ln = &kp.launches[l];
            const Op *op = &g->ops[ln->op_lo];
            if (ln->kernel < 0) {
                if (op->kind == OP_RESHAPE) {
                    transposes++;
                    cr_expect(!tensor_logical_order(&g->tensors[op->in[0]]) || !tensor_logical_order(&g->tensors[op->out[0]]));
                }
                continue;
            }
            const Kernel *k = &kp.kernels[ln->kernel];
            if (k->skel == KS_MAP || k->skel == KS_CHANNEL_REDUCE) {
                for (int i = 0; i < ln->n_args; i++) {
                    const Tensor *t = &g->tensors[ln->args[i]];
                    if (!t->channels_last) continue;
                    cr_expect(ln->n == t->shape.d[0] * t->shape.d[2] * t->shape.d[3] && ln->c == t->shape.d[1] && ln->inner == 1,
                              "launch %d over [%lld, %lld, %lld] reads channels-last %%%d", l, (long long)ln->n, (long long)ln->c, (long long)ln->inner, t->id);
                    rows++;
                    int base = v->base[t->id];
                    int64_t row = base != t->id && g->tensors[base].shape.d[1] != t->shape.d[1] ? g->tensors[base].shape.d[1] : 0;
                    cr_expect_eq(k->buf_strided[i], row != 0, "launch %d slot %d: strided exactly when %%%d is a channel slice", l, i, t->id);
                    cr_expect_eq(ln->bs[i], row, "launch %d slot %d: %lld elements between rows of %%%d, a slice of %lld channels", l, i, (long long)ln->bs[i], t->id, (long long)row);
                    slices += row != 0;
                }
            }
            if (k->skel == KS_COPY && (op->kind == OP_CONCAT || op->kind == OP_SPLIT) && op->a.axis == 1 && is_cl(g, op->in[0])) {
                const Tensor *whole = &g->tensors[op->kind == OP_CONCAT ? op->out[0] : op->in[0]];
                int64_t stride = op->kind == OP_CONCAT ? ln->dst_stride : ln->src_stride, base = v->base[whole->id];
                int64_t row = base != whole->id ? g->tensors[base].shape.d[1] : whole->shape.d[1];
                cr_expect_eq(stride, row, "launch %d: %lld elements between rows of a %lld-channel tensor", l, (long long)stride, (long long)row);
                cr_expect_eq(ln->outer, whole->shape.d[0] * whole->shape.d[2] * whole->shape.d[3]);
                cr_expect_lt(ln->len, whole->shape.d[1]);
                channel_copies++;
            }
        }
        cr_expect_gt(rows, 0);
        cr_expect_gt(channel_copies, 0, "no concat or split along the channels was copied");
        /* the C2f splits' first halves, read only by generated kernels */
        if (!which) cr_expect_gt(slices, 0, "no kernel reads a channel slice in place");
        /* training: the images' layout reshape (the weights' have one channel
         * or one pixel only when 1x1 with one input channel); validation also
         * the head's three level reshapes */
        cr_expect_geq(transposes, which ? 4 : 1);
        kernel_program_free(&kp);
    }
    unbuild(&b);
}

/* An op may not mix layouts: graph_add_op refuses with a message naming the
 * tensor, and graph_verify catches a tensor whose flag disagrees with the
 * rule. */
Test(layout, no_op_mixes_layouts) {
    Arena a;
    arena_init(&a, 0);
    Graph g;
    graph_init(&g, &a);
    int x = graph_add_input(&g, "x", shape4(1, 4, 3, 3), DT_F32);
    OpAttrs to_cl = {.shape = shape4(1, 4, 3, 3), .channels_last = true};
    int r = graph_add_op(&g, OP_RESHAPE, &x, 1, &to_cl, 1, 0, "to_cl");
    cr_assert_geq(r, 0, "%s", g.err);
    int xc = g.ops[r].out[0];
    cr_expect(g.tensors[xc].channels_last);
    int in[2] = {x, xc};
    cr_expect_lt(graph_add_op(&g, OP_ADD, in, 2, NULL, 1, 0, "mix"), 0);
    cr_expect(strstr(g.err, "channels-last and NCHW") != NULL, "%s", g.err);
    in[0] = xc;
    int s = graph_add_op(&g, OP_ADD, in, 2, NULL, 1, 0, "same");
    cr_assert_geq(s, 0, "%s", g.err);
    cr_expect(g.tensors[g.ops[s].out[0]].channels_last, "an op keeps its inputs' layout");
    OpAttrs flat = {.shape = {2, {4, 9}}, .channels_last = true};
    cr_expect_lt(graph_add_op(&g, OP_RESHAPE, &xc, 1, &flat, 1, 0, "rank2"), 0, "only rank-4 tensors are stored channels last");
    char err[256];
    cr_expect(graph_verify(&g, err, sizeof err), "%s", err);
    g.tensors[g.ops[s].out[0]].channels_last = false;
    cr_expect(!graph_verify(&g, err, sizeof err));
    cr_expect(strstr(err, "layout") != NULL, "%s", err);
    arena_free(&a);
}

/* Two SGD steps from the same weights and batch: gradients and every state
 * value after them agree between the NCHW and the NHWC plan (fp32; the CPU
 * runs library routines on NCHW copies, so differences can only come from
 * the generated kernels and copies, which must address the same elements).
 * Without generated kernels every op runs a reference routine on packed
 * copies of what it touches: channels-last views included. */
static void check_same_step_with(const char *model_args, bool generated) {
    StepTrace tr[2];
    for (int cl = 0; cl < 2; cl++) {
        char args[512], path[22];
        snprintf(args, sizeof args, "%s --imgsz 64 --batch 2 --max-boxes 8 --layout %s", model_args, cl ? "nhwc" : "nchw");
        Plan p;
        compile_and_read(args, path, &p);
        int n_cl = 0;
        for (int t = 0; t < p.g.n_tensors; t++) n_cl += p.g.tensors[t].channels_last;
        cr_expect(cl ? n_cl > 0 : n_cl == 0, "%s: %d channels-last tensors read back", args, n_cl);
        run_two(&p, generated, &tr[cl], NULL);
        plan_free(&p);
        unlink(path);
    }
    double dl = fmax(fabs(tr[1].loss[0] - tr[0].loss[0]) / fabs(tr[0].loss[0]), fabs(tr[1].loss[1] - tr[0].loss[1]) / fabs(tr[0].loss[1]));
    double dg = worst_diff(tr[1].grads, tr[0].grads, tr[0].n_grads), dp = worst_diff(tr[1].state, tr[0].state, tr[0].n_state);
    cr_log_info("%s: nhwc against nchw: losses %.7g %.7g; worst relative difference: loss %.3g, gradients %.3g, state after 2 steps %.3g", model_args, tr[1].loss[0],
                tr[1].loss[1], dl, dg, dp);
    cr_expect(isfinite(tr[1].loss[1]));
    cr_expect_eq(tr[1].n_state, tr[0].n_state);
    cr_expect_leq(dl, 1e-6, "%s: loss differs by %.3g", model_args, dl);
    cr_expect_leq(dg, 1e-6, "%s: gradients differ by %.3g", model_args, dg);
    cr_expect_leq(dp, 1e-6, "%s: parameters differ by %.3g", model_args, dp);
    free_trace(&tr[0]);
    free_trace(&tr[1]);
}

static void check_same_step(const char *model_args) { check_same_step_with(model_args, true); }

Test(layout, nhwc_step_equals_nchw_yolov8_style) { check_same_step("models/tiny.yaml"); }
Test(layout, nhwc_step_equals_nchw_through_the_reference_kernels) { check_same_step_with("models/tiny.yaml", false); }
Test(layout, nhwc_step_equals_nchw_yolo11_attention) { check_same_step("tests/parity/v11tiny.yaml --scale n"); }
Test(layout, nhwc_step_equals_nchw_yolov10_end2end) { check_same_step("tests/parity/v10tiny.yaml"); }
Test(layout, nhwc_step_equals_nchw_yolov5) { check_same_step("models/yolov5.yaml --scale n"); }

/* Corpus heads and blocks the project's models lack: YOLO12's area
 * attention, YOLOv9's ADown (avg-pool) and RepNCSPELAN4. */
static void corpus_step(const char *file, const char *scale) {
    const char *dir = tu_corpus();
    if (!dir) {
        cr_log_warn("SKIP: no corpus (YOLOCC_CORPUS)");
        cr_skip_test();
    }
    char args[512];
    snprintf(args, sizeof args, "%s/%s%s%s", dir, file, scale ? " --scale " : "", scale ? scale : "");
    check_same_step(args);
}

Test(layout, nhwc_step_equals_nchw_yolo12) { corpus_step("yolo12.yaml", "n"); }
Test(layout, nhwc_step_equals_nchw_yolov9t) { corpus_step("yolov9t.yaml", NULL); }

/* The CLI: an unknown layout is a usage error with one line and writes
 * nothing. */
Test(layout, cli_errors) {
    CliResult r = tu_run("models/tiny.yaml --layout nwhc -o /tmp/yolocc-layout-never.plan");
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "--layout must be nchw or nhwc") != NULL, "%s", r.err);
    cr_expect_eq(tu_lines(r.err), 1, "%s", r.err);
    tu_free(&r);
    cr_expect_neq(access("/tmp/yolocc-layout-never.plan", F_OK), 0);
}

/* A CUDA plan compiles channels last: its META says so, and its kernels
 * carry the layout-change library kernel (images and weights in, levels
 * out) beside the pooling and resize kernels the NCHW plan has. */
Test(layout, cuda_plans_compile_channels_last) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    char path[32], err[512];
    Plan p;
    compile_and_read("models/tiny.yaml --imgsz 64 --batch 2 --precision bf16 --layout nhwc --target cuda --arch sm_80", path, &p);
    unlink(path);
    const cJSON *layout = cJSON_GetObjectItemCaseSensitive(p.meta, "layout");
    cr_expect(cJSON_IsString(layout) && strcmp(layout->valuestring, "nhwc") == 0, "META layout");
    cJSON *idx = NULL;
    const unsigned char *blobs;
    size_t blobs_len;
    cr_assert(codegen_parse_section(p.kernels, p.kernels_len, &idx, &blobs, &blobs_len, err, sizeof err), "%s", err);
    int relayout = 0, pool = 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(idx, "library")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(k, "name")->valuestring;
        relayout += strncmp(name, "yl_relayout_", 12) == 0, pool += strncmp(name, "yl_maxpool2d_", 13) == 0;
    }
    cr_expect_geq(relayout, 2, "fp32 masters and bf16 activations into channels last, at least");
    cr_expect_gt(pool, 0);
    cJSON_Delete(idx);
    plan_free(&p);
}
