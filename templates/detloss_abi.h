/* templates/detloss_abi.h — the argument block of the detection-loss library
 * kernels (templates/cuda/lib/detloss.cu). Embedded in their NVRTC sources
 * after lib_abi.h and included by runtime/cuda/cuda_detloss.h, which fills
 * it, so both sides read one definition. Holds no logic. */
#ifndef YL_DETLOSS_ABI_H
#define YL_DETLOSS_ABI_H
#define YL_DL_MAX_LEVELS 8 /* IR_MAX_LEVELS, DETLOSS_MAX_LEVELS */
#define YL_DL_MAX_TOPK 64  /* per-thread top-k list of the assigner */
#define YL_DL_MAX_REG_MAX 64
#define YL_DL_CHUNK 256    /* anchors per fixed-order partial sum */
typedef struct YlDetLossArgs {
    const void *level[YL_DL_MAX_LEVELS]; /* head outputs [B][4 reg_max + nc][H][W] (or channels last), the levels' storage type */
    void *grad[YL_DL_MAX_LEVELS];        /* d total / d level, same layout, the gradients' storage type (backward) */
    long long level_bs[YL_DL_MAX_LEVELS], grad_bs[YL_DL_MAX_LEVELS]; /* elements between images (views: the base's) */
    /* elements between channels and between pixels: H*W and 1, or 1 and C when the tensor is channels last */
    long long level_cs[YL_DL_MAX_LEVELS], level_ps[YL_DL_MAX_LEVELS], grad_cs[YL_DL_MAX_LEVELS], grad_ps[YL_DL_MAX_LEVELS];
    int h[YL_DL_MAX_LEVELS], w[YL_DL_MAX_LEVELS];
    double stride[YL_DL_MAX_LEVELS];
    int anchor_off[YL_DL_MAX_LEVELS + 1]; /* first anchor of each level; [nl] = anchors */
    int nl, nc, reg_max, topk, batch, max_boxes, anchors, chunks; /* chunks: ceil(anchors / YL_DL_CHUNK) */
    double alpha, beta, gain_box, gain_cls, gain_dfl;
    double img_w, img_h;                  /* level 0 size times stride 0, as v8DetectionLoss */
    const float *boxes;                   /* [B][max_boxes][5] cls, cx, cy, w, h (normalised) */
    const long long *counts;              /* [B] */
    float *total, *items;                 /* forward outputs: [1], [3] box, cls, dfl */
    const void *d_total;                  /* backward: the incoming gradient, 1 element, its own storage type */
    char *scratch;                        /* the workspace slice, 8-byte aligned; parts at these byte offsets: */
    long long off_pred;                   /* double [B][A][4] decoded boxes, pixels */
    long long off_top;                    /* int [B][M][topk] each GT's positive top-k anchors, -1 when none */
    long long off_row;                    /* int [B][M] 1 = the row is a valid GT, 2 = a bad row (class id, not finite) */
    long long off_owner;                  /* int [B][A] the assigned GT row, -1 for background */
    long long off_pair;                   /* double [B][A][2] metric and overlap of (owner, anchor) */
    long long off_gmax;                   /* double [B][M][2] max metric and max overlap over each GT's positives */
    long long off_term;                   /* double [B][A][4] score, cls BCE sum, box term, DFL term */
    long long off_part;                   /* double [B][chunks][5] partial sums of score, cls, box, DFL, fg count */
    long long off_sum;                    /* double [8] score sum, cls, box, DFL, fg count, norm, bad rows, 0 */
} YlDetLossArgs;
#endif
