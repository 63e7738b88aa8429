/* runtime/cuda/cuda_train_step.c — the training step of a CudaStep: the plan's step inputs and
 * outputs bound from META, fp16 dynamic loss scaling around the optimizer (unscale, clip, the
 * decision, skipped updates) and frozen parameters' updates left out. Runs ops only through
 * cuda_step_run; must not launch, transfer or allocate by itself. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../../passes/optimizer.h"
#include "cuda_step.h"

enum { WHY = 1536 };

bool cuda_step_decide(LossScale *ls, float grad_norm, int clip_op, int n_ops, int *update_lo, int *update_hi) {
    bool apply = loss_scale_update(ls, isfinite(grad_norm));
    *update_lo = apply ? clip_op + 1 : n_ops;
    *update_hi = n_ops;
    return apply;
}

bool cuda_step_train_init(CudaStep *cs, char *err, int errcap) {
    const Plan *p = cs->plan;
    const Graph *g = &p->g;
    cs->clip_op = -1;
    for (int o = 0; o < g->n_ops && cs->clip_op < 0; o++)
        if (g->ops[o].kind == OP_GRAD_CLIP) cs->clip_op = o;
    if (cs->clip_op < 0) return errf(err, errcap, "the plan has no optimizer step (no grad_clip op)");
    for (int o = cs->clip_op + 1; o < g->n_ops; o++) {
        OpKind k = g->ops[o].kind;
        if (k != OP_SGD_STEP && k != OP_ADAMW_STEP) return errf(err, errcap, "op %d (%s) follows the optimizer's clip", o, op_def(k)->name);
    }
    struct { int *dst; const char *group, *key; int64_t numel; } binds[] = {
        {&cs->t_grad_seed, "inputs", "grad_seed", 1}, {&cs->t_lr, "inputs", "lr", 3}, {&cs->t_momentum, "inputs", "momentum", 1},
        {&cs->t_opt_step, "inputs", "opt_step", 1},   {&cs->t_loss, "outputs", "loss", 1}, {&cs->t_grad_norm, "outputs", "grad_norm", 1},
    };
    for (size_t i = 0; i < sizeof binds / sizeof binds[0]; i++) {
        int t = plan_meta_tensor(p, binds[i].group, binds[i].key);
        if (t < 0 || shape_numel(&g->tensors[t].shape) != binds[i].numel || !cs->ptr || !cs->ptr[t])
            return errf(err, errcap, "plan META: %s.%s does not name a %lld-element tensor with device memory", binds[i].group, binds[i].key, (long long)binds[i].numel);
        *binds[i].dst = t;
    }
    bool scaled = p->precision == PREC_FP16;
    if (scaled && cs->kern.lp.unscale < 0) return errf(err, errcap, "the fp16 plan has no unscale kernel (recompile the plan)");
    /* the unscale kernel reads the scale and the gradients as fp32 */
    const Op *clip = &g->ops[cs->clip_op];
    for (int i = -1; scaled && i < clip->n_in; i++) {
        int t = i < 0 ? cs->t_grad_seed : clip->in[i];
        char label[160];
        cuda_step_tensor_label(g, t, label, sizeof label);
        if (cs->stype[t] != DT_F32 || !cs->ptr[t]) return errf(err, errcap, "tensor %s is not fp32 in device memory; the unscale needs it so", label);
    }
    loss_scale_init(&cs->ls, scaled);
    cs->train_bound = true;
    return true;
}

bool cuda_step_bind_step(CudaStep *cs, const float lr[3], float momentum, float step_no, char *err, int errcap) {
    if (!cs->train_bound && !cuda_step_train_init(cs, err, errcap)) return false;
    return cuda_step_set_input(cs, cs->t_lr, lr, err, errcap) && cuda_step_set_input(cs, cs->t_momentum, &momentum, err, errcap) &&
           cuda_step_set_input(cs, cs->t_opt_step, &step_no, err, errcap) && cuda_step_set_input(cs, cs->t_grad_seed, &cs->ls.scale, err, errcap);
}

bool cuda_step_optimize(CudaStep *cs, CudaStepOutcome *out, char *err, int errcap) {
    if (!cs->train_bound) return errf(err, errcap, "cuda_step_optimize before cuda_step_bind_step");
    const Graph *g = &cs->plan->g;
    memset(out, 0, sizeof *out);
    out->loss_scale = cs->ls.scale;
    int lo, hi;
    char why[WHY];
    if (!(cs->ls.enabled ? cuda_step_run_unscaled : cuda_step_run)(cs, cs->clip_op, cs->clip_op + 1, why, sizeof why)) return errf(err, errcap, "unscale and clip: %s", why);
    if (!cuda_step_download(cs, cs->t_grad_norm, &out->grad_norm, err, errcap) || !cuda_step_download(cs, cs->t_loss, &out->loss, err, errcap)) return false;
    out->skipped = !cuda_step_decide(&cs->ls, out->grad_norm, cs->clip_op, g->n_ops, &lo, &hi);
    out->next_scale = cs->ls.scale;
    /* frozen parameters: their update ops do not run at all (weight decay and momentum would still move them) */
    for (int o = lo, end; optimizer_next_run(g, cs->frozen, &o, hi, &end); o = end)
        if (!cuda_step_run(cs, o, end, why, sizeof why)) return errf(err, errcap, "optimizer updates: %s", why);
    return true;
}

bool cuda_step_seed(CudaStep *cs, char *err, int errcap) {
    if (!cs->train_bound && !cuda_step_train_init(cs, err, errcap)) return false;
    return cuda_step_set_input(cs, cs->t_grad_seed, &cs->ls.scale, err, errcap);
}

bool cuda_step_train(CudaStep *cs, const float lr[3], float momentum, float step_no, CudaStepOutcome *out, char *err, int errcap) {
    char why[WHY];
    if (!cuda_step_bind_step(cs, lr, momentum, step_no, err, errcap)) return false;
    if (!cuda_step_run(cs, 0, cs->clip_op, why, sizeof why)) return errf(err, errcap, "forward and backward: %s", why);
    return cuda_step_optimize(cs, out, err, errcap);
}
