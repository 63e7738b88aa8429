/* tests/test_cudnn_conv_keys.c — runtime/cuda/cudnn_conv.c's keys across the models and against
 * the real cuDNN 9 without a GPU: every convolution of the corpus has one storage type, and cuDNN
 * builds every operation graph of the tiny plan and YOLOv8n up to its engine search (which needs
 * a device). The stand-in's cases are in test_cudnn_conv.c. Owns no runtime code. */
#include "../runtime/cuda/cuda_abi.h"
#include "../runtime/cuda/cudnn_conv.h"
#include "test_gpu.h"

/* ---- one type per convolution across the models ---- */

/* The convolutions of g at its precision: x, w and y of one type (a weight
 * gradient's dw excepted: fp32, staged or not). Returns how many. */
static int expect_one_type(const Graph *g, Precision prec, const char *what) {
    bool *persistent = calloc((size_t)g->n_tensors + 1, sizeof *persistent);
    memplan_mark_persistent(g, persistent);
    int want = prec == PREC_BF16 ? DNN_DATA_BFLOAT16 : DNN_DATA_HALF, convs = 0;
    char err[512], key[512];
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        if (op->kind != OP_CONV2D && op->kind != OP_CONV2D_DGRAD && op->kind != OP_CONV2D_WGRAD) continue;
        ConvKey k;
        cr_assert(conv_key_from_op(g, op, prec, persistent, NULL, &k, err, sizeof err), "%s op %d: %s", what, o, err);
        conv_key_describe(&k, key, sizeof key);
        cr_expect(k.x_type == want && k.y_type == want && k.w_type == (k.dir == CONV_WGRAD ? DNN_DATA_FLOAT : want), "%s op %d (%s): %s", what, o,
                  op->scope ? op->scope : "", key);
        convs++;
    }
    free(persistent);
    return convs;
}

/* cuDNN's engines take x, w and y of one type; the images are the input
 * that would otherwise reach the first convolution in fp32. */
Test(cudnn_conv, every_convolution_of_the_models_has_one_type_at_bf16_and_fp16) {
    const char *corpus = getenv("YOLOCC_CORPUS");
    char c[4][600];
    snprintf(c[0], sizeof c[0], "%s/yolo12.yaml --scale n", corpus ? corpus : "");
    snprintf(c[1], sizeof c[1], "%s/yolov9t.yaml", corpus ? corpus : "");
    snprintf(c[2], sizeof c[2], "%s/yolov3-tiny.yaml", corpus ? corpus : "");
    snprintf(c[3], sizeof c[3], "%s/yolov9e.yaml", corpus ? corpus : "");
    const char *models[] = {"models/tiny.yaml", "models/yolov8.yaml --scale n", "models/yolo11.yaml --scale n", "models/yolov5.yaml --scale n", c[0], c[1], c[2], c[3]};
    int checked = 0;
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        if (m >= 4 && !corpus) {
            cr_log_warn("YOLOCC_CORPUS unset: %s skipped", models[m] + 1);
            continue;
        }
        for (int q = 0; q < 2; q++) {
            char args[1024];
            snprintf(args, sizeof args, "%s --imgsz 64 --batch 1 --precision %s", models[m], q ? "fp16" : "bf16");
            Plan p;
            compile_plan(args, &p);
            int convs = expect_one_type(&p.g, p.precision, models[m]);
            cr_assert(p.eval);
            convs += expect_one_type(&p.eval->g, p.eval->precision, models[m]);
            cr_expect_gt(convs, 0);
            plan_free(&p);
            checked++;
        }
    }
    cr_log_info("%d plans checked", checked);
}

/* ---- the real cuDNN, without a GPU ---- */

/* cuDNN 9 builds and finalizes tensors, convolutions, operations, graphs
 * and heuristics without a device or a handle; only the engine configs
 * stay empty. So every key of the tiny plan, at each precision and through
 * the staged retry, must fail there and only there: any attribute cuDNN
 * refuses would be named instead. */
