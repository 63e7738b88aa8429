/* tests/test_lib_kernels.c — the CUDA library kernels (compiler/lib_kernels.h, templates/cuda/lib):
 * which ops get one, names, launch arguments and NVRTC compiles for every model and precision (no
 * GPU); on a GPU, each kernel against its reference kernel on inputs full of ties, packed and as
 * views, attention through cuBLASLt and the kernels around its products, and the compute-copy cast
 * (`SKIP: no CUDA device` without one). Owns no library code. */
#include <math.h>

#include "../compiler/lib_kernels.h"
#include "../compiler/model_cfg.h"
#include "../compiler/nvrtc_build.h"
#include "../compiler/train_compile.h"
#include "../passes/views.h"
#include "../runtime/cuda/cuda_attention.h"
#include "../runtime/cuda/cuda_step.h"
#include "../runtime/ref_kernels.h"
#include "test_gpu.h"

static void compile_model(Arena *a, TrainCompiled *tc, const char *path, const char *scale, Precision p, bool channels_last) {
    ModelConfig cfg;
    Diag d;
    arena_init(a, 0);
    diag_init(&d, path);
    ModelOptions mo = {.scale = scale};
    TrainOptions to = {.imgsz = 64, .batch = 2, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .recompute = RECOMPUTE_POINTWISE, .fuse = FUSE_FULL,
                       .precision = p, .target = TARGET_CUDA, .channels_last = channels_last};
    cr_assert(model_cfg_load(a, path, &mo, &cfg, &d) && compile_training(a, &cfg, &to, tc, &d), "%s: %s", path, d.msg);
}

/* ---- no GPU ---- */

Test(lib_kernels, entries_cover_pooling_resize_padding_attention_and_decode) {
    const OpKind with[] = {OP_MAXPOOL2D,  OP_MAXPOOL2D_BWD, OP_AVGPOOL2D, OP_AVGPOOL2D_BWD, OP_RESIZE_NEAREST, OP_RESIZE_NEAREST_BWD,
                           OP_ZEROPAD2D, OP_CROP2D,        OP_ATTENTION, OP_ATTENTION_BWD, OP_DFL,            OP_DIST2BBOX};
    for (size_t i = 0; i < sizeof with / sizeof with[0]; i++) cr_expect_geq(lib_entry_of(with[i]), 0, "%s", op_def(with[i])->name);
    /* cuDNN, the loss's own phases, generated kernels */
    const OpKind without[] = {OP_CONV2D, OP_DETECT_LOSS, OP_DETECT_LOSS_BWD, OP_CONCAT};
    for (size_t i = 0; i < sizeof without / sizeof without[0]; i++) cr_expect_lt(lib_entry_of(without[i]), 0, "%s", op_def(without[i])->name);
    /* reshapes and detaches are library launches only between layouts, and then one kernel changes it */
    cr_expect_eq(lib_entry_of(OP_RESHAPE), LK_RELAYOUT);
    cr_expect_eq(lib_entry_of(OP_DETACH), LK_RELAYOUT);
}

/* The tiny bf16 training step compiled for CUDA (cl: --layout nhwc), its
 * kernel program and its library kernels. */
static void tiny_bf16_programs(Arena *a, TrainCompiled *tc, bool cl, KProgram *kp, LibProgram *lp) {
    compile_model(a, tc, "models/tiny.yaml", NULL, PREC_BF16, cl);
    char err[256];
    cr_assert(kernel_lower(&tc->m.g, &tc->fu, PREC_BF16, kp, err, sizeof err), "%s", err);
    cr_assert(lib_program_build(&tc->m.g, PREC_BF16, kp, lp, err, sizeof err), "%s", err);
}

/* The tiny bf16 step: every pooling / resize launch has a kernel named by
 * its operands' storage types, its arguments are the ops' shapes and
 * attributes, views step their base's stride, and the cast comes last. */
Test(lib_kernels, tiny_plan_kernels_and_arguments) {
    Arena a;
    TrainCompiled tc = {0};
    KProgram kp;
    LibProgram lp;
    tiny_bf16_programs(&a, &tc, false, &kp, &lp);
    const Graph *g = &tc.m.g;
    cr_assert_eq(lp.n_launches, kp.n_launches);
    int launches = 0, strided = 0;
    for (int l = 0; l < kp.n_launches; l++) {
        const KLaunch *ln = &kp.launches[l];
        const Op *op = &g->ops[ln->op_lo];
        bool want = ln->kernel < 0 && lib_entry_of(op->kind) >= 0;
        cr_expect_eq(lp.launch_kernel[l] >= 0, want, "launch %d (%s)", l, op_def(op->kind)->name);
        if (!want) continue;
        launches++;
        const LibKernel *k = &lp.kernels[lp.launch_kernel[l]];
        char prefix[64];
        snprintf(prefix, sizeof prefix, "yl_%s_", op_def(op->kind)->name);
        cr_expect(strncmp(k->name, prefix, strlen(prefix)) == 0, "%s for %s", k->name, op_def(op->kind)->name);
        cr_expect_eq(k->n_operands, op->n_in + 1);
        YlArgs y = lib_launch_args(g, &tc.fu.views, op);
        const Shape *out = &g->tensors[op->out[0]].shape, *in0 = &g->tensors[op->in[0]].shape;
        cr_expect_eq(y.total, shape_numel(out));
        cr_expect_eq(y.c, out->d[1]);
        const Shape *x = op->kind == OP_MAXPOOL2D_BWD ? &g->tensors[op->in[1]].shape : op->kind == OP_RESIZE_NEAREST_BWD ? out : in0;
        const Shape *fy = op->kind == OP_MAXPOOL2D_BWD || op->kind == OP_RESIZE_NEAREST_BWD ? in0 : out;
        cr_expect(y.h == x->d[2] && y.w == x->d[3] && y.oh == fy->d[2] && y.ow == fy->d[3], "op %d planes", op->id);
        if (op->kind == OP_MAXPOOL2D || op->kind == OP_MAXPOOL2D_BWD)
            cr_expect(y.kh == op->a.kernel[0] && y.sw == op->a.stride[1] && y.ph == op->a.pad[0] && y.dw == op->a.dilation[1], "op %d window", op->id);
        for (int i = 0; i <= op->n_in; i++) {
            int t = i < op->n_in ? op->in[i] : op->out[0];
            const Shape *s = &g->tensors[t].shape;
            int64_t bs = views_row_stride(g, &tc.fu.views, t);
            cr_expect_eq(y.bs[i], bs ? bs : shape_numel(s) / s->d[0], "op %d operand %d", op->id, i);
            strided += bs != 0;
            cr_expect_eq(k->dt[i], DT_BF16, "op %d operand %d: activations are bf16", op->id, i);
        }
    }
    cr_expect_eq(launches, 9, "3 max pools, 2 resizes (forward and its recompute) and their 4 gradients");
    cr_expect_gt(strided, 0, "some operand is a zero-copy view");
    cr_assert_geq(lp.cast, 0);
    cr_expect_eq(lp.cast, lp.n_kernels - 1);
    cr_expect_str_eq(lp.kernels[lp.cast].name, "yl_cast_f32_bf16");
    char *src = lib_kernel_render(&lp.kernels[0]);
    cr_assert_not_null(src);
    cr_expect(strstr(src, "typedef struct YlArgs") && strstr(src, "extern \"C\" __global__") && strstr(src, lp.kernels[0].name), "%.200s", src);
    cr_expect(!strstr(src, "@NAME@") && !strstr(src, "@T0@"), "every placeholder is filled");
    free(src);
    lib_program_free(&lp);
    kernel_program_free(&kp);
    train_compiled_free(&tc);
    arena_free(&a);
}

