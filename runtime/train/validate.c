/* runtime/train/validate.c — one validation pass (training-semantics §8.1):
 * a model's eval-mode outputs over a split (the trainer's validation graph on
 * the EMA, or yolort val's loaded weights), NMS (or an end-to-end head's
 * top-k selection), boxes mapped back to original pixels, mAP, and the
 * validation losses; with ValPass.plots_dir, the confusion matrix and the
 * plots (drawn by report_val_plots and report_batch_jpeg), and each image's
 * detections to the caller's on_image. Must not touch: the training step,
 * the EMA's values, any other file. */
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../cuda/cuda_step.h"
#include "../predict/eval_shape_cuda.h"
#include "confusion.h"
#include "metrics.h"
#include "report.h"
#include "report_batches.h"
#include "trainer.h"

/* The labels of a sample as original-pixel xyxy boxes. */
static void gt_boxes(const Sample *s, float *xyxy, int *cls) {
    for (int k = 0; k < s->n_labels; k++) {
        const Label *l = &s->labels[k];
        xyxy[4 * k + 0] = (l->cx - l->w / 2) * (float)s->w;
        xyxy[4 * k + 1] = (l->cy - l->h / 2) * (float)s->h;
        xyxy[4 * k + 2] = (l->cx + l->w / 2) * (float)s->w;
        xyxy[4 * k + 3] = (l->cy + l->h / 2) * (float)s->h;
        cls[k] = l->cls;
    }
}

/* val_batchN_labels.jpg and val_batchN_pred.jpg of one batch (its first 16
 * images; dets: their NMS output in network pixels, max_det slots each) */
static bool plot_val_batch(const ValPass *v, const Batch *b, int batch_i, Detection *const *dets, const int *n_dets, char *err, int errcap) {
    char path[1200];
    BatchPlot p = {.b = b, .n = b->n_valid, .imgsz = v->imgsz, .max_boxes = v->max_boxes, .split = v->split, .names = (const char *const *)v->names};
    snprintf(path, sizeof path, "%s/val_batch%d_labels.jpg", v->plots_dir, batch_i);
    if (!report_batch_jpeg(path, &p, err, errcap)) return false;
    p.dets = (const Detection *const *)dets, p.n_dets = n_dets;
    snprintf(path, sizeof path, "%s/val_batch%d_pred.jpg", v->plots_dir, batch_i);
    return report_batch_jpeg(path, &p, err, errcap);
}

static int max_labels(const DataSplit *s) {
    int m = 1;
    for (int i = 0; i < s->n; i++) m = s->samples[i].n_labels > m ? s->samples[i].n_labels : m;
    return m;
}

/* One batch through the validation graph: on the device for a CUDA plan
 * (the EMA uploaded once per pass), else on the interpreter, at the batch's
 * shape (the plan's own graph, or the model built at a rect batch's). */
static bool eval_batch(Trainer *t, const EvalIO *io, const Batch *b, const float **pred, int *anchors, const float **items, char *err, int errcap) {
    if (t->evcuda) {
        /* the plan's own step at its shape, else the rect shape's (opened at set-up) */
        const bool own = b->h == io->h && b->w == io->w;
        CudaShape *sh = own ? NULL : cuda_shapes_find(t->evcshapes, io->batch, b->h, b->w);
        if (!own && !sh) return errf(err, errcap, "no validation graph on the GPU for a %dx%d batch", b->h, b->w);
        CudaStep *cs = own ? t->evcuda : &sh->cs;
        const EvalIO *sio = own ? io : &sh->io;
        char why[1024];
        bool ok = (b->bytes ? cuda_step_set_images_u8(cs, sio->images, b->bytes, err, errcap) : cuda_step_set_input(cs, sio->images, b->images, err, errcap)) &&
                  cuda_step_set_input(cs, sio->boxes, b->boxes, err, errcap) && cuda_step_set_input(cs, sio->counts, b->counts, err, errcap);
        if (ok && !cuda_step_run(cs, 0, cs->plan->g.n_ops, why, sizeof why)) ok = errf(err, errcap, "validation on the GPU: %s", why);
        const int ids[] = {sio->pred, sio->items};
        void *const hosts[] = {t->evpred, t->evitems};
        ok = ok && cuda_step_download_many(cs, 2, ids, hosts, err, errcap);
        *pred = t->evpred, *items = t->evitems, *anchors = sio->anchors;
        return ok;
    }
    EvalGraph *eg = b->h == io->h && b->w == io->w ? &t->evg : eval_shapes_get(&t->evshapes, io->batch, b->h, b->w, err, errcap);
    if (!eg) return false;
    const EvalIO *gio = &eg->io;
    memcpy(eg->ev.buf[gio->images], b->images, sizeof(float) * (size_t)gio->batch * 3 * (size_t)gio->h * (size_t)gio->w);
    memcpy(eg->ev.buf[gio->boxes], b->boxes, sizeof(float) * (size_t)gio->batch * (size_t)gio->max_boxes * 5);
    memcpy(eg->ev.buf[gio->counts], b->counts, sizeof(int64_t) * (size_t)gio->batch);
    if (!eval_graph_run(eg, true, err, errcap)) return false;
    *items = eg->ev.buf[gio->items], *pred = eg->ev.buf[gio->pred], *anchors = gio->anchors;
    return true;
}

