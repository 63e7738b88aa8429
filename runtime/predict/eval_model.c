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
#include "../safetensors.h"
#include "../target.h"
#include "../train_step_cuda.h"
#include "../weights.h"
#include "eval_shape.h"

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

static const Plan *active_plan(const EvalModel *m) { return m->variant ? m->variant : m->plan.eval; }

/* The CPU side of the active graph: the arena of the memory plan and the generated kernels, as the trainer's validation runs them. */
static bool open_cpu(EvalModel *m, bool reference, char *err, int errcap) {
    const Plan *ep = active_plan(m);
    if (ep->offset && (!interp_use_arena(&m->ev, ep->offset, ep->arena_bytes, false) || !interp_use_groups(&m->ev, &ep->fusion))) return errf(err, errcap, "out of memory");
    if (ep->kernels && !reference) {
        char why[400];
        if (!gen_cpu_open(&m->gen, ep, why, sizeof why)) return errf(err, errcap, "validation kernels: %s", why);
        m->has_gen = true;
        interp_use_generated(&m->ev, &m->gen);
    }
    /* a run without labels stops after the fusion group that makes the
     * predictions: the validation loss after it has no labels to score */
    int p = ep->g.tensors[m->io.pred].producer;
    m->pred_end = p + 1;
    for (int gi = 0; gi < ep->fusion.n_groups; gi++) {
        const FusionGroup *fg = &ep->fusion.groups[gi];
        if (p >= fg->first && p < fg->first + fg->n) m->pred_end = fg->first + fg->n;
    }
    return true;
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
    m->takes_bytes = m->cuda->kern.lp.images_u8 >= 0;
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
    /* host buffers for everything but activations: state, inputs, outputs (the CUDA side's host copies) */
    for (int id = 0; id < ep->g.n_tensors; id++)
        if (ep->g.tensors[id].kind != TK_ACTIVATION && !interp_tensor(&m->ev, id)) {
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
    m->ev.fast = !reference;
    m->reference = reference;
    if (ok && cuda) ok = open_cuda(m, err, errcap);
    if (!ok) eval_model_close(m);
    return ok;
}

bool eval_model_run(EvalModel *m, const uint8_t *px, const float *labels, const int64_t *label_counts, char *err, int errcap) {
    const Plan *ep = active_plan(m);
    if (!m->cuda && !m->opened && !(m->opened = open_cpu(m, m->reference, err, errcap))) return false;
    size_t n_px = (size_t)m->io.batch * 3 * (size_t)m->io.h * (size_t)m->io.w, n_boxes = (size_t)m->io.batch * (size_t)m->io.max_boxes * 5;
    float *boxes = m->ev.buf[m->io.boxes];
    int64_t *counts = m->ev.buf[m->io.counts];
    /* no labels: the graph's loss sees empty images */
    if (labels) memcpy(boxes, labels, sizeof(float) * n_boxes);
    else memset(boxes, 0, sizeof(float) * n_boxes);
    if (label_counts) memcpy(counts, label_counts, sizeof(int64_t) * (size_t)m->io.batch);
    else memset(counts, 0, sizeof(int64_t) * (size_t)m->io.batch);
    if (!m->takes_bytes) {
        float *im = m->ev.buf[m->io.images];
        for (size_t i = 0; i < n_px; i++) im[i] = (float)px[i] / 255.0f;
    }
    if (m->cuda) {
        char why[1024];
        bool ok = (m->takes_bytes ? cuda_step_set_images_u8(m->cuda, m->io.images, px, err, errcap) : cuda_step_set_input(m->cuda, m->io.images, m->ev.buf[m->io.images], err, errcap)) &&
                  cuda_step_set_input(m->cuda, m->io.boxes, boxes, err, errcap) && cuda_step_set_input(m->cuda, m->io.counts, counts, err, errcap);
        if (ok && !cuda_step_run(m->cuda, 0, ep->g.n_ops, why, sizeof why)) ok = errf(err, errcap, "the model on the GPU: %s", why);
        const int ids[] = {m->io.pred, m->io.items};
        void *const hosts[] = {m->pred, m->items};
        return ok && cuda_step_download_many(m->cuda, 2, ids, hosts, err, errcap);
    }
    const bool loss = labels || label_counts;
    if (!interp_run(&m->ev, 0, loss ? ep->g.n_ops : m->pred_end, err, errcap)) return false;
    memcpy(m->pred, m->ev.buf[m->io.pred], sizeof(float) * (size_t)shape_numel(&ep->g.tensors[m->io.pred].shape));
    if (loss) memcpy(m->items, m->ev.buf[m->io.items], sizeof m->items);
    else m->items[0] = m->items[1] = m->items[2] = NAN;
    return true;
}

static void shape_close(EvalShape *e) {
    if (e->has_gen) gen_cpu_close(&e->gen);
    if (e->ev.g) interp_free(&e->ev);
    free(e->pred);
    if (e->variant) plan_free(e->variant);
    free(e->variant);
}

static EvalShape stash(const EvalModel *m) { return (EvalShape){m->variant, m->ev, m->gen, m->has_gen, m->io, m->pred, m->pred_end, m->opened}; }

static void restore(EvalModel *m, const EvalShape *e) {
    m->variant = e->variant, m->ev = e->ev, m->gen = e->gen, m->has_gen = e->has_gen, m->io = e->io, m->pred = e->pred, m->pred_end = e->pred_end, m->opened = e->opened;
    if (m->has_gen) interp_use_generated(&m->ev, &m->gen); /* it points at EvalModel.gen, which now holds this shape's */
}

/* Opens train's validation graph at a new shape as the active one; it reads
 * the plan's own parameters and buffers (m->state), which it must name alike. */
static bool open_shape(EvalModel *m, int batch, int h, int w, char *err, int errcap) {
    const Graph *own = &m->plan.eval->g;
    /* the caller keeps the active shape's fields; what fails from here is closed as this shape's */
    *m = (EvalModel){.plan = m->plan, .names = m->names, .items = {NAN, NAN, NAN}, .reference = m->reference, .state = m->state, .shapes = m->shapes, .n_shapes = m->n_shapes};
    Plan *vp = calloc(1, sizeof *vp);
    if (!vp) return errf(err, errcap, "out of memory");
    if (!eval_plan_at_shape(&m->plan, batch, h, w, vp, err, errcap)) return free(vp), false;
    m->variant = vp;
    const Graph *g = &vp->g;
    bool ok = g->n_state == own->n_state;
    for (int i = 0; ok && i < g->n_state; i++) {
        const Tensor *a = &g->tensors[g->state[i]], *b = &own->tensors[own->state[i]];
        ok = a->name && b->name && strcmp(a->name, b->name) == 0 && shape_eq(&a->shape, &b->shape) && a->kind == b->kind;
    }
    if (!ok) return errf(err, errcap, "the validation graph at %dx%d has other parameters than the plan's own", h, w);
    if (!plan_eval_io(vp, &m->io) || m->io.batch != batch || m->io.h != h || m->io.w != w) return errf(err, errcap, "the validation graph at %dx%d has unexpected inputs", h, w);
    if (!interp_init(&m->ev, g) || !(m->pred = malloc(sizeof(float) * (size_t)shape_numel(&g->tensors[m->io.pred].shape)))) return errf(err, errcap, "out of memory");
    for (int i = 0; i < g->n_state; i++) m->ev.buf[g->state[i]] = m->state[i];
    for (int id = 0; id < g->n_tensors; id++)
        if (g->tensors[id].kind != TK_ACTIVATION && !interp_tensor(&m->ev, id)) return errf(err, errcap, "out of memory");
    m->ev.fast = !m->reference;
    return (m->opened = open_cpu(m, m->reference, err, errcap));
}

bool eval_model_shape(EvalModel *m, int batch, int h, int w, char *err, int errcap) {
    if (m->io.batch == batch && m->io.h == h && m->io.w == w) return true;
    if (m->cuda) return errf(err, errcap, "a CUDA plan runs at its own shape (%dx%d, batch %d), not %dx%d, batch %d", m->io.h, m->io.w, m->io.batch, h, w, batch);
    EvalShape *grown = realloc(m->shapes, sizeof *grown * (size_t)(m->n_shapes + 1));
    if (!grown) return errf(err, errcap, "out of memory");
    m->shapes = grown;
    const EvalShape cur = stash(m);
    for (int i = 0; i < m->n_shapes; i++)
        if (m->shapes[i].io.batch == batch && m->shapes[i].io.h == h && m->shapes[i].io.w == w) {
            restore(m, &m->shapes[i]);
            m->shapes[i] = cur;
            return true;
        }
    if (open_shape(m, batch, h, w, err, errcap)) {
        m->shapes[m->n_shapes++] = cur;
        return true;
    }
    EvalShape failed = stash(m);
    shape_close(&failed);
    restore(m, &cur);
    return false;
}

void eval_model_close(EvalModel *m) {
    if (m->cuda) {
        cuda_step_close(m->cuda);
        free(m->cuda);
    }
    for (int c = 0; m->names && c < m->io.nc; c++) free(m->names[c]);
    free(m->names);
    for (int i = 0; i < m->n_shapes; i++) shape_close(&m->shapes[i]);
    free(m->shapes);
    EvalShape cur = stash(m);
    shape_close(&cur);
    free(m->state);
    plan_free(&m->plan);
    memset(m, 0, sizeof *m);
}