/* The tiny bf16 step in NHWC: the images and every convolution weight come
 * into channels last through a layout change (the weights from their fp32
 * masters into bf16), the head's levels leave it through one; every
 * library launch's arguments say which operands are channels last and give
 * their channels, planes and image sizes. */
Test(lib_kernels, tiny_nhwc_plan_layout_changes_and_arguments) {
    Arena a;
    TrainCompiled tc = {0};
    KProgram kp;
    LibProgram lp;
    tiny_bf16_programs(&a, &tc, true, &kp, &lp);
    const Graph *g = &tc.m.g;
    int convs = 0, into_cl = 0, weights_in = 0, out_of_cl = 0, spatial = 0;
    bool *seen = calloc((size_t)g->n_tensors, sizeof *seen);
    cr_assert_not_null(seen);
    /* a 1x1 kernel (or a single input channel) is in the same order either way: its layout change is a plain copy */
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].kind == OP_CONV2D) convs += !tensor_logical_order(&g->tensors[g->ops[o].in[1]]);
    for (int l = 0; l < kp.n_launches; l++) {
        int ki = lp.launch_kernel[l];
        if (ki < 0) continue;
        const LibKernel *k = &lp.kernels[ki];
        const Op *op = &g->ops[kp.launches[l].op_lo];
        YlArgs y = lib_launch_args(g, &tc.fu.views, op);
        for (int i = 0; i < op->n_in + op->n_out && i < YL_MAX_OPERANDS; i++) {
            const Tensor *t = &g->tensors[lib_operand_tensor(op, i)];
            cr_expect_eq(y.cl >> i & 1, t->channels_last, "op %d operand %d", op->id, i);
            cr_expect_eq(y.per[i], shape_numel(&t->shape) / t->shape.d[0]);
            if (t->shape.nd == 4) cr_expect(y.ch[i] == t->shape.d[1] && y.plane[i] == t->shape.d[2] * t->shape.d[3], "op %d operand %d", op->id, i);
        }
        if (op->kind != OP_RESHAPE && op->kind != OP_DETACH) {
            cr_expect_eq(y.cl, (1 << (op->n_in + op->n_out)) - 1, "op %d (%s): every operand channels last", op->id, op_def(op->kind)->name);
            spatial++;
            continue;
        }
        cr_expect_eq(k->entry, LK_RELAYOUT, "op %d", op->id);
        cr_expect_eq(y.total, shape_numel(&g->tensors[op->out[0]].shape));
        const Tensor *in = &g->tensors[op->in[0]], *out = &g->tensors[op->out[0]];
        /* recomputation may change a tensor's layout again for the backward pass: count tensors */
        if (out->channels_last && !in->channels_last && !seen[in->id]) {
            seen[in->id] = true;
            into_cl++;
            if (in->kind == TK_PARAM) {
                weights_in++;
                cr_expect(k->dt[0] == DT_F32 && k->dt[1] == DT_BF16, "%s: the fp32 master into a bf16 channels-last weight", k->name);
            }
        }
        out_of_cl += in->channels_last && !out->channels_last;
    }
    cr_log_info("tiny NHWC: %d layout changes in (%d weights), %d out, %d pooling / resize launches", into_cl, weights_in, out_of_cl, spatial);
    cr_expect_eq(weights_in, convs, "one per convolution weight of a k x k kernel: %d of %d", weights_in, convs);
    cr_expect_eq(into_cl, convs + 1, "and the images: %d", into_cl);
    cr_expect_geq(out_of_cl, 3, "the head's three levels, and the weight gradients back into the masters' order");
    cr_expect_eq(spatial, 9, "3 max pools, 2 resizes (forward and its recompute) and their 4 gradients, as in NCHW");
    free(seen);
    lib_program_free(&lp);
    kernel_program_free(&kp);
    train_compiled_free(&tc);
    arena_free(&a);
}

/* Every library kernel of the tiny, YOLOv5n, YOLOv8n and YOLO11n steps and
 * validation graphs (YOLO11n in NCHW and NHWC: the layout changes), in every
 * precision, compiles with NVRTC for sm_80 and sm_90 and to PTX (no cache:
 * the compiler itself is asked). */
