/* runtime/predict/eval_shape.c — a validation graph opened on the CPU, and
 * the graph at another input shape: META's model YAML through the
 * compiler's own front end and passes (compile_eval), encoded and parsed
 * back as a plan, then opened like the plan's own. */
#include "eval_shape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/plan_write.h"
#include "../../compiler/train_compile.h"
#include "../../ir/diag.h"

/* The largest of META's strides, and at least 32 (0 strides: 32). */
static int meta_max_stride(const cJSON *m, double *strides, int *n) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(m, "strides");
    double top = 32;
    *n = cJSON_IsArray(st) ? cJSON_GetArraySize(st) : 0;
    if (*n > IR_MAX_LEVELS) *n = 0;
    for (int i = 0; i < *n; i++) {
        strides[i] = cJSON_GetNumberValue(cJSON_GetArrayItem(st, i));
        if (!(strides[i] >= 1 && strides[i] <= 4096)) *n = 0;
        else top = fmax(top, strides[i]);
    }
    return *n ? (int)top : 32;
}

int eval_plan_stride(const Plan *train) {
    double st[IR_MAX_LEVELS];
    int n;
    return meta_max_stride(train->meta, st, &n);
}

static const char *meta_string(const cJSON *m, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, key));
    return s ? s : "";
}

bool eval_plan_at_shape(const Plan *train, int batch, int h, int w, Plan *out, char *err, int errcap) {
    memset(out, 0, sizeof *out);
    const cJSON *m = train->meta;
    const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "model_yaml"));
    if (!src) return errf(err, errcap, "the plan does not carry its model YAML (compiled by an older yolocc); recompile it for other input shapes");
    if (!train->eval) return errf(err, errcap, "the plan has no validation graph");
    double strides[IR_MAX_LEVELS];
    int n;
    const int gs = meta_max_stride(m, strides, &n);
    if (n < 1) return errf(err, errcap, "the plan's META has no strides");
    if (batch < 1 || h < gs || w < gs || h % gs || w % gs || h > 8192 || w > 8192)
        return errf(err, errcap, "input shape %dx%d (batch %d): height and width must be multiples of the stride %d up to 8192", h, w, batch, gs);
    const char *scale = meta_string(m, "scale");
    TrainOptions o = {.max_boxes = (int)cjson_number(m, "max_boxes", 0), .precision = train->precision,
                      .fuse = strcmp(meta_string(m, "fuse"), fuse_policy_name(FUSE_FULL)) == 0 ? FUSE_FULL : FUSE_NONE,
                      .channels_last = strcmp(meta_string(m, "layout"), "nhwc") == 0};
    /* the validation loss at every shape with the plan's own gains */
    if (!plan_loss_gains(train->eval, o.gains)) return errf(err, errcap, "the plan's validation graph has no detection loss");
    ModelOptions mo = {.scale = scale[0] ? scale : NULL, .nc = (int64_t)cjson_number(m, "nc", 0)};
    Arena a;
    arena_init(&a, (size_t)1 << 32);
    Diag d;
    diag_init(&d, meta_string(m, "file"));
    ModelConfig cfg;
    EvalCompiled ec;
    memset(&ec, 0, sizeof ec);
    bool ok = model_cfg_parse(&a, meta_string(m, "file"), src, strlen(src), &mo, &cfg, &d) && compile_eval(&a, &cfg, &o, strides, n, batch, h, w, &ec, &d);
    if (!ok) {
        char msg[1400];
        diag_format(&d, msg, sizeof msg);
        errf(err, errcap, "the validation graph at %dx%d: %s", h, w, msg);
    } else {
        unsigned char *buf = NULL;
        size_t len = 0;
        PlanPart part = {&ec.em.g, &ec.emp, &ec.efu, ec.meta_json, train->eval->kernels, train->eval->kernels_len};
        char why[400];
        ok = plan_encode_bytes(&part, &buf, &len, why, sizeof why) && plan_parse(buf, len, out, why, sizeof why);
        if (!ok) {
            plan_free(out);
            errf(err, errcap, "the validation graph at %dx%d: %s", h, w, why);
        }
        free(buf);
    }
    eval_compiled_free(&ec);
    arena_free(&a);
    return ok;
}

