/* tests/test_export.c — `yolort export`: the ONNX file of the fixture models
 * read back (protobuf-c) for its structure and Ultralytics' metadata, run in
 * ONNX Runtime (tools/onnx_run.py, the venv `make ort-venv` makes) against the
 * plan's own eval-mode model on the same pixels, and its refusals. That
 * Ultralytics' predictor on these files writes the fixture's labels is
 * bench/export_parity.sh's job (it needs Ultralytics). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/export/export.h"
#include "onnx.pb-c.h" /* build/gen, from runtime/export/onnx.proto */
#include "../compiler/nvrtc_build.h"
#include "../runtime/interp.h"
#include "../runtime/plan_read.h"
#include "../runtime/weights.h"
#include "../runtime/predict/eval_model.h"
#include "../runtime/train/metrics.h"
#include "test_predict.h"

static const char *ort_python(void) { return tu_ort_python(); }
static bool have_onnxruntime(void) { return tu_python_has("onnxruntime, onnx, numpy"); }

static CliResult export_(const char *dir, const char *model, const char *extra) {
    char args[1024];
    snprintf(args, sizeof args, "export %s/m.plan --weights " FIXTURE "/%s.safetensors -o %s/m.onnx %s", dir, model, dir, extra);
    return tu_run_bin(predict_bin(), args);
}

static YoloccOnnx__ModelProto *read_model(const char *path) {
    size_t len;
    char *bytes = tu_slurp(path, &len);
    cr_assert(bytes, "%s was not written", path);
    YoloccOnnx__ModelProto *m = yolocc_onnx__model_proto__unpack(NULL, len, (const uint8_t *)bytes);
    free(bytes);
    cr_assert(m, "%s does not parse as an ONNX ModelProto", path);
    return m;
}

static int count_nodes(const YoloccOnnx__ModelProto *m, const char *type) {
    int n = 0;
    for (size_t i = 0; i < m->graph->n_node; i++) n += strcmp(m->graph->node[i]->op_type, type) == 0;
    return n;
}

static const char *meta(const YoloccOnnx__ModelProto *m, const char *key) {
    for (size_t i = 0; i < m->n_metadata_props; i++)
        if (strcmp(m->metadata_props[i]->key, key) == 0) return m->metadata_props[i]->value;
    return NULL;
}

Test(export, v8tiny_onnx_holds_the_fused_model_and_ultralytics_metadata) {
    char dir[64];
    setup_dir(dir, "v8tiny");
    CliResult r = export_(dir, "v8tiny", "");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "export success"), "%s", r.out);
    tu_free(&r);
    char path[128];
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    YoloccOnnx__ModelProto *m = read_model(path);
    cr_expect_eq(m->n_opset_import, 1);
    cr_expect_eq(m->opset_import[0]->version, 17);
    cr_expect_eq(m->ir_version, 8);
    /* the plan's eval graph, counted independently: every batch norm of v8tiny follows a conv,
     * so all fold; one Conv per conv op, one Sigmoid per SiLU plus the class scores' */
    Plan p;
    char plan[128], err[512];
    snprintf(plan, sizeof plan, "%s/m.plan", dir);
    cr_assert(plan_read(plan, &p, err, sizeof err), "%s", err);
    int n_conv = 0, n_bn = 0, n_silu = 0;
    for (int i = 0; i < p.eval->g.n_ops; i++) {
        OpKind k = p.eval->g.ops[i].kind;
        n_conv += k == OP_CONV2D, n_bn += k == OP_BATCHNORM, n_silu += k == OP_SILU;
    }
    plan_free(&p);
    cr_assert_gt(n_bn, 20);
    cr_expect_eq(count_nodes(m, "BatchNormalization"), 0);
    cr_expect_eq(count_nodes(m, "Conv"), n_conv);
    cr_expect_eq(count_nodes(m, "Sigmoid"), n_silu + 1);
    const YoloccOnnx__GraphProto *g = m->graph;
    cr_assert_eq(g->n_input, 1);
    cr_assert_eq(g->n_output, 1);
    cr_expect_str_eq(g->input[0]->name, "images");
    cr_expect_str_eq(g->output[0]->name, "output0");
    const YoloccOnnx__TensorShapeProto *in = g->input[0]->type->tensor_type->shape, *out = g->output[0]->type->tensor_type->shape;
    const int64_t want_in[4] = {1, 3, 64, 64}, want_out[3] = {1, 4 + 3, 64 + 16};
    cr_assert_eq(in->n_dim, 4);
    cr_assert_eq(out->n_dim, 3);
    for (int i = 0; i < 4; i++) cr_expect_eq(in->dim[i]->dim_value, want_in[i], "input dim %d", i);
    for (int i = 0; i < 3; i++) cr_expect_eq(out->dim[i]->dim_value, want_out[i], "output dim %d", i);
    /* folded weights keep the conv's state_dict name */
    bool named = false;
    for (size_t i = 0; i < g->n_initializer; i++) named |= strcmp(g->initializer[i]->name, "model.0.conv.weight") == 0;
    cr_expect(named);
    cr_expect_str_eq(meta(m, "names"), "{0: 'red', 1: 'green', 2: 'blue'}");
    cr_expect_str_eq(meta(m, "stride"), "16");
    cr_expect_str_eq(meta(m, "imgsz"), "[64, 64]");
    cr_expect_str_eq(meta(m, "task"), "detect");
    cr_expect_str_eq(meta(m, "batch"), "1");
    yolocc_onnx__model_proto__free_unpacked(m, NULL);
    remove_dir(dir);
}