Test(lib_kernels, every_library_kernel_compiles_with_nvrtc) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    const char *models[][3] = {{"models/tiny.yaml", NULL, "nchw"}, {"models/yolov5.yaml", "n", "nchw"}, {"models/yolov8.yaml", "n", "nchw"},
                               {"models/yolo11.yaml", "n", "nchw"}, {"models/yolo11.yaml", "n", "nhwc"}};
    const Precision precs[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    char names[128][KIR_NAME];
    int n_names = 0, compiled = 0;
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
        for (size_t pi = 0; pi < 3; pi++) {
            Arena a;
            TrainCompiled tc = {0};
            compile_model(&a, &tc, models[m][0], models[m][1], precs[pi], strcmp(models[m][2], "nhwc") == 0);
            for (int which = 0; which < 2; which++) {
                const Graph *g = which ? &tc.ev.em.g : &tc.m.g;
                KProgram kp;
                LibProgram lp;
                char err[512];
                cr_assert(kernel_lower(g, which ? &tc.ev.efu : &tc.fu, precs[pi], &kp, err, sizeof err), "%s", err);
                cr_assert(lib_program_build(g, precs[pi], &kp, &lp, err, sizeof err), "%s", err);
                cr_expect_gt(lp.n_kernels, 0, "%s: pooling or resize somewhere", models[m][0]);
                for (int k = 0; k < lp.n_kernels; k++) {
                    bool seen = false;
                    for (int j = 0; j < n_names && !seen; j++) seen = strcmp(names[j], lp.kernels[k].name) == 0;
                    if (seen) continue;
                    cr_assert_lt(n_names, 128);
                    snprintf(names[n_names++], KIR_NAME, "%s", lp.kernels[k].name);
                    char *src = lib_kernel_render(&lp.kernels[k]);
                    cr_assert_not_null(src, "%s", lp.kernels[k].name);
                    const char *archs[] = {"sm_80", "sm_90", "sm_90"};
                    for (int ai = 0; ai < 3; ai++) {
                        unsigned char *bin = NULL;
                        size_t len = 0;
                        cr_expect(nvrtc_compile(lp.kernels[k].name, src, archs[ai], ai == 2, &bin, &len, err, sizeof err), "%s", err);
                        cr_expect_gt(len, 100, "%s %s", lp.kernels[k].name, archs[ai]);
                        free(bin);
                        compiled++;
                    }
                    free(src);
                }
                lib_program_free(&lp);
                kernel_program_free(&kp);
            }
            train_compiled_free(&tc);
            arena_free(&a);
        }
    int attention = 0, relayout = 0;
    for (int j = 0; j < n_names; j++) attention += strncmp(names[j], "yl_attention", 12) == 0, relayout += strncmp(names[j], "yl_relayout", 11) == 0;
    cr_log_info("%d distinct library kernels (%d of attention, %d layout changes), %d NVRTC compiles", n_names, attention, relayout, compiled);
    cr_expect_geq(relayout, 3, "NHWC YOLO11n: images and weights in, levels out, in some storage types");
    cr_expect_geq(n_names, 12, "maxpool, resize and their gradients, and the cast, in three storage types");
    cr_expect_geq(attention, 3, "YOLO11's C2PSA: attention, its gradient and the gradient's statistics kernel");
}

/* ---- on a GPU ---- */

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

typedef struct Dev {
    CudaDevice d;
    CuModule mod[LK_COUNT * 3];
    int n_mod;
    CublasLtHandle blas;    /* attention through cuBLASLt: created and destroyed by its tests */
} Dev;

/* Device 0 (or `SKIP: no CUDA device`) with NVRTC to compile for it. */
static void dev_open(Dev *v) {
    memset(v, 0, sizeof *v);
    open_gpu_or_skip(&v->d);
    char why[512];
    cr_assert(nvrtc_available(why, sizeof why), "%s", why);
}

static void dev_close(Dev *v) {
    for (int i = 0; i < v->n_mod; i++) (void)v->d.L.cuModuleUnload(v->mod[i]);
    cuda_device_close(&v->d);
}

/* Compiles kernel k for the device and resolves it. */
static CuFunction load(Dev *v, const LibKernel *k) {
    char arch[16], err[4096];
    snprintf(arch, sizeof arch, "sm_%d", v->d.sm);
    char *src = lib_kernel_render(k);
    cr_assert_not_null(src);
    unsigned char *bin = NULL;
    size_t len = 0;
    cr_assert(nvrtc_compile(k->name, src, arch, false, &bin, &len, err, sizeof err), "%s", err);
    free(src);
    CuModule *m = &v->mod[v->n_mod++];
    CuFunction f;
    cr_assert(CUDA_CALL(&v->d.L, cuModuleLoadData, (m, bin), "loading a library kernel", err, sizeof err), "%s", err);
    free(bin);
    cr_assert(CUDA_CALL(&v->d.L, cuModuleGetFunction, (&f, *m, k->name), "resolving a library kernel", err, sizeof err), "%s", err);
    return f;
}

static size_t esize(DType t) { return t == DT_F32 ? 4 : 2; }

/* Runs op (of a hand-built graph) through its library kernel with storage
 * type dt for every operand, each operand `gap` elements wider per image
 * than itself (0: packed; else a slice of a wider buffer), on inputs drawn
 * from `levels` values (ties everywhere), and compares with the reference
 * kernel on the same stored values; the gaps must keep their bytes. */
