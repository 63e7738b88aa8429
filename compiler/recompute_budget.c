/* compiler/recompute_budget.c — the byte-budget recompute search: units
 * (row interiors and single convs), their feeding relations, and the greedy
 * peak-driven choice. Knows nothing of how a step is built (callback). */
#include "recompute_budget.h"

#include <stdlib.h>
#include <string.h>

/* Marks in feeds[] the convs whose outputs reach tensor t through ops that
 * pointwise recompute re-emits (BN, activations, adds, layout ops): the convs
 * a recomputation of t would chain back to if they were recomputed too. */
static void conv_feeders(const Graph *g, int t, int n_fwd_ops, bool *feeds, int depth) {
    int p = g->tensors[t].producer;
    if (p < 0 || p >= n_fwd_ops || depth > 64) return;
    const Op *op = &g->ops[p];
    if (op->kind == OP_CONV2D) {
        feeds[p] = true;
    } else if (op->kind == OP_BATCHNORM) {
        conv_feeders(g, op->in[0], n_fwd_ops, feeds, depth + 1);
    } else if (autodiff_recomputable(op->kind)) {
        for (int i = 0; i < op->n_in; i++)
            if (g->tensors[op->in[i]].kind == TK_ACTIVATION) conv_feeders(g, op->in[i], n_fwd_ops, feeds, depth + 1);
    }
}

/* Conv ops whose outputs leave their row: they feed an op of another row, or
 * a head level the loss reads. */
static void row_boundary_convs(const Graph *g, int n_ops, const TrainingGraph *tg, int nlevels, bool *boundary, bool *scratch) {
    for (int o = 0; o < n_ops; o++) {
        const Op *op = &g->ops[o];
        memset(scratch, 0, sizeof(bool) * (size_t)n_ops);
        for (int i = 0; i < op->n_in; i++)
            if (g->tensors[op->in[i]].kind == TK_ACTIVATION) conv_feeders(g, op->in[i], n_ops, scratch, 0);
        for (int c = 0; c < n_ops; c++)
            if (scratch[c] && g->ops[c].row != op->row) boundary[c] = true;
    }
    for (int i = 0; i < nlevels; i++) {
        memset(scratch, 0, sizeof(bool) * (size_t)n_ops);
        conv_feeders(g, tg->levels[i], n_ops, scratch, 0);
        for (int c = 0; c < n_ops; c++) boundary[c] |= scratch[c];
    }
}

typedef struct Unit {
    int first, n;       /* conv op ids: Units.convs[first .. first+n) */
    double flops;       /* recomputing every conv of the unit once */
    bool *feeds;        /* [n_ops]: convs outside the unit that its inputs chain back to */
    bool chosen;
} Unit;

typedef struct Units {
    Unit *u;
    int n;
    int *convs;
    int n_convs, n_ops;
} Units;

static bool add_unit(Arena *a, Units *us, const Graph *g, const int *convs, int n) {
    Unit *u = &us->u[us->n];
    *u = (Unit){.first = us->n_convs, .n = n};
    u->feeds = arena_array(a, (size_t)us->n_ops + 1, sizeof(bool));
    if (!u->feeds) return false;
    for (int i = 0; i < n; i++) {
        const Op *op = &g->ops[convs[i]];
        u->flops += op_def(op->kind)->flops(g, op);
        us->convs[us->n_convs + i] = convs[i];
        conv_feeders(g, op->in[0], us->n_ops, u->feeds, 0);
    }
    for (int i = 0; i < n; i++) u->feeds[convs[i]] = false;
    us->n_convs += n;
    us->n++;
    return true;
}

/* Every row interior with two or more convs, then every conv alone. */
static bool make_units(Arena *a, const Graph *g, const TrainingGraph *tg, int nlevels, Units *us) {
    int n_ops = tg->n_forward_ops;
    size_t nb = (size_t)n_ops + 1;
    bool *boundary = arena_array(a, nb, sizeof(bool)), *scratch = arena_array(a, nb, sizeof(bool)), *done = arena_array(a, nb, sizeof(bool));
    int *tmp = arena_array(a, nb, sizeof(int));
    *us = (Units){.u = arena_array(a, 2 * nb, sizeof(Unit)), .convs = arena_array(a, 2 * nb, sizeof(int)), .n_ops = n_ops};
    if (!boundary || !scratch || !done || !tmp || !us->u || !us->convs) return false;
    row_boundary_convs(g, n_ops, tg, nlevels, boundary, scratch);
    for (int o = 0; o < n_ops; o++) {
        if (g->ops[o].kind != OP_CONV2D || boundary[o] || done[o]) continue;
        int n = 0;
        for (int p = o; p < n_ops; p++)
            if (g->ops[p].kind == OP_CONV2D && !boundary[p] && g->ops[p].row == g->ops[o].row) done[p] = true, tmp[n++] = p;
        if (n > 1 && !add_unit(a, us, g, tmp, n)) return false;
    }
    for (int o = 0; o < n_ops; o++)
        if (g->ops[o].kind == OP_CONV2D && !add_unit(a, us, g, &o, 1)) return false;
    return true;
}

