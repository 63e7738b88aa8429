/* compiler/recompute_budget.h — `--recompute BYTES`: which conv outputs
 * backward also recomputes so the step arena fits a byte budget. Owns the
 * recompute units and the search; builds steps only through the callback. */
#ifndef YOLOCC_RECOMPUTE_BUDGET_H
#define YOLOCC_RECOMPUTE_BUDGET_H
#include "../passes/autodiff.h"
#include "../passes/memplan.h"

/* Builds the training step with `convs` (per forward tensor id: recompute
 * this conv output too; NULL: none) and plans memory (placed or bound only),
 * rebuilding in place the graph, TrainingGraph and MemPlan passed to
 * recompute_fit_budget. */
typedef bool (*StepBuildFn)(void *ctx, const bool *convs, bool place);

typedef struct BudgetResult {
    int recompute_convs;    /* conv outputs recomputed beyond pointwise */
    int units;              /* segments and single convs chosen */
    int64_t smallest;       /* on failure: the smallest arena the search reached */
} BudgetResult;

/* Greedy by the step's memory peak: while the lower bound (then the placed
 * arena) exceeds the budget, recompute the unit whose kept conv outputs free
 * the most bytes at the peak per recompute FLOP. Units are a model row's
 * interior convs (a segment, like a checkpointed block) or single convs;
 * chains of recomputation never leave a unit. The caller has built the step
 * without extra recompute (place false). On return the last build is
 * the chosen plan (placed). False when no unit lowers the peak further. */
bool recompute_fit_budget(Arena *a, int64_t budget, StepBuildFn build, void *ctx, const Graph *g, const TrainingGraph *tg, const MemPlan *mp, int nlevels,
                          BudgetResult *out);

#endif