static void check_op(Dev *v, const Graph *g, int o, DType dt, int64_t gap, int levels, uint64_t *seed) {
    const Op *op = &g->ops[o];
    char err[1024];
    LibKernel k = {.entry = (LibEntry)lib_entry_of(op->kind), .n_operands = op->n_in + 1};
    for (int i = 0; i < k.n_operands; i++) k.dt[i] = dt;
    snprintf(k.name, sizeof k.name, "yl_test_%d_%d", o, (int)dt);
    CuFunction f = load(v, &k);
    Views views;
    cr_assert(views_identity(g, g->arena, &views, err, sizeof err), "%s", err);
    YlArgs a = lib_launch_args(g, &views, op);
    void **buf = calloc((size_t)g->n_tensors, sizeof *buf);
    CuDevicePtr dev[3] = {0};
    unsigned char *stage[3] = {0};
    int64_t span[3], row[3], nimg = g->tensors[op->out[0]].shape.d[0];
    for (int i = 0; i < k.n_operands; i++) {
        int t = i < op->n_in ? op->in[i] : op->out[0];
        int64_t n = shape_numel(&g->tensors[t].shape);
        row[i] = n / nimg;
        a.bs[i] = row[i] + gap;
        span[i] = (nimg - 1) * a.bs[i] + row[i];
        buf[t] = calloc((size_t)n + 1, sizeof(float));
        stage[i] = malloc((size_t)span[i] * esize(dt));
        memset(stage[i], 0x5a, (size_t)span[i] * esize(dt));
        if (i < op->n_in) {
            float *x = buf[t];
            for (int64_t e = 0; e < n; e++) x[e] = (float)((int)(next(seed) % (uint64_t)levels) - levels / 2) * 0.375f;
            /* the reference reads the values as stored */
            for (int64_t im = 0; im < nimg; im++) {
                cuda_f32_to_storage(dt, x + im * row[i], stage[i] + (size_t)(im * a.bs[i]) * esize(dt), row[i]);
                cuda_storage_to_f32(dt, stage[i] + (size_t)(im * a.bs[i]) * esize(dt), x + im * row[i], row[i]);
            }
        }
        cr_assert(CUDA_CALL(&v->d.L, cuMemAlloc, (&dev[i], (size_t)span[i] * esize(dt)), "allocating", err, sizeof err), "%s", err);
        cr_assert(cuda_copy_to_device(&v->d, dev[i], stage[i], (size_t)span[i] * esize(dt), "uploading", err, sizeof err), "%s", err);
        a.t[i] = (void *)(uintptr_t)dev[i];
    }
    cr_assert(ref_kernel(op->kind)(g, op, buf, err, sizeof err), "%s", err);
    void *params[] = {&a};
    cr_assert(CUDA_CALL(&v->d.L, cuLaunchKernel, (f, lib_launch_grid(&a, v->d.sm_count), 1, 1, LIB_BLOCK, 1, 1, 0, v->d.main, params, NULL), "launching", err, sizeof err),
              "%s", err);
    cr_assert(CUDA_CALL(&v->d.L, cuStreamSynchronize, (v->d.main), "running", err, sizeof err), "%s: %s", op_def(op->kind)->name, err);
    int o_i = op->n_in, t = op->out[0];
    unsigned char *got = malloc((size_t)span[o_i] * esize(dt));
    cr_assert(cuda_copy_to_host(&v->d, got, dev[o_i], (size_t)span[o_i] * esize(dt), "downloading", err, sizeof err), "%s", err);
    float *want = buf[t], *gv = malloc(sizeof(float) * (size_t)row[o_i]), *wv = malloc(sizeof(float) * (size_t)row[o_i]);
    unsigned char *wst = malloc((size_t)row[o_i] * esize(dt));
    /* exact: the kernels follow the reference's order of operations, and both sides round to storage once */
    int bad = 0, gap_changed = 0;
    for (int64_t im = 0; im < nimg; im++) {
        cuda_storage_to_f32(dt, got + (size_t)(im * a.bs[o_i]) * esize(dt), gv, row[o_i]);
        cuda_f32_to_storage(dt, want + im * row[o_i], wst, row[o_i]);
        cuda_storage_to_f32(dt, wst, wv, row[o_i]);
        for (int64_t e = 0; e < row[o_i]; e++) bad += !(gv[e] == wv[e]);
        for (int64_t e = row[o_i]; im + 1 < nimg && e < a.bs[o_i]; e++)
            for (size_t b = 0; b < esize(dt); b++) gap_changed += got[(size_t)(im * a.bs[o_i] + e) * esize(dt) + b] != 0x5a;
    }
    cr_expect_eq(bad, 0, "%s (%s storage, gap %lld): %d elements differ from the reference", op_def(op->kind)->name, dt == DT_F32 ? "fp32" : dt == DT_BF16 ? "bf16" : "fp16",
                 (long long)gap, bad);
    cr_expect_eq(gap_changed, 0, "%s writes only its view's rows", op_def(op->kind)->name);
    for (int i = 0; i < k.n_operands; i++) (void)v->d.L.cuMemFree(dev[i]), free(stage[i]);
    for (int i = 0; i < g->n_tensors; i++) free(buf[i]);
    free(buf);
    free(got), free(gv), free(wv), free(wst);
}

/* Entries no model in models/ uses (average pooling, zero pad, crop) and
 * odd attributes: arguments, and every entry compiles in every storage type. */
Test(lib_kernels, every_entry_compiles_and_takes_its_attributes) {
    Arena ar;
    Graph g;
    lib_odd_graph(&g, &ar);
    Views views;
    char verr[256];
    cr_assert(views_identity(&g, &ar, &views, verr, sizeof verr), "%s", verr);
    const Op *pad = &g.ops[g.n_ops - 2], *crop = &g.ops[g.n_ops - 1], *md = &g.ops[2], *apb = &g.ops[7];
    YlArgs a = lib_launch_args(&g, &views, crop);
    cr_expect(a.h == 9 && a.w == 11 && a.oh == 12 && a.ow == 14 && a.ph == 1 && a.pw == 0, "crop: small plane, padded plane, rows above, columns left");
    a = lib_launch_args(&g, &views, pad);
    cr_expect(a.h == 9 && a.w == 11 && a.oh == 12 && a.ow == 14 && a.total == 2 * 3 * 12 * 14);
    a = lib_launch_args(&g, &views, md);
    cr_expect(a.kh == 3 && a.kw == 2 && a.sh == 1 && a.sw == 2 && a.dh == 2 && a.dw == 3 && a.ph == 1 && a.pw == 0 && a.h == 9 && a.oh == 7 && a.ow == 4, "dilated max pool");
    a = lib_launch_args(&g, &views, apb);
    cr_expect(a.h == 9 && a.w == 11 && a.oh == 5 && a.ow == 12 && a.bs[0] == 3 * 5 * 12 && a.bs[1] == 3 * 9 * 11, "avgpool2d_bwd: dy, then dx shaped like x");
    char why[512];
    if (!nvrtc_available(why, sizeof why)) {
        arena_free(&ar);
        cr_skip_test("SKIP: NVRTC not available: %s", why);
    }
    const DType types[] = {DT_F32, DT_BF16, DT_F16};
    for (int o = 0; o < g.n_ops; o++)
        for (int ti = 0; ti < 3; ti++) {
            const Op *op = &g.ops[o];
            LibKernel k = {.entry = (LibEntry)lib_entry_of(op->kind), .n_operands = op->n_in + 1};
            for (int i = 0; i < k.n_operands; i++) k.dt[i] = types[(ti + i) % 3]; /* mixed types too */
            snprintf(k.name, sizeof k.name, "yl_t%d_%d", o, ti);
            expect_lib_kernel_compiles(&k);
        }
    arena_free(&ar);
    /* attention, its gradient and the gradient's statistics kernel, mixed types too */
    const LibEntry att[] = {LK_ATTENTION, LK_ATTENTION_BWD, LK_ATTENTION_STATS};
    for (int e = 0; e < 3; e++)
        for (int ti = 0; ti < 3; ti++) {
            LibKernel k = {.entry = att[e], .n_operands = e ? 4 : 3};
            for (int i = 0; i < k.n_operands; i++) k.dt[i] = types[(ti + i) % 3];
            snprintf(k.name, sizeof k.name, "yl_ta%d_%d", e, ti);
            expect_lib_kernel_compiles(&k);
        }
}