/* A unit may join if none of its convs is chosen, no chosen conv outside it
 * feeds it, and it feeds no chosen conv. */
static bool eligible(const Units *us, const Unit *u, const bool *chosen_conv) {
    if (u->chosen) return false;
    for (int i = 0; i < u->n; i++) {
        int c = us->convs[u->first + i];
        if (chosen_conv[c]) return false;
        for (int j = 0; j < us->n; j++)
            if (us->u[j].chosen && us->u[j].feeds[c]) return false;
    }
    for (int o = 0; o < us->n_ops; o++)
        if (u->feeds[o] && chosen_conv[o]) return false;
    return true;
}

typedef struct Cand {
    int unit;
    double score;
} Cand;

enum { TRIALS = 8 };

static int best_score_first(const void *x, const void *y) {
    const Cand *a = x, *b = y;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return a->unit - b->unit;
}

bool recompute_fit_budget(Arena *a, int64_t budget, StepBuildFn build, void *ctx, const Graph *g, const TrainingGraph *tg, const MemPlan *mp, int nlevels,
                          BudgetResult *out) {
    memset(out, 0, sizeof *out);
    Units us;
    int n_tensors = g->n_tensors;
    bool *set = arena_array(a, (size_t)n_tensors + 1, sizeof(bool));
    bool *chosen_conv = arena_array(a, (size_t)tg->n_forward_ops + 1, sizeof(bool));
    if (!set || !chosen_conv || !make_units(a, g, tg, nlevels, &us)) return false;
    Cand *cand = arena_array(a, (size_t)us.n + 1, sizeof(Cand));
    if (!cand) return false;
    int64_t target = (int64_t)((double)budget * 0.99);
    bool placed = false;
    for (;;) {
        int64_t have = placed ? mp->arena_bytes : mp->lower_bound_bytes;
        if (have <= (placed ? budget : target)) {
            if (placed) return true;
            if (!build(ctx, out->units ? set : NULL, true)) return false;
            placed = true;
            continue;
        }
        /* rank eligible units by bytes freed at the peak per FLOP, then
         * trial-build the best few: recomputation moves the peak, so the
         * real lower bound decides */
        int at = mp->peak_op;
        int nc = 0;
        for (int i = 0; i < us.n; i++) {
            Unit *u = &us.u[i];
            if (!eligible(&us, u, chosen_conv)) continue;
            double freed = 0;
            for (int j = 0; j < u->n; j++) {
                int t = g->ops[us.convs[u->first + j]].out[0];
                if (mp->def[t] <= at && mp->last[t] >= at) freed += (double)mp->bytes[t];
            }
            if (freed > 0) cand[nc++] = (Cand){i, freed / (u->flops + 1)};
        }
        qsort(cand, (size_t)nc, sizeof(Cand), best_score_first);
        int best = -1;
        double best_gain = 0;
        int64_t before = mp->lower_bound_bytes;
        /* the best few by score first; all of them only when those gain nothing */
        for (int k = 0; k < nc && (best < 0 || k < TRIALS); k++) {
            Unit *u = &us.u[cand[k].unit];
            for (int j = 0; j < u->n; j++) set[g->ops[us.convs[u->first + j]].out[0]] = true;
            if (!build(ctx, set, false)) return false;
            double gain = (double)(before - mp->lower_bound_bytes) / (u->flops + 1);
            for (int j = 0; j < u->n; j++) set[g->ops[us.convs[u->first + j]].out[0]] = false;
            if (gain > best_gain) best_gain = gain, best = cand[k].unit;
        }
        if (best < 0) {
            if (!placed && !build(ctx, out->units ? set : NULL, true)) return false;
            out->smallest = mp->arena_bytes;
            return out->smallest <= budget;
        }
        Unit *u = &us.u[best];
        u->chosen = true;
        out->units++;
        for (int j = 0; j < u->n; j++) {
            int c = us.convs[u->first + j];
            chosen_conv[c] = true;
            set[g->ops[c].out[0]] = true;
            out->recompute_convs++;
        }
        if (!build(ctx, set, placed)) return false;
    }
}
