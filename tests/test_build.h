/* tests/test_build.h — compiles a model's training step in-process (no
 * plan file) for the suites that inspect or run its graph, fusion and
 * memory plan directly (test_memplan.c, test_views.c). */
#ifndef YOLOCC_TEST_BUILD_H
#define YOLOCC_TEST_BUILD_H
#include "../compiler/train_compile.h"
#include "test_util.h"

typedef struct Built {
    Arena arena;
    ModelConfig cfg;
    TrainCompiled tc;
    Diag d;
} Built;

/* scale NULL: from the file. */
static inline void build_with(Built *b, const char *file, const char *scale, const TrainOptions *to) {
    arena_init(&b->arena, 0);
    diag_init(&b->d, file);
    ModelOptions mo = {.scale = scale};
    cr_assert(model_cfg_load(&b->arena, file, &mo, &b->cfg, &b->d) && compile_training(&b->arena, &b->cfg, to, &b->tc, &b->d), "%s: %s", file, b->d.msg);
}

/* SGD, weight decay 5e-4, 8 boxes per image. */
static inline void build_f(Built *b, const char *file, const char *scale, int imgsz, int batch, Precision p, RecomputePolicy r, FusePolicy f, int64_t budget) {
    TrainOptions to = {.imgsz = imgsz, .batch = batch, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .precision = p, .recompute = r,
                       .fuse = f, .recompute_budget = budget};
    build_with(b, file, scale, &to);
}

static inline void unbuild(Built *b) {
    train_compiled_free(&b->tc);
    arena_free(&b->arena);
}

#endif
