/* tests/test_views.c — zero-copy concat and split (passes/views.c): what
 * becomes a view, that views never raise the memory plan's lower bound, that
 * they remove copy launches, and that the plan reader rejects views that do
 * not describe a slice of their base. Whether steps run through views
 * correctly is test_memplan's and test_codegen's equivalence tests. */
#include "../compiler/kernel_ir.h"
#include "../compiler/lib_kernels.h"
#include "../compiler/plan_write.h"
#include "../passes/views.h"
#include "../runtime/plan_read.h"
#include "test_build.h"

static void build(Built *b, const char *file, const char *scale, int imgsz, int batch, Precision p, RecomputePolicy r) {
    build_f(b, file, scale, imgsz, batch, p, r, FUSE_FULL, 0);
}

/* Whether part sits `chan` channels into whole's buffer, in the same base. */
static bool in_place(const Views *v, int part, int whole, int64_t chan) { return v->base[part] == v->base[whole] && v->chan[part] == v->chan[whole] + chan; }

/* The C2f block: cat(chunk(cv1(x), 2), m0(...), m1(...)). Its two chunks
 * are slices of cv1's output, which itself sits at channel 0 of the concat,
 * and every bottleneck output is written into its slice: with pointwise
 * recompute (the default) the whole forward concat costs no copy. */
Test(views, c2f_forward_concat_is_zero_copy) {
    Built b;
    build(&b, "models/tiny.yaml", NULL, 64, 2, PREC_FP32, RECOMPUTE_POINTWISE);
    const Graph *g = &b.tc.m.g;
    const Views *v = &b.tc.fu.views;
    int c2f = 0;
    for (int o = 0; o < b.tc.tg.n_forward_ops; o++) {
        const Op *op = &g->ops[o];
        if (op->kind != OP_CONCAT || op->a.axis != 1) continue;
        int p0 = g->tensors[op->in[0]].producer, p1 = g->tensors[op->in[1]].producer;
        if (p0 < 0 || p0 != p1 || g->ops[p0].kind != OP_SPLIT) continue;
        c2f++;
        int64_t chan = 0;
        for (int i = 0; i < op->n_in; i++) {
            cr_expect(in_place(v, op->in[i], op->out[0], chan), "concat op %d (%s): input %d is copied", o, op->scope, i);
            chan += g->tensors[op->in[i]].shape.d[1];
        }
        int src = g->ops[p0].in[0];
        cr_expect(in_place(v, src, op->out[0], 0), "concat op %d: the chunked tensor %%%d is not the concat's first channels", o, src);
    }
    cr_expect_geq(c2f, 2, "tiny has C2f blocks");
    unbuild(&b);
}

/* Every view is a slice of its base as views_fits defines it, bases are no
 * views, and a split output that is a view sits where the split cuts. */
Test(views, views_are_slices_of_their_base) {
    Built b;
    build(&b, "models/yolov8.yaml", "n", 64, 2, PREC_BF16, RECOMPUTE_POINTWISE);
    const Graph *g = &b.tc.m.g;
    const Views *v = &b.tc.fu.views;
    cr_assert_gt(v->n_views, 50);
    for (int t = 0; t < g->n_tensors; t++) {
        int base = v->base[t];
        if (base == t) continue;
        cr_expect_eq(v->base[base], base);
        cr_expect(views_fits(g, t, base, v->chan[t]), "view %d at channel %lld of %d", t, (long long)v->chan[t], base);
        cr_expect_eq(b.tc.mp.offset[t], b.tc.mp.offset[base] + views_elem_offset(g, v, t) * 2, "bf16 view %d", t);
    }
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        if (op->kind != OP_SPLIT || op->a.axis != 1) continue;
        int64_t chan = 0;
        for (int i = 0; i < op->n_out; i++) {
            int t = op->out[i];
            if (v->base[t] != t) cr_expect(in_place(v, t, op->in[0], chan), "split op %d output %d", o, i);
            chan += g->tensors[t].shape.d[1];
        }
    }
    unbuild(&b);
}

