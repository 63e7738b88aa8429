/* runtime/yolort_main.c — the yolort command line: `yolort train FILE.plan
 * --synthetic` runs training steps of a plan on the CPU and prints the losses.
 * The only place here that prints errors and picks exit codes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "argv_option.h"
#include "data/datagen.h"
#include "device_select.h"
#include "dist/dp_train.h"
#include "dist/launch.h"
#include "train_step_cuda.h"
#include "synthetic.h"
#include "target.h"
#include "export/export.h"
#include "predict/predict.h"
#include "predict/val.h"
#include "train/bench_step.h"
#include "train/trainer.h"
#include "train_step.h"
#include "weights.h"

static const char USAGE[] =
    "usage: yolort train FILE.plan --data DATA.yaml [options]   train on a dataset (Ultralytics layout)\n"
    "       yolort train FILE.plan --synthetic [--steps N ...]   training steps on one generated batch\n"
    "       yolort datagen DIR [--images N --size S --classes C --seed X --val-fraction F]\n"
    "       yolort predict FILE.plan --weights W.safetensors --source IMAGE|VIDEO|DIR|GLOB|LIST.txt [options]   detect objects\n"
    "       yolort val FILE.plan --weights W.safetensors --data DATA.yaml [options]   mAP on the val split\n"
    "       yolort export FILE.plan --weights W.safetensors [--format onnx] [-o FILE.onnx] [options]   deployable model\n"
    "       yolort bench FILE.plan [--steps N (20)] [--warmup W (3)] [--seed S] [--max-seconds T] [--profile ROWS] [--json]\n"
    "\n"
    "Runs a yolocc training plan on the CPU. The plan fixes batch, image size, optimizer and weight\n"
    "decay; recompile it (yolocc MODEL.yaml --batch B --imgsz S ...) to change them.\n"
    "\n"
    "train options (Ultralytics names and defaults):\n"
    "  --data FILE         dataset YAML (path, train, val, names)\n"
    "  --epochs N (100)  --patience N (100)  --close-mosaic N (10)  --freeze N (0)  --seed N (0)\n"
    "  --lr0 X (SGD 0.01, AdamW round(0.002*5/(4+nc), 6))  --lrf X (0.01)  --momentum X (SGD 0.937, AdamW 0.9)\n"
    "  --warmup-epochs X (3)  --warmup-momentum X (0.8)  --warmup-bias-lr X (SGD 0.1, AdamW 0)  --cos-lr\n"
    "  --weight-decay X    must equal the plan's (it is compiled in)\n"
    "  --box X, --cls X, --dfl X  loss gains: must equal the plan's (compiled in: yolocc --box/--cls/--dfl)\n"
    "  --batch N           must equal the plan's batch\n"
    "  --workers N (2)     data-loading threads  --cache ram|disk|none (none): decoded images kept in memory,\n"
    "                      or written once as IMAGE.npy beside each image (read instead of the image whenever there)\n"
    "  --hsv-h X --hsv-s X --hsv-v X --degrees X --translate X --scale X --shear X --perspective X\n"
    "  --flipud X --fliplr X --mosaic X --mixup X   augmentation (Ultralytics defaults)\n"
    "  --project DIR (runs/detect)  --name NAME (train)  --exist-ok   run directory PROJECT/NAME[N]\n"
    "  --resume RUN|STATE  continue a run bit for bit from RUN/weights/last.state\n"
    "  --weights FILE      initial weights (.safetensors, PyTorch state_dict names)\n"
    "  --save-period N     also keep weights/epochN.safetensors every N epochs\n"
    "  --stop-after N      end this process after N epochs (an interruption; continue with --resume)\n"
    "  --time H            train for H hours: the epochs follow the mean epoch time (overrides --epochs)\n"
    "  --fraction F (1)    train on the first F of the (sorted) training images\n"
    "  --single-cls        every label is one class \"item\" (a plan compiled with --nc 1)\n"
    "  --no-val            validate only when needed (last epoch, early stopping)\n"
    "  --no-plots          no results.svg, labels.svg, train_batch*.jpg or final validation plots\n"
    "  --reference         run the reference kernels (the test oracle; slow)\n"
    "  --ranks N (1)       data-parallel ranks on this machine, started by yolort (a plan for --world-size N;\n"
    "                      a CUDA plan's rank r on device r: choose them with CUDA_VISIBLE_DEVICES or --device)\n"
    "  --device D          Ultralytics' device=: cpu (a CPU plan), 0, cuda:0, 0,1 (W devices: W ranks, as --ranks W)\n"
    "                      or -1 (the most idle GPU by NVML; -1,-1 two); sets CUDA_VISIBLE_DEVICES. Also for val,\n"
    "                      predict and bench, which run on the first device named\n"
    "\n"
    "synthetic options: --steps N (10) --weights FILE --save FILE --lr0 X --momentum X --seed N --json --reference\n"
    "                   --accumulate N (1): sum the gradients of N micro-batches per step\n"
    "\n"
    "predict options (Ultralytics names and defaults): --conf X (0.25) --iou X (0.7) --max-det N (300)\n"
    "  --project DIR (runs/detect) --name NAME (predict) --exist-ok   run directory PROJECT/NAME[N]\n"
    "  --classes 0,2 (only these classes) --agnostic-nms (suppress across classes)\n"
    "  --save-txt (labels/STEM.txt: cls cx cy w h, normalised) --save-conf (and the score) --no-save (no annotated images)\n"
    "  --save-crop (each box, grown by 2% and 10 px, as crops/CLASS/STEM.jpg, STEM2.jpg, ...)\n"
    "  --vid-stride N (1): every Nth frame of a video  --save-frames (each annotated frame also as STEM_frames/STEM_F.jpg)\n"
    "  --batch N (1): pictures per inference  --no-rect (letterbox every picture to the square image size)\n"
    "  As `yolo predict` does with a .pt model, a batch of pictures of one size is letterboxed to the smallest\n"
    "  stride multiples that hold it (rect); the plan's validation graph is rebuilt for that shape and batch\n"
    "  (a CUDA plan's on the device, on its own kernels, at the shape's first batch). Class names come from the\n"
    "  weights file (yolort train writes them), else class0, class1, ...\n"
    "\n"
    "val options: --conf X (0.001) --iou X (0.7) --max-det N (300)  --workers N (2)  --project DIR (runs/detect) --name NAME (val) --exist-ok   run directory PROJECT/NAME[N]\n"
    "  --no-plots (no run directory). The run directory gets Ultralytics' validation plots, as SVG:\n"
    "  confusion_matrix[_normalized].svg, confusion_matrix.csv, BoxPR_curve.svg, BoxF1/P/R_curve.svg, and\n"
    "  val_batch0..2_labels.jpg / _pred.jpg (the first 3 batches' labels and predictions above 0.25)\n"
    "  --save-txt (labels/STEM.txt of every detection, conf 0.001 up) --save-conf (and the score)\n"
    "  --save-json (predictions.json, COCO results format: image_id, category_id, bbox x y w h, score)\n"
    "  --split val|test|train (val): the data YAML's list to validate  --single-cls (labels as one class; a plan for nc 1)\n"
    "  --batch N (16)  --no-rect: as `yolo val` runs a .pt model, images go in order of aspect ratio in rect\n"
    "  batches (each the smallest stride multiples, plus half a stride, that hold its images); the validation\n"
    "  graph is rebuilt per batch shape (a CUDA plan's too: every shape opened on the device before the first batch).\n"
    "  (yolort train draws them into its run directory at the final evaluation).\n"
    "\n"
    "export options (Ultralytics names and defaults): --format onnx  --batch N (1)  --dynamic (any batch)\n"
    "  --opset N (17, 14..21)  --max-det N (300; v10 heads: detections kept)  -o FILE (W with .onnx)\n"
    "  The eval-mode model with its batch norms folded into the convs, weights inside, input 'images'\n"
    "  [N, 3, S, S] RGB 0..1 at the plan's image size, output 'output0' as Ultralytics' export writes it\n"
    "  ([N, 4 + nc, anchors] xywh + scores, or [N, max_det, 6] for v10 heads) and its metadata.\n"
    "\n"
    "bench: SGD steps (lr 0.01, momentum 0.937) on one synthetic batch from fresh weights; prints the median\n"
    "step time, images/s (batch / median) and peak memory: for a CUDA plan the device's used-memory increase\n"
    "and the bytes the plan allocated, each step timed on the host up to a full device synchronisation; for a\n"
    "CPU plan the process's peak resident set. --max-seconds T: stop timing once the timed steps took T\n"
    "seconds (at least one step; \"steps\" says how many ran). --json: one JSON object. --profile ROWS: one\n"
    "more step with every launch timed (CUDA: eagerly, by events; CPU: by the host clock); its time by\n"
    "route and by op (the heaviest ROWS) goes to stderr.\n"
    "\n"
    "Data parallelism: `yolort train ... --ranks W` starts W ranks on this machine itself (serving them\n"
    "a store as torchrun's agent does; a CUDA plan's rank r takes device r); or under `mpirun -np W`\n"
    "(Open MPI) or `torchrun --nproc-per-node W --no-python` (PyTorch's\n"
    "launcher; the ranks meet through its agent's store at MASTER_ADDR:MASTER_PORT, no MPI needed) each\n"
    "rank trains on its share of the batches and gradients are summed over ranks before each update\n"
    "(Ultralytics DDP semantics: NCCL on the GPU; MPI, or through rank 0 and the store, on the CPU); rank 0 alone prints\n"
    "and writes. `yolort train --data` on W ranks needs a plan compiled for them (yolocc ... --batch B\n"
    "--world-size W: B images a rank); rank 0 validates and decides when to stop.\n"
    "YOLOCC_COLLECTIVE_TIMEOUT_S (600) ends a job whose collective hangs; YOLOCC_BUCKET_CAP_MB (25).\n";

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "yolort: error: ");
    fprintf(stderr, msg, arg);
    fprintf(stderr, " (see yolort --help)\n");
    return 2;
}

static bool number(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

/* The synthetic pool: batch x units generated samples; data unit u (rank x
 * accumulate + micro-batch) takes every units-th one (dp_sample_index). */
