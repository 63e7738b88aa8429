/* runtime/ref_loss.c — the detect_loss op and its backward on the reference
 * interpreter: adapts the op's tensors to the detection-loss oracle
 * (detloss.c), which owns the loss itself. */
#include <stdlib.h>

#include "detloss.h"
#include "ref_kernels.h"

/* levels are inputs [first, first + nl); boxes and counts follow */
static bool loss_setup(const Graph *g, const Op *op, void **buf, int first, DetLossConfig *cfg, DetTargets *t, int **counts, char *err,
                       int errcap) {
    const OpAttrs *a = &op->a;
    int nl = a->nlevels, lh[IR_MAX_LEVELS], lw[IR_MAX_LEVELS];
    float strides[IR_MAX_LEVELS];
    for (int i = 0; i < nl; i++) {
        lh[i] = a->level_hw[i][0];
        lw[i] = a->level_hw[i][1];
        strides[i] = (float)a->strides[i];
    }
    detloss_config_default(cfg, a->nc, nl, lh, lw, strides);
    cfg->reg_max = a->reg_max;
    if (a->topk > 0) cfg->topk = a->topk;
    cfg->gain_box = (float)a->gains[0];
    cfg->gain_cls = (float)a->gains[1];
    cfg->gain_dfl = (float)a->gains[2];
    const Shape *bs = SH(op->in[first + nl]);
    return detloss_targets_from_i64((int)bs->d[0], (int)bs->d[1], buf[op->in[first + nl + 1]], buf[op->in[first + nl]], t, counts, err, errcap);
}

REF_KERNEL(ref_detect_loss) {
    DetLossConfig cfg;
    DetTargets t;
    int *counts;
    if (!loss_setup(g, op, buf, 0, &cfg, &t, &counts, err, errcap)) return false;
    const float *levels[IR_MAX_LEVELS];
    for (int i = 0; i < op->a.nlevels; i++) levels[i] = T(i);
    DetLossResult r;
    bool ok = detloss_forward_backward(&cfg, levels, &t, &r, NULL, err, errcap);
    free(counts);
    if (!ok) return false;
    O(0)[0] = (float)r.total;
    O(1)[0] = (float)r.box;
    O(1)[1] = (float)r.cls;
    O(1)[2] = (float)r.dfl;
    return true;
}

/* detect_loss_bwd(d_total, levels..., boxes, counts): the oracle's gradient of
 * the total, times the incoming d_total (1, or a loss scale) */
REF_KERNEL(ref_detect_loss_bwd) {
    DetLossConfig cfg;
    DetTargets t;
    int *counts;
    if (!loss_setup(g, op, buf, 1, &cfg, &t, &counts, err, errcap)) return false;
    const float *levels[IR_MAX_LEVELS];
    float *grads[IR_MAX_LEVELS];
    for (int i = 0; i < op->a.nlevels; i++) {
        levels[i] = T(1 + i);
        grads[i] = O(i);
    }
    bool ok = detloss_forward_backward(&cfg, levels, &t, NULL, grads, err, errcap);
    free(counts);
    if (!ok) return false;
    float seed = T(0)[0];
    if (seed != 1.0f)
        for (int i = 0; i < op->a.nlevels; i++)
            for (int64_t k = 0, n = shape_numel(SH(op->out[i])); k < n; k++) grads[i][k] *= seed;
    return true;
}