Test(export, dynamic_batch_names_dimension_0) {
    char dir[64];
    setup_dir(dir, "v10tiny");
    CliResult r = export_(dir, "v10tiny", "--dynamic --max-det 50 --opset 19");
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    char path[128];
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    YoloccOnnx__ModelProto *m = read_model(path);
    cr_expect_eq(m->opset_import[0]->version, 19);
    cr_expect_eq(m->ir_version, 9);
    const YoloccOnnx__TensorShapeProto *in = m->graph->input[0]->type->tensor_type->shape, *out = m->graph->output[0]->type->tensor_type->shape;
    cr_expect_eq(in->dim[0]->value_case, YOLOCC_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
    cr_expect_str_eq(in->dim[0]->dim_param, "batch");
    cr_expect_eq(out->dim[1]->dim_value, 50, "max_det rows");
    cr_expect_eq(out->dim[2]->dim_value, 6);
    cr_expect_eq(count_nodes(m, "TopK"), 2, "v10Detect.postprocess: anchors, then (anchor, class) pairs");
    yolocc_onnx__model_proto__free_unpacked(m, NULL);
    remove_dir(dir);
}

/* The plan's eval-mode model (CPU, generated kernels) and ONNX Runtime on
 * DIR/m.onnx (exported from DIR/m.plan with WEIGHTS), on the same pixels of a
 * full validation batch; returns the worst difference relative to 1 + |value|. */
static double onnx_vs_plan(const char *dir, const char *weights, const char *label) {
    char plan[128], err[1024], report[256];
    snprintf(plan, sizeof plan, "%s/m.plan", dir);
    EvalModel m;
    cr_assert(eval_model_open(&m, plan, weights, false, report, sizeof report, err, sizeof err), "%s: %s", label, err);
    const int B = m.io.batch, S = m.io.imgsz, nc = m.io.nc, A = m.io.anchors;
    size_t n_px = (size_t)B * 3 * (size_t)S * (size_t)S;
    uint8_t *px = malloc(n_px);
    float *x = malloc(sizeof(float) * n_px);
    cr_assert(px && x);
    /* grey (the letterbox's 114) with noise and a lighter rectangle per image: scores spread
     * below saturation, so few are equal */
    for (size_t i = 0; i < n_px; i++) {
        size_t p = i % ((size_t)S * S), yy = p / (size_t)S, xx = p % (size_t)S, img = i / (3 * (size_t)S * S);
        bool in_box = xx > 10 + 7 * img && xx < 40 && yy > 8 && yy < 30 + 9 * img;
        px[i] = (uint8_t)(114 + (in_box ? 40 : 0) + (int)((i * 2654435761u >> 13) % 41) - 20);
        x[i] = (float)px[i] / 255.0f;
    }
    cr_assert(eval_model_run(&m, px, NULL, NULL, err, sizeof err), "%s: %s", label, err);
    char in_path[128], out_path[128], cmd[1024];
    snprintf(in_path, sizeof in_path, "%s/in.bin", dir);
    snprintf(out_path, sizeof out_path, "%s/out.bin", dir);
    FILE *f = fopen(in_path, "wb");
    cr_assert(f && fwrite(x, sizeof(float), n_px, f) == n_px && fclose(f) == 0);
    snprintf(cmd, sizeof cmd, "%s tools/onnx_run.py %s/m.onnx %s %d,3,%d,%d %s >%s/shape.txt", ort_python(), dir, in_path, B, S, S, out_path, dir);
    cr_assert_eq(system(cmd), 0, "%s: %s failed", label, cmd);
    size_t len;
    float *y = (float *)tu_slurp(out_path, &len);
    cr_assert(y);
    double worst = 0;
    if (!m.io.end2end) {
        cr_assert_eq(len, sizeof(float) * (size_t)B * (size_t)(4 + nc) * (size_t)A, "%s: ONNX output of %zu bytes", label, len);
        for (size_t i = 0; i < len / sizeof(float); i++) {
            double d = fabs((double)y[i] - m.pred[i]) / (1.0 + fabs(m.pred[i]));
            worst = d > worst ? d : worst;
        }
    } else {
        int k = A < 300 ? A : 300;
        cr_assert_eq(len, sizeof(float) * (size_t)B * (size_t)k * 6, "%s: ONNX output of %zu bytes", label, len);
        Detection *want = malloc(sizeof(Detection) * (size_t)k), *got = malloc(sizeof(Detection) * (size_t)k);
        cr_assert(want && got);
        int n_tied = 0;
        for (int b = 0; b < B; b++) {
            /* conf -1: every one of the k rows the ONNX graph selects */
            int n = e2e_image(m.pred + (size_t)b * (size_t)(4 + nc) * (size_t)A, A, nc, -1.0, k, want);
            cr_assert_eq(n, k);
            for (int i = 0; i < k; i++) {
                const float *row = y + ((size_t)b * (size_t)k + (size_t)i) * 6;
                got[i] = (Detection){row[0], row[1], row[2], row[3], row[4], (int)row[5]};
                n_tied += i > 0 && want[i].score == want[i - 1].score;
                if (i > 0) cr_expect_leq(got[i].score, got[i - 1].score, "%s: ONNX's rows are not sorted by score at %d", label, i);
            }
            /* near-equal scores may come in either order (torch.topk leaves equal ones open; the two
             * sides round differently), and which of the rows tied with the k-th make the cut is as
             * open: each of the plan's rows above the k-th score must match a row of ONNX's, the
             * closest one of the same class */
            int n_cmp = k;
            while (n_cmp > 0 && want[n_cmp - 1].score <= want[k - 1].score + 1e-5f) n_cmp--;
            if (n_cmp < k - 1) cr_log_info("%s: image %d: %d rows tie with the last one kept; %d compared", label, b, k - n_cmp, n_cmp);
            bool *used = calloc((size_t)k, sizeof *used);
            cr_assert(used);
            for (int i = 0; i < n_cmp; i++) {
                const float w[5] = {want[i].x1, want[i].y1, want[i].x2, want[i].y2, want[i].score};
                int best = -1;
                double best_d = INFINITY;
                for (int j = 0; j < k; j++) {
                    if (used[j] || got[j].cls != want[i].cls) continue;
                    const float o[5] = {got[j].x1, got[j].y1, got[j].x2, got[j].y2, got[j].score};
                    double d = 0;
                    for (int c = 0; c < 5; c++) d = fmax(d, fabs((double)o[c] - w[c]) / (1.0 + fabs(w[c])));
                    if (d < best_d) best = j, best_d = d;
                }
                if (best < 0 || best_d > 2e-5)
                    cr_log_error("%s: image %d: the plan's row %g %g %g %g %g class %d has no match in ONNX's (closest %.3g)", label, b, w[0], w[1], w[2], w[3], w[4], want[i].cls, best_d);
                if (best >= 0) used[best] = true;
                worst = fmax(worst, best_d);
            }
            free(used);
        }
        if (n_tied) cr_log_info("%s: %d of the plan's top-k rows tie with the row before", label, n_tied);
        free(want);
        free(got);
    }
    cr_log_info("%s: ONNX Runtime against the plan: worst relative difference %.3g", label, worst);
    free(y);
    free(px);
    free(x);
    eval_model_close(&m);
    return worst;
}

static void onnx_equals_the_plan(const char *model) {
    if (!have_onnxruntime()) cr_skip_test("SKIP: onnxruntime not installed (%s; make ort-venv)", ort_python());
    char dir[64], weights[128];
    setup_dir(dir, model);
    CliResult r = export_(dir, model, "--dynamic");
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    snprintf(weights, sizeof weights, FIXTURE "/%s.safetensors", model);
    cr_expect_leq(onnx_vs_plan(dir, weights, model), 2e-5, "%s: ONNX Runtime and the plan differ", model);
    remove_dir(dir);
}

/* Fresh weights (weights_init, seed 0) for DIR/m.plan's validation graph, as
 * DIR/w.safetensors, with every BN's running variance at VAR: at 1 (a fresh
 * model's) each conv-BN-SiLU shrinks its input, and deep features fade until
 * attention is uniform and the head ignores the image, which would hide a
 * wrong rule. */
static void fresh_weights(const char *dir, float var) {
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/m.plan", dir);
    Plan p;
    cr_assert(plan_read(path, &p, err, sizeof err), "%s", err);
    Interp it;
    const Graph *g = &p.eval->g;
    cr_assert(interp_init(&it, g));
    for (int i = 0; i < g->n_state; i++) cr_assert(interp_tensor(&it, g->state[i]));
    cr_assert(weights_init(g, it.buf, 0, err, sizeof err), "%s", err);
    for (int i = 0; i < g->n_state; i++) {
        const Tensor *t = &g->tensors[g->state[i]];
        size_t n = strlen(t->name), k = strlen(".running_var");
        if (n > k && strcmp(t->name + n - k, ".running_var") == 0)
            for (int64_t j = 0; j < shape_numel(&t->shape); j++) ((float *)it.buf[t->id])[j] = var;
    }
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    cr_assert(weights_save(g, it.buf, path, NULL, err, sizeof err), "%s", err);
    interp_free(&it);
    plan_free(&p);
}

/* YAML compiled into DIR/m.plan at 64 px, batch 1, 3 classes (the fast
 * yolocc when YOLOCC_FAST_BIN names one: its kernels are what the plan runs). */
static void compile_at_64(const char *dir, const char *yaml, const char *label) {
    const char *fast = getenv("YOLOCC_FAST_BIN");
    char args[1024];
    snprintf(args, sizeof args, "%s --imgsz 64 --batch 1 --nc 3 -o %s/m.plan", yaml, dir);
    CliResult r = tu_run_bin(fast ? fast : tu_bin(), args);
    cr_assert_eq(r.status, 0, "%s: %s", label, r.err);
    tu_free(&r);
}

/* DIR/m.plan with fresh weights, exported (dynamic batch) and run in ONNX
 * Runtime against the plan; the directory is removed. */
static void fresh_export_equals_the_plan(const char *dir, const char *label) {
    fresh_weights(dir, 0.25f);
    char args[512], weights[128];
    snprintf(args, sizeof args, "export %s/m.plan --weights %s/w.safetensors -o %s/m.onnx --dynamic", dir, dir, dir);
    CliResult r = tu_run_bin(predict_bin(), args);
    cr_assert_eq(r.status, 0, "%s: %s", label, r.err);
    tu_free(&r);
    snprintf(weights, sizeof weights, "%s/w.safetensors", dir);
    cr_expect_leq(onnx_vs_plan(dir, weights, label), 2e-5, "%s: ONNX Runtime and the plan differ", label);
    remove_dir(dir);
}

/* Every in-scope model of the Ultralytics corpus that has a small scale (n,
 * t, or the file's default), at 64 px with fresh weights: exported, checked
 * by onnx.checker and run in ONNX Runtime against the plan. Together they
 * use every forward op the exporter has a rule for but the transposed conv. */
Test(export, corpus_models_in_onnx_runtime_equal_the_plans_model, .timeout = 1500) {
    const char *corpus = tu_corpus();
    if (!corpus) cr_skip_test("SKIP: no corpus at ../shared/reference/ultralytics-cfg (YOLOCC_CORPUS)");
    if (!have_onnxruntime()) cr_skip_test("SKIP: onnxruntime not installed (%s; make ort-venv)", ort_python());
    /* the large fixed-size files (v9c/e/m/s, v10s..x) add no op the small ones lack */
    static const char *const MODELS[] = {"yolov3-tiny", "yolov3",      "yolov5",          "yolov5-p6",    "yolov6",       "yolov8", "yolov8-p2",  "yolov8-p6",
                                         "yolov8-ghost", "yolov8-ghost-p2", "yolov8-ghost-p6", "yolov9t",      "yolov10n",     "yolo11", "yolo12"};
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) {
        char dir[64], yaml[512];
        strcpy(dir, "/tmp/yolocc-export-XXXXXX");
        cr_assert(mkdtemp(dir));
        snprintf(yaml, sizeof yaml, "%s/%s.yaml", corpus, MODELS[i]);
        compile_at_64(dir, yaml, MODELS[i]);
        fresh_export_equals_the_plan(dir, MODELS[i]);
    }
}