static int copy_launches(const Graph *g, const Fusion *f) {
    KProgram kp;
    char err[256];
    cr_assert(kernel_lower(g, f, PREC_BF16, &kp, err, sizeof err), "%s", err);
    int n = 0;
    for (int l = 0; l < kp.n_launches; l++) n += kp.launches[l].kernel >= 0 && kp.kernels[kp.launches[l].kernel].skel == KS_COPY;
    kernel_program_free(&kp);
    return n;
}

/* The same fused plan with and without its views: the lower bound never
 * rises (views are taken only where they are free), saved activations fall
 * when nothing is recomputed (a concat and its inputs were both kept), and
 * most concat/split copies disappear. */
Test(views, free_memory_and_fewer_copies) {
    struct { const char *file, *scale; } models[] = {{"models/yolov8.yaml", "n"}, {"models/yolo11.yaml", "n"}, {"models/yolov5.yaml", "n"}};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
        for (int r = 0; r < 2; r++) {
            Built b;
            build(&b, models[m].file, models[m].scale, 320, 4, PREC_BF16, r ? RECOMPUTE_POINTWISE : RECOMPUTE_NONE);
            const Graph *g = &b.tc.m.g;
            Fusion plain = b.tc.fu;
            char err[256];
            cr_assert(views_identity(g, &b.arena, &plain.views, err, sizeof err));
            MemPlan without;
            int loss_op = g->tensors[b.tc.tg.loss].producer;
            cr_assert(memplan_build(g, loss_op, &plain, PREC_BF16, false, &b.arena, &without, err, sizeof err), "%s", err);
            int copies = copy_launches(g, &b.tc.fu), copies_without = copy_launches(g, &plain);
            cr_log_info("%s recompute %s: %d views; lower bound %lld vs %lld without; saved %lld vs %lld; copy launches %d vs %d", models[m].file, r ? "pointwise" : "none",
                        b.tc.fu.views.n_views, (long long)b.tc.mp.lower_bound_bytes, (long long)without.lower_bound_bytes, (long long)b.tc.mp.saved_activation_bytes,
                        (long long)without.saved_activation_bytes, copies, copies_without);
            cr_expect_leq(b.tc.mp.lower_bound_bytes, without.lower_bound_bytes, "%s: views raised the lower bound", models[m].file);
            /* C2f keeps its chunks and every bottleneck output for backward
             * beside the concat of them; C3 (YOLOv5) concatenates two convs */
            double kept = strstr(models[m].file, "yolov5") ? 1.0 : 0.97;
            if (!r) cr_expect_lt(b.tc.mp.saved_activation_bytes, kept * (double)without.saved_activation_bytes, "%s", models[m].file);
            cr_expect_lt(copies, 0.3 * copies_without, "%s: %d of %d copies left", models[m].file, copies, copies_without);
            unbuild(&b);
        }
}

static void build_nhwc(Built *b, const char *file, const char *scale) {
    TrainOptions to = {.imgsz = 64, .batch = 2, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .precision = PREC_BF16,
                       .recompute = RECOMPUTE_POINTWISE, .fuse = FUSE_FULL, .channels_last = true};
    build_with(b, file, scale, &to);
}

/* Channels last: a channel slice is strided per pixel, which the generated
 * kernels and the pooling and resize kernels address (YlArgs.ps), so every
 * op touching one is of those (kernel_op_strided_rows), and the upsample and
 * max-pool outputs live in the concats that read them. A C2f chunk that a
 * convolution reads keeps its own buffer, but its values already sit in the
 * concat (the chunked tensor lives there), so the concat copies only the
 * bottleneck outputs that a convolution reads too. */
