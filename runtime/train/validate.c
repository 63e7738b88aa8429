/* runtime/train/validate.c — one validation pass (training-semantics §8.1):
 * the plan's eval graph on the EMA weights over the val split, NMS (or an
 * end-to-end head's top-k selection), boxes mapped back to original pixels,
 * mAP, and the validation losses. Must not touch: the training step, the
 * EMA's values, files. */
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../cuda/cuda_step.h"
#include "metrics.h"
#include "trainer.h"

typedef struct EvalIO {
    int images, boxes, counts, pred, items;
    bool end2end; /* a v10Detect head: its own top-k selection instead of NMS */
} EvalIO;

static bool eval_io(const Plan *ep, EvalIO *io) {
    io->images = plan_meta_tensor(ep, "inputs", "images");
    io->boxes = plan_meta_tensor(ep, "inputs", "boxes");
    io->counts = plan_meta_tensor(ep, "inputs", "counts");
    io->pred = plan_meta_tensor(ep, "outputs", "predictions");
    io->items = plan_meta_tensor(ep, "outputs", "items");
    io->end2end = cJSON_IsTrue(cJSON_GetObjectItem(ep->meta, "end2end"));
    if (io->images < 0 || io->boxes < 0 || io->counts < 0 || io->pred < 0 || io->items < 0) return false;
    const Shape *p = &ep->g.tensors[io->pred].shape;
    return p->nd == 3 && ep->g.tensors[io->images].shape.nd == 4 && p->d[0] == ep->g.tensors[io->images].shape.d[0];
}

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

static int max_labels(const DataSplit *s) {
    int m = 1;
    for (int i = 0; i < s->n; i++) m = s->samples[i].n_labels > m ? s->samples[i].n_labels : m;
    return m;
}

/* One batch through the validation graph: on the device for a CUDA plan
 * (the EMA uploaded once per pass), else on the interpreter. */
static bool eval_batch(Trainer *t, const EvalIO *io, const Batch *b, int B, int S, int max_boxes, const float **pred, const float **items, char *err,
                       int errcap) {
    const Plan *ep = t->plan.eval;
    if (t->evcuda) {
        char why[1024];
        bool ok = (b->bytes ? cuda_step_set_images_u8(t->evcuda, io->images, b->bytes, err, errcap) : cuda_step_set_input(t->evcuda, io->images, b->images, err, errcap)) &&
                  cuda_step_set_input(t->evcuda, io->boxes, b->boxes, err, errcap) &&
                  cuda_step_set_input(t->evcuda, io->counts, b->counts, err, errcap);
        if (ok && !cuda_step_run(t->evcuda, 0, ep->g.n_ops, why, sizeof why)) ok = errf(err, errcap, "validation on the GPU: %s", why);
        ok = ok && cuda_step_download(t->evcuda, io->pred, t->evpred, err, errcap) && cuda_step_download(t->evcuda, io->items, t->evitems, err, errcap);
        *pred = t->evpred, *items = t->evitems;
        return ok;
    }
    memcpy(t->ev.buf[io->images], b->images, sizeof(float) * (size_t)B * 3 * (size_t)S * (size_t)S);
    memcpy(t->ev.buf[io->boxes], b->boxes, sizeof(float) * (size_t)B * (size_t)max_boxes * 5);
    memcpy(t->ev.buf[io->counts], b->counts, sizeof(int64_t) * (size_t)B);
    if (!interp_run(&t->ev, 0, ep->g.n_ops, err, errcap)) return false;
    *items = t->ev.buf[io->items], *pred = t->ev.buf[io->pred];
    return true;
}

bool validate_run(Trainer *t, bool per_class, ValResult *out, char *err, int errcap) {
    const Plan *ep = t->plan.eval;
    EvalIO io;
    memset(out, 0, sizeof *out);
    if (!eval_io(ep, &io)) return snprintf(err, (size_t)errcap, "%s: the validation graph's META is incomplete", t->a.plan), false;
    const Shape *ps = &ep->g.tensors[io.pred].shape;
    int B = (int)ps->d[0], rows = (int)ps->d[1], A = (int)ps->d[2], nc = rows - 4, S = (int)ep->g.tensors[io.images].shape.d[2];
    int max_boxes = (int)ep->g.tensors[io.boxes].shape.d[1], ml = max_labels(&t->ds.val);
    MetricsAccumulator *acc = metrics_init(nc);
    Detection *dets = malloc(sizeof(Detection) * 300);
    float *gt = malloc(sizeof(float) * 4 * (size_t)ml);
    int *gcls = malloc(sizeof(int) * (size_t)ml);
    bool ok = false;
    if (!acc || !dets || !gt || !gcls) {
        snprintf(err, (size_t)errcap, "out of memory");
        goto out;
    }
    if (!loader_start_epoch(t->val_loader, 0, false, 0, err, errcap)) goto out;
    if (t->evcuda && !cuda_step_upload_state(t->evcuda, t->ev.buf, err, errcap)) goto out; /* the EMA */
    int batches = 0;
    double loss[3] = {0};
    for (;;) {
        Batch b;
        err[0] = 0;
        if (!loader_next(t->val_loader, &b, err, errcap)) {
            if (err[0]) goto out;
            break;
        }
        const float *items, *pred;
        if (!eval_batch(t, &io, &b, B, S, max_boxes, &pred, &items, err, errcap)) goto out;
        for (int k = 0; k < 3; k++) loss[k] += items[k];
        batches++;
        for (int i = 0; i < b.n_valid; i++) {
            const ImageInfo *inf = &b.info[i];
            const float *p = pred + (size_t)i * (size_t)rows * (size_t)A;
            int n = io.end2end ? e2e_image(p, A, nc, 0.001, 300, dets) : nms_image(p, A, nc, 0.001, 0.7, true, 300, dets);
            if (n < 0) {
                snprintf(err, (size_t)errcap, "%s failed (out of memory)", io.end2end ? "selecting the end-to-end detections" : "non-maximum suppression");
                goto out;
            }
            metrics_dets_to_original(dets, n, inf->ratio, inf->pad_x, inf->pad_y, inf->orig_w, inf->orig_h);
            const Sample *s = &t->ds.val.samples[inf->index];
            gt_boxes(s, gt, gcls);
            if (metrics_add_image(acc, dets, n, gt, gcls, s->n_labels) != 0) {
                snprintf(err, (size_t)errcap, "%s: a label class is outside the model's %d classes", s->image, nc);
                goto out;
            }
        }
    }
    Metrics m;
    if (metrics_compute(acc, &m) != 0) {
        snprintf(err, (size_t)errcap, "out of memory computing metrics");
        goto out;
    }
    metrics_print(stdout, &m, (const char *const *)t->ds.names, per_class);
    fflush(stdout);
    *out = (ValResult){m.mp, m.mr, m.map50, m.map50_95, m.fitness, {0}, (int)m.seen, (int)m.instances};
    for (int k = 0; k < 3; k++) out->loss[k] = batches ? loss[k] / batches : 0;
    metrics_result_free(&m);
    ok = true;
out:
    metrics_free(acc);
    free(dets);
    free(gt);
    free(gcls);
    return ok;
}
