/* compiler/main.c — the yolocc command line. Parses options, runs the
 * frontend and prints; the only place that prints errors and picks exit
 * codes (2 for bad input or usage). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/plan_read.h"
#include "inspect.h"
#include "lower.h"
#include "plan_write.h"
#include "version.h"
#include "summary.h"
#include "train_compile.h"


enum { EXIT_BAD_INPUT = 2 };

static const char USAGE[] =
    "usage: yolocc MODEL.yaml -o FILE.plan [options]   compile the training step into a plan\n"
    "       yolocc COMMAND MODEL.yaml [options]\n"
    "       yolocc inspect FILE.plan [--json]\n"
    "\n"
    "commands:\n"
    "  summary     per-row table and totals as Ultralytics prints them (--json: an object)\n"
    "  ir          the forward graph as text\n"
    "  state-dict  parameter and buffer names and shapes in state_dict order (--json)\n"
    "  inspect     what a plan file holds: model, memory, tensors, ops (--json; --memory-svg F draws the arena)\n"
    "\n"
    "options:\n"
    "  -o FILE     write the training plan to FILE (atomically)\n"
    "  --optimizer sgd|adamw   (plan; default sgd, which yolort trains as Ultralytics' optimizer=auto\n"
    "                          where auto takes SGD: runs over 10000 iterations)\n"
    "  --weight-decay X        group-1 weight decay (plan; default 0.0005), scaled by batch x accumulate / 64\n"
    "                          as Ultralytics does (accumulate = max(round(64 / batch), 1))\n"
    "  --max-boxes N           boxes per image the plan accepts (plan; default 300)\n"
    "  --box X, --cls X, --dfl X  loss gains (plan; defaults 7.5, 0.5, 1.5 as Ultralytics' box, cls, dfl)\n"
    "  --recompute none|pointwise|BYTES  pointwise (default): backward recomputes BN-apply, activations,\n"
    "                          adds and layout ops from kept conv outputs and BN statistics; none keeps\n"
    "                          them; BYTES (e.g. 400M, 2G; K/M/G = 2^10/2^20/2^30) also recomputes the\n"
    "                          cheapest conv outputs until the step arena fits\n"
    "  --target cpu|cuda       cpu (default): kernels rendered to C and built with the system compiler into the plan;\n"
    "                          cuda: kernels rendered to CUDA and compiled by NVRTC (no GPU needed)\n"
    "  --arch sm_80,sm_90      CUDA architectures (default sm_80,sm_90): a cubin each, plus PTX of the newest\n"
    "  --emit-src DIR          also write every generated kernel source into DIR\n"
    "  --fuse full|none        full (default): fusion groups (conv-BN-activation, BN-activation backward,\n"
    "                          elementwise chains, one optimizer group) whose inner tensors take no memory;\n"
    "                          none: one op per group\n"
    "  --layout nchw|nhwc      storage order of activations (default nchw); nhwc: channels last (cuDNN's\n"
    "                          fast layout), the images and conv weights enter through a layout copy\n"
    "  --precision fp32|bf16|fp16  storage precision of activations and gradients (plan; default fp32,\n"
    "                          the CPU runs fp32 plans only)\n"
    "  --scale S   model scale (n, s, m, l, x, ...); default: from the file name, else the first in 'scales'\n"
    "  --nc N      number of classes (overrides the file's nc)\n"
    "  --imgsz N   square input size (default 640)\n"
    "  --batch N   batch size of the graph (default 1)\n"
    "  --world-size W  ranks the plan trains on, each with --batch images (default 1): gradient\n"
    "                  accumulation and weight decay follow Ultralytics' total batch, batch x W\n"
    "  --json      machine-readable output\n"
    "  --version   print the version\n"
    "\n"
    "MODEL.yaml may name a scaled file that does not exist (yolov8n.yaml -> yolov8.yaml, scale n).\n";

typedef struct Options {
    const char *command, *model, *output, *svg;
    ModelOptions mo;
    int imgsz, batch, max_boxes, world_size;
    OptimKind optimizer;
    bool optimizer_given;
    double weight_decay;
    double gains[3]; /* box, cls, dfl */
    Precision precision;
    bool channels_last;
    FusePolicy fuse;
    RecomputePolicy recompute;
    int64_t recompute_budget;
    CodegenOptions cg;
    bool json;
} Options;

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "yolocc: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see yolocc --help)\n");
    return EXIT_BAD_INPUT;
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* "123", "400K", "1.5G": bytes, with K/M/G = 2^10/2^20/2^30 */
static bool parse_bytes(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0)) return false;
    double scale = 1;
    if (*end == 'K' || *end == 'k') scale = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') scale = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') scale = 1024.0 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end || v * scale > 1e15) return false;
    *out = (int64_t)(v * scale);
    return *out > 0;
}

