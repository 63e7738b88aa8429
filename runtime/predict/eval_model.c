/* runtime/predict/eval_model.c — a plan's validation graph with loaded
 * weights, run batch by batch for `yolort predict` and `yolort val`. Must
 * not touch the training step (it is never opened here), images or NMS. */
#include "eval_model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../cuda/cuda_step.h"
#include "eval_shape_cuda.h"
#include "../safetensors.h"
#include "../target.h"
#include "../train_step_cuda.h"
#include "../weights.h"

/* The class names a weights file carries (yolort train writes them, like
 * Ultralytics' checkpoints); else Ultralytics' default names class0, class1, ... */
static char **metadata_names(const StFile *f, int nc) {
    char **names = calloc((size_t)nc, sizeof *names);
    if (!names) return NULL;
    cJSON *arr = NULL;
    for (int i = 0; i < f->n_meta && !arr; i++)
        if (strcmp(f->meta_keys[i], "names") == 0) arr = cJSON_Parse(f->meta_values[i]);
    bool named = cJSON_IsArray(arr) && cJSON_GetArraySize(arr) == nc, ok = true;
    for (int c = 0; c < nc; c++) {
        const char *v = named ? cJSON_GetStringValue(cJSON_GetArrayItem(arr, c)) : NULL;
        char buf[32];
        snprintf(buf, sizeof buf, "class%d", c);
        ok = (names[c] = strdup(v ? v : buf)) != NULL && ok;
    }
    cJSON_Delete(arr);
    if (ok) return names;
    for (int c = 0; c < nc; c++) free(names[c]);
    free(names);
    return NULL;
}

static bool open_cuda(EvalModel *m, char *err, int errcap) {
    const Plan *ep = m->plan.eval;
    if (!(m->cuda = calloc(1, sizeof *m->cuda))) return errf(err, errcap, "out of memory");
    char why[1024];
    if (!cuda_step_open(m->cuda, ep, 0, why, sizeof why)) {
        free(m->cuda);
        m->cuda = NULL;
        return errf(err, errcap, "CUDA device 0: %s", why);
    }
    m->cuda_active = m->cuda;
    if (!(m->cuda_shapes = calloc(1, sizeof *m->cuda_shapes))) return errf(err, errcap, "out of memory");
    *m->cuda_shapes = (CudaShapes){.train = &m->plan, .own = m->cuda};
    return cuda_step_use_graphs(m->cuda, cuda_step_graphs_wanted(m->cuda), err, errcap) && cuda_step_upload_state(m->cuda, m->ev.buf, err, errcap);
}

bool eval_model_load(EvalModel *m, const char *plan, const char *weights, char *report, int reportcap, char *err, int errcap) {
    memset(m, 0, sizeof *m);
    char why[1024];
    if (!plan_read(plan, &m->plan, why, sizeof why)) return errf(err, errcap, "%s", why);
    bool ok = false;
    const Plan *ep = m->plan.eval;
    if (!ep) {
        errf(err, errcap, "%s: the plan has no validation graph; recompile it with this yolocc", plan);
        goto out;
    }
    if (!plan_eval_io(ep, &m->io) || m->io.h != m->io.w) {
        errf(err, errcap, "%s: the validation graph's META is incomplete or its inputs have unexpected shapes", plan);
        goto out;
    }
    if (!interp_init(&m->ev, &ep->g) || !(m->pred = malloc(sizeof(float) * (size_t)shape_numel(&ep->g.tensors[m->io.pred].shape)))) {
        errf(err, errcap, "out of memory");
        goto out;
    }
    /* host buffers for the weights; the CPU graphs have their own inputs, a CUDA plan uploads from the caller's */
    for (int id = 0; id < ep->g.n_tensors; id++)
        if ((ep->g.tensors[id].kind == TK_PARAM || ep->g.tensors[id].kind == TK_BUFFER) && !interp_tensor(&m->ev, id)) {
            errf(err, errcap, "out of memory");
            goto out;
        }
    StFile f;
    if (!st_read(weights, &f, err, errcap)) goto out;
    WeightsLoadReport rep;
    bool loaded = weights_load_parsed(&ep->g, m->ev.buf, &f, weights, NULL, &rep, err, errcap);
    m->names = loaded ? metadata_names(&f, m->io.nc) : NULL;
    st_free(&f);
    if (!loaded) goto out;
    if (!m->names) {
        errf(err, errcap, "out of memory");
        goto out;
    }
    weights_report_format(&rep, report, reportcap);
    if (!(m->state = calloc((size_t)ep->g.n_state + 1, sizeof *m->state))) {
        errf(err, errcap, "out of memory");
        goto out;
    }
    for (int i = 0; i < ep->g.n_state; i++) m->state[i] = m->ev.buf[ep->g.state[i]];
    m->own_io = m->io;
    m->shapes = (EvalShapes){.train = &m->plan, .state = m->state};
    if (rep.matched != rep.total) {
        errf(err, errcap, "%s: %s; predictions need every parameter and buffer of the model (is it this plan's model?)", weights, report);
        goto out;
    }
    ok = true;
out:
    if (!ok) eval_model_close(m);
    return ok;
}