static void each_kernel(DType dt) {
    Dev v;
    dev_open(&v);
    Arena ar;
    Graph g;
    lib_odd_graph(&g, &ar);
    uint64_t seed = 0x2545f4914f6cdd1dULL;
    for (int o = 0; o < g.n_ops; o++) {
        /* the first max pool reads a few levels only: windows full of ties */
        check_op(&v, &g, o, dt, 0, o == 0 ? 2 : 5, &seed);
        check_op(&v, &g, o, dt, 7, 3, &seed);
    }
    arena_free(&ar);
    dev_close(&v);
}

Test(lib_kernels, each_kernel_equals_the_reference_fp32) { each_kernel(DT_F32); }
Test(lib_kernels, each_kernel_equals_the_reference_bf16) { each_kernel(DT_BF16); }
Test(lib_kernels, each_kernel_equals_the_reference_fp16) { each_kernel(DT_F16); }

/* Attention op o of lib_attention_graph on the device in storage type dt,
 * operands `gap` elements apart per image: every output against the
 * reference on the same stored values (attention_bwd: its statistics kernel,
 * then its own, on device scratch). fp32 within 1e-6 relative (device exp
 * and host exp may differ in the last fp64 bit), 16-bit within one rounding;
 * gaps keep their bytes. Returns the elements not bit-exact. */
static int64_t check_attention(Dev *v, const Graph *g, int o, DType dt, int64_t gap, uint64_t *seed) {
    const Op *op = &g->ops[o];
    const int n = op->n_in + op->n_out;
    char err[1024];
    LibKernel k[2] = {{.entry = (LibEntry)lib_entry_of(op->kind), .n_operands = n}, {.entry = LK_ATTENTION_STATS, .n_operands = n}};
    for (int i = 0; i < n; i++) k[0].dt[i] = k[1].dt[i] = dt;
    snprintf(k[0].name, sizeof k[0].name, "yl_att_%d_%d", o, (int)dt);
    snprintf(k[1].name, sizeof k[1].name, "yl_atts_%d_%d", o, (int)dt);
    CuFunction f[2] = {load(v, &k[0]), op->kind == OP_ATTENTION_BWD ? load(v, &k[1]) : NULL};
    Views views;
    cr_assert(views_identity(g, g->arena, &views, err, sizeof err), "%s", err);
    YlArgs a = lib_launch_args(g, &views, op);
    void **buf = calloc((size_t)g->n_tensors, sizeof *buf);
    CuDevicePtr dev[LIB_MAX_OPERANDS] = {0}, ws = 0;
    unsigned char *stage[LIB_MAX_OPERANDS] = {0};
    int64_t span[LIB_MAX_OPERANDS], row[LIB_MAX_OPERANDS], nimg = g->tensors[op->in[0]].shape.d[0], inexact = 0;
    for (int i = 0; i < n; i++) {
        int t = lib_operand_tensor(op, i);
        int64_t numel = shape_numel(&g->tensors[t].shape);
        row[i] = numel / nimg;
        *lib_operand_bs(&a, i) = row[i] + gap;
        span[i] = (nimg - 1) * (row[i] + gap) + row[i];
        buf[t] = calloc((size_t)numel + 1, sizeof(float));
        stage[i] = malloc((size_t)span[i] * esize(dt));
        memset(stage[i], 0x5a, (size_t)span[i] * esize(dt));
        for (int64_t im = 0; i < op->n_in && im < nimg; im++) {
            float *x = (float *)buf[t] + im * row[i];
            for (int64_t e = 0; e < row[i]; e++) x[e] = (float)((double)(next(seed) >> 40) * (2.0 / 16777216.0) - 1.0);
            unsigned char *s = stage[i] + (size_t)(im * (row[i] + gap)) * esize(dt);
            cuda_f32_to_storage(dt, x, s, row[i]);
            cuda_storage_to_f32(dt, s, x, row[i]);
        }
        cr_assert(CUDA_CALL(&v->d.L, cuMemAlloc, (&dev[i], (size_t)span[i] * esize(dt)), "allocating", err, sizeof err), "%s", err);
        cr_assert(cuda_copy_to_device(&v->d, dev[i], stage[i], (size_t)span[i] * esize(dt), "uploading", err, sizeof err), "%s", err);
        *lib_operand(&a, i) = (void *)(uintptr_t)dev[i];
    }
    if (lib_scratch_bytes(g, op)) cr_assert(CUDA_CALL(&v->d.L, cuMemAlloc, (&ws, (size_t)lib_scratch_bytes(g, op)), "allocating", err, sizeof err), "%s", err);
    a.ws = (void *)(uintptr_t)ws;
    cr_assert(ref_kernel(op->kind)(g, op, buf, err, sizeof err), "%s", err);
    void *params[] = {&a};
    for (int l = f[1] ? 1 : 0; l >= 0; l--)
        cr_assert(CUDA_CALL(&v->d.L, cuLaunchKernel, (f[l], lib_launch_grid(&a, v->d.sm_count), 1, 1, LIB_BLOCK, 1, 1, 0, v->d.main, params, NULL), "launching", err, sizeof err),
                  "%s", err);
    cr_assert(CUDA_CALL(&v->d.L, cuStreamSynchronize, (v->d.main), "running", err, sizeof err), "%s: %s", op_def(op->kind)->name, err);
    for (int i = op->n_in; i < n; i++) {
        unsigned char *got = malloc((size_t)span[i] * esize(dt));
        cr_assert(cuda_copy_to_host(&v->d, got, dev[i], (size_t)span[i] * esize(dt), "downloading", err, sizeof err), "%s", err);
        const float *want = buf[lib_operand_tensor(op, i)];
        int bad = 0, gap_changed = 0;
        for (int64_t im = 0; im < nimg; im++)
            for (int64_t e = 0; e < row[i] + (im + 1 < nimg ? gap : 0); e++) {
                const unsigned char *p = got + (size_t)(im * (row[i] + gap) + e) * esize(dt);
                if (e >= row[i]) {
                    for (size_t b = 0; b < esize(dt); b++) gap_changed += p[b] != 0x5a;
                    continue;
                }
                float gv, wv = want[im * row[i] + e];
                unsigned char ws16[4];
                cuda_storage_to_f32(dt, p, &gv, 1);
                cuda_f32_to_storage(dt, &wv, ws16, 1);
                bool exact = memcmp(p, ws16, esize(dt)) == 0;
                float w16;
                cuda_storage_to_f32(dt, ws16, &w16, 1);
                /* one rounding: within the larger of the two neighbouring storage steps */
                double step = dt == DT_F32 ? 1e-6 * fmax(fabs(wv), 1e-3) : fabs(w16) * (dt == DT_BF16 ? 0x1p-7 : 0x1p-10) + 1e-7;
                inexact += !exact;
                bad += !exact && !(fabs((double)gv - w16) <= step);
            }
        cr_expect_eq(bad, 0, "%s (%s storage, gap %lld) output %d: %d elements differ from the reference", op_def(op->kind)->name, dt == DT_F32 ? "fp32" : dt == DT_BF16 ? "bf16" : "fp16",
                     (long long)gap, i - op->n_in, bad);
        cr_expect_eq(gap_changed, 0, "%s writes only its views' rows", op_def(op->kind)->name);
        free(got);
    }
    for (int i = 0; i < n; i++) (void)v->d.L.cuMemFree(dev[i]), free(stage[i]);
    if (ws) (void)v->d.L.cuMemFree(ws);
    for (int i = 0; i < g->n_tensors; i++) free(buf[i]);
    free(buf);
    return inexact;
}