static int parse_args(int argc, char **argv, Options *o) {
    memset(o, 0, sizeof *o);
    o->imgsz = 640;
    o->batch = 1;
    o->max_boxes = 300;
    o->weight_decay = 0.0005;
    o->gains[0] = 7.5, o->gains[1] = 0.5, o->gains[2] = 1.5;
    o->recompute = RECOMPUTE_POINTWISE;
    o->fuse = FUSE_FULL;
    o->cg.n_archs = 2;
    snprintf(o->cg.archs[0], sizeof o->cg.archs[0], "sm_80");
    snprintf(o->cg.archs[1], sizeof o->cg.archs[1], "sm_90");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--memory-svg") == 0) {
            if (i + 1 >= argc) return usage_error("%s needs a value", a);
            o->svg = argv[++i];
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--optimizer") == 0 || strcmp(a, "--weight-decay") == 0 || strcmp(a, "--max-boxes") == 0 ||
                   strcmp(a, "--precision") == 0 || strcmp(a, "--layout") == 0 || strcmp(a, "--recompute") == 0 || strcmp(a, "--fuse") == 0 || strcmp(a, "--target") == 0 ||
                   strcmp(a, "--arch") == 0 || strcmp(a, "--emit-src") == 0 || strcmp(a, "--world-size") == 0 || strcmp(a, "--box") == 0 ||
                   strcmp(a, "--cls") == 0 || strcmp(a, "--dfl") == 0) {
            if (i + 1 >= argc) return usage_error("%s needs a value", a);
            const char *val = argv[++i];
            char *end;
            if (strcmp(a, "-o") == 0) {
                o->output = val;
            } else if (strcmp(a, "--optimizer") == 0) {
                if (strcmp(val, "sgd") && strcmp(val, "SGD") && strcmp(val, "adamw") && strcmp(val, "AdamW")) return usage_error("--optimizer must be sgd or adamw, got '%s'", val);
                o->optimizer = (val[0] == 's' || val[0] == 'S') ? OPT_SGD : OPT_ADAMW;
                o->optimizer_given = true;
            } else if (strcmp(a, "--recompute") == 0) {
                if (strcmp(val, "none") == 0) o->recompute = RECOMPUTE_NONE;
                else if (strcmp(val, "pointwise") == 0) o->recompute = RECOMPUTE_POINTWISE;
                else if (!parse_bytes(val, &o->recompute_budget))
                    return usage_error("--recompute must be none, pointwise or a byte budget like 400M, got '%s'", val);
            } else if (strcmp(a, "--world-size") == 0) {
                long w;
                if (!parse_int(val, 1, 4096, &w)) return usage_error("--world-size must be an integer in [1, 4096], got '%s'", val);
                o->world_size = (int)w;
            } else if (strcmp(a, "--target") == 0) {
                if (strcmp(val, "cpu") == 0) o->cg.target = TARGET_CPU;
                else if (strcmp(val, "cuda") == 0) o->cg.target = TARGET_CUDA;
                else return usage_error("--target must be cpu or cuda, got '%s'", val);
            } else if (strcmp(a, "--arch") == 0) {
                char why[256];
                if (!codegen_parse_archs(val, &o->cg, why, sizeof why)) return usage_error("%s", why);
            } else if (strcmp(a, "--emit-src") == 0) {
                if (!*val) return usage_error("--emit-src needs a directory%s", "");
                o->cg.emit_src_dir = val;
            } else if (strcmp(a, "--fuse") == 0) {
                if (strcmp(val, "none") == 0) o->fuse = FUSE_NONE;
                else if (strcmp(val, "full") == 0) o->fuse = FUSE_FULL;
                else return usage_error("--fuse must be full or none, got '%s'", val);
            } else if (strcmp(a, "--layout") == 0) {
                if (strcmp(val, "nchw") == 0) o->channels_last = false;
                else if (strcmp(val, "nhwc") == 0) o->channels_last = true;
                else return usage_error("--layout must be nchw or nhwc, got '%s'", val);
            } else if (strcmp(a, "--precision") == 0) {
                if (strcmp(val, "fp32") == 0) o->precision = PREC_FP32;
                else if (strcmp(val, "bf16") == 0) o->precision = PREC_BF16;
                else if (strcmp(val, "fp16") == 0) o->precision = PREC_FP16;
                else return usage_error("--precision must be fp32, bf16 or fp16, got '%s'", val);
            } else if (strcmp(a, "--box") == 0 || strcmp(a, "--cls") == 0 || strcmp(a, "--dfl") == 0) {
                double *g = &o->gains[a[2] == 'b' ? 0 : a[2] == 'c' ? 1 : 2];
                *g = strtod(val, &end);
                if (end == val || *end || !(*g >= 0 && *g <= 1000)) {
                    fprintf(stderr, "yolocc: error: %s must be a number in [0, 1000], got '%s' (see yolocc --help)\n", a, val);
                    return EXIT_BAD_INPUT;
                }
            } else if (strcmp(a, "--weight-decay") == 0) {
                o->weight_decay = strtod(val, &end);
                if (end == val || *end || !(o->weight_decay >= 0 && o->weight_decay < 1)) return usage_error("--weight-decay must be a number in [0, 1), got '%s'", val);
            } else {
                if (!parse_int(val, 1, 4096, &v)) return usage_error("--max-boxes must be an integer in [1, 4096], got '%s'", val);
                o->max_boxes = (int)v;
            }
        } else if (strcmp(a, "--scale") == 0 || strcmp(a, "--nc") == 0 || strcmp(a, "--imgsz") == 0 || strcmp(a, "--batch") == 0) {
            if (i + 1 >= argc) return usage_error("%s needs a value", a);
            const char *val = argv[++i];
            if (strcmp(a, "--scale") == 0) {
                if (!*val || strlen(val) > 8) return usage_error("invalid --scale '%s'", val);
                o->mo.scale = val;
            } else if (strcmp(a, "--nc") == 0) {
                if (!parse_int(val, 1, MODEL_MAX_NC, &v)) return usage_error("--nc must be an integer in [1, 65536], got '%s'", val);
                o->mo.nc = v;
            } else if (strcmp(a, "--imgsz") == 0) {
                if (!parse_int(val, 32, 8192, &v)) return usage_error("--imgsz must be an integer in [32, 8192], got '%s'", val);
                o->imgsz = (int)v;
            } else {
                if (!parse_int(val, 1, 4096, &v)) return usage_error("--batch must be an integer in [1, 4096], got '%s'", val);
                o->batch = (int)v;
            }
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown option '%s'", a);
        } else if (!o->command) {
            o->command = a;
        } else if (!o->model) {
            o->model = a;
        } else {
            return usage_error("unexpected argument '%s'", a);
        }
    }
    if (!o->command) return usage_error("%s", "no command given");
    if (o->gains[0] == 0 && o->gains[1] == 0 && o->gains[2] == 0) return usage_error("%s", "--box, --cls and --dfl are all 0: the loss would be 0 and nothing would train");
    if (o->output && !o->model) {
        /* yolocc MODEL.yaml -o FILE.plan */
        o->model = o->command;
        o->command = "compile";
        return 0;
    }
    if (strcmp(o->command, "summary") && strcmp(o->command, "ir") && strcmp(o->command, "state-dict") && strcmp(o->command, "inspect"))
        return usage_error("unknown command '%s'", o->command);
    if (!o->model) return usage_error("%s", strcmp(o->command, "inspect") ? "no model file given" : "no plan file given");
    if (o->output) return usage_error("%s", "-o compiles a plan: yolocc MODEL.yaml -o FILE.plan");
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("yolocc %s\n", YOLOCC_VERSION);
        return 0;
    }
    Options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    if (strcmp(o.command, "inspect") == 0) return inspect_main(o.model, o.json, o.svg);
    if (o.svg) return usage_error("%s", "--memory-svg belongs to inspect: yolocc inspect FILE.plan --memory-svg OUT.svg");
    Arena arena;
    arena_init(&arena, (size_t)1 << 32);
    Diag d;
    diag_init(&d, o.model);
    ModelConfig cfg;
    Model m;
    ModelSummary s;
    rc = EXIT_BAD_INPUT;
    if (strcmp(o.command, "compile") == 0) {
        TrainOptions to = {.imgsz = o.imgsz, .batch = o.batch, .max_boxes = o.max_boxes, .optimizer = o.optimizer, .optimizer_given = o.optimizer_given, .weight_decay = o.weight_decay,
                           .gains = {o.gains[0], o.gains[1], o.gains[2]}, .precision = o.precision, .recompute = o.recompute, .fuse = o.fuse, .recompute_budget = o.recompute_budget,
                           .channels_last = o.channels_last, .world_size = o.world_size};
        to.target = o.cg.target;
        TrainCompiled tc = {0};
        CodegenResult kt = {0}, ke = {0};
        CodegenOptions cg_train = o.cg, cg_eval = o.cg;
        cg_train.tag = "train";
        cg_eval.tag = "eval";
        char err[4096];
        if (!model_cfg_load(&arena, o.model, &o.mo, &cfg, &d) || !compile_training(&arena, &cfg, &to, &tc, &d)) {
            char msg[2048];
            diag_format(&d, msg, sizeof msg);
            fprintf(stderr, "%s\n", msg);
        } else if (!codegen_build(&tc.m.g, &tc.fu, tc.mp.precision, &cg_train, &kt, err, sizeof err) ||
                   !codegen_build(&tc.ev.em.g, &tc.ev.efu, tc.ev.emp.precision, &cg_eval, &ke, err, sizeof err)) {
            fprintf(stderr, "yolocc: error: codegen (%s target): %s\n", codegen_target_name(o.cg.target), err);
            rc = 1;
        } else if (!plan_write(o.output, (PlanPart){&tc.m.g, &tc.mp, &tc.fu, tc.meta_json, kt.section, kt.section_len},
                               &(PlanPart){&tc.ev.em.g, &tc.ev.emp, &tc.ev.efu, tc.ev.meta_json, ke.section, ke.section_len}, err, sizeof err)) {
            fprintf(stderr, "yolocc: error: %s\n", err);
            rc = 1;
        } else {
            fputs(d.warnings, stderr);
            printf("%s: %s, imgsz %d, batch %d: %d tensors, %d ops, %lld parameters -> %s\n", cfg.path, cfg.name, tc.s.imgsz, o.batch, tc.m.g.n_tensors,
                   tc.m.g.n_ops, (long long)tc.s.parameters, o.output);
            printf("kernels (%s): %d training + %d validation, %d compiled, %d from the cache, %.2f s\n", codegen_target_name(o.cg.target), kt.n_kernels,
                   ke.n_kernels, kt.compiled + ke.compiled, kt.cached + ke.cached, kt.seconds + ke.seconds);
            rc = 0;
        }
        codegen_result_free(&kt);
        codegen_result_free(&ke);
        train_compiled_free(&tc);
        goto out;
    }
    if (!model_cfg_load(&arena, o.model, &o.mo, &cfg, &d) || !model_compile(&arena, &cfg, o.imgsz, o.batch, false, &m, &s, &d)) {
        char msg[2048];
        diag_format(&d, msg, sizeof msg);
        fprintf(stderr, "%s\n", msg);
        goto out;
    }
    fputs(d.warnings, stderr);
    if (strcmp(o.command, "summary") == 0) {
        if (o.json) {
            char *txt = summary_json(&m, &s);
            if (!txt) goto oom;
            puts(txt);
            free(txt);
        } else {
            summary_print_table(stdout, &m, &s);
        }
    } else if (strcmp(o.command, "ir") == 0) {
        graph_print(&m.g, stdout);
    } else if (o.json) {
        char *txt = state_dict_json(&m);
        if (!txt) goto oom;
        puts(txt);
        free(txt);
    } else {
        state_dict_print(stdout, &m);
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
    if (rc) fprintf(stderr, "yolocc: error: cannot write output\n");
    goto out;
oom:
    fprintf(stderr, "yolocc: error: out of memory\n");
    rc = 1;
out:
    arena_free(&arena);
    return rc;
}