Test(views, channels_last_slices_meet_strided_kernels_only) {
    Built b;
    build_nhwc(&b, "models/yolov8.yaml", "n");
    const Graph *g = &b.tc.m.g;
    const Views *v = &b.tc.fu.views;
    int slices = 0, c2f = 0, library = 0, placed = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        if (!views_row_stride(g, v, t)) continue;
        cr_expect(g->tensors[t].channels_last);
        slices++;
        const Tensor *x = &g->tensors[t];
        cr_expect(kernel_op_strided_rows(g->ops[x->producer].kind), "slice %%%d made by %s", t, op_def(g->ops[x->producer].kind)->name);
        library += !kernel_op_generated(g->ops[x->producer].kind);
        for (int o = 0; o < g->n_ops; o++)
            for (int i = 0; i < g->ops[o].n_in; i++)
                if (g->ops[o].in[i] == t) {
                    cr_expect(kernel_op_strided_rows(g->ops[o].kind), "slice %%%d read by op %d (%s)", t, o, op_def(g->ops[o].kind)->name);
                    library += !kernel_op_generated(g->ops[o].kind);
                }
    }
    for (int o = 0; o < b.tc.tg.n_forward_ops; o++) {
        const Op *op = &g->ops[o];
        if (op->kind != OP_RESIZE_NEAREST) continue;
        cr_expect(views_row_stride(g, v, op->out[0]), "op %d (%s, %s): its output is no slice of the concat", o, op_def(op->kind)->name, op->scope);
        placed += views_row_stride(g, v, op->out[0]) != 0;
    }
    cr_expect_eq(placed, 2, "YOLOv8n's 2 upsamples write into their concats");
    cr_expect_gt(library, 10, "pooling and resize kernels make or read %d slices", library);
    cr_expect_gt(slices, 20, "%d channel slices", slices);
    KProgram kp;
    char err[256];
    cr_assert(kernel_lower(g, &b.tc.fu, PREC_BF16, &kp, err, sizeof err), "%s", err);
    for (int o = 0; o < b.tc.tg.n_forward_ops; o++) {
        const Op *op = &g->ops[o];
        int p0 = op->kind == OP_CONCAT && op->a.axis == 1 ? g->tensors[op->in[0]].producer : -1;
        if (p0 < 0 || p0 != g->tensors[op->in[1]].producer || g->ops[p0].kind != OP_SPLIT) continue;
        c2f++;
        cr_expect(in_place(v, g->ops[p0].in[0], op->out[0], 0), "concat op %d: the chunked tensor is not the concat's first channels", o);
        int copies = 0;
        for (int l = 0; l < kp.n_launches; l++) copies += kp.launches[l].kernel >= 0 && kp.launches[l].op_lo == o;
        cr_expect_eq(copies, op->n_in - 3, "concat op %d (%s): %d copies for %d inputs", o, op->scope, copies, op->n_in);
    }
    cr_expect_eq(c2f, 8, "YOLOv8 has 8 C2f blocks");
    kernel_program_free(&kp);
    unbuild(&b);
}

/* Pooling writes and reads channels-last slices too: with nothing
 * recomputed, SPPF's concat is kept for backward, and its three max-pool
 * outputs (each the next pool's input, and each read again by its pool's
 * gradient) live in it. Under pointwise recompute the concat is made again
 * for backward, so the pool outputs would keep it alive through the whole
 * step; views_build declines there (the lower bound never rises). */
Test(views, channels_last_max_pools_write_into_the_sppf_concat) {
    Built b;
    TrainOptions to = {.imgsz = 64, .batch = 2, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .precision = PREC_BF16,
                       .recompute = RECOMPUTE_NONE, .fuse = FUSE_FULL, .channels_last = true};
    build_with(&b, "models/yolov8.yaml", "n", &to);
    const Graph *g = &b.tc.m.g;
    const Views *v = &b.tc.fu.views;
    int pools = 0, placed = 0, strided_bwd = 0;
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        if (op->kind == OP_MAXPOOL2D) {
            pools++;
            placed += views_row_stride(g, v, op->out[0]) != 0;
            cr_expect(views_row_stride(g, v, op->out[0]), "op %d (%s): its output is no slice of the concat", o, op->scope);
        }
        for (int i = 0; op->kind == OP_MAXPOOL2D_BWD && i < op->n_in; i++) strided_bwd += views_row_stride(g, v, op->in[i]) != 0;
    }
    cr_expect(pools == 3 && placed == 3, "%d of %d max-pool outputs in the concat", placed, pools);
    cr_expect_geq(strided_bwd, 3, "the pools' gradients read slices: %d operands", strided_bwd);
    KProgram kp;
    char err[256];
    cr_assert(kernel_lower(g, &b.tc.fu, PREC_BF16, &kp, err, sizeof err), "%s", err);
    kernel_program_free(&kp);
    unbuild(&b);
}