bool eval_model_open(EvalModel *m, const char *plan, const char *weights, bool reference, char *report, int reportcap, char *err, int errcap) {
    if (!eval_model_load(m, plan, weights, report, reportcap, err, errcap)) return false;
    bool cuda = plan_targets_cuda(&m->plan), ok = target_prepare(m->plan.meta, err, errcap);
    if (ok && !cuda && m->plan.precision != PREC_FP32)
        ok = errf(err, errcap, "%s: a %s plan needs the CUDA target; the CPU runs fp32 plans (compile with --precision fp32)", plan, precision_name(m->plan.precision));
    m->reference = m->shapes.reference = reference;
    /* as Ultralytics' predictor and validator fuse a .pt model's conv-BN pairs */
    m->shapes.fold = !reference;
    m->active = &m->own;
    if (ok && cuda) ok = open_cuda(m, err, errcap);
    if (!ok) eval_model_close(m);
    return ok;
}

/* One batch on the device step of the active shape: labels (or none) and
 * pixels uploaded from the caller's arrays, predictions and loss items back. */
static bool run_cuda(EvalModel *m, const uint8_t *px, const float *labels, const int64_t *label_counts, char *err, int errcap) {
    CudaStep *cs = m->cuda_active;
    const EvalIO *io = &m->io;
    const size_t n_px = (size_t)io->batch * 3 * (size_t)io->h * (size_t)io->w, n_boxes = (size_t)io->batch * (size_t)io->max_boxes * 5;
    if (!labels || !label_counts) {
        /* no labels: the graph's loss sees empty images (the counts first, so both stay aligned) */
        const size_t bytes = sizeof(int64_t) * (size_t)io->batch + sizeof(float) * n_boxes;
        int64_t *z = realloc(m->zeros, bytes);
        if (!z) return errf(err, errcap, "out of memory");
        memset(z, 0, bytes);
        m->zeros = z;
    }
    const float *boxes = labels ? labels : (const float *)(m->zeros + io->batch);
    const int64_t *counts = label_counts ? label_counts : m->zeros;
    bool ok;
    if (cs->kern.lp.images_u8 >= 0) {
        ok = cuda_step_set_images_u8(cs, io->images, px, err, errcap);
    } else {
        float *im = malloc(sizeof(float) * n_px);
        if (!im) return errf(err, errcap, "out of memory");
        for (size_t i = 0; i < n_px; i++) im[i] = (float)px[i] / 255.0f;
        ok = cuda_step_set_input(cs, io->images, im, err, errcap);
        free(im);
    }
    ok = ok && cuda_step_set_input(cs, io->boxes, boxes, err, errcap) && cuda_step_set_input(cs, io->counts, counts, err, errcap);
    char why[1024];
    if (ok && !cuda_step_run(cs, 0, cs->plan->g.n_ops, why, sizeof why)) ok = errf(err, errcap, "the model on the GPU: %s", why);
    const int ids[] = {io->pred, io->items};
    void *const hosts[] = {m->pred, m->items};
    return ok && cuda_step_download_many(cs, 2, ids, hosts, err, errcap);
}

