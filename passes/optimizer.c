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
    /* state tensors in parameter order (the checkpoint's), then the updates
     * group by group: a group's updates share one kernel, and consecutive
     * they run as one multi-tensor launch (kernel_lower) */
    int *state0 = arena_array(g->arena, (size_t)n + 1, sizeof(int)), *state1 = arena_array(g->arena, (size_t)n + 1, sizeof(int));
    int *group_of = arena_array(g->arena, (size_t)n + 1, sizeof(int));
    if (!state0 || !state1 || !group_of) return snprintf(g->err, sizeof g->err, "out of memory"), false;
    for (int i = 0; i < n; i++) {
        group_of[i] = optimizer_param_group(g, params[i]);
        state0[i] = optim_state(g, o->kind == OPT_SGD ? "momentum_buffer" : "exp_avg", &g->tensors[params[i]]);
        if (state0[i] < 0 || (o->kind == OPT_ADAMW && (state1[i] = optim_state(g, "exp_avg_sq", &g->tensors[params[i]])) < 0)) return false;
    }
    for (int group = 0; group < 3; group++)
        for (int i = 0; i < n; i++) {
            if (group_of[i] != group) continue;
            og->n_in_group[group]++;
            OpAttrs a = {.group = group, .weight_decay = group == 1 ? o->weight_decay : 0, .nesterov = o->nesterov, .beta2 = 0.999, .eps = 1e-8};
            int id;
            if (o->kind == OPT_SGD) {
                int in[6] = {params[i], grads[i], state0[i], og->lrs, og->momentum, og->clip_coef};
                id = graph_add_op(g, OP_SGD_STEP, in, 6, &a, 0, -1, g->tensors[params[i]].name);
            } else {
                int in[8] = {params[i], grads[i], state0[i], state1[i], og->lrs, og->momentum, og->step, og->clip_coef};
                id = graph_add_op(g, OP_ADAMW_STEP, in, 8, &a, 0, -1, g->tensors[params[i]].name);
            }
            if (id < 0) return false;
        }
    return graph_mark_output(g, og->grad_norm);
}

bool optimizer_next_run(const Graph *g, const bool *frozen, int *o, int hi, int *end) {
    while (*o < hi && frozen && frozen[g->ops[*o].in[0]]) ++*o;
    if (*o >= hi) return false;
    *end = *o + 1;
    while (*end < hi && !(frozen && frozen[g->ops[*end].in[0]])) ++*end;
    return true;
}