/* A library routine steps over images: lowering refuses a channels-last
 * slice as its operand (here the C2f chunk a convolution reads, made a view
 * of the concat where its values sit). */
Test(views, library_ops_refuse_channels_last_slices) {
    Built b;
    build_nhwc(&b, "models/tiny.yaml", NULL);
    const Graph *g = &b.tc.m.g;
    Views *v = &b.tc.fu.views;
    int chunk = -1, w = -1;
    int64_t chan = 0;
    for (int t = 0; t < g->n_tensors && chunk < 0; t++)
        if (v->base[t] == t && views_split_source(g, t, &w, &chan) && v->base[w] != w && g->tensors[t].channels_last) chunk = t;
    cr_assert_geq(chunk, 0, "a C2f chunk in its own buffer");
    v->base[chunk] = v->base[w];
    v->chan[chunk] = v->chan[w] + chan;
    KProgram kp;
    char err[256] = "";
    cr_expect_not(kernel_lower(g, &b.tc.fu, PREC_BF16, &kp, err, sizeof err));
    cr_expect(strstr(err, "a library routine cannot address") && strstr(err, "channels-last"), "got: %s", err);
    unbuild(&b);
}

/* Writes the tiny plan after `tamper` changed its views or offsets and
 * expects the reader to refuse it with `why`. */
static void expect_bad_views(void (*tamper)(TrainCompiled *tc, int view), const char *why) {
    Built b;
    build(&b, "models/tiny.yaml", NULL, 32, 1, PREC_FP32, RECOMPUTE_POINTWISE);
    TrainCompiled *tc = &b.tc;
    int view = -1;
    for (int t = 0; t < tc->m.g.n_tensors && view < 0; t++)
        if (tc->fu.views.base[t] != t && views_row_stride(&tc->m.g, &tc->fu.views, t)) view = t;
    cr_assert_geq(view, 0);
    tamper(tc, view);
    char path[] = "/tmp/yolocc-views-XXXXXX", err[512] = "";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert(plan_write(path, (PlanPart){&tc->m.g, &tc->mp, &tc->fu, tc->meta_json, NULL, 0}, &(PlanPart){&tc->ev.em.g, &tc->ev.emp, &tc->ev.efu, tc->ev.meta_json, NULL, 0}, err, sizeof err), "%s", err);
    Plan p;
    bool ok = plan_read(path, &p, err, sizeof err);
    plan_free(&p);
    unlink(path);
    cr_expect_not(ok, "a plan with %s was read", why);
    cr_expect(strstr(err, why) && strstr(err, "offset"), "expected '%s' with a byte offset, got: %s", why, err);
    unbuild(&b);
}

static void chan_past_base(TrainCompiled *tc, int t) { tc->fu.views.chan[t] = tc->m.g.tensors[tc->fu.views.base[t]].shape.d[1]; }
static void offset_off_slice(TrainCompiled *tc, int t) { tc->mp.offset[t] += 4; }
static void base_is_a_view(TrainCompiled *tc, int t) {
    /* another view becomes t's base: a view of a view */
    for (int u = 0; u < tc->m.g.n_tensors; u++)
        if (u != t && tc->fu.views.base[u] != u && views_fits(&tc->m.g, t, u, 0)) {
            tc->fu.views.base[t] = u;
            tc->fu.views.chan[t] = 0;
            return;
        }
    /* none fits: make it a view of a persistent tensor instead */
    tc->fu.views.base[t] = tc->m.g.inputs[0];
}

Test(views, reader_rejects_bad_views) {
    expect_bad_views(chan_past_base, "is not a slice of its base");
    expect_bad_views(offset_off_slice, "its slice of");
    expect_bad_views(base_is_a_view, "of its own");
}