Test(export, v8tiny_onnx_runtime_equals_the_plans_model, .timeout = 120) { onnx_equals_the_plan("v8tiny"); }
Test(export, v10tiny_onnx_runtime_equals_the_plans_model_and_its_topk, .timeout = 120) { onnx_equals_the_plan("v10tiny"); }

/* A CUDA plan (bf16, channels last: layout copies of the images and every
 * conv weight) exports, without a GPU, the same graph and weights as the CPU
 * plan of the model: the layout copies vanish, the state is fp32 either way. */
Test(export, a_cuda_nhwc_bf16_plan_exports_the_cpu_plans_graph, .timeout = 300) {
    char why[256];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    char cpu[64], gpu[64];
    setup_dir(cpu, "v8tiny");
    setup_dir_for(gpu, "v8tiny", "--target cuda --layout nhwc --precision bf16");
    YoloccOnnx__ModelProto *m[2];
    const char *dirs[2] = {cpu, gpu};
    for (int i = 0; i < 2; i++) {
        CliResult r = export_(dirs[i], "v8tiny", "");
        cr_assert_eq(r.status, 0, "%s", r.err);
        tu_free(&r);
        char path[128];
        snprintf(path, sizeof path, "%s/m.onnx", dirs[i]);
        m[i] = read_model(path);
    }
    const YoloccOnnx__GraphProto *a = m[0]->graph, *b = m[1]->graph;
    cr_assert_eq(a->n_node, b->n_node);
    for (size_t i = 0; i < a->n_node; i++) cr_expect_str_eq(a->node[i]->op_type, b->node[i]->op_type, "node %zu", i);
    cr_assert_eq(a->n_initializer, b->n_initializer);
    for (size_t i = 0; i < a->n_initializer; i++) {
        const YoloccOnnx__TensorProto *x = a->initializer[i], *y = b->initializer[i];
        cr_expect_str_eq(x->name, y->name);
        cr_assert_eq(x->raw_data.len, y->raw_data.len, "%s", x->name);
        cr_expect_eq(memcmp(x->raw_data.data, y->raw_data.data, x->raw_data.len), 0, "%s differs", x->name);
    }
    for (int i = 0; i < 2; i++) yolocc_onnx__model_proto__free_unpacked(m[i], NULL);
    remove_dir(cpu);
    remove_dir(gpu);
}