static void each_attention(DType dt) {
    Dev v;
    dev_open(&v);
    Arena ar;
    Graph g;
    lib_attention_graph(&g, &ar);
    uint64_t seed = 0x853c49e6748fea9bULL;
    int64_t inexact = 0;
    for (int o = 0; o < g.n_ops; o++) inexact += check_attention(&v, &g, o, dt, 0, &seed) + check_attention(&v, &g, o, dt, 7, &seed);
    cr_log_info("attention on the device: %lld elements not bit-exact", (long long)inexact);
    printf("lib_kernels attention %s: %lld elements not bit-exact\n", dt == DT_F32 ? "fp32" : dt == DT_BF16 ? "bf16" : "fp16", (long long)inexact);
    arena_free(&ar);
    dev_close(&v);
}

Test(lib_kernels, attention_equals_the_reference_fp32) { each_attention(DT_F32); }
Test(lib_kernels, attention_equals_the_reference_bf16) { each_attention(DT_BF16); }
Test(lib_kernels, attention_equals_the_reference_fp16) { each_attention(DT_F16); }

/* The compute-copy cast rounds as the host conversion does, NaN aside. */
Test(lib_kernels, cast_rounds_like_the_host) {
    Dev v;
    dev_open(&v);
    char err[1024];
    enum { N = 70001 };
    float *x = malloc(sizeof(float) * N);
    uint64_t seed = 77;
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)next(&seed);
        memcpy(&x[i], &u, 4);
    }
    const float special[] = {0.0f, -0.0f, 1.00390625f, 1.01171875f, 65519.0f, 65520.0f, 0x1p-25f, 0x1.8p-24f, INFINITY, -INFINITY, 1e-40f};
    memcpy(x, special, sizeof special);
    for (int w = 0; w < 2; w++) {
        DType dt = w ? DT_F16 : DT_BF16;
        LibKernel k = {.entry = LK_CAST, .n_operands = 2, .dt = {DT_F32, dt}};
        snprintf(k.name, sizeof k.name, "yl_cast_f32_%s", w ? "f16" : "bf16");
        CuFunction f = load(&v, &k);
        CuDevicePtr src, dst;
        cr_assert(CUDA_CALL(&v.d.L, cuMemAlloc, (&src, sizeof(float) * N), "allocating", err, sizeof err), "%s", err);
        cr_assert(CUDA_CALL(&v.d.L, cuMemAlloc, (&dst, 2 * N), "allocating", err, sizeof err), "%s", err);
        cr_assert(cuda_copy_to_device(&v.d, src, x, sizeof(float) * N, "uploading", err, sizeof err), "%s", err);
        YlArgs a;
        memset(&a, 0, sizeof a);
        a.t[0] = (void *)(uintptr_t)src, a.t[1] = (void *)(uintptr_t)dst, a.total = N;
        void *params[] = {&a};
        cr_assert(CUDA_CALL(&v.d.L, cuLaunchKernel, (f, lib_launch_grid(&a, v.d.sm_count), 1, 1, LIB_BLOCK, 1, 1, 0, v.d.main, params, NULL), "launching", err, sizeof err), "%s", err);
        uint16_t *got = malloc(2 * N), *want = malloc(2 * N);
        cr_assert(CUDA_CALL(&v.d.L, cuStreamSynchronize, (v.d.main), "running", err, sizeof err), "%s", err);
        cr_assert(cuda_copy_to_host(&v.d, got, dst, 2 * N, "downloading", err, sizeof err), "%s", err);
        cuda_f32_to_storage(dt, x, want, N);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += isnan(x[i]) ? (got[i] & 0x7fff) <= (w ? 0x7c00 : 0x7f80) : got[i] != want[i];
        cr_expect_eq(bad, 0, "%s: %d of %d conversions differ from the host's", k.name, bad, N);
        free(got), free(want);
        (void)v.d.L.cuMemFree(src), (void)v.d.L.cuMemFree(dst);
    }
    free(x);
    dev_close(&v);
}

/* ---- attention through cuBLASLt (runtime/cuda/cuda_attention.h) on a GPU ---- */

/* Kernel e around attention's products with operand types kt, compiled once per
 * device: a module this Dev already loaded under the kernel's name serves again. */
static CuFunction load_att_gemm(Dev *v, LibEntry e, const DType kt[2]) {
    LibKernel k = {.entry = e, .n_operands = 2, .dt = {kt[0], kt[1]}};
    snprintf(k.name, sizeof k.name, "yl_agc_%d_%d_%d", (int)e, (int)kt[0], (int)kt[1]);
    CuFunction f;
    for (int i = 0; i < v->n_mod; i++)
        if (v->d.L.cuModuleGetFunction(&f, v->mod[i], k.name) == 0) return f;
    cr_assert_lt(v->n_mod, (int)(sizeof v->mod / sizeof v->mod[0]), "%s: no module slot left", k.name);
    return load(v, &k);
}