/* Per op of g: whether tensor t can be made without it (calloc'd). An op is needed when an output is read by a needed op or
 * is t; with generated kernels kp, every op of a launch with a needed op is
 * needed too (the launch runs whole), and what those read, to a fixpoint. */
static bool *ops_for(const Graph *g, const KProgram *kp, int t) {
    bool *need_t = calloc((size_t)g->n_tensors + 1, 1), *need = calloc((size_t)g->n_ops + 1, 1);
    if (!need_t || !need) return free(need_t), free(need), NULL;
    need_t[t] = true;
    for (bool grew = true; grew;) {
        grew = false;
        for (int o = g->n_ops - 1; o >= 0; o--) {
            const Op *op = &g->ops[o];
            bool n = need[o];
            for (int i = 0; !n && i < op->n_out; i++) n = need_t[op->out[i]];
            if (!n) continue;
            grew |= !need[o];
            need[o] = true;
            for (int i = 0; i < op->n_in; i++) need_t[op->in[i]] = true;
        }
        for (int l = 0; kp && l < kp->n_launches; l++) {
            const KLaunch *ln = &kp->launches[l];
            bool any = false;
            for (int o = ln->op_lo; o <= ln->op_hi && !any; o++) any = need[o];
            for (int o = ln->op_lo; any && o <= ln->op_hi; o++) {
                grew |= !need[o];
                need[o] = true;
            }
        }
    }
    free(need_t);
    for (int o = 0; o < g->n_ops; o++) need[o] = !need[o];
    return need;
}

bool eval_graph_open(EvalGraph *eg, const Plan *ep, void *const *state, bool reference, bool fold, char *err, int errcap) {
    Plan *own = eg->own;
    *eg = (EvalGraph){.plan = ep, .own = own};
    const Graph *g = &ep->g;
    if (!plan_eval_io(ep, &eg->io)) return errf(err, errcap, "the validation graph's META is incomplete or its inputs have unexpected shapes");
    if (!interp_init(&eg->ev, g)) return errf(err, errcap, "out of memory");
    eg->ev.fast = !reference;
    for (int i = 0; state && i < g->n_state; i++) eg->ev.buf[g->state[i]] = state[i];
    for (int id = 0; id < g->n_tensors; id++)
        if (g->tensors[id].kind != TK_ACTIVATION && !interp_tensor(&eg->ev, id)) return errf(err, errcap, "out of memory");
    if (ep->offset && (!interp_use_arena(&eg->ev, ep->offset, ep->arena_bytes, false) || !interp_use_groups(&eg->ev, &ep->fusion))) return errf(err, errcap, "out of memory");
    if (ep->kernels && !reference) {
        char why[400];
        if (!gen_cpu_open(&eg->gen, ep, why, sizeof why)) return errf(err, errcap, "validation kernels: %s", why);
        eg->has_gen = true;
        interp_use_generated(&eg->ev, &eg->gen);
    }
    if (fold && !reference) {
        if (!cpu_fold_build(&eg->fold, g, &ep->fusion, eg->ev.views, eg->has_gen ? &eg->gen.kp : NULL, eg->ev.buf, err, errcap)) return false;
        eg->ev.fold = &eg->fold;
    }
    /* a run without labels stops after the fusion group that makes the
     * predictions: the validation loss after it has no labels to score */
    if (!(eg->skip_pred = ops_for(g, eg->has_gen ? &eg->gen.kp : NULL, eg->io.pred))) return errf(err, errcap, "out of memory");
    const int p = g->tensors[eg->io.pred].producer;
    eg->pred_end = p + 1;
    for (int gi = 0; gi < ep->fusion.n_groups; gi++) {
        const FusionGroup *fg = &ep->fusion.groups[gi];
        if (p >= fg->first && p < fg->first + fg->n) eg->pred_end = fg->first + fg->n;
    }
    return true;
}

