/* runtime/predict/val.c — `yolort val`: a dataset's val (test, train) split through the
 * plan's eval-mode model with loaded weights (eval_model.c) and the
 * trainer's validation pass (validate_pass: NMS or top-k, matching, mAP, the
 * table), and what the validator writes into its run directory: plots,
 * labels/STEM.txt (--save-txt) and predictions.json (--save-json, the
 * entries of Ultralytics 8.3's pred_to_json with its later file_name). Must not
 * touch the training step or write other files. */
#include "val.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../data/dataset.h"
#include "../data/loader.h"
#include "../train/report.h"
#include "../train/trainer.h"
#include "eval_model.h"
#include "eval_shape.h"
#include "predict.h"

/* COCO's category ids of its 80 detection classes (coco80_to_coco91_class) */
static const int COCO91[80] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                               22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
                               46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65,
                               67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90};

/* What --save-txt and --save-json write while the pass runs. */
typedef struct ValSaves {
    const ValArgs *a;
    char labels[1100];          /* DIR/labels */
    char json_path[1100], json_tmp[1120];
    FILE *json;                 /* predictions.json being written (as .tmp) */
    long json_entries;
    bool coco;                  /* the val split is COCO's: category ids of COCO */
} ValSaves;

/* Python's round(v, digits) (correctly rounded decimal), printed in the
 * fewest digits that read back as the same double */