bool validate_pass(const ValPass *v, bool per_class, ValResult *out, char *err, int errcap) {
    memset(out, 0, sizeof *out);
    const int rows = v->nc + 4, ml = max_labels(v->split);
    MetricsAccumulator *acc = metrics_init(v->nc);
    const size_t max_det = v->nms.max_det > 0 ? (size_t)v->nms.max_det : 1;
    Detection *dets = malloc(sizeof(Detection) * max_det);
    float *gt = malloc(sizeof(float) * 4 * (size_t)ml);
    int *gcls = malloc(sizeof(int) * (size_t)ml);
    bool ok = false;
    ConfusionMatrix cm = {0};
    /* network-pixel detections of the images val_batch*_pred.jpg shows, max_det slots each */
    Detection *shown_buf = v->plots_dir ? malloc(sizeof(Detection) * max_det * BATCH_PLOT_MAX_IMAGES) : NULL, *shown[BATCH_PLOT_MAX_IMAGES];
    int n_shown[BATCH_PLOT_MAX_IMAGES] = {0};
    for (int i = 0; i < BATCH_PLOT_MAX_IMAGES; i++) shown[i] = shown_buf ? shown_buf + (size_t)i * max_det : NULL;
    if (!acc || !dets || !gt || !gcls || (v->plots_dir && (!shown_buf || !confusion_init(&cm, v->nc, v->nms.conf)))) {
        snprintf(err, (size_t)errcap, "out of memory");
        goto out;
    }
    if (!loader_start_epoch(v->loader, 0, false, 0, err, errcap)) goto out;
    int batches = 0;
    double loss[3] = {0};
    for (;;) {
        Batch b;
        err[0] = 0;
        if (!loader_next(v->loader, &b, err, errcap)) {
            if (err[0]) goto out;
            break;
        }
        const float *items, *pred;
        int A;
        if (!v->run(v->ctx, &b, &pred, &A, &items, err, errcap)) goto out;
        for (int k = 0; k < 3; k++) loss[k] += items[k];
        batches++;
        const bool plot_batch = v->plots_dir && batches <= 3; /* val_batch0..2 */
        for (int i = 0; i < b.n_valid; i++) {
            const ImageInfo *inf = &b.info[i];
            const float *p = pred + (size_t)i * (size_t)rows * (size_t)A;
            int n = v->end2end ? e2e_image(p, A, v->nc, v->nms.conf, v->nms.max_det, dets) : nms_image(p, A, v->nc, &v->nms, dets);
            if (n < 0) {
                snprintf(err, (size_t)errcap, "%s failed (out of memory)", v->end2end ? "selecting the end-to-end detections" : "non-maximum suppression");
                goto out;
            }
            if (plot_batch && i < BATCH_PLOT_MAX_IMAGES) {
                memcpy(shown[i], dets, sizeof *dets * (size_t)n);
                n_shown[i] = n;
            }
            metrics_dets_to_original(dets, n, inf->ratio, inf->pad_x, inf->pad_y, inf->orig_w, inf->orig_h);
            const Sample *s = &v->split->samples[inf->index];
            if (v->on_image && !v->on_image(v->image_ctx, s, dets, n, err, errcap)) goto out;
            gt_boxes(s, gt, gcls);
            /* NMS keeps classes below nc, so a failure here is a label's class (or no memory) */
            if (metrics_add_image(acc, dets, n, gt, gcls, s->n_labels) != 0) {
                snprintf(err, (size_t)errcap, "%s: a label class is outside the model's %d classes", s->image, v->nc);
                goto out;
            }
            if (v->plots_dir && !confusion_add_image(&cm, dets, n, gt, gcls, s->n_labels)) {
                snprintf(err, (size_t)errcap, "out of memory counting the confusion matrix");
                goto out;
            }
        }
        if (plot_batch && !plot_val_batch(v, &b, batches - 1, shown, n_shown, err, errcap)) goto out;
    }
    Metrics m;
    if (metrics_compute(acc, &m) != 0) {
        snprintf(err, (size_t)errcap, "out of memory computing metrics");
        goto out;
    }
    metrics_print(stdout, &m, (const char *const *)v->names, per_class);
    fflush(stdout);
    if (v->plots_dir && !report_val_plots(v->plots_dir, &m, &cm, (const char *const *)v->names, err, errcap)) {
        metrics_result_free(&m);
        goto out;
    }
    *out = (ValResult){m.mp, m.mr, m.map50, m.map50_95, m.fitness, {0}, (int)m.seen, (int)m.instances};
    for (int k = 0; k < 3; k++) out->loss[k] = batches ? loss[k] / batches : 0;
    metrics_result_free(&m);
    ok = true;
out:
    free(shown_buf);
    confusion_free(&cm);
    metrics_free(acc);
    free(dets);
    free(gt);
    free(gcls);
    return ok;
}

typedef struct TrainerEval {
    Trainer *t;
    EvalIO io;
} TrainerEval;

static bool trainer_eval_batch(void *ctx, const Batch *b, const float **pred, int *anchors, const float **items, char *err, int errcap) {
    TrainerEval *e = ctx;
    return eval_batch(e->t, &e->io, b, pred, anchors, items, err, errcap);
}

bool validate_run(Trainer *t, bool per_class, const char *plots_dir, ValResult *out, char *err, int errcap) {
    const Plan *ep = t->plan.eval;
    TrainerEval e = {.t = t};
    memset(out, 0, sizeof *out);
    if (!plan_eval_io(ep, &e.io) || e.io.h != e.io.w) return snprintf(err, (size_t)errcap, "%s: the validation graph's META is incomplete", t->a.plan), false;
    if (t->evcuda && !cuda_step_upload_state(t->evcuda, t->ev.buf, err, errcap)) return false; /* the EMA */
    ValPass v = {.loader = t->val_loader, .split = &t->ds.val, .names = t->ds.names, .nc = e.io.nc,
                 .end2end = e.io.end2end, .run = trainer_eval_batch, .ctx = &e, .nms = NMS_VALIDATION, .plots_dir = plots_dir, .imgsz = e.io.imgsz, .max_boxes = e.io.max_boxes};
    return validate_pass(&v, per_class, out, err, errcap);
}