bool eval_graph_run(EvalGraph *eg, bool loss, char *err, int errcap) {
    eg->ev.skip = loss ? NULL : eg->skip_pred;
    const bool ok = interp_run(&eg->ev, 0, loss ? eg->plan->g.n_ops : eg->pred_end, err, errcap);
    eg->ev.skip = NULL;
    return ok;
}

void eval_graph_close(EvalGraph *eg) {
    free(eg->skip_pred);
    cpu_fold_free(&eg->fold);
    if (eg->has_gen) gen_cpu_close(&eg->gen);
    if (eg->ev.g) interp_free(&eg->ev);
    if (eg->own) plan_free(eg->own);
    free(eg->own);
    memset(eg, 0, sizeof *eg);
}

/* Opens train's model at a new shape; its parameters and buffers must be
 * those of the plan's own validation graph, name for name. */
static bool open_shape(const EvalShapes *s, EvalGraph *eg, int batch, int h, int w, char *err, int errcap) {
    if (!(eg->own = calloc(1, sizeof *eg->own))) return errf(err, errcap, "out of memory");
    if (!eval_plan_at_shape(s->train, batch, h, w, eg->own, err, errcap)) return false;
    if (graph_state_differs(&eg->own->g, &s->train->eval->g) >= 0) return errf(err, errcap, "the validation graph at %dx%d has other parameters than the plan's own", h, w);
    char why[600];
    if (!eval_graph_open(eg, eg->own, s->state, s->reference, s->fold, why, sizeof why)) return errf(err, errcap, "the validation graph at %dx%d: %s", h, w, why);
    if (eg->io.batch != batch || eg->io.h != h || eg->io.w != w) return errf(err, errcap, "the validation graph at %dx%d has unexpected inputs", h, w);
    return true;
}

/* eg becomes the one graph holding an arena */
static EvalGraph *hold_arena(EvalShapes *s, EvalGraph *eg, char *err, int errcap) {
    if (s->last && s->last != eg) interp_arena_release(&s->last->ev);
    s->last = eg;
    if (!interp_arena_restore(&eg->ev, eg->plan->offset)) return errf(err, errcap, "out of memory for the validation arena at %dx%d", eg->io.h, eg->io.w), NULL;
    return eg;
}

EvalGraph *eval_shapes_get(EvalShapes *s, int batch, int h, int w, char *err, int errcap) {
    for (int i = 0; i < s->n; i++)
        if (s->g[i]->io.batch == batch && s->g[i]->io.h == h && s->g[i]->io.w == w) return hold_arena(s, s->g[i], err, errcap);
    if (s->last) interp_arena_release(&s->last->ev), s->last = NULL; /* before the new graph makes its own */
    EvalGraph **grown = realloc(s->g, sizeof *grown * (size_t)(s->n + 1)), *eg = calloc(1, sizeof *eg);
    if (grown) s->g = grown;
    if (!grown || !eg) return free(eg), errf(err, errcap, "out of memory"), NULL;
    if (!open_shape(s, eg, batch, h, w, err, errcap)) {
        eval_graph_close(eg);
        free(eg);
        return NULL;
    }
    return s->last = s->g[s->n++] = eg;
}

int64_t eval_shapes_host_bytes(const EvalShapes *s) {
    int64_t own = 0, arena = 0;
    for (int i = 0; i < s->n; i++) {
        const Interp *it = &s->g[i]->ev;
        own += interp_host_bytes(it) - (it->arena ? it->arena_bytes : 0);
        if (it->arena_bytes > arena) arena = it->arena_bytes;
    }
    return own + arena;
}

void eval_shapes_free(EvalShapes *s) {
    for (int i = 0; i < s->n; i++) {
        eval_graph_close(s->g[i]);
        free(s->g[i]);
    }
    free(s->g);
    s->g = NULL, s->n = 0, s->last = NULL;
}
