/* runtime/train/e2e_select.c — the detections of an end-to-end (YOLOv10)
 * head for validation: two top-k selections instead of NMS (metrics.h,
 * e2e_image). Must not touch: NMS, matching or the metrics themselves. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "metrics.h"

typedef struct Ranked {
    float score;
    int index;
} Ranked;

/* descending score, then ascending index; NaN before every number, as
 * torch.topk ranks it (the conf test then drops it) */
static int ranked_cmp(const void *pa, const void *pb) {
    const Ranked *a = pa, *b = pb;
    const bool na = isnan(a->score), nb = isnan(b->score);
    if (na != nb) return na ? -1 : 1;
    if (!na && a->score != b->score) return a->score > b->score ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

int e2e_image(const float *pred, int n_anchors, int nc, double conf, int max_det, Detection *out) {
    if (!pred || n_anchors < 0 || nc < 1 || max_det < 0 || (max_det > 0 && !out)) return -1;
    const size_t A = (size_t)n_anchors;
    const int k = max_det < n_anchors ? max_det : n_anchors;
    if (k == 0) return 0;
    Ranked *anchors = malloc(A * sizeof *anchors), *pairs = malloc((size_t)k * (size_t)nc * sizeof *pairs);
    if (!anchors || !pairs) {
        free(anchors);
        free(pairs);
        return -1;
    }
    /* scores.amax(-1).topk(k): each anchor's best class score */
    for (size_t a = 0; a < A; a++) anchors[a] = (Ranked){anchor_best_score(pred, A, nc, a), (int)a};
    qsort(anchors, A, sizeof *anchors, ranked_cmp);
    /* the chosen anchors' scores flattened (rank-major, class-minor), topk(k) */
    for (int r = 0; r < k; r++)
        for (int c = 0; c < nc; c++) pairs[(size_t)r * (size_t)nc + (size_t)c] = (Ranked){pred[(size_t)(4 + c) * A + (size_t)anchors[r].index], r * nc + c};
    qsort(pairs, (size_t)k * (size_t)nc, sizeof *pairs, ranked_cmp);
    const float conf_f = (float)conf;
    int n = 0;
    for (int i = 0; i < k; i++) {
        if (!(pairs[i].score > conf_f)) continue;
        const size_t a = (size_t)anchors[pairs[i].index / nc].index;
        out[n++] = (Detection){pred[a], pred[A + a], pred[2 * A + a], pred[3 * A + a], pairs[i].score, pairs[i].index % nc};
    }
    free(anchors);
    free(pairs);
    return n;
}
