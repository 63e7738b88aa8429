/* runtime/predict/val.c — `yolort val`: a dataset's val split through the
 * plan's eval-mode model with loaded weights (eval_model.c) and the
 * trainer's validation pass (validate_pass: NMS or top-k, matching, mAP, the
 * table). Must not touch the training step or write files. */
#include "val.h"

#include <stdio.h>
#include <string.h>

#include "../data/dataset.h"
#include "../data/loader.h"
#include "../train/trainer.h"
#include "eval_model.h"

static bool model_batch(void *ctx, const Batch *b, const float **pred, const float **items, char *err, int errcap) {
    EvalModel *m = ctx;
    if (!eval_model_run(m, b->bytes, b->boxes, b->counts, err, errcap)) return false;
    *pred = m->pred, *items = m->items;
    return true;
}

int val_main(const ValArgs *a) {
    EvalModel m;
    Dataset ds;
    memset(&ds, 0, sizeof ds);
    Loader *l = NULL;
    char err[2048], report[512];
    int rc = 2;
    if (!eval_model_open(&m, a->plan, a->weights, a->reference, report, sizeof report, err, sizeof err)) goto fail_model;
    printf("%s\n", report);
    if (!dataset_load(a->data, &ds, stderr, err, sizeof err)) goto fail;
    if (ds.nc != m.io.nc) {
        snprintf(err, sizeof err, "%s has %d classes, the plan was compiled for %d", a->data, ds.nc, m.io.nc);
        goto fail;
    }
    char line[512];
    dataset_issues_format("val", &ds.val, line, sizeof line);
    printf("%s\n", line);
    LoaderOptions o = {.batch = m.io.batch, .imgsz = m.io.imgsz, .max_boxes = m.io.max_boxes, .train = false, .workers = a->workers, .bytes = true};
    if (!(l = loader_open(&ds.val, &o, err, sizeof err))) goto fail;
    rc = 1;
    ValPass v = {.loader = l, .split = &ds.val, .names = ds.names, .nc = m.io.nc, .anchors = m.io.anchors, .end2end = m.io.end2end, .run = model_batch, .ctx = &m};
    ValResult res;
    double t0 = monotonic_seconds();
    if (!validate_pass(&v, true, &res, err, sizeof err)) goto fail;
    printf("Speed: %.1fms per image (load, inference and postprocess) at shape (%d, 3, %d, %d)\n", res.images ? (monotonic_seconds() - t0) * 1e3 / res.images : 0.0,
           m.io.batch, m.io.imgsz, m.io.imgsz);
    rc = 0;
fail:
    loader_close(l);
    dataset_free(&ds);
    eval_model_close(&m);
fail_model:
    if (rc) fprintf(stderr, "yolort: error: %s\n", err);
    return rc;
}