typedef struct SynthPool {
    int units;
    float *images, *boxes;
    int64_t *counts;
} SynthPool;

static bool synth_pool_make(SynthPool *p, const TrainStep *ts, uint64_t seed, int units) {
    size_t n = (size_t)ts->batch * (size_t)units, img = 3 * (size_t)ts->imgsz * (size_t)ts->imgsz, box = (size_t)ts->max_boxes * 5;
    *p = (SynthPool){units, malloc(n * img * sizeof(float)), malloc(n * box * sizeof(float)), malloc(n * sizeof(int64_t))};
    if (!p->images || !p->boxes || !p->counts) return false;
    synthetic_batch(seed, (int)n, ts->imgsz, ts->nc, ts->max_boxes, p->images, p->boxes, p->counts);
    return true;
}

static void synth_pool_bind(const SynthPool *p, TrainStep *ts, int unit) {
    size_t img = 3 * (size_t)ts->imgsz * (size_t)ts->imgsz, box = (size_t)ts->max_boxes * 5;
    for (int s = 0; s < ts->batch; s++) {
        size_t j = (size_t)dp_sample_index(s, unit, p->units);
        memcpy(train_step_images(ts) + (size_t)s * img, p->images + j * img, img * sizeof(float));
        memcpy(train_step_boxes(ts) + (size_t)s * box, p->boxes + j * box, box * sizeof(float));
        train_step_counts(ts)[s] = p->counts[j];
    }
}