/* Stored index of element (ch, p) of image im: NCHW or channels last, images bs apart. */
static int64_t att_stored(bool cl, int64_t ch, int64_t p, int64_t channels, int64_t plane, int64_t im, int64_t bs) {
    return im * bs + (cl ? p * channels + ch : ch * plane + p);
}

/* Attention op o of lib_attention_graph through cuBLASLt and the three kernels around its
 * products (cuda_attention_run on the device's main stream, v->blas made by the caller),
 * every operand in storage type dt, `gap` elements between images, every operand NCHW or
 * (cl) channels last; the reference (packed NCHW) runs on the same stored values. Outputs
 * start filled with 0x5a, so every element must be written (attention_bwd's d_qkv v slots:
 * d_v's copy, then the accumulated product), gaps must keep their bytes and inputs stay
 * unchanged. Returns the worst |got - ref| relative to each output's largest |ref|. */
static double check_attention_cublaslt(Dev *v, const Graph *g, int o, DType dt, int64_t gap, bool cl, uint64_t *seed) {
    const Op *op = &g->ops[o];
    const int n = op->n_in + op->n_out;
    const size_t es = esize(dt);
    const CudaLibs *L = &v->d.L;
    char err[1024], what[160];
    snprintf(what, sizeof what, "op %d %s (%s, gap %lld, %s)", o, op_def(op->kind)->name, dt == DT_F32 ? "fp32" : dt == DT_BF16 ? "bf16" : "fp16", (long long)gap,
             cl ? "channels last" : "NCHW");
    Views views;
    cr_assert(views_identity(g, g->arena, &views, err, sizeof err), "%s", err);
    YlArgs la = lib_launch_args(g, &views, op);
    void **ref = calloc((size_t)g->n_tensors, sizeof *ref);
    CuDevicePtr *ptr = calloc((size_t)g->n_tensors, sizeof *ptr);
    cr_assert(ref && ptr);
    DType dts[LIB_MAX_OPERANDS];
    CuDevicePtr dev[LIB_MAX_OPERANDS] = {0};
    unsigned char *stage[LIB_MAX_OPERANDS] = {0};
    int64_t span[LIB_MAX_OPERANDS], per[LIB_MAX_OPERANDS], chans[LIB_MAX_OPERANDS], plane[LIB_MAX_OPERANDS];
    const int64_t nimg = g->tensors[op->in[0]].shape.d[0];
    for (int i = 0; i < n; i++) {
        const int t = lib_operand_tensor(op, i);
        const Shape *s = &g->tensors[t].shape;
        dts[i] = dt;
        per[i] = shape_numel(s) / nimg, chans[i] = s->d[1], plane[i] = s->d[2] * s->d[3];
        *lib_operand_bs(&la, i) = per[i] + gap;
        span[i] = (nimg - 1) * (per[i] + gap) + per[i];
        ref[t] = calloc((size_t)shape_numel(s) + 1, sizeof(float));
        stage[i] = malloc((size_t)span[i] * es);
        cr_assert(ref[t] && stage[i]);
        memset(stage[i], 0x5a, (size_t)span[i] * es);
        float *x = ref[t];
        for (int64_t im = 0; i < op->n_in && im < nimg; im++)
            for (int64_t ch = 0; ch < chans[i]; ch++)
                for (int64_t p = 0; p < plane[i]; p++) {
                    /* the reference reads the value as stored */
                    float *r = &x[im * per[i] + ch * plane[i] + p];
                    unsigned char *at = stage[i] + (size_t)att_stored(cl, ch, p, chans[i], plane[i], im, per[i] + gap) * es;
                    *r = (float)((double)(next(seed) >> 40) * (2.0 / 16777216.0) - 1.0);
                    cuda_f32_to_storage(dt, r, at, 1);
                    cuda_storage_to_f32(dt, at, r, 1);
                }
        cr_assert(CUDA_CALL(L, cuMemAlloc, (&dev[i], (size_t)span[i] * es), "allocating an operand", err, sizeof err), "%s: %s", what, err);
        cr_assert(cuda_copy_to_device(&v->d, dev[i], stage[i], (size_t)span[i] * es, "uploading an operand", err, sizeof err), "%s: %s", what, err);
        ptr[t] = dev[i];
    }
    la.cl = cl ? (1 << n) - 1 : 0;
    cr_assert(ref_kernel(op->kind)(g, op, ref, err, sizeof err), "%s: %s", what, err);

    CudaAttOp a;
    memset(&a, 0, sizeof a);
    cr_assert(attention_gemm_build(&a.ag, g, op, &la, dts, err, sizeof err), "%s: %s", what, err);
    const LibEntry ent[3] = {LK_ATT_PARTIALS, LK_ATT_ROWS, LK_ATT_VCOPY};
    for (int e = 0; e < 3; e++) {
        DType kt[2];
        lib_att_gemm_types(op->kind, dts, ent[e], kt);
        a.fn[e] = load_att_gemm(v, ent[e], kt);
    }
    CuDevicePtr scratch = 0, ws = 0;
    cr_assert_gt(a.ag.scratch_bytes, 0, "%s", what);
    cr_assert(CUDA_CALL(L, cuMemAlloc, (&scratch, (size_t)a.ag.scratch_bytes), "allocating attention's scratch", err, sizeof err), "%s: %s", what, err);
    /* NaN in every type: a scratch element read before the work list writes it shows in the outputs */
    cr_assert(CUDA_CALL(L, cuMemsetD8Async, (scratch, 0xff, (size_t)a.ag.scratch_bytes, v->d.main), "filling the scratch", err, sizeof err), "%s: %s", what, err);
    cr_assert(CUDA_CALL(L, cuMemAlloc, (&ws, (size_t)CUBLAS_GEMM_WORKSPACE), "allocating the cuBLASLt workspace", err, sizeof err), "%s: %s", what, err);
    cr_assert(cuda_attention_prepare(&a, L, v->blas, op, ptr, scratch, err, sizeof err), "%s: %s", what, err);
    cr_assert(cuda_attention_run(&a, L, v->blas, ws, v->d.sm_count, v->d.main, err, sizeof err), "%s: %s", what, err);
    cr_assert(CUDA_CALL(L, cuStreamSynchronize, (v->d.main), "running attention through cuBLASLt", err, sizeof err), "%s: %s", what, err);

    double worst = 0;
    for (int i = 0; i < n; i++) {
        unsigned char *got = malloc((size_t)span[i] * es);
        cr_assert_not_null(got);
        cr_assert(cuda_copy_to_host(&v->d, got, dev[i], (size_t)span[i] * es, "downloading an operand", err, sizeof err), "%s: %s", what, err);
        if (i < op->n_in) {
            cr_expect(memcmp(got, stage[i], (size_t)span[i] * es) == 0, "%s: input %d changed", what, i);
            free(got);
            continue;
        }
        const float *want = ref[lib_operand_tensor(op, i)];
        double mx = 0;
        for (int64_t e = 0; e < nimg * per[i]; e++) mx = fmax(mx, fabs((double)want[e]));
        double w = 0;
        int64_t gap_changed = 0;
        for (int64_t im = 0; im < nimg; im++) {
            for (int64_t ch = 0; ch < chans[i]; ch++)
                for (int64_t p = 0; p < plane[i]; p++) {
                    float gv;
                    cuda_storage_to_f32(dt, got + (size_t)att_stored(cl, ch, p, chans[i], plane[i], im, per[i] + gap) * es, &gv, 1);
                    const double d = isfinite(gv) ? fabs((double)gv - want[im * per[i] + ch * plane[i] + p]) / fmax(mx, 1e-30) : INFINITY;
                    w = fmax(w, d);
                }
            for (int64_t e = per[i]; im + 1 < nimg && e < per[i] + gap; e++)
                for (size_t b = 0; b < es; b++) gap_changed += got[(size_t)(im * (per[i] + gap) + e) * es + b] != 0x5a;
        }
        cr_expect_eq(gap_changed, 0, "%s output %d: %lld bytes between the images changed", what, i - op->n_in, (long long)gap_changed);
        cr_log_info("%s output %d: worst error %.3g of the largest (%.3g)", what, i - op->n_in, w, mx);
        worst = fmax(worst, w);
        free(got);
    }
    cuda_attention_free(&a, L);
    (void)L->cuMemFree(ws), (void)L->cuMemFree(scratch);
    for (int i = 0; i < n; i++) (void)L->cuMemFree(dev[i]), free(stage[i]);
    for (int t = 0; t < g->n_tensors; t++) free(ref[t]);
    free(ref), free(ptr);
    return worst;
}

