/* runtime/predict/eval_shape_cuda.c — a CUDA plan's validation graph at
 * other input shapes on the device (eval_shape_cuda.h): which step lends
 * what, and the order the shapes open in. The graphs themselves come from
 * eval_plan_at_shape; every device call is CudaStep's. */
#include "eval_shape_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "eval_shape.h"

void cuda_shapes_order(const int64_t *arena, int n, int *order) {
    for (int i = 0; i < n; i++) {
        int j = i;
        /* insertion: stable, and n is a handful */
        for (; j > 0 && arena[order[j - 1]] < arena[i]; j--) order[j] = order[j - 1];
        order[j] = i;
    }
}

CudaShape *cuda_shapes_find(const CudaShapes *s, int batch, int h, int w) {
    for (int i = 0; i < s->n; i++)
        if (s->s[i]->io.batch == batch && s->s[i]->io.h == h && s->s[i]->io.w == w) return s->s[i];
    return NULL;
}

/* The steps whose regions a new shape may borrow, in the order tried: runs, own, then the shapes opened. */
static int lenders(const CudaShapes *s, const CudaMem **out) {
    int n = 0;
    if (s->runs) out[n++] = &s->runs->mem;
    out[n++] = &s->own->mem;
    for (int i = 0; i < s->n; i++) out[n++] = &s->s[i]->cs.mem;
    return n;
}

CudaLend cuda_shapes_lend(const CudaMem *const *cand, int n, int64_t arena_bytes, const CudaMem *state) {
    CudaLend lend = {.state = state};
    for (int i = 0; i < n && !lend.arena; i++)
        if (cand[i]->arena && !cand[i]->arena_lent && cand[i]->layout.arena_bytes >= arena_bytes) lend.arena = cand[i];
    for (int i = 0; i < n; i++)
        if (cand[i]->workspace && !cand[i]->workspace_lent && (!lend.workspace || cand[i]->workspace_bytes > lend.workspace->workspace_bytes)) lend.workspace = cand[i];
    return lend;
}

static bool open_one(CudaShapes *s, CudaShape *sh, char *err, int errcap) {
    const CudaMem **cand = malloc(sizeof *cand * (size_t)(s->n + 2));
    if (!cand) return errf(err, errcap, "out of memory");
    const CudaLend lend = cuda_shapes_lend(cand, lenders(s, cand), sh->plan.arena_bytes, &s->own->mem);
    free(cand);
    char why[1024];
    if (!cuda_step_open_sharing(&sh->cs, &sh->plan, s->own->dev.ordinal, &lend, why, sizeof why)) return errf(err, errcap, "%s", why);
    if (!cuda_step_use_graphs(&sh->cs, s->own->use_graphs, why, sizeof why)) {
        cuda_step_close(&sh->cs);
        return errf(err, errcap, "%s", why);
    }
    return true;
}

static void shape_free(CudaShape *sh) {
    if (!sh) return;
    plan_free(&sh->plan);
    free(sh);
}

bool cuda_shapes_open(CudaShapes *s, int batch, int n, const int (*hw)[2], char *err, int errcap) {
    EvalIO own;
    if (!plan_eval_io(s->own->plan, &own)) return errf(err, errcap, "the validation graph's META is incomplete");
    CudaShape **add = calloc((size_t)n + 1, sizeof *add);
    int64_t *arena = calloc((size_t)n + 1, sizeof *arena);
    int *order = calloc((size_t)n + 1, sizeof *order), m = 0;
    CudaShape **grown = realloc(s->s, sizeof *grown * (size_t)(s->n + n + 1));
    if (grown) s->s = grown;
    bool ok = add && arena && order && grown ? true : errf(err, errcap, "out of memory");
    for (int i = 0; ok && i < n; i++) {
        const int h = hw[i][0], w = hw[i][1];
        bool seen = (batch == own.batch && h == own.h && w == own.w) || cuda_shapes_find(s, batch, h, w);
        for (int j = 0; j < m && !seen; j++) seen = add[j]->io.h == h && add[j]->io.w == w;
        if (seen) continue;
        char why[1600];
        CudaShape *sh = add[m] = calloc(1, sizeof *sh);
        if (!sh) {
            ok = errf(err, errcap, "out of memory");
        } else if (!eval_plan_at_shape(s->train, batch, h, w, &sh->plan, why, sizeof why) || !cuda_kernels_cover(&sh->plan, why, sizeof why) ||
                   !(plan_eval_io(&sh->plan, &sh->io) ? true : errf(why, sizeof why, "its META is incomplete"))) {
            ok = errf(err, errcap, "the validation graph at %dx%d (batch %d) on the GPU: %s", h, w, batch, why);
        } else {
            arena[m++] = sh->plan.arena_bytes;
        }
    }
    if (ok) cuda_shapes_order(arena, m, order);
    int opened = 0;
    for (; ok && opened < m; opened++) {
        CudaShape *sh = add[order[opened]];
        char why[1600];
        if (!open_one(s, sh, why, sizeof why)) {
            ok = errf(err, errcap, "the validation graph at %dx%d (batch %d) on the GPU: %s", sh->io.h, sh->io.w, batch, why);
            break;
        }
        s->s[s->n++] = sh;
        add[order[opened]] = NULL;
    }
    for (int i = 0; add && i < n; i++) shape_free(add[i]);
    free(add);
    free(arena);
    free(order);
    return ok;
}

int64_t cuda_shapes_device_bytes(const CudaShapes *s) {
    int64_t b = 0;
    for (int i = 0; i < s->n; i++) b += cuda_step_device_bytes(&s->s[i]->cs);
    return b;
}

void cuda_shapes_close(CudaShapes *s) {
    /* the borrowers first: a shape may hold another's arena */
    for (int i = s->n - 1; i >= 0; i--) {
        cuda_step_close(&s->s[i]->cs);
        shape_free(s->s[i]);
    }
    free(s->s);
    s->s = NULL, s->n = 0;
}