static void synth_pool_free(SynthPool *p) {
    free(p->images);
    free(p->boxes);
    free(p->counts);
}

/* `yolort train PLAN --synthetic`: steps on one generated batch, losses
 * printed. Under mpirun or torchrun (more than one rank, runtime/dist) every rank takes
 * its share of the generated samples and gradients are summed over ranks
 * before each update; rank 0 alone prints and saves. --accumulate N sums N
 * micro-batches per update in one process: the same update as N ranks. */
static int synthetic_main(int argc, char **argv) {
    const char *plan_path = argv[2], *weights = NULL, *save = NULL;
    bool synthetic = false, json = false, reference = false;
    double steps = 10, lr0 = -1, momentum = 0.937, seed = 0, accumulate = 1;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--synthetic") == 0) synthetic = true;
        else if (strcmp(a, "--json") == 0) json = true;
        else if (strcmp(a, "--reference") == 0) reference = true;
        else if (i + 1 >= argc) return usage_error("unknown option or missing value: '%s'", a);
        else if (strcmp(a, "--weights") == 0) weights = argv[++i];
        else if (strcmp(a, "--save") == 0) save = argv[++i];
        else if (strcmp(a, "--steps") == 0) {
            if (!number(argv[++i], 1, 1e9, &steps) || steps != (long)steps) return usage_error("--steps must be a positive integer, got '%s'", argv[i]);
        } else if (strcmp(a, "--lr0") == 0) {
            if (!number(argv[++i], 0, 10, &lr0)) return usage_error("--lr0 must be a number in [0, 10], got '%s'", argv[i]);
        } else if (strcmp(a, "--momentum") == 0) {
            if (!number(argv[++i], 0, 1, &momentum)) return usage_error("--momentum must be a number in [0, 1], got '%s'", argv[i]);
        } else if (strcmp(a, "--seed") == 0) {
            if (!number(argv[++i], 0, 1e15, &seed) || seed != (long long)seed) return usage_error("--seed must be a non-negative integer, got '%s'", argv[i]);
        } else if (strcmp(a, "--accumulate") == 0) {
            if (!number(argv[++i], 1, 1024, &accumulate) || accumulate != (int)accumulate) return usage_error("--accumulate must be an integer in [1, 1024], got '%s'", argv[i]);
        } else return usage_error("unknown option '%s'", a);
    }
    if (!synthetic) return usage_error("%s", "no data: pass --data DATA.yaml or --synthetic");
    Plan plan;
    TrainStep ts = {0};
    DataParallel dp;
    SynthPool pool = {0};
    char err[1024];
    int rc = 2;
    /* the plan first: a CUDA plan's ranks may meet through NCCL alone (torchrun) */
    if (!plan_read(plan_path, &plan, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        plan_free(&plan);
        return 2;
    }
    if (!dp_init(&dp, plan_targets_cuda(&plan), err, sizeof err)) {
        fprintf(stderr, "yolort: error: %s\n", err);
        plan_free(&plan);
        dp_finalize(&dp, 2);
        return 2;
    }
    const int rank = dp.comm.ranks.rank, world = dp.comm.ranks.world;
    const bool root = dp_is_root(&dp);
    if (!train_step_init(&ts, &plan, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", plan_path, err);
        goto out;
    }
    train_step_set_fast(&ts, !reference);
    const char *opt = cJSON_GetStringValue(cJSON_GetObjectItem(plan.meta, "optimizer"));
    if (lr0 < 0) lr0 = opt && strcmp(opt, "AdamW") == 0 ? 0.001 : 0.01;
    if (weights) {
        WeightsLoadReport rep;
        if (!weights_load(&plan.g, ts.it.buf, weights, NULL, &rep, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            goto out;
        }
        char line[1024];
        weights_report_format(&rep, line, sizeof line);
        if (root) fprintf(stderr, "%s\n", line);
    } else if (!weights_init(&plan.g, ts.it.buf, (uint64_t)seed, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        goto out;
    }
    if (!dp_attach(&dp, &ts, err, sizeof err)) {
        fprintf(stderr, "yolort: error: %s\n", err);
        goto out;
    }
    train_step_host_changed(&ts); /* weights (and rank 0's broadcast) go up before the first step */
    const int acc = (int)accumulate, units = world * acc;
    if (units == 1) {
        synthetic_batch((uint64_t)seed, ts.batch, ts.imgsz, ts.nc, ts.max_boxes, train_step_images(&ts), train_step_boxes(&ts), train_step_counts(&ts));
    } else if (!synth_pool_make(&pool, &ts, (uint64_t)seed, units)) {
        fprintf(stderr, "yolort: error: out of memory for %d x %d synthetic samples\n", units, ts.batch);
        goto out;
    }
    double lr[3] = {lr0, lr0, lr0};
    rc = 1;
    for (long s = 1; s <= (long)steps; s++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        StepResult r;
        if (units == 1) {
            if (!train_step_run(&ts, lr, momentum, &r, err, sizeof err)) {
                fprintf(stderr, "%s: step %ld: %s\n", plan_path, s, err);
                goto out;
            }
        } else {
            /* this rank's micro-batches, gradients summed (over ranks inside train_step_update) */
            StepResult sum = {0};
            for (int k = 0; k < acc; k++) {
                synth_pool_bind(&pool, &ts, rank * acc + k);
                if (!train_step_backward(&ts, &r, err, sizeof err)) {
                    fprintf(stderr, "%s: rank %d: step %ld: %s\n", plan_path, rank, s, err);
                    goto out;
                }
                sum.box += r.box / acc;
                sum.cls += r.cls / acc;
                sum.dfl += r.dfl / acc;
                sum.total += r.total;
            }
            if (!train_step_update(&ts, lr, momentum, NULL, &sum.grad_norm, err, sizeof err)) {
                fprintf(stderr, "%s: step %ld: %s\n", plan_path, s, err); /* collective errors name the rank */
                goto out;
            }
            r = sum;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double loss = r.box + r.cls + r.dfl;
        if (!root) continue;
        if (json)
            printf("{\"step\": %ld, \"loss\": %.9g, \"box\": %.9g, \"cls\": %.9g, \"dfl\": %.9g, \"total\": %.9g, \"grad_norm\": %.9g, \"seconds\": %.3f}\n", s, loss,
                   r.box, r.cls, r.dfl, r.total, r.grad_norm, secs);
        else
            printf("step %4ld/%ld  loss %.4f  box %.4f  cls %.4f  dfl %.4f  grad_norm %.3f  %.2fs\n", s, (long)steps, loss, r.box, r.cls, r.dfl, r.grad_norm, secs);
        fflush(stdout);
    }
    if (!train_step_sync_host(&ts, true, err, sizeof err) || !dp_check_in_sync(&dp, err, sizeof err)) {
        fprintf(stderr, "yolort: error: %s\n", err);
        goto out;
    }
    if (root && save && !weights_save(&plan.g, ts.it.buf, save, NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        goto out;
    }
    rc = 0;
out:
    synth_pool_free(&pool);
    dp_detach(&dp); /* NCCL before the device it runs on */
    train_step_free(&ts);
    plan_free(&plan);
    dp_finalize(&dp, rc);
    return rc;
}

typedef enum { OPT_INT, OPT_NUM, OPT_STR, OPT_FLAG, OPT_FLOAT } OptKind;

typedef struct TrainOpt {
    const char *name;
    OptKind kind;
    void *dst;
    double lo, hi;
} TrainOpt;

/* Options from argv[first] on into their destinations; 0, or the exit code of a usage error. */
static int parse_options(const TrainOpt *opts, size_t n_opts, int argc, char **argv, int first) {
    for (int i = first; i < argc; i++) {
        const TrainOpt *o = NULL;
        for (size_t k = 0; k < n_opts && !o; k++)
            if (strcmp(argv[i], opts[k].name) == 0) o = &opts[k];
        if (!o) return usage_error("unknown option '%s'", argv[i]);
        if (o->kind == OPT_FLAG) {
            *(bool *)o->dst = true;
            continue;
        }
        if (i + 1 >= argc) return usage_error("%s needs a value", o->name);
        const char *v = argv[++i];
        double x;
        if (o->kind == OPT_STR) {
            *(const char **)o->dst = v;
        } else if (!number(v, o->lo, o->hi, &x) || (o->kind == OPT_INT && x != (double)(long long)x)) {
            fprintf(stderr, "yolort: error: %s must be %s in [%g, %g], got '%s' (see yolort --help)\n", o->name, o->kind == OPT_INT ? "an integer" : "a number", o->lo, o->hi, v);
            return 2;
        } else if (o->kind == OPT_INT) {
            *(int *)o->dst = (int)x;
        } else if (o->kind == OPT_NUM) {
            *(double *)o->dst = x;
        } else {
            *(float *)o->dst = (float)x;
        }
    }
    return 0;
}

/* `yolort train PLAN --data DATA.yaml [options]` */
static int train_data_main(int argc, char **argv) {
    TrainArgs a;
    train_args_defaults(&a);
    a.plan = argv[2];
    bool no_val = false, no_plots = false;
    const char *cache = NULL;
    Hyp *h = &a.hyp;
    const TrainOpt opts[] = {
        {"--data", OPT_STR, &a.data, 0, 0}, {"--project", OPT_STR, &a.project, 0, 0}, {"--name", OPT_STR, &a.name, 0, 0},
        {"--weights", OPT_STR, &a.weights, 0, 0}, {"--resume", OPT_STR, &a.resume, 0, 0}, {"--cache", OPT_STR, &cache, 0, 0},
        {"--epochs", OPT_INT, &a.epochs, 1, 1e6}, {"--patience", OPT_INT, &a.patience, 0, 1e9}, {"--close-mosaic", OPT_INT, &a.close_mosaic, 0, 1e6},
        {"--freeze", OPT_INT, &a.freeze, 0, 1000}, {"--seed", OPT_INT, &a.seed, 0, 2147483647}, {"--workers", OPT_INT, &a.workers, 0, 256},
        {"--batch", OPT_INT, &a.batch, 1, 1e6}, {"--save-period", OPT_INT, &a.save_period, -1, 1e6}, {"--stop-after", OPT_INT, &a.stop_after, 0, 1e6},
        {"--lr0", OPT_NUM, &a.lr0, 0, 10}, {"--lrf", OPT_NUM, &a.lrf, 0, 1}, {"--momentum", OPT_NUM, &a.momentum, 0, 1},
        {"--weight-decay", OPT_NUM, &a.weight_decay, 0, 1}, {"--box", OPT_NUM, &a.gains[0], 0, 1000}, {"--cls", OPT_NUM, &a.gains[1], 0, 1000},
        {"--dfl", OPT_NUM, &a.gains[2], 0, 1000}, {"--warmup-epochs", OPT_NUM, &a.warmup_epochs, 0, 1e6},
        {"--warmup-momentum", OPT_NUM, &a.warmup_momentum, 0, 1}, {"--warmup-bias-lr", OPT_NUM, &a.warmup_bias_lr, 0, 10},
        {"--hsv-h", OPT_FLOAT, &h->hsv_h, 0, 1}, {"--hsv-s", OPT_FLOAT, &h->hsv_s, 0, 1}, {"--hsv-v", OPT_FLOAT, &h->hsv_v, 0, 1},
        {"--degrees", OPT_FLOAT, &h->degrees, 0, 180}, {"--translate", OPT_FLOAT, &h->translate, 0, 1}, {"--scale", OPT_FLOAT, &h->scale, 0, 1},
        {"--shear", OPT_FLOAT, &h->shear, 0, 180}, {"--perspective", OPT_FLOAT, &h->perspective, 0, 0.001}, {"--flipud", OPT_FLOAT, &h->flipud, 0, 1},
        {"--fliplr", OPT_FLOAT, &h->fliplr, 0, 1}, {"--mosaic", OPT_FLOAT, &h->mosaic, 0, 1}, {"--mixup", OPT_FLOAT, &h->mixup, 0, 1},
        {"--cos-lr", OPT_FLAG, &a.cos_lr, 0, 0}, {"--exist-ok", OPT_FLAG, &a.exist_ok, 0, 0}, {"--no-val", OPT_FLAG, &no_val, 0, 0}, {"--no-plots", OPT_FLAG, &no_plots, 0, 0},
        {"--reference", OPT_FLAG, &a.reference, 0, 0}, {"--fraction", OPT_NUM, &a.fraction, 0, 1}, {"--time", OPT_NUM, &a.time, 0, 1e6},
        {"--single-cls", OPT_FLAG, &a.single_cls, 0, 0},
    };
    int bad = parse_options(opts, sizeof opts / sizeof opts[0], argc, argv, 3);
    if (bad) return bad;
    if (!(a.fraction > 0)) return usage_error("%s", "--fraction must be in (0, 1]: the share of the training images to use");
    if (cache && strcmp(cache, "ram") != 0 && strcmp(cache, "disk") != 0 && strcmp(cache, "none") != 0) return usage_error("--cache must be ram, disk or none, got '%s'", cache);
    a.cache_ram = cache && strcmp(cache, "ram") == 0;
    a.cache_disk = cache && strcmp(cache, "disk") == 0;
    a.val = !no_val;
    a.plots = !no_plots;
    if (!a.data && !a.resume) return usage_error("%s", "no data: pass --data DATA.yaml (or --resume RUN)");
    return train_main(&a);
}

/* `yolort predict PLAN --weights W --source S [options]` */
static int predict_cmd(int argc, char **argv) {
    PredictArgs a;
    predict_args_defaults(&a);
    a.plan = argv[2];
    bool no_save = false, no_rect = false;
    const TrainOpt opts[] = {
        {"--weights", OPT_STR, &a.weights, 0, 0}, {"--source", OPT_STR, &a.source, 0, 0}, {"--project", OPT_STR, &a.project, 0, 0},
        {"--name", OPT_STR, &a.name, 0, 0}, {"--conf", OPT_NUM, &a.conf, 0, 1}, {"--iou", OPT_NUM, &a.iou, 0, 1},
        {"--max-det", OPT_INT, &a.max_det, 1, 100000}, {"--exist-ok", OPT_FLAG, &a.exist_ok, 0, 0}, {"--no-save", OPT_FLAG, &no_save, 0, 0},
        {"--save-txt", OPT_FLAG, &a.save_txt, 0, 0}, {"--save-conf", OPT_FLAG, &a.save_conf, 0, 0}, {"--reference", OPT_FLAG, &a.reference, 0, 0},
        {"--save-crop", OPT_FLAG, &a.save_crop, 0, 0}, {"--classes", OPT_STR, &a.classes, 0, 0},
        {"--vid-stride", OPT_INT, &a.vid_stride, 1, 100000}, {"--agnostic-nms", OPT_FLAG, &a.agnostic_nms, 0, 0},
        {"--save-frames", OPT_FLAG, &a.save_frames, 0, 0}, {"--batch", OPT_INT, &a.batch, 1, 1024}, {"--no-rect", OPT_FLAG, &no_rect, 0, 0},
    };
    int bad = parse_options(opts, sizeof opts / sizeof opts[0], argc, argv, 3);
    if (bad) return bad;
    a.save = !no_save;
    a.rect = !no_rect;
    if (!a.weights) return usage_error("%s", "no weights: pass --weights W.safetensors (e.g. RUN/weights/best.safetensors)");
    if (!a.source) return usage_error("%s", "no source: pass --source IMAGE, VIDEO, DIR, a glob or a .txt list");
    return predict_main(&a);
}

/* `yolort export PLAN --weights W [options]` */
static int export_cmd(int argc, char **argv) {
    ExportArgs a;
    export_args_defaults(&a);
    a.plan = argv[2];
    const TrainOpt opts[] = {
        {"--weights", OPT_STR, &a.weights, 0, 0}, {"--format", OPT_STR, &a.format, 0, 0}, {"-o", OPT_STR, &a.output, 0, 0},
        {"--batch", OPT_INT, &a.batch, 1, 4096},  {"--opset", OPT_INT, &a.opset, 1, 1000}, {"--max-det", OPT_INT, &a.max_det, 1, 100000},
        {"--dynamic", OPT_FLAG, &a.dynamic, 0, 0},
    };
    int bad = parse_options(opts, sizeof opts / sizeof opts[0], argc, argv, 3);
    if (bad) return bad;
    if (!a.weights) return usage_error("%s", "no weights: pass --weights W.safetensors (e.g. RUN/weights/best.safetensors)");
    return export_main(&a);
}

/* `yolort val PLAN --weights W --data DATA.yaml [options]` */
static int val_cmd(int argc, char **argv) {
    ValArgs a = {.plan = argv[2], .workers = 2, .project = "runs/detect", .name = "val", .conf = 0.001, .iou = 0.7, .max_det = 300};
    bool no_plots = false, no_rect = false;
    const TrainOpt opts[] = {
        {"--weights", OPT_STR, &a.weights, 0, 0}, {"--data", OPT_STR, &a.data, 0, 0}, {"--workers", OPT_INT, &a.workers, 0, 256},
        {"--reference", OPT_FLAG, &a.reference, 0, 0}, {"--project", OPT_STR, &a.project, 0, 0}, {"--name", OPT_STR, &a.name, 0, 0},
        {"--exist-ok", OPT_FLAG, &a.exist_ok, 0, 0}, {"--no-plots", OPT_FLAG, &no_plots, 0, 0}, {"--save-txt", OPT_FLAG, &a.save_txt, 0, 0},
        {"--save-conf", OPT_FLAG, &a.save_conf, 0, 0}, {"--save-json", OPT_FLAG, &a.save_json, 0, 0},
        {"--conf", OPT_NUM, &a.conf, 0, 1}, {"--iou", OPT_NUM, &a.iou, 0, 1}, {"--max-det", OPT_INT, &a.max_det, 1, 100000},
        {"--split", OPT_STR, &a.split, 0, 0}, {"--single-cls", OPT_FLAG, &a.single_cls, 0, 0},
        {"--batch", OPT_INT, &a.batch, 1, 1024}, {"--no-rect", OPT_FLAG, &no_rect, 0, 0},
    };
    int bad = parse_options(opts, sizeof opts / sizeof opts[0], argc, argv, 3);
    if (bad) return bad;
    a.rect = !no_rect;
    if (a.split && strcmp(a.split, "val") != 0 && strcmp(a.split, "test") != 0 && strcmp(a.split, "train") != 0)
        return usage_error("--split must be val, test or train, got '%s'", a.split);
    a.plots = !no_plots;
    if (!a.weights) return usage_error("%s", "no weights: pass --weights W.safetensors (e.g. RUN/weights/best.safetensors)");
    if (!a.data) return usage_error("%s", "no data: pass --data DATA.yaml");
    return val_main(&a);
}

/* `yolort datagen DIR [options]` */
static int datagen_main(int argc, char **argv) {
    DatagenOptions o = datagen_defaults();
    double images = o.images, size = o.size, classes = o.classes, seed = (double)o.seed, valf = o.val_fraction;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) return usage_error("unknown option or missing value: '%s'", a);
        const char *v = argv[++i];
        bool ok;
        if (strcmp(a, "--images") == 0) ok = number(v, 2, DATAGEN_MAX_IMAGES, &images) && images == (int)images;
        else if (strcmp(a, "--size") == 0) ok = number(v, 32, 4096, &size) && size == (int)size;
        else if (strcmp(a, "--classes") == 0) ok = number(v, 1, DATAGEN_MAX_CLASSES, &classes) && classes == (int)classes;
        else if (strcmp(a, "--seed") == 0) ok = number(v, 0, 1e15, &seed) && seed == (long long)seed;
        else if (strcmp(a, "--val-fraction") == 0) ok = number(v, 1e-9, 1 - 1e-9, &valf);
        else return usage_error("unknown option '%s'", a);
        if (!ok) {
            fprintf(stderr, "yolort: error: bad value for %s: '%s' (see yolort --help)\n", a, v);
            return 2;
        }
    }
    o.images = (int)images;
    o.size = (int)size;
    o.classes = (int)classes;
    o.seed = (uint64_t)seed;
    o.val_fraction = valf;
    char err[1024];
    if (!datagen_write(argv[2], &o, stdout, err, sizeof err)) {
        fprintf(stderr, "yolort: error: %s\n", err);
        return 1;
    }
    return 0;
}

/* `yolort bench PLAN [--steps N] [--warmup W] [--seed S] [--max-seconds T] [--json]`: the
 * training step's speed and peak memory (runtime/train/bench_step.c) */
static int bench_main(int argc, char **argv) {
    BenchOptions o = bench_defaults();
    bool json = false;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        double x;
        if (strcmp(a, "--json") == 0) {
            json = true;
            continue;
        }
        if (i + 1 >= argc) return usage_error("unknown option or missing value: '%s'", a);
        const char *v = argv[++i];
        if (strcmp(a, "--steps") == 0) {
            if (!number(v, 1, 1e6, &x) || x != (int)x) return usage_error("--steps must be an integer in [1, 1000000], got '%s'", v);
            o.steps = (int)x;
        } else if (strcmp(a, "--warmup") == 0) {
            if (!number(v, 0, 1e6, &x) || x != (int)x) return usage_error("--warmup must be an integer in [0, 1000000], got '%s'", v);
            o.warmup = (int)x;
        } else if (strcmp(a, "--seed") == 0) {
            if (!number(v, 0, 1e15, &x) || x != (long long)x) return usage_error("--seed must be a non-negative integer, got '%s'", v);
            o.seed = (uint64_t)x;
        } else if (strcmp(a, "--profile") == 0) {
            if (!number(v, 1, 1000, &x) || x != (int)x) return usage_error("--profile must be a number of rows in [1, 1000], got '%s'", v);
            o.profile = (int)x;
        } else if (strcmp(a, "--max-seconds") == 0) {
            if (!number(v, 0, 1e9, &x)) return usage_error("--max-seconds must be a number of seconds >= 0, got '%s'", v);
            o.max_seconds = x;
        } else {
            return usage_error("unknown option '%s'", a);
        }
    }
    BenchResult r;
    char err[2048];
    if (!bench_plan(argv[2], &o, &r, err, sizeof err)) {
        fprintf(stderr, "yolort: error: %s\n", err);
        return 1;
    }
    if (json) bench_print_json(stdout, argv[2], &r);
    else bench_print_text(stdout, argv[2], &r);
    /* beside the result, which --json keeps one object */
    if (r.profile[0]) fputs(r.profile, stderr);
    return 0;
}

/* OpenBLAS 0.3.21 does not recognise some virtualised AVX-512 CPUs and falls
 * back to its slowest generic kernels (1.5x slower GEMM here); it reads
 * OPENBLAS_CORETYPE only when the library loads, so choose a core type from
 * the CPU's features and restart once. A user's own setting wins. */
static void choose_blas_kernels(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return;
    __builtin_cpu_init();
    const char *core = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? "SkylakeX" : __builtin_cpu_supports("avx2") ? "Haswell" : NULL;
    if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with what OpenBLAS chose by itself */
}

/* --device (Ultralytics' device=) of train, val, predict and bench, taken
 * out of argv and acted on before anything loads a CUDA library:
 * CUDA_VISIBLE_DEVICES names the devices (device_apply) and the plan must
 * suit them (target_check_device). For train, a list of W devices asks for
 * W ranks (*ranks) unless a launcher started this process; val, predict and
 * bench run on the first, as Ultralytics' do. Returns -1 to carry on, else
 * the exit status. */
static int take_device(int *argc, char **argv, int *ranks) {
    const char *v;
    int at, span;
    char err[1024];
    *ranks = 1;
    if (!argv_find_option(*argc, argv, "--device", &v, &at, &span, err, sizeof err)) return usage_error("%s", err);
    if (at < 0) return -1;
    if (!v) return usage_error("%s", "--device needs a value: cpu, 0, 0,1 or -1");
    DeviceChoice d;
    if (!device_parse(v, &d, err, sizeof err)) return usage_error("%s", err);
    argv_remove(argc, argv, at, span);
    Ranks outer;
    if (!ranks_from_environ(&outer, err, sizeof err)) return usage_error("%s", err);
    if (!device_apply(&d, strcmp(argv[1], "bench") == 0 ? stderr : stdout, err, sizeof err)) {
        fprintf(stderr, "yolort: error: %s\n", err);
        return 1;
    }
    if (!d.cpu && d.n == 0) return -1; /* -1 found no idle GPU: the default device, as Ultralytics */
    if (outer.world > 1 && d.n > 0 && outer.local_rank >= d.n) {
        snprintf(err, sizeof err, "--device %s names only %d CUDA device%s, but this is local rank %d (%s): name one for every rank on this machine", d.text, d.n,
                 d.n == 1 ? "" : "s", outer.local_rank, ranks_source_name(outer.source));
        return usage_error("%s", err);
    }
    int asked, at_r, span_r;
    if (strcmp(argv[1], "train") == 0 && outer.world == 1 && d.n > 1) { /* one rank a device, as Ultralytics starts DDP */
        if (!launch_find_ranks(*argc, argv, &asked, &at_r, &span_r, err, sizeof err)) return usage_error("%s", err);
        if (at_r >= 0 && asked != d.n) {
            snprintf(err, sizeof err, "--device %s names %d CUDA devices, one a rank, but --ranks says %d: leave --ranks out", d.text, d.n, asked);
            return usage_error("%s", err);
        }
        *ranks = d.n;
    }
    if (!target_check_device(argv[2], &d, err, sizeof err)) {
        fprintf(stderr, "yolort: error: %s\n", err);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv) {
    choose_blas_kernels(argv);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "datagen") == 0) return datagen_main(argc, argv);
    int device_ranks = 1;
    const char *device_cmds[] = {"train", "val", "predict", "bench"};
    for (size_t i = 0; argc >= 3 && i < sizeof device_cmds / sizeof device_cmds[0]; i++) {
        if (strcmp(argv[1], device_cmds[i]) != 0) continue;
        int rc = take_device(&argc, argv, &device_ranks);
        if (rc >= 0) return rc;
    }
    if (argc >= 3 && strcmp(argv[1], "bench") == 0) return bench_main(argc, argv);
    if (argc >= 3 && strcmp(argv[1], "predict") == 0) return predict_cmd(argc, argv);
    if (argc >= 3 && strcmp(argv[1], "val") == 0) return val_cmd(argc, argv);
    if (argc >= 3 && strcmp(argv[1], "export") == 0) return export_cmd(argc, argv);
    if (argc == 2 && strcmp(argv[1], "export") == 0) return usage_error("%s", "expected: yolort export FILE.plan --weights W.safetensors");
    if (argc == 2 && strcmp(argv[1], "val") == 0) return usage_error("%s", "expected: yolort val FILE.plan --weights W.safetensors --data DATA.yaml");
    if (argc == 2 && strcmp(argv[1], "predict") == 0) return usage_error("%s", "expected: yolort predict FILE.plan --weights W.safetensors --source IMAGE|VIDEO|DIR");
    if (argc == 2 && strcmp(argv[1], "bench") == 0) return usage_error("%s", "expected: yolort bench FILE.plan");
    if (argc < 3 || strcmp(argv[1], "train") != 0)
        return usage_error("%s", argc < 2 ? "no command given" : argc >= 2 && strcmp(argv[1], "datagen") == 0 ? "expected: yolort datagen DIR" : "expected: yolort train FILE.plan --data DATA.yaml");
    /* --ranks N: this process becomes the ranks' launcher (runtime/dist/launch.h) */
    int ranks, at, span;
    char err[1024];
    if (!launch_find_ranks(argc, argv, &ranks, &at, &span, err, sizeof err)) return usage_error("%s", err);
    if (device_ranks > 1) ranks = device_ranks; /* --device 0,1 (take_device checked --ranks against it) */
    if (at >= 0 || ranks > 1) {
        Ranks outer;
        if (!ranks_from_environ(&outer, err, sizeof err)) return usage_error("%s", err);
        if (outer.world > 1) {
            snprintf(err, sizeof err, "--ranks starts the ranks itself, but this is already rank %d of %d (%s): leave --ranks out", outer.rank, outer.world,
                     ranks_source_name(outer.source));
            return usage_error("%s", err);
        }
        if (ranks > 1) {
            int rc = launch_ranks(argc, argv, at, span, ranks, err, sizeof err);
            if (rc) fprintf(stderr, "yolort: error: %s\n", err);
            return rc;
        }
        argv_remove(&argc, argv, at, span); /* one rank: this process, without the option */
    }
    for (int i = 3; i < argc; i++)
        if (strcmp(argv[i], "--synthetic") == 0) return synthetic_main(argc, argv);
    return train_data_main(argc, argv);
}