/* Every op of lib_attention_graph through cuBLASLt in storage type dt, packed and 7 apart,
 * NCHW and channels last: each within tol of its output's largest reference value. */
static void each_attention_cublaslt(DType dt, double tol) {
    Dev v;
    dev_open(&v);
    const char *tag = dt == DT_F32 ? "fp32" : dt == DT_BF16 ? "bf16" : "fp16";
    const CublasStatus st = v.d.L.cublasLtCreate(&v.blas);
    cr_assert_eq(st, 0, "cublasLtCreate failed (cublasStatus %d) on %s", st, v.d.name);
    Arena ar;
    Graph g;
    lib_attention_graph(&g, &ar);
    uint64_t seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)dt;
    double worst = 0;
    long long elements = 0;
    for (int o = 0; o < g.n_ops; o++)
        for (int run = 0; run < 4; run++) {
            const int64_t gap = run & 1 ? 7 : 0;
            const bool cl = run >= 2;
            const double w = check_attention_cublaslt(&v, &g, o, dt, gap, cl, &seed);
            cr_expect_leq(w, tol, "op %d %s (%s, gap %lld, %s): worst error %.3g of the largest value (tolerance %.3g)", o, op_def(g.ops[o].kind)->name, tag,
                          (long long)gap, cl ? "channels last" : "NCHW", w, tol);
            worst = fmax(worst, w);
            for (int i = 0; i < g.ops[o].n_out; i++) elements += shape_numel(&g.tensors[g.ops[o].out[i]].shape);
        }
    cr_log_info("attention through cuBLASLt on %s: worst error %.3g of the largest over %lld elements", v.d.name, worst, elements);
    printf("lib_kernels attention_cublaslt %s: worst error %.3g of the largest over %lld elements\n", tag, worst, elements);
    cr_assert_eq(v.d.L.cublasLtDestroy(v.blas), 0, "cublasLtDestroy");
    v.blas = NULL;
    arena_free(&ar);
    dev_close(&v);
}

/* fp32: cuBLAS sums in another order than the host (never TF32); 16-bit: P and dS are
 * rounded to the storage type before their products, as on the host (test_attention_gemm.c). */
Test(lib_kernels, attention_through_cublaslt_matches_the_reference_fp32) { each_attention_cublaslt(DT_F32, 2e-5); }
Test(lib_kernels, attention_through_cublaslt_matches_the_reference_bf16) { each_attention_cublaslt(DT_BF16, 1.5e-2); }
Test(lib_kernels, attention_through_cublaslt_matches_the_reference_fp16) { each_attention_cublaslt(DT_F16, 3e-3); }

/* The library kernels index within an image in 32 bits (templates/cuda/lib/common.cuh):
 * an image of 2^32 elements is refused by name before any source is rendered, one
 * element fewer is taken. */
Test(lib_kernels, images_of_2_to_the_32_elements_are_refused) {
    for (int big = 0; big < 2; big++) {
        Arena ar;
        Graph g;
        arena_init(&ar, 0);
        graph_init(&g, &ar);
        /* 4 x 32768 x 32768 = 2^32 elements an image, or 65535 x 65537 = 2^32 - 1 */
        int x = graph_add_input(&g, "x", big ? shape4(1, 4, 32768, 32768) : shape4(1, 1, 65535, 65537), DT_F32);
        OpAttrs mp = {.kernel = {1, 1}, .stride = {1, 1}, .pad = {0, 0, 0, 0}, .dilation = {1, 1}};
        lib_graph_op(&g, OP_MAXPOOL2D, &x, 1, &mp);
        KLaunch ln = {.kernel = -1, .op_lo = 0, .op_hi = 0};
        KProgram kp = {.launches = &ln, .n_launches = 1};
        LibProgram lp;
        char err[256] = "";
        const bool ok = lib_program_build(&g, PREC_FP32, &kp, &lp, err, sizeof err);
        if (big) {
            cr_expect(!ok, "an image of 2^32 elements is refused");
            cr_expect(strstr(err, "op 0 (maxpool2d)") && strstr(err, "4294967296 elements") && strstr(err, "2^32 - 1"), "%s", err);
        } else {
            cr_expect(ok, "2^32 - 1 elements an image fit: %s", err);
            if (ok) lib_program_free(&lp);
        }
        arena_free(&ar);
    }
}