/* v8tiny with fresh weights and what the corpus models lack: each other
 * activation a model YAML may name (`activation:`), and a transposed conv in
 * place of the upsampling. */
Test(export, activations_and_transposed_conv_in_onnx_runtime_equal_the_plans_model, .timeout = 300) {
    if (!have_onnxruntime()) cr_skip_test("SKIP: onnxruntime not installed (%s; make ort-venv)", ort_python());
    static const struct {
        const char *activation, *upsample; /* NULL: v8tiny's */
    } VARIANTS[] = {
        {"nn.ReLU()", NULL}, {"nn.LeakyReLU(0.1)", NULL}, {"nn.Hardswish()", NULL}, {"nn.GELU()", NULL}, {"nn.Sigmoid()", NULL},
        {NULL, "[-1, 1, nn.ConvTranspose2d, [32, 2, 2]]"},
    };
    const char *upsample = "[-1, 1, nn.Upsample, [None, 2, nearest]]";
    char *yaml = tu_slurp("tests/parity/v8tiny.yaml", NULL);
    cr_assert(yaml);
    char *up = strstr(yaml, upsample);
    cr_assert(up, "v8tiny.yaml has no '%s' row", upsample);
    for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++) {
        const char *label = VARIANTS[i].activation ? VARIANTS[i].activation : "nn.ConvTranspose2d";
        char dir[64], path[128];
        strcpy(dir, "/tmp/yolocc-export-XXXXXX");
        cr_assert(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/variant.yaml", dir);
        FILE *f = fopen(path, "w");
        cr_assert(f);
        if (VARIANTS[i].activation) fprintf(f, "activation: %s\n", VARIANTS[i].activation);
        fprintf(f, "%.*s%s%s", (int)(up - yaml), yaml, VARIANTS[i].upsample ? VARIANTS[i].upsample : upsample, up + strlen(upsample));
        cr_assert_eq(fclose(f), 0);
        compile_at_64(dir, path, label);
        fresh_export_equals_the_plan(dir, label);
    }
    free(yaml);
}