bool eval_model_run(EvalModel *m, const uint8_t *px, const float *labels, const int64_t *label_counts, char *err, int errcap) {
    if (m->cuda) return run_cuda(m, px, labels, label_counts, err, errcap);
    EvalGraph *eg = m->active;
    if (eg == &m->own && !m->own_open) {
        if (!eval_graph_open(&m->own, m->plan.eval, m->state, m->reference, true, err, errcap)) return eval_graph_close(&m->own), false;
        m->own_open = true;
    }
    void *const *buf = eg->ev.buf;
    size_t n_px = (size_t)m->io.batch * 3 * (size_t)m->io.h * (size_t)m->io.w, n_boxes = (size_t)m->io.batch * (size_t)m->io.max_boxes * 5;
    float *boxes = buf[m->io.boxes];
    int64_t *counts = buf[m->io.counts];
    /* no labels: the graph's loss sees empty images */
    if (labels) memcpy(boxes, labels, sizeof(float) * n_boxes);
    else memset(boxes, 0, sizeof(float) * n_boxes);
    if (label_counts) memcpy(counts, label_counts, sizeof(int64_t) * (size_t)m->io.batch);
    else memset(counts, 0, sizeof(int64_t) * (size_t)m->io.batch);
    float *im = buf[m->io.images];
    for (size_t i = 0; i < n_px; i++) im[i] = (float)px[i] / 255.0f;
    const bool loss = labels || label_counts;
    if (!eval_graph_run(eg, loss, err, errcap)) return false;
    memcpy(m->pred, eg->ev.buf[m->io.pred], sizeof(float) * (size_t)shape_numel(&eg->plan->g.tensors[m->io.pred].shape));
    if (loss) memcpy(m->items, eg->ev.buf[m->io.items], sizeof m->items);
    else m->items[0] = m->items[1] = m->items[2] = NAN;
    return true;
}

/* m->pred sized for io, which becomes m->io */
static bool take_io(EvalModel *m, const EvalIO *io, char *err, int errcap) {
    float *pred = realloc(m->pred, sizeof(float) * (size_t)io->batch * (size_t)(4 + io->nc) * (size_t)io->anchors);
    if (!pred) return errf(err, errcap, "out of memory");
    m->pred = pred, m->io = *io;
    return true;
}

bool eval_model_shape(EvalModel *m, int batch, int h, int w, char *err, int errcap) {
    if (m->io.batch == batch && m->io.h == h && m->io.w == w) return true;
    const bool own = m->own_io.batch == batch && m->own_io.h == h && m->own_io.w == w;
    if (m->cuda) {
        CudaShape *sh = own ? NULL : cuda_shapes_find(m->cuda_shapes, batch, h, w);
        const int hw[1][2] = {{h, w}};
        if (!own && !sh && (!cuda_shapes_open(m->cuda_shapes, batch, 1, hw, err, errcap) || !(sh = cuda_shapes_find(m->cuda_shapes, batch, h, w)))) return false;
        if (!take_io(m, own ? &m->own_io : &sh->io, err, errcap)) return false;
        m->cuda_active = own ? m->cuda : &sh->cs;
        return true;
    }
    EvalGraph *eg = own ? &m->own : eval_shapes_get(&m->shapes, batch, h, w, err, errcap);
    if (!eg || !take_io(m, own ? &m->own_io : &eg->io, err, errcap)) return false;
    m->active = eg;
    return true;
}

bool eval_model_prepare_shapes(EvalModel *m, int batch, int n, const int (*hw)[2], char *err, int errcap) {
    return !m->cuda || cuda_shapes_open(m->cuda_shapes, batch, n, hw, err, errcap);
}

void eval_model_close(EvalModel *m) {
    if (m->cuda_shapes) cuda_shapes_close(m->cuda_shapes);
    free(m->cuda_shapes);
    free(m->zeros);
    if (m->cuda) {
        cuda_step_close(m->cuda);
        free(m->cuda);
    }
    for (int c = 0; m->names && c < m->io.nc; c++) free(m->names[c]);
    free(m->names);
    eval_shapes_free(&m->shapes);
    eval_graph_close(&m->own);
    if (m->ev.g) interp_free(&m->ev);
    free(m->pred);
    free(m->state);
    plan_free(&m->plan);
    memset(m, 0, sizeof *m);
}