static void rounded(double v, int digits, char *out, size_t cap) {
    char dec[64];
    snprintf(dec, sizeof dec, "%.*f", digits, v);
    const double r = strtod(dec, NULL);
    for (int p = 1; p <= 17; p++) {
        snprintf(out, cap, "%.*g", p, r);
        if (strtod(out, NULL) == r) return;
    }
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

/* image_id: the stem as an integer when it is all digits, else as a string */
static void json_image_id(FILE *f, const char *stem) {
    bool digits = *stem != 0;
    for (const char *c = stem; *c && digits; c++) digits = isdigit((unsigned char)*c);
    if (!digits) return json_string(f, stem);
    while (stem[0] == '0' && stem[1]) stem++;
    fputs(stem, f);
}

/* update_metrics' save_one_txt and pred_to_json for one image */
static bool save_image(void *ctx, const Sample *s, const Detection *d, int n, char *err, int errcap) {
    ValSaves *v = ctx;
    char stem[512];
    predict_output_stem(stem, sizeof stem, s->image, 0);
    if (v->a->save_txt && !predict_save_txt(v->labels, stem, d, n, s->w, s->h, v->a->save_conf, err, errcap)) return false;
    if (!v->json) return true;
    for (int i = 0; i < n; i++) {
        /* xyxy2xywh then the top-left corner, in float32 as torch computes it */
        const float w = d[i].x2 - d[i].x1, h = d[i].y2 - d[i].y1;
        const float x = (d[i].x1 + d[i].x2) / 2 - w / 2, y = (d[i].y1 + d[i].y2) / 2 - h / 2;
        char b[4][40], score[40];
        rounded(x, 3, b[0], sizeof b[0]), rounded(y, 3, b[1], sizeof b[1]), rounded(w, 3, b[2], sizeof b[2]), rounded(h, 3, b[3], sizeof b[3]);
        rounded(d[i].score, 5, score, sizeof score);
        fputs(v->json_entries++ ? ", {\"image_id\": " : "{\"image_id\": ", v->json);
        json_image_id(v->json, stem);
        fputs(", \"file_name\": ", v->json);
        json_string(v->json, dataset_file_name(s->image));
        const int cat = v->coco && d[i].cls < 80 ? COCO91[d[i].cls] : d[i].cls + 1;
        fprintf(v->json, ", \"category_id\": %d, \"bbox\": [%s, %s, %s, %s], \"score\": %s}", cat, b[0], b[1], b[2], b[3], score);
    }
    if (ferror(v->json)) return errf(err, errcap, "cannot write %s: %s", v->json_tmp, strerror(errno));
    return true;
}

/* The validator's is_coco: the split's list named like COCO's val2017.txt or test-dev2017.txt */
static bool is_coco(const DataSplit *split) {
    const char *src = split->source;
    if (!src || !strstr(src, "coco")) return false;
    const size_t n = strlen(src);
    const char *ends[] = {"/val2017.txt", "/test-dev2017.txt"};
    for (int i = 0; i < 2; i++)
        if (n >= strlen(ends[i]) && strcmp(src + n - strlen(ends[i]), ends[i]) == 0) return true;
    return false;
}

typedef struct ValModel {
    EvalModel m;
    int batch;
} ValModel;

static bool model_batch(void *ctx, const Batch *b, const float **pred, int *anchors, const float **items, char *err, int errcap) {
    ValModel *vm = ctx;
    EvalModel *m = &vm->m;
    if (!eval_model_shape(m, vm->batch, b->h, b->w, err, errcap) || !eval_model_run(m, b->bytes, b->boxes, b->counts, err, errcap)) return false;
    *pred = m->pred, *anchors = m->io.anchors, *items = m->items;
    return true;
}

/* Every batch shape of the pass opened before the first batch (a CUDA
 * plan: one arena for all of them, and a shape its kernels cannot serve
 * refused before any work). */
static bool prepare_shapes(EvalModel *m, const Loader *l, int batch, char *err, int errcap) {
    int(*hw)[2] = loader_batch_shapes(l);
    if (!hw) return snprintf(err, (size_t)errcap, "out of memory"), false;
    const bool ok = eval_model_prepare_shapes(m, batch, loader_batches_per_epoch(l), (const int(*)[2])hw, err, errcap);
    free(hw);
    return ok;
}

int val_main(const ValArgs *a) {
    ValModel vm;
    Dataset ds;
    memset(&ds, 0, sizeof ds);
    Loader *l = NULL;
    char err[2048], report[512];
    int rc = 2;
    ValSaves saves = {.a = a};
    if (!eval_model_open(&vm.m, a->plan, a->weights, a->reference, report, sizeof report, err, sizeof err)) goto fail_model;
    printf("%s\n", report);
    const char *split_name = a->split ? a->split : "val";
    const DatasetOptions dso = {.splits = strcmp(split_name, "train") == 0 ? DATASET_TRAIN : strcmp(split_name, "test") == 0 ? DATASET_TEST : DATASET_VAL,
                                .single_cls = a->single_cls};
    if (a->single_cls && vm.m.io.nc != 1) {
        snprintf(err, sizeof err, "--single-cls needs a plan compiled for one class (yolocc MODEL.yaml --nc 1 ...); %s has %d", a->plan, vm.m.io.nc);
        goto fail;
    }
    if (!dataset_load(a->data, &dso, &ds, stderr, err, sizeof err)) goto fail;
    if (ds.nc != vm.m.io.nc) {
        snprintf(err, sizeof err, "%s has %d classes, the plan was compiled for %d%s", a->data, ds.nc, vm.m.io.nc, vm.m.io.nc == 1 ? " (--single-cls trains and validates them as one)" : "");
        goto fail;
    }
    if (a->single_cls) printf("Overriding class names with single class.\n");
    const DataSplit *split = dso.splits == DATASET_TRAIN ? &ds.train : dso.splits == DATASET_TEST ? &ds.test : &ds.val;
    char line[512];
    dataset_issues_format(split_name, split, line, sizeof line);
    printf("%s\n", line);
    /* as `yolo val` runs a .pt model, on the CPU and on a GPU alike: rect batches, each shape its own graph */
    vm.batch = a->batch > 0 ? a->batch : 16;
    LoaderOptions o = {.batch = vm.batch, .imgsz = vm.m.io.imgsz, .max_boxes = vm.m.io.max_boxes, .train = false, .workers = a->workers, .bytes = true,
                       .rect = a->rect, .stride = eval_plan_stride(&vm.m.plan)};
    if (!(l = loader_open(split, &o, err, sizeof err)) || !prepare_shapes(&vm.m, l, vm.batch, err, sizeof err)) goto fail;
    char dir[1024];
    const bool files = a->plots || a->save_txt || a->save_json;
    /* made once every input has been read, so a refused command leaves nothing */
    if (files && !report_run_dir(a->project, a->name, a->exist_ok, dir, sizeof dir, err, sizeof err)) goto fail;
    if (a->save_txt) {
        snprintf(saves.labels, sizeof saves.labels, "%s/labels", dir);
        if (!report_make_dir(saves.labels, err, sizeof err)) goto fail;
    }
    if (a->save_json) {
        snprintf(saves.json_path, sizeof saves.json_path, "%s/predictions.json", dir);
        snprintf(saves.json_tmp, sizeof saves.json_tmp, "%s.tmp", saves.json_path);
        if (!(saves.json = fopen(saves.json_tmp, "w"))) {
            snprintf(err, sizeof err, "cannot write %s: %s", saves.json_tmp, strerror(errno));
            goto fail;
        }
        fputc('[', saves.json);
    }
    saves.coco = is_coco(split);
    rc = 1;
    NmsOptions nms = NMS_VALIDATION;
    nms.conf = a->conf, nms.iou = a->iou, nms.max_det = a->max_det;
    ValPass v = {.loader = l, .split = split, .names = ds.names, .nc = vm.m.io.nc, .end2end = vm.m.io.end2end, .nms = nms, .run = model_batch, .ctx = &vm,
                 .plots_dir = a->plots ? dir : NULL, .imgsz = vm.m.io.imgsz, .max_boxes = vm.m.io.max_boxes,
                 .on_image = a->save_txt || a->save_json ? save_image : NULL, .image_ctx = &saves};
    ValResult res;
    double t0 = monotonic_seconds();
    if (!validate_pass(&v, true, &res, err, sizeof err)) goto fail;
    printf("Speed: %.1fms per image (load, inference and postprocess) at shape (%d, 3, %d, %d)\n", res.images ? (monotonic_seconds() - t0) * 1e3 / res.images : 0.0,
           vm.batch, vm.m.io.h, vm.m.io.w);
    if (saves.json) {
        /* Ultralytics writes the file only when it holds a detection */
        fputs("]", saves.json);
        FILE *f = saves.json;
        saves.json = NULL;
        if (fclose(f) != 0) {
            snprintf(err, sizeof err, "cannot write %s: %s", saves.json_tmp, strerror(errno));
            goto fail;
        }
        if (saves.json_entries > 0) {
            printf("Saving %s...\n", saves.json_path);
            if (rename(saves.json_tmp, saves.json_path) != 0) {
                snprintf(err, sizeof err, "cannot write %s: %s", saves.json_path, strerror(errno));
                goto fail;
            }
        } else {
            remove(saves.json_tmp);
        }
    }
    if (files) printf("Results saved to %s\n", dir);
    rc = 0;
fail:
    if (saves.json) {
        fclose(saves.json);
        remove(saves.json_tmp);
    }
    loader_close(l);
    dataset_free(&ds);
    eval_model_close(&vm.m);
fail_model:
    if (rc) fprintf(stderr, "yolort: error: %s\n", err);
    return rc;
}