Test(export, refuses_bad_arguments_without_writing_a_file) {
    char dir[64], path[128];
    setup_dir(dir, "v8tiny");
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    struct {
        const char *extra, *msg;
        int rc;
    } cases[] = {
        {"--format engine", "format 'engine' is not supported", 2},
        {"--opset 9", "--opset 9 is outside 14..21", 2},
        {"--batch 0", "--batch must be an integer", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CliResult r = export_(dir, "v8tiny", cases[i].extra);
        cr_expect_eq(r.status, cases[i].rc, "%s: rc %d", cases[i].extra, r.status);
        cr_expect(strstr(r.err, cases[i].msg), "%s: %s", cases[i].extra, r.err);
        cr_expect_eq(tu_lines(r.err), 1, "one line: %s", r.err);
        cr_expect_neq(access(path, F_OK), 0, "%s left a file", cases[i].extra);
        tu_free(&r);
    }
    /* weights of another model: every tensor must come from the file */
    char args[512];
    snprintf(args, sizeof args, "export %s/m.plan --weights " FIXTURE "/v10tiny.safetensors -o %s", dir, path);
    CliResult r = tu_run_bin(predict_bin(), args);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "every parameter and buffer"), "%s", r.err);
    cr_expect_neq(access(path, F_OK), 0);
    tu_free(&r);
    /* an unwritable place: the error names it, nothing is left */
    snprintf(args, sizeof args, "export %s/m.plan --weights " FIXTURE "/v8tiny.safetensors -o %s/no/such/dir/m.onnx", dir, dir);
    r = tu_run_bin(predict_bin(), args);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "no/such/dir"), "%s", r.err);
    tu_free(&r);
    remove_dir(dir);
}

Test(export, names_literal_escapes_quotes_and_backslashes) {
    char *names[3] = {"plain", "it's", "back\\slash"};
    char *s = export_names_literal(names, 3);
    cr_assert(s);
    cr_expect_str_eq(s, "{0: 'plain', 1: 'it\\'s', 2: 'back\\\\slash'}");
    /* Python's own reader (Ultralytics' AutoBackend uses ast.literal_eval) gets the names back */
    char path[] = "/tmp/yolocc-names-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0 && write(fd, s, strlen(s)) == (ssize_t)strlen(s) && close(fd) == 0);
    char args[256];
    snprintf(args, sizeof args, "-c 'import ast,sys; d = ast.literal_eval(open(sys.argv[1]).read()); print(d[0]); print(d[1]); print(d[2])' %s", path);
    CliResult r = tu_run_bin("python3", args);
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "plain\nit's\nback\\slash\n");
    tu_free(&r);
    unlink(path);
    free(s);
}