Test(cudnn_conv, the_real_cudnn_accepts_every_operation_graph_of_the_tiny_plan_and_yolov8n) {
    if (!tu_cuda_host_libs())
        cr_skip_test("no CUDA toolkit stub, cuDNN 9 or cuBLASLt here");
    /* as cudnn_conv_open does (no handle here): kept loaded, LSan names NVRTC's pool (tests/lsan.supp) */
    cudnn_conv_keep_nvrtc();
    CudaLibs L;
    char err[4096];
    CudaLibNames names = {.cuda = CUDA_TOOLKIT_STUB};
    cr_assert(cuda_libs_open(&L, &names, false, err, sizeof err), "%s", err);
    /* the tiny plan at each precision, and the benchmark's YOLOv8n at batch 16, in NCHW and NHWC (channels-last strides, KRSC weights) */
    const char *plans[] = {"models/tiny.yaml --imgsz 64 --batch 2 --precision fp32", "models/tiny.yaml --imgsz 64 --batch 2 --precision bf16",
                           "models/tiny.yaml --imgsz 64 --batch 2 --precision fp16", "models/yolov8.yaml --scale n --imgsz 640 --batch 16 --precision bf16",
                           "models/tiny.yaml --imgsz 64 --batch 2 --precision fp32 --layout nhwc", "models/tiny.yaml --imgsz 64 --batch 2 --precision bf16 --layout nhwc",
                           "models/yolov8.yaml --scale n --imgsz 640 --batch 16 --precision bf16 --layout nhwc"};
    for (int q = 0; q < (int)(sizeof plans / sizeof plans[0]); q++) {
        const char *what = plans[q];
        Plan p;
        compile_plan(what, &p);
        CudnnConv cc;
        memset(&cc, 0, sizeof cc);
        cc.L = &L; /* no handle: cudnnCreate needs a device */
        cr_assert_not(cudnn_conv_prepare(&cc, &p.g, &p.fusion.views, p.precision, err, sizeof err), "%s: no engine can be found without a device", what);
        int convs = 0, staged_tries = 0;
        for (int o = 0; o < p.g.n_ops; o++) {
            const Op *op = &p.g.ops[o];
            if (op->kind != OP_CONV2D && op->kind != OP_CONV2D_DGRAD && op->kind != OP_CONV2D_WGRAD) continue;
            const CuDevicePtr in[3] = {0x10000000, 0x20000000, 0x30000000};
            ConvWiden widen;
            cr_assert_not(cudnn_conv_run(&cc, op, in, 0x40000000, &widen, err, sizeof err));
            cr_expect(strncmp(err, "cuDNN 9", 7) == 0 && strstr(err, " has no deterministic") && strstr(err, "engine configs tried"), "%s op %d: %s", what, o, err);
            cr_expect(!strstr(err, "failed with"), "%s op %d: a descriptor call failed: %s", what, o, err);
            cr_expect_eq(strstr(err, " NHWC ") != NULL, strstr(what, "nhwc") != NULL, "%s op %d: the key names its layout: %s", what, o, err);
            /* channels last, a low-precision weight gradient is an activation in the compute type (its layout change widens it into the master's gradient) */
            bool stageable = op->kind == OP_CONV2D_WGRAD && p.precision != PREC_FP32 && !strstr(what, "nhwc");
            cr_expect_eq(strstr(err, "nor with dw in") != NULL, stageable, "%s op %d: the staged key is tried for low-precision weight gradients: %s", what, o, err);
            staged_tries += stageable, convs++;
        }
        cr_log_info("%s: %d convolutions built up to their engine search with cuDNN %zu (%d staged retries)", what, convs, L.cudnnGetVersion(), staged_tries);
        cr_expect_gt(convs, 0);
        cr_expect_eq(cc.n_plans, 0);
        cudnn_conv_close(&cc);
        plan_free(&p);
    }
    cuda_libs_close(&L);
}
