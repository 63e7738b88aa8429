/* passes/optimizer.c — the optimizer step as IR: clip coefficient, then
 * sgd_step / adamw_step per parameter with zero-initialised state tensors
 * (TK_OPTIM). Knows no kernels. */
#include "optimizer.h"

#include <stdio.h>
#include <string.h>

int optimizer_param_group(const Graph *g, int param) {
    if (strstr(g->tensors[param].name, "bias")) return 0;
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].kind == OP_BATCHNORM && g->ops[o].in[1] == param) return 2;
    return 1;
}

static int optim_state(Graph *g, const char *what, const Tensor *p) {
    char *name = arena_printf(g->arena, "optim.%s.%s", what, p->name);
    return name ? graph_add_state(g, TK_OPTIM, name, p->shape, DT_F32) : -1;
}

bool optimizer_build(Graph *g, const TrainingGraph *tg, const OptimSpec *o, OptimGraph *og) {
    memset(og, 0, sizeof *og);
    og->lrs = graph_add_input(g, "lr", shape1(3), DT_F32);
    og->momentum = graph_add_input(g, "momentum", shape1(1), DT_F32);
    og->step = graph_add_input(g, "opt_step", shape1(1), DT_F32);
    if (og->lrs < 0 || og->momentum < 0 || og->step < 0) return false;
    /* trainable parameters in state_dict order, with their gradients */
    int n = 0, *params = arena_array(g->arena, (size_t)g->n_state + 1, sizeof(int)), *grads = arena_array(g->arena, (size_t)g->n_state + 1, sizeof(int));
    if (!params || !grads) return snprintf(g->err, sizeof g->err, "out of memory"), false;
    for (int i = 0; i < g->n_state; i++) {
        int t = g->state[i];
        if (g->tensors[t].kind != TK_PARAM || g->tensors[t].frozen) continue;
        if (t >= tg->n_grad_of || tg->grad_of[t] < 0) return snprintf(g->err, sizeof g->err, "%s has no gradient", g->tensors[t].name), false;
        params[n] = t;
        grads[n++] = tg->grad_of[t];
    }
    if (n == 0) return snprintf(g->err, sizeof g->err, "the model has no trainable parameters"), false;
    OpAttrs ca = {.max_norm = o->max_norm};
    int clip = graph_add_op(g, OP_GRAD_CLIP, grads, n, &ca, 2, -1, "optimizer");
    if (clip < 0) return false;
    og->clip_coef = g->ops[clip].out[0];
    og->grad_norm = g->ops[clip].out[1];
    for (int i = 0; i < n; i++) {
        const Tensor p = g->tensors[params[i]];
        int group = optimizer_param_group(g, params[i]);
        og->n_in_group[group]++;
        OpAttrs a = {.group = group, .weight_decay = group == 1 ? o->weight_decay : 0, .nesterov = o->nesterov, .beta2 = 0.999, .eps = 1e-8};
        int id;
        if (o->kind == OPT_SGD) {
            int in[6] = {params[i], grads[i], optim_state(g, "momentum_buffer", &p), og->lrs, og->momentum, og->clip_coef};
            if (in[2] < 0) return false;
            id = graph_add_op(g, OP_SGD_STEP, in, 6, &a, 0, -1, p.name);
        } else {
            int in[8] = {params[i], grads[i], optim_state(g, "exp_avg", &p), -1, og->lrs, og->momentum, og->step, og->clip_coef};
            in[3] = optim_state(g, "exp_avg_sq", &p);
            if (in[2] < 0 || in[3] < 0) return false;
            id = graph_add_op(g, OP_ADAMW_STEP, in, 8, &a, 0, -1, p.name);
        }
        if (id < 0) return false;
    }
    return graph_mark_output(g, og->grad_norm);
}
